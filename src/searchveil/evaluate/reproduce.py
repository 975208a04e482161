"""Paper tables and trends beside ours (``searchveil reproduce``).

Two kinds of experiment:

* **formula tables** (status ``exact``): recomputed from :mod:`searchveil.params` (the papers'
  accounting) and compared with the printed numbers at the printed precision — Korolova
  Table 4.1 and Fig. 4.1, Götz Tables 1 and 2;
* **experiment trends** (status ``trend``): the papers ran on proprietary logs of 500,000 users
  (Götz) and a major engine's week/year (Korolova); we run the same mechanisms on the shared
  AOL sample of the 1,000 most active users. Absolute values cannot match; the *direction* of
  each trend is compared and stated — Götz Table 3 and Fig. 3 (distinct/total items and top-j
  coverage vs m), Korolova Fig. 4.2 and Tables 4.2–4.3 (% distinct queries and % impressions
  vs d, ε, δ).

Experiments that need modules not present in this tree report status ``missing`` with the
reason (e.g. the UMP tables of Hong et al. when ``searchveil.release.ump`` is absent).

All experiment runs use a fixed seed (they are experiments, not releases) and the public user
bound of the sample (1,000 users, a property of how the file was made, not read from the data).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from searchveil.errors import InputFormatError, InvalidParameterError, SearchveilError
from searchveil.evaluate._release import original_histograms
from searchveil.evaluate.distribution import compare_histograms
from searchveil.io.datasets import default_log_path
from searchveil.io.readers import read_log
from searchveil.mechanisms.threshold import keep_probability
from searchveil.model import PAIR_SEP, ItemKind
from searchveil.release.korolova import KorolovaParams, release_korolova
from searchveil.release.korolova.accounting import korolova_solve_paper
from searchveil.release.ump.reproduce import reproduce_tables
from searchveil.release.zealous import PART_COLUMNS, ZealousParams, release_zealous
from searchveil.release.zealous.accounting import (
    zealous_optimal_tau,
    zealous_tau_prime,
    zealous_theorem3_delta,
    zealous_thesis_delta,
)
from searchveil.rng import make_rng

__all__ = ["EXPERIMENTS", "run_experiments", "default_log_path"]

LN10 = math.log(10.0)


def _rel_diff(ours: float, paper: float) -> float:
    return abs(ours - paper) / abs(paper) if paper else abs(ours)


def _result(
    status: str,
    headers: list[str],
    rows: list[list[Any]],
    *,
    notes: str,
    measured: dict[str, float] | None = None,
    **after: Any,
) -> dict[str, Any]:
    """An experiment's result: ``status`` (exact | trend), its table, the largest difference
    from the printed values (``measured``), the notes, then the rest (``failed``, ``plot``)."""
    head = {"status": status, "headers": headers, "rows": rows, **(measured or {})}
    return {**head, "notes": notes, **after}


# -- formula tables -------------------------------------------------------------------------------
def korolova_table_4_1(_: Any) -> dict[str, Any]:

    printed = {
        1: (5.70, 0.43),
        5: (31.99, 2.17),
        10: (66.99, 4.34),
        20: (140.00, 8.69),
        40: (292.04, 17.37),
        80: (608.16, 34.74),
        160: (1264.49, 69.49),
    }
    rows = []
    worst = 0.0
    for d, (pk, pb) in printed.items():
        s = korolova_solve_paper(epsilon=LN10, delta=1e-5, d=d)
        rows.append([d, round(s["K"], 2), pk, round(s["b"], 2), pb])
        worst = max(worst, abs(round(s["K"], 2) - pk), abs(round(s["b"], 2) - pb))
    return _result(
        "exact",
        ["d", "K (ours)", "K (paper)", "b (ours)", "b (paper)"],
        rows,
        measured={"max_abs_difference": worst},
        notes="K = d(1 − ln(2δ/d)/ε), b = d/ε at e^ε = 10, δ = 1e-5 (Lemma 1 setting). "
        f"Largest difference at the printed 2 decimals: {worst:.2f}.",
    )


def korolova_fig_4_1(_: Any) -> dict[str, Any]:

    freqs = list(range(80, 201, 10))
    cont = keep_probability(freqs, threshold=140, scale=8.69, noise="continuous")
    disc = keep_probability(freqs, threshold=140, scale=8.69, noise="discrete")
    rows = [[f, float(c), float(d)] for f, c, d in zip(freqs, cont, disc, strict=True)]
    p110 = float(keep_probability([110], threshold=140, scale=8.69, noise="continuous")[0])
    p170 = float(keep_probability([170], threshold=140, scale=8.69, noise="continuous")[0])
    return _result(
        "exact",
        ["frequency", "P[release] (Lap, thesis)", "P[release] (discrete, ours)"],
        rows,
        notes=f"d = 20, K = 140, b = 8.69. The thesis: below 110 'virtually never' "
        f"(ours {p110:.3f}), above 170 'virtually guaranteed' (ours {p170:.3f}). The discrete "
        "Laplace that searchveil samples gives nearly the same curve.",
        plot={
            "xlabel": "query frequency",
            "ylabel": "probability of release",
            "series": [
                {"label": "continuous Laplace (thesis Fig 4.1)", "x": freqs, "y": list(cont)},
                {"label": "discrete Laplace (searchveil)", "x": freqs, "y": list(disc)},
            ],
        },
    )


# built like korolova_table_4_1 on purpose: each formula table against its printed numbers
def goetz_table_1(_: Any) -> dict[str, Any]:

    printed = {
        (1.0, 100): (1.3e-37, 1.4e-41),
        (1.0, 200): (4.7e-81, 5.2e-85),
        (5.0, 100): (3.2e-3, 1.4e-8),
        (5.0, 200): (6.5e-12, 2.9e-17),
    }
    rows = []
    worst = 0.0
    for (lam, tp), (pd, pdp) in printed.items():
        d = zealous_theorem3_delta(m=5, tau=1, lam=lam, tau_prime=tp, users=500_000)
        dp = zealous_thesis_delta(m=5, tau_prime=tp, lam=lam)
        rows.append([f"λ={lam:g}, τ'={tp}", f"{d:.3g}", f"{pd:.2g}", f"{dp:.3g}", f"{pdp:.2g}"])
        worst = max(worst, _rel_diff(d, pd), _rel_diff(dp, pdp))
    return _result(
        "exact",
        ["setting", "δ (ours)", "δ (paper)", "δ' (ours)", "δ' (paper)"],
        rows,
        measured={"max_relative_difference": worst},
        notes="U = 500k, m = 5, τ = 1. δ from Theorem 3; δ' from the thesis' Release-Data "
        "bound (ε' = m/λ), which is what the printed δ' column follows (see "
        "docs/privacy/zealous.md: Theorem 2 as printed does not give these values). Ours are "
        "shown to 3 digits: the paper's 3.2e-3 is 3.147e-3 rounded up and its 5.2e-85 is "
        f"5.13e-85; largest relative difference {100 * worst:.1f}%.",
    )


def goetz_table_2(_: Any) -> dict[str, Any]:

    printed = {1: 81.1, 3: 78.7, 4: 78.6, 5: 78.7, 7: 79.3, 9: 80.3}
    rows = []
    worst = 0.0
    xs, ys = [], []
    for tau, p in printed.items():
        tp = zealous_tau_prime(epsilon=1.0, delta=0.01, m=2, tau=tau, users=5_000_000)["tau_prime"]
        rows.append([tau, round(tp, 1), p])
        worst = max(worst, abs(round(tp, 1) - p))
        xs.append(tau)
        ys.append(tp)
    return _result(
        "exact",
        ["τ", "τ' (ours)", "τ' (paper)"],
        rows,
        measured={"max_abs_difference": worst},
        notes="m = 2, ε = 1, δ = 0.01; the paper does not state U — U = 5,000,000 reproduces "
        "every printed value; τ = 4 = ⌈2m/ε⌉ minimises τ' (Proposition 4).",
        plot={
            "xlabel": "τ",
            "ylabel": "τ'",
            "series": [
                {"label": "ours", "x": xs, "y": ys},
                {"label": "paper", "x": xs, "y": list(printed.values()), "paper": True},
            ],
        },
    )


# -- experiment trends ----------------------------------------------------------------------------
class _Ctx:
    """The log, original histograms and seeded rng shared by the experiment runs."""

    def __init__(self, log_path: Path, seed: int, step: Callable[[str], Callable[[], None]]):

        self.log = read_log(log_path)
        self.orig = original_histograms(self.log)
        self.seed = seed
        self.rng = make_rng(seed)
        self.step = step
        self.cache: dict[str, Any] = {}


def _zealous_runs(ctx: _Ctx) -> dict[tuple[str, int], dict[str, Any]]:
    """ZEALOUS at ε = 5, δ = 0.001, m ∈ {1,4,8,20,40}. Götz §6 sets δ = 0.001 throughout; the
    ε of Table 3 is not stated — we use §7.1's ε = 5 (there τ' ≈ 10 for m = 1)."""
    if "zealous" in ctx.cache:
        return dict(ctx.cache["zealous"])

    out: dict[tuple[str, int], dict[str, Any]] = {}
    import polars as pl

    for kind in map(str, ItemKind):
        for m in (1, 4, 8, 20, 40):
            done = ctx.step(f"ZEALOUS {kind} m={m}")
            try:
                # the paper's own parameter rules (Theorem 3, Proposition 4), as in its runs
                tau = zealous_optimal_tau(epsilon=ZEALOUS_EPS, m=m)
                sol = zealous_tau_prime(epsilon=ZEALOUS_EPS, delta=0.001, m=m, tau=tau, users=1000)
                p = ZealousParams(
                    m=m,
                    tau=tau,
                    lam=sol["lambda"],
                    tau_prime=math.ceil(sol["tau_prime"] - 1e-9),
                    item_type=kind,
                    guarantee="probabilistic",
                    users=1000,
                )
                rel = release_zealous(ctx.log, p, rng=ctx.rng)
            except SearchveilError as exc:
                out[(kind, m)] = {"error": str(exc)}
                done()
                continue
            t = rel.tables["items"]
            parts = PART_COLUMNS.get(kind)
            key = (pl.col(parts[0]) + PAIR_SEP + pl.col(parts[1])) if parts else pl.col("item")
            h = t.select(key.alias("item"), pl.col("noisy_count").alias("count"))
            out[(kind, m)] = compare_histograms(ctx.orig[kind], h)
            out[(kind, m)]["tau_prime"] = p.tau_prime
            done()
    ctx.cache["zealous"] = out
    return out


GOETZ_T3_DISTINCT = {
    "keywords": [6667, 6043, 5372, 4062, 2964],
    "queries": [3334, 2087, 1440, 751, 408],
    "clicks": [2813, 1576, 1001, 486, 246],
    "query_pairs": [331, 169, 100, 40, 13],
}
GOETZ_T3_TOTAL_K = {
    "keywords": [329, 1157, 1894, 3106, 3871],
    "queries": [147, 314, 402, 464, 439],
    "clicks": [118, 234, 286, 317, 290],
    "query_pairs": [8, 14, 15, 12, 7],
}
MS = (1, 4, 8, 20, 40)
ZEALOUS_EPS = 5.0


def _direction(xs: Sequence[float]) -> str:
    if len(xs) < 2:
        return "—"
    inc = all(b >= a for a, b in zip(xs, xs[1:], strict=False))
    dec = all(b <= a for a, b in zip(xs, xs[1:], strict=False))
    if inc and dec:
        return "flat"
    if dec:
        return "decreasing"
    if inc:
        return "increasing"
    peak = max(range(len(xs)), key=lambda i: xs[i])
    return f"rises then falls (peak at m={MS[peak]})" if 0 < peak < len(xs) - 1 else "mixed"


def _get(runs: dict[tuple[str, int], dict[str, Any]], kind: str, m: int, key: str) -> Any:
    return runs[(kind, m)].get(key)


def _failed(runs: dict[tuple[str, int], dict[str, Any]]) -> list[tuple[str, str]]:
    """Runs that failed, with the reason (the report lists them under the table; their cells
    show —)."""
    return sorted((f"{k}, m = {m}", v["error"]) for (k, m), v in runs.items() if "error" in v)


def goetz_table_3(ctx: _Ctx) -> dict[str, Any]:
    runs = _zealous_runs(ctx)
    rows = []
    agree = 0
    for kind in map(str, ItemKind):
        ours_d = [_get(runs, kind, m, "released_distinct") for m in MS]
        ours_t = [_get(runs, kind, m, "released_total") for m in MS]
        pd, pt = GOETZ_T3_DISTINCT[kind], GOETZ_T3_TOTAL_K[kind]
        ok_d = [x for x in ours_d if x is not None]
        ok_t = [x for x in ours_t if x is not None]
        rows.append([f"{kind}: distinct (ours)", *ours_d, _direction(ok_d)])
        rows.append([f"{kind}: distinct (paper)", *pd, _direction(pd)])
        rows.append([f"{kind}: total (ours)", *ours_t, _direction(ok_t)])
        rows.append([f"{kind}: total ×10³ (paper)", *pt, _direction(pt)])
        agree += len(ok_d) == len(MS) and _direction(ok_d) == _direction(pd)
    taus = ", ".join(f"{_get(runs, 'queries', m, 'tau_prime')}" for m in MS)
    return _result(
        "trend",
        ["m →", *[str(m) for m in MS], "trend"],
        rows,
        notes=f"ZEALOUS, ε = {ZEALOUS_EPS:g} (Table 3's ε is not stated; §7.1 uses 5), "
        f"δ = 0.001, U = 1,000 (public bound of the sample); λ, τ = ⌈2m/ε⌉ and τ' (rounded up) "
        f"from the paper's Theorem 3 / Proposition 4; τ' per m: {taus}. "
        f"The paper: 500k users, one month. The distinct-items trend in m agrees for {agree} "
        "of 4 item types. With 1,000 users τ' (Theorem 3) grows past most counts as m grows, "
        "so totals peak earlier than the paper's (its tipping point is the average number of "
        "items per user).",
        failed=_failed(runs),
        plot={
            "xlabel": "m",
            "ylabel": "distinct items released",
            "series": [
                {
                    "label": kind,
                    "x": list(MS),
                    "y": [_get(runs, kind, m, "released_distinct") for m in MS],
                }
                for kind in map(str, ItemKind)
            ],
        },
    )


def goetz_fig_3(ctx: _Ctx) -> dict[str, Any]:
    runs = _zealous_runs(ctx)
    series = []
    rows = []
    for m in MS:
        tj = _get(runs, "queries", m, "top_j")
        if tj is None:
            continue
        series.append({"label": f"queries, m={m}", "x": tj["j"], "y": tj["coverage"]})
        for j, c, l1 in zip(tj["j"], tj["coverage"], tj["avg_l1"], strict=True):
            if j in (10, 100, 1000):
                rows.append([f"m={m}, top-{j}", c, l1])
    return _result(
        "trend",
        ["queries", "coverage", "avg L1"],
        rows,
        notes="Götz Fig. 3 analogue (same runs as Table 3): top-j coverage of queries vs j for "
        "each m; the paper finds coverage falling with j and with m.",
        failed=_failed(runs),
        plot={"xlabel": "j", "ylabel": "top-j coverage", "xlog": True, "series": series},
    )


def _korolova_run(ctx: _Ctx, *, epsilon: float, delta: float, d: int) -> dict[str, Any]:
    """Select-Queries at (ε, δ) with the thesis' §4.5 K and b; queries only."""
    import polars as pl

    s = korolova_solve_paper(epsilon=epsilon, delta=delta, d=d)
    p = KorolovaParams(d=d, K=math.ceil(s["K"]), b=s["b"], b_q=s["b"])
    rel = release_korolova(ctx.log, p, rng=ctx.rng)
    h = rel.tables["queries"].select(
        pl.col("query").alias("item"), pl.col("noisy_count").alias("count")
    )
    return compare_histograms(ctx.orig["queries"], h)


def korolova_fig_4_2(ctx: _Ctx) -> dict[str, Any]:
    ds = [1, 5, 10, 20, 40, 80]
    series: dict[str, tuple[list[float], list[float]]] = {}
    for label, eps in (("e^ε = 10 (thesis)", LN10), ("ε = 10 (relaxed, not the thesis')", 10.0)):
        dist, imp = [], []
        for d in ds:
            done = ctx.step(f"Release-Data {label} d={d}")
            r = _korolova_run(ctx, epsilon=eps, delta=1e-5, d=d)
            dist.append(r["share_distinct"])
            imp.append(r["share_volume"])
            done()
        series[label] = (dist, imp)
    rows = []
    for i, d in enumerate(ds):
        row: list[Any] = [d]
        for dist, imp in series.values():
            row += [f"{100 * dist[i]:.4f}%", f"{100 * imp[i]:.2f}%"]
        rows.append(row)
    peaks = {lab: ds[max(range(len(ds)), key=lambda i: imp[i])] for lab, (_, imp) in series.items()}
    return _result(
        "trend",
        [
            "d",
            "% distinct (e^ε=10)",
            "% impressions (e^ε=10)",
            "% distinct (ε=10)",
            "% impressions (ε=10)",
        ],
        rows,
        notes="δ = 1e-5, K and b of §4.5 (selection; query counts use fresh noise b). Thesis "
        "(one week of a major engine): distinct ≤ 0.75% and falling with d; impressions 10–35% "
        "peaking near d ≈ 20. On 1,000 AOL users only a handful of queries reach K at e^ε = 10 "
        "(K = 140 for d = 20); the relaxed ε = 10 series shows the shape on this small log. "
        "Impressions peak at d = " + ", ".join(f"{v} ({k})" for k, v in peaks.items()) + ".",
        plot={
            "xlabel": "d",
            "ylabel": "share of impressions released",
            "xlog": True,
            "series": [
                {"label": f"impressions, {lab}", "x": ds, "y": imp}
                for lab, (_, imp) in series.items()
            ]
            + [
                {"label": f"distinct, {lab}", "x": ds, "y": dist}
                for lab, (dist, _) in series.items()
            ],
        },
    )


KOROLOVA_T42 = {1e-6: [0.03, 0.06, 0.09], 1e-5: [0.03, 0.07, 0.10], 1e-4: [0.04, 0.09, 0.12]}
KOROLOVA_T43 = {
    1e-6: [26.79, 30.92, 32.64],
    1e-5: [27.55, 31.67, 33.38],
    1e-4: [28.45, 32.55, 34.23],
}


def korolova_tables_4_2_4_3(ctx: _Ctx) -> dict[str, Any]:
    eps = [math.log(2), math.log(5), math.log(10)]
    rows = []
    inc_ok = 0
    for delta in (1e-6, 1e-5, 1e-4):
        dist, imp = [], []
        for e in eps:
            done = ctx.step(f"Release-Data ε={e:.2f} δ={delta:g}")
            r = _korolova_run(ctx, epsilon=e, delta=delta, d=21)
            dist.append(100 * r["share_distinct"])
            imp.append(100 * r["share_volume"])
            done()
        inc_ok += all(b >= a for a, b in zip(imp, imp[1:], strict=False))
        rows.append([f"δ={delta:g}: % distinct (ours)", *[round(x, 2) for x in dist]])
        rows.append([f"δ={delta:g}: % distinct (paper)", *KOROLOVA_T42[delta]])
        rows.append([f"δ={delta:g}: % impressions (ours)", *[round(x, 2) for x in imp]])
        rows.append([f"δ={delta:g}: % impressions (paper)", *KOROLOVA_T43[delta]])
    return _result(
        "trend",
        ["d = 21", "ε = ln 2", "ε = ln 5", "ε = ln 10"],
        rows,
        notes="Thesis: one week of a major engine (millions of users); ours: 1,000 AOL users "
        "over three months, so far fewer queries reach K (≈ 100–150 for d = 21) and the "
        "percentages are much smaller. Trend: impressions grow with ε in "
        f"{inc_ok} of 3 δ rows (paper: all rows); growth with δ is small in both.",
    )


def hong_ump(ctx: Any) -> dict[str, Any]:
    res = reproduce_tables(ctx.log if ctx is not None else None)
    return {"status": "trend", **res}


EXPERIMENTS: dict[str, tuple[str, str, Callable[[Any], dict[str, Any]], bool]] = {
    # id: (title, source, function, needs the data)
    "korolova-table-4.1": (
        "Threshold K and noise b vs d",
        "Korolova thesis, Table 4.1 (§4.5)",
        korolova_table_4_1,
        False,
    ),
    "korolova-fig-4.1": (
        "Release probability vs query frequency",
        "Korolova thesis, Fig. 4.1",
        korolova_fig_4_1,
        False,
    ),
    "goetz-table-1": (
        "δ (probabilistic DP) and δ' (indistinguishability) of ZEALOUS",
        "Götz et al. TKDE 2012, Table 1",
        goetz_table_1,
        False,
    ),
    "goetz-table-2": ("τ' as a function of τ", "Götz et al., Table 2", goetz_table_2, False),
    "goetz-table-3": (
        "Distinct and total items released by ZEALOUS vs m",
        "Götz et al., Table 3 (AOL analogue)",
        goetz_table_3,
        True,
    ),
    "goetz-fig-3": (
        "Top-j coverage of queries vs j for several m",
        "Götz et al., Fig. 3 (AOL analogue)",
        goetz_fig_3,
        True,
    ),
    "korolova-fig-4.2": (
        "% distinct queries and % impressions released vs d",
        "Korolova thesis, Fig. 4.2 (AOL analogue)",
        korolova_fig_4_2,
        True,
    ),
    "korolova-tables-4.2-4.3": (
        "% distinct queries and % impressions vs ε, δ (d = 21)",
        "Korolova thesis, Tables 4.2–4.3 (AOL analogue)",
        korolova_tables_4_2_4_3,
        True,
    ),
    "hong-ump": (
        "UMP optimal counts: EDBT Table 3 grid, F-UMP / D-UMP",
        "Hong et al. EDBT 2012 Table 3; CELS",
        hong_ump,
        True,
    ),
}


def run_experiments(
    ids: list[str] | None,
    *,
    log_path: Path | None = None,
    seed: int = 20120101,
    step: Callable[[str], Callable[[], None]] | None = None,
) -> list[dict[str, Any]]:
    """Run the named experiments (all if ``ids`` is empty/None), in the order given."""
    chosen = list(ids) if ids else list(EXPERIMENTS)
    for i in chosen:
        if i not in EXPERIMENTS:
            raise InvalidParameterError("id", i, "one of " + ", ".join(EXPERIMENTS))
    stepper = step or (lambda _d: lambda: None)
    ctx: _Ctx | None = None
    out = []
    for i in chosen:
        title, source, fn, needs_data = EXPERIMENTS[i]
        if needs_data and ctx is None:
            path = log_path or default_log_path()
            if not path.exists():
                raise InputFormatError(str(path), "shared AOL sample not found (use --log)")
            done = stepper(f"reading {path.name}")
            ctx = _Ctx(path, seed, stepper)
            done()
        res = fn(ctx)
        out.append({"id": i, "title": title, "source": source, **res})
    return out
