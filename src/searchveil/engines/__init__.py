"""Engines for large logs: the data-size-dependent work of a histogram release runs on an
engine; the privacy-critical part (noise, thresholds, accounting, ledger) stays the single
definition in :mod:`searchveil.release`.

Each engine (a subclass of :class:`searchveil.engines.base.Engine`) offers
``bounded_counts(path, algorithm, params)`` → a :class:`~searchveil.release.counts.BoundedCounts`
(per-item counts after contribution bounding, report figures, the private input record), which
``release_korolova_counts`` / ``release_zealous_counts`` turn into a release
(:func:`run_release`):

* ``polars`` — one ordered streaming pass when each user's rows are contiguous
  (:mod:`searchveil.engines.ordered`), else the hash-based row plan;
* ``spark`` — PySpark, local or a cluster (optional, imported only when asked for): for
  user-sorted input a per-partition ordered pass (:mod:`searchveil.engines.spark_ordered`,
  boundary users stitched on the driver, no shuffle of rows), else one shuffle of the rows by
  user and a window per user; only the counts reach the driver.

The row plan (:mod:`searchveil.engines.rows`: which rows each algorithm needs after bounding,
over the small interface of :class:`~searchveil.engines.base.Engine` — ``scan, with_sessions,
events, first_per_user, semi_join, union_rows, filter_clicks, users_with_counts, collect,
totals, collect_with_totals``) serves k-anonymity on both engines and unsorted input on Polars.
"""

from searchveil.engines.base import Engine
from searchveil.engines.plans import ENGINES, PLAN_ALGORITHMS, make_engine, run_release

__all__ = ["ENGINES", "PLAN_ALGORITHMS", "Engine", "make_engine", "run_release"]
