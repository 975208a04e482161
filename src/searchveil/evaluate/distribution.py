"""Distribution statistics between an original item histogram and a released one.

Götz et al., "Publishing search logs — a comparative study of privacy guarantees" (TKDE 2012):

* §6.2 *top-j coverage*: the fraction of the j most frequent original items that appear in the
  release (Fig. 2–3 rows 3–4 plot the complement, the number/fraction of unpublished top-j
  items; we report both);
* §6.2 *top-j precision*: the distance between the relative frequencies of the top-j original
  items in the original and in the release, as the average L1 distance and the KL divergence;
* §7.1 Fig. 4: the *count distribution* (how many items have count c), plotted log-log;
* §7.1 Fig. 5: the *average count difference*: release counts scaled by a common factor so the
  totals are equal, then the mean absolute difference over all items with non-zero original
  count (absent items count 0, so it mixes coverage and precision);
* Korolova thesis §4.6.1: share of distinct items and of volume (impressions) released.

Decisions where the paper is not explicit (tested in ``tests/test_evaluate.py``):

* Top-j order: count descending, ties broken by the item string (deterministic).
* Relative frequencies are taken *within the top-j set* for both histograms (p_i = o_i / Σ_top-j
  o, q_i = r_i / Σ_top-j r), so both are distributions on the same support; average L1 is
  (1/j)·Σ|p_i − q_i|.
* KL(P‖Q) is infinite as soon as one top-j item is missing from the release; the paper's plots
  are finite, so some smoothing was used but not stated. We add 0.5 to every release count on
  the top-j support before normalising (Jeffreys-style) and say so in the report.
* Negative noisy counts are clipped to 0 for frequencies (they still count as "present").
* j runs over 1, 2, 5, 10, 20, 50, … up to the number of distinct original items, plus that
  number itself ("never higher than the number of distinct items", §6.2).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

__all__ = [
    "KL_PSEUDOCOUNT",
    "log_spaced_js",
    "aligned_counts",
    "top_j_metrics",
    "count_distribution",
    "avg_count_difference",
    "compare_histograms",
]

KL_PSEUDOCOUNT = 0.5


def log_spaced_js(n: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, … (≤ n), plus n itself; empty for n = 0."""
    out: list[int] = []
    base = 1
    while base <= n:
        for m in (1, 2, 5):
            if m * base <= n:
                out.append(m * base)
        base *= 10
    if n > 0 and (not out or out[-1] != n):
        out.append(n)
    return out


def aligned_counts(
    original: pl.DataFrame, released: pl.DataFrame
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Original counts in top-j order, the release counts of the same items (0 if absent,
    negatives clipped to 0) and whether each item is present in the release."""
    o = original.sort(["count", "item"], descending=[True, False])
    joined = o.join(
        released.select("item", pl.col("count").alias("rc")), on="item", how="left"
    ).sort(["count", "item"], descending=[True, False])
    present = joined.get_column("rc").is_not_null().to_numpy()
    rc = joined.get_column("rc").fill_null(0).clip(lower_bound=0).to_numpy().astype(np.float64)
    oc = joined.get_column("count").to_numpy().astype(np.float64)
    return oc, rc, present


def top_j_metrics(
    original: pl.DataFrame, released: pl.DataFrame, js: list[int] | None = None
) -> dict[str, Any]:
    """Coverage, unpublished count/fraction, average L1 and KL for each j (Götz §6.2)."""
    oc, rc, present = aligned_counts(original, released)
    if js is None:
        js = log_spaced_js(len(oc))
    cov, missing, l1, kl = [], [], [], []
    cum_present = np.cumsum(present)
    for j in js:
        jj = min(j, len(oc))
        n_present = int(cum_present[jj - 1]) if jj else 0
        cov.append(n_present / jj if jj else math.nan)
        missing.append(jj - n_present)
        o = oc[:jj]
        r = rc[:jj]
        p = o / o.sum()
        q = r / r.sum() if r.sum() > 0 else np.zeros_like(r)
        l1.append(float(np.abs(p - q).sum() / jj))
        qs = (r + KL_PSEUDOCOUNT) / (r + KL_PSEUDOCOUNT).sum()
        mask = p > 0
        kl.append(float(np.sum(p[mask] * np.log(p[mask] / qs[mask]))))
    return {
        "j": list(js),
        "coverage": cov,
        "unpublished": missing,
        "unpublished_fraction": [1.0 - c for c in cov],
        "avg_l1": l1,
        "kl": kl,
    }


def count_distribution(hist: pl.DataFrame) -> list[list[int]]:
    """[[count, number of items with that count], …] for counts ≥ 1, ascending (Fig. 4)."""
    d = (
        hist.filter(pl.col("count") >= 1)
        .group_by("count")
        .len("items")
        .sort("count")
        .select(pl.col("count").cast(pl.Int64), pl.col("items").cast(pl.Int64))
    )
    return [[int(a), int(b)] for a, b in d.iter_rows()]


def avg_count_difference(original: pl.DataFrame, released: pl.DataFrame) -> float:
    """Mean |o_i − s·r_i| over items with o_i > 0, s = Σo / Σr (Götz §7.1, Fig. 5).

    Σr is the total of the (clipped) release counts over *all* released items; if the release
    is empty, s·r = 0 and the result is the mean original count."""
    oc, rc, _ = aligned_counts(original.filter(pl.col("count") > 0), released)
    total_r = float(released.get_column("count").clip(lower_bound=0).sum() or 0)
    if len(oc) == 0:
        return math.nan
    scale = float(oc.sum()) / total_r if total_r > 0 else 0.0
    return float(np.mean(np.abs(oc - scale * rc)))


def compare_histograms(
    original: pl.DataFrame, released: pl.DataFrame, js: list[int] | None = None
) -> dict[str, Any]:
    """All distribution statistics for one item kind."""
    o_total = int(original.get_column("count").sum() or 0)
    r_clip = released.get_column("count").clip(lower_bound=0)
    r_total = int(r_clip.sum() or 0)
    o_distinct = original.height
    r_distinct = released.height
    in_orig = released.join(original.select("item"), on="item", how="semi").height
    return {
        "original_distinct": o_distinct,
        "original_total": o_total,
        "released_distinct": r_distinct,
        "released_total": r_total,
        "released_not_in_original": r_distinct - in_orig,
        "share_distinct": (in_orig / o_distinct) if o_distinct else math.nan,
        "share_volume": (r_total / o_total) if o_total else math.nan,
        "top_j": top_j_metrics(original, released, js),
        "avg_count_difference": avg_count_difference(original, released),
        "count_distribution": {
            "original": count_distribution(original),
            "released": count_distribution(released),
        },
    }
