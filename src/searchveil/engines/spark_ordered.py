"""Spark's bounding: the kernel of :mod:`searchveil.bounding` on every partition
(``mapInArrow``), the partitions joined on the driver — how Spark moves batches, nothing more.

Spark reads the input in partitions (Parquet by row group, a text file by byte range; a ``.gz``
file is one partition). For user-sorted input (a log written user by user) each partition runs
:func:`partition_rows` over its Arrow batches in file order: a detached
:class:`~searchveil.bounding.Bounder` — its first run may continue the previous partition's
last user — bounds the partition's rows exactly as the in-memory release and the Polars pass
do (the same rows, :func:`~searchveil.engines.sources.canonical_rows`, the same kernel). Only
small rows leave a partition:

* the counts of what its other runs keep, in each count table's own keys, as Arrow blobs by
  shard of the key (``C``; :mod:`~searchveil.engines.spark_blobs`) — or, for the selection pools,
  the kept rows themselves as zstd blobs (``P``) and its last user's pool rows (``t``, for the
  users two tasks share);
* its :class:`~searchveil.bounding.Segment` — the first run's kept rows (``h``, at most the
  rule's n per stream), its first and last row and stream counts (``s``), the last run's kept
  keys (``k``) — and its figures (``f``);
* the user of every run, as blobs by shard (``U``): moved by shard, they give the users seen
  in more than one run.

The driver (:func:`join_partitions`) adds the segments in partition order to one
:class:`~searchveil.bounding.Bounder` — the kernel's own join, the same code that carries a
user from chunk to chunk inside a partition and in the Polars pass — and accepts a user seen in
several runs only where one partition's first run continues the previous one's last
(:class:`~searchveil.bounding.NotContiguous` otherwise: the caller then shuffles the rows by
user, sorted by their input position within each partition, and runs the same partitions,
which then hold whole users).

Partition order: Spark numbers a single file's splits in file order (equal-sized splits keep
their order when Spark sorts them by size), and each partition reads its rows in order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from searchveil.bounding import (
    STREAM_KEYS,
    Bounder,
    Carry,
    KernelSpec,
    NotContiguous,
    Segment,
    Stream,
)
from searchveil.engines.contract import Bounding, BoundingPlan
from searchveil.engines.ordered import Tally, count_tables
from searchveil.engines.sources import canonical_rows
from searchveil.engines.spark_blobs import NOISE_BITS, bucketed, pack, unpack
from searchveil.engines.spark_coded import decode, encode
from searchveil.errors import InputFormatError
from searchveil.io.files import PARQUET_DAMAGED

__all__ = [
    "CHUNK_ROWS",
    "KEPT",
    "OUTPUT_DDL",
    "OUTPUT_SCHEMA",
    "PIECE_ROWS",
    "POOL_KEYS",
    "PartitionInput",
    "bound_frames",
    "join_partitions",
    "join_segments",
    "parquet_pieces",
    "partition_rows",
    "piece_frames",
    "piece_rows",
    "pool_blobs",
    "pool_frame",
    "pool_rows",
    "repeated_users",
]

CHUNK_ROWS = 1 << 20  # rows gathered from Spark's Arrow batches before one kernel step
#: pool rows in one blob at most (a few MB: the JVM holds a blob whole when it caches or moves
#: it — a small heap fails on larger ones —, and a task's blobs are its one Arrow batch to
#: Python, bounded by bytes in the session)
POOL_BLOB_ROWS = 1 << 17

OUTPUT_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # C counts (blob), P pool rows (blob), U run users (blob),
        # h head row, k carried key, s state, f figure, t the last user's pool rows
        ("stream", pa.string()),  # events | clicks (P h k s t); a table's name (C); a figure's (f)
        ("user", pa.string()),
        ("query", pa.string()),
        ("url", pa.string()),
        ("n", pa.int64()),  # count (c, u, f; summed by the aggregation)
        ("part", pa.int32()),
        ("t", pa.string()),  # s: the first row's time
        ("q2", pa.string()),  # s: the last run's user, query and time
        ("t2", pa.string()),
        ("u2", pa.string()),
        ("n2", pa.int64()),  # s: the last run's stream count; h, t: the rank; C, U: the shard
        ("blob", pa.binary()),  # C, P, U: many rows as one Arrow blob (engines/spark_blobs.py)
    ]
)
DDL_TYPES = {pa.string(): "string", pa.int32(): "int", pa.binary(): "binary"}
OUTPUT_DDL = ", ".join(f"{f.name} {DDL_TYPES.get(f.type, 'long')}" for f in OUTPUT_SCHEMA)


@dataclass(frozen=True)
class PartitionInput:
    """How a partition's Arrow batches are read (sent to the executors with the function)."""

    plan: BoundingPlan
    spec: KernelSpec
    user_numeric: bool
    with_url: bool
    parquet: bool
    #: the shard bits of the blobs (:func:`~searchveil.engines.spark_blobs.shard_bits`)
    bits: int = NOISE_BITS


def _frame(cols: dict[str, Any], height: int) -> pa.RecordBatch:
    """A batch of :data:`OUTPUT_SCHEMA` (absent columns null)."""
    arrays = []
    for f in OUTPUT_SCHEMA:
        v = cols.get(f.name)
        if v is None:
            arrays.append(pa.nulls(height, f.type))
        elif isinstance(v, pl.Series):
            arrays.append(v.to_arrow().cast(f.type))
        elif isinstance(v, pa.Array):
            arrays.append(v)
        else:
            arrays.append(pa.array([v] * height, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=OUTPUT_SCHEMA)


#: a pool blob's item columns, by stream: a query pool's ``item``, a click pool's query and url
POOL_KEYS = {Stream.EVENTS: ["item"], Stream.CLICKS: ["query", "url"]}


def pool_rows(stream: Stream, kept: pl.DataFrame) -> pl.DataFrame:
    """A pool blob's rows (``user`` as text, :data:`POOL_KEYS`, ``rank``) from kept rows
    (``u``, the stream's keys, ``_rank``)."""
    keys = [pl.col(k).alias(n) for k, n in zip(STREAM_KEYS[stream], POOL_KEYS[stream], strict=True)]
    return kept.select(
        pl.col("u").cast(pl.String).alias("user"),
        *keys,
        pl.col("_rank").cast(pl.Int64).alias("rank"),
    )


def pool_blobs(stream: Stream, rows: pl.DataFrame) -> list[bytes]:
    """The pool blobs of :func:`pool_rows` (:data:`POOL_BLOB_ROWS` rows at most): the query
    pools' coded, one dictionary for ``rows`` (what every round of the selection reads,
    :func:`~searchveil.engines.spark_coded.encode`), the clicks' text (read once, for the
    released queries' pairs)."""
    if stream == Stream.EVENTS:
        return encode(rows, POOL_BLOB_ROWS)
    slices = range(0, rows.height, POOL_BLOB_ROWS)
    return [pack(rows.slice(lo, POOL_BLOB_ROWS), compress=True) for lo in slices]


def pool_frame(stream: Stream, blobs: list[bytes]) -> pl.DataFrame:
    """The text rows of :func:`pool_blobs` (in the order written)."""
    if stream == Stream.EVENTS:
        return decode(blobs)
    return pl.concat([unpack(b) for b in blobs]) if blobs else pl.DataFrame()


def _blobs(kind: str, stream: str | None, pairs: Iterator[tuple[int, bytes]]) -> pa.RecordBatch:
    """Blob rows of ``kind`` (C: a count table's partial counts, ``stream`` its name; U: the
    runs' users), one per shard (``n2``)."""
    got = list(pairs)
    return _frame(
        {
            "kind": kind,
            "stream": stream,
            "n2": pl.Series([b for b, _ in got], dtype=pl.Int64),
            "blob": pa.array([x for _, x in got], pa.binary()),
        },
        len(got),
    )


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


def _rows(kind: str, stream: Stream, df: pl.DataFrame, part: int, rank: bool) -> pa.RecordBatch:
    """Kept rows (``u``, keys, ``_rank``) or keys as rows of ``kind``."""
    cols: dict[str, Any] = {"kind": kind, "stream": stream.value, "part": part,
                            "query": df.get_column("query")}  # fmt: skip
    if "url" in df.columns:
        cols["url"] = df.get_column("url")
    if rank:  # a key, not summed: the same item twice in a user's first d stays two rows
        cols["user"] = df.get_column("u").cast(pl.String)
        cols["n2"] = df.get_column("_rank")
    return _frame(cols, df.height)


def partition_rows(
    batches: Iterator[pa.RecordBatch], how: PartitionInput, part: int
) -> Iterator[pa.RecordBatch]:
    """The kernel over one partition's rows (Arrow batches of AOL columns, in order), as
    batches of :data:`OUTPUT_SCHEMA` (see the module docstring)."""
    yield from bound_frames(_arrow_chunks(batches), how, part)


def _arrow_chunks(batches: Iterator[pa.RecordBatch]) -> Iterator[pl.DataFrame]:
    """Arrow batches gathered into frames of about :data:`CHUNK_ROWS` rows, in order."""
    buf: list[pa.RecordBatch] = []
    n = 0
    for b in batches:
        if b.num_rows == 0:
            continue
        buf.append(b)
        n += b.num_rows
        if n >= CHUNK_ROWS:
            yield pl.DataFrame(pl.from_arrow(pa.Table.from_batches(buf)))
            buf, n = [], 0
    if buf:
        yield pl.DataFrame(pl.from_arrow(pa.Table.from_batches(buf)))


def bound_frames(
    frames: Iterator[pl.DataFrame], how: PartitionInput, part: int
) -> Iterator[pa.RecordBatch]:
    """The kernel over one partition's rows (frames of AOL columns, in order), as batches of
    :data:`OUTPUT_SCHEMA` (see the module docstring)."""
    bounder = Bounder(how.spec, detached=True)
    streams = [s for s, _ in how.spec.rules()]
    pools = how.plan.keep == Bounding.POOLS
    tally = Tally(how.plan, streams)  # counts (pools leave as rows)
    kept_rows = dict.fromkeys(streams, 0)  # the rows of its other runs kept (the figures)
    users: list[pl.Series] = []
    # the pools' kept rows of the partition's last user so far (its run may span chunks): sent
    # with the segment (``t``), so that a user two tasks share needs no pass over the pools
    tails: dict[Stream, list[pl.DataFrame]] = {s: [] for s in streams}
    tail_user: list[Any] = [None]

    def step(raw: pl.DataFrame) -> Iterator[pa.RecordBatch]:
        df = canonical_rows(raw, user_numeric=how.user_numeric, with_url=how.with_url,
                            parquet=how.parquet)  # fmt: skip
        kept = bounder.feed(df)
        for stream, k in kept.items():
            kept_rows[stream] += k.height
        if pools:
            last = df.get_column("u")[-1]
            for stream, k in kept.items():
                mine = k.filter(pl.col("u") == last)
                tails[stream] = [*tails[stream], mine] if last == tail_user[0] else [mine]
            tail_user[0] = last
            for stream, k in kept.items():
                for blob in pool_blobs(stream, pool_rows(stream, k)) if k.height else []:
                    yield _frame(
                        {
                            "kind": "P",
                            "stream": stream.value,
                            "blob": pa.array([blob], pa.binary()),
                        },
                        1,
                    )
        else:
            tally.add(kept)
        # the users of this chunk's runs (a run continued from the chunk before is one run)
        users.append(df.get_column("u").filter((df.get_column("u") != df.get_column("u")
                                                .shift(1)).fill_null(True)))  # fmt: skip

    for raw in frames:
        if raw.height:
            yield from step(raw)
    if bounder.carry is None:  # an empty partition
        return
    if not pools:
        for stream in streams:
            for name, table in count_tables(how.plan, stream, tally.folds[stream].result()).items():
                keys = [k for k in table.columns if k != "count"]
                yield _blobs("C", name, bucketed(table, keys, how.bits))
    for stream in streams if pools else []:
        tail = pl.concat(tails[stream]) if tails[stream] else None
        if tail is not None and tail.height:
            yield _rows("t", stream, tail, part, rank=True)
    run_users = pl.concat(users)
    run_users = run_users.filter((run_users != run_users.shift(1)).fill_null(True))
    users_df = run_users.cast(pl.String).alias("user").to_frame()
    yield _blobs("U", None, bucketed(users_df, ["user"], how.bits))
    yield from _segment_rows(bounder.summary(), part)
    names = [KEPT + s.value for s in streams]
    yield _frame({"kind": "f", "part": part, "stream": pl.Series(names, dtype=pl.String),
                  "n": pl.Series([kept_rows[s] for s in streams], dtype=pl.Int64)},
                 len(names))  # fmt: skip


#: the figure rows (``f``) of the rows a partition kept outside its first run, by stream
KEPT = "kept:"

#: rows of a Parquet piece the executors read themselves (whole row groups, at least this many)
PIECE_ROWS = 1 << 20
#: a row group larger than this is streamed by pyarrow in batches (:func:`piece_frames`)
BIG_GROUP = 4 * CHUNK_ROWS


def parquet_pieces(path: str) -> list[tuple[int, ...]]:
    """A Parquet file's row groups, in file order, grouped into pieces of ≥ :data:`PIECE_ROWS`
    rows: the units the executors read (:func:`piece_rows`)."""
    meta = pq.ParquetFile(path).metadata
    pieces: list[tuple[int, ...]] = []
    cur: list[int] = []
    n = 0
    for i in range(meta.num_row_groups):
        cur.append(i)
        n += meta.row_group(i).num_rows
        if n >= PIECE_ROWS:
            pieces.append(tuple(cur))
            cur, n = [], 0
    if cur:
        pieces.append(tuple(cur))
    return pieces


def piece_rows(
    tasks: Iterator[pa.RecordBatch], how: PartitionInput, path: str, pieces: list[tuple[int, ...]]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` over a frame of piece numbers: each executor reads its pieces of the
    Parquet file at ``path`` itself (only the columns the kernel reads: :func:`piece_frames`)
    and runs :func:`bound_frames` on each, numbered by its place in the file — Spark
    schedules the work, the rows never pass through the JVM."""
    cols = ["AnonID", "Query", "QueryTime"] + (["ClickURL"] if how.with_url else [])
    f = pq.ParquetFile(path)
    for t in tasks:
        for piece in t.column(0).to_pylist():
            yield from bound_frames(piece_frames(path, f, pieces[piece], cols), how, piece)


def piece_frames(
    path: str, f: pq.ParquetFile, groups: tuple[int, ...], cols: list[str]
) -> Iterator[pl.DataFrame]:
    """A piece's rows (its row groups, in order) as frames of about :data:`CHUNK_ROWS` rows,
    read by Polars' Parquet reader (a third of pyarrow's CPU time here: it decodes in
    parallel and the frames need no conversion): runs of row groups of at least
    :data:`CHUNK_ROWS` rows, each one slice of the file (Polars reads only the row groups it
    overlaps). A row group larger than :data:`BIG_GROUP` rows is streamed by pyarrow in
    batches instead (Polars would decode it whole)."""
    meta = f.metadata
    start = sum(meta.row_group(g).num_rows for g in range(groups[0])) if groups else 0
    lo, n = start, 0
    for g in groups:
        rows = meta.row_group(g).num_rows
        if rows > BIG_GROUP:
            if n:
                yield _slice(path, cols, lo, n)
            yield from _arrow_chunks(
                f.iter_batches(batch_size=CHUNK_ROWS, row_groups=[g], columns=cols)
            )
            lo, n = lo + n + rows, 0
            continue
        n += rows
        if n >= CHUNK_ROWS:
            yield _slice(path, cols, lo, n)
            lo, n = lo + n, 0
    if n:
        yield _slice(path, cols, lo, n)


def _slice(path: str, cols: list[str], offset: int, rows: int) -> pl.DataFrame:
    """Rows ``offset`` … ``offset + rows`` of the Parquet file's columns ``cols`` (Polars)."""
    try:
        lf = pl.scan_parquet(path, glob=False).select(cols).slice(offset, rows)
        return lf.collect().rechunk()  # one chunk a column, as the kernel wants
    except pl.exceptions.PolarsError as exc:
        raise InputFormatError(path, PARQUET_DAMAGED) from exc


def _segment_rows(seg: Segment, part: int) -> Iterator[pa.RecordBatch]:
    """A partition's segment as rows ``s`` (one per stream), ``h`` and ``k``, and ``f``."""
    u0, q0, t0 = seg.first
    last = seg.last
    for stream, head in seg.head.items():
        yield _frame({"kind": "s", "stream": stream.value, "part": part, "user": _text(u0),
                      "query": q0, "t": _text(t0), "n": seg.head_count[stream],
                      "u2": _text(last.user), "q2": last.q, "t2": _text(last.t),
                      "n2": last.count[stream]}, 1)  # fmt: skip
        if head.height:
            yield _rows("h", stream, head, part, rank=True)
        keys = last.keys[stream]
        if keys.height:
            yield _rows("k", stream, keys, part, rank=False)
    names = ["rows", "runs", "events", "clicks"]
    yield _frame({"kind": "f", "part": part, "stream": pl.Series(names, dtype=pl.String),
                  "n": pl.Series([seg.figures[k] for k in names], dtype=pl.Int64)},
                 len(names))  # fmt: skip


def _segments(out: pl.DataFrame, spec: KernelSpec) -> list[Segment]:
    """The partitions' segments (:func:`_segment_rows`), in partition order."""
    rows: dict[tuple[str, int], pl.DataFrame] = {
        (str(k[0]), int(k[1])): g
        for k, g in out.filter(pl.col("kind").is_in(["s", "h", "k", "f"])).group_by(
            ["kind", "part"], maintain_order=True
        )
    }
    segs = []
    for part in sorted({p for kind, p in rows if kind == "s"}):
        states = {Stream(r["stream"]): r for r in rows[("s", part)].iter_rows(named=True)}
        heads = rows.get(("h", part), pl.DataFrame(schema=out.schema))
        keyed = rows.get(("k", part), pl.DataFrame(schema=out.schema))
        fig = dict(rows[("f", part)].select("stream", "n").iter_rows())
        head, count, n2, keys = {}, {}, {}, {}
        for stream, _ in spec.rules():
            ks = STREAM_KEYS[stream]
            st = states[stream]
            h = heads.filter(pl.col("stream") == stream.value).sort("n2")
            head[stream] = h.select(pl.col("user").alias("u"), *ks, pl.col("n2").alias("_rank"))
            keys[stream] = keyed.filter(pl.col("stream") == stream.value).select(ks)
            count[stream], n2[stream] = int(st["n"]), int(st["n2"])
        st = next(iter(states.values()))
        segs.append(Segment(
            first=(st["user"], st["query"], st["t"]),
            last=Carry(st["u2"], st["q2"], st["t2"], n2, keys),
            runs=int(fig["runs"]), head=head, head_count=count,
            figures={k: int(v) for k, v in fig.items()},
        ))  # fmt: skip
    return segs


def join_segments(out: pl.DataFrame, bp: BoundingPlan, spec: KernelSpec) -> tuple[
        Tally, dict[str, int]]:  # fmt: skip
    """The driver's join of the partitions' segments (rows ``s``, ``h``, ``k``, ``f`` and the
    users ``u`` seen in more than one run): a tally of the rows the join decides (the first
    runs of the partitions, held back there) and the kernel's figures; raises
    :class:`~searchveil.bounding.NotContiguous` when a user's rows are not contiguous. The
    tally's ``kept`` counts include every partition's own kept rows (its ``f`` rows
    :data:`KEPT`), so its figures are the whole input's."""
    streams = [s for s, _ in spec.rules()]
    tally = Tally(bp, streams)
    bounder = Bounder(spec)
    conts: Counter[Any] = Counter()
    for seg in _segments(out, spec):
        if bounder.carry is not None and bounder.carry.user == seg.first[0]:
            conts[seg.first[0]] += 1
        tally.add(bounder.add(seg))
    repeats = dict(out.filter(pl.col("kind") == "u").select("user", "n").iter_rows())
    if repeats != {u: 1 + c for u, c in conts.items()}:
        raise NotContiguous
    figs = out.filter(pl.col("kind") == "f").group_by("stream").agg(pl.col("n").sum())
    elsewhere = dict(figs.iter_rows())
    for stream in streams:
        tally.kept[stream] += int(elsewhere.get(KEPT + stream.value, 0))
    return tally, bounder.figures


def repeated_users(users: list[pl.DataFrame]) -> pl.DataFrame:
    """The users seen in more than one run (``user``, ``n``: their runs), from the tasks' run
    users (the unpacked ``U`` blobs of any number of tasks)."""
    if not users:
        return pl.DataFrame(schema={"user": pl.String, "n": pl.Int64})
    runs = pl.concat(users, how="vertical_relaxed").group_by("user").len("n")
    return runs.filter(pl.col("n") > 1).cast({"n": pl.Int64})


def _unpacked(out: pl.DataFrame, kind: str, stream: str | None = None) -> list[pl.DataFrame]:
    sel = pl.col("kind") == kind
    if stream is not None:
        sel = sel & (pl.col("stream") == stream)
    return [unpack(b) for b in out.filter(sel).get_column("blob").to_list()]


def join_partitions(
    out: pl.DataFrame, bp: BoundingPlan, spec: KernelSpec, user_dtype: Any
) -> tuple[dict[str, pl.DataFrame], dict[str, int], int]:
    """Counts (or pools), figures and rows from the partitions' whole output (every row the
    tasks wrote, in any order): :func:`join_segments` plus the tasks' counts (``C`` blobs) or
    pool rows (``p``), in this process — a small input's release on the driver, and the
    reference the Spark engine's cluster tables are tested against."""
    rep = repeated_users(_unpacked(out, "U")).with_columns(kind=pl.lit("u"))
    rows = pl.concat(
        [out.filter(~pl.col("kind").is_in(["C", "U", "P"])).drop("blob"), rep],
        how="diagonal_relaxed",
    )
    tally, bfig = join_segments(rows, bp, spec)
    pools = bp.keep == Bounding.POOLS
    for stream in tally.streams:
        if pools:
            sel = (pl.col("kind") == "P") & (pl.col("stream") == stream.value)
            blobs = out.filter(sel).get_column("blob").to_list()  # in the tasks' order
            if blobs:
                tally.rows[stream].append(
                    pool_frame(stream, blobs).select(
                        pl.col("user").alias("u"),
                        *[
                            pl.col(POOL_KEYS[stream][i]).alias(k)
                            for i, k in enumerate(STREAM_KEYS[stream])
                        ],
                        pl.col("rank").alias("_rank"),
                    )
                )
    counts, figures = tally.result(bfig, pl.String)
    if not pools:
        for name, joined in counts.items():
            keys = [k for k in joined.columns if k != "count"]
            parts = [joined.cast({"count": pl.Int64}), *_unpacked(out, "C", name)]
            summed = pl.concat(parts, how="vertical_relaxed").group_by(keys, maintain_order=True)
            counts[name] = summed.agg(pl.col("count").sum()).select(joined.columns)
    if user_dtype != pl.String:
        counts = {k: v.with_columns(pl.col("user").cast(user_dtype)) if "user" in v.columns
                  else v for k, v in counts.items()}  # fmt: skip
    return counts, figures, bfig["rows"]
