"""The PySpark engine (``--engine spark``): the bounding kernel of :mod:`searchveil.bounding`
on Spark's partitions, and k-anonymity's row plan on Spark DataFrames.

Where: ``--spark-master`` (default ``local[*]``; a standalone, YARN or Kubernetes master), or a
Spark Connect server (``--spark-remote sc://host:port``); ``--spark-conf`` adds settings (a
catalog). Off the driver's machine the executors get the driver's own searchveil, zipped
(:func:`ship_code`). What: a file (Parquet, AOL TSV/.gz), or a table of the session's catalog or
a Spark DataFrame (:class:`~searchveil.engines.contract.TableSource`, with its column names).

Korolova, ZEALOUS and the selection pools (:mod:`~searchveil.engines.spark_kernel`): every
partition runs the kernel with ``mapInArrow`` on the rows as Spark reads them (no
normalisation or parsing in Spark SQL: the executors read them with the Polars pass's own
code); the counts (or the pools) stay on the cluster, and only a few rows per partition and
the users seen in two runs come to the driver, which joins the partitions with the kernel's
own join:

* ``ordered`` (user-sorted input, a log written user by user): no shuffle of rows;
* ``shuffle``: each user's rows moved to one partition first, in input order (a file's
  position; a table's file path and row index) — any input.

``plan="auto"`` (the default) tries the ordered pass and shuffles when it finds a user whose
rows are not contiguous (:mod:`~searchveil.engines.spark_kernel`). Noise, thresholds and the
selection's rounds then run on the executors (:mod:`~searchveil.engines.spark_release`,
:mod:`~searchveil.engines.spark_pools`): the driver holds only what is released.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import tempfile
import threading
import zipfile
from enum import StrEnum
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pyspark
from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F

from searchveil.bounding import NotContiguous
from searchveil.engines.base import Engine, ReducedRows
from searchveil.engines.contract import (
    BoundedCounts,
    BoundingPlan,
    Source,
    TableSource,
    UserItemPools,
)
from searchveil.engines.rows import input_record, rows_plan_log
from searchveil.engines.sources import ENGINE_LAYOUT
from searchveil.engines.spark_errors import SPARK_UNREADABLE, spark_errors
from searchveil.engines.spark_jvm import daemon_module, driver_java_options, worker_allocators
from searchveil.engines.spark_kernel import KernelResult, kernel_plan, pieces_plan
from searchveil.engines.spark_pools import SparkClickPools, SparkPools
from searchveil.engines.spark_release import to_polars, unpersist
from searchveil.engines.spark_snapshot import table_snapshot
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.files import start_fingerprint
from searchveil.io.formats import Container, container, gzip_named_as_such
from searchveil.io.readers import AOL_COLUMNS
from searchveil.validate import check_int, parse_choice

#: an input of at most this many rows is bounded on the cluster in one job and released on the
#: driver (:meth:`SparkEngine._small`): a bounded size, not the input's
#: (``SEARCHVEIL_SPARK_LOCAL_ROWS`` or ``SparkEngine(local_rows=…)``; 0: always on the cluster)
LOCAL_ROWS = 1 << 19

SHUFFLE_PLAN_NAME = "spark shuffled by user"
ORDERED_PLAN_NAME = "spark ordered pass"
PIECES_PLAN_NAME = "spark ordered pass (executors read the Parquet file)"


class SparkScan(StrEnum):
    """Who reads a Parquet file: ``auto`` — the executors, with Polars, by path
    (:func:`~searchveil.engines.spark_kernel.pieces_plan`; the file must be on a file system
    they share with the driver), for user-sorted input; ``spark`` — Spark's own reader,
    always."""

    AUTO = "auto"
    SPARK = "spark"


class SparkPlan(StrEnum):
    """How Spark bounds: ``auto`` (the ordered pass, else the rows shuffled by user), or one
    of them."""

    AUTO = "auto"
    ORDERED = "ordered"
    SHUFFLE = "shuffle"


_WHITESPACE = r"(?U)\s+"  # k-anonymity's normalisation, in Spark SQL (its row plan)
# PySpark's mapInArrow goes through pandas_udf, which needs pandas (the `spark` extra has it)
HAVE_PANDAS = importlib.util.find_spec("pandas") is not None

_SESSIONS: dict[tuple[Any, ...], Any] = {}


def local_task_threads(master: str) -> int | None:
    """Polars' threads for each Python task of a ``local[N]`` master: the machine's cores
    shared by its N tasks (at least one), or None for another master. Each task already has
    a core: Polars' default pool (one thread per core, in every worker) oversubscribes them
    (warm probe-reweight-2r −0.7 to −1.0 s in two pairs on 2 cores; docs/spark-perf.md)."""
    m = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if m is None:
        return None
    cores = os.cpu_count() or 1
    n = 1 if m.group(1) is None else cores if m.group(1) == "*" else int(m.group(1))
    return max(1, cores // max(1, n))


def _import_pandas() -> None:
    try:
        import pandas  # noqa: F401
    except Exception:  # noqa: BLE001 — PySpark raises its own message when it needs it
        pass


def spark_session(
    master: str = "local[*]", *, remote: str | None = None, conf: tuple[tuple[str, str], ...] = ()
) -> Any:
    """A shared SparkSession (quiet, no UI, Arrow on, times in UTC): a classic one on
    ``master``, or a Spark Connect client of ``remote`` (``sc://host:port``); ``conf``: more
    ``spark.*`` settings (a catalog, a metastore). Off the driver's machine (any master but
    ``local``, and Spark Connect) the executors get this searchveil, zipped (:func:`ship_code`),
    so driver and executors always run the same bounding code."""
    key = (master, remote, conf)
    if key in _SESSIONS:
        return _SESSIONS[key]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.remote(remote) if remote else SparkSession.builder.master(master)
    settings = {
        "spark.sql.shuffle.partitions": "8",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "131072",
        # times reach Python as Spark's text of them: the instants in UTC, not the JVM's zone
        "spark.sql.session.timeZone": "UTC",
        # what a release caches (the bounding tasks' output, DISK_ONLY) is read once or twice:
        # the cache's per-column compression cost more JVM time than the reads it saves
        # (docs/spark-perf.md, "Speed on one machine")
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # the tables move as Arrow blobs of a few MB (engines/spark_blobs.py): a cached batch
        # and a batch sent to a Python task are bounded by rows and by bytes, so that a task's
        # blobs never all sit in the JVM's heap at once
        "spark.sql.inMemoryColumnarStorage.batchSize": "4",
        "spark.sql.execution.arrow.maxBytesPerBatch": str(32 << 20),
    }
    if not remote:  # settings of the driver's own JVM
        settings |= {
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            # with a local master this JVM also runs the tasks (docs/spark-perf.md)
            "spark.driver.memory": os.environ.get("SEARCHVEIL_SPARK_DRIVER_MEMORY", "4g"),
        }
        if master.startswith("local"):
            # the JVM's tasks only move Arrow blobs (engines/spark_blobs.py): its client
            # compiler, interpreted expressions and, once prepared, a class-data archive
            # (engines/spark_jvm.py; docs/spark-perf.md, "Cold")
            settings["spark.driver.extraJavaOptions"] = driver_java_options()
            settings["spark.sql.codegen.wholeStage"] = "false"
            settings["spark.sql.codegen.factoryMode"] = "NO_CODEGEN"
            # the executors' Python imports the installed pyspark, compiled, not the sources
            # of Spark's zip of it (engines/spark_jvm.py; the first Python task −0.5–0.9 s)
            if (daemon := daemon_module()) is not None:
                settings["spark.python.daemon.module"] = daemon
            # a local shuffle is files on this machine's disk, and what searchveil shuffles
            # is Arrow blobs already compressed (LZ4): Spark's LZ4 over them only burns CPU
            # (warm probe-reweight-2r −3 s; docs/spark-perf.md). A cluster keeps Spark's
            # default: its shuffles cross the network, and a table read by user moves rows
            settings["spark.shuffle.compress"] = "false"
            threads = local_task_threads(master)
            if threads is not None and "POLARS_MAX_THREADS" not in os.environ:
                settings["spark.executorEnv.POLARS_MAX_THREADS"] = str(threads)
            # the workers' allocators keep the pages they free for the next task's buffers
            # (engines/spark_jvm.py; warm probe-reweight-2r −4 to −6 s): this machine's
            # memory, not a cluster container's
            for k, v in worker_allocators().items():
                settings[f"spark.executorEnv.{k}"] = v
        # the driver receives only what a release publishes (and a few rows per task):
        # Spark's own cap on what a job returns (1g) stands unless the user sets another
        if os.environ.get("SEARCHVEIL_SPARK_MAX_RESULT_SIZE"):
            settings["spark.driver.maxResultSize"] = os.environ["SEARCHVEIL_SPARK_MAX_RESULT_SIZE"]
    for k, v in {**settings, **dict(conf)}.items():
        builder = builder.config(k, v)
    # PySpark imports pandas on the session's first call to its JVM (its numpy converter):
    # imported in a thread meanwhile, it overlaps the JVM's start (the session −0.3 s)
    if not remote and HAVE_PANDAS and "pandas" not in sys.modules:
        threading.Thread(target=_import_pandas, name="searchveil-pandas", daemon=True).start()
    spark = builder.appName("searchveil").getOrCreate()
    if not remote:
        spark.sparkContext.setLogLevel("ERROR")
    if remote or not master.startswith("local"):
        ship_code(spark, remote=bool(remote))
    _SESSIONS[key] = spark
    return spark


def ship_code(spark: Any, *, remote: bool) -> Path:
    """Zip the running searchveil package (its Python files) and add it to the session's
    Python path on every executor: the executors then import the driver's own code, whatever
    is installed on them (they still need polars, pyarrow and pandas)."""
    pkg = Path(__file__).resolve().parents[1]
    out = Path(tempfile.mkdtemp(prefix="searchveil-ship-")) / "searchveil.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(pkg.rglob("*.py")):
            z.write(f, Path("searchveil") / f.relative_to(pkg))
    if remote:
        spark.addArtifacts(str(out), pyfile=True)
    else:
        spark.sparkContext.addPyFile(str(out))
    return out


class SparkEngine(Engine):
    name = "spark"

    def __init__(
        self,
        *,
        master: str = "local[*]",
        normalize: bool = True,
        fingerprint: str = "full",
        plan: str = "auto",
        remote: str | None = None,
        conf: tuple[tuple[str, str], ...] = (),
        scan: str = "auto",
        local_rows: int | None = None,
    ) -> None:
        plan = parse_choice("spark plan", plan, SparkPlan)
        if local_rows is None:
            local_rows = int(os.environ.get("SEARCHVEIL_SPARK_LOCAL_ROWS", LOCAL_ROWS))
        self.local_rows = check_int("local_rows", local_rows, minimum=0)
        self.scan_by = parse_choice("spark scan", scan, SparkScan)
        if not HAVE_PANDAS:
            raise InvalidParameterError(
                "engine",
                "spark",
                "polars | memory (pandas, which Spark's mapInArrow needs, "
                "is not installed: pip install 'searchveil[spark]')",
            )
        self.plan = plan
        self.master, self.remote = master, remote
        self.normalize = normalize
        self.fingerprint = fingerprint
        self.spark = spark_session(master, remote=remote, conf=conf)
        self._cached: list[Any] = []  # what the last release keeps on the cluster
        self._rows: dict[str, int] = {}  # the rows the driver received for the last release

    def _read(self, source: Source | TableSource | str | Path) -> Any:
        """The input as a Spark DataFrame of AOL columns: a file (Parquet, or AOL TSV/.gz with
        a header), or a table (:meth:`_read_table`)."""
        if isinstance(source, TableSource):
            return self._read_table(source)
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
        _check_columns(path, df.columns)
        self._path = path
        return df

    def _read_table(self, table: TableSource) -> Any:
        """A catalog table or a DataFrame, its mapped columns renamed to the AOL layout's."""
        self._path = table.label
        try:
            df = table.frame if table.frame is not None else self.spark.table(table.name)
        except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException (no such table)
            raise InvalidParameterError(
                "spark-table", table.label, f"a table of the session's catalog ({exc})"
            ) from None
        cols = []
        for aol in AOL_COLUMNS:
            name = table.column(aol)
            if name in df.columns:
                cols.append(F.col(name).alias(aol))
            elif aol in ("AnonID", "Query"):
                raise InputFormatError(table.label, f"no column {name!r} (the {aol} field; map "
                                       "it with --user-col/--query-col/...)")  # fmt: skip
            else:  # an absent time, rank or URL: empty, as in a log without them
                cols.append(F.lit(None).cast("string").alias(aol))
        try:  # a table of files: its order is its files' (by path), each in file order
            return df.select(*cols, F.col("_metadata.file_path").alias("_sv_file"),
                             F.col("_metadata.row_index").alias("_sv_row"))  # fmt: skip
        except Exception:  # noqa: BLE001 - no file metadata: Spark's scan order
            return df.select(*cols)

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
        return to_polars(table, getattr(self, "_path", "the input"))

    def totals(self, table: Any) -> dict[str, int]:

        r = table.agg(F.count("*").alias("rows"), F.countDistinct("user").alias("users")).collect()
        return {"rows": int(r[0]["rows"]), "users": int(r[0]["users"])}

    def _kernel(
        self, source: Source | TableSource | Path, bp: BoundingPlan
    ) -> tuple[KernelResult, dict[str, Any], str]:
        """The bounding kernel on Spark: the ordered pass (:func:`pieces_plan` for a Parquet
        file, else :func:`kernel_plan`), else the rows shuffled by user; the counts (or the
        pools) stay on the cluster (:class:`KernelResult`), only a few rows per task reach the
        driver. A file's SHA-256 is streamed in a thread meanwhile; a table's snapshot is taken
        before it is read (:func:`table_snapshot`)."""
        self.finish()  # what an earlier release left cached
        if isinstance(source, TableSource):
            df = self._read(source)
            rec = table_snapshot(self.spark, source, df)
            where, parquet, direct = source.label, True, None
        else:
            src = Source.of(source)
            sha = start_fingerprint(src.path, self.fingerprint)  # overlaps Spark's work
            where, parquet = str(src.path), src.parquet
            direct = str(src.path.resolve()) if parquet and self.scan_by == SparkScan.AUTO else None
        small = not isinstance(source, TableSource) and self._small(src)
        result, name = None, ORDERED_PLAN_NAME
        with spark_errors(where):
            if direct is not None:  # the executors read it: no Spark job for its schema
                try:
                    names = pq.read_schema(direct).names
                except (OSError, pa.ArrowException):
                    raise InputFormatError(where, SPARK_UNREADABLE) from None
                _check_columns(where, names)
                self._path = where
            elif not isinstance(source, TableSource):
                df = self._read(src)
            if self.plan != SparkPlan.SHUFFLE:
                try:
                    if direct is not None:
                        name = PIECES_PLAN_NAME
                        result = pieces_plan(self.spark, direct, bp, normalize=self.normalize,
                                             small=small)  # fmt: skip
                    else:
                        result = kernel_plan(df, bp, normalize=self.normalize, parquet=parquet,
                                             small=small)  # fmt: skip
                except NotContiguous:
                    if self.plan == SparkPlan.ORDERED:
                        raise InvalidParameterError(
                            "spark plan", "ordered", "auto or shuffle (users are not contiguous)"
                        ) from None
            if result is None:
                name = SHUFFLE_PLAN_NAME
                if direct is not None:
                    df = self._read(src)
                result = kernel_plan(df, bp, normalize=self.normalize, parquet=parquet,
                                     shuffle=True, small=small)  # fmt: skip
        if result.output is not None:
            self._cached.append(result.output)
        result.where = where
        self._rows = {"bounding": result.received, "release": 0}
        result.sink = self._rows
        if result.rows == 0:
            raise InputFormatError(where, "no data rows left (empty input)")
        if isinstance(source, TableSource):
            rec |= {"rows": result.rows, "users": result.figures["users"],
                    "queries_normalized": self.normalize}  # fmt: skip
        else:
            rec = input_record(
                src, sha.result(), result.rows, result.figures["users"], self.normalize,
                self.fingerprint,
            )  # fmt: skip
        return result, rec, name

    def bounded_counts(self, source: Source | Path, bp: BoundingPlan) -> BoundedCounts:
        """Histogram releases: the kernel's counts as cluster tables (:class:`SparkCounts`):
        a release's noise and thresholds run where they are."""
        result, rec, name = self._kernel(source, bp)
        return BoundedCounts(counts=result.count_tables(bp), figures=result.figures, input=rec,
                             plan=name, received={"bounding": result.received})  # fmt: skip

    def item_pools(self, source: Source | Path, plan: BoundingPlan) -> UserItemPools:
        """Selection strategies: each user's first distinct queries (and clicked pairs) stay
        on the cluster, moved once so that each user's rows are in one partition
        (:class:`SparkPools`): the selection's rounds run there."""
        result, rec, name = self._kernel(source, plan)
        queries, clicks = result.pool_tables()
        for t in (queries, clicks):
            if isinstance(t, SparkPools | SparkClickPools):
                self._cached.append(t)
        return UserItemPools(queries=queries, clicks=clicks, figures=result.figures, input=rec,
                             plan=name, received={"bounding": result.received})  # fmt: skip

    def _small(self, src: Source) -> bool:
        """Whether the input is small (at most :attr:`local_rows` rows: a Parquet file's footer
        says; a text file by its size, 64 bytes a row, a gzip file's ×4): then it is bounded on
        the cluster in one job and released on the driver — a dozen Spark stages would cost
        more than the work (≈ 0.3–0.7 s a stage in ``local[2]``), and its size is bounded."""
        if self.local_rows == 0:
            return False
        try:
            if src.parquet:
                return int(pq.ParquetFile(src.path).metadata.num_rows) <= self.local_rows
            gz = container(str(src.path)) == Container.GZIP
            size = src.path.stat().st_size * (4 if gz else 1)
        except (OSError, pa.ArrowException):  # unreadable: Spark's reading says why
            return False
        return size <= 64 * self.local_rows

    def driver_rows(self) -> dict[str, int] | None:
        """The rows the driver received for the last release: the bounding job's (segments,
        users seen in two runs) and the release's (kept rows, summaries, released items)."""
        return dict(self._rows) if self._rows else None

    def finish(self) -> None:
        """Free what the last release cached on the cluster (its kernel output, its pools)."""
        for t in self._cached:
            # (a Spark Connect DataFrame answers any attribute with a column: no hasattr)
            if isinstance(t, SparkPools | SparkClickPools):
                t.finish()
            else:
                unpersist(t)
        self._cached = []

    def rows(self, source: Source | Path, plan: BoundingPlan) -> ReducedRows:
        """The row plan (:func:`searchveil.engines.rows.rows_plan_log`) on Spark."""
        return rows_plan_log(
            self, source, plan, normalize=self.normalize, fingerprint=self.fingerprint
        )

    def describe(self) -> dict[str, Any]:
        where = {"remote": self.remote} if self.remote else {"master": self.master}
        return {"engine": "spark", "version": pyspark.__version__} | where


def _check_columns(path: str, columns: list[str]) -> None:
    """The AOL layout's columns are all there (else the input's error, naming them)."""
    missing = [c for c in AOL_COLUMNS if c not in columns]
    if missing:
        raise InputFormatError(
            path, f"missing column(s) {', '.join(map(repr, missing))}; {ENGINE_LAYOUT}"
        )
