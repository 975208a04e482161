"""parse_choice: modes are StrEnum members, validated once at the edge (issue 25)."""

from __future__ import annotations

from enum import StrEnum

import pytest

from searchveil.errors import InvalidParameterError
from searchveil.validate import parse_choice


class Mode(StrEnum):
    FIRST = "first"
    RANDOM = "random"


def test_text_and_members_parse_to_members() -> None:
    assert parse_choice("bounding", "first", Mode) is Mode.FIRST
    assert parse_choice("bounding", Mode.RANDOM, Mode) is Mode.RANDOM
    assert parse_choice("bounding", "random", Mode) == "random"


@pytest.mark.parametrize("bad", ["First", "", None, 1, "last"])
def test_anything_else_names_the_parameter_value_and_choices(bad: object) -> None:
    with pytest.raises(InvalidParameterError) as e:
        parse_choice("bounding", bad, Mode)
    msg = str(e.value)
    assert "bounding" in msg and repr(bad) in msg and "'first', 'random'" in msg
