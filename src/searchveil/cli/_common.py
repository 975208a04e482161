"""Shared CLI plumbing: error handling, JSON output, progress bars, reader options."""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from searchveil.errors import SearchveilError
from searchveil.io.readers import ColumnMapping

T = TypeVar("T")

err_console = Console(stderr=True)
out_console = Console()

# -- shared option types --------------------------------------------------------------------
InputArg = Annotated[
    Path, typer.Argument(help="Input log: AOL TSV (.gz ok), delimited file, Parquet or MSNBC .seq")
]
FormatOpt = Annotated[str, typer.Option("--format", help="auto | aol | csv | parquet | msnbc")]
UserColOpt = Annotated[str | None, typer.Option("--user-col", help="column holding the user id")]
QueryColOpt = Annotated[str | None, typer.Option("--query-col", help="column holding the query")]
TimeColOpt = Annotated[
    str | None, typer.Option("--time-col", help="column holding the time ('' = none)")
]
UrlColOpt = Annotated[
    str | None, typer.Option("--url-col", help="column holding the clicked URL ('' = none)")
]
RankColOpt = Annotated[
    str | None, typer.Option("--rank-col", help="column holding the item rank ('' = none)")
]
SessionColOpt = Annotated[
    str | None, typer.Option("--session-col", help="column holding a session id")
]
DelimOpt = Annotated[
    str | None,
    typer.Option(
        "--delimiter",
        help="field separator (default: tab for AOL, sniffed for csv); 'tab' or '\\t' for tab",
    ),
]
EncodingOpt = Annotated[
    str, typer.Option("--encoding", help="text encoding, e.g. utf-8, gb18030, latin-1")
]
BadRowsOpt = Annotated[
    str, typer.Option("--on-bad-rows", help="error | skip (skipped rows are counted in the ledger)")
]
NoNormOpt = Annotated[
    bool,
    typer.Option(
        "--no-normalize", help="keep queries as written (default: case-fold, collapse whitespace)"
    ),
]
GapOpt = Annotated[
    float, typer.Option("--session-gap", help="minutes of inactivity that start a new session")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print machine-readable JSON on stdout")]
SeedOpt = Annotated[
    int | None,
    typer.Option(
        "--seed",
        help="seed for a reproducible EXPERIMENT; the ledger marks the release NOT FOR RELEASE",
    ),
]
OutDirOpt = Annotated[Path, typer.Option("--out", help="release directory to create")]
OverwriteOpt = Annotated[
    bool, typer.Option("--overwrite", help="replace an existing --out directory")
]
OutFmtOpt = Annotated[str, typer.Option("--output-format", help="tsv | parquet")]


def reader_kwargs(
    fmt: str = "auto",
    user_col: str | None = None,
    query_col: str | None = None,
    time_col: str | None = None,
    url_col: str | None = None,
    rank_col: str | None = None,
    session_col: str | None = None,
    delimiter: str | None = None,
    encoding: str = "utf-8",
    on_bad_rows: str = "error",
    no_normalize: bool = False,
    session_gap: float = 30.0,
) -> dict[str, Any]:
    """Translate CLI reader options into :func:`searchveil.io.readers.read_log` kwargs."""

    mapping = None
    if any(v is not None for v in (user_col, query_col, time_col, url_col, rank_col, session_col)):
        base = ColumnMapping()
        mapping = ColumnMapping(
            user=user_col or base.user,
            query=query_col or base.query,
            time=(time_col or None) if time_col is not None else base.time,
            url=(url_col or None) if url_col is not None else base.url,
            rank=(rank_col or None) if rank_col is not None else base.rank,
            session=session_col or None,
        )
        if fmt == "auto":
            fmt = "csv"
    if delimiter in ("tab", "\\t"):
        delimiter = "\t"
    return {
        "fmt": fmt,
        "columns": mapping,
        "delimiter": delimiter,
        "encoding": encoding,
        "on_bad_rows": on_bad_rows,
        "normalize": not no_normalize,
        "session_gap_minutes": session_gap,
    }


def emit(result: dict[str, Any], as_json: bool, human: Callable[[dict[str, Any]], None]) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2, default=str, ensure_ascii=False) + "\n")
    else:
        human(result)


def run(fn: Callable[[], T]) -> T:
    """Run a command body: user errors exit 2 with the message, bugs exit 1."""
    try:
        return fn()
    except SearchveilError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True)
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
        if "--debug" in sys.argv or __import__("os").environ.get("SEARCHVEIL_DEBUG"):
            traceback.print_exc()
        raise typer.Exit(1) from None


@contextmanager
def progress(enabled: bool = True) -> Iterator[Callable[[str], Callable[[], None]]]:
    """A rich progress display on stderr; yields ``step(description) -> done()``."""
    if not enabled or not err_console.is_terminal:
        yield lambda _desc: lambda: None
        return
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
