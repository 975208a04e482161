"""The synthetic log generator: what it fits, that the output reproduces the fitted shape, that
it is deterministic under a seed (whatever the number of workers), atomic, and that the CLI
rejects bad parameters with exit 2 and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from searchveil.cli import app
from searchveil.errors import InvalidParameterError, OutputExistsError
from searchveil.io.readers import read_log
from searchveil.model import SearchLog, log_stats, query_events
from searchveil.rng import make_rng
from searchveil.synth import (
    SynthModel,
    expected_rows,
    exposure,
    fit,
    generate,
    heldout_head_check,
    heldout_split_check,
    heldout_window_check,
    hold_probability,
    synthetic_events,
    user_share_curve,
    window_share_curve,
    write_synthetic,
)

BUNDLED = Path(__file__).resolve().parents[1] / "src/searchveil/data/aol-gayo-avello-215-users.tsv"

runner = CliRunner()


@pytest.fixture(scope="module")
def model215(aol_215) -> SynthModel:
    return fit(aol_215, rng=make_rng(11))


def test_fit_matches_the_sample_exactly(aol_215, model215):
    ev = query_events(aol_215)
    assert model215.sample_users == 215
    assert sum(model215.events_per_user) == ev.height
    no_click = (ev.get_column("clicks") == 0).mean()
    assert model215.clicks_per_event[0] == pytest.approx(no_click)
    assert sum(model215.url_rank_probs) == pytest.approx(1.0)
    assert 0 < model215.repeat_rate < 1 and 0 < model215.tail_rate < 1
    assert 0.3 <= model215.heaps_beta <= 1.0
    # the head spellings are the sample's own queries, most users first
    holders = ev.select("user", "query").unique().group_by("query").len()
    assert holders.filter(pl.col("len") >= 2).height == model215.head_vocab
    assert len(model215.head_queries) == holders.height
    assert set(model215.head_queries) == set(holders.get_column("query").to_list())
    top = holders.sort("len", descending=True).get_column("len")[0]
    first = holders.filter(pl.col("query") == model215.head_queries[0]).get_column("len")[0]
    assert first == top
    # pinned: one probability per query held by >= 3 users, decreasing
    assert len(model215.head_probs) == holders.filter(pl.col("len") >= 3).height
    assert np.all(np.diff(model215.head_probs) <= 0)
    assert 0.2 <= model215.head_gamma <= 1.0 and 0.5 <= model215.head_alpha <= 1.5
    assert SynthModel.from_json(model215.to_json()) == model215


def test_generated_log_has_the_fitted_shape(tmp_path: Path, model215):
    out = tmp_path / "s.tsv"
    res = write_synthetic(model215, out, users=3000, rng=make_rng(5))
    log = read_log(out)  # the AOL reader accepts it
    assert log.n_users == 3000 and log.n_rows == res["rows"]
    ev = query_events(log)
    epu = ev.height / 3000
    assert epu == pytest.approx(np.mean(model215.events_per_user), rel=0.12)
    no_click = float((ev.get_column("clicks") == 0).mean())
    assert no_click == pytest.approx(model215.clicks_per_event[0], abs=0.03)
    later = ev.with_columns(f=pl.col("query").is_first_distinct().over("user")).filter(
        pl.col("pos") > 0
    )
    rep = float((~later.get_column("f")).mean())
    # repeats are drawn at the fitted rate; tail/head draws add a few accidental repeats
    assert model215.repeat_rate - 0.03 < rep < model215.repeat_rate + 0.1
    # same (query, url) pairs recur across users, as in a real log
    st = log_stats(log)
    assert st["distinct_clicks"] < st["clicks"]
    assert res["rows"] == pytest.approx(expected_rows(model215, 3000), rel=0.12)


def test_rows_target_rescales_activity(model215):
    dfs = list(generate(model215, users=2000, rows=200_000, rng=make_rng(1), chunk_users=700))
    total = sum(d.height for d in dfs)
    assert total == pytest.approx(200_000, rel=0.08)
    ids = pl.concat([d.select("AnonID") for d in dfs]).get_column("AnonID")
    assert ids.n_unique() == 2000 and ids.is_sorted()


def test_seed_determinism_independent_of_workers(tmp_path: Path, model215):
    a, b, c = tmp_path / "a.tsv", tmp_path / "b.tsv", tmp_path / "c.tsv"
    write_synthetic(model215, a, users=900, rng=make_rng(7), chunk_users=300, workers=1)
    write_synthetic(model215, b, users=900, rng=make_rng(7), chunk_users=300, workers=2)
    write_synthetic(model215, c, users=900, rng=make_rng(8), chunk_users=300, workers=1)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_formats_agree(tmp_path: Path, model215):
    paths = [tmp_path / n for n in ("x.tsv", "x.tsv.gz", "x.parquet")]
    for p in paths:
        write_synthetic(model215, p, users=400, rng=make_rng(3), chunk_users=150)
    frames = [read_log(p).df.select("user", "query", "url") for p in paths]
    assert frames[0].equals(frames[1]) and frames[0].equals(frames[2])


def test_opaque_strings_carry_no_sample_text(model215):
    df = next(generate(model215, users=300, rng=make_rng(2), strings="opaque"))
    words = set(
        df.select(pl.col("Query").str.split(" ")).explode("Query").get_column("Query").to_list()
    )
    assert words and all(w.startswith("w") and w[1:].isdigit() for w in words)
    assert not words & set(model215.words[:50])


def test_failure_leaves_nothing(tmp_path: Path, model215):
    out = tmp_path / "fail.tsv"

    class Boom(RuntimeError):
        pass

    def explode(done: int, rows: int) -> None:
        raise Boom

    with pytest.raises(Boom):
        write_synthetic(
            model215, out, users=600, rng=make_rng(1), chunk_users=200, on_chunk=explode
        )
    assert list(tmp_path.iterdir()) == []
    out.write_text("keep")
    with pytest.raises(OutputExistsError):
        write_synthetic(model215, out, users=10, rng=make_rng(1))
    assert out.read_text() == "keep"


def test_invalid_parameters_are_typed(model215):
    with pytest.raises(InvalidParameterError, match="users"):
        next(generate(model215, users=0, rng=make_rng(1)))
    with pytest.raises(InvalidParameterError, match="strings"):
        next(generate(model215, users=5, rng=make_rng(1), strings="fancy"))


def test_cli_synth_json_and_errors(tmp_path: Path, aol_215_path: Path):
    out = tmp_path / "s.tsv.gz"
    model = tmp_path / "m.json"
    r = runner.invoke(
        app,
        ["synth", "--like", str(aol_215_path), "--users", "500", "--out", str(out),
         "--seed", "4", "--workers", "1", "--save-model", str(model), "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert res["users"] == 500 and res["rows"] == read_log(out).n_rows
    assert res["format"] == "tsv.gz" and res["seeded"] is True
    assert res["model"]["fitted"]["sample_users"] == 215
    r2 = runner.invoke(
        app,
        ["synth", "--model", str(model), "--users", "50", "--out", str(tmp_path / "m.parquet"),
         "--seed", "1", "--json"],
    )  # fmt: skip
    assert r2.exit_code == 0, r2.output
    for bad in (
        ["--users", "0"],
        ["--users", "10", "--rows", "-3"],
        ["--users", "10", "--strings", "nope"],
        ["--users", "10", "--workers", "0"],
    ):
        target = tmp_path / "bad.tsv"
        r = runner.invoke(app, ["synth", "--like", str(aol_215_path), "--out", str(target), *bad])
        assert r.exit_code == 2, (bad, r.output)
        assert "error" in r.output and not target.exists()
    r = runner.invoke(app, ["synth", "--users", "10", "--out", str(tmp_path / "n.tsv")])
    assert r.exit_code == 2 and "--like/--model" in r.output


@pytest.fixture(scope="module")
def bundled():
    log = read_log(BUNDLED)
    return log, fit(log, rng=make_rng(11))


def test_pinned_probabilities_reproduce_the_sample_holders(bundled):
    log, m = bundled
    ev = query_events(log)
    n = ev.group_by("user").len().get_column("len").to_numpy()
    p = np.asarray(m.head_probs)
    w = exposure(n, m.repeat_rate, m.head_gamma)
    expected = hold_probability(p[:, None] * w[None, :], n[None, :], m.repeat_rate).sum(axis=1)
    held = (
        ev.select("user", "query").unique().group_by("query").len()
        .sort("len", descending=True).get_column("len").head(p.size).to_numpy()
    )  # fmt: skip
    np.testing.assert_allclose(expected, held, rtol=1e-6)


def _dense_fit(log, min_head_users: int = 3):  # noqa: ANN001, ANN202
    """The head's fit as it was before issue 42's 100,000-user log (synth/fit.py at 3e6a4af):
    the dense pinned-query × user holding matrix, each user's likelihood term summed. Returns
    (γ, p per pinned query, most held first)."""
    ev = query_events(log)
    ev = ev.with_columns(first=pl.col("query").is_first_distinct().over("user"))
    later = ev.filter(pl.col("pos") > 0)
    r = int((~later.get_column("first")).sum()) / later.height
    uq = ev.filter(pl.col("first")).select("user", "query")
    ranked = ev.group_by("query").agg(pl.col("user").n_unique().alias("h"), pl.len().alias("e"))
    ranked = ranked.sort(["h", "e", "query"], descending=[True, True, False])
    pinned = ranked.filter(pl.col("h") >= min_head_users).get_column("query")
    per_user = ev.group_by("user").len().sort("user")
    n = per_user.get_column("len").to_numpy().astype(np.int64)
    pairs = (uq.filter(pl.col("query").is_in(pinned.implode()))
             .join(per_user.with_row_index("ui").select("user", "ui"), on="user")
             .join(pl.DataFrame({"query": pinned}).with_row_index("qi"), on="query"))  # fmt: skip
    held = np.zeros((pinned.len(), n.size))
    held[pairs["qi"].to_numpy(), pairs["ui"].to_numpy()] = 1.0
    h = held.sum(axis=1)
    best = None
    for g in np.round(np.arange(0.2, 1.0001, 0.02), 2):
        w = exposure(n, r, float(g))[None, :]
        lo, hi = np.zeros(h.size), np.ones(h.size)
        for _ in range(60):
            mid = (lo + hi) / 2
            e = hold_probability(np.minimum(mid[:, None] * w, 1 - 1e-12), n[None, :], r).sum(1)
            lo, hi = np.where(e > h, lo, mid), np.where(e > h, mid, hi)
        p = (lo + hi) / 2
        pr = np.clip(hold_probability(np.minimum(p[:, None] * w, 1 - 1e-12), n[None, :], r),
                     1e-12, 1 - 1e-12)  # fmt: skip
        ll = float((held * np.log(pr) + (1 - held) * np.log1p(-pr)).sum())
        if best is None or ll > best[0]:
            best = (ll, float(g), p)
    return best[1], best[2]


def test_the_head_fit_is_the_dense_one_in_bounded_memory(bundled, model215, aol_215) -> None:  # noqa: ANN001
    """The head's fit sums its likelihood by (holders, events) instead of over a dense
    pinned-query × user matrix (29.5 GiB on a 100,000-user log): the same γ and the same
    probabilities as the dense fit, on the bundled sample and on a 600-user synthetic log."""
    big = pl.concat(list(generate(bundled[1], users=600, rng=make_rng(2), rows=18_000)))
    df = big.select(pl.col("AnonID").alias("user"), pl.col("Query").alias("query"),
                    pl.col("QueryTime").str.to_datetime("%Y-%m-%d %H:%M:%S").alias("time"),
                    pl.col("ItemRank").alias("rank"), pl.col("ClickURL").alias("url"))  # fmt: skip
    for log, m in ((aol_215, model215), (SearchLog.from_frame(df), None)):
        m = m or fit(log, rng=make_rng(11))
        gamma, p = _dense_fit(log)
        assert p.size == len(m.head_probs) > 20
        assert m.head_gamma == gamma
        np.testing.assert_allclose(m.head_probs, p, rtol=1e-9, atol=0)


@pytest.mark.slow
def test_head_is_real_and_holds_as_population_grows(bundled):
    """Issue 12 item 4, without shared data: calibrated on the bundled sample, the top query's
    user share at 50,000 users is within a factor 1.5 of the sample's, the top 100 are real
    queries of the sample (no invented one-word head), and shares do not shrink with U."""
    log, m = bundled
    sample = user_share_curve(query_events(log), 100)
    big = synthetic_events(m, users=50_000, rng=make_rng(3))
    curve = user_share_curve(big, 100)
    assert 1 / 1.5 < curve[0] / sample[0] < 1.5
    for k in range(10):
        assert 1 / 1.5 < curve[k] / sample[k] < 1.5, k
    top = (
        big.select("user", "query").unique().group_by("query").len()
        .sort("len", descending=True).get_column("query").head(100).to_list()
    )  # fmt: skip
    real = set(m.head_queries)
    assert all(q in real for q in top[:40])
    assert sum(q in real for q in top) >= 90
    assert not {"of", "in", "the", "and", "for"} & set(top)
    small = user_share_curve(synthetic_events(m, users=5_000, rng=make_rng(4)), 20)
    np.testing.assert_allclose(small[:5], curve[:5], rtol=0.25)


@pytest.fixture(scope="module")
def heldout(bundled, aol_top1000):
    _, m = bundled
    return heldout_head_check(m, query_events(aol_top1000), rng=make_rng(5), users=4_000)


@pytest.mark.slow
def test_heldout_head_check_against_top1000(heldout):
    """Held-out check (docs/synth.md): calibrated on the bundled 215 users, compared with the
    1,000 most active AOL users at matched activity under the same click filter."""
    res = heldout
    assert res["heldout_users"] == 1000
    # measured (docs/synth.md): every top-20 share within a factor 2.2, the synthetic above
    # the held-out; the top 3 within 1.5
    ratio = np.asarray(res["ratio"][:20])
    assert res["worst_factor_top20"] < 2.4, ratio
    assert (ratio > 1 / 1.5).all() and (ratio[:3] < 1.5).all(), ratio


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="issue 12 target not met: heavy users' top-20 shares are over-predicted up to "
    "~2.1x; the real calibration sample itself is further than 1.5x from the held-out sample "
    "at the same activity and size (test_the_two_real_samples_differ_at_the_same_activity; "
    "docs/synth.md, 'Held-out head check'). Within one population the target is met: "
    "test_split_check_on_the_heavy_aol_users",
)
def test_heldout_head_target_factor_1_5(heldout):
    assert heldout["worst_factor_top20"] <= 1.5, heldout["ratio"][:20]


def test_older_model_json_without_a_pinned_head_still_generates(model215):
    old = json.loads(model215.to_json())
    for key in ("head_probs", "head_alpha", "head_gamma", "head_join", "head_join_exposure",
                "head_mass_max"):  # fmt: skip
        old.pop(key)
    m = SynthModel.from_json(json.dumps(old))
    df = next(generate(m, users=500, rng=make_rng(1)))
    assert df.get_column("AnonID").n_unique() == 500
    # the old law: the head gets 1 − tail_rate of the fresh draws, so few queries are shared
    shared = df.select("AnonID", "Query").unique().group_by("Query").len()
    assert 0 < shared.filter(pl.col("len") >= 2).height < shared.height


def test_synthetic_events_keys_match_the_spelled_log(bundled):
    _, m = bundled
    spelled = synthetic_events(m, users=3_000, rng=make_rng(8), chunk_users=1_000)
    keys = synthetic_events(m, users=3_000, rng=make_rng(8), chunk_users=1_000, spell=False)
    assert keys.schema["query"] == pl.UInt64 and keys.columns == ["user", "query", "pos"]
    # same draws: same users, about the same events and distinct queries
    assert keys.get_column("user").n_unique() == spelled.get_column("user").n_unique() == 3_000
    assert keys.height == pytest.approx(spelled.height, rel=0.01)
    assert keys.get_column("query").n_unique() == pytest.approx(
        spelled.get_column("query").n_unique(), rel=0.01
    )
    np.testing.assert_allclose(user_share_curve(keys, 20), user_share_curve(spelled, 20), rtol=0.02)


def test_window_share_curve_exact_on_a_hand_made_log():
    ev = pl.DataFrame({"user": [1, 1, 1, 2, 2, 3], "query": ["a", "b", "a", "a", "c", "b"]})
    # windows at least as long as every user: the plain curve (a: 2 users, b: 2, c: 1)
    full = window_share_curve(ev, [5], rng=make_rng(1), replicas=7)
    np.testing.assert_allclose(full, user_share_curve(ev))
    # zero-length windows hold nothing but count in the denominator
    assert window_share_curve(ev, [0], rng=make_rng(1), replicas=3).size == 0
    half = window_share_curve(ev, [0, 5], rng=make_rng(2), replicas=4_000)
    np.testing.assert_allclose(half, user_share_curve(ev) / 2, atol=0.02)
    # one-event windows: each pseudo-user holds exactly one query; user 1's window starts at
    # 0, 1 or 2 (a, b, a): P(a) = (2/3 + 1/2 + 0) / 3, P(b) = (1/3 + 0 + 1) / 3, P(c) = 1/6
    one = window_share_curve(ev, [1], rng=make_rng(3), replicas=6_000)
    assert one.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(one, [4 / 9, 7 / 18, 1 / 6], atol=0.01)
    with pytest.raises(InvalidParameterError, match="lengths"):
        window_share_curve(ev, [-1], rng=make_rng(1))


@pytest.mark.slow
def test_the_two_real_samples_differ_at_the_same_activity(aol_215, aol_top1000):
    """Why the factor-1.5 held-out target is not met (docs/synth.md): cut the 1,000 heavy AOL
    users down to the calibration sample's activity (random windows of the calibration users'
    clicked-event counts) and to its size (215 users), and the *real* calibration sample is
    still further than 1.5x from them at most top-20 ranks, and its top-20 mass is above every
    one of 300 same-size, same-activity subsamples — a different population, not a model
    error. Fails if a future sample (or reading) makes the two agree."""
    res = heldout_window_check(query_events(aol_215), query_events(aol_top1000),
                               rng=make_rng(5), subsamples=300)  # fmt: skip
    assert res["calibration_users"] == 215 and res["heldout_users"] == 1000
    assert res["calibration_vs_matched_within_1_5_top20"] <= 12
    assert res["calibration_vs_matched_worst_factor_top20"] > 1.8
    assert res["top20_mass"]["share_at_least_calibration"] < 0.01
    # and without the size correction the gap is larger still
    assert res["calibration_worst_factor_top20"] > res["calibration_vs_matched_worst_factor_top20"]


@pytest.mark.slow
def test_synth_check_cli(aol_215_path, aol_top1000_path):
    # one split of the held-out log (the default is 3: test_split_check_on_the_heavy_aol_users
    # runs three through the library; here the CLI's plumbing is checked, --splits with it)
    r = runner.invoke(app, ["synth-check", "--like", str(aol_215_path), "--heldout",
                            str(aol_top1000_path), "--users", "2000", "--subsamples", "20",
                            "--splits", "1", "--seed", "3", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    up, down = res["matched_activity"], res["calibration_activity"]
    assert up["heldout_users"] == 1000 and len(up["ratio"]) == 100
    assert down["calibration_users"] == 215 and len(down["calibration_vs_matched_ratio"]) == 100
    sp = res["split"]
    assert sp["log"] == str(aol_top1000_path) and len(sp["splits"]) == 1
    assert sp["calibration_users"] + sp["heldout_users"] == 1000
    r = runner.invoke(app, ["synth-check", "--like", str(aol_215_path), "--heldout",
                            str(aol_top1000_path), "--top", "5"])  # fmt: skip
    assert r.exit_code == 2 and "--top" in r.output


@pytest.mark.slow
def test_split_check_recovers_its_own_generator(bundled, tmp_path: Path):
    """No shared data needed: a 2,000-user log drawn from the bundled model is split 1:3; a
    model fitted on the 500 calibration users alone must predict the top-20 user shares of
    the 1,500 others (unseen users, a 3x larger population) within a factor 1.5. Fails if the
    fit does not recover the law it was drawn from (e.g. a biased γ or moment matching)."""
    _, m = bundled
    out = tmp_path / "s.tsv"
    write_synthetic(m, out, users=2_000, rng=make_rng(21))
    log = read_log(out)
    res = heldout_split_check(log, rng=make_rng(22), calibration_share=0.25, splits=2)
    assert res["calibration_users"] == 500 and res["heldout_users"] == 1_500
    assert res["synthetic_users"] == 6_000 and len(res["splits"]) == 2
    for run in res["splits"]:
        assert run["worst_factor_top20"] <= 1.5, res["ratio"][:20]
        assert run["within_1_5_top20"] == 20
        # the fit still sees that heavy users hold the pinned head less often (γ < 1); it is
        # not the generator's 0.62: ranks past the pinned ones are drawn at one exposure for
        # every user, and a 500-user refit pins some of them too
        assert m.head_gamma <= run["gamma"] < 1.0, run
    assert res["worst_factor_top20"] == max(r["worst_factor_top20"] for r in res["splits"])


@pytest.mark.slow
def test_split_check_on_the_heavy_aol_users(aol_top1000):
    """The held-out check that the real samples allow (docs/synth.md, 'Split check'): calibrate
    on a random quarter of the 1,000 heaviest AOL users, predict the other 750 at their own
    activity. Measured: worst top-20 factor 1.15-1.37 over 10 splits, tracking the real
    calibration quarter's own distance from the held-out users (1.13-1.33)."""
    res = heldout_split_check(aol_top1000, rng=make_rng(5), calibration_share=0.25, splits=3)
    assert res["calibration_users"] == 250 and res["heldout_users"] == 750
    for run in res["splits"]:
        assert run["within_1_5_top20"] == 20, run
        # the model adds little to the sampling noise of its 250-user input
        assert run["worst_factor_top20"] <= run["real_vs_real_worst_factor_top20"] + 0.15, run
    assert res["worst_factor_top20"] <= 1.5


def test_split_check_rejects_bad_parameters(aol_215):
    with pytest.raises(InvalidParameterError, match="calibration_share"):
        heldout_split_check(aol_215, rng=make_rng(1), calibration_share=1.0)
    with pytest.raises(InvalidParameterError, match="calibration_share"):
        heldout_split_check(aol_215, rng=make_rng(1), calibration_share=0.001)
    with pytest.raises(InvalidParameterError, match="splits"):
        heldout_split_check(aol_215, rng=make_rng(1), splits=0)


def test_synth_check_cli_split_only(aol_215_path):
    r = runner.invoke(app, ["synth-check", "--like", str(aol_215_path), "--split-share", "0.5",
                            "--splits", "1", "--seed", "3", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert "matched_activity" not in res
    sp = res["split"]
    assert sp["calibration_users"] + sp["heldout_users"] == 215 and len(sp["splits"]) == 1
    assert len(sp["ratio"]) == 100 and sp["log"] == str(aol_215_path)
    r = runner.invoke(app, ["synth-check", "--like", str(aol_215_path), "--splits", "0"])
    assert r.exit_code == 2 and "--splits" in r.output
    r = runner.invoke(app, ["synth-check", "--like", str(aol_215_path), "--split-share", "1.5"])
    assert r.exit_code == 2 and "--split-share" in r.output
