"""The users' item pools where Spark holds them, and the selection's rounds run there
(:class:`~searchveil.mechanisms.pool_rounds.PoolTable` on a cluster).

The pools (rows ``user, item, rank``: each user's first distinct items, from the bounding
tasks and the driver's join) stay where the bounding tasks left them (cached on the
executors): each user's rows in one partition, in rank order — the few users two tasks share
are gathered into one more partition (:meth:`~searchveil.engines.spark.KernelResult.
pool_tables`). A round of
:class:`~searchveil.mechanisms.pool_rounds.RoundSpec` is then:

1. **per-user weights in the tasks** (``mapInArrow``): each user's first d rows whose rank is
   below the pool and whose item is not released yet (the released set — already published —
   travels with the task), ``weights[k]`` on each of its k rows;
2. **per-item sums reduced in the cluster, noise and threshold there**
   (:func:`~searchveil.engines.spark_release.stage_frame`): only the released items return;
3. a **bias round**'s output is checkpointed: its released items return, its items at or above
   the cutoff (never published) stay on the executors and choose the next round's rows (a
   semi-join there, then the rows moved back to their users).

No user's pool is ever collected — except for a strategy that cannot run where the pools are
(:meth:`SparkPools.collect_pool`: the sequential policy Gaussian).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
from pyspark.sql import functions as F

from searchveil.engines.contract import domain_counts
from searchveil.engines.spark_release import (
    arrow_out,
    checkpoint,
    read_stage,
    stage_frame,
    to_polars,
    whole_runs,
)
from searchveil.mechanisms.noisy_counts import NoisePlan, NoisyStep
from searchveil.mechanisms.pool_rounds import PairSource, PoolFigures, PoolTable, RoundSpec
from searchveil.mechanisms.rounds import ItemPool
from searchveil.model import PAIR_SEP
from searchveil.rng import RandomSource

__all__ = ["SparkClickPools", "SparkPools"]

_ROWS = "user string, item string, rank long, w long, first long"
_ROWS_ARROW = pa.schema([("user", pa.string()), ("item", pa.string()), ("rank", pa.int64()),
                         ("w", pa.int64()), ("first", pa.int64())])  # fmt: skip
_PAIRS_ARROW = pa.schema([("user", pa.string()), ("item", pa.string()), ("rank", pa.int64())])


def _round_rows(
    pool: int | None, d: int, weights: tuple[int, ...], released: list[str],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:  # fmt: skip
    """A round's rows of a partition's users, weighted: each user's first ``d`` rows (rank
    below ``pool``, item not released), ``weights[k]`` each for a user with k of them; and
    ``first``: whether the row's rank is below ``d`` (summed per item, it is a released item's
    count among the users' first d items — every such row of an unreleased item is in the
    round — so the counts step needs no second pass)."""
    table = np.asarray(weights, dtype=np.int64)
    gone = pl.Series("item", released, dtype=pl.String)
    for df in whole_runs(batches, "user"):
        keep = pl.lit(True)
        if pool is not None:
            keep = keep & (pl.col("rank") < pool)
        if gone.len():
            keep = keep & ~pl.col("item").is_in(gone.implode())
        df = df.filter(keep)
        if df.height == 0:
            continue
        # users are contiguous: a row's place among its user's rows, and the user's rows,
        # from the runs (integers; no window over the user strings)
        run = df.get_column("user").rle_id().to_numpy()
        start = np.flatnonzero(np.r_[True, run[1:] != run[:-1]])
        pos = np.arange(run.size) - np.repeat(start, np.diff(np.r_[start, run.size]))
        first = pos < d
        df, run = df.filter(pl.Series(first)), run[first]
        k = np.bincount(run)[run]
        out = df.select("user", "item", pl.col("rank").cast(pl.Int64)).with_columns(
            w=pl.Series(table[k], dtype=pl.Int64),
            first=(pl.col("rank") < d).cast(pl.Int64),
        )
        yield arrow_out(out, _ROWS_ARROW)


def _pairs(released: list[str], batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The clicked pairs of the released queries, each user's re-ranked 0, 1, …"""
    keep = pl.Series("query", released, dtype=pl.String)
    for df in whole_runs(batches, "user"):
        df = df.filter(pl.col("query").is_in(keep.implode()))
        if df.height == 0:
            continue
        out = df.select(
            "user", item=pl.col("query") + PAIR_SEP + pl.col("url"),
            rank=pl.int_range(pl.len()).over("user").cast(pl.Int64),
        )  # fmt: skip
        yield arrow_out(out, _PAIRS_ARROW)


_NO_COUNTS = pl.DataFrame(schema={"item": pl.String, "count": pl.Int64})


class SparkPools(PoolTable):
    """A pool table on the cluster: ``pools`` (user, item, rank; each user in one partition,
    in rank order). Released sets are the released items' names (held
    by the driver: they are published); a round's rows are a lazy frame."""

    def __init__(self, pools: Any, where: str, sink: dict[str, int] | None = None) -> None:
        self.pools = pools
        self.where = where
        self.sink = sink if sink is not None else {}
        self._figures: dict[int, PoolFigures] = {}
        self._held: list[Any] = []
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
        gone = released.to_list()
        if spec.after_bias:
            bias_rows, eligible = bias
            rows = bias_rows.select("user", "item", "rank").join(eligible, on="item",
                                                                how="left_semi")  # fmt: skip
            rows = rows.repartition("user").sortWithinPartitions("user", "rank")
            fn = partial(_round_rows, None, spec.d, spec.weights, gone)
            return rows.mapInArrow(fn, _ROWS)
        fn = partial(_round_rows, spec.pool, spec.d, spec.weights, gone)
        return self.pools.mapInArrow(fn, _ROWS)

    def run_round(
        self, rows: Any, spec: RoundSpec, step: int, key: int | None, rng: RandomSource
    ) -> tuple[Any, Any, dict[str, int]]:
        thr = spec.threshold if spec.cutoff is None else min(spec.threshold, spec.cutoff)
        inclusive = spec.inclusive or spec.cutoff is not None
        plan = NoisePlan((NoisyStep(spec.noise, threshold=thr, inclusive=inclusive,
                                    publish="_noisy"),))  # fmt: skip
        partial_w = rows.select("item", F.col("w").alias("count"), "first")
        frame = stage_frame(partial_w, ["item"], plan, key, first_step=step, carry=("first",))
        more = None
        passed = (pl.col("_noisy") >= spec.threshold) if spec.inclusive else (
            pl.col("_noisy") > spec.threshold)  # fmt: skip
        if spec.cutoff is None:
            res = read_stage(self._get(frame), ["item"], ["_noisy", "first"])
        else:  # a bias round: read twice, so computed once and kept
            cp = checkpoint(frame, self.where)
            self._held.append(cp)
            sure = F.col("_noisy") >= spec.threshold
            got = self._get(cp.filter((F.col("_kind") == "s") | sure))
            res = read_stage(got, ["item"], ["_noisy", "first"])
            eligible = cp.filter((F.col("_kind") == "r") & (F.col("_noisy") >= spec.cutoff))
            more = (rows, eligible.select("item"))
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
        spark = self.pools.sparkSession
        got = self._get(
            self.pools.filter(F.col("rank") < d)
            .join(F.broadcast(spark.createDataFrame(dom.to_arrow())), on="item", how="left_semi")
            .groupBy("item").agg(F.count(F.lit(1)).alias("count"))
        )  # fmt: skip
        return domain_counts(dom, got.cast({"count": pl.Int64}), ["item"])

    def figures(self, d: int) -> PoolFigures:
        if d not in self._figures:
            first = F.when(F.col("rank") < d, 1).otherwise(0)
            per_item = self.pools.groupBy("item").agg(
                F.count(F.lit(1)).alias("h"), F.min("rank").alias("r0"), F.sum(first).alias("f")
            )
            one = F.col("h") == 1
            agg = per_item.agg(
                F.sum("h").alias("rows"), F.sum("f").alias("rows_first_d"),
                F.count(F.lit(1)).alias("items"),
                F.sum(F.when(one, 1).otherwise(0)).alias("single_items"),
                F.sum(F.when(one & (F.col("r0") < d), 1).otherwise(0)).alias("single_first_d"),
            )  # fmt: skip
            r = self._get(agg).row(0, named=True)
            self._figures[d] = PoolFigures(**{k: int(v or 0) for k, v in r.items()})
        return self._figures[d]

    def collect_pool(self) -> ItemPool:
        return ItemPool.from_frame(self._get(self.pools.select("user", "item", "rank")))

    def finish(self) -> None:
        for df in self._held:
            df.unpersist()
        self._held.clear()


class SparkClickPools(PairSource):
    """The clicked (query, url) pools on the cluster (user, query, url, rank; each user in one
    partition, in rank order)."""

    def __init__(self, clicks: Any, where: str, sink: dict[str, int] | None = None) -> None:
        self.clicks = clicks
        self.where = where
        self.sink = sink

    def pairs(self, queries: pl.Series) -> PoolTable:
        fn = partial(_pairs, queries.cast(pl.String).to_list())
        rows = self.clicks.mapInArrow(fn, "user string, item string, rank long")
        return SparkPools(rows, self.where, self.sink)

    def finish(self) -> None:
        """Nothing of its own is cached (the kernel's output is the engine's)."""
