"""Shared steps of the histogram releases: count → noise → threshold, and writing a release.

Every step is a Polars expression on a frame of (bounded) items, so a Spark engine can express
the same steps; the noise is the exact discrete Laplace of :mod:`searchveil.mechanisms.noise`
drawn from the injected ``rng``, one fresh draw per row.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from searchveil.io.ledger import ReleaseWriter
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.rng import RandomSource

__all__ = [
    "BoundedCounts",
    "count_by",
    "noisy_counts",
    "noisy_threshold",
    "HistogramRelease",
    "write_release",
]


@dataclass
class BoundedCounts:
    """What a histogram release needs from the data: per-item counts *after* contribution
    bounding, a few report figures, and the ledger's record of the input.

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
    ``figures``: report figures (``users``, ``query_events``, ...). ``input``: the ledger's input
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


def noisy_counts(counts: pl.Series | np.ndarray, *, scale: float, rng: RandomSource) -> np.ndarray:
    """``counts`` plus fresh independent discrete Laplace noise of scale ``scale``."""
    arr = counts.to_numpy() if isinstance(counts, pl.Series) else np.asarray(counts)
    return DiscreteLaplace(scale=scale).release(arr.astype(np.int64), rng)


def noisy_threshold(
    counts: pl.DataFrame, *, threshold: float, scale: float, rng: RandomSource
) -> pl.DataFrame:
    """Rows whose ``count`` + fresh discrete Laplace(scale) noise exceeds ``threshold``.

    The noisy value used for the decision is discarded (it is not published).
    """
    noisy = noisy_counts(counts.get_column("count"), scale=scale, rng=rng)
    return counts.filter(pl.Series(noisy > threshold))


@dataclass
class HistogramRelease:
    """A computed release: output tables, the report (parameters, thresholds, noise scales,
    counts kept/dropped) and the ledger dict. Write it with :func:`write_release`."""

    tables: dict[str, pl.DataFrame]
    report: dict[str, Any]
    ledger: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def epsilon(self) -> float | None:
        eps = self.ledger.get("epsilon")
        return None if eps is None else float(eps)

    @property
    def delta(self) -> float | None:
        dl = self.ledger.get("delta")
        return None if dl is None else float(dl)


def write_release(
    release: HistogramRelease,
    out_dir: str | os.PathLike[str],
    *,
    fmt: str = "tsv",
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write every table and ``ledger.json`` atomically; returns the written ledger."""
    with ReleaseWriter(out_dir, fmt=fmt, overwrite=overwrite) as w:
        for name, df in release.tables.items():
            w.write_table(name, df)
        return w.write_ledger(release.ledger)
