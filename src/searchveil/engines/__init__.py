"""Engines for large logs: the data-size-dependent work of a histogram release runs on an
engine; the privacy-critical part (noise, thresholds, accounting, ledger) stays the single
in-memory definition in :mod:`searchveil.release`.

The narrow interface (:class:`searchveil.engines.base.Engine`) is four operations:

* ``scan(path)`` — the log as an engine table with the canonical columns
  (user, query [normalised], time [text], url, rank, row [file order]);
* ``events(table)`` — one row per query event: ``(user, query, time)`` with the first row number
  and the number of click rows; AOL writes the clicks of an event on consecutive rows, so an
  event is a distinct (user, query, time);
* ``first_per_user(table, n, order, distinct_on)`` — the first n rows per user (optionally of
  distinct values of a column), by ``order``;
* ``collect(table)`` — to a Polars frame (the reduced, bounded rows are small).

:mod:`searchveil.engines.plans` states, once, which rows each algorithm needs after contribution
bounding (Korolova: the user's first d events and first d_c clicks; ZEALOUS: the first
occurrences of the user's first m distinct items; k-anonymity: the rows of queries with ≥ k
users) in terms of those operations; the reduced log then goes through the ordinary release
function, whose own bounding is idempotent on it. Engines: ``polars`` (lazy, streaming, one
machine) and ``spark`` (PySpark DataFrames, local or a cluster).
"""

from searchveil.engines.plans import ENGINES, PLAN_ALGORITHMS, run_release

__all__ = ["ENGINES", "PLAN_ALGORITHMS", "run_release"]
