"""Issue 40's speed round: the tables Spark moves as Arrow blobs (engines/spark_blobs.py), the
tasks' blob stage (engines/spark_release.blob_partition) and the local JVM's options
(engines/spark_jvm.py) — run in this process, no JVM: what a Spark task does with its blobs is
checked against the central code on the same rows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from searchveil.engines.spark_blobs import (  # noqa: E402
    blob_frame,
    bucketed,
    noise_bucket_of,
    pack,
    shard_bits,
    shards,
    unpack,
)
from searchveil.engines.spark_release import (  # noqa: E402
    BlobStage,
    blob_partition,
    pool_figures,
    read_stage,
    unpersist,
)
from searchveil.mechanisms.noise import DiscreteLaplace  # noqa: E402
from searchveil.mechanisms.noisy_counts import (  # noqa: E402
    NoisePlan,
    NoisyStep,
    noise_buckets,
    seeded_steps,
)

PLAN = NoisePlan((NoisyStep(DiscreteLaplace(2.0), threshold=5, publish="v"),), small_counts=2)


def _partials(n: int = 3000, parts: int = 4, seed: int = 1) -> list[pl.DataFrame]:
    """Partial counts of ``n`` items spread over ``parts`` tasks (an item in several)."""
    gen = np.random.default_rng(seed)
    out = []
    for _ in range(parts):
        idx = gen.choice(n, size=n // 2, replace=False)
        out.append(
            pl.DataFrame({"query": [f"q{i}" for i in idx], "count": gen.integers(1, 9, idx.size)})
        )
    return out


def _batches(frames: list[pl.DataFrame], keys: list[str]) -> list[pa.RecordBatch]:
    pairs = [p for f in frames for p in bucketed(f, keys)]
    return blob_frame(pairs).to_batches()


def test_pack_round_trip_and_buckets_are_the_noise_buckets() -> None:
    df = _partials()[0]
    for compress in (False, True):
        assert unpack(pack(df, compress=compress)).equals(df)
    for bits in (5, 8):
        got = dict(bucketed(df, ["query"], bits))
        want = df.with_columns(b=pl.Series(shards(df, ["query"], bits)))
        assert set(got) == set(want.get_column("b").unique().to_list())
        assert len(got) > (32 if bits > 5 else 16)  # 8 bits: finer than the noise buckets
        for b, blob in got.items():
            part = unpack(blob)
            assert set(shards(part, ["query"], bits).tolist()) == {b}
            assert set(noise_buckets(part, ["query"]).tolist()) == {noise_bucket_of(b, bits)}
            assert part.height == want.filter(pl.col("b") == b).height


class _Conf:
    def __init__(self, value: str) -> None:
        self.conf = self
        self.value = value

    def get(self, _key: str) -> str:
        return self.value


def test_shard_bits_follow_the_shuffle_partitions() -> None:
    assert [shard_bits(_Conf(v)) for v in ("8", "1", "200", "4000", "auto")] == [5, 5, 10, 14, 10]


def test_unpersist_of_a_stopped_jvm_hides_nothing() -> None:
    """A failed job's cleanup (the JVM gone) must not replace the job's own error."""

    class Gone:
        def unpersist(self) -> None:
            raise ConnectionRefusedError(111, "Connection refused")

    unpersist(Gone())  # no exception


def test_blob_stage_sums_partials_and_draws_the_central_seeded_noise() -> None:
    """A task holding every bucket: the partial rows summed by key, then exactly the seeded
    draws of one machine's release on the summed table (and its summary figures)."""
    frames = _partials()
    total = pl.concat(frames).group_by("query").agg(pl.col("count").sum())
    st = BlobStage(["query"], PLAN, key=12345)
    out = pl.DataFrame(
        pl.from_arrow(
            pa.Table.from_batches(list(blob_partition(st, iter(_batches(frames, ["query"])))))
        )
    )
    res = read_stage(out, ["query"], ["v"])
    central = seeded_steps(total, ["query"], PLAN, 12345)
    assert res.rows.sort("query").equals(central.select("query", "count", "v").sort("query"))
    assert res.summary.items == total.height
    assert res.summary.total == int(total.get_column("count").sum())
    assert res.summary.small.get(1, 0) == total.filter(pl.col("count") == 1).height
    assert res.rows_in == sum(f.height for f in frames)


def test_a_bias_stage_keeps_its_eligible_items_as_one_blob() -> None:
    """A bias round's stage (``bias``: column, threshold, cutoff): of the seeded central draw's
    rows that pass min(threshold, cutoff), those at or above the threshold leave as rows and
    the keys of those at or above the cutoff are packed into one ``e`` blob — none when no row
    reaches the cutoff; the schema Spark is told has the blob column."""
    frames = _partials()
    total = pl.concat(frames).group_by("query").agg(pl.col("count").sum())
    plan = NoisePlan((NoisyStep(DiscreteLaplace(2.0), threshold=4, publish="v"),))
    central = seeded_steps(total, ["query"], plan, 99)
    for threshold, cutoff in ((7, 4), (4, 6), (7, 10**6)):
        st = BlobStage(["query"], plan, key=99, bias=("v", threshold, cutoff))
        assert st.schema().endswith("_b binary")
        got = pa.Table.from_batches(list(blob_partition(st, iter(_batches(frames, ["query"])))))
        assert got.schema.names[-1] == "_b"
        out = pl.DataFrame(pl.from_arrow(got))
        res = read_stage(out, ["query"], ["v"])
        want = central.filter(pl.col("v") >= threshold).select("query", "count", "v")
        assert res.rows.sort("query").equals(want.sort("query"))
        blobs = out.filter(pl.col("_kind") == "e").get_column("_b").to_list()
        eligible = central.filter(pl.col("v") >= cutoff).get_column("query")
        if eligible.len():
            (blob,) = blobs
            assert unpack(blob).get_column("query").sort().equals(eligible.sort())
        else:
            assert blobs == []
        assert res.summary.items == total.height


def test_a_secure_stage_draws_in_chunks_as_one_machine_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A task's secure draw (no seed) goes through the one-machine path: the summed rows in
    chunks of ``CHUNK_ROWS`` (the sampler's fastest size; its temporaries stay small), every
    row drawn once; the rows that leave are those whose noisy count passes."""
    from searchveil.mechanisms import noisy_counts

    monkeypatch.setattr(noisy_counts, "CHUNK_ROWS", 256)
    sizes: list[int] = []
    draw = DiscreteLaplace.sample

    def spy(self: DiscreteLaplace, size: int, rng: object) -> np.ndarray:
        sizes.append(size)
        return draw(self, size, rng)  # type: ignore[arg-type]

    monkeypatch.setattr(DiscreteLaplace, "sample", spy)
    frames = _partials()
    total = pl.concat(frames).group_by("query").agg(pl.col("count").sum())
    st = BlobStage(["query"], PLAN, key=None)
    out = pl.DataFrame(
        pl.from_arrow(
            pa.Table.from_batches(list(blob_partition(st, iter(_batches(frames, ["query"])))))
        )
    )
    res = read_stage(out, ["query"], ["v"])
    assert sum(sizes) == total.height > 256 and max(sizes) == 256
    assert (res.rows.get_column("v") >= 5).all() and res.summary.items == total.height


def test_blob_stage_within_domain_and_an_empty_task() -> None:
    frames = _partials()
    total = pl.concat(frames).group_by("query").agg(pl.col("count").sum())
    keep = ["q1", "q2", "q3", "q2999", "nowhere"]
    st = BlobStage(["query"], None, within=("query", keep))
    out = pl.DataFrame(
        pl.from_arrow(
            pa.Table.from_batches(list(blob_partition(st, iter(_batches(frames, ["query"])))))
        )
    )
    want = total.filter(pl.col("query").is_in(keep)).sort("query")
    assert out.sort("query").equals(want.cast({"count": pl.Int64}))
    # a task whose partition holds no blob (more partitions than buckets), with pool figures
    fig = BlobStage(["item"], PLAN, key=None, carry=("first",), figures=3)
    empty = list(blob_partition(fig, iter([])))
    res = read_stage(
        pl.DataFrame(pl.from_arrow(pa.Table.from_batches(empty))), ["item"], ["v", "first"]
    )
    assert res.rows.height == 0 and res.summary.items == 0 and res.extra["items"] == 0


def test_pool_figures_from_per_item_sums() -> None:
    per = pl.DataFrame(
        {"item": ["a", "b", "c", "d"], "h": [1, 3, 1, 1], "f": [1, 2, 0, 1], "r0": [0, 0, 5, 2]}
    )
    assert pool_figures(per, 3) == {
        "rows": 6,
        "rows_first_d": 4,
        "items": 4,
        "single_items": 3,
        "single_first_d": 2,
    }


def test_driver_java_options_use_a_prepared_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from searchveil.engines import spark_jvm

    monkeypatch.setenv("SEARCHVEIL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("SEARCHVEIL_SPARK_CDS", raising=False)
    path = spark_jvm.archive_path()
    assert path.parent == tmp_path and path.suffix == ".jsa"
    assert spark_jvm.driver_java_options() == spark_jvm.CLIENT_COMPILER
    path.write_bytes(b"not a real archive")
    opts = spark_jvm.driver_java_options()
    assert f"-XX:SharedArchiveFile={path}" in opts and "-Xshare:auto" in opts
    monkeypatch.setenv("SEARCHVEIL_SPARK_CDS", "0")
    assert spark_jvm.driver_java_options() == spark_jvm.CLIENT_COMPILER


def test_the_daemon_puts_the_installed_pyspark_before_sparks_zip() -> None:
    """The executors' daemon moves what Spark put under ``$SPARK_HOME/python/lib`` (its zip
    of pyspark's sources, py4j's) behind everything else, in order; nothing is dropped."""
    from _searchveil_spark_daemon import installed_first

    home = os.path.join(os.sep, "opt", "site", "pyspark")
    lib = os.path.join(home, "python", "lib")
    path = [
        os.path.join(lib, "pyspark.zip"),
        os.path.join(lib, "py4j-src.zip"),
        "/x/jars/core.jar",
        "/opt/site",
        os.path.join(home, "python", "libx"),
    ]
    assert installed_first(path, home) == [
        "/x/jars/core.jar",
        "/opt/site",
        os.path.join(home, "python", "libx"),
        os.path.join(lib, "pyspark.zip"),
        os.path.join(lib, "py4j-src.zip"),
    ]
    assert installed_first(path, None) == path
    assert installed_first(path, "/elsewhere") == path


def test_the_daemon_is_named_only_for_the_installed_pyspark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's zip is a copy of the installed package only when ``$SPARK_HOME`` is that
    package; the workers must run this Python; ``SEARCHVEIL_SPARK_DAEMON=0`` turns it off."""
    import pyspark
    import pyspark.find_spark_home

    from searchveil.engines import spark_jvm

    # a pip-installed pyspark's layout: the package, and its zip under python/lib
    package = tmp_path / "site" / "pyspark"
    (package / "python" / "lib").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.setattr(pyspark, "__file__", str(package / "__init__.py"))
    monkeypatch.delenv("SEARCHVEIL_SPARK_DAEMON", raising=False)
    monkeypatch.setenv("SPARK_HOME", str(package))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    assert spark_jvm.daemon_module() is None  # no zip: nothing to avoid
    (package / "python" / "lib" / "pyspark.zip").write_bytes(b"")
    assert spark_jvm.daemon_module() == spark_jvm.DAEMON_MODULE == "_searchveil_spark_daemon"
    monkeypatch.delenv("SPARK_HOME")  # PySpark finds the package itself
    monkeypatch.setattr(pyspark.find_spark_home, "_find_spark_home", lambda: str(package))
    assert spark_jvm.daemon_module() == spark_jvm.DAEMON_MODULE
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))  # another Spark: its own zip
    assert spark_jvm.daemon_module() is None
    monkeypatch.setenv("SPARK_HOME", str(package))
    monkeypatch.setenv("PYSPARK_PYTHON", str(tmp_path / "python"))  # another Python
    assert spark_jvm.daemon_module() is None
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SEARCHVEIL_SPARK_DAEMON", "0")
    assert spark_jvm.daemon_module() is None


def test_the_workers_allocators_keep_pages_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A local master's workers get the settings that keep freed pages; a variable the
    driver's environment sets already is the user's (the workers inherit it) — but jemalloc's,
    which Polars sets in every process that imports it, gets searchveil's options after it —,
    and ``SEARCHVEIL_SPARK_ALLOCATORS=0`` sets none."""
    from searchveil.engines import spark_jvm

    for k in [*spark_jvm.WORKER_ALLOCATORS, "SEARCHVEIL_SPARK_ALLOCATORS"]:
        monkeypatch.delenv(k, raising=False)
    got = spark_jvm.worker_allocators()
    assert got["_RJEM_MALLOC_CONF"] == "dirty_decay_ms:-1,narenas:1"
    assert got["MIMALLOC_PURGE_DELAY"] == "-1"
    assert int(got["MALLOC_MMAP_THRESHOLD_"]) == 32 << 20  # glibc's largest
    assert int(got["MALLOC_TRIM_THRESHOLD_"]) == 4 << 30
    monkeypatch.setenv("MIMALLOC_PURGE_DELAY", "10")
    assert set(spark_jvm.worker_allocators()) == set(got) - {"MIMALLOC_PURGE_DELAY"}
    monkeypatch.setenv("_RJEM_MALLOC_CONF", "dirty_decay_ms:500,thp:always")
    assert spark_jvm.worker_allocators()["_RJEM_MALLOC_CONF"] == (
        "dirty_decay_ms:500,thp:always,dirty_decay_ms:-1,narenas:1"
    )
    monkeypatch.setenv("SEARCHVEIL_SPARK_ALLOCATORS", "0")
    assert spark_jvm.worker_allocators() == {}


@pytest.mark.slow
@pytest.mark.spark
def test_spark_prepare_writes_an_archive_a_jvm_maps(tmp_path: Path) -> None:
    """``searchveil spark prepare`` (~40 s): an archive in the cache, written once; a JVM
    started with it maps it (``-Xshare:on`` fails when it cannot)."""
    env = dict(os.environ, SEARCHVEIL_CACHE_DIR=str(tmp_path))
    cmd = [sys.executable, "-m", "searchveil", "spark", "prepare", "--json"]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert first.returncode == 0, first.stderr[-2000:]
    assert '"written": true' in first.stdout
    archives = list(tmp_path.glob("*.jsa"))
    assert len(archives) == 1 and archives[0].stat().st_size > 10 << 20
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert again.returncode == 0 and '"written": false' in again.stdout
    # a local session's JVM maps it: with -Xshare:on it would not start if it could not
    code = (
        "from searchveil.engines.spark import spark_session; "
        "from searchveil.engines.spark_jvm import driver_java_options as o; "
        "s = spark_session('local[1]', conf=(('spark.driver.extraJavaOptions', "
        "o().replace('-Xshare:auto', '-Xshare:on')),)); "
        "print('rows', s.range(3).count())"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0 and "rows 3" in run.stdout, run.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.parametrize(
    "extra",
    [
        ["--max-queries", "5", "--max-clicks", "1"],
        ["--selection", "probe-reweight-2r", "--max-clicks", "1"],
    ],
    ids=["korolova", "probe-reweight-2r"],
)
def test_finer_shards_release_the_seeded_bytes(tmp_path: Path, extra: list[str]) -> None:
    """64 shuffle partitions make 8-bit shards (a seeded stage then moves whole noise buckets,
    an unseeded one shards): the release on the executors equals the in-memory one under a
    seed, file for file — on a 20,000-user synthetic log, where tens of rows pass (a stage
    that split a noise bucket over tasks would draw other noise and fail this)."""
    sample = (
        Path(__file__).resolve().parents[1] / "src/searchveil/data/aol-gayo-avello-215-users.tsv"
    )
    log = tmp_path / "syn.parquet"
    sv = [sys.executable, "-m", "searchveil"]
    run = subprocess.run(
        [
            *sv,
            "synth",
            "--like",
            str(sample),
            "--users",
            "20000",
            "--rows",
            "400000",
            "--out",
            str(log),
            "--seed",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    base = [
        "release",
        "korolova",
        str(log),
        "--epsilon",
        "5",
        "--delta",
        "1e-6",
        "--max-users",
        "100000",
        "--urls",
        "private",
        "--seed",
        "1",
        *extra,
    ]
    env = dict(os.environ, SEARCHVEIL_SPARK_LOCAL_ROWS="0")
    spark = [
        *sv,
        *base,
        "--out",
        str(tmp_path / "spark"),
        "--engine",
        "spark",
        "--spark-master",
        "local[2]",
        "--spark-conf",
        "spark.sql.shuffle.partitions=64",
        # (a small log: Spark would merge the 64 partitions into a few)
        "--spark-conf",
        "spark.sql.adaptive.coalescePartitions.enabled=false",
    ]
    run = subprocess.run(spark, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    mem = [*sv, *base, "--out", str(tmp_path / "memory"), "--engine", "memory"]
    run = subprocess.run(mem, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    names = sorted(p.name for p in (tmp_path / "memory").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "spark").iterdir())
    assert len((tmp_path / "memory" / "queries.tsv").read_text().splitlines()) > 20
    for name in names:
        if name != "ledger.json":
            assert (tmp_path / "spark" / name).read_bytes() == (
                tmp_path / "memory" / name
            ).read_bytes(), name


def test_cores_of_a_classic_and_a_connect_session() -> None:
    from searchveil.engines.spark_blobs import cores

    class Conf:
        def __init__(self, v: str) -> None:
            self.v = v

        def get(self, _key: str) -> str:
            return self.v

    class Classic:
        class sparkContext:  # noqa: N801 - the attribute's name
            defaultParallelism = 6

    class Connect:
        def __init__(self, v: str) -> None:
            self.conf = Conf(v)

        @property
        def sparkContext(self) -> None:  # noqa: N802
            raise RuntimeError("not supported in Spark Connect")

    assert cores(Classic()) == 6
    assert cores(Connect("12")) == 12
    assert cores(Connect("auto")) == 8


@pytest.mark.parametrize(
    ("master", "cores", "threads"),
    [
        ("local", 8, 8),  # one task at a time: every core
        ("local[2]", 8, 4),
        ("local[2]", 2, 1),
        ("local[*]", 8, 1),
        ("local[4, 3]", 8, 2),  # with a number of task failures
        ("local[16]", 8, 1),  # more tasks than cores: still one
        ("local-cluster[2,1,1024]", 8, None),
        ("spark://host:7077", 8, None),
    ],
)
def test_polars_threads_per_local_task(monkeypatch, master: str, cores: int, threads) -> None:  # noqa: ANN001
    """A local master's tasks share the machine's cores: each Python task's Polars gets its
    share (the executors' ``POLARS_MAX_THREADS``), a cluster's are left alone."""
    from searchveil.engines.spark import local_task_threads

    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert local_task_threads(master) == threads


@pytest.mark.parametrize(
    ("pieces", "slots", "tasks"),
    [
        (15, 2, 4),  # 20M rows on 2 cores: at most 4 pieces a task
        (3, 2, 2),
        (1, 2, 1),  # never more tasks than pieces
        (15, 16, 15),
        (1000, 100, 250),  # a cluster: its slots, or more when a task would hold > 4 pieces
        (1000, 400, 400),
    ],
)
def test_a_round_task_reads_at_most_four_pieces_pools(pieces: int, slots: int, tasks: int) -> None:
    from searchveil.engines.spark_kernel import POOL_PIECES, pool_tasks

    assert pool_tasks(pieces, slots) == tasks
    assert -(-pieces // tasks) <= POOL_PIECES or tasks == slots
