"""What the CELS transport moves and counts: a received :class:`Frame`, the per-phase
:class:`Traffic` counters, :func:`open_private` (owner-only files) and
:func:`open_transcript` (a party's private record of every byte it received)."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from searchveil.io.marks import TRANSCRIPT_MAGIC

__all__ = ["Frame", "Traffic", "open_private", "open_transcript"]

TRANSCRIPT_WARNING = (
    "PRIVATE: every byte this party received during one CELS run - other parties' encrypted "
    "and partly aggregated data, the sampling split and the joint output before release. "
    "Do not publish or share."
)


def open_private(path: Path) -> IO[bytes]:
    """Open ``path`` for writing with owner-only permissions (0600), truncating it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "wb")


def open_transcript(path: Path, me: int, session: str) -> IO[bytes]:
    """Party ``me``'s transcript file (0600), opened after its header line (the magic, then a
    JSON object: private, the warning, the party, the session, the format); the mesh appends
    every received frame."""
    fh = open_private(path)
    head = {
        "private": True,
        "warning": TRANSCRIPT_WARNING,
        "party": me,
        "session": session,
        "format": "then every received frame as on the wire (wire.HEADER)",
    }
    fh.write(TRANSCRIPT_MAGIC + json.dumps(head).encode() + b"\n")
    return fh


@dataclass
class Traffic:
    """Bytes and frames per phase, sent and received."""

    sent: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    received: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    heartbeat_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "sent": dict(sorted(self.sent.items())),
            "received": dict(sorted(self.received.items())),
            "sent_total": sum(self.sent.values()),
            "received_total": sum(self.received.values()),
            "heartbeat_bytes": self.heartbeat_bytes,
        }


@dataclass
class Frame:
    peer: int
    type: str
    phase: str
    body: dict[str, Any]
    blob: bytes
