"""Engines vs PipelineDP on synthetic AOL-calibrated logs:
``python benchmarks/engines_bench.py [--sizes 1,10] [--quick] [--no-spark]``; the stage-by-stage
profile of the Parquet path: ``python benchmarks/engines_bench.py --one profile:korolova FILE``.

For each size (millions of rows; inputs from ``benchmarks/run.py``'s cache, generated on demand)
and format (.tsv.gz, Parquet), each in its own process with the peak RSS of its whole process
tree (the JVM included) sampled every 0.2 s:
* ``plain:polars`` — the reference: a plain Polars lazy pipeline over the same file (first d rows
  per user by ``int_range().over(user)``, normalise, count, threshold; no clicks, no event
  grouping, no hash, no noise), so every figure is also a ratio measured in the same run;
* ``zcat | wc -l`` (.gz only) — the decode limit with the system's gzip, and ``igzip`` — the
  same with ISA-L (what the Polars engine's reader thread uses), in one process;
* searchveil Korolova (queries, d = 20, e^ε = 10, δ = 1e-5; on Parquet also with
  ``--fingerprint fast``) and ZEALOUS (queries, m = 5,
  ε = 1, δ = 1e-5 — the corrected Theorem 2) on the ``polars`` and ``spark`` (local[2]) engines;
* PipelineDP 0.3.1 ``DPEngine.aggregate`` COUNT with partition selection, the same contribution
  bound (20 partitions per user, 1 contribution per partition) and budget, on LocalBackend
  (rows read with Polars, then Python tuples) and on Spark (SparkRDDBackend, local[2]).
Results: benchmarks/results/engines.json and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EPS, DELTA, D = math.log(10), 1e-5, 20


def _input(rows_m: int, suffix: str) -> Path:
    sys.path.insert(0, str(HERE))
    from run import _synthetic  # the foundation runner's cached generator

    return _synthetic(rows_m * 1_000_000, suffix)


class _Peak:
    def __init__(self) -> None:
        import psutil

        self.proc = psutil.Process()
        self.peak = 0
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        import psutil

        while not self.stop:
            try:
                total = self.proc.memory_info().rss + sum(
                    c.memory_info().rss for c in self.proc.children(recursive=True)
                )
            except psutil.Error:
                total = 0
            self.peak = max(self.peak, total)
            time.sleep(0.2)

    def done(self) -> float:
        self.stop = True
        self.t.join()
        return self.peak / 1e6


def plain_pipeline(path: str, d: int = D, threshold: int = 10) -> dict[str, Any]:
    """The reference row: what Polars does with the same file and no privacy machinery."""
    import polars as pl

    if path.endswith(".parquet"):
        lf = pl.scan_parquet(path)
    else:
        lf = pl.scan_csv(path, separator="\t", quote_char=None, infer_schema=False)
    q = pl.col("Query").cast(pl.String).fill_null("")
    norm = q.str.to_lowercase().str.replace_all(r"\s+", " ").str.strip_chars()
    res = (
        lf.select("AnonID", "Query")
        .filter(pl.int_range(pl.len()).over("AnonID") < d)
        .select(norm.alias("query"))
        .group_by("query")
        .len()
        .filter(pl.col("len") >= threshold)
        .collect(engine="streaming")
    )
    rows = pl.scan_parquet(path).select(pl.len()).collect().item() if path.endswith(
        ".parquet") else 0  # fmt: skip
    return {"rows": rows, "released": res.height, "plan": "plain Polars lazy pipeline"}


def profile_korolova(path: str) -> dict[str, Any]:
    """Stage by stage, in one process: each stage timed alone (Parquet input, Korolova d = 20;
    wall and CPU seconds of the whole process, its threads included).

    Stages run one after the other (not overlapped as in the engine, where the hash runs in a
    thread beside the scan, the kernel a batch behind the scan and the counting a batch behind
    the kernel): import, hash, read (the Parquet source's batches: three columns and the
    time-layout test), bounding (the kernel: :func:`~searchveil.bounding.cut` and the join of
    each batch), counting (per-batch counts and their merge), the engine's whole pass
    (overlapped), noise + thresholds, writing; and the plain Polars pipeline for reference.
    """
    import resource
    import tempfile

    def cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    t, c = time.perf_counter(), cpu()
    from searchveil import KorolovaParams, make_rng
    from searchveil.bounding import Bounder, cut
    from searchveil.engines import ordered
    from searchveil.engines.sources import parquet_source
    from searchveil.io.files import file_sha256
    from searchveil.release.counts import BoundedCounts
    from searchveil.release.histogram import write_release
    from searchveil.release.korolova import release_korolova_counts
    from searchveil.release.run import run_release

    st: dict[str, dict[str, float]] = {}
    p = Path(path)

    def lap(name: str, t0: float, c0: float) -> None:
        st[name] = {"wall": round(time.perf_counter() - t0, 3), "cpu": round(cpu() - c0, 3)}

    lap("import", t, c)
    params = KorolovaParams.from_budget(
        epsilon=EPS, delta=DELTA, d=D, url_selection="none", split=(1.0, 1.0)
    )
    plan = params.bounding_plan()
    spec = plan.kernel_spec(normalize=True)
    t, c = time.perf_counter(), cpu()
    file_sha256(p)
    lap("hash (whole-file SHA-256)", t, c)
    t, c = time.perf_counter(), cpu()
    batches = list(parquet_source(p, False, "fast").chunks)
    lap("read (3 columns + time-layout test, batches)", t, c)
    t, c = time.perf_counter(), cpu()
    bounder = Bounder(spec, check=True)
    kept = [bounder.add(*cut(df, spec)) for df in batches]
    lap("bounding (kernel: marks, ranks, first d, normalisation of kept rows)", t, c)
    t, c = time.perf_counter(), cpu()
    tally = ordered.Tally(plan, [s for s, _ in spec.rules()])
    for k in kept:
        tally.add(k)
    counts, _ = tally.result(bounder.figures)
    lap("counting (per-batch group-bys + merge)", t, c)
    del batches, kept
    t, c = time.perf_counter(), cpu()
    plain_pipeline(path)
    lap("REFERENCE: plain Polars pipeline, same process", t, c)
    for fp in ("full", "fast"):
        t, c = time.perf_counter(), cpu()
        ordered.ordered_counts(p, plan, normalize=True, fingerprint=fp)
        lap(f"ordered pass alone, fingerprint {fp}", t, c)
    t, c = time.perf_counter(), cpu()
    rel = run_release("polars", "korolova", p, params, rng=make_rng(None))
    lap("engine pass + noise, as run (overlapped)", t, c)
    t, c = time.perf_counter(), cpu()
    b = BoundedCounts(counts=counts, figures={"users": 1, "query_events": 1,
                      "query_events_after_bounding": 1}, input=rel.inputs[0])  # fmt: skip
    release_korolova_counts(b, params, rng=make_rng(None))
    lap("noise + thresholds (release_korolova_counts)", t, c)
    t, c = time.perf_counter(), cpu()
    with tempfile.TemporaryDirectory() as tmp:
        write_release(rel, Path(tmp) / "out", fmt="tsv", overwrite=False)
    lap("writing (tables + ledger)", t, c)
    return {"stages": st, "rows": rel.inputs[0]["rows"],
            "distinct_bounded": counts["queries"].height}  # fmt: skip


def one(kind: str, path: str) -> dict[str, Any]:
    peak = _Peak()
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    if kind == "zcat":
        z = subprocess.Popen(["zcat", path], stdout=subprocess.PIPE)
        wc = subprocess.run(["wc", "-l"], stdin=z.stdout, capture_output=True, text=True)
        z.wait()
        out["rows"] = int(wc.stdout.split()[0]) - 1
    elif kind == "igzip":
        from isal import igzip

        n = 0
        with igzip.open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 25), b""):
                n += block.count(b"\n")
        out["rows"] = n - 1
    elif kind == "plain:polars":
        out.update(plain_pipeline(path))
    elif kind == "profile:korolova":
        out.update(profile_korolova(path))
    elif kind.startswith("searchveil"):
        _, algo, engine, *rest = kind.split(":")  # searchveil:ALGO:ENGINE[:fast]
        fingerprint = rest[0] if rest else "full"
        from searchveil import KorolovaParams, ZealousParams, make_rng
        from searchveil.release.run import run_release

        if algo == "korolova":
            params: Any = KorolovaParams.from_budget(
                epsilon=EPS, delta=DELTA, d=D, url_selection="none", split=(1.0, 1.0)
            )
        else:
            params = ZealousParams.from_budget(
                epsilon=1.0, delta=DELTA, m=5, item_type="queries",
                guarantee="indistinguishability",
            )  # fmt: skip
        rel = run_release(engine, algo, Path(path), params, rng=make_rng(None),
                          spark_master="local[2]", fingerprint=fingerprint)  # fmt: skip
        out["rows"] = rel.inputs[0]["rows"]
        name = "queries" if algo == "korolova" else "items"
        out["released"] = rel.tables[name].height
        out["plan"] = rel.report.get("engine_plan")
        out["distinct_bounded_items"] = rel.report.get(
            "distinct_queries", rel.report.get("distinct_items")
        )
    elif kind.startswith("pipelinedp"):
        import pipeline_dp

        backend_name = kind.split(":")[1]
        if backend_name == "local":
            import polars as pl

            df = (
                pl.read_parquet(path, columns=["AnonID", "Query"])
                if path.endswith(".parquet")
                else pl.read_csv(
                    path,
                    separator="\t",
                    quote_char=None,
                    infer_schema=False,
                    columns=["AnonID", "Query"],
                )  # fmt: skip
            )
            data: Any = zip(df["AnonID"].to_list(), df["Query"].to_list(), strict=True)
            out["rows"] = df.height
            backend: Any = pipeline_dp.LocalBackend()
        else:
            from searchveil.engines.spark import spark_session

            spark = spark_session("local[2]")
            sdf = (
                spark.read.parquet(path)
                if path.endswith(".parquet")
                else spark.read.option("sep", "\t").option("header", True).csv(path)
            )
            data = sdf.select("AnonID", "Query").rdd.map(tuple)
            backend = pipeline_dp.SparkRDDBackend(spark.sparkContext)
        acc = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPS, total_delta=DELTA)
        eng = pipeline_dp.DPEngine(acc, backend)
        params = pipeline_dp.AggregateParams(
            noise_kind=pipeline_dp.NoiseKind.LAPLACE, metrics=[pipeline_dp.Metrics.COUNT],
            max_partitions_contributed=D, max_contributions_per_partition=1,
        )  # fmt: skip
        ex = pipeline_dp.DataExtractors(
            privacy_id_extractor=lambda r: r[0], partition_extractor=lambda r: r[1],
            value_extractor=lambda r: 0,
        )  # fmt: skip
        res = eng.aggregate(data, params, ex)
        acc.compute_budgets()
        released = list(res) if backend_name == "local" else res.collect()
        out["released"] = len(released)
        if backend_name != "local":
            out["rows"] = sdf.count()
    out["seconds"] = time.perf_counter() - t0
    out["peak_rss_mb"] = peak.done()
    out["rows_per_s"] = out.get("rows", 0) / out["seconds"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="1,10")
    ap.add_argument("--quick", action="store_true", help="1M rows only, no Spark")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--no-pipelinedp", action="store_true")
    ap.add_argument("--formats", default="tsv.gz,parquet")
    ap.add_argument("--out", default=str(HERE / "results" / "engines.json"))
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], a.one[1])))
        return
    sizes = [1] if a.quick else [int(x) for x in a.sizes.split(",")]
    spark = not (a.quick or a.no_spark)
    kinds = ["plain:polars", "searchveil:korolova:polars", "searchveil:zealous:polars"]
    kinds += [] if a.no_pipelinedp else ["pipelinedp:local"]
    if spark:
        kinds += ["searchveil:korolova:spark", "searchveil:zealous:spark"]
        kinds += [] if a.no_pipelinedp else ["pipelinedp:spark"]
    results = []
    for size in sizes:
        for suffix in a.formats.split(","):
            path = str(_input(size, suffix))
            pq_only = ["searchveil:korolova:polars:fast"] if suffix == "parquet" else []
            for kind in (["zcat", "igzip"] if suffix == "tsv.gz" else []) + kinds + pq_only:
                env = dict(os.environ, PYTHONWARNINGS="ignore")
                try:
                    proc = subprocess.run(
                        [sys.executable, __file__, "--one", kind, path],
                        capture_output=True, text=True, env=env, timeout=a.timeout,
                    )  # fmt: skip
                except subprocess.TimeoutExpired:
                    row = {"error": f"did not finish in {a.timeout:.0f} s (killed)"}
                    row.update(size_m=size, format=suffix, kind=kind)
                    print(json.dumps(row), flush=True)
                    results.append(row)
                    continue
                if proc.returncode != 0:
                    row = {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
                else:
                    row = json.loads(proc.stdout.strip().splitlines()[-1])
                row.update(size_m=size, format=suffix, kind=kind)
                print(json.dumps(row), flush=True)
                results.append(row)
    Path(a.out).parent.mkdir(exist_ok=True, parents=True)
    Path(a.out).write_text(json.dumps(results, indent=2) + "\n")
    print("\n| rows | format | what | rows/s | seconds | peak RSS | released |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['size_m']}M | {r['format']} | {r['kind']} | error: {r['error'][:60]} |")
            continue
        print(
            f"| {r['size_m']}M | {r['format']} | {r['kind']} | {r['rows_per_s'] / 1e6:.2f} M | "
            f"{r['seconds']:.1f} | {r['peak_rss_mb'] / 1e3:.1f} GB | {r.get('released', '')} |"
        )


if __name__ == "__main__":
    main()
