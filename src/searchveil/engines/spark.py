"""The PySpark engine: the same operations on Spark DataFrames (``--engine spark``).

``--spark-master`` picks the cluster (default ``local[*]``). Row order is
``monotonically_increasing_id()`` of the scanned file, which follows the file order (partition
index, then position). Korolova and ZEALOUS: the bounded counts are computed on Spark and only
the counts come to the driver with Arrow:

* ``ordered`` pass (:func:`ordered_plan`, :mod:`searchveil.engines.spark_ordered`): when each
  user's rows are contiguous (a log written user by user), every partition bounds its own
  users with ``mapInArrow`` and the boundary users are stitched on the driver — no shuffle of
  rows;
* ``window`` plan (:func:`window_plan`): one shuffle of the rows by user and a window per user;
  any input.

``plan="auto"`` (the default) tries the ordered pass and falls back to the window plan when
it finds a user whose rows are not contiguous. k-anonymity: the reduced rows are brought to the
driver. Noise is drawn there with the project's secure sampler (the driver never holds the log
itself).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl
import pyspark
from pyspark import TaskContext
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType

from searchveil.bounding import NotContiguous
from searchveil.engines.base import Engine, ReducedRows
from searchveil.engines.contract import BoundedCounts, BoundingPlan, Source, UserItemPools
from searchveil.engines.rows import input_record, rows_plan_log
from searchveil.engines.sources import ENGINE_LAYOUT
from searchveil.engines.spark_ordered import (
    GROUP_KEYS,
    OUTPUT_DDL,
    PartitionInput,
    join_partitions,
    partition_rows,
)
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.files import start_fingerprint
from searchveil.io.formats import Container, container, gzip_named_as_such
from searchveil.io.readers import AOL_COLUMNS
from searchveil.validate import parse_choice

SHUFFLE_PLAN_NAME = "spark shuffled by user"
ORDERED_PLAN_NAME = "spark ordered pass"


class SparkPlan(StrEnum):
    """How Spark bounds: ``auto`` (the ordered pass, else the rows shuffled by user), or one
    of them."""

    AUTO = "auto"
    ORDERED = "ordered"
    SHUFFLE = "shuffle"


SPARK_PLANS = tuple(p.value for p in SparkPlan)
SPARK_UNREADABLE = (
    "Spark could not read it as the AOL layout (a row with the wrong number of fields, or a "
    "damaged .gz or Parquet file?); `searchveil stats` on it names the first bad line "
    "(SEARCHVEIL_DEBUG=1 shows Spark's own message)"
)
# Java's \s is ASCII-only unless UNICODE_CHARACTER_CLASS is on; (?U) makes it the Unicode
# White_Space class of Polars' (Rust) \s: the blanks the kernel strips from a text user id
_EDGE_BLANKS = r"(?U)^\s+|\s+$"
_WHITESPACE = r"(?U)\s+"  # k-anonymity's normalisation, in Spark SQL (its row plan)
# PySpark's mapInArrow goes through pandas_udf, which needs pandas (the `spark` extra has it)
HAVE_PANDAS = importlib.util.find_spec("pandas") is not None

_SESSIONS: dict[str, Any] = {}


def spark_session(master: str = "local[*]") -> Any:
    """A shared SparkSession (quiet, no UI, Arrow on)."""
    if master in _SESSIONS:
        return _SESSIONS[master]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    spark = (
        SparkSession.builder.master(master)
        .appName("searchveil")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "131072")
        # times reach Python as Spark's text of them: the instants in UTC, not the JVM's zone
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", os.environ.get("SEARCHVEIL_SPARK_DRIVER_MEMORY", "4g"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    _SESSIONS[master] = spark
    return spark


class SparkEngine(Engine):
    name = "spark"

    def __init__(
        self,
        *,
        master: str = "local[*]",
        normalize: bool = True,
        fingerprint: str = "full",
        plan: str = "auto",
    ) -> None:
        plan = parse_choice("spark plan", plan, SparkPlan)
        if not HAVE_PANDAS:
            raise InvalidParameterError(
                "engine", "spark", "polars | memory (pandas, which Spark's mapInArrow needs, "
                "is not installed: pip install 'searchveil[spark]')"
            )
        self.plan = plan
        self.master = master
        self.normalize = normalize
        self.fingerprint = fingerprint
        self.spark = spark_session(master)

    def _read(self, source: Source | str | Path) -> Any:
        """The input as a Spark DataFrame (Parquet, or AOL TSV/.gz with a header)."""
        src = Source.of(source)
        path = str(src.path)
        if not src.parquet and container(path) == Container.GZIP and not gzip_named_as_such(path):
            # Spark picks the codec by the file name: a gzip file must be named .gz for it
            raise InputFormatError(
                path, "a gzip file not named .gz: Spark reads it as text (rename it to .gz)"
            )
        if src.parquet:
            df = self.spark.read.parquet(path)
        else:
            df = (
                self.spark.read.option("sep", "\t")
                .option("header", True)
                .option("quote", "")
                .option("mode", "FAILFAST")
                .csv(path)
            )
        missing = [c for c in AOL_COLUMNS if c not in df.columns]
        if missing:
            raise InputFormatError(
                path, f"missing column(s) {', '.join(map(repr, missing))}; {ENGINE_LAYOUT}"
            )
        self._path = path
        return df

    def scan(self, path: Source | str | Path) -> Any:

        df = self._read(path)
        q = F.coalesce(F.col("Query").cast("string"), F.lit(""))
        if self.normalize:
            q = F.trim(F.regexp_replace(F.lower(q), _WHITESPACE, " "))
        url = F.trim(F.col("ClickURL").cast("string"))
        cols = [
            F.trim(F.col("AnonID").cast("string")).alias("user"),
            q.alias("query"),
            F.col("QueryTime").cast("string").alias("time"),
            F.when(url == "", None).otherwise(url).alias("url"),
            F.col("ItemRank").cast("string").alias("rank"),
            F.monotonically_increasing_id().alias("row"),
        ]
        if "SessionID" in df.columns:
            cols.append(F.col("SessionID").cast("string").alias("_session_raw"))
        return df.select(*cols)

    def with_sessions(self, table: Any, gap_minutes: float = 30.0) -> Any:

        w = Window.partitionBy("user").orderBy("row")
        if "_session_raw" in table.columns:
            prev = F.lag("_session_raw").over(w)
            new = prev.isNull() | (F.col("_session_raw") != prev)
        else:
            ts = F.to_timestamp("time", "yyyy-MM-dd HH:mm:ss")
            t = table.withColumn("_ts", F.coalesce(ts, F.to_timestamp("time", "yyyy-MM-dd HH:mm")))
            prev = F.lag("_ts").over(w)
            gap = F.col("_ts").cast("long") - prev.cast("long")
            new = prev.isNull() | F.col("_ts").isNull() | (gap > int(gap_minutes * 60))
            table = t
        out = table.withColumn("_new", new.cast("long"))
        out = out.withColumn(
            "session", F.sum("_new").over(w.rowsBetween(Window.unboundedPreceding, 0)) - 1
        )
        return out.drop("_new", "_ts")

    def semi_join(self, table: Any, keys: Any, on: list[str]) -> Any:
        return table.join(keys.select(*on).distinct(), on=on, how="left_semi")

    def users_with_counts(self, table: Any, key: str, minimum: int) -> Any:

        return (
            table.select("user", key)
            .distinct()
            .groupBy(key)
            .agg(F.count("*").alias("_n"))
            .filter(F.col("_n") >= minimum)
            .select(key)
        )

    def collect(self, table: Any) -> pl.DataFrame:
        try:
            arrow = table.toArrow()
        except Exception as exc:  # noqa: BLE001 - Spark wraps parse errors in Py4J/JVM types
            raise InputFormatError(getattr(self, "_path", "the input"), SPARK_UNREADABLE) from exc
        return pl.DataFrame(pl.from_arrow(arrow))

    def totals(self, table: Any) -> dict[str, int]:

        r = table.agg(F.count("*").alias("rows"), F.countDistinct("user").alias("users")).collect()
        return {"rows": int(r[0]["rows"]), "users": int(r[0]["users"])}

    def _kernel(
        self, source: Source | Path, bp: BoundingPlan
    ) -> tuple[dict[str, pl.DataFrame], dict[str, int], dict[str, Any], str]:
        """The bounding kernel on Spark (:func:`kernel_plan`): the ordered pass, else the rows
        shuffled by user; only counts (or the pools) and a few rows per partition reach the
        driver. The file's SHA-256 is streamed in a thread meanwhile."""
        src = Source.of(source)
        path = src.path
        sha = start_fingerprint(path, self.fingerprint)  # a full hash overlaps Spark's work
        result, name = None, ORDERED_PLAN_NAME
        try:
            df = self._read(src)
            if self.plan != SparkPlan.SHUFFLE:
                try:
                    result = kernel_plan(df, bp, normalize=self.normalize, parquet=src.parquet)
                except NotContiguous:
                    if self.plan == SparkPlan.ORDERED:
                        raise InvalidParameterError(
                            "spark plan", "ordered", "auto or shuffle (users are not contiguous)"
                        ) from None
            if result is None:
                name = SHUFFLE_PLAN_NAME
                result = kernel_plan(df, bp, normalize=self.normalize, parquet=src.parquet,
                                     shuffle=True)  # fmt: skip
        except (InputFormatError, InvalidParameterError):
            raise
        except Exception as exc:  # noqa: BLE001 - Spark wraps parse errors in Py4J/JVM types
            raise InputFormatError(str(path), SPARK_UNREADABLE) from exc
        counts, figures, rows = result
        if rows == 0:
            raise InputFormatError(str(path), "no data rows left (empty input)")
        rec = input_record(
            src, sha.result(), rows, figures["users"], self.normalize, self.fingerprint
        )
        return counts, figures, rec, name

    def bounded_counts(self, source: Source | Path, bp: BoundingPlan) -> BoundedCounts:
        """Histogram releases: the kernel's counts (:meth:`_kernel`)."""
        counts, figures, rec, name = self._kernel(source, bp)
        return BoundedCounts(counts=counts, figures=figures, input=rec, plan=name)

    def item_pools(self, source: Source | Path, plan: BoundingPlan) -> UserItemPools:
        """Selection strategies: each user's first distinct queries (and clicked pairs), the
        kernel's kept rows (:meth:`_kernel`), come to the driver with Arrow."""
        counts, figures, rec, name = self._kernel(source, plan)
        return UserItemPools(queries=counts["query_pool"], clicks=counts.get("click_pool"),
                             figures=figures, input=rec, plan=name)  # fmt: skip

    def rows(self, source: Source | Path, plan: BoundingPlan) -> ReducedRows:
        """The row plan (:func:`searchveil.engines.rows.rows_plan_log`) on Spark."""
        return rows_plan_log(
            self, source, plan, normalize=self.normalize, fingerprint=self.fingerprint
        )

    def describe(self) -> dict[str, Any]:

        return {"engine": "spark", "version": pyspark.__version__, "master": self.master}


def _per_partition(how: PartitionInput, batches: Any) -> Any:
    """``mapInArrow``'s function on an executor: the kernel over this partition's batches."""
    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    yield from partition_rows(batches, how, part)


def kernel_plan(
    df: Any, bp: BoundingPlan, *, normalize: bool, parquet: bool, shuffle: bool = False
) -> tuple[dict[str, pl.DataFrame], dict[str, int], int]:
    """The bounding kernel on every partition of ``df`` (AOL columns, in input order) with
    ``mapInArrow`` (:func:`~searchveil.engines.spark_ordered.partition_rows`), one aggregation
    of the partitions' small output, and the driver's join
    (:func:`~searchveil.engines.spark_ordered.join_partitions`, which raises
    :class:`~searchveil.bounding.NotContiguous` when users are not contiguous). ``shuffle``:
    first move each user's rows to one partition, in input order (one shuffle of the rows; any
    input). The rows reach Python as Spark reads them — no normalisation, trimming or parsing
    in Spark: every engine reads them with the same code
    (:func:`~searchveil.engines.sources.canonical_rows`). Returns (counts, figures, rows)."""
    with_url = bp.with_url
    integral = isinstance(df.schema["AnonID"].dataType, IntegralType)
    user = F.col("AnonID") if integral else F.col("AnonID").cast("string")
    cols = [user.alias("AnonID"), F.col("Query").cast("string").alias("Query"),
            F.col("QueryTime").cast("string").alias("QueryTime")]  # fmt: skip
    if with_url:
        cols.append(F.col("ClickURL").cast("string").alias("ClickURL"))
    table = df.select(*cols)
    if shuffle:
        # the key the kernel compares: integer ids as they are, text ids without blanks
        key = F.col("AnonID") if integral else F.regexp_replace("AnonID", _EDGE_BLANKS, "")
        table = (
            table.withColumn("_row", F.monotonically_increasing_id())
            .withColumn("_key", key)
            .repartition("_key")
            .sortWithinPartitions("_key", "_row")
            .drop("_row", "_key")
        )
    spec = bp.kernel_spec(normalize=normalize)
    how = PartitionInput(bp, spec, integral, with_url, parquet)
    out = table.mapInArrow(partial(_per_partition, how), OUTPUT_DDL)
    agg = out.groupBy(*GROUP_KEYS).agg(F.sum("n").alias("n"))
    agg = agg.filter((F.col("kind") != "u") | (F.col("n") > 1))
    res = pl.DataFrame(pl.from_arrow(agg.toArrow()))
    return join_partitions(res, bp, spec, pl.Int64 if integral else pl.String)
