"""A text log as checked lines and fields, for :func:`searchveil.io.readers.read_log`: the
bytes (inflated when the container is gzip, detected by content), decoded with a check that
names the first undecodable line, split into lines and fields; the rows that do not fit
(:class:`BadRows`: refused with the line named, or skipped and counted) and the messages of a
ragged row.
"""

from __future__ import annotations

import codecs
import gzip
import io
import zlib
from enum import StrEnum
from pathlib import Path
from typing import Any

import polars as pl

from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.files import decompress_problem
from searchveil.io.formats import Container, container

__all__ = [
    "BadRows",
    "OnBadRows",
    "decode_check",
    "raw_bytes",
    "read_lines",
    "ragged_problem",
    "ragged_rows_problem",
    "sep_name",
    "split_fields",
]

_MAX_BAD_EXAMPLES = 5


def raw_bytes(path: Path) -> bytes:
    try:
        if container(path) == Container.GZIP:
            with gzip.open(path, "rb") as f:
                return f.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise InputFormatError(str(path), decompress_problem(exc)) from exc


def _line_of(data: bytes, pos: int) -> int:
    return data.count(b"\n", 0, pos) + 1


def decode_check(path: Path, data: bytes, encoding: str) -> bytes:
    """Return UTF-8 bytes of ``data`` decoded strictly with ``encoding``."""
    try:
        codecs.lookup(encoding)
    except LookupError:
        raise InvalidParameterError("encoding", encoding, "a Python codec name") from None
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        line = _line_of(data, exc.start)
        raise InputFormatError(
            str(path),
            f"bytes {data[exc.start : exc.start + 4]!r} are not valid {encoding} "
            f"(try --encoding, e.g. gb18030 or latin-1)",
            line,
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise InputFormatError(str(path), "NUL byte in a text file (is it binary?)", line)
    if codecs.lookup(encoding).name == "utf-8":
        return data[3:] if data.startswith(codecs.BOM_UTF8) else data
    return text.encode("utf-8")


def read_lines(path: Path, data: bytes) -> pl.Series:
    """Every line of ``data`` (UTF-8) as a String Series, empty lines kept, ``\\r`` stripped."""
    try:
        df = pl.read_csv(
            io.BytesIO(data),
            has_header=False,
            separator="\x00",
            quote_char=None,
            schema={"line": pl.String},
            raise_if_empty=False,
        )
    except pl.exceptions.PolarsError as exc:  # pragma: no cover - NUL is checked before
        raise InputFormatError(str(path), f"cannot split into lines: {exc}") from None
    lines = df.get_column("line").fill_null("")
    return lines.str.strip_suffix("\r")


def split_fields(lines: pl.Series, sep: str, n: int) -> pl.DataFrame:
    return (
        pl.DataFrame({"_l": lines})
        .select(pl.col("_l").str.split_exact(sep, n - 1).alias("s"))
        .unnest("s")
    )


class OnBadRows(StrEnum):
    """``--on-bad-rows``: refuse the input at the first bad row (naming its line), or skip and
    count such rows."""

    ERROR = "error"
    SKIP = "skip"


class BadRows:
    """Collects bad rows: raise on the first (mode "error") or drop and count (mode "skip")."""

    def __init__(self, path: Path, mode: str) -> None:
        self.path = path
        self.mode = mode
        self.count = 0
        self.examples: list[dict[str, Any]] = []

    def handle(self, mask: pl.Series, lines: pl.Series, problem: str) -> pl.Series:
        """``mask`` marks bad rows; returns the keep-mask."""
        n_bad = int(mask.sum() or 0)
        if n_bad == 0:
            return ~mask
        first = int(mask.arg_true()[0])
        line_no = int(lines[first])
        if self.mode == "error":
            raise InputFormatError(
                str(self.path),
                f"{problem} ({n_bad} such row(s); --on-bad-rows skip drops them)",
                line_no,
            )
        self.count += n_bad
        for i in mask.arg_true()[: _MAX_BAD_EXAMPLES - len(self.examples)]:
            self.examples.append({"line": int(lines[int(i)]), "problem": problem})
        return ~mask


def sep_name(sep: str) -> str:
    """A field separator in words (for messages)."""
    return {"\t": "tabs", ",": "commas", ";": "semicolons", " ": "spaces"}.get(sep, repr(sep))


def ragged_problem(n: int, found: int, sep: str, where: str = "the header") -> str:
    """The message of a row whose field count differs from the header's."""
    return (
        f"ragged row: expected {n} fields separated by {sep_name(sep)} as in {where}, found {found}"
    )


def ragged_rows_problem(
    ragged: pl.Series, counts: pl.Series, n: int, sep: str, has_header: bool
) -> str:
    if not ragged.any():
        return ""
    found = int(counts.filter(ragged)[0]) + 1
    msg = ragged_problem(n, found, sep, "the header" if has_header else "the first line")
    n_bad = int(ragged.sum() or 0)
    if n_bad >= 10 and n_bad * 2 > ragged.len():  # most rows: the layout, not a few lines
        msg += "; most rows differ, so check the layout: --delimiter (the field separator), " + (
            "--no-header if the first line is data" if has_header else "--header"
        )
    return msg
