"""Noise and thresholds where Spark holds the counts: a
:class:`~searchveil.mechanisms.noisy_counts.NoisePlan` run in Spark tasks, only the rows that
pass (and a few summary rows per task) returned to the driver.

A :class:`SparkCounts` is a lazy Spark table of partial counts in Arrow blobs
(:mod:`~searchveil.engines.spark_blobs`: rows ``bucket, blob``) — each bounding task's counts
of what it kept, one blob per shard of the key (``C`` rows of the kernel's output,
:mod:`searchveil.engines.spark_ordered`), plus the few rows the driver's join added (the users
that straddle two tasks) — summed by key only where a stage runs (:func:`blob_stage`): the
blobs moved by shard (one shuffle of a few large values; every partial row of a key in one
task, and, seeded, every key of a noise bucket), then in every task (:func:`blob_partition`)
the partial rows summed by key in Polars and

* a secure release: noise from the task's own :class:`~searchveil.rng.SecureRandom`
  (``os.urandom`` on the executor: no key leaves anywhere), the rows that pass returned;
* a seeded release (``--seed``, not for release): the task's buckets in the canonical order,
  given the bucket's seeded streams — the same noise as memory and Polars draw, whatever
  Spark's partitioning.

``within`` (a released set, travelling with the tasks) and a ``domain`` (public or released
keys the driver already holds: at most one count per key returns and the plan runs on the
driver) are filters in the tasks. The driver never holds the table (:meth:`SparkCounts.collect`
is for tests and small tables).

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
from searchveil.engines.spark_blobs import (
    NOISE_BITS,
    noise_bucket_column,
    pack,
    rows_to_blobs,
    shard_bits,
    unpack_all,
)
from searchveil.engines.spark_errors import spark_errors
from searchveil.mechanisms.noisy_counts import (
    CountSummary,
    NoisePlan,
    NoisyCounts,
    apply_plan_local,
    noise_key,
    seeded_steps,
    task_rng,
)
from searchveil.rng import RandomSource

__all__ = [
    "CACHE",
    "POOL_FIGURES",
    "BlobStage",
    "SparkCounts",
    "StageResult",
    "arrow_out",
    "blob_partition",
    "blob_stage",
    "checkpoint",
    "pool_figures",
    "read_stage",
    "to_polars",
    "unpersist",
]

#: how the cluster keeps what a release reads twice (the bounding tasks' output, the pools, a
#: bias round): on the executors' disks. A memory level would read a spilled block back whole
#: into the JVM heap (``maybeCacheDiskBytesInMemory``: a task's output of a 1M-row piece is
#: hundreds of MB) — with a 1g local driver, whose JVM runs the tasks, that was an
#: OutOfMemoryError at 20M rows; from disk a block is streamed
CACHE = StorageLevel.DISK_ONLY


def to_polars(df: Any, where: str) -> pl.DataFrame:
    """An action: the Spark frame's rows in this process (Arrow), failures named
    (:func:`~searchveil.engines.spark_errors.spark_errors`)."""
    with spark_errors(where):
        arrow = df.toArrow()
    return pl.DataFrame(pl.from_arrow(arrow))


def unpersist(df: Any) -> None:
    """Free what ``df`` keeps on the cluster; nothing to free when the JVM is gone (a failed
    job's cleanup must not hide the job's own error behind a refused connection)."""
    try:
        df.unpersist()
    except Exception:  # noqa: BLE001, S110 - Py4J/Connect errors of a stopped JVM
        pass


def checkpoint(df: Any, where: str) -> Any:
    """``df`` computed once and kept on the executors (``localCheckpoint``): read by several
    actions, its noise is never drawn again (a lost block fails the job instead)."""
    with spark_errors(where):
        return df.localCheckpoint(eager=True, storageLevel=CACHE)


def _schema(keys: list[str], published: list[str], blob: bool = False) -> str:
    cols = [f"`{k}` string" for k in keys] + ["`count` long"]
    cols += [f"`{c}` long" for c in published] + ["_kind string", "_s string", "_n long"]
    return ", ".join(cols + (["_b binary"] if blob else []))


def arrow_out(df: pl.DataFrame, schema: pa.Schema) -> pa.RecordBatch:
    """``df`` as one Arrow batch of ``schema`` (Spark wants ``string``, Polars gives
    ``large_string``)."""
    if df.height == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
    return df.to_arrow().cast(schema).combine_chunks().to_batches()[0]


def _out_batch(
    kept: pl.DataFrame, keys: list[str], published: list[str], blob: bool = False
) -> pa.RecordBatch:
    df = kept.select(
        *[pl.col(k).cast(pl.String) for k in keys], pl.col("count").cast(pl.Int64),
        *[pl.col(c).cast(pl.Int64) for c in published],
        _kind=pl.lit("r"), _s=pl.lit(None, pl.String), _n=pl.lit(None, pl.Int64),
    )  # fmt: skip
    return arrow_out(_blob_column(df, blob), _arrow_schema(keys, published, blob))


def _blob_column(df: pl.DataFrame, blob: bool) -> pl.DataFrame:
    return df.with_columns(_b=pl.lit(None, pl.Binary)) if blob else df


def _arrow_schema(keys: list[str], published: list[str], blob: bool = False) -> pa.Schema:
    fields = [pa.field(k, pa.string()) for k in keys] + [pa.field("count", pa.int64())]
    fields += [pa.field(c, pa.int64()) for c in published]
    fields += [pa.field("_kind", pa.string()), pa.field("_s", pa.string()),
               pa.field("_n", pa.int64())]  # fmt: skip
    return pa.schema(fields + ([pa.field("_b", pa.binary())] if blob else []))


def _keys_blob(rows: pl.DataFrame, keys: list[str], published: list[str]) -> pa.RecordBatch:
    """``rows``' keys packed as one blob (zstd): a row of ``_kind`` "e", column ``_b``."""
    blob = pack(rows.select(*[pl.col(k).cast(pl.String) for k in keys]), compress=True)
    schema = _arrow_schema(keys, published, blob=True)
    given = {"_b": pa.array([blob], pa.binary()), "_kind": pa.array(["e"], pa.string())}
    return pa.record_batch([given.get(f.name, pa.nulls(1, f.type)) for f in schema], schema=schema)


def _summary_batch(
    s: CountSummary,
    rows_in: int,
    keys: list[str],
    published: list[str],
    extra: dict[str, int] | None = None,
    blob: bool = False,
) -> Any:
    figs = {"items": s.items, "total": s.total, "at_least_min": s.at_least_min,
            "rows_in": rows_in} | {f"small:{c}": n for c, n in s.small.items()}  # fmt: skip
    figs |= {f"{EXTRA}{k}": v for k, v in (extra or {}).items()}
    df = pl.DataFrame({"_s": list(figs), "_n": list(figs.values())},
                      schema={"_s": pl.String, "_n": pl.Int64})  # fmt: skip
    df = df.select(*[pl.lit(None, pl.String).alias(k) for k in keys],
                   count=pl.lit(None, pl.Int64),
                   **{c: pl.lit(None, pl.Int64) for c in published},
                   _kind=pl.lit("s"), _s="_s", _n="_n")  # fmt: skip
    return arrow_out(_blob_column(df, blob), _arrow_schema(keys, published, blob))


@dataclass
class StageResult:
    """What a noise stage returns: its kept rows (keys, ``count``, the published columns)
    and the summary of its input table; ``rows_in``: the partial rows summed into it."""

    rows: pl.DataFrame
    summary: CountSummary
    rows_in: int = 0
    received: int = 0  # every row the driver received (kept rows and summary rows)
    #: more figures the stage's tasks summed (:attr:`BlobStage.figures`)
    extra: dict[str, int] = field(default_factory=dict)


def read_stage(out: pl.DataFrame, keys: list[str], published: list[str]) -> StageResult:
    """A stage's collected rows as kept rows and the summed summary."""
    rows = out.filter(pl.col("_kind") == "r").select(*keys, "count", *published)
    figs: dict[str, int] = {}
    for name, n in out.filter(pl.col("_kind") == "s").select("_s", "_n").iter_rows():
        figs[name] = figs.get(name, 0) + int(n)
    small = {int(k.split(":", 1)[1]): v for k, v in figs.items() if k.startswith("small:")}
    s = CountSummary(figs.get("items", 0), figs.get("total", 0), figs.get("at_least_min", 0),
                     small)  # fmt: skip
    extra = {k.removeprefix(EXTRA): v for k, v in figs.items() if k.startswith(EXTRA)}
    return StageResult(rows, s, figs.get("rows_in", 0), out.height, extra)


@dataclass(frozen=True)
class BlobStage:
    """What a task of a blob noise stage (:func:`blob_partition`) does with the partial rows
    of its shards (``keys``, ``count``, the ``carry`` columns; ``_rows``: how many rows each
    partial row sums, when not one): keep only ``within``'s values of one key column, or only
    ``domain``'s keys (then return the sums, no plan); else run ``plan`` — with the task's own
    secure source (``key`` None) or the bucket streams of ``first_step`` on. ``figures``
    (a pool round's d): the partial rows also carry a pool's per-item holders (``h``), rows
    of rank below d (``f``) and lowest rank (``r0``) — items outside the round have
    ``_rows`` 0 — and the task sums the pool's figures (:data:`POOL_FIGURES`) before the
    plan runs on the round's items. ``bias`` (a bias round: its published column, threshold and
    cutoff): of the rows that pass the plan only those at or above the threshold leave; the
    keys of those at or above the cutoff (never published) are packed into one blob row
    (``_kind`` "e", column ``_b``) that stays where the stage's output is kept."""

    keys: list[str]
    plan: NoisePlan | None = None
    key: int | None = None
    first_step: int = 0
    carry: tuple[str, ...] = ()
    within: tuple[str, list[str]] | None = None
    domain: pl.DataFrame | None = None
    figures: int | None = None
    #: the blobs' shard bits (:func:`~searchveil.engines.spark_blobs.shard_bits`)
    bits: int = NOISE_BITS
    bias: tuple[str, int, int] | None = None

    def schema(self) -> str:
        if self.plan is None:
            return ", ".join(f"`{k}` string" for k in self.keys) + ", `count` long"
        return _schema(self.keys, [*self.plan.published, *self.carry], self.bias is not None)


def blob_partition(st: BlobStage, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` on blobs of partial rows moved by shard (every partial row of a key in
    this task; seeded, every key of a noise bucket): the rows summed by key, then the stage
    (:class:`BlobStage`) run; the rows that pass leave, then the task's summary."""
    keys, carry = st.keys, list(st.carry)
    frames = list(unpack_all(batches))
    more = ["_rows", "h", "f", "r0"] if st.figures is not None else []
    raw = (
        pl.concat(frames, how="vertical_relaxed")
        if frames
        else pl.DataFrame(
            schema={k: pl.String for k in keys}
            | {"count": pl.Int64}
            | dict.fromkeys([*carry, *more], pl.Int64)
        )
    )
    if st.within is not None:
        col, values = st.within
        raw = raw.filter(pl.col(col).is_in(pl.Series(values, dtype=pl.String).implode()))
    if st.domain is not None:
        raw = raw.join(st.domain, on=keys, how="semi")
    rows_in = int(raw.get_column("_rows").sum() or 0) if "_rows" in raw.columns else raw.height
    summed = ["count", *carry] + (["_rows", "h", "f"] if st.figures is not None else [])
    extra = None
    df = sum_by_key(raw, keys, summed, ["r0"] if st.figures is not None else [])
    if st.figures is not None:
        extra = pool_figures(df, st.figures)
        df = df.filter(pl.col("_rows") > 0).drop("_rows", "h", "f", "r0")
    plan = st.plan
    if plan is None:
        if df.height:
            out = df.select(*[pl.col(k).cast(pl.String) for k in keys], "count")
            yield arrow_out(
                out,
                pa.schema(
                    [*[pa.field(k, pa.string()) for k in keys], pa.field("count", pa.int64())]
                ),
            )
        return
    published = [*plan.published, *carry]
    summary = CountSummary.of(df, plan)
    if st.key is None:  # the task's own secure source, drawn in chunks as on one machine
        kept = apply_plan_local(df, keys, plan, task_rng())
    else:
        kept = seeded_steps(df, keys, plan, st.key, st.first_step)
    blob = st.bias is not None
    if st.bias is not None:
        col, threshold, cutoff = st.bias
        eligible = kept.filter(pl.col(col) >= cutoff)
        kept = kept.filter(pl.col(col) >= threshold)
        if eligible.height:
            yield _keys_blob(eligible, keys, published)
    if kept.height:
        yield _out_batch(kept, keys, published, blob)
    yield _summary_batch(summary, rows_in, keys, published, extra, blob)


def sum_by_key(
    raw: pl.DataFrame, keys: list[str], sums: list[str], mins: list[str]
) -> pl.DataFrame:
    """Partial rows summed by key (``sums``; ``mins`` their least value): a group-by of the
    keys' text — or, for rows that carry their key's word (``_w``, the
    :func:`~searchveil.mechanisms.noisy_counts.key_hash` a round stored), only of the rows
    whose word repeats: a noise stage's rows are nearly all of distinct keys, and a row whose
    word no other row has is its key's only row (a key has one word), kept as it is. The keys
    two tasks summed, and keys that share a word, are grouped by their text. (Hashing the text
    here instead of grouping it saved CPU but not wall time.)"""
    cols = [*keys, *sums, *mins]
    aggs = [pl.col(c).sum().cast(pl.Int64) for c in sums] + [pl.col(c).min() for c in mins]
    if raw.height == 0 or "_w" not in raw.columns:
        return raw.group_by(keys).agg(aggs)
    again = raw.get_column("_w").is_duplicated()
    alone = raw.filter(~again).select(
        *keys, *[pl.col(c).cast(pl.Int64) for c in sums], *[pl.col(c) for c in mins]
    )
    if not again.any():
        return alone
    grouped = raw.filter(again).group_by(keys).agg(aggs)
    return pl.concat([alone, grouped.select(cols)], how="vertical_relaxed")


#: a pool's figures (:class:`~searchveil.mechanisms.pool_rounds.PoolFigures`' fields)
POOL_FIGURES = ["rows", "rows_first_d", "items", "single_items", "single_first_d"]
EXTRA = "extra:"


def pool_figures(per_item: pl.DataFrame, d: int) -> dict[str, int]:
    """A pool's figures from its per-item sums (``h`` holders, ``f`` rows of rank below
    ``d``, ``r0`` lowest rank), of the items whose every row was summed here."""
    one = per_item.filter(pl.col("h") == 1)
    return {
        "rows": int(per_item.get_column("h").sum() or 0),
        "rows_first_d": int(per_item.get_column("f").sum() or 0),
        "items": per_item.height,
        "single_items": one.height,
        "single_first_d": one.filter(pl.col("r0") < d).height,
    }


def blob_stage(blobs: Any, st: BlobStage) -> Any:
    """The lazy Spark frame of a stage on ``blobs`` (rows ``bucket, blob``: ``bucket`` the
    shard, :attr:`BlobStage.bits`): moved by shard — seeded, by noise bucket, each bucket's
    streams drawn whole in one task —, then :func:`blob_partition` in every task."""
    by = noise_bucket_column(F.col("bucket"), st.bits) if st.key is not None else F.col("bucket")
    return blobs.repartition(by).mapInArrow(partial(blob_partition, st), st.schema())


@dataclass
class SparkCounts(CountTable):
    """A count table on the cluster: ``blobs`` (a Spark frame of blob rows ``bucket, blob``,
    :mod:`~searchveil.engines.spark_blobs`: each blob partial counts — key columns ``keys``
    and ``count`` — of one shard; several partial rows per key) summed by key only where a
    release runs: the blobs moved by shard (one shuffle of a few large values),
    summed, given noise and thresholded in the tasks. ``where``: the input, for error
    messages."""

    blobs: Any
    keys: list[str]
    where: str = "the input"
    #: the rows the driver received, added up by the engine (``release``)
    sink: dict[str, int] = field(default_factory=dict)
    #: the blobs' shard bits (:func:`~searchveil.engines.spark_blobs.shard_bits`)
    bits: int = NOISE_BITS

    @classmethod
    def from_rows(cls, df: Any, keys: list[str], where: str = "the input") -> SparkCounts:
        """A table of partial counts that arrives as Spark rows (keys + ``count``)."""
        bits = shard_bits(df.sparkSession)
        return cls(rows_to_blobs(df.select(*keys, "count"), keys, bits), keys, where, bits=bits)

    def _got(self, n: int) -> None:
        self.sink["release"] = self.sink.get("release", 0) + n

    def _stage(
        self,
        plan: NoisePlan | None,
        key: int | None,
        within: tuple[str, pl.Series] | None = None,
        domain: pl.DataFrame | None = None,
    ) -> pl.DataFrame:
        w = None if within is None else (within[0], within[1].cast(pl.String).to_list())
        st = BlobStage(self.keys, plan, key, within=w, domain=domain, bits=self.bits)
        return to_polars(blob_stage(self.blobs, st), self.where)

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
            got = self._stage(None, None, within, dom)
            got = got.group_by(self.keys).agg(pl.col("count").sum())
            local = LocalCounts(domain_counts(dom, got, self.keys), self.keys)
            out = local.release(plan, rng)
            out.received = got.height
            self._got(got.height)
            return out
        key = noise_key(rng)
        got = self._stage(plan, key, within)
        res = read_stage(got, self.keys, list(plan.published))
        self._got(res.received)
        return NoisyCounts(rows=res.rows, summary=res.summary, received=res.received)

    def collect(self) -> pl.DataFrame:
        got = self._stage(None, None)
        return got.group_by(self.keys).agg(pl.col("count").sum())
