"""CELS test hooks: ``PHASE:KIND[@PEER]`` (``run_local(faults=…)``, which hands it to the party
in its :class:`~searchveil.cels.party_main.PartySpec`, or ``cels party --inject-fault``; only
with ``SEARCHVEIL_CELS_TEST_HOOKS=1``) makes a party crash, stop or misbehave in one phase, so
the fault-matrix tests can check that every other party stops and names it."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import TypeVar

from searchveil.cels.wire import (
    FAULT_KINDS,
    PHASES,
    Mesh,
)
from searchveil.errors import InvalidParameterError

T = TypeVar("T")


TEST_HOOKS_ENV = "SEARCHVEIL_CELS_TEST_HOOKS"
PARTY_FAULTS = ("crash", "kill", "stop", "schema", "pause", *FAULT_KINDS)
PAUSE_SECONDS = 1.5
FAULT_PHASES = PHASES


def _self_signal(sig: int) -> None:
    sys.stderr.flush()
    os.kill(os.getpid(), sig)
    time.sleep(0.5)


def inject_fault(mesh: Mesh | None, kind: str, target: int | None) -> None:
    """Test hook (``cels party --inject-fault PHASE:KIND[@PEER]`` with
    ``SEARCHVEIL_CELS_TEST_HOOKS=1``), run at the start of PHASE: ``crash`` exits the process at
    once (exit 17, no abort message), ``kill``/``stop`` send SIGKILL/SIGSTOP to this process,
    ``garbage``/``truncated``/``drop`` send bytes that are not a frame / half a frame and close /
    close the connection to PEER (every peer by default), ``schema`` sends a well-framed message
    with unexpected fields — after these four the party goes no further until the failure
    reaches it —, ``pause`` waits 1.5 s (so a test can signal another process while
    this one is in PHASE)."""
    if kind == "crash":
        sys.stderr.flush()
        os._exit(17)
    if kind == "kill":
        _self_signal(signal.SIGKILL)
    if kind == "stop":
        _self_signal(signal.SIGSTOP)
        return
    if kind == "pause":  # keeps this party in PHASE for a moment (heartbeats continue)
        time.sleep(PAUSE_SECONDS)
        return
    if mesh is None:
        return
    if kind in FAULT_KINDS:
        mesh.inject(kind, target)
    elif kind == "schema":
        for j in [target] if target is not None else mesh.others:
            mesh.send(j, "stats", {"surprise": 1})
    # a party that misbehaved goes no further: it stays in PHASE until the failure reaches it
    deadline = time.monotonic() + 30
    while mesh.failure is None and time.monotonic() < deadline:
        time.sleep(0.05)


def parse_fault(spec: str | None) -> tuple[str, str, int | None] | None:
    if spec is None:
        return None
    if os.environ.get(TEST_HOOKS_ENV) != "1":
        raise InvalidParameterError(
            "inject_fault", spec, f"a test-only option: set {TEST_HOOKS_ENV}=1 to use it"
        )
    ph, _, rest = spec.partition(":")
    kind, _, tgt = rest.partition("@")
    if ph not in FAULT_PHASES or kind not in PARTY_FAULTS or (tgt and not tgt.isdigit()):
        raise InvalidParameterError(
            "inject_fault", spec, f"PHASE:KIND[@PEER], PHASE in {FAULT_PHASES}, KIND in "
            f"{PARTY_FAULTS}",
        )  # fmt: skip
    return ph, kind, int(tgt) if tgt else None
