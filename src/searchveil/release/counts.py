"""Bounded counts: the public contract between the code that bounds contributions and the
releases that add noise.

:class:`BoundedCounts` is what a histogram release (Korolova's Release-Data, ZEALOUS) needs from
the data; the in-memory path (:func:`searchveil.release.korolova.korolova_counts`,
:func:`searchveil.release.zealous.zealous_counts`) and every engine
(:mod:`searchveil.engines`) produce it, and ``release_korolova_counts`` /
``release_zealous_counts`` consume it. It lives on the release floor (not in ``engines``) because
the releases, which sit below the engines, must name it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

__all__ = ["BoundedCounts", "count_by"]


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

    ``counts``: name → frame of key columns + ``count`` (Int64); with seeded randomness the
    release sorts them by key before drawing noise, so a seeded draw order depends only on the
    counts (see :meth:`table`).
    ``figures``: report figures (``users``, ``query_events``, ...). ``input``: the private input
    record (file, SHA-256, rows, users, ...). ``plan``: which engine plan computed them.
    """

    counts: dict[str, pl.DataFrame]
    figures: dict[str, int]
    input: dict[str, Any]
    plan: str = "memory"  # how the counts were computed (reported, not used)

    @property
    def users(self) -> int:
        return int(self.figures["users"])

    def table(self, name: str, keys: list[str], *, ordered: bool = True) -> pl.DataFrame:
        """``counts[name]`` with ``keys`` + ``count`` (empty if absent), sorted by the keys when
        ``ordered``.

        The releases ask for the sorted order when the randomness is seeded, so that a seeded
        experiment draws the same noise for the same item whichever engine counted. With the
        secure source the noise is i.i.d., so the order in which items receive their draws does
        not change the output distribution, and sorting millions of query strings is skipped.
        """
        df = self.counts.get(name)
        if df is None or df.height == 0:
            schema: dict[str, Any] = {k: pl.String for k in keys} | {"count": pl.Int64}
            if df is not None:
                schema = {k: df.schema.get(k, pl.String) for k in keys} | {"count": pl.Int64}
            return pl.DataFrame(schema=schema)
        out = df.select(*keys, pl.col("count").cast(pl.Int64))
        return out.sort(keys) if ordered else out


def count_by(df: pl.DataFrame, keys: list[str], *, distinct_users: bool = False) -> pl.DataFrame:
    """``keys`` + ``count``: occurrences (or distinct users with ``distinct_users``)."""
    if df.height == 0:
        return pl.DataFrame(
            {k: pl.Series(k, [], dtype=df.schema[k]) for k in keys}
            | {"count": pl.Series("count", [], dtype=pl.Int64)}
        )
    agg = pl.col("user").n_unique() if distinct_users else pl.len()
    return (
        df.group_by(keys)
        .agg(agg.cast(pl.Int64).alias("count"))
        .sort(keys)  # a deterministic order: the noise draw order then depends only on the data
    )
