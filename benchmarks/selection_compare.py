"""Selection strategies side by side at equal (ε, δ): ``python benchmarks/selection_compare.py
[--big PATH] [--quick]``.

For each log and d ∈ {1, 5, 20}: how many distinct queries each strategy selects and what share
of all query events (volume) those queries cover. The whole (ε, δ) goes to selection (counts are
a separate, identical step for every strategy). Strategies:
* ``korolova`` — the thesis' Select-Queries: first d query *events* per user, occurrence counts,
  Laplace threshold with the exact discrete rule (``korolova_solve_exact``);
* ``laplace`` / ``gaussian`` / ``policy-gaussian`` — :mod:`searchveil.mechanisms.selection` on
  each user's first d *distinct* queries.
Logs: the two shared AOL samples and a synthetic AOL-sized log (657,426 users; generate it with
``searchveil synth --like src/searchveil/data/aol-gayo-avello-215-users.tsv --users 657426
--rows 36389567 --out aol36m.parquet --seed 2006``), read lazily from Parquet.
Results: benchmarks/results/selection.json and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import polars as pl

from searchveil.io.readers import read_log
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.selection import STRATEGIES, make_strategy, user_item_sets
from searchveil.model import items
from searchveil.params import korolova_solve_exact
from searchveil.rng import make_rng

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "data" / "aol"
EPS, DELTA = math.log(10), 1e-5


def _events_from_parquet(path: Path) -> pl.DataFrame:
    return (
        pl.scan_parquet(path)
        .select(
            pl.col("AnonID").alias("user"), pl.col("Query").alias("item"), pl.col("QueryTime")
        )  # fmt: skip
        .with_row_index("row")
        # one event per (user, query, time) run — AOL writes one row per click
        .unique(["user", "item", "QueryTime"], keep="first", maintain_order=True)
        .with_columns(pos=pl.col("row"))
        .select("user", "item", "pos")
        .collect(engine="streaming")
    )


def _korolova(q: pl.DataFrame, d: int, rng: Any) -> tuple[pl.DataFrame, dict[str, Any]]:
    r = korolova_solve_exact(epsilon=EPS, delta=DELTA, d=d)
    first = q.sort(["user", "pos"]).group_by("user", maintain_order=True).head(d)
    counts = first.group_by("item").agg(pl.len().cast(pl.Int64).alias("count"))
    noise = DiscreteLaplace(r["b"]).sample(counts.height, rng)
    keep = counts.get_column("count").to_numpy() + noise > r["K"]
    return counts.filter(pl.Series(keep)), {"K": r["K"], "b": r["b"]}


def run(name: str, q: pl.DataFrame, ds: tuple[int, ...], seed: int) -> list[dict[str, Any]]:
    total = q.height
    vol = q.group_by("item").agg(pl.len().alias("v"))
    users = q.get_column("user").n_unique()
    out = []
    for d in ds:
        rng = make_rng(seed + d)
        for strat in ("korolova", *STRATEGIES):
            t = time.perf_counter()
            if strat == "korolova":
                sel, detail = _korolova(q, d, rng)
            else:
                st = make_strategy(strat, epsilon=EPS, delta=DELTA, d=d)
                sel = st.select(user_item_sets(q, d=d), rng=rng)
                detail = {k: v for k, v in st.describe().items() if k not in ("strategy", "d")}
            covered = vol.join(sel.select("item"), on="item", how="semi").get_column("v").sum()
            row = {
                "log": name, "users": users, "d": d, "strategy": strat,
                "distinct_released": sel.height, "volume_share": covered / total,
                "seconds": round(time.perf_counter() - t, 2), "detail": detail,
            }  # fmt: skip
            print(json.dumps(row, default=str), flush=True)
            out.append(row)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", type=Path, help="synthetic AOL-sized log (Parquet)")
    ap.add_argument("--quick", action="store_true", help="only the shared samples")
    a = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for name, path in (("aol-215", SHARED / "aol-gayo-avello-215-users.tsv"),
                       ("aol-top1000", SHARED / "aol-top1000-users.tsv.gz")):  # fmt: skip
        rows += run(name, items(read_log(path), "queries"), (1, 5, 20), seed=1)
    if a.big and not a.quick:
        rows += run("synthetic-657k", _events_from_parquet(a.big), (1, 5, 20), seed=1)
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "selection.json").write_text(
        json.dumps({"epsilon": EPS, "delta": DELTA, "rows": rows}, indent=2, default=str) + "\n"
    )
    print("\n| log | d | korolova | laplace | gaussian | policy-gaussian |")
    print("|---|---|---|---|---|---|")
    by: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["log"], r["d"]), {})[r["strategy"]] = r
    for (log, d), s in by.items():
        cells = [f"{s[k]['distinct_released']:,} ({s[k]['volume_share']:.1%})"
                 for k in ("korolova", *STRATEGIES)]  # fmt: skip
        print(f"| {log} | {d} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
