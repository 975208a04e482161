"""Privacy auditing: empirical lower bounds on ε from repeated runs on neighbouring inputs.

A mechanism M is (ε, δ)-DP only if, for every event E and neighbours D, D',
``P[M(D) ∈ E] ≤ e^ε · P[M(D') ∈ E] + δ`` (and symmetrically). Running M many times on D and D'
and bounding both probabilities with exact (Clopper–Pearson) confidence intervals at level
``1 − alpha`` gives, with probability ≥ 1 − 2·alpha, the lower bound

    ε_lb = max( ln((p̲_D − δ) / p̄_D'), ln((p̲_D' − δ) / p̄_D),
                ln((1 − p̄_D − δ) / (1 − p̲_D')), ln((1 − p̄_D' − δ) / (1 − p̲_D)) ).

An audit *fails* when ε_lb exceeds the claimed ε — a proof that the implementation (or its
accounting) is broken; passing is evidence, not proof. ``searchveil.audit`` is used by the
test suite (``tests/audit``, marked ``audit``) and is public so data holders can audit their
own configurations.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from scipy import stats


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """Exact two-sided (1 − alpha) interval for a binomial proportion."""
    lo = (
        0.0
        if successes == 0
        else float(stats.beta.ppf(alpha / 2, successes, trials - successes + 1))
    )
    hi = (
        1.0
        if successes == trials
        else float(stats.beta.ppf(1 - alpha / 2, successes + 1, trials - successes))
    )
    return lo, hi


@dataclass(frozen=True)
class AuditResult:
    epsilon_claimed: float
    delta_claimed: float
    epsilon_lower_bound: float
    p_d: float
    p_dprime: float
    trials: int

    @property
    def passed(self) -> bool:
        return self.epsilon_lower_bound <= self.epsilon_claimed * (1 + 1e-12)


def _ln_ratio(num: float, den: float) -> float:
    if num <= 0:
        return -math.inf
    if den <= 0:
        return math.inf
    return math.log(num / den)


def epsilon_lower_bound(
    hits_d: int, hits_dprime: int, trials: int, *, delta: float, alpha: float = 1e-6
) -> float:
    lo1, hi1 = clopper_pearson(hits_d, trials, alpha)
    lo2, hi2 = clopper_pearson(hits_dprime, trials, alpha)
    return max(
        _ln_ratio(lo1 - delta, hi2),
        _ln_ratio(lo2 - delta, hi1),
        _ln_ratio(1 - hi1 - delta, 1 - lo2),
        _ln_ratio(1 - hi2 - delta, 1 - lo1),
    )


def audit_event(
    sample_d: Callable[[int], int],
    sample_dprime: Callable[[int], int],
    *,
    trials: int,
    epsilon: float,
    delta: float,
    alpha: float = 1e-6,
) -> AuditResult:
    """``sample_x(n)`` runs the mechanism n times on its input and returns how many outputs
    fall in the audited event."""
    a = int(sample_d(trials))
    b = int(sample_dprime(trials))
    lb = epsilon_lower_bound(a, b, trials, delta=delta, alpha=alpha)
    return AuditResult(epsilon, delta, lb, a / trials, b / trials, trials)
