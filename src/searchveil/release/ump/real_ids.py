"""Real user ids in the end-to-end same-schema release (``release ump --ids real``;
docs/privacy/ump.md, "Real user ids, end to end"): lower confidence bounds from the noisy pair
counts, a robust allocation under Hong et al.'s per-user constraint, and Hong's multinomial
sampling of real holders. Every DP log with real ids shows each user with probability ≤ δ, so
this log is empty or nearly so at every δ < 1/U; it is kept for completeness and comparison."""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import scipy.sparse as sp

from searchveil.errors import InternalError
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.model import PAIR_SEP
from searchveil.release.ump.sampling import sample_users, sampled_log
from searchveil.release.zealous.params import ZealousParams
from searchveil.rng import RandomSource
from searchveil.validate import parse_choice

__all__ = [
    "E2EObjective",
    "lower_bound_margin",
    "real_id_tables",
    "robust_allocation",
    "true_loads",
]


class E2EObjective(StrEnum):
    """What the allocation of the real-id mode maximises: Σ x (O-UMP) or the pairs with x ≥ 1
    (D-UMP)."""

    SIZE = "size"
    DIVERSITY = "diversity"


def lower_bound_margin(zealous: ZealousParams, *, gamma: float) -> int:
    """τ_γ: the least integer with m·P[DLap(λ) > τ_γ] ≤ γ (λ the effective scale sampled)."""
    lap = DiscreteLaplace(scale=DiscreteLaplace(scale=zealous.lam).effective_scale)
    t = 0
    while zealous.m * float(lap.sf(t + 1)) > gamma:
        t += max(1, int(lap.scale))
    while t > 0 and zealous.m * float(lap.sf(t)) <= gamma:
        t -= 1
    return t


def robust_allocation(
    noisy: npt.ArrayLike, *, margin: int, m: int, b: float, objective: E2EObjective | str
) -> npt.NDArray[np.int64]:
    """Counts x from the published noisy counts only: L = ñ − margin, ℓ = ln(L/(L−1)) (x = 0
    where L < 2), under "the m largest x_p·ℓ_p sum to ≤ b".

    ``size``: the LP max Σ x_p s.t. that constraint has the closed form b·max(max_p 1/ℓ_p,
    Σ_p (1/ℓ_p)/m) (its vertices are b·e_p and (b/m)·1 on every set of ≥ m pairs); floored, then
    filled greedily (smallest ℓ first, one draw at a time while the top-m sum stays ≤ b).
    ``diversity``: x_p = 1 on the longest prefix of pairs by increasing ℓ whose m largest ℓ
    sum to ≤ b (optimal: any feasible 0/1 set can be replaced by that prefix)."""
    objective = parse_choice("objective", objective, E2EObjective)
    lo = np.asarray(noisy, dtype=np.float64) - margin
    ok = lo >= 2
    ell = np.full(lo.size, np.inf)
    ell[ok] = np.log(lo[ok] / (lo[ok] - 1.0))
    x = np.zeros(lo.size, dtype=np.int64)
    order = np.argsort(ell, kind="stable")
    cand = order[np.isfinite(ell[order]) & (ell[order] <= b)]
    if cand.size == 0:
        return x
    if objective == E2EObjective.DIVERSITY:
        e = ell[cand]
        cs = np.r_[0.0, np.cumsum(e)]
        n = np.arange(1, e.size + 1)
        top = cs[n] - cs[np.maximum(n - m, 0)]  # the m largest of a sorted prefix: its last m
        k = int(np.searchsorted(top > b, True))  # top is increasing: first prefix over b
        x[cand[:k]] = 1
        return x
    w = 1.0 / ell[cand]
    if w.max() >= w.sum() / m:
        x[cand[0]] = int(math.floor(b / ell[cand[0]]))
    else:
        x[cand] = np.floor(b / (m * ell[cand])).astype(np.int64)
    load = x * np.where(np.isfinite(ell), ell, 0.0)

    def top_m(v: np.ndarray) -> float:
        return float(v.sum()) if v.size <= m else float(np.partition(v, v.size - m)[-m:].sum())

    for p in cand:  # greedy fill
        while True:
            load[p] += ell[p]
            if top_m(load) <= b:
                x[p] += 1
            else:
                load[p] -= ell[p]
                break
    return x


def true_loads(
    bounded: pl.DataFrame, pairs: pl.DataFrame, x: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """Private check: every user's load Σ_{p ∈ Ā_k} x_p·ln(n_p/(n_p − 1)) with the exact
    holder counts n_p of the bounded log (∞ where a user holds a drawn pair alone)."""
    xs = pairs.select("item").with_columns(pl.Series("x", np.asarray(x, dtype=np.int64)))
    held = bounded.join(xs.filter(pl.col("x") > 0), on="item", how="inner")
    if held.height == 0:
        return np.zeros(0)
    n = held.group_by("item").agg(pl.col("user").n_unique().alias("n"))
    held = held.join(n, on="item").with_columns(
        coef=pl.when(pl.col("n") > 1).then(-(1.0 - 1.0 / pl.col("n")).log()).otherwise(float("inf"))
    )
    per_user = held.group_by("user").agg((pl.col("x") * pl.col("coef")).sum().alias("load"))
    return per_user.get_column("load").to_numpy()


def real_id_tables(
    bounded: pl.DataFrame, published: pl.DataFrame, zp: ZealousParams, *, gamma: float, b: float,
    objective: E2EObjective | str, rng: RandomSource,
) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, Any]]:  # fmt: skip
    """Steps 3–5 with real ids (docs/privacy/ump.md): lower bounds L_p = ñ_p − τ_γ (``zp``: the
    pair step's ZEALOUS parameters, ``gamma`` the failure share), the allocation from the noisy
    counts only, Hong's sampling of real holders. Returns the log, the counts x and the private
    check of every user's load on the true bounded log."""
    margin = lower_bound_margin(zp, gamma=gamma)
    pairs = (
        published.select("query", "url", "noisy_count")
        .sort("query", "url")
        .with_columns(item=pl.col("query") + PAIR_SEP + pl.col("url"))  # bounded_pairs' item
    )
    x = robust_allocation(pairs.get_column("noisy_count").to_numpy(), margin=margin, m=zp.m,
                          b=b, objective=objective)  # fmt: skip
    drawn = pairs.select("item", "query", "url").with_columns(pl.Series("x", x))
    held = bounded.join(drawn.filter(pl.col("x") > 0).select("item"), on="item", how="semi")
    users = np.sort(held.get_column("user").unique().to_numpy())
    item_idx = {it: i for i, it in enumerate(drawn.get_column("item").to_list())}
    rows = np.array([item_idx[i] for i in held.get_column("item").to_list()], dtype=np.int64)
    cols = np.searchsorted(users, held.get_column("user").to_numpy())
    c = sp.csr_matrix(
        (np.ones(rows.size, dtype=np.int64), (rows, cols)), shape=(drawn.height, users.size)
    )
    if int((np.asarray(c.sum(axis=1)).ravel() == 0)[x > 0].sum()):
        raise InternalError("a pair with x > 0 has no holder in the bounded log")
    triplets = sample_users(c, x, rng=rng)
    log = sampled_log(drawn.select("query", "url"), users, triplets).with_columns(
        pl.col("AnonID").cast(bounded.schema["user"])
    )
    loads = true_loads(bounded, drawn, x)
    check = {"max_load": float(loads.max()) if loads.size else 0.0, "b": b,
             "users_over_b": int((loads > b).sum()), "margin_tau_gamma": margin}  # fmt: skip
    return log, drawn.select("query", "url", pl.col("x").alias("x_ij")), check
