"""Thresholding rounds on the users' item pools, wherever the pools are held — the
selection strategies' steps stated in mechanism terms (docs/privacy/selection.md, "Where the
rounds run").

A :class:`RoundSpec` says, without naming a strategy: each user takes its first ``d`` pool rows
(by rank) whose rank is below ``pool`` and whose item no earlier round released — or, after a
*bias* round, the bias round's own rows whose item's noisy weight there reached the cutoff and
that are still unreleased —; a user with k such rows gives each item the integer weight
``weights[k]``; each item's total weight gets fresh integer noise (``noise``) and the items
whose noisy weight passes ``threshold`` are released. :func:`run_rounds` is the one loop over
the rounds; a :class:`PoolTable` holds the pools and runs one round where they are: in this
process (:class:`~searchveil.mechanisms.rounds.LocalPool`, numpy arrays) or on a cluster (the
Spark engine: per-user weights in the tasks, per-item sums reduced there, noise and threshold
there, the released set broadcast to the next round — only released items reach the caller).

The noise is that of :mod:`searchveil.mechanisms.noisy_counts`: a secure source in every
process, or under a seed the bucket streams of round ``i`` (``bucket_rng(key, i, b)``), the
items of a bucket in their canonical order — so every pool table draws the same noise for the
same item.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import polars as pl

from searchveil.mechanisms.noise import IntegerNoise
from searchveil.mechanisms.noisy_counts import noise_key
from searchveil.rng import RandomSource

__all__ = ["PairSource", "PoolFigures", "PoolTable", "RoundSpec", "run_rounds"]


@dataclass(frozen=True)
class RoundSpec:
    """One thresholding round on the pools (module docstring). ``weights[k]``: the weight of
    each row of a user with k rows this round (``weights[0]`` unused); ``inclusive``: released
    when noisy weight ≥ ``threshold`` (else >); ``cutoff``: this round is a bias round — the
    items whose noisy weight is ≥ ``cutoff`` (an internal value, never published) choose the
    next round's rows; ``after_bias``: this round's rows come from the bias round before it."""

    d: int
    pool: int
    weights: tuple[int, ...]
    noise: IntegerNoise
    threshold: int
    inclusive: bool = True
    cutoff: int | None = None
    after_bias: bool = False


@dataclass(frozen=True)
class PoolFigures:
    """Private report figures of a pool table (never published): its rows, the rows of rank
    below ``d``, its distinct items, the items exactly one user holds among the pools, and the
    rows of rank below ``d`` of those items."""

    rows: int
    rows_first_d: int
    items: int
    single_items: int
    single_first_d: int


class PoolTable(ABC):
    """The users' item pools (rows user, item, rank) where an engine holds them, and what the
    selection needs of them. ``Released`` and ``Rows`` are the table's own handles (a boolean
    mask and row indices in memory; a set of item names and a lazy row set on a cluster)."""

    @abstractmethod
    def nothing(self) -> Any:
        """The empty released set."""

    @abstractmethod
    def round_rows(self, spec: RoundSpec, released: Any, bias: Any) -> Any:
        """The rows of a round (see :class:`RoundSpec`); ``bias``: what :meth:`run_round`
        returned for the bias round (its rows and its items at or above the cutoff)."""

    @abstractmethod
    def run_round(
        self, rows: Any, spec: RoundSpec, step: int, key: int | None, rng: RandomSource
    ) -> tuple[Any, Any, dict[str, int]]:
        """Weights, noise and threshold of one round on ``rows``: (the items it releases,
        what a following round needs when it is a bias round — else None —, figures
        ``user_items``, ``candidates``). Noise: ``key`` None — a secure source (``rng`` here,
        each task its own on a cluster); else the bucket streams of ``step``."""

    @abstractmethod
    def union(self, released: Any, more: Any) -> Any:
        """Both released sets."""

    @abstractmethod
    def size(self, released: Any) -> int:
        """How many items ``released`` holds."""

    @abstractmethod
    def names(self, released: Any) -> pl.Series:
        """The released items' names (column ``item``)."""

    @abstractmethod
    def counts(self, released: Any, d: int) -> pl.DataFrame:
        """``item, count`` for the released items: the number of rows of rank below ``d``
        holding each (0 when none)."""

    @abstractmethod
    def figures(self, d: int) -> PoolFigures:
        """The private report figures of the table (:class:`PoolFigures`)."""

    @abstractmethod
    def collect_pool(self) -> Any:
        """The whole pool in this process (an :class:`~searchveil.mechanisms.rounds.ItemPool`),
        for a strategy that cannot run where the pools are (a sequential one)."""

    def finish(self) -> None:  # noqa: B027 - optional: a cluster table frees what it cached
        """Free what the table holds (a cluster's cached frames); idempotent."""


class PairSource(ABC):
    """The users' clicked (query, url) pools where an engine holds them (rows user, query,
    url, rank), from which a selection takes the pairs of its released queries."""

    @abstractmethod
    def pairs(self, queries: pl.Series) -> PoolTable:
        """The rows whose query is one of ``queries`` (released), each user's re-ranked
        0, 1, … in their order, as a pool table whose item is ``query + PAIR_SEP + url``."""


def run_rounds(
    table: PoolTable, specs: list[RoundSpec], rng: RandomSource
) -> tuple[Any, list[dict[str, int]]]:
    """The rounds in order on ``table``: each round's rows from the released set so far (and
    the bias round's output), its released items added to the set. Returns (the released set,
    per-round figures). Seeded ``rng``: one word of it keys every round's bucket streams."""
    key = noise_key(rng)
    released = table.nothing()
    bias: Any = None
    figures = []
    for i, spec in enumerate(specs):
        rows = table.round_rows(spec, released, bias if spec.after_bias else None)
        new, more, fig = table.run_round(rows, spec, i, key, rng)
        before = table.size(released)
        released = table.union(released, new)
        if spec.cutoff is not None:
            bias = more
        figures.append({"round": i + 1, **fig, "released": table.size(released) - before})
    return released, figures
