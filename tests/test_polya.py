"""The distributed discrete Laplace noise of CELS (issue 41; mechanisms/polya.py, cels/
distributed.py): Pólya shares sampled exactly, their laws and the privacy map.

* the exact negative binomial sampler: its inversion table equals ⌊2^64·F(k)⌋ computed
  independently (``decimal``, 60 digits); a draw whose first word equals a table entry is
  resolved with more bits exactly as the CDF says; samples fit the pmf (χ² at α = 1e-6);
* any r of the shares sum to DLap(λ) (χ² and pmf convolution), r + 1 to the Pólya difference;
* exact checks on neighbouring inputs: the pmf ratio P(k)/P(k + 1) of what any party sees
  (r shares) and of what a reader sees (r + 1) never exceeds e^{1/λ}; with shares sized
  1/(r + 1) (the mutant) a party would see more than e^{1/λ};
* the privacy map: τ' is the least threshold meeting δ (against a direct convolution), the
  costs add up, the figures of docs/privacy/cels.md §5.
"""

from __future__ import annotations

import math
from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from searchveil.cels.distributed import DistributedE2E, solve_tau_prime
from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.polya import (
    PolyaDifference,
    PolyaShares,
    _NegBinomialCdf,
    _table,
    negative_binomial,
)
from searchveil.rng import RandomSource, SeededRandom
from test_noise import ALPHA, chi2_pvalue

N = 200_000


def _cdf_decimal(shape: Fraction, y: Fraction, kmax: int) -> list[Decimal]:
    """F(0..kmax) of NB(shape, e^{−y}) in 60-digit decimal arithmetic (independent of the
    package's integer bounds)."""
    getcontext().prec = 60
    p = (-(Decimal(y.numerator) / Decimal(y.denominator))).exp()
    a = Decimal(shape.numerator) / Decimal(shape.denominator)
    term = ((1 - p).ln() * a).exp()
    out, acc = [], Decimal(0)
    for j in range(kmax + 1):
        acc += term
        out.append(acc)
        term = term * p * (a + j) / (j + 1)
    return out


@pytest.mark.parametrize(("shares", "scale"), [(2, 0.5), (3, 2.2), (5, 13.03), (4, 300.0)])
def test_table_is_the_exact_floor_of_the_cdf(shares: int, scale: float) -> None:
    y = 1 / PolyaShares(scale, shares).effective_scale_fraction
    tab = _table(Fraction(1, shares), y)
    f = [int(v) for v in tab.f]
    cdf = _cdf_decimal(Fraction(1, shares), y, min(len(f) - 1, 2000))
    two64 = Decimal(2) ** 64
    for k, fk in enumerate(f[: len(cdf)]):
        assert fk == min(int(cdf[k] * two64), (1 << 64) - 1), k
    assert f[-1] == (1 << 64) - 1 and all(a <= b for a, b in zip(f, f[1:], strict=False))


class _Words(RandomSource):
    """A source that returns the given words, then ``fill``."""

    def __init__(self, words: list[int], fill: int) -> None:
        self.queue, self.fill = list(words), fill

    def words(self, n: int) -> np.ndarray:
        out = [self.queue.pop(0) if self.queue else self.fill for _ in range(n)]
        return np.array(out, dtype=np.uint64)


@pytest.mark.parametrize("fill", [0, (1 << 64) - 1, 1 << 63])
def test_a_word_on_a_table_entry_is_resolved_exactly(fill: int) -> None:
    """The first word equals f_k: the draw is k iff U < F(k), decided with further words —
    checked against the 60-digit CDF for U = f_k/2^64 + fill/2^128 (+ ≤ 2^−128)."""
    shape, y = Fraction(1, 3), 1 / PolyaShares(2.2, 3).effective_scale_fraction
    tab = _table(shape, y)
    cdf = _cdf_decimal(shape, y, 40)
    getcontext().prec = 60
    for k in (0, 1, 5, 12):
        w = int(tab.f[k])
        got = int(tab.sample(1, _Words([w], fill))[0])
        u = Decimal(w) / Decimal(2) ** 64 + Decimal(fill) / Decimal(2) ** 128
        want = next(j for j in range(len(cdf)) if u < cdf[j])
        assert got == want, (k, fill)


def test_cdf_bounds_refine() -> None:
    c = _NegBinomialCdf(Fraction(1, 4), Fraction(1, 10))
    lo1, hi1 = c.at(7, 80)
    lo2, hi2 = c.at(7, 200)
    assert lo1 <= hi1 and hi2 - lo2 < 1 << 20
    assert lo2 >> 120 <= hi1 and hi2 >> 120 >= lo1  # the finer bounds lie inside the coarse
    with pytest.raises(InvalidParameterError):
        _NegBinomialCdf(Fraction(3, 2), Fraction(1))


NB_CASES = [(Fraction(1, 2), 0.8), (Fraction(1, 5), 13.03), (Fraction(1, 3), 40.0),
            (Fraction(1), 3.0)]  # fmt: skip


@pytest.mark.parametrize(("shape", "scale"), NB_CASES)
def test_negative_binomial_matches_its_pmf(shape: Fraction, scale: float) -> None:
    y = 1 / PolyaShares(scale, 2).effective_scale_fraction
    x = negative_binomial(shape, y, N, SeededRandom(21))
    nb = stats.nbinom(float(shape), 1 - math.exp(-float(y)))
    hi = int(nb.isf(1e-4))
    ks = np.arange(0, hi + 1)
    obs = np.append(np.bincount(np.minimum(x, hi + 1), minlength=hi + 2)[: hi + 1],
                    np.sum(x > hi))  # fmt: skip
    exp = np.append(nb.pmf(ks), nb.sf(hi)) * N
    keep = exp > 5
    obs_k, exp_k = obs[keep], exp[keep]
    if (~keep).any():
        obs_k, exp_k = np.append(obs_k, obs[~keep].sum()), np.append(exp_k, exp[~keep].sum())
    assert stats.chisquare(obs_k, exp_k * obs_k.sum() / exp_k.sum()).pvalue > ALPHA


@pytest.mark.parametrize(("r", "scale"), [(2, 1.0), (3, 2.2), (5, 6.5)])
def test_any_r_shares_are_the_discrete_laplace(r: int, scale: float) -> None:
    sh = PolyaShares(scale, r)
    rng = SeededRandom(22)
    x = sum(sh.sample(N, rng) for _ in range(r))
    lap = DiscreteLaplace(sh.effective_scale)
    half = max(4, int(scale * 6))
    assert chi2_pvalue(x, lap.pmf, -half, half) > ALPHA
    y = x + sh.sample(N, rng)  # one share more: what a reader of the output sees
    total = sh.total(r + 1)
    assert chi2_pvalue(y, total.pmf, -half, half) > ALPHA
    assert chi2_pvalue(y, lap.pmf, -half, half) < ALPHA  # the χ² test tells them apart


def test_polya_difference_laws() -> None:
    lap = DiscreteLaplace(4.0)
    one = PolyaDifference(1.0, lap.p)
    ks = np.arange(-30, 31)
    assert np.allclose(one.pmf(ks), lap.pmf(ks), rtol=1e-9, atol=1e-15)
    for t in (-5, 0, 1, 7, 40):
        assert one.sf(t) == pytest.approx(float(lap.sf(t)), rel=1e-9)
    # the sum of shares: pmf by direct convolution of the two shares' laws
    half = PolyaDifference(0.5, lap.p)
    support = np.arange(-400, 401)
    conv = np.convolve(half.pmf(support), half.pmf(support))[400:-400]
    assert np.allclose(conv[400 - 30 : 400 + 31], one.pmf(ks), rtol=1e-8)
    big = PolyaDifference(4 / 3, lap.p)
    assert big.variance == pytest.approx(4 / 3 * lap.variance)
    for t in (3, 25):
        assert big.sf(t) == pytest.approx(float(big.pmf(np.arange(t, 1500)).sum()), rel=1e-7)


@pytest.mark.parametrize("r", [2, 3, 5])
def test_neighbouring_counts_ratio_never_exceeds_e_to_one_over_lambda(r: int) -> None:
    """Exact check on neighbouring inputs (a count n vs n − 1): for every output k,
    P[n + X = k] / P[n − 1 + X = k] <= e^{1/λ}, for X the r shares any party does not know
    and for the r + 1 shares a reader sees. With shares sized 1/(r + 1) — any r of them short
    of the full noise — a party's ratio exceeds the bound."""
    sh = PolyaShares(2.0, r)
    bound = math.exp(1 / sh.effective_scale)
    ks = np.arange(-60, 61)
    for law in (sh.total(r), sh.total(r + 1)):
        pm = law.pmf(np.arange(-61, 62))
        ratio = pm[1:] / pm[:-1]
        assert ratio.max() <= bound * (1 + 1e-9) and (1 / ratio).max() <= bound * (1 + 1e-9)
    mutant = PolyaShares(2.0, r + 1).total(r)
    pm = mutant.pmf(ks)
    assert (pm[:-1] / pm[1:]).max() > bound * 1.01


def test_tau_prime_is_the_least_threshold_meeting_delta() -> None:
    for m, scale, r, delta in ((1, 1.0, 2, 1e-5), (4, 2.22, 3, 1e-5), (27, 13.03, 5, 1e-6)):
        tau = solve_tau_prime(scale, r, r + 1, m, delta)
        total = PolyaShares(scale, r).total(r + 1)

        def dl(t: int, total: PolyaDifference = total, m: int = m) -> float:
            return 1 - (1 - total.sf(t)) ** m

        assert dl(tau) <= delta < dl(tau - 1)
        # the tail against a direct sum of the pmf
        assert total.sf(tau) == pytest.approx(float(total.pmf(np.arange(tau, tau + 4000)).sum()),
                                              rel=1e-6)  # fmt: skip


def test_the_privacy_map_of_the_release() -> None:
    """The figures of docs/privacy/cels.md §5 (ε = ln 10, δ = 10⁻⁶, m = 27: λ = 13.03): the
    threshold 222 with 5 parties, 226 with 3; the variance (r + 1)/r of the central noise; the
    parts add up to the release's cost."""
    for r, tau, var in ((5, 222, 407.2), (3, 226, 452.4)):
        d = DistributedE2E(m=27, eps_counts=2.0723265, delta_counts=1e-6, eps_profile=0.2302585,
                           parties=r)  # fmt: skip
        assert d.tau_prime == tau and d.contributors == r + 1
        assert d.counts.total(r + 1).variance == pytest.approx(var, abs=0.1)
        assert d.counts.total(r + 1).variance == pytest.approx(
            (r + 1) / r * DiscreteLaplace(d.counts.effective_scale).variance
        )
        pr = d.privacy()
        eps_c, dl_c = d.counts_privacy()
        assert eps_c == pytest.approx(27 / d.counts.effective_scale) and dl_c <= 1e-6
        assert pr["epsilon"] == pytest.approx(eps_c + 1 / d.profile.effective_scale)
        cost = d.cost()
        assert cost.epsilon == pytest.approx(pr["epsilon"]) and cost.delta == pytest.approx(dl_c)
        assert [p.name for p in cost.parts] == ["pair_counts", "activity_profile", "generation"]


@pytest.mark.parametrize(
    "kw",
    [{"scale": 0.0, "shares": 2}, {"scale": 1e9, "shares": 2}, {"scale": 1.0, "shares": 0},
     {"scale": 1.0, "shares": 65}],
)  # fmt: skip
def test_invalid_shares_are_typed_errors(kw: dict) -> None:
    with pytest.raises(InvalidParameterError):
        PolyaShares(**kw)


def test_a_scale_beyond_the_sampler_is_refused_with_its_reason() -> None:
    with pytest.raises(InvalidParameterError, match="pair counts noise scale"):
        DistributedE2E(m=27, eps_counts=1e-3, delta_counts=1e-6, eps_profile=0.1, parties=3)
