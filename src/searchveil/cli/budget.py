"""``searchveil budget init|show|refund``: a dataset's privacy budget across its releases
(:mod:`searchveil.mechanisms.budget_file`; every release command charges it with ``--budget``;
docs/privacy/budget.md)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from searchveil.cli._common import (
    JsonOpt,
    add_commands,
    emit,
    err_console,
    kv_table,
    out_console,
)
from searchveil.cli.options import command
from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.budget_file import DatasetBudget, init_budget

FileArg = Annotated[Path, typer.Argument(help="the dataset's budget file, e.g. aol.budget.json")]


def _fmt(x: float) -> str:
    return "∞" if math.isinf(x) else f"{x:.6g}"


def _human(r: dict[str, Any]) -> None:
    t = kv_table(f"privacy budget {r['file']} ({r['relation']})")
    t.add_row("relation", r["neighbouring"])
    if r.get("one_record_per_user"):
        t.add_row("declared", "one record per user in every table")
    for key in ("total", "spent", "pending", "left"):
        v = r[key]
        t.add_row(f"{key} ε, δ", f"{_fmt(v['epsilon'])}, {v['delta']:.4g}")
    t.add_row("composition", r["composition"])
    z = r.get("zcdp")
    if z:
        t.add_row("zCDP (every charge zCDP)", f"ρ = {z['rho']:.6g} → ε = {_fmt(z['epsilon'])} at "
                  f"δ = {z['delta']:.3g} (shown, not used to refuse)")  # fmt: skip
    out_console.print(t)
    for w in r.get("warnings") or ():
        err_console.print(f"[bold red]warning[/]: {w}", highlight=False)
    rows = r["charges"]
    if rows:
        tt = Table(title="charges")
        for c in ("id", "what", "state", "ε", "δ", "time", "ledger SHA-256"):
            tt.add_column(c)
        for c in rows:
            state = c["state"]
            if state == "pending":
                state += (
                    " (process running here)" if c.get("process_running_here")
                    else " (process ended; a new release is in place where it wrote: it "
                    "counts as spent)" if c.get("release_in_place")
                    else " (process ended: refund after checking nothing was published)"
                )  # fmt: skip
            elif state == "failed":
                state += " (after it was admitted: its cost stands)"
            tt.add_row(c["id"], c["what"], state, f"{c['charged']['epsilon']:.6g}",
                       f"{c['charged']['delta']:.3g}",
                       c.get("committed_utc") or c.get("failed_utc") or c["started_utc"],
                       (c.get("ledger_sha256") or "")[:16])  # fmt: skip
        out_console.print(tt)


@command
def init_cmd(
    file: FileArg,
    epsilon: Annotated[float | None, typer.Option("--epsilon", help="total ε (no default)")] = None,
    delta: Annotated[
        float | None,
        typer.Option("--delta", help="total δ (no default; protects everyone only if < 1/users)"),
    ] = None,
    relation: Annotated[
        str | None,
        typer.Option(
            "--relation",
            help="user (add/remove a user's log) | user-replace | record (a table's row) | "
            "edge-outside-targets (a graph's edge, private recommendations) | user-parties",
        ),
    ] = None,
    one_record_per_user: Annotated[
        bool,
        typer.Option(
            "--one-record-per-user",
            help="declare that every table of the dataset holds one record per user "
            "(record-level releases then compose with a user-level budget)",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Declare a dataset's total privacy budget in a new budget file."""
    if epsilon is None:
        raise InvalidParameterError("epsilon", None, "a number > 0 (no default ε)")
    if delta is None:
        raise InvalidParameterError("delta", None, "a number in [0, 1) (no default δ)")
    if relation is None:
        raise InvalidParameterError(
            "relation", None, "user | user-replace | record | edge-outside-targets | "
            "user-parties (no default)",
        )  # fmt: skip
    book = init_budget(file, epsilon=epsilon, delta=delta, relation=relation,
                       one_record_per_user=one_record_per_user)  # fmt: skip
    emit({"file": str(file), **book.summary()}, json_out, _human)


@command
def show_cmd(file: FileArg, json_out: JsonOpt = False) -> None:
    """Show a budget: total, spent, pending, left and every charge."""
    emit({"file": str(file), **DatasetBudget.open(file).summary()}, json_out, _human)


@command
def refund_cmd(
    file: FileArg,
    charge: Annotated[
        str, typer.Option("--charge", help="id of a pending charge (searchveil budget show)")
    ],
    json_out: JsonOpt = False,
) -> None:
    """Release a pending charge of a killed run that published nothing."""
    book = DatasetBudget.open(file)
    rec = book.refund(charge)
    emit({"file": str(file), "refunded": rec["id"], "what": rec["what"],
          **book.summary()}, json_out, _human)  # fmt: skip


def register(app: typer.Typer) -> None:
    add_commands(app, "budget", {"init": init_cmd, "show": show_cmd, "refund": refund_cmd})
