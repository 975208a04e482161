"""The bounding job on Spark: the kernel of :mod:`searchveil.bounding` in every task
(:func:`pieces_plan` when the executors read a Parquet file themselves, :func:`kernel_plan` on
Spark's partitions, in input order or shuffled by user), its output cached on the executors,
and to the driver only the segments and the users seen in more than one run, joined there
(:class:`KernelResult`: the count tables and pools the release then runs on, on the cluster).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import TaskContext
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType

from searchveil.bounding import Stream
from searchveil.engines.contract import BoundingPlan
from searchveil.engines.spark_blobs import NOISE_BITS, blob_rows, cores, shard_bits, unpack_all
from searchveil.engines.spark_ordered import (
    OUTPUT_DDL,
    POOL_KEYS,
    PartitionInput,
    join_partitions,
    join_segments,
    parquet_pieces,
    partition_rows,
    piece_rows,
    pool_blobs,
    repeated_users,
)
from searchveil.engines.spark_pools import SparkClickPools, SparkPools
from searchveil.engines.spark_release import CACHE, SparkCounts, unpersist

__all__ = ["KernelResult", "kernel_plan", "pieces_plan"]

# Java's \s is ASCII-only unless UNICODE_CHARACTER_CLASS is on; (?U) makes it the Unicode
# White_Space class of Polars' (Rust) \s: the blanks the kernel strips from a text user id
_EDGE_BLANKS = r"(?U)^\s+|\s+$"

#: a round's task reads the pools of up to this many bounding tasks (merged without moving a
#: row): fewer task starts, and fewer copies of what each task unpacks (the released set, a
#: bias round's eligible items), while a task's pool stays a few pieces' worth however large
#: the input (warm probe-reweight-2r −2 s on 2 cores, 20M rows; docs/spark-perf.md)
POOL_PIECES = 4


def pool_tasks(pieces: int, slots: int) -> int:
    """How many tasks a round runs on the pools of ``pieces`` bounding tasks: one per task
    slot at least, and no task with more than :data:`POOL_PIECES` pieces' pools."""
    return max(1, min(pieces, max(slots, -(-pieces // POOL_PIECES))))


def _repeats(batches: Any) -> Any:
    """``mapInArrow`` on the run users' blobs moved by shard: the users of this task's
    shards seen in more than one run."""
    rep = repeated_users(list(unpack_all(batches)))
    if rep.height:
        yield from (
            rep.to_arrow().cast(pa.schema([("user", pa.string()), ("n", pa.int64())])).to_batches()
        )


def _per_partition(how: PartitionInput, batches: Any) -> Any:
    """``mapInArrow``'s function on an executor: the kernel over this partition's batches."""
    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    yield from partition_rows(batches, how, part)


def _per_piece(how: PartitionInput, path: str, pieces: list[tuple[int, ...]], tasks: Any) -> Any:
    """``mapInArrow``'s function when the executors read the Parquet file themselves."""
    yield from piece_rows(tasks, how, path, pieces)


@dataclass
class KernelResult:
    """The bounding kernel's output on the cluster (``output``: the tasks' rows, cached), the
    rows the driver's join decided (``delta``: per table, counts or pool rows in the tables'
    own columns), the figures, the input's rows, and the rows the driver received."""

    output: Any
    delta: dict[str, pl.DataFrame]
    figures: dict[str, int]
    rows: int
    received: int
    #: the users whose rows two tasks share (their first run continues a task's last one)
    straddlers: list[str] = field(default_factory=list)
    #: each task's last user's pool rows (``t`` rows: user, query, url, stream, rank ``n2``)
    tails: pl.DataFrame | None = None
    #: the blobs' shard bits (:func:`~searchveil.engines.spark_blobs.shard_bits`)
    bits: int = NOISE_BITS
    #: a small input's counts or pools, already in this process (:data:`LOCAL_ROWS`)
    local: dict[str, pl.DataFrame] | None = None
    where: str = "the input"
    #: the rows the driver receives while releasing, added up (``release``)
    sink: dict[str, int] = field(default_factory=dict)
    #: the bounding tasks that sent a segment (those with rows)
    tasks: int = 0

    def _part(self, kind: str, stream: Stream) -> Any:
        out = self.output
        return out.filter((F.col("kind") == kind) & (F.col("stream") == stream.value))

    def count_tables(self, bp: BoundingPlan) -> dict[str, Any]:
        """Each count table (the names and columns :class:`~searchveil.engines.ordered.Tally`
        gives): the tasks' partial counts plus the join's, on the cluster (a small input's:
        :attr:`local`)."""
        if self.local is not None:
            return dict(self.local)
        spark = self.output.sparkSession
        out: dict[str, Any] = {}
        for name, delta in self.delta.items():
            keys = [k for k in delta.columns if k != "count"]
            part = self.output.filter((F.col("kind") == "C") & (F.col("stream") == name))
            part = part.select(F.col("n2").alias("bucket"), "blob")
            if delta.height:
                d = delta.select(*[pl.col(k).cast(pl.String) for k in keys],
                                 pl.col("count").cast(pl.Int64))  # fmt: skip
                part = part.unionByName(blob_rows(spark, d, keys, self.bits))
            out[name] = SparkCounts(part, keys, self.where, self.sink, self.bits)
        return out

    def pool_tables(self) -> tuple[Any, Any]:
        """The query pools (and the clicked pairs' pools), each user's rows in one partition in
        rank order, without moving them: a task's kept rows are its users' rows in input order,
        so only the users that straddle two tasks (at most one per task boundary: their rows
        from the tasks plus the join's) are gathered here and added as one more partition. (A
        small input's pools: :attr:`local`.)"""
        if self.local is not None:
            return self.local["query_pool"], self.local.get("click_pool")
        spark = self.output.sparkSession
        tables: list[Any] = []
        shared = self.straddlers
        for name, stream in (("query_pool", Stream.EVENTS), ("click_pool", Stream.CLICKS)):
            if name not in self.delta:
                tables.append(None)
                continue
            keys = POOL_KEYS[stream]
            p = self.output.filter((F.col("kind") == "P") & (F.col("stream") == stream.value))
            p = p.select("blob", F.lit(False).alias("own"))
            small = self.delta[name].select(pl.col("user").cast(pl.String),
                                            *[pl.col(k).cast(pl.String) for k in keys],
                                            pl.col("rank").cast(pl.Int64))  # fmt: skip
            if shared and self.tails is not None:  # their rows in the tasks, with the join's
                mine = self.tails.filter(
                    (pl.col("stream") == stream.value) & pl.col("user").is_in(shared)
                )
                theirs = mine.select(
                    "user",
                    *[pl.col("query" if k == "item" else k).alias(k) for k in keys],
                    rank="n2",
                )
                small = pl.concat([small, theirs.cast(small.schema)])
            if small.height:
                small = small.sort("user", "rank", maintain_order=True)
                blobs = pool_blobs(stream, small)
                one = pa.table(
                    [pa.array(blobs, pa.binary()), pa.array([True] * len(blobs))],
                    names=["blob", "own"],
                )
                p = p.unionByName(spark.createDataFrame(one).coalesce(1))
            tables.append(p.coalesce(pool_tasks(self.tasks + 1, cores(spark))))
        # the query pools are read where the bounding tasks' output is cached: no second copy
        queries = SparkPools(tables[0], self.where, self.sink, shared, self.bits, cached=False)
        clicks = (
            None
            if tables[1] is None
            else SparkClickPools(tables[1], self.where, self.sink, shared, self.bits)
        )
        return queries, clicks


def _aggregate(
    out: Any, bp: BoundingPlan, spec: Any, *, small: bool = False, bits: int = NOISE_BITS
) -> KernelResult:
    """The tasks' output cached on the executors; to the driver only the segments' rows and
    the users seen in more than one run (one aggregation), joined there
    (:func:`~searchveil.engines.spark_ordered.join_segments`). The counts and pools stay.
    ``small`` (an input of at most :data:`LOCAL_ROWS` rows): one job — the tasks' output summed
    and brought to the driver whole, joined there
    (:func:`~searchveil.engines.spark_ordered.join_partitions`) — and the release runs here."""
    if small:
        res = pl.DataFrame(pl.from_arrow(out.toArrow()))
        counts, figures, rows = join_partitions(res, bp, spec, pl.String)
        return KernelResult(None, {}, figures, rows, res.height, local=counts)
    out = out.persist(CACHE)
    try:
        seg = out.filter(F.col("kind").isin("s", "h", "k", "f", "t"))
        # the run users' blobs moved by shard: each user's runs counted in one task
        users = out.filter(F.col("kind") == "U").select(F.col("n2").alias("bucket"), "blob")
        runs = users.repartition("bucket").mapInArrow(_repeats, "user string, n long")
        runs = runs.withColumn("kind", F.lit("u"))
        both = seg.drop("blob").unionByName(runs, allowMissingColumns=True)
        small_rows = pl.DataFrame(pl.from_arrow(both.toArrow()))
        tally, bfig = join_segments(small_rows, bp, spec)
    except BaseException:
        unpersist(out)
        raise
    delta, figures = tally.result(bfig, pl.String)
    across = small_rows.filter(pl.col("kind") == "u").get_column("user").cast(pl.String)
    tails = small_rows.filter(pl.col("kind") == "t")
    return KernelResult(
        out,
        delta,
        figures,
        bfig["rows"],
        small_rows.height,
        across.to_list(),
        tails=tails,
        bits=bits,
        tasks=small_rows.filter(pl.col("kind") == "s").get_column("part").n_unique(),
    )


def pieces_plan(
    spark: Any, path: str, bp: BoundingPlan, *, normalize: bool, small: bool = False
) -> KernelResult:
    """The ordered pass of a Parquet file whose path the executors can open (a local or shared
    file system): one Spark task per piece of row groups (:func:`~searchveil.engines.
    spark_ordered.parquet_pieces`), each reading its rows on the executor (Polars' reader:
    :func:`~searchveil.engines.spark_ordered.piece_frames`) and running the kernel; then
    :func:`_aggregate`. Spark's own reader would first turn every row
    into JVM rows and back into Arrow for Python — the cost this plan skips."""
    pieces = parquet_pieces(path)
    schema = pq.read_schema(path)
    integral = pa.types.is_integer(schema.field("AnonID").type)
    spec = bp.kernel_spec(normalize=normalize)
    how = PartitionInput(bp, spec, integral, bp.with_url, True, shard_bits(spark))
    tasks = spark.range(0, len(pieces), 1, numPartitions=len(pieces)).select(
        F.col("id").cast("int").alias("piece")
    )
    out = tasks.mapInArrow(partial(_per_piece, how, path, pieces), OUTPUT_DDL)
    return _aggregate(out, bp, spec, small=small, bits=how.bits)


def kernel_plan(
    df: Any, bp: BoundingPlan, *, normalize: bool, parquet: bool, shuffle: bool = False,
    small: bool = False,
) -> KernelResult:  # fmt: skip
    """The bounding kernel on every partition of ``df`` (AOL columns, in input order) with
    ``mapInArrow`` (:func:`~searchveil.engines.spark_ordered.partition_rows`), one aggregation
    of the partitions' small output, and the driver's join
    (:func:`~searchveil.engines.spark_ordered.join_partitions`, which raises
    :class:`~searchveil.bounding.NotContiguous` when users are not contiguous). ``shuffle``:
    first move each user's rows to one partition, in input order (one shuffle of the rows; any
    input). The rows reach Python as Spark reads them — no normalisation, trimming or parsing
    in Spark: every engine reads them with the same code
    (:func:`~searchveil.engines.sources.canonical_rows`)."""
    with_url = bp.with_url
    integral = isinstance(df.schema["AnonID"].dataType, IntegralType)
    user = F.col("AnonID") if integral else F.col("AnonID").cast("string")
    cols = [user.alias("AnonID"), F.col("Query").cast("string").alias("Query"),
            F.col("QueryTime").cast("string").alias("QueryTime")]  # fmt: skip
    if with_url:
        cols.append(F.col("ClickURL").cast("string").alias("ClickURL"))
    table = df.select(*cols)
    if shuffle:
        # the key the kernel compares: integer ids as they are, text ids without blanks; each
        # user's rows in input order — a table's by file path and row, a file's by position
        key = F.col("AnonID") if integral else F.regexp_replace("AnonID", _EDGE_BLANKS, "")
        files = "_sv_file" in df.columns
        order = [F.col("_sv_file"), F.col("_sv_row")] if files else [
            F.monotonically_increasing_id()]  # fmt: skip
        names = [f"_o{i}" for i in range(len(order))]
        table = (
            df.select(*cols, *[o.alias(n) for o, n in zip(order, names, strict=True)])
            .withColumn("_key", key)
            .repartition("_key")
            .sortWithinPartitions("_key", *names)
            .drop(*names, "_key")
        )
    spec = bp.kernel_spec(normalize=normalize)
    how = PartitionInput(bp, spec, integral, with_url, parquet, shard_bits(df.sparkSession))
    out = table.mapInArrow(partial(_per_partition, how), OUTPUT_DDL)
    return _aggregate(out, bp, spec, small=small, bits=how.bits)
