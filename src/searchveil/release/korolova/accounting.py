"""Korolova's accounting (PhD thesis, Stanford 2012, ch.4): the paper's formulas for
continuous Laplace noise — Lemma 1 and Theorem 3 (Select-Queries' and the whole release's
(ε, δ)), §4.5 / Table 4.1 (K from (ε, δ, d)), §4.8 (the improved δ) — and the solver of one
thresholding step (:func:`solve_threshold`) that :meth:`KorolovaParams.from_budget` uses.

The tight map of the discrete mechanism searchveil runs (``exact`` accounting) is
mechanism-generic and lives in :mod:`searchveil.mechanisms.threshold`.
"""

from __future__ import annotations

import math

from searchveil.mechanisms.threshold import check_threshold, korolova_solve_exact
from searchveil.validate import check_int, check_positive, check_probability

__all__ = [
    "korolova_alpha",
    "korolova_paper_selection",
    "korolova_paper_privacy",
    "korolova_solve_paper",
    "korolova_solve_improved",
    "solve_threshold",
]


def korolova_alpha(K: float, b: float) -> float:
    """α = max(e^{1/b}, 1 + 1/(2e^{(K-1)/b} - 1)) (Theorem 3)."""
    x = (K - 1.0) / b
    second = 1.0 + 1.0 / (2.0 * math.exp(x) - 1.0) if x < 700 else 1.0
    return max(math.exp(1.0 / b), second)


def korolova_paper_selection(
    *, d: int, K: float, b: float, distinct: bool = False
) -> dict[str, float]:
    """Select-Queries under the paper's accounting (Lemma 1 and §4.8), continuous Lap(b).

    ``distinct``: each user adds at most 1 to a query's count (distinct queries); the same
    proof with M(y_i, D2) <= 1 gives δ = (d/2)e^{(1-K)/b} (needs K >= 1).
    """
    d = check_int("d", d, minimum=1)
    b = check_positive("b", b)
    K = check_threshold(K, d, distinct)
    alpha = korolova_alpha(K, b)
    eps = d * math.log(alpha)
    if distinct:
        delta = 0.5 * d * math.exp((1.0 - K) / b)
        improved = delta
    else:
        delta = 0.5 * d * math.exp((d - K) / b)
        improved = 0.5 * math.exp(-K / b) * (math.exp(d / b) + d - 1)
    return {"alpha": alpha, "epsilon": eps, "delta": delta, "delta_improved": improved}


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


def solve_threshold(
    rule: str, *, epsilon: float, delta: float, d: int, distinct: bool
) -> tuple[int, float]:
    """An integer threshold K and noise b for one thresholding step within (ε, δ)."""
    if rule == "exact":
        s = korolova_solve_exact(epsilon=epsilon, delta=delta, d=d, distinct=distinct)
        return int(s["K"]), float(s["b"])
    b = d / epsilon
    if distinct:  # δ = (d/2)e^{(1-K)/b} (union bound with counts <= 1)
        k = 1.0 - b * math.log(2.0 * delta / d)
    elif rule == "paper":
        k = korolova_solve_paper(epsilon=epsilon, delta=delta, d=d)["K"]
    else:
        k = korolova_solve_improved(epsilon=epsilon, delta=delta, d=d)["K"]
    return max(math.ceil(k - 1e-9), 1 if distinct else d), b
