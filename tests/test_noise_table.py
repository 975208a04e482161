"""The exact geometric-inversion sampler under the discrete Laplace (mechanisms.noise).

Checked against an independent computation (the standard library's ``decimal`` at 80 digits,
correctly rounded ``exp``): the integer table floor(2^64·p^k), the bounds on e^-y and on p^k,
the resolution of a first word that falls exactly on a table entry (scripted random words), and
the distribution (χ² at α = 1e-6, and two-sample against the CKS Algorithm 2 sampler).
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from searchveil.mechanisms import noise
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.rng import RandomSource, SeededRandom

CTX = decimal.Context(prec=80)
ALPHA = 1e-6


def _exp_neg(y: Fraction, k: int = 1) -> decimal.Decimal:
    """e^(-y·k) to 80 significant digits."""
    x = CTX.divide(decimal.Decimal(-y.numerator * k), decimal.Decimal(y.denominator))
    return CTX.exp(x)


def _floor_scaled(y: Fraction, k: int, bits: int) -> int:
    return int(CTX.multiply(_exp_neg(y, k), decimal.Decimal(2**bits)).to_integral_value(
        rounding=decimal.ROUND_FLOOR))  # fmt: skip


class Scripted(RandomSource):
    """Random words from a fixed list (then zeros): drives the sampler down chosen paths."""

    def __init__(self, words: Iterable[int]) -> None:
        self._words = [int(w) for w in words]

    def words(self, n: int) -> npt.NDArray[np.uint64]:
        out = self._words[:n] + [0] * max(0, n - len(self._words))
        self._words = self._words[n:]
        return np.array(out, dtype=np.uint64)


@pytest.mark.parametrize("scale", [0.3, 1.0, 8.69, 17.37, 8.685889638065035])
def test_table_is_floor_of_2_64_p_k(scale: float) -> None:
    y = 1 / DiscreteLaplace(scale).effective_scale_fraction
    table = noise._GeometricTable(y)
    f = [int(v) for v in table.f[:-1]]
    assert f[-1] == 0 and f[-2] > 0  # ends at the first k with 2^64·p^k < 1
    for k in range(1, len(f) + 1):
        assert f[k - 1] == _floor_scaled(y, k, 64), k
    assert all(a >= b for a, b in zip(f, f[1:], strict=False))


def test_table_spot_checks_at_the_largest_table_scale() -> None:
    y = Fraction(1, 1000)
    table = noise._GeometricTable(y)
    f = table.f
    assert 44_000 < f.size < 45_000
    for k in (1, 2, 1000, 20_000, f.size - 2):
        assert int(f[k - 1]) == _floor_scaled(y, k, 64)


@pytest.mark.parametrize("y", [Fraction(1, 3), Fraction(100, 869), Fraction(16), Fraction(0)])
def test_exp_neg_bounds_bracket_the_value(y: Fraction) -> None:
    for prec in (64, 200):
        lo, hi = noise._exp_neg_bounds(y, prec)
        exact = CTX.multiply(_exp_neg(y), decimal.Decimal(2**prec))
        assert decimal.Decimal(lo) <= exact <= decimal.Decimal(hi)
        assert hi - lo <= 4


def test_power_bounds_bracket_p_to_the_k() -> None:
    y = Fraction(100, 869)
    for k, prec in ((1, 64), (3, 128), (50, 192), (400, 256)):
        lo, hi = noise._power_bounds(y, k, prec)
        exact = CTX.multiply(_exp_neg(y, k), decimal.Decimal(2**prec))
        assert decimal.Decimal(lo) <= exact <= decimal.Decimal(hi)
        assert hi - lo <= 4


def _second_word_floor(y: Fraction, k: int) -> int:
    """floor(2^128·p^k) mod 2^64: the bits of p^k after the first 64."""
    return _floor_scaled(y, k, 128) & ((1 << 64) - 1)


def test_a_word_on_a_table_entry_is_settled_by_further_words() -> None:
    """x's first word equals f_3: x < p^3 exactly when its next 64 bits are below those of
    p^3 (then G = 3, as f_4 < f_3), else G = 2."""
    y = Fraction(100, 869)
    table = noise._GeometricTable(y)
    f3 = int(table.f[2])
    nxt = _second_word_floor(y, 3)
    assert 0 < nxt < 2**64 - 1  # both outcomes reachable with one more word
    assert int(table.sample(1, Scripted([f3, nxt - 1]))[0]) == 3
    assert int(table.sample(1, Scripted([f3, nxt + 1]))[0]) == 2
    # the word just below / above f_3 needs no more bits
    assert int(table.sample(1, Scripted([f3 - 1, 12345]))[0]) == 3
    assert int(table.sample(1, Scripted([f3 + 1, 12345]))[0]) == 2


def test_the_far_tail_from_a_zero_first_word() -> None:
    """A first word 0 (x < 2^-64): G is read from x's further bits, beyond the table."""
    y = Fraction(100, 869)
    table = noise._GeometricTable(y)
    second = 1 << 40  # x in [2^-88, 2^-88 + 2^-128): G = max{k: x < p^k}
    g = int(table.sample(1, Scripted([0, second, 0]))[0])
    x = decimal.Decimal(second) / decimal.Decimal(2**128)
    assert CTX.compare(x, _exp_neg(y, g)) < 0 <= CTX.compare(x, _exp_neg(y, g + 1))
    assert g > table.f.size  # beyond the 64-bit table


@pytest.mark.parametrize("scale", [0.3, 8.69, 2000.0])
def test_laplace_both_samplers_match_the_pmf(scale: float) -> None:
    """Scale 2000 runs CKS Algorithm 2, 0.3 and 8.69 the inversion table."""
    m = DiscreteLaplace(scale)
    x = m.sample(100_000, SeededRandom(21))
    half = max(3, int(scale * 4))
    edges = np.linspace(-half - 0.5, half + 0.5, min(2 * half + 2, 202))
    obs, _ = np.histogram(np.clip(x, -half, half), edges)
    cdf = m.cdf(np.floor(edges[1:-1]))
    probs = np.diff(np.concatenate([[0.0], cdf, [1.0]]))
    exp = probs * x.size
    keep = exp > 5
    obs_k = np.append(obs[keep], obs[~keep].sum())
    exp_k = np.append(exp[keep], exp[~keep].sum())
    if exp_k[-1] < 5:
        obs_k, exp_k = obs_k[:-1], exp_k[:-1]
    exp_k = exp_k * obs_k.sum() / exp_k.sum()
    assert stats.chisquare(obs_k, exp_k).pvalue > ALPHA


def test_table_and_cks_samplers_agree() -> None:
    scale = DiscreteLaplace(8.69).effective_scale_fraction
    a = noise._sample_discrete_laplace_table(scale, 200_000, SeededRandom(31))
    b = noise._sample_discrete_laplace_cks(scale, 200_000, SeededRandom(32))
    edges = np.arange(-40, 42) - 0.5
    ha, _ = np.histogram(np.clip(a, -40, 40), edges)
    hb, _ = np.histogram(np.clip(b, -40, 40), edges)
    keep = (ha + hb) > 10
    assert stats.chi2_contingency(np.vstack([ha[keep], hb[keep]])).pvalue > ALPHA
    assert abs(a.var() - b.var()) < 0.05 * DiscreteLaplace(8.69).variance


def test_negative_zero_is_redrawn() -> None:
    """(sign −, G = 0) is rejected and redrawn: words that give G = 0 with a negative sign,
    then G = 0 with a positive sign, yield 0 from the second pair."""
    table = noise._GeometricTable(Fraction(100, 869))
    g0_word = int(table.f[0]) + 1  # >= f_1 + 1: x >= p, G = 0
    x = noise._sample_discrete_laplace_table(
        Fraction(869, 100), 1, Scripted([g0_word, 1, g0_word, 0])
    )
    assert int(x[0]) == 0
    f = {int(v) for v in table.f}
    small = next(w for w in range(1000, 2000) if w not in f)  # not on a table entry
    y = noise._sample_discrete_laplace_table(Fraction(869, 100), 1, Scripted([small, 1]))
    assert int(y[0]) < -300  # a tiny first word: a large G, negative sign kept
