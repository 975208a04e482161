"""``searchveil social recommend | accuracy | reproduce``: private social recommendations
(Korolova 2012 thesis, chapter 5)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from searchveil.cli._common import (
    PRIVATE,
    HtmlReportOpt,
    JsonOpt,
    ProvenanceOpt,
    ReplaceOpt,
    SeedOpt,
    add_commands,
    check_private_files,
    emit,
    kv_table,
    ledger_beside,
    number_list,
    out_console,
    private_block,
    progress,
)
from searchveil.cli.options import Output, command, option_group
from searchveil.errors import InvalidParameterError
from searchveil.io.graphs import (
    NodeUniverse,
    node_universe_of_graph_file,
    node_universe_range,
    read_node_list,
)
from searchveil.io.ledger import (
    build_provenance,
    check_ledger_file,
    provenance_path,
    write_ledger_file,
)
from searchveil.io.paths import input_list
from searchveil.report.html import write_report
from searchveil.rng import make_rng
from searchveil.social.accuracy import corollary1
from searchveil.social.experiments import (
    ExperimentConfig,
    experiment_ledger,
    load_graph,
    public_result,
    run_experiments,
    social_report,
)
from searchveil.social.recommend import recommendation_cost, release_recommendations
from searchveil.social.utility import utility_from_name

GraphOpt = Annotated[Path, typer.Option("--graph", help="SNAP edge list (read as undirected)")]
EpsOpt = Annotated[float, typer.Option("--epsilon", help="privacy parameter ε (required)")]
NodeListOpt = Annotated[
    Path | None,
    typer.Option(
        "--node-list",
        help="PUBLIC node universe: a file with one node id per line (isolated nodes are "
        "candidates too)",
    ),
]
NodesOpt = Annotated[int | None, typer.Option("--nodes", help="PUBLIC node universe: ids 0..N-1")]
PublicNodeSetOpt = Annotated[
    bool,
    typer.Option(
        "--public-node-set",
        help="declare that the node ids occurring in --graph are public and use them as the "
        "universe (only if that set really is public): an edge to a node that occurs in no "
        "other edge is then visible with certainty, since the node is in the universe only "
        "because of that edge",
    ),
]


@option_group()
@dataclass(frozen=True)
class Universe:
    """The public node universe: exactly one of ``--node-list``, ``--nodes`` or
    ``--public-node-set``."""

    node_list: NodeListOpt = None
    nodes: NodesOpt = None
    public_node_set: PublicNodeSetOpt = False

    def of(self, graph: Path) -> NodeUniverse:
        """The universe of ``graph``'s recommendations: the node set is the output domain and
        must be public."""
        given = sum([self.node_list is not None, self.nodes is not None, self.public_node_set])
        if given != 1:
            raise InvalidParameterError(
                "node universe",
                "none" if not given else "several",
                "exactly one of --node-list FILE, --nodes N or --public-node-set: the node set "
                "is the output domain and must be public (it is never taken from the private "
                "edges unless you declare them public)",
            )
        if self.node_list is not None:
            return read_node_list(self.node_list)
        if self.nodes is not None:
            return node_universe_range(self.nodes)
        return node_universe_of_graph_file(graph)


def _human_recommend(r: dict[str, Any]) -> None:
    t = kv_table(f"social recommend ({r['mechanism']}) → {r['out']}")
    g = r["private"]["graph"]
    t.add_row(
        "graph" + PRIVATE,
        f"{g['nodes']:,} nodes, {g['edges']:,} edges, max degree {g['max_degree']:,}",
    )
    t.add_row("public node universe", f"{r['universe']['nodes']:,} nodes")
    t.add_row("utility", r["utility"]["utility"])
    t.add_row("ε per target (edges not incident to it)", f"{r['epsilon_per_target']:.6g}")
    t.add_row(
        "ε for an edge incident to no target (all recommendations)",
        f"{r['epsilon_edges_not_incident_to_any_target']:.6g}",
    )
    t.add_row("edges incident to a target", "no guarantee to whoever sees its recommendation")
    t.add_row("targets / recommended", f"{r['targets']:,} / {r['recommended']:,}")
    t.add_row("seconds", f"{r['seconds']:.2f}")
    t.add_row("seeded (not for release)", str(r["seeded"]))
    t.add_row("private provenance (do not publish)", r["provenance"])
    out_console.print(t)


def _human_reproduce(r: dict[str, Any]) -> None:
    g = r["private"]
    out_console.print(
        f"{r['graph'].get('file', 'graph')}: {g['nodes']:,} nodes, {g['edges']:,} edges, "
        f"max degree {g['max_degree']:,} (private); {r['targets_sampled']:,} targets"
    )
    t = Table(title="mean accuracy per mechanism")
    for h in ("utility", "ε", "A_E", "A_L", "P&F", "A_S", "bound", "bound > 0.5"):
        t.add_column(h, justify="right")
    for run_ in r["runs"]:
        s = run_["summary"]
        t.add_row(
            run_["utility"], f"{run_['epsilon']:g}",
            *[f"{s[k]['mean']:.3f}" for k in
              ("exponential", "laplace", "permute_and_flip", "smoothing", "bound")],
            f"{s['bound']['frac_gt_0.5']:.1%}",
        )  # fmt: skip
    out_console.print(t)
    f = Table(title="thesis findings vs this graph")
    for h in ("claim", "thesis", "ours"):
        f.add_column(h)
    for x in r["findings"]:
        ours = f"{x['ours']:.1%}" if x["series"] != "laplace-exponential" else f"{x['ours']:.4f}"
        f.add_row(x["claim"], x["thesis"], ours)
    out_console.print(f)
    if r.get("report"):
        out_console.print(f"report: {r['report']}")
    out_console.print(f"ledger: {r['ledger_path']}")


@command(omit=("output_format",))
def recommend_cmd(
    graph: GraphOpt,
    epsilon: EpsOpt,
    mechanism: Annotated[
        str,
        typer.Option("--mechanism", help="exponential | laplace | permute_and_flip | smoothing"),
    ],
    *,
    utility: Annotated[
        str, typer.Option("--utility", help="common_neighbours | weighted_paths")
    ] = "common_neighbours",
    gamma: Annotated[
        str | None, typer.Option("--gamma", help="weighted paths: γ, e.g. 0.005")
    ] = None,
    degree_bound: Annotated[
        int | None,
        typer.Option("--degree-bound", help="weighted paths: public maximum degree D"),
    ] = None,
    target: Annotated[
        list[int] | None, typer.Option("--target", help="target node id (repeatable)")
    ] = None,
    all_targets: Annotated[
        bool,
        typer.Option("--all-targets", help="one recommendation for every node of the universe"),
    ] = False,
    universe: Universe,
    out: Output,
    json_out: JsonOpt = False,
) -> None:
    """Release one ε-DP recommendation per target over a PUBLIC node universe.

    ε protects the edges not incident to the target. Writes recommendations.tsv +
    ledger.json, and the private provenance record beside them."""
    if not target and not all_targets:
        raise InvalidParameterError("target", None, "--target ID (repeatable) or --all-targets")
    if target and all_targets:
        raise InvalidParameterError("target", target, "either --target or --all-targets")
    util = utility_from_name(utility, gamma=gamma, degree_bound=degree_bound)
    out.check(input_list(graph=graph, node_list=universe.node_list))
    nodes = universe.of(graph)
    targets = None if all_targets else target
    cost = recommendation_cost(universe=nodes, utility=util, mechanism_name=mechanism,
                               epsilon=epsilon, targets=targets)  # fmt: skip
    with out.charged(cost, "social recommend") as ch, progress(not json_out) as step:
        done = step("recommending")
        res = release_recommendations(
            graph, out.out, universe=nodes, utility=util, mechanism_name=mechanism,
            epsilon=epsilon, targets=targets,
            rng=out.rng(), overwrite=out.overwrite, provenance=out.provenance,
        )  # fmt: skip
        ch.record_written(out.out)
        done()
    res["private"] = private_block(graph=res.pop("graph"))
    res["budget"] = out.budget_result(ch)
    emit(res, json_out, _human_recommend)


@command
def accuracy_cmd(
    nodes: Annotated[float, typer.Option("--nodes", help="n: number of nodes")],
    c: Annotated[float, typer.Option("--c", help="c in (0, 1]")],
    k: Annotated[float, typer.Option("--k", help="nodes with utility > (1−c)·u_max")],
    t: Annotated[float, typer.Option("--t", help="edge changes to make a low node the best")],
    epsilon: EpsOpt,
    json_out: JsonOpt = False,
) -> None:
    """Corollary 1: the best accuracy any monotone ε-DP recommender can guarantee."""
    bound = corollary1(n=nodes, c=c, k=k, t=t, epsilon=epsilon)
    res = {
        "formula": "1 - c(n-k)/(n-k+(k+1)e^(eps t))  (Korolova thesis, Corollary 1)",
        "n": nodes, "c": c, "k": k, "t": t, "epsilon": epsilon,
        "accuracy_upper_bound": bound,
        "accuracy_upper_bound_2dp": f"{bound:.2f}",
    }  # fmt: skip

    def human(r: dict[str, Any]) -> None:
        out_console.print(
            f"accuracy ≤ {r['accuracy_upper_bound_2dp']} "
            f"({r['accuracy_upper_bound']:.6f}) for n={nodes:g}, c={c:g}, k={k:g}, t={t:g}, "
            f"ε={epsilon:g}"
        )

    emit(res, json_out, human)


@command
def reproduce_cmd(
    graph: GraphOpt,
    report: HtmlReportOpt = None,
    ledger: Annotated[
        Path | None,
        typer.Option("--ledger", help="ledger JSON (default: <report>.ledger.json)"),
    ] = None,
    epsilons: Annotated[str, typer.Option("--epsilons", help="comma list")] = "0.5,1,3",
    gammas: Annotated[str, typer.Option("--gammas", help="comma list")] = "0.05,0.005,0.0005",
    fraction: Annotated[
        float, typer.Option("--target-fraction", help="share of nodes used as targets")
    ] = 0.1,
    per_target: Annotated[
        bool, typer.Option("--per-target", help="include per-target accuracies in --json")
    ] = False,
    *,
    universe: Universe,
    seed: SeedOpt = None,
    provenance: ProvenanceOpt = None,
    overwrite: ReplaceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """The thesis's §5.5 experiments on a graph (accuracy CDFs, bound, findings)."""
    eps = tuple(number_list("epsilons", epsilons, float) or ())
    gam = tuple(x.strip() for x in gammas.split(",") if x.strip())
    cfg = ExperimentConfig(epsilons=eps, gammas=gam, target_fraction=fraction)
    ledger_path = ledger_beside(report, ledger)
    if ledger_path is None:
        raise InvalidParameterError("ledger", None, "--report or --ledger PATH")
    prov_path = provenance_path(ledger_path, provenance, option="ledger")
    inputs = input_list(graph=graph, node_list=universe.node_list)
    # the report and the provenance record are private, the ledger public: none may land
    # inside a release directory or on an input (issue 30), nor replace a file searchveil
    # did not write — the record only that of the ledger it replaces (issue 39)
    check_private_files({"report": report}, inputs, overwrite=overwrite)
    check_ledger_file(ledger_path, prov_path, overwrite=overwrite, inputs=inputs)
    nodes = universe.of(graph)
    rng = make_rng(seed)
    with progress(not json_out) as step:
        done = step(f"reading {graph.name}")
        g = load_graph(graph, nodes)
        done()
        res = run_experiments(g, rng, cfg, step=step)
    led = experiment_ledger(g, rng, cfg, nodes)
    prov = build_provenance(
        inputs=[{**g.describe(), "role": "graph", "path": str(graph)}],
        figures={"results_summary": public_result(res)["runs"]},
    )
    html = social_report(res) if report else None
    write_ledger_file(ledger_path, led, prov_path, prov, overwrite=overwrite, inputs=inputs)
    if html is not None and report is not None:
        write_report(report, html, inputs=inputs, overwrite=overwrite)
    out = public_result(res, per_target=per_target)
    out["private"] = private_block(**{k: out.pop(k) for k in ("nodes", "edges", "max_degree")})
    out["report"] = str(report) if report else None
    out["ledger_path"] = str(ledger_path)
    out["provenance"] = str(prov_path)
    out["seeded"] = bool(led.get("seeded"))
    emit(out, json_out, _human_reproduce)


def register(app: typer.Typer) -> None:
    commands = {"recommend": recommend_cmd, "accuracy": accuracy_cmd, "reproduce": reproduce_cmd}
    add_commands(app, "social", commands)
