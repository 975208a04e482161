"""Test helper: an AOL-layout click log split into the three parties' shares of the CELS
tests (users by id mod 3), with the whole log beside them as ``all.tsv``."""

from __future__ import annotations

from pathlib import Path

import polars as pl

COLUMNS = ["AnonID", "Query", "QueryTime", "ItemRank", "ClickURL"]


def write_three_shares(rows: list[tuple], d: Path) -> list[Path]:
    """``d/share1.tsv`` … ``share3.tsv`` (user id mod 3 = 0, 1, 2) and ``d/all.tsv``."""
    df = pl.DataFrame(rows, schema=COLUMNS, orient="row")
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(3):
        p = d / f"share{k + 1}.tsv"
        df.filter(pl.col("AnonID").cast(pl.Int64) % 3 == k).write_csv(p, separator="\t")
        paths.append(p)
    df.write_csv(d / "all.tsv", separator="\t")
    return paths
