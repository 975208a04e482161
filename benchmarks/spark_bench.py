"""Spark against the embedded engine, cold and warm, paired in one run (issue 17):
``python benchmarks/spark_bench.py [--file /work/benchdata/synth-10m.parquet] [--pairs 3]``.

Korolova (queries, d = 20, e^ε = 10, δ = 1e-7 < 1/users) on a user-sorted Parquet log
(``benchmarks/run.py``'s synthetic generator; 10M rows by default, generated on demand into
``/work/benchdata`` as engines_bench.py does):

* **cold**: one release per process, the CLI exactly as a user runs it (``python -m
  searchveil release korolova FILE --out ... --engine polars`` vs ``--engine spark
  --spark-master local[2]``), wall time of the whole process (Python start, imports, the JVM,
  reading, bounding, noise, writing, the ledger). Pairs alternate polars, spark, polars, ...;
  the medians and the median of the per-pair ratios are reported.
* **warm**: in one process (``--one session ENGINE FILE``), two releases one after the other
  (``run_release`` + ``write_release``); the second is the warm figure. For Spark the process
  also reports where the cold time goes: imports, the JVM/SparkSession start, the first and
  second bounding job (their difference is the first-query cost: Python workers, JIT, class
  loading), the driver's noise and writing; and, with ``--window``, the warm window plan.

Results: benchmarks/results/spark.json and a Markdown table on stdout, with ``uptime``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EPS, DELTA, D = math.log(10), 1e-7, 20
DEFAULT = Path("/work/benchdata/synth-10m.parquet")


def _ensure(path: Path, rows_m: int) -> Path:
    """The synthetic Parquet log (run.py's generator, fixed seed), written if missing (to a
    temporary name, then renamed: a file with the final name is complete)."""
    if path.exists():
        return path
    sys.path.insert(0, str(HERE))
    import polars as pl
    from engines_bench import _input  # the generator of engines_bench / run.py

    src = _input(rows_m, "parquet")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pl.read_parquet(src).write_parquet(tmp)
    tmp.rename(path)
    return path


def _cli(engine: str, path: Path, out: Path) -> list[str]:
    cmd = [sys.executable, "-m", "searchveil", "release", "korolova", str(path), "--out", str(out),
           "--epsilon", repr(EPS), "--delta", repr(DELTA), "--max-queries", str(D),
           "--urls", "none", "--engine", engine, "--json"]  # fmt: skip
    return cmd + (["--spark-master", "local[2]"] if engine == "spark" else [])


def cold(engine: str, path: Path) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        r = subprocess.run(_cli(engine, path, Path(tmp) / "rel"), capture_output=True, text=True)
        wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{engine} failed: {r.stderr[-2000:]}")
    return wall


def session(engine: str, path: Path, window: bool) -> dict[str, Any]:
    """Two releases in one process, with the stage times (run as ``--one session``)."""
    t0 = time.perf_counter()
    st: dict[str, float] = {}

    def lap(name: str, t: float) -> float:
        now = time.perf_counter()
        st[name] = round(now - t, 3)
        return now

    from searchveil import KorolovaParams, make_rng
    from searchveil.engines.backends import make_engine
    from searchveil.release.histogram import write_release
    from searchveil.release.korolova import release_korolova_counts

    t = lap("imports (searchveil)", t0)
    eng: Any
    if engine == "spark":
        import pyspark  # noqa: F401

        t = lap("imports (pyspark)", t)
    eng = make_engine(engine, spark_master="local[2]")
    t = lap("engine start (JVM + SparkSession)" if engine == "spark" else "engine start", t)
    params = KorolovaParams.from_budget(
        epsilon=EPS, delta=DELTA, d=D, url_selection="none", split=(1.0, 1.0)
    )
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i in (1, 2):
            t = time.perf_counter()
            bounded = eng.bounded_counts(path, "korolova", params)
            t = lap(f"release {i}: bounding ({bounded.plan})", t)
            rel = release_korolova_counts(bounded, params, rng=make_rng(None))
            t = lap(f"release {i}: noise + thresholds", t)
            write_release(rel, Path(tmp) / f"r{i}", fmt="tsv", overwrite=False)
            lap(f"release {i}: writing", t)
            out[f"release_{i}"] = round(
                sum(v for k, v in st.items() if k.startswith(f"release {i}")), 3
            )
        if window and engine == "spark":
            eng.plan = "window"
            t = time.perf_counter()
            eng.bounded_counts(path, "korolova", params)
            lap("warm window plan: bounding (for comparison)", t)
    out["rows"] = rel.ledger["inputs"][0]["rows"]
    out["stages"] = st
    out["total"] = round(time.perf_counter() - t0, 3)
    return out


def _one_session(engine: str, path: Path, window: bool) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", "session", engine, str(path)]
    r = subprocess.run(cmd + (["--window"] if window else []), capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"session {engine} failed: {r.stderr[-2000:]}")
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def _uptime() -> str:
    return shutil.which("uptime") and subprocess.run(["uptime"], capture_output=True,
                                                     text=True).stdout.strip() or ""  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--window", action="store_true", help="also time the warm window plan")
    ap.add_argument("--file", type=Path, default=DEFAULT)
    ap.add_argument("--rows-m", type=int, default=10, help="size to generate if --file is absent")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "spark.json")
    a = ap.parse_args()
    if a.one:
        print(json.dumps(session(a.one[1], Path(a.one[2]), a.window)))
        return
    path = _ensure(a.file, a.rows_m)
    res: dict[str, Any] = {"file": str(path), "uptime_before": _uptime(), "cold": []}
    for i in range(a.pairs):  # alternate: polars, spark, polars, spark, ...
        p = cold("polars", path)
        s = cold("spark", path)
        res["cold"].append({"polars": round(p, 2), "spark": round(s, 2), "ratio": round(s / p, 2)})
        print(f"cold pair {i + 1}: polars {p:.1f} s, spark {s:.1f} s ({s / p:.1f}x)", flush=True)
    res["sessions"] = []
    for i in range(a.pairs):
        p = _one_session("polars", path, False)
        s = _one_session("spark", path, a.window)
        res["sessions"].append({"polars": p, "spark": s})
        print(f"session pair {i + 1}: polars {p['release_2']} s, spark {s['release_2']} s warm",
              flush=True)  # fmt: skip
    res["uptime_after"] = _uptime()
    med = statistics.median
    cp = med(x["polars"] for x in res["cold"])
    cs = med(x["spark"] for x in res["cold"])
    cr = med(x["ratio"] for x in res["cold"])
    wp = med(x["polars"]["release_2"] for x in res["sessions"])
    ws = med(x["spark"]["release_2"] for x in res["sessions"])
    wr = med(x["spark"]["release_2"] / x["polars"]["release_2"] for x in res["sessions"])
    res["summary"] = {"cold_polars": cp, "cold_spark": cs, "cold_ratio": cr,
                      "warm_polars": wp, "warm_spark": ws, "warm_ratio": round(wr, 2)}  # fmt: skip
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1))
    rows = res["sessions"][0]["spark"]["rows"]
    print(f"\n{rows:,} rows, {path.name}; load before: {res['uptime_before']}")
    print(f"load after: {res['uptime_after']}\n")
    print("| | embedded (polars) | spark local[2] | spark / embedded (median of pairs) |")
    print("|---|---|---|---|")
    print(f"| cold (CLI, one release per process) | {cp:.1f} s | {cs:.1f} s | {cr:.2f}x |")
    print(f"| warm (second release in a session) | {wp:.1f} s | {ws:.1f} s | {wr:.2f}x |")
    print("\nSpark stages (median over sessions, seconds):\n")
    stages = res["sessions"][0]["spark"]["stages"]
    print("| stage | s |\n|---|---|")
    for k in stages:
        v = med(x["spark"]["stages"].get(k, float("nan")) for x in res["sessions"])
        print(f"| {k} | {v:.2f} |")
    stages = res["sessions"][0]["polars"]["stages"]
    print("\nEmbedded stages (median over sessions, seconds):\n")
    print("| stage | s |\n|---|---|")
    for k in stages:
        v = med(x["polars"]["stages"].get(k, float("nan")) for x in res["sessions"])
        print(f"| {k} | {v:.2f} |")


if __name__ == "__main__":
    main()
