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

Input fingerprints (``fingerprint``): ``full`` — the SHA-256 of the file's bytes, hashed in a
thread while the engine reads; ``fast`` (Parquet only) — the SHA-256 of the file size and the
Parquet footer (schema, every row group's offsets, sizes, row counts and column statistics),
which reads a few KB instead of the whole file. ``fast`` identifies the file as written by its
writer, not byte for byte: two files with equal footers and sizes but different data pages get
the same fingerprint (a rewrite by any Parquet writer changes offsets or statistics, but a
deliberate in-place edit of page bytes need not). The private input record says which
(``fingerprint``: ``full`` | ``fast``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import polars as pl

from searchveil.engines.base import Engine, HistogramParams, PlanParams, Table
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.files import BackgroundHash
from searchveil.io.readers import ReaderOptions, parse_time
from searchveil.model import InputInfo, SearchLog, add_sessions
from searchveil.release.counts import BoundedCounts
from searchveil.release.korolova import KorolovaParams, korolova_counts
from searchveil.release.zealous import ZealousParams, zealous_counts

__all__ = [
    "FINGERPRINTS",
    "check_fingerprint",
    "parquet_footer_sha256",
    "start_fingerprint",
    "PLAN_ALGORITHMS",
    "reduce_rows",
    "reduced_rows",
    "rows_plan_counts",
    "to_search_log",
    "input_info",
    "input_record",
    "NO_RNG",
]

PLAN_ALGORITHMS = ("korolova", "zealous", "kanon")


def reduce_rows(engine: Engine, table: Table, algorithm: str, params: PlanParams) -> Table:
    """The engine table of the rows ``algorithm`` needs (see the module docstring)."""
    if algorithm == "korolova":
        assert isinstance(params, KorolovaParams)
        ev = engine.first_per_user(engine.events(table), params.d)
        rows = engine.semi_join(table, ev, ["user", "ev"])
        if params.url_selection != "none":
            assert params.d_c is not None
            clicks = engine.first_per_user(engine.filter_clicks(table), params.d_c)
            rows = engine.union_rows(rows, clicks)
        return rows
    if algorithm == "zealous":
        assert isinstance(params, ZealousParams)
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
        assert not isinstance(params, KorolovaParams | ZealousParams)
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


FINGERPRINTS = ("full", "fast")
_FAST_TAG = b"searchveil parquet footer fingerprint v1\0"


def _is_parquet(path: Path) -> bool:
    return path.name.lower().endswith(".parquet") and path.is_file()


def check_fingerprint(fingerprint: str, path: Path | None = None) -> None:
    """``full`` always; ``fast`` only for a Parquet file (a typed error otherwise)."""
    if fingerprint not in FINGERPRINTS:
        raise InvalidParameterError("fingerprint", fingerprint, " | ".join(FINGERPRINTS))
    if fingerprint == "fast" and path is not None and not _is_parquet(Path(path)):
        raise InvalidParameterError(
            "fingerprint", fingerprint, "full, or fast with a Parquet file input"
        )


def parquet_footer_sha256(path: Path) -> str:
    """SHA-256 of a tag, the file size (8 bytes, little-endian), the Parquet footer (its
    Thrift metadata) and the 8-byte trailer; reads only the end of the file."""
    p = Path(path)
    size = p.stat().st_size
    with p.open("rb") as f:
        if size < 12:
            raise InputFormatError(str(p), "not a Parquet file (too short)")
        f.seek(size - 8)
        tail = f.read(8)
        if tail[4:] != b"PAR1":
            raise InputFormatError(str(p), "not a Parquet file (no PAR1 trailer)")
        n = int.from_bytes(tail[:4], "little")
        if n + 12 > size:
            raise InputFormatError(str(p), "not a Parquet file (footer longer than the file)")
        f.seek(size - 8 - n)
        footer = f.read(n)
    h = hashlib.sha256(_FAST_TAG)
    h.update(size.to_bytes(8, "little"))
    h.update(footer)
    h.update(tail)
    return h.hexdigest()


class _Ready:
    """A fingerprint already computed (the ``fast`` one), with BackgroundHash's interface."""

    def __init__(self, digest: str) -> None:
        self._digest = digest

    def result(self) -> str:
        return self._digest


def start_fingerprint(path: Path, fingerprint: str = "full") -> Any:
    """An object whose ``result()`` is the input's fingerprint: the whole-file SHA-256 hashed
    in a thread (``full``) or the Parquet footer hash (``fast``, computed now)."""
    check_fingerprint(fingerprint, path)
    if fingerprint == "fast":
        return _Ready(parquet_footer_sha256(path))
    return BackgroundHash(path)


def input_info(path: Path, sha: str, rows: int, normalize: bool) -> InputInfo:
    parquet = str(path).lower().endswith(".parquet")
    return InputInfo(
        path=str(path),
        sha256=sha,
        rows=rows,
        format="parquet" if parquet else "aol",
        encoding=None if parquet else "utf-8",  # as the in-memory reader records it
        normalized=normalize,
        # the engines read with the default reader options (the CLI refuses any other)
        reader=ReaderOptions(normalize=normalize).to_dict(),
    )


def input_record(
    path: Path, sha: str, rows: int, users: int, normalize: bool, fingerprint: str = "full"
) -> dict[str, Any]:
    """The private input record (for the provenance record, never the public ledger) of a file
    an engine read whole (``fingerprint`` says how ``sha256`` was computed: ``full`` |
    ``fast``)."""
    return input_info(path, sha, rows, normalize).to_dict(users=users) | {
        "fingerprint": fingerprint
    }


def reduced_rows(
    engine: Engine, path: Path, algorithm: str, params: PlanParams, *, fingerprint: str = "full"
) -> tuple[pl.DataFrame, dict[str, int], str]:
    """The reduced rows of :func:`reduce_rows`, the input totals and the file's fingerprint
    (:func:`start_fingerprint`: with ``full``, hashed in a thread meanwhile)."""
    sha = start_fingerprint(path, fingerprint)
    table = engine.scan(str(path))
    plan = reduce_rows(engine, table, algorithm, params)
    reduced, totals = engine.collect_with_totals(plan, table)
    return reduced, totals, sha.result()


def rows_plan_counts(
    engine: Engine,
    algorithm: str,
    path: Path,
    params: HistogramParams,
    *,
    normalize: bool,
    fingerprint: str = "full",
) -> BoundedCounts:
    """Bounded counts through the row plan (:func:`reduce_rows`): the engine keeps the rows
    each user may contribute, and the in-memory bounding counts them (idempotent on them)."""
    reduced, totals, sha = reduced_rows(engine, path, algorithm, params, fingerprint=fingerprint)
    info = input_info(path, sha, totals["rows"], normalize)
    log = to_search_log(reduced, info)
    if isinstance(params, KorolovaParams):
        bounded = korolova_counts(log, params, rng=NO_RNG)
    else:
        bounded = zealous_counts(log, params, rng=NO_RNG)
    bounded.figures["users"] = totals["users"]
    bounded.figures["rows_after_engine_bounding"] = reduced.height
    bounded.input = info.to_dict(users=totals["users"]) | {"fingerprint": fingerprint}
    bounded.plan = "rows"
    return bounded


class NoRandomness:
    """Bounding with strategy 'first' draws nothing; anything else is a bug."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"engine bounding must not draw randomness ({name})")


#: the randomness handed to the in-memory bounding on engine rows: drawing from it is a bug
NO_RNG: Any = NoRandomness()
