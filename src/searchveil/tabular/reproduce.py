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
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from searchveil.errors import SearchveilError
from searchveil.report.html import esc, failed_list, fmt, img, page, table, write_report
from searchveil.rng import make_rng
from searchveil.tabular.api import ModelParams, load, run_model
from searchveil.tabular.hierarchy import EncodedTable, encode_table
from searchveil.tabular.measures import make_measures
from searchveil.tabular.metrics import naive_bayes_accuracy, release_metrics
from searchveil.tabular.models import (
    aggregate_enumerate_record,
    aggregate_exact,
    aggregate_polynomial,
    approx_threshold,
    make_problem,
    threshold_exact,
)
from searchveil.tabular.release import TabularRelease

__all__ = ["reproduce"]

TARGET = "salary-class"
LAM_FIG4 = 0.5  # λ < 1: the aggregate optimum is full detail (λ ≥ 1: full suppression)


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
        rel, meas = run_model(train, "dp", p, rng=make_rng(seed), side_table=side)
    except SearchveilError as exc:
        return {"feasible": False, "reason": str(exc), "mean_u_all": None, "released_fraction": 0.0}
    return {
        "feasible": True,
        "mean_u_all": _mean_u_all(rel, meas),
        "released_fraction": rel.rows.size / train.n,
        "k": rel.info["k"],
    }


def _delta(t: EncodedTable) -> float:
    return min(1e-5, 0.1 / t.n)


def comparison(
    train: EncodedTable, test: EncodedTable, *, quick: bool, seed: int
) -> list[dict[str, Any]]:
    out = []
    eps_list = [0.5, 1.0] if quick else [0.1, 0.5, 1.0, 2.0]
    delta = _delta(train)
    for eps in eps_list:
        runs: list[tuple[str, str, ModelParams, EncodedTable | None]] = [
            ("SafePub", "safepub", ModelParams(epsilon=eps, delta=delta), None),
            (
                "ours (Θ = D)",
                "dp",
                ModelParams(epsilon=eps, delta=delta, beta=0.5, theta0=0.01, theta1=0.02),
                None,
            ),
            (
                "ours (public Θ)",
                "dp",
                ModelParams(epsilon=eps, delta=delta, beta=0.5, theta0=0.01, theta1=0.02),
                test,
            ),
            (
                "ours (public Θ, θ₀=0.002)",
                "dp",
                ModelParams(epsilon=eps, delta=delta, beta=0.5, theta0=0.002, theta1=0.00202),
                test,
            ),
        ]
        for name, model, p, side in runs:
            row: dict[str, Any] = {"method": name, "epsilon": eps, "delta": delta}
            try:
                t0 = time.perf_counter()
                rel, meas = run_model(train, model, p, rng=make_rng(seed), side_table=side)
                row["seconds"] = time.perf_counter() - t0
                row.update(release_metrics(rel, meas))
                row["accuracy"] = naive_bayes_accuracy(rel, test, TARGET)
                row["k"] = rel.info.get("k")
            except SearchveilError as exc:
                row["error"] = str(exc)
            out.append(row)
    baselines: list[tuple[str, str | None, ModelParams | None]] = [
        ("k-anonymity k=5 (not DP)", "kanon", ModelParams(k=5, max_suppression=0.05)),
        ("original (no anonymization)", None, None),
    ]
    for bname, bmodel, p0 in baselines:
        row = {"method": bname, "epsilon": None, "delta": None}
        if bmodel is None:
            rel = TabularRelease(
                train,
                np.arange(train.n),
                np.zeros((train.n, len(train.hierarchies)), np.int64),
                train.frame,
                "identity",
                "",
                None,
                None,
            )
            meas = make_measures(train.hierarchies)
        else:
            rel, meas = run_model(train, bmodel, p0 or ModelParams(), rng=make_rng(seed))
        row.update(release_metrics(rel, meas))
        row["accuracy"] = naive_bayes_accuracy(rel, test, TARGET)
        out.append(row)
    return out


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
    data: str | Path, *, report: str | Path | None = None, quick: bool = False, seed: int = 0
) -> dict[str, Any]:
    d = Path(data)
    csv = d / "adult.csv"
    t = load(csv, d)
    gen = make_rng(seed).numpy_generator()
    perm = gen.permutation(t.n)
    cut = int(0.8 * t.n)
    train, test = t.subset(np.sort(perm[:cut])), t.subset(np.sort(perm[cut:]))
    f3 = fig3(train, quick=quick, seed=seed)
    f4 = fig4(train, test, quick=quick, seed=seed)
    comp = comparison(train, test, quick=quick, seed=seed)
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
        write_report(report, _html(res))
        res["report"] = str(report)
    return res


def _label(key: str) -> str:
    return key.replace("_", " ")


def _rows_table(rows: list[dict[str, Any]], keys: list[str]) -> str:
    """``rows`` (dicts) as a table of the columns ``keys``, headers in words."""
    return table([_label(k) for k in keys], [[x.get(k) for k in keys] for x in rows])


# the ours-vs-SafePub comparison in two tables of a few columns each (one table of thirteen
# columns does not fit a window)
_COMPARISON_GROUPS = (
    ("What is released and its re-identification risk",
     ["released_fraction", "classes", "avg_class_size", "k", "prosecutor_risk_max",
      "prosecutor_risk_mean", "mean_risk"]),
    ("Information loss and utility",
     ["granularity_loss", "non_uniform_entropy_loss", "discernibility", "mean_u", "accuracy"]),
)  # fmt: skip


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
    body.append("<h2>Ours vs SafePub at equal (ε, δ)</h2>")
    ran = [x for x in comp if "error" not in x]
    for title, cols in _COMPARISON_GROUPS:
        cols = [c for c in cols if any(x.get(c) is not None for x in ran)]
        body.append(f"<h3>{esc(title)}</h3>")
        body.append(_rows_table(ran, ["method", "epsilon", *cols]))
    body.append(
        failed_list(
            "Infeasible runs (nothing released):",
            [(f"{x['method']}, ε = {fmt(x['epsilon'])}", x["error"]) for x in comp if "error" in x],
        )
    )
    return page(
        "Tabular release: Fouad et al. 2014 vs SafePub", "searchveil tabular reproduce", body
    )
