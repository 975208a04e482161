"""``searchveil evaluate``, ``searchveil compare`` and ``searchveil reproduce``: utility of
releases, as an HTML report (self-contained) and JSON with the same numbers.

All three read the original (private) log and are for the data holder; the reports say so.
Nothing is written unless every step succeeded (reports are written atomically at the end).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from searchveil.cli._common import (
    HTML,
    READER_DEFAULT,
    InputArg,
    JsonOpt,
    ReplaceOpt,
    add_commands,
    check_private_files,
    emit,
    err_console,
    guarantee_text,
    out_console,
    private_block,
    progress,
)
from searchveil.cli.options import command, option_group
from searchveil.errors import InvalidParameterError
from searchveil.evaluate import evaluate_loaded, load_release, log_as_release
from searchveil.evaluate.caching import PostingProxy
from searchveil.evaluate.compare import compare_settings, default_settings, parse_setting
from searchveil.evaluate.fidelity import FIGURES
from searchveil.evaluate.keywords import parse_seed_spec
from searchveil.evaluate.reproduce import EXPERIMENTS, run_experiments
from searchveil.io.ledger import (
    LEDGER_NAME,
    differentially_private,
    provenance_path,
    read_provenance,
    repair_provenance,
)
from searchveil.io.paths import input_list
from searchveil.io.readers import ReaderOptions, read_log
from searchveil.mechanisms.budget_file import DatasetBudget
from searchveil.report.comparison import comparison_report
from searchveil.report.evaluation import evaluation_report
from searchveil.report.html import write_report
from searchveil.report.reproduction import reproduction_report
from searchveil.rng import make_rng
from searchveil.validate import check_int, check_positive, check_probability, parse_choice

ReportOpt = Annotated[
    Path | None, typer.Option("--report", help="write a self-contained HTML report here")
]
SeedsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--seeds",
        help="keyword-generation seed set NAME=domain1,domain2 (repeatable; default: shoes, "
        "colleges, suicide)",
    ),
]
ProxyOpt = Annotated[
    str, typer.Option("--posting-proxy", help="posting-list size proxy: clicks | zipf")
]
SubstQOpt = Annotated[
    int, typer.Option("--substitution-queries", help="evaluate substitutions of the top-N queries")
]


@option_group()
@dataclass(frozen=True)
class Metrics:
    """How the utility metrics are computed (``evaluate`` and ``compare``): the keyword
    generation seed sets, the posting-list size proxy, the substitution queries."""

    seeds: SeedsOpt = None
    posting_proxy: ProxyOpt = "clicks"
    substitution_queries: SubstQOpt = 1000

    def kwargs(self) -> dict[str, Any]:
        """The checked keyword arguments of the metrics (``seeds``, ``posting_proxy``,
        ``substitution_queries``)."""
        seeds = dict(parse_seed_spec(s) for s in self.seeds) if self.seeds else None
        proxy = parse_choice("posting-proxy", self.posting_proxy, PostingProxy)
        check_int("substitution-queries", self.substitution_queries, minimum=1)
        return {
            "seeds": seeds,
            "posting_proxy": proxy,
            "substitution_queries": self.substitution_queries,
        }


def _human_eval(r: dict[str, Any]) -> None:
    rel = r["release"]
    dp = differentially_private(rel)
    figures = f", ε={rel.get('epsilon')}, δ={rel.get('delta')}" if dp else ""
    out_console.print(f"[bold]{rel['mechanism']}[/] ({guarantee_text(rel)}{figures})")
    t = Table(title="released items")
    for c in ("items", "distinct", "% distinct", "volume", "% volume", "avg count diff"):
        t.add_column(c, justify="right")
    for kind, d in (r.get("distribution") or {}).items():
        t.add_row(
            kind,
            f"{d['released_distinct']:,}",
            f"{100 * (d['share_distinct'] or 0):.2f}%",
            f"{d['released_total']:,}",
            f"{100 * (d['share_volume'] or 0):.2f}%",
            f"{d['avg_count_difference'] or 0:.3f}",
        )
    out_console.print(t)
    cache: dict[str, Any] = r.get("caching") or {}
    for b in cache.get("budgets") or []:
        out_console.print(
            f"caching budget {b['budget_fraction']:.0%}: hit prob. release "
            f"{b['hit_probability_release']:.3f} vs original {b['hit_probability_original']:.3f}"
        )
    s = r.get("substitution") or {}
    for b in s.get("by_j") or []:
        out_console.print(
            f"substitution top-{b['j']}: coverage {b['coverage']}, precision {b['precision']}, "
            f"NDCG {b['ndcg']}"
        )
    fid = r.get("fidelity") or {}
    if fid.get("applicable"):
        for key in FIGURES:
            f = fid[key]
            v = f"{f['value']:.4f}" if f.get("value") is not None else f["status"]
            out_console.print(f"fidelity {key.replace('_', ' ')} ({f['distance']}): {v}")
    if r.get("report"):
        out_console.print(f"report: {r['report']}")


def _read(input: Path, kw: dict[str, Any]) -> Any:

    return read_log(input, **kw)


def release_provenance(release_dir: Path, explicit: Path | None) -> dict[str, Any] | None:
    """The release's private provenance record (``--provenance FILE``, else
    ``<release>.private.json`` beside it); ``None`` when there is none and none was asked for
    (a release received from elsewhere comes without one: it is evaluated all the same). A
    record that is not this release's (its ledger digest names another ledger) is refused,
    never used (issue 39)."""
    path = provenance_path(release_dir, explicit, option="release")
    # a log file inside a release directory is that release's: its record names that ledger
    owner = release_dir
    if release_dir.is_file() and (release_dir.parent / LEDGER_NAME).is_file():
        owner = release_dir.parent
    repair_provenance(owner, path)  # a record a killed run staged but did not put in place
    if explicit is None and not os.path.lexists(path):
        return None
    return read_provenance(owner, path)


def ledger_reader_options(
    release_dir: Path, given: ReaderOptions, provenance: dict[str, Any] | None = None
) -> ReaderOptions:
    """The reader options to read a release's original with: those given on the command line,
    or (when none is given) those recorded in the input record of the release's private
    provenance record, so the original is read with the same mapping as the release was."""
    if given != ReaderOptions():
        return given
    if provenance is None:
        provenance = release_provenance(release_dir, None)
    inputs = (provenance or {}).get("inputs") or []
    first = inputs[0] if inputs and isinstance(inputs[0], dict) else {}
    if isinstance(first.get("reader"), dict):
        return ReaderOptions.from_dict(first["reader"])
    if first.get("queries_normalized") is False:
        return ReaderOptions(normalize=False)
    return given


def _with_provenance(result: dict[str, Any], prov: dict[str, Any] | None, path: Path) -> None:
    """Private figures of the release from its provenance record (the single-user exposure of
    its report), and whether the original given is the input the release was made from."""
    if prov is None:
        result["provenance"] = {"path": None, "note": f"no provenance record at {path}"}
        return
    rep = prov.get("report") or {}
    if rep.get("single_user"):
        result["release"]["single_user"] = rep["single_user"]
    inputs = prov.get("inputs") or [{}]
    sha = (inputs[0] or {}).get("sha256")
    fp = (inputs[0] or {}).get("fingerprint", "full")
    orig = (result.get("original") or {}).get("sha256")
    same = None if not sha or not orig or fp != "full" else sha == orig
    result["provenance"] = {"path": str(path), "original_matches_input": same}
    if same is False:
        err_console.print(
            "[bold yellow]warning[/]: the original given is not the input this release was "
            f"made from (SHA-256 differs from the provenance record {path})",
            highlight=False,
        )


@command
def evaluate(
    original: InputArg,
    release_dir: Annotated[
        Path,
        typer.Argument(
            help="release directory (with ledger.json), or a log file such as synth output "
            "(evaluated as a same-schema log without a guarantee, read in the AOL layout)"
        ),
    ],
    report: ReportOpt = None,
    *,
    metrics: Metrics,
    provenance: Annotated[
        Path | None,
        typer.Option(
            "--provenance",
            help="the release's private provenance record (default: RELEASE.private.json "
            "beside it); its reader options and private figures are used",
        ),
    ] = None,
    budget: Annotated[
        Path | None,
        typer.Option(
            "--budget",
            help="the dataset's budget file that charged the release: the report shows its "
            "charge and what the dataset's releases spent and left",
        ),
    ] = None,
    overwrite: ReplaceOpt = False,
    reader: ReaderOptions = READER_DEFAULT,
    json_out: JsonOpt = False,
) -> None:
    """Utility of a release against its original log (for the data holder).

    Distribution statistics, index caching, query substitution, keyword generation, "fear of"
    ranking (and, for a same-schema log, the UMP metrics and its fidelity: hour of day, click
    rank, session lengths, query-only rows, substitution MAP). Reads the private log and the
    release's private provenance record: for the data holder."""
    inputs = input_list(original=original, release=release_dir, provenance=provenance)
    check_private_files({"report": report}, inputs, suffixes=HTML, overwrite=overwrite)
    metric_kw = metrics.kwargs()
    prov = release_provenance(release_dir, provenance)
    kw = ledger_reader_options(release_dir, reader, prov).kwargs()
    spent = None if budget is None else DatasetBudget.open(budget).release_budget(release_dir)
    with progress(not json_out) as step:
        done = step("reading the release")
        rel = (
            log_as_release(_read(release_dir, {}))
            if release_dir.is_file()
            else (load_release(release_dir))
        )
        done()
        done = step(f"reading {original.name}")
        log = _read(original, kw)
        done()
        done = step("computing metrics")
        result = evaluate_loaded(log, rel, **metric_kw)
        _with_provenance(result, prov, provenance_path(release_dir, provenance))
        result["private"] = private_block(scope="every figure: computed from the private log")
        if spent is not None:
            result["budget"] = spent
        done()
        if report is not None:
            done = step("writing the report")
            write_report(report, evaluation_report(result), inputs=inputs, overwrite=overwrite)
            result["report"] = str(report)
            done()
    emit(result, json_out, _human_eval)


CompareEpsilonOpt = Annotated[
    float | None, typer.Option("--epsilon", help="total ε of every DP setting (required)")
]
CompareDeltaOpt = Annotated[
    float | None, typer.Option("--delta", help="total δ of every DP setting (required)")
]
CompareMechanismsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--mechanisms",
        help="setting MECH[:key=value,...] (repeatable; korolova, zealous, kanon, "
        "selection); default: korolova d=1,5,20; zealous queries m=1,4, clicks/pairs m=1 "
        "(with --max-users); selection gaussian d=20 and probe-reweight-2r; kanon k=10",
    ),
]
CompareMaxUsersOpt = Annotated[
    int | None,
    typer.Option("--max-users", help="public upper bound U on users (ZEALOUS Thm 3)"),
]
CompareSeedOpt = Annotated[
    int | None,
    typer.Option("--seed", help="seed for a reproducible comparison (default: secure)"),
]


@command
def compare(
    input: InputArg,
    epsilon: CompareEpsilonOpt = None,
    delta: CompareDeltaOpt = None,
    mechanisms: CompareMechanismsOpt = None,
    max_users: CompareMaxUsersOpt = None,
    report: ReportOpt = None,
    seed: CompareSeedOpt = None,
    overwrite: ReplaceOpt = False,
    *,
    metrics: Metrics,
    reader: ReaderOptions = READER_DEFAULT,
    json_out: JsonOpt = False,
) -> None:
    """Several mechanisms/settings at the same (ε, δ) on one input, side by side.

    READS THE PRIVATE DATA: for the data holder only; the report is not for publication, and
    nothing is released."""
    if epsilon is None:
        raise InvalidParameterError("epsilon", None, "a number > 0 (no default ε)")
    if delta is None:
        raise InvalidParameterError("delta", None, "a number in (0, 1)")
    eps = check_positive("epsilon", epsilon)
    dl = check_probability("delta", delta)
    if max_users is not None:
        check_int("max-users", max_users, minimum=1)
    metric_kw = metrics.kwargs()
    check_private_files(
        {"report": report}, input_list(input=input), suffixes=HTML, overwrite=overwrite
    )
    settings = (
        [parse_setting(m) for m in mechanisms]
        if mechanisms
        else default_settings(max_users=max_users)
    )
    kw = reader.kwargs()
    with progress(not json_out) as step:
        done = step(f"reading {input.name}")
        log = _read(input, kw)
        done()
        runs, failures = compare_settings(
            log,
            settings,
            epsilon=eps,
            delta=dl,
            rng=make_rng(seed),
            max_users=max_users,
            on_step=lambda label: step(f"running {label}"),
            **metric_kw,
        )
        result: dict[str, Any] = {
            "schema": "searchveil.compare/1",
            "for_publication": False,
            "private": private_block(scope="every figure: computed from the private log"),
            "input": log.ledger_input(),
            "epsilon": eps,
            "delta": dl,
            "seeded": seed is not None,
            "settings": [{"label": lab, **res} for lab, res in runs],
            "failed": [{"label": lab, "reason": why} for lab, why in failures],
        }
        if report is not None:
            done = step("writing the report")
            text = comparison_report(
                runs, input_info=log.ledger_input(), epsilon=eps, delta=dl,
                failures=failures,
            )  # fmt: skip
            write_report(report, text, inputs=input_list(input=input), overwrite=overwrite)
            result["report"] = str(report)
            done()
    emit(result, json_out, _human_compare)


@command
def reproduce(
    ids: Annotated[
        list[str] | None,
        typer.Argument(help="experiment ids (default: all); see --list"),
    ] = None,
    report: ReportOpt = None,
    log: Annotated[
        Path | None,
        typer.Option("--log", help="AOL log for the trend experiments (default: shared)"),
    ] = None,
    list_ids: Annotated[bool, typer.Option("--list", help="list experiment ids")] = False,
    overwrite: ReplaceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Regenerate the papers' tables and trends, each beside the printed values.

    The formula tables exactly; the experiment trends on the shared AOL data."""
    if list_ids:
        res = {"experiments": {k: v[0] for k, v in EXPERIMENTS.items()}}
        emit(res, json_out, _human_list)
        return
    for i in ids or []:
        if i not in EXPERIMENTS:
            raise InvalidParameterError("id", i, "one of " + ", ".join(EXPERIMENTS))
    check_private_files({"report": report}, input_list(log=log), suffixes=HTML,
                        overwrite=overwrite)  # fmt: skip
    if log is not None and not log.exists():
        raise InvalidParameterError("log", str(log), "an existing log file")
    with progress(not json_out) as step:
        exps = run_experiments(ids or None, log_path=log, step=step)
        result: dict[str, Any] = {"schema": "searchveil.reproduce/1", "experiments": exps}
        if report is not None:
            done = step("writing the report")
            write_report(report, reproduction_report(exps), overwrite=overwrite)
            result["report"] = str(report)
            done()
    emit(result, json_out, _human_reproduce)


def register(app: typer.Typer) -> None:
    add_commands(app, None, {"evaluate": evaluate, "compare": compare, "reproduce": reproduce})


def _human_compare(r: dict[str, Any]) -> None:
    out_console.print(
        "[bold red]Reads the private data: for the data holder only, not for publication.[/]"
    )
    t = Table(title=f"compare at ε={r['epsilon']}, δ={r['delta']}")
    t.add_column("setting")
    t.add_column("items")
    t.add_column("distinct", justify="right")
    t.add_column("% volume", justify="right")
    for s in r["settings"]:
        for kind, d in (s.get("distribution") or {}).items():
            t.add_row(
                s["label"],
                kind,
                f"{d['released_distinct']:,}",
                f"{100 * (d['share_volume'] or 0):.2f}%",
            )
    out_console.print(t)
    for f in r["failed"]:
        out_console.print(f"[yellow]{f['label']}[/]: {f['reason']}")
    if r.get("report"):
        out_console.print(f"report: {r['report']}")


def _human_list(r: dict[str, Any]) -> None:
    for k, t in r["experiments"].items():
        out_console.print(f"{k}: {t}")


def _human_reproduce(r: dict[str, Any]) -> None:
    for e in r["experiments"]:
        out_console.print(f"[bold]{e['id']}[/] ({e['status']}): {e['title']}")
        if e.get("notes"):
            out_console.print(f"  {e['notes']}")
        for what, why in e.get("failed") or []:
            out_console.print(f"  [yellow]failed[/] {what}: {why}")
    if r.get("report"):
        out_console.print(f"report: {r['report']}")
