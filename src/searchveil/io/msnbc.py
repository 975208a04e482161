"""MSNBC.com anonymous web data (UCI, 1999) as rows of a search log.

Layout: line i is user i; each integer 1..17 is one visit of that page category, separated by
spaces. Following CELS §6, each category is one query-url pair: query = category name, url =
``msnbc.com/<category>``; visits are rows in order (no timestamps).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from searchveil.errors import InputFormatError

__all__ = ["MSNBC_CATEGORIES", "read_msnbc_sequences"]

MSNBC_CATEGORIES = (
    "frontpage", "news", "tech", "local", "opinion", "on-air", "misc", "weather", "msn-news",
    "health", "living", "business", "msn-sports", "sports", "summary", "bbs", "travel",
)  # fmt: skip


def read_msnbc_sequences(p: Path, lines: pl.Series) -> pl.DataFrame:
    """The visits of the file's ``lines`` as rows ``user, query, time, rank, url`` (user = line
    number); anything but integers 1..17 is an :class:`InputFormatError` naming the line."""
    df = pl.DataFrame({"_l": lines}).with_row_index("user", offset=1)
    df = df.with_columns(pl.col("user").cast(pl.Int64))
    tokens = df.with_columns(pl.col("_l").str.strip_chars().str.split(" ").alias("tok")).explode(
        "tok"
    )
    tokens = tokens.filter(pl.col("tok").is_not_null() & (pl.col("tok") != ""))
    cat = tokens.get_column("tok").cast(pl.Int64, strict=False)
    bad_mask = cat.is_null() | (cat < 1) | (cat > len(MSNBC_CATEGORIES))
    if bad_mask.any():
        line = int(tokens.get_column("user").filter(bad_mask)[0])
        raise InputFormatError(
            str(p), "MSNBC sequences hold integers 1..17 separated by spaces", line
        )
    names = pl.Series(MSNBC_CATEGORIES)
    out = pl.DataFrame(
        {
            "user": tokens.get_column("user"),
            "query": names.gather(cat - 1),
        }
    ).with_columns(
        time=pl.lit(None, pl.Datetime("us")),
        rank=pl.lit(None, pl.Int64),
        url=pl.lit("msnbc.com/") + pl.col("query"),
    )
    return out
