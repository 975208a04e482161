"""The Spark engine on a real standalone cluster (issues 32 and 40): a master and two 1-core
workers started on loopback from the installed PySpark's ``spark-class``, torn down whatever
happens. Four release kinds run through it from the CLI (``--spark-master spark://...``: a
driver in the CLI's process, executors in the workers' JVMs, the bounding code shipped to them)
and must write byte-identical releases to ``--engine polars`` and ``--engine memory`` under a
seed. The driver is deliberately small — a 512 MB JVM and ``spark.driver.maxResultSize`` 64 MB
— and one more release runs on a log whose users' pools (≈ 85 MB of Arrow) exceed that cap: the
rounds run on the executors, only the release comes back (issue 40). The releases and the check
of the shipped code run in one driver process (one JVM start and one executor launch: the time
of these tests is mostly that); the Polars and memory references run in this process.
Marked ``spark`` and ``slow``; CI runs it (``python -m pytest -m slow``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from searchveil.cli import app

pytestmark = [pytest.mark.spark, pytest.mark.slow]
runner = CliRunner()

START_TIMEOUT = 120  # seconds for the master and both workers to register
RUN_TIMEOUT = 600  # seconds for one release on the cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """Terminate each daemon's process group (the JVM and anything it started), then kill
    what is left after a bounded wait."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as r:
            return int(json.loads(r.read()).get("aliveworkers", 0))
    except OSError:
        return 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``spark://127.0.0.1:PORT`` of a master with two 1-core, 1 GB workers."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    tmp = tmp_path_factory.mktemp("cluster")
    port, ui = _free_port(), _free_port()
    env = os.environ | {
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(tmp),
        "PYSPARK_PYTHON": sys.executable,
    }
    daemons = [
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui),
        ]
    ]
    for i in range(2):
        daemons.append(
            [
                "org.apache.spark.deploy.worker.Worker",
                f"spark://127.0.0.1:{port}",
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(_free_port()),
                "--work-dir",
                str(tmp / f"w{i}"),
            ]
        )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, args in enumerate(daemons):
            log = (tmp / f"daemon{i}.log").open("wb")
            procs.append(
                subprocess.Popen(
                    [str(spark_class), *args],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + START_TIMEOUT
        while _alive_workers(ui) < 2:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                logs = "\n".join((tmp / f"daemon{i}.log").read_text()[-1500:] for i in range(3))
                pytest.fail(f"the standalone cluster did not come up:\n{logs}")
            time.sleep(1)
        yield f"spark://127.0.0.1:{port}"
    finally:
        _stop(procs)


def _cli(args: list[str], out: Path, engine: list[str]) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"PYSPARK_PYTHON": sys.executable}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "searchveil",
            *args,
            "--out",
            str(out),
            "--seed",
            "7",
            "--json",
            *engine,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )


def assert_same_release(a: Path, b: Path) -> None:
    """Every file written is byte-identical (the ledger's creation time aside)."""
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir()) and "ledger.json" in names
    for name in names:
        if name == "ledger.json":
            la, lb = json.loads((a / name).read_text()), json.loads((b / name).read_text())
            la.pop("created_utc"), lb.pop("created_utc")
            assert la == lb
        else:
            assert (a / name).read_bytes() == (b / name).read_bytes(), name


EPS = ["--epsilon", "2.3", "--delta", "1e-4"]
RELEASES = {
    "korolova": [
        "release",
        "korolova",
        *EPS,
        "--max-queries",
        "5",
        "--max-clicks",
        "1",
        "--urls",
        "private",
    ],
    "zealous": [
        "release",
        "zealous",
        "--epsilon",
        "1",
        "--delta",
        "1e-4",
        "--max-items",
        "2",
        "--item-type",
        "clicks",
        "--max-users",
        "2000",
    ],
    "probe-reweight-2r": [
        "release",
        "korolova",
        *EPS,
        "--selection",
        "probe-reweight-2r",
        "--max-clicks",
        "1",
        "--urls",
        "private",
        "--max-users",
        "2000",
    ],
    "dp-sips": [
        "release",
        "korolova",
        *EPS,
        "--selection",
        "dp-sips",
        "--max-queries",
        "10",
        "--max-clicks",
        "2",
        "--urls",
        "private",
        "--max-users",
        "2000",
    ],
}
#: the release on the log whose pools exceed the driver's result cap (issue 40)
BIG = ["release", "korolova", "--epsilon", "2.3", "--delta", "1e-7", "--selection",
       "probe-reweight-2r", "--max-queries", "8", "--max-users", "100000"]  # fmt: skip
SMALL_DRIVER = {
    "SEARCHVEIL_SPARK_DRIVER_MEMORY": "512m",
    "SEARCHVEIL_SPARK_MAX_RESULT_SIZE": "64m",
    "SEARCHVEIL_SPARK_LOCAL_ROWS": "0",
}  # every table on the executors, however small


@pytest.fixture(scope="module")
def log_parquet(tmp_path_factory: pytest.TempPathFactory, aol_top1000_path: Path) -> Path:
    """The 1,000-user AOL log as Parquet with small row groups: Spark cuts it into several
    partitions, so users straddle partitions and the driver joins them."""
    out = tmp_path_factory.mktemp("data") / "aol1000.parquet"
    df = pl.read_csv(aol_top1000_path, separator="\t", quote_char=None, infer_schema=False)
    df.with_columns(pl.col("AnonID").str.strip_chars().cast(pl.Int64)).write_parquet(
        out, row_group_size=25_000
    )
    return out


@pytest.fixture(scope="module")
def big_pools_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log whose users' pools are larger than the driver's 64 MB result cap: 25,000 users
    with 14 distinct queries each (one row per query, every row a pool row: 350,000 rows of
    ≈ 230-byte queries, ≈ 85 MB as Arrow ``user, item, rank``), a fifth of them from a shared
    head so that the release is not empty; written user by user as Parquet. Long queries keep
    the rows — the time of this test — few for the bytes."""
    import numpy as np

    g = np.random.default_rng(40)
    users, per = 25_000, 14
    pad = " with a long tail of words that makes the query about two hundred bytes" * 3
    head = np.array([f"head query {i}{pad}" for i in range(400)])
    tail = np.char.add("tail query ", g.integers(0, 10**12, users * per).astype(str))
    tail = np.char.add(tail, pad)
    q = np.where(g.random(users * per) < 0.2, head[g.integers(0, head.size, users * per)], tail)
    df = pl.DataFrame(
        {
            "AnonID": np.repeat(np.arange(users, dtype=np.int64), per),
            "Query": q,
            "QueryTime": "2006-03-01 10:00:00",
            "ItemRank": None,
            "ClickURL": None,
        }
    ).with_columns(pl.col("ItemRank").cast(pl.String), pl.col("ClickURL").cast(pl.String))
    # distinct queries within a user (a head query drawn twice is kept once)
    df = df.unique(["AnonID", "Query"], keep="first", maintain_order=True)
    out = tmp_path_factory.mktemp("big") / "big-pools.parquet"
    df.write_parquet(out, row_group_size=100_000)
    return out


def _args(kind: str, log: Path, out: Path, engine: list[str]) -> list[str]:
    r = RELEASES[kind] if kind in RELEASES else BIG
    return [r[0], r[1], str(log), *r[2:], "--out", str(out), "--seed", "7", "--json", *engine]


# One driver process on the cluster: each release through the CLI's command (CliRunner, the
# same code as ``python -m searchveil``), then the executors' view of the code they run.
DRIVER = """
import json, os, sys, time, traceback
from typer.testing import CliRunner
from searchveil.cli import app
from searchveil.engines.spark import spark_session
master, runs, result = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
done = {}
for kind, args in runs.items():
    t = time.perf_counter()
    r = CliRunner().invoke(app, args)
    err = "".join(traceback.format_exception(r.exception)) if r.exception else ""
    done[kind] = {"exit_code": r.exit_code, "output": (r.output + err)[-3000:],
                  "stdout": r.stdout if r.exit_code == 0 else "",
                  "seconds": round(time.perf_counter() - t, 1)}
spark = spark_session(master)
def where(batches):
    import pyarrow as pa, searchveil, socket, os
    for b in batches:
        yield pa.RecordBatch.from_pylist([{"file": searchveil.__file__, "pid": os.getpid()}])
got = spark.range(0, 4, numPartitions=4).mapInArrow(where, "file string, pid long").collect()
done["shipped"] = {"rows": [r.asDict() for r in got], "driver_pid": os.getpid()}
with open(result, "w") as fh:
    json.dump(done, fh)
"""


@pytest.fixture(scope="module")
def cluster_runs(
    cluster: str, log_parquet: Path, big_pools_log: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict]:
    """The Spark releases of every kind (``<dir>/<kind>``), the release of the big-pool log
    (``<dir>/big``) and the shipped-code check, run by one small driver process (512 MB,
    64 MB result cap) on the cluster."""
    d = tmp_path_factory.mktemp("cluster-runs")
    engine = ["--engine", "spark", "--spark-master", cluster]
    runs = {k: _args(k, log_parquet, d / k, engine) for k in sorted(RELEASES)}
    runs["big"] = _args("big", big_pools_log, d / "big", engine)
    r = subprocess.run(
        [sys.executable, "-c", DRIVER, cluster, json.dumps(runs), str(d / "result.json")],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        env=os.environ | {"PYSPARK_PYTHON": sys.executable} | SMALL_DRIVER,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    done = json.loads((d / "result.json").read_text())
    print({k: v.get("seconds") for k, v in done.items()})  # noqa: T201 - with -s: the cost
    return d, done


@pytest.mark.parametrize("kind", sorted(RELEASES))
def test_cluster_release_equals_polars_and_memory(
    kind: str, cluster: str, cluster_runs: tuple[Path, dict], log_parquet: Path, tmp_path: Path
) -> None:
    d, done = cluster_runs
    assert done[kind]["exit_code"] == 0, done[kind]["output"]
    for engine in ("polars", "memory"):
        r2 = runner.invoke(app, _args(kind, log_parquet, tmp_path / engine, ["--engine", engine]))
        assert r2.exit_code == 0, r2.output
        assert_same_release(d / kind, tmp_path / engine)
    prov = json.loads((d / f"{kind}.private.json").read_text())
    assert prov["figures"]["engine"]["master"] == cluster
    assert prov["figures"]["engine"]["engine"] == "spark"


def test_small_driver_releases_a_log_whose_pools_exceed_its_result_cap(
    cluster_runs: tuple[Path, dict], big_pools_log: Path, tmp_path: Path
) -> None:
    """Issue 40: the 512 MB driver with a 64 MB result cap releases probe-reweight-2r on a log
    whose pools are larger than the cap (the old engine collected every pool and failed);
    the release equals Polars' under a seed, and the driver received few more rows than it
    wrote (``--json``: ``private.report.driver_rows``)."""
    import pyarrow.parquet as pq

    d, done = cluster_runs
    assert done["big"]["exit_code"] == 0, done["big"]["output"]
    rows = pq.ParquetFile(big_pools_log).metadata.num_rows
    assert rows * 200 > 64 * 2**20  # ≥ 200 bytes of Arrow per pool row (user, item, rank)
    r2 = runner.invoke(app, _args("big", big_pools_log, tmp_path / "polars",
                                  ["--engine", "polars"]))  # fmt: skip
    assert r2.exit_code == 0, r2.output
    assert_same_release(d / "big", tmp_path / "polars")
    summary = json.loads(done["big"]["stdout"])
    got = summary["private"]["report"]["driver_rows"]
    written = got["written"]
    assert written == sum(summary["outputs"].values()) > 50
    assert got["received"] <= 2 * written + 500, got  # the release, a few rows per task
    assert summary["private"]["report"]["pool_items"] == rows


def test_cluster_executors_run_the_shipped_code(cluster_runs: tuple[Path, dict]) -> None:
    """The executors import searchveil from the zip the driver shipped (not whatever is
    installed on the workers), in processes other than the driver's."""
    shipped = cluster_runs[1]["shipped"]
    rows = shipped["rows"]
    assert len(rows) == 4
    assert all("searchveil.zip" in row["file"] for row in rows), rows
    assert all(row["pid"] != shipped["driver_pid"] for row in rows), rows


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``sc://127.0.0.1:PORT`` of a Spark Connect server (local[2]) started from the jar in
    PySpark's wheel, torn down whatever happens."""
    pytest.importorskip("grpc", reason="the Spark Connect client needs the `spark` extra")
    import pyspark

    tmp = tmp_path_factory.mktemp("connect")
    port = _free_port()
    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    args = [
        str(submit),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        "local[2]",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        "spark.ui.enabled=false",
        "spark-internal",
    ]
    env = os.environ | {"SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    log = tmp / "server.log"
    with log.open("wb") as fh:
        proc = subprocess.Popen(
            args, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=tmp, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while "Spark Connect server started" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail(f"the Spark Connect server did not start:\n{log.read_text()[-2000:]}")
            time.sleep(1)
        yield f"sc://127.0.0.1:{port}"
    finally:
        _stop([proc])


def test_spark_connect_release_equals_polars(
    connect_server: str, log_parquet: Path, tmp_path: Path
) -> None:
    """``--spark-remote sc://...``: the client ships the kernel to the server's executors
    (``addArtifacts``), and the release is byte-identical to ``--engine polars``."""
    kind = RELEASES["korolova"]
    args = [kind[0], kind[1], str(log_parquet), *kind[2:]]
    r = _cli(args, tmp_path / "spark", ["--engine", "spark", "--spark-remote", connect_server])
    assert r.returncode == 0, r.stderr[-3000:]
    r2 = runner.invoke(app, [*args, "--out", str(tmp_path / "polars"), "--seed", "7", "--json",
                             "--engine", "polars"])  # fmt: skip
    assert r2.exit_code == 0, r2.output
    assert_same_release(tmp_path / "spark", tmp_path / "polars")
    prov = json.loads((tmp_path / "spark.private.json").read_text())
    assert prov["figures"]["engine"]["remote"] == connect_server
