"""The Laplace threshold (Korolova's Select-Queries; also ZEALOUS' second threshold, and the
selection strategies) and its privacy map: which counts pass ``count + noise > K``, and what
that costs. Only the mechanism-generic part lives here; the papers' own formulas are with
their families (:mod:`searchveil.release.korolova.accounting`,
:mod:`searchveil.release.zealous.accounting`).

``exact_threshold_privacy`` is the tight (ε, δ) for the mechanism
searchveil runs: *discrete* Laplace noise ``P[X=k] ∝ e^{-|k|/b}`` on integer counts, an integer
threshold and the *effective* scale of the exact sampler (derivation in
``docs/privacy/korolova.md``; brute-forced on neighbouring inputs in the tests).

Thresholds: a count ``n`` plus noise ``X`` passes threshold ``K`` when ``n + X > K``. With
integer ``n + X`` this is ``X >= floor(K) + 1 - n``; the keep probability of an item with count
``n`` is ``sf(floor(K) + 1 - n)`` of the discrete Laplace (:func:`discrete_sf`).

The mechanisms that use it (the selection strategies of :mod:`searchveil.mechanisms.selection`,
the releases of :mod:`searchveil.release`, the advisor) import it from here.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.validate import check_int, check_positive, check_probability

__all__ = [
    "SelectionPrivacy",
    "effective_scale",
    "discrete_sf",
    "keep_probability",
    "keep_probability_curve",
    "check_threshold",
    "exact_threshold_privacy",
    "korolova_solve_exact",
]


@dataclass(frozen=True)
class SelectionPrivacy:
    """(ε, δ) of one step, with how it was obtained."""

    epsilon: float
    delta: float
    accounting: str
    detail: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def effective_scale(scale: float) -> float:
    """The scale the exact discrete-Laplace sampler really uses (>= ``scale``)."""
    return DiscreteLaplace(scale=scale).effective_scale


def discrete_sf(k: npt.ArrayLike, b: float) -> npt.NDArray[np.float64]:
    """P[X >= k] for the discrete Laplace of scale ``b`` (closed form, float64)."""
    kk = np.asarray(k, dtype=np.float64)
    p = math.exp(-1.0 / b)
    pos = np.exp(np.maximum(kk, 1.0) * (-1.0 / b)) / (1.0 + p)
    neg = 1.0 - np.exp(np.maximum(1.0 - kk, 1.0) * (-1.0 / b)) / (1.0 + p)
    return np.where(kk >= 1, pos, neg)


def keep_probability(
    n: npt.ArrayLike, *, threshold: float, scale: float, noise: str = "discrete"
) -> npt.NDArray[np.float64]:
    """P[n + noise > threshold] for counts ``n``.

    ``noise="continuous"``: Lap(b), the thesis' Fig 4.1; ``"discrete"``: discrete Laplace of
    scale ``b`` (the scale as given; use :func:`effective_scale` for the sampled one).
    """
    nn = np.asarray(n, dtype=np.float64)
    b = check_positive("scale", scale)
    if noise == "continuous":
        gap = threshold - nn
        return np.where(gap >= 0, 0.5 * np.exp(-gap / b), 1.0 - 0.5 * np.exp(gap / b))
    if noise == "discrete":
        return discrete_sf(math.floor(threshold) + 1 - nn, b)
    raise InvalidParameterError("noise", noise, "'continuous' or 'discrete'")


def keep_probability_curve(
    *, threshold: float, scale: float, n_max: int, noise: str = "continuous"
) -> list[dict[str, float]]:
    """The data of the thesis' Fig 4.1: keep probability for frequencies 0..n_max."""
    n = np.arange(0, check_int("n_max", n_max, minimum=1) + 1)
    p = keep_probability(n, threshold=threshold, scale=scale, noise=noise)
    return [{"frequency": int(a), "keep_probability": float(b)} for a, b in zip(n, p, strict=True)]


def _knapsack_max(values: npt.NDArray[np.float64], total: int) -> float:
    """max Σ values[c_i - 1] over multisets of parts 1 <= c_i <= len(values), Σ c_i <= total."""
    cmax = values.size
    g = np.zeros(total + 1, dtype=np.float64)
    for s in range(1, total + 1):
        k = min(s, cmax)
        g[s] = max(g[s - 1], float(np.max(values[:k] + g[s - 1 :: -1][:k])))
    return float(g[total])


def check_threshold(K: float, d: int, distinct: bool) -> float:
    K = check_positive("K", K)
    need = 1 if distinct else d
    if K < need:
        raise InvalidParameterError(
            "K",
            K,
            f"K >= {need} (Theorem 3 needs K >= "
            + ("1 when a user adds at most 1 per query)" if distinct else "d)"),
        )
    return K


def exact_threshold_privacy(
    *, d: int, K: float, b: float, distinct: bool = False, scale_is_effective: bool = False
) -> SelectionPrivacy:
    """Tight (ε, δ) of Select-Queries with discrete Laplace noise (add/remove one user).

    A user adds counts c_q >= 1 (c_q <= 1 when ``distinct``) with Σ c_q <= d. With
    T = floor(K) + 1 and π(c) = P[X >= T - c] (a query held by this user only, count c):

    * removing the user: the worst output ratio is e^{ε1} with
      ε1 = max over such (c_q) of Σ h(c_q),  h(c) = max(c/b, -ln(1 - π(c)))
      (c/b: a query of huge count dropped; -ln(1-π(c)): a query only this user holds, dropped);
    * adding the user: outputs releasing none of the user's private queries have ratio
      <= e^{d/b} <= e^{ε1}; the rest has probability 1 - Π(1 - π(c_q)), so
      δ = max over (c_q) of 1 - Π(1 - π(c_q)) — attained (it is a lower bound for every ε).

    Both maxima are small knapsack problems solved exactly. ``b`` is the effective sampled scale
    unless ``scale_is_effective`` is False, in which case it is converted first.
    """
    d = check_int("d", d, minimum=1)
    b = check_positive("b", b)
    K = check_threshold(K, d, distinct)
    if not scale_is_effective:
        b = effective_scale(b)
    T = math.floor(K) + 1
    cmax = 1 if distinct else d
    c = np.arange(1, cmax + 1, dtype=np.float64)
    pi = discrete_sf(T - c, b)
    f = -np.log1p(-pi)
    h = np.maximum(c / b, f)
    if distinct:
        eps = d * float(h[0])
        big_f = d * float(f[0])
    else:
        eps = _knapsack_max(h, d)
        big_f = _knapsack_max(f, d)
    delta = float(-math.expm1(-big_f))
    return SelectionPrivacy(
        epsilon=eps,
        delta=delta,
        accounting="exact",
        detail={
            "noise": "discrete_laplace",
            "effective_scale": b,
            "integer_threshold_T": T,
            "keep_prob_single_user_query": float(pi[-1]),
            "distinct": distinct,
        },
    )


def korolova_solve_exact(
    *, epsilon: float, delta: float, d: int, distinct: bool = False
) -> dict[str, Any]:
    """The smallest integer K (b = d/ε, the effective scale) whose *exact* discrete (ε, δ) for
    Select-Queries is within (epsilon, delta). Never larger than ceil of the paper's K."""
    eps = check_positive("epsilon", epsilon)
    dl = check_probability("delta", delta)
    d = check_int("d", d, minimum=1)
    b = d / eps
    b_eff = effective_scale(b)

    def ok(k: int) -> bool:
        pr = exact_threshold_privacy(d=d, K=k, b=b_eff, distinct=distinct, scale_is_effective=True)
        return pr.epsilon <= eps * (1 + 1e-12) and pr.delta <= dl

    lo = 1 if distinct else d
    # bracket: the continuous-noise K of Korolova's Table 4.1, d(1 - ln(2δ/d)/ε), is never
    # smaller than the exact one
    hi = max(lo, math.ceil(d * (1.0 - math.log(2.0 * dl / d) / eps)))
    grow = 0
    while not ok(hi):
        hi = hi * 2 + 1
        grow += 1
        if grow > 40:
            raise InvalidParameterError(
                "epsilon", epsilon, "a budget for which some threshold K works (try larger ε)"
            )
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    pr = exact_threshold_privacy(d=d, K=hi, b=b_eff, distinct=distinct, scale_is_effective=True)
    return {"K": hi, "b": b, "effective_scale": b_eff, "epsilon": pr.epsilon, "delta": pr.delta}
