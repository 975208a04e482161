"""UMP performance targets (issue 4): ``python benchmarks/ump_bench.py [--quick]``.

* constraint matrix for 10⁵ users × 10⁶ pairs (synthetic sparse histogram, ~3 holders/pair
  on average, Zipf-like user activity) — target: seconds;
* O-UMP LP (HiGHS) with 10⁵ variables — target < 10 s;
* SPE: our one-pass sweep vs a naive rescan (recompute every load after each elimination)
  at 10⁵ pairs (the naive one is timed on a prefix and extrapolated per elimination) —
  target ≥ 100×;
* the AOL top-1000 sample: LP, floor, lp-greedy, 60-s MIP (λ and seconds).
Writes benchmarks/results/ump.json.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from searchveil.release.ump.constraints import UmpInput, constraint_matrix, privacy_bound
from searchveil.release.ump.solvers import lp_relaxation, solve_dump, solve_oump

HERE = Path(__file__).resolve().parent


def synthetic_input(users: int, pairs: int, seed: int = 1) -> UmpInput:
    gen = np.random.Generator(np.random.PCG64(seed))
    holders = 2 + gen.geometric(0.5, pairs)  # ≥ 2 holders (Condition 1 already applied)
    nnz = int(holders.sum())
    rows = np.repeat(np.arange(pairs), holders)
    act = gen.zipf(1.6, users).astype(float)
    p = act / act.sum()
    cols = gen.choice(users, size=nnz, p=p)
    vals = gen.geometric(0.6, nnz)
    c = sp.csr_matrix((vals, (rows, cols)), shape=(pairs, users))
    c.sum_duplicates()
    # a duplicate (pair, user) could leave one holder: give such rows a second holder
    nnz_row = np.diff(c.indptr)
    lonely = np.flatnonzero(nnz_row < 2)
    if lonely.size:
        extra = sp.csr_matrix(
            (np.ones(lonely.size), (lonely, (c[lonely].indices + 1) % users)), shape=c.shape
        )
        c = (c + extra).tocsr()
    c_ij = np.asarray(c.sum(axis=1)).ravel().astype(np.int64)
    import polars as pl

    return UmpInput(
        matrix=c,
        c_ij=c_ij,
        pairs=pl.DataFrame({"pair_id": np.arange(pairs)}),
        users=np.arange(users),
        removed_pairs=0,
        removed_clicks=0,
        removed_users=0,
    )


def naive_spe_per_step(m: sp.csr_matrix, b: float, steps: int) -> float:
    """Algorithm 2 as printed: find the global max t among remaining pairs, drop its pair,
    recheck every constraint — seconds per elimination (timed over ``steps``)."""
    y = np.ones(m.shape[1])
    coo = m.tocoo()
    t0 = time.perf_counter()
    for _ in range(steps):
        alive = y[coo.col] > 0
        j = int(np.argmax(np.where(alive, coo.data, -1.0)))
        y[coo.col[j]] = 0
        if (m @ y <= b).all():
            break
    return (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    users, pairs = (10_000, 100_000) if a.quick else (100_000, 1_000_000)
    res: dict[str, object] = {}
    inp = synthetic_input(users, pairs)
    t = time.perf_counter()
    m = constraint_matrix(inp)
    res["constraint_matrix"] = {
        "users": users,
        "pairs": pairs,
        "nnz": int(m.nnz),
        "seconds": time.perf_counter() - t,
    }
    print("constraint matrix", res["constraint_matrix"], flush=True)

    small = synthetic_input(20_000, 100_000, seed=2)
    ms = constraint_matrix(small)
    b = privacy_bound(math.log(2), 0.5)
    t = time.perf_counter()
    lp_relaxation(ms, b, -np.ones(ms.shape[1]))
    res["lp_1e5_vars"] = {"users": 20_000, "pairs": 100_000, "seconds": time.perf_counter() - t}
    print("O-UMP LP", res["lp_1e5_vars"], flush=True)

    t = time.perf_counter()
    spe = solve_dump(ms, b, method="spe")
    fast = time.perf_counter() - t
    per = naive_spe_per_step(ms, b, steps=50)
    naive_total = per * spe.info["eliminated"]
    res["spe"] = {
        "pairs": 100_000,
        "eliminations": spe.info["eliminated"],
        "ours_s": fast,
        "naive_s_per_step": per,
        "naive_s_extrapolated": naive_total,
        "speedup": naive_total / fast,
    }
    print("SPE", res["spe"], flush=True)

    from searchveil.io.readers import read_log
    from searchveil.model import click_histogram
    from searchveil.release.ump.constraints import preprocess

    aol = HERE.parent.parent / "shared" / "data" / "aol" / "aol-top1000-users.tsv.gz"
    mi = constraint_matrix(preprocess(click_histogram(read_log(aol))))
    b = privacy_bound(0.693, 0.5)
    out = {}
    for meth, kw in (
        ("lp-floor", {}),
        ("lp-greedy", {"search_seconds": 5.0}),
        ("mip", {"time_limit": 5.0 if a.quick else 60.0}),
    ):
        s = solve_oump(mi, b, method=meth, **kw)
        out[meth] = {
            "lambda": int(s.objective),
            "seconds": round(s.seconds, 2),
            **{k: v for k, v in s.info.items() if k in ("lp_optimum", "mip_gap")},
        }
        print("AOL top-1000 O-UMP", meth, out[meth], flush=True)
    res["aol_top1000_oump"] = out
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "ump.json").write_text(json.dumps(res, indent=2) + "\n")


if __name__ == "__main__":
    main()
