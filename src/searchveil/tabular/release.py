"""Tabular releases: the generalized table (same columns, hierarchy labels for the
quasi-identifiers, other columns verbatim), a release record, and the drivers for the models
(``dp`` — Algorithm 2 with the accounting of :mod:`searchveil.tabular.dp`; ``aggregate`` and
``threshold`` — §II, not differentially private; ``kanon`` and ``safepub`` live in their own
modules)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.rng import RandomSource
from searchveil.tabular.dp import DPPlan, bernoulli_sample, dp_generalize, plan_dp
from searchveil.tabular.hierarchy import EncodedTable
from searchveil.tabular.measures import Measures
from searchveil.tabular.models import (
    Problem,
    aggregate_exact,
    frequent_exact,
    make_problem,
    threshold_exact,
)

__all__ = [
    "TabularRelease",
    "generalized_frame",
    "suppress_small",
    "shuffle_release",
    "anonymize_dp",
    "anonymize_aggregate",
    "anonymize_threshold",
]


@dataclass
class TabularRelease:
    """Rows of the input that are released (``rows``), their level vectors, the output
    table, and what the ledger needs (``mechanism``, ``notion``, ``epsilon``, ``delta``,
    ``parameters``, ``events``; ``info`` holds public facts of the release, ``private`` the
    figures of the exact input that go to the provenance record only)."""

    table: EncodedTable
    rows: npt.NDArray[np.int64]
    levels: npt.NDArray[np.int64]
    frame: pl.DataFrame
    mechanism: str
    notion: str
    epsilon: float | None
    delta: float | None
    parameters: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    # figures of the exact input (sampled, suppressed, ...): provenance only, never published
    private: dict[str, Any] = field(default_factory=dict)
    # ledger fields drawn from the mechanism's noise (e.g. the DP count n̂)
    noisy: dict[str, Any] = field(default_factory=dict)


def _label_tables(table: EncodedTable) -> list[npt.NDArray[np.object_]]:
    out = []
    for h in table.hierarchies:
        t = np.empty(h.codes.shape, dtype=object)
        for lv in range(h.height + 1):
            lab = np.array(h.labels[lv], dtype=object)
            t[:, lv] = lab[h.codes[:, lv]]
        out.append(t)
    return out


def generalized_frame(
    table: EncodedTable, rows: npt.NDArray[np.int64], levels: npt.NDArray[np.int64]
) -> pl.DataFrame:
    """The released rows with every quasi-identifier replaced by its ancestor at the row's
    level; columns in the input's order."""
    labs = _label_tables(table)
    out = table.frame[rows]
    cols = []
    for i, name in enumerate(table.qi):
        vals = labs[i][table.leaves[rows, i], levels[:, i]] if rows.size else np.array([], object)
        cols.append(pl.Series(name, list(vals), dtype=pl.Utf8))
    return out.with_columns(cols).select(table.frame.columns)


def suppress_small(frame: pl.DataFrame, k: int) -> npt.NDArray[np.bool_]:
    """Mask of rows whose whole output row occurs at least ``k`` times."""
    if frame.height == 0:
        return np.zeros(0, bool)
    counts = frame.with_columns(pl.len().over(frame.columns).alias("__n")).get_column("__n")
    return counts.to_numpy() >= k


def generalize_and_suppress(
    table: EncodedTable, rows: npt.NDArray[np.int64], level: npt.NDArray[np.int64], k: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], pl.DataFrame, int]:
    """``rows`` all generalized to one level vector, classes (whole output rows) smaller than
    ``k`` suppressed: ``(kept rows, their levels, their frame, how many were suppressed)``."""
    levels = np.repeat(level[None, :], rows.size, axis=0)
    frame = generalized_frame(table, rows, levels)
    ok = suppress_small(frame, k)
    return rows[ok], levels[ok], frame.filter(pl.Series(ok)), int((~ok).sum())


def _sampler_events(plan: DPPlan) -> list[dict[str, Any]]:
    """The ledger's privacy events of one ``fouad2014`` run (Algorithm 2), in order."""
    return [
        {
            "event": "record count",
            "mechanism": "discrete Laplace",
            "epsilon": plan.eps_count,
            "delta": 0.0,
            "output": "noisy.n_hat",
        },
        {
            "event": "exponential mechanism per record (Θ = D)"
            if not plan.side_table
            else "exponential mechanism per record (public side table: no privacy cost)",
            "epsilon": plan.eps_em,
            "delta": 0.0,
            "eps_prime": plan.eps_prime,
        },
        {
            "event": "Bernoulli sampling + k-suppression (Li, Qardaji & Su)",
            "epsilon": plan.eps_anon,
            "delta": plan.delta_anon,
            "k": plan.k,
            "keep_probability": plan.keep_probability,
        },
        {
            "event": "accounting slack",
            "delta": (1 + math.exp(plan.epsilon)) * (plan.eta_count + plan.eta_fp),
            "eta_count": plan.eta_count,
            "eta_fp": plan.eta_fp,
        },
    ]


def shuffle_release(rel: TabularRelease, rng: RandomSource) -> TabularRelease:
    """The same release with its rows in a uniformly random order (random 64-bit keys from
    ``rng``, redrawn until distinct, then sorted): the output order carries nothing of the
    input's."""
    n = rel.rows.size
    if n <= 1:
        return rel
    while True:
        keys = rng.random_keys(n)
        if np.unique(keys).size == n:
            break
    order = np.argsort(keys)
    rel.rows = rel.rows[order]
    rel.levels = rel.levels[order]
    rel.frame = rel.frame[order.tolist()] if rel.frame.height == n else rel.frame
    return rel


# every plan value below is a function of the charged count n̂ (and θ)
_NOISY_PLAN_KEYS = (
    "n_hat",
    "n_upper",
    "theta",
    "t",
    "k",
    "eps_anon",
    "eps_em",
    "eps_prime",
    "delta_anon",
    "eta_fp",
    "delta_total",
)


def _sampled_levels(
    problem: Problem,
    plan: DPPlan,
    sampled: npt.NDArray[np.int64],
    side_table: EncodedTable | None,
    rng: RandomSource,
    utility_sharpness: float,
) -> tuple[npt.NDArray[np.int64], float | None]:
    """The lattice index each sampled record is generalized to, and the side table's
    frequency bound ``t_Θ`` (None without a side table)."""
    if side_table is None:
        idx = dp_generalize(problem, plan, sampled, rng, utility_sharpness=utility_sharpness)
        return idx, None
    # Θ is public: each record deterministically takes its most useful generalization
    # that is frequent enough in Θ to expect ≥ 1.5·k sampled records of D (the paper's
    # L_t restriction evaluated on Θ; no privacy cost)
    t_theta = 1.5 * plan.k * side_table.n / (plan.keep_probability * max(plan.n_hat, 1))
    sol = frequent_exact(problem, t_theta)
    return sol.index[problem.inverse[sampled]], t_theta


# its signature and its plan_dp call alike run_attack's and cels.costs' in form only
def anonymize_dp(
    table: EncodedTable,
    measures: Measures,
    *,
    epsilon: float,
    delta: float,
    beta: float,
    theta0: float,
    rng: RandomSource,
    theta1: float = 1.0,
    side_table: EncodedTable | None = None,
    count_share: float = 0.05,
    utility_sharpness: float = 0.0,
) -> TabularRelease:
    """Algorithm 2 (see :mod:`searchveil.tabular.dp`): ``(ε, δ)``-DP for adding/removing one
    record of ``table``. The rows come back in a uniformly random order drawn from ``rng``
    (never the input's: docs/privacy/tabular.md)."""
    problem: Problem = make_problem(table, measures, side_table)
    plan: DPPlan = plan_dp(
        n=table.n,
        epsilon=epsilon,
        delta=delta,
        beta=beta,
        theta0=theta0,
        rng=rng,
        lam=measures.lam,
        phi0=measures.phi0,
        lattice_size=problem.lattice.size,
        side_table=side_table is not None,
        theta1=theta1,
        count_share=count_share,
    )
    keep = bernoulli_sample(table.n, plan.keep_probability, rng)
    sampled = np.flatnonzero(keep).astype(np.int64)
    idx, t_theta = _sampled_levels(problem, plan, sampled, side_table, rng, utility_sharpness)
    levels = problem.lattice.levels()[idx]
    frame = generalized_frame(table, sampled, levels)
    # k ≥ θ₀·N ≥ θ₀·n unless N < n (probability ≤ η, charged to δ as (1+e^ε)η): then raise k
    # so that every output row generalizes ≥ θ₀·|D| input records in every case
    k_used = max(plan.k, math.ceil(plan.theta0 * table.n))
    ok = suppress_small(frame, k_used)
    rows, levels, frame = sampled[ok], levels[ok], frame.filter(pl.Series(ok))
    rel = TabularRelease(
        table,
        rows,
        levels,
        frame,
        "fouad2014-dp-sampler (paper reproduction: Algorithm 2 with an explicit δ)",
        "(ε, δ)-differential privacy (add/remove one record)",
        plan.epsilon,
        plan.delta,
        parameters={
            **plan.as_dict(),
            "lambda": measures.lam,
            "kappa": measures.kappa,
            "phi0": measures.phi0,
            "utility": measures.utility,
            "utility_sharpness": utility_sharpness,
            "t_side_table": t_theta,
        },
        events=_sampler_events(plan),
        info={"released": int(rows.size)},
        private={
            "sampled": int(sampled.size),
            "suppressed": int((~ok).sum()),
            "k_used": k_used,
        },
        noisy={k: v for k, v in plan.as_dict().items() if k in _NOISY_PLAN_KEYS},
    )
    return shuffle_release(rel, rng)


def _deterministic(
    table: EncodedTable,
    problem: Problem,
    sol_levels: npt.NDArray[np.int64],
    mech: str,
    params: dict[str, Any],
    info: dict[str, Any],
) -> TabularRelease:
    rows = np.arange(table.n, dtype=np.int64)
    levels = sol_levels[problem.inverse]
    frame = generalized_frame(table, rows, levels)
    return TabularRelease(
        table,
        rows,
        levels,
        frame,
        mech,
        "none (not differentially private; §II risk–utility model)",
        None,
        None,
        parameters=params,
        info={"released": int(rows.size)},
        private=info,
    )


def anonymize_aggregate(
    table: EncodedTable, measures: Measures, *, side_table: EncodedTable | None = None
) -> TabularRelease:
    """Every record at its exact aggregate-model optimum ``argmax_{x ∈ a^+} f^a(x)``."""
    problem = make_problem(table, measures, side_table)
    sol = aggregate_exact(problem)
    w = problem.count
    return _deterministic(
        table,
        problem,
        sol.levels,
        "fouad2014-aggregate",
        {
            "lambda": measures.lam,
            "kappa": measures.kappa,
            "phi0": measures.phi0,
            "utility": measures.utility,
            "side_table": side_table is not None,
        },
        {
            "mean_f": float(np.average(sol.objective, weights=w)),
            "mean_u": float(np.average(sol.u, weights=w)),
            "mean_risk": float(np.average(sol.risk, weights=w)),
        },
    )


def anonymize_threshold(
    table: EncodedTable, measures: Measures, *, c: float, side_table: EncodedTable | None = None
) -> TabularRelease:
    """Every record at its exact threshold-model optimum (max u s.t. r ≤ c)."""
    problem = make_problem(table, measures, side_table)
    sol = threshold_exact(problem, c)
    w = problem.count
    return _deterministic(
        table,
        problem,
        sol.levels,
        "fouad2014-threshold",
        {"c": c, "utility": measures.utility, "side_table": side_table is not None},
        {
            "mean_u": float(np.average(sol.u, weights=w)),
            "mean_risk": float(np.average(sol.risk, weights=w)),
        },
    )
