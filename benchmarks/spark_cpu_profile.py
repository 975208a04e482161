"""Where a release's CPU seconds go, Spark against Polars: a measure that survives a loaded
machine (wall seconds do not; docs/spark-perf.md, "Speed on one machine").

``python benchmarks/spark_cpu_profile.py --file LOG.parquet [--engine spark|polars]
[--releases N] [--spark-conf KEY=VALUE ...] [--tasks] [-- EXTRA RELEASE ARGS]``

Runs ``release korolova LOG --max-queries 20 --max-clicks 1 --urls private`` (e^ε = 10,
δ = 1e-7; unseeded; ``-- --selection probe-reweight-2r --max-users 2000000``: the selection
release instead of ``--max-queries 20``) ``--releases`` times in one process (the first cold,
the others warm: the Spark session and its Python workers already up) and prints for each
release its wall seconds, the CPU seconds of this process and of every process it started, by
name (the driver's and the executors' Python, the JVM), the JVM's CPU by thread (executor
tasks, JIT compilers, GC), and, for Spark, the wall seconds of each action (the bounding job,
each noise stage), with ``/proc/loadavg``; ``--tasks``: the CPU seconds of the Python tasks
by the function they run (the bounding kernel, a round's sums, a noise stage: each task's
worker process, all its threads). Linux only (reads /proc). ``--spark-conf
spark.eventLog.enabled=true --spark-conf spark.eventLog.dir=DIR`` adds Spark's own per-stage
task metrics for a closer look.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_TCK = os.sysconf("SC_CLK_TCK")
_SEEN: dict[int, tuple[str, float]] = {}


def _procs() -> dict[int, tuple[int, str, float]]:
    """pid → (parent, name, CPU seconds) of every process (from /proc)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        f = stat[stat.rindex(")") + 2 :].split()
        out[int(d)] = (int(f[1]), name, (int(f[11]) + int(f[12])) / _TCK)
    return out


def _tree(table: dict[int, tuple[int, str, float]]) -> set[int]:
    kids, frontier = {os.getpid()}, {os.getpid()}
    while frontier:
        frontier = {p for p, (pp, _, _) in table.items() if pp in frontier} - kids
        kids |= frontier
    return kids


def cpu_by_name() -> dict[str, float]:
    """CPU seconds of this process and its descendants (those seen so far, alive or not)."""
    table = _procs()
    for pid in _tree(table):
        if pid in table:
            _SEEN[pid] = (table[pid][1], table[pid][2])
    by: dict[str, float] = {}
    for name, cpu in _SEEN.values():
        by[name] = by.get(name, 0.0) + cpu
    return by


def jvm_threads() -> dict[str, float]:
    """CPU seconds of the JVMs' threads, by thread name (digits folded)."""
    table = _procs()
    by: dict[str, float] = {}
    for pid in _tree(table):
        if table.get(pid, (0, "", 0))[1] != "java":
            continue
        for th in os.listdir(f"/proc/{pid}/task"):
            try:
                stat = Path(f"/proc/{pid}/task/{th}/stat").read_text()
            except OSError:
                continue
            name = re.sub(r"[0-9#]+", "N", stat[stat.index("(") + 1 : stat.rindex(")")])
            f = stat[stat.rindex(")") + 2 :].split()
            by[name] = by.get(name, 0.0) + (int(f[11]) + int(f[12])) / _TCK
    return by


def _diff(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    d = {k: round(v - a.get(k, 0.0), 1) for k, v in b.items()}
    return dict(sorted(((k, v) for k, v in d.items() if v >= 0.1), key=lambda kv: -kv[1]))


def _time_actions(log: list[Any]) -> None:
    """Wrap the Spark engine's actions (the bounding job, every ``toArrow``) to time them."""
    import searchveil.engines.spark as s
    import searchveil.engines.spark_kernel as sk
    import searchveil.engines.spark_pools as sp
    import searchveil.engines.spark_release as sr

    to_polars, aggregate = sr.to_polars, sk._aggregate

    def timed(df: Any, where: str) -> Any:
        t = time.perf_counter()
        out = to_polars(df, where)
        log.append(("action", round(time.perf_counter() - t, 2), out.height))
        return out

    def agg(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        out = aggregate(*a, **k)
        log.append(("bounding job", round(time.perf_counter() - t, 2)))
        return out

    sr.to_polars = sp.to_polars = s.to_polars = timed
    sk._aggregate = agg


def _time_tasks(logs: Path) -> None:
    """Wrap every ``mapInArrow`` function so that each task appends its function's name, wall
    seconds and its Python worker's CPU seconds (every thread: Polars' too) to ``logs``."""
    try:
        from pyspark.sql.classic.dataframe import DataFrame
    except ImportError:  # PySpark 3
        from pyspark.sql import DataFrame

    original = DataFrame.mapInArrow

    def wrap(fn: Any) -> Any:
        name = getattr(getattr(fn, "func", fn), "__name__", "?")
        where = str(logs)

        def timed(batches: Any) -> Any:
            import os
            import resource
            import time

            t, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
            yield from fn(batches)
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
            with open(os.path.join(where, f"{os.getpid()}.log"), "a") as f:
                f.write(f"{name} {time.perf_counter() - t:.3f} {cpu:.3f}\n")

        return timed

    def mapInArrow(self: Any, func: Any, schema: Any, *a: Any, **k: Any) -> Any:  # noqa: N802
        return original(self, wrap(func), schema, *a, **k)

    DataFrame.mapInArrow = mapInArrow  # type: ignore[method-assign]


def _task_totals(logs: Path, seen: dict[Path, int]) -> str:
    """The tasks' CPU seconds by function since the last call: the logs' lines after the
    bytes ``seen`` already read (the logs stay: the temporary directory goes at the end)."""
    by: dict[str, list[float]] = {}
    for f in sorted(logs.glob("*.log")):
        with f.open("rb") as fh:
            fh.seek(seen.get(f, 0))
            new = fh.read()
        new = new[: new.rfind(b"\n") + 1]  # whole lines only
        seen[f] = seen.get(f, 0) + len(new)
        for line in new.decode().splitlines():
            name, wall, cpu = line.split()
            v = by.setdefault(name, [0, 0.0, 0.0])
            v[0] += 1
            v[1] += float(wall)
            v[2] += float(cpu)
    rows = sorted(by.items(), key=lambda kv: -kv[1][2])
    return ", ".join(f"{k} {v[2]:.1f} ({int(v[0])} tasks)" for k, v in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", type=Path, required=True)
    ap.add_argument("--engine", choices=["spark", "polars"], default="spark")
    ap.add_argument("--releases", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--spark-conf", action="append", default=[])
    ap.add_argument(
        "--tasks", action="store_true", help="also each task function's CPU s (local masters)"
    )
    ap.add_argument("extra", nargs="*", help="more `release korolova` arguments (after --)")
    a = ap.parse_args()
    from searchveil.cli import build_app

    app = build_app()
    d = [] if "--selection" in a.extra else ["--max-queries", "20"]
    args = [
        "release",
        "korolova",
        str(a.file),
        "--epsilon",
        repr(math.log(10)),
        "--delta",
        "1e-7",
        *d,
        "--max-clicks",
        "1",
        "--urls",
        "private",
        "--json",
        "--engine",
        a.engine,
        *a.extra,
    ]
    if a.engine == "spark":
        args += ["--spark-master", a.master]
        for kv in a.spark_conf:
            args += ["--spark-conf", kv]
    log: list[Any] = []
    if a.engine == "spark":
        _time_actions(log)
    with tempfile.TemporaryDirectory(prefix="sv-cpu-") as tmp:  # every release a new --out
        tasks = Path(tmp) / "tasks" if a.tasks and a.engine == "spark" else None
        seen: dict[Path, int] = {}
        if tasks is not None:
            tasks.mkdir()
            _time_tasks(tasks)
        for i in range(a.releases):
            _one(app, [*args, "--out", str(Path(tmp) / f"rel{i}")], i, a.engine, log)
            if tasks is not None:
                print(f"  Python task CPU s by function: {_task_totals(tasks, seen)}", flush=True)


def _one(app: Any, args: list[str], i: int, engine: str, log: list[Any]) -> None:
    """One release in this process, timed: wall, CPU by process, JVM CPU by thread, actions."""
    from typer.testing import CliRunner

    c0, j0, t = cpu_by_name(), jvm_threads(), time.perf_counter()
    r = CliRunner().invoke(app, args)
    wall = time.perf_counter() - t
    if r.exit_code != 0:
        raise SystemExit(f"release {i} failed ({r.exit_code}): {r.output[-2000:]}")
    print(
        f"release {i} ({'cold' if i == 0 else 'warm'}, {engine}): wall {wall:.2f} s, "
        f"load {Path('/proc/loadavg').read_text().split()[:3]}",
        flush=True,
    )
    print(f"  CPU s by process: {_diff(c0, cpu_by_name())}")
    if engine == "spark":
        print(f"  JVM CPU s by thread: {_diff(j0, jvm_threads())}")
        print(f"  actions (wall s): {log}")
        log.clear()


if __name__ == "__main__":
    sys.exit(main())
