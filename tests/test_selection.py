"""Selection strategies: exact privacy formulas, keep probabilities on neighbouring inputs,
calibration, the release path (``release korolova --selection``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats
from typer.testing import CliRunner

from searchveil.cli import app
from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import DiscreteGaussian
from searchveil.mechanisms.selection import (
    STRATEGIES,
    GaussianThreshold,
    LaplaceThreshold,
    PolicyGaussian,
    analytic_gaussian_sigma,
    gaussian_delta,
    make_strategy,
    user_item_sets,
)
from searchveil.params import exact_threshold_privacy, korolova_solve_exact
from searchveil.release.select import SelectParams, release_select
from searchveil.rng import make_rng

runner = CliRunner()
EPS, DELTA = math.log(10), 1e-5


def test_gaussian_delta_d1_is_cks_theorem_7() -> None:
    for sigma, eps in ((1.5, 0.5), (3.0, 1.0), (8.0, 0.3)):
        assert gaussian_delta(sigma=sigma, d=1, epsilon=eps) == pytest.approx(
            DiscreteGaussian(sigma).delta_for_epsilon(eps, 1.0), rel=1e-9, abs=1e-15
        )


def test_gaussian_delta_d_dims_matches_continuous_limit() -> None:
    """For large σ the d-dim discrete Gaussian with shift 1 per coordinate behaves like the
    continuous one with ℓ2 sensitivity √d (Balle–Wang closed form)."""
    sigma, d, eps = 30.0, 9, 0.2
    delta_c = stats.norm.cdf(3 / (2 * sigma) - eps * sigma / 3) - math.exp(eps) * stats.norm.cdf(
        -3 / (2 * sigma) - eps * sigma / 3
    )
    assert gaussian_delta(sigma=sigma, d=d, epsilon=eps) == pytest.approx(delta_c, rel=1e-3)


def test_analytic_gaussian_sigma_is_tight_and_beats_classic() -> None:
    s = analytic_gaussian_sigma(epsilon=1.0, delta=1e-5)
    classic = math.sqrt(2 * math.log(1.25 / 1e-5))
    assert s < classic
    f = lambda x: stats.norm.cdf(1 / (2 * x) - x) - math.e * stats.norm.cdf(-1 / (2 * x) - x)  # noqa: E731
    assert f(s) <= 1e-5 < f(s * 0.999)


def test_policy_rho_formula() -> None:
    p = PolicyGaussian.for_budget(epsilon=1.0, delta=1e-6, d=1)
    assert p.rho == pytest.approx(1 + p.sigma * stats.norm.ppf(1 - 0.5e-6))
    p5 = PolicyGaussian.for_budget(epsilon=1.0, delta=1e-6, d=5)
    t = np.arange(1, 6)
    assert p5.rho == pytest.approx(
        np.max(1 / np.sqrt(t) + p5.sigma * stats.norm.ppf((1 - 0.5e-6) ** (1 / t)))
    )
    assert p5.cutoff > p5.rho


def test_laplace_strategy_is_the_exact_distinct_rule() -> None:
    lt = LaplaceThreshold.for_budget(epsilon=EPS, delta=DELTA, d=5)
    r = korolova_solve_exact(epsilon=EPS, delta=DELTA, d=5, distinct=True)
    assert (lt.K, lt.b) == (r["K"], r["b"])
    pr = exact_threshold_privacy(d=5, K=lt.K, b=lt.b, distinct=True)
    assert lt.privacy() == {"epsilon": pr.epsilon, "delta": pr.delta}


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("d", [1, 5, 20])
def test_calibration_and_keep_probabilities_on_neighbours(name: str, d: int) -> None:
    st = make_strategy(name, epsilon=EPS, delta=DELTA, d=d)
    pr = st.privacy()
    assert pr["epsilon"] <= EPS * (1 + 1e-9) and pr["delta"] <= DELTA * (1 + 1e-9)
    # one item, n users vs n − 1: the per-item guarantee must hold for every n
    n = np.arange(1, 400)
    p1 = st.keep_probability(n)
    p0 = np.where(n - 1 > 0, st.keep_probability(n - 1), 0.0)
    e = math.exp(pr["epsilon"])
    assert (p1 <= e * p0 + pr["delta"] + 1e-12).all()
    assert (1 - p0 <= e * (1 - p1) + pr["delta"] + 1e-12).all()
    assert p1[-1] > 0.99  # popular items are released


def test_gaussian_split_search_picks_a_valid_small_threshold() -> None:
    g = GaussianThreshold.for_budget(epsilon=1.0, delta=1e-6, d=10)
    pr = g.privacy()
    assert pr["delta_noise"] + pr["delta_threshold"] <= 1e-6
    worse = GaussianThreshold(d=10, sigma=g.sigma, tau=g.tau - 1, epsilon=1.0)
    assert worse.privacy()["delta"] > 1e-6 * 0.1 or worse.tau < 2


def test_user_item_sets_keep_first_distinct() -> None:
    df = pl.DataFrame({"user": [1, 1, 1, 1, 2], "item": ["a", "a", "b", "c", "a"],
                       "pos": [0, 1, 2, 3, 0]})  # fmt: skip
    s = user_item_sets(df, d=2).sort(["user", "item"])
    assert s.to_dicts() == [{"user": 1, "item": "a"}, {"user": 1, "item": "b"},
                            {"user": 2, "item": "a"}]  # fmt: skip


def test_policy_weights_respect_unit_l2_budget() -> None:
    sets = pl.DataFrame({"user": [1, 1, 1, 2, 3], "item": ["a", "b", "c", "a", "a"]})
    p = PolicyGaussian.for_budget(epsilon=1.0, delta=1e-6, d=3)
    w = p.weights(sets, rng=make_rng(1))
    assert set(w) == {"a", "b", "c"}
    assert math.sqrt(sum(v * v for v in w.values())) <= 3.0 + 1e-9  # ≤ 1 per user
    assert w["a"] <= p.cutoff + 1e-9


def test_release_select_and_cli(aol_top1000, tmp_path: Path, aol_215_path: Path) -> None:
    rel = release_select(aol_top1000, SelectParams(strategy="gaussian", epsilon=EPS, delta=DELTA,
                                                   d=5), rng=make_rng(3))  # fmt: skip
    led = rel.ledger
    assert led["epsilon"] <= EPS * (1 + 1e-9) and led["delta"] <= DELTA
    q = rel.tables["queries"]
    assert q.columns == ["query", "noisy_count"]
    originals = set(aol_top1000.df.get_column("query").to_list())
    assert set(q.get_column("query").to_list()) <= originals
    with pytest.raises(InvalidParameterError, match="selection"):
        SelectParams(strategy="magic", epsilon=1, delta=1e-6, d=1)
    out = tmp_path / "r"
    r = runner.invoke(app, ["release", "korolova", str(aol_215_path), "--out", str(out),
                            "--epsilon", "2.3", "--delta", "1e-5", "--max-queries", "5",
                            "--selection", "policy-gaussian", "--seed", "1", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads((out / "ledger.json").read_text())["parameters"]["selection"] == (
        "policy-gaussian"
    )
    bad = tmp_path / "bad"
    r = runner.invoke(app, ["release", "korolova", str(aol_215_path), "--out", str(bad),
                            "--epsilon", "2.3", "--delta", "1e-5", "--max-queries", "5",
                            "--selection", "gaussian", "--max-clicks", "1"])  # fmt: skip
    assert r.exit_code == 2 and not bad.exists()


def test_compare_runs_a_selection_setting(aol_top1000) -> None:
    from searchveil.evaluate.compare import default_settings, parse_setting, run_setting

    s = parse_setting("select:strategy=policy-gaussian,d=5")
    assert s.options == {"strategy": "policy-gaussian", "d": "5"}
    rel = run_setting(aol_top1000, s, epsilon=EPS, delta=DELTA, rng=make_rng(2), max_users=None)
    assert rel.ledger["epsilon"] <= EPS * (1 + 1e-9) and rel.ledger["delta"] <= DELTA
    assert any(x.mechanism == "select" for x in default_settings(max_users=None))
    with pytest.raises(InvalidParameterError, match="mechanisms"):
        parse_setting("select:colour=red")


def test_zealous_keep_probabilities_on_neighbours() -> None:
    """Exact n vs n−1 check for the existing ZEALOUS release (one query per user)."""
    import math

    from searchveil.mechanisms.noise import DiscreteLaplace
    from searchveil.release.zealous import ZealousParams

    p = ZealousParams.from_budget(epsilon=1.0, delta=1e-5, m=1, item_type="queries",
                                  guarantee="indistinguishability")  # fmt: skip
    pr = p.privacy("exact")
    tp = math.floor(p.tau_prime) + 1
    n = np.arange(1, 400)

    def keep(c: np.ndarray) -> np.ndarray:
        return np.where(c >= p.tau, DiscreteLaplace(p.lam).sf(tp - c), 0.0)

    p1, p0, e = keep(n), keep(n - 1), math.exp(pr["epsilon"])
    assert np.all(p1 <= e * p0 + pr["delta"] + 1e-15)
    assert np.all(1 - p0 <= e * (1 - p1) + pr["delta"] + 1e-15)
    assert np.all(p0 <= e * p1 + pr["delta"] + 1e-15)
    assert np.max(p1 - e * p0) > pr["delta"] / 2  # the δ is nearly attained, not vacuous


def test_gaussian_threshold_delta_at_the_samplers_sigma() -> None:
    """Issue 21: δ_T and the keep probability use the effective (rounded-up) σ the exact sampler
    draws with — a larger σ makes a single-user item likelier to cross τ."""
    g = GaussianThreshold.for_budget(epsilon=1.0, delta=1e-7, d=20)
    eff = DiscreteGaussian(g.sigma).effective_sigma
    assert eff >= g.sigma
    p1 = float(DiscreteGaussian(eff).sf(g.tau - 1))
    assert g.privacy()["delta_threshold"] == pytest.approx(1 - (1 - p1) ** 20, rel=1e-12)
    assert g.keep_probability(1)[()] == pytest.approx(p1, rel=1e-12)
    assert g.privacy()["delta"] <= 1e-7
