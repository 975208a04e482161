"""Budgets and the one budget check.

A :class:`Budget` is the (ε, δ) a release may spend, given by the caller (there is no default).
:func:`check_budget` is the single place that compares what a mechanism spends (its privacy map,
``params.privacy("exact")``) with a budget — before any noise is drawn — and
:func:`within_budget` the single comparison it uses, with one named relative tolerance
(:data:`BUDGET_TOLERANCE`) for the floating-point rounding of the accounting itself: a budget
solved to be spent exactly (``from_budget``) must not be refused because its ε is recomputed as a
sum of shares a few ulps above the total.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from searchveil.errors import BudgetExceededError
from searchveil.validate import check_positive, check_probability

__all__ = ["Accounting", "BUDGET_TOLERANCE", "Budget", "within_budget", "check_budget", "as_budget"]

#: Relative slack of every budget comparison (rounding of sums of ε shares, not privacy slack).
BUDGET_TOLERANCE = 1e-9


class Accounting(StrEnum):
    """Which privacy map: ``exact`` (tight, for the discrete mechanism run) or ``paper`` (the
    papers' formulas for continuous noise)."""

    EXACT = "exact"
    PAPER = "paper"


@dataclass(frozen=True)
class Budget:
    """A privacy budget: total ε > 0 and δ in [0, 1)."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        if self.delta != 0:
            check_probability("delta", self.delta)

    def to_dict(self) -> dict[str, float]:
        return {"epsilon": self.epsilon, "delta": self.delta}


def as_budget(budget: Budget | tuple[float, float] | None) -> Budget | None:
    """A :class:`Budget` from a budget or an ``(ε, δ)`` pair (``None`` stays ``None``)."""
    if budget is None or isinstance(budget, Budget):
        return budget
    eps, dl = budget
    return Budget(epsilon=eps, delta=dl)


def within_budget(spent: float, limit: float) -> bool:
    """``spent <= limit`` up to :data:`BUDGET_TOLERANCE` (relative). A negative ``limit`` (what
    is left of a budget, below 0 by rounding or overspent) admits only what spends nothing."""
    return spent <= max(limit, 0.0) * (1 + BUDGET_TOLERANCE)


def check_budget(
    spent: Mapping[str, Any] | Any, budget: Budget | tuple[float, float] | None, *, what: str = ""
) -> None:
    """Raise :class:`~searchveil.errors.BudgetExceededError` when the ε or δ of ``spent`` (a
    :class:`~searchveil.mechanisms.budget.PrivacyCost`, or a mapping with ``epsilon`` and
    ``delta``) exceeds the budget (ε first): the message names the quantity, what was requested,
    what remains and the difference. ``budget``: a :class:`Budget` or an (ε, δ) pair of limits
    (e.g. what is left of a dataset's budget, which may be 0). ``what`` prefixes the error's
    name of the exceeded quantity (e.g. ``"release korolova"``)."""
    if budget is None:
        return
    limits = (budget.epsilon, budget.delta) if isinstance(budget, Budget) else budget
    prefix = f"{what} " if what else ""
    for key, limit in zip(("epsilon", "delta"), limits, strict=True):
        value = float(spent[key] if isinstance(spent, Mapping) else getattr(spent, key))
        if math.isnan(value) or not within_budget(value, float(limit)):
            raise BudgetExceededError(f"{prefix}{key}", value, float(limit))
