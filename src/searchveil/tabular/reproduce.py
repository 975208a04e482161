"""``searchveil tabular reproduce``: the experiments of Fouad et al. TKDE 2014 §IV on ARX's
Adult (the paper's Wal-Mart item table is not public), and ours vs SafePub.

* Fig. 3 — aggregate vs threshold model: running time and mean utility against the number of
  attributes, and utility against the risk threshold ``c``. Exact sweeps for both models, the
  polynomial (Fujishige–Wolfe) aggregate solver and Algorithm 1 on a sample of records.
* Fig. 4 — the DP sampler against the optimum, sampling with the paper's ``θ ∈ (θ₀, 1)`` vs a
  narrow ``θ`` range, a public side table, and utility against the sampling set size (β).
  The group sampling of Mohammed et al. [29] is not implemented (not compared).
* Ours vs SafePub (and full-domain k-anonymity, not DP) at equal ``(ε, δ)`` for
  ``ε ∈ {0.1, 0.5, 1, 2}``: granularity, non-uniform entropy, discernibility, class size,
  prosecutor risk, and naive-Bayes accuracy for salary-class (train on the output of an 80 %
  split, test on the original 20 %; the 20 % doubles as the public side table Θ).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from searchveil.errors import SearchveilError
from searchveil.report.html import esc, failed_list, fmt, img, page, table, write_report
from searchveil.rng import make_rng
from searchveil.tabular import synth_baselines as sb
from searchveil.tabular.api import ModelParams, load, run_model
from searchveil.tabular.hierarchy import EncodedTable, encode_table, read_hierarchy
from searchveil.tabular.measures import make_measures
from searchveil.tabular.metrics import logistic_accuracy, naive_bayes_accuracy, release_metrics
from searchveil.tabular.models import (
    aggregate_enumerate_record,
    aggregate_exact,
    aggregate_polynomial,
    approx_threshold,
    make_problem,
    threshold_exact,
)
from searchveil.tabular.release import TabularRelease
from searchveil.validate import parse_choice

__all__ = [
    "reproduce", "compare_methods", "method_row", "split", "compare_report", "METHODS", "Method"
]  # fmt: skip

TARGET = "salary-class"
LAM_FIG4 = 0.5  # λ < 1: the aggregate optimum is full detail (λ ≥ 1: full suppression)


def split(t: EncodedTable, seed: int = 0, share: float = 0.8) -> tuple[EncodedTable, EncodedTable]:
    """The 80/20 train/test split every comparison uses (a permutation from ``seed``)."""
    perm = make_rng(seed).numpy_generator().permutation(t.n)
    cut = int(share * t.n)
    return t.subset(np.sort(perm[:cut])), t.subset(np.sort(perm[cut:]))


def compare_report(rows: list[dict[str, Any]], train: EncodedTable, test: EncodedTable) -> str:
    """HTML of ``tabular compare``."""
    body = [
        f"<p>{train.n:,} training records ({esc(train.source)}), {test.n:,} held-out records. "
        "Every method runs at the same (ε, δ) on the same split; accuracy of naive Bayes and "
        "logistic regression trained on each output and tested on the held-out records "
        "(generalized values spread uniformly over their leaves). Timings on a shared 2-core "
        "machine.</p>",
        *comparison_html(rows),
    ]
    return page("Tabular releases compared", "searchveil tabular compare", body)


def _restrict(t: EncodedTable, k: int) -> EncodedTable:
    hs = list(t.hierarchies[:k])
    return encode_table(t.frame, hs, source=t.source)


def fig3(t: EncodedTable, *, quick: bool, seed: int) -> dict[str, Any]:
    ks = list(range(2, len(t.hierarchies) + 1, 2 if quick else 1))
    c = 0.05
    rows: list[dict[str, Any]] = []
    rng = make_rng(seed)
    sample = 5 if quick else 20
    for k in ks:
        tk = _restrict(t, k)
        meas = make_measures(tk.hierarchies)
        prob = make_problem(tk, meas)
        w = prob.count
        t0 = time.perf_counter()
        agg = aggregate_exact(prob)
        t_agg = time.perf_counter() - t0
        t0 = time.perf_counter()
        thr = threshold_exact(prob, c)
        t_thr = time.perf_counter() - t0
        idx = np.arange(min(sample, prob.m))
        t0 = time.perf_counter()
        agree = sum(
            aggregate_polynomial(prob, int(j))[1]
            >= aggregate_enumerate_record(prob, int(j))[1] - 1e-9
            for j in idx
        )
        t_poly = (time.perf_counter() - t0) / max(idx.size, 1)
        t0 = time.perf_counter()
        u_alg1 = [
            approx_threshold(prob, int(j), c, rng=rng)[1]["u"] for j in idx[: max(2, sample // 4)]
        ]
        t_alg1 = (time.perf_counter() - t0) / max(len(u_alg1), 1)
        rows.append(
            {
                "attributes": k,
                "lattice": prob.lattice.size,
                "distinct_records": prob.m,
                "aggregate_exact_s": t_agg,
                "threshold_exact_s": t_thr,
                "aggregate_poly_s_per_record": t_poly,
                "algorithm1_s_per_record": t_alg1,
                "poly_agrees_with_enumeration": f"{agree}/{idx.size}",
                "aggregate_mean_u": float(np.average(agg.u, weights=w)),
                "threshold_mean_u": float(np.average(thr.u, weights=w)),
                "algorithm1_mean_u_sample": float(np.mean(u_alg1)),
                "threshold_mean_u_sample": float(np.mean(thr.u[idx[: len(u_alg1)]])),
            }
        )
    meas = make_measures(t.hierarchies)
    prob = make_problem(t, meas)
    by_c = []
    for cc in [0.01, 0.1] if quick else [0.001, 0.005, 0.01, 0.05, 0.1, 0.5]:
        t0 = time.perf_counter()
        thr = threshold_exact(prob, cc)
        by_c.append(
            {
                "c": cc,
                "threshold_mean_u": float(np.average(thr.u, weights=prob.count)),
                "seconds": time.perf_counter() - t0,
            }
        )
    lam_rows = []
    for lam in [0.5, 2.0] if quick else [0.05, 0.2, 0.5, 0.8, 1.0, 2.0]:
        m2 = make_measures(t.hierarchies, lam=lam)
        agg = aggregate_exact(make_problem(t, m2))
        lam_rows.append(
            {
                "lambda": lam,
                "aggregate_mean_u": float(np.average(agg.u, weights=prob.count)),
                "aggregate_mean_f": float(np.average(agg.objective, weights=prob.count)),
            }
        )
    return {"by_attributes": rows, "by_threshold": by_c, "by_lambda": lam_rows, "c": c}


def _mean_u_all(rel: TabularRelease, meas: Any) -> float:
    t = rel.table
    u = np.zeros(rel.rows.size)
    for i in range(len(t.hierarchies)):
        u += meas.d[i][t.leaves[rel.rows, i], rel.levels[:, i]]
    return float(u.sum() / max(t.n, 1))


def fig4(train: EncodedTable, side: EncodedTable, *, quick: bool, seed: int) -> dict[str, Any]:
    meas = make_measures(train.hierarchies, lam=LAM_FIG4)
    opt = aggregate_exact(make_problem(train, meas))
    opt_u = float(np.average(opt.u, weights=make_problem(train, meas).count))
    variants = [
        ("ours, Θ = D, θ ∈ (θ₀, 1) [paper]", {"theta1": 1.0}, None),
        ("ours, Θ = D, θ ∈ (θ₀, 2θ₀)", {"theta1": 0.02}, None),
        ("ours, public Θ, θ ∈ (θ₀, 2θ₀)", {"theta1": 0.02}, side),
    ]
    out = []
    eps_list = [1.0] if quick else [0.5, 1.0, 2.0]
    for eps in eps_list:
        for name, extra, th in variants:
            r = _dp_point(train, eps, 0.5, th, seed, extra)
            out.append({"variant": name, "epsilon": eps, **r})
    by_beta = []
    for beta in [0.5, 0.9] if quick else [0.1, 0.3, 0.5, 0.7, 0.9]:
        r = _dp_point(train, 2.0, beta, side, seed, {"theta1": 0.02})
        by_beta.append({"beta": beta, "sample_size": (1 - beta) * train.n, **r})
    return {"optimum_mean_u": opt_u, "variants": out, "by_beta": by_beta}


def _dp_point(
    train: EncodedTable,
    eps: float,
    beta: float,
    side: EncodedTable | None,
    seed: int,
    extra: dict[str, Any],
) -> dict[str, Any]:
    p = ModelParams(epsilon=eps, delta=_delta(train), beta=beta, theta0=0.01, lam=LAM_FIG4, **extra)
    try:
        rel, meas = run_model(train, "fouad2014", p, rng=make_rng(seed), side_table=side)
    except SearchveilError as exc:
        return {"feasible": False, "reason": str(exc), "mean_u_all": None, "released_fraction": 0.0}
    return {
        "feasible": True,
        "mean_u_all": _mean_u_all(rel, meas),
        "released_fraction": rel.rows.size / train.n,
        "k": rel.noisy["k"],
    }


def _delta(t: EncodedTable) -> float:
    return min(1e-5, 0.1 / t.n)


EPS_GRID = (0.5, 1.0, 2.0, 4.0)


class Method(StrEnum):
    """The methods ``tabular compare`` runs side by side."""

    DP = "dp"
    SAFEPUB = "safepub"
    FOUAD2014 = "fouad2014"
    AIM = "aim"
    MST = "mst"


METHODS = tuple(m.value for m in Method)
LABELS = {
    "dp": "ours: dp (global recoding)",
    "safepub": "SafePub",
    "fouad2014": "Fouad et al. sampler (paper, Θ = D)",
    "aim": "AIM (SYNTHETIC)",
    "mst": "MST (SYNTHETIC)",
}


def _extra_hierarchies(train: EncodedTable, hier_dir: Path | None) -> dict[str, Any]:
    """Hierarchy files of the non-QI columns (public domains for the synthetic baselines)."""
    out: dict[str, Any] = {}
    if hier_dir is None:
        return out
    for c in train.frame.columns:
        if c in train.qi:
            continue
        found = [p for p in [hier_dir / f"{c}.csv", *sorted(hier_dir.glob(f"*hierarchy_{c}.csv"))]
                 if p.is_file()]  # fmt: skip
        if found:
            out[c] = read_hierarchy(found[0], c)
    return out


def method_row(
    method: str,
    train: EncodedTable,
    test: EncodedTable,
    *,
    epsilon: float,
    delta: float,
    seed: int,
    target: str = TARGET,
    hier_dir: Path | None = None,
) -> dict[str, Any]:
    """One method at one (ε, δ): released share, granularity loss (truthful releases), naive
    Bayes and logistic-regression accuracy on ``test``, runtime; ``error``/``skipped`` with the
    reason when it cannot run."""
    row: dict[str, Any] = {"method": LABELS.get(method, method), "model": method,
                           "epsilon": epsilon, "delta": delta}  # fmt: skip
    row["output"] = "synthetic records" if method in ("aim", "mst") else "truthful generalized"
    try:
        t0 = time.perf_counter()
        if method in ("aim", "mst"):
            ok, why = sb.available()
            if not ok:
                row["skipped"] = why
                return row
            run = sb.run_aim if method == "aim" else sb.run_mst
            res = run(train, epsilon=epsilon, delta=delta, rng=make_rng(seed),
                      extra_hierarchies=_extra_hierarchies(train, hier_dir))  # fmt: skip
            rel = res.release
            row["seconds"] = time.perf_counter() - t0
            row["released_fraction"] = rel.rows.size / max(train.n, 1)
            row["granularity_loss"] = None
        else:
            params = {
                "dp": ModelParams(epsilon=epsilon, delta=delta),
                "safepub": ModelParams(epsilon=epsilon, delta=delta),
                "fouad2014": ModelParams(
                    epsilon=epsilon, delta=delta, beta=0.5, theta0=0.01, theta1=0.02, lam=LAM_FIG4
                ),  # fmt: skip
            }[method]
            rel, meas = run_model(train, method, params, rng=make_rng(seed))
            row["seconds"] = time.perf_counter() - t0
            m = release_metrics(rel, meas)
            row["released_fraction"] = m["released_fraction"]
            row["granularity_loss"] = m["granularity_loss"]
            row["avg_class_size"] = m["avg_class_size"]
            row["k"] = rel.parameters.get("k", rel.noisy.get("k"))
            row["level"] = rel.info.get("level")
        row["nb_accuracy"] = naive_bayes_accuracy(rel, test, target)
        row["lr_accuracy"] = logistic_accuracy(rel, test, target)
    except SearchveilError as exc:
        row["error"] = str(exc)
    return row


def baseline_rows(train: EncodedTable, test: EncodedTable, *, seed: int) -> list[dict[str, Any]]:
    """Not-DP references: 5-anonymity and the original training rows; majority class."""
    out = []
    for name, model in (("k-anonymity k=5 (not DP)", "kanon"), ("original (no protection)", None)):
        row: dict[str, Any] = {"method": name, "model": model or "original", "epsilon": None}
        t0 = time.perf_counter()
        if model is None:
            rel = TabularRelease(train, np.arange(train.n),
                                 np.zeros((train.n, len(train.hierarchies)), np.int64),
                                 train.frame, "identity", "", None, None)  # fmt: skip
            meas = make_measures(train.hierarchies)
        else:
            rel, meas = run_model(train, model, ModelParams(k=5, max_suppression=0.05),
                                  rng=make_rng(seed))  # fmt: skip
        row["seconds"] = time.perf_counter() - t0
        m = release_metrics(rel, meas)
        row["released_fraction"] = m["released_fraction"]
        row["granularity_loss"] = m["granularity_loss"]
        row["output"] = "truthful generalized"
        row["nb_accuracy"] = naive_bayes_accuracy(rel, test, TARGET)
        row["lr_accuracy"] = logistic_accuracy(rel, test, TARGET)
        out.append(row)
    y = test.frame.get_column(TARGET).to_numpy().astype(str)
    _, cnt = np.unique(y, return_counts=True)
    out.append({"method": "majority class (test set)", "model": "majority", "epsilon": None,
                "nb_accuracy": float(cnt.max() / cnt.sum()), "output": "—"})  # fmt: skip
    return out


def compare_methods(
    train: EncodedTable,
    test: EncodedTable,
    *,
    epsilons: tuple[float, ...] | list[float] = EPS_GRID,
    delta: float,
    methods: Sequence[Method | str] = METHODS,
    seed: int = 0,
    hier_dir: Path | None = None,
    baselines: bool = True,
) -> list[dict[str, Any]]:
    methods = [parse_choice("methods", m, Method) for m in methods]
    rows = [
        method_row(m, train, test, epsilon=e, delta=delta, seed=seed, hier_dir=hier_dir)
        for e in epsilons
        for m in methods
    ]
    return rows + (baseline_rows(train, test, seed=seed) if baselines else [])


def comparison(
    train: EncodedTable, test: EncodedTable, *, quick: bool, seed: int, hier_dir: Path | None
) -> list[dict[str, Any]]:
    eps = (1.0,) if quick else EPS_GRID
    methods = ("dp", "safepub", "fouad2014") if quick else METHODS
    delta = min(1e-5, 0.5 / train.n)
    return compare_methods(train, test, epsilons=eps, delta=delta, methods=methods,
                           seed=seed, hier_dir=hier_dir)  # fmt: skip


def accuracy_plot(rows: list[dict[str, Any]]) -> Figure:
    """Naive-Bayes and logistic-regression accuracy on held-out records vs ε, per method, with
    the not-DP references as horizontal lines."""
    fig = Figure(figsize=(10, 3.6))
    for j, key in enumerate(("nb_accuracy", "lr_accuracy")):
        ax = fig.add_subplot(1, 2, j + 1)
        for m in [m for m in METHODS if any(r.get("model") == m for r in rows)]:
            pts = [r for r in rows if r.get("model") == m and r.get(key) is not None]
            if pts:
                ax.plot([r["epsilon"] for r in pts], [r[key] for r in pts], "o-",
                        label=LABELS[m])  # fmt: skip
        for r in rows:
            if r.get("epsilon") is None and r.get(key) is not None:
                ax.axhline(r[key], ls="--", lw=0.8, color="grey")
                ax.annotate(r["method"], (0.01, r[key]), xycoords=("axes fraction", "data"),
                            fontsize=6, va="bottom")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ε (δ fixed)")
        ax.set_ylabel("accuracy on held-out records")
        ax.set_title("naive Bayes" if j == 0 else "logistic regression")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return fig


COMPARE_COLS = ["method", "output", "epsilon", "released_fraction", "granularity_loss",
                "nb_accuracy", "lr_accuracy", "seconds", "k"]  # fmt: skip


def comparison_html(rows: list[dict[str, Any]]) -> list[str]:
    """The comparison table, the plot, and the runs that could not run listed BELOW the table
    with their reason (never inside a cell)."""
    ok = [r for r in rows if "error" not in r and "skipped" not in r]
    bad = [r for r in rows if "error" in r or "skipped" in r]
    body = [
        _rows_table(ok, COMPARE_COLS),
        img(accuracy_plot(ok), "accuracy vs epsilon"),
        "<p>Synthetic rows (AIM, MST) are <b>synthetic records</b>, not generalized input "
        "records: their released share is the number of synthetic rows over the training "
        "size. Granularity loss applies to truthful generalized releases only.</p>",
    ]
    body.append(
        failed_list(
            "Infeasible runs (nothing released) and methods not run:",
            [
                (f"{r['method']}, ε = {fmt(r['epsilon'])}", str(r.get("error") or r.get("skipped")))
                for r in bad
            ],
        )  # fmt: skip
    )
    return body


def _plot_fig3(f3: dict[str, Any]) -> Figure:
    fig = Figure(figsize=(11, 3.4))
    ax = fig.add_subplot(1, 3, 1)
    r = f3["by_attributes"]
    ks = [x["attributes"] for x in r]
    ax.plot(ks, [x["aggregate_exact_s"] for x in r], "o-", label="aggregate (exact sweep, all)")
    ax.plot(ks, [x["threshold_exact_s"] for x in r], "s-", label="threshold (exact sweep, all)")
    ax.plot(
        ks,
        [x["aggregate_poly_s_per_record"] for x in r],
        "^-",
        label="aggregate (Fujishige–Wolfe, per record)",
    )
    ax.plot(ks, [x["algorithm1_s_per_record"] for x in r], "v-", label="Algorithm 1 (per record)")
    ax.set_yscale("log")
    ax.set_xlabel("number of attributes")
    ax.set_ylabel("seconds")
    ax.set_title("(a) efficiency")
    ax.legend(fontsize=7)
    ax = fig.add_subplot(1, 3, 2)
    ax.plot(ks, [x["aggregate_mean_u"] for x in r], "o-", label="aggregate")
    ax.plot(ks, [x["threshold_mean_u"] for x in r], "s-", label=f"threshold (c={f3['c']})")
    ax.set_xlabel("number of attributes")
    ax.set_ylabel("mean utility u (depth)")
    ax.set_title("(b) utility")
    ax.legend(fontsize=7)
    ax = fig.add_subplot(1, 3, 3)
    ax.semilogx(
        [x["c"] for x in f3["by_threshold"]],
        [x["threshold_mean_u"] for x in f3["by_threshold"]],
        "s-",
    )
    ax.set_xlabel("risk threshold c")
    ax.set_ylabel("mean utility u")
    ax.set_title("(c) threshold model vs c")
    return fig


def _plot_fig4(f4: dict[str, Any]) -> Figure:
    fig = Figure(figsize=(9, 3.4))
    ax = fig.add_subplot(1, 2, 1)
    names = sorted({v["variant"] for v in f4["variants"]})
    for nm in names:
        pts = [v for v in f4["variants"] if v["variant"] == nm]
        ax.plot([v["epsilon"] for v in pts], [v["mean_u_all"] or 0.0 for v in pts], "o-", label=nm)
    ax.axhline(f4["optimum_mean_u"], color="k", ls="--", label="optimum (aggregate, no DP)")
    ax.set_xlabel("ε")
    ax.set_ylabel("mean u over all records (unreleased = 0)")
    ax.set_title("(a) DP sampling vs optimum")
    ax.legend(fontsize=7)
    ax = fig.add_subplot(1, 2, 2)
    b = f4["by_beta"]
    ax.plot([x["sample_size"] for x in b], [x["mean_u_all"] or 0.0 for x in b], "o-")
    ax.set_xlabel("expected sampling set size (1−β)|D|")
    ax.set_ylabel("mean u over all records")
    ax.set_title("(b) utility vs sampling set size (ε = 2, public Θ)")
    return fig


def reproduce(
    data: str | Path,
    *,
    report: str | Path | None = None,
    quick: bool = False,
    seed: int = 0,
    overwrite: bool = False,
) -> dict[str, Any]:
    d = Path(data)
    csv = d / "adult.csv"
    t = load(csv, d)
    train, test = split(t, seed)
    f3 = fig3(train, quick=quick, seed=seed)
    f4 = fig4(train, test, quick=quick, seed=seed)
    comp = comparison(train, test, quick=quick, seed=seed, hier_dir=d)
    res: dict[str, Any] = {
        "data": str(csv),
        "records": t.n,
        "train": train.n,
        "test": test.n,
        "fig3": f3,
        "fig4": f4,
        "comparison": comp,
    }
    if report is not None:
        write_report(report, _html(res), overwrite=overwrite)
        res["report"] = str(report)
    return res


def _label(key: str) -> str:
    return key.replace("_", " ")


def _rows_table(rows: list[dict[str, Any]], keys: list[str]) -> str:
    """``rows`` (dicts) as a table of the columns ``keys``, headers in words."""
    return table([_label(k) for k in keys], [[x.get(k) for k in keys] for x in rows])


def _html(r: dict[str, Any]) -> str:
    f3, f4, comp = r["fig3"], r["fig4"], r["comparison"]
    by_attr = f3["by_attributes"]
    keys = list(by_attr[0].keys())
    utility_keys = [k for k in keys if "mean_u" in k]
    timing_keys = [k for k in keys if k not in utility_keys]
    body = [
        "<p>Fouad, Elbassioni &amp; Bertino, TKDE 2014, §IV on ARX's Adult "
        f"({r['records']:,} records; train {r['train']:,} / test {r['test']:,}). The paper's "
        "Wal-Mart item table is not public, so absolute numbers are not comparable with its "
        "figures. All timings on a shared 2-core machine (inflated).</p>",
        "<h2>Fig. 3 — aggregate vs threshold model</h2>",
        img(_plot_fig3(f3), "Fig. 3"),
        "<h3>Lattice size and running time</h3>",
        _rows_table(by_attr, timing_keys),
    ]
    if utility_keys:
        body += ["<h3>Utility</h3>", _rows_table(by_attr, ["attributes", *utility_keys])]
    body += [
        "<p>Aggregate model vs λ (the optimum of eq. 2 is bang-bang on Adult: every record at full "
        "detail or fully suppressed, see docs/tabular.md):</p>",
        _rows_table(f3["by_lambda"], list(f3["by_lambda"][0].keys())),
        "<h2>Fig. 4 — the DP sampler</h2>",
        img(_plot_fig4(f4), "Fig. 4"),
        f"<p>Optimum (aggregate model, not private): mean u = {f4['optimum_mean_u']:.3f}. "
        "Group sampling of Mohammed et al. [29]: not implemented.</p>",
    ]
    feasible = [v for v in f4["variants"] if v.get("feasible", True)]
    if feasible:
        body.append(
            _rows_table(feasible, ["variant", "epsilon", "mean_u_all", "released_fraction"])
        )
    body.append(
        failed_list(
            "Infeasible variants (nothing released):",
            [
                (f"{v['variant']}, ε = {fmt(v['epsilon'])}", v.get("reason") or "infeasible")
                for v in f4["variants"]
                if not v.get("feasible", True)
            ],
        )  # fmt: skip
    )
    body += [
        "<h2>Ours vs SafePub vs DP synthetic data (AIM, MST) at equal (ε, δ)</h2>",
        f"<p>Train on the 80 % split, accuracy on the held-out 20 % (δ = {fmt(comp[0]['delta'])}"
        "). Generalized values are spread uniformly over their leaves.</p>",
        *comparison_html(comp),
    ]
    return page(
        "Tabular release: ours vs SafePub vs AIM/MST; Fouad et al. 2014 reproduced",
        "searchveil tabular reproduce",
        body,
    )
