"""Reproduction of the EDBT 2012 experiments (§6) on the shared AOL data.

``reproduce_tables(log)`` returns the experiment dict used by ``searchveil reproduce hong-ump``:

* Table 3: λ (max output size, O-UMP) over e^ε × δ — the LP optimum, its floor (the paper's
  path) and our rounding (``lp-greedy``), beside the printed values;
* Table 6 / Fig. 3 analogue: D-UMP diversity of SPE (paper), SPE on violated users + add-back
  (ours) and the exact BIP (HiGHS, time limit, gap);
* Tables 4–5 analogue: F-UMP recall/precision and support distances for |O| and s as in §6.3;
* Fig. 4 analogue: DiffRatio of the triplets for one F-UMP output.

Why the printed Table 3 cannot be reproduced (checked, not tuned): with b = min(ε, ln 1/(1−δ))
and δ = 10⁻⁴, b ≈ 10⁻⁴, and a pair can get one draw only if every holder's coefficient
ln(c_ij/(c_ij − c_ijk)) ≤ 10⁻⁴, i.e. every holder's share c_ijk/c_ij ≲ 10⁻⁴ — about 10⁴ holders
of that pair. The paper's 1,980-user dataset cannot contain such a pair, yet Table 3 prints
λ = 3,759 at δ = 10⁻⁴. On the shared 1,000-user sample the LP optimum there is 0.08 and λ = 0.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from searchveil.io.datasets import default_log_path
from searchveil.io.readers import read_log
from searchveil.model import SearchLog, click_histogram
from searchveil.release.ump.constraints import (
    UmpInput,
    constraint_matrix,
    preprocess,
    privacy_bound,
)
from searchveil.release.ump.metrics import diff_ratio_histogram, frequent_pairs
from searchveil.release.ump.sampling import sample_users
from searchveil.release.ump.solvers import (
    Solution,
    lp_relaxation,
    solve_dump,
    solve_fump,
    solve_oump,
)
from searchveil.rng import make_rng

EXP_EPS = (1.001, 1.01, 1.1, 1.4, 1.7, 2.0, 2.3)
DELTAS = (1e-4, 1e-3, 1e-2, 0.1, 0.2, 0.5, 0.8)
PAPER_TABLE_3 = {
    1.001: (3759, 4007, 4007, 4007, 4007, 4007, 4007),
    1.01: (3759, 4007, 4879, 4879, 4879, 4879, 4879),
    1.1: (3759, 4007, 4891, 8382, 8382, 8382, 8382),
    1.4: (3759, 4007, 4891, 8874, 10445, 11419, 11419),
    1.7: (3759, 4007, 4891, 8874, 10445, 12438, 12438),
    2.0: (3759, 4007, 4891, 8874, 10445, 13088, 13088),
    2.3: (3759, 4007, 4891, 8874, 10445, 13088, 13901),
}
PAPER_D_UMP_SPE = "SPE retained 12.8%–30.6% of the distinct pairs (EDBT Table 6)"


def _default_log() -> SearchLog:
    return read_log(Path(default_log_path()))


def reproduce_tables(
    log: SearchLog | None = None,
    *,
    search_seconds: float = 0.2,
    mip_seconds: float = 5.0,
    grid: tuple[tuple[float, ...], tuple[float, ...]] = (EXP_EPS, DELTAS),
) -> dict[str, Any]:
    log = log if log is not None else _default_log()
    t0 = time.perf_counter()
    inp = preprocess(click_histogram(log))
    m = constraint_matrix(inp)
    rows, lam = _table3(m, grid, search_seconds)
    d_rows = _dump_table(m, inp.n_pairs, mip_seconds)
    f_rows, example = _fump_table(m, inp, lam, search_seconds)
    diff = None
    if example is not None:
        trip = sample_users(inp.matrix, example.x, rng=make_rng(2012))
        diff = diff_ratio_histogram(inp.matrix, trip)
    return {
        "headers": ["e^ε", "δ", "b", "LP optimum", "⌊LP⌋ (paper's λ)", "λ ours", "λ paper"],
        "rows": rows,
        "more_tables": [
            {
                "title": "D-UMP: share of distinct pairs kept — SPE (paper) vs ours vs exact BIP",
                "headers": [
                    "e^ε",
                    "δ",
                    "SPE",
                    "ours",
                    "exact (MIP)",
                    "MIP gap",
                    "s SPE",
                    "s ours",
                    "s MIP",
                ],  # fmt: skip
                "rows": d_rows,
            },
            {
                "title": "F-UMP at e^ε = 2, δ = 0.5: recall/precision and support distances",
                "headers": [
                    "|O|",
                    "s",
                    "frequent in D",
                    "recall",
                    "precision",
                    "Σ distance",
                    "avg distance",
                ],  # fmt: skip
                "rows": f_rows,
            },
        ],
        "diff_ratio": diff,
        "input": {
            "users_with_constraints": inp.n_users,
            "pairs_after_condition_1": inp.n_pairs,
            "size_D": inp.size,
            "nonzeros": int(m.nnz),
        },
        "seconds": round(time.perf_counter() - t0, 1),
        "notes": (
            f"Shared AOL sample: {inp.n_users} users with constraints, {inp.n_pairs} non-unique "
            f"pairs, |D| = {inp.size} (paper: 1,980 users, 6,043 pairs, |D| = 53,067). λ grows "
            "with b = min(ε, ln 1/(1−δ)) only, as in the paper, but the printed λ for small δ "
            "cannot follow from the constraints: at δ = 1e-4 a pair can be drawn once only if "
            "each holder's share is ≲ 1e-4 (≈10⁴ holders); the largest pair here has "
            f"{int(np.diff(m.tocsc().indptr).max())} holders, so λ = 0. Our rounding (LP floor + "
            "greedy fill + local search) beats the paper's floor everywhere. "
            + PAPER_D_UMP_SPE
            + "; the paper's SPE drops pairs of satisfied users too, ours only of violated ones."
        ),
        "plot": _lambda_plot(lam, grid),
    }


def _table3(
    m: sp.csr_matrix, grid: tuple[tuple[float, ...], tuple[float, ...]], search_seconds: float
) -> tuple[list[list[Any]], dict[tuple[float, float], int]]:
    """Table 3: λ (O-UMP) over e^ε × δ beside the printed values; also λ by (e^ε, δ)."""
    rows: list[list[Any]] = []
    lam: dict[tuple[float, float], int] = {}
    # the LP is homogeneous in b (every right-hand side is b): solve once for b = 1, scale
    lp_unit, _ = lp_relaxation(m, 1.0, -np.ones(m.shape[1]))
    for ee in grid[0]:
        for dl in grid[1]:
            b = privacy_bound(math.log(ee), dl)
            sol = solve_oump(
                m, b, method="lp-greedy", search_seconds=search_seconds, lp_unit=lp_unit
            )
            lam[(ee, dl)] = int(sol.objective)
            paper = PAPER_TABLE_3.get(ee, (None,) * 7)[DELTAS.index(dl)] if dl in DELTAS else None
            rows.append(
                [
                    ee,
                    dl,
                    round(b, 6),
                    round(sol.info["lp_optimum"], 2),
                    sol.info["lp_floor"],
                    int(sol.objective),
                    paper,
                ]  # fmt: skip
            )
    return rows, lam


def _dump_table(m: sp.csr_matrix, n_pairs: int, mip_seconds: float) -> list[list[Any]]:
    """D-UMP: SPE vs ours vs exact at the paper's Table 6 settings."""
    d_rows = []
    for ee, dl in ((1.1, 0.1), (1.4, 0.2), (1.7, 1e-3), (2.0, 0.5), (2.3, 0.8)):
        b = privacy_bound(math.log(ee), dl)
        spe = solve_dump(m, b, method="spe")
        ours = solve_dump(m, b, method="spe-violated")
        exact = solve_dump(m, b, method="mip", time_limit=mip_seconds)
        gap = exact.info.get("mip_gap", float("nan"))
        d_rows.append(
            [
                ee,
                dl,
                f"{spe.objective / n_pairs:.2%}",
                f"{ours.objective / n_pairs:.2%}",
                f"{exact.objective / n_pairs:.2%}",
                f"{gap:.3g}",
                f"{spe.seconds:.3f}",
                f"{ours.seconds:.3f}",
                f"{exact.seconds:.1f}",
            ]  # fmt: skip
        )
    return d_rows


def _fump_table(
    m: sp.csr_matrix, inp: UmpInput, lam: dict[tuple[float, float], int], search_seconds: float
) -> tuple[list[list[Any]], Solution | None]:
    """F-UMP at e^ε = 2, δ = 0.5 (§6.3): |O| as a share of λ, several s; also the F-UMP output
    whose DiffRatio is plotted."""
    b = privacy_bound(math.log(2.0), 0.5)
    lam2 = lam.get((2.0, 0.5)) or int(solve_oump(m, b, search_seconds=search_seconds).objective)
    f_rows = []
    example = None
    for share in (0.25, 0.5):
        size = max(1, int(share * lam2))
        for s in (1 / 100, 1 / 250, 1 / 500, 1 / 1000):
            f = solve_fump(m, b, inp.c_ij, output_size=size, min_support=s)
            fr = frequent_pairs(inp.c_ij, f.x, s)
            f_rows.append(
                [
                    size,
                    f"1/{round(1 / s)}",
                    fr["frequent_in_input"],
                    _fmt(fr["recall"]),
                    _fmt(fr["precision"]),
                    _fmt(fr["sum_support_distance"]),
                    _fmt(fr["avg_support_distance"]),
                ]  # fmt: skip
            )
            if share == 0.5 and s == 1 / 500:
                example = f
    return f_rows, example


def _lambda_plot(
    lam: dict[tuple[float, float], int], grid: tuple[tuple[float, ...], tuple[float, ...]]
) -> dict[str, Any]:
    """λ against δ: ours at two e^ε, the paper's at e^ε = 2."""
    return {
        "xlabel": "δ",
        "ylabel": "λ",
        "xlog": True,
        "series": [
            {
                "label": f"ours, e^ε = {ee}",
                "x": list(grid[1]),
                "y": [lam[(ee, dl)] for dl in grid[1]],
            }
            for ee in grid[0]
            if ee in (1.1, 2.0)
        ]
        + [
            {
                "label": "paper, e^ε = 2.0",
                "x": list(DELTAS),
                "y": list(PAPER_TABLE_3[2.0]),
                "paper": True,
            }  # fmt: skip
        ],
    }


def _fmt(v: float | None) -> str:
    return "—" if v is None else f"{v:.4g}"
