"""The PySpark engine: the same operations on Spark DataFrames (``--engine spark``).

``--spark-master`` picks the cluster (default ``local[*]``). Row order is
``monotonically_increasing_id()`` of the scanned file, which follows the file order (partition
index, then position). The reduced rows are brought to the driver with Arrow; noise is drawn
there with the project's secure sampler (a search log has far fewer distinct items than rows,
so the driver never holds the log itself).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import polars as pl

from searchveil.engines.base import AOL_COLUMNS
from searchveil.errors import InputFormatError

_SESSIONS: dict[str, Any] = {}


def spark_session(master: str = "local[*]") -> Any:
    """A shared SparkSession (quiet, no UI, Arrow on)."""
    if master in _SESSIONS:
        return _SESSIONS[master]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("searchveil")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", os.environ.get("SEARCHVEIL_SPARK_DRIVER_MEMORY", "4g"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    _SESSIONS[master] = spark
    return spark


class SparkEngine:
    name = "spark"

    def __init__(self, *, master: str = "local[*]", normalize: bool = True) -> None:
        self.master = master
        self.normalize = normalize
        self.spark = spark_session(master)

    def scan(self, path: str) -> Any:
        from pyspark.sql import functions as F

        if path.lower().endswith(".parquet"):
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
            raise InputFormatError(path, f"the engines read the AOL layout; missing {missing}")
        q = F.coalesce(F.col("Query").cast("string"), F.lit(""))
        if self.normalize:
            q = F.trim(F.regexp_replace(F.lower(q), r"\s+", " "))
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
        out = df.select(*cols)
        return out.withColumn("ev", F.xxhash64("query", "time")).withColumn(
            "qh", F.xxhash64("query")
        )

    def with_sessions(self, table: Any, gap_minutes: float = 30.0) -> Any:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

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

    def events(self, table: Any) -> Any:
        from pyspark.sql import functions as F

        return table.groupBy("user", "ev").agg(F.min("row").alias("row"), F.first("qh").alias("qh"))

    def first_per_user(
        self, table: Any, n: int, *, order: str = "row", distinct_on: list[str] | None = None
    ) -> Any:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        t = table
        if distinct_on:
            t = t.groupBy("user", *distinct_on).agg(F.min(order).alias(order))
        w = Window.partitionBy("user").orderBy(order)
        return t.withColumn("_r", F.row_number().over(w)).filter(F.col("_r") <= n).drop("_r")

    def semi_join(self, table: Any, keys: Any, on: list[str]) -> Any:
        return table.join(keys.select(*on).distinct(), on=on, how="left_semi")

    def union_rows(self, a: Any, b: Any) -> Any:
        return a.unionByName(b).dropDuplicates(["row"])

    def filter_clicks(self, table: Any) -> Any:
        from pyspark.sql import functions as F

        return table.filter(F.col("url").isNotNull())

    def users_with_counts(self, table: Any, key: str, minimum: int) -> Any:
        from pyspark.sql import functions as F

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
            raise InputFormatError("<input>", f"Spark could not read the input: {exc}") from None
        return pl.DataFrame(pl.from_arrow(arrow))

    def totals(self, table: Any) -> dict[str, int]:
        from pyspark.sql import functions as F

        r = table.agg(F.count("*").alias("rows"), F.countDistinct("user").alias("users")).collect()
        return {"rows": int(r[0]["rows"]), "users": int(r[0]["users"])}

    def bounded_counts(self, path: Any, algorithm: str, params: Any) -> Any:
        from searchveil.engines.plans import rows_plan_counts

        return rows_plan_counts(self, algorithm, path, params, normalize=self.normalize)

    def describe(self) -> dict[str, Any]:
        import pyspark

        return {"engine": "spark", "version": pyspark.__version__, "master": self.master}
