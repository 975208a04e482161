"""The distributed noise of CELS (issue 41; mechanisms/shares.py, cels/distributed.py): Skellam
shares for the pair counts, Pólya shares for the activity profile — sampled exactly — their
laws and the privacy map.

* the exact samplers (negative binomial, Poisson): each inversion table equals ⌊2^64·F(k)⌋
  computed independently (``decimal``, 60 digits); a draw whose first word equals a table
  entry is resolved with more bits exactly as the CDF says; samples fit the pmf (χ², α = 1e-6);
* any r of the shares are the full noise (χ², pmf convolution), r + 1 the reader's law;
* exact checks on neighbouring inputs: the Pólya pmf ratio never exceeds e^{1/λ} for what a
  party or a reader sees; the Skellam privacy map equals the hockey-stick divergence summed
  directly (one and two shifted coordinates), stays under the Rényi bound of Agarwal, Kairouz
  and Liu, and with shares sized 1/(r + 1) (the mutant) a party's δ exceeds the claim;
* the privacy map of the release: τ' is the least threshold meeting δ, the variance is the
  least meeting ε, the costs add up, the figures of docs/privacy/cels.md §5.
"""

from __future__ import annotations

import math
from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import special, stats

from searchveil.cels.distributed import DistributedE2E, calibrate_skellam, solve_tau_prime
from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.shares import (
    PolyaDifference,
    PolyaShares,
    SkellamShares,
    _NegBinomialCdf,
    _poisson_table,
    _table,
    loss_grid,
    negative_binomial,
    poisson,
    skellam_delta,
    skellam_epsilon,
    skellam_rdp,
    skellam_rdp_epsilon,
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


# -- Skellam shares (the pair counts) ----------------------------------------------------------
def _poisson_cdf_decimal(mu: Fraction, kmax: int) -> list[Decimal]:
    getcontext().prec = 80
    term = (-(Decimal(mu.numerator) / Decimal(mu.denominator))).exp()
    out, acc = [], Decimal(0)
    for j in range(kmax + 1):
        acc += term
        out.append(acc)
        term = term * Decimal(mu.numerator) / Decimal(mu.denominator) / (j + 1)
    return out


@pytest.mark.parametrize("mu", [Fraction(1, 3), Fraction(27, 2), Fraction(300)])
def test_poisson_table_is_the_exact_floor_of_the_cdf(mu: Fraction) -> None:
    tab = _poisson_table(mu)
    f = [int(v) for v in tab.f]
    cdf = _poisson_cdf_decimal(mu, len(f) - 1)
    two64 = Decimal(2) ** 64
    for k, fk in enumerate(f):
        assert fk == min(int(cdf[k] * two64), (1 << 64) - 1), k
    w = int(tab.f[len(f) // 2])  # a word on a table entry: resolved by the next bits
    for fill in (0, (1 << 64) - 1):
        got = int(tab.sample(1, _Words([w], fill))[0])
        u = Decimal(w) / two64 + Decimal(fill) / two64**2
        assert got == next(j for j in range(len(cdf)) if u < cdf[j])


@pytest.mark.parametrize("mu", [Fraction(2, 5), Fraction(27, 2), Fraction(5000)])
def test_poisson_matches_its_pmf(mu: Fraction) -> None:
    x = poisson(mu, N, SeededRandom(23))  # 5000: the sum of three draws of mean 5000/3
    law = stats.poisson(float(mu))
    lo, hi = int(law.ppf(1e-4)), int(law.isf(1e-4))
    ks = np.arange(lo, hi + 1)
    obs = np.r_[np.sum(x < lo), np.bincount(np.clip(x, lo, hi) - lo, minlength=ks.size)]
    obs[1], obs[-1] = obs[1] - np.sum(x < lo), obs[-1] - np.sum(x > hi)
    obs = np.r_[obs, np.sum(x > hi)]
    exp = np.r_[law.cdf(lo - 1), law.pmf(ks), law.sf(hi)] * N
    keep = exp > 5
    o, e = np.r_[obs[keep], obs[~keep].sum()], np.r_[exp[keep], exp[~keep].sum()]
    o, e = (o[:-1], e[:-1]) if e[-1] == 0 else (o, e)
    assert stats.chisquare(o, e * o.sum() / e.sum()).pvalue > ALPHA


@pytest.mark.parametrize(("r", "variance"), [(2, 3.0), (3, 20.0), (5, 150.0)])
def test_any_r_skellam_shares_are_the_full_noise(r: int, variance: float) -> None:
    sh = SkellamShares(variance, r)
    assert sh.full_variance >= variance and sh.full_variance == pytest.approx(variance, rel=1e-5)
    rng = SeededRandom(24)
    x = sum(sh.sample(N, rng) for _ in range(r))
    half = int(4 * math.sqrt(variance)) + 3
    assert chi2_pvalue(x, sh.total(r).pmf, -half, half) > ALPHA
    y = x + sh.sample(N, rng)
    assert chi2_pvalue(y, sh.total(r + 1).pmf, -half, half) > ALPHA
    assert sh.total(r + 1).variance == pytest.approx((r + 1) / r * sh.full_variance)


def _hockey(variance: float, eps: float, m: int) -> float:
    """δ(ε) of m coordinates shifted by 1 under Skellam noise, summed directly (m <= 2)."""
    law = stats.skellam(variance / 2, variance / 2)
    k = np.arange(-400, 401)
    p, q = law.pmf(k), law.pmf(k - 1)  # without / with the user
    if m == 1:
        return float(np.maximum(q - math.exp(eps) * p, 0).sum())
    return float(np.maximum(np.outer(q, q) - math.exp(eps) * np.outer(p, p), 0).sum())


@pytest.mark.parametrize(("variance", "m"), [(3.0, 1), (18.7, 1), (25.0, 2), (150.0, 2)])
def test_skellam_map_is_the_hockey_stick_divergence(variance: float, m: int) -> None:
    for eps in (0.1, 0.5, 1.0):
        exact = _hockey(variance, eps, m)
        got = skellam_delta(variance, eps, m=m)
        assert exact <= got * (1 + 1e-9) + 1e-15  # an upper bound …
        assert got <= exact * 1.01 + 1e-10  # … and a tight one (FFT slack: < 1e-10)
    e_pld = skellam_epsilon(variance, 1e-6, m=m, grid=1e-4)
    assert e_pld <= skellam_rdp_epsilon(variance, 1e-6, l1=m, l2sq=m)


def test_renyi_bound_is_above_the_renyi_divergence() -> None:
    """AKL21's bound against the Rényi divergence of a shift by 1, summed numerically."""
    for variance in (2.0, 10.0, 200.0):
        law = stats.skellam(variance / 2, variance / 2)
        k = np.arange(-500, 501)
        lp, lq = law.logpmf(k), law.logpmf(k - 1)
        ok = np.isfinite(lp) & np.isfinite(lq)
        for a in (2, 5, 30):
            div = float(special.logsumexp(a * lq[ok] + (1 - a) * lp[ok])) / (a - 1)
            assert div <= skellam_rdp(a, variance, 1, 1) + 1e-12
            assert skellam_rdp(a, variance, 1, 1) >= a / (2 * variance)


def test_shares_sized_for_one_more_party_break_the_claim() -> None:
    """The exact check on neighbouring inputs that the party's view meets the claim: with the
    shares of the release, δ(ε_c) of the r shares a party does not know is at most the
    claimed δ; sized 1/(r + 1) (r of them then 3/4 of the variance) it is not."""
    d = DistributedE2E(m=1, eps_counts=1.0, delta_counts=1e-5, eps_profile=1.0, parties=3)
    eps, _ = d.counts_privacy()
    assert _hockey(d.counts.full_variance, eps, 1) <= d.delta_rdp
    mutant = SkellamShares(d.counts.variance, 4)
    assert _hockey(mutant.total(3).variance, eps, 1) > 3 * d.delta_rdp


def test_calibration_is_the_least_variance_and_tau_prime_the_least_threshold() -> None:
    for m, eps, delta, r in ((1, 1.0, 1e-5, 2), (4, 1.8, 5e-6, 3), (27, 2.0723265, 5e-7, 5)):
        sh = calibrate_skellam(m, eps, delta, r)
        grid = loss_grid(eps, m, coarse=True)
        assert skellam_delta(sh.full_variance, eps, m=m, grid=grid) <= delta
        less = SkellamShares(sh.variance * 0.99, r)
        assert skellam_delta(less.full_variance, eps, m=m, grid=grid) > delta
        law = sh.total(r + 1)
        tau = solve_tau_prime(law.mu, m, delta)
        dl = [1 - (1 - law.sf(t)) ** m for t in (tau - 1, tau)]
        assert dl[1] <= delta < dl[0]
        assert law.sf(tau) == pytest.approx(float(law.pmf(np.arange(tau, tau + 2000)).sum()),
                                            rel=1e-6)  # fmt: skip


def test_the_privacy_map_of_the_release() -> None:
    """The figures of docs/privacy/cels.md §5 (ε = ln 10, δ = 10⁻⁶, m = 27): the full noise's
    variance 135.1, the threshold 72 with 5 parties and 75 with 3; the parts add up."""
    for r, tau, total_var in ((5, 72, 162.1), (3, 75, 180.2)):
        d = DistributedE2E(m=27, eps_counts=2.0723265, delta_counts=1e-6, eps_profile=0.2302585,
                           parties=r)  # fmt: skip
        assert d.counts.full_variance == pytest.approx(135.1, abs=0.1)
        assert d.tau_prime == tau and d.contributors == r + 1
        assert d.counts.total(r + 1).variance == pytest.approx(total_var, abs=0.1)
        eps_c, dl_c = d.counts_privacy()
        assert eps_c <= 2.0723265 and dl_c <= 1e-6
        pr = d.privacy()
        assert pr["epsilon"] == pytest.approx(eps_c + 1 / d.profile.effective_scale)
        cost = d.cost()
        assert cost.epsilon == pytest.approx(2.0723265 + 0.2302585) and cost.delta == 1e-6
        assert sum(p.epsilon for p in cost.parts) == pytest.approx(pr["epsilon"])
        assert [p.name for p in cost.parts] == ["pair_counts", "activity_profile", "generation"]


@pytest.mark.parametrize(
    "kw",
    [{"scale": 0.0, "shares": 2}, {"scale": 1e9, "shares": 2}, {"scale": 1.0, "shares": 0},
     {"scale": 1.0, "shares": 65}],
)  # fmt: skip
def test_invalid_shares_are_typed_errors(kw: dict) -> None:
    with pytest.raises(InvalidParameterError):
        PolyaShares(**kw)


def test_a_scale_beyond_the_samplers_is_refused_with_its_reason() -> None:
    with pytest.raises(InvalidParameterError, match="activity profile noise scale"):
        DistributedE2E(m=27, eps_counts=1.0, delta_counts=1e-6, eps_profile=1e-5, parties=3)
    with pytest.raises(InvalidParameterError, match="variance"):
        SkellamShares(1e9, 2)
