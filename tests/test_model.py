"""Log model: query events, sessions, the four item types and the click histogram."""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searchveil.errors import InvalidParameterError
from searchveil.model import (
    PAIR_SEP,
    SearchLog,
    add_sessions,
    click_histogram,
    items,
    query_events,
)


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


def _sessions_by_windows(df: pl.DataFrame, gap_minutes: float) -> pl.DataFrame:
    """The definition, with windows over each user (add_sessions computes it from runs)."""
    df = df.sort(["user", "row"], maintain_order=True)
    if "_session_raw" in df.columns:
        raw = pl.col("_session_raw")
        new = (raw != raw.shift(1).over("user")).fill_null(True)
        within = new.cast(pl.Int64).cum_sum().over("user") - 1
        return df.with_columns(session=within).drop("_session_raw")
    t = pl.col("time")
    prev = t.shift(1).over("user")
    new = prev.is_null() | t.is_null() | ((t - prev) > pl.duration(minutes=gap_minutes))
    if df.get_column("time").null_count() == df.height:
        new = pl.col("row") == pl.col("row").min().over("user")
    return df.with_columns(session=new.cast(pl.Int64).cum_sum().over("user") - 1)


ROWS = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(0, 4)),  # user (null users form one group)
        st.one_of(st.none(), st.integers(0, 120)),  # minutes (null: unknown time)
        st.one_of(st.none(), st.integers(0, 2)),  # the input's session id
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(rows=ROWS, raw=st.booleans(), no_times=st.booleans(), seed=st.integers(0, 2**16))
def test_sessions_equal_the_window_definition(rows, raw, no_times, seed) -> None:
    order = np.random.default_rng(seed).permutation(len(rows))
    t0 = datetime(2006, 3, 1)
    df = pl.DataFrame(
        {
            "user": pl.Series([r[0] for r in rows], dtype=pl.Int64),
            "row": pl.Series(order, dtype=pl.UInt64),
            "time": pl.Series(
                [None if no_times or r[1] is None else t0 + timedelta(minutes=r[1]) for r in rows],
                dtype=pl.Datetime("us"),
            ),
        }
    )
    if raw:
        df = df.with_columns(_session_raw=pl.Series([r[2] for r in rows], dtype=pl.Int64))
    assert add_sessions(df, gap_minutes=30).equals(_sessions_by_windows(df, 30))
