"""``searchveil spark prepare``: set up the Spark engine on this machine — a class-data
archive of Spark's JVM classes that halves a local session's start
(:mod:`searchveil.pipelines.spark_setup`; docs/spark-perf.md, "Cold")."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from searchveil.cli._common import JsonOpt, add_commands, emit, kv_table, out_console, progress
from searchveil.cli.options import command
from searchveil.pipelines.spark_setup import prepare_archive


def _human(r: dict[str, Any]) -> None:
    t = kv_table("Spark class-data archive")
    t.add_row("archive", r["archive"])
    t.add_row("size", f"{r['bytes'] / 2**20:.0f} MB")
    t.add_row("written", "yes" if r["written"] else "no (already there; --force writes it again)")
    if r["written"]:
        t.add_row("took", f"{r['seconds']} s")
    out_console.print(t)


@command
def prepare_cmd(
    force: Annotated[
        bool, typer.Option("--force", help="write the archive again even if it is there")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Write the class-data archive a local Spark JVM starts from.

    Once per installation: about 40 s, 170 MB in the user's cache ($SEARCHVEIL_CACHE_DIR,
    else ~/.cache/searchveil); Spark's classes only, no data."""
    with progress(not json_out) as step:
        done = step("running two small Spark releases on the bundled sample")
        r = prepare_archive(force=force)
        done()
    emit(r, json_out, _human)


def register(app: typer.Typer) -> None:
    add_commands(app, "spark", {"prepare": prepare_cmd})
