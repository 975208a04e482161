"""Shared steps of the histogram releases: noise → threshold, the release value and writing it.

Every step is a Polars expression on a frame of (bounded) counts (:mod:`searchveil.release.counts`),
so a Spark engine can express the same steps; the noise is the exact discrete Laplace of
:mod:`searchveil.mechanisms.noise` drawn from the injected ``rng``, one fresh draw per row.
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

__all__ = ["noisy_counts", "noisy_threshold", "HistogramRelease", "write_release"]


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
