"""The fidelity table of docs/ump-reproduction.md ("Fidelity"; issue 42 item 4).

``python benchmarks/fidelity_table.py [--dir DIR] [--users 100000] [--rows 3000000]
[--release LABEL=DIR ...] [--seed 1]``

On the 100,000-user AOL-calibrated synthetic log (made in DIR if it is not there:
``searchveil synth --like src/searchveil/data/aol-gayo-avello-215-users.tsv --users 100000
--rows 3000000 --seed 7 --out DIR/syn100k.tsv.gz``), computes ``searchveil evaluate``'s fidelity
figures (:mod:`searchveil.evaluate.fidelity`) of:

* **the original against itself** — the top of every scale (distances 0, MAP 1);
* **an independent draw of the same generator** (the same command with ``--seed 8``): a log
  from the original's own distribution and none of its rows — the reference for a generator
  that knows the statistics exactly and adds no noise (``synth --like`` the 100,000-user log
  itself needs a dense users × queries matrix of 29.5 GiB, so the draw stands in for it);
* **``release ump``** as the code at hand writes it, with the issue's command and ``--seed``
  (an experiment): ``release ump syn100k.tsv.gz --out R --epsilon 2.302585 --delta 1e-6
  --max-users 100000 --seed 1``, into a new temporary directory under DIR every run;
* every ``--release LABEL=DIR`` given (a release directory already written from that log).

Prints a Markdown table (one row per figure, one column per log) and writes
``benchmarks/results/fidelity_syn100k.json``. Reads the private log: the figures are for the
data holder, as ``evaluate``'s are. The two synthetic logs are reused when DIR has them: give
a new DIR after a change to ``synth``. About 200 s of CPU and 3.8 GB (10 min wall on the shared
box at load 10).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

from searchveil.evaluate import evaluate_loaded, load_release, log_as_release, original_histograms
from searchveil.evaluate.fidelity import FIGURES
from searchveil.io.readers import read_log

HERE = Path(__file__).resolve().parent
SAMPLE = HERE.parent / "src" / "searchveil" / "data" / "aol-gayo-avello-215-users.tsv"


def _run(*args: str) -> None:
    print("$ searchveil " + " ".join(args), file=sys.stderr, flush=True)
    subprocess.run(["searchveil", *args], check=True, stdout=subprocess.DEVNULL)


def _synth(out: Path, users: int, rows: int, seed: int) -> Path:
    if not out.exists():
        _run("synth", "--like", str(SAMPLE), "--users", str(users), "--rows", str(rows),
             "--seed", str(seed), "--out", str(out))  # fmt: skip
    return out


def _cell(f: dict[str, Any]) -> str:
    """One figure as a table cell: its value (and the context that reads it), or its status."""
    if f.get("value") is None:
        return str(f.get("status"))
    v = f"{f['value']:.3f}"
    if "coverage" in f:
        return f"{v} (coverage {f['coverage']:.2f})"
    if "wasserstein_1" in f:
        return f"{v} (W1 {f['wasserstein_1']:.2f})"
    if f.get("distance") == "absolute difference":
        return f"{v} ({100 * f['release']:.1f} % vs {100 * f['original']:.1f} %)"
    return v


def _rows(rel: Any) -> int:
    df = rel.same_schema_log
    if df is None:
        return 0
    cnt = next((c for c in ("Count", "count") if c in df.columns), None)
    return int(df.get_column(cnt).cast(pl.Int64).sum()) if cnt else df.height


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=Path("fidelity-data"))
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--release", action="append", default=[], metavar="LABEL=DIR")
    ap.add_argument("--seed", type=int, default=1, help="release ump's seed (an experiment)")
    ap.add_argument("--substitution-queries", type=int, default=1000)
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    orig_path = _synth(a.dir / "syn100k.tsv.gz", a.users, a.rows, 7)
    draw_path = _synth(a.dir / "syn100k-seed8.tsv.gz", a.users, a.rows, 8)
    # a new release every run (the code at hand writes it), removed at the end with its record
    tmp = tempfile.TemporaryDirectory(dir=a.dir, prefix="ump-")
    ump = Path(tmp.name) / "R"
    _run("release", "ump", str(orig_path), "--out", str(ump), "--epsilon", "2.302585",
         "--delta", "1e-6", "--max-users", str(a.users), "--seed", str(a.seed))  # fmt: skip
    t0 = time.perf_counter()
    log = read_log(orig_path)
    orig = original_histograms(log)
    print(f"read the original: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    logs: dict[str, Any] = {
        "original itself": lambda: log_as_release(log),
        "independent draw (synth --seed 8)": lambda: log_as_release(read_log(draw_path)),
        "release ump (the code at hand)": lambda: load_release(ump),
    }
    for spec in a.release:
        label, _, d = spec.partition("=")
        logs[label] = lambda d=d: load_release(d)
    results: dict[str, Any] = {}
    for label, load in logs.items():
        t = time.perf_counter()
        rel = load()
        ev = evaluate_loaded(log, rel, original=orig, metrics=("fidelity",),
                             substitution_queries=a.substitution_queries)  # fmt: skip
        results[label] = {"rows": _rows(rel), "seconds": round(time.perf_counter() - t, 1),
                          "fidelity": ev["fidelity"]}  # fmt: skip
        print(f"{label}: {results[label]['seconds']} s", file=sys.stderr, flush=True)
    tmp.cleanup()
    out = {"log": orig_path.name, "rows": log.n_rows, "users": log.n_users, "ump_seed": a.seed,
           "substitution_queries": a.substitution_queries, "logs": results}  # fmt: skip
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "fidelity_syn100k.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"\n{orig_path.name}: {log.n_rows:,} rows, {log.n_users:,} users\n")
    print("| figure | " + " | ".join(results) + " |")
    print("|---" * (len(results) + 1) + "|")
    print("| rows | " + " | ".join(f"{r['rows']:,}" for r in results.values()) + " |")
    cols = (" ".join(r["fidelity"].get("release_columns") or ["—"]) for r in results.values())
    print("| columns | " + " | ".join(cols) + " |")
    for key in FIGURES:
        cells = []
        for r in results.values():
            fid = r["fidelity"]
            cells.append(_cell(fid[key]) if fid.get("applicable") else "not a same-schema log")
        print(f"| {key} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
