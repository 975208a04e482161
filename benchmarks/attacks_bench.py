"""Lookahead attacks (thesis ch. 6) speed: ``python benchmarks/attacks_bench.py [--quick]``.

* n = 100,000 configuration-model power-law graph (α = 3, d_min = 5, d_max = ⌊√n⌋): all five
  strategies at lookahead 1, 2, 3 to 0.99 coverage (the target: "minutes on 2 cores");
* n = 1,000,000: Highest-Degree and Uniform-Random at lookahead 1, 2, 3 to 0.99 coverage.

Each run reports wall seconds (``time.perf_counter``), bribes needed and, for the adaptive
strategies, their work counters. Results: ``benchmarks/results/attacks.json`` and a Markdown
table on stdout. ``--quick`` uses n = 20,000 and 100,000 instead (a smoke run).
Timings are single-threaded numpy on whatever the machine is doing; say so when quoting them.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from searchveil.attacks.lookahead.attack import STRATEGIES, STRATEGY_NAMES, run_attack
from searchveil.attacks.lookahead.graphs import power_law_graph
from searchveil.io.ledger import write_json_atomic
from searchveil.rng import make_rng

HERE = Path(__file__).resolve().parent


def bench(n: int, strategies: tuple[str, ...], seed: int) -> list[dict[str, Any]]:
    t0 = time.perf_counter()
    g = power_law_graph(n, 3.0, 5, make_rng(seed))
    gen = time.perf_counter() - t0
    rows = [{"n": n, "strategy": "(generate graph)", "lookahead": None, "seconds": gen,
             "edges": g.n_edges}]  # fmt: skip
    for s in strategies:
        for ell in (1, 2, 3):
            t0 = time.perf_counter()
            r = run_attack(g, strategy=s, lookahead=ell, rng=make_rng(seed + 1))
            secs = time.perf_counter() - t0
            row = {
                "n": n,
                "strategy": STRATEGY_NAMES[s],
                "lookahead": ell,
                "seconds": round(secs, 3),
                "bribes_0.8": r.bribes_needed(0.8),
                "bribes_0.99": r.bribes_needed(0.99),
                "stats": {k: v for k, v in r.stats.items() if k != "start"},
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "attacks.json")
    a = ap.parse_args()
    small, large = (20_000, 100_000) if a.quick else (100_000, 1_000_000)
    rows = bench(small, STRATEGIES, a.seed)
    rows += bench(large, ("highest", "random"), a.seed)
    total_small = sum(r["seconds"] for r in rows if r["n"] == small)
    result = {
        "machine": {"python": platform.python_version(), "processor": platform.processor()},
        "rows": rows,
        "total_seconds_small_all_strategies": round(total_small, 2),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(a.out, result)
    print("\n| n | strategy | ℓ | seconds | bribes for 0.8 | bribes for 0.99 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['n']:,} | {r['strategy']} | {r['lookahead'] or ''} | {r['seconds']:.2f} | "
            f"{r.get('bribes_0.8', '')} | {r.get('bribes_0.99', '')} |"
        )
    print(f"\nall five strategies × ℓ = 1, 2, 3 at n = {small:,}: {total_small:.1f} s")


if __name__ == "__main__":
    main()
