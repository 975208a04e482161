"""``searchveil stats``: descriptive statistics of a raw log (reads private data; prints only
aggregate statistics to the data holder)."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table

from searchveil.cli._common import (
    READER_DEFAULT,
    InputArg,
    JsonOpt,
    add_commands,
    emit,
    out_console,
    private_block,
    progress,
)
from searchveil.cli.options import command
from searchveil.io.readers import ReaderOptions, read_log
from searchveil.model import log_stats


def _human(r: dict[str, Any]) -> None:
    t = Table(
        title=f"searchveil stats: {r['input']['file']} (private figures of the input: do not "
        "publish)",
        show_header=True,
    )
    t.add_column("statistic")
    t.add_column("value", justify="right")
    for key in (
        "rows",
        "users",
        "query_events",
        "clicks",
        "distinct_queries",
        "distinct_keywords",
        "distinct_clicks",
        "distinct_query_pairs",
        "sessions",
    ):
        t.add_row(key.replace("_", " "), f"{r[key]:,}")
    t.add_row("bad rows skipped", f"{r['input']['bad_rows_skipped']:,}")
    out_console.print(t)
    q = Table(title="per user", show_header=True)
    q.add_column("")
    cols = list(r["per_user"]["queries"].keys())
    for c in cols:
        q.add_column(c, justify="right")
    for name, vals in r["per_user"].items():
        q.add_row(name.replace("_", " "), *[f"{vals[c]:,.1f}" for c in cols])
    out_console.print(q)


@command
def stats(
    input: InputArg,
    reader: ReaderOptions = READER_DEFAULT,
    json_out: JsonOpt = False,
) -> None:
    """Rows, users, query events, clicks, distinct items, sessions, per-user figures.

    Per-user figures: quantiles of queries, distinct queries, clicks and sessions per user."""
    with progress(not json_out) as step:
        done = step(f"reading {input.name}")
        log = read_log(input, reader)
        done()
        done = step("computing statistics")
        result = log_stats(log)
        done()
    result["private"] = private_block(scope="every figure above: exact counts of the input")
    emit(result, json_out, _human)


def register(app: typer.Typer) -> None:
    add_commands(app, None, {"stats": stats})
