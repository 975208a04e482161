"""The engine interface (see :mod:`searchveil.engines`): the few dataframe operations the row
plan of k-anonymity needs (:mod:`searchveil.engines.rows`) and the three entry points a release
asks for —
bounded counts, item pools, reduced rows — each given a
:class:`~searchveil.engines.contract.BoundingPlan` (never a family's parameters).

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

from searchveil.engines.contract import BoundedCounts, BoundingPlan, Source, UserItemPools
from searchveil.io.readers import AOL_COLUMNS
from searchveil.model import SearchLog

__all__ = ["AOL_COLUMNS", "Engine", "ReducedRows", "Table"]

#: an engine's lazy table (engine-specific; opaque to the plans)
Table = Any


@dataclass
class ReducedRows:
    """The rows a plan keeps (:attr:`~searchveil.engines.contract.Bounding.SHARED`), as a log,
    with the whole input's totals and private input record."""

    log: SearchLog
    rows: int  # rows of the whole input
    users: int  # users of the whole input
    input: dict[str, Any]  # the private input record of the whole file


class Engine(ABC):
    """A dataframe engine: the row plan's operations plus the bounded counts."""

    name: str = ""

    @abstractmethod
    def scan(self, source: Source | str | Path) -> Table:
        """Canonical columns: user, query (normalised), time (text), url (null = no click),
        rank (text), row (file order, increasing)."""

    @abstractmethod
    def with_sessions(self, table: Table, gap_minutes: float = 30.0) -> Table:
        """``session`` as in :func:`searchveil.model.add_sessions`, on the whole input."""

    @abstractmethod
    def semi_join(self, table: Table, keys: Table, on: list[str]) -> Table:
        """Rows of ``table`` whose ``on`` columns appear in ``keys``."""

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
    def bounded_counts(self, source: Source | Path, plan: BoundingPlan) -> BoundedCounts:
        """Histogram releases (``plan.keep`` events or distinct): the counts of the file after
        contribution bounding."""

    @abstractmethod
    def item_pools(self, source: Source | Path, plan: BoundingPlan) -> UserItemPools:
        """Selection strategies (``plan.keep`` pools): each user's first distinct queries (and
        clicked pairs) as rows."""

    @abstractmethod
    def rows(self, source: Source | Path, plan: BoundingPlan) -> ReducedRows:
        """The rows the row plan keeps (``plan.keep`` shared), as a log."""

    @abstractmethod
    def describe(self) -> dict[str, Any]:
        """What the provenance record keeps of the engine (name, version, plan)."""

    def driver_rows(self) -> dict[str, int] | None:
        """The rows the driver received for the last release, by phase, when the engine runs
        elsewhere (a cluster); None when it runs in this process."""
        return None

    def finish(self) -> None:  # noqa: B027 - optional: an engine that caches data frees it
        """Free what the last release left cached where the engine runs (idempotent)."""
