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

from searchveil.cli._common import JsonOpt, emit, out_console, run
from searchveil.errors import InvalidParameterError


def _ints(name: str, s: str | None) -> list[int] | None:
    if s is None:
        return None
    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise InvalidParameterError(name, s, "comma-separated integers") from None


def _floats(name: str, s: str | None) -> list[float] | None:
    if s is None:
        return None
    try:
        return [float(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise InvalidParameterError(name, s, "comma-separated numbers") from None


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


def korolova_advice(
    *,
    epsilon: float | None,
    delta: float | None,
    d_list: list[int],
    K: float | None,
    b: float | None,
    b_q: float | None,
    d_c: int | None,
    b_c: float | None,
    distinct: bool,
    keep_curve: int | None,
) -> dict[str, Any]:
    from searchveil.params import (
        effective_scale,
        exact_threshold_privacy,
        keep_probability_curve,
        korolova_paper_privacy,
        korolova_solve_exact,
        korolova_solve_improved,
        korolova_solve_paper,
    )

    rows: list[dict[str, Any]] = []
    if K is None and b is None:
        if epsilon is None or delta is None:
            raise InvalidParameterError(
                "epsilon/delta", (epsilon, delta), "both (solve mode) or give --K and --b"
            )
        for d in d_list:
            paper = korolova_solve_paper(epsilon=epsilon, delta=delta, d=d)
            imp = korolova_solve_improved(epsilon=epsilon, delta=delta, d=d)
            ex = korolova_solve_exact(epsilon=epsilon, delta=delta, d=d, distinct=distinct)
            rows.append(
                {
                    "d": d,
                    "K_paper": round(paper["K"], 2),
                    "b": round(paper["b"], 2),
                    "K_improved_4_8": round(imp["K"], 2),
                    "K_exact_discrete": ex["K"],
                    "exact_epsilon": ex["epsilon"],
                    "exact_delta": ex["delta"],
                    "K_paper_unrounded": paper["K"],
                    "b_unrounded": paper["b"],
                }
            )
        res: dict[str, Any] = {
            "mode": "solve",
            "epsilon": epsilon,
            "exp_epsilon": math.exp(epsilon),
            "delta": delta,
            "rows": rows,
            "note": "K_paper, b: Lemma 1 setting K = d(1 - ln(2δ/d)/ε), b = d/ε (thesis Table "
            "4.1); K_improved_4_8: §4.8; K_exact_discrete: smallest integer K whose exact "
            "(ε, δ) for discrete Laplace noise of scale b is within the budget (selection step "
            "only; the counts need their own ε).",
        }
    else:
        if K is None or b is None:
            raise InvalidParameterError("K/b", (K, b), "both --K and --b in report mode")
        for d in d_list:
            paper = korolova_paper_privacy(
                d=d, K=K, b=b, b_q=b_q, d_c=d_c or 0, b_c=b_c, distinct=distinct
            )
            exs = exact_threshold_privacy(d=d, K=K, b=b, distinct=distinct)
            extra = (0.0 if b_q is None else d / effective_scale(b_q)) + (
                0.0 if b_c is None or d_c is None else d_c / effective_scale(b_c)
            )
            rows.append(
                {
                    "d": d,
                    "K": K,
                    "b": b,
                    "paper_epsilon": paper["epsilon"],
                    "paper_delta": paper["delta"],
                    "paper_delta_improved_4_8": paper["delta_improved"],
                    "exact_epsilon": exs.epsilon + extra,
                    "exact_delta": exs.delta,
                }
            )
        res = {"mode": "report", "rows": rows}
    if keep_curve is not None:
        if K is None or b is None:
            raise InvalidParameterError("keep-curve", keep_curve, "only with --K and --b")
        cont = keep_probability_curve(threshold=K, scale=b, n_max=keep_curve, noise="continuous")
        disc = keep_probability_curve(threshold=K, scale=b, n_max=keep_curve, noise="discrete")
        res["keep_curve"] = [
            {
                "frequency": c["frequency"],
                "continuous": c["keep_probability"],
                "discrete": x["keep_probability"],
            }
            for c, x in zip(cont, disc, strict=True)
        ]
    return res


def zealous_advice(
    *,
    epsilon: float | None,
    delta: float | None,
    m: int,
    taus: list[int] | None,
    users: int | None,
    lams: list[float] | None,
    tau_primes: list[float] | None,
    guarantee: str,
) -> dict[str, Any]:
    from searchveil.params import (
        zealous_exact_privacy,
        zealous_exact_probabilistic,
        zealous_optimal_tau,
        zealous_tau_prime,
        zealous_theorem2_tau_prime,
        zealous_theorem3_delta,
        zealous_thesis_delta,
    )
    from searchveil.validate import check_choice

    check_choice("guarantee", guarantee, ("probabilistic", "indistinguishability"))
    rows: list[dict[str, Any]] = []
    if lams is None and tau_primes is None:
        if epsilon is None or delta is None:
            raise InvalidParameterError(
                "epsilon/delta", (epsilon, delta), "both (solve mode) or --lambda/--tau-prime"
            )
        if guarantee == "indistinguishability":
            tp = zealous_theorem2_tau_prime(epsilon_prime=epsilon, delta_prime=delta, m=m)
            ex = zealous_exact_privacy(m=m, tau=1, lam=m / epsilon, tau_prime=math.ceil(tp))
            rows.append(
                {"tau": 1, "lambda": m / epsilon, "tau_prime": round(tp, 1),
                 "tau_prime_used": math.ceil(tp), "exact_epsilon": ex.epsilon,
                 "exact_delta": ex.delta, "tau_prime_unrounded": tp}
            )  # fmt: skip
            note = "Theorem 2 corrected: λ = m/ε' (see docs/privacy/zealous.md)"
            return {"mode": "solve", "guarantee": guarantee, "m": m, "rows": rows, "note": note}
        if users is None:
            raise InvalidParameterError(
                "max-users", None, "a public upper bound U on the number of users (Theorem 3)"
            )
        for tau in taus or [zealous_optimal_tau(epsilon=epsilon, m=m)]:
            s = zealous_tau_prime(epsilon=epsilon, delta=delta, m=m, tau=tau, users=users)
            ex = zealous_exact_probabilistic(
                m=m, tau=tau, lam=s["lambda"], tau_prime=math.ceil(s["tau_prime"]), users=users
            )
            rows.append(
                {"tau": tau, "lambda": s["lambda"], "tau_prime": round(s["tau_prime"], 1),
                 "tau_prime_used": math.ceil(s["tau_prime"]), "exact_epsilon": ex.epsilon,
                 "exact_delta": ex.delta, "tau_prime_unrounded": s["tau_prime"]}
            )  # fmt: skip
        return {
            "mode": "solve",
            "guarantee": guarantee,
            "epsilon": epsilon,
            "delta": delta,
            "m": m,
            "users": users,
            "optimal_tau_prop4": zealous_optimal_tau(epsilon=epsilon, m=m),
            "rows": rows,
        }
    if lams is None or tau_primes is None:
        raise InvalidParameterError("lambda/tau-prime", (lams, tau_primes), "both in report mode")
    for tau in taus or [1]:
        for lam in lams:
            for tp in tau_primes:
                row: dict[str, Any] = {"tau": tau, "lambda": lam, "tau_prime": tp}
                row["epsilon_thm3"] = 2 * m / lam
                if users is not None:
                    dl = zealous_theorem3_delta(m=m, tau=tau, lam=lam, tau_prime=tp, users=users)
                    row["delta_thm3"] = dl
                    row["delta_thm3_2sig"] = float(f"{dl:.1e}")
                    exp = zealous_exact_probabilistic(
                        m=m, tau=tau, lam=lam, tau_prime=tp, users=users
                    )
                    row["exact_probabilistic_epsilon"] = exp.epsilon
                    row["exact_probabilistic_delta"] = exp.delta
                dp = zealous_thesis_delta(m=m, tau_prime=tp, lam=lam)
                row["epsilon_prime_printed_2m_over_lambda"] = 2 * m / lam
                row["delta_prime_thesis"] = dp
                row["delta_prime_2sig"] = float(f"{dp:.1e}")
                ex = zealous_exact_privacy(m=m, tau=tau, lam=lam, tau_prime=tp)
                row["exact_dp_epsilon"] = ex.epsilon
                row["exact_dp_delta"] = ex.delta
                rows.append(row)
    return {"mode": "report", "m": m, "users": users, "rows": rows}


def register(app: typer.Typer) -> None:
    par = typer.Typer(help="Parameter advisor (solve parameters or report ε, δ).",
                      no_args_is_help=True)  # fmt: skip
    app.add_typer(par, name="params")

    @par.command("korolova")
    def korolova(
        epsilon: Annotated[float | None, typer.Option("--epsilon", help="ε")] = None,
        exp_epsilon: Annotated[
            float | None, typer.Option("--exp-epsilon", help="e^ε instead of ε")
        ] = None,
        delta: Annotated[float | None, typer.Option("--delta", help="δ")] = None,
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
        json_out: JsonOpt = False,
    ) -> None:
        """Korolova Release-Data: K and b from (ε, δ, d), or (ε, δ) from (K, b, d)."""

        def body() -> None:
            d_list = _ints("max-queries", max_queries) or []
            if not d_list:
                raise InvalidParameterError("max-queries", max_queries, "d >= 1 (or a list)")
            res = korolova_advice(
                epsilon=_epsilon(epsilon, exp_epsilon), delta=delta, d_list=d_list, K=K, b=b,
                b_q=b_q, d_c=max_clicks, b_c=b_c, distinct=distinct_users, keep_curve=keep_curve,
            )  # fmt: skip

            def human(r: dict[str, Any]) -> None:
                _table(r["rows"], f"Korolova Release-Data ({r['mode']})")
                if "note" in r:
                    out_console.print(r["note"])
                if "keep_curve" in r:
                    _table(r["keep_curve"], "keep probability vs count (Fig 4.1)")

            emit(res, json_out, human)

        run(body)

    @par.command("zealous")
    def zealous(
        epsilon: Annotated[float | None, typer.Option("--epsilon", help="ε")] = None,
        delta: Annotated[float | None, typer.Option("--delta", help="δ")] = None,
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

        def body() -> None:
            if max_items is None:
                raise InvalidParameterError("max-items", None, "an integer m >= 1")
            res = zealous_advice(
                epsilon=epsilon, delta=delta, m=max_items, taus=_ints("tau", tau),
                users=max_users, lams=_floats("lambda", lam),
                tau_primes=_floats("tau-prime", tau_prime), guarantee=guarantee,
            )  # fmt: skip
            emit(res, json_out, lambda r: _table(r["rows"], f"ZEALOUS ({r['mode']})"))

        run(body)
