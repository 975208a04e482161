"""What the CELS transport moves and counts: a received :class:`Frame`, the per-phase
:class:`Traffic` counters, and :func:`open_private` (owner-only files: transcripts)."""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

__all__ = ["Frame", "Traffic", "open_private"]


def open_private(path: Path) -> IO[bytes]:
    """Open ``path`` for writing with owner-only permissions (0600), truncating it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "wb")


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
