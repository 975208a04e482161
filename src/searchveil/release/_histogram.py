"""Former home of the histogram-release helpers, kept importable for code written against it.

Import from the public modules instead: :mod:`searchveil.release.counts` (``BoundedCounts``,
``count_by``) and :mod:`searchveil.release.histogram` (``HistogramRelease``, ``write_release``,
``noisy_counts``, ``noisy_threshold``); ``tests/test_architecture.py`` refuses imports of this
private module from other modules.
"""

from __future__ import annotations

from searchveil.release.counts import BoundedCounts, count_by
from searchveil.release.histogram import (
    HistogramRelease,
    noisy_counts,
    noisy_threshold,
    write_release,
)

__all__ = [
    "BoundedCounts",
    "count_by",
    "noisy_counts",
    "noisy_threshold",
    "HistogramRelease",
    "write_release",
]
