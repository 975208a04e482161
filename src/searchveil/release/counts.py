"""Bounded counts: the public contract between the code that bounds contributions and the
releases that add noise.

:class:`BoundedCounts` is what a histogram release (Korolova's Release-Data, ZEALOUS) needs from
the data; the in-memory path (:func:`searchveil.release.korolova.korolova_counts`,
:func:`searchveil.release.zealous.zealous_counts`) and every engine
(:mod:`searchveil.engines`) produce it, and ``release_korolova_counts`` /
``release_zealous_counts`` consume it. It is defined with the engine contract
(:mod:`searchveil.engines.contract`, the floor below the families, so that the backends need not
import a family); :func:`count_by` is the in-memory counting.
"""

from __future__ import annotations

import polars as pl

from searchveil.engines.contract import BoundedCounts

__all__ = ["BoundedCounts", "count_by"]


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
