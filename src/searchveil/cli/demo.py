"""``searchveil demo``: the README's main job, :func:`searchveil.pipelines.demo.demo` behind
options, a progress display and a printed summary (the work and its rules are documented in
that module)."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from searchveil.cli._common import (
    READER_DEFAULT,
    SEEDED_NOTE,
    JsonOpt,
    OverwriteOpt,
    SeedOpt,
    add_commands,
    budget_result,
    charged,
    emit,
    out_console,
    private_block,
    progress,
    reader_cli_args,
)
from searchveil.cli.options import command
from searchveil.io.readers import ReaderOptions
from searchveil.mechanisms.budget import Charge, PrivacyCost
from searchveil.mechanisms.selection import SelectionStrategy
from searchveil.params import SINGLE_USER_TARGET
from searchveil.pipelines.demo import (
    DEMO_PRIVATE_FIGURES,
    DEMO_SELECTION,
    DEMO_SYNTHETIC_USERS,
    SAMPLE_USERS,
    curve_rows,
    demo,
    summary_rows,
)
from searchveil.rng import make_rng


def _table(title: str | None, head: list[str], rows: list[tuple[str, list[str]]]) -> Table:
    t = Table(title=title, title_justify="left", show_header=True)
    for i, h in enumerate(head):
        t.add_column(h, justify="right" if i else "left", no_wrap=title is not None)
    for label, cells in rows:
        t.add_row(label, *cells)
    return t


def _human(r: dict[str, Any]) -> None:
    p = r["parameters"]
    what = (f"Korolova Release-Data, e^ε = 10, d = {p['d']} query" if p["selection"] == "korolova"
            else f"{p['selection']} selection, e^ε = 10, d = {p['d']} (public: declared on the "
            "sample, the strategy's default on a LOG) queries")  # fmt: skip
    out_console.print(
        f"[bold]searchveil demo[/]: {what} (and d_c = {p['d_c']} click on the real sample) per "
        "user; δ solved from the declared population bound U so that the expected number of "
        f"single-user queries published is ≤ {p['max_single_user_items']:g}"
    )
    out_console.print(_table(None, ["", *r["runs"]], summary_rows(r)))
    for name, x in r["runs"].items():
        if x["top_queries"]:
            tops = ", ".join(f"{q['query']} ({q['noisy_count']})" for q in x["top_queries"])
            out_console.print(f"top released queries ({name}): {tops}")
    if r.get("dcurve"):
        title, ds, rows = curve_rows(r["dcurve"])
        out_console.print(_table(title, ["d", *map(str, ds)], rows))
        out_console.print("best d on the synthetic log (for reference, never used to choose d): "
                          + "; ".join(f"{m} d = {x['d']} ({x['volume_pct']:.1f}% of the query "
                                      f"volume, {x['distinct_pct']:.3f}% of distinct queries)"
                                      for m, x in r["dcurve"]["best"].items()))  # fmt: skip
    out_console.print(r["note"])
    if r["seeded"]:
        out_console.print(f"randomness: {SEEDED_NOTE}")
    for name, x in r["runs"].items():
        out_console.print(f"{name}: release [bold]{x['release']}[/] (ledger.json)")
    out_console.print(f"real: utility report [bold]{r['runs']['real']['report']}[/]")
    out_console.print(f"demo report (δ, single-user items, d-curve): [bold]{r['report']}[/]")


def _commands(r: dict[str, Any], reader: ReaderOptions, synthetic_users: int) -> list[str]:
    """The commands that redo the demo's real-sample steps (and its synthetic log)."""
    real, p, sample = r["runs"]["real"], r["parameters"], shlex.quote(r["sample"])
    opts, u = "".join(f" {a}" for a in reader_cli_args(reader)), real["delta_solved"]
    sel = "" if p["selection"] == "korolova" else f" --selection {p['selection']}"
    return [
        f"searchveil params korolova --exp-epsilon 10 --max-queries 1 --max-single-user-items "
        f"{p['max_single_user_items']:g} --max-users {u['users_bound']}",
        f"searchveil release korolova {sample} --out real --epsilon {p['epsilon']!r} --delta "
        f"{u['delta']:g} --max-queries {real['d']} --max-clicks {p['d_c']} --urls private "
        f"--split 1,1,1,1 --max-users {u['users_bound']}{sel}{opts}",
        f"searchveil evaluate {sample} real --report real-report.html",
    ] + ([f"searchveil synth --like {sample} --users {synthetic_users} "
          f"--out synthetic-log.tsv.gz{opts}"] if synthetic_users else [])  # fmt: skip


class _Budget:
    """``--budget``: the command's charge (:func:`charged`: its warnings and messages) for the
    demo's release, and the charge once made."""

    def __init__(self, file: Path | None) -> None:
        self.file = file
        self.charged: Charge | None = None

    @contextmanager
    def charge(self, cost: PrivacyCost, *, what: str, out: Any = None) -> Iterator[Charge]:
        with charged(self.file, cost, what, out) as ch:
            yield ch
        self.charged = ch


@command
def demo_command(
    log: Annotated[Path | None, typer.Argument(
        help="a search log to run the demo on (default: the bundled 215-user AOL sample); read "
        "with the reader options below, as every command", exists=True, dir_okay=False,
        readable=True)] = None,
    out: Annotated[Path, typer.Option("--out", help="directory to create")] = Path(
        "searchveil-demo"),
    synthetic_users: Annotated[int, typer.Option(
        "--synthetic-users", help="users of the synthetic log calibrated on the sample (0 = "
        "skip)")] = DEMO_SYNTHETIC_USERS,
    max_single_user_items: Annotated[float, typer.Option(
        "--max-single-user-items", help="δ is solved so that the expected single-user queries "
        "published ≤ this")] = SINGLE_USER_TARGET,
    max_users: Annotated[int | None, typer.Option(
        "--max-users", help="U: a public upper bound on LOG's users you DECLARE (required with "
        f"a LOG; default for the bundled sample: its published size, {SAMPLE_USERS}); δ is "
        "solved from it, never from the log")] = None,
    selection: Annotated[str, typer.Option(
        "--selection", help=f"the releases' strategy: {DEMO_SELECTION} (default: the best "
        "measured, docs/selection-strategies.md) | "
        + " | ".join(s for s in SelectionStrategy if s != DEMO_SELECTION)
        + " | korolova (the thesis' Release-Data, d = 1)")] = DEMO_SELECTION,
    overwrite: OverwriteOpt = False,
    budget: Annotated[Path | None, typer.Option(
        "--budget", help="the log's budget file (searchveil budget init): charged the demo's "
        "one differentially private release of the log, real/ (refused before the log is "
        "read; the charge then stands). The rest is not covered: the synthetic log is "
        "calibrated on the log's exact figures, the reports show them — never publish them"
        )] = None,
    seed: SeedOpt = None,
    reader: ReaderOptions = READER_DEFAULT,
    json_out: JsonOpt = False,
) -> None:  # fmt: skip
    """The main job: a private release of the AOL sample, and a synthetic d-curve.

    A Korolova release of the bundled 215-user AOL sample (or of LOG) with its utility report,
    and the d-curve (thesis Fig. 4.2) of a synthetic log of 300,000 users calibrated on it,
    with δ chosen so that no query held by a single user is expected to be published."""
    book = _Budget(budget)
    with progress(not json_out) as step:
        res = demo(out=out, rng=make_rng(seed), log=log, reader=reader,
                       synthetic_users=synthetic_users, max_users=max_users,
                       max_single_user_items=max_single_user_items, selection=selection,
                       overwrite=overwrite, budget=book if budget else None,
                       step=step)  # fmt: skip
    res["budget"] = budget_result(budget, book.charged) if book.charged else None
    res = {"out": res["out"], "report": res["report"],
           "private": private_block(figures=[f"runs.*.{k}" for k in DEMO_PRIVATE_FIGURES]),
           **res, "equivalent_commands": _commands(res, reader, synthetic_users)}  # fmt: skip
    emit(res, json_out, _human)


def register(app: typer.Typer) -> None:
    add_commands(app, None, {"demo": demo_command})
