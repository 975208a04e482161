"""The row plan of k-query anonymity: the rows of the queries posed by ≥ k distinct users
(:attr:`~searchveil.engines.contract.Bounding.SHARED`), with the sessions of the whole input,
stated once over the small interface of :class:`~searchveil.engines.base.Engine` and run on
either engine. (Korolova, ZEALOUS and the selection pools bound with the kernel of
:mod:`searchveil.bounding` instead.) The reduced rows are collected into an ordinary
:class:`~searchveil.model.SearchLog`; the private input record (provenance, never the public
ledger) is the full input's (file SHA-256 streamed in a thread, total rows and users).

Input fingerprints: :func:`searchveil.io.files.start_fingerprint`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from searchveil.engines.base import Engine, ReducedRows, Table
from searchveil.engines.contract import Bounding, BoundingPlan, Source
from searchveil.errors import InvalidParameterError
from searchveil.io.files import start_fingerprint
from searchveil.io.readers import ReaderOptions
from searchveil.io.times import parse_time
from searchveil.model import InputInfo, SearchLog, add_sessions

__all__ = [
    "reduce_rows",
    "reduced_rows",
    "rows_plan_log",
    "to_search_log",
    "input_info",
    "input_record",
]


def reduce_rows(engine: Engine, table: Table, plan: BoundingPlan) -> Table:
    """The engine table of the rows ``plan`` keeps (see the module docstring)."""
    if plan.keep == Bounding.SHARED:
        kept = engine.users_with_counts(table, "query", plan.per_user)
        # sessions (for the released ids and query pairs) come from the whole input
        return engine.semi_join(engine.with_sessions(table), kept, ["query"])
    raise InvalidParameterError("bounding plan", plan.keep, "shared")


def to_search_log(reduced: pl.DataFrame, info: InputInfo) -> SearchLog:
    user = reduced.get_column("user").str.strip_chars()
    numeric = user.len() > 0 and bool(user.str.contains(r"^-?\d{1,18}$").all())
    df = reduced.select(
        (pl.col("user").str.strip_chars().cast(pl.Int64) if numeric else pl.col("user")).alias(
            "user"
        ),
        pl.col("query"),
        parse_time(pl.col("time")).alias("time"),
        pl.col("rank").str.strip_chars().cast(pl.Int64, strict=False).alias("rank"),
        pl.col("url").str.strip_chars().replace("", None).alias("url"),
        pl.col("row").cast(pl.UInt64),
        *([pl.col("session").cast(pl.Int64)] if "session" in reduced.columns else []),
    ).sort("row")
    if "session" in df.columns:
        df = df.sort(["user", "row"])
    else:
        df = add_sessions(df)
    return SearchLog(df=df, info=info)


def input_info(source: Source | Path, sha: str, rows: int, normalize: bool) -> InputInfo:
    src = Source.of(source)
    parquet = src.parquet
    return InputInfo(
        path=str(src.path),
        sha256=sha,
        rows=rows,
        format="parquet" if parquet else "aol",
        encoding=None if parquet else "utf-8",  # as the in-memory reader records it
        normalized=normalize,
        # the engines read with the default reader options (the CLI refuses any other)
        reader=ReaderOptions(normalize=normalize).to_dict(),
    )


def input_record(
    path: Source | Path, sha: str, rows: int, users: int, normalize: bool, fingerprint: str = "full"
) -> dict[str, Any]:
    """The private input record (for the provenance record, never the public ledger) of a file
    an engine read whole (``fingerprint`` says how ``sha256`` was computed: ``full`` |
    ``fast``)."""
    return input_info(path, sha, rows, normalize).to_dict(users=users) | {
        "fingerprint": fingerprint
    }


def reduced_rows(
    engine: Engine, source: Source | Path, plan: BoundingPlan, *, fingerprint: str = "full"
) -> tuple[pl.DataFrame, dict[str, int], str]:
    """The reduced rows of :func:`reduce_rows`, the input totals and the file's fingerprint
    (:func:`start_fingerprint`: with ``full``, hashed in a thread meanwhile)."""
    src = Source.of(source)
    sha = start_fingerprint(src.path, fingerprint)
    table = engine.scan(src)
    reduced, totals = engine.collect_with_totals(reduce_rows(engine, table, plan), table)
    return reduced, totals, sha.result()


def rows_plan_log(
    engine: Engine, source: Source | Path, plan: BoundingPlan, *, normalize: bool, fingerprint: str
) -> ReducedRows:
    """The rows of ``plan`` as a log, with the whole input's totals and input record."""
    src = Source.of(source)
    reduced, totals, sha = reduced_rows(engine, src, plan, fingerprint=fingerprint)
    log = to_search_log(reduced, input_info(src, sha, totals["rows"], normalize))
    rec = input_record(src, sha, totals["rows"], totals["users"], normalize, fingerprint)
    return ReducedRows(log=log, rows=totals["rows"], users=totals["users"], input=rec)
