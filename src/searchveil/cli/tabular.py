"""``searchveil tabular stats|anonymize|reproduce``: generalization-hierarchy releases of a
table (Fouad, Elbassioni & Bertino TKDE 2014; baselines k-anonymity and SafePub)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from searchveil.cli._common import (
    PRIVATE,
    DeltaOpt,
    EpsilonOpt,
    HtmlReportOpt,
    JsonOpt,
    ReplaceOpt,
    SeedOpt,
    add_commands,
    check_private_files,
    emit,
    err_console,
    guarantee_text,
    kv_table,
    out_console,
    private_block,
    progress,
    release_head,
)
from searchveil.cli.options import Output, command
from searchveil.errors import InvalidParameterError
from searchveil.io.paths import input_list
from searchveil.report.html import write_report
from searchveil.rng import RandomSource
from searchveil.tabular.api import (
    ModelParams,
    load,
    model_cost,
    run_model,
    table_stats,
    write_release,
)
from searchveil.tabular.hierarchy import EncodedTable
from searchveil.tabular.lattice import Lattice
from searchveil.tabular.measures import Measures
from searchveil.tabular.recoding import advise
from searchveil.tabular.release import TabularRelease
from searchveil.tabular.reproduce import METHODS, compare_methods, compare_report, reproduce, split

TableArg = Annotated[Path, typer.Argument(help="table: CSV/TSV (';' ok, CRLF ok) or Parquet")]
HierOpt = Annotated[
    Path,
    typer.Option(
        "--hierarchies",
        help="directory of ARX hierarchy CSVs (<attr>.csv or *hierarchy_<attr>.csv)",
    ),
]
QiOpt = Annotated[
    str | None,
    typer.Option(
        "--qi",
        help="comma-separated quasi-identifiers (default: columns "
        "with a hierarchy, except the last column)",
    ),
]

ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        help="dp (DP global recoding, defaults by the advisor) | fouad2014 (the paper's "
        "DP sampler, reproduction) | safepub | kanon | aggregate | threshold (not DP)",
    ),
]
BetaOpt = Annotated[
    float | None,
    typer.Option(
        "--beta",
        help="dp/fouad2014: probability that a record is NOT sampled (paper's β; dp: "
        "default chosen by the advisor)",
    ),
]
Theta0Opt = Annotated[
    float | None,
    typer.Option("--theta0", help="fouad2014: every output row generalizes ≥ θ₀·|D| input records"),
]
Theta1Opt = Annotated[
    float,
    typer.Option("--theta1", help="fouad2014: θ is uniform in (θ₀, θ₁) (paper: θ₁ = 1)"),
]
ScoreOpt = Annotated[
    str,
    typer.Option(
        "--score",
        help="dp: selection score: auto (classification when the table has non-QI "
        "columns, else fouad) | classification | fouad (the paper's utility u)",
    ),
]
SelectionShareOpt = Annotated[
    float, typer.Option("--selection-share", help="dp: share of ε for the selection")
]
MaxRecordsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-records",
        help="dp/safepub: a PUBLIC upper bound on the number of records you declare "
        "(default: a DP count, 2 % of ε for dp, 1 % for safepub)",
    ),
]
TabProvenanceOpt = Annotated[
    Path | None,
    typer.Option(
        "--provenance",
        help="where the PRIVATE provenance record goes (default OUT.private.json)",
    ),
]
LamOpt = Annotated[float, typer.Option("--lambda", help="λ of eq. (2)")]
KappaOpt = Annotated[int, typer.Option("--kappa", help="κ of eq. (2)")]
Phi0Opt = Annotated[
    float | None,
    typer.Option("--phi0", help="risk floor φ₀ (default: smallest positive node weight)"),
]
UtilityOpt = Annotated[str, typer.Option("--utility", help="depth | inverse | log")]
SharpnessOpt = Annotated[
    float,
    typer.Option("--utility-sharpness", help="fouad2014: extra weight on u^κ (no privacy cost)"),
]
COpt = Annotated[float | None, typer.Option("--c", help="threshold: risk bound c")]
KOpt = Annotated[int | None, typer.Option("--k", help="kanon: k")]
MaxSuppressionOpt = Annotated[
    float,
    typer.Option("--max-suppression", help="kanon: fraction of records that may be suppressed"),
]
StepsOpt = Annotated[int, typer.Option("--steps", help="safepub: search steps")]
SideTableOpt = Annotated[
    Path | None,
    typer.Option(
        "--side-table",
        help="PUBLIC side table Θ, independent of the input (default Θ = the input); "
        "a Θ derived from the input voids the DP guarantee",
    ),
]


def _qi(qi: str | None) -> list[str] | None:
    return [c.strip() for c in qi.split(",") if c.strip()] if qi else None


def _kv(title: str, r: dict[str, Any]) -> None:
    t = kv_table(title)
    for k, v in r.items():
        if isinstance(v, float):
            v = f"{v:.6g}"
        t.add_row(str(k), str(v))
    out_console.print(t)


def _human_stats(r: dict[str, Any]) -> None:
    figures = {
        "rows": r["rows"],
        "lattice size": r["lattice_size"],
        "distinct QI tuples": r["distinct_qi_tuples"],
    }
    _kv(f"{r['file']}", figures)
    for q in r["quasi_identifiers"]:
        out_console.print(
            f"  {q['attribute']}: height {q['height']}, "
            f"{q['leaves']} leaves ({q['distinct_in_table']} used)"
        )


@command
def stats(
    table: TableArg, hierarchies: HierOpt, qi: QiOpt = None, json_out: JsonOpt = False
) -> None:
    """Validate a table against its hierarchies; describe the generalization lattice."""
    emit(table_stats(load(table, hierarchies, _qi(qi))), json_out, _human_stats)


def _print_advice(t: Any, params: ModelParams) -> None:
    """The advisor's split of the dp model's budget, on stderr."""
    assert params.epsilon is not None and params.delta is not None
    adv = advise(
        params.epsilon,
        params.delta,
        lattice_size=Lattice(tuple(h.height for h in t.hierarchies)).size,
        beta=params.beta,
        count=params.max_records is None,
        selection_share=params.selection_share,
    )
    err_console.print(
        f"advisor: ε = {adv.eps_count:.3g} (count) + {adv.eps_select:.3g} "
        f"(selection) + {adv.eps_anon:.3g} (sampling); keep p = "
        f"{adv.keep_probability:.3f} (β = {adv.beta:.3f}, {adv.rule}); "
        f"k = {adv.k}; δ = {adv.delta_anon:.3g} + slack",
        highlight=False,
    )


def _anonymize_result(out: Output, led: dict[str, Any], prov: dict[str, Any]) -> dict[str, Any]:
    """The command's summary of a written release."""
    return {
        **release_head(out.out, out.provenance, led),
        "seeded": led["seeded"],
        "parameters": led["parameters"],
        "noisy": led["noisy"],
        "private": private_block(summary=prov["report"], metrics=prov["figures"]["metrics"]),
    }


def _human_anonymize(r: dict[str, Any]) -> None:
    pv = r["private"]
    _kv(
        f"{r['mechanism']} → {r['out']}",
        {
            "guarantee": guarantee_text(r),
            "ε": r["epsilon"],
            "δ": r["delta"],
            "k": r["parameters"].get("k", r["noisy"].get("k")),
            "keep probability": r["parameters"].get(
                "keep_probability", r["parameters"].get("sampling_probability")
            ),
            "level vector": r["noisy"].get("level"),
            **{k2 + ("" if k2 == "released" else PRIVATE): v for k2, v in pv["summary"].items()},
            **{k2 + PRIVATE: v for k2, v in pv["metrics"].items()},
        },
    )
    n_rel = pv["summary"].get("released", 0)
    out_console.print(
        f"released {n_rel:,} of {pv['metrics']['records']:,} records (private) "
        f"({100 * pv['metrics']['released_fraction']:.1f} %); private figures in "
        f"{r['provenance']} (do not publish)"
    )
    if r["seeded"]:
        out_console.print("SEEDED randomness: reproducible experiment, NOT FOR RELEASE")


def _read_and_run(
    step: Callable[[str], Callable[[], None]],
    table: Path,
    hierarchies: Path,
    side_table: Path | None,
    qi: str | None,
    model: str,
    params: ModelParams,
    rng: RandomSource,
    show_advice: bool,
) -> tuple[TabularRelease, Measures, EncodedTable | None]:
    """Read the table (and a side table Θ) and run the model: ``(release, measures, Θ)``."""
    done = step("reading")
    t = load(table, hierarchies, _qi(qi))
    theta = load(side_table, hierarchies, list(t.qi)) if side_table else None
    done()
    done = step(f"model {model}")
    if model == "dp" and params.epsilon is not None and params.delta is not None and show_advice:
        _print_advice(t, params)
    rel, meas = run_model(t, model, params, rng=rng, side_table=theta)
    done()
    return rel, meas, theta


@command(replace={"provenance": TabProvenanceOpt})
def anonymize(
    table: TableArg,
    hierarchies: HierOpt,
    *,
    model: ModelOpt = "dp",
    epsilon: EpsilonOpt = None,
    delta: DeltaOpt = None,
    beta: BetaOpt = None,
    theta0: Theta0Opt = None,
    theta1: Theta1Opt = 1.0,
    score: ScoreOpt = "auto",
    selection_share: SelectionShareOpt = 0.15,
    max_records: MaxRecordsOpt = None,
    lam: LamOpt = 1.0,
    kappa: KappaOpt = 1,
    phi0: Phi0Opt = None,
    utility: UtilityOpt = "depth",
    sharpness: SharpnessOpt = 0.0,
    c: COpt = None,
    k: KOpt = None,
    max_suppression: MaxSuppressionOpt = 0.0,
    steps: StepsOpt = 100,
    side_table: SideTableOpt = None,
    qi: QiOpt = None,
    out: Output,
    json_out: JsonOpt = False,
) -> None:
    """Release TABLE generalized by a model.

    Writes `table` + ledger.json atomically, and the PRIVATE provenance record beside them."""
    out.check(input_list(table=table, hierarchies=hierarchies, side_table=side_table))
    rng = out.rng()
    params = ModelParams(
        epsilon=epsilon, delta=delta, beta=beta, theta0=theta0, theta1=theta1, lam=lam,
        kappa=kappa, phi0=phi0, utility=utility, c=c, k=k, max_suppression=max_suppression,
        steps=steps, utility_sharpness=sharpness, score=score,
        selection_share=selection_share, max_records=max_records,
    )  # fmt: skip
    cost = model_cost(model, params)  # known before the table is read
    what = f"tabular anonymize --model {model}"
    with out.charged(cost, what) as ch, progress(not json_out) as step:
        rel, meas, theta = _read_and_run(
            step, table, hierarchies, side_table, qi, model, params, rng, not json_out
        )
        done = step("writing")
        led, prov = write_release(
            rel, out.out, meas, rng=rng, overwrite=out.overwrite, fmt=out.output_format,
            side_table=theta, provenance=out.provenance,
        )  # fmt: skip
        ch.record_written(out.out)
        done()
    res = _anonymize_result(out, led, prov)
    res["budget"] = out.budget_result(ch)
    emit(res, json_out, _human_anonymize)


def _human_compare(r: dict[str, Any]) -> None:
    tt = Table(title=f"train {r['train']:,} / test {r['test']:,}")
    for c in ("method", "ε", "released", "granularity", "NB", "LR", "s"):
        tt.add_column(c)
    for x in r["rows"]:
        if "error" in x or "skipped" in x:
            continue

        def f(v: Any) -> str:
            return "—" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))

        tt.add_row(x["method"], f(x.get("epsilon")), f(x.get("released_fraction")),
                   f(x.get("granularity_loss")), f(x.get("nb_accuracy")),
                   f(x.get("lr_accuracy")), f(x.get("seconds")))  # fmt: skip
    out_console.print(tt)
    for x in r["rows"]:
        if "error" in x or "skipped" in x:
            out_console.print(
                f"not run: {x['method']} at ε={x['epsilon']}: {x.get('error') or x.get('skipped')}"
            )
    if r.get("report"):
        out_console.print(f"report: {r['report']}")


@command
def compare_cmd(
    table: TableArg,
    hierarchies: HierOpt,
    epsilon: Annotated[
        list[float] | None,
        typer.Option("--epsilon", help="ε (repeat for several; no default)"),
    ] = None,
    delta: DeltaOpt = None,
    test: Annotated[
        Path | None,
        typer.Option("--test", help="held-out table (default: 80/20 split of TABLE)"),
    ] = None,
    methods: Annotated[
        str, typer.Option("--methods", help="comma-separated: " + ",".join(METHODS))
    ] = "dp,safepub,aim,mst",
    report: HtmlReportOpt = None,
    qi: QiOpt = None,
    seed: SeedOpt = 0,
    overwrite: ReplaceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Compare ours, SafePub, the paper's sampler and AIM/MST at the same (ε, δ).

    All methods (AIM, MST; optional extra) run on the same split: released share, granularity
    loss, naive-Bayes and logistic-regression accuracy on held-out records, runtime. An
    experiment on your data: the figures are computed from the exact input (do not publish
    them)."""
    if not epsilon:
        raise InvalidParameterError("epsilon", None, "one or more values (no default)")
    if delta is None:
        raise InvalidParameterError("delta", None, "a value (no default)")
    ms = [m.strip() for m in methods.split(",") if m.strip()]
    inputs = input_list(table=table, hierarchies=hierarchies, test=test)
    check_private_files({"report": report}, inputs, overwrite=overwrite)
    t = load(table, hierarchies, _qi(qi))
    if test is None:
        train, held = split(t, seed or 0)
    else:
        train, held = t, load(test, hierarchies, list(t.qi))
    rows = compare_methods(train, held, epsilons=list(epsilon), delta=delta, methods=ms,
                           seed=seed or 0, hier_dir=Path(hierarchies))  # fmt: skip
    res: dict[str, Any] = {"train": train.n, "test": held.n, "rows": rows}
    if report is not None:
        write_report(report, compare_report(rows, train, held), inputs=inputs,
                     overwrite=overwrite)  # fmt: skip
        res["report"] = str(report)

    emit(res, json_out, _human_compare)


def _human_reproduce(r: dict[str, Any]) -> None:
    out_console.print(f"report: {r.get('report')}")
    for row in r["comparison"]:
        if "error" in row or "skipped" in row:
            continue
        out_console.print(
            f"{row['method']:40s} ε={row.get('epsilon')} released="
            f"{row.get('released_fraction')} NB={row.get('nb_accuracy')} "
            f"LR={row.get('lr_accuracy')}"
        )


@command
def reproduce_cmd(
    data: Annotated[
        Path, typer.Option("--data", help="directory with adult.csv and its hierarchies")
    ] = Path("../shared/data/adult"),
    report: HtmlReportOpt = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="smaller grids (minutes → seconds)")
    ] = False,
    seed: SeedOpt = 0,
    overwrite: ReplaceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Fig. 3 / Fig. 4 of Fouad et al. on ARX's Adult; ours vs SafePub vs AIM/MST."""
    check_private_files({"report": report}, input_list(data=data), overwrite=overwrite)
    with progress(not json_out) as step:
        done = step("experiments")
        res = reproduce(data, report=report, quick=quick, seed=seed or 0, overwrite=overwrite)
        done()

    emit(res, json_out, _human_reproduce)


def register(app: typer.Typer) -> None:
    commands = {
        "stats": stats,
        "anonymize": anonymize,
        "compare": compare_cmd,
        "reproduce": reproduce_cmd,
    }
    add_commands(app, "tabular", commands)
