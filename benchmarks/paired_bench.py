"""Paired whole-process timing of two commands: ``python benchmarks/paired_bench.py A B [...]``.

On a shared machine absolute seconds drift by ±30% from one minute to the next, so every figure
the issue-17 targets ask for is a *ratio measured in the same run*: the two commands run
alternately (A B A B …, ``--pairs`` times, after ``--warm`` unmeasured runs of each so the file
is in the page cache), each in its own process; for each pair the ratio A/B of wall time and of
CPU time (user + system of the finished process tree, from ``wait4``) is taken, and the median
of the pair ratios is reported, with every pair, the peak RSS of each command (``ru_maxrss`` of
its largest process) and the load average before and after.

Commands are shell strings; ``{out}`` in a command is replaced by a fresh temporary directory
path (removed afterwards), for ``--out`` of a release. Presets for the issue-17 figures:

* ``--preset parquet FILE``: ``searchveil release korolova FILE --engine polars`` (d = 20,
  ε = 2.303, δ = 1e-6, ``--json``) vs the plain Polars pipeline
  (``engines_bench.py --one plain:polars FILE``);
* ``--preset gz FILE``: the same release vs ``zcat FILE | wc -l``.

Before timing, the searchveil package on the path gets its bytecode written
(``run.compile_bytecode``; ``--no-compile`` skips it): an installed package has its ``.pyc``,
a checkout under ``PYTHONDONTWRITEBYTECODE=1`` would otherwise recompile every module in every
release process (≈ 0.1 s of CPU each).

Results: one JSON line on stdout (``--json``) or a short table.
"""

from __future__ import annotations

import argparse
import json
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
ROOT = HERE.parent
RELEASE = (
    "{py} -m searchveil release korolova {file} --engine polars --epsilon 2.303 "
    "--delta 1e-6 --max-queries 20 --json --out {{out}}/rel > /dev/null"
)
PLAIN = "{py} {bench} --one plain:polars {file} > /dev/null"
ZCAT = "zcat {file} | wc -l > /dev/null"


def _run(cmd: str) -> dict[str, float]:
    out = tempfile.mkdtemp(prefix="paired-")
    try:
        t = time.perf_counter()
        proc = subprocess.Popen(["sh", "-c", cmd.replace("{out}", out)])
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        if status != 0:
            raise SystemExit(f"command failed ({status}): {cmd}")
        # wait4 of the shell: its own usage plus that of every child it waited for
        return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024}
    finally:
        shutil.rmtree(out, ignore_errors=True)


def paired(a: str, b: str, pairs: int, warm: int) -> dict[str, Any]:
    for _ in range(warm):
        _run(a)
        _run(b)
    load0 = os.getloadavg()
    rows = []
    for i in range(pairs):
        ra, rb = (_run(a), _run(b)) if i % 2 == 0 else reversed((_run(b), _run(a)))
        rows.append({"a": ra, "b": rb})
    load1 = os.getloadavg()
    wall = [r["a"]["wall"] / r["b"]["wall"] for r in rows]
    cpu = [r["a"]["cpu"] / r["b"]["cpu"] for r in rows]
    return {
        "a": a,
        "b": b,
        "wall_ratio": statistics.median(wall),
        "cpu_ratio": statistics.median(cpu),
        "wall_ratios": wall,
        "cpu_ratios": cpu,
        "a_wall_s": statistics.median(r["a"]["wall"] for r in rows),
        "b_wall_s": statistics.median(r["b"]["wall"] for r in rows),
        "a_cpu_s": statistics.median(r["a"]["cpu"] for r in rows),
        "b_cpu_s": statistics.median(r["b"]["cpu"] for r in rows),
        "a_peak_rss_mb": max(r["a"]["rss_mb"] for r in rows),
        "b_peak_rss_mb": max(r["b"]["rss_mb"] for r in rows),
        "load_before": load0,
        "load_after": load1,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("commands", nargs="*", help="A B (shell strings), or FILE with --preset")
    ap.add_argument("--preset", choices=["parquet", "gz"])
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--warm", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-compile", action="store_true", help="time searchveil as it is on disk")
    a = ap.parse_args()
    if a.preset:
        if len(a.commands) != 1:
            ap.error("--preset takes one FILE")
        f = a.commands[0]
        py = sys.executable
        cmd_a = RELEASE.format(py=py, file=f)
        cmd_b = (
            PLAIN.format(py=py, bench=HERE / "engines_bench.py", file=f)
            if a.preset == "parquet"
            else ZCAT.format(file=f)
        )
    elif len(a.commands) == 2:
        cmd_a, cmd_b = a.commands
    else:
        ap.error("give two commands, or --preset and a FILE")
    if not a.no_compile:
        sys.path.insert(0, str(HERE))
        from run import compile_bytecode  # benchmarks/run.py

        compile_bytecode()
    res = paired(cmd_a, cmd_b, a.pairs, a.warm)
    res["bytecode_compiled"] = not a.no_compile
    if a.json:
        print(json.dumps(res))
        return
    print(f"A: {cmd_a}\nB: {cmd_b}")
    print(f"load {res['load_before'][0]:.1f} -> {res['load_after'][0]:.1f}")
    print(
        f"wall A/B {res['wall_ratio']:.2f}x  ({', '.join(f'{x:.2f}' for x in res['wall_ratios'])})"
    )
    print(f"cpu  A/B {res['cpu_ratio']:.2f}x  ({', '.join(f'{x:.2f}' for x in res['cpu_ratios'])})")
    print(
        f"A {res['a_wall_s']:.2f} s wall {res['a_cpu_s']:.2f} s cpu {res['a_peak_rss_mb']:.0f} MiB"
        f" | B {res['b_wall_s']:.2f} s wall {res['b_cpu_s']:.2f} s cpu"
        f" {res['b_peak_rss_mb']:.0f} MiB"
    )


if __name__ == "__main__":
    main()
