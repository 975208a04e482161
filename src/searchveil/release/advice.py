"""The parameter advisor (``searchveil params korolova|zealous``): tables of solved parameters
for a target (ε, δ), or the (ε, δ) of given parameters, under both accountings (the papers'
formulas for continuous noise, and the exact map of the discrete mechanism searchveil runs),
with the single-user figures of :mod:`searchveil.params`.

It reads each family's own accounting (:mod:`searchveil.release.korolova.accounting`,
:mod:`searchveil.release.zealous.accounting`) and the mechanism-generic threshold map
(:mod:`searchveil.mechanisms.threshold`).
"""

from __future__ import annotations

import math
from typing import Any

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.threshold import (
    effective_scale,
    exact_threshold_privacy,
    keep_probability_curve,
    korolova_solve_exact,
)
from searchveil.params import single_user_check, solve_delta_single_user
from searchveil.release.korolova.accounting import (
    korolova_paper_privacy,
    korolova_solve_improved,
    korolova_solve_paper,
)
from searchveil.release.zealous.accounting import (
    # the formulas zealous/params.py solves with: the advisor tabulates them side by side
    Guarantee,
    zealous_exact_privacy,
    zealous_exact_probabilistic,
    zealous_optimal_tau,
    zealous_tau_prime,
    zealous_theorem2_tau_prime,
    zealous_theorem3_delta,
    zealous_thesis_delta,
)
from searchveil.validate import check_int, parse_choice

__all__ = ["korolova_advice", "zealous_advice"]


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
    users: int | None = None,
    single_user_items: int | None = None,
    max_single_user_items: float | None = None,
) -> dict[str, Any]:
    """``searchveil params korolova``. Besides K and b, every row shows the expected number of
    single-user queries published for ``single_user_items`` such queries (each kept with the
    exact probability of a query one user posed ``d`` times, the worst case), and the δ < 1/U
    check when ``users`` (a public bound U) is given. ``max_single_user_items``: solve δ
    (:func:`solve_delta_single_user`) instead of taking ``delta``."""
    solved: dict[str, Any] | None = None
    if max_single_user_items is not None:
        if delta is not None:
            raise InvalidParameterError(
                "delta", delta, "unset when --max-single-user-items is given (δ is solved)"
            )
        solved = solve_delta_single_user(
            target=max_single_user_items, single_user_items=single_user_items, users=users,
            items_per_user=max(d_list),
        )  # fmt: skip
        delta = solved["delta"]
    if K is None and b is None:
        res = _korolova_solve(epsilon, delta, d_list, distinct, single_user_items, users)
    else:
        res = _korolova_report(d_list, K, b, b_q, d_c, b_c, distinct, single_user_items, users)
    rows = res["rows"]
    if solved is not None:
        res["delta_solved"] = solved
    bad = [r["d"] for r in rows if r.get("delta_lt_1_over_U") is False]
    if bad:
        res["warnings"] = [
            f"d = {','.join(map(str, bad))}: δ ≥ 1/U = {1.0 / (users or 1):.3g}: (ε, δ)-DP at "
            "this δ allows publishing queries only one user posed; use δ ≤ 1/(10·U) "
            "(docs/privacy/delta.md)"
        ]
    if keep_curve is not None:
        if K is None or b is None:
            raise InvalidParameterError("keep-curve", keep_curve, "only with --K and --b")
        res["keep_curve"] = _keep_curve(K, b, keep_curve)
    return res


def _korolova_solve(
    epsilon: float | None, delta: float | None, d_list: list[int], distinct: bool,
    single_user_items: int | None, users: int | None,
) -> dict[str, Any]:  # fmt: skip
    """Solve mode: K and b for the target (ε, δ), per d, under the three accountings."""
    rows: list[dict[str, Any]] = []
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
        _single_user_columns(rows[-1], d=d, K=ex["K"], b=ex["b"], distinct=distinct,
                             single_user_items=single_user_items, users=users)  # fmt: skip
    return {
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


def _korolova_report(
    d_list: list[int], K: float | None, b: float | None, b_q: float | None, d_c: int | None,
    b_c: float | None, distinct: bool, single_user_items: int | None, users: int | None,
) -> dict[str, Any]:  # fmt: skip
    """Report mode: the (ε, δ) of the given K and b, per d, paper's and exact."""
    rows: list[dict[str, Any]] = []
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
        _single_user_columns(rows[-1], d=d, K=K, b=b, distinct=distinct,
                             single_user_items=single_user_items, users=users)  # fmt: skip
    return {"mode": "report", "rows": rows}


def _keep_curve(K: float, b: float, n_max: int) -> list[dict[str, Any]]:
    """The keep probability per frequency, continuous and discrete noise."""
    cont = keep_probability_curve(threshold=K, scale=b, n_max=n_max, noise="continuous")
    disc = keep_probability_curve(threshold=K, scale=b, n_max=n_max, noise="discrete")
    return [
        {
            "frequency": c["frequency"],
            "continuous": c["keep_probability"],
            "discrete": x["keep_probability"],
        }
        for c, x in zip(cont, disc, strict=True)
    ]


def _single_user_columns(
    row: dict[str, Any],
    *,
    d: int,
    K: float,
    b: float,
    distinct: bool,
    single_user_items: int | None,
    users: int | None,
) -> None:
    """Add the single-user figures to an advisor row (in place)."""
    pr = exact_threshold_privacy(d=d, K=K, b=b, distinct=distinct)
    pi = float(pr.detail["keep_prob_single_user_query"])
    row["keep_prob_single_user_query"] = pi
    if single_user_items is not None:
        n = check_int("single_user_items", single_user_items, minimum=0)
        row["expected_single_user_published"] = n * pi
    if users is not None:
        chk = single_user_check(pr.delta, users)
        row["delta_lt_1_over_U"] = chk["ok"]


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

    guarantee = parse_choice("guarantee", guarantee, Guarantee)
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
