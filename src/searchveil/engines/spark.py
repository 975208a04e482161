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
from pathlib import Path
from typing import Any

import polars as pl
import pyspark
from pyspark import TaskContext
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType

from searchveil.engines.base import Engine, ReducedRows
from searchveil.engines.contract import (
    BoundedCounts,
    Bounding,
    BoundingPlan,
    Item,
    Source,
    UserItemPools,
)
from searchveil.engines.rows import input_record, rows_plan_log
from searchveil.engines.sources import ENGINE_LAYOUT
from searchveil.engines.spark_ordered import (
    GROUP_KEYS,
    OUTPUT_DDL,
    NotContiguous,
    PartitionPass,
    stitch,
)
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.files import start_fingerprint
from searchveil.io.formats import Container, container, gzip_named_as_such
from searchveil.io.readers import AOL_COLUMNS
from searchveil.model import PAIR_SEP
from searchveil.validate import parse_choice

PLAN_NAME = "spark window plan"
POOL_PLAN_NAME = "spark pool plan"
ORDERED_PLAN_NAME = "spark ordered pass"


class SparkPlan(StrEnum):
    """How Spark bounds: ``auto`` (the ordered pass, else the window plan), or one of them."""

    AUTO = "auto"
    ORDERED = "ordered"
    WINDOW = "window"


SPARK_PLANS = tuple(p.value for p in SparkPlan)
SPARK_UNREADABLE = (
    "Spark could not read it as the AOL layout (a row with the wrong number of fields, or a "
    "damaged .gz or Parquet file?); `searchveil stats` on it names the first bad line "
    "(SEARCHVEIL_DEBUG=1 shows Spark's own message)"
)
# PySpark's mapInArrow goes through pandas_udf, which needs pandas (the `spark` extra has it);
# without it the engine runs the window plan
HAVE_PANDAS = importlib.util.find_spec("pandas") is not None
# Java's \s is ASCII-only unless UNICODE_CHARACTER_CLASS is on; (?U) makes it the Unicode
# White_Space class of Polars' (Rust) \s, so normalisation agrees with the in-memory reader
_WHITESPACE = r"(?U)\s+"

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
        if plan == "ordered" and not HAVE_PANDAS:
            raise InvalidParameterError("spark plan", plan, "auto or window (pandas is missing)")
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
        out = df.select(*cols)
        return out.withColumn("ev", F.xxhash64("query", "time")).withColumn(
            "qh", F.xxhash64("query")
        )

    def scan_narrow(self, path: Source | str | Path, *, url: bool) -> Any:
        """``user, query, time, row`` (+ ``url``) for :func:`window_plan`: only the columns the
        counts need, the query coalesced but *not* normalised, an integer user id kept as is
        (trimming its text would change nothing)."""

        df = self._read(path)
        user = F.col("AnonID")
        if not isinstance(df.schema["AnonID"].dataType, IntegralType):
            user = F.trim(user.cast("string"))
        cols = [
            user.alias("user"),
            F.coalesce(F.col("Query").cast("string"), F.lit("")).alias("query"),
            F.col("QueryTime").cast("string").alias("time"),
        ]
        if url:
            u = F.trim(F.col("ClickURL").cast("string"))
            cols.append(F.when(u == "", None).otherwise(u).alias("url"))
        return df.select(*cols, F.monotonically_increasing_id().alias("row"))

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

    def events(self, table: Any) -> Any:

        return table.groupBy("user", "ev").agg(F.min("row").alias("row"), F.first("qh").alias("qh"))

    def first_per_user(
        self, table: Any, n: int, *, order: str = "row", distinct_on: list[str] | None = None
    ) -> Any:

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

        return table.filter(F.col("url").isNotNull())

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

    def bounded_counts(self, source: Source | Path, bp: BoundingPlan) -> BoundedCounts:
        """Bounded counts computed on Spark (the ordered pass, else :func:`window_plan`); only
        the counts and a few figures come to the driver. The file's SHA-256 is streamed in a
        thread meanwhile."""
        src = Source.of(source)
        path = src.path
        sha = start_fingerprint(path, self.fingerprint)  # a full hash overlaps Spark's work
        with_url = bp.with_url
        result = None
        name = ORDERED_PLAN_NAME
        try:
            if self.plan != "window" and HAVE_PANDAS:
                table = self.scan_narrow(src, url=with_url)
                try:
                    result = ordered_plan(table, bp, normalize=self.normalize)
                except NotContiguous:
                    if self.plan == "ordered":
                        raise InvalidParameterError(
                            "spark plan", "ordered", "auto or window (users are not contiguous)"
                        ) from None
            if result is None:
                name = PLAN_NAME
                table = self.scan_narrow(src, url=with_url)
                plan, keys = window_plan(table, bp, normalize=self.normalize)
                arrow = plan.toArrow()
                out = pl.DataFrame(pl.from_arrow(arrow))
                result = _split_plan_output(out, bp, keys)
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
        return BoundedCounts(counts=counts, figures=figures, input=rec, plan=name)

    def item_pools(self, source: Source | Path, plan: BoundingPlan) -> UserItemPools:
        """Selection strategies: each user's first distinct queries (and clicked pairs) —
        :func:`pool_plan`, one shuffle of the rows by user — come to the driver with Arrow."""
        src = Source.of(source)
        path = src.path
        sha = start_fingerprint(path, self.fingerprint)
        try:
            table = self.scan_narrow(src, url=plan.clicks_per_user is not None)
            counts, figures, rows = pool_plan(table, plan, normalize=self.normalize)
        except (InputFormatError, InvalidParameterError):
            raise
        except Exception as exc:  # noqa: BLE001 - Spark wraps parse errors in Py4J/JVM types
            raise InputFormatError(str(path), f"Spark could not read the input: {exc}") from None
        if rows == 0:
            raise InputFormatError(str(path), "no data rows left (empty input)")
        rec = input_record(
            src, sha.result(), rows, figures["users"], self.normalize, self.fingerprint
        )
        return UserItemPools(queries=counts["query_pool"], clicks=counts.get("click_pool"),
                             figures=figures, input=rec, plan=POOL_PLAN_NAME)  # fmt: skip

    def rows(self, source: Source | Path, plan: BoundingPlan) -> ReducedRows:
        """The row plan (:func:`searchveil.engines.rows.rows_plan_log`) on Spark."""
        return rows_plan_log(
            self, source, plan, normalize=self.normalize, fingerprint=self.fingerprint
        )

    def describe(self) -> dict[str, Any]:

        return {"engine": "spark", "version": pyspark.__version__, "master": self.master}


def ordered_plan(
    table: Any, bp: BoundingPlan, *, normalize: bool
) -> tuple[dict[str, pl.DataFrame], dict[str, int], int]:
    """The ordered pass (:mod:`searchveil.engines.spark_ordered`): ``mapInArrow`` runs
    :class:`~searchveil.engines.spark_ordered.PartitionPass` on each partition of ``table``
    (``user, query, time`` [+ ``url``] from :meth:`SparkEngine.scan_narrow`, in file order);
    one aggregation sums the per-item counts of the partitions' interior users and returns the
    boundary users' candidates and state and the users seen in more than one run; the driver
    stitches them (:func:`~searchveil.engines.spark_ordered.stitch`, which raises
    :class:`~searchveil.engines.spark_ordered.NotContiguous` when the users are not contiguous).
    Returns (counts, figures, rows)."""
    with_url = "url" in table.columns
    cols = [F.col("user").alias("u"), F.col("query").alias("q"), F.col("time").alias("t")]
    if with_url:
        cols.append(F.col("url"))

    def per_partition(batches: Any) -> Any:
        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        yield from PartitionPass(bp, normalize, part, with_url).run(batches)

    out = table.select(*cols).mapInArrow(per_partition, OUTPUT_DDL)
    agg = out.groupBy(*GROUP_KEYS).agg(F.sum("n").alias("n"))
    agg = agg.filter((F.col("kind") != "u") | (F.col("n") > 1))
    res = pl.DataFrame(pl.from_arrow(agg.toArrow()))
    return stitch(res, bp, normalize=normalize)


def window_plan(
    table: Any, bp: BoundingPlan, *, normalize: bool
) -> tuple[Any, dict[str, list[str]]]:
    """One Spark query whose (small) result holds the bounded counts and the figures.

    ``table`` has ``user, query, time, row`` (+ ``url``) with the query *not yet normalised*
    (:meth:`SparkEngine.scan_narrow`): normalisation, the costly part of the scan, is applied
    after bounding, to the kept keys only (and, when two consecutive rows of one user have
    the same time but different raw text, to decide whether they are one event).

    Rows are shuffled once by user and ordered by ``row`` (window ``w``); a row starts a query
    event (``es``) when it is the user's first row, its time or the previous row's time is
    null, or the time or the (normalised) query differs from the previous row's — the
    in-memory run definition (:func:`searchveil.model.query_events`).

    * Korolova: kept events are event starts whose running event number is ≤ d, kept clicks
      the click rows whose running click number is ≤ d_c.
    * distinct items (Korolova ``distinct``, ZEALOUS): the first row of each (user, item)
      (the first row of a user's query always starts an event, so only event starts are
      grouped), ranked per user by that row; the first m are kept, each (user, item) once, so
      a count is a count of distinct users. The grouping by (user, item) and the ranking reuse
      the partitioning by user (no further shuffle of rows).

    The result is grouped by the kept keys (null for rows or items not kept) with the figure
    columns summed per group; the driver adds them up (:func:`_split_plan_output`).
    Returns the plan and, per count table, the key columns of the result that name it.
    """

    by_events = bp.keep == Bounding.EVENTS
    item, distinct, m = bp.item, bp.distinct, bp.per_user
    if not by_events and bp.keep != Bounding.DISTINCT:
        raise InvalidParameterError("bounding plan", bp.keep, "events | distinct")

    def norm(c: Any) -> Any:
        return F.trim(F.regexp_replace(F.lower(c), _WHITESPACE, " ")) if normalize else c

    def flag(c: Any) -> Any:
        return c.cast("int")

    row, query, url, time = F.col("row"), F.col("query"), F.col("url"), F.col("time")
    one = F.lit(1)

    if item == "clicks":  # ZEALOUS clicks: no events needed, only click rows and users
        click = url.isNotNull()
        g = table.groupBy("user", F.when(click, query).alias("query"), "url").agg(
            F.min("row").alias("row"), F.count(one).alias("n"), F.count("url").alias("c")
        )
        if normalize:  # the raw text's groups, merged by normalised text
            g = g.groupBy("user", norm(query).alias("query"), "url").agg(
                F.min("row").alias("row"), F.sum("n").alias("n"), F.sum("c").alias("c")
            )
        rn = F.row_number().over(Window.partitionBy("user").orderBy(url.isNull(), row))
        keep = click & (rn <= m)
        g = g.select(
            F.when(keep, query).alias("k_query"),
            F.when(keep, url).alias("k_url"),
            "n",
            "c",
            flag(rn == 1).alias("us"),
        )
        out = g.groupBy("k_query", "k_url").agg(
            F.count(one).alias("pairs"),
            F.sum("n").alias("n"),
            F.sum("us").alias("us"),
            F.sum("c").alias("clicks"),
        )
        return out, {"items": ["k_query", "k_url"]}

    w = Window.partitionBy("user").orderBy("row")
    t = table.select("*", F.lag("query").over(w).alias("pq"), F.lag("time").over(w).alias("pt"))
    pq, pt = F.col("pq"), F.col("pt")
    same_q = (query == pq) | (norm(query) == norm(pq)) if normalize else query == pq
    # cheap tests first: Spark evaluates AND / OR lazily, so normalisation runs only when one
    # user's consecutive rows have the same time and different raw text
    same = pq.isNotNull() & time.isNotNull() & pt.isNotNull() & (time == pt) & same_q
    t = t.withColumn("us", flag(pq.isNull())).withColumn("es", flag(~same)).drop("pq", "pt")
    if not distinct:
        running = w.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        kept_ev = (F.col("es") == 1) & (F.sum("es").over(running) <= m)
        sel = [F.when(kept_ev, norm(query)).alias("k_query")]
        aggs = [
            F.count(one).alias("n"),
            F.sum("us").alias("us"),
            F.sum("es").alias("events"),
            F.count("k_query").alias("kept"),
        ]
        keys = {"queries": ["k_query"]}
        if bp.clicks_per_user is not None:
            click = url.isNotNull()
            kept_cl = click & (F.sum(flag(click)).over(running) <= bp.clicks_per_user)
            sel += [
                F.when(kept_cl, norm(query)).alias("k_cquery"),
                F.when(kept_cl, url).alias("k_url"),
                flag(click).alias("c"),
            ]
            aggs += [F.sum("c").alias("clicks"), F.count("k_url").alias("kept_c")]
            keys["clicks"] = ["k_cquery", "k_url"]
        t = t.select(*sel, "us", "es")
        return t.groupBy(*[k for ks in keys.values() for k in ks]).agg(*aggs), keys

    # the first row of each (user, query) is an event start: group event starts by (user,
    # query), the other rows by (user, null) (they carry only the figures)
    sums = [F.sum("n").alias("n"), F.sum("us").alias("us"), F.sum("events").alias("events")]
    g = t.groupBy("user", F.when(F.col("es") == 1, query).alias("query")).agg(
        F.min("row").alias("row"),
        F.count(one).alias("n"),
        F.sum("us").alias("us"),
        F.sum("es").alias("events"),
    )
    if normalize:
        g = g.groupBy("user", norm(query).alias("query")).agg(F.min("row").alias("row"), *sums)
    rn = F.row_number().over(Window.partitionBy("user").orderBy(query.isNull(), row))
    g = g.select(F.when(query.isNotNull() & (rn <= m), query).alias("k_query"), "n", "us", "events")
    out = g.groupBy("k_query").agg(F.count(one).alias("pairs"), *sums)
    return out, {"queries" if by_events else "items": ["k_query"]}


def _split_plan_output(
    out: pl.DataFrame, bp: BoundingPlan, keys: dict[str, list[str]]
) -> tuple[dict[str, pl.DataFrame], dict[str, int], int]:
    """The counts, figures and row count from :func:`window_plan`'s result."""

    all_keys = [k for ks in keys.values() for k in ks]

    def total(col: str) -> int:
        return int(out.get_column(col).sum() or 0)

    def table(name: str, count: str) -> pl.DataFrame:
        ks = keys[name]
        kept = out.filter(pl.col(ks[-1]).is_not_null())
        if ks == all_keys:  # Spark grouped by exactly these keys
            res = kept.select(*ks, pl.col(count).cast(pl.Int64).alias("count"))
        else:  # Korolova with clicks: the query and the click keys share the result
            res = kept.group_by(ks).agg(pl.col(count).sum().cast(pl.Int64).alias("count"))
            res = res.filter(pl.col("count") > 0)
        names = ["query"] if len(ks) == 1 else ["query", "url"]
        return res.rename(dict(zip(ks, names, strict=True))).select(*names, "count")

    rows = total("n")
    users = total("us")
    if bp.keep == Bounding.EVENTS and not bp.distinct:
        counts = {"queries": table("queries", "kept")}
        figures = {
            "users": users,
            "query_events": total("events"),
            "query_events_after_bounding": total("kept"),
        }
        if "clicks" in keys:
            counts["clicks"] = table("clicks", "kept_c")
            figures |= {"clicks": total("clicks"), "clicks_after_bounding": total("kept_c")}
        return counts, figures, rows
    name = next(iter(keys))
    res = table(name, "pairs")
    kept = int(res.get_column("count").sum() or 0)
    if bp.keep == Bounding.EVENTS:  # distinct
        figures = {"users": users, "query_events": total("events")}
        figures["query_events_after_bounding"] = kept
        return {"queries": res}, figures, rows
    if bp.item == Item.QUERIES:
        res = res.with_columns(item=pl.col("query")).select("item", "count")
        n_items = total("events")
    else:
        res = res.with_columns(item=pl.col("query") + PAIR_SEP + pl.col("url"))
        res = res.select("item", "query", "url", "count")
        n_items = total("clicks")
    return {"items": res}, {"users": users, "items": n_items, "items_after_bounding": kept}, rows


def pool_plan(
    table: Any, plan: BoundingPlan, *, normalize: bool
) -> tuple[dict[str, pl.DataFrame], dict[str, int], int]:
    """Each user's first ``plan.per_user`` distinct (normalised) queries and, with clicks,
    first ``plan.clicks_per_user`` distinct clicked (query, url) pairs, ranked by the row of
    their first occurrence (the first row of a query always starts an event); plus the figures
    (rows, users, query events as in :func:`window_plan`, click rows). ``table``: from
    :meth:`SparkEngine.scan_narrow`."""

    def norm(c: Any) -> Any:
        return F.trim(F.regexp_replace(F.lower(c), _WHITESPACE, " ")) if normalize else c

    row, query, time = F.col("row"), F.col("query"), F.col("time")
    w = Window.partitionBy("user").orderBy("row")
    t = table.select("*", F.lag("query").over(w).alias("pq"), F.lag("time").over(w).alias("pt"))
    pq, pt = F.col("pq"), F.col("pt")
    same_q = (query == pq) | (norm(query) == norm(pq)) if normalize else query == pq
    same = pq.isNotNull() & time.isNotNull() & pt.isNotNull() & (time == pt) & same_q
    t = t.withColumn("es", (~same).cast("int")).withColumn("us", pq.isNull().cast("int"))
    aggs = [F.count(F.lit(1)).alias("rows"), F.sum("us").alias("users"),
            F.sum("es").alias("events")]  # fmt: skip
    if "url" in table.columns:
        aggs.append(F.count("url").alias("clicks"))
    tot = t.agg(*aggs).collect()[0]
    figures = {"users": int(tot["users"] or 0), "query_events": int(tot["events"] or 0)}

    def first(df: Any, keys: list[str], n: int) -> pl.DataFrame:
        g = df.groupBy("user", *keys).agg(F.min("row").alias("row"))
        rn = F.row_number().over(Window.partitionBy("user").orderBy("row"))
        g = g.select("user", *keys, (rn - 1).alias("rank")).filter(F.col("rank") < n)
        return pl.DataFrame(pl.from_arrow(g.toArrow())).with_columns(pl.col("rank").cast(pl.Int64))

    qs = table.select("user", norm(query).alias("query"), row)
    counts = {"query_pool": first(qs, ["query"], plan.per_user).rename({"query": "item"})}
    figures["pool_queries"] = counts["query_pool"].height
    if plan.clicks_per_user is not None:
        cl = table.filter(F.col("url").isNotNull()).select(
            "user", norm(query).alias("query"), "url", row
        )
        counts["click_pool"] = first(cl, ["query", "url"], plan.clicks_per_user)
        figures |= {"clicks": int(tot["clicks"] or 0),
                    "pool_clicks": counts["click_pool"].height}  # fmt: skip
    return counts, figures, int(tot["rows"] or 0)
