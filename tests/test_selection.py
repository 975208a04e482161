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
from searchveil.cli.release import KorolovaOptions, select_params
from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import DiscreteGaussian
from searchveil.mechanisms.rounds import (
    ItemPool,
    RoundsSelection,
    WeightedRound,
    unit_weights,
    user_item_pool,
    zcdp_delta,
    zcdp_rho,
)
from searchveil.mechanisms.selection import (
    REFERENCE_DISTINCT_PER_USER,
    REGISTRY,
    GaussianThreshold,
    LaplaceThreshold,
    PolicyGaussian,
    analytic_gaussian_sigma,
    default_d,
    gaussian_delta,
    make_strategy,
    user_item_sets,
)
from searchveil.mechanisms.threshold import exact_threshold_privacy, korolova_solve_exact
from searchveil.model import items
from searchveil.release.selection import SelectionParams, release_selection
from searchveil.rng import make_rng

STRATEGIES = [c.FACTS.name for c in REGISTRY]
ROUND_STRATEGIES = [c.FACTS.name for c in REGISTRY if issubclass(c, RoundsSelection)]

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
    sp = SelectionParams(strategy="gaussian", epsilon=EPS, delta=DELTA, d=5)
    rel = release_selection(aol_top1000, sp, rng=make_rng(3))
    led = rel.ledger
    assert led["epsilon"] <= EPS * (1 + 1e-9) and led["delta"] <= DELTA
    q = rel.tables["queries"]
    assert q.columns == ["query", "noisy_count"]
    originals = set(aol_top1000.df.get_column("query").to_list())
    assert set(q.get_column("query").to_list()) <= originals
    with pytest.raises(InvalidParameterError, match="selection"):
        SelectionParams(strategy="magic", epsilon=1, delta=1e-6, d=1)
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
                            "--selection", "gaussian", "--K", "3"])  # fmt: skip
    assert r.exit_code == 2 and not bad.exists()


def test_compare_runs_a_selection_setting(aol_top1000) -> None:
    from searchveil.evaluate.compare import default_settings, parse_setting, run_setting

    s = parse_setting("select:strategy=policy-gaussian,d=5")
    assert s.options == {"strategy": "policy-gaussian", "d": "5"}
    rel = run_setting(aol_top1000, s, epsilon=EPS, delta=DELTA, rng=make_rng(2), max_users=None)
    assert rel.ledger["epsilon"] <= EPS * (1 + 1e-9) and rel.ledger["delta"] <= DELTA
    assert s.mechanism == "selection"  # "select" is the deprecated spelling
    assert any(x.mechanism == "selection" for x in default_settings(max_users=None))
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


# -- issue 24: probe-reweight(-2r), DP-SIPS, the default d, engines, neighbours ------------


def test_zcdp_conversion_is_sound_and_not_loose() -> None:
    """CKS Cor. 13: never below the exact δ of the continuous Gaussian with the same ρ (no
    conversion can beat the mechanism's own curve), never above Bun–Steinke's
    exp(−(ε−ρ)²/4ρ), and zcdp_rho inverts it."""
    for eps, sigma in ((1.15, 4.3), (2.3, 2.2), (0.5, 8.0)):
        rho = 1 / (2 * sigma**2)
        mu = 1 / sigma
        exact = stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(
            -eps / mu - mu / 2
        )
        got = zcdp_delta(rho=rho, epsilon=eps)
        assert exact <= got <= math.exp(-((eps - rho) ** 2) / (4 * rho))
        # the price of the conversion: at the exact Gaussian's δ, ≤ 8% more noise (σ)
        sigma_z = 1 / math.sqrt(2 * zcdp_rho(epsilon=eps, delta=exact))
        assert sigma < sigma_z <= 1.08 * sigma
        r = zcdp_rho(epsilon=eps, delta=got)
        assert r == pytest.approx(rho, rel=1e-6) and zcdp_delta(rho=r, epsilon=eps) <= got
    with pytest.raises(InvalidParameterError, match="epsilon"):
        zcdp_rho(epsilon=-1.0, delta=1e-6)


def test_unit_weights_are_exact_floors_within_the_l2_budget() -> None:
    from fractions import Fraction

    for scale in (16, 256, 1000, 1024):
        a = unit_weights(scale, 300)
        assert a[0] == 0
        for k in range(1, 301):
            assert k * int(a[k]) ** 2 <= scale * scale < k * (int(a[k]) + 1) ** 2
            assert Fraction(int(a[k])) <= Fraction(scale) / Fraction(math.sqrt(k))


def test_round_threshold_is_the_smallest_meeting_its_delta() -> None:
    from searchveil.mechanisms.rounds import _round_threshold

    t = _round_threshold(4.5, 256, 20, 1e-8)
    assert WeightedRound(4.5, t, 256, 20).delta_unique() <= 1e-8
    assert WeightedRound(4.5, t - 1, 256, 20).delta_unique() > 1e-8
    # exact: one user with k items, each released with P[a_k + Z ≥ T]
    r = WeightedRound(4.5, t, 256, 20)
    a = unit_weights(256, 20)
    p = DiscreteGaussian(4.5 * 256).sf(t - a[1:])
    k = np.arange(1, 21)
    assert r.delta_unique() == pytest.approx(float(np.max(1 - (1 - p) ** k)), rel=1e-9)


@pytest.mark.parametrize("name", ROUND_STRATEGIES)
@pytest.mark.parametrize(("eps", "delta", "d"), [(math.log(10) / 2, 1.5e-7, 31),
                                                 (1.0, 1e-6, 5), (0.3, 1e-9, 100)])  # fmt: skip
def test_rounds_calibration_meets_the_budget(name: str, eps: float, delta: float, d: int) -> None:
    st = make_strategy(name, epsilon=eps, delta=delta, d=d)
    assert isinstance(st, RoundsSelection)
    pr = st.privacy()
    assert pr["epsilon"] == eps and pr["delta"] <= delta
    # the parts add up: zCDP over rounds, unique-item δ over rounds
    assert pr["rho"] == pytest.approx(sum(1 / (2 * r.sigma**2) for r in st.rounds))
    assert pr["delta_noise"] == pytest.approx(zcdp_delta(rho=pr["rho"], epsilon=eps))
    assert pr["delta_threshold"] == pytest.approx(sum(r.delta_unique() for r in st.rounds))
    assert all(r.sigma * r.scale <= 1e4 for r in st.rounds)  # the exact sampler's range
    assert len(st.rounds) == {"probe-reweight": 2, "probe-reweight-2r": 3, "dp-sips": 3}[name]
    assert len(st.rounds) == st.FACTS.rounds
    desc = st.describe()
    assert json.dumps(desc) and desc["strategy"] == name


def _pool_log(n_users: int, seed: int) -> pl.DataFrame:
    """A small Zipf-like log: user, item, pos."""
    g = np.random.default_rng(seed)
    rows = []
    for u in range(n_users):
        k = int(g.integers(1, 12))
        q = g.zipf(1.3, size=k)
        for i, x in enumerate(q):
            rows.append((u, f"q{int(x) % 400}", i))
    return pl.DataFrame(rows, schema={"user": pl.Int64, "item": pl.String, "pos": pl.Int64},
                        orient="row")  # fmt: skip


@pytest.mark.parametrize("name", STRATEGIES)
def test_selection_does_not_depend_on_row_order_or_user_id_type(name: str) -> None:
    """Engines deliver the users' items in different row orders and read numeric ids as
    integers or text: under one seed every strategy selects the same items."""
    df = _pool_log(3000, 1)
    st = make_strategy(name, epsilon=8.0, delta=1e-5, d=6)
    pool = user_item_pool(df, pool=12)
    a = st.select(pool, rng=make_rng(7)).sort("item")
    shuffled = pool.sample(fraction=1.0, shuffle=True, seed=3)
    as_text = shuffled.with_columns(pl.col("user").cast(pl.String))
    b = st.select(as_text, rng=make_rng(7)).sort("item")
    assert a.height > 0 and a.equals(b)


def _policy_reference(sets: pl.DataFrame, p: PolicyGaussian, keys: np.ndarray) -> dict:
    """The sequential rule as written in Gopi et al. (and in searchveil before issue 24)."""
    users = sorted(set(sets.get_column("user").to_list()), key=str)
    order = [u for _, u in sorted(zip(keys.tolist(), users, strict=True))]
    by_user: dict = {}
    for u, w in sets.select("user", "item").iter_rows():
        by_user.setdefault(u, []).append(w)
    h: dict[str, float] = {}
    for u in order:
        its = by_user[u]
        gaps = [max(p.cutoff - h.get(w, 0.0), 0.0) for w in its]
        norm = math.sqrt(sum(g * g for g in gaps))
        if norm == 0.0:
            continue
        sc = 1.0 if norm <= 1.0 else 1.0 / norm
        for w, g in zip(its, gaps, strict=True):
            if g > 0.0:
                h[w] = h.get(w, 0.0) + g * sc
    return h


def test_policy_gaussian_vectorised_equals_the_sequential_rule() -> None:
    df = _pool_log(2000, 2)
    sets = user_item_sets(df, d=5)
    p = PolicyGaussian.for_budget(epsilon=2.0, delta=1e-6, d=5)
    got = p.weights(sets, rng=make_rng(11))
    n_users = sets.get_column("user").n_unique()
    keys = make_rng(11).random_keys(n_users)
    want = _policy_reference(sets, p, keys)
    assert set(got) == set(want)
    assert all(got[w] == pytest.approx(want[w], rel=1e-12, abs=1e-12) for w in want)


def test_default_d_rules() -> None:
    from searchveil.io.readers import read_log
    from searchveil.model import items

    root = Path(__file__).resolve().parents[1]
    q = items(read_log(root / "src/searchveil/data/aol-gayo-avello-215-users.tsv"), "queries")
    k = q.unique(["user", "item"]).group_by("user").len().get_column("len").to_list()
    from collections import Counter

    assert tuple(sorted(Counter(k).items())) == REFERENCE_DISTINCT_PER_USER
    eps, dl = math.log(10) / 2, 1 / (10 * 657_426)
    assert default_d("laplace", epsilon=eps, delta=dl)[0] == 1
    dg, rule = default_d("gaussian", epsilon=eps, delta=dl)
    assert 10 <= dg <= 40 and "reference" in rule
    for name in ("policy-gaussian", *ROUND_STRATEGIES):
        d, rule = default_d(name, epsilon=eps, delta=dl, max_users=657_426)
        assert 20 <= d <= 50 and name in rule
    with pytest.raises(InvalidParameterError, match="selection"):
        default_d("magic", epsilon=1.0, delta=1e-6)


def test_item_pool_encoding_detects_hash_collisions(monkeypatch: pytest.MonkeyPatch) -> None:
    df = pl.DataFrame({"user": [1, 1, 2], "item": ["a", "b", "b"], "rank": [0, 1, 0]})
    real_hash = pl.Series.hash

    def clashing(self: pl.Series, seed: int = 0) -> pl.Series:  # every text, one first hash
        return real_hash(self, seed) * 0 if seed == 24 else real_hash(self, seed)

    monkeypatch.setattr(pl.Series, "hash", clashing)
    pool = ItemPool.from_frame(df)
    assert pool.names.to_list() == ["a", "b"] and pool.items.tolist() == [0, 1, 1]


@pytest.mark.parametrize("name", ROUND_STRATEGIES)
def test_select_cli_with_clicks_default_d_and_refusals(name: str, aol_215_path: Path,
                                                       tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "r"
    r = runner.invoke(app, ["release", "korolova", str(aol_215_path), "--out", str(out),
                            "--epsilon", "2.3", "--delta", "1e-4", "--selection", name,
                            "--max-clicks", "2", "--max-users", "1000", "--seed", "1",
                            "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    led = json.loads((out / "ledger.json").read_text())
    par = led["parameters"]
    assert par["selection"] == name and par["d_c"] == 2 and "reference sample" in par["d_rule"]
    assert led["epsilon"] <= 2.3 * (1 + 1e-9) and led["delta"] <= 1e-4
    assert [e["step"] for e in led["events"]] == ["select_queries", "query_counts",
                                                  "select_urls", "click_counts"]  # fmt: skip
    assert (out / "queries.tsv").exists() and (out / "clicks.tsv").exists()
    for extra, msg in (
        (["--max-users", "100000"], "delta"),  # δ = 1e-4 is not < 1/U = 1e-5
        (["--split", "1,1"], "split"),  # 4 weights with --max-clicks
        (["--serp", str(aol_215_path)], "serp"),
        (["--max-queries", "0"], "max-queries"),
    ):
        bad = tmp_path / f"bad{len(msg)}"
        r = runner.invoke(app, ["release", "korolova", str(aol_215_path), "--out", str(bad),
                                "--epsilon", "2.3", "--delta", "1e-4", "--selection", name,
                                "--max-clicks", "2", *extra])  # fmt: skip
        assert r.exit_code == 2 and msg in r.output and not bad.exists(), (extra, r.output)


def _engine_run(path: Path, out: Path, name: str, engine: str, extra: list[str]) -> dict:
    r = runner.invoke(app, ["release", "korolova", str(path), "--out", str(out),
                            "--epsilon", "20", "--delta", "1e-5", "--selection", name,
                            "--max-queries", "40", "--max-clicks", "3", "--seed", "4",
                            "--engine", engine, "--json", *extra])  # fmt: skip
    assert r.exit_code == 0, r.output
    return json.loads((out / "ledger.json").read_text())


# the engines' equality per strategy: the round strategies (~4 s each) in the default tier, the
# one-round ones (~9 s each on the top-1000 log) in the full tier
@pytest.mark.parametrize(
    "name",
    [n if n in ROUND_STRATEGIES else pytest.param(n, marks=pytest.mark.slow) for n in STRATEGIES],
)
def test_memory_and_polars_engine_write_the_same_tables(
    name: str, aol_top1000_path: Path, tmp_path: Path
) -> None:
    for engine in ("memory", "polars"):
        _engine_run(aol_top1000_path, tmp_path / engine, name, engine, [])
    for table in ("queries.tsv", "clicks.tsv"):
        a = (tmp_path / "memory" / table).read_text()
        assert a == (tmp_path / "polars" / table).read_text()
    assert len((tmp_path / "memory" / "queries.tsv").read_text().splitlines()) > 2


@pytest.mark.parametrize("name", ROUND_STRATEGIES)
def test_neighbouring_logs_same_seed(name: str, aol_top1000: object, tmp_path: Path) -> None:
    """D and D′ (D without one user), same seed: both releases are well formed and everything
    the ledger says of the mechanism — strategy, d and its rule, rounds, noise, thresholds,
    (ε, δ) — is the same (no parameter is read from the data); only the input record and the
    tables differ, and no query of D′'s release is absent from D′."""
    from searchveil.model import SearchLog

    log = aol_top1000
    assert isinstance(log, SearchLog)
    heavy = log.df.group_by("user").len().sort("len", descending=True).get_column("user")[0]
    minus = SearchLog(df=log.df.filter(pl.col("user") != heavy), info=log.info)
    outs = []
    for lg in (log, minus):
        sp = SelectionParams(strategy=name, epsilon=20.0, delta=1e-5, d=31, d_c=3,
                          split=(1.0, 1.0, 1.0, 1.0))  # fmt: skip
        rel = release_selection(lg, sp, rng=make_rng(9))
        outs.append(rel)
    la, lb = (json.loads(json.dumps(r.ledger, default=str)) for r in outs)
    for k in ("parameters", "events", "epsilon", "delta", "accounting", "guarantee"):
        assert la[k] == lb[k], k
    # the input record is private (provenance), never in the ledger (issue 21)
    assert "inputs" not in la and outs[0].inputs[0]["users"] == outs[1].inputs[0]["users"] + 1
    minus_q = set(items(minus, "queries").get_column("item").to_list())
    assert set(outs[1].tables["queries"].get_column("query").to_list()) <= minus_q


def _naive_reroute(sets: list[list[str]], tau: float) -> dict[str, float]:
    """The single-round reading of Chen et al.'s MAD that searchveil does NOT implement: basic
    weights from the exact data, items above τ capped at τ, each user's freed excess split over its
    items below τ."""
    w: dict[str, float] = {}
    for s_ in sets:
        for i in s_:
            w[i] = w.get(i, 0.0) + 1 / math.sqrt(len(s_))
    out = {i: min(x, tau) for i, x in w.items()}
    for s_ in sets:
        v = 1 / math.sqrt(len(s_))
        excess = sum(v * (1 - min(1.0, tau / w[i])) for i in s_)
        light = [i for i in s_ if w[i] < tau]
        for i in light:
            out[i] += excess / len(light)
    return out


def test_single_round_reroute_breaks_the_l2_sensitivity() -> None:
    """docs/privacy/selection.md's counterexample: the added user's K items are just above τ,
    their holders also hold one item j just below it, so all the extra excess lands on j —
    the weights move by ≈ √K in ℓ2, not by 1 (the basic weighting's sensitivity)."""
    K, tau = 100, 50.0
    n = int(tau * math.sqrt(K + 1)) - 2
    heavy = [f"i{m}" for m in range(K)]
    d = [heavy + ["j"] for _ in range(n)] + [list(heavy) for _ in range(3)]
    a, b = _naive_reroute(d, tau), _naive_reroute([*d, list(heavy)], tau)
    diff = np.array([b.get(k, 0.0) - a.get(k, 0.0) for k in set(a) | set(b)])
    assert np.linalg.norm(diff) > 9.5  # ≈ √K = 10


@pytest.mark.parametrize("name", ROUND_STRATEGIES)
def test_the_lemma_each_round_moves_by_the_added_users_vector(name: str) -> None:
    """Given the outputs of the earlier rounds, every round's weights on D + u minus those on D
    are exactly u's own vector (⌊s/√k⌋ on its k ≤ d items of the round): ℓ2 ≤ s."""
    df = _pool_log(1500, 5)
    u = pl.DataFrame({"user": [10**6] * 9, "item": [f"q{x}" for x in (1, 2, 3, 5, 8)] +
                      ["only-u-1", "only-u-2", "only-u-3", "only-u-4"],
                      "pos": list(range(9))})  # fmt: skip
    st = make_strategy(name, epsilon=2.0, delta=1e-6, d=4)
    assert isinstance(st, RoundsSelection)
    p0 = ItemPool.from_frame(user_item_pool(df, pool=st.pool))
    p1 = ItemPool.from_frame(user_item_pool(pl.concat([df, u]), pool=st.pool))
    g = np.random.default_rng(1)
    names = sorted(set(p1.names.to_list()))
    rel_names = set(g.choice(names, 40, replace=False).tolist())  # earlier rounds' outputs
    ok_names = set(g.choice(names, 300, replace=False).tolist())  # bias-round cutoff passed
    for i, r in enumerate(st.rounds):
        ws = []
        for p in (p0, p1):
            nm = p.names.to_list()
            released = np.array([x in rel_names for x in nm])
            ok = np.array([x in ok_names for x in nm])
            bias_rows = st.round_rows(p, 0, np.zeros(p.n_items, bool), None, None)
            rows = st.round_rows(p, i, released, ok, bias_rows)
            w = r.weights(p.users[rows], p.items[rows], p.n_items)
            ws.append(dict(zip(nm, w.tolist(), strict=True)))
        diff = {k: ws[1].get(k, 0.0) - ws[0].get(k, 0.0) for k in set(ws[0]) | set(ws[1])}
        moved = {k: v for k, v in diff.items() if v != 0.0}
        k_u = len(moved)
        assert k_u <= r.d
        if k_u:
            a = float(unit_weights(r.scale, r.d)[k_u])
            assert all(v == a for v in moved.values()), (name, i, moved)
            assert math.sqrt(sum(v * v for v in moved.values())) <= r.scale


def test_select_params_from_budget_is_the_one_default_d_rule() -> None:
    """Issue 34 item 2: the parameters from (ε, δ) and public bounds in one place — the CLI's
    select_params and the demo call SelectionParams.from_budget."""
    p = SelectionParams.from_budget(strategy="mad2r", epsilon=2.0, delta=1e-7, d_c=1,
                                 max_users=100_000)  # fmt: skip
    # the default d is the strategy's rule at the selection step's share (4 parts, δ/2)
    d, rule = default_d("mad2r", epsilon=0.5, delta=5e-8, max_users=100_000)
    assert (p.d, p.d_rule, p.split) == (d, rule, (1.0, 1.0, 1.0, 1.0)) and d > 1
    o = KorolovaOptions(selection="mad2r", epsilon=2.0, delta=1e-7, d_c=1, max_users=100_000)
    assert select_params(o) == p
    given = SelectionParams.from_budget(strategy="gaussian", epsilon=2.0, delta=1e-7, d=7)
    assert (given.d, given.d_rule) == (7, "given (--max-queries)")
    # δ < 1/U is refused naming δ and the bound; a bad d names --max-queries
    with pytest.raises(InvalidParameterError, match="delta") as e:
        SelectionParams.from_budget(strategy="mad2r", epsilon=2.0, delta=1e-3, max_users=5000)
    assert "1/U" in str(e.value)
    with pytest.raises(InvalidParameterError, match="max-queries"):
        SelectionParams.from_budget(strategy="mad2r", epsilon=2.0, delta=1e-7, d=0)
    with pytest.raises(InvalidParameterError, match="selection"):
        SelectionParams.from_budget(strategy="magic", epsilon=2.0, delta=1e-7)
