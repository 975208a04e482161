"""Spark's ordered pass (issue 17): the bounding kernel on every partition of user-sorted
input, the partitions joined on the driver, the rows shuffled by user when users are not
contiguous.

The partition function (:func:`partition_rows`) and the driver's join (:func:`join_partitions`)
are plain Polars/Arrow: the first tests run them on hand-cut partitions without Spark (every
cut of a tricky log, empty partitions, one row per partition, chunks of two rows), the
aggregation done as Spark does it. The Spark tests (marked) cut real partitions from Parquet
files with tiny row groups and from text files, and run the CLI under ``spark-submit``.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from _engine_cases import CASES, distinct_plans
from searchveil import KorolovaParams, ZealousParams, read_log
from searchveil.bounding import NotContiguous
from searchveil.cli import app
from searchveil.engines import spark_ordered
from searchveil.engines.contract import NO_RNG
from searchveil.engines.spark_ordered import (
    PartitionInput,
    join_partitions,
    partition_rows,
)
from searchveil.release.korolova import korolova_counts
from searchveil.release.zealous import zealous_counts

# Users contiguous (sorted), with what makes a boundary hard: raw text equal only after
# normalisation at the same time (one event, whichever side of a cut), null times (never one
# event), a (query, time) that recurs after another query (two events), a user with many rows
# (spans 3+ partitions when cut finely), users with a single row, empty queries and URLs.
SORTED = """AnonID\tQuery\tQueryTime\tItemRank\tClickURL
1\tFoo\t2006-03-01 10:00:00\t1\thttp://a
1\tfoo \t2006-03-01 10:00:00\t2\thttp://b
1\tFOO\t2006-03-01 10:00:00\t\t
1\tfoo  bar\t2006-03-01 10:01:00\t\t
1\tFoo   Bar\t2006-03-01 10:01:00\t1\thttp://a
1\tx\t\t\t
1\tx\t\t1\thttp://c
1\tfoo\t2006-03-01 10:00:00\t1\thttp://a
1\tbar\t2006-03-01 10:06:00\t\t
1\tx\t2006-03-01 10:07:00\t1\thttp://c
1\tx\t2006-03-01 10:07:00\t2\thttp://e
1\ty\t2006-03-01 10:08:00\t1\thttp://c
1\tFoo\t2006-03-01 10:09:00\t1\thttp://a
2\tfoo\t2006-03-01 10:00:00\t\t
3\t\t2006-03-01 11:00:00\t\t
3\t\t2006-03-01 11:00:00\t1\t\x20
3\tz\t2006-03-01 11:01:00\t1\thttp://z
3\tZ\u00a0 Q\t2006-03-01 11:02:00\t\t
3\tz q\t2006-03-01 11:02:00\t1\thttp://q
4\tbar\t2006-03-01 10:05:00\t1\thttp://d
5\tfoo\t2006-03-01 10:06:00\t3\thttp://a
5\tfoo\t2006-03-01 10:06:00\t4\thttp://b
5\tbar\t\t\t
"""

# user 1 again after user 2: not contiguous
UNSORTED = SORTED.replace("2\tfoo\t2006-03-01 10:00:00\t\t\n", "") + "1\tlate\t\t\t\n"

KEYS = {"queries": ["query"], "clicks": ["query", "url"]}


def _params() -> list[tuple[str, Any]]:
    kor = dict(K=2, b=0.5, b_q=1.0)
    zeal = dict(tau=1, lam=1.0, tau_prime=3, guarantee="indistinguishability")
    out: list[tuple[str, Any]] = [(a, p) for a, p in CASES if a != "kanon"]
    for d in (1, 2, 3, 7):
        out.append(("korolova", KorolovaParams(d=d, K=d, b=0.5, b_q=1.0, url_selection="none")))
        out.append(("korolova", KorolovaParams(d=d, **kor, url_selection="none", distinct=True)))
        out.append(("korolova", KorolovaParams(d=max(d, 2), K=max(d, 2), b=0.5, b_q=1.0,
                                               url_selection="private", d_c=d, b_c=1.0,
                                               url_K=d, url_b=1.0)))  # fmt: skip
        for item in ("queries", "clicks"):
            out.append(("zealous", ZealousParams(m=d, item_type=item, **zeal)))
    return distinct_plans(out)


def _columns(path: Path) -> pl.DataFrame:
    """The columns Spark hands the partitions for a text file (every field as text)."""
    df = pl.read_csv(path, separator="\t", quote_char=None, infer_schema=False)
    return df.select("AnonID", "Query", "QueryTime", "ClickURL")


def _simulate(df: pl.DataFrame, cuts: list[int], params: Any, normalize: bool) -> Any:
    """The kernel over the partitions ``df[cuts[i]:cuts[i+1]]``, aggregated as on Spark."""
    bp = params.bounding_plan()
    spec = bp.kernel_spec(normalize=normalize)
    how = PartitionInput(bp, spec, user_numeric=False, with_url=bp.with_url, parquet=False)
    bounds = [0, *cuts, df.height]
    outs = []
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        part = df.slice(a, b - a).to_arrow().cast(
            pa.schema([(c, pa.string()) for c in df.columns])
        )  # fmt: skip
        outs += partition_rows(iter(part.to_batches()), how, i)
    out = pl.DataFrame(
        pl.from_arrow(pa.Table.from_batches(outs, schema=spark_ordered.OUTPUT_SCHEMA))
    )
    return join_partitions(out, bp, spec, pl.String)


def _check(path: Path, cut_sets: list[list[int]], normalize: bool) -> int:
    log = read_log(path, normalize=normalize)
    df = _columns(path)
    n = 0
    for algo, params in _params():
        fn = korolova_counts if algo == "korolova" else zealous_counts
        mem = fn(log, params, rng=NO_RNG)
        for cuts in cut_sets:
            counts, figures, rows = _simulate(df, cuts, params, normalize)
            assert rows == log.df.height
            assert figures == mem.figures, (algo, params, cuts)
            assert set(counts) == set(mem.counts)
            for name, got in counts.items():
                ks = KEYS.get(name, ["item", *[c for c in ("query", "url") if c in got.columns]])
                g = got.select(*ks, pl.col("count").cast(pl.Int64)).sort(ks)
                assert g.equals(mem.table(name, ks)), (algo, params, cuts, name)
            n += 1
    return n


# ~35 s: the full tier (the default tier's Spark test is test_spark_smoke.py)
@pytest.mark.slow
@pytest.mark.parametrize("normalize", [True, False])
def test_partition_pass_equals_memory_every_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, normalize: bool
) -> None:
    """Every single cut, every row its own partition, empty partitions, 3-way cuts; chunks of
    two rows inside a partition (the open run carried from chunk to chunk)."""
    monkeypatch.setattr(spark_ordered, "CHUNK_ROWS", 2)
    path = tmp_path / "sorted.tsv"
    path.write_text(SORTED)
    h = SORTED.count("\n") - 1
    cut_sets = [[]] + [[i] for i in range(1, h)]
    cut_sets += [list(range(1, h)), [0, 0, 3, 3, h, h], [2, 5, 9], [4, 4, 8, 12], [13, 14, 19]]
    assert _check(path, cut_sets, normalize) > 0


def test_partition_pass_detects_repeated_users(tmp_path: Path) -> None:
    """A user whose rows come back later is caught inside a partition and across partitions."""
    path = tmp_path / "unsorted.tsv"
    path.write_text(UNSORTED)
    df = _columns(path)
    params = KorolovaParams(d=2, K=2, b=0.5, b_q=1.0, url_selection="none")
    for cuts in ([], [5], [13], [13, 18], list(range(1, df.height))):
        with pytest.raises(NotContiguous):
            _simulate(df, cuts, params, True)


def test_partition_pass_aol(aol_215_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 215-user AOL log cut into 7 partitions of uneven size, chunks of 500 rows."""
    monkeypatch.setattr(spark_ordered, "CHUNK_ROWS", 500)
    h = read_log(aol_215_path).df.height
    cuts = sorted({h // 7 * i + (i * 37) % 101 for i in range(1, 7)})
    log = read_log(aol_215_path)
    df = _columns(aol_215_path)
    for algo, params in [(a, p) for a, p in CASES if a != "kanon"]:
        fn = korolova_counts if algo == "korolova" else zealous_counts
        mem = fn(log, params, rng=NO_RNG)
        counts, figures, _ = _simulate(df, cuts, params, True)
        assert figures == mem.figures, algo


def test_piece_frames_read_every_row_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executors' Parquet reader (Polars slices of whole row groups; a row group above
    ``BIG_GROUP`` streamed by pyarrow) gives every row of a piece once, in file order, in
    frames of about ``CHUNK_ROWS`` rows, whichever row groups the piece starts at; a damaged
    file is the input's error."""
    import pyarrow.parquet as pq

    from searchveil.errors import InputFormatError

    monkeypatch.setattr(spark_ordered, "CHUNK_ROWS", 10)
    monkeypatch.setattr(spark_ordered, "BIG_GROUP", 12)
    n = 200
    df = pl.DataFrame(
        {
            "AnonID": [i // 3 for i in range(n)],
            "Query": [f"q{i}" for i in range(n)],
            "QueryTime": [None if i % 7 else "2006-03-01 10:00:00" for i in range(n)],
            "ClickURL": [f"u{i}" if i % 2 else None for i in range(n)],
        }
    )
    path = tmp_path / "groups.parquet"
    with pq.ParquetWriter(path, df.to_arrow().schema) as w:
        lo = 0
        for size in (3, 4, 5, 30, 1, 2, 13, 40, 6, 9, 11, 76):  # 30, 13, 40, 76 > BIG_GROUP
            w.write_table(df.slice(lo, size).to_arrow())
            lo += size
    f = pq.ParquetFile(path)
    assert f.metadata.num_row_groups == 12
    cols = ["AnonID", "Query", "QueryTime"]
    for groups in [tuple(range(12)), (0, 1, 2), (3,), (4, 5, 6, 7), (8, 9, 10, 11), (5,)]:
        frames = list(spark_ordered.piece_frames(str(path), f, groups, cols))
        want = pl.DataFrame(pl.from_arrow(f.read_row_groups(list(groups), columns=cols)))
        got = pl.concat(frames)
        assert got.equals(want), groups
        assert all(fr.height <= 10 + 12 for fr in frames)  # < CHUNK_ROWS + BIG_GROUP
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(path.read_bytes()[:4] + b"\0" * 64 + path.read_bytes()[68:])
    with pytest.raises(InputFormatError):
        list(spark_ordered.piece_frames(str(bad), pq.ParquetFile(bad), (0, 1, 2), cols))


# ------------------------------------------------------------------------------------ Spark


def _tiny_parquet(src: Path, dst: Path, row_group: int, user_int: bool) -> Path:
    df = pl.read_csv(src, separator="\t", quote_char=None, infer_schema=False)
    if user_int:
        df = df.with_columns(pl.col("AnonID").str.strip_chars().cast(pl.Int64))
    df.write_parquet(dst, row_group_size=row_group)
    return dst


@pytest.fixture
def small_splits() -> Any:
    """Spark cuts files into partitions of about 1 KB (many partitions, some empty)."""
    from searchveil.engines.spark import spark_session

    spark = spark_session("local[2]")
    old = {k: spark.conf.get(k) for k in ("spark.sql.files.maxPartitionBytes",
                                          "spark.sql.files.openCostInBytes")}  # fmt: skip
    spark.conf.set("spark.sql.files.maxPartitionBytes", "1k")
    spark.conf.set("spark.sql.files.openCostInBytes", "0")
    yield spark
    for k, v in old.items():
        spark.conf.set(k, v)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("scan", ["spark", "auto"])
def test_spark_ordered_pass_equals_memory(
    tmp_path: Path,
    small_splits: Any,
    aol_215_path: Path,
    scan: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The ordered pass on real Spark partitions: Parquet with 3-row row groups (text and
    integer ids) and a text file, cut into ~1 KB splits (``scan="spark"``: Spark's reader) or
    read by the executors in pieces of a few row groups (``"auto"``: a Parquet file, pieces of
    ≥ 4 rows); equal to the in-memory bounding."""
    from searchveil.engines.spark import ORDERED_PLAN_NAME, PIECES_PLAN_NAME, SparkEngine

    monkeypatch.setattr(spark_ordered, "PIECE_ROWS", 4)

    sorted_tsv = tmp_path / "sorted.tsv"
    sorted_tsv.write_text(SORTED)
    files = [
        sorted_tsv,
        _tiny_parquet(sorted_tsv, tmp_path / "sorted.parquet", 3, user_int=False),
        _tiny_parquet(sorted_tsv, tmp_path / "sorted-int.parquet", 2, user_int=True),
        _tiny_parquet(aol_215_path, tmp_path / "aol.parquet", 500, user_int=True),
    ]
    engine = SparkEngine(master="local[2]", plan="ordered", scan=scan)
    parts = small_splits.read.parquet(str(files[1])).rdd.getNumPartitions()
    assert parts >= 5  # the boundaries really occur
    every = [c for c in _params() if getattr(c[1], "d", getattr(c[1], "m", 0)) in (1, 3, 5)]
    cases = {"sorted.parquet": every, "aol.parquet": _params()[:2]}
    for path in files:
        # ~1 KB splits for the tiny logs, ~32 KB (≈ 10 partitions) for the AOL one
        small_splits.conf.set(
            "spark.sql.files.maxPartitionBytes", "32k" if "aol" in path.name else "1k"
        )
        log = read_log(path)
        for algo, params in cases.get(path.name, _params()[:4]):
            fn = korolova_counts if algo == "korolova" else zealous_counts
            mem = fn(log, params, rng=NO_RNG)
            sp = engine.bounded_counts(path, params.bounding_plan())
            direct = scan == "auto" and path.suffix == ".parquet"
            assert sp.plan == (PIECES_PLAN_NAME if direct else ORDERED_PLAN_NAME)
            assert sp.figures == mem.figures, (path.name, algo, params)
            assert sp.input == mem.input, path.name
            assert set(sp.counts) == set(mem.counts)
            for name, df in mem.counts.items():
                ks = KEYS.get(name, ["item", *[c for c in ("query", "url") if c in df.columns]])
                assert sp.table(name, ks).equals(mem.table(name, ks)), (path.name, algo, name)


@pytest.mark.spark
@pytest.mark.slow
def test_the_rounds_read_several_pieces_pools_a_task(
    tmp_path: Path, aol_215_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The selection's rounds run on the pools of a Parquet file read in many pieces (500-row
    row groups, pieces of ≥ 4 rows), every table on the executors: each round's task reads
    several pieces' pools (``pool_tasks``: fewer tasks than pieces, merged without moving a
    row — users straddle the pieces), and the release equals the in-memory one under a seed."""
    from searchveil import make_rng
    from searchveil.engines import spark_kernel
    from searchveil.release.run import run_release
    from searchveil.release.selection import SelectionParams, release_selection

    monkeypatch.setattr(spark_ordered, "PIECE_ROWS", 4)
    monkeypatch.setenv("SEARCHVEIL_SPARK_LOCAL_ROWS", "0")
    path = _tiny_parquet(aol_215_path, tmp_path / "aol.parquet", 500, user_int=True)
    seen: list[tuple[int, int]] = []
    tables = spark_kernel.KernelResult.pool_tables

    def spy(self: Any) -> Any:
        queries, clicks = tables(self)
        seen.append((self.tasks, queries.pools.rdd.getNumPartitions()))
        return queries, clicks

    monkeypatch.setattr(spark_kernel.KernelResult, "pool_tables", spy)
    params = SelectionParams(
        strategy="probe-reweight-2r",
        epsilon=20.0,
        delta=1e-5,
        d=40,
        d_c=3,
        split=(1.0, 1.0, 1.0, 1.0),
    )
    spk = run_release("spark", "selection", path, params, rng=make_rng(4), spark_master="local[2]")
    mem = release_selection(read_log(path), params, rng=make_rng(4))
    ((tasks, parts),) = seen
    assert tasks >= 8  # the pieces that sent a segment
    assert parts == spark_kernel.pool_tasks(tasks + 1, 2) < tasks
    for name in ("queries", "clicks"):
        assert mem.tables[name].height > 0
        assert mem.tables[name].equals(spk.tables[name]), name


@pytest.mark.spark
@pytest.mark.slow
def test_spark_unsorted_is_shuffled_by_user(tmp_path: Path, small_splits: Any) -> None:
    from searchveil.engines.spark import SHUFFLE_PLAN_NAME, SparkEngine
    from searchveil.errors import InvalidParameterError

    path = _tiny_parquet_text(tmp_path, UNSORTED)
    params = KorolovaParams(d=2, K=2, b=0.5, b_q=1.0, url_selection="none")
    mem = korolova_counts(read_log(path), params, rng=NO_RNG)
    sp = SparkEngine(master="local[2]").bounded_counts(path, params.bounding_plan())
    assert sp.plan == SHUFFLE_PLAN_NAME
    assert sp.figures == mem.figures
    assert sp.table("queries", ["query"]).equals(mem.table("queries", ["query"]))
    with pytest.raises(InvalidParameterError, match="not contiguous"):
        SparkEngine(master="local[2]", plan="ordered").bounded_counts(path, params.bounding_plan())


def _tiny_parquet_text(tmp_path: Path, text: str) -> Path:
    tsv = tmp_path / "log.tsv"
    tsv.write_text(text)
    return _tiny_parquet(tsv, tmp_path / "log.parquet", 3, user_int=False)


def spark_submit() -> Path:
    """The ``spark-submit`` script shipped in the pyspark package."""
    import pyspark

    return Path(pyspark.__file__).parent / "bin" / "spark-submit"


@pytest.mark.spark
@pytest.mark.slow
def test_spark_submit_release_equals_embedded(tmp_path: Path, aol_215_path: Path) -> None:
    """``spark-submit --master local[2] .../searchveil/__main__.py release korolova ...`` writes
    the same release and public ledger as the embedded engine under a seed (the engine is named
    only in the private provenance records beside them)."""
    import searchveil

    src = tmp_path / "aol.parquet"
    _tiny_parquet(aol_215_path, src, 2000, user_int=True)
    common = ["release", "korolova", str(src), "--epsilon", "2", "--delta", "1e-5",
              "--max-queries", "3", "--seed", "5", "--json"]  # fmt: skip
    main = Path(searchveil.__file__).parent / "__main__.py"
    env = os.environ | {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                        "PYTHONPATH": str(Path(searchveil.__file__).parents[1])}  # fmt: skip
    sub = [str(spark_submit()), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
           str(main), *common, "--out", str(tmp_path / "spark"), "--engine", "spark",
           "--spark-master", "local[2]"]  # fmt: skip
    r = subprocess.run(sub, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    # the Polars engine's release in this process (the CLI's command, as `python -m searchveil`)
    r2 = CliRunner().invoke(app, [*common, "--out", str(tmp_path / "polars"), "--engine", "polars"])
    assert r2.exit_code == 0, r2.output
    a, b = tmp_path / "spark", tmp_path / "polars"
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        if name == "ledger.json":
            la, lb = json.loads((a / name).read_text()), json.loads((b / name).read_text())
            pa = json.loads((tmp_path / "spark.private.json").read_text())
            pb = json.loads((tmp_path / "polars.private.json").read_text())
            assert pa["figures"]["engine"]["engine"] == "spark"
            assert pb["figures"]["engine"]["engine"] == "polars"
            assert la["seeded"] is True and "engine" not in la
            for led in (la, lb):
                led.pop("created_utc", None)
            assert la == lb
        elif name.endswith((".tsv", ".csv", ".json")):
            assert (a / name).read_text() == (b / name).read_text(), name
