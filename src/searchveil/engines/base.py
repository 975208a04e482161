"""The engine interface (see :mod:`searchveil.engines`)."""

from __future__ import annotations

from typing import Any, Protocol

import polars as pl

AOL_COLUMNS = ("AnonID", "Query", "QueryTime", "ItemRank", "ClickURL")


class Engine(Protocol):
    name: str

    def scan(self, path: str) -> Any:
        """Canonical columns: user, query (normalised), time (text), url (null = no click),
        rank (text), row (file order, increasing)."""

    def events(self, table: Any) -> Any:
        """One row per distinct (user, query, time) with ``row`` = its first row."""

    def first_per_user(
        self, table: Any, n: int, *, order: str = "row", distinct_on: list[str] | None = None
    ) -> Any:
        """The first ``n`` rows per user by ``order``; with ``distinct_on``, first the first
        row of each distinct value of those columns, then the first ``n`` of those."""

    def semi_join(self, table: Any, keys: Any, on: list[str]) -> Any:
        """Rows of ``table`` whose ``on`` columns appear in ``keys``."""

    def union_rows(self, a: Any, b: Any) -> Any:
        """Distinct union of two row selections of the same table (by ``row``)."""

    def filter_clicks(self, table: Any) -> Any:
        """Rows with a clicked URL."""

    def users_with_counts(self, table: Any, key: str, minimum: int) -> Any:
        """Values of ``key`` held by ≥ ``minimum`` distinct users (one column ``key``)."""

    def collect(self, table: Any) -> pl.DataFrame: ...

    def totals(self, table: Any) -> dict[str, int]:
        """rows and users of the whole input."""

    def bounded_counts(self, path: Any, algorithm: str, params: Any) -> Any:
        """Korolova / ZEALOUS: a ``BoundedCounts`` of the file (counts after bounding)."""
