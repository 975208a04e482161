"""The parameters of ZEALOUS (:class:`ZealousParams`: solved from a budget or given directly,
with their privacy map) and the contribution bounding they define (:func:`zealous_counts`,
step 1: each user's first m distinct items, a data-independent choice).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import polars as pl

from searchveil.bounding import BoundingStrategy, Stream, bound_contributions, bound_log
from searchveil.engines.contract import BoundedCounts, Bounding, BoundingPlan, Item
from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.accounting import Accounting, Budget, within_budget
from searchveil.mechanisms.budget import PrivacyCost, Relation
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.model import PAIR_SEP, ItemKind, SearchLog, items
from searchveil.release.counts import count_by
from searchveil.release.zealous.accounting import (
    Guarantee,
    zealous_exact_privacy,
    zealous_exact_probabilistic,
    zealous_optimal_tau,
    zealous_tau_prime,
    zealous_theorem2_tau_prime,
    zealous_theorem3_delta,
    zealous_thesis_delta,
)
from searchveil.rng import RandomSource
from searchveil.validate import check_int, check_positive, check_probability, parse_choice

__all__ = ["ZealousParams", "ZealousItem", "zealous_counts", "PART_COLUMNS"]


#: the items ZEALOUS counts (``--item-type``): the log's item kinds, one enum
#: (:class:`searchveil.model.ItemKind`; this name is what callers of ZEALOUS spell)
ZealousItem = ItemKind

# the two parts of an item key for clicks and query pairs (model.items uses a TAB inside the key)
PART_COLUMNS = {"clicks": ("query", "url"), "query_pairs": ("query", "next_query")}


@dataclass(frozen=True)
class ZealousParams:
    """ZEALOUS parameters and privacy map. ``users`` is the public upper bound U (needed for
    ``guarantee="probabilistic"``)."""

    m: int
    tau: int
    lam: float
    tau_prime: float
    item_type: ZealousItem | str  # (members once constructed)
    guarantee: Guarantee | str
    users: int | None = None
    strategy: BoundingStrategy | str = "first"
    #: the (ε, δ) these parameters must meet (set by :meth:`from_budget`, or given with the
    #: direct form to be checked); not a parameter of the mechanism (not in :meth:`to_dict`)
    budget: Budget | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_int("m", self.m, minimum=1)
        check_int("tau", self.tau, minimum=1)
        check_positive("lambda", self.lam)
        object.__setattr__(
            self, "item_type", parse_choice("item_type", self.item_type, ZealousItem)
        )
        object.__setattr__(self, "guarantee", parse_choice("guarantee", self.guarantee, Guarantee))
        strategy = parse_choice("strategy", self.strategy, BoundingStrategy)
        object.__setattr__(self, "strategy", strategy)
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
        guarantee = parse_choice("guarantee", guarantee, Guarantee)
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
        # built like KorolovaParams.from_budget on purpose: solve, construct, check the budget
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
        accounting = parse_choice("accounting", accounting, Accounting)
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

    def cost(self) -> PrivacyCost:
        """What the release spends (the exact accounting): user-level for indistinguishability,
        replace-one-user for the probabilistic guarantee (Götz Theorem 3)."""
        exact = self.privacy("exact")
        relation = Relation.USER_REPLACE if self.guarantee == "probabilistic" else Relation.USER
        return PrivacyCost.from_events(
            relation, exact["events"], epsilon=exact["epsilon"], delta=exact["delta"]
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "budget"}

    def bounding_plan(self) -> BoundingPlan:
        """What an engine keeps for ZEALOUS: the first occurrence of each user's first m
        distinct queries or (query, url) clicks: the bounding kernel's rules
        (``kernel_spec()``), here and on every engine. Only ``strategy="first"`` and item
        types queries | clicks run on an engine."""
        if self.strategy != "first":
            raise InvalidParameterError(
                "bounding", self.strategy, "first with --engine polars|spark (random: memory)"
            )
        if self.item_type not in (Item.QUERIES, Item.CLICKS):
            raise InvalidParameterError(
                "item-type", self.item_type, "queries | clicks with --engine polars|spark"
            )
        return BoundingPlan(Bounding.DISTINCT, Item(self.item_type), self.m, True)


def zealous_counts(log: SearchLog, params: ZealousParams, *, rng: RandomSource) -> BoundedCounts:
    """Step 1–2 on an in-memory log: each user's m distinct items, counted in distinct users.
    Queries and clicks with ``strategy="first"`` run the bounding kernel
    (:func:`~searchveil.bounding.bound_log`, the engines' own); keywords and query pairs keep
    their first m distinct items with :func:`~searchveil.bounding.bound_contributions` (the
    kernel's rule on the item rows); ``"random"`` draws from ``rng``."""
    parts = list(PART_COLUMNS.get(params.item_type, ()))
    if params.strategy == "first" and params.item_type in (Item.QUERIES, Item.CLICKS):
        kept, fig = bound_log(log.df, params.bounding_plan().kernel_spec())
        if params.item_type == Item.QUERIES:
            bounded = kept[Stream.EVENTS].with_columns(item=pl.col("query"))
            n_items = fig["events"]
        else:
            bounded = kept[Stream.CLICKS].with_columns(
                item=pl.col("query") + PAIR_SEP + pl.col("url")
            )
            n_items = fig["clicks"]
        users = fig["users"]
    else:
        it = items(log, params.item_type)
        bounded = bound_contributions(
            it, max_per_user=params.m, strategy=params.strategy, rng=rng, distinct=True
        )
        n_items, users = it.height, log.n_users
    counts = count_by(bounded, ["item", *parts], distinct_users=True)
    figures = {"users": users, "items": n_items, "items_after_bounding": bounded.height}
    return BoundedCounts(counts={"items": counts}, figures=figures, input=log.ledger_input())
