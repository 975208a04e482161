"""Spark against the embedded Polars engine at scale (issue 32), by phase:
``python benchmarks/spark_bench.py --file LOG20M.parquet [--file LOG40M.parquet] [--repeats 3]``.

Releases: Korolova's Release-Data (d = 20, one click per user, e^ε = 10, δ = 1e-7) and
probe-reweight-2r selection (d from its data-independent rule, one click per user), on
user-sorted Parquet logs generated with ``searchveil synth`` (docs/synth.md; keep them under
/tmp, never in the repo):

    searchveil synth --like src/searchveil/data/aol-gayo-avello-215-users.tsv \\
        --users 657426 --rows 20000000 --out /tmp/synth20m.parquet --seed 2006

Each measurement runs in a fresh process (nothing warm but the OS file cache):

* ``cli``: the whole command as a user runs it (``searchveil release korolova FILE --engine
  polars`` vs ``--engine spark --spark-master local[2]``), wall time of the process;
* ``phases`` (Spark): session start; the first bounding job (cold: Python workers start,
  classes load); then warm, as cumulative jobs whose differences are the phases: **scan** —
  every executor reads its pieces of the Parquet file and does nothing; **bounding** — plus the
  kernel, its output written nowhere (``noop``); **shuffle** — plus the count tables' blobs
  moved by shard; **collect** — plus ``toArrow`` to the driver and the driver's join; the whole
  job with Spark's own reader instead; and the release (bound, noise, write).
  Polars: the bounding (one ordered pass) and the release.
* rows/s per executor core: rows ÷ (warm bounding-to-collect job × cores), and the driver's peak
  memory: the Python driver's peak RSS, and the JVM's (in ``local[2]`` the JVM also hosts the
  executors' tasks; the Python workers are separate processes).

Results: ``--out`` (JSON) and a Markdown table on stdout, with ``uptime`` before and after
(the machine is shared: quote the median, keep the min and max).
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EPS, DELTA, D, MASTER, CORES = math.log(10), 1e-7, 20, "local[2]", 2
RELEASES = {
    "korolova": [
        "release",
        "korolova",
        "--epsilon",
        repr(EPS),
        "--delta",
        repr(DELTA),
        "--max-queries",
        str(D),
        "--max-clicks",
        "1",
        "--urls",
        "private",
    ],
    "probe-reweight-2r": [
        "release",
        "korolova",
        "--epsilon",
        repr(EPS),
        "--delta",
        repr(DELTA),
        "--selection",
        "probe-reweight-2r",
        "--max-clicks",
        "1",
        "--urls",
        "private",
        "--max-users",
        "700000",
    ],
}


def cli(engine: str, release: str, path: Path) -> dict[str, Any]:
    """The CLI in a fresh process: wall seconds and the children's peak RSS."""
    with tempfile.TemporaryDirectory() as tmp:
        args = RELEASES[release][:2] + [str(path)] + RELEASES[release][2:]
        cmd = [
            sys.executable,
            "-m",
            "searchveil",
            *args,
            "--out",
            f"{tmp}/rel",
            "--json",
            "--engine",
            engine,
        ] + (["--spark-master", MASTER] if engine == "spark" else [])
        t = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"{engine} {release} failed: {r.stderr[-2000:]}")
    return {"wall": round(wall, 2)}


class _PeakRss:
    """Peak RSS of the JVM children of this process, sampled every 0.2 s (psutil)."""

    def __init__(self) -> None:
        import psutil

        self.me, self.peak, self._stop = psutil.Process(), 0, threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            try:
                rss = sum(
                    c.memory_info().rss
                    for c in self.me.children(recursive=True)
                    if "java" in c.name()
                )
            except Exception:  # noqa: BLE001, S112 - a child came or went
                continue
            self.peak = max(self.peak, rss)

    def stop(self) -> int:
        self._stop.set()
        self._t.join()
        return self.peak


def phases(engine: str, release: str, path: Path) -> dict[str, Any]:
    """In one process: the phases (see the module docstring)."""
    t0 = time.perf_counter()
    from searchveil import KorolovaParams, make_rng
    from searchveil.engines import make_engine
    from searchveil.mechanisms.selection import default_d
    from searchveil.release.histogram import write_release
    from searchveil.release.run import release_on_engine
    from searchveil.release.selection import SelectionParams

    if release == "korolova":  # as `release korolova --max-queries 20 --max-clicks 1`
        params: Any = KorolovaParams.from_budget(
            epsilon=EPS, delta=DELTA, d=D, d_c=1, url_selection="private", split=(1, 1, 1, 1)
        )
        kw: dict[str, Any] = {}
    else:  # as `release korolova --selection probe-reweight-2r --max-clicks 1 --max-users 700000`
        w = (1.0, 1.0, 1.0, 1.0)
        probe = SelectionParams(
            strategy="probe-reweight-2r", epsilon=EPS, delta=DELTA, d=1, split=w, d_c=1
        )
        d, rule = default_d(
            "probe-reweight-2r",
            epsilon=probe.eps_selection,
            delta=probe.delta_selection,
            max_users=700_000,
        )
        params = SelectionParams(
            strategy="probe-reweight-2r", epsilon=EPS, delta=DELTA, d=d, split=w, d_c=1, d_rule=rule
        )
        kw = {"max_users": 700_000}
    out: dict[str, Any] = {"imports": round(time.perf_counter() - t0, 3)}
    peak = _PeakRss() if engine == "spark" else None
    t = time.perf_counter()
    eng = make_engine(engine, spark_master=MASTER)
    out["session start"] = round(time.perf_counter() - t, 3)
    plan = params.bounding_plan()
    if engine == "spark":
        out |= _spark_phases(eng, path, plan)
    for i in (1, 2) if engine == "polars" else (2,):  # the whole release (spark: warm already)
        t = time.perf_counter()
        rel = release_on_engine(eng, path, params, rng=make_rng(None), **kw)
        with tempfile.TemporaryDirectory() as tmp:
            write_release(rel, Path(tmp) / "rel")
        out[f"release {i} (bound + noise + write)"] = round(time.perf_counter() - t, 3)
    out["rows"] = int(rel.inputs[0]["rows"])
    out["python driver peak RSS MB"] = round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
    )
    if peak is not None:
        out["JVM peak RSS MB"] = round(peak.stop() / 2**20, 1)
    return out


def _spark_phases(eng: Any, path: Path, plan: Any) -> dict[str, float]:
    """Cumulative jobs, warm (after one full job), of the plan a Parquet file runs (the
    executors read their pieces, :func:`~searchveil.engines.spark_kernel.pieces_plan`): scan, +
    bounding, + the count blobs' shuffle, + collect and the driver's join; and, for
    comparison, the whole job with Spark's own reader
    (:func:`~searchveil.engines.spark_kernel.kernel_plan`)."""
    from functools import partial

    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from searchveil.engines.contract import Source
    from searchveil.engines.spark_kernel import _per_piece, kernel_plan, pieces_plan
    from searchveil.engines.spark_ordered import OUTPUT_DDL, PartitionInput, parquet_pieces

    spark, file = eng.spark, str(path.resolve())
    pieces = parquet_pieces(file)
    spec = plan.kernel_spec(normalize=True)
    how = PartitionInput(plan, spec, True, plan.with_url, True)
    cols = ["AnonID", "Query", "QueryTime"] + (["ClickURL"] if plan.with_url else [])

    def read_only(tasks: Any) -> Any:
        f = pq.ParquetFile(file)
        for t in tasks:
            for piece in t.column(0).to_pylist():
                for _ in f.iter_batches(row_groups=list(pieces[piece]), columns=cols):
                    pass
        return iter(())

    tasks = spark.range(0, len(pieces), 1, numPartitions=len(pieces)).select(
        F.col("id").cast("int").alias("piece")
    )
    out = tasks.mapInArrow(partial(_per_piece, how, file, pieces), OUTPUT_DDL)
    # the count tables' blobs moved by shard (what each noise stage's shuffle does)
    agg = out.filter(F.col("kind") == "C").repartition("n2")

    def timed(job: Any) -> float:
        t = time.perf_counter()
        job()
        return time.perf_counter() - t

    def noop(df: Any) -> None:
        df.write.format("noop").mode("overwrite").save()

    def full_job() -> None:  # the bounding job (issue 40: its output stays cached: freed here)
        pieces_plan(spark, file, plan, normalize=True).output.unpersist()

    first = timed(full_job)  # the first job: Python workers start, classes load
    scan = timed(lambda: noop(tasks.mapInArrow(read_only, OUTPUT_DDL)))
    bound = timed(lambda: noop(out))
    aggregate = timed(lambda: noop(agg))
    full = timed(full_job)
    reader = timed(lambda: kernel_plan(eng._read(Source.of(path)), plan, normalize=True,
                                       parquet=True).output.unpersist())  # fmt: skip
    return {"first bounding job (cold)": round(first, 3),
            "scan (executors read their pieces)": round(scan, 3),
            "bounding (kernel in mapInArrow)": round(bound - scan, 3),
            "shuffle of the count blobs": round(aggregate - bound, 3),
            "collect (toArrow + driver join)": round(full - aggregate, 3),
            "warm bounding job (all of it)": round(full, 3),
            "warm bounding job with Spark's reader": round(reader, 3)}  # fmt: skip


def _one(mode: str, engine: str, release: str, path: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", mode, engine, release, str(path)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{mode} {engine} {release} failed: {r.stderr[-3000:]}")
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


def _uptime() -> str:
    if not shutil.which("uptime"):
        return ""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _stats(xs: list[float]) -> dict[str, float]:
    return {
        "min": round(min(xs), 2),
        "median": round(statistics.median(xs), 2),
        "max": round(max(xs), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--file", type=Path, action="append", required=False, default=[])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--releases", default="korolova,probe-reweight-2r")
    ap.add_argument("--modes", default="cli,phases", help="cli and/or phases")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "spark.json")
    a = ap.parse_args()
    if a.one:
        mode, engine, release, path = a.one
        fn = cli if mode == "cli" else phases
        print(json.dumps(fn(engine, release, Path(path))))
        return
    if not a.file:
        raise SystemExit("--file LOG.parquet (see the module docstring to generate one)")
    res: dict[str, Any] = {"uptime_before": _uptime(), "runs": []}
    for path in a.file:
        for release in a.releases.split(","):
            for i in range(a.repeats):  # pairs, alternating: polars, spark, ...
                for engine in ("polars", "spark"):
                    row = {"file": path.name, "release": release, "engine": engine, "repeat": i}
                    if "cli" in a.modes:
                        row |= {"cli": _one("cli", engine, release, path)["wall"]}
                    if "phases" in a.modes:
                        row |= {"phases": _one("phases", engine, release, path)}
                    res["runs"].append(row)
                    print(json.dumps(row), flush=True)
    res["uptime_after"] = _uptime()
    res["summary"] = summary(res["runs"])
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1))
    print(f"\nload before: {res['uptime_before']}\nload after: {res['uptime_after']}\n")
    print(table(res["summary"]))


def summary(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    warm = "release 2 (bound + noise + write)"
    for file, release in sorted({(r["file"], r["release"]) for r in runs}):
        rs = [r for r in runs if r["file"] == file and r["release"] == release]
        by = {e: [r for r in rs if r["engine"] == e] for e in ("polars", "spark")}
        pairs = list(zip(by["polars"], by["spark"], strict=True))
        row: dict[str, Any] = {"file": file, "release": release}
        if all("cli" in x for x in rs):
            for e, xs in by.items():
                row[f"{e} cli"] = _stats([x["cli"] for x in xs])
            row["cli ratio"] = _stats([s["cli"] / p["cli"] for p, s in pairs])
        if all("phases" in x for x in rs):
            for e, xs in by.items():
                row[f"{e} warm release"] = _stats([x["phases"][warm] for x in xs])
            row["warm ratio"] = _stats([s["phases"][warm] / p["phases"][warm] for p, s in pairs])
            sp = [x["phases"] for x in by["spark"]]
            row["spark phases"] = {
                k: _stats([p[k] for p in sp]) for k in sp[0] if isinstance(sp[0][k], int | float)
            }
            job = statistics.median(p["warm bounding job (all of it)"] for p in sp)
            row["rows/s per executor core"] = round(sp[0]["rows"] / job / CORES)
        out.append(row)
    return out


def table(summ: list[dict[str, Any]]) -> str:
    lines = [
        "| file | release | polars CLI (min / median) | spark CLI | CLI ratio (median of "
        "pairs) | warm release polars | warm spark | warm ratio | rows/s/core |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summ:

        def f(k: str, r: dict[str, Any] = r) -> str:
            return f"{r[k]['min']} / {r[k]['median']}" if k in r else "–"  # (a mode not run)

        lines.append(
            f"| {r['file']} | {r['release']} | {f('polars cli')} s | {f('spark cli')} s "
            f"| {r.get('cli ratio', {}).get('median', '–')}x | {f('polars warm release')} s | "
            f"{f('spark warm release')} s | {r.get('warm ratio', {}).get('median', '–')}x | "
            f"{r.get('rows/s per executor core', '–')} |"
        )
    lines.append("")
    for r in summ:
        if "spark phases" not in r:
            continue
        lines.append(f"Spark phases, {r['file']} {r['release']} (min / median / max, s):")
        lines += [
            f"- {k}: {v['min']} / {v['median']} / {v['max']}" for k, v in r["spark phases"].items()
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
