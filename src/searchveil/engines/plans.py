"""Which rows each release needs after contribution bounding — stated once, run on any engine.

* Korolova Release-Data: the rows of each user's first d query events, and each user's first
  d_c click rows (Limit-User-Activity, thesis Alg. 3).
* ZEALOUS, item type ``queries``: the first occurrence (event) of each of the user's first m
  distinct queries; type ``clicks``: the first row of each of the user's first m distinct
  (query, url) pairs (Götz §4, "m distinct items, data-independent choice"). Keyword and
  query-pair items need whole sessions; use the in-memory engine for them.
* k-query anonymity: the rows of the queries posed by ≥ k distinct users.

This *row plan* is the fallback of the Polars engine (input whose users' rows are not
contiguous) and the plan of k-anonymity on both engines. The reduced rows are collected into an
ordinary :class:`~searchveil.model.SearchLog`; for Korolova and ZEALOUS the in-memory bounding
(idempotent on them: first-d of a first-d selection is the same selection) turns them into
:class:`~searchveil.release.counts.BoundedCounts` (:func:`rows_plan_counts`).

:func:`run_release` is the entry point of every engine release: Korolova and ZEALOUS ask the
engine for bounded counts (``engine.bounded_counts``: the Polars ordered pass of
:mod:`searchveil.engines.ordered`, Spark's window plan, or this row plan) and hand them to
``release_korolova_counts`` / ``release_zealous_counts`` — the one definition of the mechanism
(noise, thresholds, accounting, ledger). The ledger's input record is the full input's (file
SHA-256 streamed, total rows and users).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.io.readers import _parse_time, _sha256
from searchveil.model import InputInfo, SearchLog, add_sessions
from searchveil.release.counts import BoundedCounts
from searchveil.release.histogram import HistogramRelease
from searchveil.rng import RandomSource

ENGINES = ("memory", "polars", "spark")
PLAN_ALGORITHMS = ("korolova", "zealous", "kanon")


def make_engine(name: str, *, spark_master: str = "local[*]", normalize: bool = True) -> Any:
    if name == "polars":
        from searchveil.engines.polars import PolarsEngine

        return PolarsEngine(normalize=normalize)
    if name == "spark":
        from searchveil.engines.spark import SparkEngine

        return SparkEngine(master=spark_master, normalize=normalize)
    raise InvalidParameterError("engine", name, "polars | spark (memory runs without an engine)")


def reduce_rows(engine: Any, table: Any, algorithm: str, params: Any) -> Any:
    """The engine table of the rows ``algorithm`` needs (see the module docstring)."""
    if algorithm == "korolova":
        ev = engine.first_per_user(engine.events(table), params.d)
        rows = engine.semi_join(table, ev, ["user", "ev"])
        if params.url_selection != "none":
            clicks = engine.first_per_user(engine.filter_clicks(table), params.d_c)
            rows = engine.union_rows(rows, clicks)
        return rows
    if algorithm == "zealous":
        if params.item_type == "queries":
            events = engine.events(table)
            first = engine.first_per_user(events, params.m, distinct_on=["qh"])
            first_events = engine.semi_join(events, first, ["user", "row"])
            return engine.semi_join(table, first_events, ["user", "ev"])
        if params.item_type == "clicks":
            clicks = engine.filter_clicks(table)
            first = engine.first_per_user(clicks, params.m, distinct_on=["query", "url"])
            return engine.semi_join(clicks, first, ["user", "row"])
        raise InvalidParameterError(
            "item-type", params.item_type, "queries | clicks with --engine polars|spark"
        )
    if algorithm == "kanon":
        kept = engine.users_with_counts(table, "query", params.k)
        # sessions (for the released ids and query pairs) come from the whole input
        return engine.semi_join(engine.with_sessions(table), kept, ["query"])
    raise InvalidParameterError("algorithm", algorithm, ", ".join(PLAN_ALGORITHMS))


def to_search_log(reduced: pl.DataFrame, info: InputInfo) -> SearchLog:
    user = reduced.get_column("user").str.strip_chars()
    numeric = user.len() > 0 and bool(user.str.contains(r"^-?\d{1,18}$").all())
    df = reduced.select(
        (pl.col("user").str.strip_chars().cast(pl.Int64) if numeric else pl.col("user")).alias(
            "user"
        ),
        pl.col("query"),
        _parse_time(pl.col("time")).alias("time"),
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


def _input_info(path: Path, sha: str, rows: int, normalize: bool) -> InputInfo:
    return InputInfo(
        path=str(path),
        sha256=sha,
        rows=rows,
        format="parquet" if str(path).lower().endswith(".parquet") else "aol",
        normalized=normalize,
    )


def _input_record(path: Path, sha: str, rows: int, users: int, normalize: bool) -> dict[str, Any]:
    """The ledger's input record of a file an engine read whole."""
    return _input_info(path, sha, rows, normalize).to_dict(users=users)


def check_plan(algorithm: str, params: Any, engine_name: str) -> None:
    """What the engines cannot do raises a typed error before any data are read."""
    if algorithm not in PLAN_ALGORITHMS:
        raise InvalidParameterError("algorithm", algorithm, ", ".join(PLAN_ALGORITHMS))
    if algorithm in ("korolova", "zealous") and getattr(params, "strategy", "first") != "first":
        raise InvalidParameterError(
            "bounding", params.strategy, f"first with --engine {engine_name} (random: memory)"
        )
    if algorithm == "zealous" and params.item_type not in ("queries", "clicks"):
        raise InvalidParameterError(
            "item-type", params.item_type, "queries | clicks with --engine polars|spark"
        )


def _reduced_rows(
    engine: Any, path: Path, algorithm: str, params: Any
) -> tuple[pl.DataFrame, dict[str, int], str]:
    """The reduced rows of :func:`reduce_rows`, the input totals and the file's SHA-256
    (hashed in a thread: hashlib releases the GIL, so it overlaps the engine's work)."""
    digest: dict[str, str] = {}
    hasher = threading.Thread(target=lambda: digest.update(sha=_sha256(Path(path))), daemon=True)
    hasher.start()
    table = engine.scan(str(path))
    plan = reduce_rows(engine, table, algorithm, params)
    if hasattr(engine, "collect_with_totals"):
        reduced, totals = engine.collect_with_totals(plan, table)
    else:
        totals = engine.totals(table)
        reduced = engine.collect(plan)
    hasher.join()
    return reduced, totals, digest["sha"]


def rows_plan_counts(
    engine: Any, algorithm: str, path: Path, params: Any, *, normalize: bool
) -> BoundedCounts:
    """Bounded counts through the row plan (:func:`reduce_rows`): the engine keeps the rows
    each user may contribute, and the in-memory bounding counts them (idempotent on them)."""
    from searchveil.release.korolova import korolova_counts
    from searchveil.release.zealous import zealous_counts

    reduced, totals, sha = _reduced_rows(engine, path, algorithm, params)
    info = _input_info(path, sha, totals["rows"], normalize)
    log = to_search_log(reduced, info)
    fn = korolova_counts if algorithm == "korolova" else zealous_counts
    bounded: BoundedCounts = fn(log, params, rng=_NO_RNG)
    bounded.figures["users"] = totals["users"]
    bounded.figures["rows_after_engine_bounding"] = reduced.height
    bounded.input = info.to_dict(users=totals["users"])
    bounded.plan = "rows"
    return bounded


class _NoRandomness:
    """Bounding with strategy 'first' draws nothing; anything else is a bug."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"engine bounding must not draw randomness ({name})")


_NO_RNG: Any = _NoRandomness()


def run_release(
    engine_name: str,
    algorithm: str,
    path: Path,
    params: Any,
    *,
    rng: RandomSource,
    spark_master: str = "local[*]",
    normalize: bool = True,
    release_kwargs: dict[str, Any] | None = None,
) -> HistogramRelease:
    """Bound on the engine, release in memory; the report and ledger name the engine.

    Korolova and ZEALOUS: the engine returns bounded counts (:class:`BoundedCounts`) and the
    release runs from them; k-anonymity: the engine returns the rows of the queries with ≥ k
    users and the in-memory release runs on them.
    """
    from searchveil.release.korolova import release_korolova_counts
    from searchveil.release.zealous import release_zealous_counts

    check_plan(algorithm, params, engine_name)
    engine = make_engine(engine_name, spark_master=spark_master, normalize=normalize)
    if algorithm == "kanon":
        rel = _run_kanon(engine, path, params, rng=rng, normalize=normalize)
    else:
        bounded = engine.bounded_counts(Path(path), algorithm, params)
        fn: Any = release_korolova_counts if algorithm == "korolova" else release_zealous_counts
        rel = fn(bounded, params, rng=rng, **(release_kwargs or {}))
        rel.report["engine_plan"] = bounded.plan
        if "rows_after_engine_bounding" in bounded.figures:
            rel.report["rows_after_engine_bounding"] = bounded.figures["rows_after_engine_bounding"]
    rel.report["engine"] = engine.describe()
    rel.ledger["engine"] = engine.describe()
    return rel


def _run_kanon(
    engine: Any, path: Path, params: Any, *, rng: RandomSource, normalize: bool
) -> HistogramRelease:
    from searchveil.release import release_kanon

    reduced, totals, sha = _reduced_rows(engine, path, "kanon", params)
    log = to_search_log(reduced, _input_info(path, sha, totals["rows"], normalize))
    rel: HistogramRelease = release_kanon(log, params, rng=rng)
    rel.report["rows_after_engine_bounding"] = reduced.height
    rel.report["users"] = totals["users"]
    for inp in rel.ledger.get("inputs", []):
        inp["users"] = totals["users"]
        inp["rows"] = totals["rows"]
    return rel
