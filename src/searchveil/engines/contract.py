"""The contract between the release families and the engines (the backends).

A family's parameters say *what* each user may contribute as a :class:`BoundingPlan`
(``params.bounding_plan()``); an engine (:class:`~searchveil.engines.base.Engine`) does the
data-size-dependent work for it and returns :class:`BoundedCounts` (histogram releases),
:class:`UserItemPools` (selection strategies) or reduced rows (k-anonymity). The engines never
see a family's parameters or name an algorithm: a plan is stated in bounding terms only
(:class:`Bounding`), and every engine runs it as the rules of the one bounding kernel
(:meth:`BoundingPlan.kernel_spec`, :mod:`searchveil.bounding`).

:class:`Source` is an input file whose layout was detected once
(:func:`searchveil.io.formats.layout`, by content).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import polars as pl

from searchveil.bounding import KernelSpec, Rule
from searchveil.errors import InvalidParameterError
from searchveil.io.formats import Layout, layout
from searchveil.mechanisms.noisy_counts import (
    CountSummary,
    NoisePlan,
    NoisyCounts,
    apply_plan_local,
)
from searchveil.mechanisms.pool_rounds import PairSource, PoolTable
from searchveil.rng import RandomSource

__all__ = [
    "Bounding",
    "BoundingPlan",
    "BoundedCounts",
    "CountTable",
    "Item",
    "LocalCounts",
    "NO_RNG",
    "Source",
    "TableSource",
    "UserItemPools",
]


class Bounding(StrEnum):
    """What a user keeps, in bounding terms.

    ``events``: the first ``per_user`` query events (with ``distinct``, the first ``per_user``
    distinct queries) and, when ``clicks_per_user`` is set, the first ``clicks_per_user`` click
    rows; counted per query (and per (query, url)). ``distinct``: the first occurrence of each
    of the first ``per_user`` distinct items; counted per item. ``pools``: the first
    ``per_user`` distinct queries (and ``clicks_per_user`` distinct clicked pairs) as rows.
    ``shared``: the rows of the queries held by at least ``per_user`` distinct users.
    """

    EVENTS = "events"
    DISTINCT = "distinct"
    POOLS = "pools"
    SHARED = "shared"


class Item(StrEnum):
    """The items an engine can bound and count."""

    QUERIES = "queries"
    CLICKS = "clicks"


@dataclass(frozen=True)
class BoundingPlan:
    """What an engine needs to bound contributions (given by the family's parameters)."""

    keep: Bounding
    item: Item
    per_user: int
    distinct: bool = False
    clicks_per_user: int | None = None

    @property
    def with_url(self) -> bool:
        """Whether the plan reads the clicked URL."""
        if self.keep in (Bounding.EVENTS, Bounding.POOLS):
            return self.clicks_per_user is not None
        return self.item == Item.CLICKS

    def kernel_spec(self, *, normalize: bool = False) -> KernelSpec:
        """The plan as the bounding kernel's rules (:mod:`searchveil.bounding`): what every
        engine, and the in-memory release, runs. ``normalize``: the rows' queries are raw
        text (the engines) rather than normalised by a reader (in memory)."""
        d_c = self.clicks_per_user
        if self.keep == Bounding.EVENTS:
            clicks = None if d_c is None else Rule(d_c)
            return KernelSpec(Rule(self.per_user, self.distinct), clicks, normalize)
        if self.keep == Bounding.DISTINCT:
            rule = Rule(self.per_user, True)
            if self.item == Item.CLICKS:
                return KernelSpec(None, rule, normalize)
            return KernelSpec(rule, None, normalize)
        if self.keep == Bounding.POOLS:
            clicks = None if d_c is None else Rule(d_c, True)
            return KernelSpec(Rule(self.per_user, True), clicks, normalize)
        raise InvalidParameterError("bounding plan", self.keep, "events | distinct | pools")


@dataclass(frozen=True)
class Source:
    """An input file and its layout, detected once (by content)."""

    path: Path
    layout: Layout

    @classmethod
    def of(cls, path: str | os.PathLike[str] | Source) -> Source:
        if isinstance(path, Source):
            return path
        if isinstance(path, TableSource):
            raise InvalidParameterError(
                "input", path.label, "a log file (a table is read by --engine spark only)"
            )
        return cls(Path(path), layout(path))

    @property
    def parquet(self) -> bool:
        return self.layout == Layout.PARQUET


@dataclass(frozen=True)
class TableSource:
    """A table an engine reads itself instead of a file: a catalog table by ``name`` (Spark:
    ``spark.table(name)``), or a Spark DataFrame (``frame``, opaque here), with the columns that
    hold the AOL layout's fields (``columns``: AOL name → the table's column; unnamed fields
    are the AOL names)."""

    name: str | None = None
    frame: Any = field(default=None, compare=False, repr=False)
    columns: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        return self.name if self.name is not None else "a Spark DataFrame"

    def column(self, aol_name: str) -> str:
        return dict(self.columns).get(aol_name, aol_name)


class CountTable(ABC):
    """A table of counts (key columns + ``count``) where an engine holds it — in this process
    (:class:`LocalCounts`) or on a cluster — and the one operation a release asks of it:
    :meth:`release`, a :class:`~searchveil.mechanisms.noisy_counts.NoisePlan` run where the
    counts are, returning only the rows that pass (and private summary figures)."""

    keys: list[str]

    @abstractmethod
    def release(
        self,
        plan: NoisePlan,
        rng: RandomSource,
        *,
        within: tuple[str, pl.Series] | None = None,
        domain: pl.DataFrame | None = None,
    ) -> NoisyCounts:
        """The plan on the table: ``within=(column, values)`` first keeps the rows whose
        ``column`` is one of ``values`` (a released set); ``domain`` (a frame of key columns,
        public or released) replaces the table's rows by exactly those keys, count 0 where the
        table has none. Seeded ``rng``: the bucket streams (one word of ``rng``); secure:
        every process draws from its own secure source."""

    @abstractmethod
    def collect(self) -> pl.DataFrame:
        """The whole table in this process (small tables and tests only)."""


@dataclass
class LocalCounts(CountTable):
    """A table of counts held by this process (memory, the Polars engine)."""

    frame: pl.DataFrame
    keys: list[str]

    def release(
        self,
        plan: NoisePlan,
        rng: RandomSource,
        *,
        within: tuple[str, pl.Series] | None = None,
        domain: pl.DataFrame | None = None,
    ) -> NoisyCounts:
        df = self.frame.select(*self.keys, pl.col("count").cast(pl.Int64))
        if within is not None:
            col, values = within
            df = df.join(
                pl.DataFrame({col: values}).cast({col: df.schema[col]}), on=col, how="semi"
            )
        if domain is not None:
            df = domain_counts(domain.select(self.keys), df, self.keys)
        rows = apply_plan_local(df, self.keys, plan, rng)
        return NoisyCounts(rows=rows, summary=CountSummary.of(df, plan), received=rows.height)

    def collect(self) -> pl.DataFrame:
        return self.frame


def domain_counts(domain: pl.DataFrame, counts: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Exactly the keys of ``domain`` (distinct), each with its count in ``counts`` (0 when
    absent)."""
    dom = domain.unique(maintain_order=True)
    cast: dict[Any, Any] = {k: counts.schema[k] for k in keys if k in counts.columns}
    joined = dom.cast(cast).join(counts, on=keys, how="left")
    return joined.with_columns(pl.col("count").fill_null(0).cast(pl.Int64))


@dataclass
class BoundedCounts:
    """What a histogram release needs from the data: per-item counts *after* contribution
    bounding, a few report figures, and the private record of the input (for the provenance
    record, never the public ledger).

    The in-memory path computes it from a :class:`~searchveil.model.SearchLog`
    (:func:`searchveil.release.korolova.korolova_counts`,
    :func:`searchveil.release.zealous.zealous_counts`); an engine computes it from a file too
    large to hold (:mod:`searchveil.engines`). Either way the release function that consumes it
    is the single definition of noise, thresholds, accounting and ledger. Bounding itself is part
    of that contract: each engine's bounding is tested equal to
    :func:`searchveil.bounding.bound_contributions` on real logs.

    ``counts``: name → a frame of key columns + ``count`` (Int64), or a :class:`CountTable`
    an engine holds elsewhere (a cluster); a release asks for noise and thresholds with
    :meth:`release`, which runs where the counts are.
    ``figures``: report figures (``users``, ``query_events``, ...). ``input``: the private input
    record (file, SHA-256, rows, users, ...). ``plan``: which engine plan computed them.
    """

    counts: Mapping[str, pl.DataFrame | CountTable]
    figures: dict[str, int]
    input: dict[str, Any]
    plan: str = "memory"  # how the counts were computed (reported, not used)
    #: rows the release received from the engine, by table (private; ``--json`` shows them)
    received: dict[str, int] = field(default_factory=dict)

    @property
    def users(self) -> int:
        return int(self.figures["users"])

    def count_table(self, name: str, keys: list[str]) -> CountTable:
        """``counts[name]`` as a :class:`CountTable` (an empty one if absent)."""
        df = self.counts.get(name)
        if isinstance(df, CountTable):
            return df
        return LocalCounts(self._frame(df, keys), keys)

    def release(
        self,
        name: str,
        keys: list[str],
        plan: NoisePlan,
        rng: RandomSource,
        *,
        within: tuple[str, pl.Series] | None = None,
        domain: pl.DataFrame | None = None,
    ) -> NoisyCounts:
        """:meth:`CountTable.release` of ``counts[name]``, where the counts are; the rows the
        release received are added to :attr:`received`."""
        out = self.count_table(name, keys).release(plan, rng, within=within, domain=domain)
        self.received[name] = self.received.get(name, 0) + out.received
        return out

    def table(self, name: str, keys: list[str], *, ordered: bool = True) -> pl.DataFrame:
        """``counts[name]`` with ``keys`` + ``count`` in this process (empty if absent),
        sorted by the keys when ``ordered`` — a cluster's table is collected whole: for the
        in-memory path's exact figures and for tests, never for a release on an engine."""
        df = self.counts.get(name)
        if isinstance(df, CountTable):
            df = df.collect()
        out = self._frame(df, keys)
        return out.sort(keys) if ordered and out.height else out

    @staticmethod
    def _frame(df: pl.DataFrame | None, keys: list[str]) -> pl.DataFrame:
        if df is None or df.height == 0:
            schema: dict[str, Any] = {k: pl.String for k in keys} | {"count": pl.Int64}
            if df is not None:
                schema = {k: df.schema.get(k, pl.String) for k in keys} | {"count": pl.Int64}
            return pl.DataFrame(schema=schema)
        return df.select(*keys, pl.col("count").cast(pl.Int64))


@dataclass
class UserItemPools:
    """What a selection release needs from the data: each user's first ``pool`` distinct
    queries (``queries``: user, item, rank) and, with clicks, first ``click_pool`` distinct
    clicked (query, url) pairs (``clicks``: user, query, url, rank); report figures; the
    private input record (for the provenance record, never the ledger). Produced in memory
    (:func:`pools_from_log`) or by an engine — which may keep the pools where it holds them
    (a :class:`~searchveil.mechanisms.pool_rounds.PoolTable` and
    :class:`~searchveil.mechanisms.pool_rounds.PairSource` on a cluster: the selection's
    rounds then run there)."""

    queries: pl.DataFrame | PoolTable
    clicks: pl.DataFrame | PairSource | None
    figures: dict[str, int]
    input: dict[str, Any]
    plan: str = "memory"
    #: in memory only: every query event (user, item) — for the exact single-user figures and
    #: the released volume share (private figures for the data holder, report only)
    events: pl.DataFrame | None = field(default=None, repr=False)
    #: optional: the items exactly one user holds in the whole log (column ``item``), when the
    #: caller has counted them already (the demo) — private, for the report's exposure figure
    single_items: pl.DataFrame | None = field(default=None, repr=False)
    #: rows the release received from the engine, by step (private; ``--json`` shows them)
    received: dict[str, int] = field(default_factory=dict)

    @property
    def users(self) -> int:
        return int(self.figures["users"])


class NoRandomness:
    """Bounding with strategy 'first' draws nothing; anything else is a bug."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"engine bounding must not draw randomness ({name})")


#: the randomness handed to the in-memory bounding on engine rows: drawing from it is a bug
NO_RNG: Any = NoRandomness()
