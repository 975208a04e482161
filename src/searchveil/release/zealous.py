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

import math
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import numpy as np
import polars as pl

from searchveil.bounding import bound_contributions
from searchveil.engines.contract import NO_RNG, Bounding, BoundingPlan, Item
from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import build_ledger
from searchveil.mechanisms.accounting import Budget, as_budget, check_budget, within_budget
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.model import ITEM_KINDS, SearchLog, items
from searchveil.params import (
    ZEALOUS_GUARANTEES,
    keep_probability,
    zealous_exact_privacy,
    zealous_exact_probabilistic,
    zealous_optimal_tau,
    zealous_tau_prime,
    zealous_theorem2_tau_prime,
    zealous_theorem3_delta,
    zealous_thesis_delta,
)
from searchveil.release.counts import BoundedCounts, count_by
from searchveil.release.histogram import (
    USER_NEIGHBOURS,
    HistogramRelease,
    check_declared_users,
    delta_users_check,
    noisy_counts,
    users_bound_source,
)
from searchveil.release.korolova import exposure_from_counts, single_user_counts
from searchveil.rng import RandomSource
from searchveil.validate import check_choice, check_int, check_positive, check_probability

__all__ = [
    "ZealousParams",
    "release_zealous",
    "release_zealous_counts",
    "zealous_counts",
    "GUARANTEES",
    "PART_COLUMNS",
]

GUARANTEES = ZEALOUS_GUARANTEES
MECHANISM = "zealous"
# the two parts of an item key for clicks and query pairs (model.items uses a TAB inside the key)
PART_COLUMNS = {"clicks": ("query", "url"), "query_pairs": ("query", "next_query")}
ITEM_JOIN = " → "


@dataclass(frozen=True)
class ZealousParams:
    """ZEALOUS parameters and privacy map. ``users`` is the public upper bound U (needed for
    ``guarantee="probabilistic"``)."""

    m: int
    tau: int
    lam: float
    tau_prime: float
    item_type: str
    guarantee: str
    users: int | None = None
    strategy: str = "first"
    #: the (ε, δ) these parameters must meet (set by :meth:`from_budget`, or given with the
    #: direct form to be checked); not a parameter of the mechanism (not in :meth:`to_dict`)
    budget: Budget | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_int("m", self.m, minimum=1)
        check_int("tau", self.tau, minimum=1)
        check_positive("lambda", self.lam)
        check_choice("item_type", self.item_type, ITEM_KINDS)
        check_choice("guarantee", self.guarantee, GUARANTEES)
        check_choice("strategy", self.strategy, ("first", "random"))
        if not isinstance(self.tau_prime, int | float) or self.tau_prime < self.tau:
            raise InvalidParameterError("tau_prime", self.tau_prime, f"a number >= tau={self.tau}")
        if self.guarantee == "probabilistic":
            if self.users is None:
                raise InvalidParameterError(
                    "max_users",
                    None,
                    "a stated public upper bound U on the number of users "
                    "(Theorem 3 needs it; it is never taken from the data)",
                )
            check_int("max_users", self.users, minimum=1)
        if self.guarantee == "indistinguishability" and self.tau != 1:
            raise InvalidParameterError("tau", self.tau, "1 for indistinguishability (Theorem 2)")

    @classmethod
    def from_budget(
        cls,
        *,
        epsilon: float,
        delta: float,
        m: int,
        item_type: str,
        guarantee: str,
        tau: int | None = None,
        users: int | None = None,
        strategy: str = "first",
    ) -> ZealousParams:
        """Solve λ and τ' (Theorem 3; or corrected Theorem 2) for a target (ε, δ).

        ``tau=None`` uses Proposition 4's τ = ⌈2m/ε⌉ (probabilistic) or 1 (Theorem 2)."""
        eps = check_positive("epsilon", epsilon)
        dl = check_probability("delta", delta)
        m = check_int("m", m, minimum=1)
        check_choice("guarantee", guarantee, GUARANTEES)
        if guarantee == "probabilistic":
            if users is None:
                raise InvalidParameterError(
                    "max_users", None, "a stated public upper bound U on the number of users"
                )
            t = zealous_optimal_tau(epsilon=eps, m=m) if tau is None else check_int("tau", tau)
            s = zealous_tau_prime(epsilon=eps, delta=dl, m=m, tau=t, users=users)
            lam, tp = s["lambda"], math.ceil(s["tau_prime"] - 1e-9)
        else:
            if tau not in (None, 1):
                raise InvalidParameterError("tau", tau, "1 for indistinguishability (Theorem 2)")
            t = 1
            lam = m / eps
            tp = math.ceil(
                zealous_theorem2_tau_prime(epsilon_prime=eps, delta_prime=dl, m=m) - 1e-9
            )
        params = cls(
            m=m,
            tau=t,
            lam=lam,
            tau_prime=tp,
            item_type=item_type,
            guarantee=guarantee,
            users=users,
            strategy=strategy,
            budget=Budget(epsilon, delta),
        )
        pr = params.privacy("exact")
        if not (within_budget(pr["epsilon"], eps) and within_budget(pr["delta"], dl)):
            raise InvalidParameterError(
                "epsilon",
                epsilon,
                f"a budget these rules meet (gives ε={pr['epsilon']:.6g}, δ={pr['delta']:.3g})",
            )
        return params

    def privacy(self, accounting: str = "exact") -> dict[str, Any]:
        """(ε, δ) of the chosen guarantee: ``exact`` (discrete, as run) or ``paper``."""
        check_choice("accounting", accounting, ("exact", "paper"))
        if self.guarantee == "probabilistic":
            assert self.users is not None
            if accounting == "exact":
                pr = zealous_exact_probabilistic(
                    m=self.m,
                    tau=self.tau,
                    lam=self.lam,
                    tau_prime=self.tau_prime,
                    users=self.users,
                )
                eps, dl, detail = pr.epsilon, pr.delta, pr.detail
            else:
                lam = self.lam
                ratio_ok = self.tau_prime - self.tau >= -lam * math.log(2 - 2 * math.exp(-1 / lam))
                eps = 2 * self.m / lam if ratio_ok else math.inf
                dl = zealous_theorem3_delta(
                    m=self.m, tau=self.tau, lam=lam, tau_prime=self.tau_prime, users=self.users
                )
                detail = {"theorem": "Götz Theorem 3", "eq5_ratio_condition": ratio_ok}
            notion = (
                "(epsilon, delta)-probabilistic differential privacy "
                "(Götz Thm 3; one user's history replaced; U = max_users)"
            )
        else:
            if accounting == "exact":
                pr = zealous_exact_privacy(
                    m=self.m, tau=self.tau, lam=self.lam, tau_prime=self.tau_prime
                )
                eps, dl, detail = pr.epsilon, pr.delta, pr.detail
            else:
                eps = self.m / self.lam
                dl = zealous_thesis_delta(m=self.m, tau_prime=self.tau_prime, lam=self.lam)
                detail = {
                    "theorem": "Götz Theorem 2 with eq. (1) corrected to λ = m/ε' "
                    "(thesis Theorem 3 with d = m, b = λ, K = τ')"
                }
            notion = (
                "(epsilon, delta)-differential privacy (indistinguishability), "
                "add/remove one user's history"
            )
        event = {
            "step": "noisy_threshold_histogram",
            "mechanism": "zealous",
            "noise": DiscreteLaplace(scale=self.lam).describe(),
            "tau": self.tau,
            "tau_prime": self.tau_prime,
            "max_items_per_user": self.m,
            "epsilon": eps,
            "delta": dl,
        }
        return {
            "accounting": accounting,
            "notion": notion,
            "epsilon": eps,
            "delta": dl,
            "detail": detail,
            "events": [event],
        }

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "budget"}

    def bounding_plan(self) -> BoundingPlan:
        """What an engine keeps for ZEALOUS: the first occurrence of each user's first m
        distinct queries or (query, url) clicks; counted by :func:`zealous_counts` on the row
        plan. Only ``strategy="first"`` and item types queries | clicks run on an engine."""
        if self.strategy != "first":
            raise InvalidParameterError(
                "bounding", self.strategy, "first with --engine polars|spark (random: memory)"
            )
        if self.item_type not in (Item.QUERIES, Item.CLICKS):
            raise InvalidParameterError(
                "item-type", self.item_type, "queries | clicks with --engine polars|spark"
            )
        count = partial(zealous_counts, params=self, rng=NO_RNG)
        return BoundingPlan(Bounding.DISTINCT, Item(self.item_type), self.m, True, count_rows=count)


def zealous_counts(log: SearchLog, params: ZealousParams, *, rng: RandomSource) -> BoundedCounts:
    """Step 1–2 on an in-memory log: each user's m distinct items, counted in distinct users
    (``rng`` only for ``strategy="random"``)."""
    it = items(log, params.item_type)
    bounded = bound_contributions(
        it, max_per_user=params.m, strategy=params.strategy, rng=rng, distinct=True
    )
    parts = list(PART_COLUMNS.get(params.item_type, ()))
    counts = count_by(bounded, ["item", *parts], distinct_users=True)
    figures = {"users": log.n_users, "items": it.height, "items_after_bounding": bounded.height}
    return BoundedCounts(counts={"items": counts}, figures=figures, input=log.ledger_input())


def _check_call(
    params: object, users: int, budget: Budget | tuple[float, float] | None
) -> dict[str, Any]:
    if not isinstance(params, ZealousParams):
        raise InvalidParameterError("params", params, "a ZealousParams")
    # (the message does not state the exact count: it may be logged where the input is not)
    check_declared_users(params.users, users)
    exact = params.privacy("exact")
    check_budget(exact, budget)
    return exact


def release_zealous(
    log: SearchLog,
    params: ZealousParams,
    *,
    rng: RandomSource,
    budget: Budget | tuple[float, float] | None = None,
) -> HistogramRelease:
    """Run ZEALOUS. Table ``items``: ``item, noisy_count`` (+ the two parts for clicks and
    query pairs, whose ``item`` joins them with " → ")."""
    _check_call(params, log.n_users, budget)
    bounded = zealous_counts(log, params, rng=rng)
    parts = list(PART_COLUMNS.get(params.item_type, ()))
    single = single_user_counts(
        items(log, params.item_type), bounded.table("items", ["item", *parts], ordered=False),
        "item",
    )  # fmt: skip
    return release_zealous_counts(bounded, params, rng=rng, budget=budget, single_user=single)


def release_zealous_counts(
    bounded: BoundedCounts,
    params: ZealousParams,
    *,
    rng: RandomSource,
    budget: Budget | tuple[float, float] | None = None,
    single_user: tuple[pl.DataFrame, int] | None = None,
) -> HistogramRelease:
    """``single_user``: :func:`searchveil.release.korolova.single_user_counts` of the log, for
    the exact single-user exposure in the report (without it, an upper bound).

    Steps 3–6 of ZEALOUS on distinct-user item counts already bounded by step 1 (from
    :func:`zealous_counts` or an engine): the one definition of thresholds, noise, accounting
    and ledger."""
    exact = _check_call(params, bounded.users, budget)
    budget = as_budget(budget)
    paper = params.privacy("paper")
    parts = list(PART_COLUMNS.get(params.item_type, ()))
    counts = bounded.table("items", ["item", *parts], ordered=getattr(rng, "seeded", True))
    above_tau = counts.filter(pl.col("count") >= params.tau)
    noisy = noisy_counts(above_tau.get_column("count"), scale=params.lam, rng=rng)
    out = above_tau.with_columns(noisy_count=pl.Series(noisy, dtype=pl.Int64)).filter(
        pl.col("noisy_count") > params.tau_prime
    )
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
        "distinct_items": counts.height,
        "items_count_at_least_tau": above_tau.height,
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
        bounded, "items", key="item", keep=keep, max_single_count=1, delta=exact["delta"],
        users=max(1, params.users if params.users is not None else bounded.users),
        single_user=single_user,
    )  # fmt: skip
    report["single_user"]["delta_check"]["users_bound_source"] = users_bound_source(params.users)
    probabilistic = params.guarantee == "probabilistic"
    ledger = build_ledger(
        mechanism=MECHANISM,
        notion=exact["notion"],
        neighbouring="replace one user's entire history (Götz Theorem 3)"
        if probabilistic
        else USER_NEIGHBOURS,
        epsilon=exact["epsilon"],
        delta=exact["delta"],
        parameters={k: v for k, v in params.to_dict().items() if k != "users"}
        | {
            "lambda_effective": DiscreteLaplace(scale=params.lam).effective_scale,
            "threshold_semantics": "drop count < tau; publish iff count + noise > tau_prime",
            "budget": None if budget is None else budget.to_dict(),
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
    return HistogramRelease(
        tables={"items": table}, report=report, ledger=ledger, inputs=[bounded.input],
        figures={"plan": bounded.plan},
    )  # fmt: skip
