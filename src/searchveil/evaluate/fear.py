"""The "fear of …" ranking (Korolova thesis §4.6.2.1, after Tancer, *Click*, 2008).

Queries containing the phrase "fear of" are mapped to the fear they name (the words after the
*first* "fear of", e.g. "fear of the dark drum tabs" → "the dark drum tabs"; "fear of flying"
→ "flying"); a fear's frequency is the total count of its queries, and fears are ranked by
frequency (ties by name). The thesis compares the top-9 ranking of the original log with the
one of the released queries (Table 4.4): same set, slightly different order. We report both
rankings side by side, the overlap of the top-k sets, and Spearman's footrule distance between
the ranks of the common fears. Tancer's manual removal of non-phobias ("fear of clowns", a film)
is not automated; the report shows the raw phrases so a reader can judge. The phrase is a
parameter (e.g. "afraid of"); matching is on whole words of the normalised query.
"""

from __future__ import annotations

import math
import re
from typing import Any

import polars as pl

from searchveil.errors import InvalidParameterError

__all__ = ["fear_ranking", "evaluate_fears"]


def _pattern(phrase: str) -> str:
    words = [w for w in phrase.lower().split() if w]
    if not words:
        raise InvalidParameterError("phrase", phrase, "a non-empty phrase such as 'fear of'")
    return r"(?:^|\s)" + r"\s+".join(re.escape(w) for w in words) + r"\s+(\S.*)$"


def fear_ranking(queries: pl.DataFrame, *, phrase: str = "fear of") -> pl.DataFrame:
    """DataFrame[fear, count, rank] from a query histogram DataFrame[item, count] (counts ≤ 0
    ignored), ranked by count descending then fear; rank starts at 1."""
    pat = _pattern(phrase)
    f = (
        queries.filter(pl.col("count") > 0)
        .with_columns(pl.col("item").str.extract(pat, 1).str.strip_chars().alias("fear"))
        .filter(pl.col("fear").is_not_null() & (pl.col("fear") != ""))
        .group_by("fear")
        .agg(pl.col("count").sum())
        .sort(["count", "fear"], descending=[True, False])
    )
    return f.with_columns(pl.int_range(1, pl.len() + 1).alias("rank").cast(pl.Int64))


def evaluate_fears(
    original_queries: pl.DataFrame,
    released_queries: pl.DataFrame,
    *,
    phrase: str = "fear of",
    top: int = 9,
) -> dict[str, Any]:
    """Top-``top`` fears of the original and of the release (Table 4.4) and their agreement."""
    fo = fear_ranking(original_queries, phrase=phrase)
    fr = fear_ranking(released_queries, phrase=phrase)
    to = fo.head(top)
    tr = fr.head(top)
    so, sr = set(to.get_column("fear").to_list()), set(tr.get_column("fear").to_list())
    common = so & sr
    ro = dict(zip(to.get_column("fear").to_list(), to.get_column("rank").to_list(), strict=True))
    rr = dict(zip(tr.get_column("fear").to_list(), tr.get_column("rank").to_list(), strict=True))
    footrule = sum(abs(ro[f] - rr[f]) for f in common)
    return {
        "applicable": True,
        "phrase": phrase,
        "top": top,
        "original_fears": fo.height,
        "released_fears": fr.height,
        "original_top": [[f, int(c)] for f, c, _ in to.iter_rows()],
        "released_top": [[f, int(c)] for f, c, _ in tr.iter_rows()],
        "top_overlap": len(common) / len(so) if so else math.nan,
        "common_footrule": int(footrule),
        "same_order": to.get_column("fear").to_list() == tr.get_column("fear").to_list(),
    }
