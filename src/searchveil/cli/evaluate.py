"""``searchveil evaluate``, ``searchveil compare`` and ``searchveil reproduce``: utility of
releases, as an HTML report (self-contained) and JSON with the same numbers.

All three read the original (private) log and are for the data holder; the reports say so.
Nothing is written unless every step succeeded (reports are written atomically at the end).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from searchveil.cli._common import (
    BadRowsOpt,
    DelimOpt,
    EncodingOpt,
    FormatOpt,
    GapOpt,
    InputArg,
    JsonOpt,
    NoNormOpt,
    emit,
    out_console,
    progress,
    reader_kwargs,
    run,
)
from searchveil.errors import InvalidParameterError

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


def _check_report_path(report: Path | None) -> None:
    if report is None:
        return
    if report.exists() and report.is_dir():
        raise InvalidParameterError("report", str(report), "a file path, not a directory")
    if not report.parent.exists():
        raise InvalidParameterError("report", str(report), "a path whose directory exists")
    if report.suffix.lower() not in (".html", ".htm"):
        raise InvalidParameterError("report", str(report), "a file name ending in .html")


def _seeds(specs: list[str] | None) -> dict[str, tuple[str, ...]] | None:
    if not specs:
        return None
    from searchveil.evaluate.keywords import parse_seed_spec

    return dict(parse_seed_spec(s) for s in specs)


def _human_eval(r: dict[str, Any]) -> None:
    rel = r["release"]
    out_console.print(
        f"[bold]{rel['mechanism']}[/] ({rel.get('notion')}, ε={rel.get('epsilon')}, "
        f"δ={rel.get('delta')})"
    )
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
    c = r.get("caching") or {}
    for b in c.get("budgets") or []:
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
    if r.get("report"):
        out_console.print(f"report: {r['report']}")


def _read(input: Path, kw: dict[str, Any]) -> Any:
    from searchveil.io.readers import read_log

    return read_log(input, **kw)


def register(app: typer.Typer) -> None:
    @app.command("evaluate")
    def evaluate(
        original: InputArg,
        release_dir: Annotated[Path, typer.Argument(help="release directory (with ledger.json)")],
        report: ReportOpt = None,
        seeds: SeedsOpt = None,
        posting_proxy: ProxyOpt = "clicks",
        substitution_queries: SubstQOpt = 1000,
        fmt: FormatOpt = "auto",
        delimiter: DelimOpt = None,
        encoding: EncodingOpt = "utf-8",
        on_bad_rows: BadRowsOpt = "error",
        no_normalize: NoNormOpt = False,
        session_gap: GapOpt = 30.0,
        json_out: JsonOpt = False,
    ) -> None:
        """Utility of a release against its original log: distribution statistics, index
        caching, query substitution, keyword generation, "fear of" ranking (and the UMP metrics
        for same-schema releases). Reads the private log: for the data holder."""

        def body() -> None:
            from searchveil.evaluate import evaluate_loaded, load_release
            from searchveil.report.html import evaluation_report, write_report

            _check_report_path(report)
            sd = _seeds(seeds)
            from searchveil._validate import check_choice, check_int

            check_choice("posting-proxy", posting_proxy, ("clicks", "zipf"))
            check_int("substitution-queries", substitution_queries, minimum=1)
            kw = reader_kwargs(
                fmt, None, None, None, None, None, None, delimiter, encoding, on_bad_rows,
                no_normalize, session_gap,
            )  # fmt: skip
            with progress(not json_out) as step:
                done = step("reading the release")
                rel = load_release(release_dir)
                done()
                done = step(f"reading {original.name}")
                log = _read(original, kw)
                done()
                done = step("computing metrics")
                result = evaluate_loaded(
                    log,
                    rel,
                    seeds=sd,
                    posting_proxy=posting_proxy,
                    substitution_queries=substitution_queries,
                )
                done()
                if report is not None:
                    done = step("writing the report")
                    write_report(report, evaluation_report(result))
                    result["report"] = str(report)
                    done()
            emit(result, json_out, _human_eval)

        run(body)
