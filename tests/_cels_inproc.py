"""Test helper: the CELS e2e phases of every party run in threads of this process, over an
in-memory mesh that records every frame each party receives (type, phase, body and blob sizes)
and enforces the frame caps the phases set (:meth:`Mesh.allow`) — no TLS, no processes, so a
test can look inside a party (what P1 holds after unmasking) and can make every random choice
reproducible (:func:`deterministic`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import searchveil.cels.e2e as e2e
from searchveil.cels.frames import Frame, Traffic
from searchveil.cels.params import CelsParams, PartyResult, Share
from searchveil.cels.protocol import Party
from searchveil.cels.wire import BLOB_FLOOR, ProtocolError
from searchveil.rng import SeededRandom


@dataclass
class Hub:
    """The queues between every ordered pair of parties and what each party received."""

    n: int
    queues: dict[tuple[int, int], queue.Queue[Frame]] = field(default_factory=dict)
    received: dict[int, list[tuple[str, str, int, int]]] = field(default_factory=dict)
    blobs: dict[int, list[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for a in range(self.n):
            self.received[a], self.blobs[a] = [], []
            for b in range(self.n):
                if a != b:
                    self.queues[(a, b)] = queue.Queue()


class MemMesh:
    """The part of :class:`~searchveil.cels.wire.Mesh` the phases use."""

    def __init__(self, hub: Hub, me: int) -> None:
        self.hub, self.me = hub, me
        ids = list(range(hub.n))
        self.config = SimpleNamespace(ids=ids, parties={i: None for i in ids})
        self.others = [j for j in ids if j != me]
        self.phase = "mesh"
        self.traffic = Traffic()
        self.caps: dict[str, int] = {}
        self.failure = None

    def allow(self, phase: str, nbytes: int) -> None:
        self.caps[phase] = max(int(nbytes), BLOB_FLOOR)

    def check(self) -> None:
        pass

    def send(self, j: int, type_: str, body: dict[str, Any], blob: bytes = b"") -> None:
        js = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        self.traffic.sent[self.phase] += len(js) + len(blob)
        self.hub.queues[(self.me, j)].put(Frame(self.me, type_, self.phase, json.loads(js), blob))

    def recv(self, j: int, type_: str) -> Frame:
        try:
            f = self.hub.queues[(j, self.me)].get(timeout=60)
        except queue.Empty:
            raise ProtocolError(f"P{j} sent no {type_!r}", peer=j) from None
        js = json.dumps(f.body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        if len(f.blob) > self.caps.get(f.phase, BLOB_FLOOR):
            raise AssertionError(f"P{j}'s {f.type} of {len(f.blob)} bytes is above its cap")
        self.hub.received[self.me].append((f.phase, f.type, len(js), len(f.blob)))
        self.hub.blobs[self.me].append(f.blob)
        if f.type != type_:
            raise ProtocolError(f"P{j} sent {f.type!r} where {type_!r} was expected", peer=j)
        return f


def run_inproc(params: CelsParams, shares: list[Share], *, seed: int = 1) -> tuple[Hub, list]:
    """Every party of the e2e mode in a thread; (the hub, each party's PartyResult or the
    exception it raised)."""
    r = len(shares)
    params = params.with_parties(r)
    hub = Hub(r + 1)
    results: list[PartyResult | BaseException | None] = [None] * (r + 1)

    def one(k: int) -> None:
        try:
            party = Party(MemMesh(hub, k), params, None if k == 0 else shares[k - 1],
                          SeededRandom(seed + k))  # fmt: skip
            results[k] = party.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            results[k] = exc

    threads = [threading.Thread(target=one, args=(k,), name=f"P{k}") for k in range(r + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return hub, results


class _Streams:
    """Per-thread reproducible stand-ins for the secure sources of :mod:`searchveil.cels.e2e`
    (keyed by the party's thread name and a call counter, so thread scheduling changes
    nothing)."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()

    def _next(self) -> int:
        name = threading.current_thread().name
        with self.lock:
            self.calls[name] = self.calls.get(name, 0) + 1
            i = self.calls[name]
        h = hashlib.sha256(f"{self.seed}/{name}/{i}".encode()).digest()
        return int.from_bytes(h[:8], "big") >> 1

    def secure(self) -> SeededRandom:
        return SeededRandom(self._next())

    def urandom(self, n: int) -> bytes:
        return SeededRandom(self._next()).words((n + 7) // 8).tobytes()[:n]

    def perm(self, n: int) -> np.ndarray:
        return np.argsort(SeededRandom(self._next()).words(n), kind="stable").astype(np.int64)


@contextlib.contextmanager
def deterministic(monkeypatch: pytest.MonkeyPatch, seed: int = 0) -> Iterator[None]:
    """Make the e2e mode's secure randomness (keys, padding, masks, slots, reveal multipliers)
    reproducible for the duration: the same seed, the same run, on D as on D′."""
    s = _Streams(seed)
    monkeypatch.setattr(e2e, "SecureRandom", s.secure)
    monkeypatch.setattr(e2e, "os", SimpleNamespace(urandom=s.urandom))
    monkeypatch.setattr(e2e, "secure_perm", s.perm)
    yield
