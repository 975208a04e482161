"""The users' item pools where Spark holds them, and the selection's rounds run there
(:class:`~searchveil.mechanisms.pool_rounds.PoolTable` on a cluster).

The pools (rows ``user, item, rank``: each user's first distinct items, from the bounding
tasks and the driver's join) stay where the bounding tasks left them, as coded Arrow blobs
(:mod:`~searchveil.engines.spark_coded`: item codes, ranks and user runs with the chunk's
dictionary of items; every round reads the query pools where the bounding tasks' output is
cached, and the pairs' pools, made by a job of their own, from a cache of theirs): each
task's users whole and in rank order —
the few users two tasks share are dropped from those tasks' blobs (``own`` false) and
gathered, whole, into one more blob
(:meth:`~searchveil.engines.spark_kernel.KernelResult.pool_tables`). A round of
:class:`~searchveil.mechanisms.pool_rounds.RoundSpec` is then one Spark job of two stages,
neither of which moves a user's rows:

1. **per-user weights and per-item partial sums in the tasks**: each user's first d rows
   whose rank is below the pool and whose item is not released yet (the released set —
   already published — travels with the task), ``weights[k]`` on each of its k rows, summed
   per item code in the task (numpy) and packed, with the items' text and stored words, by
   the item's shard;
2. **the sums moved by shard, noise and threshold there**
   (:func:`~searchveil.engines.spark_release.blob_partition`): only the released items return.

A **bias round**'s noise stage is checkpointed on the executors: its released items return,
its items at or above the cutoff (never published) are packed there, a blob per task, and the
blobs, gathered into one row, are joined to the first row (``head``) of every pool task of the
next round, which takes the bias round's own rows again (the same function of the pools and
the released set then) and keeps those of the eligible items.

No user's pool is ever collected — except for a strategy that cannot run where the pools are
(:meth:`SparkPools.collect_pool`: the sequential policy Gaussian).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
from pyspark.sql import functions as F

from searchveil.engines.contract import domain_counts
from searchveil.engines.spark_blobs import (
    BLOB_DDL,
    NOISE_BITS,
    blob_frame,
    bucketed,
    cores,
    unpack,
)
from searchveil.engines.spark_coded import CodedPool, encode, figures, sums, take
from searchveil.engines.spark_release import (
    CACHE,
    POOL_FIGURES,
    BlobStage,
    arrow_out,
    blob_stage,
    checkpoint,
    pool_figures,
    read_stage,
    sum_by_key,
    to_polars,
    unpersist,
)
from searchveil.mechanisms.noisy_counts import NoisePlan, NoisyStep
from searchveil.mechanisms.pool_rounds import PairSource, PoolFigures, PoolTable, RoundSpec
from searchveil.mechanisms.rounds import ItemPool
from searchveil.model import PAIR_SEP
from searchveil.rng import RandomSource

__all__ = ["POOL_DDL", "SparkClickPools", "SparkPools"]

#: a pool frame's rows: a blob of pool rows, and whether its users are all whole (``own``:
#: the driver's blob of the users two tasks share, or a pool derived from whole ones)
POOL_DDL = "blob binary, own boolean"
_POOL_ARROW = pa.schema([("blob", pa.binary()), ("own", pa.bool_())])
_ELIGIBLE = "eligible"
_HEAD = "head"


def _task_pool(batches: Iterator[pa.RecordBatch], shared: list[str]) -> pl.DataFrame | None:
    """A task's pool rows (its blobs in order; the ``shared`` users dropped from blobs that
    are not ``own``), or None for a task without any."""
    parts: list[pl.DataFrame] = []
    drop = pl.Series("user", shared, dtype=pl.String).implode()
    for b in batches:
        owns = b.column("own").to_pylist()
        for blob, own in zip(b.column("blob").to_pylist(), owns, strict=True):
            df = unpack(blob)
            parts.append(df if own or not shared else df.filter(~pl.col("user").is_in(drop)))
    return pl.concat(parts, how="vertical_relaxed") if parts else None


def _coded(batches: list[pa.RecordBatch], shared: list[str]) -> CodedPool | None:
    """A task's coded pool (its blobs, in order; the ``shared`` users dropped from those not
    ``own``), or None for a task without any."""
    parts = [
        (x, own)
        for b in batches
        for x, own in zip(b.column("blob").to_pylist(), b.column("own").to_pylist(), strict=True)
        if x
    ]
    return CodedPool.read(parts, shared)


@dataclass(frozen=True)
class _Round:
    """What a round's pool tasks need: its spec's selection (``pool``, ``d``, ``weights``),
    the items released before it (``gone``), and — after a bias round — that round's."""

    pool: int | None
    d: int
    weights: tuple[int, ...]
    gone: list[str]
    bias: _Round | None = None
    #: the pool's figures for this d summed in the same pass (the first round)
    figures: int | None = None
    #: the blobs' shard bits
    bits: int = NOISE_BITS

    def rows(self, pool: CodedPool) -> npt.NDArray[np.bool_]:
        """The round's rows: each user's first ``d`` rows whose rank is below the pool and
        whose item is not released yet."""
        keep = (
            np.ones(pool.rank.size, dtype=np.bool_)
            if self.pool is None
            else (pool.rank < self.pool)
        )
        if self.gone:
            keep &= ~pool.marks(self.gone)[pool.code]
        return take(pool.run, keep, self.d)


def _round_sums(
    r: _Round, shared: list[str], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` on a task's coded pool: the round's rows of its users, weighted
    (``weights[k]`` on each row of a user with k rows), summed per item — ``count`` the
    weight, ``first`` the rows of rank below d (summed over users, a released item's count
    among the users' first d items: every such row of an unreleased item is in the round),
    ``_rows`` the rows — and packed by the item's shard; the first round (``figures``) adds
    every pool item's figures (:func:`~searchveil.engines.spark_coded.figures`)."""
    got = list(batches)
    pool = _coded(got, shared)
    if pool is None:
        return
    if r.bias is not None:  # the bias round's rows again, those of its eligible items
        # the eligible items' blobs, on the task's first row only (``head``)
        heads = [v for x in got for v in x.column(_ELIGIBLE).to_pylist() if v is not None]
        blobs = heads[0] if heads else []
        eligible = pl.concat([unpack(b).get_column("item") for b in blobs]) if blobs else None
        keep = r.bias.rows(pool) & pool.marks(eligible)[pool.code]
        if r.gone:
            keep &= ~pool.marks(r.gone)[pool.code]
        rows = take(pool.run, keep, r.d)
    else:
        rows = r.rows(pool)
    cols = sums(pool, rows, r.weights, r.d)
    if r.figures is not None:  # every item of the pool, with its holders
        cols |= figures(pool, r.figures)
    yield from _packed(pool, cols, cols["h" if r.figures is not None else "_rows"] > 0, r.bits)


def _packed(
    pool: CodedPool, cols: dict[str, npt.NDArray[np.int64]], sel: npt.NDArray[np.bool_], bits: int
) -> Iterator[pa.RecordBatch]:
    """The codes ``sel`` marks as rows (``item``, its stored word ``_w`` and ``cols``), packed
    by the shard of their words (the noise stage groups only the rows whose word repeats,
    :func:`~searchveil.engines.spark_release.sum_by_key`)."""
    idx = np.flatnonzero(sel)
    if idx.size == 0:
        return
    words = pool.h[idx]
    df = pl.DataFrame(
        [pool.items.gather(idx), pl.Series("_w", words, dtype=pl.UInt64)]
        + [pl.Series(k, v[idx], dtype=pl.Int64) for k, v in cols.items()]
    )
    shard = (words >> np.uint64(64 - bits)).astype(np.int64)
    yield from blob_frame(list(bucketed(df, ["item"], bits, shard))).to_batches()


def _first_counts(
    d: int, items: list[str], shared: list[str], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: the task's rows of rank below ``d`` per item of ``items``."""
    pool = _coded(list(batches), shared)
    if pool is None:
        return
    n = pool.count(pool.marks(items)[pool.code] & (pool.rank < d))
    idx = np.flatnonzero(n)
    got = pl.DataFrame([pool.items.gather(idx), pl.Series("count", n[idx], dtype=pl.Int64)])
    if got.height:
        got = got.group_by("item").agg(pl.col("count").sum())
        yield arrow_out(got, pa.schema([("item", pa.string()), ("count", pa.int64())]))


def _figure_sums(
    d: int, shared: list[str], bits: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow``: the task's pool figures per item, packed by the item's shard."""
    pool = _coded(list(batches), shared)
    if pool is not None:
        cols = figures(pool, d)
        yield from _packed(pool, cols, cols["h"] > 0, bits)


def _figures(d: int, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` on :func:`_figure_sums` moved by shard: the task's share of the pool
    figures (:func:`~searchveil.engines.spark_release.pool_figures`), one row."""
    frames = [unpack(x) for b in batches for x in b.column("blob").to_pylist()]
    vals = dict.fromkeys(POOL_FIGURES, 0)
    if frames:
        vals = pool_figures(sum_by_key(pl.concat(frames), ["item"], ["h", "f"], ["r0"]), d)
    yield pa.record_batch(
        [pa.array([vals[c]], pa.int64()) for c in POOL_FIGURES], names=POOL_FIGURES
    )


def _all_rows(shared: list[str], batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    pool = _coded(list(batches), shared)
    if pool is not None and pool.rank.size:
        yield arrow_out(pool.frame(), _ROWS_ARROW)


_ROWS_ARROW = pa.schema([("user", pa.string()), ("item", pa.string()), ("rank", pa.int64())])
_NO_COUNTS = pl.DataFrame(schema={"item": pl.String, "count": pl.Int64})


class SparkPools(PoolTable):
    """A pool table on the cluster: ``pools`` (a frame of :data:`POOL_DDL` rows: coded blobs
    of ``user, item, rank`` rows, :mod:`~searchveil.engines.spark_coded`; each task's users
    whole and in rank order once the ``shared`` users are dropped from its blobs that are not
    ``own``). Released sets are the released items' names (held by the driver: they are
    published)."""

    def __init__(
        self,
        pools: Any,
        where: str,
        sink: dict[str, int] | None = None,
        shared: list[str] | None = None,
        bits: int = NOISE_BITS,
        *,
        cached: bool = True,
    ) -> None:
        # every round reads them (and only them): kept on the executors, unless ``pools`` is
        # a filter of what is kept there already (the bounding tasks' output: a second copy
        # cost a job and its disk); ``head`` marks each partition's first row (what a round's
        # one-per-task values are joined to)
        head = (F.monotonically_increasing_id() % (1 << 33)) == 0
        self.pools = pools.withColumn(_HEAD, head)
        #: what this table cached (unpersisted by :meth:`finish`)
        self._held: list[Any] = []
        if cached:
            self.pools = self.pools.persist(CACHE)
            self._held.append(self.pools)
        self.bits = bits
        self.where = where
        self.sink = sink if sink is not None else {}
        self.shared = shared or []
        self._figures: dict[int, PoolFigures] = {}
        #: released items' counts among the first d rows, as the rounds returned them (by d)
        self._first: dict[int, pl.DataFrame] = {}

    def _get(self, df: Any) -> pl.DataFrame:
        """An action: ``df``'s rows on the driver, counted as received (``release``)."""
        got = to_polars(df, self.where)
        self.sink["release"] = self.sink.get("release", 0) + got.height
        return got

    def nothing(self) -> pl.Series:
        return pl.Series("item", [], dtype=pl.String)

    def round_rows(self, spec: RoundSpec, released: Any, bias: Any) -> Any:
        # the first round reads every pool row: the pool's figures for its d come with it
        fig = spec.d if released.len() == 0 and spec.d not in self._figures else None
        r = _Round(spec.pool, spec.d, spec.weights, released.to_list(), figures=fig, bits=self.bits)
        pools = self.pools
        if spec.after_bias:
            bias_round, eligible = bias
            r = _Round(None, spec.d, spec.weights, r.gone, bias_round, bits=self.bits)
            # computed once, one row of blobs, on each task's first row
            pools = pools.join(F.broadcast(eligible.withColumn(_HEAD, F.lit(True))), _HEAD, "left")
        return r, pools.mapInArrow(partial(_round_sums, r, self.shared), BLOB_DDL)

    def run_round(
        self, rows: Any, spec: RoundSpec, step: int, key: int | None, rng: RandomSource
    ) -> tuple[Any, Any, dict[str, int]]:
        r, sums = rows
        thr = spec.threshold if spec.cutoff is None else min(spec.threshold, spec.cutoff)
        inclusive = spec.inclusive or spec.cutoff is not None
        plan = NoisePlan((NoisyStep(spec.noise, threshold=thr, inclusive=inclusive,
                                    publish="_noisy"),))  # fmt: skip
        bias = None if spec.cutoff is None else ("_noisy", spec.threshold, spec.cutoff)
        st = BlobStage(
            ["item"],
            plan,
            key,
            step,
            carry=("first",),
            figures=r.figures,
            bits=self.bits,
            bias=bias,
        )
        frame = blob_stage(sums, st)
        more = None
        passed = (pl.col("_noisy") >= spec.threshold) if spec.inclusive else (
            pl.col("_noisy") > spec.threshold)  # fmt: skip
        if spec.cutoff is None:
            res = read_stage(self._get(frame), ["item"], ["_noisy", "first"])
        else:  # a bias round: read twice, so computed once and kept
            cp = checkpoint(frame, self.where)
            self._held.append(cp)
            got = self._get(cp.filter(F.col("_kind") != "e").drop("_b"))
            res = read_stage(got, ["item"], ["_noisy", "first"])
            # its eligible items, packed by the noise tasks (a blob each), as one row
            packed = cp.filter(F.col("_kind") == "e").agg(F.collect_list("_b").alias(_ELIGIBLE))
            more = (r, packed)
        if r.figures is not None:
            self._figures[r.figures] = PoolFigures(**{c: res.extra.get(c, 0) for c in POOL_FIGURES})
        kept = res.rows.filter(passed)
        self._first[spec.d] = pl.concat([self._first.get(spec.d, _NO_COUNTS),
                                         kept.select("item", count="first")])  # fmt: skip
        released = kept.get_column("item")
        return released, more, {"user_items": res.rows_in, "candidates": res.summary.items}

    def union(self, released: Any, more: Any) -> pl.Series:
        return pl.concat([released, more]).unique(maintain_order=True)

    def size(self, released: Any) -> int:
        return int(released.len())

    def names(self, released: Any) -> pl.Series:
        return released.alias("item")

    def counts(self, released: Any, d: int) -> pl.DataFrame:
        dom = pl.DataFrame({"item": released}).cast({"item": pl.String})
        known = self._first.get(d, _NO_COUNTS).unique("item")
        if dom.join(known, on="item", how="anti").height == 0:  # every count came with its item
            return domain_counts(dom, known, ["item"])
        fn = partial(_first_counts, d, dom.get_column("item").to_list(), self.shared)
        got = self._get(self.pools.mapInArrow(fn, "item string, count long"))
        got = got.group_by("item").agg(pl.col("count").sum())
        return domain_counts(dom, got.cast({"count": pl.Int64}), ["item"])

    def figures(self, d: int) -> PoolFigures:
        if d not in self._figures:
            fn = partial(_figure_sums, d, self.shared, self.bits)
            sums = self.pools.mapInArrow(fn, BLOB_DDL)
            per_task = sums.repartition("bucket").mapInArrow(
                partial(_figures, d), ", ".join(f"{c} long" for c in POOL_FIGURES)
            )
            got = self._get(per_task).sum()
            self._figures[d] = PoolFigures(
                **{c: int(got.get_column(c)[0] or 0) for c in POOL_FIGURES}
            )
        return self._figures[d]

    def collect_pool(self) -> ItemPool:
        rows = self.pools.mapInArrow(
            partial(_all_rows, self.shared), "user string, item string, rank long"
        )
        return ItemPool.from_frame(self._get(rows))

    def finish(self) -> None:
        for df in self._held:
            unpersist(df)
        self._held.clear()


def _pairs(
    released: list[str], shared: list[str], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` on a task's click-pool blobs: the clicked pairs of the released
    queries, each user's re-ranked 0, 1, … — one coded blob of whole users."""
    df = _task_pool(batches, shared)
    if df is None:
        return
    keep = pl.Series("query", released, dtype=pl.String).implode()
    df = df.filter(pl.col("query").is_in(keep))
    if df.height == 0:
        return
    out = df.select(
        "user",
        item=pl.col("query") + PAIR_SEP + pl.col("url"),
        rank=pl.int_range(pl.len()).over("user").cast(pl.Int64),
    )
    blobs = encode(out)
    yield pa.record_batch(
        [pa.array(blobs, pa.binary()), pa.array([True] * len(blobs))], schema=_POOL_ARROW
    )


class SparkClickPools(PairSource):
    """The clicked (query, url) pools on the cluster (blobs of user, query, url, rank rows;
    :class:`SparkPools`' layout)."""

    def __init__(
        self,
        clicks: Any,
        where: str,
        sink: dict[str, int] | None = None,
        shared: list[str] | None = None,
        bits: int = NOISE_BITS,
    ) -> None:
        self.clicks = clicks
        self.bits = bits
        self.where = where
        self.sink = sink
        self.shared = shared or []

    def pairs(self, queries: pl.Series) -> PoolTable:
        fn = partial(_pairs, queries.cast(pl.String).to_list(), self.shared)
        # the released queries' pairs: a few percent of the click pools, in one task per core
        # (whole users in every blob: merging tasks keeps each user's rows together)
        pairs = self.clicks.mapInArrow(fn, POOL_DDL)
        pairs = pairs.coalesce(cores(pairs.sparkSession))
        return SparkPools(pairs, self.where, self.sink, bits=self.bits)

    def finish(self) -> None:
        """Nothing of its own is cached (the kernel's output is the engine's)."""
