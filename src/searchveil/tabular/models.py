"""Risk–utility models of Fouad et al. TKDE 2014 §II: the threshold model (Definition 1) with
its approximation Algorithm 1 (Theorem 2), and the aggregate model (eq. 2, Theorem 1).

Exact solvers sweep the whole chain product ``a^+`` of every record at once
(:func:`sweep`): the level vectors are shared by all records, so one pass over the
``Π(h_i+1)`` level vectors with vectorised class sizes (:mod:`searchveil.tabular.lattice`)
evaluates ``u``, ``Φ``, ``|ρ|`` and ``f`` for all distinct records (records with the same
quasi-identifier tuple share ``a^+`` and are solved once).

The polynomial algorithm for the aggregate model (:func:`aggregate_polynomial`, Theorem 1) uses
the reduction of §II-B.3: ``f^a`` is supermodular on ``a^+`` (Prop. 2, Cor. 1; checked by brute
force in the tests), Birkhoff's representation maps ``a^+`` to a ring family over the
join-irreducibles ``J`` (one element per attribute and level ≥ 1), the extension
``ḡ(X) = g(X̄) − K|X̄ \\ X|`` makes it a supermodular function on ``2^J``, and we maximise it by
minimising the submodular ``−ḡ`` with the Fujishige–Wolfe minimum-norm-point algorithm;
the minimiser is read off the level sets of the min-norm point and checked exactly. The
tests compare it with exhaustive enumeration on random small lattices.

Algorithm 1 solves its convex program (step 3) with a cutting-plane LP: the Lovász extension
``T̂`` of the supermodular ``T = |ρ|`` is the minimum of the linear functions given by the
maximal chains of the ring family, so ``T̂(x) ≥ s`` is enforced by adding the violated chain's
inequality until none is violated; then randomized rounding RR (step 5-7).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.optimize import linprog

from searchveil.errors import InvalidParameterError
from searchveil.rng import RandomSource
from searchveil.tabular.hierarchy import EncodedTable
from searchveil.tabular.lattice import Lattice, distinct_records, iter_class_sizes, meet_levels
from searchveil.tabular.measures import Measures
from searchveil.validate import check_int, check_positive, check_probability

# the arrays a sweep visitor receives: level vectors / counts, utilities / risks
_Ints = npt.NDArray[np.int64]
_Floats = npt.NDArray[np.float64]

__all__ = [
    "Problem",
    "make_problem",
    "sweep",
    "Solution",
    "aggregate_exact",
    "threshold_exact",
    "frequent_exact",
    "record_rho",
    "aggregate_polynomial",
    "aggregate_enumerate_record",
    "approx_threshold",
    "min_norm_point_sfm",
]

Visitor = Callable[
    [
        int,
        npt.NDArray[np.int64],
        npt.NDArray[np.int64],
        npt.NDArray[np.float64],
        npt.NDArray[np.float64],
    ],
    None,
]


@dataclass(frozen=True)
class Problem:
    """A table to generalize (distinct QI tuples), the side table Θ and the measures."""

    table: EncodedTable
    leaves: npt.NDArray[np.int32]  # distinct tuples of the table, (m, k)
    count: npt.NDArray[np.int64]  # records per distinct tuple
    inverse: npt.NDArray[np.int64]  # table row -> distinct tuple
    theta_leaves: npt.NDArray[np.int32]  # rows whose weights count in |ρ|: table ∪ Θ tuples
    theta_weights: npt.NDArray[np.int64]
    theta_size: int
    measures: Measures
    lattice: Lattice
    side_table: bool

    @property
    def m(self) -> int:
        return int(self.leaves.shape[0])


def make_problem(
    table: EncodedTable, measures: Measures, theta: EncodedTable | None = None
) -> Problem:
    """Θ = the table itself unless a side table is given (same hierarchies)."""
    d = distinct_records(table.leaves)
    if theta is None:
        tl, tw, size = d.leaves, d.count, table.n
    else:
        t = distinct_records(theta.leaves)
        tl = np.concatenate([d.leaves, t.leaves])
        tw = np.concatenate([np.zeros(d.m, np.int64), t.count])
        size = theta.n
    if size < 1:
        raise InvalidParameterError("table", "empty", "at least one record")
    lat = Lattice(tuple(h.height for h in table.hierarchies))
    return Problem(
        table, d.leaves, d.count, d.inverse, tl, tw, size, measures, lat, theta is not None
    )


def sweep(problem: Problem, visit: Visitor) -> None:
    """Call ``visit(index, level, rho, u, phi)`` for every level vector, where the arrays hold
    one value per distinct record (``rho`` = ``|ρ(x, Θ)|``, ``phi`` = the paper's ``Φ``)."""
    D0, W0 = problem.measures.per_record(problem.leaves)
    D = [np.ascontiguousarray(t.T) for t in D0]  # (levels, m): a level is a contiguous row
    W = [np.ascontiguousarray(t.T) for t in W0]
    levels = problem.lattice.levels()
    m = problem.m
    for idx, sizes in iter_class_sizes(
        problem.theta_leaves, problem.theta_weights, problem.table.hierarchies
    ):
        lv = levels[idx]
        u = np.zeros(m)
        phi = np.zeros(m)
        for i in range(len(D)):
            u += D[i][lv[i]]
            phi += W[i][lv[i]]
        visit(idx, lv, sizes[:m], u, phi)


@dataclass(frozen=True)
class Solution:
    """A generalization per distinct record: lattice index, level vector, and the measures."""

    index: npt.NDArray[np.int64]
    levels: npt.NDArray[np.int64]
    objective: npt.NDArray[np.float64]
    u: npt.NDArray[np.float64]
    risk: npt.NDArray[np.float64]
    rho: npt.NDArray[np.int64]

    def per_row(self, inverse: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        return self.levels[inverse]


def _solution(
    problem: Problem,
    best: npt.NDArray[np.int64],
    obj: npt.NDArray[np.float64],
    u: npt.NDArray[np.float64],
    r: npt.NDArray[np.float64],
    rho: npt.NDArray[np.int64],
) -> Solution:
    return Solution(best, problem.lattice.levels()[best], obj, u, r, rho)


def aggregate_exact(problem: Problem) -> Solution:
    """Theorem 1's problem ``max_{x ∈ a^+} f^a(x)`` for every record, exactly, by a vectorised
    sweep of the chain product (ties: the first level vector in lexicographic order)."""
    m = problem.m
    best = np.zeros(m, np.int64)
    bf = np.full(m, -np.inf)
    bu, br, brho = np.zeros(m), np.zeros(m), np.zeros(m, np.int64)
    meas, size = problem.measures, float(problem.theta_size)

    def visit(idx: int, lv: _Ints, rho: _Ints, u: _Floats, phi: _Floats) -> None:
        f = meas.f(rho.astype(np.float64), size, u, phi)
        better = f > bf
        best[better], bf[better], bu[better] = idx, f[better], u[better]
        brho[better] = rho[better]
        br[better] = phi[better] / np.maximum(rho[better], 1)

    sweep(problem, visit)
    return _solution(problem, best, bf, bu, br, brho)


def threshold_exact(problem: Problem, c: float) -> Solution:
    """Definition 1: ``max u(x)`` s.t. ``r(x) = Φ(x)/|ρ(x,Θ)| ≤ c``, exactly (exponential in k,
    the problem is NP-hard; here by sweeping the chain product). ``⊥`` (risk 0) is always
    feasible. Ties: the smaller risk, then the first level vector."""
    c = check_positive("c", c, finite=False)
    m = problem.m
    best = np.zeros(m, np.int64)
    bu = np.full(m, -np.inf)
    br, brho = np.full(m, np.inf), np.zeros(m, np.int64)

    def visit(idx: int, lv: _Ints, rho: _Ints, u: _Floats, phi: _Floats) -> None:
        r = np.where(rho > 0, phi / np.maximum(rho, 1), np.where(phi > 0, np.inf, 0.0))
        ok = r <= c
        better = ok & ((u > bu) | ((u == bu) & (r < br)))
        best[better], bu[better], br[better], brho[better] = idx, u[better], r[better], rho[better]

    sweep(problem, visit)
    return _solution(problem, best, bu.copy(), bu, br, brho)


def frequent_exact(problem: Problem, t: float) -> Solution:
    """``max u(x)`` over the ``t``-frequent part of ``a^+`` (``|ρ(x, Θ)| ≥ t``), the paper's
    ``L_t`` restriction with a utility objective; ``⊥`` when nothing else is ``t``-frequent."""
    m = problem.m
    best = np.full(m, problem.lattice.size - 1, np.int64)
    bu = np.full(m, -np.inf)
    br, brho = np.zeros(m), np.zeros(m, np.int64)

    def visit(idx: int, lv: _Ints, rho: _Ints, u: _Floats, phi: _Floats) -> None:
        better = (rho >= t) & (u > bu)
        best[better], bu[better], brho[better] = idx, u[better], rho[better]
        br[better] = phi[better] / np.maximum(rho[better], 1)

    sweep(problem, visit)
    return _solution(problem, best, bu.copy(), bu, br, brho)


# -- one record: the chain product as a k-dimensional grid ------------------------------------
def record_rho(problem: Problem, j: int) -> npt.NDArray[np.int64]:
    """``|ρ(x, Θ)|`` for all ``x ∈ a^+`` of distinct record ``j``, as an array of shape
    ``(h_1+1, ..., h_k+1)``: a histogram of meet levels and a k-dimensional prefix sum."""
    ml = meet_levels(problem.leaves[j], problem.theta_leaves, problem.table.hierarchies)
    shape = tuple(h + 1 for h in problem.lattice.heights)
    flat = np.zeros(shape, np.int64)
    np.add.at(flat, tuple(ml.T), problem.theta_weights)
    for ax in range(len(shape)):
        flat = np.cumsum(flat, axis=ax)
    return flat


def _record_grids(problem: Problem, j: int) -> tuple[npt.NDArray[np.float64], ...]:
    shape = tuple(h + 1 for h in problem.lattice.heights)
    D, W = problem.measures.per_record(problem.leaves[j : j + 1])
    u = np.zeros(shape)
    phi = np.zeros(shape)
    for i in range(len(shape)):
        sh = [1] * len(shape)
        sh[i] = shape[i]
        u = u + D[i][0].reshape(sh)
        phi = phi + W[i][0].reshape(sh)
    rho = record_rho(problem, j).astype(np.float64)
    f = problem.measures.f(rho, float(problem.theta_size), u, phi)
    return u, phi, rho, f


def aggregate_enumerate_record(problem: Problem, j: int) -> tuple[tuple[int, ...], float]:
    """Exhaustive ``argmax f`` over ``a^+`` of one record (first in lexicographic order)."""
    f = _record_grids(problem, j)[3]
    flat = int(np.argmax(f))
    return tuple(int(v) for v in np.unravel_index(flat, f.shape)), float(f.ravel()[flat])


# -- Fujishige–Wolfe minimum-norm point for submodular minimisation --------------------------
def min_norm_point_sfm(
    h: Callable[[npt.NDArray[np.bool_]], float],
    n: int,
    *,
    max_iter: int = 10_000,
    tol: float = 1e-10,
) -> npt.NDArray[np.bool_]:
    """Minimise a submodular ``h`` (``h(∅)=0``) over ``2^[n]`` (Fujishige–Wolfe); returns the
    best set among the level sets of the min-norm point, each evaluated exactly."""

    def greedy(
        wt: npt.NDArray[np.float64],
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
        order = np.argsort(wt, kind="stable")
        q = np.zeros(n)
        s = np.zeros(n, bool)
        prev = 0.0
        for v in order:
            s[v] = True
            cur = h(s)
            q[v] = cur - prev
            prev = cur
        return q, order

    if n == 0:
        return np.zeros(0, bool)
    x, _ = greedy(np.zeros(n))
    pts = [x.copy()]
    lam = np.array([1.0])
    scale = max(1.0, float(np.abs(x).max()))
    for _ in range(max_iter):
        q, _ = greedy(x)
        if x @ x <= x @ q + tol * scale * scale:
            break
        pts.append(q)
        lam = np.append(lam, 0.0)
        while True:  # minor cycle: affine minimiser of the current corral
            P = np.array(pts)
            G = P @ P.T
            k = len(pts)
            A = np.zeros((k + 1, k + 1))
            A[:k, :k] = G
            A[:k, k] = 1.0
            A[k, :k] = 1.0
            rhs = np.zeros(k + 1)
            rhs[k] = 1.0
            alpha = np.linalg.lstsq(A, rhs, rcond=None)[0][:k]
            if (alpha > tol).all():
                lam = alpha
                break
            neg = alpha <= tol
            with np.errstate(divide="ignore", invalid="ignore"):
                ratios = np.where(neg, lam / (lam - alpha), np.inf)
            step = float(np.min(ratios[neg])) if neg.any() else 1.0
            lam = lam + step * (alpha - lam)
            keep = lam > tol
            pts = [p for p, kk in zip(pts, keep, strict=True) if kk]
            lam = lam[keep] / lam[keep].sum()
        x = np.array(pts).T @ lam
    order = np.argsort(x, kind="stable")
    best = np.zeros(n, bool)
    best_val = h(best)
    s = np.zeros(n, bool)
    for v in order:  # level sets {x ≤ x_v}
        s[v] = True
        val = h(s)
        if val < best_val - 1e-12 * max(1.0, abs(best_val)):
            best, best_val = s.copy(), val
    return best


def aggregate_polynomial(problem: Problem, j: int) -> tuple[tuple[int, ...], float]:
    """Theorem 1 for one record: maximise the supermodular ``f^a`` over ``a^+`` through the
    ring-family reduction (§II-B.3) and Fujishige–Wolfe minimisation of ``−ḡ``.

    Evaluations of ``f`` use ``|ρ|`` from :func:`record_rho` (polynomial: a histogram of
    meet levels and prefix sums, ``O(|Θ|k + |a^+|)``); the solver itself visits polynomially
    many sets (per major cycle ``|J|+1`` evaluations)."""
    u, phi, rho, f = _record_grids(problem, j)
    heights = problem.lattice.heights
    elems = [(i, lv) for i, hh in enumerate(heights) for lv in range(1, hh + 1)]
    n = len(elems)
    fmax_bound = problem.measures.lam / problem.measures.phi0 + problem.measures.u_max() ** (
        problem.measures.kappa
    )
    K = 2.0 * fmax_bound + 1.0
    attr = np.array([e[0] for e in elems], np.int64)
    lvl = np.array([e[1] for e in elems], np.int64)

    def level_of(mask: npt.NDArray[np.bool_]) -> tuple[int, ...]:
        out = [0] * len(heights)
        for a, lv in zip(attr[mask], lvl[mask], strict=True):
            out[int(a)] = max(out[int(a)], int(lv))
        return tuple(out)

    def closure_size(lv: tuple[int, ...]) -> int:
        return int(sum(lv))

    f0 = float(f[(0,) * len(heights)])

    def neg_gbar(mask: npt.NDArray[np.bool_]) -> float:
        lv = level_of(mask)
        gbar = float(f[lv]) - K * (closure_size(lv) - int(mask.sum()))
        return -(gbar - f0)

    best = min_norm_point_sfm(neg_gbar, n)
    lv = level_of(best)
    return lv, float(f[lv])


# -- Algorithm 1 (Theorem 2) -----------------------------------------------------------------
def _chain_cut(
    x: npt.NDArray[np.float64], T: npt.NDArray[np.float64], attr: npt.NDArray[np.int64], k: int
) -> tuple[npt.NDArray[np.float64], float]:
    """The linear function of the maximal chain consistent with ``x`` (sorted decreasingly;
    ties by attribute then level so the chain stays in the ring family): ``T̂(x) = T(0) + y·x``."""
    order = sorted(range(len(x)), key=lambda e: (-x[e], e))
    cur = [0] * k
    prev = float(T[tuple(cur)])
    y = np.zeros(len(x))
    for e in order:
        cur[int(attr[e])] += 1
        val = float(T[tuple(cur)])
        y[e] = val - prev
        prev = val
    return y, float(T[(0,) * k])


def _linearize(
    grid: npt.NDArray[np.float64], elems: list[tuple[int, int]], k: int
) -> tuple[npt.NDArray[np.float64], float]:
    """``grid`` as a linear function of the chain variables ``x_(i,l)``: (coefficients, value
    at the all-zero level vector)."""
    c0 = float(grid[tuple([0] * k)])
    coef = np.zeros(len(elems))
    for e, (i, lv) in enumerate(elems):
        a = [0] * k
        b = [0] * k
        a[i], b[i] = lv, lv - 1
        coef[e] = float(grid[tuple(a)] - grid[tuple(b)])
    return coef, c0


def _layer_lp(
    cu: npt.NDArray[np.float64],
    mono: list[npt.NDArray[np.float64]],
    cphi: npt.NDArray[np.float64],
    phi_bound: float,
    need: float,
    rho: npt.NDArray[np.float64],
    attr: npt.NDArray[np.int64],
    k: int,
) -> npt.NDArray[np.float64] | None:
    """One layer's LP relaxation (maximise utility with risk ≤ ``phi_bound``), tightened by
    chain cuts until the support bound ``need`` holds; None if the LP is infeasible."""
    n = cu.size
    cuts: list[npt.NDArray[np.float64]] = []
    rhs_cuts: list[float] = []
    x = None
    for _ in range(200):
        A = [*mono, cphi, *[-cc for cc in cuts]]
        b = [0.0] * len(mono) + [phi_bound] + [-(r) for r in rhs_cuts]
        res = linprog(-cu, A_ub=np.array(A), b_ub=np.array(b), bounds=[(0, 1)] * n, method="highs")
        if res.status != 0:
            return None
        x = res.x
        y, t0 = _chain_cut(x, rho, attr, k)
        if t0 + y @ x >= need - 1e-9 * max(1.0, need):
            break
        cuts.append(y)
        rhs_cuts.append(need - t0)
    return x


def approx_threshold(
    problem: Problem,
    j: int,
    c: float,
    *,
    eps: float = 0.5,
    sigma1: float = 0.5,
    sigma2: float = 2.0,
    rng: RandomSource,
    max_rounds: int = 200,
) -> tuple[tuple[int, ...], dict[str, float]]:
    """Algorithm 1 Approx(a, ε, θ, σ1, σ2) for distinct record ``j`` and risk threshold ``c``.

    Returns the level vector and ``{"u", "risk", "layers"}``. Risk may exceed ``c`` by the
    factor ``σ2(1+ε)/σ1`` of Theorem 2; if no layer yields a rounding within the step-7
    bounds after ``max_rounds`` tries, ``⊥`` (risk 0) is returned."""
    c = check_positive("c", c)
    eps = check_positive("eps", eps)
    sigma1 = check_probability("sigma1", sigma1)
    sigma2 = check_positive("sigma2", sigma2)
    if sigma2 <= 1:
        raise InvalidParameterError("sigma2", sigma2, "> 1")
    max_rounds = check_int("max_rounds", max_rounds, minimum=1)
    heights = problem.lattice.heights
    k = len(heights)
    u, phi, rho, _ = _record_grids(problem, j)
    elems = [(i, lv) for i, hh in enumerate(heights) for lv in range(1, hh + 1)]
    attr = np.array([e[0] for e in elems], np.int64)
    n = len(elems)
    top = tuple(heights)
    cu, u0 = _linearize(u, elems, k)
    cphi, phi_0 = _linearize(phi, elems, k)
    pos = phi[phi > 0]
    if pos.size == 0:
        return top, {"u": float(u[top]), "risk": 0.0, "layers": 0}
    phi_l, phi_u = float(pos.min()), float(phi.max())
    U = max(1, math.ceil(math.log(phi_u / phi_l) / math.log1p(eps)))
    # chain monotonicity x_(i,l) >= x_(i,l+1): -x_(i,l) + x_(i,l+1) <= 0
    mono = []
    for e in range(n - 1):
        if attr[e] == attr[e + 1]:
            row = np.zeros(n)
            row[e], row[e + 1] = -1.0, 1.0
            mono.append(row)
    best_lv, best_u = top, float(u[top])
    layers = 0
    for i in range(1, U + 1):
        tau_prev, tau = phi_l * (1 + eps) ** (i - 1), phi_l * (1 + eps) ** i
        need = tau_prev / c
        x = _layer_lp(cu, mono, cphi, tau - phi_0, need, rho, attr, k)
        if x is None:
            continue
        layers += 1
        for _ in range(max_rounds):  # randomized rounding RR
            lam = float(rng.uniform(1)[0])
            lv = [0] * k
            for e in range(n):
                if x[e] > lam:
                    lv[int(attr[e])] += 1
            lvt = tuple(lv)
            if rho[lvt] >= sigma1 * need and phi[lvt] <= sigma2 * tau:
                if u[lvt] > best_u:
                    best_lv, best_u = lvt, float(u[lvt])
                break
    risk = float(phi[best_lv] / max(rho[best_lv], 1.0))
    return best_lv, {"u": best_u, "risk": risk, "layers": float(layers)}


def enumerate_levels(heights: tuple[int, ...]) -> list[tuple[int, ...]]:
    return list(itertools.product(*[range(h + 1) for h in heights]))
