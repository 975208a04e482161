"""Monotone least-squares fits for post-processing noisy histograms (pool adjacent
violators): a noisy statistic known to fall or rise is fitted so, its noise averaged with its
neighbours' instead of clipped into phantom mass (docs/privacy/ump.md, "Public choices")."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["decreasing", "increasing", "pava"]


def pava(values: npt.ArrayLike, weights: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The weighted least-squares non-increasing fit of ``values`` (pool adjacent violators)."""
    vals: list[float] = []
    wts: list[float] = []
    lens: list[int] = []
    for v, w in zip(np.asarray(values, float), np.asarray(weights, float), strict=True):
        vals.append(float(v))
        wts.append(float(w))
        lens.append(1)
        while len(vals) > 1 and vals[-2] < vals[-1]:
            v2, w2, n2 = vals.pop(), wts.pop(), lens.pop()
            vals[-1] = (vals[-1] * wts[-1] + v2 * w2) / (wts[-1] + w2) if wts[-1] + w2 else 0.0
            wts[-1] += w2
            lens[-1] += n2
    return np.repeat(np.asarray(vals), lens)


def decreasing(counts: npt.ArrayLike, widths: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Post-processing of a noisy histogram whose density (count per unit of bin width) is
    known to fall: the non-increasing fit of the densities (:func:`pava`), clipped at 0, back
    as counts. Noise in the sparse far bins (which clipping alone turns into phantom mass)
    averages out with its neighbours."""
    w = np.asarray(widths, dtype=np.float64)
    return np.clip(pava(np.asarray(counts, dtype=np.float64) / w, w), 0, None) * w


def increasing(values: npt.ArrayLike, weights: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The weighted non-decreasing fit of ``values``, clipped at 0."""
    return np.clip(-pava(-np.asarray(values, dtype=np.float64), weights), 0, None)
