"""The experiments of Korolova (2012) thesis §5.5 on a SNAP graph, and their HTML report.

Setup (§5.5.1): the graph is made undirected; 10% of the nodes are drawn uniformly without
replacement as targets; utilities are common neighbours and weighted paths (length ≤ 3,
γ ∈ {0.05, 0.005, 0.0005}); targets with no non-zero-utility candidate are omitted (§5.5.1
"a negligible number"). For every (utility, ε) we compute per target: the exact expected
accuracy of A_E (closed form), of A_L (numerical integration of Definition 8; the thesis
averaged 1,000 trials) and of permute-and-flip (exact integral), A_S over R_best (exact), and
the node-specific Corollary 1 bound. Weighted paths use D = the graph's maximum degree as the
degree bound — the thesis's implicit choice; it comes from the data, so this is an
experiment, not a release (the ledger says so).

Figures follow Figs 5.1–5.4: CDF of accuracy over targets, and accuracy vs degree.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from matplotlib.figure import Figure

from searchveil.errors import InvalidParameterError
from searchveil.io.graphs import Graph, NodeUniverse, read_edge_list
from searchveil.io.ledger import build_ledger
from searchveil.mechanisms.budget import NoGuarantee
from searchveil.report.html import esc, fmt, img, page, pct, table
from searchveil.rng import RandomSource
from searchveil.social.accuracy import (
    exponential_accuracy,
    laplace_accuracy,
    min_utility_candidate_degree,
    node_bound,
    permute_and_flip_accuracy,
    smoothing_accuracy,
)
from searchveil.social.mechanisms import epsilon_fraction
from searchveil.social.utility import (
    CommonNeighbours,
    FloatArray,
    TargetUtilities,
    UtilityFunction,
    WeightedPaths,
    parse_gamma,
    target_utilities,
)

__all__ = [
    "ExperimentConfig",
    "evaluate",
    "experiment_ledger",
    "load_graph",
    "public_result",
    "run_experiments",
    "sample_targets",
    "social_report",
]

SERIES = ("exponential", "laplace", "permute_and_flip", "em_half", "smoothing", "bound")
LABELS = {
    "exponential": "A_E (exponential)",
    "laplace": "A_L (Laplace)",
    "permute_and_flip": "permute-and-flip",
    "em_half": "EM at ε/(2Δ∞)",
    "smoothing": "A_S (smoothing, R_best)",
    "bound": "Corollary 1 bound",
}


@dataclass(frozen=True)
class ExperimentConfig:
    epsilons: tuple[float, ...] = (0.5, 1.0, 3.0)
    gammas: tuple[str, ...] = ("0.05", "0.005", "0.0005")
    target_fraction: float = 0.1
    common_neighbours: bool = True

    def __post_init__(self) -> None:
        for e in self.epsilons:
            epsilon_fraction(e)
        if not self.epsilons:
            raise InvalidParameterError("epsilons", "()", "at least one ε")
        for g in self.gammas:
            parse_gamma(g)
        if not (0 < self.target_fraction <= 1):
            raise InvalidParameterError("target_fraction", self.target_fraction, "(0, 1]")


def sample_targets(n: int, fraction: float, rng: RandomSource) -> npt.NDArray[np.int64]:
    """``round(fraction·n)`` nodes uniformly without replacement (random 64-bit keys)."""
    k = max(1, int(round(fraction * n)))
    order = np.argsort(rng.random_keys(n), kind="stable")
    return np.sort(order[:k]).astype(np.int64)


def evaluate(
    tus: Sequence[TargetUtilities],
    utility: UtilityFunction,
    epsilon: float,
    x_degrees: Sequence[int] | None = None,
) -> dict[str, FloatArray]:
    """Per-target accuracies of every mechanism and the bound, for one (utility, ε)."""
    s1 = float(utility.l1_sensitivity())
    sinf = float(utility.linf_sensitivity())
    out: dict[str, list[float]] = {k: [] for k in SERIES}
    for i, tu in enumerate(tus):
        vals, counts = tu.levels()
        v = vals.astype(np.float64) / tu.scale
        out["exponential"].append(exponential_accuracy(v, counts, epsilon=epsilon, sensitivity=s1))
        out["laplace"].append(laplace_accuracy(v, counts, epsilon=epsilon, sensitivity=s1))
        out["permute_and_flip"].append(
            permute_and_flip_accuracy(v, counts, epsilon=epsilon, sensitivity=sinf)
        )
        out["em_half"].append(
            exponential_accuracy(v, counts, epsilon=epsilon / 2, sensitivity=sinf)
        )
        out["smoothing"].append(smoothing_accuracy(v, counts, epsilon=epsilon))
        xd = 0 if x_degrees is None else int(x_degrees[i])
        out["bound"].append(node_bound(tu, utility, epsilon, x_degree=xd))
    return {k: np.asarray(x, dtype=np.float64) for k, x in out.items()}


def _summary(acc: dict[str, FloatArray]) -> dict[str, Any]:
    q = (0.1, 0.25, 0.5, 0.75, 0.9)
    return {
        k: {
            "mean": float(v.mean()),
            **{f"p{int(p * 100)}": float(np.quantile(v, p)) for p in q},
            "frac_gt_0.5": float((v > 0.5).mean()),
            "frac_gt_0.9": float((v > 0.9).mean()),
            "frac_lt_0.1": float((v < 0.1).mean()),
        }
        for k, v in acc.items()
    }


#: the smallest graph the experiments can run on: a target needs a candidate two hops away
MIN_NODES, MIN_EDGES = 3, 2


def _graph_name(graph: Graph) -> str:
    return str(graph.info.get("file") or "the graph")


def _check_size(graph: Graph) -> None:
    """A clean error for a graph too small for any target to have a candidate of positive
    utility (a node two hops away that is not its neighbour): fewer than 3 nodes or 2 edges."""
    if graph.n_nodes < MIN_NODES or graph.n_edges < MIN_EDGES:
        raise InvalidParameterError(
            "graph", _graph_name(graph),
            f"a graph of at least {MIN_NODES} nodes and {MIN_EDGES} edges (a target needs a "
            "candidate two hops away, not its neighbour; §5.5 used graphs of thousands of "
            f"nodes) — this one has {graph.n_nodes} node(s) and {graph.n_edges} edge(s)",
        )  # fmt: skip


def _too_small(graph: Graph, label: str, targets: int, fraction: float) -> None:
    raise InvalidParameterError(
        "graph", _graph_name(graph),
        f"a graph where some sampled target has a candidate of positive {label} utility; none "
        f"of the {targets} target(s) drawn ({fraction:g} of {graph.n_nodes} nodes) has one. "
        f"Give a larger graph (at least {MIN_NODES} nodes joined by paths of length 2 around "
        "most nodes) or a larger --target-fraction",
    )  # fmt: skip


def _pf_gain(acc: dict[str, FloatArray]) -> dict[str, float]:
    pf, ae, half = acc["permute_and_flip"], acc["exponential"], acc["em_half"]
    return {
        "mean_pf_minus_ae": float((pf - ae).mean()),
        "frac_targets_pf_better_than_ae": float((pf > ae + 1e-12).mean()),
        "mean_pf_minus_em_same_base": float((pf - half).mean()),
        "max_pf_minus_em_same_base": float((pf - half).max()),
        "min_pf_minus_em_same_base": float((pf - half).min()),
    }


def run_experiments(
    graph: Graph,
    rng: RandomSource,
    config: ExperimentConfig,
    *,
    step: Callable[[str], Callable[[], None]] | None = None,
) -> dict[str, Any]:
    """Run every (utility, ε) of ``config``; returns summaries, per-target arrays, findings."""
    if graph.directed:
        raise InvalidParameterError("graph", "directed", "an undirected graph")
    _check_size(graph)
    say = step or (lambda _d: lambda: None)
    t_all = time.perf_counter()
    targets = sample_targets(graph.n_nodes, config.target_fraction, rng)
    degrees = graph.degrees
    order = np.argsort(degrees, kind="stable")
    dmax = int(degrees.max())
    utilities: list[tuple[str, UtilityFunction]] = []
    if config.common_neighbours:
        utilities.append(("common_neighbours", CommonNeighbours()))
    for g in config.gammas:
        utilities.append((f"weighted_paths γ={g}", WeightedPaths(parse_gamma(g), max(dmax, 2))))
    runs: list[dict[str, Any]] = []
    for label, util in utilities:
        done = say(f"utilities: {label}")
        t0 = time.perf_counter()
        tus_all = list(target_utilities(graph, util, targets))
        tus = [tu for tu in tus_all if tu.max_value > 0]
        if not tus:
            _too_small(graph, label, int(targets.size), config.target_fraction)
        xdeg = [min_utility_candidate_degree(tu, degrees, order) for tu in tus]
        t_util = time.perf_counter() - t0
        done()
        for eps in config.epsilons:
            done = say(f"accuracy: {label}, ε={eps:g} ({len(tus)} targets)")
            t0 = time.perf_counter()
            acc = evaluate(tus, util, eps, xdeg)
            runs.append(
                {
                    "utility": label,
                    "utility_params": util.describe(),
                    "epsilon": eps,
                    "targets": len(tus),
                    "omitted_no_positive_utility": len(tus_all) - len(tus),
                    "seconds_utilities": t_util,
                    "seconds_accuracy": time.perf_counter() - t0,
                    "summary": _summary(acc),
                    "permute_and_flip_gain": _pf_gain(acc),
                    "_per_target": acc,
                    "_degree": np.asarray([tu.degree for tu in tus], dtype=np.int64),
                }
            )
            done()
    result = {
        "graph": graph.describe(),
        "nodes": graph.n_nodes,
        "edges": graph.n_edges,
        "max_degree": dmax,
        "targets_sampled": int(targets.size),
        "target_fraction": config.target_fraction,
        "epsilons": list(config.epsilons),
        "gammas": list(config.gammas),
        "degree_bound_for_weighted_paths": max(dmax, 2),
        "runs": runs,
        "findings": _findings(runs),
        "seconds": time.perf_counter() - t_all,
    }
    return result


def _get(runs: list[dict[str, Any]], utility: str, eps: float) -> dict[str, Any] | None:
    for r in runs:
        if r["utility"] == utility and math.isclose(r["epsilon"], eps):
            return r
    return None


def _findings(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The thesis's stated numbers (§5.5.2) beside ours on this graph."""
    out: list[dict[str, Any]] = []

    def add(claim: str, thesis: str, utility: str, eps: float, series: str, op: str, x: float):
        r = _get(runs, utility, eps)
        if r is None:
            return
        v = r["_per_target"][series]
        ours = float((v < x).mean()) if op == "<" else float((v > x).mean())
        out.append(
            {
                "claim": claim,
                "thesis": thesis,
                "ours": ours,
                "utility": utility,
                "epsilon": eps,
                "series": series,
            }
        )

    cn = "common_neighbours"
    add("A_E accuracy < 0.1 (G_WV, CN, ε=0.5)", "60% of nodes", cn, 0.5, "exponential", "<", 0.1)
    add("bound < 0.4 (G_WV, CN, ε=0.5)", "≥ 50% of nodes", cn, 0.5, "bound", "<", 0.4)
    add("A_E accuracy < 0.6 (G_WV, CN, ε=1)", "60% of nodes", cn, 1.0, "exponential", "<", 0.6)
    add("A_E accuracy < 0.1 (G_WV, CN, ε=1)", "45% of nodes", cn, 1.0, "exponential", "<", 0.1)
    add("bound < 0.4 (G_WV, CN, ε=1)", "≥ 30% of nodes", cn, 1.0, "bound", "<", 0.4)
    add(
        "A_E accuracy < 0.3 (G_WV, WP γ=0.0005, ε=1)",
        "> 60% of nodes",
        "weighted_paths γ=0.0005",
        1.0,
        "exponential",
        "<",
        0.3,
    )
    for g in ("0.05", "0.005", "0.0005"):
        add(
            f"bound > 0.5 (WP γ={g}, ε=3)",
            "≤ 52% of nodes (on G_T, Twitter)",
            f"weighted_paths γ={g}",
            3.0,
            "bound",
            ">",
            0.5,
        )
        add(
            f"bound > 0.9 (WP γ={g}, ε=3)",
            "≤ 24% of nodes (on G_T, Twitter)",
            f"weighted_paths γ={g}",
            3.0,
            "bound",
            ">",
            0.9,
        )
    for r in runs:
        d = np.abs(r["_per_target"]["laplace"] - r["_per_target"]["exponential"])
        out.append(
            {
                "claim": f"|A_L − A_E| mean over targets ({r['utility']}, ε={r['epsilon']:g})",
                "thesis": "“nearly identical”",
                "ours": float(d.mean()),
                "utility": r["utility"],
                "epsilon": r["epsilon"],
                "series": "laplace-exponential",
            }
        )
    return out


def public_result(result: dict[str, Any], *, per_target: bool = False) -> dict[str, Any]:
    """``result`` without numpy arrays (optionally with per-target lists) for JSON."""
    runs = []
    for r in result["runs"]:
        d = {k: v for k, v in r.items() if not k.startswith("_")}
        if per_target:
            d["per_target"] = {k: v.tolist() for k, v in r["_per_target"].items()}
            d["degree"] = r["_degree"].tolist()
        runs.append(d)
    return {**result, "runs": runs}


def experiment_ledger(
    graph: Graph, rng: RandomSource, config: ExperimentConfig, universe: NodeUniverse | None = None
) -> dict[str, Any]:
    """The ledger of the §5.5 experiments (nothing is released). Public fields only: the graph's
    file, hash and figures, and the accuracies computed from it, go to the provenance record
    (``social reproduce`` writes it beside the ledger)."""
    return build_ledger(
        mechanism="social-reproduce (accuracy experiment, no release)",
        notion="none released: exact expected accuracies of ε-DP recommenders",
        cost=NoGuarantee("an accuracy experiment: nothing is released"),
        parameters={
            "epsilons": list(config.epsilons),
            "gammas": list(config.gammas),
            "target_fraction": config.target_fraction,
            "utilities": ["common_neighbours"] * config.common_neighbours
            + [f"weighted_paths(γ={g}, D=max degree)" for g in config.gammas],
            "degree_bound_from_data": True,
        },
        public_inputs=[universe.record] if universe is not None else [],
        rng=rng,
        extra={
            "notes": "experiment, not a release: the weighted-paths degree bound (and so their "
            "sensitivity) is the graph's own maximum degree (as in the thesis), so nothing "
            "here may be released; the graph's figures and the results are in the private "
            "provenance record",
        },
    )


# -- report ------------------------------------------------------------------------------------

_STYLE = {
    "exponential": ("C0", "-"),
    "laplace": ("C1", "--"),
    "permute_and_flip": ("C2", "-"),
    "em_half": ("C4", ":"),
    "smoothing": ("C5", ":"),
    "bound": ("k", "-."),
}


def _cdf_plot(runs: list[dict[str, Any]], title: str, series: Sequence[str]) -> Figure:
    fig = Figure(figsize=(5.2 * len(runs), 3.6))
    axes = fig.subplots(1, len(runs), squeeze=False)[0]
    for ax, r in zip(axes, runs, strict=True):
        for s in series:
            v = np.sort(r["_per_target"][s])
            y = np.arange(1, v.size + 1) / v.size * 100
            color, ls = _STYLE[s]
            ax.step(v, y, where="post", color=color, linestyle=ls, label=LABELS[s])
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 100)
        ax.set_xlabel("accuracy (1 − δ)")
        ax.set_ylabel("% of targets with accuracy ≤ x")
        ax.set_title(f"{r['utility']}, ε = {r['epsilon']:g}")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle(title, fontsize=11)
    return fig


def _degree_plot(r: dict[str, Any]) -> Figure:
    fig = Figure(figsize=(6.5, 4))
    ax = fig.subplots()
    deg = r["_degree"]
    for s in ("exponential", "permute_and_flip", "bound"):
        color, _ = _STYLE[s]
        ax.scatter(deg, r["_per_target"][s], s=6, alpha=0.5, color=color, label=LABELS[s])
    ax.set_xscale("log")
    ax.set_xlabel("target degree")
    ax.set_ylabel("accuracy")
    ax.set_title(f"accuracy vs degree ({r['utility']}, ε = {r['epsilon']:g}) — cf. Fig 5.4")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig


def _setup_section(result: dict[str, Any]) -> list[str]:
    """The report's "Graph and setup" section."""
    g = result["graph"]
    return [
        "<h2>Graph and setup</h2>",
        table(
            ["", "value"],
            [
                ["file", esc(g.get("file", ""))],
                ["SHA-256", esc(g.get("sha256", ""))],
                ["nodes", f"{result['nodes']:,}"],
                ["edges (undirected)", f"{result['edges']:,}"],
                ["max degree", f"{result['max_degree']:,}"],
                ["targets sampled", f"{result['targets_sampled']:,}"],
                ["weighted-paths degree bound D", f"{result['degree_bound_for_weighted_paths']:,}"],
            ],
            raw=True,
        ),
        "<p>Accuracy = expected utility of the recommendation / best utility (thesis Def. 5), "
        "computed exactly per target (no Monte-Carlo). The bound is Corollary 1 with n, c, k, t "
        "taken from each target's utility vector and an explicit edge construction.</p>",
    ]


def _plot_sections(runs: list[dict[str, Any]]) -> list[str]:
    """The accuracy CDFs (cf. Figs 5.1–5.3) and accuracy vs degree (cf. Fig 5.4)."""
    body: list[str] = []
    series = ("exponential", "laplace", "permute_and_flip", "bound")
    cn = [r for r in runs if r["utility"] == "common_neighbours"]
    if cn:
        body += [
            "<h2>Common neighbours (cf. Fig 5.1)</h2>",
            img(_cdf_plot(cn, "common neighbours", series), "CDF common neighbours"),
        ]
    for eps in sorted({r["epsilon"] for r in runs}):
        wp = [r for r in runs if r["utility"].startswith("weighted") and r["epsilon"] == eps]
        if wp:
            body += [
                f"<h2>Weighted paths, ε = {eps:g} (cf. Figs 5.2, 5.3)</h2>",
                img(_cdf_plot(wp, f"weighted paths, ε = {eps:g}", series), "CDF weighted"),
            ]
    fig54 = _get(runs, "common_neighbours", 0.5) or (cn[0] if cn else runs[0])
    body += ["<h2>Accuracy vs degree (cf. Fig 5.4)</h2>", img(_degree_plot(fig54), "degree")]
    return body


def _quantile_rows(runs: list[dict[str, Any]]) -> list[list[Any]]:
    """One row per run and mechanism: the accuracy's mean and quantiles."""
    rows = []
    for r in runs:
        for s in SERIES:
            q = r["summary"][s]
            rows.append(
                [
                    r["utility"],
                    f"{r['epsilon']:g}",
                    LABELS[s],
                    q["mean"],
                    q["p10"],
                    q["p25"],
                    q["p50"],
                    q["p75"],
                    q["p90"],
                    pct(q["frac_gt_0.5"]),
                ]
            )
    return rows


def _pf_table(runs: list[dict[str, Any]]) -> str:
    """Permute-and-flip's gain over A_E and over the exponential mechanism at ε/(2Δ∞)."""
    return table(
        [
            "utility",
            "ε",
            "mean PF − A_E",
            "targets PF > A_E",
            "mean PF − EM(ε/2Δ∞)",
            "min PF − EM(ε/2Δ∞)",
        ],
        [
            [
                r["utility"],
                f"{r['epsilon']:g}",
                r["permute_and_flip_gain"]["mean_pf_minus_ae"],
                pct(r["permute_and_flip_gain"]["frac_targets_pf_better_than_ae"]),
                r["permute_and_flip_gain"]["mean_pf_minus_em_same_base"],
                r["permute_and_flip_gain"]["min_pf_minus_em_same_base"],
            ]
            for r in runs
        ],
        left=2,
        raw=True,
    )


def social_report(result: dict[str, Any]) -> str:
    """One self-contained HTML page: plots (Figs 5.1–5.4 style), quantile tables, findings."""
    g = result["graph"]
    runs = result["runs"]
    body = _setup_section(result) + _plot_sections(runs)
    body += [
        "<h2>Accuracy quantiles per mechanism</h2>",
        table(
            ["utility", "ε", "mechanism", "mean", "p10", "p25", "median", "p75", "p90", "> 0.5"],
            _quantile_rows(runs),
            left=3,
        ),
        "<h2>Permute-and-flip vs the exponential mechanism</h2>",
        "<p>Permute-and-flip uses coins exp(ε(u − u*)/(2Δ∞)) (McKenna &amp; Sheldon); it is "
        "never worse than the exponential mechanism with the same exponent ε/(2Δ∞) "
        "(“EM at ε/(2Δ∞)”). The thesis's A_E uses ε/S with S the ℓ1 sensitivity, valid because "
        "these utilities are monotone, so it can beat both.</p>",
        _pf_table(runs),
        "<h2>The thesis's findings beside ours</h2>",
        table(
            ["claim", "thesis", "ours (this graph)"],
            [
                [
                    esc(f["claim"]),
                    esc(f["thesis"]),
                    pct(f["ours"]) if f["series"] != "laplace-exponential" else fmt(f["ours"]),
                ]
                for f in result["findings"]
            ],
            raw=True,
        ),
    ]
    return page(
        "Private social recommendations — Korolova thesis §5.5",
        f"{esc(g.get('file', 'graph'))}: {result['nodes']:,} nodes, {result['edges']:,} edges",
        body,
    )


def load_graph(path: str | os.PathLike[str], universe: NodeUniverse | None = None) -> Graph:
    """The graph of ``path`` (undirected), on the public node ``universe`` when given (isolated
    nodes included: they are candidates of every target)."""
    return read_edge_list(path, undirected=True, universe=universe)
