"""File fingerprints for the ledger: the SHA-256 of an input's bytes, streamed, and the same hash
computed in a background thread while an engine reads the file (hashlib releases the GIL, so
the hash overlaps the engine's work instead of adding a second pass).

Input fingerprints for the provenance record (:func:`start_fingerprint`): ``full`` — the
SHA-256 of the file's bytes, hashed in a thread while an engine reads; ``fast`` (Parquet only) —
the SHA-256 of the file size and the Parquet footer (schema, every row group's offsets, sizes,
row counts and column statistics), which reads a few KB instead of the whole file. ``fast``
identifies the file as written by its writer, not byte for byte: two files with equal footers
and sizes but different data pages get the same fingerprint (a rewrite by any Parquet writer
changes offsets or statistics, but a deliberate in-place edit of page bytes need not). The
private input record says which (``fingerprint``: ``full`` | ``fast``).

Also the words every reader shares for a damaged container, in the user's terms rather than
those of the library underneath: a truncated or corrupt gzip stream (:func:`decompress_problem`)
and an undecodable Parquet file (:data:`PARQUET_DAMAGED`). Which container a file is:
:mod:`searchveil.io.formats`."""

from __future__ import annotations

import gzip
import hashlib
import os
import threading
import zlib
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from searchveil.errors import InvalidParameterError
from searchveil.io.formats import is_parquet, parquet_footer
from searchveil.validate import parse_choice

__all__ = [
    "file_sha256",
    "BackgroundHash",
    "Fingerprint",
    "check_fingerprint",
    "parquet_footer_sha256",
    "start_fingerprint",
    "decompress_problem",
    "PARQUET_DAMAGED",
]

_BLOCK = 1 << 22


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, hex, read in 4 MiB blocks."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            h.update(block)
    return h.hexdigest()


class BackgroundHash:
    """``file_sha256(path)`` started in a daemon thread at construction; :meth:`result` waits.

    An error while hashing (the file vanished, a read error) is raised again by :meth:`result`.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        self._digest: str | None = None
        self._error: OSError | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._digest = file_sha256(self._path)
        except OSError as exc:
            self._error = exc

    def result(self) -> str:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._digest is not None
        return self._digest


# -- damaged containers --------------------------------------------------------------------------
PARQUET_DAMAGED = (
    "damaged Parquet file: its metadata or data cannot be decoded (is the copy complete? "
    "write it again, or give the log as TSV)"
)


def decompress_problem(exc: BaseException) -> str:
    """What a failure while inflating a ``.gz`` input means, in the user's terms."""
    if isinstance(exc, EOFError):
        return "the gzip data ends early: the file is truncated (is the copy or download complete?)"
    text = str(exc)
    if isinstance(exc, gzip.BadGzipFile) and "CRC" in text:
        return "damaged gzip file: its checksum does not match the data"
    if isinstance(exc, gzip.BadGzipFile) and "Not a gzipped file" in text:
        return "not a gzip file, although it is read as one"
    if isinstance(exc, gzip.BadGzipFile | zlib.error) or type(exc).__name__ == "IsalError":
        return "damaged gzip file: the compressed data is corrupt"
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot read the file: {exc.strerror}"
    return "cannot read the file"


# -- input fingerprints ---------------------------------------------------------------------------
class Fingerprint(StrEnum):
    """How the provenance record's input hash is computed (see the module docstring)."""

    FULL = "full"
    FAST = "fast"


_FAST_TAG = b"searchveil parquet footer fingerprint v1\0"


class Digest(Protocol):
    def result(self) -> str: ...


def check_fingerprint(fingerprint: str, path: str | os.PathLike[str] | None = None) -> Fingerprint:
    """``full`` always; ``fast`` only for a Parquet file (a typed error otherwise)."""
    fp = parse_choice("fingerprint", fingerprint, Fingerprint)
    if fp == Fingerprint.FAST and path is not None and not is_parquet(path):
        raise InvalidParameterError(
            "fingerprint", fingerprint, "full, or fast with a Parquet file input"
        )
    return fp


def parquet_footer_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a tag, the file size (8 bytes, little-endian), the Parquet footer (its
    Thrift metadata) and the 8-byte trailer; reads only the end of the file."""
    size, footer, tail = parquet_footer(path)
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


def start_fingerprint(path: str | os.PathLike[str], fingerprint: str = "full") -> Digest:
    """An object whose ``result()`` is the input's fingerprint: the whole-file SHA-256 hashed
    in a thread (``full``) or the Parquet footer hash (``fast``, computed now)."""
    if check_fingerprint(fingerprint, path) == Fingerprint.FAST:
        return _Ready(parquet_footer_sha256(path))
    return BackgroundHash(path)
