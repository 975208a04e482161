"""The row plan: which rows each release needs after contribution bounding — stated once, run on
any engine (:class:`~searchveil.engines.base.Engine`).

* Korolova Release-Data: the rows of each user's first d query events, and each user's first
  d_c click rows (Limit-User-Activity, thesis Alg. 3).
* ZEALOUS, item type ``queries``: the first occurrence (event) of each of the user's first m
  distinct queries; type ``clicks``: the first row of each of the user's first m distinct
  (query, url) pairs (Götz §4, "m distinct items, data-independent choice"). Keyword and
  query-pair items need whole sessions; use the in-memory engine for them.
* k-query anonymity: the rows of the queries posed by ≥ k distinct users.

This is the fallback of the Polars engine (input whose users' rows are not contiguous) and the
plan of k-anonymity on both engines. The reduced rows are collected into an ordinary
:class:`~searchveil.model.SearchLog`; for Korolova and ZEALOUS the in-memory bounding
(idempotent on them: first-d of a first-d selection is the same selection) turns them into
:class:`~searchveil.release.counts.BoundedCounts` (:func:`rows_plan_counts`). The private input
record (provenance, never the public ledger) is the full input's (file SHA-256 streamed in a
thread, total rows and users).

Input fingerprints: :func:`searchveil.io.files.start_fingerprint`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from searchveil.engines.base import Engine, ReducedRows, Table
from searchveil.engines.contract import NO_RNG, BoundedCounts, Bounding, BoundingPlan, Item, Source
from searchveil.errors import InternalError, InvalidParameterError
from searchveil.io.files import start_fingerprint
from searchveil.io.readers import ReaderOptions
from searchveil.io.times import parse_time
from searchveil.model import InputInfo, SearchLog, add_sessions

__all__ = [
    "reduce_rows",
    "reduced_rows",
    "rows_plan_counts",
    "rows_plan_log",
    "to_search_log",
    "input_info",
    "input_record",
    "NO_RNG",
]


def reduce_rows(engine: Engine, table: Table, plan: BoundingPlan) -> Table:
    """The engine table of the rows ``plan`` keeps (see the module docstring)."""
    if plan.keep == Bounding.EVENTS:
        ev = engine.first_per_user(engine.events(table), plan.per_user)
        rows = engine.semi_join(table, ev, ["user", "ev"])
        if plan.clicks_per_user is not None:
            clicks = engine.first_per_user(engine.filter_clicks(table), plan.clicks_per_user)
            rows = engine.union_rows(rows, clicks)
        return rows
    if plan.keep == Bounding.DISTINCT:
        if plan.item == Item.QUERIES:
            events = engine.events(table)
            first = engine.first_per_user(events, plan.per_user, distinct_on=["qh"])
            first_events = engine.semi_join(events, first, ["user", "row"])
            return engine.semi_join(table, first_events, ["user", "ev"])
        clicks = engine.filter_clicks(table)
        first = engine.first_per_user(clicks, plan.per_user, distinct_on=["query", "url"])
        return engine.semi_join(clicks, first, ["user", "row"])
    if plan.keep == Bounding.SHARED:
        kept = engine.users_with_counts(table, "query", plan.per_user)
        # sessions (for the released ids and query pairs) come from the whole input
        return engine.semi_join(engine.with_sessions(table), kept, ["query"])
    raise InvalidParameterError("bounding plan", plan.keep, "events | distinct | shared")


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


def rows_plan_counts(
    engine: Engine,
    source: Source | Path,
    plan: BoundingPlan,
    *,
    normalize: bool,
    fingerprint: str = "full",
) -> BoundedCounts:
    """Bounded counts through the row plan (:func:`reduce_rows`): the engine keeps the rows
    each user may contribute, and the family's in-memory bounding (``plan.count_rows``)
    counts them (idempotent on them)."""
    if plan.count_rows is None:
        raise InternalError("a histogram plan without its in-memory counting (count_rows)")
    src = Source.of(source)
    reduced, totals, sha = reduced_rows(engine, src, plan, fingerprint=fingerprint)
    info = input_info(src, sha, totals["rows"], normalize)
    bounded = plan.count_rows(to_search_log(reduced, info))
    bounded.figures["users"] = totals["users"]
    bounded.figures["rows_after_engine_bounding"] = reduced.height
    bounded.input = info.to_dict(users=totals["users"]) | {"fingerprint": fingerprint}
    bounded.plan = "rows"
    return bounded


def rows_plan_log(
    engine: Engine, source: Source | Path, plan: BoundingPlan, *, normalize: bool, fingerprint: str
) -> ReducedRows:
    """The rows of ``plan`` as a log, with the whole input's totals and input record."""
    src = Source.of(source)
    reduced, totals, sha = reduced_rows(engine, src, plan, fingerprint=fingerprint)
    log = to_search_log(reduced, input_info(src, sha, totals["rows"], normalize))
    rec = input_record(src, sha, totals["rows"], totals["users"], normalize, fingerprint)
    return ReducedRows(log=log, rows=totals["rows"], users=totals["users"], input=rec)
