"""Parameter checks shared by every family: each raises :class:`InvalidParameterError` naming
the parameter, its value and the allowed range."""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypeVar

from searchveil.errors import InvalidParameterError


def _is_real(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_positive(
    name: str, value: Any, *, finite: bool = True, maximum: float | None = None
) -> float:
    """``value`` as a float if it is a (finite) number > 0, and at most ``maximum`` if given."""
    if not _is_real(value) or math.isnan(value) or value <= 0 or (finite and math.isinf(value)):
        raise InvalidParameterError(name, value, "a finite number > 0")
    if maximum is not None and value > maximum:
        raise InvalidParameterError(name, value, f"a number in (0, {maximum:g}]")
    return float(value)


def check_nonnegative(name: str, value: Any) -> float:
    if not _is_real(value) or math.isnan(value) or value < 0 or math.isinf(value):
        raise InvalidParameterError(name, value, "a finite number >= 0")
    return float(value)


def check_probability(
    name: str, value: Any, *, open_low: bool = True, open_high: bool = True
) -> float:
    lo = "(0" if open_low else "[0"
    hi = "1)" if open_high else "1]"
    if not _is_real(value) or math.isnan(value):
        raise InvalidParameterError(name, value, f"a number in {lo}, {hi}")
    bad = (value <= 0 if open_low else value < 0) or (value >= 1 if open_high else value > 1)
    if bad:
        raise InvalidParameterError(name, value, f"a number in {lo}, {hi}")
    return float(value)


def check_int(name: str, value: Any, *, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InvalidParameterError(name, value, _int_range(minimum, maximum))
    if value < minimum or (maximum is not None and value > maximum):
        raise InvalidParameterError(name, value, _int_range(minimum, maximum))
    return int(value)


def _int_range(minimum: int, maximum: int | None) -> str:
    if maximum is None:
        return f"an integer >= {minimum}"
    return f"an integer in [{minimum}, {maximum}]"


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise InvalidParameterError(name, value, "one of " + ", ".join(repr(c) for c in choices))
    return str(value)


E = TypeVar("E", bound=StrEnum)


def parse_choice(name: str, value: Any, choices: type[E]) -> E:
    """A mode validated once, at the edge: ``value`` (the CLI's text or the API's enum member)
    as a member of the :class:`~enum.StrEnum` ``choices``; anything else raises
    :class:`InvalidParameterError` naming the parameter, the value and the allowed names.
    Members compare equal to their text, so ``parse_choice(...) == "first"`` holds."""
    if isinstance(value, choices):
        return value
    try:
        return choices(value)
    except ValueError:
        allowed = ", ".join(repr(c.value) for c in choices)
        raise InvalidParameterError(name, value, "one of " + allowed) from None


def parse_name(name: str, value: E | str, choices: type[E], aliases: Mapping[str, E]) -> E:
    """A name typed by a person: any case, ``-`` for ``_``, or one of its ``aliases``, as a
    member of ``choices``; anything else raises :class:`InvalidParameterError` listing the
    names."""
    if isinstance(value, choices):
        return value
    key = value.strip().lower().replace("-", "_")
    if key in aliases:
        return aliases[key]
    try:
        return choices(key)
    except ValueError:
        raise InvalidParameterError(name, value, " | ".join(choices)) from None
