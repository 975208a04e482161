"""The KL-divergence utility of CELS (Hong et al., TKDE 2015, §2.2 eq. 2, §3.2.4 eq. 6 and
Appendix B), solved as the paper's piecewise-linear LP.

For a fixed output size |O|, minimising eq. (2) is the separable concave maximisation
(Appendix B.1, eq. 9)::

    max Σ_i c_i · ln(x_i + 1)   s.t.  M x ≤ b,  Σ_i x_i = |O|,  x ≥ 0.

Appendix B.2 approximates each ln(x_i + 1) on [0, |O|] by the convex combination of its values
at K breakpoints a_1 < … < a_K (the "λ-form": nK weights, n convexity rows). We solve the
equivalent *incremental* form — x_i = Σ_s d_is with 0 ≤ d_is ≤ a_{s+1} − a_s and objective
slopes (ln(a_{s+1}+1) − ln(a_s+1)) / (a_{s+1} − a_s) — which for a concave objective has the
same optimum (the slopes decrease, so an optimal LP solution fills segments in order) with
n(K−1) variables and no convexity rows; ``form="lambda"`` is the paper's λ-form, kept to
test the equivalence. Breakpoints: ``geometric`` (ours, default: a_s + 1 geometric from 1 to
|O| + 1, i.e. equal steps of ln(x + 1) — most x_i are small, where ln is most curved) or
``uniform`` (equally spaced, the paper's Fig. 7). HiGHS (scipy.optimize.linprog) solves the
LP; :func:`solve_kl_exact` solves the concave programme itself (scipy trust-constr, small
instances) to measure the approximation gap (:func:`kl_gap_table`).

Rounding (the paper floors, Appendix B.2): ⌊x⌋, an exact repair of any constraint the LP's
feasibility tolerance left marginally violated, then a greedy fill — largest marginal gain
c_i/(x_i+1) first — while every holder has slack, until Σ x = |O| or nothing fits.

Privacy bound: CELS Theorem 2 uses b = min(ε/2, ln 1/(1−δ)) (:func:`cels_bound`); the factor
1/2 covers Case (3) neighbours (one user's log *replaced*), see docs/privacy/cels.md.
"""

from __future__ import annotations

import math
import time
from enum import StrEnum
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from scipy.optimize import Bounds, LinearConstraint, linprog, minimize

from searchveil.errors import InternalError, InvalidParameterError
from searchveil.release.ump.solvers import Solution, greedy_fill, repair
from searchveil.validate import check_int, check_positive, check_probability, parse_choice


class BreakpointSpacing(StrEnum):
    """How the K breakpoints of the piecewise-linear KL objective are spaced (Appendix B)."""

    GEOMETRIC = "geometric"
    UNIFORM = "uniform"


class KLMethod(StrEnum):
    """KL-objective solvers."""

    PWL_LP = "pwl-lp"


def cels_bound(epsilon: float, delta: float) -> float:
    """``b = min(ε/2, ln 1/(1−δ))`` — CELS Theorem 2 (add/remove *and* replace neighbours)."""
    eps = check_positive("epsilon", epsilon)
    dl = check_probability("delta", delta)
    return min(eps / 2.0, -math.log1p(-dl))


def breakpoints(
    output_size: float, k: int, kind: BreakpointSpacing | str = BreakpointSpacing.GEOMETRIC
) -> npt.NDArray[np.float64]:
    """K breakpoints a_1 = 0 < … < a_K = |O| on [0, |O|]."""
    check_int("breakpoints", k, minimum=2)
    kind = parse_choice("breakpoint_spacing", kind, BreakpointSpacing)
    top = float(output_size)
    if top <= 0:
        raise InvalidParameterError("output_size", output_size, "a number > 0")
    if kind == "uniform":
        return np.linspace(0.0, top, k)
    a = np.geomspace(1.0, top + 1.0, k) - 1.0  # equal steps of ln(x + 1)
    a[0], a[-1] = 0.0, top
    return a


def kl_objective(c: npt.NDArray[Any], x: npt.NDArray[Any]) -> float:
    """Σ c_i ln(x_i + 1) (the quantity eq. 9 maximises)."""
    return float(np.dot(np.asarray(c, dtype=np.float64), np.log1p(np.asarray(x, dtype=float))))


def max_output_size(m: sp.csr_matrix, b: float) -> float:
    """|𝕆|: the LP optimum of max Σ x s.t. M x ≤ b (Appendix B.1, relaxed)."""
    n = m.shape[1]
    res = linprog(
        -np.ones(n), A_ub=m, b_ub=np.full(m.shape[0], b), bounds=(0, None), method="highs"
    )
    if res.status != 0:
        raise InternalError(f"HiGHS LP failed: {res.message}")
    return float(-res.fun)


def _check(m: sp.csr_matrix, c: npt.NDArray[Any], output_size: float) -> None:
    if c.shape[0] != m.shape[1]:
        raise InvalidParameterError("c", c.shape, f"one count per pair ({m.shape[1]})")
    check_positive("output_size", output_size)


class LpForm(StrEnum):
    """The two equivalent piecewise-linear LPs (module docstring)."""

    INCREMENTAL = "incremental"
    LAMBDA = "lambda"


class _Lp(NamedTuple):
    """One form of the PWL LP: x = ``expand`` @ variables, max Σ c·(PWL ln) ⇔ min ``cost``."""

    cost: npt.NDArray[np.floating[Any]]
    expand: sp.csr_matrix
    a_eq: sp.csr_matrix
    b_eq: Any
    bounds: Any


def _incremental_lp(
    m: sp.csr_matrix, c: npt.NDArray[np.float64], a: npt.NDArray[np.float64], size: float
) -> _Lp:
    """The incremental form: variable (i, s) = d_is at column i * segs + s, 0 ≤ d_is ≤ width_s."""
    width = np.diff(a)
    slope = np.diff(np.log1p(a)) / width
    n, segs = m.shape[1], width.size
    expand = sp.kron(sp.identity(n, format="csr"), np.ones((1, segs)), format="csr")
    ub = np.tile(width, n)
    a_eq = sp.csr_matrix(np.ones((1, n * segs)))
    return _Lp(-np.kron(c, slope), expand, a_eq, [size], np.c_[np.zeros_like(ub), ub])


def _lambda_lp(
    m: sp.csr_matrix, c: npt.NDArray[np.float64], a: npt.NDArray[np.float64], size: float
) -> _Lp:
    """The paper's λ-form (Appendix B eq. 10): x_i = Σ_s a_s w_is, Σ_s w_is = 1, w ≥ 0."""
    n, k = m.shape[1], a.size
    expand = sp.kron(sp.identity(n, format="csr"), a[None, :], format="csr")
    conv = sp.kron(sp.identity(n, format="csr"), np.ones((1, k)), format="csr")
    a_eq = sp.vstack([sp.csr_matrix(np.tile(a, n)[None, :]), conv], format="csr")
    return _Lp(-np.kron(c, np.log1p(a)), expand, a_eq, np.r_[size, np.ones(n)], (0, 1))


def solve_kl_pwl(
    m: sp.csr_matrix,
    b: float,
    c: npt.NDArray[Any],
    output_size: float,
    *,
    k: int = 33,
    spacing: str = "geometric",
    form: LpForm | str = LpForm.INCREMENTAL,
) -> tuple[npt.NDArray[np.float64], float]:
    """The PWL LP; returns (continuous x, PWL objective value). ``form``: the incremental form
    (default) or the paper's λ-form, kept to test that the two give the same optimum."""
    form = parse_choice("form", form, LpForm)
    m = sp.csr_matrix(m)
    c = np.asarray(c, dtype=np.float64)
    _check(m, c, output_size)
    a = breakpoints(output_size, k, spacing)
    build = _incremental_lp if form == LpForm.INCREMENTAL else _lambda_lp
    lp = build(m, c, a, float(output_size))
    res = linprog(
        lp.cost,
        A_ub=(m @ lp.expand).tocsr(),
        b_ub=np.full(m.shape[0], b),
        A_eq=lp.a_eq,
        b_eq=lp.b_eq,
        bounds=lp.bounds,
        method="highs",
    )
    if res.status == 2:
        raise InvalidParameterError(
            "output_size", output_size, "at most |𝕆|, the largest feasible output size"
        )
    if res.status != 0:
        raise InternalError(f"HiGHS LP failed: {res.message}")
    x = np.asarray(lp.expand @ res.x).ravel()
    return x, float(-res.fun)


def solve_kl_exact(
    m: sp.csr_matrix,
    b: float,
    c: npt.NDArray[Any],
    output_size: float,
    *,
    start: npt.NDArray[np.float64] | None = None,
    maxiter: int = 3000,
) -> tuple[npt.NDArray[np.float64], float]:
    """The concave programme (eq. 9, relaxed) solved directly with scipy's trust-constr —
    a reference for small instances (dense Hessian-free; n up to a few hundred)."""
    m = sp.csr_matrix(m)
    c = np.asarray(c, dtype=np.float64)
    _check(m, c, output_size)
    n = m.shape[1]
    x0 = start if start is not None else solve_kl_pwl(m, b, c, output_size, k=64)[0]

    def f(x: npt.NDArray[np.float64]) -> float:
        return -float(np.dot(c, np.log1p(np.maximum(x, -0.999))))

    def g(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return -c / (1.0 + np.maximum(x, -0.999))

    def h(x: npt.NDArray[np.float64], v: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return c / (1.0 + np.maximum(x, -0.999)) ** 2 * v

    cons = [
        LinearConstraint(m.toarray(), -np.inf, np.full(m.shape[0], b)),
        LinearConstraint(np.ones((1, n)), float(output_size), float(output_size)),
    ]
    res = minimize(
        f,
        x0,
        jac=g,
        hessp=h,
        method="trust-constr",
        constraints=cons,
        bounds=Bounds(0, np.inf),
        options={"maxiter": maxiter, "gtol": 1e-10, "xtol": 1e-12, "verbose": 0},
    )
    x = np.maximum(res.x, 0.0)
    return x, kl_objective(c, x)


def kl_gap_table(
    m: sp.csr_matrix,
    b: float,
    c: npt.NDArray[Any],
    output_size: float,
    ks: tuple[int, ...] = (3, 5, 9, 17, 33, 65),
    *,
    spacing: str = "geometric",
) -> dict[str, Any]:
    """Approximation gap of the PWL LP vs K: the true objective Σ c ln(x+1) at the LP's x, and
    its relative gap to the exact optimum (trust-constr, started at the best PWL point)."""
    rows = []
    best_x: npt.NDArray[np.float64] | None = None
    best = -np.inf
    for k in ks:
        t0 = time.perf_counter()
        x, approx = solve_kl_pwl(m, b, c, output_size, k=k, spacing=spacing)
        true = kl_objective(c, x)
        rows.append(
            {"K": k, "pwl_objective": approx, "true_objective": true,
             "seconds": time.perf_counter() - t0}
        )  # fmt: skip
        if true > best:
            best, best_x = true, x
    ex, exact = solve_kl_exact(m, b, c, output_size, start=best_x)
    exact = max(exact, best) if np.all(m @ ex <= b + 1e-7) else best
    for row in rows:
        row["relative_gap"] = (exact - row["true_objective"]) / abs(exact) if exact else 0.0
    return {"exact_objective": exact, "spacing": spacing, "rows": rows}


def solve_kl(
    m: sp.csr_matrix,
    b: float,
    c: npt.NDArray[Any],
    *,
    output_size: int | None = None,
    output_share: float | None = None,
    k: int = 33,
    spacing: str = "geometric",
) -> Solution:
    """Integer counts minimising the KL utility loss (CELS eq. 2) for a fixed |O|, given either
    ``output_size`` or ``output_share`` ∈ (0, 1] of |𝕆| (the LP maximum output size)."""
    t0 = time.perf_counter()
    m = sp.csr_matrix(m)
    c = np.asarray(c, dtype=np.float64)
    info: dict[str, Any] = {"breakpoints": k, "spacing": spacing}
    if (output_size is None) == (output_share is None):
        raise InvalidParameterError(
            "output_size/output_share", (output_size, output_share), "exactly one of them"
        )
    lam = max_output_size(m, b)
    info["max_output_size_lp"] = lam
    if output_share is not None:
        if not 0 < output_share <= 1:
            raise InvalidParameterError("output_share", output_share, "a share in (0, 1]")
        output_size = int(math.floor(output_share * lam))
    assert output_size is not None
    check_int("output_size", output_size, minimum=0)
    if output_size > lam * (1 + 1e-9):
        raise InvalidParameterError(
            "output_size", output_size, f"at most |𝕆| = {lam:.6g} for this (ε, δ)"
        )
    info["requested_output_size"] = output_size
    if output_size == 0 or m.shape[1] == 0:
        x = np.zeros(m.shape[1], dtype=np.int64)
        return Solution(x, "pwl-lp", 0.0, "empty", time.perf_counter() - t0, info)
    xs, approx = solve_kl_pwl(m, b, c, output_size, k=k, spacing=spacing)
    info["pwl_objective"] = approx
    info["lp_true_objective"] = kl_objective(c, xs)
    x = repair(m, np.floor(xs + 1e-9).astype(np.int64), b)
    info["floor_size"] = int(x.sum())
    missing = output_size - int(x.sum())
    if missing > 0:
        cap = np.ceil(xs - 1e-9).astype(np.int64)
        order = np.argsort(-c / (x + 1.0), kind="stable")
        x = greedy_fill(m, x, b, order=order, cap=np.maximum(cap, x), budget=missing)
        missing = output_size - int(x.sum())
        if missing > 0:
            x = greedy_fill(m, x, b, order=np.argsort(-c / (x + 1.0)), budget=missing)
    info["actual_output_size"] = int(x.sum())
    obj = kl_objective(c, x)
    return Solution(x, "pwl-lp", obj, "optimal LP, rounded", time.perf_counter() - t0, info)


def kl_loss(c: npt.NDArray[Any], x: npt.NDArray[Any]) -> float:
    """CELS eq. (2): Σ c_i/|D| · ln(c_i/|D| · (|O| + n)/(x_i + 1))."""
    c = np.asarray(c, dtype=np.float64)
    x = np.asarray(x, dtype=np.float64)
    pd = c / c.sum()
    return float(np.sum(pd * np.log(pd * (x.sum() + x.size) / (x + 1.0))))
