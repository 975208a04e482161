"""CELS liveness: the fault matrix (issue 23).

For each protocol phase (mesh, union, secure sum, Algorithm 2, solve, sampling, commit) and each
fault — SIGKILL P0, SIGKILL a data party (P2), SIGSTOP a data party, a garbage frame, a
truncated frame, a dropped connection — a ``cels run`` over loopback must end with every party
exited non-zero, a message naming the party at fault, the phase and the cause, no output
anywhere, and every party stopped within 10 s of the fault.

Faults come from the test-only hooks (``PHASE:KIND`` in the party's ``PartySpec`` — ``cels
party --inject-fault`` on the command line —, enabled by ``SEARCHVEIL_CELS_TEST_HOOKS=1``, which
``run_local(faults=…)`` sets for its parties only) and,
for P0 while the data parties work, from the runner's ``signals`` hook (a real SIGKILL sent
from outside while P1 pauses in the phase). Keys are 512-bit TEST KEYS (insecure, fast), the
input is tiny. One case per phase runs by default; the rest are marked ``slow``.

The e2e mode (the default; docs/privacy/cels.md §5) has phases of its own — publish, output
(the reveal of the published pairs), profile — and gives P0 work in the union (it joins the
digest lists) and in every sum (its noise share): ``E2E_FAULTS`` has a case for each (a data
party, P1 and P0 killed, a garbage frame to P0, P0 killed in the ring sum, a truncated
frame, a stopped party); the publish case runs by default.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from searchveil.cels.faults import TEST_HOOKS_ENV
from searchveil.cels.params import CelsParams
from searchveil.cels.runner import RunFailed, run_local, write_config
from test_cels_e2e import COUNTS as E2E_COUNTS
from test_cels_e2e import PARAMS as E2E_PARAMS
from test_cels_e2e import _write_crafted_shares
from test_cels_protocol import _write_shares

PARAMS = CelsParams(
    epsilon=2.0,
    delta=0.3,
    objective="kl",
    key_bits=512,  # TEST KEY
    mode="conditional",
)
DATA = 2  # the data party that fails
MATRIX_PHASES = ("mesh", "union", "sum", "nlp", "solve", "sample", "commit")
FAULTS = ("kill_p0", "kill_data", "stop_data", "garbage", "truncated", "drop")
DEFAULT = {
    ("union", "kill_p0"),
    ("sum", "truncated"),
    ("nlp", "kill_data"),
    ("commit", "drop"),
}
CAUSE = {
    "kill_p0": "SIGKILL",
    "kill_data": "SIGKILL",
    "stop_data": "SIGSTOP",
    "garbage": "malformed",
    "truncated": "truncated",
    "drop": "closed the connection",
}
BOUND = 10.0  # seconds from the first failure to every party stopped


@pytest.fixture(scope="module")
def small_shares(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return _write_shares(tmp_path_factory.mktemp("faults"), users=45)


def _case(phase: str, fault: str) -> dict:
    """run_local keyword arguments and the expected culprit for one matrix cell."""
    if fault == "kill_p0":
        if phase in ("mesh", "solve", "commit"):  # phases P0 itself goes through
            return {"faults": {0: f"{phase}:kill"}, "culprit": 0}
        return {
            "faults": {1: f"{phase}:pause"},
            "signals": [(1, phase, 0, signal.SIGKILL)],
            "culprit": 0,
        }
    kind = {"kill_data": "kill", "stop_data": "stop"}.get(fault, fault)
    return {"faults": {DATA: f"{phase}:{kind}"}, "culprit": DATA}


def _params() -> list:
    out = []
    for phase in MATRIX_PHASES:
        for fault in FAULTS:
            marks = [] if (phase, fault) in DEFAULT else [pytest.mark.slow]
            out.append(pytest.param(phase, fault, marks=marks, id=f"{phase}-{fault}"))
    return out


@pytest.mark.parametrize(("phase", "fault"), _params())
def test_fault_matrix(small_shares, tmp_path, phase: str, fault: str) -> None:
    kw = _case(phase, fault)
    culprit = kw.pop("culprit")
    heartbeats = (phase, fault) == ("sample", "stop_data")
    out, tr = tmp_path / "out", tmp_path / "transcripts"
    t0 = time.monotonic()
    with pytest.raises(RunFailed) as ei:
        run_local(
            small_shares, PARAMS, out, transcripts=tr, timeout=60, connect_timeout=20,
            heartbeat_timeout=3.0 if heartbeats else 10.0, detect_stopped=not heartbeats,
            workers=0, **kw,
        )  # fmt: skip
    elapsed = time.monotonic() - t0
    e = ei.value
    msg = str(e)
    # the party at fault, the phase and the cause, never an empty reason
    assert e.culprit == culprit, msg
    assert e.phase == phase, msg
    assert f"in phase '{phase}': P{culprit} " in msg
    want = "no heartbeat" if heartbeats else CAUSE[fault]
    assert want in msg, msg
    assert e.cause and ":;" not in msg and "nothing written" in msg
    # every party exited non-zero (or was killed), within the bound
    assert len(e.parties) == 4
    assert all(p["exit_code"] not in (0, None) for p in e.parties), e.parties
    assert all(p["message"] for p in e.parties)
    assert e.seconds_to_report <= BOUND, msg
    assert elapsed < 60
    # no output anywhere
    assert not out.exists() and not tr.exists()
    assert not list(tmp_path.glob(".out.tmp-*"))


@pytest.mark.slow
def test_heartbeat_detection_is_within_bound(small_shares, tmp_path) -> None:
    """A stopped data party, left to the heartbeats (default 10 s): every party has stopped
    within 15 s of the SIGSTOP."""
    t0 = time.monotonic()
    with pytest.raises(RunFailed) as ei:
        run_local(
            small_shares, PARAMS, tmp_path / "o", timeout=60, workers=0, detect_stopped=False,
            faults={DATA: "nlp:stop"},
        )  # fmt: skip
    e = ei.value
    assert e.culprit == DATA and e.phase == "nlp" and "no heartbeat from P2" in str(e)
    assert time.monotonic() - t0 < 60
    # from the stop (status written at the phase start) to the report
    assert e.seconds_to_report <= 15.0


@pytest.mark.slow  # over 5 s on 2 cores: the full tier (tests/README.md)
def test_party_connect_timeout_names_peer_and_cause(tmp_path) -> None:
    """``cels party`` alone: the mesh cannot form; it gives up after --connect-timeout with the
    peer, the phase and the cause (not today's empty ``could not connect the mesh:;``)."""
    cfg = write_config(tmp_path / "tls", 3, timeout=60)
    share = _write_shares(tmp_path)[0]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                         env.get("PYTHONPATH", "")])  # fmt: skip
    t0 = time.monotonic()
    res = subprocess.run(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "searchveil", "cels", "party", "--config", str(cfg), "--id", "1",
         "--share", str(share), "--epsilon", "2", "--delta", "0.3", "--mode", "conditional",
         "--objective", "kl",
         "--key-bits", "512", "--out", str(tmp_path / "o"), "--connect-timeout", "3",
         "--workers", "0"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    took = time.monotonic() - t0
    err = " ".join(res.stderr.split())
    assert res.returncode == 2, err
    assert "P1 stopped in phase 'mesh' because of P0" in err
    assert "could not connect to P0" in err and "within 3 s" in err and "Refused" in err
    assert not (tmp_path / "o").exists()
    assert took < 30


def test_test_hook_needs_the_environment(tmp_path) -> None:
    from searchveil.cels.faults import parse_fault
    from searchveil.errors import InvalidParameterError

    old = os.environ.pop(TEST_HOOKS_ENV, None)
    try:
        with pytest.raises(InvalidParameterError, match="test-only"):
            parse_fault("union:kill")
        os.environ[TEST_HOOKS_ENV] = "1"
        assert parse_fault("union:garbage@3") == ("union", "garbage", 3)
        with pytest.raises(InvalidParameterError):
            parse_fault("nowhere:kill")
    finally:
        os.environ.pop(TEST_HOOKS_ENV, None)
        if old is not None:
            os.environ[TEST_HOOKS_ENV] = old


@pytest.mark.slow
def test_schema_violation_and_wrong_certificate(small_shares, tmp_path) -> None:
    import shutil

    from searchveil.cels.config import make_certificates

    with pytest.raises(RunFailed) as ei:
        run_local(small_shares, PARAMS, tmp_path / "o", timeout=60, workers=0,
                  faults={1: "verify:schema"})  # fmt: skip
    # the first party to read P1's bad frame reports it: another data party in 'verify', or P0,
    # which now waits on P1 for the output union's length (issue 30)
    assert ei.value.culprit == 1 and re.search(
        r"P1 sent 'stats' where '(repair|out_len)' was expected", str(ei.value)
    )

    def swap(tls: Path) -> None:
        other = tmp_path / "otherca"
        make_certificates(other, 4)
        for ext in ("pem", "key"):
            shutil.copy(other / f"p2.{ext}", tls / f"p2.{ext}")

    with pytest.raises(RunFailed) as ei:
        run_local(small_shares, PARAMS, tmp_path / "o2", timeout=60, connect_timeout=8,
                  workers=0, config_hook=swap)  # fmt: skip
    assert ei.value.phase == "mesh" and "P2" in str(ei.value)
    assert not (tmp_path / "o").exists() and not (tmp_path / "o2").exists()


# -- the e2e mode (issues 29, 42): its phases publish, output, query_*, shape, head, profile -----
@pytest.fixture(scope="module")
def e2e_shares(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return _write_crafted_shares(tmp_path_factory.mktemp("e2e-faults"), users=900)


E2E_FAULTS = {  # case: (run_local keywords, culprit, phase)
    "publish-kill_data": ({"faults": {2: "publish:kill"}}, 2, "publish"),
    # issue 42: the input's columns — the query pairs' round and the statistics' ring sums
    "head-kill_p1": ({"faults": {1: "head:kill"}}, 1, "head"),
    # P0 killed from outside while the data parties are in the shape statistics' ring sum
    "shape-kill_p0": ({"faults": {1: "shape:pause"},
                       "signals": [(1, "shape", 0, signal.SIGKILL)]}, 0, "shape"),
    "query_output-garbage": ({"faults": {2: "query_output:garbage"}}, 2, "query_output"),
    "output-garbage": ({"faults": {3: "output:garbage"}}, 3, "output"),
    # issue 41: P0 joins the union's digests and adds its noise share to every sum
    "union-kill_p0": ({"faults": {1: "union:pause"},  # P0 killed while it waits for the lists
                       "signals": [(1, "union", 0, signal.SIGKILL)]}, 0, "union"),
    "union-garbage_to_p0": ({"faults": {2: "union:garbage@0"}}, 2, "union"),
    "sum-kill_p0": ({"faults": {1: "sum:pause"},  # P0 killed while it waits in the ring
                     "signals": [(1, "sum", 0, signal.SIGKILL)]}, 0, "sum"),
    "output-truncated": ({"faults": {1: "output:truncated"}}, 1, "output"),
    "head-stop_data": ({"faults": {3: "head:stop"}}, 3, "head"),
    # the counts log's own phase (--schema counts)
    "profile-kill_p1": ({"faults": {1: "profile:kill"}, "params": "counts"}, 1, "profile"),
}  # fmt: skip


E2E_DEFAULT = "publish-kill_data"


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=[] if c == E2E_DEFAULT else [pytest.mark.slow]) for c in E2E_FAULTS],
)
def test_e2e_fault_stops_every_party(e2e_shares, tmp_path, case: str) -> None:
    """A party killed (or sending garbage) mid-protocol: every party exits non-zero within the
    bound, the message names the party, the phase and the cause, nothing is written."""
    kw, culprit, phase = E2E_FAULTS[case]
    kw = dict(kw)
    params = E2E_COUNTS if kw.pop("params", None) == "counts" else E2E_PARAMS
    out = tmp_path / "out"
    with pytest.raises(RunFailed) as ei:
        run_local(e2e_shares, params, out, transcripts=tmp_path / "tr", timeout=60,
                  connect_timeout=20, workers=0, **kw)  # fmt: skip
    e = ei.value
    assert e.culprit == culprit and e.phase == phase, str(e)
    assert f"in phase '{phase}': P{culprit} " in str(e) and "nothing written" in str(e)
    assert all(p["exit_code"] not in (0, None) for p in e.parties), e.parties
    assert e.seconds_to_report <= 10.0
    assert not out.exists() and not (tmp_path / "tr").exists()
    assert not list(tmp_path.glob(".out.tmp-*"))
