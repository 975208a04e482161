"""The ordered single pass: contribution bounding of a log whose users' rows are contiguous.

A search log is usually written user by user (the AOL release is sorted by ``AnonID``, each
user's rows in time order). Then Limit-User-Activity needs no grouping of the log at all. The
bounding itself — which rows a user keeps — is the kernel of :mod:`searchveil.bounding`, the
one definition the in-memory releases and Spark's partitions run too; this module only moves
batches through it and counts what it keeps:

* inputs stream in chunks (:mod:`searchveil.engines.sources`): a gzip file is inflated by
  ISA-L in a reader thread (it releases the GIL, and hashes the compressed bytes for the
  provenance record as it reads them) while Polars parses the previous chunk; Parquet arrives
  as Polars batches;
* each chunk is cut into a :class:`~searchveil.bounding.Segment` ahead, ``CUT_WORKERS``
  chunks at once in threads (:func:`~searchveil.bounding.cut` needs nothing from the chunk
  before it); the caller joins them to the carry in order
  (:meth:`~searchveil.bounding.Bounder.add`, small); a worker thread counts the kept rows
  (:class:`Tally`) a batch's worth at a time, so the chunks in flight keep the machine's cores
  busy and little is left to count when the scan ends;
* only the kept items (≤ d per user) are normalised and grouped, so the cost is one scan plus
  work proportional to users × d; memory is bounded by a few chunks plus the kept items, which
  are folded into counts every few million rows.

Users must be contiguous. The pass checks it (a user id that starts a second run raises
:class:`~searchveil.bounding.NotContiguous`) and the caller then falls back to a plan that
sorts the rows first, so an unsorted input is slower, never wrong.

:class:`Tally` — kept rows into counts or pools, and the figures — is shared with Spark's
driver (:mod:`searchveil.engines.spark_ordered`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from searchveil.bounding import STREAM_KEYS, Bounder, Segment, Stream, cut
from searchveil.engines.contract import Bounding, BoundingPlan, Item, Source
from searchveil.engines.sources import NotNumeric, Prefetch, parquet_source, tsv_source
from searchveil.errors import InputFormatError, InternalError, InvalidParameterError
from searchveil.model import PAIR_SEP

__all__ = ["Tally", "bound_chunks", "count_tables", "ordered_counts"]

SORTED_CHUNK_ROWS = 1 << 20  # rows per chunk of a sorted input
# kept items held before counting them into a partial count: about a batch's worth, so the
# counting runs beside the scan (in the worker thread) instead of after it; grouping 260k
# strings costs a third as much per row as grouping 1.6M (6M-row Parquet input: 0.27 s for
# six per-batch counts and 0.22 s to merge them, against 0.72 s for one count at the end)
FOLD_ROWS = 1 << 18
MERGE_PARTIALS = 8  # partial counts of one level merged into one count of the next level
# chunks cut at once (the kernel's cut needs nothing from the chunk before it): once a Parquet
# scan has run ahead, the cuts are the pass's critical path, and one thread keeps one core busy
CUT_WORKERS = 2


@dataclass
class _Fold:
    """Kept items, counted every ``FOLD_ROWS`` rows into a partial count; partials are merged
    in levels, ``MERGE_PARTIALS`` of one level into one of the next, and all of them at the
    end (so each kept item is grouped a logarithmic number of times, instead of the whole
    running count being regrouped at every fold)."""

    keys: list[str]
    pending: list[pl.DataFrame] = field(default_factory=list)
    pending_rows: int = 0
    partials: list[tuple[int, pl.DataFrame]] = field(default_factory=list)  # (level, count)

    def add(self, df: pl.DataFrame) -> None:
        if df.height:
            self.pending.append(df.select(self.keys))
            self.pending_rows += df.height
            if self.pending_rows >= FOLD_ROWS:
                self.fold()

    def add_counts(self, df: pl.DataFrame) -> None:
        """Counts computed elsewhere (``keys`` + ``count``), merged with the rest."""
        if df.height:
            self.partials.append((0, df.select(*self.keys, pl.col("count").cast(pl.Int64))))
            self._compact()

    def fold(self) -> None:
        if self.pending:
            part = (  # Polars' streaming group-by is ~1.7x its in-memory one on strings here
                pl.concat(self.pending).lazy().group_by(self.keys).len("count")
            ).collect(engine="streaming")
            self.partials.append((0, part.cast({"count": pl.Int64})))
            self.pending, self.pending_rows = [], 0
        self._compact()

    def _compact(self) -> None:
        # levels never increase along the list: merging its tail keeps them so
        while len(self.partials) >= MERGE_PARTIALS:
            tail = self.partials[-MERGE_PARTIALS:]
            level = tail[-1][0]
            if tail[0][0] != level:
                return
            del self.partials[-MERGE_PARTIALS:]
            self.partials.append((level + 1, self._merge([p for _, p in tail])))

    def _merge(self, parts: list[pl.DataFrame]) -> pl.DataFrame:
        if len(parts) == 1:
            return parts[0]
        merged = pl.concat(parts).lazy().group_by(self.keys).agg(pl.col("count").sum())
        return merged.collect(engine="streaming")

    def result(self) -> pl.DataFrame:
        self.fold()
        if not self.partials:
            return pl.DataFrame(schema={k: pl.String for k in self.keys} | {"count": pl.Int64})
        return self._merge([p for _, p in self.partials])


class Tally:
    """What a plan keeps, gathered: each stream's kept rows counted by key (histogram plans)
    or kept as rows (``pools``: user, keys, rank); :meth:`result` names the counts and the
    figures as the releases expect them."""

    def __init__(self, plan: BoundingPlan, spec_streams: list[Stream]) -> None:
        self.plan = plan
        self.pools = plan.keep == Bounding.POOLS
        self.streams = spec_streams
        self.folds = {s: _Fold(STREAM_KEYS[s]) for s in spec_streams}
        self.rows: dict[Stream, list[pl.DataFrame]] = {s: [] for s in spec_streams}
        self.kept: dict[Stream, int] = dict.fromkeys(spec_streams, 0)

    def add(self, kept: dict[Stream, pl.DataFrame]) -> None:
        for stream, df in kept.items():
            self.kept[stream] += df.height
            if self.pools:
                if df.height:
                    self.rows[stream].append(df)
            else:
                self.folds[stream].add(df)

    def add_counts(self, stream: Stream, counts: pl.DataFrame, kept: int) -> None:
        """Kept rows counted elsewhere (a Spark partition): ``keys`` + ``count``."""
        self.folds[stream].add_counts(counts)
        self.kept[stream] += kept

    def _pool(self, stream: Stream, user_dtype: Any) -> pl.DataFrame:
        keys = STREAM_KEYS[stream]
        parts = self.rows[stream]
        if parts:
            df = pl.concat(parts, how="vertical_relaxed", rechunk=True)
            parts.clear()  # the chunks' memory goes back as soon as the pool is one frame
        else:
            df = pl.DataFrame(schema={"u": user_dtype} | {k: pl.String for k in keys}
                              | {"_rank": pl.Int64})  # fmt: skip
        df = df.select(
            pl.col("u").alias("user"), *keys, pl.col("_rank").cast(pl.Int64).alias("rank")
        )
        return df.rename({"query": "item"}) if stream == Stream.EVENTS else df

    def result(
        self, figures: dict[str, int], user_dtype: Any = pl.Int64
    ) -> tuple[dict[str, pl.DataFrame], dict[str, int]]:
        """(counts, figures) of the plan, from the kernel's figures (``users``, ``events``,
        ``clicks``)."""
        bp, ev, cl = self.plan, Stream.EVENTS, Stream.CLICKS
        users, events, clicks = figures["users"], figures["events"], figures["clicks"]
        if self.pools:
            counts = {"query_pool": self._pool(ev, user_dtype)}
            out = {"users": users, "query_events": events, "pool_queries": self.kept[ev]}
            if cl in self.streams:
                counts["click_pool"] = self._pool(cl, user_dtype)
                out |= {"clicks": clicks, "pool_clicks": self.kept[cl]}
            return counts, out
        if bp.keep == Bounding.EVENTS:
            counts = count_tables(bp, ev, self.folds[ev].result())
            out = {"users": users, "query_events": events,
                   "query_events_after_bounding": self.kept[ev]}  # fmt: skip
            if cl in self.streams:
                counts |= count_tables(bp, cl, self.folds[cl].result())
                out |= {"clicks": clicks, "clicks_after_bounding": self.kept[cl]}
            return counts, out
        stream = ev if bp.item == Item.QUERIES else cl
        res = count_tables(bp, stream, self.folds[stream].result())["items"]
        n_items, kept = (events, self.kept[ev]) if stream == ev else (clicks, self.kept[cl])
        return {"items": res}, {"users": users, "items": n_items, "items_after_bounding": kept}


def count_tables(
    plan: BoundingPlan, stream: Stream, counts: pl.DataFrame
) -> dict[str, pl.DataFrame]:
    """The count tables a stream's counts (its keys + ``count``) make, named and keyed as the
    releases read them: ``queries`` / ``clicks`` (Korolova's events plan), or ``items`` — the
    query, or the clicked pair's ``item`` with its query and url (ZEALOUS). Empty: the plan
    makes no table of this stream."""
    if plan.keep == Bounding.EVENTS:
        return {"queries" if stream == Stream.EVENTS else "clicks": counts}
    if plan.item == Item.QUERIES:
        return (
            {"items": counts.select(item="query", count="count")}
            if (stream == Stream.EVENTS)
            else {}
        )
    if stream != Stream.CLICKS:
        return {}
    return {
        "items": counts.select(
            item=pl.col("query") + PAIR_SEP + pl.col("url"), query="query", url="url", count="count"
        )
    }


class _InOrder:
    """One worker thread that runs submitted calls in order, at most ``depth`` waiting: the
    counting of chunk i (Polars work that releases the GIL) runs while the caller joins chunk
    i+1 (``depth`` 0: one chunk being counted, one being joined — a chunk more in memory than
    a serial pass). Errors surface at the next :meth:`submit` or at :meth:`finish`; leaving the
    ``with`` block cancels what has not started."""

    def __init__(self, depth: int = 0) -> None:
        self._ex = ThreadPoolExecutor(max_workers=1, thread_name_prefix="searchveil-count")
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


def _check_plan(bp: BoundingPlan) -> None:
    if bp.keep not in (Bounding.EVENTS, Bounding.DISTINCT, Bounding.POOLS):
        raise InvalidParameterError("bounding plan", bp.keep, "events | distinct | pools")


def bound_chunks(
    chunks: Iterator[pl.DataFrame], bp: BoundingPlan, *, normalize: bool, check: bool = True
) -> tuple[dict[str, pl.DataFrame], dict[str, int]]:
    """The kernel over ``chunks`` (rows ``u, q, t`` [+ ``url``] in order, each user's rows
    together), counted: (counts, figures incl. ``rows``)."""
    spec = bp.kernel_spec(normalize=normalize)
    bounder = Bounder(spec, check=check)
    tally = Tally(bp, [s for s, _ in spec.rules()])
    user_dtype: Any = pl.Int64
    segments: Prefetch | None = None
    cutters = ThreadPoolExecutor(max_workers=CUT_WORKERS, thread_name_prefix="searchveil-cut")
    try:
        # chunks ahead, CUT_WORKERS at a time: cut (flags, ranks, kept rows) | join to the
        # carry, in order | count. The chunks are read, and handed to the cutters, in a thread
        # of their own; the futures come back in the chunks' order
        segments = Prefetch(
            (cutters.submit(cut, df, spec) for df in chunks if df.height), depth=CUT_WORKERS - 1
        )
        # one count may wait while another runs: the caller never waits on a count before
        # taking the next cut, so the cutters are not held up behind the counting
        with _InOrder(depth=1) as worker:
            for future in segments:
                seg, body = future.result()
                user_dtype = _dtype(seg)
                worker.submit(tally.add, bounder.add(seg, body))
            worker.finish()
    finally:
        if segments is not None:
            segments.close()
        cutters.shutdown(wait=True, cancel_futures=True)
    counts, figures = tally.result(bounder.figures, user_dtype)
    return counts, figures | {"rows": bounder.figures["rows"]}


def _dtype(seg: Segment) -> Any:
    return seg.run_users.dtype if seg.run_users is not None else pl.Int64


def ordered_counts(
    source: Source | Path,
    plan: BoundingPlan,
    *,
    normalize: bool,
    fingerprint: str = "full",
    sort: bool = False,
) -> tuple[dict[str, pl.DataFrame], dict[str, int], int, str]:
    """Bounded counts of ``plan`` (events, distinct queries or clicks; or the pools) in one
    ordered pass. Returns (counts, figures, rows, sha256); raises
    :class:`~searchveil.bounding.NotContiguous` when the users' rows are not contiguous.
    ``sort``: gather the rows and sort them by user first (input order within a user), for an
    input whose users are not contiguous (memory: the four columns of every row).
    ``fingerprint``: ``full`` (whole-file SHA-256) or ``fast`` (Parquet footer + size)."""
    _check_plan(plan)
    src_ = Source.of(source)
    for user_numeric in (True, False):
        try:
            return _ordered_counts(src_, plan, normalize=normalize, user_numeric=user_numeric,
                                   fingerprint=fingerprint, sort=sort)  # fmt: skip
        except NotNumeric:
            continue
    raise InternalError("user ids were neither numeric nor text")


def _sorted(chunks: Iterator[pl.DataFrame]) -> Iterator[pl.DataFrame]:
    parts = list(chunks)
    if not parts:
        return
    rows = pl.concat(parts, how="vertical_relaxed").sort("u", maintain_order=True)
    yield from (rows.slice(i, SORTED_CHUNK_ROWS) for i in range(0, rows.height, SORTED_CHUNK_ROWS))


def _ordered_counts(
    source: Source, bp: BoundingPlan, *, normalize: bool, user_numeric: bool, fingerprint: str,
    sort: bool,
) -> tuple[dict[str, pl.DataFrame], dict[str, int], int, str]:  # fmt: skip
    path = source.path
    if source.parquet:
        src = parquet_source(path, bp.with_url, fingerprint)
    else:
        if fingerprint != "full":
            raise InvalidParameterError(
                "fingerprint", fingerprint, "full, or fast with a Parquet file input"
            )
        src = tsv_source(path, bp.with_url, user_numeric)
    try:
        chunks = _sorted(src.chunks) if sort else src.chunks
        counts, figures = bound_chunks(chunks, bp, normalize=normalize, check=not sort)
        if figures["rows"] == 0:
            raise InputFormatError(str(path), "no data rows left (empty input)")
        sha = src.sha256()
    finally:
        src.close()
    rows = figures.pop("rows")
    return counts, figures, rows, sha
