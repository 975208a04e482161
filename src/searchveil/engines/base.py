"""The engine interface (see :mod:`searchveil.engines`): the few dataframe operations the row
plan needs (:mod:`searchveil.engines.rows`) and the bounded counts of the histogram releases.

:class:`Engine` is an abstract base class: :class:`~searchveil.engines.polars.PolarsEngine` and
:class:`~searchveil.engines.spark.SparkEngine` subclass it and the plans are typed against it.
A *table* is the engine's own lazy frame (a Polars ``LazyFrame``, a Spark ``DataFrame``); the
plans never look inside one, they only pass it back to the engine (hence ``Table = Any``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from searchveil.io.readers import AOL_COLUMNS
from searchveil.release.counts import BoundedCounts
from searchveil.release.kanonymity import KAnonParams
from searchveil.release.korolova import KorolovaParams
from searchveil.release.select import UserItemPools
from searchveil.release.zealous import ZealousParams

__all__ = ["AOL_COLUMNS", "Engine", "PlanParams", "HistogramParams", "BoundingPlan", "Table"]

#: an engine's lazy table (engine-specific; opaque to the plans)
Table = Any
#: the parameters of the releases whose bounding runs on an engine
HistogramParams = KorolovaParams | ZealousParams
PlanParams = KorolovaParams | ZealousParams | KAnonParams


@dataclass(frozen=True)
class BoundingPlan:
    """What an engine needs of a histogram release's parameters to bound contributions.

    ``item``: the counted items (``queries``, or ``clicks`` for ZEALOUS click items);
    ``per_user``: d (Korolova, query events) or m (ZEALOUS, distinct items); ``distinct``: the
    first *distinct* items are kept (ZEALOUS; Korolova with distinct-user counts);
    ``clicks_per_user``: Korolova's d_c when click counts are released, else ``None``.
    """

    algorithm: str
    item: str
    per_user: int
    distinct: bool
    clicks_per_user: int | None = None

    @classmethod
    def for_pools(cls, queries: int, clicks: int | None = None) -> BoundingPlan:
        """Selection strategies (issue 24): each user's first ``queries`` distinct queries and
        first ``clicks`` distinct clicked (query, url) pairs, as rows."""
        return cls("select", "queries", queries, True, clicks)

    @classmethod
    def of(cls, params: HistogramParams) -> BoundingPlan:
        if isinstance(params, KorolovaParams):
            clicks = params.d_c if params.url_selection != "none" else None
            return cls("korolova", "queries", params.d, params.distinct, clicks)
        return cls("zealous", params.item_type, params.m, True)


class Engine(ABC):
    """A dataframe engine: the row plan's operations plus the bounded counts."""

    name: str = ""

    @abstractmethod
    def scan(self, path: str) -> Table:
        """Canonical columns: user, query (normalised), time (text), url (null = no click),
        rank (text), row (file order, increasing)."""

    @abstractmethod
    def with_sessions(self, table: Table, gap_minutes: float = 30.0) -> Table:
        """``session`` as in :func:`searchveil.model.add_sessions`, on the whole input."""

    @abstractmethod
    def events(self, table: Table) -> Table:
        """One row per distinct (user, query, time) with ``row`` = its first row."""

    @abstractmethod
    def first_per_user(
        self, table: Table, n: int, *, order: str = "row", distinct_on: list[str] | None = None
    ) -> Table:
        """The first ``n`` rows per user by ``order``; with ``distinct_on``, first the first
        row of each distinct value of those columns, then the first ``n`` of those."""

    @abstractmethod
    def semi_join(self, table: Table, keys: Table, on: list[str]) -> Table:
        """Rows of ``table`` whose ``on`` columns appear in ``keys``."""

    @abstractmethod
    def union_rows(self, a: Table, b: Table) -> Table:
        """Distinct union of two row selections of the same table (by ``row``)."""

    @abstractmethod
    def filter_clicks(self, table: Table) -> Table:
        """Rows with a clicked URL."""

    @abstractmethod
    def users_with_counts(self, table: Table, key: str, minimum: int) -> Table:
        """Values of ``key`` held by ≥ ``minimum`` distinct users (one column ``key``)."""

    @abstractmethod
    def collect(self, table: Table) -> pl.DataFrame:
        """The table's rows on the driver, as a Polars frame."""

    @abstractmethod
    def totals(self, table: Table) -> dict[str, int]:
        """``rows`` and ``users`` of the whole input."""

    def collect_with_totals(self, plan: Table, table: Table) -> tuple[pl.DataFrame, dict[str, int]]:
        """The reduced rows of ``plan`` and the totals of ``table``; engines that can share
        one scan for both override this (the default runs two queries)."""
        return self.collect(plan), self.totals(table)

    @abstractmethod
    def bounded_counts(self, path: Path, algorithm: str, params: HistogramParams) -> BoundedCounts:
        """Korolova / ZEALOUS: the counts of the file after contribution bounding."""

    @abstractmethod
    def item_pools(self, path: Path, plan: BoundingPlan) -> UserItemPools:
        """Selection strategies: each user's first distinct queries (and clicked pairs) as rows
        (:class:`~searchveil.release.select.UserItemPools`), ``plan`` from
        :meth:`BoundingPlan.for_pools`."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What the provenance record keeps of the engine (name, version, plan)."""
