"""ZEALOUS' accounting (Götz et al., TKDE 2012, §4): λ and τ' for a target (ε, δ) —
Theorem 3 (probabilistic differential privacy, with a public bound U on the users) and the
corrected Theorem 2 ((ε, δ)-indistinguishability), Proposition 4's τ — each in the paper's form
(continuous Laplace) and the exact form for the discrete mechanism searchveil runs
(``docs/privacy/zealous.md``).
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.threshold import SelectionPrivacy, discrete_sf, effective_scale
from searchveil.validate import check_int, check_positive, check_probability

__all__ = [
    "Guarantee",
    "zealous_lambda",
    "zealous_tau_prime",
    "zealous_theorem3_delta",
    "zealous_theorem2_tau_prime",
    "zealous_theorem2_delta",
    "zealous_thesis_delta",
    "zealous_optimal_tau",
    "zealous_exact_privacy",
    "zealous_exact_probabilistic",
]


class Guarantee(StrEnum):
    """Which ZEALOUS guarantee: probabilistic differential privacy (Theorem 3, with a public
    bound U on the users) or (ε, δ)-indistinguishability (Theorem 2, corrected)."""

    PROBABILISTIC = "probabilistic"
    INDISTINGUISHABILITY = "indistinguishability"


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


def _checked_map_inputs(
    m: int, tau: int, lam: float, tau_prime: float, scale_is_effective: bool,
    users: int | None = None,
) -> tuple[int, int, int | None, float, float]:  # fmt: skip
    """The exact maps' checked inputs: ``(m, τ, U, λ as sampled, π = P[τ + X > τ'])``."""
    m = check_int("m", m, minimum=1)
    tau = check_int("tau", tau, minimum=1)
    if users is not None:
        users = check_int("users", users, minimum=1)
    lam = check_positive("lambda", lam)
    if tau_prime < tau:
        raise InvalidParameterError("tau_prime", tau_prime, f">= tau = {tau}")
    lam_eff = lam if scale_is_effective else effective_scale(lam)
    return m, tau, users, lam_eff, _zealous_pi(tau, lam_eff, tau_prime)


def _zealous_pi(tau: int, lam_eff: float, tau_prime: float) -> float:
    """P[τ + X > τ'] for the discrete Laplace (an item whose count is exactly τ)."""
    return float(discrete_sf(math.floor(tau_prime) + 1 - tau, lam_eff))


def _exact_map(
    epsilon: float, at_tau: int, lam_eff: float, pi: float, **detail: Any
) -> SelectionPrivacy:
    """The exact maps' (ε, δ): δ = 1 − (1 − π)^``at_tau``, the chance that one of the
    ``at_tau`` items a neighbour moves from τ − 1 to τ is published (π = P[τ + X > τ'])."""
    return SelectionPrivacy(
        epsilon=epsilon,
        delta=float(-math.expm1(at_tau * math.log1p(-pi))),
        accounting="exact",
        detail={
            "noise": "discrete_laplace",
            "effective_scale": lam_eff,
            "keep_prob_count_tau": pi,
            **detail,
        },
    )


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
    m, tau, _, lam_eff, pi = _checked_map_inputs(m, tau, lam, tau_prime, scale_is_effective)
    h = max(1.0 / lam_eff, -math.log1p(-pi))
    return _exact_map(m * h, m, lam_eff, pi, neighbours="add/remove one user")


def zealous_exact_probabilistic(
    *, m: int, tau: int, lam: float, tau_prime: float, users: int, scale_is_effective: bool = False
) -> SelectionPrivacy:
    """Theorem 3's (ε, δ)-probabilistic DP for the discrete mechanism, in the paper's setting
    (a user's history *replaced*, so up to 2m counts change by 1; at most U·m/τ items have
    count exactly τ): ε = 2m·max(1/λ, -ln(1-π)), δ = 1 - (1-π)^{⌊U·m/τ⌋}, π = P[τ+X > τ']."""
    m, tau, u, lam_eff, pi = _checked_map_inputs(m, tau, lam, tau_prime, scale_is_effective, users)
    assert u is not None
    users = u
    n_k = (users * m) // tau
    return _exact_map(
        2 * m * max(1.0 / lam_eff, -math.log1p(-pi)),
        n_k,
        lam_eff,
        pi,
        items_at_tau_bound=n_k,
        neighbours="one user's history replaced (Götz Thm 3)",
    )
