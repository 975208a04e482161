"""Releases of logs that live in Spark (issue 32): a catalog table by name (``--spark-table``,
``release_table``) and a Spark DataFrame, with the column-mapping options, byte-identical to
the same log released from its file by the Polars engine under a seed; the private record names
the table and the snapshot read. Marked ``spark`` (and ``slow`` for the CLI's Hive catalog)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from searchveil import KorolovaParams, ZealousParams, make_rng, release_file, release_table
from searchveil.cli import app
from searchveil.io.readers import ColumnMapping
from searchveil.release.selection import SelectionParams
from test_spark_cluster import assert_same_release

pytestmark = pytest.mark.spark

COLUMNS = {"AnonID": "uid", "Query": "q", "QueryTime": "ts", "ClickURL": "click", "ItemRank": "pos"}
MAPPING = ColumnMapping(user="uid", query="q", time="ts", url="click", rank="pos")


@pytest.fixture(scope="module")
def log_parquet(tmp_path_factory: pytest.TempPathFactory, aol_215_path: Path) -> Path:
    out = tmp_path_factory.mktemp("data") / "aol215.parquet"
    df = pl.read_csv(aol_215_path, separator="\t", quote_char=None, infer_schema=False)
    df.drop("SessionID").write_parquet(out, row_group_size=4000)
    return out


PARAMS = [
    KorolovaParams(
        d=5, K=5, b=1.0, b_q=2.0, url_selection="private", d_c=2, b_c=2.0, url_K=2, url_b=1.0
    ),
    ZealousParams(
        m=2, tau=1, lam=1.0, tau_prime=3, item_type="clicks", guarantee="indistinguishability"
    ),
    SelectionParams(
        strategy="probe-reweight-2r", epsilon=4.0, delta=1e-5, d=4, d_c=2, split=(1, 1, 1, 1)
    ),
]


@pytest.mark.parametrize("i", range(len(PARAMS)))
def test_dataframe_and_view_equal_the_file(i: int, log_parquet: Path, tmp_path: Path) -> None:
    """A DataFrame with renamed columns, and the same frame as a temporary view of the
    session's catalog, release what the file releases on the Polars engine."""
    from searchveil.engines.spark import spark_session

    spark = spark_session("local[2]")
    df = spark.read.parquet(str(log_parquet))
    df = df.select(*[df[a].alias(b) for a, b in COLUMNS.items()])
    df.createOrReplaceTempView("searchveil_logs")
    params = PARAMS[i]
    kw = {"max_users": 1000} if isinstance(params, SelectionParams) else {}
    ref = release_file(
        log_parquet, params, rng=make_rng(3), engine="polars", out=tmp_path / "file", **kw
    )
    for name, table in (("frame", df), ("view", "searchveil_logs")):
        rel = release_table(
            table,
            params,
            rng=make_rng(3),
            columns=MAPPING,
            spark_master="local[2]",
            out=tmp_path / name,
            **kw,
        )
        assert_same_release(tmp_path / name, tmp_path / "file")
        assert rel.inputs[0]["users"] == ref.inputs[0]["users"]
        assert rel.inputs[0]["rows"] == ref.inputs[0]["rows"]
    prov = json.loads((tmp_path / "view.private.json").read_text())
    assert prov["inputs"][0]["table"] == "searchveil_logs"
    assert prov["inputs"][0]["snapshot"]["kind"] == "files"
    assert len(prov["inputs"][0]["snapshot"]["sha256"]) == 64


def test_missing_table_and_column_are_typed_errors(log_parquet: Path) -> None:
    from searchveil.engines.spark import spark_session
    from searchveil.errors import InputFormatError, InvalidParameterError

    spark_session("local[2]").read.parquet(str(log_parquet)).createOrReplaceTempView(
        "searchveil_logs_raw"
    )
    with pytest.raises(InvalidParameterError, match="spark-table"):
        release_table("no_such_table_here", PARAMS[0], rng=make_rng(1), spark_master="local[2]")
    with pytest.raises(InputFormatError, match="uid"):  # the AOL names, mapped to absent ones
        release_table(
            "searchveil_logs_raw",
            PARAMS[0],
            rng=make_rng(1),
            columns=MAPPING,
            spark_master="local[2]",
        )


HIVE_TABLE = """
import sys
from pyspark.sql import SparkSession
conf = dict(kv.split("=", 1) for kv in sys.argv[2:])
b = SparkSession.builder.master("local[2]")
for k, v in conf.items():
    b = b.config(k, v)
spark = b.getOrCreate()
df = spark.read.parquet(sys.argv[1])
names = {"AnonID": "uid", "Query": "q", "QueryTime": "ts", "ClickURL": "click", "ItemRank": "pos"}
df.select(*[df[a].alias(b) for a, b in names.items()]).write.saveAsTable("logs")
"""


@pytest.mark.slow
def test_cli_spark_table_in_a_hive_catalog(log_parquet: Path, tmp_path: Path) -> None:
    """``--spark-table logs`` with ``--spark-conf`` naming a Hive metastore: the table one
    process registered (several files) is released by another, byte-identical to the file."""
    conf = [
        "spark.sql.catalogImplementation=hive",
        f"spark.sql.warehouse.dir={tmp_path / 'wh'}",
        f"spark.hadoop.javax.jdo.option.ConnectionURL=jdbc:derby:;databaseName="
        f"{tmp_path / 'metastore'};create=true",
    ]
    env = os.environ | {"PYSPARK_PYTHON": sys.executable}
    r = subprocess.run(
        [sys.executable, "-c", HIVE_TABLE, str(log_parquet), *conf],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    common = [
        "release",
        "korolova",
        "--epsilon",
        "2.3",
        "--delta",
        "1e-4",
        "--max-queries",
        "5",
        "--max-clicks",
        "1",
        "--urls",
        "private",
        "--seed",
        "7",
        "--json",
    ]
    table = [
        "--spark-table",
        "logs",
        "--user-col",
        "uid",
        "--query-col",
        "q",
        "--time-col",
        "ts",
        "--url-col",
        "click",
        "--rank-col",
        "pos",
        "--engine",
        "spark",
        "--spark-master",
        "local[2]",
        *[x for c in conf for x in ("--spark-conf", c)],
    ]
    r = subprocess.run(
        [sys.executable, "-m", "searchveil", *common, "--out", str(tmp_path / "table"), *table],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    # the file's release by the Polars engine: in this process (the CLI's command, CliRunner)
    ref = CliRunner().invoke(
        app,
        [*common[:2], str(log_parquet), *common[2:], "--out", str(tmp_path / "file"),
         "--engine", "polars"],
    )  # fmt: skip
    assert ref.exit_code == 0, ref.output
    assert_same_release(tmp_path / "table", tmp_path / "file")
    prov = json.loads((tmp_path / "table.private.json").read_text())
    assert prov["inputs"][0]["table"] == "logs"
    assert prov["inputs"][0]["snapshot"]["files"] >= 1
