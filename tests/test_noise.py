"""Distribution tests of the exact discrete Laplace / Gaussian samplers (χ² at α = 1e-6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import DiscreteGaussian, DiscreteLaplace
from searchveil.rng import SecureRandom, SeededRandom, make_rng

ALPHA = 1e-6
N = 200_000


def chi2_pvalue(samples: np.ndarray, pmf, lo: int, hi: int) -> float:
    """χ² goodness of fit on bins lo..hi plus two tail bins."""
    ks = np.arange(lo, hi + 1)
    probs = np.asarray(pmf(ks), dtype=float)
    p_lo = 1.0 - probs.sum()
    # split the remaining mass between the two tails by symmetry of the distributions here
    expected = np.concatenate([[p_lo / 2], probs, [p_lo / 2]]) * samples.size
    obs = np.concatenate(
        [
            [np.sum(samples < lo)],
            np.bincount(samples[(samples >= lo) & (samples <= hi)] - lo, minlength=ks.size),
            [np.sum(samples > hi)],
        ]
    )
    keep = expected > 5
    # merge sparse bins into the tails
    obs_k, exp_k = obs[keep], expected[keep]
    obs_k = np.append(obs_k, obs[~keep].sum())
    exp_k = np.append(exp_k, expected[~keep].sum())
    if exp_k[-1] < 5:
        obs_k[-2] += obs_k[-1]
        exp_k[-2] += exp_k[-1]
        obs_k, exp_k = obs_k[:-1], exp_k[:-1]
    exp_k *= obs_k.sum() / exp_k.sum()
    return float(stats.chisquare(obs_k, exp_k).pvalue)


@pytest.mark.parametrize("scale", [0.3, 1.0, 2.5, 8.69, 40.0])
def test_discrete_laplace_matches_pmf(scale: float) -> None:
    m = DiscreteLaplace(scale=scale)
    x = m.sample(N, SeededRandom(11))
    half = max(3, int(scale * 6))
    assert chi2_pvalue(x, m.pmf, -half, half) > ALPHA


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.3, 20.0])
def test_discrete_gaussian_matches_pmf(sigma: float) -> None:
    m = DiscreteGaussian(sigma=sigma)
    x = m.sample(N, SeededRandom(12))
    half = max(3, int(sigma * 5))
    assert chi2_pvalue(x, m.pmf, -half, half) > ALPHA


def test_secure_source_distribution() -> None:
    m = DiscreteLaplace(scale=3.0)
    x = m.sample(N, SecureRandom())
    assert chi2_pvalue(x, m.pmf, -18, 18) > ALPHA


def test_a_wrong_pmf_is_rejected() -> None:
    """The χ² check has power: scale 3 samples do not fit a scale 3.3 pmf."""
    x = DiscreteLaplace(scale=3.0).sample(N, SeededRandom(13))
    assert chi2_pvalue(x, DiscreteLaplace(scale=3.3).pmf, -18, 18) < ALPHA


@pytest.mark.slow
def test_same_distribution_as_opendp() -> None:
    """Two-sample χ² of our sampler against OpenDP's vetted discrete Laplace."""
    dp = pytest.importorskip("opendp.prelude")
    dp.enable_features("contrib")
    n = 50_000
    meas = dp.m.make_laplace(dp.atom_domain(T=int), dp.absolute_distance(T=int), scale=4.0)
    theirs = np.array([meas(0) for _ in range(n)])
    ours = DiscreteLaplace(scale=4.0).sample(n, SeededRandom(14))
    edges = np.arange(-25, 27) - 0.5
    a, _ = np.histogram(np.clip(ours, -25, 25), edges)
    b, _ = np.histogram(np.clip(theirs, -25, 25), edges)
    keep = (a + b) > 10
    table = np.vstack([a[keep], b[keep]])
    assert stats.chi2_contingency(table).pvalue > ALPHA


def test_seeded_is_reproducible_and_secure_is_not() -> None:
    m = DiscreteLaplace(scale=5.0)
    assert np.array_equal(m.sample(1000, SeededRandom(5)), m.sample(1000, SeededRandom(5)))
    assert not np.array_equal(m.sample(1000, SecureRandom()), m.sample(1000, SecureRandom()))
    assert make_rng(None).describe()["seeded"] is False
    d = make_rng(3).describe()
    assert d["seeded"] is True and "NOT FOR RELEASE" in d["note"]


def test_sf_and_pmf_closed_forms() -> None:
    m = DiscreteLaplace(scale=2.0)
    ks = np.arange(-60, 61)
    pmf = m.pmf(ks)
    assert math.isclose(pmf.sum(), 1.0, rel_tol=1e-12)
    for k in (-3, 0, 1, 4):
        assert math.isclose(float(m.sf(k)), float(pmf[ks >= k].sum()), rel_tol=1e-9)
    assert math.isclose(m.variance, float((pmf * ks**2).sum()), rel_tol=1e-9)
    g = DiscreteGaussian(sigma=2.0)
    assert math.isclose(float(g.sf(-100)), 1.0, rel_tol=1e-12)
    assert math.isclose(float(g.sf(1)), (1 - float(g.pmf(0))) / 2, rel_tol=1e-9)


def test_privacy_maps() -> None:
    m = DiscreteLaplace.for_epsilon(0.5, 2)
    assert m.scale == 4.0 and m.epsilon(2) == 0.5
    # the pmf ratio of neighbouring outputs is bounded by e^(Δ/b)
    ks = np.arange(-30, 30)
    ratio = m.pmf(ks) / m.pmf(ks + 2)
    assert ratio.max() <= math.exp(0.5) * (1 + 1e-12)
    g = DiscreteGaussian(sigma=4.0)
    assert g.rho(1.0) == pytest.approx(1 / 32)
    # δ(ε) is decreasing in ε and within [0, 1]
    ds = [g.delta_for_epsilon(e) for e in (0.1, 0.5, 1.0, 2.0)]
    assert all(0 <= a <= 1 for a in ds) and ds == sorted(ds, reverse=True)


def test_effective_scale_rounds_up() -> None:
    for b in (1 / 3, math.pi, 8.69, 123.456789):
        m = DiscreteLaplace(scale=b)
        assert m.effective_scale >= b
        assert m.effective_scale - b < 1e-5 * max(1.0, b)
    g = DiscreteGaussian(sigma=math.sqrt(2))
    assert g.effective_sigma >= math.sqrt(2)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "3", True, 2e6])
def test_invalid_scale_is_typed_error(bad) -> None:
    with pytest.raises(InvalidParameterError) as e:
        DiscreteLaplace(scale=bad)
    assert "scale" in str(e.value)


def test_rng_must_be_a_random_source() -> None:
    with pytest.raises(InvalidParameterError):
        DiscreteLaplace(scale=1.0).sample(3, np.random.default_rng(0))  # type: ignore[arg-type]


def test_integers_below_is_uniform_and_exact() -> None:
    r = SeededRandom(21)
    x = r.integers_below(7, 70_000)
    counts = np.bincount(x.astype(np.int64), minlength=7)
    assert stats.chisquare(counts).pvalue > ALPHA
    big = np.uint64(2**63 + 12345)
    y = r.integers_below(big, 1000)
    assert (y < big).all()


@pytest.mark.parametrize("sigma", [0.7, 4.5, 1156.0, 4400.0, 9999.0])
def test_discrete_gaussian_int64_path_equals_the_python_int_path(sigma: float) -> None:
    """The acceptance step's int64 fast path computes the same integers as exact Python ints:
    with one seed the draws are identical (the Python-int path forced by a bound of 0)."""
    import types

    import searchveil.mechanisms.noise as nz

    s2 = nz._gaussian_sigma2(sigma)
    fast = nz._sample_discrete_gaussian(s2, 50_000, make_rng(5))
    code = nz._sample_discrete_gaussian.__code__
    assert 3_037_000_499 in code.co_consts
    consts = tuple(0 if c == 3_037_000_499 else c for c in code.co_consts)
    slow_fn = types.FunctionType(code.replace(co_consts=consts), nz.__dict__)
    assert np.array_equal(fast, slow_fn(s2, 50_000, make_rng(5)))
