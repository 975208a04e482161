"""Issue 40's done-when measurements: Spark against Polars with the driver bounded by the
release, not the input.

``python benchmarks/spark_driver_bench.py --file LOG20M.parquet [--file LOG40M.parquet]
[--releases korolova probe-reweight-2r] [--modes cli warm equal] [--master local[2]] [--repeat N]``

For each log and release (Korolova d = 20, and ``--selection probe-reweight-2r``; both with one
click per user, e^ε = 10, δ = 1e-7), with ``SEARCHVEIL_SPARK_DRIVER_MEMORY=1g`` and Spark's
default ``spark.driver.maxResultSize`` (1g: ``SEARCHVEIL_SPARK_MAX_RESULT_SIZE`` unset):

* ``cli`` — cold, whole process, side by side: ``searchveil release … --engine polars`` and
  ``--engine spark --spark-master MASTER`` (unseeded: a real release), ``--repeat`` pairs in
  turn, the log read once before each pair (so that neither engine pays the disk: this VM's
  page cache is reclaimed between runs), wall seconds, each pair's ratio and their median; for
  Spark the peak RSS of the driver's Python process and of the driver's JVM (sampled every
  0.1 s: with a local master that JVM also runs the tasks; the executors' Python workers are
  separate processes and not counted), and ``--json``'s rows the driver received against the
  rows it wrote (``private.report.driver_rows``);
* ``warm`` — one process per engine, two releases in it, the second timed (Spark: the session
  and its Python workers already up), ``--repeat`` pairs in turn, each pair's ratio and their
  median;
* ``equal`` — both engines under ``--seed 7``: every file of the two releases byte-identical
  (the ledger's creation time aside).

``--standalone``: start a standalone cluster on loopback first (a master and two 1-core
workers of ``--worker-memory``, from the installed PySpark's ``spark-class``; stopped at the
end) and use it as the master.

Prints a Markdown table and one JSON line per figure, with ``/proc/loadavg`` before and after
each. The logs come from ``searchveil synth`` (docs/spark-perf.md, "Reproduce"); keep them out
of the repository.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

EPS, DELTA = math.log(10), 1e-7
RELEASES = {
    "korolova": ["--max-queries", "20", "--max-clicks", "1", "--urls", "private"],
    "probe-reweight-2r": ["--selection", "probe-reweight-2r", "--max-clicks", "1", "--urls",
                          "private", "--max-users", "2000000"],
}  # fmt: skip
ENV = {"SEARCHVEIL_SPARK_DRIVER_MEMORY": "1g"}


def _args(release: str, path: Path, out: str, engine: str, master: str) -> list[str]:
    a = ["release", "korolova", str(path), "--epsilon", repr(EPS), "--delta", repr(DELTA),
         *RELEASES[release], "--out", out, "--json", "--engine", engine]  # fmt: skip
    return a + (["--spark-master", master] if engine == "spark" else [])


def _load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def _proc_table() -> dict[int, tuple[int, str, int]]:
    """pid → (parent pid, command name, RSS bytes) of every process (from /proc)."""
    out = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            rss = int(Path(f"/proc/{d}/statm").read_text().split()[1]) * page
            out[int(d)] = (int(fields[1]), name, rss)
        except (OSError, ValueError, IndexError):
            continue
    return out


class Peaks:
    """Peak RSS of a process and of its ``java`` descendants, sampled every 0.1 s (/proc)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.python = self.jvm = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            table = _proc_table()
            if self.pid not in table:
                continue
            self.python = max(self.python, table[self.pid][2])
            kids, frontier = set(), {self.pid}
            while frontier:
                frontier = {p for p, (pp, _, _) in table.items() if pp in frontier} - kids
                kids |= frontier
            jvm = sum(table[k][2] for k in kids if table[k][1] == "java")
            self.jvm = max(self.jvm, jvm)

    def stop(self) -> tuple[int, int]:
        self._stop.set()
        self._t.join()
        return self.python, self.jvm


def _cached(path: Path) -> None:
    """Read ``path`` once: a cold process, not a cold disk."""
    with open(path, "rb") as f:
        while f.read(16 << 20):
            pass


def cli(release: str, path: Path, engine: str, master: str, seed: int | None = None,
        out: str | None = None) -> dict[str, Any]:  # fmt: skip
    """One cold CLI run: wall seconds, peak RSS (MB), the --json summary's driver rows."""
    tmp = tempfile.mkdtemp(prefix="sv-bench-")
    dest = out or f"{tmp}/rel"
    cmd = [sys.executable, "-m", "searchveil", *_args(release, path, dest, engine, master)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    load0 = _load()
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=os.environ | ENV)  # fmt: skip
    peaks = Peaks(p.pid)
    stdout, stderr = p.communicate()
    wall = time.perf_counter() - t
    py, jvm = peaks.stop()
    if p.returncode != 0:
        raise SystemExit(f"{engine} {release} failed ({p.returncode}): {stderr[-3000:]}")
    res = json.loads(stdout)
    report = res.get("private", {}).get("report", {})
    return {"engine": engine, "release": release, "file": path.name, "wall_s": round(wall, 1),
            "python_peak_mb": round(py / 2**20), "jvm_peak_mb": round(jvm / 2**20),
            "driver_rows": report.get("driver_rows"), "outputs": res.get("outputs"),
            "load_before": load0, "load_after": _load(), "out": dest}  # fmt: skip


WARM = """
import json, sys, time
from searchveil.cli import app
from typer.testing import CliRunner
args = json.loads(sys.argv[1])
r = CliRunner().invoke(app, args[0])
assert r.exit_code == 0, r.output[-2000:]
t = time.perf_counter()
r = CliRunner().invoke(app, args[1])
assert r.exit_code == 0, r.output[-2000:]
print(json.dumps({"second_s": time.perf_counter() - t}))
"""


def warm(release: str, path: Path, engine: str, master: str) -> dict[str, Any]:
    """Two releases in one process; the second's wall seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = [_args(release, path, f"{tmp}/r{i}", engine, master) for i in (1, 2)]
        load0 = _load()
        r = subprocess.run([sys.executable, "-c", WARM, json.dumps(runs)], capture_output=True,
                           text=True, env=os.environ | ENV)  # fmt: skip
    if r.returncode != 0:
        raise SystemExit(f"warm {engine} {release} failed: {r.stderr[-3000:]}")
    second = json.loads(r.stdout.strip().splitlines()[-1])["second_s"]
    return {"engine": engine, "release": release, "file": path.name, "warm_s": round(second, 1),
            "load_before": load0, "load_after": _load()}  # fmt: skip


def same_release(a: Path, b: Path) -> list[str]:
    """The files that differ (the ledger's creation time aside)."""
    bad = []
    names = sorted(p.name for p in a.iterdir())
    if names != sorted(p.name for p in b.iterdir()):
        return ["file names"]
    for name in names:
        x, y = (a / name).read_bytes(), (b / name).read_bytes()
        if name == "ledger.json":
            la, lb = json.loads(x), json.loads(y)
            la.pop("created_utc"), lb.pop("created_utc")
            if la != lb:
                bad.append(name)
        elif x != y:
            bad.append(name)
    return bad


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def standalone(worker_memory: str, tmp: Path) -> tuple[str, list[subprocess.Popen[bytes]]]:
    """A master and two 1-core workers on loopback (as tests/test_spark_cluster.py starts
    them); returns the master URL and the daemons."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    port, ui = _free_port(), _free_port()
    env = os.environ | {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp),
                        "PYSPARK_PYTHON": sys.executable}  # fmt: skip
    master = f"spark://127.0.0.1:{port}"
    cmds = [["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
             str(port), "--webui-port", str(ui)]]  # fmt: skip
    for i in range(2):
        cmds.append(["org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1",
                     "--cores", "1", "--memory", worker_memory, "--webui-port",
                     str(_free_port()), "--work-dir", str(tmp / f"w{i}")])  # fmt: skip
    procs = [subprocess.Popen([str(spark_class), *c], env=env, start_new_session=True,
                              stdout=(tmp / f"d{i}.log").open("wb"), stderr=subprocess.STDOUT)
             for i, c in enumerate(cmds)]  # fmt: skip
    import urllib.request

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                if int(json.loads(r.read()).get("aliveworkers", 0)) >= 2:
                    return master, procs
        except OSError:
            pass
        time.sleep(1)
    stop(procs)
    raise SystemExit("the standalone cluster did not come up")


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    import signal

    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--file", type=Path, action="append", required=True)
    ap.add_argument("--releases", nargs="+", default=list(RELEASES), choices=list(RELEASES))
    ap.add_argument("--modes", nargs="+", default=["cli", "warm", "equal"],
                    choices=["cli", "warm", "equal"])  # fmt: skip
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeat", type=int, default=1, help="pairs per release and mode, in turn")
    ap.add_argument("--standalone", action="store_true")
    ap.add_argument("--worker-memory", default="2g")
    a = ap.parse_args()
    procs: list[subprocess.Popen[bytes]] = []
    if a.standalone:
        a.master, procs = standalone(a.worker_memory, Path(tempfile.mkdtemp(prefix="sv-cl-")))
    try:
        run(a)
    finally:
        stop(procs)


def run(a: argparse.Namespace) -> None:
    """The measurements of ``a`` (see the module docstring)."""
    rows = []
    for path in a.file:
        for rel in a.releases:
            for mode, measure, key in (("cli", cli, "wall_s"), ("warm", warm, "warm_s")):
                if mode not in a.modes:
                    continue
                for _ in range(a.repeat):
                    if mode == "cli":
                        _cached(path)
                    pair = [measure(rel, path, e, a.master) for e in ("polars", "spark")]
                    pair[1]["ratio"] = round(pair[1][key] / pair[0][key], 2)
                    for r in pair:
                        print(json.dumps(r), flush=True)
                    rows += pair
            if "equal" in a.modes:
                with tempfile.TemporaryDirectory() as tmp:
                    outs = [cli(rel, path, e, a.master, seed=7, out=f"{tmp}/{e}")
                            for e in ("polars", "spark")]  # fmt: skip
                    diff = same_release(Path(outs[0]["out"]), Path(outs[1]["out"]))
                r = {"release": rel, "file": path.name, "equal_under_seed": not diff,
                     "differ": diff, "spark": outs[1]}  # fmt: skip
                print(json.dumps(r), flush=True)
                rows.append(r)
    cols = [
        "file",
        "release",
        "engine",
        "cold CLI s",
        "ratio",
        "warm s",
        "Python peak MB",
        "JVM peak MB",
        "driver rows received / written",
        "load",
    ]
    print("\n| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        if "engine" not in r:
            continue
        dr = r.get("driver_rows") or {}
        got = f"{dr.get('received', '')} / {dr.get('written', '')}" if dr else ""
        print(f"| {r['file']} | {r['release']} | {r['engine']} | {r.get('wall_s', '')} | "
              f"{r.get('ratio', '')} | {r.get('warm_s', '')} | {r.get('python_peak_mb', '')} | "
              f"{r.get('jvm_peak_mb', '')} | {got} | {r['load_before']} |")  # fmt: skip
    for path in a.file:
        for rel in a.releases:
            for mode, key in (("cold CLI", "wall_s"), ("warm", "warm_s")):
                ratios = [
                    r["ratio"]
                    for r in rows
                    if r.get("release") == rel
                    and r.get("file") == path.name
                    and key in r
                    and "ratio" in r
                ]
                if ratios:
                    print(
                        f"{path.name} {rel} {mode}: Spark ÷ Polars {ratios}, median "
                        f"{statistics.median(ratios):.2f}"
                    )
    for r in rows:
        if "equal_under_seed" in r:
            print(f"equal under --seed 7 ({r['file']}, {r['release']}): {r['equal_under_seed']}")


if __name__ == "__main__":
    main()
