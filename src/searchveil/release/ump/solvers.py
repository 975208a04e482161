"""Solvers for the utility-maximizing problems of Hong et al. EDBT 2012 §5 on ``M x ≤ b``.

* **O-UMP** (max Σ x, integer x ≥ 0): ``lp-floor`` is the paper's path (LP relaxation with HiGHS,
  then ⌊x*⌋); ``lp-greedy`` (ours, the default) floors the LP and then fills the remaining slack
  greedily — each pair, cheapest first (smallest largest coefficient), gets as many more draws as
  every holder's slack allows; ``mip`` is HiGHS branch-and-bound with a time limit (reports the
  gap), started from nothing (scipy's interface takes no start point).
* **F-UMP** (min Σ_frequent |x/|O| − c/|D||, Σ x = |O|): ``lp`` = LP relaxation, floor, then a
  repair that adds draws (frequent pairs below their target share first, then any pair with
  slack) until Σ x = |O| or nothing fits; ``mip`` = the ILP with a time limit.
* **D-UMP** (max number of pairs with x = 1, BIP): ``spe`` is the paper's Algorithm 2 (drop the
  pair with the globally largest t_ijk until every constraint holds) done in one pass over the
  non-zeros sorted by t (loads only decrease, so a single sorted sweep with incremental loads is
  exact — no rescans); ``spe-violated`` (ours) only drops a pair for an entry whose user is
  still violated, then adds back dropped pairs that fit, smallest largest-t first; ``mip`` is
  the exact BIP with a time limit.

Every returned x is checked against ``M x ≤ b`` *without tolerance* (a final repair removes
draws if the LP's 1e-7 feasibility tolerance left a user marginally over b).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from searchveil.errors import InternalError, InvalidParameterError
from searchveil.validate import check_positive, parse_choice


# (small enums alike io.formats' in form only)
class OMethod(StrEnum):
    """O-UMP (output size) solvers."""

    LP_GREEDY = "lp-greedy"
    LP_FLOOR = "lp-floor"
    MIP = "mip"


class FMethod(StrEnum):
    """F-UMP (frequent pairs) solvers."""

    LP = "lp"
    MIP = "mip"


class DMethod(StrEnum):
    """D-UMP (diversity) solvers."""

    SPE_VIOLATED = "spe-violated"
    SPE = "spe"
    MIP = "mip"


@dataclass
class Solution:
    """Integer counts ``x`` per pair plus what the solver reports."""

    x: npt.NDArray[np.int64]
    method: str
    objective: float
    status: str
    seconds: float
    info: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "objective": self.objective,
            "status": self.status,
            "seconds": round(self.seconds, 4),
            "output_size": int(self.x.sum()),
            "distinct_pairs": int((self.x > 0).sum()),
            **self.info,
        }


def _optimize() -> Any:
    """``scipy.optimize`` (HiGHS), imported when a solver first runs: importing it at module top
    doubles the start-up of every CLI command."""
    from scipy import optimize

    return optimize


def _loads(m: sp.csr_matrix, x: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    return np.asarray(m @ x.astype(np.float64)).ravel()


def floor_counts(x: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """⌊x⌋ of an LP solution as counts: clipped at 0 first — HiGHS may return a tiny negative
    value (−5.9e-8 on a real 128-user AOL block at δ = 1e-7), whose floor, −1, would be a
    negative count no repair removes."""
    return np.floor(np.clip(x, 0.0, None) + 1e-9).astype(np.int64)


def repair(m: sp.csr_matrix, x: npt.NDArray[np.int64], b: float) -> npt.NDArray[np.int64]:
    """Remove draws until every user's load is ≤ b exactly (largest coefficient first)."""
    x = x.copy()
    loads = _loads(m, x)
    bad = np.flatnonzero(loads > b)
    if bad.size == 0:
        return x
    csc = m.tocsc()
    for k in bad:
        row = m.getrow(k)
        order = np.argsort(-row.data)
        for p in row.indices[order]:
            while loads[k] > b and x[p] > 0:
                x[p] -= 1
                col = slice(csc.indptr[p], csc.indptr[p + 1])
                loads[csc.indices[col]] -= csc.data[col]
            if loads[k] <= b:
                break
    if (_loads(m, x) > b).any():
        raise InternalError("repair left a privacy constraint violated")
    return x


def greedy_fill(
    m: sp.csr_matrix,
    x: npt.NDArray[np.int64],
    b: float,
    *,
    order: npt.NDArray[np.int64] | None = None,
    cap: npt.NDArray[np.int64] | None = None,
    budget: int | None = None,
) -> npt.NDArray[np.int64]:
    """Add draws pair by pair (``order``; default cheapest first) while every holder has slack.
    ``cap`` bounds each x_p, ``budget`` the total added. Exact: never exceeds b."""
    x = x.copy()
    csc = m.tocsc()
    slack = b - _loads(m, x)
    if order is None:
        colmax = np.zeros(m.shape[1])
        nz = np.diff(csc.indptr) > 0
        colmax[nz] = np.maximum.reduceat(csc.data, csc.indptr[:-1][nz])
        order = np.argsort(colmax, kind="stable")
    left = budget if budget is not None else np.iinfo(np.int64).max
    for p in order:
        if left <= 0:
            break
        lo, hi = csc.indptr[p], csc.indptr[p + 1]
        if lo == hi:
            continue
        rows, coef = csc.indices[lo:hi], csc.data[lo:hi]
        n = int(np.floor(np.min(slack[rows] / coef)))
        if cap is not None:
            n = min(n, int(cap[p] - x[p]))
        n = min(n, left)
        # guard the floating-point edge: the last unit must still fit exactly
        while n > 0 and (slack[rows] - n * coef < 0).any():
            n -= 1
        if n > 0:
            x[p] += n
            slack[rows] -= n * coef
            left -= n
    return x


def local_search(
    m: sp.csr_matrix,
    x: npt.NDArray[np.int64],
    b: float,
    *,
    base_order: npt.NDArray[np.int64],
    seconds: float,
    drop_share: float = 0.1,
    seed: int = 0,
) -> tuple[npt.NDArray[np.int64], int]:
    """Iterated local search for O-UMP: drop one draw from a random 10% of the used pairs,
    refill greedily in a perturbed order, keep the result if it is no smaller. Deterministic
    (fixed internal seed: solver randomness, not privacy randomness). Returns (x, rounds)."""
    gen = np.random.Generator(np.random.PCG64(seed))
    best = x.copy()
    n = m.shape[1]
    rank = np.empty(n)
    t0 = time.perf_counter()
    rounds = 0
    while time.perf_counter() - t0 < seconds:
        rounds += 1
        cur = best.copy()
        used = np.flatnonzero(cur > 0)
        if used.size == 0:
            break
        drop = gen.choice(used, size=max(1, int(drop_share * used.size)), replace=False)
        cur[drop] -= 1
        rank[base_order] = np.arange(n)
        moved = gen.choice(n, size=max(1, n // 10), replace=False)
        rank[moved] = gen.random(moved.size) * n
        cur = greedy_fill(m, cur, b, order=np.argsort(rank, kind="stable"))
        if cur.sum() >= best.sum():
            best = cur
    return best, rounds


def _max_count_mip(
    m: sp.csr_matrix, b: float, *, upper: float, time_limit: float
) -> tuple[npt.NDArray[np.int64], dict[str, Any], str]:
    """max Σ x s.t. M x ≤ b, x integer in [0, upper] with HiGHS; (x, gap info, status)."""
    n = m.shape[1]
    opt = _optimize()
    res = opt.milp(
        -np.ones(n),
        constraints=opt.LinearConstraint(m, -np.inf, b),
        integrality=np.ones(n),
        bounds=opt.Bounds(0, upper),
        options={"time_limit": time_limit, "disp": False},
    )
    if res.x is None:
        raise InternalError(f"HiGHS MIP found no solution: {res.message}")
    x = repair(m, np.round(res.x).astype(np.int64), b)
    info = {
        "mip_gap": float(getattr(res, "mip_gap", np.nan)),
        "dual_bound": float(-getattr(res, "mip_dual_bound", np.nan)),
    }
    return x, info, "optimal" if res.status == 0 else f"time limit ({res.message})"


def lp_relaxation(
    m: sp.csr_matrix, b: float, c: npt.NDArray[np.float64], **kw: Any
) -> tuple[npt.NDArray[np.float64], Any]:
    """The LP relaxation ``min c·x`` s.t. ``M x ≤ b``, ``x ≥ 0`` (HiGHS); returns (x, result)."""
    res = _optimize().linprog(
        c, A_ub=m, b_ub=np.full(m.shape[0], b), bounds=(0, None), method="highs", **kw
    )
    if res.status != 0:
        raise InternalError(f"HiGHS LP failed: {res.message}")
    return res.x, res


def solve_oump(
    m: sp.csr_matrix,
    b: float,
    *,
    method: OMethod | str = OMethod.LP_GREEDY,
    time_limit: float = 60.0,
    search_seconds: float = 5.0,
    lp_unit: npt.NDArray[np.float64] | None = None,
) -> Solution:
    """O-UMP: maximize the output size Σ x under ``M x ≤ b``. ``lp-greedy``: floor of the LP,
    greedy fill (largest LP fractional part first, then smallest coefficient sum), then
    :func:`local_search` for ``search_seconds``. Every right-hand side equals b, so the LP is
    homogeneous: if ``lp_unit`` is optimal for b = 1, ``b · lp_unit`` is optimal for b (a grid
    over (ε, δ) needs one LP solve)."""
    method = parse_choice("method", method, OMethod)
    check_positive("time_limit", time_limit)
    t0 = time.perf_counter()
    n = m.shape[1]
    info: dict[str, Any] = {}
    if method == "mip":
        x, mip_info, status = _max_count_mip(m, b, upper=np.inf, time_limit=time_limit)
        info.update(mip_info)
    else:
        if lp_unit is not None:
            xs = b * lp_unit
            info["lp_optimum"] = float(xs.sum())
        else:
            xs, res = lp_relaxation(m, b, -np.ones(n))
            info["lp_optimum"] = float(-res.fun)
        x = repair(m, floor_counts(xs), b)
        info["lp_floor"] = int(x.sum())
        if method == "lp-greedy":
            frac = xs - np.floor(xs + 1e-9)
            colsum = np.asarray(m.sum(axis=0)).ravel()
            order = np.lexsort((colsum, -frac))
            x = greedy_fill(m, x, b, order=order)
            info["greedy"] = int(x.sum())
            if search_seconds > 0:
                x, rounds = local_search(m, x, b, base_order=order, seconds=search_seconds)
                info["local_search_rounds"] = rounds
        status = "optimal LP, rounded"
    return Solution(x, method, float(x.sum()), status, time.perf_counter() - t0, info)


def solve_fump(
    m: sp.csr_matrix,
    b: float,
    c_ij: npt.NDArray[np.int64],
    *,
    output_size: int,
    min_support: float,
    method: FMethod | str = FMethod.LP,
    time_limit: float = 60.0,
) -> Solution:
    """F-UMP: min Σ over frequent pairs (c_ij/|D| ≥ s) of |x_ij/|O| − c_ij/|D|| with Σ x = |O|."""
    method = parse_choice("method", method, FMethod)
    if output_size < 1:
        raise InvalidParameterError("output_size", output_size, "an integer ≥ 1")
    t0 = time.perf_counter()
    n = m.shape[1]
    size_d = float(c_ij.sum())
    target = c_ij / size_d
    freq = np.flatnonzero(target >= min_support)
    nf = freq.size
    o = float(output_size)
    # variables: x (n), y (nf); min Σ y
    cost = np.r_[np.zeros(n), np.ones(nf)]
    a_priv = sp.hstack([m, sp.csr_matrix((m.shape[0], nf))], format="csr")
    sel = sp.csr_matrix((np.ones(nf) / o, (np.arange(nf), freq)), shape=(nf, n))
    eye = sp.identity(nf, format="csr")
    a_pos = sp.hstack([sel, -eye], format="csr")  # x/O − y ≤ c/D
    a_neg = sp.hstack([-sel, -eye], format="csr")  # −x/O − y ≤ −c/D
    a_sum = sp.csr_matrix(np.r_[np.ones(n), np.zeros(nf)][None, :])
    a_ub = sp.vstack([a_priv, a_pos, a_neg], format="csr")
    b_ub = np.r_[np.full(m.shape[0], b), target[freq], -target[freq]]
    info: dict[str, Any] = {"frequent_pairs": int(nf), "requested_output_size": output_size}
    if method == "mip":
        opt = _optimize()
        res = opt.milp(
            cost,
            constraints=[
                opt.LinearConstraint(a_ub, -np.inf, b_ub),
                opt.LinearConstraint(a_sum, o, o),
            ],
            integrality=np.r_[np.ones(n), np.zeros(nf)],
            bounds=opt.Bounds(0, np.inf),
            options={"time_limit": time_limit, "disp": False},
        )
        if res.x is None:
            raise InternalError(f"HiGHS MIP found no solution: {res.message}")
        x = repair(m, floor_counts(res.x[:n]), b)
        info["mip_gap"] = float(getattr(res, "mip_gap", np.nan))
        status = "optimal" if res.status == 0 else f"time limit ({res.message})"
    else:
        res = _optimize().linprog(
            cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_sum, b_eq=[o], bounds=(0, None), method="highs"
        )
        if res.status == 2:
            raise InvalidParameterError(
                "output_size", output_size, "at most λ, the O-UMP optimum for this (ε, δ)"
            )
        if res.status != 0:
            raise InternalError(f"HiGHS LP failed: {res.message}")
        info["lp_objective"] = float(res.fun)
        x = repair(m, floor_counts(res.x[:n]), b)
        status = "optimal LP, rounded"
    # repair Σ x = |O|: frequent pairs below target first (largest deficit), then the rest
    missing = output_size - int(x.sum())
    if missing > 0:
        deficit = target * output_size - x
        fr_order = freq[np.argsort(-deficit[freq])]
        cap = np.maximum(np.ceil(target * output_size).astype(np.int64), x)
        x = greedy_fill(m, x, b, order=fr_order, cap=cap, budget=missing)
        missing = output_size - int(x.sum())
        if missing > 0:
            x = greedy_fill(m, x, b, budget=missing)
    dist = np.abs(x[freq] / max(int(x.sum()), 1) - target[freq])
    info["actual_output_size"] = int(x.sum())
    info["sum_support_distance"] = float(dist.sum())
    info["avg_support_distance"] = float(dist.mean()) if nf else 0.0
    return Solution(x, method, float(dist.sum()), status, time.perf_counter() - t0, info)


def _spe_sweep(
    m: sp.csr_matrix, b: float, *, violated_only: bool
) -> tuple[npt.NDArray[np.int64], int]:
    coo = m.tocoo()
    order = np.argsort(-coo.data, kind="stable")
    users, pairs, vals = coo.row[order], coo.col[order], coo.data[order]
    y = np.ones(m.shape[1], dtype=np.int64)
    loads = _loads(m, y)
    n_viol = int((loads > b).sum())
    csc = m.tocsc()
    steps = 0
    for k, p, _ in zip(users, pairs, vals, strict=True):
        if n_viol == 0:
            break
        if y[p] == 0 or (violated_only and loads[k] <= b):
            continue
        y[p] = 0
        steps += 1
        lo, hi = csc.indptr[p], csc.indptr[p + 1]
        rows = csc.indices[lo:hi]
        before = loads[rows] > b
        loads[rows] -= csc.data[lo:hi]
        n_viol -= int((before & (loads[rows] <= b)).sum())
    return y, steps


def solve_dump(
    m: sp.csr_matrix,
    b: float,
    *,
    method: DMethod | str = DMethod.SPE_VIOLATED,
    time_limit: float = 60.0,
) -> Solution:
    """D-UMP: maximize the number of pairs output once (x ∈ {0, 1})."""
    method = parse_choice("method", method, DMethod)
    t0 = time.perf_counter()
    n = m.shape[1]
    info: dict[str, Any] = {}
    if method == "mip":
        y, mip_info, status = _max_count_mip(m, b, upper=1, time_limit=time_limit)
        info.update(mip_info)
    else:
        y, steps = _spe_sweep(m, b, violated_only=method == "spe-violated")
        info["eliminated"] = int(steps)
        if method == "spe-violated":
            before = int(y.sum())
            y = greedy_fill(m, y, b, cap=np.ones(n, dtype=np.int64))
            info["added_back"] = int(y.sum()) - before
        status = "heuristic"
    if (_loads(m, y) > b).any():
        raise InternalError("D-UMP solution violates a privacy constraint")
    return Solution(y, method, float(y.sum()), status, time.perf_counter() - t0, info)
