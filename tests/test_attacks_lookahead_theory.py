"""Theorem 8 and Corollaries 2–3 (thesis §6.4.1): Table 6.2's formula columns computed, checked
against the printed digits (one printed digit is the thesis's own slip: see theory.py), the
refined Random prediction, and our independent-neighbour prediction against the thesis's
simulated f_s."""

from __future__ import annotations

import math

import pytest

from searchveil.attacks.lookahead.theory import (
    THESIS_TABLE_6_2,
    corollary2_fraction,
    corollary3_fraction,
    epsilon0_for,
    table_6_2,
    theorem8_epsilon,
)
from searchveil.errors import InvalidParameterError

ROWS = {r["epsilon"]: r for r in table_6_2()}


@pytest.mark.parametrize("eps", [0.4, 0.2, 0.1])
def test_table_6_2_formula_columns_match_printed_digits(eps: float) -> None:
    r, t = ROWS[eps], THESIS_TABLE_6_2[eps]
    assert round(r["epsilon0"], 3) == t["epsilon0"]
    assert round(r["highest_fp"], 3) == t["highest_fp"]
    if eps == 0.1:
        # printed 0.350; −ln(0.17296)/5 = 0.35094 (the printed ε₀ = 0.173 itself gives 0.3509)
        assert round(r["random_fp"], 3) == 0.351
        assert abs(r["random_fp"] - t["random_fp"]) < 0.001
    else:
        assert round(r["random_fp"], 3) == t["random_fp"]


def test_printed_digits_exactly() -> None:
    got = [(round(ROWS[e]["epsilon0"], 3), round(ROWS[e]["highest_fp"], 3)) for e in ROWS]
    assert got == [(0.534, 0.016), (0.309, 0.055), (0.173, 0.123)]
    assert [round(ROWS[e]["random_fp"], 3) for e in ROWS] == [0.125, 0.235, 0.351]


def test_refined_and_independent_random_predictions() -> None:
    refined = [ROWS[e]["random_refined"] for e in (0.4, 0.2, 0.1)]
    for ours, printed in zip(refined, (0.110, 0.204, 0.305), strict=True):
        assert abs(ours - printed) < 0.001
    assert round(refined[0], 3) == 0.110
    # our limit formula reproduces the thesis's SIMULATED Random f_s to the printed digits
    indep = [round(ROWS[e]["random_independent"], 3) for e in (0.4, 0.2, 0.1)]
    assert indep == [THESIS_TABLE_6_2[e]["random_fs"] for e in (0.4, 0.2, 0.1)]


def test_theorem8_is_inverted_and_monotone() -> None:
    e0 = epsilon0_for(0.25, alpha=3.0, dmin=5, dmax=316)
    assert theorem8_epsilon(e0, alpha=3.0, dmin=5, dmax=316) == pytest.approx(0.25, abs=1e-12)
    assert theorem8_epsilon(0.5, alpha=3.0, dmin=5, dmax=316) < 0.5  # ε < ε₀ always (§6.4.1.1)
    # a single-degree law: ε = ε₀ exactly
    assert theorem8_epsilon(0.3, alpha=3.0, dmin=5, dmax=5) == pytest.approx(0.3)


def test_corollaries() -> None:
    assert corollary2_fraction(math.exp(-1), dmin=4) == pytest.approx(0.25)
    # α = 3: Highest needs the square of Random's fraction (without the correction term)
    f = corollary3_fraction(0.3, alpha=3.0, dmin=5, dmax=316, with_correction=False)
    assert f == pytest.approx(corollary2_fraction(0.3, dmin=5) ** 2)
    g = corollary3_fraction(0.3, alpha=3.0, dmin=5, dmax=316)
    assert g == pytest.approx((-math.log(0.3) / 5 + 1 / (316 / 5 - 1)) ** 2)
    with pytest.raises(InvalidParameterError, match="alpha"):
        corollary3_fraction(0.3, alpha=3.5, dmin=5, dmax=316)
    with pytest.raises(InvalidParameterError, match="epsilon0"):
        corollary2_fraction(1.0, dmin=5)
