"""Readers for raw search logs: AOL layout, generic delimited files, Parquet and MSNBC sequences.

All readers produce a :class:`~searchveil.model.SearchLog` whose ``df`` has the canonical
columns (see ``docs/architecture.md``): ``user, query, time, rank, url, session, row`` plus any
extra input columns (lower-cased names, e.g. ``sessionid``).

Text files are parsed column-wise by Polars: every physical line is read as one string, the
field separators are counted per line (a *ragged row* is one whose count differs from the
header's) and the fields are split out vectorised, so file and line of every problem are known
without a Python loop over rows. Encodings other than UTF-8 are decoded strictly by Python's
codec first. Problems raise :class:`~searchveil.errors.InputFormatError` naming file, line and
problem, or with ``on_bad_rows="skip"`` are dropped and counted (``InputInfo.bad_rows``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.files import PARQUET_DAMAGED, file_sha256
from searchveil.io.formats import Layout, check_parquet, layout
from searchveil.io.msnbc import read_msnbc_sequences
from searchveil.io.profiles import PROFILE_NAMES, PROFILES
from searchveil.io.text import (
    BadRows,
    OnBadRows,
    decode_check,
    ragged_rows_problem,
    raw_bytes,
    read_lines,
    sep_name,
    split_fields,
)
from searchveil.io.times import check_time_options, parse_time, time_expr, time_problem
from searchveil.io.trec import read_trec_session
from searchveil.model import InputInfo, SearchLog, add_sessions, normalize_query
from searchveil.validate import check_choice, parse_choice

__all__ = [
    "ColumnMapping",
    "ReaderOptions",
    "INTERNAL_COLUMNS",
    "read_log",
    "scan_log",
    "AOL_COLUMNS",
]

TIME_FORMATS = ("auto", "iso", "epoch", "epoch-ms", "STRFTIME-PATTERN")
# names the reader creates; input columns with these names are kept as ``input_<name>``
INTERNAL_COLUMNS = ("user", "query", "time", "rank", "url", "session", "row", "click_order")
AOL_COLUMNS = ("AnonID", "Query", "QueryTime", "ItemRank", "ClickURL")


@dataclass(frozen=True)
class ColumnMapping:
    """Which input columns hold the canonical fields (names as in the header)."""

    user: str = "AnonID"
    query: str = "Query"
    time: str | None = "QueryTime"
    url: str | None = "ClickURL"
    rank: str | None = "ItemRank"
    session: str | None = None
    rank_click: str | None = None  # one column "rank click" (SogouQ): split into rank, click order

    def __post_init__(self) -> None:
        for name in ("time", "url", "rank", "session", "rank_click"):
            if getattr(self, name) == "":  # '' = no such column, as on the command line
                object.__setattr__(self, name, None)

    def required(self) -> list[str]:
        return [self.user, self.query]

    def as_dict(self) -> dict[str, str | None]:
        return {
            "user": self.user,
            "query": self.query,
            "time": self.time,
            "url": self.url,
            "rank": self.rank,
            "session": self.session,
            "rank_click": self.rank_click,
        }


_COLUMN_KEYS = ("user", "query", "time", "url", "rank", "session", "rank_click")


@dataclass(frozen=True)
class ReaderOptions:
    """Every reader setting, shared by all commands (the CLI builds it once, in
    ``cli/_common.py``) and recorded in the ledger's input record so that ``evaluate`` can read
    the original with the same mapping as the release.

    ``columns`` None means the default layout (AOL header, or AOL column order without a
    header). Without a header (``has_header=False``) and with a mapping, columns are named by
    their 1-based position (``"2"`` is the second field, as ``cut -f2`` counts).
    ``time_format``: None (AOL ``YYYY-MM-DD HH:MM[:SS]``), ``"iso"``, ``"epoch"``,
    ``"epoch-ms"`` or a strftime pattern; a pattern without a date (e.g. ``%H:%M:%S``) is a time
    of day on ``date`` (``YYYY-MM-DD``, default 1970-01-01).
    """

    fmt: str = "auto"
    columns: ColumnMapping | None = None
    delimiter: str | None = None
    encoding: str = "utf-8"
    on_bad_rows: str = "error"
    normalize: bool = True
    session_gap_minutes: float = 30.0
    has_header: bool = True
    time_format: str | None = None
    date: str | None = None
    strip_brackets: bool = False
    profile: str | None = None

    @classmethod
    def from_profile(cls, profile: str | None, **overrides: Any) -> ReaderOptions:
        """The options of a named profile (see :mod:`searchveil.io.profiles`), with
        ``overrides`` (field names of this class, or column keys ``user``, ``query``, ``time``,
        ``url``, ``rank``, ``session``, ``rank_click``) taking precedence."""
        prof: dict[str, Any] = {}
        if profile is not None:
            check_choice("profile", profile, PROFILE_NAMES)
            prof = dict(PROFILES[profile])
        prof_cols = {k: prof.pop(k) for k in _COLUMN_KEYS if k in prof}
        values = {**prof, **{k: v for k, v in overrides.items() if k not in _COLUMN_KEYS}}
        base: ColumnMapping | None = None
        if overrides.get("columns") is not None:  # a whole mapping replaces the profile's
            base = overrides["columns"]
        elif prof_cols:
            base = dataclasses.replace(ColumnMapping(), **prof_cols)
        over_cols = {k: overrides[k] for k in _COLUMN_KEYS if k in overrides}
        if over_cols:
            base = dataclasses.replace(base or ColumnMapping(), **over_cols)
        values["columns"] = base
        return cls(profile=profile, **values)

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`read_log`."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the ledger's ``input.reader``); inverse of :meth:`from_dict`."""
        d = self.kwargs()
        d["columns"] = self.columns.as_dict() if self.columns is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReaderOptions:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        cols = values.get("columns")
        if isinstance(cols, dict):
            col_keys = {f.name for f in dataclasses.fields(ColumnMapping)}
            values["columns"] = ColumnMapping(**{k: v for k, v in cols.items() if k in col_keys})
        elif cols is not None:
            raise InvalidParameterError("reader.columns", cols, "a column mapping object")
        return cls(**values)


def _rank_exprs(c: Callable[[str], pl.Expr], m: dict[str, str | None]) -> list[pl.Expr]:
    """``rank`` (from a rank column or the first half of AOL's "rank click" column) and, from
    the latter, ``click_order``."""
    exprs: list[pl.Expr] = []
    rank_src: pl.Expr | None = None
    if m["rank_click"]:
        parts = c(m["rank_click"]).str.strip_chars().str.split_exact(" ", 1)
        rank_src = parts.struct.field("field_0")
        exprs.append(
            parts.struct.field("field_1")
            .str.strip_chars()
            .cast(pl.Int64, strict=False)
            .alias("click_order")
        )
    elif m["rank"]:
        rank_src = c(m["rank"]).str.strip_chars()
    exprs.append(
        rank_src.cast(pl.Int64, strict=False).alias("rank")
        if rank_src is not None
        else pl.lit(None, pl.Int64).alias("rank")
    )
    return exprs


def _extra_columns(
    cols: list[str], c: Callable[[str], pl.Expr], m: dict[str, str | None]
) -> list[pl.Expr]:
    """The unmapped input columns, kept under their lower-cased name (``input_<name>`` for an
    internal one, ``_`` appended until it clashes with nothing)."""
    used = {v for k, v in m.items() if v and k != "session"} | (
        {m["session"]} if m["session"] else set()
    )
    taken = {"user", "query", "time", "rank", "url"} | (
        {"click_order"} if m["rank_click"] else set()
    )
    extras = []
    for name in cols:
        if name in used:
            continue
        out = name.lower()
        if out in INTERNAL_COLUMNS or out.startswith("_"):
            out = f"input_{out}"
        while out in taken:
            out = f"{out}_"
        taken.add(out)
        extras.append(c(name).alias(out))
    return extras


def _canonicalize(
    raw: pl.DataFrame,
    line_numbers: pl.Series,
    mapping: ColumnMapping,
    bad: BadRows,
    *,
    normalize: bool,
    user_numeric: bool | None,
    time_format: str | None = None,
    date: str | None = None,
    strip_brackets: bool = False,
) -> pl.DataFrame:
    """Turn string columns (named as in the header) into the canonical columns.

    The input columns are first renamed to private positional names, so no input name (a
    column called ``time``, ``row`` or ``_line``) can clash with the names created here;
    unmapped input columns are kept under their lower-cased name, or ``input_<name>`` when
    that is one of :data:`INTERNAL_COLUMNS`.
    """
    cols = raw.columns
    private = {c: f"__c{i}" for i, c in enumerate(cols)}
    raw = raw.rename(private)
    m = mapping.as_dict()

    def c(name: str) -> pl.Expr:
        return pl.col(private[name])

    def rc(name: str) -> pl.Series:
        return raw.get_column(private[name])

    user = c(mapping.user).str.strip_chars()
    exprs: list[pl.Expr] = []
    if user_numeric is None:
        nonempty = rc(mapping.user).drop_nulls()
        user_numeric = nonempty.len() > 0 and bool(
            nonempty.str.strip_chars().str.contains(r"^-?\d{1,18}$").all()
        )
    exprs.append(
        user.cast(pl.Int64, strict=False).alias("user") if user_numeric else user.alias("user")
    )
    q = c(mapping.query).fill_null("")
    if strip_brackets:
        q = q.str.strip_chars().str.replace(r"^\[(.*)\]$", "${1}")
    exprs.append((normalize_query(q) if normalize else q).alias("query"))
    exprs.append(
        time_expr(c(m["time"]), time_format, date).alias("time")
        if m["time"]
        else pl.lit(None, pl.Datetime("us")).alias("time")
    )
    exprs += _rank_exprs(c, m)
    exprs.append(
        c(m["url"]).str.strip_chars().replace("", None).alias("url")
        if m["url"]
        else pl.lit(None, pl.String).alias("url")
    )
    extras = _extra_columns(cols, c, m)
    if m["session"]:
        extras.append(c(m["session"]).alias("_session_raw"))
    df = raw.with_columns(line_numbers.alias("__line")).select(
        [*exprs, *extras, pl.col("__line").alias("_line")]
    )

    return df.filter(_valid_rows(df, rc, m, bad, user_numeric, time_format))


def _valid_rows(
    df: pl.DataFrame,
    rc: Callable[[str], pl.Series],
    m: dict[str, str | None],
    bad: BadRows,
    user_numeric: bool,
    time_format: str | None,
) -> pl.Series:
    """Which canonical rows to keep: a missing (or, for numeric ids, non-integer) user, a
    time, rank or rank-click value that does not parse is a bad row (refused or skipped by
    ``bad``); ``rc(name)``: the raw column of input column ``name``."""
    user_col = m["user"]
    assert user_col is not None  # the user column is always mapped
    raw_user = rc(user_col)
    bad_user = df.get_column("user").is_null() | (raw_user.str.strip_chars().fill_null("") == "")
    keep = bad.handle(
        bad_user,
        df.get_column("_line"),
        f"user id in column {m['user']!r} is missing"
        + (" or not an integer" if user_numeric else ""),
    )
    if m["time"]:
        raw_time = rc(m["time"]).str.strip_chars().fill_null("")
        bad_time = df.get_column("time").is_null() & (raw_time != "")
        keep = keep & bad.handle(
            bad_time & keep, df.get_column("_line"), time_problem(m["time"], time_format)
        )
    if m["rank_click"]:
        raw_rc = rc(m["rank_click"]).str.strip_chars().fill_null("")
        bad_rc = (raw_rc != "") & (
            df.get_column("rank").is_null() | df.get_column("click_order").is_null()
        )
        keep = keep & bad.handle(
            bad_rc & keep,
            df.get_column("_line"),
            f"column {m['rank_click']!r} is not 'RANK CLICK' (two integers)",
        )
    elif m["rank"]:
        raw_rank = rc(m["rank"]).str.strip_chars().fill_null("")
        bad_rank = df.get_column("rank").is_null() & (raw_rank != "")
        keep = keep & bad.handle(
            bad_rank & keep,
            df.get_column("_line"),
            f"rank in column {m['rank']!r} is not an integer",
        )
    return keep


def _finish(
    df: pl.DataFrame,
    path: Path,
    sha: str,
    o: ReaderOptions,
    fmt: str,
    *,
    bad: BadRows | None,
    columns: ColumnMapping | None,
    encoding: str | None,
    normalized: bool,
) -> SearchLog:
    """The log of canonical rows ``df`` (row ids and sessions added) and what was read."""
    info = InputInfo(
        path=str(path),
        sha256=sha,
        rows=df.height,
        bad_rows=0 if bad is None else bad.count,
        format=fmt,
        encoding=encoding,
        bad_row_examples=() if bad is None else tuple(bad.examples),
        columns={} if columns is None else columns.as_dict(),
        normalized=normalized,
        reader=o.to_dict(),
    )
    if df.height == 0:
        raise InputFormatError(str(path), "no data rows left (empty input)")
    df = df.with_row_index("row").with_columns(pl.col("row").cast(pl.UInt64))
    df = add_sessions(df, gap_minutes=o.session_gap_minutes)
    if "_line" in df.columns:
        df = df.drop("_line")
    return SearchLog(df=df, info=info)


def read_log(
    path: str | os.PathLike[str],
    options: ReaderOptions | None = None,
    *,
    fmt: str | None = None,
    columns: ColumnMapping | None = None,
    delimiter: str | None = None,
    encoding: str | None = None,
    on_bad_rows: str | None = None,
    normalize: bool | None = None,
    session_gap_minutes: float | None = None,
    has_header: bool | None = None,
    time_format: str | None = None,
    date: str | None = None,
    strip_brackets: bool | None = None,
    profile: str | None = None,
) -> SearchLog:
    """Read a raw search log into a :class:`SearchLog` (see module docstring).

    Either pass a :class:`ReaderOptions` (``options``) or the same settings as keywords (None =
    the default, or the profile's setting: ``profile`` applies a named profile and every
    keyword given overrides it). The settings used are recorded in ``log.info.reader``."""
    if options is None:
        given = dict(
            fmt=fmt, columns=columns, delimiter=delimiter, encoding=encoding,
            on_bad_rows=on_bad_rows, normalize=normalize,
            session_gap_minutes=session_gap_minutes, has_header=has_header,
            time_format=time_format, date=date, strip_brackets=strip_brackets,
        )  # fmt: skip
        options = ReaderOptions.from_profile(
            profile, **{k: v for k, v in given.items() if v is not None}
        )
    o = options
    p = Path(path)
    _check_options(o)
    if not p.exists():
        raise InputFormatError(str(p), "no such file")
    if p.is_dir():
        raise InputFormatError(str(p), "is a directory, expected a file")
    kind = layout(p, o.fmt)
    sha = file_sha256(p)
    bad = BadRows(p, o.on_bad_rows)
    if kind == "parquet":
        return _read_parquet(p, sha, o, bad)
    data = decode_check(p, raw_bytes(p), o.encoding)
    if not data.strip():
        raise InputFormatError(str(p), "empty file")
    if kind == "msnbc":
        return _read_msnbc(p, data, sha, o)
    if kind == "trec-session":
        return _read_trec(p, data, sha, o)
    return _read_delimited(p, data, sha, o, bad, kind)


def _read_delimited(
    p: Path, data: bytes, sha: str, o: ReaderOptions, bad: BadRows, kind: str
) -> SearchLog:
    """A delimited text log (AOL, CSV/TSV) read row by row into the canonical columns."""
    lines = read_lines(p, data)
    line_numbers = pl.Series("_line", range(1, lines.len() + 1), dtype=pl.Int64)
    # drop blank lines (keeping the physical numbering)
    nonblank = lines.str.strip_chars() != ""
    lines, line_numbers = lines.filter(nonblank), line_numbers.filter(nonblank)
    sep = o.delimiter or ("\t" if kind == "aol" else _guess_delimiter(lines[0]))
    header, lines, line_numbers = _header(lines, line_numbers, sep, o)
    mapping = _column_mapping(header, o)
    _check_header(p, header, mapping, kind)
    if lines.len() == 0:
        raise InputFormatError(str(p), "header only, no data rows")
    n = len(header)
    counts = lines.str.count_matches(sep, literal=True)
    ragged = counts != n - 1
    keep = bad.handle(
        ragged, line_numbers, ragged_rows_problem(ragged, counts, n, sep, o.has_header)
    )
    lines, line_numbers = lines.filter(keep), line_numbers.filter(keep)
    raw = split_fields(lines, sep, n)
    raw.columns = _dedupe(header)
    df = _canonicalize(
        raw, line_numbers, mapping, bad, normalize=o.normalize, user_numeric=None,
        time_format=o.time_format, date=o.date, strip_brackets=o.strip_brackets,
    )  # fmt: skip
    return _finish(
        df, p, sha, o, kind, bad=bad, columns=mapping, encoding=o.encoding, normalized=o.normalize
    )


def _check_options(o: ReaderOptions) -> None:
    """Refuse reader settings that are invalid whatever the file."""
    parse_choice("format", o.fmt, Layout)
    parse_choice("on_bad_rows", o.on_bad_rows, OnBadRows)
    if o.session_gap_minutes <= 0:
        raise InvalidParameterError("session_gap_minutes", o.session_gap_minutes, "a number > 0")
    if o.delimiter is not None and len(o.delimiter) != 1:
        raise InvalidParameterError(
            "delimiter", o.delimiter, "a single character, e.g. ',' or '\\t'"
        )
    check_time_options(o.time_format, o.date)


def _header(
    lines: pl.Series, line_numbers: pl.Series, sep: str, o: ReaderOptions
) -> tuple[list[str], pl.Series, pl.Series]:
    """The column names (the header line, AOL's, or 1-based positions as cut counts) and the
    data lines with their numbers."""
    if o.has_header:
        header = [h.strip() for h in lines[0].split(sep)]
        return header, lines[1:], line_numbers[1:]
    if o.columns is None:
        return list(AOL_COLUMNS)[: lines[0].count(sep) + 1], lines, line_numbers
    # positional names, 1-based as cut counts
    return [str(i) for i in range(1, lines[0].count(sep) + 2)], lines, line_numbers


def _column_mapping(header: list[str], o: ReaderOptions) -> ColumnMapping:
    """The columns to read: the mapping given (without defaults the header lacks) or AOL's,
    with a session column found by name when none is mapped."""
    mapping = o.columns or ColumnMapping()
    if o.columns is not None:
        mapping = _drop_absent_defaults(mapping, header)
    if mapping.session is None:
        auto = [h for h in header if h.lower() in ("sessionid", "session_id", "session")]
        if auto:
            mapping = dataclasses.replace(mapping, session=auto[0])
    return mapping


def _drop_absent_defaults(mapping: ColumnMapping, header: list[str]) -> ColumnMapping:
    """With a user-given mapping, an optional column left at its AOL default name
    (``QueryTime``, ``ClickURL``, ``ItemRank``) that the input does not have is absent rather
    than an error: ``--user-col 2 --query-col 3`` needs no ``--url-col ''``."""
    aol = ColumnMapping()
    drop = {
        k: None
        for k in ("time", "url", "rank")
        if getattr(mapping, k) == getattr(aol, k) and getattr(aol, k) not in header
    }
    # None marks an optional column as absent (ColumnMapping's fields are typed as present)
    return dataclasses.replace(mapping, **drop) if drop else mapping  # type: ignore[arg-type]


def _dedupe(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for name in names:
        name = name or "column"
        if name in seen:
            seen[name] += 1
            out.append(f"{name}_{seen[name]}")
        else:
            seen[name] = 0
            out.append(name)
    return out


def _guess_delimiter(first_line: str) -> str:
    counts = {c: first_line.count(c) for c in ("\t", ",", ";", "|")}
    best = max(counts, key=lambda c: counts[c])
    return best if counts[best] else "\t"


def _check_header(path: Path, header: list[str], mapping: ColumnMapping, kind: str) -> None:
    missing = [c for c in mapping.required() if c not in header]
    optional_missing = [
        c
        for c in (mapping.time, mapping.url, mapping.rank, mapping.session)
        if c and c not in header
    ]
    if missing or (kind == "aol" and optional_missing and mapping == ColumnMapping()):
        need = missing + (
            [] if not (kind == "aol" and mapping == ColumnMapping()) else optional_missing
        )
        raise InputFormatError(
            str(path),
            f"missing column(s) {', '.join(repr(c) for c in need)} in header {_shown(header)}; "
            + _header_hint(header, kind),
            1,
        )
    if optional_missing:
        raise InputFormatError(
            str(path),
            f"column(s) {', '.join(repr(c) for c in optional_missing)} named in the column mapping "
            f"are not in header {header!r}",
            1,
        )


def _shown(header: list[str], limit: int = 200) -> str:
    text = repr(header)
    return text if len(text) <= limit else text[:limit] + "…"


def _header_hint(header: list[str], kind: str) -> str:
    """Which options help when the header lacks the mapped columns."""
    hints = []
    one = header[0] if len(header) == 1 else ""
    seps = [c for c in (",", ";", "|", "\t") if c in one]
    if seps:
        hints.append(
            f"the first line has no field separator of this format but contains "
            f"{sep_name(seps[0])}: pass --delimiter '{seps[0]}' (or --format csv to sniff it)"
        )
    looks_like_data = any(
        h.strip().lstrip("-").isdigit() or (len(h) >= 10 and h[:4].isdigit() and h[4] == "-")
        for h in header
    )
    if looks_like_data and not seps:
        hints.append(
            "the first line looks like data, not a header: pass --no-header (AOL column order) "
            "or name columns by position, e.g. --no-header --user-col 1 --query-col 2"
        )
    hints.append(
        "map columns with --user-col/--query-col/--time-col/--url-col/--rank-col, or choose a "
        f"layout with --profile ({', '.join(PROFILE_NAMES)})"
    )
    return "; ".join(hints)


def _read_parquet(p: Path, sha: str, o: ReaderOptions, bad: BadRows) -> SearchLog:
    mapping = o.columns or ColumnMapping()
    check_parquet(p)
    try:
        raw = pl.read_parquet(p)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputFormatError(str(p), PARQUET_DAMAGED) from exc
    if o.columns is not None:
        mapping = _drop_absent_defaults(mapping, raw.columns)
    _check_header(p, raw.columns, mapping, "parquet")
    if raw.height == 0:
        raise InputFormatError(str(p), "Parquet file has no rows")
    user_numeric = raw.schema[mapping.user].is_integer()
    time_native = mapping.time is not None and raw.schema[mapping.time].is_temporal()
    raw = raw.with_columns(pl.all().cast(pl.String))
    if mapping.time and (time_native or o.time_format is None):
        raw = raw.with_columns(pl.col(mapping.time).str.slice(0, 19))
    line_numbers = pl.Series("_line", range(1, raw.height + 1), dtype=pl.Int64)
    df = _canonicalize(
        raw, line_numbers, mapping, bad, normalize=o.normalize, user_numeric=user_numeric,
        time_format=None if time_native else o.time_format, date=o.date,
        strip_brackets=o.strip_brackets,
    )  # fmt: skip
    return _finish(
        df, p, sha, o, "parquet", bad=bad, columns=mapping, encoding=None, normalized=o.normalize
    )


def _read_trec(p: Path, data: bytes, sha: str, o: ReaderOptions) -> SearchLog:
    """TREC Session Track XML (see :mod:`searchveil.io.trec`)."""
    rows = read_trec_session(p, data)
    q = pl.col("query")
    out = rows.select(
        pl.col("user"),
        (normalize_query(q) if o.normalize else q).alias("query"),
        pl.lit(None, pl.Datetime("us")).alias("time"),
        pl.col("rank"),
        pl.col("url"),
        pl.col("session_id").alias("_session_raw"),
    )
    return _finish(
        out,
        p,
        sha,
        o,
        "trec-session",
        bad=None,
        columns=None,
        encoding=o.encoding,
        normalized=o.normalize,
    )


def _read_msnbc(p: Path, data: bytes, sha: str, o: ReaderOptions) -> SearchLog:
    """MSNBC sequences (see :mod:`searchveil.io.msnbc`)."""
    out = read_msnbc_sequences(p, read_lines(p, data))
    return _finish(
        out, p, sha, o, "msnbc", bad=None, columns=None, encoding=o.encoding, normalized=False
    )


def scan_log(
    path: str | os.PathLike[str],
    *,
    fmt: str = "auto",
    columns: ColumnMapping | None = None,
    delimiter: str | None = None,
    normalize: bool = True,
) -> pl.LazyFrame:
    """A lazy, streaming scan with canonical columns ``user, query, time, url, row`` for the
    scalable engines. Unlike :func:`read_log` it does not validate each row (ragged rows are
    truncated/filled by Polars); run :func:`read_log` or ``searchveil stats`` to validate."""
    p = Path(path)
    if not p.exists():
        raise InputFormatError(str(p), "no such file")
    kind = layout(p, fmt)
    m = columns or ColumnMapping()
    if kind == "parquet":
        lf = pl.scan_parquet(p)
    elif kind in (Layout.AOL, Layout.CSV):
        lf = pl.scan_csv(
            p,
            separator=delimiter or "\t",
            quote_char=None,
            infer_schema=False,
            truncate_ragged_lines=True,
        )
    else:
        raise InvalidParameterError("format", kind, "'aol', 'csv' or 'parquet' for streaming scans")
    q = pl.col(m.query).cast(pl.String).fill_null("")
    exprs = [
        pl.col(m.user).cast(pl.Int64, strict=False).alias("user"),
        (normalize_query(q) if normalize else q).alias("query"),
        (
            parse_time(pl.col(m.time).cast(pl.String))
            if m.time
            else pl.lit(None, pl.Datetime("us"))
        ).alias("time"),
        (
            pl.col(m.url).cast(pl.String).replace("", None) if m.url else pl.lit(None, pl.String)
        ).alias("url"),
    ]
    return lf.select(exprs).with_row_index("row")
