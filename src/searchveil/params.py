"""Privacy maps and the parameter advisor for the histogram releases.

This module holds the *accounting* of Korolova's Release-Data (thesis ch.4, Theorem 3, §4.5,
§4.8) and of ZEALOUS (Götz et al. TKDE 2012, §4, Theorems 2 and 3, Proposition 4), kept apart
from the code that runs the mechanisms (``searchveil.release``) so that any engine (Polars,
Spark) reuses it. Two accountings are offered everywhere:

``paper``
    The papers' formulas, verbatim, for *continuous* Laplace noise. They reproduce the printed
    tables (Korolova Table 4.1; Götz Tables 1 and 2) and are what ``searchveil params`` solves.

``exact``
    The tight (ε, δ) for the mechanism searchveil actually runs: *discrete* Laplace noise
    ``P[X=k] ∝ e^{-|k|/b}`` on integer counts, an integer threshold, and the *effective* noise
    scale the exact sampler uses (the requested scale rounded up to a rational). Derivation in
    ``docs/privacy/korolova.md`` and ``docs/privacy/zealous.md``; checked against brute force on
    neighbouring inputs in the tests. With an integer threshold it is never larger than the
    paper's bound.

Thresholds: a count ``n`` plus noise ``X`` passes threshold ``K`` when ``n + X > K``. With
integer ``n + X`` this is ``X >= floor(K) + 1 - n``; the keep probability of an item with count
``n`` is ``sf(floor(K) + 1 - n)`` of the discrete Laplace.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.threshold import (
    SelectionPrivacy,
    discrete_sf,
    effective_scale,
    exact_threshold_privacy,
    keep_probability,
    keep_probability_curve,
    korolova_alpha,
    korolova_paper_selection,
    korolova_solve_exact,
    korolova_solve_improved,
    korolova_solve_paper,
)
from searchveil.validate import check_choice, check_int, check_positive, check_probability

__all__ = [
    "SelectionPrivacy",
    "korolova_alpha",
    "korolova_paper_selection",
    "korolova_paper_privacy",
    "korolova_solve_paper",
    "korolova_solve_improved",
    "korolova_solve_exact",
    "exact_threshold_privacy",
    "keep_probability",
    "keep_probability_curve",
    "zealous_lambda",
    "zealous_tau_prime",
    "zealous_theorem3_delta",
    "zealous_theorem2_tau_prime",
    "zealous_theorem2_delta",
    "zealous_thesis_delta",
    "zealous_optimal_tau",
    "zealous_exact_privacy",
    "zealous_exact_probabilistic",
    "effective_scale",
    "korolova_advice",
    "zealous_advice",
    "ZEALOUS_GUARANTEES",
    "SINGLE_USER_TARGET",
    "single_user_check",
    "single_user_exposure",
    "solve_delta_single_user",
]


ZEALOUS_GUARANTEES = ("probabilistic", "indistinguishability")

# ----------------------------------------------------------------------------------------------
# δ that protects everyone (issue 12; docs/privacy/delta.md)
# ----------------------------------------------------------------------------------------------

#: the default target of ``searchveil demo``: expected single-user items published ≤ 0.01
SINGLE_USER_TARGET = 0.01


def single_user_check(delta: float, users: int) -> dict[str, Any]:
    """The δ-vs-1/U check, the only part of the single-user analysis that goes in the ledger
    (it reveals nothing beyond the public bound U): ``ok`` is δ < 1/U. δ may be 0 or 1 (the
    exact δ of a release with extreme parameters)."""
    dl = check_probability("delta", delta, open_low=False, open_high=False)
    u = check_int("users", users, minimum=1)
    return {
        "rule": "delta < 1/U (U = users, or --max-users)",
        "users_bound": u,
        "delta": dl,
        "one_over_users": 1.0 / u,
        "recommended_max_delta": 1.0 / (10.0 * u),
        "ok": dl < 1.0 / u,
    }


def single_user_exposure(
    keep: Any, *, delta: float, users: int, single_user_items: int | None = None
) -> dict[str, Any]:
    """Expected number of items held by exactly one user that a release publishes.

    ``keep``: the release probabilities of the items held by exactly one user (from the exact
    keep curve at each item's bounded count; an array, possibly empty). The result holds the
    count of such items, which is itself a statistic of the private data: it is for the data
    holder (command output, report), never for the released tables or the ledger (which gets
    only :func:`single_user_check`). Any (ε, δ)-DP release publishes an item only one user holds
    with probability ≤ δ (without that user it has probability 0), so the expectation is also
    bounded by ``single_user_items · δ`` whatever the mechanism; both figures are returned.
    """
    arr = np.asarray(keep, dtype=np.float64).ravel()
    n = (
        int(arr.size)
        if single_user_items is None
        else check_int("single_user_items", single_user_items, minimum=0)
    )
    chk = single_user_check(delta, users)
    # fsum: correctly rounded, so the figure does not depend on the order of the items (an
    # engine's counts arrive in no fixed order)
    expected = math.fsum(arr.tolist())
    return {
        "single_user_items": n,
        "expected_single_user_published": expected,
        "bound_items_times_delta": n * chk["delta"],
        "delta_check": chk,
        "warning": None
        if chk["ok"]
        else (
            f"δ = {chk['delta']:.3g} ≥ 1/U = {chk['one_over_users']:.3g}: (ε, δ)-DP at this δ "
            "allows publishing items that only one user holds; use δ ≤ 1/(10·U) = "
            f"{chk['recommended_max_delta']:.3g} (docs/privacy/delta.md)"
        ),
        "note": "single_user_items is a statistic of the private data: for the data holder, "
        "never published; the ledger records only the δ < 1/U check",
    }


def solve_delta_single_user(
    *,
    target: float,
    single_user_items: int | None = None,
    users: int | None = None,
    items_per_user: int = 1,
    round_down: bool = True,
) -> dict[str, Any]:
    """The δ for which an (ε, δ)-DP release publishes at most ``target`` items held by one user
    in expectation: δ = target / N, N = ``single_user_items`` when the data holder knows it,
    else the data-independent bound N ≤ U·(items per user) from a public bound U on the users.
    Also δ ≤ 1/(10·U) when U is given. ``round_down``: to a power of ten, so that a published δ
    reveals at most the order of magnitude of N (N is a statistic of the private data)."""
    t = check_positive("target", target)
    k = check_int("items_per_user", items_per_user, minimum=1)
    if single_user_items is None and users is None:
        raise InvalidParameterError(
            "single-user-items/max-users", None, "the count of single-user items or a bound U"
        )
    if single_user_items is not None:
        n = check_int("single_user_items", single_user_items, minimum=0)
        source = "count of single-user items (data holder)"
    else:
        n = check_int("users", users, minimum=1) * k
        source = "bound U × items per user (data-independent)"
    cands = [t / n if n > 0 else 1.0]
    if users is not None:
        cands.append(1.0 / (10.0 * check_int("users", users, minimum=1)))
    raw = min(min(cands), 0.1)
    delta = 10.0 ** math.floor(math.log10(raw) + 1e-9) if round_down else raw
    return {
        "target": t,
        "single_user_items_bound": n,
        "source": source,
        "delta_unrounded": raw,
        "delta": delta,
        "expected_single_user_published_at_most": n * delta,
    }


# ----------------------------------------------------------------------------------------------
# Korolova Release-Data (the threshold step's map lives in searchveil.mechanisms.threshold)
# ----------------------------------------------------------------------------------------------


def korolova_paper_privacy(
    *,
    d: int,
    K: float,
    b: float,
    b_q: float | None,
    d_c: int = 0,
    b_c: float | None = None,
    distinct: bool = False,
) -> dict[str, float]:
    """Theorem 3: ε = d·ln α + d/b_q + d_c/b_c, δ = (d/2)e^{(d-K)/b}; also §4.8's δ.

    ``b_q=None``: Get-Query-Counts skipped; ``b_c=None``: no click counts.
    """
    sel = korolova_paper_selection(d=d, K=K, b=b, distinct=distinct)
    eps_q = 0.0 if b_q is None else d / check_positive("b_q", b_q)
    eps_c = 0.0 if b_c is None else check_int("d_c", d_c, minimum=1) / check_positive("b_c", b_c)
    return {
        "alpha": sel["alpha"],
        "epsilon_select": sel["epsilon"],
        "epsilon_query_counts": eps_q,
        "epsilon_click_counts": eps_c,
        "epsilon": sel["epsilon"] + eps_q + eps_c,
        "delta": sel["delta"],
        "delta_improved": sel["delta_improved"],
    }


# ----------------------------------------------------------------------------------------------
# ZEALOUS (Götz et al. §4)
# ----------------------------------------------------------------------------------------------


def zealous_lambda(*, epsilon: float, m: int) -> float:
    """Theorem 3 eq. (4) (and Theorem 2 eq. (1)): λ = 2m/ε."""
    return 2.0 * check_int("m", m, minimum=1) / check_positive("epsilon", epsilon)


def zealous_tau_prime(
    *, epsilon: float, delta: float, m: int, tau: int, users: int
) -> dict[str, float]:
    """Theorem 3 eq. (5) with equality: τ' = τ + max(-λ ln(2 - 2e^{-1/λ}), -λ ln(2δ/(U·m/τ)))."""
    dl = check_probability("delta", delta)
    tau = check_int("tau", tau, minimum=1)
    users = check_int("users", users, minimum=1)
    lam = zealous_lambda(epsilon=epsilon, m=m)
    t1 = -lam * math.log(2.0 - 2.0 * math.exp(-1.0 / lam))
    t2 = -lam * math.log(2.0 * dl / (users * m / tau))
    return {"lambda": lam, "tau_prime": tau + max(t1, t2), "term_ratio": t1, "term_delta": t2}


def zealous_theorem3_delta(*, m: int, tau: int, lam: float, tau_prime: float, users: int) -> float:
    """δ of Theorem 3 for given parameters: δ = (U·m/τ)/2 · e^{-(τ'-τ)/λ} (eq. (5), 2nd term)."""
    m = check_int("m", m, minimum=1)
    tau = check_int("tau", tau, minimum=1)
    users = check_int("users", users, minimum=1)
    lam = check_positive("lambda", lam)
    return 0.5 * users * m / tau * math.exp(-(tau_prime - tau) / lam)


def zealous_theorem2_tau_prime(*, epsilon_prime: float, delta_prime: float, m: int) -> float:
    """Theorem 2 eq. (3): τ' = m(1 - ln(2δ'/m)/ε') (with τ = 1, λ = 2m/ε')."""
    eps = check_positive("epsilon_prime", epsilon_prime)
    dl = check_probability("delta_prime", delta_prime)
    m = check_int("m", m, minimum=1)
    return m * (1.0 - math.log(2.0 * dl / m) / eps)


def zealous_theorem2_delta(*, m: int, tau_prime: float, epsilon_prime: float) -> float:
    """δ' solving Theorem 2 eq. (3) with equality: δ' = (m/2)·exp(ε'(1 - τ'/m))."""
    m = check_int("m", m, minimum=1)
    return 0.5 * m * math.exp(check_positive("epsilon_prime", epsilon_prime) * (1 - tau_prime / m))


def zealous_thesis_delta(*, m: int, tau_prime: float, lam: float) -> float:
    """δ' of Götz Table 1: the thesis' Theorem 3 δ with d = m, b = λ, K = τ':
    (m/2)e^{(m-τ')/λ} (= :func:`zealous_theorem2_delta` at ε' = m/λ)."""
    return 0.5 * m * math.exp((m - tau_prime) / check_positive("lambda", lam))


def zealous_optimal_tau(*, epsilon: float, m: int) -> int:
    """Proposition 4: τ = ⌈2m/ε⌉ minimises τ'."""
    return math.ceil(2.0 * check_int("m", m, minimum=1) / check_positive("epsilon", epsilon))


def _zealous_pi(tau: int, lam_eff: float, tau_prime: float) -> float:
    """P[τ + X > τ'] for the discrete Laplace (an item whose count is exactly τ)."""
    return float(discrete_sf(math.floor(tau_prime) + 1 - tau, lam_eff))


def zealous_exact_privacy(
    *, m: int, tau: int, lam: float, tau_prime: float, scale_is_effective: bool = False
) -> SelectionPrivacy:
    """Exact (ε, δ)-DP of ZEALOUS with discrete noise, add/remove one user.

    A user changes at most m item counts by exactly 1. An item whose count moves inside
    [τ, ∞) releases a noisy count with ratio <= e^{1/λ} (the threshold τ' is post-processing);
    an item that moves from τ-1 to τ is released only with the user, with probability
    π = P[τ + X > τ'], and is dropped with ratio 1/(1-π). Hence
    ε = m·max(1/λ, -ln(1-π)),  δ = 1 - (1-π)^m.
    """
    m = check_int("m", m, minimum=1)
    tau = check_int("tau", tau, minimum=1)
    lam = check_positive("lambda", lam)
    if tau_prime < tau:
        raise InvalidParameterError("tau_prime", tau_prime, f">= tau = {tau}")
    lam_eff = lam if scale_is_effective else effective_scale(lam)
    pi = _zealous_pi(tau, lam_eff, tau_prime)
    h = max(1.0 / lam_eff, -math.log1p(-pi))
    return SelectionPrivacy(
        epsilon=m * h,
        delta=float(-math.expm1(m * math.log1p(-pi))),
        accounting="exact",
        detail={
            "noise": "discrete_laplace",
            "effective_scale": lam_eff,
            "keep_prob_count_tau": pi,
            "neighbours": "add/remove one user",
        },
    )


def zealous_exact_probabilistic(
    *, m: int, tau: int, lam: float, tau_prime: float, users: int, scale_is_effective: bool = False
) -> SelectionPrivacy:
    """Theorem 3's (ε, δ)-probabilistic DP for the discrete mechanism, in the paper's setting
    (a user's history *replaced*, so up to 2m counts change by 1; at most U·m/τ items have
    count exactly τ): ε = 2m·max(1/λ, -ln(1-π)), δ = 1 - (1-π)^{⌊U·m/τ⌋}, π = P[τ+X > τ']."""
    m = check_int("m", m, minimum=1)
    tau = check_int("tau", tau, minimum=1)
    users = check_int("users", users, minimum=1)
    lam = check_positive("lambda", lam)
    if tau_prime < tau:
        raise InvalidParameterError("tau_prime", tau_prime, f">= tau = {tau}")
    lam_eff = lam if scale_is_effective else effective_scale(lam)
    pi = _zealous_pi(tau, lam_eff, tau_prime)
    n_k = (users * m) // tau
    return SelectionPrivacy(
        epsilon=2 * m * max(1.0 / lam_eff, -math.log1p(-pi)),
        delta=float(-math.expm1(n_k * math.log1p(-pi))),
        accounting="exact",
        detail={
            "noise": "discrete_laplace",
            "effective_scale": lam_eff,
            "keep_prob_count_tau": pi,
            "items_at_tau_bound": n_k,
            "neighbours": "one user's history replaced (Götz Thm 3)",
        },
    )


# ----------------------------------------------------------------------------------------------
# The advisor (``searchveil params``): tables of solved parameters or reported (ε, δ)
# ----------------------------------------------------------------------------------------------


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
    rows: list[dict[str, Any]] = []
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
            _single_user_columns(rows[-1], d=d, K=K, b=b, distinct=distinct,
                                 single_user_items=single_user_items, users=users)  # fmt: skip
        res = {"mode": "report", "rows": rows}
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

    check_choice("guarantee", guarantee, ZEALOUS_GUARANTEES)
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
