"""Korolova Release-Data on real and adversarial logs: nothing outside the input is published,
a single user's query is never published however often it is repeated, the ledger's ε, δ are the
formulas', and the URL paths (SERP, private selection) behave as documented."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest

from searchveil.errors import BudgetExceededError, InputFormatError, InvalidParameterError
from searchveil.io.ledger import read_ledger, read_provenance
from searchveil.mechanisms.accounting import Budget
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.threshold import exact_threshold_privacy
from searchveil.model import SearchLog, items
from searchveil.release import KorolovaParams, read_serp, release_korolova, write_release
from searchveil.release.korolova.accounting import korolova_paper_privacy, korolova_paper_selection
from searchveil.rng import make_rng

LN10 = math.log(10)


def _input_queries(log: SearchLog) -> set[str]:
    return set(items(log, "queries").get_column("item").to_list())


def _input_pairs(log: SearchLog) -> set[tuple[str, str]]:
    c = items(log, "clicks")
    return set(zip(c.get_column("query").to_list(), c.get_column("url").to_list(), strict=True))


def _loose(d: int = 5, d_c: int | None = 5) -> KorolovaParams:
    """Weak parameters that publish a lot (K = d, small noise) — for subset checks."""
    return KorolovaParams(
        d=d,
        K=d,
        b=1.0,
        b_q=1.0,
        url_selection="private" if d_c else "none",
        d_c=d_c,
        b_c=1.0 if d_c else None,
        url_K=d_c,
        url_b=1.0 if d_c else None,
    )


@pytest.mark.parametrize("fixture", ["aol_215", "aol_top1000"])
def test_never_publishes_outside_the_input(fixture: str, request: pytest.FixtureRequest) -> None:
    log = request.getfixturevalue(fixture)
    rel = release_korolova(log, _loose(), rng=make_rng(3))
    q = set(rel.tables["queries"].get_column("query").to_list())
    assert q, "weak parameters must publish something, else this test proves nothing"
    assert q <= _input_queries(log)
    cl = rel.tables["clicks"]
    pairs = set(zip(cl.get_column("query").to_list(), cl.get_column("url").to_list(), strict=True))
    assert pairs <= _input_pairs(log)
    assert set(cl.get_column("query").to_list()) <= q


def test_aol_top1000_at_thesis_parameters(aol_top1000: SearchLog) -> None:
    """e^ε = 10, δ = 1e-5, d = 20 (Table 4.1's row): the published queries are head queries."""
    p = KorolovaParams.from_budget(
        epsilon=LN10, delta=1e-5, d=20, split=(1, 1), threshold_rule="exact"
    )
    rel = release_korolova(aol_top1000, p, rng=make_rng(11))
    assert rel.epsilon <= LN10 * (1 + 1e-12) and rel.delta <= 1e-5
    qs = rel.tables["queries"].get_column("query").to_list()
    assert set(qs) <= _input_queries(aol_top1000)
    assert rel.report["queries_released"] == len(qs)
    assert (
        rel.report["distinct_queries"]
        == rel.report["queries_released"] + rel.report["queries_dropped"]
    )
    # every published query has a bounded count near K or above (count + noise > K)
    ev = items(aol_top1000, "queries")
    from searchveil.bounding import bound_contributions

    counts = dict(bound_contributions(ev, max_per_user=20).group_by("item").len().iter_rows())
    for q in qs:
        assert counts[q] > p.K - 20 * p.b


def _heavy_user_log(repeats: int = 10_000) -> SearchLog:
    """300 users who each pose 'weather' and a private query; one user poses a secret query
    `repeats` times (and clicks a secret URL each time)."""
    rows = []
    for u in range(300):
        rows.append({"user": u, "query": "weather", "url": "http://weather.example/"})
        rows.append({"user": u, "query": f"private query {u}", "url": None})
    for i in range(repeats):
        rows.append({"user": 10_000, "query": "secret disease", "url": f"http://secret/{i % 3}"})
    df = pl.DataFrame(rows).with_columns(
        time=pl.datetime(2006, 3, 1) + pl.duration(seconds=pl.int_range(pl.len()) * 60)
    )
    return SearchLog.from_frame(df, name="heavy-user")


@pytest.mark.parametrize("distinct", [False, True])
def test_single_user_query_never_published(distinct: bool) -> None:
    log = _heavy_user_log()
    p = KorolovaParams.from_budget(
        epsilon=LN10,
        delta=1e-5,
        d=5,
        d_c=5,
        url_selection="private",
        split=(1, 1, 1, 1),
        distinct=distinct,
    )
    seen_weather = 0
    private_published = 0
    for seed in range(20):
        rel = release_korolova(log, p, rng=make_rng(seed))
        qs = set(rel.tables["queries"].get_column("query").to_list())
        assert "secret disease" not in qs
        private_published += sum(q.startswith("private query") for q in qs)
        urls = set(rel.tables["clicks"].get_column("url").to_list())
        assert not any(u.startswith("http://secret/") for u in urls)
        seen_weather += "weather" in qs
    assert seen_weather == 20  # 300 users: far above K, so the test is not vacuous
    # a count-1 query crosses the threshold when its noise is >= K - 1: P = 1.05e-6 (K = 115,
    # b = 8.69), so the 20 x 300 trials expect 0.006 crossings; at most one may happen by
    # chance (seed 5 does: the 205th word of PCG64(5) is 1.36e-6 x 2^64, noise 117), two would
    # have probability 2e-5
    assert private_published <= 1
    # and the analysis agrees: the secret query's bounded count is at most d
    pr = exact_threshold_privacy(d=p.d, K=p.K, b=p.b, distinct=distinct)
    assert pr.delta <= 1e-5


def test_ledger_matches_formulas(tmp_path: Path, aol_215: SearchLog) -> None:
    p = KorolovaParams.from_budget(
        epsilon=2.0, delta=1e-6, d=4, d_c=3, url_selection="private", split=(2, 1, 1, 1)
    )
    rel = release_korolova(aol_215, p, rng=make_rng(5))
    led = write_release(rel, tmp_path / "rel")
    eff = {n: DiscreteLaplace(scale=s).effective_scale for n, s in [("b_q", p.b_q), ("b_c", p.b_c)]}
    sel = exact_threshold_privacy(d=4, K=p.K, b=p.b)
    url = exact_threshold_privacy(d=3, K=p.url_K, b=p.url_b)
    assert led["epsilon"] == pytest.approx(
        sel.epsilon + 4 / eff["b_q"] + url.epsilon + 3 / eff["b_c"], rel=1e-12
    )
    assert led["delta"] == pytest.approx(sel.delta + url.delta, rel=1e-12)
    assert led["epsilon"] <= 2.0 and led["delta"] <= 1e-6
    assert sum(e["epsilon"] for e in led["events"]) == pytest.approx(led["epsilon"])
    assert [e["step"] for e in led["events"]] == [
        "select_queries",
        "query_counts",
        "select_urls",
        "click_counts",
    ]
    paper = korolova_paper_privacy(d=4, K=p.K, b=p.b, b_q=p.b_q, d_c=3, b_c=p.b_c)
    assert led["paper_accounting"]["epsilon"] == pytest.approx(
        paper["epsilon"] + korolova_paper_selection(d=3, K=p.url_K, b=p.url_b)["epsilon"],
        rel=1e-12,
    )
    assert "exact" in led["accounting"]
    assert led["mechanism"] == "korolova-release-data" and led["seeded"] is True
    on_disk = read_ledger(tmp_path / "rel")
    assert on_disk["epsilon"] == led["epsilon"]
    assert on_disk["outputs"]["queries"]["columns"] == ["query", "noisy_count"]
    assert on_disk["outputs"]["clicks"]["columns"] == ["query", "url", "noisy_count"]
    # the input's size and fingerprint are private: in the provenance record beside the release
    assert "inputs" not in on_disk and on_disk["neighbouring"].startswith("add/remove one user")
    prov = read_provenance(tmp_path / "rel")
    assert prov["inputs"][0]["users"] == 215 and prov["report"]["users"] == 215


def test_paper_rule_within_budget_under_paper_accounting() -> None:
    p = KorolovaParams.from_budget(
        epsilon=LN10, delta=1e-5, d=20, split=(1, 1), threshold_rule="paper"
    )
    assert p.K == math.ceil(20 * (1 - math.log(2e-5 / 20) / (LN10 / 2)))
    pa = p.privacy("paper")
    assert pa["epsilon"] <= LN10 * (1 + 1e-12) and pa["delta"] <= 1e-5
    ex = p.privacy("exact")
    assert ex["epsilon"] <= pa["epsilon"] * (1 + 1e-9) and ex["delta"] <= pa["delta"]


def test_exact_rule_needs_a_lower_threshold_than_paper() -> None:
    pe = KorolovaParams.from_budget(epsilon=LN10, delta=1e-5, d=20, split=(1, 1))
    pp = KorolovaParams.from_budget(
        epsilon=LN10, delta=1e-5, d=20, split=(1, 1), threshold_rule="paper"
    )
    assert pe.K < pp.K and pe.b == pp.b


def test_serp_urls_public(tmp_path: Path) -> None:
    log = _heavy_user_log(repeats=10)
    serp_file = tmp_path / "serp.tsv"
    serp_file.write_text(
        "query\trank\turl\n"
        "Weather\t1\thttp://weather.example/\n"
        "weather\t2\thttp://nobody-clicked.example/\n"
        "secret disease\t1\thttp://secret/0\n",
        encoding="utf-8",
    )
    serp = read_serp(serp_file)
    p = KorolovaParams(d=2, K=20, b=2.0, b_q=2.0, url_selection="serp", d_c=2, b_c=2.0)
    rel = release_korolova(log, p, rng=make_rng(1), serp=serp)
    cl = rel.tables["clicks"]
    assert set(cl.get_column("url").to_list()) == {
        "http://weather.example/",
        "http://nobody-clicked.example/",  # unclicked SERP URLs get a noisy count too
    }
    assert rel.report["pairs_released"] == 2
    with pytest.raises(InvalidParameterError):
        release_korolova(log, p, rng=make_rng(1))  # SERP mode without a SERP
    bad = tmp_path / "bad.tsv"
    bad.write_text("q\tnot-a-rank\thttp://x/\n", encoding="utf-8")
    with pytest.raises(InputFormatError):
        read_serp(bad)


def test_clamp_negative_counts() -> None:
    log = _heavy_user_log(repeats=10)
    p = KorolovaParams(
        d=2, K=2, b=1.0, b_q=50.0, url_selection="private", d_c=2, b_c=50.0, url_K=2, url_b=1.0,
        clamp_negative=True,
    )  # fmt: skip
    for seed in range(5):
        rel = release_korolova(log, p, rng=make_rng(seed))
        assert rel.tables["queries"].get_column("noisy_count").min() >= 0
        assert rel.tables["clicks"].get_column("noisy_count").min() >= 0
    assert "clamped" in rel.ledger["parameters"]["negative_counts"]


def test_invalid_parameters() -> None:
    with pytest.raises(InvalidParameterError):
        KorolovaParams(d=5, K=4, b=1.0, b_q=1.0)  # K < d
    KorolovaParams(d=5, K=4, b=1.0, b_q=1.0, distinct=True)  # K >= 1 suffices for distinct users
    with pytest.raises(InvalidParameterError):
        KorolovaParams(d=5, K=5, b=0.0, b_q=1.0)
    with pytest.raises(InvalidParameterError):
        KorolovaParams(d=5, K=5, b=1.0, b_q=1.0, url_selection="private", d_c=3, b_c=1.0,
                       url_K=2, url_b=1.0)  # fmt: skip
    with pytest.raises(InvalidParameterError):
        KorolovaParams.from_budget(epsilon=1.0, delta=1e-5, d=5)  # no split
    with pytest.raises(InvalidParameterError):
        KorolovaParams.from_budget(epsilon=-1.0, delta=1e-5, d=5, split=(1, 1))
    with pytest.raises(InvalidParameterError):
        KorolovaParams.from_budget(epsilon=1.0, delta=1.5, d=5, split=(1, 1))


def test_budget_is_checked_before_running(aol_215: SearchLog) -> None:
    p = KorolovaParams(d=5, K=5, b=1.0, b_q=1.0, budget=Budget(1.0, 1e-5))
    with pytest.raises(BudgetExceededError):
        release_korolova(aol_215, p, rng=make_rng(1))


def test_random_bounding_is_seeded_and_differs(aol_215: SearchLog) -> None:
    p = KorolovaParams(d=3, K=3, b=0.5, b_q=1.0, strategy="random")
    a = release_korolova(aol_215, p, rng=make_rng(9)).tables["queries"]
    b = release_korolova(aol_215, p, rng=make_rng(9)).tables["queries"]
    assert a.equals(b)
    pf = KorolovaParams(d=3, K=3, b=0.5, b_q=1.0, strategy="first")
    r = release_korolova(aol_215, pf, rng=make_rng(9))
    assert (
        r.report["query_events_after_bounding"]
        == release_korolova(aol_215, p, rng=make_rng(1)).report["query_events_after_bounding"]
    )


def test_end_to_end_keep_probability_matches_analysis() -> None:
    """Through the whole release: N queries each posed by exactly n users are each published with
    probability π(n) = P[X >= floor(K)+1-n] (Clopper-Pearson, α = 1e-6), for n and n-1."""
    from scipy.stats import beta as beta_dist

    N, K, b = 6000, 3, 1.0
    p = KorolovaParams(d=1, K=K, b=b, b_q=1.0)
    rates = {}
    for n in (2, 3):
        rows = [{"user": i * 10 + j, "query": f"q{i}"} for i in range(N) for j in range(n)]
        log = SearchLog.from_frame(pl.DataFrame(rows), name=f"n={n}")
        kept = release_korolova(log, p, rng=make_rng(100 + n)).report["queries_released"]
        pi = float(DiscreteLaplace(scale=b).sf(K + 1 - n))
        lo = beta_dist.ppf(0.5e-6, kept, N - kept + 1)
        hi = beta_dist.ppf(1 - 0.5e-6, kept + 1, N - kept)
        assert lo <= pi <= hi, (n, kept / N, pi)
        rates[n] = (lo, hi)
    # empirical lower bound on the per-unit ratio stays below the claimed e^{1/b}
    assert rates[3][0] / rates[2][1] <= math.exp(1 / DiscreteLaplace(scale=b).effective_scale)


@pytest.mark.parametrize("rule", ["exact", "paper", "improved"])
@pytest.mark.parametrize("distinct", [False, True])
@pytest.mark.parametrize("urls", ["none", "serp", "private"])
def test_from_budget_stays_within_budget(rule: str, distinct: bool, urls: str) -> None:
    parts = {"none": (1, 1), "serp": (2, 1, 1), "private": (2, 1, 1, 1)}[urls]
    p = KorolovaParams.from_budget(
        epsilon=1.5, delta=1e-6, d=10, d_c=None if urls == "none" else 4, url_selection=urls,
        split=parts, threshold_rule=rule, distinct=distinct,
    )  # fmt: skip
    assert p.K == int(p.K) and p.K >= (1 if distinct else 10)
    for acc in ("exact", "paper") if rule != "exact" else ("exact",):
        pr = p.privacy(acc)
        if acc == "paper" and rule == "improved":
            pr["delta"] = pr["delta_improved_4_8"]
        assert pr["epsilon"] <= 1.5 * (1 + 1e-9) and pr["delta"] <= 1e-6 * (1 + 1e-9)
        assert pr["epsilon"] == pytest.approx(sum(e["epsilon"] for e in pr["events"]))
    ex, pa = p.privacy("exact"), p.privacy("paper")
    assert ex["delta"] <= pa["delta"] * (1 + 1e-9) or rule == "exact"


def test_doc_examples_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python examples in docs/privacy/korolova.md run (from the repository root)."""
    import re

    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "privacy" / "korolova.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    monkeypatch.chdir(root)
    for code in blocks:
        exec(compile(code, "korolova.md", "exec"), {})


def test_neighbouring_logs_exact_hockey_stick(aol_215_path: Path) -> None:
    """On a real log and the same log minus its heaviest user, the exact output distributions of
    Select-Queries (computed from the bounded counts the release uses) satisfy the ledger's
    (ε, δ) in both directions."""
    import itertools

    from searchveil.bounding import bound_contributions
    from searchveil.io.readers import read_log
    from searchveil.release.counts import count_by

    log = read_log(aol_215_path)
    d = 4
    p = KorolovaParams.from_budget(epsilon=1.0, delta=1e-3, d=d, split=(1, 1))
    heavy = log.df.group_by("user").len().sort("len", descending=True).get_column("user")[0]
    minus = SearchLog(df=log.df.filter(pl.col("user") != heavy), info=log.info)

    def counts(lg: SearchLog) -> dict[str, int]:
        b = bound_contributions(items(lg, "queries"), max_per_user=d)
        return dict(count_by(b.rename({"item": "query"}), ["query"]).iter_rows())

    c2, c1 = counts(log), counts(minus)
    touched = [q for q in c2 if c2[q] != c1.get(q, 0)]
    assert 1 <= len(touched) <= d and sum(c2[q] - c1.get(q, 0) for q in touched) <= d
    be = DiscreteLaplace(scale=p.b).effective_scale
    dl = DiscreteLaplace(scale=be)

    def pi(n: int) -> float:
        return 0.0 if n == 0 else float(dl.sf(math.floor(p.K) + 1 - n))

    sel = p.privacy("exact")["events"][0]
    eps, delta = sel["epsilon"], sel["delta"]
    d21 = d12 = 0.0
    for out in itertools.product((0, 1), repeat=len(touched)):
        p2 = p1 = 1.0
        for q, o in zip(touched, out, strict=True):
            a2, a1 = pi(c2[q]), pi(c1.get(q, 0))
            p2 *= a2 if o else 1 - a2
            p1 *= a1 if o else 1 - a1
        d21 += max(0.0, p2 - math.exp(eps) * p1)
        d12 += max(0.0, p1 - math.exp(eps) * p2)
    assert d21 <= delta and d12 <= delta
