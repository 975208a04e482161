"""CELS at scale (issue 41 item 4, issue 42 item 5): r parties on a user-disjoint split of the
first million rows of the 100,000-user synthetic AOL-calibrated log, ``--mode e2e`` with the
distributed noise and the public sizes, the log in the input's own columns (``--schema input``,
the default; ``--schema counts`` the four-column log); wall seconds, bytes sent in total and per
phase, progress per phase on stderr.

Data (once, ~15 s)::

    PYTHONPATH=src searchveil synth --like src/searchveil/data/aol-gayo-avello-215-users.tsv \\
        --users 100000 --rows 3000000 --seed 7 --out SCRATCH/syn100k.tsv.gz

Run (the lead's idle-machine measurement)::

    PYTHONPATH=src python benchmarks/cels_scale_bench.py --log SCRATCH/syn100k.tsv.gz \\
        --work SCRATCH/cels-scale --parties 5

The split: the log's users in file order, whole users only, up to 1,000,000 rows (33,475 users,
999,966 rows), dealt round-robin by user into the shares (user i → share i mod r). ε = ln 10,
δ = 10⁻⁶, declared U = 100,000 (δ < 1/U), m by the public default rule (25 with the input's
columns, whose split gives the pair counts 0.7 of ε; 27 with the counts log), a declared bound of
60,000 distinct bounded pairs per party (``--max-party-pairs``; every share holds about 53,000
to 54,800) and, with the input's columns, of 40,000 distinct bounded query pairs per party
(``--max-party-query-pairs``; every share holds about 38,000, m_q = 13 by its rule); ε_u = ln 10,
the same as ε (``--union-epsilon``, required; with the input's columns half of it goes to each
union), K = 1,000.

    PYTHONPATH=src python benchmarks/cels_scale_bench.py --log SCRATCH/syn100k.tsv.gz \\
        --work SCRATCH/cels-scale --parties 5 --schema counts   # the four-column log
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import polars as pl

from searchveil.cels.params import CelsParams
from searchveil.cels.runner import run_local


def split(log: Path, work: Path, parties: int, rows: int) -> list[Path]:
    """The shares (cached in ``work``): whole users up to ``rows`` rows, user i → share i mod r."""
    paths = [work / f"share{k + 1}-of-{parties}.tsv" for k in range(parties)]
    if all(p.exists() for p in paths):
        return paths
    df = pl.read_csv(log, separator="\t", quote_char=None, infer_schema=False)
    cut = df.head(rows)
    if df.height > rows and df.get_column("AnonID")[rows] == cut.get_column("AnonID")[-1]:
        cut = cut.filter(pl.col("AnonID") != cut.get_column("AnonID")[-1])
    ids = cut.get_column("AnonID").unique(maintain_order=True)
    deal = pl.DataFrame({"AnonID": ids, "k": pl.int_range(ids.len(), eager=True) % parties})
    cut = cut.join(deal, on="AnonID", how="left", maintain_order="left")
    work.mkdir(parents=True, exist_ok=True)
    for k, p in enumerate(paths):
        cut.filter(pl.col("k") == k).drop("k").write_csv(p, separator="\t", quote_style="never")
    print(f"split: {cut.height:,} rows, {ids.len():,} users into {parties} shares", file=sys.stderr)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--log", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--parties", type=int, default=5)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--party-pairs", type=int, default=60_000)
    ap.add_argument("--party-query-pairs", type=int, default=40_000)
    ap.add_argument("--schema", choices=("input", "counts"), default="input")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    shares = split(args.log, args.work, args.parties, args.rows)
    qp = args.party_query_pairs if args.schema == "input" else None
    params = CelsParams(epsilon=math.log(10), delta=1e-6, max_users=100_000,
                        max_party_pairs=args.party_pairs, union_epsilon=math.log(10),
                        schema=args.schema, max_party_query_pairs=qp)  # fmt: skip
    out = args.work / "out"
    for p in (out, out.with_name("out.private.json")):
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    res = run_local(shares, params, out, seed=args.seed, timeout=900,
                    progress=lambda s: print(s, file=sys.stderr, flush=True))  # fmt: skip
    wall = time.perf_counter() - t0
    stats = res["party_stats"]
    sent = sum(p["traffic"]["sent_total"] for p in stats)
    phases: dict[str, int] = {}
    for p in stats:
        for ph, b in p["traffic"]["sent"].items():
            phases[ph] = phases.get(ph, 0) + b
    counts = pl.read_csv(out / "counts.tsv", separator="\t", quote_char=None)
    log = pl.read_csv(out / "log.tsv", separator="\t", quote_char=None, infer_schema=False)
    qpairs = out / "query_pairs.tsv"
    print(json.dumps({
        "parties": args.parties, "wall_seconds": round(wall, 1),
        "load_before": [round(x, 1) for x in load0],
        "load_after": [round(x, 1) for x in os.getloadavg()],
        "mb_sent_total": round(sent / 1e6, 2),
        "mb_sent_per_phase": {k: round(v / 1e6, 2) for k, v in sorted(phases.items())},
        "mb_sent_per_party": [round(p["traffic"]["sent_total"] / 1e6, 2) for p in stats],
        "seconds_per_party": [round(sum(p["seconds"].values()), 1) for p in stats],
        "cpu_seconds_per_party": [round(sum(p["cpu_seconds"].values()), 1) for p in stats],
        "schema": args.schema, "published_pairs": counts.height, "log_rows": log.height,
        "log_columns": log.columns,
        "published_query_pairs": pl.read_csv(qpairs, separator="\t", quote_char=None).height
        if qpairs.exists() else None,
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
