"""File fingerprints for the ledger: the SHA-256 of an input's bytes, streamed, and the same hash
computed in a background thread while an engine reads the file (hashlib releases the GIL, so
the hash overlaps the engine's work instead of adding a second pass).

Also the checks every reader shares on a damaged container, worded for the user rather than in
the terms of the library underneath: a truncated or corrupt gzip stream
(:func:`decompress_problem`) and a file that is not, or no longer, a whole Parquet file
(:func:`check_parquet`)."""

from __future__ import annotations

import gzip
import hashlib
import os
import threading
import zlib
from pathlib import Path

from searchveil.errors import InputFormatError

__all__ = [
    "file_sha256",
    "BackgroundHash",
    "check_parquet",
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
    if head != b"PAR1":
        raise InputFormatError(
            str(p),
            "not a Parquet file (a Parquet file starts with the bytes PAR1); if it is a text "
            "log, rename it or pass --format aol or --format csv",
        )
    if size < 12 or tail[4:] != b"PAR1":
        raise InputFormatError(
            str(p),
            "truncated or damaged Parquet file: it does not end with the Parquet footer (is the "
            "copy or download complete?)",
        )
    if int.from_bytes(tail[:4], "little") + 12 > size:
        raise InputFormatError(
            str(p), "damaged Parquet file: its footer is longer than the file (truncated?)"
        )
