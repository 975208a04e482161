"""The ordered single pass: contribution bounding of a log whose users' rows are contiguous.

A search log is usually written user by user (the AOL release is sorted by ``AnonID``, each
user's rows in time order). Then Limit-User-Activity needs no grouping of the log at all: a
user's first d query events are found by comparing each row with the one before it (a new
user? a new event?) and a running count that restarts at every user — a few vectorised passes
over each chunk, with a small *carry* (the last row, the last user's event and click counts, its
distinct items so far) handed from chunk to chunk. Only the kept items (≤ d per user) are ever
normalised, hashed or grouped, so the cost is one scan plus work proportional to users × d.

Inputs stream in chunks (:mod:`searchveil.engines.sources`): a gzip file is inflated by ISA-L
in a reader thread (it releases the GIL, and hashes the compressed bytes for the provenance
record as it reads them) while Polars parses and bounds the previous chunk; Parquet arrives as
Polars batches. Memory is bounded by a few chunks plus the kept items, which are folded into
counts every few million rows.

Exactly the in-memory definitions (``searchveil.model``, ``searchveil.bounding``):

* an *event* starts where the user, the time or the normalised query differ from the previous
  row (a null time always starts one). Raw query text is compared first; only rows whose raw
  text differs from the previous row's at the same user and time are normalised to decide, so
  normalisation never runs on the whole log.
* Korolova keeps each user's first ``d`` events (or first ``d`` distinct normalised queries with
  ``distinct``) and first ``d_c`` click rows; ZEALOUS keeps the first occurrence of each user's
  first ``m`` distinct queries or (query, url) pairs.
* Users must be contiguous. The pass checks it (a user id that starts a second run raises
  :class:`NotGrouped`) and the caller then falls back to the hash-based plan, so an unsorted
  input is slower, never wrong.

Users are compared as they are written (after stripping blanks); numeric ids are read as
64-bit integers when every id parses, as the in-memory reader does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from searchveil.engines.contract import Bounding, BoundingPlan, Item, Source
from searchveil.engines.sources import (
    NotNumeric,
    Prefetch,
    parquet_source,
    tsv_source,
)
from searchveil.errors import InputFormatError, InternalError, InvalidParameterError
from searchveil.model import PAIR_SEP, normalize_query

__all__ = ["NotGrouped", "ordered_counts"]

FOLD_ROWS = 2_000_000  # kept items held before counting them into a partial count
MERGE_PARTIALS = 8  # partial counts held before merging them
# a string that is not equal to its normalisation contains one of these (A-Z, any character
# outside printable ASCII — Unicode upper case and white space, tabs, controls — two spaces in a
# row, or a space at either end); strings without them are left as they are
_NEEDS_NORMALIZING = r"[^ !-@\[-~]|  |^ | $"


def _pool_frame(rows: list[pl.DataFrame], keys: list[str], user_numeric: bool) -> pl.DataFrame:
    """The kept rows (users contiguous, each user's in order) as ``user, <keys>, rank``."""
    if rows:
        df = pl.concat(rows, how="vertical_relaxed", rechunk=True)
        rows.clear()  # the chunks' memory goes back as soon as the pool is one frame
    else:
        df = pl.DataFrame(schema={"u": pl.Int64 if user_numeric else pl.String}
                          | {k: pl.String for k in keys})  # fmt: skip
    df = df.rename({"u": "user"})
    if keys == ["query"]:
        df = df.rename({"query": "item"})
    rid = df.get_column("user").rle_id().to_numpy()  # users are contiguous
    starts = np.flatnonzero(np.r_[True, rid[1:] != rid[:-1]]) if rid.size else rid
    rank = np.arange(rid.size, dtype=np.int64) - np.repeat(starts, np.diff(np.r_[starts, rid.size]))
    return df.with_columns(rank=pl.Series(rank, dtype=pl.Int64))


class NotGrouped(Exception):
    """The input's user rows are not contiguous; use the hash-based plan."""


# ----------------------------------------------------------------------------------- bounding


def _normalize(s: pl.Series, normalize: bool) -> pl.Series:
    """``normalize_query`` applied only to the strings it would change."""
    if not normalize or s.len() == 0:
        return s
    mask = s.str.contains(_NEEDS_NORMALIZING)
    if not mask.any():
        return s
    idx = mask.arg_true()
    fixed = pl.select(normalize_query(pl.lit(s.gather(idx)))).to_series()
    return s.scatter(idx, fixed)


def _rank(start: pl.Expr, counted: pl.Expr, carried: int) -> pl.Expr:
    """1-based running count of ``counted`` rows within each user run (``start`` marks a user's
    first row); the run open at the chunk's start continues from ``carried``."""
    cs = counted.cast(pl.Int64).cum_sum()
    base = (
        pl.when(start)
        .then(cs - counted.cast(pl.Int64))
        .otherwise(None)
        .forward_fill()
        .fill_null(-carried)
    )
    return cs - base


@dataclass
class _Fold:
    """Kept items, counted every ``FOLD_ROWS`` rows into a partial count; partials are merged
    when ``MERGE_PARTIALS`` have gathered and at the end (so each kept item is grouped about
    twice, instead of the whole running count being regrouped at every fold)."""

    keys: list[str]
    pending: list[pl.DataFrame] = field(default_factory=list)
    pending_rows: int = 0
    partials: list[pl.DataFrame] = field(default_factory=list)

    def add(self, df: pl.DataFrame) -> None:
        if df.height:
            self.pending.append(df.select(self.keys))
            self.pending_rows += df.height
            if self.pending_rows >= FOLD_ROWS:
                self.fold()

    def fold(self) -> None:
        if self.pending:
            part = (  # Polars' streaming group-by is ~1.7x its in-memory one on strings here
                pl.concat(self.pending).lazy().group_by(self.keys).len("count")
            ).collect(engine="streaming")
            self.partials.append(part.cast({"count": pl.Int64}))
            self.pending, self.pending_rows = [], 0
        if len(self.partials) >= MERGE_PARTIALS:
            self.partials = [self._merge()]

    def _merge(self) -> pl.DataFrame:
        if len(self.partials) == 1:
            return self.partials[0]
        merged = pl.concat(self.partials).lazy().group_by(self.keys).agg(pl.col("count").sum())
        return merged.collect(engine="streaming")

    def result(self) -> pl.DataFrame:
        self.fold()
        if not self.partials:
            return pl.DataFrame(schema={k: pl.String for k in self.keys} | {"count": pl.Int64})
        return self._merge()


@dataclass
class _Distinct:
    """First occurrences of each user's first ``m`` distinct keys, across chunks."""

    m: int
    keys: list[str]
    carry_user: Any = None
    carry_keys: pl.DataFrame | None = None  # the open user's kept keys so far

    def keep(self, rows: pl.DataFrame) -> pl.DataFrame:
        """``rows``: candidate rows (``u`` + keys) in order; returns the kept ones."""
        if rows.height == 0:
            return rows
        n_carry = 0
        if (
            self.carry_keys is not None
            and self.carry_keys.height
            and (rows.item(0, "u") == self.carry_user)
        ):
            pre = self.carry_keys.select(
                pl.lit(self.carry_user, rows.schema["u"]).alias("u"), *self.keys
            )
            rows = pl.concat([pre, rows.select("u", *self.keys)])
            n_carry = pre.height
        start = (pl.col("u") != pl.col("u").shift(1)).fill_null(True)
        key = pl.col(self.keys[0]) if len(self.keys) == 1 else pl.struct(*self.keys)
        marked = rows.with_columns(_f=key.is_first_distinct().over("u"))
        marked = marked.with_columns(_k=pl.col("_f") & (_rank(start, pl.col("_f"), 0) <= self.m))
        kept_all = marked.filter(pl.col("_k")).drop("_k", "_f")
        last_user = rows.item(rows.height - 1, "u")
        self.carry_user = last_user
        self.carry_keys = kept_all.filter(pl.col("u") == last_user).select(self.keys)
        return kept_all.slice(n_carry) if n_carry else kept_all


class _InOrder:
    """One worker thread that runs submitted calls in order, at most ``depth`` waiting: the
        extraction of chunk i (filter, normalise, fold — Polars work that releases the GIL) runs
        while the caller marks chunk i+1 (``depth`` 0: one chunk in extraction, one being marked — a
    chunk more in memory than a serial pass). Errors surface at the next :meth:`submit` or at
        :meth:`finish`; leaving the ``with`` block cancels what has not started."""

    def __init__(self, depth: int = 0) -> None:
        self._ex = ThreadPoolExecutor(max_workers=1, thread_name_prefix="searchveil-extract")
        self._pending: deque[Future[None]] = deque()
        self._depth = depth

    def submit(self, fn: Any, *args: Any) -> None:
        while len(self._pending) > self._depth:
            self._pending.popleft().result()
        while self._pending and self._pending[0].done():
            self._pending.popleft().result()
        self._pending.append(self._ex.submit(fn, *args))

    def finish(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def __enter__(self) -> _InOrder:
        return self

    def __exit__(self, *exc: object) -> None:
        self._ex.shutdown(wait=True, cancel_futures=True)


@dataclass
class _State:
    """What one chunk hands to the next."""

    u: Any = None
    q: str | None = None
    t: str | None = None
    events: int = 0  # events of the open user so far
    clicks: int = 0  # click rows of the open user so far
    seen_users: set[Any] = field(default_factory=set)
    rows: int = 0
    users: int = 0
    query_events: int = 0
    click_rows: int = 0


def _flags(df: pl.DataFrame, prev: tuple[Any, Any, Any], normalize: bool) -> pl.DataFrame:
    """Add ``_us`` (first row of a user) and ``_es`` (first row of a query event): one lazy
    query per chunk; rows whose raw query differs from the previous row's at the same user and
    time (``_amb``) are settled by comparing normalised text afterwards. ``prev``: the raw
    (user, query, time) of the row before the chunk — all a chunk needs from the one before, so
    flags can be computed a chunk ahead (:func:`_flagged`)."""
    dt = df.schema
    pu0, pq0, pt0 = prev
    u, q, t = pl.col("u"), pl.col("q"), pl.col("t")
    pu = u.shift(1, fill_value=pl.lit(pu0, dt["u"]))
    pq = q.shift(1, fill_value=pl.lit(pq0, pl.String))
    pt = t.shift(1, fill_value=pl.lit(pt0, pl.String))
    same_ut = ((u == pu) & (t == pt)).fill_null(False)
    same_q = (q == pq).fill_null(False)
    out = (
        df.lazy()
        .with_columns(
            _us=(u != pu).fill_null(True),
            _es=~(same_ut & same_q),
            _amb=same_ut & ~same_q,
        )
        .collect()
    )
    amb = out.get_column("_amb")
    if normalize and amb.any():
        # the ambiguous rows' query and the one before, by a filter (a gather across the
        # batch's many small chunks cost 10x more)
        pair = (
            out.lazy()
            .select(
                a=q.filter(pl.col("_amb")),
                b=q.shift(1, fill_value=pl.lit(pq0, pl.String)).filter(pl.col("_amb")),
            )
            .collect()
        )
        same = _normalize(pair.get_column("a"), True) == _normalize(pair.get_column("b"), True)
        idx = amb.arg_true()
        out = out.with_columns(out.get_column("_es").scatter(idx, ~same).alias("_es"))
    return out


def _ranks(out: pl.DataFrame, st: _State, with_url: bool) -> pl.DataFrame:
    """Add ``_er`` (the user's event number of the row) and, with URLs, ``_cr`` (the user's
    click number), continuing the counts of the user open at the chunk's start."""
    ranks = [_rank(pl.col("_us"), pl.col("_es"), st.events).alias("_er")]
    if with_url:
        ranks.append(_rank(pl.col("_us"), pl.col("url").is_not_null(), st.clicks).alias("_cr"))
    return out.with_columns(ranks)


def _mark(df: pl.DataFrame, st: _State, normalize: bool, with_url: bool) -> pl.DataFrame:
    """:func:`_flags` then :func:`_ranks` of one chunk (the previous row from ``st``)."""
    return _ranks(_flags(df, (st.u, st.q, st.t), normalize), st, with_url)


def _flagged(chunks: Iterator[pl.DataFrame], normalize: bool) -> Iterator[pl.DataFrame]:
    """The non-empty chunks with their :func:`_flags`, each chunk's previous row taken from
    the raw chunk before it."""
    prev: tuple[Any, Any, Any] = (None, None, None)
    for df in chunks:
        if df.height == 0:
            continue
        out = _flags(df, prev, normalize)
        last = df.row(df.height - 1, named=True)
        prev = (last["u"], last["q"], last["t"])
        yield out


def ordered_counts(
    source: Source | Path,
    plan: BoundingPlan,
    *,
    normalize: bool,
    fingerprint: str = "full",
) -> tuple[dict[str, pl.DataFrame], dict[str, int], int, str]:
    """Bounded counts of ``plan`` (events, distinct queries or clicks; or the pools) in one
    ordered pass. Returns (counts, figures, rows, sha256); raises
    :class:`NotGrouped` when the users' rows are not contiguous. ``fingerprint``: ``full``
    (whole-file SHA-256) or ``fast`` (Parquet footer + size, :func:`start_fingerprint`)."""
    for user_numeric in (True, False):
        try:
            return _ordered_counts(
                Source.of(source), plan, normalize=normalize, user_numeric=user_numeric,
                fingerprint=fingerprint,
            )  # fmt: skip
        except NotNumeric:
            continue
    raise InternalError("user ids were neither numeric nor text")


def _ordered_counts(
    source: Source,
    bp: BoundingPlan,
    *,
    normalize: bool,
    user_numeric: bool,
    fingerprint: str,
) -> tuple[dict[str, pl.DataFrame], dict[str, int], int, str]:
    path = source.path
    if bp.keep not in (Bounding.EVENTS, Bounding.DISTINCT, Bounding.POOLS):
        raise InvalidParameterError("bounding plan", bp.keep, "events | distinct | pools")
    if source.parquet:
        src = parquet_source(path, bp.with_url, fingerprint)
    else:
        if fingerprint != "full":
            raise InvalidParameterError(
                "fingerprint", fingerprint, "full, or fast with a Parquet file input"
            )
        src = tsv_source(path, bp.with_url, user_numeric)
    st = _State()
    flagged: Prefetch | None = None
    try:
        ex = _Extractor(bp, normalize)
        # three threads: flags of chunk i+1 (a chunk ahead: they need only the raw row before
        # it) | ranks and bookkeeping of chunk i | extraction of chunk i-1
        flagged = Prefetch(_flagged(src.chunks, normalize))
        with _InOrder() as worker:
            for df in flagged:
                worker.submit(ex.extract, _account(df, st, bp.with_url))
            worker.finish()
        if st.rows == 0:
            raise InputFormatError(str(path), "no data rows left (empty input)")
        sha = src.sha256()
    finally:
        if flagged is not None:
            flagged.close()
        src.close()
    counts, figures = ex.result(st, user_numeric)
    return counts, figures, st.rows, sha


def _account(df: pl.DataFrame, st: _State, with_url: bool) -> pl.DataFrame:
    """Chunk i's ranks and the pass's bookkeeping (in the caller's thread, in order); raises
    :class:`NotGrouped` when a user starts a second run."""
    df = _ranks(df, st, with_url)
    new_users = df.get_column("u").filter(df.get_column("_us")).to_list()
    if any(x in st.seen_users for x in new_users) or len(set(new_users)) < len(new_users):
        raise NotGrouped
    st.seen_users.update(new_users)
    last = df.row(df.height - 1, named=True)
    st.u, st.q, st.t = last["u"], last["q"], last["t"]
    st.events = int(last["_er"])
    st.rows += df.height
    st.users += len(new_users)
    st.query_events += int(df.get_column("_es").sum())
    if with_url:
        st.clicks = int(last["_cr"])
        st.click_rows += int(df.get_column("url").is_not_null().sum())
    return df


class _Extractor:
    """The kept items of each chunk (in the extraction thread, in order) and, at the end, the
    counts (or the pools) and figures of the plan."""

    def __init__(self, bp: BoundingPlan, normalize: bool) -> None:
        self.bp, self.normalize = bp, normalize
        self.by_events = bp.keep == Bounding.EVENTS
        # selection strategies (issue 24): each user's first per_user distinct queries (and
        # first clicks_per_user distinct (query, url) clicks) as rows, not counts
        self.pools = bp.keep == Bounding.POOLS
        self.q_dist: _Distinct | None
        if self.by_events and not bp.distinct:
            self.q_fold = _Fold(["query"])
            self.q_dist = None
        else:
            self.q_fold = _Fold(["query"] if bp.item == Item.QUERIES else ["query", "url"])
            self.q_dist = _Distinct(bp.per_user, self.q_fold.keys)
        self.c_fold = _Fold(["query", "url"]) if (self.by_events and bp.with_url) else None
        self.tally = {"events": 0, "clicks": 0}  # kept rows
        self.q_rows: list[pl.DataFrame] = []  # pools: the kept rows themselves
        self.c_rows: list[pl.DataFrame] = []
        self.c_dist = (
            _Distinct(bp.clicks_per_user or 0, ["query", "url"])
            if self.pools and bp.with_url
            else None
        )

    def _events(self, df: pl.DataFrame) -> pl.DataFrame:
        """Event starts as ``u, query`` (normalised)."""
        ev = df.lazy().filter(pl.col("_es")).select("u", pl.col("q").alias("query")).collect()
        return ev.with_columns(query=_normalize(ev.get_column("query"), self.normalize))

    def _clicks(self, df: pl.DataFrame) -> pl.DataFrame:
        """Click rows as ``u, query, url`` (query normalised)."""
        cl = (
            df.lazy()
            .filter(pl.col("url").is_not_null())
            .select("u", pl.col("q").alias("query"), "url")
            .collect()
        )
        return cl.with_columns(query=_normalize(cl.get_column("query"), self.normalize))

    def extract(self, df: pl.DataFrame) -> None:
        """Chunk i's kept items into the folds (or the pools)."""
        if self.pools:
            self._extract_pools(df)
            return
        if self.q_dist is None:  # events: first d events
            kept = (  # lazy: only the query column is filtered (projection first)
                df.lazy()
                .filter(pl.col("_es") & (pl.col("_er") <= self.bp.per_user))
                .select(pl.col("q").alias("query"))
                .collect()
            )
            kept = kept.with_columns(query=_normalize(kept.get_column("query"), self.normalize))
        elif self.bp.item == Item.QUERIES:  # first m distinct queries (first occurrence)
            kept = self.q_dist.keep(self._events(df))
        else:  # distinct clicks: first m distinct (query, url)
            kept = self.q_dist.keep(self._clicks(df))
        self.q_fold.add(kept)
        self.tally["events"] += kept.height
        if self.c_fold is not None:
            d_c = self.bp.clicks_per_user or 0
            kc = (
                df.lazy()
                .filter(pl.col("url").is_not_null() & (pl.col("_cr") <= d_c))
                .select(pl.col("q").alias("query"), "url")
                .collect()
            )
            kc = kc.with_columns(query=_normalize(kc.get_column("query"), self.normalize))
            self.c_fold.add(kc)
            self.tally["clicks"] += kc.height

    def _extract_pools(self, df: pl.DataFrame) -> None:
        assert self.q_dist is not None
        kept = self.q_dist.keep(self._events(df))
        self.q_rows.append(kept)
        self.tally["events"] += kept.height
        if self.c_dist is not None:
            kept_c = self.c_dist.keep(self._clicks(df))
            self.c_rows.append(kept_c)
            self.tally["clicks"] += kept_c.height

    def result(
        self, st: _State, user_numeric: bool
    ) -> tuple[dict[str, pl.DataFrame], dict[str, int]]:
        kept_events, kept_clicks = self.tally["events"], self.tally["clicks"]
        counts: dict[str, pl.DataFrame] = {}
        figures: dict[str, int]
        if self.pools:
            counts["query_pool"] = _pool_frame(self.q_rows, ["query"], user_numeric)
            figures = {
                "users": st.users,
                "query_events": st.query_events,
                "pool_queries": kept_events,
            }
            if self.c_dist is not None:
                counts["click_pool"] = _pool_frame(self.c_rows, ["query", "url"], user_numeric)
                figures |= {"clicks": st.click_rows, "pool_clicks": kept_clicks}
            return counts, figures
        if self.by_events:
            counts["queries"] = self.q_fold.result()
            figures = {
                "users": st.users,
                "query_events": st.query_events,
                "query_events_after_bounding": kept_events,
            }
            if self.c_fold is not None:
                counts["clicks"] = self.c_fold.result()
                figures |= {"clicks": st.click_rows, "clicks_after_bounding": kept_clicks}
            return counts, figures
        res = self.q_fold.result()
        queries = self.bp.item == Item.QUERIES
        if queries:
            res = res.with_columns(item=pl.col("query"))
        else:
            res = res.with_columns(item=pl.col("query") + PAIR_SEP + pl.col("url"))
        counts["items"] = res
        figures = {
            "users": st.users,
            "items": st.query_events if queries else st.click_rows,
            "items_after_bounding": kept_events,
        }
        return counts, figures
