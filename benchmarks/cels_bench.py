"""CELS benchmark (issue 23 targets; issue 13's before them).

* 3 parties on the first 99,842 click rows of the AOL top-1000 sample at the default 3072-bit
  key, ``--min-count 20``, ε = 1, δ = 0.0009: ≤ 60 s wall and ≤ 25 MB sent in total (was
  151 s / 110.4 MB), P0's LP optimum equal to the centralized LP on the union;
* the whole AOL sample (``--rows 0``) for comparison with the old 920 s / 480 MB.

Prints wall and CPU seconds per phase and party, bytes sent per party and phase, the cost
model's prediction, and the load average before and after (the machine is shared).

Input: the first ``--rows`` click rows of the AOL top-1000 sample (whole users) when
``../shared`` exists, else the synthetic AOL-like generator. ``--model-only`` prints the cost
model's prediction (bytes per phase, Paillier exponentiations per party) without running.

    PYTHONPATH=src python benchmarks/cels_bench.py --rows 100000 --parties 3 --min-count 20
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from searchveil.cels.costs import predict_bytes, predict_work, protocol_sizes
from searchveil.cels.params import ETA, CelsParams
from searchveil.cels.reproduce import AOL_TOP1000, PAPER_TABLE5, split_users, synthetic_log
from searchveil.cels.runner import run_local
from searchveil.io.readers import read_log
from searchveil.model import SearchLog, click_histogram
from searchveil.release.ump import constraint_block, preprocess
from searchveil.release.ump.kl import cels_bound, max_output_size


def load(rows: int) -> SearchLog:
    if AOL_TOP1000.exists():
        log = read_log(AOL_TOP1000)
        df = log.df.filter(pl.col("url").is_not_null())
        if rows <= 0:
            return SearchLog.from_frame(
                df.select("user", "query", "url"), name=f"AOL top-1000, all {df.height} clicks"
            )
        users = (
            df.group_by("user", maintain_order=True)
            .len()
            .with_columns(pl.col("len").cum_sum().alias("cum"))
        )
        keep = users.filter(pl.col("cum") <= rows).get_column("user")
        sub = df.filter(pl.col("user").is_in(keep.implode()))
        return SearchLog.from_frame(
            sub.select("user", "query", "url"), name=f"AOL top-1000, first {sub.height} clicks"
        )
    return synthetic_log(users=max(50, rows // 25), seed=0)


def central_lp(log: SearchLog, args: argparse.Namespace) -> float:
    """|𝕆| of the centralized LP on the union (Condition 1 + min_count), tightened by η as P0's."""
    inp = preprocess(click_histogram(log))
    keep = np.flatnonzero(inp.c_ij >= args.min_count)
    m = constraint_block(inp.matrix[keep], inp.c_ij[keep])
    m = m[np.flatnonzero(np.diff(m.indptr) > 0)]
    b = cels_bound(args.epsilon, args.delta)
    return float(max_output_size(m, b * (1 - ETA))) if m.shape[0] else 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--key-bits", type=int, default=3072)
    ap.add_argument("--min-count", type=int, default=20)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=0.0009)
    ap.add_argument("--workers", type=int, default=None, help="per party (default: CPUs/parties)")
    ap.add_argument("--model-only", action="store_true")
    args = ap.parse_args()
    log = load(args.rows)
    shares = split_users(log, args.parties)
    sizes = protocol_sizes([click_histogram(s) for s in shares], min_count=args.min_count)
    res: dict = {
        "input": log.info.path, "rows": log.n_rows, "users": log.n_users,
        "sizes": sizes.to_dict(),
        "model_bytes": predict_bytes(sizes, args.key_bits),
        "model_bytes_paper_keys": predict_bytes(sizes, 512),
        "model_work": predict_work(sizes, args.key_bits),
        "paper_table5_mb_AOL_1M": dict(zip((2, 4, 6, 8, 10), PAPER_TABLE5["AOL 1M"], strict=True)),
    }  # fmt: skip
    if not args.model_only:
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for k, s in enumerate(shares):
                p = Path(tmp) / f"s{k + 1}.tsv"
                s.df.select(
                    pl.col("user").alias("AnonID"), pl.col("query").alias("Query"),
                    pl.lit("2006-03-01 00:00:00").alias("QueryTime"), pl.lit("1").alias("ItemRank"),
                    pl.col("url").alias("ClickURL"),
                ).write_csv(p, separator="\t", quote_style="never")  # fmt: skip
                paths.append(p)
            params = CelsParams(
                epsilon=args.epsilon, delta=args.delta, objective="kl", key_bits=args.key_bits,
                min_count=args.min_count, mode="conditional",
            )  # fmt: skip
            res["loadavg_before"] = os.getloadavg()
            t0 = time.perf_counter()
            run = run_local(paths, params, Path(tmp) / "out", timeout=900, workers=args.workers)
            res["wall_seconds"] = time.perf_counter() - t0
            res["loadavg_after"] = os.getloadavg()
            stats = run["party_stats"]
            sent: dict[str, int] = {}
            for p in stats:
                for k, v in p["traffic"]["sent"].items():
                    sent[k] = sent.get(k, 0) + v
            res["measured_bytes"] = sent
            res["measured_total_mb"] = sum(sent.values()) / 1e6
            res["sent_mb_per_party"] = [p["traffic"]["sent_total"] / 1e6 for p in stats]
            res["phase_wall_seconds"] = [p["seconds"] for p in stats]
            res["phase_cpu_seconds"] = [p["cpu_seconds"] for p in stats]
            res["cpu_seconds_main_processes"] = sum(sum(p["cpu_seconds"].values()) for p in stats)
            res["worker_cpu_seconds"] = [p["worker_cpu_seconds"] for p in stats]
            res["obfuscators_computed_inline"] = [
                p["extra"].get("obfuscators_computed_inline") for p in stats
            ]
            solver = stats[0]["extra"]["solver"]
            res["solver"] = solver
            res["central_lp_max_output_size"] = central_lp(log, args)
            res["lp_equal_to_central"] = math.isclose(
                solver.get("max_output_size_lp", 0.0), res["central_lp_max_output_size"],
                rel_tol=1e-6, abs_tol=1e-9,
            )  # fmt: skip
            res["target_60s_met"] = res["wall_seconds"] <= 60
            res["target_25mb_met"] = res["measured_total_mb"] <= 25
    json.dump(res, sys.stdout, indent=2, default=str)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
