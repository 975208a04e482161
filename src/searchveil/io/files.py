"""File fingerprints for the ledger: the SHA-256 of an input's bytes, streamed, and the same hash
computed in a background thread while an engine reads the file (hashlib releases the GIL, so
the hash overlaps the engine's work instead of adding a second pass)."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

__all__ = ["file_sha256", "BackgroundHash"]

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
