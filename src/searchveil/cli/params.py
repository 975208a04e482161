"""``searchveil params korolova|zealous``: the parameter advisor.

Solve mode (give the budget): ``--epsilon`` (or ``--exp-epsilon`` for e^ε) and ``--delta``
→ thresholds and noise. Report mode (give the parameters) → (ε, δ). Lists (``1,5,10``) print
one row per value, which is how the papers' tables are reproduced::

    searchveil params korolova --exp-epsilon 10 --delta 1e-5 --max-queries 1,5,10,20,40,80,160
    searchveil params zealous --epsilon 1 --delta 0.01 --max-items 2 --tau 1,3,4,5,7,9 \
        --max-users 5000000
    searchveil params zealous --max-items 5 --tau 1 --lambda 1,5 --tau-prime 100,200 \
        --max-users 500000
    searchveil params korolova --max-queries 20 --K 140 --b 8.69 --keep-curve 250
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer
from rich.table import Table

from searchveil.cli._common import (
    JsonOpt,
    add_commands,
    emit,
    err_console,
    number_list,
    out_console,
)
from searchveil.cli.options import command
from searchveil.errors import InvalidParameterError
from searchveil.release.advice import korolova_advice, zealous_advice

__all__ = ["register", "korolova_command", "zealous_command"]


# the budget options of both advisors (solve mode)
AdvisorEpsilonOpt = Annotated[float | None, typer.Option("--epsilon", help="ε")]
AdvisorDeltaOpt = Annotated[float | None, typer.Option("--delta", help="δ")]


def _epsilon(epsilon: float | None, exp_epsilon: float | None) -> float | None:
    if epsilon is not None and exp_epsilon is not None:
        raise InvalidParameterError("exp-epsilon", exp_epsilon, "unset when --epsilon is given")
    if exp_epsilon is not None:
        if not exp_epsilon > 1:
            raise InvalidParameterError("exp-epsilon", exp_epsilon, "a number > 1")
        return math.log(exp_epsilon)
    return epsilon


def _table(rows: list[dict[str, Any]], title: str) -> None:
    if not rows:
        return
    t = Table(title=title)
    cols = [c for c in rows[0] if "unrounded" not in c and "2sig" not in c]
    for c in cols:
        t.add_column(c, justify="right", overflow="fold")
    for r in rows:
        t.add_row(*[f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols])
    out_console.print(t)


@command
def korolova_command(
    epsilon: AdvisorEpsilonOpt = None,
    exp_epsilon: Annotated[
        float | None, typer.Option("--exp-epsilon", help="e^ε instead of ε")
    ] = None,
    delta: AdvisorDeltaOpt = None,
    max_queries: Annotated[
        str, typer.Option("--max-queries", help="d, or a comma-separated list")
    ] = "",
    K: Annotated[float | None, typer.Option("--K", help="report mode: threshold")] = None,
    b: Annotated[float | None, typer.Option("--b", help="report mode: noise")] = None,
    b_q: Annotated[float | None, typer.Option("--bq", help="query-count noise")] = None,
    max_clicks: Annotated[int | None, typer.Option("--max-clicks", help="d_c")] = None,
    b_c: Annotated[float | None, typer.Option("--bc", help="click-count noise")] = None,
    distinct_users: Annotated[
        bool, typer.Option("--distinct-users", help="counts of distinct users")
    ] = False,
    keep_curve: Annotated[
        int | None, typer.Option("--keep-curve", help="keep probability for counts 0..N")
    ] = None,
    max_users: Annotated[
        int | None,
        typer.Option("--max-users", help="U: public bound on users (δ < 1/U check)"),
    ] = None,
    single_user_items: Annotated[
        int | None,
        typer.Option(
            "--single-user-items",
            help="queries held by exactly one user (private: for the data holder)",
        ),
    ] = None,
    max_single_user_items: Annotated[
        float | None,
        typer.Option(
            "--max-single-user-items",
            help="solve δ so that the expected single-user queries published ≤ this",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Korolova Release-Data: K and b from (ε, δ, d), or (ε, δ) from (K, b, d)."""
    d_list = number_list("max-queries", max_queries, int) or []
    if not d_list:
        raise InvalidParameterError("max-queries", max_queries, "d >= 1 (or a list)")
    res = korolova_advice(
        epsilon=_epsilon(epsilon, exp_epsilon), delta=delta, d_list=d_list, K=K, b=b,
        b_q=b_q, d_c=max_clicks, b_c=b_c, distinct=distinct_users, keep_curve=keep_curve,
        users=max_users, single_user_items=single_user_items,
        max_single_user_items=max_single_user_items,
    )  # fmt: skip
    for w in res.get("warnings", []):
        err_console.print(f"[bold red]warning[/]: {w}")

    def human(r: dict[str, Any]) -> None:
        if "delta_solved" in r:
            s = r["delta_solved"]
            out_console.print(
                f"δ = {s['delta']:.3g} (expected single-user queries published ≤ "
                f"{s['target']:g} for N ≤ {s['single_user_items_bound']:,}: "
                f"{s['source']}; rounded down to a power of ten)"
            )
        _table(r["rows"], f"Korolova Release-Data ({r['mode']})")
        if "note" in r:
            out_console.print(r["note"])
        if "keep_curve" in r:
            _table(r["keep_curve"], "keep probability vs count (Fig 4.1)")

    emit(res, json_out, human)


@command
def zealous_command(
    epsilon: AdvisorEpsilonOpt = None,
    delta: AdvisorDeltaOpt = None,
    max_items: Annotated[int | None, typer.Option("--max-items", help="m")] = None,
    tau: Annotated[str | None, typer.Option("--tau", help="τ, or a list")] = None,
    max_users: Annotated[
        int | None, typer.Option("--max-users", help="U: public upper bound on users")
    ] = None,
    lam: Annotated[str | None, typer.Option("--lambda", help="report mode: λ list")] = None,
    tau_prime: Annotated[
        str | None, typer.Option("--tau-prime", help="report mode: τ' list")
    ] = None,
    guarantee: Annotated[
        str, typer.Option("--guarantee", help="probabilistic | indistinguishability")
    ] = "probabilistic",
    json_out: JsonOpt = False,
) -> None:
    """ZEALOUS: λ and τ' from (ε, δ, m, τ, U), or δ (Thm 3) and δ' for given λ, τ'."""
    if max_items is None:
        raise InvalidParameterError("max-items", None, "an integer m >= 1")
    res = zealous_advice(
        epsilon=epsilon, delta=delta, m=max_items, taus=number_list("tau", tau, int),
        users=max_users, lams=number_list("lambda", lam, float),
        tau_primes=number_list("tau-prime", tau_prime, float), guarantee=guarantee,
    )  # fmt: skip
    emit(res, json_out, lambda r: _table(r["rows"], f"ZEALOUS ({r['mode']})"))


def register(app: typer.Typer) -> None:
    add_commands(app, "params", {"korolova": korolova_command, "zealous": zealous_command})
