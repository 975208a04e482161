"""Selection strategies side by side at equal (ε, δ) (issue 24):
``python benchmarks/selection_compare.py [--big PATH] [--demo-users N] [--quick]``.

Setting: e^ε = 10 split as ``release korolova --selection`` splits it (half to selection, half
to the counts), δ = 1/(10·U) for a log of U users. For each log and strategy:

* **default**: the strategy's data-independent d (``default_d``: never tuned on the log; the
  thesis' d = 1 for Korolova), one seeded run of the real mechanism (exact integer noise);
* **best d (reference)**: the d in ``GRID`` that releases the most distinct queries on *this*
  log — an exact expectation for korolova / laplace / gaussian, one simulated run for the
  ℓ2-weighted strategies (``searchveil.evaluate.dcurve``) — and one seeded run of the real
  mechanism at that d. Choosing d this way reads the log: for reference only, never a release.

Figures: distinct queries released, and the share of all query events (volume) whose query is
released. Logs: the shared AOL top-1000 sample, the 500k-user demo log (``searchveil demo``'s
synthetic log: query keys, calibrated on the bundled 215-user sample) and, with ``--big``, a
657,426-user AOL-sized synthetic log read from Parquet:

    searchveil synth --like ../shared/data/aol/aol-top1000-users.tsv.gz --users 657426 \\
        --rows 20000000 --seed 11 --out /tmp/aol657k.parquet

Results: benchmarks/results/selection.json and a Markdown table on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from searchveil.evaluate.dcurve import ALL_MECHANISMS, dcurve_from_events
from searchveil.io.readers import read_log
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.rounds import ItemPool, user_item_pool
from searchveil.mechanisms.selection import default_d, make_strategy
from searchveil.mechanisms.threshold import korolova_solve_exact
from searchveil.model import query_events
from searchveil.rng import make_rng
from searchveil.synth import fit, synthetic_events

HERE = Path(__file__).resolve().parent
SHARED = HERE.parent.parent / "shared" / "data" / "aol"
EPS = math.log(10)
EPS_SEL = EPS / 2  # the selection step's share in `release korolova --selection` (split 1,1)
GRID = (1, 2, 3, 5, 10, 15, 20, 31, 40, 60, 80, 120)
ORDER = (
    "korolova",
    "laplace",
    "gaussian",
    "policy-gaussian",
    "dp-sips",
    "probe-reweight",
    "probe-reweight-2r",
)


def _events_from_parquet(path: Path) -> pl.DataFrame:
    return (
        pl.scan_parquet(path)
        .select(
            pl.col("AnonID").alias("user"), pl.col("Query").alias("query"), pl.col("QueryTime")
        )  # fmt: skip
        .with_row_index("row")
        # one event per (user, query, time) run — AOL writes one row per click
        .unique(["user", "query", "QueryTime"], keep="first", maintain_order=True)
        .sort(["user", "row"])
        .with_columns(pos=pl.int_range(pl.len()).over("user").cast(pl.Int64))
        .select("user", "query", "pos")
        .collect(engine="streaming")
    )


def _korolova(ev: pl.DataFrame, d: int, delta: float, rng: Any) -> tuple[pl.Series, dict]:
    """Release-Data's Select-Queries (ε/2 of the split release, first d events per user)."""
    r = korolova_solve_exact(epsilon=EPS_SEL, delta=delta, d=d)
    counts = ev.filter(pl.col("pos") < d).group_by("query").agg(pl.len().alias("count"))
    counts = counts.sort("query")
    noise = DiscreteLaplace(r["b"]).sample(counts.height, rng)
    keep = counts.get_column("count").to_numpy() + noise > r["K"]
    return counts.filter(pl.Series(keep)).get_column("query"), {"K": r["K"], "b": r["b"]}


def _exact(name: str, ev: pl.DataFrame, pool: ItemPool, d: int, delta: float,
           seed: int) -> tuple[pl.Series, dict[str, Any], float]:  # fmt: skip
    rng = make_rng(seed)
    t = time.perf_counter()
    if name == "korolova":
        chosen, detail = _korolova(ev, d, delta, rng)
    else:
        st = make_strategy(name, epsilon=EPS_SEL, delta=delta, d=d)
        chosen = pool.names.gather(st.select_pool(pool, rng))
        detail = {
            k: v
            for k, v in st.describe().items()
            if k in ("epsilon", "delta", "rounds", "sigma", "tau", "K", "rho")
        }
    return chosen, detail, time.perf_counter() - t


def run(name: str, ev: pl.DataFrame, seed: int) -> list[dict[str, Any]]:
    users = int(ev.get_column("user").n_unique())
    delta = 1.0 / (10 * users)
    total = ev.height
    vol = ev.group_by("query").agg(pl.len().alias("v"))
    t0 = time.perf_counter()
    curve = dcurve_from_events(ev, epsilon=EPS_SEL, delta=delta, ds=GRID,
                               mechanisms=ALL_MECHANISMS,
                               simulation=np.random.default_rng(seed))  # fmt: skip
    curve_s = time.perf_counter() - t0
    best = {}
    for m in ORDER:
        rows = [r for r in curve["table"] if r["mechanism"] == m]
        best[m] = max(rows, key=lambda r: (r["expected_released"], -r["d"]))["d"]
    defaults = {
        m: (1, "thesis d = 1")
        if m == "korolova"
        else default_d(m, epsilon=EPS_SEL, delta=delta, max_users=users)
        for m in ORDER
    }
    dmax = max([*best.values(), *(x[0] for x in defaults.values())])
    pool = ItemPool.from_frame(user_item_pool(ev.rename({"query": "item"}), pool=2 * dmax))
    out = []
    for m in ORDER:
        for kind, d in (("default", defaults[m][0]), ("best d", best[m])):
            chosen, detail, secs = _exact(m, ev, pool, d, delta, seed)
            covered = vol.join(chosen.to_frame("query"), on="query", how="semi")
            row = {
                "log": name, "users": users, "delta": delta, "strategy": m, "kind": kind,
                "d": d, "distinct_released": int(chosen.len()),
                "volume_share": float(covered.get_column("v").sum() or 0) / total,
                "seconds": round(secs, 2), "detail": detail,
            }  # fmt: skip
            if kind == "default":
                row["d_rule"] = defaults[m][1]
            print(json.dumps(row, default=str), flush=True)
            out.append(row)
    for r in curve["table"]:
        r["log"] = name
    out.append({"log": name, "curve": curve["table"], "curve_seconds": round(curve_s, 1)})
    return out


def _table(rows: list[dict[str, Any]]) -> str:
    lines = ["| log | strategy | default d | distinct | volume | best d | distinct | volume |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    by: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        if "strategy" in r:
            by.setdefault((r["log"], r["strategy"]), {})[r["kind"]] = r
    for (log, m), x in by.items():
        a, b = x["default"], x["best d"]
        lines.append(
            f"| {log} | {m} | {a['d']} | {a['distinct_released']:,} | {a['volume_share']:.1%} "
            f"| {b['d']} | {b['distinct_released']:,} | {b['volume_share']:.1%} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", type=Path, help="the 657k-user AOL-sized synthetic log (Parquet)")
    ap.add_argument("--demo-users", type=int, default=500_000, help="0: skip the demo log")
    ap.add_argument("--quick", action="store_true", help="only the shared top-1000 sample")
    ap.add_argument("--seed", type=int, default=24)
    a = ap.parse_args()
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    load = os.getloadavg()
    top = SHARED / "aol-top1000-users.tsv.gz"
    if top.exists():
        rows += run("aol-top1000", query_events(read_log(top)), a.seed)
    if a.demo_users and not a.quick:
        ref = resources.files("searchveil") / "data" / "aol-gayo-avello-215-users.tsv"
        with resources.as_file(ref) as sample:
            rng = make_rng(a.seed)
            ev = synthetic_events(fit(read_log(sample), rng=rng), users=a.demo_users, rng=rng,
                                  spell=False)  # fmt: skip
        rows += run(f"demo-{a.demo_users // 1000}k", ev, a.seed)
        del ev
    if a.big and not a.quick:
        rows += run("synthetic-657k", _events_from_parquet(a.big), a.seed)
    meta = {"epsilon": EPS, "epsilon_selection": EPS_SEL, "delta": "1/(10·U) per log",
            "grid": GRID, "seed": a.seed, "load_average_at_start": load,
            "load_average_at_end": os.getloadavg(),
            "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "selection.json").write_text(
        json.dumps(meta | {"rows": rows}, indent=2, default=str) + "\n"
    )
    print()
    print(_table(rows))
    print(f"\nload average {load} → {os.getloadavg()}, {meta['seconds']} s")


if __name__ == "__main__":
    main()
