"""The d-curve (evaluate.dcurve): exact values on a hand-made log (keep probabilities summed by
hand from the discrete Laplace pmf), agreement with a seeded Monte-Carlo of the real
release_korolova and Gaussian selection, and typed errors."""

from __future__ import annotations

import math
import os

import numpy as np
import polars as pl
import pytest

from searchveil.errors import InvalidParameterError
from searchveil.evaluate.dcurve import (
    ALL_MECHANISMS,
    dcurve,
    dcurve_from_events,
    encode_events,
    format_dcurve,
)
from searchveil.mechanisms.selection import GaussianThreshold, user_item_sets
from searchveil.mechanisms.threshold import effective_scale, korolova_solve_exact
from searchveil.model import SearchLog, items
from searchveil.release.korolova import KorolovaParams, release_korolova
from searchveil.rng import make_rng


def _log(rows: list[tuple[str, str]]) -> SearchLog:
    return SearchLog.from_frame(
        pl.DataFrame({"user": [u for u, _ in rows], "query": [q for _, q in rows]})
    )


def _dlap_sf(k: int, b: float) -> float:
    """P[X >= k] for the discrete Laplace, summed from its pmf (independent of params)."""
    p = math.exp(-1.0 / b)
    c = (1 - p) / (1 + p)
    return sum(c * p ** abs(x) for x in range(k, 4000)) if k > -4000 else 1.0


TINY = [("u1", "a"), ("u1", "a"), ("u1", "b"), ("u2", "a"), ("u2", "c"), ("u3", "a")]


def test_exact_values_on_a_tiny_log():
    eps, delta = 2.0, 0.01
    res = dcurve(_log(TINY), epsilon=eps, delta=delta, ds=[1, 2], mechanisms=["korolova"])
    assert res["distinct_queries"] == 3 and res["query_events"] == 6
    assert res["single_user_queries"] == 2  # b (u1) and c (u2)
    assert res["delta_protects_everyone"] is True
    r1, r2 = res["table"]

    def keep(n: int, d: int) -> float:
        s = korolova_solve_exact(epsilon=eps, delta=delta, d=d, distinct=False)
        return _dlap_sf(int(s["K"]) + 1 - n, effective_scale(float(s["b"])))

    # d = 1: each user's first event is "a" -> a: 3; b, c are not candidates
    assert r1["expected_released"] == pytest.approx(keep(3, 1), rel=1e-9)
    assert r1["volume_pct"] == pytest.approx(100 * keep(3, 1) * 4 / 6, rel=1e-9)
    assert r1["impressions_pct"] == pytest.approx(100 * keep(3, 1) * 3 / 6, rel=1e-9)
    assert r1["single_user_released"] == 0.0
    # d = 2: a: 2 (u1) + 1 (u2) + 1 (u3) = 4, c: 1 (u2), b: not kept
    assert r2["expected_released"] == pytest.approx(keep(4, 2) + keep(1, 2), rel=1e-9)
    assert r2["distinct_pct"] == pytest.approx(100 * (keep(4, 2) + keep(1, 2)) / 3, rel=1e-9)
    assert r2["volume_pct"] == pytest.approx(100 * (4 * keep(4, 2) + keep(1, 2)) / 6, rel=1e-9)
    assert r2["single_user_released"] == pytest.approx(keep(1, 2), rel=1e-9)
    assert res["best"]["korolova"]["d"] in (1, 2)


def test_gaussian_exact_on_a_tiny_log():
    eps, delta = 2.0, 0.01
    res = dcurve(_log(TINY), epsilon=eps, delta=delta, ds=[2], mechanisms=["gaussian"])
    (r,) = res["table"]
    g = GaussianThreshold.for_budget(epsilon=eps, delta=delta, d=2)
    # first 2 distinct queries: u1 {a, b}, u2 {a, c}, u3 {a} -> a: 3, b: 1, c: 1
    k = g.keep_probability(np.array([3, 1]))
    assert r["tau"] == g.tau
    assert r["expected_released"] == pytest.approx(k[0] + 2 * k[1], rel=1e-9)
    assert r["volume_pct"] == pytest.approx(100 * (4 * k[0] + 2 * k[1]) / 6, rel=1e-9)
    assert r["single_user_released"] == pytest.approx(2 * k[1], rel=1e-9)


def _mc_log() -> SearchLog:
    """60 users; query qj is issued by j users (j = 1..12), some users repeat their query."""
    rows: list[tuple[str, str]] = []
    for j in range(1, 13):
        for u in range(j):
            rows.append((f"u{(u * 7 + j) % 60}", f"q{j}"))
            if (u + j) % 3 == 0:
                rows.append((f"u{(u * 7 + j) % 60}", f"q{j}"))
    for u in range(60):
        rows.append((f"u{u}", f"solo{u}"))
    return _log(rows)


def test_korolova_agrees_with_monte_carlo_of_the_release():
    log = _mc_log()
    eps, delta, d = 3.0, 0.01, 3
    exp = dcurve(log, epsilon=eps, delta=delta, ds=[d], mechanisms=["korolova"])["table"][0]
    params = KorolovaParams(d=d, K=exp["K"], b=exp["b"], b_q=1.0)
    occ = items(log, "queries").group_by("item").len()
    total = float(occ.get_column("len").sum())
    rng = make_rng(2024)
    n_runs = 400
    released, volume = [], []
    for _ in range(n_runs):
        q = release_korolova(log, params, rng=rng).tables["queries"]
        released.append(q.height)
        v = occ.join(q.select(pl.col("query").alias("item")), on="item", how="semi")
        volume.append(100 * float(v.get_column("len").sum() or 0) / total)
    for got, key in ((released, "expected_released"), (volume, "volume_pct")):
        se = np.std(got, ddof=1) / math.sqrt(n_runs)
        assert abs(np.mean(got) - exp[key]) < 5 * se + 1e-9, (key, np.mean(got), exp[key], se)
    assert 0 < exp["expected_released"] < 12  # intermediate probabilities: a real check


def test_gaussian_agrees_with_monte_carlo_of_the_selection():
    log = _mc_log()
    eps, delta, d = 3.0, 0.01, 2
    exp = dcurve(log, epsilon=eps, delta=delta, ds=[d], mechanisms=["gaussian"])["table"][0]
    g = GaussianThreshold.for_budget(epsilon=eps, delta=delta, d=d)
    sets = user_item_sets(items(log, "queries"), d=d)
    rng = make_rng(99)
    got = [g.select(sets, rng=rng).height for _ in range(600)]
    se = np.std(got, ddof=1) / math.sqrt(len(got))
    assert abs(np.mean(got) - exp["expected_released"]) < 5 * se
    assert 0 < exp["expected_released"] < 12


def test_monotone_in_epsilon_and_table_format():
    log = _mc_log()
    lo = dcurve(log, epsilon=1.0, delta=0.01, ds=[1, 2, 3])
    hi = dcurve(log, epsilon=4.0, delta=0.01, ds=[1, 2, 3])
    for a, b in zip(lo["table"], hi["table"], strict=True):
        assert a["d"] == b["d"] and a["mechanism"] == b["mechanism"]
        assert b["expected_released"] >= a["expected_released"] - 1e-12
    text = format_dcurve(hi)
    assert text.count("\n") == 4 and "| 3 |" in text


def test_errors_are_typed():
    log = _log(TINY)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        dcurve(log, epsilon=0.0, delta=0.01)
    with pytest.raises(InvalidParameterError, match="delta"):
        dcurve(log, epsilon=1.0, delta=1.5)
    with pytest.raises(InvalidParameterError, match="d"):
        dcurve(log, epsilon=1.0, delta=0.01, ds=[0])
    with pytest.raises(InvalidParameterError, match="mechanisms"):
        dcurve(log, epsilon=1.0, delta=0.01, mechanisms=["zealous"])
    with pytest.raises(InvalidParameterError, match="events"):
        dcurve_from_events(pl.DataFrame({"user": ["a"]}), epsilon=1.0, delta=0.01)


def test_encode_events_is_the_per_user_rule_and_feeds_the_curve() -> None:
    """Issue 33: the demo encodes its synthetic events once (in stretches of whole users) and
    draws every curve and its figures from that encoding: the ids, ranks, distinct ranks and
    holders are those of a plain per-user computation, and a curve from the encoding is the
    curve from the frame."""
    gen = np.random.default_rng(7)
    n = 5000
    user = np.sort(gen.integers(0, 300, n))
    ev = pl.DataFrame({"user": user, "query": gen.zipf(1.6, n).astype(np.uint64),
                       "pos": np.arange(n)})  # fmt: skip
    enc = encode_events(ev)
    ref = ev.with_columns(
        rank=pl.int_range(pl.len()).over("user"),
        first=pl.struct("user", "query").is_first_distinct(),
    ).with_columns(drank=pl.when("first").then(pl.col("first").cum_sum().over("user") - 1))
    assert np.array_equal(enc.keys[enc.qid], ev.get_column("query").to_numpy())
    assert np.array_equal(np.diff(enc.keys) > 0, np.ones(enc.nq - 1, dtype=bool))  # key order
    assert np.array_equal(enc.rank, ref.get_column("rank").to_numpy())
    assert np.array_equal(enc.drank, ref.get_column("drank").fill_null(-1).to_numpy())
    holders = ev.group_by("query").agg(pl.col("user").n_unique().alias("h"))
    single = set(holders.filter(pl.col("h") == 1).get_column("query").to_list())
    assert set(enc.keys[enc.single].tolist()) == single and enc.users == len(set(user.tolist()))
    kw = {"epsilon": math.log(10), "delta": 1e-4, "ds": (1, 4), "mechanisms": ALL_MECHANISMS}
    a = dcurve_from_events(ev, simulation=np.random.default_rng(1), **kw)
    b = dcurve_from_events(enc, simulation=np.random.default_rng(1), **kw)
    assert a == b and len(a["table"]) == 2 * len(ALL_MECHANISMS)


def test_simulations_in_a_second_process_draw_the_same_curve(monkeypatch) -> None:
    """Issue 33: the demo runs the simulated points in a spawned process (``workers=2``) while
    it computes the exact points and its release; the table, and the state the simulation
    generator is left in, are those of the one-process run, and the folder of pool arrays the
    worker read is gone afterwards."""
    import searchveil.evaluate.dcurve as dc

    gen = np.random.default_rng(11)
    n = 6000
    users, queries = np.sort(gen.integers(0, 400, n)), gen.zipf(1.5, n).astype(np.uint64)
    ev = pl.DataFrame({"user": users, "query": queries, "pos": np.arange(n)})
    kw = {"epsilon": math.log(10), "delta": 1e-4, "ds": (1, 3), "mechanisms": ALL_MECHANISMS}
    one, two = np.random.default_rng(5), np.random.default_rng(5)
    a = dcurve_from_events(ev, simulation=one, **kw)
    folders: list[str] = []
    real_mkdtemp = dc.tempfile.mkdtemp
    monkeypatch.setattr(dc.tempfile, "mkdtemp",
                        lambda **k: folders.append(real_mkdtemp(**k)) or folders[-1])  # fmt: skip
    with dc.start_dcurve(ev, simulation=two, workers=2, **kw) as pending:
        assert pending.exact and pending.runs is None  # the simulations run elsewhere
        b = pending.result()
    assert a == b and one.integers(2**62) == two.integers(2**62)
    assert len(folders) == 1 and not os.path.exists(folders[0])
    with pytest.raises(InvalidParameterError, match="workers"):
        dcurve_from_events(ev, simulation=one, workers=3, **kw)
