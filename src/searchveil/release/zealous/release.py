"""ZEALOUS: frequent items of a search log with two thresholds (Götz, Machanavajjhala, Wang,
Xiao, Gehrke, "Publishing search logs — a comparative study of privacy guarantees", IEEE TKDE
2012, §4: the algorithm; Theorem 2, (ε', δ')-indistinguishability; Theorem 3, (ε, δ)-probabilistic
differential privacy; Proposition 4, the optimal first threshold τ = ⌈2m/ε⌉).

Steps: (1) each user keeps up to ``m`` distinct items, chosen without looking at other users'
data (``strategy="first"``: the first m distinct in the user's history, or ``"random"``);
(2) item count = number of users holding it; (3) drop counts < τ; (4) add discrete Laplace(λ)
noise; (5) drop noisy counts ≤ τ'; (6) publish the rest with their noisy counts. Item types are
those of :func:`searchveil.model.items`: keywords, queries, clicks, query pairs.

Decisions (``docs/privacy/zealous.md``):

* **U** (Theorem 3 needs the number of users): taken as a *stated public upper bound*
  ``max_users``; it is never read from the data. A log with more users than ``max_users`` is
  refused (the guarantee would not hold).
* **Theorem 2 correction**: as printed, λ ≥ 2m/ε' together with eq. (3) does not bound δ'
  (more noise makes a single user's item *more* likely to cross τ'). Eq. (3) is Korolova's
  threshold for noise b = m/ε' (add/remove one user, d = m), which is what Götz Table 1's δ'
  column uses. We use λ = m/ε', τ = 1, τ' = m(1 - ln(2δ'/m)/ε').
* **Discrete noise**: solved thresholds are rounded up to integers; the reported (ε, δ) is the
  exact accounting for the discrete mechanism run (:func:`searchveil.params.zealous_exact_privacy`
  and :func:`~searchveil.params.zealous_exact_probabilistic`), never larger than the paper's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import build_ledger
from searchveil.mechanisms.accounting import check_budget
from searchveil.mechanisms.budget import PrivacyCost
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.noisy_counts import NoisePlan, NoisyStep
from searchveil.mechanisms.threshold import keep_probability
from searchveil.model import SearchLog, items
from searchveil.release.counts import BoundedCounts
from searchveil.release.histogram import (
    HistogramRelease,
    check_declared_users,
    delta_users_check,
    users_bound_source,
)
from searchveil.release.korolova.release import exposure_from_counts, single_user_counts
from searchveil.release.zealous.params import PART_COLUMNS, ZealousParams, zealous_counts
from searchveil.rng import RandomSource

__all__ = ["release_zealous", "release_zealous_counts", "PART_COLUMNS", "MECHANISM"]

MECHANISM = "zealous"
ITEM_JOIN = " → "


def _check_call(params: object, users: int) -> None:
    if not isinstance(params, ZealousParams):
        raise InvalidParameterError("params", params, "a ZealousParams")
    # (the message does not state the exact count: it may be logged where the input is not)
    check_declared_users(params.users, users)


def release_zealous(
    log: SearchLog, params: ZealousParams, *, rng: RandomSource
) -> HistogramRelease:
    """Run ZEALOUS. Table ``items``: ``item, noisy_count`` (+ the two parts for clicks and
    query pairs, whose ``item`` joins them with " → "). The budget is the one the parameters
    carry (``params.budget``), checked once by :func:`release_zealous_counts`."""
    _check_call(params, log.n_users)
    bounded = zealous_counts(log, params, rng=rng)
    parts = list(PART_COLUMNS.get(params.item_type, ()))
    single = single_user_counts(
        items(log, params.item_type), bounded.table("items", ["item", *parts], ordered=False),
        "item",
    )  # fmt: skip
    return release_zealous_counts(bounded, params, rng=rng, single_user=single)


def _ledger(
    params: ZealousParams,
    cost: PrivacyCost,
    exact: dict[str, Any],
    paper: dict[str, Any],
    rng: RandomSource,
) -> dict[str, Any]:
    """The public ledger of a ZEALOUS run: exact accounting, the paper's beside it."""
    probabilistic = params.guarantee == "probabilistic"
    return build_ledger(
        mechanism=MECHANISM,
        notion=exact["notion"],
        cost=cost,
        parameters={k: v for k, v in params.to_dict().items() if k != "users"}
        | {
            "lambda_effective": DiscreteLaplace(scale=params.lam).effective_scale,
            "threshold_semantics": "drop count < tau; publish iff count + noise > tau_prime",
            "budget": None if params.budget is None else params.budget.to_dict(),
        },
        declared={"max_users": params.users} if params.users is not None else {},
        rng=rng,
        events=exact["events"],
        extra={
            "accounting": "exact: (ε, δ) for the discrete Laplace mechanism as run "
            "(docs/privacy/zealous.md); the paper's formulas under paper_accounting"
            + ("; U is the declared bound declared.max_users" if probabilistic else ""),
            "paper_accounting": {k: v for k, v in paper.items() if k != "events"},
            "reference": "Götz et al., IEEE TKDE 2012, §4, Theorems 2-3, Proposition 4",
            "guarantee": {"delta_vs_users": delta_users_check(exact["delta"], params.users)},
        },
    )


def release_zealous_counts(
    bounded: BoundedCounts,
    params: ZealousParams,
    *,
    rng: RandomSource,
    single_user: tuple[pl.DataFrame, int] | None = None,
) -> HistogramRelease:
    """``single_user``: :func:`searchveil.release.korolova.single_user_counts` of the log, for
    the exact single-user exposure in the report (without it, an upper bound).

    Steps 3–6 of ZEALOUS on distinct-user item counts already bounded by step 1 (from
    :func:`zealous_counts` or an engine): the one definition of thresholds, noise, accounting
    and ledger — and the one budget check of the release: its cost
    (:meth:`ZealousParams.cost`) against ``params.budget``, before any noise is drawn."""
    _check_call(params, bounded.users)
    cost = params.cost()
    check_budget(cost, params.budget, what="release zealous")
    exact = params.privacy("exact")
    paper = params.privacy("paper")
    parts = list(PART_COLUMNS.get(params.item_type, ()))
    # steps 3-5 where the counts are: drop count < τ, add noise, keep noisy count > τ'
    plan = NoisePlan(
        (NoisyStep(DiscreteLaplace(scale=params.lam), threshold=params.tau_prime,
                   publish="noisy_count"),),
        min_count=params.tau, small_counts=1,
    )  # fmt: skip
    got = bounded.release("items", ["item", *parts], plan, rng)
    out, summary = got.rows, got.summary
    if parts:
        out = out.with_columns(item=pl.col(parts[0]) + ITEM_JOIN + pl.col(parts[1]))
    table = out.select("item", *parts, "noisy_count").sort(
        ["noisy_count", "item"], descending=[True, False]
    )
    report = {
        "mechanism": MECHANISM,
        "item_type": params.item_type,
        "users": bounded.users,
        "items": bounded.figures["items"],
        "items_after_bounding": bounded.figures["items_after_bounding"],
        "distinct_items": summary.items,
        "items_count_at_least_tau": summary.at_least_min,
        "items_released": table.height,
        "parameters": params.to_dict(),
        "epsilon": exact["epsilon"],
        "delta": exact["delta"],
        "paper_epsilon": paper["epsilon"],
        "paper_delta": paper["delta"],
        "notion": exact["notion"],
    }
    lam_eff = DiscreteLaplace(scale=params.lam).effective_scale

    def keep(c: Any) -> Any:
        p = keep_probability(c, threshold=params.tau_prime, scale=lam_eff, noise="discrete")
        return np.where(np.asarray(c) >= params.tau, p, 0.0)

    report["single_user"] = exposure_from_counts(
        summary, keep=keep, max_single_count=1, delta=exact["delta"],
        users=max(1, params.users if params.users is not None else bounded.users),
        single_user=single_user,
    )  # fmt: skip
    report["single_user"]["delta_check"]["users_bound_source"] = users_bound_source(params.users)
    ledger = _ledger(params, cost, exact, paper, rng)
    return HistogramRelease(
        tables={"items": table}, report=report, ledger=ledger, inputs=[bounded.input],
        figures={"plan": bounded.plan},
    )  # fmt: skip
