"""searchveil benchmark runner: ``python benchmarks/run.py [--suite NAME ...] [--quick]``.

Each benchmark runs in its own Python process (so that its peak RSS is its own) and prints one
JSON line; the runner collects them into ``benchmarks/results/<suite>.json`` and prints a table.

Suites:
* ``foundation`` — ingest throughput (the AOL top-1000 .gz sample; a synthetic 10M-row log from
  ``.gz``, plain TSV and Parquet, beside ``zcat | wc -l``), noise throughput (discrete Laplace and
  Gaussian from the OS CSPRNG), synth throughput, each with peak RSS.
* other suites are the ``benchmarks/<name>_bench.py`` scripts written for later issues (UMP,
  engines, selection); the runner runs them as ``python benchmarks/<name>_bench.py`` when asked
  for by name (``--suite ump``) or with ``--suite all``.

The runner first writes the package's bytecode (:func:`compile_bytecode`): the processes are
timed as an installed package runs, not recompiling searchveil from source each time.
Synthetic inputs are generated once into ``benchmarks/.data/`` (git-ignored; or the directory named
by ``SEARCHVEIL_BENCH_DATA``) with a fixed seed.
Speed targets live here, not in the tests.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DATA = Path(os.environ.get("SEARCHVEIL_BENCH_DATA", HERE / ".data"))
RESULTS = HERE / "results"
SHARED = ROOT.parent / "shared" / "data" / "aol"
AOL_TOP1000 = SHARED / "aol-top1000-users.tsv.gz"
AOL_215 = SHARED / "aol-gayo-avello-215-users.tsv"


def compile_bytecode() -> str:
    """Write the bytecode of the searchveil package the benchmarks import (the one on this
    interpreter's path), so that no measured process compiles its modules from source: an
    installed package ships its ``.pyc``, while a checkout on a machine with
    ``PYTHONDONTWRITEBYTECODE=1`` (this one) never gets any and recompiles ≈ 60 modules in
    every process (≈ 0.1 s of CPU). ``compileall`` writes them even so. Returns the
    package's directory."""
    spec = importlib.util.find_spec("searchveil")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("searchveil is not importable (install it, or set PYTHONPATH=src)")
    pkg = list(spec.submodule_search_locations)[0]
    subprocess.run([sys.executable, "-m", "compileall", "-q", pkg], check=True)
    return pkg


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _synthetic(rows: int, suffix: str) -> Path:
    """A synthetic AOL-calibrated log of about ``rows`` rows (cached; fixed seed)."""
    DATA.mkdir(exist_ok=True)
    tag = f"synth-{rows // 1_000_000}m" if rows >= 1_000_000 else f"synth-{rows // 1000}k"
    path = DATA / f"{tag}.{suffix}"
    if path.exists():
        return path
    # generated in a child process so that this runner's own peak RSS stays small (children
    # inherit the parent's ru_maxrss across fork/exec)
    subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--one", "make", str(rows), suffix],
        check=True,
        capture_output=True,
    )
    return path


def bench_make(rows_s: str, suffix: str) -> dict[str, Any]:
    rows = int(rows_s)
    tag = f"synth-{rows // 1_000_000}m" if rows >= 1_000_000 else f"synth-{rows // 1000}k"
    path = DATA / f"{tag}.{suffix}"
    from searchveil.io.readers import read_log
    from searchveil.rng import make_rng
    from searchveil.synth import fit, write_synthetic

    model = fit(read_log(AOL_215), rng=make_rng(2006))
    users = max(1, int(rows / 47.6))  # the 215-user sample has 47.6 rows per user
    write_synthetic(
        model, path, users=users, rows=rows, rng=make_rng(2006), workers=os.cpu_count() or 1
    )
    return {"path": str(path)}


# ------------------------------------------------------------------------- single benchmarks


def bench_ingest(path: str) -> dict[str, Any]:
    from searchveil.io.readers import read_log

    t = time.perf_counter()
    log = read_log(Path(path))
    dt = time.perf_counter() - t
    return {"rows": log.n_rows, "users": log.n_users, "seconds": dt, "rows_per_s": log.n_rows / dt}


def bench_noise(kind: str, n: str) -> dict[str, Any]:
    from searchveil.mechanisms.noise import DiscreteGaussian, DiscreteLaplace
    from searchveil.rng import SecureRandom

    count = int(n)
    dist = DiscreteLaplace(8.69) if kind == "laplace" else DiscreteGaussian(10.0)
    rng = SecureRandom()
    dist.sample(1000, rng)
    t = time.perf_counter()
    x = dist.sample(count, rng)
    dt = time.perf_counter() - t
    return {"draws": int(x.size), "seconds": dt, "draws_per_s": x.size / dt, "param": str(dist)}


def bench_synth(rows: str, suffix: str) -> dict[str, Any]:
    from searchveil.io.readers import read_log
    from searchveil.rng import make_rng
    from searchveil.synth import fit, write_synthetic

    n = int(rows)
    model = fit(read_log(AOL_215), rng=make_rng(1))
    DATA.mkdir(exist_ok=True)
    out = DATA / f"synth-throughput.{suffix}"
    t = time.perf_counter()
    res = write_synthetic(
        model,
        out,
        users=max(1, int(n / 47.6)),
        rows=n,
        rng=make_rng(1),
        overwrite=True,
        workers=os.cpu_count() or 1,
    )
    dt = time.perf_counter() - t
    out.unlink()
    return {"rows": res["rows"], "seconds": dt, "rows_per_s": res["rows"] / dt}


def bench_zcat(path: str) -> dict[str, Any]:
    t = time.perf_counter()
    zcat = subprocess.Popen(["zcat", path], stdout=subprocess.PIPE)
    wc = subprocess.run(["wc", "-l"], stdin=zcat.stdout, capture_output=True, text=True, check=True)
    zcat.wait()
    dt = time.perf_counter() - t
    lines = int(wc.stdout.split()[0]) - 1
    return {"rows": lines, "seconds": dt, "rows_per_s": lines / dt}


ONE = {
    "make": bench_make,
    "ingest": bench_ingest,
    "noise": bench_noise,
    "synth": bench_synth,
    "zcat": bench_zcat,
}


def _child(name: str, args: list[str]) -> None:
    res = ONE[name](*args)
    if name != "zcat":
        res["peak_rss_mb"] = _peak_rss_mb()
    print(json.dumps(res))


def _run_child(label: str, name: str, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", name, *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"benchmark": label, "error": proc.stderr.strip().splitlines()[-1:]}
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["benchmark"] = label
    print(_fmt(res), flush=True)
    return res


def _fmt(r: dict[str, Any]) -> str:
    rate = r.get("rows_per_s") or r.get("draws_per_s") or 0.0
    unit = "draws/s" if "draws_per_s" in r else "rows/s"
    rss = f"{r['peak_rss_mb']:8.0f} MB" if "peak_rss_mb" in r else " " * 11
    return f"{r['benchmark']:<44} {rate / 1e6:8.2f} M {unit:<8} {r['seconds']:8.2f} s {rss}"


def suite_foundation(quick: bool) -> list[dict[str, Any]]:
    big = 1_000_000 if quick else 10_000_000
    out: list[dict[str, Any]] = []
    out.append(_run_child("ingest aol-top1000 (.gz, 407,929 rows)", "ingest", str(AOL_TOP1000)))
    for suffix in ("tsv.gz", "tsv", "parquet"):
        p = _synthetic(big, suffix)
        out.append(_run_child(f"ingest synthetic {big // 1_000_000}M ({suffix})", "ingest", str(p)))
    gz = _synthetic(big, "tsv.gz")
    out.append(_run_child(f"zcat | wc -l synthetic {big // 1_000_000}M", "zcat", str(gz)))
    n = "1000000" if quick else "5000000"
    out.append(_run_child(f"noise discrete Laplace ({n} draws)", "noise", "laplace", n))
    out.append(_run_child(f"noise discrete Gaussian ({n} draws)", "noise", "gaussian", n))
    rows = "2000000" if quick else "10000000"
    for suffix in ("tsv.gz", "parquet"):
        label = f"synth {int(rows) // 1_000_000}M rows ({suffix})"
        out.append(_run_child(label, "synth", rows, suffix))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--suite", action="append", help="foundation (default) | all | <name>")
    ap.add_argument("--quick", action="store_true", help="smaller inputs (a smoke run)")
    ap.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        _child(a.one[0], a.one[1:])
        return
    compile_bytecode()
    suites = a.suite or ["foundation"]
    others = sorted(p.stem[: -len("_bench")] for p in HERE.glob("*_bench.py"))
    if "all" in suites:
        suites = ["foundation", *others]
    RESULTS.mkdir(exist_ok=True)
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "quick": a.quick,
    }
    for suite in suites:
        print(f"== {suite}", flush=True)
        if suite == "foundation":
            rows = suite_foundation(a.quick)
            payload = {"meta": meta, "results": rows}
            (RESULTS / "foundation.json").write_text(json.dumps(payload, indent=2) + "\n")
        elif suite in others:
            cmd = [sys.executable, str(HERE / f"{suite}_bench.py")]
            if a.quick:
                cmd.append("--quick")
            subprocess.run(cmd, check=False)
        else:
            sys.exit(f"unknown suite {suite!r}; known: foundation, all, {', '.join(others)}")
    if shutil.which("zcat") is None:
        print("note: zcat not found; decode baseline skipped", file=sys.stderr)


if __name__ == "__main__":
    main()
