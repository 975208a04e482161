"""Noise and thresholds where Spark holds the counts: a
:class:`~searchveil.mechanisms.noisy_counts.NoisePlan` run in Spark tasks, only the rows that
pass (and a few summary rows per task) returned to the driver.

A :class:`SparkCounts` is a lazy Spark table of partial counts — each bounding task's counts of
what it kept (``c`` rows of the kernel's output, :mod:`searchveil.engines.spark_ordered`) plus
the few rows the driver's join added (the users that straddle two tasks) — summed by key only
where the plan runs:

* a secure release: ``groupBy(keys).sum`` (one shuffle of the partial counts), then every task
  adds noise to its partition's counts with its own :class:`~searchveil.rng.SecureRandom`
  (``os.urandom`` on the executor: no key leaves anywhere) and returns the rows that pass;
* a seeded release (``--seed``, not for release): each row's noise bucket
  (:func:`~searchveil.mechanisms.noisy_counts.key_hash`, computed in the tasks by the same
  Python code as on one machine), one shuffle by bucket, and per bucket the counts summed, put
  in the canonical order and given the bucket's seeded streams — the same noise as memory and
  Polars draw, whatever Spark's partitioning.

``within`` (a released set) is a broadcast semi-join in the cluster; a ``domain`` (public or
released keys the driver already holds) brings back at most one count per key and runs the
plan on the driver. The driver never holds the table (:meth:`SparkCounts.collect` is for tests
and small tables).

The result of a noise stage is consumed by exactly one action (``toArrow``), so no row's noise
is ever drawn twice; a stage whose output two actions read is checkpointed first
(:func:`checkpoint`: a lost block fails the job rather than draw fresh noise).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import polars as pl
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import functions as F

from searchveil.engines.contract import CountTable, LocalCounts, domain_counts
from searchveil.engines.spark_blobs import rows_to_blobs, unpack_all
from searchveil.engines.spark_errors import spark_errors
from searchveil.mechanisms.noisy_counts import (
    CountSummary,
    NoisePlan,
    NoisyCounts,
    apply_steps,
    noise_buckets,
    noise_key,
    seeded_steps,
    task_rng,
)
from searchveil.rng import RandomSource

__all__ = ["CACHE", "SparkCounts", "StageResult", "arrow_out", "checkpoint", "noisy_stage",
           "read_stage", "stage_frame", "to_polars", "whole_runs"]  # fmt: skip

#: the stage's bookkeeping columns: ``_kind`` (r: a kept row, s: a summary figure), ``_s`` (the
#: figure's name), ``_n`` (its value)
_META = ["_kind", "_s", "_n"]
#: how the cluster keeps what a release reads twice (the bounding tasks' output, the pools, a
#: bias round): on the executors' disks. A memory level would read a spilled block back whole
#: into the JVM heap (``maybeCacheDiskBytesInMemory``: a task's output of a 1M-row piece is
#: hundreds of MB) — with a 1g local driver, whose JVM runs the tasks, that was an
#: OutOfMemoryError at 20M rows; from disk a block is streamed
CACHE = StorageLevel.DISK_ONLY
_BUCKET = "_b"


def to_polars(df: Any, where: str) -> pl.DataFrame:
    """An action: the Spark frame's rows in this process (Arrow), failures named
    (:func:`~searchveil.engines.spark_errors.spark_errors`)."""
    with spark_errors(where):
        arrow = df.toArrow()
    return pl.DataFrame(pl.from_arrow(arrow))


def checkpoint(df: Any, where: str) -> Any:
    """``df`` computed once and kept on the executors (``localCheckpoint``): read by several
    actions, its noise is never drawn again (a lost block fails the job instead)."""
    with spark_errors(where):
        return df.localCheckpoint(eager=True, storageLevel=CACHE)


def _schema(keys: list[str], published: list[str]) -> str:
    cols = [f"`{k}` string" for k in keys] + ["`count` long"]
    cols += [f"`{c}` long" for c in published] + ["_kind string", "_s string", "_n long"]
    return ", ".join(cols)


def arrow_out(df: pl.DataFrame, schema: pa.Schema) -> pa.RecordBatch:
    """``df`` as one Arrow batch of ``schema`` (Spark wants ``string``, Polars gives
    ``large_string``)."""
    if df.height == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
    return df.to_arrow().cast(schema).combine_chunks().to_batches()[0]


def _out_batch(kept: pl.DataFrame, keys: list[str], published: list[str]) -> pa.RecordBatch:
    df = kept.select(
        *[pl.col(k).cast(pl.String) for k in keys], pl.col("count").cast(pl.Int64),
        *[pl.col(c).cast(pl.Int64) for c in published],
        _kind=pl.lit("r"), _s=pl.lit(None, pl.String), _n=pl.lit(None, pl.Int64),
    )  # fmt: skip
    return arrow_out(df, _arrow_schema(keys, published))


def _arrow_schema(keys: list[str], published: list[str]) -> pa.Schema:
    fields = [pa.field(k, pa.string()) for k in keys] + [pa.field("count", pa.int64())]
    fields += [pa.field(c, pa.int64()) for c in published]
    fields += [pa.field("_kind", pa.string()), pa.field("_s", pa.string()),
               pa.field("_n", pa.int64())]  # fmt: skip
    return pa.schema(fields)


def _summary_batch(s: CountSummary, rows_in: int, keys: list[str], published: list[str]) -> Any:
    figs = {"items": s.items, "total": s.total, "at_least_min": s.at_least_min,
            "rows_in": rows_in} | {f"small:{c}": n for c, n in s.small.items()}  # fmt: skip
    df = pl.DataFrame({"_s": list(figs), "_n": list(figs.values())},
                      schema={"_s": pl.String, "_n": pl.Int64})  # fmt: skip
    df = df.select(*[pl.lit(None, pl.String).alias(k) for k in keys],
                   count=pl.lit(None, pl.Int64),
                   **{c: pl.lit(None, pl.Int64) for c in published},
                   _kind=pl.lit("s"), _s="_s", _n="_n")  # fmt: skip
    return arrow_out(df, _arrow_schema(keys, published))


def _secure_partition(
    keys: list[str], plan: NoisePlan, carry: list[str], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` on summed counts: every batch's rows get noise from this task's own
    secure source; the rows that pass leave (with the ``carry`` sums), then the partition's
    summary."""
    out = [*plan.published, *carry]
    rng = task_rng()
    total, rows_in = CountSummary(), 0
    for b in batches:
        if b.num_rows == 0:
            continue
        df = pl.DataFrame(pl.from_arrow(pa.Table.from_batches([b])))
        rows_in += int(df.get_column("_rows").sum() or 0)
        df = df.drop("_rows")
        total.add(CountSummary.of(df, plan))
        kept = apply_steps(df, plan, lambda i, rows: plan.steps[i].noise.sample(rows.height, rng))
        if kept.height:
            yield _out_batch(kept, keys, out)
    yield _summary_batch(total, rows_in, keys, out)


def whole_runs(batches: Iterator[pa.RecordBatch], column: str) -> Iterator[pl.DataFrame]:
    """A partition's batches, sorted or grouped by ``column``, as frames that each hold whole
    runs of equal ``column`` values: the rows of a batch's last value wait for the next."""
    carry: pl.DataFrame | None = None
    for b in batches:
        if b.num_rows == 0:
            continue
        df = pl.DataFrame(pl.from_arrow(pa.Table.from_batches([b])))
        if carry is not None:
            df = pl.concat([carry, df], how="vertical_relaxed")
        runs = df.get_column(column).rle_id()
        cut = int((runs == runs.max()).arg_max() or 0)
        carry = df.slice(cut)
        if cut:
            yield df.slice(0, cut)
    if carry is not None and carry.height:
        yield carry


def _seeded_partition(
    keys: list[str], plan: NoisePlan, carry: list[str], key: int, first_step: int,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """``mapInArrow`` on partial counts with their noise bucket, each bucket in one partition
    and the partition sorted by bucket: bucket after bucket, its counts summed by key and the
    plan run with the bucket's seeded streams (the canonical order of its keys) — the draws
    of one machine's release, bucket for bucket."""
    out = [*plan.published, *carry]
    total, rows_in = CountSummary(), 0
    for raw in whole_runs(batches, _BUCKET):
        rows_in += raw.height
        df = raw.group_by(keys).agg(pl.col(c).sum().cast(pl.Int64) for c in ["count", *carry])
        total.add(CountSummary.of(df, plan))
        kept = seeded_steps(df, keys, plan, key, first_step)
        if kept.height:
            yield _out_batch(kept, keys, out)
    yield _summary_batch(total, rows_in, keys, out)


def _with_bucket(keys: list[str], batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: each row's noise bucket (the top bits of its keys' 64-bit word)."""
    for b in batches:
        df = pl.DataFrame(pl.from_arrow(pa.Table.from_batches([b])))
        yield b.append_column(_BUCKET, pa.array(noise_buckets(df, keys)))


@dataclass
class StageResult:
    """What a noise stage returns: its kept rows (keys, ``count``, the published columns)
    and the summary of its input table; ``rows_in``: the partial rows summed into it."""

    rows: pl.DataFrame
    summary: CountSummary
    rows_in: int = 0
    received: int = 0  # every row the driver received (kept rows and summary rows)


def stage_frame(partial_counts: Any, keys: list[str], plan: NoisePlan, key: int | None,
                first_step: int = 0, carry: tuple[str, ...] = (),
                per_task: bool = False) -> Any:  # fmt: skip
    """The lazy Spark frame of a noise stage on ``partial_counts`` (keys, ``count`` and the
    ``carry`` columns: partial sums, summed here; the plan acts on ``count``): kept rows
    (``_kind`` r, with the published and carried columns) and summary rows (``_kind`` s).
    ``per_task``: each task's rows are already one per key (the bounding tasks' counts)."""
    c = list(carry)
    schema = _schema(keys, [*plan.published, *c])
    if key is None:
        # rows already summed in their tasks are moved by key first: the sum is then one
        # aggregation after the shuffle (Spark combines the partial and final steps), not a
        # partial one before it that finds nothing to add up
        moved = partial_counts.repartition(*keys) if per_task else partial_counts
        summed = moved.groupBy(*keys).agg(
            F.sum("count").alias("count"), *[F.sum(x).alias(x) for x in c],
            F.count(F.lit(1)).alias("_rows"),
        )  # fmt: skip
        return summed.mapInArrow(partial(_secure_partition, keys, plan, c), schema)
    cols = ", ".join(f"`{k}` string" for k in keys)
    more = "".join(f", `{x}` long" for x in c)
    with_b = partial_counts.select(*keys, "count", *c).mapInArrow(
        partial(_with_bucket, keys), f"{cols}, `count` long{more}, {_BUCKET} long"
    )
    by_bucket = with_b.repartition(_BUCKET).sortWithinPartitions(_BUCKET)
    fn = partial(_seeded_partition, keys, plan, c, key, first_step)
    return by_bucket.mapInArrow(fn, schema)


def read_stage(out: pl.DataFrame, keys: list[str], published: list[str]) -> StageResult:
    """A stage's collected rows as kept rows and the summed summary."""
    rows = out.filter(pl.col("_kind") == "r").select(*keys, "count", *published)
    figs: dict[str, int] = {}
    for name, n in out.filter(pl.col("_kind") == "s").select("_s", "_n").iter_rows():
        figs[name] = figs.get(name, 0) + int(n)
    small = {int(k.split(":", 1)[1]): v for k, v in figs.items() if k.startswith("small:")}
    s = CountSummary(figs.get("items", 0), figs.get("total", 0), figs.get("at_least_min", 0),
                     small)  # fmt: skip
    return StageResult(rows, s, figs.get("rows_in", 0), out.height)


def noisy_stage(partial_counts: Any, keys: list[str], plan: NoisePlan, key: int | None,
                where: str, first_step: int = 0,
                per_task: bool = False) -> StageResult:  # fmt: skip
    """:func:`stage_frame` run once (one action) and read on the driver."""
    frame = stage_frame(partial_counts, keys, plan, key, first_step, per_task=per_task)
    return read_stage(to_polars(frame, where), keys, plan.published)


def _blob_partition(
    keys: list[str], plan: NoisePlan | None, key: int | None,
    within: tuple[str, list[str]] | None, domain: pl.DataFrame | None,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """``mapInArrow`` on a count table's blobs moved by bucket (every partial row of a key in
    this task): the partial counts summed by key, then — ``domain`` — the sums of the domain's
    keys (keys, ``count``), or the plan run: with this task's own secure source (``key``
    None) or the bucket streams (the canonical order of this task's buckets, each whole here);
    the rows that pass leave, then the task's summary."""
    frames = list(unpack_all(batches))
    raw = (pl.concat(frames, how="vertical_relaxed") if frames else
           pl.DataFrame(schema={k: pl.String for k in keys} | {"count": pl.Int64}))  # fmt: skip
    if within is not None:
        raw = raw.filter(pl.col(within[0]).is_in(pl.Series(within[1], dtype=pl.String).implode()))
    if domain is not None:
        raw = raw.join(domain, on=keys, how="semi")
    df = raw.group_by(keys).agg(pl.col("count").sum().cast(pl.Int64))
    if plan is None:
        if df.height:
            yield arrow_out(df.select(*[pl.col(k).cast(pl.String) for k in keys], "count"),
                            pa.schema([*[pa.field(k, pa.string()) for k in keys],
                                       pa.field("count", pa.int64())]))  # fmt: skip
        return
    summary = CountSummary.of(df, plan)
    if key is None:
        rng = task_rng()
        kept = apply_steps(df, plan, lambda i, rows: plan.steps[i].noise.sample(rows.height, rng))
    else:
        kept = seeded_steps(df, keys, plan, key, 0)
    if kept.height:
        yield _out_batch(kept, keys, list(plan.published))
    yield _summary_batch(summary, raw.height, keys, list(plan.published))


@dataclass
class SparkCounts(CountTable):
    """A count table on the cluster: ``blobs`` (a Spark frame of blob rows ``bucket, blob``,
    :mod:`~searchveil.engines.spark_blobs`: each blob partial counts — key columns ``keys``
    and ``count`` — of one noise bucket; several partial rows per key) summed by key only
    where a release runs: the blobs moved by bucket (one shuffle of a few large values),
    summed, given noise and thresholded in the tasks. ``where``: the input, for error
    messages."""

    blobs: Any
    keys: list[str]
    where: str = "the input"
    #: the rows the driver received, added up by the engine (``release``)
    sink: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_rows(cls, df: Any, keys: list[str], where: str = "the input") -> SparkCounts:
        """A table of partial counts that arrives as Spark rows (keys + ``count``)."""
        return cls(rows_to_blobs(df.select(*keys, "count"), keys), keys, where)

    def _got(self, n: int) -> None:
        self.sink["release"] = self.sink.get("release", 0) + n

    def _stage(self, plan: NoisePlan | None, key: int | None,
               within: tuple[str, pl.Series] | None, domain: pl.DataFrame | None,
               schema: str) -> pl.DataFrame:  # fmt: skip
        w = None if within is None else (within[0], within[1].cast(pl.String).to_list())
        fn = partial(_blob_partition, self.keys, plan, key, w, domain)
        frame = self.blobs.repartition("bucket").mapInArrow(fn, schema)
        return to_polars(frame, self.where)

    def release(
        self,
        plan: NoisePlan,
        rng: RandomSource,
        *,
        within: tuple[str, pl.Series] | None = None,
        domain: pl.DataFrame | None = None,
    ) -> NoisyCounts:
        if domain is not None:
            dom = domain.select(self.keys).unique().cast(dict.fromkeys(self.keys, pl.String))
            cols = ", ".join(f"`{k}` string" for k in self.keys)
            got = self._stage(None, None, within, dom, f"{cols}, `count` long")
            got = got.group_by(self.keys).agg(pl.col("count").sum())
            local = LocalCounts(domain_counts(dom, got, self.keys), self.keys)
            out = local.release(plan, rng)
            out.received = got.height
            self._got(got.height)
            return out
        key = noise_key(rng)
        got = self._stage(plan, key, within, None, _schema(self.keys, list(plan.published)))
        res = read_stage(got, self.keys, list(plan.published))
        self._got(res.received)
        return NoisyCounts(rows=res.rows, summary=res.summary, received=res.received)

    def collect(self) -> pl.DataFrame:
        cols = ", ".join(f"`{k}` string" for k in self.keys)
        got = self._stage(None, None, None, None, f"{cols}, `count` long")
        return got.group_by(self.keys).agg(pl.col("count").sum())
