"""Parsing the time column of a log: AOL's ``2006-03-01 07:17:12`` and its near variants by
default (:func:`parse_time`), or a ``--time-format`` — ``iso``, ``epoch``, ``epoch-ms`` or a
strftime pattern, with ``--date`` for a time of day only (:func:`time_expr`) — and the words of
a value that does not parse (:func:`time_problem`).
"""

from __future__ import annotations

import polars as pl

from searchveil.errors import InvalidParameterError

__all__ = ["parse_time", "time_expr", "check_time_options", "time_problem"]

_TIME_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S")


def parse_time(col: pl.Expr) -> pl.Expr:
    """Timestamps in any of the accepted formats (AOL's ``2006-03-01 07:17:12`` first) as a
    Datetime; null where none parses."""
    parsed = [col.str.strptime(pl.Datetime("us"), f, strict=False) for f in _TIME_FORMATS]
    return pl.coalesce(parsed)


_DATE_DIRECTIVES = ("%Y", "%y", "%m", "%d", "%F", "%D", "%j", "%b", "%B", "%s", "%G", "%U")


_ISO_FORMATS = (
    "%Y-%m-%dT%H:%M:%S%.f",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%dT%H:%M",
    "%Y-%m-%d %H:%M:%S%.f",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d",
)


def check_time_options(time_format: str | None, date: str | None) -> None:
    if time_format is not None and time_format not in ("auto", "iso", "epoch", "epoch-ms"):
        if "%" not in time_format:
            raise InvalidParameterError(
                "time-format", time_format, "iso | epoch | epoch-ms | a strftime pattern"
            )
    if date is not None:
        ok = pl.Series([date]).str.strptime(pl.Date, "%Y-%m-%d", strict=False)[0]
        if ok is None:
            raise InvalidParameterError("date", date, "a date YYYY-MM-DD")
        if time_format is None or "%" not in time_format or _has_date(time_format):
            raise InvalidParameterError(
                "date", date, "only with a time-of-day --time-format such as %H:%M:%S"
            )


def _has_date(pattern: str) -> bool:
    return any(d in pattern for d in _DATE_DIRECTIVES)


def time_expr(col: pl.Expr, time_format: str | None, date: str | None = None) -> pl.Expr:
    """Parse ``col`` (strings) with a ``--time-format`` (see :class:`ReaderOptions`) into a
    Datetime; null where the value does not parse."""
    s = col.str.strip_chars()
    if time_format in (None, "auto"):
        return parse_time(s)
    if time_format == "iso":
        s = s.str.strip_suffix("Z")
        return pl.coalesce(
            [s.str.strptime(pl.Datetime("us"), f, strict=False) for f in _ISO_FORMATS]
        )
    if time_format in ("epoch", "epoch-ms"):
        unit = "s" if time_format == "epoch" else "ms"
        n = s.cast(pl.Float64, strict=False)
        scale = 1_000_000 if unit == "s" else 1_000
        us = (n * scale).round(0).cast(pl.Int64, strict=False)
        return pl.from_epoch(us, time_unit="us")
    if _has_date(time_format):
        return s.str.strptime(pl.Datetime("us"), time_format, strict=False)
    day = date or "1970-01-01"
    return (pl.lit(day + " ") + s).str.strptime(
        pl.Datetime("us"), "%Y-%m-%d " + time_format, strict=False
    )


def time_problem(column: str, time_format: str | None) -> str:
    want = {
        None: "'YYYY-MM-DD HH:MM[:SS]' (set --time-format for other layouts)",
        "auto": "'YYYY-MM-DD HH:MM[:SS]' (set --time-format for other layouts)",
        "iso": "an ISO 8601 date-time",
        "epoch": "seconds since 1970 (--time-format epoch)",
        "epoch-ms": "milliseconds since 1970 (--time-format epoch-ms)",
    }.get(time_format, f"in --time-format {time_format!r}")
    return f"time in column {column!r} is not {want}"
