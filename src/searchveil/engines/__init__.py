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

* ``polars`` — one ordered streaming pass when each user's rows are contiguous
  (:mod:`searchveil.engines.ordered`), else the hash-based row plan;
* ``spark`` — PySpark, local or a cluster (optional, imported only when asked for): for
  user-sorted input a per-partition ordered pass (:mod:`searchveil.engines.spark_ordered`,
  boundary users stitched on the driver, no shuffle of rows), else one shuffle of the rows by
  user and a window per user; only the counts reach the driver.

The row plan (:mod:`searchveil.engines.rows`: which rows each plan keeps, over the small
interface of :class:`~searchveil.engines.base.Engine` — ``scan, with_sessions, events,
first_per_user, semi_join, union_rows, filter_clicks, users_with_counts, collect, totals,
collect_with_totals``) serves k-anonymity on both engines and unsorted input on Polars.
"""

from searchveil.engines.backends import ENGINES, EngineName, make_engine
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
    "ENGINES",
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
