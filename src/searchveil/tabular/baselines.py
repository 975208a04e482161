"""Baselines: full-domain k-anonymity (ARX's classic output) and SafePub (Bild, Kuhn & Prasser,
"SafePub: A Truthful Data Anonymization Algorithm With Strong Privacy Guarantees", PoPETs
2018(1)), implemented here from our reading of that paper since ARX (Java) cannot run in this
stack. Our reading (docs/tabular.md, "SafePub as implemented"):

1. ``ε = ε_anon + ε_search``; records are sampled with probability ``β = 1 − e^{−ε_anon}``.
2. ``k`` is the smallest integer with ``δ(k, β, ε_anon) ≤ δ`` — Li, Qardaji & Su's bound for
   strongly-safe k-anonymization under sampling (we use the exact version,
   :func:`searchveil.tabular.dp.sampling_delta`).
3. A full-domain transformation (one level vector for the whole table) is chosen by a
   differentially private search: starting at the most general transformation, ``steps``
   times the exponential mechanism picks one of the not yet visited direct predecessors or
   successors of the current transformation, and a final exponential mechanism picks the output
   among all visited ones; each of the ``steps + 1`` selections spends ``ε_search/(steps+1)``.
   The score is the negated granularity loss of the k-suppressed sample (per record the mean
   over attributes of ``(n(x)−1)/(n(⊥)−1)``, a suppressed record counts 1), whose sensitivity is
   ``max(1, k−1)`` (one record can complete or break a class of size ``k``).
4. The chosen transformation is applied to the sample and every class (whole output row)
   smaller than ``k`` is suppressed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.rng import RandomSource
from searchveil.tabular.dp import (
    bernoulli_sample,
    exact_choice,
    k_for_delta,
    record_bound_error,
    round_probability,
    sampling_delta,
)
from searchveil.tabular.hierarchy import EncodedTable, Hierarchy
from searchveil.tabular.lattice import Lattice, distinct_records, iter_class_sizes
from searchveil.tabular.release import TabularRelease, generalize_and_suppress, shuffle_release
from searchveil.validate import check_int, check_positive, check_probability

__all__ = ["full_row_keys", "granularity_table", "lattice_scores", "kanonymize", "safepub"]


def granularity_table(h: Hierarchy) -> npt.NDArray[np.float64]:
    """Per leaf and level: ``(n(x)−1)/(n(⊥)−1)`` (0 for a leaf, 1 for the root)."""
    n = h.leaf_counts().astype(np.float64)
    den = max(n[0, -1] - 1.0, 1.0)
    return (n - 1.0) / den


def full_row_keys(table: EncodedTable) -> tuple[npt.NDArray[np.int32], list[Hierarchy]]:
    """Leaves of the quasi-identifiers plus every other column as a height-0 "hierarchy", so
    class sizes count whole output rows (suppression is by whole row)."""
    extra_cols = [c for c in table.frame.columns if c not in table.qi]
    cols = [table.leaves]
    hs = list(table.hierarchies)
    for c in extra_cols:
        s = table.frame.get_column(c).fill_null("")
        cats, codes = np.unique(s.to_numpy().astype(str), return_inverse=True)
        hs.append(
            Hierarchy(
                c,
                (tuple(str(v) for v in cats),),
                np.arange(len(cats), dtype=np.int32).reshape(-1, 1),
            )
        )
        cols.append(codes.reshape(-1, 1).astype(np.int32))
    return np.concatenate(cols, axis=1), hs


def lattice_scores(
    table: EncodedTable, rows: npt.NDArray[np.int64], k: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
    """For every full-domain level vector (of the QIs): the total granularity loss of
    ``rows`` after suppressing classes smaller than ``k`` (suppressed rows count 1) and the
    number of suppressed rows."""
    leaves, hs = full_row_keys(table)
    d = distinct_records(leaves[rows])
    G = [
        np.ascontiguousarray(granularity_table(h)[d.leaves[:, i]].T)  # (levels, m) rows
        for i, h in enumerate(table.hierarchies)
    ]
    kq = len(G)
    lat = Lattice(tuple(h.height for h in table.hierarchies))
    levels = lat.levels()
    cnt = d.count.astype(np.float64)
    loss = np.zeros(lat.size)
    supp = np.zeros(lat.size, np.int64)
    for idx, sizes in iter_class_sizes(d.leaves, d.count, hs):
        lv = levels[idx]
        g = np.zeros(d.m)
        for i in range(kq):
            g += G[i][lv[i]]
        small = sizes < k
        g /= max(kq, 1)
        g[small] = 1.0
        g *= cnt  # elementwise (np.dot goes through BLAS threads: slow for small vectors)
        loss[idx] = float(g.sum())
        supp[idx] = int(d.count[small].sum())
    return loss, supp


def kanonymize(table: EncodedTable, *, k: int, max_suppression: float = 0.0) -> TabularRelease:
    """Optimal full-domain k-anonymity: the level vector of least granularity loss whose
    classes smaller than ``k`` hold at most ``max_suppression·n`` records (those are
    suppressed). Not differentially private."""
    k = check_int("k", k, minimum=1)
    if not 0.0 <= max_suppression < 1.0:
        raise InvalidParameterError("max_suppression", max_suppression, "a number in [0, 1)")
    rows = np.arange(table.n, dtype=np.int64)
    loss, supp = lattice_scores(table, rows, k)
    ok = supp <= max_suppression * table.n
    ok[-1] = ok[-1] or True  # the root is always a (degenerate) solution
    best = int(np.flatnonzero(ok)[np.argmin(loss[ok])])
    level = Lattice(tuple(h.height for h in table.hierarchies)).levels()[best]
    r, lv, frame, n_sup = generalize_and_suppress(table, rows, level, k)
    return TabularRelease(
        table,
        r,
        lv,
        frame,
        "full-domain-k-anonymity",
        f"{k}-anonymity (not differentially private)",
        None,
        None,
        parameters={"k": k, "max_suppression": max_suppression},
        info={"level": level.tolist(), "released": int(r.size)},
        private={
            "suppressed": n_sup,
            "granularity_loss": float(loss[best]) / max(table.n, 1),
        },
    )


def _safepub_n_bound(
    table: EncodedTable, max_records: int | None, eps_n: float, rng: RandomSource
) -> tuple[int, int | None, str]:
    """The record-count bound for the δ < 1/n policy: ``(n_bound, n̂ or None, its source)``."""
    if max_records is not None:
        return check_int("max_records", max_records, minimum=1), None, "declared --max-records"
    lap = DiscreteLaplace.for_epsilon(eps_n, 1.0)
    n_hat = int(table.n + int(lap.sample(1, rng)[0]))
    return max(1, n_hat), n_hat, "DP count n̂"


def _safepub_search(
    lat: Lattice, loss: npt.NDArray[np.float64], eps_step: float, sens: float, steps: int,
    rng: RandomSource,
) -> tuple[int, int]:  # fmt: skip
    """The DP walk over the lattice (step 3 of the module docstring): ``(chosen, visited)``."""
    levels = lat.levels()

    def pick(cands: list[int]) -> int:
        s = -loss[np.array(cands)] * (eps_step / (2.0 * sens))
        _, col = exact_choice(s[None, :], np.array([1]), rng)
        return cands[int(col[0])]

    current = lat.size - 1  # the most general transformation
    visited = [current]
    seen = {current}
    for _ in range(steps):
        nb = [
            int(lat.index(np.array(v)))
            for v in lat.up_neighbours(levels[current]) + lat.down_neighbours(levels[current])
        ]
        cands = [c for c in nb if c not in seen]
        if not cands:
            break
        current = pick(cands)
        visited.append(current)
        seen.add(current)
    return pick(visited), len(visited)


def _safepub_events(
    n_hat: int | None, eps_n: float, eps_search: float, eps_anon: float, delta_anon: float,
    k: int, slack: float, eta_fp: float,
) -> list[dict[str, Any]]:  # fmt: skip
    """The ledger events of one SafePub run, in the order they spend."""
    events: list[dict[str, Any]] = []
    if n_hat is not None:
        events.append({"event": "record count (δ < 1/n policy)", "mechanism": "discrete Laplace",
                       "epsilon": eps_n, "delta": 0.0, "output": "noisy.n_hat"})  # fmt: skip
    events += [
        {"event": "DP search (exponential mechanism)", "epsilon": eps_search, "delta": 0.0},
        {"event": "sampling + k-suppression", "epsilon": eps_anon, "delta": delta_anon, "k": k},
        {"event": "exact-sampler slack", "delta": slack, "eta_fp": eta_fp},
    ]
    return events


# keyword options alike plan_dp's in form only: SafePub's own parameters
def safepub(
    table: EncodedTable,
    *,
    epsilon: float,
    delta: float,
    rng: RandomSource,
    search_share: float = 0.1,
    steps: int = 100,
    max_records: int | None = None,
    count_share: float = 0.01,
) -> TabularRelease:
    """SafePub as read from Bild, Kuhn & Prasser 2018 (module docstring). The δ < 1/n policy
    check uses a declared ``max_records`` or a DP count ``n̂`` (``count_share·ε``, taken from
    ``ε_anon``; SafePub itself has no count step); δ is accounted with the keep probability
    actually sampled (53-bit rounded) plus the exact samplers' slack. The rows come back in a
    uniformly random order drawn from ``rng`` (never the input's)."""
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    search_share = check_probability("search_share", search_share)
    steps = check_int("steps", steps, minimum=0)
    eps_search = search_share * epsilon
    eps_n = 0.0 if max_records is not None else check_probability("count_share", count_share)
    eps_n *= epsilon
    eps_anon = epsilon - eps_search - eps_n
    n_bound, n_hat, source = _safepub_n_bound(table, max_records, eps_n, rng)
    if delta >= 1.0 / n_bound:
        raise record_bound_error(delta, max_records, option="--max-records N")
    _, p = round_probability(1.0 - math.exp(-eps_anon))  # the keep probability actually sampled
    lat = Lattice(tuple(h.height for h in table.hierarchies))
    # each exponential-mechanism pick has total-variation error ≤ (candidates+1)·2^-50
    eta_fp = (steps + 1) * (lat.size + 1) * 2.0**-50
    slack = (1.0 + math.exp(epsilon)) * eta_fp
    if delta <= slack:
        raise InvalidParameterError("delta", delta, f"> the samplers' slack {slack:.3g}")
    k = k_for_delta(eps_anon, delta - slack, p)
    delta_anon = sampling_delta(k, p, eps_anon)
    keep = bernoulli_sample(table.n, p, rng)
    sampled = np.flatnonzero(keep).astype(np.int64)
    loss, _ = lattice_scores(table, sampled, k)
    sens = float(max(1, k - 1))
    chosen, n_visited = _safepub_search(lat, loss, eps_search / (steps + 1), sens, steps, rng)
    level = lat.levels()[chosen]
    r, lv, frame, n_sup = generalize_and_suppress(table, sampled, level, k)
    params: dict[str, Any] = {
        "epsilon_anon": eps_anon,
        "epsilon_search": eps_search,
        "epsilon_count": eps_n,
        "sampling_probability": p,
        "k": k,
        "steps": steps,
        "score": "granularity",
        "score_sensitivity": sens,
        "delta_anon": delta_anon,
        "eta_fp": eta_fp,
        "delta_total": delta_anon + slack,
        "n_bound_source": source,
        "max_records": max_records,
    }
    rel = TabularRelease(
        table,
        r,
        lv,
        frame,
        "safepub (Bild, Kuhn & Prasser 2018; our implementation)",
        "(ε, δ)-differential privacy (add/remove one record)",
        epsilon,
        delta,
        parameters=params,
        events=_safepub_events(n_hat, eps_n, eps_search, eps_anon, delta_anon, k, slack, eta_fp),
        info={"level": level.tolist(), "released": int(r.size), "visited": n_visited},
        private={"sampled": int(sampled.size), "suppressed": n_sup},
        noisy={"n_hat": n_hat, "n_bound": n_bound} if n_hat is not None else {},
    )
    return shuffle_release(rel, rng)
