"""``searchveil attack``: attack simulations (Korolova thesis ch. 2 and 6; not DP releases).

* ``searchveil attack lookahead`` — one bribing strategy at one lookahead on a graph file
  (SNAP edge list, read as undirected) or on a generated configuration-model power-law graph;
  prints how many bribes reach each coverage level.
* ``searchveil attack ads`` — chapter 2's ad-targeting inference attacks against a simulated
  platform under four policies (:mod:`searchveil.cli.attack_ads`).
* ``searchveil attack reproduce`` — chapter 6's experiments (Fig 6.1/6.3-style curves,
  Tables 6.1 and 6.2 beside the thesis's values, the same curves on real graphs) and chapter 2's
  ads attack table for the four policies, in one HTML report. ``reproduce`` is an experiment:
  policy (d)'s advertiser budgets are the experiment's sweep (``--ads-epsilon``, by default
  0.5,1,2,4,8 as in docs/attacks-ads.md); ``attack ads`` alone has no default ε.

Each run can write a small JSON record (parameters, graph fingerprints, seed; marked as not a
DP release): next to ``--report`` as ``<report>.run.json``, or as ``--out``. Nothing is
written unless the whole run succeeded (atomic writes at the end).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from searchveil.attacks.ads import ads_sections, run_ads_experiment
from searchveil.attacks.lookahead.attack import STRATEGY_NAMES, normalize_strategy, run_attack
from searchveil.attacks.lookahead.experiments import (
    COVERAGE_LEVELS,
    MAX_NODES,
    TABLE_6_1_LEVELS,
    describe_graph,
    run_lookahead_experiments,
)
from searchveil.attacks.lookahead.graphs import power_law_graph
from searchveil.attacks.lookahead.report import lookahead_sections
from searchveil.attacks.record import NOT_A_RELEASE, run_record
from searchveil.cli._common import (
    HTML,
    JsonOpt,
    ReplaceOpt,
    SeedOpt,
    add_commands,
    check_private_files,
    emit,
    err_console,
    out_console,
)
from searchveil.cli.attack_ads import ads, human_ads, parse_epsilons
from searchveil.cli.options import command
from searchveil.errors import InvalidParameterError
from searchveil.io.graphs import read_edge_list
from searchveil.io.ledger import write_private_json
from searchveil.io.paths import RUN_RECORD, check_named, input_list
from searchveil.report.html import page, write_report
from searchveil.rng import RandomSource, make_rng
from searchveil.validate import check_int, check_probability

NodesOpt = Annotated[
    int | None, typer.Option("--nodes", help="generate a configuration-model graph of N nodes")
]
AlphaOpt = Annotated[float, typer.Option("--alpha", help="power-law exponent α of the degrees")]
DminOpt = Annotated[int, typer.Option("--dmin", help="minimum degree d_min")]
OutOpt = Annotated[
    Path | None, typer.Option("--out", help="write the run record (JSON) to this file")
]


def _say(quiet: bool) -> Any:
    def say(msg: str) -> None:
        if not quiet:
            err_console.print(f"[dim]{msg}[/]", highlight=False)

    return say


def _human_lookahead(r: dict[str, Any]) -> None:
    g = r["graph"]
    out_console.print(
        f"[bold]{r['strategy_name']}[/], lookahead {r['lookahead']} on "
        f"{g.get('file', 'a generated graph')} ({g['nodes']:,} nodes, {g['edges']:,} edges): "
        f"{r['bribes']:,} bribes reach coverage {r['final_coverage']:.4f} "
        f"(target {r['target_coverage']}) in {r['seconds']:.2f} s"
    )
    t = Table(title="bribes needed")
    for c in ("coverage", "bribes k", "fraction f"):
        t.add_column(c, justify="right")
    for row in r["curve"]:
        k = row["bribes"]
        t.add_row(
            f"{row['coverage']:.2f}",
            "—" if k is None else f"{k:,}",
            "—" if k is None else f"{row['fraction']:.5f}",
        )
    out_console.print(t)
    out_console.print(f"[dim]{NOT_A_RELEASE}[/]")


def _human_reproduce(r: dict[str, Any]) -> None:
    n61 = r["table_6_1"][0]["nodes"] if r["table_6_1"] else r["parameters"]["n"]
    t = Table(title=f"Table 6.1: Highest, factors of improvement with lookahead (n = {n61:,})")
    for c in ("1 − ε", "f1/f2 ours", "f1/f2 thesis", "f2/f3 ours", "f2/f3 thesis"):
        t.add_column(c, justify="right")

    def f(x: Any, d: int = 1) -> str:
        return "—" if x is None else f"{x:.{d}f}"

    for row in r["table_6_1"]:
        t.add_row(
            f"{row['coverage']:.2f}",
            f(row["f1_f2"]),
            f(row["thesis_f1_f2"]),
            f(row["f2_f3"]),
            f(row["thesis_f2_f3"]),
        )
    out_console.print(t)
    t2 = Table(title="Table 6.2: formula f_p and simulated f_s at lookahead 1 (thesis in brackets)")
    for c in ("ε", "ε₀", "Random f_p", "Random f_s", "refined", "Highest f_p", "Highest f_s"):
        t2.add_column(c, justify="right")
    for row in r["table_6_2"]:
        th = row.get("thesis") or {}
        t2.add_row(
            f"{row['epsilon']}",
            f"{row['epsilon0']:.3f} ({f(th.get('epsilon0'), 3)})",
            f"{row['random_fp']:.3f} ({f(th.get('random_fp'), 3)})",
            f"{f(row['random_fs'], 3)} ({f(th.get('random_fs'), 3)})",
            f"{row['random_refined']:.3f} ({f(th.get('random_refined'), 3)})",
            f"{row['highest_fp']:.3f} ({f(th.get('highest_fp'), 3)})",
            f"{f(row['highest_fs'], 3)} ({f(th.get('highest_fs'), 3)})",
        )
    out_console.print(t2)
    for name, real in r.get("real", {}).items():
        g = real["graph"]
        t3 = Table(title=f"{name} ({g['nodes']:,} nodes): bribes for coverage 0.9 / 0.99")
        t3.add_column("strategy")
        t3.add_column("lookahead", justify="right")
        t3.add_column("k at 0.9", justify="right")
        t3.add_column("k at 0.99", justify="right")
        for s, by in real["runs"].items():
            for ell, run_ in by.items():
                ks = {round(c["coverage"], 4): c["bribes"] for c in run_["curve"]}
                t3.add_row(STRATEGY_NAMES[s], ell, str(ks.get(0.9)), str(ks.get(0.99)))
        out_console.print(t3)
    for key in ("report", "record"):
        if r.get(key):
            out_console.print(f"{key}: {r[key]}")
    out_console.print(f"[dim]{NOT_A_RELEASE}[/]")


def _parse_real(specs: list[str] | None) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for spec in specs or []:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise InvalidParameterError("real-graph", spec, "NAME=PATH (e.g. wiki-Vote=wiki.txt)")
        p = Path(path.strip())
        if not p.is_file():
            raise InvalidParameterError("real-graph", spec, "an existing edge-list file")
        out[name.strip()] = p
    return out


def _int_list(name: str, spec: str, lo: int, hi: int) -> list[int]:
    vals = []
    for part in spec.split(","):
        part = part.strip()
        if not part.lstrip("-").isdigit():
            raise InvalidParameterError(name, spec, "comma-separated integers, e.g. 1,2,3")
        vals.append(check_int(name, int(part), minimum=lo, maximum=hi))
    return vals


@command
def lookahead_cmd(
    graph: Annotated[
        Path | None,
        typer.Option("--graph", help="SNAP edge list (read as an undirected graph)"),
    ] = None,
    nodes: NodesOpt = None,
    alpha: AlphaOpt = 3.0,
    dmin: DminOpt = 5,
    lookahead: Annotated[
        int | None, typer.Option("--lookahead", help="lookahead ℓ of the interface (required)")
    ] = None,
    strategy: Annotated[
        str | None,
        typer.Option(
            "--strategy", help="benchmark | greedy | highest | random | crawler (required)"
        ),
    ] = None,
    coverage: Annotated[
        float, typer.Option("--coverage", help="stop at this fraction of covered nodes")
    ] = 0.99,
    seed: SeedOpt = None,
    out: OutOpt = None,
    overwrite: ReplaceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Run one bribing strategy (thesis §6.2.3) on a graph up to --coverage."""
    if (graph is None) == (nodes is None):
        raise InvalidParameterError(
            "graph/nodes", "both" if graph else "neither", "exactly one of --graph, --nodes"
        )
    if lookahead is None:
        raise InvalidParameterError("lookahead", None, "an integer >= 0 (required)")
    if strategy is None:
        raise InvalidParameterError("strategy", None, "a strategy name (required)")
    s = normalize_strategy(strategy)
    check_probability("coverage", coverage, open_high=False)
    check_private_files({"out": out}, input_list(graph=graph), suffixes=(".json",),
                        overwrite=overwrite)  # fmt: skip
    rng = make_rng(seed)
    if graph is not None:
        g = read_edge_list(graph, undirected=True)
    else:
        n = check_int("nodes", nodes, minimum=2, maximum=MAX_NODES)
        g = power_law_graph(n, alpha, dmin, rng)
    t0 = time.perf_counter()
    r = run_attack(g, strategy=s, lookahead=lookahead, rng=rng, target_coverage=coverage)
    secs = time.perf_counter() - t0
    levels = sorted({c for c in (*COVERAGE_LEVELS, *TABLE_6_1_LEVELS) if c <= coverage})
    result: dict[str, Any] = {
        **r.summary(),
        "seconds": round(secs, 3),
        "graph": describe_graph(g),
        "curve": r.curve(levels or [coverage]),
        "parameters": {
            "strategy": s,
            "lookahead": lookahead,
            "coverage": coverage,
            "graph": str(graph) if graph else None,
            "nodes": nodes,
            "alpha": alpha if graph is None else None,
            "dmin": dmin if graph is None else None,
        },
        "note": NOT_A_RELEASE,
    }
    if out is not None:
        write_private_json(out, run_record(result, rng, command="lookahead"), option="out",
                           overwrite=overwrite, owned=RUN_RECORD)  # fmt: skip
        result["record"] = str(out)
    emit(result, json_out, _human_lookahead)


ReproReportOpt = Annotated[
    Path | None, typer.Option("--report", help="write the HTML report here (.html)")
]
ReproNodesOpt = Annotated[
    int, typer.Option("--nodes", help="nodes of each synthetic graph (thesis: 100,000)")
]
ReproGraphsOpt = Annotated[
    int, typer.Option("--graphs", help="synthetic graphs to average over (thesis: 10)")
]
ReproStrategiesOpt = Annotated[str, typer.Option("--strategies", help="comma-separated strategies")]
ReproLookaheadsOpt = Annotated[str, typer.Option("--lookaheads", help="comma-separated ℓ")]
ReproTable61NodesOpt = Annotated[
    int,
    typer.Option(
        "--table61-nodes",
        help="nodes of the Table 6.1 graphs (Highest only; 0 = use the --nodes graphs)",
    ),
]
ReproFig62NodesOpt = Annotated[
    str,
    typer.Option(
        "--fig62-nodes",
        help="comma-separated graph sizes for Fig 6.2 (Highest, ℓ = 2, bribes vs n); '' = skip",
    ),
]
ReproRealGraphOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--real-graph",
        help="NAME=PATH of a SNAP edge list to attack too (repeatable; e.g. wiki-Vote, "
        "Facebook in place of the thesis's LiveJournal)",
    ),
]
ReproAdsEpsilonOpt = Annotated[
    str,
    typer.Option(
        "--ads-epsilon",
        help="the experiment's sweep of advertiser budgets ε for the DP policy (d); '' "
        "skips the ads experiment",
    ),
]
ReproAdsPopulationOpt = Annotated[
    int, typer.Option("--ads-population", help="simulated profiles of the ads platform")
]
ReproAdsTargetsOpt = Annotated[
    int, typer.Option("--ads-targets", help="random targets per attack and policy")
]


@command
def reproduce_cmd(
    report: ReproReportOpt = None,
    nodes: ReproNodesOpt = 100_000,
    graphs: ReproGraphsOpt = 1,
    alpha: AlphaOpt = 3.0,
    dmin: DminOpt = 5,
    strategies: ReproStrategiesOpt = "benchmark,greedy,highest,random,crawler",
    lookaheads: ReproLookaheadsOpt = "1,2,3",
    table61_nodes: ReproTable61NodesOpt = 800_000,
    fig62_nodes: ReproFig62NodesOpt = "10000,30000,100000,300000",
    real_graph: ReproRealGraphOpt = None,
    ads_epsilon: ReproAdsEpsilonOpt = "0.5,1,2,4,8",
    ads_population: ReproAdsPopulationOpt = 1_000_000,
    ads_targets: ReproAdsTargetsOpt = 200,
    seed: SeedOpt = None,
    out: OutOpt = None,
    overwrite: ReplaceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Chapter 6's lookahead experiments and chapter 2's ads table, in one report.

    Fig 6.1/6.3-style curves, Tables 6.1 and 6.2 beside the thesis, the same curves on real
    graphs, and chapter 2's ads attack table (policies a-d)."""
    strats = [normalize_strategy(s) for s in strategies.split(",") if s.strip()]
    ells = _int_list("lookaheads", lookaheads, 0, 20)
    real = _parse_real(real_graph)
    graphs_in = [("real-graph", p) for p in real.values()]
    # the run record: --out, else beside --report
    record = (
        check_named(report, "report").with_name(report.stem + ".run.json")
        if out is None and report
        else out
    )
    check_private_files({"report": report}, graphs_in, suffixes=HTML, overwrite=overwrite)
    check_private_files({"out" if out else "report": record}, graphs_in, suffixes=(".json",),
                        overwrite=overwrite, owned=RUN_RECORD)  # fmt: skip
    f62 = _int_list("fig62-nodes", fig62_nodes, 100, MAX_NODES) if fig62_nodes.strip() else []
    ads_eps = parse_epsilons(ads_epsilon) if ads_epsilon.strip() else []
    rng = make_rng(seed)
    result = run_lookahead_experiments(
        rng=rng, n=nodes, alpha=alpha, dmin=dmin, graphs=graphs, strategies=strats,
        lookaheads=ells, real_graphs=real, table_6_1_nodes=table61_nodes or None,
        fig_6_2_nodes=f62, progress=_say(json_out),
    )  # fmt: skip
    ads = None
    if ads_eps:
        ads = run_ads_experiment(
            epsilons=ads_eps, rng=rng, population=ads_population, targets=ads_targets,
            on_step=_say(json_out),
        )  # fmt: skip
    _write_reproduce_outputs(result, ads, rng, report=report, record=record, overwrite=overwrite)
    result["ads"] = ads
    emit(result, json_out, _human_reproduce_all)


def _write_reproduce_outputs(
    result: dict[str, Any],
    ads: dict[str, Any] | None,
    rng: RandomSource,
    *,
    report: Path | None,
    record: Path | None,
    overwrite: bool,
) -> None:
    """The run record and the HTML report, if asked for (under the write rule); their paths
    go into ``result``."""
    if record is not None:
        extra = {"accounting": {"ads_dp_policy_ledgers": ads["ledgers"]}} if ads else None
        rec = run_record(result, rng, command="reproduce", extra=extra)
        write_private_json(record, rec, option="out", overwrite=overwrite, owned=RUN_RECORD)
        result["record"] = str(record)
    if report is not None:
        body_parts = lookahead_sections(result) + (ads_sections(ads) if ads else [])
        write_report(
            report,
            page(
                "searchveil attack simulations",
                "Lookahead link stealing (Korolova thesis ch. 6) and ad-targeting inference "
                "(ch. 2): simulations, not DP releases.",
                body_parts,
            ),
            overwrite=overwrite,
        )
        result["report"] = str(report)


def _human_reproduce_all(r: dict[str, Any]) -> None:
    _human_reproduce(r)
    if r["ads"] is not None:
        human_ads(r["ads"])


def register(app: typer.Typer) -> None:
    commands = {"lookahead": lookahead_cmd, "reproduce": reproduce_cmd, "ads": ads}
    add_commands(app, "attack", commands)
