"""Shared CLI plumbing: error handling, JSON output, progress bars, reader options."""

from __future__ import annotations

import inspect
import json
import os
import shlex
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from searchveil.cli import COMMANDS
from searchveil.errors import InvalidParameterError, SearchveilError
from searchveil.io.ledger import differentially_private, provenance_path, says_not_dp
from searchveil.io.paths import (
    LEDGER_JSON,
    REPORT,
    RUN_RECORD,
    InputPaths,
    Owned,
    check_named,
    check_private_path,
)
from searchveil.io.readers import ReaderOptions
from searchveil.mechanisms.budget import Charge, NoGuarantee, PrivacyCost
from searchveil.mechanisms.budget_file import DatasetBudget

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

T = TypeVar("T")
N = TypeVar("N", int, float)


class _LazyConsole:
    """rich's ``Console``, made on first use. Importing rich costs ≈ 40 ms of every command's
    start-up (docs/performance.md, issue 33), and a command run with ``--json``, without a
    terminal for its progress bars, never prints through it; rich is imported, here and in
    :func:`progress` and :func:`kv_table`, only when something is drawn."""

    def __init__(self, stderr: bool) -> None:
        object.__setattr__(self, "_stderr", stderr)
        object.__setattr__(self, "_console", None)

    def _get(self) -> Console:
        if self._console is None:
            from rich.console import Console

            object.__setattr__(self, "_console", Console(stderr=self._stderr))
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._get(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._get(), name, value)


err_console: Console = _LazyConsole(stderr=True)  # type: ignore[assignment]
out_console: Console = _LazyConsole(stderr=False)  # type: ignore[assignment]

# -- shared option types --------------------------------------------------------------------
INPUT_HELP = "Input log: AOL TSV (.gz ok), delimited file, Parquet or MSNBC .seq"
InputArg = Annotated[Path, typer.Argument(help=INPUT_HELP)]
JsonOpt = Annotated[bool, typer.Option("--json", help="print machine-readable JSON on stdout")]
SeedOpt = Annotated[
    int | None,
    typer.Option(
        "--seed",
        help="seed for a reproducible EXPERIMENT; the ledger marks the release NOT FOR RELEASE",
    ),
]
OutDirOpt = Annotated[Path, typer.Option("--out", help="release directory to create")]
EpsilonOpt = Annotated[float | None, typer.Option("--epsilon", help="ε (no default)")]
DeltaOpt = Annotated[float | None, typer.Option("--delta", help="δ (no default)")]
ReleaseEpsilonOpt = Annotated[
    float | None, typer.Option("--epsilon", help="total ε of the release (no default)")
]
ReleaseDeltaOpt = Annotated[
    float | None, typer.Option("--delta", help="total δ of the release (no default)")
]
HtmlReportOpt = Annotated[Path | None, typer.Option("--report", help="HTML report to write")]
OVERWRITE_HELP = (
    "replace what exists at an output path only if searchveil wrote it: a complete release "
    "holding none of the inputs, the provenance record of the release it replaces, a report, "
    "ledger, run record, model or log it recognises — never another file"
)
#: ``--overwrite``: one declaration, one rule (io/paths.py, issue 39) for every command
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help=OVERWRITE_HELP)]
ReplaceOpt = OverwriteOpt
OutFmtOpt = Annotated[str, typer.Option("--output-format", help="tsv | parquet")]
ProvenanceOpt = Annotated[
    Path | None,
    typer.Option(
        "--provenance",
        help="where to write the PRIVATE provenance record (input path, SHA-256, exact counts, "
        "report); default: OUT.private.json beside the release directory, never inside it",
    ),
]


def number_list(name: str, text: str | None, kind: type[N]) -> list[N] | None:
    """``--name 1,5,10``: a comma-separated list of ``kind`` (int or float); None if unset."""
    if text is None:
        return None
    try:
        return [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        what = "integers" if kind is int else "numbers"
        raise InvalidParameterError(name, text, f"comma-separated {what}") from None


#: the file names an HTML report may have
HTML = (".html", ".htm")


#: what the file of each option is, as ``--overwrite`` may replace it (issue 39)
OWNED_BY_OPTION: dict[str, Owned] = {"report": REPORT, "ledger": LEDGER_JSON, "out": RUN_RECORD}


def check_private_files(
    paths: dict[str, Path | None],
    inputs: InputPaths = (),
    *,
    suffixes: tuple[str, ...] = (),
    overwrite: bool = False,
    owned: Owned | None = None,
) -> None:
    """Private files a command will write (reports, run records, ledgers), by option name:
    each one given is refused inside a release directory or on an input, before any work
    (issue 30), and where it exists unless ``overwrite`` and it is one searchveil wrote
    (``owned``, default by option: :data:`OWNED_BY_OPTION`; issue 39); with ``suffixes``, also
    a name that ends in none of them."""
    for option, path in paths.items():
        if path is None:
            continue
        kind = owned or OWNED_BY_OPTION.get(option)
        check_private_path(path, option=option, inputs=inputs, overwrite=overwrite, owned=kind)
        if suffixes and path.suffix.lower() not in suffixes:
            raise InvalidParameterError(
                option, str(path), "a file name ending in " + "/".join(suffixes)
            )


def ledger_beside(report: Path | None, ledger: Path | None) -> Path | None:
    """Where an experiment's public ledger goes: ``--ledger``, else beside ``--report``."""
    if ledger is None and report is not None:
        report = check_named(report, "report")
        return report.with_name(report.name + ".ledger.json")
    return ledger


def require_epsilon_delta(epsilon: float | None, delta: float | None) -> tuple[float, float]:
    """``--epsilon`` and ``--delta``, both given (there is no default ε or δ)."""
    if epsilon is None:
        raise InvalidParameterError("epsilon", None, "a number > 0 (no default ε)")
    if delta is None:
        raise InvalidParameterError("delta", None, "a number in (0, 1) (no default δ)")
    return epsilon, delta


def parse_split(split: str | None) -> tuple[float, float] | None:
    """``--split a,b`` of the end-to-end same-schema releases (pair counts, profile)."""
    if split is None:
        return None
    try:
        a, b = (float(v) for v in split.replace(":", ",").split(","))
    except ValueError:
        raise InvalidParameterError(
            "split", split, "two comma-separated positive weights: pair counts, profile"
        ) from None
    return (a, b)


MaxUsersOpt = Annotated[
    int | None,
    typer.Option(
        "--max-users",
        help="U: a public upper bound on the number of users you DECLARE (never read from the "
        "data); the ledger's δ < 1/U check uses it (declared.max_users); with --selection "
        "it also sets the default d",
    ),
]

MaxPairsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-pairs",
        help="e2e: m, distinct (query, url) pairs kept per user (default: a public rule from ε, δ)",
    ),
]

BudgetOpt = Annotated[
    Path | None,
    typer.Option(
        "--budget",
        help="the dataset's budget file (searchveil budget init): the release is refused, "
        "before its input is read, when its cost exceeds what is left; else it is charged, "
        "and the charge stands even if the run then fails (docs/privacy/budget.md)",
    ),
]


ProfileOpt = Annotated[
    str | None,
    typer.Option(
        "--profile",
        help="named input layout: aol | sogouq | msnbc | trec-session (options you give win)",
    ),
]
FormatOpt = Annotated[
    str | None, typer.Option("--format", help="auto | aol | csv | parquet | msnbc | trec-session")
]
_POS = " (a header name, or its 1-based position with --no-header)"
UserColOpt = Annotated[
    str | None, typer.Option("--user-col", help="column holding the user id" + _POS)
]
QueryColOpt = Annotated[
    str | None, typer.Option("--query-col", help="column holding the query" + _POS)
]
TimeColOpt = Annotated[
    str | None, typer.Option("--time-col", help="column holding the time ('' = none)")
]
UrlColOpt = Annotated[
    str | None, typer.Option("--url-col", help="column holding the clicked URL ('' = none)")
]
RankColOpt = Annotated[
    str | None, typer.Option("--rank-col", help="column holding the item rank ('' = none)")
]
RankClickColOpt = Annotated[
    str | None,
    typer.Option(
        "--rank-click-col",
        help="one column holding 'RANK CLICK' (SogouQ), split into rank and click order",
    ),
]
SessionColOpt = Annotated[
    str | None, typer.Option("--session-col", help="column holding a session id")
]
HeaderOpt = Annotated[
    bool | None,
    typer.Option(
        "--header/--no-header",
        help="first line is a header (default); --no-header names columns 1, 2, ... as cut does",
    ),
]
TimeFormatOpt = Annotated[
    str | None,
    typer.Option(
        "--time-format",
        help="iso | epoch | epoch-ms | a strftime pattern such as '%d/%m/%Y %H:%M' or a time "
        "of day '%H:%M:%S' (default: YYYY-MM-DD HH:MM[:SS])",
    ),
]
DateOpt = Annotated[
    str | None,
    typer.Option("--date", help="YYYY-MM-DD of a file whose times are times of day only"),
]
BracketsOpt = Annotated[
    bool | None,
    typer.Option(
        "--strip-brackets/--keep-brackets",
        help="remove the square brackets around queries (SogouQ)",
    ),
]
DelimOpt = Annotated[
    str | None,
    typer.Option(
        "--delimiter",
        help="field separator (default: tab for AOL, sniffed for csv); 'tab' or '\\t' for tab",
    ),
]
EncodingOpt = Annotated[
    str | None,
    typer.Option("--encoding", help="text encoding, e.g. utf-8 (default), gb18030, latin-1"),
]
BadRowsOpt = Annotated[
    str | None,
    typer.Option(
        "--on-bad-rows",
        help="error (default) | skip (skipped rows are counted in the private provenance record)",
    ),
]
NoNormOpt = Annotated[
    bool,
    typer.Option(
        "--no-normalize", help="keep queries as written (default: case-fold, collapse whitespace)"
    ),
]
GapOpt = Annotated[
    float | None,
    typer.Option(
        "--session-gap", help="minutes of inactivity that start a new session (default 30)"
    ),
]


def build_reader_options(
    *,
    profile: ProfileOpt = None,
    fmt: FormatOpt = None,
    header: HeaderOpt = None,
    user_col: UserColOpt = None,
    query_col: QueryColOpt = None,
    time_col: TimeColOpt = None,
    url_col: UrlColOpt = None,
    rank_col: RankColOpt = None,
    rank_click_col: RankClickColOpt = None,
    session_col: SessionColOpt = None,
    time_format: TimeFormatOpt = None,
    date: DateOpt = None,
    strip_brackets: BracketsOpt = None,
    delimiter: DelimOpt = None,
    encoding: EncodingOpt = None,
    on_bad_rows: BadRowsOpt = None,
    no_normalize: NoNormOpt = False,
    session_gap: GapOpt = None,
) -> ReaderOptions:
    """The :class:`ReaderOptions` of the reader options every command that reads a log takes
    (the option group of :class:`ReaderOptions`, cli/options.py): the profile's settings,
    overridden by every option given. A column option given as ``''`` means "no such column"
    (optional columns only). Giving any column with ``--format auto`` reads a delimited file
    with the delimiter sniffed (``csv``)."""
    over: dict[str, Any] = {}
    cols = {"user": user_col, "query": query_col, "time": time_col, "url": url_col,
            "rank": rank_col, "rank_click": rank_click_col, "session": session_col}  # fmt: skip
    for key, val in cols.items():
        if val is None:
            continue
        if key in ("user", "query"):
            if not val:
                raise InvalidParameterError(f"{key}-col", val, "a column name or position")
            over[key] = val
        else:
            over[key] = val or None
    if rank_click_col:
        over.setdefault("rank", None)
    if fmt is not None:
        over["fmt"] = fmt
    elif over and profile is None:
        over["fmt"] = "csv"
    if delimiter in ("tab", "\\t"):
        delimiter = "\t"
    settings = {"has_header": header, "time_format": time_format, "date": date,
                "strip_brackets": strip_brackets, "delimiter": delimiter, "encoding": encoding,
                "on_bad_rows": on_bad_rows, "session_gap_minutes": session_gap}  # fmt: skip
    over.update({k: v for k, v in settings.items() if v is not None})
    if no_normalize:
        over["normalize"] = False
    return ReaderOptions.from_profile(profile, **over)


# the reader options' parameter names, and the default of a command's ``reader`` parameter
READER_PARAM_NAMES = tuple(inspect.signature(build_reader_options).parameters)
READER_DEFAULT = ReaderOptions()


def reader_kwargs(**options: Any) -> dict[str, Any]:
    """:func:`searchveil.io.readers.read_log` keyword arguments of the CLI reader options
    (see :func:`build_reader_options`)."""
    return build_reader_options(**options).kwargs()


def reader_cli_args(options: ReaderOptions) -> list[str]:
    """The reader options of the command line that rebuild ``options`` (every setting that
    differs from the default layout, written out explicitly rather than as a ``--profile``), so
    a printed equivalent command reads the input exactly as the command that printed it."""
    d = ReaderOptions()
    args: list[str] = []
    if options.fmt != d.fmt or options.columns is not None:
        args += ["--format", options.fmt]
    if options.has_header != d.has_header:
        args.append("--header" if options.has_header else "--no-header")
    if options.columns is not None:
        for key, value in options.columns.as_dict().items():
            if value is not None or key in ("time", "url", "rank"):
                args += [f"--{key.replace('_', '-')}-col", value or ""]
    scalar = (("time_format", "--time-format"), ("date", "--date"),
              ("encoding", "--encoding"), ("on_bad_rows", "--on-bad-rows"))  # fmt: skip
    for name, flag in scalar:
        value = getattr(options, name)
        if value != getattr(d, name):
            args += [flag, str(value)]
    if options.delimiter != d.delimiter:
        args += ["--delimiter", "tab" if options.delimiter == "\t" else str(options.delimiter)]
    if options.strip_brackets != d.strip_brackets:
        args.append("--strip-brackets" if options.strip_brackets else "--keep-brackets")
    if options.normalize != d.normalize:
        args.append("--no-normalize")
    if options.session_gap_minutes != d.session_gap_minutes:
        args += ["--session-gap", repr(options.session_gap_minutes)]
    return [shlex.quote(a) for a in args]


def emit(result: dict[str, Any], as_json: bool, human: Callable[[dict[str, Any]], None]) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2, default=str, ensure_ascii=False) + "\n")
    else:
        human(result)
        if result.get("budget"):
            b = result["budget"]
            out_console.print(
                f"dataset budget {b['file']}: ε spent {b['spent']['epsilon']:.6g} "
                f"(+ pending {b['pending']['epsilon']:.6g}) of {b['total']['epsilon']:.6g}, "
                f"left {b['left']['epsilon']:.6g}; δ left {b['left']['delta']:.3g}",
                highlight=False,
            )


@contextmanager
def charged(
    budget: Path | None,
    cost: PrivacyCost | NoGuarantee,
    what: str,
    out: Path | None = None,
) -> Iterator[Charge]:
    """Charge a release's ``cost`` to the ``--budget`` file around the block that reads, runs
    and writes it (:meth:`DatasetBudget.charge`: refused before anything is read — also a
    release that is not differentially private, or whose relation does not compose; committed
    with the ledger the block records, ``Charge.record_written(out)``). Admission is the last
    public step: **if the block fails, the charge stands** (it may have read the input and
    drawn noise). ``out``: where the release goes. Without ``--budget``, charges nothing."""
    if budget is None:
        yield Charge(None, what)
        return
    book = DatasetBudget.open(budget)
    for w in book.warnings:
        err_console.print(f"[bold red]warning[/]: {w}", highlight=False)
    admitted = False
    try:
        with book.charge(cost, what=what, out=out) as ch:
            admitted = True
            yield ch
            admitted = False  # the block ended: a failure now is the commit's (its own words)
    except (KeyboardInterrupt, SystemExit):
        err_console.print(
            f"the charge of {what} to {budget} stays pending (counted as spent): once you have "
            "checked that the release was not written, release it with searchveil budget "
            f"refund {budget} --charge ID (searchveil budget show {budget})",
            highlight=False,
        )
        raise
    except Exception:
        if admitted:
            err_console.print(
                f"the charge of {what} to {budget} stands (counted as spent): the run failed "
                "after it was admitted, when it may have read the input and drawn noise "
                f"(searchveil budget show {budget})",
                highlight=False,
            )
        raise


def budget_result(budget: Path | None, ch: Charge) -> dict[str, Any] | None:
    """The ``budget`` entry of a release command's result: the charge and what is left."""
    s = None if budget is None else ch.summary
    if s is None:
        return None
    return {"file": str(budget), "charge": ch.id, "relation": s["relation"],
            "total": s["total"], "spent": s["spent"], "pending": s["pending"],
            "left": s["left"], "zcdp": s["zcdp"]}  # fmt: skip


def _debug() -> bool:
    return "--debug" in sys.argv or bool(os.environ.get("SEARCHVEIL_DEBUG"))


def run(fn: Callable[[], T]) -> T:
    """Run a command body: user errors exit 2 with the message, bugs exit 1."""
    try:
        return fn()
    except SearchveilError as exc:
        from rich.markup import escape

        # soft wrap: the terminal folds the line; no break inside a path the user copies (the
        # message escaped: a path may hold "[...]")
        err_console.print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        if exc.__cause__ is not None and _debug():  # the library's own words, on request
            err_console.print(f"detail: {exc.__cause__!r}", highlight=False, markup=False)
        raise typer.Exit(2) from None
    except (typer.Exit, typer.Abort):
        raise
    except KeyboardInterrupt:
        err_console.print("interrupted; nothing was written")
        raise typer.Exit(130) from None
    except Exception as exc:  # noqa: BLE001 - last-resort bug report, exits 1
        err_console.print(
            "[bold red]internal error (this is probably a bug in searchveil):[/] "
            f"{type(exc).__name__}: {exc}",
            highlight=False,
        )
        if _debug():
            traceback.print_exc()
        raise typer.Exit(1) from None


@contextmanager
def progress(enabled: bool = True) -> Iterator[Callable[[str], Callable[[], None]]]:
    """A rich progress display on stderr; yields ``step(description) -> done()``."""
    if not enabled or not err_console.is_terminal:
        yield lambda _desc: lambda: None
        return
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as prog:

        def step(desc: str) -> Callable[[], None]:
            task = prog.add_task(desc, total=1)
            return lambda: prog.update(task, completed=1)

        yield step


#: what every command's ``private`` sub-object of ``--json`` says (issue 30): exact figures of
#: the private input are labelled — "(private)" in tables, under ``private`` in JSON
PRIVATE_NOTE = (
    "exact figures of the private input, for the data holder: not covered by the release's "
    "guarantee — never publish them"
)
PRIVATE = " (private)"
#: what a command prints of a release made with ``--seed``
SEEDED_NOTE = "SEEDED — reproducible experiment, NOT FOR RELEASE"


def release_head(out: Path, provenance: Path | None, led: dict[str, Any]) -> dict[str, Any]:
    """The first entries of a release command's ``--json``: where the release and its private
    provenance record went, and the guarantee its ledger ``led`` states."""
    return {
        "out": str(out),
        "provenance": str(provenance_path(out, provenance)),
        "mechanism": led["mechanism"],
        "notion": led["notion"],
        "epsilon": led["epsilon"],
        "delta": led["delta"],
        "differentially_private": differentially_private(led),
    }


def guarantee_text(release: dict[str, Any]) -> str:
    """The guarantee of a release (its ledger, or a summary holding its ``notion``,
    ``epsilon``, ``relation``, ``guarantee``) as rich markup for a summary: plain when it is
    differentially private, in the warning style — bold red, saying so — when it is not
    (k-anonymity; a ``--mode conditional`` release, whose (ε, δ) covers only the sampling
    given the counts): issue 39."""
    from rich.markup import escape

    notion = str(release.get("notion") or "")
    if differentially_private(release):
        return escape(notion)
    lead = "" if says_not_dp(notion) else "NOT differentially private: "
    return f"[bold red]{escape(lead + notion)}[/]"


def kv_table(title: str) -> Table:
    """A table of named figures: names left, values right, no header."""
    from rich.table import Table  # rich only when a table is drawn (see _LazyConsole)

    t = Table(title=title, show_header=False)
    t.add_column("")
    t.add_column("", justify="right")
    return t


def print_release_table(t: Table, r: dict[str, Any]) -> None:
    """Print the figures table ``t`` of the release ``r``, ending with its randomness and
    where its private provenance record is."""
    if r["seeded"]:
        t.add_row("randomness", SEEDED_NOTE)
    t.add_row("private provenance (do not publish)", r["provenance"])
    out_console.print(t)


def private_block(**figures: Any) -> dict[str, Any]:
    """The ``private`` sub-object of a command's ``--json``: the note, then ``figures``."""
    return {"note": PRIVATE_NOTE, **figures}


def command_group(app: typer.Typer, name: str) -> typer.Typer:
    """The command group ``name`` of ``app``, with its help and visibility from the command
    registry (``COMMANDS``), created by the first module that asks: a group's commands may live
    in several modules (``release``: korolova, zealous, kanon in cli/release.py; ump in
    cli/sanitize.py, which alone loads the UMP solvers and scipy), so each command's start-up
    loads only its own module."""
    for info in app.registered_groups:
        if info.name == name and info.typer_instance is not None:
            return info.typer_instance
    entry = COMMANDS[name]
    group = typer.Typer(help=entry.help, no_args_is_help=True)
    app.add_typer(group, name=name, hidden=entry.hidden)
    return group


def add_commands(app: typer.Typer, group: str | None, commands: dict[str, Any]) -> None:
    """Register ``commands`` (name → command function) in the ``group`` of ``app`` (``None``:
    at the top level)."""
    target = app if group is None else command_group(app, group)
    for name, fn in commands.items():
        target.command(name)(fn)


def spark_settings(pairs: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """``--spark-conf KEY=VALUE`` options as (key, value) pairs."""
    out = []
    for kv in pairs:
        k, sep, v = kv.partition("=")
        if not sep or not k.strip():
            raise InvalidParameterError("spark-conf", kv, "KEY=VALUE")
        out.append((k.strip(), v))
    return tuple(out)
