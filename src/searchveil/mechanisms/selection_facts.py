"""What a selection strategy states about itself — the one place a strategy's facts live.

Every selection strategy (:mod:`searchveil.mechanisms.selection`'s registry) is a class with a
``FACTS`` class attribute and a ``for_budget(*, epsilon, delta, d)`` constructor, the way
PipelineDP's ``PartitionSelectionStrategy`` names a strategy and a factory builds it for a
budget. The release, the d-curves, the demo, the reports and the CLI read these facts instead of
keeping their own tables of strategy names: adding a strategy touches its module, its test, its
doc page and one entry of the registry (CONTRIBUTING.md, "Adding a selection strategy").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Accounting", "DefaultD", "StrategyFacts", "Units"]


class Units(StrEnum):
    """What a user contributes to an item's score, and so how a strategy's d-curve is drawn."""

    #: distinct-user counts (a user adds 1 to each of its ≤ d items): the keep probability of an
    #: item is a function of its count, so the d-curve is an exact expectation
    COUNTS = "distinct-user counts"
    #: ℓ2-weighted: a user spreads a unit ℓ2 budget over its items (the weights depend on the
    #: other users): the d-curve is one simulated run
    L2_WEIGHT = "l2 weight"


class DefaultD(StrEnum):
    """The data-independent rule that picks d when the user gives none
    (:func:`searchveil.mechanisms.selection.default_d`; docs/privacy/selection.md)."""

    ONE = "one"  # d = 1 (a threshold that grows linearly in d)
    COUNTS = "counts"  # maximise E[min(K, d)] / τ(ε, δ, d) over the public reference sample
    L2_WEIGHTED = "l2-weighted"  # maximise E[min(1, d/K)/√min(K, d)] / ρ(ε, δ, d)


class Accounting(StrEnum):
    """How the strategy's (ε, δ) is computed; a ``ZCDP`` strategy's ledger part carries its ρ
    (and composes with other zCDP parts of a budget, docs/privacy/budget.md)."""

    EXACT = "exact (ε, δ)"  # the exact discrete map of the threshold
    ANALYTIC = "analytic Gaussian (ε, δ)"  # Balle & Wang's σ, Gopi et al.'s threshold
    ZCDP = "zCDP over rounds"  # ρ summed over rounds, then (ε, δ) + unique items


@dataclass(frozen=True)
class StrategyFacts:
    """A selection strategy's public facts.

    ``name``: its ``--selection`` spelling (and the ledger's ``strategy``); ``label`` and
    ``short_label``: what reports and plots call it; ``rounds``: thresholding rounds (a
    strategy with more than one takes each user's first ``POOL_FACTOR``·d distinct items as
    candidates, :data:`searchveil.mechanisms.rounds.POOL_FACTOR`); ``units``, ``default_d``,
    ``accounting``: see those enums; ``single_user_exact``: whether the probability that an
    item held by one user is released, ``keep_probability(1)``, is exact (else an upper bound);
    ``aliases``: deprecated spellings still accepted, mapped to ``name`` (a release's ledger
    shows ``name``)."""

    name: str
    label: str
    short_label: str
    rounds: int
    units: Units
    default_d: DefaultD
    accounting: Accounting
    single_user_exact: bool = True
    aliases: tuple[str, ...] = ()

    @property
    def simulated_curve(self) -> bool:
        """The d-curve is one simulated run (ℓ2 weights), not an exact expectation."""
        return self.units is Units.L2_WEIGHT
