"""Index caching (Götz et al. TKDE 2012 §2.3.2 and §7.2, after Baeza-Yates et al.).

A search engine keeps the posting lists of some keywords in memory. Given a keyword workload
(how often each keyword is searched), each keyword gets the score *frequency / posting-list
size*; posting lists are added greedily by descending score while they fit into the memory
budget (a list that does not fit is skipped and the next one tried: greedy bin packing). The
utility of a release is the *hit probability* of the cache it builds, measured on the
**original** query stream: Σ over cached keywords of the keyword's share of the original
keyword occurrences. The cache built from the original log is the reference.

**Proxy for posting-list sizes.** Götz et al. used the engine's document index; we have none.
Two documented proxies (the choice is recorded in the result and shown in the report):

* ``"clicks"`` (default): the posting-list size of keyword w is the number of distinct URLs
  clicked, in the original log, for queries containing w (at least 1). It is the part of the web
  the log shows w leads to. It reads the original log, which the data holder has anyway.
* ``"zipf"``: a synthetic Zipf-like index independent of the data: size(w) =
  ceil(s_min · u_w^(−1/a)) capped at ``cap``, with u_w ∈ (0, 1] a fixed-seed hash of w
  (SHA-256 of seed and keyword), i.e. Pareto(a) sizes that are the same for w in every run.

Lists are truncated at ``cap`` postings (Götz: 200,000 documents); the memory budget is given
in postings, by default as fractions of the total (truncated) size of all original keywords'
lists, so the numbers do not depend on the 8-bytes-per-posting and 1-GB constants of the paper.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from enum import StrEnum
from typing import Any

import numpy as np
import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.model import SearchLog
from searchveil.validate import (
    check_int,
    check_nonnegative,
    check_positive,
    check_probability,
    parse_choice,
)

__all__ = [
    "DEFAULT_BUDGETS",
    "PostingProxy",
    "posting_sizes_from_clicks",
    "posting_sizes_zipf",
    "greedy_cache",
    "hit_probability",
    "evaluate_caching",
]

DEFAULT_BUDGETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


class PostingProxy(StrEnum):
    """How a keyword's posting-list size is estimated without a document index: from the
    original log's clicks, or from a Zipf law independent of the data."""

    CLICKS = "clicks"
    ZIPF = "zipf"


def posting_sizes_from_clicks(log: SearchLog) -> dict[str, int]:
    """keyword → number of distinct clicked URLs for queries containing it (≥ 1 for every
    keyword of the log)."""
    df = log.df.select("query", "url")
    words = df.select(pl.col("query").str.split(" ").alias("w"), "url").explode("w")
    words = words.filter(pl.col("w").is_not_null() & (pl.col("w") != ""))
    sizes = words.group_by("w").agg(pl.col("url").drop_nulls().n_unique().alias("n"))
    return {w: max(1, int(n)) for w, n in sizes.iter_rows()}


def posting_sizes_zipf(
    keywords: Iterable[str], *, seed: int, a: float = 1.0, s_min: int = 10, cap: int = 200_000
) -> dict[str, int]:
    """Synthetic Pareto(a) posting sizes from a fixed-seed hash of each keyword."""
    check_positive("a", a)
    check_int("s_min", s_min, minimum=1)
    check_int("cap", cap, minimum=1)
    out: dict[str, int] = {}
    for w in keywords:
        h = hashlib.sha256(f"{seed}\x00{w}".encode()).digest()
        u = (int.from_bytes(h[:8], "big") + 1) / 2.0**64  # in (0, 1]
        out[w] = int(min(cap, math.ceil(s_min * u ** (-1.0 / a))))
    return out


def greedy_cache(
    workload: pl.DataFrame, sizes: dict[str, int], budget: float, *, cap: int | None = None
) -> list[str]:
    """Keywords whose posting lists are cached: greedy by score = count / size (ties: higher
    count first, then the keyword), skipping lists that no longer fit. ``workload`` is
    DataFrame[item, count]; keywords missing from ``sizes`` get size 1; non-positive counts
    are never cached."""
    check_nonnegative("budget", budget)
    w = workload.filter(pl.col("count") > 0)
    items = w.get_column("item").to_list()
    counts = np.asarray(w.get_column("count").to_numpy(), dtype=np.float64)
    sz = np.array([sizes.get(x, 1) for x in items], dtype=np.float64)
    if cap is not None:
        sz = np.minimum(sz, cap)
    order = sorted(range(len(items)), key=lambda i: (-counts[i] / sz[i], -counts[i], items[i]))
    cached: list[str] = []
    used = 0.0
    for i in order:
        if used + sz[i] <= budget:
            cached.append(items[i])
            used += sz[i]
    return cached


def hit_probability(cached: Iterable[str], original: pl.DataFrame) -> float:
    """Share of the original keyword occurrences whose posting list is cached."""
    total = float(original.get_column("count").sum() or 0)
    if total <= 0:
        return math.nan
    c = set(cached)
    hit = original.filter(pl.col("item").is_in(list(c))).get_column("count").sum()
    return float(hit or 0) / total


def evaluate_caching(
    original_keywords: pl.DataFrame,
    released_keywords: pl.DataFrame,
    *,
    log: SearchLog | None,
    proxy: PostingProxy | str = PostingProxy.CLICKS,
    budgets: tuple[float, ...] = DEFAULT_BUDGETS,
    zipf_seed: int = 20120101,
    cap: int = 200_000,
) -> dict[str, Any]:
    """Hit probability of caches built from the original and from the released keyword
    histograms, for each memory budget (fraction of the total original posting volume)."""
    proxy = parse_choice("posting_proxy", proxy, PostingProxy)
    for b in budgets:
        check_probability("cache budget", b, open_low=True, open_high=False)
    kw = set(original_keywords.get_column("item").to_list()) | set(
        released_keywords.get_column("item").to_list()
    )
    if proxy == "clicks":
        if log is None:
            raise InvalidParameterError("log", None, "the original log (for the clicks proxy)")
        sizes = posting_sizes_from_clicks(log)
        description = (
            "posting-list size of a keyword = number of distinct URLs clicked in the original "
            "log for queries containing it (proxy: no document index available)"
        )
    else:
        sizes = posting_sizes_zipf(sorted(kw), seed=zipf_seed, cap=cap)
        description = (
            f"synthetic Pareto(1) posting-list sizes from a fixed-seed hash (seed {zipf_seed}), "
            "independent of the data (proxy: no document index available)"
        )
    orig_items = original_keywords.get_column("item").to_list()
    total_size = float(sum(min(cap, sizes.get(x, 1)) for x in orig_items))
    rows = []
    for frac in budgets:
        budget = frac * total_size
        c_orig = greedy_cache(original_keywords, sizes, budget, cap=cap)
        c_rel = greedy_cache(released_keywords, sizes, budget, cap=cap)
        overlap = len(set(c_orig) & set(c_rel)) / len(c_orig) if c_orig else math.nan
        rows.append(
            {
                "budget_fraction": frac,
                "budget_postings": budget,
                "hit_probability_original": hit_probability(c_orig, original_keywords),
                "hit_probability_release": hit_probability(c_rel, original_keywords),
                "cached_original": len(c_orig),
                "cached_release": len(c_rel),
                "cache_overlap": overlap,
            }
        )
    return {
        "applicable": True,
        "proxy": proxy,
        "proxy_description": description,
        "cap": cap,
        "total_postings": total_size,
        "budgets": rows,
    }
