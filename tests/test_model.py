"""Log model: query events, sessions, the four item types and the click histogram."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import polars as pl
import pytest

from searchveil.errors import InvalidParameterError
from searchveil.model import PAIR_SEP, SearchLog, click_histogram, items, query_events


def small_log() -> SearchLog:
    t = datetime(2006, 3, 1, 10, 0)
    df = pl.DataFrame(
        {
            "user": [1, 1, 1, 1, 2, 2],
            "query": ["cheap flights", "cheap flights", "hotels paris", "hotels paris", "x", "y"],
            "time": [t, t, t.replace(minute=5), t.replace(hour=12), t, t.replace(minute=10)],
            "url": ["http://a", "http://b", None, "http://c", "http://a", None],
        }
    )
    return SearchLog.from_frame(df)


def test_query_events_merge_click_rows() -> None:
    ev = query_events(small_log())
    assert ev.get_column("query").to_list() == [
        "cheap flights",
        "hotels paris",
        "hotels paris",
        "x",
        "y",
    ]
    assert ev.get_column("clicks").to_list() == [2, 0, 1, 1, 0]
    assert ev.get_column("pos").to_list() == [0, 1, 2, 0, 1]


def test_sessions_by_gap() -> None:
    log = small_log()
    sessions = log.df.get_column("session").to_list()
    # user 1: 10:00, 10:00, 10:05 in session 0; 12:00 starts session 1
    assert sessions == [0, 0, 0, 1, 0, 0]


def test_item_kinds() -> None:
    log = small_log()
    q = items(log, "queries")
    assert q.height == 5
    kw = items(log, "keywords")
    assert kw.filter(pl.col("user") == 1).get_column("item").to_list() == [
        "cheap",
        "flights",
        "hotels",
        "paris",
        "hotels",
        "paris",
    ]
    c = items(log, "clicks")
    assert c.get_column("item").to_list()[0] == "cheap flights" + PAIR_SEP + "http://a"
    assert c.height == 4
    qp = items(log, "query_pairs")
    # user 1: (cheap flights -> hotels paris) in session 0 only; user 2: (x -> y)
    assert qp.select("query", "next_query").rows() == [
        ("cheap flights", "hotels paris"),
        ("x", "y"),
    ]
    with pytest.raises(InvalidParameterError):
        items(log, "urls")


def test_click_histogram_matches_counts(aol_top1000) -> None:
    h = click_histogram(aol_top1000)
    assert h.matrix.sum() == 407_929
    assert h.n_users == 1_000
    row_sums = np.asarray(h.matrix.sum(axis=1)).ravel()
    assert np.array_equal(row_sums, h.pairs.get_column("count").to_numpy())
    holders = np.diff(h.matrix.indptr)
    assert np.array_equal(holders, h.pairs.get_column("holders").to_numpy())
    # pairs held by 2+ users: the UMP input size quoted in the UMP issue (7,219 shared pairs)
    shared = int((holders >= 2).sum())
    assert shared == 7_219
    blocks = h.user_blocks(3)
    assert sum(b.shape[1] for b in blocks) == h.n_users
