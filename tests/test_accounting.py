"""The one budget check (mechanisms.accounting) and its named tolerance."""

from __future__ import annotations

import pytest

from searchveil.errors import BudgetExceededError, InvalidParameterError
from searchveil.mechanisms.accounting import (
    BUDGET_TOLERANCE,
    Budget,
    as_budget,
    check_budget,
    within_budget,
)


def test_within_budget_tolerance_is_relative_and_tiny() -> None:
    assert within_budget(1.0, 1.0)
    assert within_budget(1.0 + 0.5 * BUDGET_TOLERANCE, 1.0)
    assert not within_budget(1.0 + 2 * BUDGET_TOLERANCE, 1.0)
    assert not within_budget(1e-5 * (1 + 1e-6), 1e-5)


def test_check_budget_names_the_exceeded_quantity() -> None:
    check_budget({"epsilon": 1.0, "delta": 1e-6}, (1.0, 1e-6))
    check_budget({"epsilon": 99.0, "delta": 0.5}, None)
    with pytest.raises(BudgetExceededError, match="release x epsilon"):
        check_budget({"epsilon": 1.1, "delta": 0.0}, Budget(1.0, 1e-6), what="release x")
    with pytest.raises(BudgetExceededError, match="delta") as exc:
        check_budget({"epsilon": 0.5, "delta": 2e-6}, (1.0, 1e-6))
    assert exc.value.requested == 2e-6 and exc.value.remaining == 1e-6
    with pytest.raises(BudgetExceededError):
        check_budget({"epsilon": float("nan"), "delta": 0.0}, (1.0, 1e-6))


def test_budget_values_are_checked() -> None:
    assert as_budget((2.0, 1e-5)) == Budget(2.0, 1e-5)
    assert as_budget(None) is None
    with pytest.raises(InvalidParameterError):
        Budget(0.0, 1e-5)
    with pytest.raises(InvalidParameterError):
        Budget(1.0, 1.0)
