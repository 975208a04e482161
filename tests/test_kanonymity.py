"""k-query anonymity: exactly the queries of >= k distinct users survive; ids are fresh per
session; the written log reads back; the ledger says it is not differential privacy."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from searchveil.errors import InvalidParameterError
from searchveil.io.readers import read_log
from searchveil.model import SearchLog, query_events
from searchveil.release import KAnonParams, release_kanon, write_release
from searchveil.rng import make_rng


@pytest.mark.parametrize("k", [2, 5, 20])
def test_exactly_queries_of_k_users(aol_top1000: SearchLog, k: int) -> None:
    rel = release_kanon(aol_top1000, KAnonParams(k=k), rng=make_rng(1))
    support = query_events(aol_top1000).group_by("query").agg(pl.col("user").n_unique().alias("u"))
    expected = set(support.filter(pl.col("u") >= k).get_column("query").to_list())
    q = rel.tables["queries"]
    assert set(q.get_column("query").to_list()) == expected
    assert q.get_column("users").min() >= k
    assert set(rel.tables["log"].get_column("Query").to_list()) == expected
    assert rel.report["queries_released"] == len(expected)


def test_fresh_id_per_session(aol_215: SearchLog) -> None:
    rel = release_kanon(aol_215, KAnonParams(k=2), rng=make_rng(3))
    log = rel.tables["log"]
    kept = aol_215.df.join(rel.tables["queries"].select("query"), on="query", how="semi")
    n_sessions = kept.select("user", "session").unique().height
    assert log.get_column("AnonID").n_unique() == n_sessions == rel.report["sessions_released"]
    assert log.height == kept.height
    # ids are a permutation, not the original user ids in disguise
    assert sorted(log.get_column("AnonID").unique().to_list()) == list(range(n_sessions))
    other = release_kanon(aol_215, KAnonParams(k=2), rng=make_rng(4)).tables["log"]
    assert not other.get_column("AnonID").equals(log.get_column("AnonID"))


def test_written_log_reads_back(tmp_path: Path, aol_215: SearchLog) -> None:
    rel = release_kanon(aol_215, KAnonParams(k=2), rng=make_rng(5))
    led = write_release(rel, tmp_path / "k")
    assert led["epsilon"] is None and led["delta"] is None
    assert "NOT differential privacy" in led["notion"]
    back = read_log(tmp_path / "k" / "log.tsv")
    assert back.n_rows == rel.tables["log"].height
    assert set(back.df.get_column("query").to_list()) == set(
        rel.tables["queries"].get_column("query").to_list()
    )
    assert set(led["outputs"]) == {"queries", "keywords", "query_pairs", "log"}


def test_keywords_and_pairs_from_the_anonymous_log() -> None:
    rows = [{"user": u, "query": "a b"} for u in range(3)] + [{"user": 7, "query": "rare"}]
    log = SearchLog.from_frame(pl.DataFrame(rows))
    rel = release_kanon(log, KAnonParams(k=3), rng=make_rng(1))
    assert rel.tables["queries"].rows() == [("a b", 3, 3)]
    assert dict(rel.tables["keywords"].rows()) == {"a": 3, "b": 3}
    assert rel.tables["query_pairs"].height == 0
    with pytest.raises(InvalidParameterError):
        KAnonParams(k=0)
