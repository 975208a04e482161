"""The end-to-end DP same-schema release (issue 29; docs/privacy/ump.md, "The end-to-end mode"):
parameters and their split, the lower-bound margin, the robust allocation, the generator, the
release on crafted logs (synthetic and real ids), the per-user constraint on the true log, the
CLI (default mode, refusals), and D vs D′ over seeds."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog
from typer.testing import CliRunner

from searchveil.cli import app
from searchveil.errors import InvalidParameterError
from searchveil.io.readers import read_log
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.model import SearchLog, items
from searchveil.release.ump.e2e import (
    REFERENCE_DISTINCT_PAIRS_PER_USER,
    E2EParams,
    bounded_pairs,
    default_max_pairs,
    release_ump_e2e,
)
from searchveil.release.ump.generate import generate_log, user_sizes
from searchveil.release.ump.real_ids import lower_bound_margin, robust_allocation, true_loads
from searchveil.rng import SeededRandom

runner = CliRunner()


def crafted_log(users: int = 3000, pairs: int = 40, seed: int = 1) -> SearchLog:
    """Users clicking 1–4 of ``pairs`` (query, url) pairs with Zipf-like popularity, so that the
    most popular pairs are held by hundreds of users."""
    gen = np.random.Generator(np.random.PCG64(seed))
    w = 1.0 / np.arange(1, pairs + 1)
    rows = []
    for u in range(users):
        k = int(gen.integers(1, 5))
        for j, p in enumerate(gen.choice(pairs, size=k, replace=False, p=w / w.sum())):
            rows.append((u + 100, f"q{p}", f"http://site{p}.example/", j))
    df = pl.DataFrame(rows, schema=["user", "query", "url", "minute"], orient="row")
    df = df.with_columns(
        (pl.datetime(2006, 3, 1) + pl.duration(minutes=pl.col("minute"))).alias("time")
    ).drop("minute")
    return SearchLog.from_frame(df)


@pytest.fixture(scope="module")
def big() -> SearchLog:
    return crafted_log()


# -- parameters -----------------------------------------------------------------------------------
def test_reference_table_is_the_bundled_sample() -> None:
    path = Path(__file__).resolve().parents[1] / "src/searchveil/data/aol-gayo-avello-215-users.tsv"
    it = items(read_log(path), "clicks")
    k = it.group_by("user").agg(pl.col("item").n_unique().alias("k"))
    vc = k.get_column("k").value_counts().sort("k")
    assert tuple(zip(vc["k"].to_list(), vc["count"].to_list(), strict=True)) == (
        REFERENCE_DISTINCT_PAIRS_PER_USER
    )


def test_default_m_is_public_and_in_range() -> None:
    m1, rule = default_max_pairs(epsilon=2.07, delta=1e-7)
    assert 1 <= m1 <= 64 and "reference sample" in rule
    # a function of (ε, δ) only: the same answer every time, and it moves with the budget
    assert default_max_pairs(epsilon=2.07, delta=1e-7)[0] == m1
    p = E2EParams.from_budget(epsilon=2.3, delta=1e-7, max_users=10**6)
    assert (p.max_pairs, p.max_pairs_rule) == default_max_pairs(epsilon=p.eps_counts,
                                                                delta=p.delta_counts)  # fmt: skip


@pytest.mark.parametrize(
    ("kw", "name"),
    [
        ({"epsilon": 0.0, "delta": 1e-7}, "epsilon"),
        ({"epsilon": 1.0, "delta": 0.0}, "delta"),
        ({"epsilon": 1.0, "delta": 1e-3, "max_users": 1000}, "delta"),  # δ ≥ 1/U
        ({"epsilon": 1.0, "delta": 1e-7, "max_pairs": 0}, "max-pairs"),
        ({"epsilon": 1.0, "delta": 1e-7, "split": (1.0, -1.0)}, "split"),
        ({"epsilon": 1.0, "delta": 1e-7, "ids": "pseudonyms"}, "ids"),
        ({"epsilon": 1.0, "delta": 1e-7, "ids": "real", "objective": "kl"}, "objective"),
    ],
)
def test_invalid_parameters_name_themselves(kw: dict, name: str) -> None:
    with pytest.raises(InvalidParameterError) as e:
        E2EParams.from_budget(**kw)
    assert e.value.parameter == name


@pytest.mark.parametrize("ids", ["synthetic", "real"])
@pytest.mark.parametrize(("eps", "dl"), [(2.302585, 1e-7), (0.5, 1e-6), (8.0, 1e-5)])
def test_accounting_is_within_the_budget_and_splits_it(ids: str, eps: float, dl: float) -> None:
    p = E2EParams.from_budget(epsilon=eps, delta=dl, ids=ids, max_users=int(0.1 / dl),
                              schema="counts")  # fmt: skip
    pr = p.privacy()
    assert pr["epsilon"] <= eps * (1 + 1e-9) and pr["delta"] <= dl * (1 + 1e-9)
    assert sum(s["epsilon"] for s in pr["split"].values()) == pytest.approx(pr["epsilon"])
    assert sum(s["delta"] for s in pr["split"].values()) == pytest.approx(pr["delta"])
    zp = p.zealous()
    assert zp.m == p.max_pairs and zp.tau == 1 and zp.item_type == "clicks"
    if ids == "real":
        assert p.b == pytest.approx(-math.log1p(-dl / 4))
        assert pr["split"]["sampling"] == {"epsilon": p.b, "delta": dl / 4}
        assert pr["split"]["lower_bounds"]["delta"] == dl / 4
    else:
        assert pr["split"]["activity_profile"]["epsilon"] == pytest.approx(eps * 0.1)


@pytest.mark.parametrize(("m", "eps", "gamma"), [(1, 1.0, 1e-6), (5, 2.0, 1e-8), (30, 0.3, 0.01)])
def test_lower_bound_margin_is_the_least_valid(m: int, eps: float, gamma: float) -> None:
    p = E2EParams(epsilon=eps + 0.01, delta=4 * gamma, max_pairs=m, ids="real")
    zp = p.zealous()
    t = lower_bound_margin(zp, gamma=gamma)
    lap = DiscreteLaplace(scale=DiscreteLaplace(scale=zp.lam).effective_scale)
    assert zp.m * float(lap.sf(t + 1)) <= gamma  # P[noise > t] = P[noise >= t + 1]
    assert t == 0 or zp.m * float(lap.sf(t)) > gamma


# -- the robust allocation ----------------------------------------------------------------------
def _top_m(v: np.ndarray, m: int) -> float:
    return float(np.sort(v)[::-1][:m].sum())


@settings(max_examples=60, deadline=None)
@given(
    noisy=st.lists(st.integers(min_value=-5, max_value=400), min_size=1, max_size=30),
    margin=st.integers(min_value=0, max_value=20),
    m=st.integers(min_value=1, max_value=6),
    b=st.floats(min_value=1e-4, max_value=3.0),
    objective=st.sampled_from(["size", "diversity"]),
)
def test_allocation_meets_the_robust_constraint(noisy, margin, m, b, objective) -> None:
    x = robust_allocation(np.array(noisy), margin=margin, m=m, b=b, objective=objective)
    lo = np.array(noisy, dtype=float) - margin
    assert (x >= 0).all() and (x[lo < 2] == 0).all()
    ell = np.where(lo >= 2, np.log(np.maximum(lo, 2) / (np.maximum(lo, 2) - 1)), 0.0)
    assert _top_m(x * ell, m) <= b * (1 + 1e-12)


@pytest.mark.parametrize("seed", range(8))
def test_size_allocation_matches_the_lp_and_diversity_is_optimal(seed: int) -> None:
    gen = np.random.Generator(np.random.PCG64(seed))
    noisy = gen.integers(3, 60, size=7)
    m, b = int(gen.integers(1, 4)), float(gen.uniform(0.05, 0.8))
    ell = np.log((noisy - 1.0) / (noisy - 2.0))  # margin 1: L = noisy - 1
    # the LP max Σ x s.t. m t + Σ u ≤ b, u_p ≥ x_p ℓ_p − t: its optimum bounds the integer one
    n = noisy.size
    c = np.r_[-np.ones(n), np.zeros(n + 1)]
    a_ub = np.zeros((n + 1, 2 * n + 1))
    a_ub[0, n : 2 * n], a_ub[0, -1] = 1.0, m
    for p in range(n):
        a_ub[p + 1, p], a_ub[p + 1, n + p], a_ub[p + 1, -1] = ell[p], -1.0, -1.0
    lp = linprog(c, A_ub=a_ub, b_ub=np.r_[b, np.zeros(n)], bounds=(0, None), method="highs")
    x = robust_allocation(noisy, margin=1, m=m, b=b, objective="size")
    assert x.sum() <= -lp.fun + 1e-9
    assert x.sum() >= math.floor(-lp.fun) - n  # floor + greedy loses < 1 draw per pair
    # diversity: brute force over every 0/1 vector
    best = max(
        sum(s) for s in itertools.product((0, 1), repeat=n)
        if _top_m(np.array(s) * ell, m) <= b
    )  # fmt: skip
    xd = robust_allocation(noisy, margin=1, m=m, b=b, objective="diversity")
    assert xd.sum() == best and set(np.unique(xd)) <= {0, 1}


# -- the generator ------------------------------------------------------------------------------
def test_user_sizes_follow_the_profile_and_sum_exactly() -> None:
    gen = np.random.Generator(np.random.PCG64(3))
    sizes = user_sizes([500, 0, 250, 0, 0], 100_000, max_size=10, gen=gen)
    assert sizes.sum() == 100_000 and set(np.unique(sizes[:-1])) <= {1, 3}
    share_three = float((sizes[:-1] == 3).mean())
    assert share_three == pytest.approx(1 / 3, abs=0.02)
    assert user_sizes([0, 0], 10, max_size=5, gen=gen).tolist() == [1] * 10  # nothing to go on
    assert user_sizes([1, 1], 0, max_size=5, gen=gen).size == 0


@pytest.mark.parametrize("seed", [1, 2])
def test_generated_log_keeps_every_count_and_is_sorted(seed: int) -> None:
    gen = np.random.Generator(np.random.PCG64(seed))
    x = np.r_[900, 400, gen.integers(1, 60, size=200)]
    pairs = pl.DataFrame({"query": [f"q{i}" for i in range(x.size)],
                          "url": [f"u{i}" for i in range(x.size)], "x": x})  # fmt: skip
    profile = np.r_[300, 200, 100, 80, 40, 20, 10]
    g = generate_log(pairs, profile, rng=SeededRandom(seed))
    per_pair = g.log.group_by("Query").agg(pl.col("Count").sum()).sort("Query")
    want = pairs.select(pl.col("query").alias("Query"), pl.col("x").alias("Count")).sort("Query")
    assert per_pair.to_dicts() == want.to_dicts()
    assert g.log.select("AnonID", "Query", "ClickURL").is_duplicated().sum() == 0
    assert g.log.equals(g.log.sort("AnonID", "Query", "ClickURL"))
    assert g.merged_rows <= 0.01 * g.rows
    assert sorted(g.log.get_column("AnonID").unique().to_list()) == list(range(1, g.users + 1))
    again = generate_log(pairs, profile, rng=SeededRandom(seed))
    assert again.log.equals(g.log)


def test_generator_on_nothing() -> None:
    pairs = pl.DataFrame({"query": [], "url": [], "x": []},
                         schema={"query": pl.String, "url": pl.String, "x": pl.Int64})  # fmt: skip
    g = generate_log(pairs, [3, 2], rng=SeededRandom(1))
    assert g.rows == 0 and g.log.columns == ["AnonID", "Query", "ClickURL", "Count"]


# -- releases -------------------------------------------------------------------------------------
def _counted(log: SearchLog, p: E2EParams, queries: pl.DataFrame | None) -> pl.DataFrame:
    """An independent restatement of what each pair step counts per user."""
    cl = items(log, "clicks").sort("user", "pos").unique(["user", "item"], keep="first",
                                                         maintain_order=True)  # fmt: skip
    first = pl.int_range(pl.len()).over("user")
    if p.pairs == "zealous":
        return cl.filter(first < p.max_pairs)
    sp = p.select()
    cl = cl.filter(first < sp.click_pool).join(queries, on="query", how="semi")
    return cl.filter(pl.int_range(pl.len()).over("user") < sp.d_c)


@pytest.mark.parametrize("pairs", ["probe-reweight-2r", "zealous"])
def test_synthetic_release_is_non_empty_consistent_and_random(big: SearchLog, pairs: str) -> None:
    p = E2EParams.from_budget(epsilon=2.3, delta=1e-5, max_pairs=2, max_users=5000, pairs=pairs,
                              schema="counts")  # fmt: skip
    counts = []
    for seed in (1, 2):
        rel = release_ump_e2e(big, p, rng=SeededRandom(seed))
        log, cnt = rel.tables["log"], rel.tables["counts"]
        assert cnt.height > 5 and log.height > 100
        per_pair = log.group_by(pl.col("Query").alias("query"), pl.col("ClickURL").alias("url"))
        got = per_pair.agg(pl.col("Count").sum().alias("x_ij")).sort("query", "url")
        assert got.to_dicts() == cnt.sort("query", "url").to_dicts()
        assert set(log.get_column("AnonID").to_list()) <= set(range(1, 10**6))  # synthetic ids
        led = rel.ledger
        assert led["guarantee"]["counts_are_private"] is True
        assert led["epsilon"] <= 2.3 * (1 + 1e-9) and led["delta"] <= 1e-5
        assert "users" not in json.dumps(led["parameters"])
        # the exact profile counts each (user, published pair) once: Σ j·a_j = Σ n_p
        exact = np.array(rel.report["profile_exact"])
        queries = rel.tables["queries"].select("query") if pairs == "probe-reweight-2r" else None
        n_p = _counted(big, p, queries).join(cnt.select("query", "url"), on=["query", "url"],
                                             how="semi")  # fmt: skip
        assert int((np.arange(1, exact.size + 1) * exact).sum()) == n_p.height > 0
        counts.append(cnt)
    assert not counts[0].equals(counts[1])  # two seeds, two different count vectors


@pytest.mark.parametrize("seed", range(5))
def test_real_ids_constraint_holds_on_the_true_log(big: SearchLog, seed: int) -> None:
    """δ large here (library call, no declared U) so that real ids are drawn at all; the
    per-user constraint, recomputed from the true bounded log, holds in every run."""
    p = E2EParams.from_budget(epsilon=2.0, delta=0.2, max_pairs=2, ids="real")
    rel = release_ump_e2e(big, p, rng=SeededRandom(seed))
    log, cnt = rel.tables["log"], rel.tables["counts"]
    assert log.height > 0 and cnt.get_column("x_ij").sum() == log.get_column("Count").sum()
    bounded = bounded_pairs(big, p.max_pairs)
    drawn = cnt.with_columns(item=pl.col("query") + "\t" + pl.col("url"))
    loads = true_loads(bounded, drawn.select("item"), drawn.get_column("x_ij").to_numpy())
    assert loads.size > 0 and loads.max() <= p.b
    # sampled ids are real holders of the pairs they are drawn for
    held = bounded.select(pl.col("user").alias("AnonID"), "query", "url")
    j = log.join(held, left_on=["AnonID", "Query", "ClickURL"], right_on=["AnonID", "query", "url"],
                 how="anti")  # fmt: skip
    assert j.height == 0
    assert rel.report["constraint_on_true_log"]["users_over_b"] == 0


def test_real_ids_at_a_safe_delta_publish_almost_no_one(big: SearchLog) -> None:
    """The theorem of docs/privacy/ump.md: E[users in the log] ≤ U·(1 − e^{−b}) < 1."""
    p = E2EParams.from_budget(epsilon=2.3, delta=1e-5, max_pairs=2, ids="real", max_users=5000)
    rel = release_ump_e2e(big, p, rng=SeededRandom(1))
    assert rel.report["expected_users_bound"]["value"] < 0.1
    assert rel.tables["log"].height == 0 and rel.tables["pairs"].height > 0


# -- the CLI --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log = crafted_log()
    p = tmp_path_factory.mktemp("e2e") / "crafted.tsv"
    df = log.df.select(
        pl.col("user").alias("AnonID"), pl.col("query").alias("Query"),
        pl.col("time").dt.strftime("%Y-%m-%d %H:%M:%S").alias("QueryTime"),
        pl.lit(1).alias("ItemRank"), pl.col("url").alias("ClickURL"),
    )  # fmt: skip
    df.write_csv(p, separator="\t")
    return p


def test_cli_default_is_end_to_end(big_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    # (--max-events: the default rule expects the reference sample's activity, ~38 events a user;
    # these 3,000 users have 2.5)
    r = runner.invoke(app, ["release", "ump", str(big_file), "--out", str(out), "--epsilon",
                            "2.3", "--delta", "1e-5", "--max-users", "5000", "--max-events", "16",
                            "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    led = json.loads((out / "ledger.json").read_text())
    assert res["mode"] == "e2e" and res["counts_are_private"] is True
    assert led["guarantee"]["counts_are_private"] is True and led["seeded"] is False
    assert sorted(p.name for p in out.iterdir()) == [
        "counts.tsv", "head_profile.tsv", "ledger.json", "log.tsv", "queries.tsv",
        "query_pairs.tsv", "ranks.tsv",
        "statistics.tsv",
    ]  # fmt: skip
    # the input's own columns (AOL in, AOL out)
    assert (out / "log.tsv").read_text().splitlines()[0].split("\t") == [
        "AnonID", "Query", "QueryTime", "ItemRank", "ClickURL"]  # fmt: skip
    assert res["outputs"]["log"] > 0 and "metrics" in res["private"]
    assert (tmp_path / "r.private.json").exists()


@pytest.mark.parametrize(
    "bad",
    [
        ["--objective", "size"],  # an option of --mode conditional / --ids real
        ["--solver", "lp-floor"],
        ["--mode", "conditional", "--objective", "size", "--max-pairs", "3"],
        ["--mode", "conditional"],  # no objective
        ["--mode", "paper"],
        ["--max-users", "50"],  # δ = 1e-5 is not < 1/U... (it is: U = 50 → 1/U = 0.02) see below
    ],
)
def test_cli_refuses_up_front(big_file: Path, tmp_path: Path, bad: list[str]) -> None:
    out = tmp_path / "r"
    args = ["release", "ump", str(big_file), "--out", str(out), "--epsilon", "2.3", "--delta",
            "1e-5", *bad]  # fmt: skip
    r = runner.invoke(app, args)
    if bad == ["--max-users", "50"]:  # 50 users declared but the input has 3000: refused
        assert r.exit_code == 2 and "max-users" in r.output
    else:
        assert r.exit_code == 2, r.output
    assert not out.exists() and not (tmp_path / "r.private.json").exists()


def test_conditional_mode_is_labelled_not_dp(aol_215_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "c"
    r = runner.invoke(app, ["release", "ump", str(aol_215_path), "--out", str(out), "--mode",
                            "conditional", "--objective", "size", "--solver", "lp-floor",
                            "--epsilon", "0.7", "--delta", "1e-3", "--seed", "1"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "NOT differentially private" in r.stdout
    led = json.loads((out / "ledger.json").read_text())
    assert led["notion"].startswith("not differentially private")
    assert led["guarantee"]["differentially_private"] is False
    help_text = runner.invoke(app, ["release", "ump", "--help"]).stdout
    assert "NOT differentially private" in " ".join(help_text.split())


# -- statistical audit of the output size (fast version; tests/audit has the full one) ----------
def audit_output_size(trials: int, *, halve_noise: bool = False, monkeypatch=None):  # noqa: ANN201
    """D: 12 users hold pair A, one user holds pair B alone; D′: one holder of A removed. The
    event 'the log has at least 12 rows' (the whole pipeline: counts, profile, generation)."""
    from dataclasses import replace

    import searchveil.release.ump.e2e as e2e
    from searchveil.audit import audit_event

    def frame(n: int) -> SearchLog:
        rows = [(u, "qa", "http://a/", 0) for u in range(n)] + [(99, "qb", "http://b/", 1)]
        df = pl.DataFrame(rows, schema=["user", "query", "url", "m"], orient="row")
        return SearchLog.from_frame(
            df.with_columns(time=pl.datetime(2006, 3, 1) + pl.duration(minutes=pl.col("m"))).drop(
                "m"
            )
        )

    # the ZEALOUS pair step (a single noisy histogram whose one pair decides the output size);
    # the probe-reweight-2r query-click release is audited with its family (tests/audit), the
    # profile and the generator are the same for both
    p = E2EParams(epsilon=1.0, delta=1e-3, max_pairs=1, pairs="zealous", schema="counts")
    claim = p.privacy()
    if halve_noise:
        real = e2e._pair_counts
        monkeypatch.setattr(
            e2e, "_pair_counts",
            # the mutant spends twice its share: its own budget check is taken away too
            lambda log, c, b, zp, rng: real(
                log, c, b, replace(zp, lam=zp.lam / 2, budget=None), rng=rng
            ),
        )  # fmt: skip
    rng = SeededRandom(2031)

    def runs(log: SearchLog):  # noqa: ANN202
        def hits(n: int) -> int:
            return sum(
                int(release_ump_e2e(log, p, rng=rng, metrics=False).tables["log"]
                    .get_column("Count").sum() >= 12)
                for _ in range(n)
            )  # fmt: skip

        return hits

    return audit_event(runs(frame(12)), runs(frame(11)), trials=trials,
                       epsilon=claim["epsilon"], delta=claim["delta"])  # fmt: skip


def test_output_size_audit_fast() -> None:
    # lower bound 0.41 of the claimed 1.0 at these seeds (issue 40 changed the seeded noise
    # draws: 0.24 at the former seed 2029, 0.34–0.42 at 2030–2034)
    res = audit_output_size(400)
    assert res.passed, res
    assert res.epsilon_lower_bound > 0.3 * res.epsilon_claimed, res  # not vacuous


@pytest.mark.audit
@pytest.mark.slow
def test_output_size_audit_full_and_its_mutant(monkeypatch: pytest.MonkeyPatch) -> None:
    res = audit_output_size(4000)
    assert res.passed, res
    assert res.epsilon_lower_bound > 0.5 * res.epsilon_claimed, res
    # the mutant is caught with 800 trials as with 1,500 (certified ε ≥ 1.41 against the
    # claimed 1.0 at this seed; 1.54 with 1,500): 1,400 fewer runs of the whole pipeline
    bad = audit_output_size(800, halve_noise=True, monkeypatch=monkeypatch)
    assert not bad.passed, bad  # the audit catches a pipeline with half the noise
    assert bad.epsilon_lower_bound > 1.25 * bad.epsilon_claimed, bad  # with a margin


# -- evaluation of a same-schema release --------------------------------------------------------
def test_user_query_pairs_are_cooccurrences_of_two_users_or_more() -> None:
    from searchveil.evaluate.substitution import user_query_pairs

    df = pl.DataFrame({"user": [1, 1, 2, 2, 2, 3], "query": ["a", "b", "a", "b", "c", "c"]})
    got = dict(zip(*user_query_pairs(df).select("item", "count").to_dict(as_series=False).values(),
                   strict=True))  # fmt: skip
    assert got == {"a\tb": 2, "b\ta": 2}  # (a, c), (b, c) come from one user only


def test_evaluate_scores_an_end_to_end_release(big_file: Path, tmp_path: Path) -> None:
    from searchveil.evaluate import evaluate_release

    out = tmp_path / "r"
    r = runner.invoke(app, ["release", "ump", str(big_file), "--out", str(out), "--epsilon",
                            "2.3", "--delta", "1e-5", "--max-users", "5000", "--seed", "4",
                            "--max-pairs", "2", "--schema", "counts"])  # fmt: skip
    assert r.exit_code == 0, r.output
    ev = evaluate_release(read_log(big_file), out, metrics=("caching", "substitution"))
    ump = ev["ump"]
    assert ump["applicable"] and ump["user_ids"].startswith("synthetic")
    assert ump["output_size"] == pl.read_csv(out / "log.tsv", separator="\t")["Count"].sum()
    assert 0 < ump["volume_share"] <= 1 and "diff_ratio" not in ump
    assert ev["substitution"]["pairs"].startswith("co-occurrence")
    assert ev["caching"]["applicable"]
