"""Privacy maps and the parameter advisor for the histogram releases.

This module holds the *accounting* of Korolova's Release-Data (thesis ch.4, Theorem 3, §4.5,
§4.8) and of ZEALOUS (Götz et al. TKDE 2012, §4, Theorems 2 and 3, Proposition 4), kept apart
from the code that runs the mechanisms (``searchveil.release``) so that any engine (Polars,
Spark) reuses it. Two accountings are offered everywhere:

``paper``
    The papers' formulas, verbatim, for *continuous* Laplace noise. They reproduce the printed
    tables (Korolova Table 4.1; Götz Tables 1 and 2) and are what ``searchveil params`` solves.

``exact``
    The tight (ε, δ) for the mechanism searchveil actually runs: *discrete* Laplace noise
    ``P[X=k] ∝ e^{-|k|/b}`` on integer counts, an integer threshold, and the *effective* noise
    scale the exact sampler uses (the requested scale rounded up to a rational). Derivation in
    ``docs/privacy/korolova.md`` and ``docs/privacy/zealous.md``; checked against brute force on
    neighbouring inputs in the tests. With an integer threshold it is never larger than the
    paper's bound.

Thresholds: a count ``n`` plus noise ``X`` passes threshold ``K`` when ``n + X > K``. With
integer ``n + X`` this is ``X >= floor(K) + 1 - n``; the keep probability of an item with count
``n`` is ``sf(floor(K) + 1 - n)`` of the discrete Laplace.
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
    "korolova_alpha",
    "korolova_paper_selection",
    "korolova_paper_privacy",
    "korolova_solve_paper",
    "korolova_solve_improved",
    "korolova_solve_exact",
    "exact_threshold_privacy",
    "keep_probability",
    "keep_probability_curve",
    "zealous_lambda",
    "zealous_tau_prime",
    "zealous_theorem3_delta",
    "zealous_theorem2_tau_prime",
    "zealous_theorem2_delta",
    "zealous_thesis_delta",
    "zealous_optimal_tau",
    "zealous_exact_privacy",
    "zealous_exact_probabilistic",
    "effective_scale",
]


# ----------------------------------------------------------------------------------------------
# shared pieces
# ----------------------------------------------------------------------------------------------


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


def _discrete_sf(k: npt.ArrayLike, b: float) -> npt.NDArray[np.float64]:
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
        return _discrete_sf(math.floor(threshold) + 1 - nn, b)
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


# ----------------------------------------------------------------------------------------------
# Korolova Release-Data
# ----------------------------------------------------------------------------------------------


def korolova_alpha(K: float, b: float) -> float:
    """α = max(e^{1/b}, 1 + 1/(2e^{(K-1)/b} - 1)) (Theorem 3)."""
    x = (K - 1.0) / b
    second = 1.0 + 1.0 / (2.0 * math.exp(x) - 1.0) if x < 700 else 1.0
    return max(math.exp(1.0 / b), second)


def _check_K(K: float, d: int, distinct: bool) -> float:
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


def korolova_paper_selection(
    *, d: int, K: float, b: float, distinct: bool = False
) -> dict[str, float]:
    """Select-Queries under the paper's accounting (Lemma 1 and §4.8), continuous Lap(b).

    ``distinct``: each user adds at most 1 to a query's count (distinct queries); the same
    proof with M(y_i, D2) <= 1 gives δ = (d/2)e^{(1-K)/b} (needs K >= 1).
    """
    d = check_int("d", d, minimum=1)
    b = check_positive("b", b)
    K = _check_K(K, d, distinct)
    alpha = korolova_alpha(K, b)
    eps = d * math.log(alpha)
    if distinct:
        delta = 0.5 * d * math.exp((1.0 - K) / b)
        improved = delta
    else:
        delta = 0.5 * d * math.exp((d - K) / b)
        improved = 0.5 * math.exp(-K / b) * (math.exp(d / b) + d - 1)
    return {"alpha": alpha, "epsilon": eps, "delta": delta, "delta_improved": improved}


def korolova_paper_privacy(
    *,
    d: int,
    K: float,
    b: float,
    b_q: float | None,
    d_c: int = 0,
    b_c: float | None = None,
    distinct: bool = False,
) -> dict[str, float]:
    """Theorem 3: ε = d·ln α + d/b_q + d_c/b_c, δ = (d/2)e^{(d-K)/b}; also §4.8's δ.

    ``b_q=None``: Get-Query-Counts skipped; ``b_c=None``: no click counts.
    """
    sel = korolova_paper_selection(d=d, K=K, b=b, distinct=distinct)
    eps_q = 0.0 if b_q is None else d / check_positive("b_q", b_q)
    eps_c = 0.0 if b_c is None else check_int("d_c", d_c, minimum=1) / check_positive("b_c", b_c)
    return {
        "alpha": sel["alpha"],
        "epsilon_select": sel["epsilon"],
        "epsilon_query_counts": eps_q,
        "epsilon_click_counts": eps_c,
        "epsilon": sel["epsilon"] + eps_q + eps_c,
        "delta": sel["delta"],
        "delta_improved": sel["delta_improved"],
    }


def korolova_solve_paper(*, epsilon: float, delta: float, d: int) -> dict[str, float]:
    """§4.5 / Lemma 1 setting (Table 4.1): b = d/ε, K = d(1 - ln(2δ/d)/ε)."""
    eps = check_positive("epsilon", epsilon)
    dl = check_probability("delta", delta)
    d = check_int("d", d, minimum=1)
    b = d / eps
    K = d * (1.0 - math.log(2.0 * dl / d) / eps)
    return {"K": K, "b": b, "alpha_is_exp_1_over_b": korolova_alpha(K, b) <= math.exp(1 / b)}


def korolova_solve_improved(*, epsilon: float, delta: float, d: int) -> dict[str, float]:
    """§4.8: b = d/ε, K = (d/ε)(ln(e^ε + d - 1) - ln(2δ))."""
    eps = check_positive("epsilon", epsilon)
    dl = check_probability("delta", delta)
    d = check_int("d", d, minimum=1)
    b = d / eps
    K = (d / eps) * (math.log(math.exp(eps) + d - 1) - math.log(2.0 * dl))
    return {"K": K, "b": b}


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
    K = _check_K(K, d, distinct)
    if not scale_is_effective:
        b = effective_scale(b)
    T = math.floor(K) + 1
    cmax = 1 if distinct else d
    c = np.arange(1, cmax + 1, dtype=np.float64)
    pi = _discrete_sf(T - c, b)
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
    hi = max(lo, math.ceil(korolova_solve_paper(epsilon=eps, delta=dl, d=d)["K"]))
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


# ----------------------------------------------------------------------------------------------
# ZEALOUS (Götz et al. §4)
# ----------------------------------------------------------------------------------------------


def zealous_lambda(*, epsilon: float, m: int) -> float:
    """Theorem 3 eq. (4) (and Theorem 2 eq. (1)): λ = 2m/ε."""
    return 2.0 * check_int("m", m, minimum=1) / check_positive("epsilon", epsilon)


def zealous_tau_prime(
    *, epsilon: float, delta: float, m: int, tau: int, users: int
) -> dict[str, float]:
    """Theorem 3 eq. (5) with equality: τ' = τ + max(-λ ln(2 - 2e^{-1/λ}), -λ ln(2δ/(U·m/τ)))."""
    dl = check_probability("delta", delta)
    tau = check_int("tau", tau, minimum=1)
    users = check_int("users", users, minimum=1)
    lam = zealous_lambda(epsilon=epsilon, m=m)
    t1 = -lam * math.log(2.0 - 2.0 * math.exp(-1.0 / lam))
    t2 = -lam * math.log(2.0 * dl / (users * m / tau))
    return {"lambda": lam, "tau_prime": tau + max(t1, t2), "term_ratio": t1, "term_delta": t2}


def zealous_theorem3_delta(*, m: int, tau: int, lam: float, tau_prime: float, users: int) -> float:
    """δ of Theorem 3 for given parameters: δ = (U·m/τ)/2 · e^{-(τ'-τ)/λ} (eq. (5), 2nd term)."""
    m = check_int("m", m, minimum=1)
    tau = check_int("tau", tau, minimum=1)
    users = check_int("users", users, minimum=1)
    lam = check_positive("lambda", lam)
    return 0.5 * users * m / tau * math.exp(-(tau_prime - tau) / lam)


def zealous_theorem2_tau_prime(*, epsilon_prime: float, delta_prime: float, m: int) -> float:
    """Theorem 2 eq. (3): τ' = m(1 - ln(2δ'/m)/ε') (with τ = 1, λ = 2m/ε')."""
    eps = check_positive("epsilon_prime", epsilon_prime)
    dl = check_probability("delta_prime", delta_prime)
    m = check_int("m", m, minimum=1)
    return m * (1.0 - math.log(2.0 * dl / m) / eps)


def zealous_theorem2_delta(*, m: int, tau_prime: float, epsilon_prime: float) -> float:
    """δ' solving Theorem 2 eq. (3) with equality: δ' = (m/2)·exp(ε'(1 - τ'/m))."""
    m = check_int("m", m, minimum=1)
    return 0.5 * m * math.exp(check_positive("epsilon_prime", epsilon_prime) * (1 - tau_prime / m))


def zealous_thesis_delta(*, m: int, tau_prime: float, lam: float) -> float:
    """δ' of Götz Table 1: the thesis' Theorem 3 δ with d = m, b = λ, K = τ':
    (m/2)e^{(m-τ')/λ} (= :func:`zealous_theorem2_delta` at ε' = m/λ)."""
    return 0.5 * m * math.exp((m - tau_prime) / check_positive("lambda", lam))


def zealous_optimal_tau(*, epsilon: float, m: int) -> int:
    """Proposition 4: τ = ⌈2m/ε⌉ minimises τ'."""
    return math.ceil(2.0 * check_int("m", m, minimum=1) / check_positive("epsilon", epsilon))


def _zealous_pi(tau: int, lam_eff: float, tau_prime: float) -> float:
    """P[τ + X > τ'] for the discrete Laplace (an item whose count is exactly τ)."""
    return float(_discrete_sf(math.floor(tau_prime) + 1 - tau, lam_eff))


def zealous_exact_privacy(
    *, m: int, tau: int, lam: float, tau_prime: float, scale_is_effective: bool = False
) -> SelectionPrivacy:
    """Exact (ε, δ)-DP of ZEALOUS with discrete noise, add/remove one user.

    A user changes at most m item counts by exactly 1. An item whose count moves inside
    [τ, ∞) releases a noisy count with ratio <= e^{1/λ} (the threshold τ' is post-processing);
    an item that moves from τ-1 to τ is released only with the user, with probability
    π = P[τ + X > τ'], and is dropped with ratio 1/(1-π). Hence
    ε = m·max(1/λ, -ln(1-π)),  δ = 1 - (1-π)^m.
    """
    m = check_int("m", m, minimum=1)
    tau = check_int("tau", tau, minimum=1)
    lam = check_positive("lambda", lam)
    if tau_prime < tau:
        raise InvalidParameterError("tau_prime", tau_prime, f">= tau = {tau}")
    lam_eff = lam if scale_is_effective else effective_scale(lam)
    pi = _zealous_pi(tau, lam_eff, tau_prime)
    h = max(1.0 / lam_eff, -math.log1p(-pi))
    return SelectionPrivacy(
        epsilon=m * h,
        delta=float(-math.expm1(m * math.log1p(-pi))),
        accounting="exact",
        detail={
            "noise": "discrete_laplace",
            "effective_scale": lam_eff,
            "keep_prob_count_tau": pi,
            "neighbours": "add/remove one user",
        },
    )


def zealous_exact_probabilistic(
    *, m: int, tau: int, lam: float, tau_prime: float, users: int, scale_is_effective: bool = False
) -> SelectionPrivacy:
    """Theorem 3's (ε, δ)-probabilistic DP for the discrete mechanism, in the paper's setting
    (a user's history *replaced*, so up to 2m counts change by 1; at most U·m/τ items have
    count exactly τ): ε = 2m·max(1/λ, -ln(1-π)), δ = 1 - (1-π)^{⌊U·m/τ⌋}, π = P[τ+X > τ']."""
    m = check_int("m", m, minimum=1)
    tau = check_int("tau", tau, minimum=1)
    users = check_int("users", users, minimum=1)
    lam = check_positive("lambda", lam)
    if tau_prime < tau:
        raise InvalidParameterError("tau_prime", tau_prime, f">= tau = {tau}")
    lam_eff = lam if scale_is_effective else effective_scale(lam)
    pi = _zealous_pi(tau, lam_eff, tau_prime)
    n_k = (users * m) // tau
    return SelectionPrivacy(
        epsilon=2 * m * max(1.0 / lam_eff, -math.log1p(-pi)),
        delta=float(-math.expm1(n_k * math.log1p(-pi))),
        accounting="exact",
        detail={
            "noise": "discrete_laplace",
            "effective_scale": lam_eff,
            "keep_prob_count_tau": pi,
            "items_at_tau_bound": n_k,
            "neighbours": "one user's history replaced (Götz Thm 3)",
        },
    )
