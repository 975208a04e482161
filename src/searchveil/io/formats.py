"""The one place a file's format is detected — by its content, not its name.

A search-log file is held in one of three *containers* (:class:`Container`): a Parquet file
(the bytes ``PAR1`` at both ends), a gzip stream (it starts with the bytes ``1f 8b``) or plain
text. :func:`container` reads the first bytes and says which, so a Parquet file without the
``.parquet`` suffix, or a gzip file named ``.tsv``, takes the same path in every reader and
every engine. A file *named* ``.parquet`` that is not one is an error in the user's terms
(:func:`check_parquet`), as is a Parquet file whose footer is missing (a truncated copy).

Inside a text container the *layout* (:class:`Layout`: the AOL TSV layout, a delimited CSV,
MSNBC sequences, TREC session XML) cannot be told reliably from the bytes; :func:`layout`
resolves ``--format auto`` from the container and, for text, from the file name (``.seq``,
``.xml``, ``.csv``/``.txt``), the only name-based guess left in the package.
"""

from __future__ import annotations

import gzip
import os
import zlib
from enum import StrEnum
from pathlib import Path

import polars as pl

from searchveil.errors import InputFormatError
from searchveil.validate import parse_choice

__all__ = [
    "Container",
    "Layout",
    "GZIP_MAGIC",
    "PARQUET_MAGIC",
    "container",
    "layout",
    "is_parquet",
    "check_parquet",
    "parquet_footer",
    "gzip_named_as_such",
]

GZIP_MAGIC = b"\x1f\x8b"
PARQUET_MAGIC = b"PAR1"


class Container(StrEnum):
    """How a file's bytes are held (detected by content)."""

    TEXT = "text"
    GZIP = "gzip"
    PARQUET = "parquet"


class Layout(StrEnum):
    """The reader formats (``--format``): how rows and columns are laid out."""

    AUTO = "auto"
    AOL = "aol"
    CSV = "csv"
    PARQUET = "parquet"
    MSNBC = "msnbc"
    TREC_SESSION = "trec-session"


def _head(path: Path, n: int = 4) -> bytes:
    with path.open("rb") as f:
        return f.read(n)


def _named_parquet(path: Path) -> bool:
    return path.name.lower().endswith(".parquet")


def container(path: str | os.PathLike[str]) -> Container:
    """The container of ``path``, by its first bytes (the name plays no part)."""
    head = _head(Path(path))
    if head == PARQUET_MAGIC:
        return Container.PARQUET
    if head[:2] == GZIP_MAGIC:
        return Container.GZIP
    return Container.TEXT


def is_parquet(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a file that starts with the Parquet magic bytes (never raises for a
    missing or unreadable file: ``False``)."""
    p = Path(path)
    try:
        return p.is_file() and _head(p) == PARQUET_MAGIC
    except OSError:
        return False


def layout(path: str | os.PathLike[str], fmt: str = "auto") -> Layout:
    """``--format`` resolved: an explicit format as given; ``auto`` → ``parquet`` for a Parquet
    container (or a file named ``.parquet``: it then gets :func:`check_parquet`'s error where it
    is read), else a text layout guessed from the name (``.seq`` → msnbc, ``.xml`` →
    trec-session, ``.csv``/``.txt`` → csv, else aol; a ``.gz`` suffix is ignored)."""
    chosen = parse_choice("format", fmt, Layout)
    if chosen != Layout.AUTO:
        return chosen
    p = Path(path)
    if is_parquet(p) or _named_parquet(p):
        return Layout.PARQUET
    name = p.name.lower().removesuffix(".gz")
    if name.endswith(".seq"):
        return Layout.MSNBC
    if name.endswith(".xml"):
        return Layout.TREC_SESSION
    if name.endswith((".csv", ".txt")):
        return Layout.CSV
    return Layout.AOL


def header_columns(path: str | os.PathLike[str]) -> list[str] | None:
    """The column names a file declares, read by its container: a Parquet file's schema, or the
    tab-separated first line of a (gzipped) text file. None when the file cannot be read so
    (the reader then says what is wrong, in the user's terms)."""
    p = Path(path)
    try:
        kind = container(p)
        if kind == Container.PARQUET:
            return list(pl.read_parquet_schema(p).keys())
        with gzip.open(p, "rb") if kind == Container.GZIP else p.open("rb") as fh:
            return fh.readline(1 << 16).decode("utf-8", "replace").rstrip("\r\n").split("\t")
    except (OSError, EOFError, zlib.error, pl.exceptions.PolarsError):
        return None


def gzip_named_as_such(path: str | os.PathLike[str]) -> bool:
    """Whether a gzip file's name ends in ``.gz`` (readers that pick the codec by name, as
    Spark's, need it)."""
    return Path(path).name.lower().endswith(".gz")


def check_parquet(path: str | os.PathLike[str]) -> None:
    """Raise :class:`InputFormatError` unless ``path`` has the frame of a Parquet file: the
    bytes ``PAR1`` at both ends and a footer that fits in the file (what a truncated copy or a
    text file named ``.parquet`` lacks). Reads 8 bytes at each end."""
    p = Path(path)
    size = p.stat().st_size
    with p.open("rb") as f:
        head = f.read(4)
        f.seek(max(0, size - 8))
        tail = f.read(8)
    if head != PARQUET_MAGIC:
        raise InputFormatError(
            str(p),
            "not a Parquet file (a Parquet file starts with the bytes PAR1); if it is a text "
            "log, rename it or pass --format aol or --format csv",
        )
    if size < 12 or tail[4:] != PARQUET_MAGIC:
        raise InputFormatError(
            str(p),
            "truncated or damaged Parquet file: it does not end with the Parquet footer (is the "
            "copy or download complete?)",
        )
    if int.from_bytes(tail[:4], "little") + 12 > size:
        raise InputFormatError(
            str(p), "damaged Parquet file: its footer is longer than the file (truncated?)"
        )


def parquet_footer(path: str | os.PathLike[str]) -> tuple[int, bytes, bytes]:
    """``(file size, footer (Thrift metadata), 8-byte trailer)`` of a Parquet file; reads only
    the end of the file. :class:`InputFormatError` when it is not one."""
    p = Path(path)
    size = p.stat().st_size
    with p.open("rb") as f:
        if size < 12:
            raise InputFormatError(str(p), "not a Parquet file (too short)")
        f.seek(size - 8)
        tail = f.read(8)
        if tail[4:] != PARQUET_MAGIC:
            raise InputFormatError(str(p), "not a Parquet file (no PAR1 trailer)")
        n = int.from_bytes(tail[:4], "little")
        if n + 12 > size:
            raise InputFormatError(str(p), "not a Parquet file (footer longer than the file)")
        f.seek(size - 8 - n)
        footer = f.read(n)
    return size, footer, tail
