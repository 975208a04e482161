"""Utility metrics on small hand-computable logs (each expected value is derived in a comment)."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.evaluate import SCHEMA, evaluate_release
from searchveil.evaluate._release import load_release, original_histograms, url_host
from searchveil.evaluate.caching import (
    evaluate_caching,
    greedy_cache,
    hit_probability,
    posting_sizes_from_clicks,
    posting_sizes_zipf,
)
from searchveil.evaluate.distribution import (
    avg_count_difference,
    compare_histograms,
    count_distribution,
    log_spaced_js,
    top_j_metrics,
)
from searchveil.evaluate.fear import evaluate_fears, fear_ranking
from searchveil.evaluate.keywords import (
    evaluate_keywords,
    generate_keywords,
    parse_seed_spec,
    relevance_scores,
)
from searchveil.evaluate.substitution import (
    average_precision,
    evaluate_substitution,
    fit_substitutions,
    llr,
    ndcg,
    precision_recall,
)
from searchveil.io.ledger import ReleaseWriter, build_ledger
from searchveil.mechanisms.budget import PrivacyCost, Relation
from searchveil.model import SearchLog


def H(d: dict[str, int]) -> pl.DataFrame:
    return pl.DataFrame(
        {"item": list(d), "count": list(d.values())},
        schema={"item": pl.String, "count": pl.Int64},
    )


# -- distribution (Götz §6.2, §7.1) ---------------------------------------------------------
ORIG = H({"A": 10, "B": 5, "C": 3, "D": 2})
REL = H({"A": 8, "C": 4, "E": 1})  # B, D missing; E not in the original


def test_log_spaced_js() -> None:
    assert log_spaced_js(1000) == [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
    assert log_spaced_js(7) == [1, 2, 5, 7]
    assert log_spaced_js(0) == []


def test_top_j_by_hand() -> None:
    m = top_j_metrics(ORIG, REL)
    assert m["j"] == [1, 2, 4]
    # j=1: A present; both relative frequencies are [1] → L1 = KL = 0
    # j=2: A present, B missing → coverage 1/2; p = [2/3, 1/3], q = [1, 0]
    #      avg L1 = (1/3 + 1/3) / 2 = 1/3; smoothed q = [8.5/9, 0.5/9]
    # j=4: A, C present → 1/2; p = [10,5,3,2]/20, q = [8,0,4,0]/12
    assert m["coverage"] == [1.0, 0.5, 0.5]
    assert m["unpublished"] == [0, 1, 2]
    assert m["avg_l1"][0] == 0.0 and m["kl"][0] == pytest.approx(0.0)
    assert m["avg_l1"][1] == pytest.approx(1 / 3)
    kl2 = (2 / 3) * math.log((2 / 3) / (8.5 / 9)) + (1 / 3) * math.log((1 / 3) / (0.5 / 9))
    assert m["kl"][1] == pytest.approx(kl2)
    l1_4 = (abs(0.5 - 8 / 12) + 0.25 + abs(0.15 - 4 / 12) + 0.1) / 4
    assert m["avg_l1"][2] == pytest.approx(l1_4)


def test_avg_count_difference_by_hand() -> None:
    # scale = Σo / Σr = 20 / 13 (E counts in the release total); absent items count 0
    s = 20 / 13
    expect = (abs(10 - 8 * s) + 5 + abs(3 - 4 * s) + 2) / 4
    assert avg_count_difference(ORIG, REL) == pytest.approx(expect)
    # a perfect (proportional) release has difference 0
    assert avg_count_difference(ORIG, H({"A": 20, "B": 10, "C": 6, "D": 4})) == pytest.approx(0)


def test_compare_histograms_shares() -> None:
    d = compare_histograms(ORIG, REL)
    assert d["share_distinct"] == 0.5  # A and C of four
    assert d["share_volume"] == pytest.approx(13 / 20)
    assert d["released_not_in_original"] == 1
    assert d["count_distribution"]["original"] == [[2, 1], [3, 1], [5, 1], [10, 1]]
    assert count_distribution(H({"x": 0, "y": -2, "z": 1})) == [[1, 1]]


def test_negative_noisy_counts_clipped_but_present() -> None:
    m = top_j_metrics(H({"A": 4, "B": 4}), H({"A": 4, "B": -3}))
    assert m["coverage"][-1] == 1.0  # B is present (released), with a clipped count
    assert m["avg_l1"][-1] == pytest.approx((0.5 + 0.5) / 2)


# -- index caching (Götz §7.2) --------------------------------------------------------------
def test_greedy_cache_by_hand() -> None:
    orig = H({"a": 6, "b": 3, "c": 1})
    sizes = {"a": 3, "b": 1, "c": 1}
    # scores a 6/3 = 2, b 3, c 1 → order b, a, c; budget 2: b (1), a does not fit, c (2)
    cached = greedy_cache(orig, sizes, 2)
    assert cached == ["b", "c"]
    assert hit_probability(cached, orig) == pytest.approx(0.4)
    # a release that lost b and inflated c: scores c 5, a 1/3 → {c}; hit 1/10
    rel_cache = greedy_cache(H({"a": 1, "c": 5}), sizes, 2)
    assert rel_cache == ["c"]
    assert hit_probability(rel_cache, orig) == pytest.approx(0.1)
    # a budget of 4 takes b, a → 9/10
    assert hit_probability(greedy_cache(orig, sizes, 4), orig) == pytest.approx(0.9)


def _log(rows: list[tuple]) -> SearchLog:
    cols = ["user", "query", "url"]
    return SearchLog.from_frame(pl.DataFrame(rows, schema=cols, orient="row"))


def test_posting_sizes_proxies() -> None:
    log = _log(
        [
            (1, "red shoes", "http://u1"),
            (1, "red shoes", "http://u2"),
            (2, "shoes", "http://u2"),
            (2, "red car", None),
        ]
    )
    # red: u1, u2 → 2; shoes: u1, u2 → 2; car: no click → 1 (minimum)
    assert posting_sizes_from_clicks(log) == {"red": 2, "shoes": 2, "car": 1}
    z1 = posting_sizes_zipf(["a", "b", "c"], seed=1, s_min=10, cap=1000)
    assert z1 == posting_sizes_zipf(["c", "b", "a"], seed=1, s_min=10, cap=1000)
    assert all(10 <= v <= 1000 for v in z1.values())
    big = posting_sizes_zipf([f"w{i}" for i in range(200)], seed=1, s_min=10, cap=10**9)
    big2 = posting_sizes_zipf([f"w{i}" for i in range(200)], seed=2, s_min=10, cap=10**9)
    assert big != big2


def test_evaluate_caching_identical_release_matches() -> None:
    log = _log([(1, "a b", "http://x"), (2, "a", "http://y"), (3, "c", None)])
    kw = original_histograms(log, ("keywords",))["keywords"]
    r = evaluate_caching(kw, kw, log=log, budgets=(0.5, 1.0))
    for b in r["budgets"]:
        assert b["hit_probability_release"] == b["hit_probability_original"]
    assert r["budgets"][-1]["hit_probability_original"] == pytest.approx(1.0)
    with pytest.raises(InvalidParameterError):
        evaluate_caching(kw, kw, log=log, proxy="documents")
    with pytest.raises(InvalidParameterError):
        evaluate_caching(kw, kw, log=log, budgets=(1.5,))


# -- query substitution (Götz §7.3) ---------------------------------------------------------
def test_ranking_metrics_by_hand() -> None:
    truth, ranked = ["a", "b", "c"], ["b", "x", "a"]
    assert precision_recall(truth, ranked) == (pytest.approx(2 / 3), pytest.approx(2 / 3))
    # AP: hit at rank 1 (1/1), miss, hit at rank 3 (2/3) → (1 + 2/3) / 3
    assert average_precision(truth, ranked, 3) == pytest.approx(5 / 9)
    # rel a=3, b=2, c=1: DCG = 2/log2(2) + 3/log2(4) = 3.5; IDCG = 3 + 2/log2(3) + 1/2
    assert ndcg(truth, ranked, 3) == pytest.approx(3.5 / (3.5 + 2 / math.log2(3)))
    assert ndcg(truth, truth, 3) == pytest.approx(1.0)
    assert average_precision(truth, [], 3) == 0.0


def test_llr_values() -> None:
    assert llr(10, 0, 0, 10) == pytest.approx(40 * math.log(2))
    assert llr(5, 5, 5, 5) == pytest.approx(0.0)


def test_segmentation_by_mutual_information() -> None:
    queries = H({"new york": 5, "new york hotels": 3, "cheap hotels": 2, "new car": 1})
    # unigrams new 9, york 8, hotels 5, cheap 2, car 1 (N=25); bigrams (new york) 8,
    # (york hotels) 3, (cheap hotels) 2, (new car) 1 (N=14)
    # PMI(new, york) = ln((8/14)/((9/25)(8/25))) ≈ 1.602; PMI(york, hotels) ≈ 1.209;
    # PMI(cheap, hotels) ≈ 2.189; (new car) occurs once < min_bigram = 2
    m = fit_substitutions(queries, H({}), pmi_threshold=1.5, min_bigram=2)
    assert m.pmi("new", "york") == pytest.approx(math.log((8 / 14) / ((9 / 25) * (8 / 25))))
    assert m.segment("new york hotels") == ["new york", "hotels"]
    assert m.segment("cheap hotels") == ["cheap hotels"]
    assert m.segment("new car") == ["new", "car"]
    m2 = fit_substitutions(queries, H({}), pmi_threshold=2.0, min_bigram=2)
    assert m2.segment("new york hotels") == ["new", "york", "hotels"]


def test_substitution_candidates() -> None:
    queries = H({"paris hotels": 4, "paris motels": 4, "rome hotels": 2, "cars": 1})
    pairs = H(
        {
            "paris hotels\tparis motels": 3,
            "rome hotels\trome motels": 1,
            "paris hotels\tcars": 1,
            "cars\tparis hotels": 1,
            "red car\tblue car": 2,
        }
    )
    m = fit_substitutions(queries, pairs, pmi_threshold=5.0, min_bigram=2)
    # No bigram reaches PMI 5, so every word is its own phrase. Whole-query table: n = 8;
    # "paris hotels" → "paris motels": 3·8 > 4·3 and → "cars": 1·8 > 4·1, both positively
    # associated, motels with the larger G². Phrase table (pairs differing in one phrase):
    # hotels→motels 3+1 = 4, red→blue 2; n = 6: 4·6 > 4·4, so hotels→motels is kept and
    # the unseen "london hotels" gets "london motels". (A table with a single pair has no
    # association at all: c·n = left·right.)
    subs = m.substitutions("paris hotels", 5)
    assert subs[0] == "paris motels"
    assert set(subs) == {"paris motels", "cars"}
    assert m.substitutions("london hotels", 5) == ["london motels"]
    assert m.substitutions("unrelated", 5) == []


def test_evaluate_substitution_identical_and_empty() -> None:
    queries = H({"paris hotels": 4, "paris motels": 4, "rome hotels": 2})
    pairs = H({"paris hotels\tparis motels": 3, "rome hotels\trome motels": 1})
    same = evaluate_substitution(queries, pairs, queries, pairs, js=(2,), n_queries=10)
    b = same["by_j"][0]
    assert b["coverage"] == 1.0 and b["precision"] == 1.0 and b["recall"] == 1.0
    assert b["map"] == 1.0 and b["ndcg"] == pytest.approx(1.0)
    empty = evaluate_substitution(queries, pairs, queries, H({}), js=(2,), n_queries=10)
    e = empty["by_j"][0]
    assert e["coverage"] == 0.0 and math.isnan(e["precision"])
    assert e["queries_with_original_substitutions"] == b["queries_with_original_substitutions"]


# -- keyword generation (Korolova §4.6.2.2) -------------------------------------------------
def _clicks(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["query", "url", "count"], orient="row")


# A 5-query click graph; s = the seed URL (shoes.com), a, b, c other URLs; α = 0.2, β = 0.8.
#   q1 —3— s                       r(q1) = β·1                              = 0.8
#   q2 —1— s, q2 —1— a, q3 —1— a   r(q2) = β(½ + ½ r(a)), r(a) = β(½ r(q2) + ½ r(q3)),
#                                  r(q3) = β r(a)  ⇒ r(a) = 10/17 r(q2),
#                                  r(q2) = 2/5 + 4/17 r(q2) ⇒ r(q2) = 34/65, r(q3) = 16/65
#   q4 —1— c (c has no other query) r(q4) = 0 (no path to the seed)
#   q5 —3— s, q5 —1— b (b only q5) r(q5) = β(¾ + ¼ β r(q5)) ⇒ r(q5) = 15/21 = 5/7
GRAPH = _clicks(
    [
        ("q1", "http://www.shoes.com/", 3),
        ("q2", "http://shoes.com/boots", 1),
        ("q2", "http://a.example/", 1),
        ("q3", "http://a.example/", 1),
        ("q4", "http://c.example/", 1),
        ("q5", "http://www.shoes.com/", 3),
        ("q5", "http://notshoes.com/", 1),  # b: not a seed (host does not end in .shoes.com)
    ]
)
EXPECTED = {"q1": 0.8, "q2": 34 / 65, "q3": 16 / 65, "q4": 0.0, "q5": 5 / 7}


def test_random_walk_scores_by_hand() -> None:
    scores, info = relevance_scores(GRAPH, ("shoes.com",), alpha=0.2, gamma=1e-12)
    got = dict(scores.iter_rows())
    assert set(got) == set(EXPECTED)
    for q, v in EXPECTED.items():
        assert got[q] == pytest.approx(v, abs=1e-9), q
    assert info["converged"] and info["seed_urls"] == 2  # www.shoes.com/ and shoes.com/boots
    assert generate_keywords(scores, 0.5) == {"q1", "q2", "q5"}
    assert generate_keywords(scores, 0.7) == {"q1", "q5"}
    assert generate_keywords(scores, 0.9) == set()


def test_keyword_counts_and_overlap() -> None:
    # the release lost q5 (and got a negative noisy count on q3's edge: no edge)
    released = GRAPH.filter(pl.col("query") != "q5").with_columns(
        pl.when(pl.col("query") == "q3").then(-2).otherwise(pl.col("count")).alias("count")
    )
    r = evaluate_keywords(GRAPH, released, seeds={"shoes": ("shoes.com",)}, alpha=0.2, gamma=1e-12)
    rows = {b["threshold"]: b for b in r["seed_sets"]["shoes"]["by_threshold"]}
    # released graph: q1 = 0.8; q2 — s, a where a now only leads back to q2:
    # r(a) = β r(q2), r(q2) = β(½ + ½ β r(q2)) = 0.4 + 0.32 r(q2) → 0.4/0.68 = 10/17 ≈ 0.588
    assert rows[0.5]["original"] == 3 and rows[0.5]["released"] == 2
    assert rows[0.5]["overlap"] == 1.0
    assert rows[0.5]["released_share_of_original"] == pytest.approx(2 / 3)
    assert rows[0.7]["released"] == 1
    assert r["graph"]["released_edges"] == 4  # q1–s, q2–s, q2–a, q4–c
    scores, _ = relevance_scores(
        released.filter(pl.col("count") > 0), ("shoes.com",), alpha=0.2, gamma=1e-12
    )
    assert dict(scores.iter_rows())["q2"] == pytest.approx(10 / 17, abs=1e-9)


def test_url_host_and_seed_spec() -> None:
    assert url_host("http://www.Shoes.com/x?y") == "shoes.com"
    assert url_host("shop.shoes.com") == "shop.shoes.com"
    assert parse_seed_spec("shoes=shoes.com, www.zappos.com") == (
        "shoes",
        ("shoes.com", "zappos.com"),
    )
    for bad in ("shoes", "=a.com", "shoes="):
        with pytest.raises(InvalidParameterError):
            parse_seed_spec(bad)


# -- fear of … (Korolova §4.6.2.1) ----------------------------------------------------------
def test_fear_ranking_by_hand() -> None:
    orig = H(
        {
            "fear of flying": 5,
            "my fear of flying": 2,
            "fear of heights": 4,
            "fear of the dark": 1,
            "fearless": 3,
            "afraid of dogs": 2,
        }
    )
    f = fear_ranking(orig)
    assert f.select("fear", "count", "rank").rows() == [
        ("flying", 7, 1),
        ("heights", 4, 2),
        ("the dark", 1, 3),
    ]
    rel = H({"fear of heights": 6, "fear of flying": 5, "fear of spiders": -1})
    r = evaluate_fears(orig, rel, top=2)
    assert r["original_top"] == [["flying", 7], ["heights", 4]]
    assert r["released_top"] == [["heights", 6], ["flying", 5]]
    assert r["top_overlap"] == 1.0 and r["same_order"] is False
    assert r["common_footrule"] == 2
    assert fear_ranking(orig, phrase="afraid of").get_column("fear").to_list() == ["dogs"]
    with pytest.raises(InvalidParameterError):
        fear_ranking(orig, phrase="  ")


# -- reading releases ---------------------------------------------------------------------------
def _release(path: Path, tables: dict[str, pl.DataFrame], **params: object) -> Path:
    with ReleaseWriter(path) as w:
        for name, df in tables.items():
            w.write_table(name, df)
        w.write_ledger(
            build_ledger(
                mechanism=str(params.pop("mechanism", "test")),
                notion="(ε, δ)-differential privacy",
                cost=PrivacyCost.of(Relation.USER, 1.0, 1e-5),
                parameters=dict(params),
                rng=None,
            )
        )
    return path


def test_load_korolova_like_release(tmp_path: Path) -> None:
    q = pl.DataFrame({"query": ["a b", "c"], "noisy_count": [5, 3]})
    c = pl.DataFrame({"query": ["a b"], "url": ["http://x"], "noisy_count": [2]})
    rel = load_release(_release(tmp_path / "k", {"queries": q, "clicks": c}))
    assert sorted(rel.histograms) == ["clicks", "keywords", "queries"]
    assert dict(rel.histograms["keywords"].iter_rows()) == {"a": 5, "b": 5, "c": 3}
    assert "keywords" in rel.derived and "queries" not in rel.derived
    assert rel.clicks_table is not None and rel.clicks_table.height == 1


def test_load_same_schema_release_not_double_counted(tmp_path: Path) -> None:
    log = pl.DataFrame(
        {
            "AnonID": [1, 2],
            "Query": ["a", "a"],
            "ClickURL": ["http://x", "http://x"],
            "Count": [2, 3],
        }
    )
    counts = pl.DataFrame({"Query": ["a"], "ClickURL": ["http://x"], "Count": [5]})
    rel = load_release(_release(tmp_path / "u", {"log": log, "counts": counts}))
    assert dict(rel.histograms["clicks"].iter_rows()) == {"a\thttp://x": 5}
    assert dict(rel.histograms["queries"].iter_rows()) == {"a": 5}
    assert rel.same_schema_log is not None


def test_load_row_level_log_and_items(tmp_path: Path) -> None:
    log = pl.DataFrame(
        {
            "AnonID": ["1", "1", "2"],
            "Query": ["a", "b", "a"],
            "QueryTime": ["2006-03-01 10:00:00", "2006-03-01 10:01:00", "2006-03-02 09:00:00"],
            "ClickURL": ["", "http://y", ""],
        }
    )
    rel = load_release(_release(tmp_path / "ka", {"log": log}))
    assert dict(rel.histograms["queries"].iter_rows()) == {"a": 2, "b": 1}
    assert dict(rel.histograms["query_pairs"].iter_rows()) == {"a\tb": 1}
    z = pl.DataFrame({"item": ["x", "y"], "noisy_count": [7, 4]})
    relz = load_release(_release(tmp_path / "z", {"items": z}, kind="keywords"))
    assert list(relz.histograms) == ["keywords"]


def test_load_release_errors(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError):
        load_release(tmp_path)  # no ledger
    d = _release(tmp_path / "bad", {"queries": pl.DataFrame({"query": ["a"], "count": ["x"]})})
    with pytest.raises(InputFormatError, match="non-numeric"):
        load_release(d)
    d2 = _release(tmp_path / "gone", {"queries": pl.DataFrame({"query": ["a"], "count": [1]})})
    (d2 / "queries.tsv").unlink()
    with pytest.raises(InputFormatError, match="missing"):
        load_release(d2)


# -- end to end on the real AOL sample ----------------------------------------------------------
def test_evaluate_release_on_aol_sample(aol_215, tmp_path: Path) -> None:
    orig = original_histograms(aol_215, ("queries",))["queries"]
    q = orig.filter(pl.col("count") >= 3).rename({"item": "query", "count": "noisy_count"})
    clicks = (
        aol_215.df.filter(pl.col("url").is_not_null())
        .group_by(["query", "url"])
        .len("noisy_count")
        .filter(pl.col("noisy_count") >= 2)
    )
    d = _release(tmp_path / "rel", {"queries": q, "clicks": clicks}, mechanism="korolova")
    r = evaluate_release(aol_215, d, substitution_queries=50)
    assert r["schema"] == SCHEMA
    assert set(r) >= {"original", "release", "distribution", "caching", "keywords", "fears"}
    dq = r["distribution"]["queries"]
    assert dq["released_distinct"] == q.height
    assert dq["share_volume"] == pytest.approx(
        q.get_column("noisy_count").sum() / orig["count"].sum()
    )
    # every query with count ≥ 3 is released → the top-j coverage is 1 while counts ≥ 3
    n3 = q.height
    for j, cov in zip(dq["top_j"]["j"], dq["top_j"]["coverage"], strict=True):
        if j <= n3:
            assert cov == 1.0
    assert r["substitution"]["applicable"] is False
    assert r["keywords"]["applicable"] is True
    assert r["ump"]["applicable"] is False


# -- releases written by the release modules ------------------------------------------------
def test_evaluate_real_release_modules(aol_215, tmp_path: Path) -> None:
    """Tables written by the ZEALOUS and k-anonymity modules are read with the original's
    item keys (nothing 'released but not in the original')."""
    from searchveil.release.histogram import write_release
    from searchveil.release.kanonymity import KAnonParams, release_kanon
    from searchveil.release.zealous import ZealousParams, release_zealous
    from searchveil.rng import make_rng

    rng = make_rng(11)
    z = ZealousParams(
        m=2, tau=1, lam=0.5, tau_prime=2, item_type="clicks", guarantee="probabilistic",
        users=215,
    )  # fmt: skip
    zd = tmp_path / "z"
    write_release(release_zealous(aol_215, z, rng=rng), zd)
    rz = evaluate_release(aol_215, zd, metrics=("distribution", "keywords"))
    dz = rz["distribution"]["clicks"]
    assert dz["released_distinct"] > 0 and dz["released_not_in_original"] == 0
    assert rz["keywords"]["applicable"] is True
    kd = tmp_path / "k"
    write_release(release_kanon(aol_215, KAnonParams(k=2), rng=rng), kd)
    rk = evaluate_release(aol_215, kd, substitution_queries=50)
    assert set(rk["distribution"]) == {"keywords", "queries", "clicks", "query_pairs"}
    for kind in ("keywords", "queries", "clicks"):
        assert rk["distribution"][kind]["released_not_in_original"] == 0
    # dropping the rare queries makes queries adjacent that were not: the k-anonymous log
    # has query pairs that the original never had (a real effect, reported, not hidden)
    assert rk["distribution"]["query_pairs"]["released_not_in_original"] > 0
    # k-anonymity keeps the true counts of the kept queries: their relative order is exact
    assert rk["distribution"]["queries"]["top_j"]["coverage"][0] == 1.0
    assert rk["substitution"]["applicable"] is True
