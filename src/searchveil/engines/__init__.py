"""Engines for large logs — the backends of the histogram releases: the data-size-dependent
work (contribution bounding) runs on an engine; the privacy-critical part (noise, thresholds,
accounting, ledger) stays the single definition in :mod:`searchveil.release`, which drives the
engines (:mod:`searchveil.release.run`).

An engine never sees a family's parameters: a release gives it a
:class:`~searchveil.engines.contract.BoundingPlan` (``params.bounding_plan()``) and a
:class:`~searchveil.engines.contract.Source` (the input, its layout detected once by
:mod:`searchveil.io.formats`), and asks (:class:`~searchveil.engines.base.Engine`):

* ``bounded_counts(source, plan)`` → :class:`~searchveil.engines.contract.BoundedCounts`;
* ``item_pools(source, plan)`` → :class:`~searchveil.engines.contract.UserItemPools`;
* ``rows(source, plan)`` → :class:`~searchveil.engines.base.ReducedRows`.

Engines:

Both run the one bounding kernel (:mod:`searchveil.bounding`) and differ only in how they move
batches through it:

* ``polars`` — one ordered streaming pass when each user's rows are contiguous
  (:mod:`searchveil.engines.ordered`), else the same pass over the rows sorted by user;
* ``spark`` — PySpark, local, a cluster or Spark Connect (optional, imported only when asked
  for): the kernel on every partition (``mapInArrow``), the partitions joined on the driver
  (:mod:`searchveil.engines.spark_ordered`), no shuffle of rows for user-sorted input, else one
  shuffle by user; only counts (or pools) reach the driver.

The row plan (:mod:`searchveil.engines.rows`, over the small interface of
:class:`~searchveil.engines.base.Engine` — ``scan, with_sessions, semi_join,
users_with_counts, collect, totals, collect_with_totals``) serves k-anonymity on both engines.
"""

from searchveil.engines.backends import EngineName, make_engine
from searchveil.engines.base import Engine, ReducedRows
from searchveil.engines.contract import (
    BoundedCounts,
    Bounding,
    BoundingPlan,
    Item,
    Source,
    TableSource,
    UserItemPools,
)

__all__ = [
    "BoundedCounts",
    "Bounding",
    "BoundingPlan",
    "Engine",
    "EngineName",
    "Item",
    "ReducedRows",
    "Source",
    "TableSource",
    "UserItemPools",
    "make_engine",
]
