"""The Spark engine (marked ``spark``; CI runs it, Java 17 + pyspark from the dev extra): the
same releases as the in-memory path — bounded histograms *and* noisy outputs, since noise is
drawn on the driver from the same seeded source in the same order."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from _engine_cases import CASES, distinct_plans, same_tables
from searchveil import make_rng, read_log
from searchveil.cli import app
from searchveil.release import release_kanon, release_korolova, release_zealous
from searchveil.release.run import run_release

# the full tier: a JVM and a SparkSession per process (tests/test_spark_smoke.py is the
# default tier's one Spark test)
pytestmark = [pytest.mark.spark, pytest.mark.slow]
FN = {"korolova": release_korolova, "zealous": release_zealous, "kanon": release_kanon}


@pytest.fixture(scope="module")
def spark_master() -> str:
    from searchveil.engines.spark import spark_session

    spark_session("local[2]")
    return "local[2]"


#: the cases whose counts are released on the executors even though they are small (issue 40:
#: Korolova with the clicks of the released queries, ZEALOUS over clicks); the others' small
#: tables are released on the driver (``LOCAL_ROWS``), as a small log's are
ON_THE_CLUSTER = (0, 3)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_spark_equals_memory_and_polars(case: int, spark_master: str, aol_215_path: Path,
                                        aol_top1000_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    algo, params = CASES[case]
    for path in (aol_215_path, aol_top1000_path):
        # the small log on the executors too (the cost of a dozen stages on the larger one is
        # the standalone cluster test's, tests/test_spark_cluster.py)
        cluster = case in ON_THE_CLUSTER and path == aol_215_path
        monkeypatch.setenv("SEARCHVEIL_SPARK_LOCAL_ROWS", "0" if cluster else str(1 << 19))
        mem = FN[algo](read_log(path), params, rng=make_rng(4))
        sp = run_release("spark", algo, path, params, rng=make_rng(4), spark_master=spark_master)
        pl_ = run_release("polars", algo, path, params, rng=make_rng(4))
        assert same_tables(mem, sp) == [], (algo, path.name)
        assert same_tables(pl_, sp) == [], (algo, path.name)
        assert sp.inputs[0]["users"] == mem.inputs[0]["users"]
        assert sp.figures["engine"] == {"engine": "spark", "master": spark_master,
                                        "version": sp.figures["engine"]["version"]}  # fmt: skip
        assert "engine" not in sp.ledger  # the public ledger does not name the engine


@pytest.mark.slow
def test_cli_spark(tmp_path: Path, spark_master: str, aol_215_path: Path) -> None:
    out = tmp_path / "s"
    args = ["release", "zealous", str(aol_215_path), "--out", str(out), "--epsilon", "1",
            "--delta", "0.01", "--max-items", "2", "--guarantee", "indistinguishability",
            "--engine", "spark", "--spark-master", spark_master, "--seed", "1",
            "--json"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    led = json.loads((out / "ledger.json").read_text())
    prov = json.loads((tmp_path / "s.private.json").read_text())
    assert prov["figures"]["engine"]["engine"] == "spark" and led["seeded"] is True


FIGURES = {
    "korolova": ("users", "query_events", "query_events_after_bounding", "clicks",
                 "clicks_after_bounding", "distinct_queries", "bounded_query_volume"),
    "zealous": ("users", "items", "items_after_bounding", "distinct_items"),
}  # fmt: skip


@pytest.mark.parametrize("case", [i for i, (a, _) in enumerate(CASES) if a != "kanon"])
def test_spark_plan_figures(case: int, spark_master: str, aol_215_path: Path,
                                   aol_top1000_path: Path) -> None:  # fmt: skip
    """The counts come from the Spark kernel plan, with the in-memory release's figures."""
    algo, params = CASES[case]
    for path in (aol_215_path, aol_top1000_path):
        mem = FN[algo](read_log(path), params, rng=make_rng(7))
        sp = run_release("spark", algo, path, params, rng=make_rng(7), spark_master=spark_master)
        # sorted by user: the ordered pass (tests/test_spark_ordered.py); else the shuffle plan
        assert sp.report["engine_plan"] in ("spark ordered pass", "spark shuffled by user")
        for key in FIGURES[algo]:
            assert (key in sp.report) == (key in mem.report), (key, path.name)
            assert sp.report.get(key) == mem.report.get(key), (key, path.name)
        assert sp.inputs[0]["rows"] == mem.inputs[0]["rows"]
        assert sp.inputs[0]["sha256"] == mem.inputs[0]["sha256"]


def test_a_local_session_does_not_compress_its_shuffles(spark_master: str) -> None:
    """On a local master the shuffles are this machine's files of already-compressed blobs:
    Spark's own compression is off; each Python task's Polars has its share of the cores
    (docs/spark-perf.md)."""
    from searchveil.engines.spark import spark_session

    conf = spark_session(spark_master).sparkContext.getConf()
    assert conf.get("spark.shuffle.compress") == "false"
    if "POLARS_MAX_THREADS" not in os.environ:  # each task's Polars: its share of the cores
        want = str(max(1, (os.cpu_count() or 1) // 2))
        assert conf.get("spark.executorEnv.POLARS_MAX_THREADS") == want
    assert conf.get("spark.sql.codegen.wholeStage") == "false"


def test_a_local_sessions_workers_import_the_installed_pyspark(spark_master: str) -> None:
    """The executors' Python daemon is searchveil's (engines/spark_jvm.py): the workers import
    the installed, compiled pyspark, not the sources of Spark's zip of it. Where it is not
    named (another ``SPARK_HOME``, another Python) Spark's own daemon runs, from its zip."""
    import pyspark

    from searchveil.engines.spark import spark_session
    from searchveil.engines.spark_jvm import daemon_module

    def pyspark_file(batches):  # noqa: ANN001, ANN202 — pickled by value (a local function)
        import pyarrow as pa
        import pyspark

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"f": [pyspark.__file__]})

    spark = spark_session(spark_master)
    named = daemon_module()
    assert spark.sparkContext.getConf().get("spark.python.daemon.module") == named
    files = spark.range(0, 2, 1, 2).mapInArrow(pyspark_file, "f string").collect()
    assert len(files) == 2
    for row in files:
        if named is None:  # Spark's daemon: its zip first on the workers' path
            assert ".zip" in row.f, row.f
        else:
            assert ".zip" not in row.f and row.f.startswith(os.path.dirname(pyspark.__file__))


def test_a_local_sessions_workers_keep_the_pages_they_free(spark_master: str) -> None:
    """A local master's Python workers run with the allocator settings that keep freed pages
    (engines/spark_jvm.py), and the allocators they load take them: Polars' jemalloc reports
    no purging of dirty pages."""
    from searchveil.engines.spark import spark_session
    from searchveil.engines.spark_jvm import WORKER_ALLOCATORS, worker_allocators

    def settings(batches):  # noqa: ANN001, ANN202 — pickled by value (a local function)
        import os
        import subprocess
        import sys

        import pyarrow as pa

        for _ in batches:
            pass
        # a fresh process with this worker's environment: jemalloc reads it at its start
        conf = os.environ.get("_RJEM_MALLOC_CONF", "") + ",stats_print:true"
        env = dict(os.environ, _RJEM_MALLOC_CONF=conf)
        cmd = [sys.executable, "-c", "import polars"]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
        decay = [x.strip() for x in out.stderr.splitlines() if "opt.dirty_decay_ms" in x]
        row = {k: [os.environ.get(k)] for k in WORKER_ALLOCATORS}
        yield pa.RecordBatch.from_pydict(row | {"decay": [decay[0] if decay else ""]})

    ours = WORKER_ALLOCATORS["_RJEM_MALLOC_CONF"]
    mine = os.environ.get("_RJEM_MALLOC_CONF")  # Polars sets its own when it is imported
    assert worker_allocators()["_RJEM_MALLOC_CONF"] == (ours if mine is None else f"{mine},{ours}")
    spark = spark_session(spark_master)
    schema = ", ".join(f"{k} string" for k in [*WORKER_ALLOCATORS, "decay"])
    rows = spark.range(0, 2, 1, 2).mapInArrow(settings, schema).collect()
    assert len(rows) == 2
    for row in rows:
        for k, v in WORKER_ALLOCATORS.items():
            if k == "_RJEM_MALLOC_CONF":  # the driver's value (Polars'), searchveil's last
                assert row[k].endswith(v), row[k]
            else:
                assert row[k] == os.environ.get(k, v), k
        assert row["decay"].startswith("opt.dirty_decay_ms: -1"), row["decay"]


def test_spark_distinct_korolova(spark_master: str, aol_215_path: Path) -> None:
    """Korolova with distinct queries per user (each user's first d distinct queries)."""
    from searchveil import KorolovaParams

    params = KorolovaParams(d=3, K=2, b=0.5, b_q=1.0, url_selection="none", distinct=True)
    mem = release_korolova(read_log(aol_215_path), params, rng=make_rng(3))
    sp = run_release("spark", "korolova", aol_215_path, params, rng=make_rng(3),
                     spark_master=spark_master)  # fmt: skip
    assert sp.report["engine_plan"] in ("spark ordered pass", "spark shuffled by user")
    assert same_tables(mem, sp) == []
    for key in FIGURES["korolova"]:
        assert sp.report.get(key) == mem.report.get(key), key


def test_spark_unreadable_input(tmp_path: Path, spark_master: str) -> None:
    from searchveil import ZealousParams
    from searchveil.errors import InputFormatError

    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"not a parquet file at all")
    params = ZealousParams(m=2, tau=1, lam=1.0, tau_prime=3, item_type="queries",
                           guarantee="indistinguishability")  # fmt: skip
    with pytest.raises(InputFormatError):
        run_release("spark", "zealous", bad, params, rng=make_rng(1), spark_master=spark_master)


# Users interleaved in the file, raw text that differs only before normalisation at the same
# time (one event), null times (never merge), a (user, query, time) that recurs after another
# query (two events), empty queries and URLs, ids with spaces.
TRICKY = """AnonID\tQuery\tQueryTime\tItemRank\tClickURL
1\tFoo\t2006-03-01 10:00:00\t1\thttp://a
2\tfoo\t2006-03-01 10:00:00\t\t
1\tfoo \t2006-03-01 10:00:00\t2\thttp://b
1\tfoo  bar\t2006-03-01 10:01:00\t\t
 2\tFOO\t2006-03-01 10:00:00\t1\thttp://a
1\tFoo   Bar\t2006-03-01 10:01:00\t1\thttp://a
1\tx\t\t\t
1\tx\t\t1\thttp://c
3\t\t2006-03-01 11:00:00\t\t
1\tfoo\t2006-03-01 10:00:00\t1\thttp://a
3\t\t2006-03-01 11:00:00\t1\t\x20
2\tbar\t2006-03-01 10:05:00\t1\thttp://d
1\tbar\t2006-03-01 10:06:00\t\t
2\tfoo\t2006-03-01 10:06:00\t3\thttp://a
1\tx\t2006-03-01 10:07:00\t1\thttp://c
3\tz\t2006-03-01 11:01:00\t1\thttp://z
1\tx\t2006-03-01 10:07:00\t2\thttp://e
3\tZ\u00a0 Q\t2006-03-01 11:02:00\t\t
3\tz q\t2006-03-01 11:02:00\t1\thttp://q
"""


def _bounded_params() -> list[tuple[str, object]]:
    from searchveil import KorolovaParams, ZealousParams

    kor = dict(K=2, b=0.5, b_q=1.0)
    zeal = dict(tau=1, lam=1.0, tau_prime=3, guarantee="indistinguishability")
    out: list[tuple[str, object]] = [(a, p) for a, p in CASES if a != "kanon"]
    for d in (1, 2, 3, 100):
        out.append(("korolova", KorolovaParams(d=d, K=d, b=0.5, b_q=1.0, url_selection="none")))
        out.append(("korolova", KorolovaParams(d=d, **kor, url_selection="none", distinct=True)))
        out.append(("korolova", KorolovaParams(d=max(d, 2), K=max(d, 2), b=0.5, b_q=1.0,
                                               url_selection="private", d_c=d, b_c=1.0,
                                               url_K=d, url_b=1.0)))  # fmt: skip
        for item in ("queries", "clicks"):
            out.append(("zealous", ZealousParams(m=d, item_type=item, **zeal)))
    return distinct_plans(out)


@pytest.mark.slow
@pytest.mark.parametrize("normalize", [True, False])
def test_spark_bounded_counts_equal_memory(tmp_path: Path, spark_master: str, aol_215_path: Path,
                                           normalize: bool) -> None:  # fmt: skip
    """The shuffle plan's counts and figures (interleaved users: each user's rows moved to one
    partition) equal the in-memory bounding's, table by table."""
    from searchveil.engines.contract import NO_RNG
    from searchveil.engines.spark import SparkEngine
    from searchveil.release.korolova import korolova_counts
    from searchveil.release.zealous import zealous_counts

    tricky = tmp_path / "tricky.tsv"
    tricky.write_text(TRICKY)
    engine = SparkEngine(master=spark_master, normalize=normalize, plan="shuffle")
    keys = {"queries": ["query"], "clicks": ["query", "url"]}
    for path in (tricky, aol_215_path):
        log = read_log(path, normalize=normalize)
        for algo, params in _bounded_params():
            fn = korolova_counts if algo == "korolova" else zealous_counts
            mem = fn(log, params, rng=NO_RNG)
            sp = engine.bounded_counts(path, params.bounding_plan())
            assert sp.plan == "spark shuffled by user"
            assert sp.figures == mem.figures, (path.name, algo, params)
            # every input record says how the hash was taken (--fingerprint; memory: full)
            assert sp.input["fingerprint"] == mem.input["fingerprint"] == "full"
            assert sp.input == mem.input, (path.name, algo)
            for name, df in mem.counts.items():
                ks = keys.get(name, ["item", *([c for c in ("query", "url") if c in df.columns])])
                assert sp.table(name, ks).equals(mem.table(name, ks)), (path.name, algo, name)
            assert set(sp.counts) == set(mem.counts)


@pytest.mark.parametrize(
    "strategy", ["probe-reweight-2r", "probe-reweight", "dp-sips", "policy-gaussian"]
)
def test_spark_selection_equals_memory_and_polars(
    strategy: str, spark_master: str, aol_top1000_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``release korolova --selection`` (issue 24): the users' first items from Spark's kernel
    plan, the Polars ordered pass and memory give the same query and click tables under a
    seed. Issue 40: the rounds of probe-reweight-2r and DP-SIPS run on the executors (the
    small-table shortcut off); probe-reweight's small pools are released on the driver."""
    from searchveil.release.selection import SelectionParams, release_selection

    cluster = strategy in ("probe-reweight-2r", "dp-sips")
    if cluster:
        monkeypatch.setenv("SEARCHVEIL_SPARK_LOCAL_ROWS", "0")

    sp_ = SelectionParams(strategy=strategy, epsilon=20.0, delta=1e-5, d=40, d_c=3,
                       split=(1.0, 1.0, 1.0, 1.0))  # fmt: skip
    mem = release_selection(read_log(aol_top1000_path), sp_, rng=make_rng(4))
    spk = run_release(
        "spark", "selection", aol_top1000_path, sp_, rng=make_rng(4), spark_master=spark_master
    )
    pol = run_release("polars", "selection", aol_top1000_path, sp_, rng=make_rng(4))
    for name in ("queries", "clicks"):
        assert mem.tables[name].height > 0
        assert mem.tables[name].equals(spk.tables[name]), (strategy, name)
        assert pol.tables[name].equals(spk.tables[name]), (strategy, name)
    assert spk.report["engine_plan"] == "spark ordered pass"
    if cluster:  # the rounds ran on the executors: no pool came back
        assert spk.report["driver_rows"]["received"] < spk.report["pool_items"] / 4
    assert spk.report["users"] == mem.report["users"] == pol.report["users"]
    assert spk.report["query_events"] == mem.report["query_events"] == pol.report["query_events"]


def test_spark_tasks_noise_has_the_central_distribution(spark_master: str) -> None:
    """Issue 40: the noise a Spark task draws with its own secure source, on 120,000 rows
    of count 0 spread over several partitions and partial counts, follows the exact pmf and
    the central sampler's draws (χ², α = 1e-6) — one draw per row, whatever the partition."""
    import numpy as np
    import polars as pl
    from scipy import stats

    from searchveil.engines.spark import spark_session
    from searchveil.engines.spark_release import SparkCounts
    from searchveil.mechanisms.noise import DiscreteLaplace
    from searchveil.mechanisms.noisy_counts import NoisePlan, NoisyStep
    from searchveil.rng import SeededRandom
    from test_noise import chi2_pvalue

    n, noise = 120_000, DiscreteLaplace(3.0)
    keys = pl.Series([f"item {i}" for i in range(n)])
    # every count arrives as two partial rows (+1 and −1), as from two tasks
    half = pl.DataFrame({"query": keys, "count": np.ones(n, np.int64)})
    partial_counts = pl.concat([half, half.with_columns(count=pl.lit(-1, pl.Int64))])
    df = spark_session(spark_master).createDataFrame(partial_counts.to_arrow()).repartition(6)
    plan = NoisePlan((NoisyStep(noise, publish="v"),))
    got = SparkCounts.from_rows(df, ["query"]).release(plan, make_rng(None))
    x = got.rows.get_column("v").to_numpy()
    assert x.size == n and got.rows.get_column("query").n_unique() == n
    assert got.summary.items == n and got.summary.total == 0
    assert chi2_pvalue(x, noise.pmf, -15, 15) > 1e-6
    central = noise.sample(n, SeededRandom(3))
    edges = np.arange(-16, 18) - 0.5
    a, _ = np.histogram(np.clip(x, -16, 16), edges)
    c, _ = np.histogram(np.clip(central, -16, 16), edges)
    keep = (a + c) > 10
    assert stats.chi2_contingency(np.vstack([a[keep], c[keep]])).pvalue > 1e-6
