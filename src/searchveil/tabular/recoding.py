"""``--model dp``: one differentially private global recoding over the generalization
hierarchies, then sampling and k-suppression (truthful generalized records, ``(ε, δ)``-DP for
adding or removing one record). Proof: docs/privacy/tabular.md, "The dp model".

Why not the paper's sampler (:mod:`searchveil.tabular.dp`, ``--model fouad2014``): it runs the
exponential mechanism once per record, so one data-dependent budget is spread over every record
(the choice is close to uniform), its ``k = θ·|D|`` grows with the table (``k ≈ 470`` on Adult),
and personalized generalizations split equivalence classes. Here the data-dependent budget is
spent once, on one level vector for the whole table (as SafePub does), ``k`` depends only on
``(ε, δ, β)``, and the score is smooth enough for a sharp selection:

1. **Count** (only without ``--max-records``): ``n̂ = n + DLap(1/ε_n)``. ``n̂`` is used for the
   δ < 1/n policy check and the feasibility rule, nothing else.
2. **Advisor** (:func:`advise`, data-independent): the budget split, the keep probability
   ``p = 1 − e^{−ε_anon}`` (Li, Qardaji & Su's regime, SafePub's rule; capped to
   ``[0.05, 0.9]``) or ``1 − β`` when ``--beta`` is given, rounded to 53 bits, and the smallest
   ``k`` with ``δ(k, p̂, ε_anon) ≤ δ_anon`` (:func:`searchveil.tabular.dp.sampling_delta`).
3. **Selection**: the exponential mechanism over all level vectors of the full-domain lattice
   with an integer score of sensitivity ``Δ`` (:func:`expected_release_table`,
   :func:`lattice_scores`): for a class of ``c`` identical output rows, ``g(c) = c·p·P[Bin(c−1, p)
   ≥ k−1]`` is the expected number of its records that step 4 releases; a one-record change moves
   one class size by one and ``g`` by at most ``max_c g(c+1) − g(c)`` (≈ √k, not k). The default
   score (``classification``) is ``G + γ·R``: ``R = Σ_C g(c_C)`` the expected released records,
   ``G = Σ_Q max_y g(c_{Q,y}) − max_y Σ_Q g(c_{Q,y})`` the expected released records that the
   majority value ``y`` of the non-quasi-identifier columns within their quasi-identifier group
   ``Q`` classifies better than one global majority. ``fouad`` uses the paper's modular utility
   instead: ``û(ℓ)·R`` with ``û = u/u_max`` (§II-A, depth/inverse/log).
4. **Release**: each record is kept with probability ``p̂`` (exact), generalized to the chosen
   level vector, output rows occurring fewer than ``k`` times are suppressed (whole rows), and
   the rows are written in a uniformly random order (never the input's).

Total: ``ε = ε_n + ε_sel + ε_anon``, ``δ = δ(k, p̂, ε_anon) + (1 + e^ε)·η_fp``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, ParamSpec, TypeVar, cast

import numpy as np
import numpy.typing as npt
from scipy import stats

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.rng import RandomSource
from searchveil.tabular.baselines import full_row_keys
from searchveil.tabular.dp import (
    bernoulli_sample,
    exact_choice,
    k_for_delta,
    record_bound_error,
    round_probability,
    sampling_delta,
)
from searchveil.tabular.hierarchy import EncodedTable, Hierarchy
from searchveil.tabular.lattice import Lattice, distinct_records, refine_classes
from searchveil.tabular.measures import Measures
from searchveil.tabular.release import TabularRelease, generalize_and_suppress, shuffle_release
from searchveil.validate import check_int, check_positive, check_probability, parse_choice

__all__ = [
    "SCORES",
    "Score",
    "Advice",
    "advise",
    "smallest_feasible_epsilon",
    "expected_release_table",
    "lattice_scores",
    "select_level",
    "RecodingPlan",
    "anonymize_recoding",
    "G_BITS",
]


class Score(StrEnum):
    """The selection score of the ``dp`` model (module docstring); ``auto`` picks
    ``classification`` when the table has non-QI columns, else ``fouad``."""

    AUTO = "auto"
    CLASSIFICATION = "classification"
    FOUAD = "fouad"


SCORES = tuple(s.value for s in Score)
G_BITS = 16  # g(c) is stored as floor(g(c)·2^16): integer scores, exact sums
U_STEPS = 1024  # Fouad utility û(ℓ) = floor(1024·u(ℓ)/u_max)
P_MIN, P_MAX = 0.05, 0.9
COUNT_SHARE = 0.02
SELECTION_SHARE = 0.15
GAMMA = (1, 2)  # γ = 1/2 as a rational: score = 2·G + 1·R
REF_SHARE = 0.25  # feasibility: a class of 25 % of the records is released w.p. ≥ 1/2
EM_FP_SLACK = 2.0**-40


@dataclass(frozen=True)
class Advice:
    """What the advisor chose from the public parameters (printed and in the ledger)."""

    epsilon: float
    delta: float
    eps_count: float
    eps_select: float
    eps_anon: float
    delta_anon: float
    eta_fp: float
    keep_probability: float
    beta: float
    k: int
    rule: str


def _em_eta(lattice_size: int) -> float:
    return (lattice_size + 1) * 2.0**-50 + EM_FP_SLACK


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _cached(f: Callable[_P, _R]) -> Callable[_P, _R]:
    """``functools.lru_cache`` keeping ``f``'s parameter types (the cache's wrapper takes any
    hashable arguments, so its calls would go unchecked)."""
    return cast("Callable[_P, _R]", functools.lru_cache(maxsize=256)(f))


@_cached
def advise(
    epsilon: float,
    delta: float,
    *,
    lattice_size: int,
    beta: float | None = None,
    count: bool = True,
    selection_share: float = SELECTION_SHARE,
    count_share: float = COUNT_SHARE,
) -> Advice:
    """The advisor, a pure function of public parameters (cached). The documented rule:
    ``ε_n = 2 %`` of ε (0 with a declared ``--max-records``), ``ε_sel = 15 %``, ``ε_anon`` the
    rest; ``p = 1 − e^{−ε_anon}`` clipped to [0.05, 0.9] unless ``β`` is given (``p = 1 − β``);
    ``k`` the smallest integer with ``δ(k, p̂, ε_anon) ≤ δ − (1 + e^ε)·η_fp``. Uses no data."""
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    selection_share = check_probability("selection_share", selection_share)
    count_share = check_probability("count_share", count_share) if count else 0.0
    if selection_share + count_share >= 1.0:
        raise InvalidParameterError(
            "selection_share", selection_share, f"< 1 − count_share = {1 - count_share:g}"
        )
    if lattice_size >= 8192:
        raise InvalidParameterError("lattice", lattice_size, "< 8192 level vectors (exact sampler)")
    eps_n = count_share * epsilon
    eps_sel = selection_share * epsilon
    eps_anon = epsilon - eps_n - eps_sel
    if beta is None:
        p_req = min(P_MAX, max(P_MIN, -math.expm1(-eps_anon)))
        rule = "p = 1 − exp(−ε_anon) clipped to [0.05, 0.9] (Li et al./SafePub)"
    else:
        beta = check_probability("beta", beta)
        p_req = 1.0 - beta
        rule = "p = 1 − β (given)"
    _, p = round_probability(p_req)
    eta_fp = _em_eta(lattice_size)
    delta_anon = delta - (1.0 + math.exp(epsilon)) * eta_fp
    if delta_anon <= 0:
        raise InvalidParameterError("delta", delta, "> the sampler's accounting slack (≈ 1e-11)")
    k = max(2, k_for_delta(eps_anon, delta_anon, p))
    return Advice(
        epsilon=epsilon,
        delta=delta,
        eps_count=eps_n,
        eps_select=eps_sel,
        eps_anon=eps_anon,
        delta_anon=sampling_delta(k, p, eps_anon),
        eta_fp=eta_fp,
        keep_probability=p,
        beta=1.0 - p,
        k=k,
        rule=rule,
    )


def feasible(adv: Advice, n_records: float) -> bool:
    """The feasibility rule: a class holding ``REF_SHARE`` of the records survives sampling and
    k-suppression with probability ≥ 1/2 (otherwise the release is expected to be empty)."""
    c_ref = int(REF_SHARE * n_records)
    return c_ref >= adv.k and float(stats.binom.sf(adv.k - 1, c_ref, adv.keep_probability)) >= 0.5


def smallest_feasible_epsilon(
    epsilon: float,
    delta: float,
    n_records: float,
    *,
    lattice_size: int,
    eps_max: float = 20.0,
    **kw: Any,
) -> float | None:
    """Smallest ε ≥ ``epsilon`` (to 1 %, rounded up to 3 digits) that the advisor makes
    feasible for ``n_records``; None if even ``eps_max`` does not."""

    def ok(e: float) -> bool:
        try:
            return feasible(advise(e, delta, lattice_size=lattice_size, **kw), n_records)
        except InvalidParameterError:
            return False

    lo, hi = epsilon, epsilon
    while not ok(hi):
        lo, hi = hi, 2 * hi
        if hi > eps_max:
            if not ok(eps_max):
                return None
            hi = eps_max
            break
    while hi - lo > 0.01 * hi:
        mid = 0.5 * (lo + hi)
        if ok(mid):
            hi = mid
        else:
            lo = mid
    mant = 10 ** (math.floor(math.log10(hi)) - 2)
    up = math.ceil(hi / mant) * mant
    return float(f"{up:.3g}") if ok(float(f"{up:.3g}")) else hi


def expected_release_table(k: int, p: float, c_max: int) -> tuple[npt.NDArray[np.int64], int]:
    """``ĝ(c)`` for ``c = 0..c_max`` and its sensitivity ``Δ̂ = sup_c ĝ(c+1) − ĝ(c)``.

    ``g(c) = c·p·P[Bin(c−1, p) ≥ k−1]`` (expected released records of a class of ``c``
    records). ``ĝ(c) = floor(2^16·g(c))`` made non-decreasing, for ``c ≤ C = ⌈4k/p⌉ + 64``;
    beyond ``C`` it is *defined* to grow linearly with slope ``round(2^16·p)`` (g's own slope
    tends to p), so ``Δ̂`` is exact for all ``c ≥ 0`` and every score is an integer."""
    k = check_int("k", k, minimum=1)
    C = math.ceil(4 * k / p) + 64
    c = np.arange(C + 1, dtype=np.float64)
    g = c * p * stats.binom.sf(k - 2, np.maximum(c - 1.0, 0.0), p)
    g[0] = 0.0
    gi = np.floor(g * 2.0**G_BITS).astype(np.int64)
    gi = np.maximum.accumulate(gi)
    slope = int(round(p * 2.0**G_BITS))
    sens = max(int(np.diff(gi).max()) if gi.size > 1 else 0, slope)
    n_out = max(c_max, C) + 1
    out = np.empty(n_out, np.int64)
    out[: C + 1] = gi
    if n_out > C + 1:
        out[C + 1 :] = gi[-1] + slope * np.arange(1, n_out - C, dtype=np.int64)
    return out[: c_max + 1] if c_max >= C else out, sens


def _extra_codes(table: EncodedTable) -> tuple[npt.NDArray[np.int64], int]:
    """One code per row for the non-quasi-identifier part of the row (all other columns)."""
    leaves, hs = full_row_keys(table)
    kq = len(table.hierarchies)
    ex = np.zeros(table.n, np.int64)
    n_ex = 1
    for j in range(kq, len(hs)):
        ex, n_ex = refine_classes(ex, n_ex, leaves[:, j].astype(np.int64), len(hs[j].labels[0]))
    return ex, n_ex


def utility_levels(measures: Measures, hierarchies: tuple[Hierarchy, ...]) -> npt.NDArray[np.int64]:
    """``û(ℓ) = floor(1024·u(ℓ)/u_max)`` per level vector with the paper's modular utility
    (depth is per level; inverse/log are averaged over the leaves of each attribute, a public
    table property)."""
    lat = Lattice(tuple(h.height for h in hierarchies))
    levels = lat.levels()
    u = np.zeros(lat.size)
    for i, d in enumerate(measures.d):
        per_level = d.mean(axis=0)
        u += per_level[levels[:, i]]
    top = float(u.max())
    if top <= 0:
        return np.full(lat.size, U_STEPS, np.int64)
    return np.floor(U_STEPS * u / top).astype(np.int64)


def lattice_scores(
    table: EncodedTable,
    k: int,
    p: float,
    *,
    score: Score | str = Score.CLASSIFICATION,
    utility: npt.NDArray[np.int64] | None = None,
    gamma: tuple[int, int] = GAMMA,
) -> tuple[npt.NDArray[np.int64], int, bool, npt.NDArray[np.float64]]:
    """Integer scores of every level vector (lexicographic order), their sensitivity, whether
    they are monotone (adding a record never lowers a score) and the expected released records
    ``R/2^16`` per level vector (for reports; not released)."""
    score = parse_choice("score", score, Score)
    if score is Score.AUTO:  # lattice_scores needs the resolved score
        raise InvalidParameterError("score", score.value, "one of 'classification', 'fouad'")
    ex, n_ex = _extra_codes(table)
    qi = table.leaves
    keys = np.concatenate([qi, ex[:, None].astype(np.int32)], axis=1)
    d = distinct_records(keys)
    m = d.m
    dq = d.leaves[:, : qi.shape[1]]
    dex = d.leaves[:, -1].astype(np.int64)
    w = d.count.astype(np.float64)
    ghat, dg = expected_release_table(k, p, table.n + 1)
    hs = table.hierarchies
    lat = Lattice(tuple(h.height for h in hs))
    L = lat.size
    out = np.zeros(L, np.int64)
    rel = np.zeros(L)
    codes = [[h.codes[dq[:, i], lv].astype(np.int64) for lv in range(h.height + 1)]
             for i, h in enumerate(hs)]  # fmt: skip
    ncodes = [[len(h.labels[lv]) for lv in range(h.height + 1)] for h in hs]
    kq = len(hs)
    g_num, g_den = gamma
    dense = n_ex <= 64
    stack: list[tuple[npt.NDArray[np.int64], int]] = [(np.zeros(m, np.int64), 1)]
    prev: tuple[int, ...] | None = None
    for idx, lv in enumerate(lat.levels().tolist()):
        start = 0
        if prev is not None:
            while lv[start] == prev[start]:
                start += 1
        del stack[start + 1 :]
        for i in range(start, kq):
            pid, n_pid = stack[i]
            stack.append(refine_classes(pid, n_pid, codes[i][lv[i]], ncodes[i][lv[i]]))
        prev = tuple(lv)
        pid, n_pid = stack[kq]
        if dense:
            size = np.bincount(pid * n_ex + dex, weights=w, minlength=n_pid * n_ex)
            G = ghat[np.rint(size).astype(np.int64)].reshape(n_pid, n_ex)
            R = int(G.sum())
            if score == "classification":
                gain = int(G.max(axis=1).sum()) - int(G.sum(axis=0).max())
                out[idx] = g_den * gain + g_num * R
        else:
            cls, inv = np.unique(pid * n_ex + dex, return_inverse=True)
            size = np.bincount(inv, weights=w)
            gc = ghat[np.rint(size).astype(np.int64)]
            R = int(gc.sum())
            if score == "classification":
                grp = cls // n_ex
                yv = cls % n_ex
                gmax = np.zeros(n_pid, np.int64)
                np.maximum.at(gmax, grp, gc)
                _, yinv = np.unique(yv, return_inverse=True)
                gain = int(gmax.sum()) - int(np.bincount(yinv, weights=gc).max())
                out[idx] = g_den * gain + g_num * R
        if score == "fouad":
            assert utility is not None
            out[idx] = int(utility[idx]) * R
        rel[idx] = R / 2.0**G_BITS
    if score == "classification":
        return out, (g_den + g_num) * dg, False, rel
    return out, U_STEPS * dg, True, rel


def select_level(
    scores: npt.NDArray[np.int64],
    sensitivity: int,
    monotone: bool,
    eps: float,
    rng: RandomSource,
) -> int:
    """The exponential mechanism over level vectors, ``P[ℓ] ∝ exp(ε·s(ℓ)/(c·Δ))`` with ``c = 1``
    for monotone scores and 2 otherwise, sampled exactly from integer weights
    (:func:`searchveil.tabular.dp.exact_choice`)."""
    c = 1.0 if monotone else 2.0
    shifted = (scores - scores.max()).astype(np.float64)  # exact: integers below 2^53
    logits = shifted * (eps / (c * float(sensitivity)))
    np.maximum(logits, -700.0, out=logits)
    _, col = exact_choice(logits[None, :], np.array([1]), rng)
    return int(col[0])


@dataclass(frozen=True)
class RecodingPlan:
    """Everything the ledger states about one ``--model dp`` run."""

    advice: Advice
    n_hat: int | None
    n_bound: int
    n_bound_source: str
    score: Score
    gamma: float
    sensitivity: int
    monotone: bool
    level: list[int]
    lattice_size: int

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(d.pop("advice"))
        return d


def _count(n: int, eps: float, rng: RandomSource) -> int:
    """``n̂ = n + DLap(1/ε)`` (exact discrete Laplace, effective scale ≥ 1/ε)."""
    lap = DiscreteLaplace.for_epsilon(eps, 1.0)
    return int(n + int(lap.sample(1, rng)[0]))


def _record_bound(
    n: int, adv: Advice, max_records: int | None, rng: RandomSource
) -> tuple[int | None, int, str, float]:
    """``(n̂ or None, the bound on n, its source, the n the advisor's rule reads)``: the charged
    count, or the declared ``max_records`` (the only use of the table's size)."""
    if max_records is None:
        n_hat = _count(n, adv.eps_count, rng)
        return n_hat, max(n_hat, 1), "DP count n̂ (charged ε_count)", max(n_hat, 0)
    return None, max_records, "declared --max-records", max_records


def _score_kind(table: EncodedTable, score: Score) -> Score:
    """The selection score ``auto`` stands for: classification when the table has non-QI
    columns, else the paper's utility."""
    if score is not Score.AUTO:
        return score
    has_extra = len(table.frame.columns) > len(table.qi)
    return Score.CLASSIFICATION if has_extra else Score.FOUAD


def _infeasible(
    adv: Advice, epsilon: float, delta: float, n_for_rule: float, lattice_size: int,
    beta: float | None, max_records: int | None, selection_share: float,
) -> InvalidParameterError:  # fmt: skip
    """The error for an (ε, δ) at which the advisor's k suppresses too much: names the
    smallest ε that works (or asks for a larger δ) — with a declared ``max_records`` only:
    from the charged DP count it would print a figure computed from that noisy count."""
    if max_records is None:
        return InvalidParameterError(
            "epsilon", epsilon, f"a larger ε (or δ): at ε = {epsilon:g} the advisor's k = "
            f"{adv.k} (p = {adv.keep_probability:.3g}) suppresses a class of {REF_SHARE:.0%} of "
            "the table's records (as bounded by the DP record count this run charged) with "
            "probability > 1/2; declare a public bound --max-records N to be told the "
            "smallest ε",
        )  # fmt: skip
    e_min = smallest_feasible_epsilon(
        epsilon,
        delta,
        n_for_rule,
        lattice_size=lattice_size,
        beta=beta,
        count=max_records is None,
        selection_share=selection_share,
    )
    need = f"ε ≥ {e_min:g}" if e_min is not None else "a larger δ (no ε ≤ 20 works)"
    return InvalidParameterError(
        "epsilon",
        epsilon,
        f"{need}: at ε = {epsilon:g} the advisor's k = {adv.k} (p = {adv.keep_probability:.3g})"
        f" suppresses a class of {REF_SHARE:.0%} of ~{int(n_for_rule):,} records with "
        "probability > 1/2",
    )


def _recoding_events(
    adv: Advice, n_hat: int | None, kind: Score, sens: int, slack: float
) -> list[dict[str, Any]]:
    """The ledger's privacy events of one ``dp`` run, in the order they are spent."""
    events: list[dict[str, Any]] = []
    if n_hat is not None:
        events.append(
            {
                "event": "record count",
                "mechanism": "discrete Laplace",
                "epsilon": adv.eps_count,
                "delta": 0.0,
                "output": "noisy.n_hat",
            }  # fmt: skip
        )
    events += [
        {
            "event": "global recoding: exponential mechanism over the lattice",
            "epsilon": adv.eps_select,
            "delta": 0.0,
            "score": kind,
            "sensitivity": sens,
        },
        {
            "event": "Bernoulli sampling + k-suppression (Li, Qardaji & Su)",
            "epsilon": adv.eps_anon,
            "delta": adv.delta_anon,
            "k": adv.k,
            "keep_probability": adv.keep_probability,
        },
        {"event": "exact-sampler slack", "delta": slack, "eta_fp": adv.eta_fp},
    ]
    return events


# keyword options alike ZealousParams.from_budget's in form only
def anonymize_recoding(
    table: EncodedTable,
    measures: Measures,
    *,
    epsilon: float,
    delta: float,
    rng: RandomSource,
    beta: float | None = None,
    max_records: int | None = None,
    score: Score | str = Score.AUTO,
    selection_share: float = SELECTION_SHARE,
) -> TabularRelease:
    """The ``dp`` model (module docstring): ``(ε, δ)``-DP for adding/removing one record."""
    score = parse_choice("score", score, Score)
    if max_records is not None:
        max_records = check_int("max_records", max_records, minimum=1)
    lat = Lattice(tuple(h.height for h in table.hierarchies))
    adv = advise(
        epsilon,
        delta,
        lattice_size=lat.size,
        beta=beta,
        count=max_records is None,
        selection_share=selection_share,
    )
    # 1. record count (charged) or the declared bound: the only use of the table's size
    n_hat, n_bound, source, n_for_rule = _record_bound(table.n, adv, max_records, rng)
    if adv.delta >= 1.0 / n_bound:
        raise record_bound_error(delta, max_records, option="--max-records N")
    if not feasible(adv, n_for_rule):
        raise _infeasible(adv, epsilon, delta, n_for_rule, lat.size, beta, max_records,
                          selection_share)  # fmt: skip
    # 2. selection of one level vector (ε_sel)
    kind = _score_kind(table, score)
    util = utility_levels(measures, table.hierarchies) if kind == "fouad" else None
    scores, sens, mono, _ = lattice_scores(
        table, adv.k, adv.keep_probability, score=kind, utility=util
    )
    level = lat.levels()[select_level(scores, sens, mono, adv.eps_select, rng)]
    # 3. sampling + generalization + k-suppression (ε_anon, δ_anon), random output order
    keep = bernoulli_sample(table.n, adv.keep_probability, rng)
    sampled = np.flatnonzero(keep).astype(np.int64)
    rows, levels, frame, n_suppressed = generalize_and_suppress(table, sampled, level, adv.k)
    plan = RecodingPlan(
        advice=adv, n_hat=n_hat, n_bound=n_bound, n_bound_source=source, score=kind,
        gamma=GAMMA[0] / GAMMA[1], sensitivity=sens, monotone=mono, level=level.tolist(),
        lattice_size=lat.size,
    )  # fmt: skip
    slack = (1.0 + math.exp(adv.epsilon)) * adv.eta_fp
    events = _recoding_events(adv, n_hat, kind, sens, slack)
    rel = TabularRelease(
        table,
        rows,
        levels,
        frame,
        "dp-global-recoding (expected-release exponential mechanism + sampling + k-suppression)",
        "(ε, δ)-differential privacy (add/remove one record)",
        adv.epsilon,
        adv.delta,
        parameters={
            **{k: v for k, v in plan.as_dict().items() if k not in ("n_hat", "n_bound", "level")},
            "delta_total": adv.delta_anon + slack,
            "max_records": max_records,
        },
        events=events,
        info={"released": int(rows.size), "level": level.tolist()},
        private={"sampled": int(sampled.size), "suppressed": n_suppressed},
        noisy={"n_hat": n_hat, "n_bound": n_bound} if n_hat is not None else {},
    )
    return shuffle_release(rel, rng)
