"""CELS benchmark (issue 13 targets).

* 3 parties on 100,000 rows of an AOL-like log at the default 3072-bit key in ≤ 10 minutes;
* total bandwidth at the paper's key sizes ≤ the paper's Table 5 for the same r.

Input: the first ``--rows`` click rows of the AOL top-1000 sample (whole users) when
``../shared`` exists, else the synthetic AOL-like generator. ``--model-only`` prints the cost
model's prediction (bytes per phase, Paillier exponentiations per party) without running.

    PYTHONPATH=src python benchmarks/cels_bench.py --rows 100000 --parties 3 --min-count 20
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

from searchveil.collab.costs import predict_bytes, predict_powmods, protocol_sizes
from searchveil.collab.protocol import CelsParams
from searchveil.collab.reproduce import AOL_TOP1000, PAPER_TABLE5, split_users, synthetic_log
from searchveil.collab.runner import run_local
from searchveil.io.readers import read_log
from searchveil.model import SearchLog, click_histogram


def load(rows: int) -> SearchLog:
    if AOL_TOP1000.exists():
        log = read_log(AOL_TOP1000)
        df = log.df.filter(pl.col("url").is_not_null())
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--parties", type=int, default=3)
    ap.add_argument("--key-bits", type=int, default=3072)
    ap.add_argument("--min-count", type=int, default=20)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--delta", type=float, default=0.0009)
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
        "model_powmods_per_party": predict_powmods(sizes, args.key_bits),
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
                min_count=args.min_count,
            )  # fmt: skip
            t0 = time.perf_counter()
            run = run_local(paths, params, Path(tmp) / "out", timeout=300)
            res["wall_seconds"] = time.perf_counter() - t0
            led = run["ledger"]
            sent: dict[str, int] = {}
            for p in led["parties"]:
                for k, v in p["traffic"]["sent"].items():
                    sent[k] = sent.get(k, 0) + v
            res["measured_bytes"] = sent
            res["measured_total_mb"] = sum(sent.values()) / 1e6
            res["phase_seconds"] = [p["seconds"] for p in led["parties"]]
            res["target_10_min_met"] = res["wall_seconds"] <= 600
    json.dump(res, sys.stdout, indent=2, default=str)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
