"""``cels run``: P0…Pr as separate local processes on 127.0.0.1 with throw-away certificates.

The runner writes a CA, one certificate per party and ``parties.toml`` into a temporary
directory, starts each party from its :class:`~searchveil.cels.party_main.PartySpec` (the
params object and the party's files, written owner-only beside them; ``python -m
searchveil.cels.party_main SPEC`` — no command line of the CLI is built) in its own process
group, with a status file it updates at every phase, and watches them:

* the moment a party exits non-zero, is killed by a signal or is stopped (SIGSTOP — Linux,
  read from ``/proc``), the others get a short grace period (the failure reaches them within a
  second through closed connections and ``abort`` messages), then every remaining process
  group is killed; the run fails with a message naming the party at fault, the phase and the
  cause (:class:`RunFailed`) — within a few seconds of the failure, nothing written;
* only if every party exited 0 and all r + 1 release directories are byte-identical is P0's
  release (``log.tsv`` and the public ``ledger.json``) put in place at ``--out``, the parties'
  private provenance records combined into one beside it (``<out>.private.json``, 0600), and
  the transcripts (private, owner-only) copied to ``--transcripts`` — each staged beside its
  place and renamed in, the old release removed only once the new one is in place
  (:mod:`searchveil.io.paths`); every path is checked before any party starts.
"""

from __future__ import annotations

import contextlib
import filecmp
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from searchveil.cels.config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_HEARTBEAT_TIMEOUT,
    make_certificates,
    write_new,
)
from searchveil.cels.faults import TEST_HOOKS_ENV
from searchveil.cels.frames import open_private
from searchveil.cels.params import CelsParams
from searchveil.cels.party_main import PartySpec, write_spec
from searchveil.cels.wire import CLOSED_WITHOUT_GOODBYE, PHASES, ProtocolError
from searchveil.errors import InvalidParameterError, OutputWriteError
from searchveil.io.ledger import (
    build_provenance,
    provenance_path,
    provenance_rule,
    read_ledger,
    read_provenance,
    repair_provenance,
)
from searchveil.io.paths import (
    Replace,
    Staging,
    check_named,
    check_private_path,
    check_release_out,
    input_list,
    release_rule,
)
from searchveil.rng import secure_token

GRACE = 2.0  # seconds the other parties get to stop on their own after a failure
POLL = 0.05
_RELAY = re.compile(r"P\d+ aborted: ")
#: what a party sees of another's failure, not the failure: a relayed abort or a connection the
#: other end closed (the party that closed it saw the cause first-hand)
_CONSEQUENCE = re.compile(rf"{_RELAY.pattern}|P\d+ {CLOSED_WITHOUT_GOODBYE}")
PARTY_MODULE = "searchveil.cels.party_main"  # run as ``python -m``: one party from its spec


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


# keyword options alike other signatures in form only (release_table, advise, ...)
def write_config(
    directory: Path,
    n_parties: int,
    *,
    timeout: float,
    session: str | None = None,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT,
) -> Path:
    """Certificates and ``parties.toml`` for ``n_parties`` local parties; returns its path."""
    files = make_certificates(directory, n_parties, also=("parties.toml",))
    ports = free_ports(n_parties)
    lines = [
        f'ca = "{files["ca"]}"',
        f'session = "{session or secure_token()}"',
        f"timeout = {timeout}",
        f"connect_timeout = {connect_timeout}",
        f"heartbeat_timeout = {heartbeat_timeout}",
    ]
    for i in range(n_parties):
        pf = files["parties"][i]
        lines += [
            "",
            "[[party]]",
            f"id = {i}",
            'host = "127.0.0.1"',
            f"port = {ports[i]}",
            f'cert = "{pf["cert"]}"',
            f'key = "{pf["key"]}"',
        ]
    cfg = directory / "parties.toml"
    write_new(cfg, ("\n".join(lines) + "\n").encode("utf-8"))
    return cfg


def default_workers(n_parties: int) -> int:
    """Worker processes per data party when all parties share this machine (P0, which is idle
    until it decrypts, gets one per CPU)."""
    return max(1, (os.cpu_count() or 1) // n_parties)


class RunFailed(ProtocolError):
    """A ``cels run`` in which a party failed: ``culprit`` (the party at fault), ``phase``,
    ``cause``, ``parties`` (per party: outcome, exit code, phase, message) and
    ``seconds_to_report`` (first failure → every party stopped)."""

    def __init__(
        self,
        culprit: int | None,
        phase: str,
        cause: str,
        parties: list[dict[str, Any]],
        seconds_to_report: float,
    ) -> None:
        super().__init__(cause, peer=culprit, phase=phase)
        self.culprit = culprit
        self.parties = parties
        self.seconds_to_report = seconds_to_report
        who = f"P{culprit}" if culprit is not None else "a party"
        details = "; ".join(
            f"P{p['party']} ({p['outcome']}, phase '{p['phase']}'): {p['message']}" for p in parties
        )
        self.args = (
            f"CELS run failed in phase '{phase}': {who} {self.cause} — every party stopped "
            f"within {seconds_to_report:.1f} s of the failure; nothing written. [{details}]",
        )

    def __str__(self) -> str:
        return str(self.args[0])


def _is_stopped(pid: int) -> bool:
    """Linux: the process is stopped (SIGSTOP/SIGTSTP) — state T in /proc/<pid>/stat."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] in ("T", "t")


def _read_status(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    starts = [i for i, ln in enumerate(lines) if ln.startswith(("error:", "internal"))]
    # the CLI wraps long messages: keep the last error block, joined
    return " ".join(lines[starts[-1] :]) if starts else (lines[-1] if lines else "")


def _outcome(rc: int | None, stopped: bool, killed_by_us: bool) -> str:
    if stopped:
        return "stopped (SIGSTOP)"
    if rc is None:
        return "running"
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else -rc
        return f"killed by {name}" + (" (by the runner)" if killed_by_us else "")
    return f"exit {rc}"


def run_local(
    shares: list[Path],
    params: CelsParams,
    out: Path,
    *,
    transcripts: Path | None = None,
    seed: int | None = None,
    timeout: float = 600.0,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT,
    workers: int | None = None,
    overwrite: bool = False,
    faults: dict[int, str] | None = None,
    signals: list[tuple[int, str, int, int]] | None = None,
    detect_stopped: bool = True,
    config_hook: Any = None,
    provenance: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the protocol with one local process per party; returns a summary. Writes ``out``
    (the public release) and the private provenance record (``provenance``, by default
    ``<out>.private.json`` beside it: every party's input record and figures of the run).

    Test hooks (never used by the CLI): ``faults`` — party → ``PHASE:KIND[@PEER]`` (see
    :func:`searchveil.cels.faults.inject_fault`); ``signals`` — (watched party, phase,
    target party, signal): send the signal to the target once the watched party has reached
    the phase; ``detect_stopped=False`` leaves stopped parties to the heartbeats.
    ``progress(text)``: called as every party has reached each phase (for stderr)."""
    out = Path(out)
    prov_path = check_run_paths(shares, out, provenance, transcripts, overwrite)
    params = params.with_parties(len(shares))  # the e2e noise shares depend on it
    n = len(shares) + 1
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cels-") as tmp:
        tmpd = Path(tmp)
        cfg = write_config(
            tmpd / "tls", n, timeout=timeout, connect_timeout=connect_timeout,
            heartbeat_timeout=heartbeat_timeout,
        )  # fmt: skip
        if config_hook is not None:
            config_hook(tmpd / "tls")
        trd = tmpd / "transcripts"
        trd.mkdir(mode=0o700)
        specs = [
            PartySpec(
                config=cfg, me=k, params=params, out=tmpd / f"P{k}",
                share=None if k == 0 else Path(shares[k - 1]).resolve(),
                transcript=(trd / f"P{k}.bin") if transcripts is not None else None,
                seed=None if seed is None else seed + k, workers=_party_workers(k, n, workers),
                fault=(faults or {}).get(k), status=tmpd / f"P{k}.status.json",
                parent_pid=os.getpid(),  # the party stops if the runner goes away
            )
            for k in range(n)
        ]  # fmt: skip
        outcome = _run_parties(specs, tmpd, signals or [], detect_stopped, test_hooks=bool(faults),
                               progress=progress)  # fmt: skip
        if outcome is not None:
            raise outcome
        prov = _publish(tmpd, n, out, prov_path, transcripts, overwrite)
    ledger = read_ledger(out)
    return {
        "out": str(out),
        "provenance": str(prov_path),
        "parties": n - 1,
        "wall_seconds": round(time.perf_counter() - t0, 2),
        "ledger": ledger,
        "party_stats": prov["report"]["cels_parties"],
        "transcripts": str(transcripts) if transcripts is not None else None,
    }


def _party_workers(k: int, n: int, workers: int | None) -> int:
    """``workers`` if given, else :func:`default_workers` for a data party and every CPU for P0
    (it waits while the data parties work, then decrypts)."""
    if workers is not None:
        return workers
    return default_workers(n) if k else (os.cpu_count() or 1)


def _run_parties(
    specs: list[PartySpec],
    tmpd: Path,
    signals: list[tuple[int, str, int, int]],
    detect_stopped: bool,
    *,
    test_hooks: bool,
    progress: Callable[[str], None] | None = None,
) -> RunFailed | None:
    """Start every party (:mod:`.party_main`, each in its own session, output to
    ``P<k>.out``/``P<k>.err``), watch them (:func:`_watch`) and make sure none outlives the
    call; the diagnosis of a failed run, else None. The test hooks are enabled for the parties
    only with ``test_hooks``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")]
    )
    env.pop(TEST_HOOKS_ENV, None)
    if test_hooks:
        env[TEST_HOOKS_ENV] = "1"
    procs: list[subprocess.Popen[bytes]] = []
    with contextlib.ExitStack() as logs:
        try:
            for spec in specs:
                path = tmpd / f"P{spec.me}.spec.json"
                write_spec(path, spec)
                so = logs.enter_context(open(tmpd / f"P{spec.me}.out", "wb"))
                se = logs.enter_context(open(tmpd / f"P{spec.me}.err", "wb"))
                procs.append(
                    subprocess.Popen(  # noqa: S603 - our own interpreter and module
                        [sys.executable, "-m", PARTY_MODULE, str(path)],
                        stdout=so,
                        stderr=se,
                        env=env,
                        cwd=tmpd,
                        start_new_session=True,
                    )  # fmt: skip
                )
            watcher = _Progress(tmpd, len(procs), progress)
            return _watch(procs, tmpd, signals, detect_stopped, watcher)
        finally:
            for p in procs:
                if p.poll() is None:
                    _kill_group(p)
            for p in procs:
                p.wait()


def check_run_paths(
    shares: list[Path], out: Path, provenance: Path | None, transcripts: Path | None,
    overwrite: bool,
) -> Path:  # fmt: skip
    """Fail before any party starts (issue 30): the shares exist; ``out`` may receive the
    release (absent, empty, or with ``overwrite`` a complete searchveil release; no share
    inside it); the provenance record and the transcripts (private) land outside every release
    directory and on no share. Returns the provenance record's path."""
    if len(shares) < 2:
        raise InvalidParameterError("share", len(shares), "at least two --share files")
    for s in shares:
        if not Path(s).is_file():
            raise InvalidParameterError("share", str(s), "an existing log file")
    inputs = input_list(share=list(shares))
    check_named(out, "out")
    prov_path = provenance_path(out, provenance)
    repair_provenance(out, prov_path)  # a record a killed run staged (io/provenance.py)
    owned = provenance_rule(out, overwrite=overwrite).owned
    check_private_path(prov_path, option="provenance", releases=[out], inputs=inputs,
                       overwrite=overwrite, owned=owned)  # fmt: skip
    if transcripts is not None:
        check_private_path(
            transcripts, option="transcripts", releases=[out], inputs=inputs, directory=True
        )
    check_release_out(out, overwrite=overwrite, inputs=inputs)
    return prov_path


def _publish(
    tmpd: Path, n: int, out: Path, prov_path: Path, transcripts: Path | None, overwrite: bool
) -> dict[str, Any]:
    """Every party's release must equal P0's; then stage P0's release, the joint private
    provenance record and the transcripts (owner-only) beside their places and put them in
    place in that order — the old release is removed only once the new one is in place
    (:class:`~searchveil.io.paths.Staging`), each under its write rule, checked again at its
    swap: files added to a target meanwhile are never deleted. Returns the provenance
    record."""
    ref = tmpd / "P0"
    files = sorted(f.name for f in ref.iterdir())  # log.tsv (+ counts.tsv, profile.tsv), ledger
    for k in range(1, n):
        other = tmpd / f"P{k}"
        if sorted(f.name for f in other.iterdir()) != files:
            raise ProtocolError(f"P{k}'s release holds other files than P0's", peer=k)
        for name in files:
            if not filecmp.cmp(ref / name, other / name, shallow=False):
                raise ProtocolError(f"P{k}'s {name} differs from P0's", peer=k)
    records = [read_provenance(tmpd / f"P{k}") for k in range(n)]
    prov = build_provenance(
        inputs=[i for r in records for i in r.get("inputs", [])],
        report={"cels_parties": [r["report"]["cels_party"] for r in records]},
        extra={"mechanism": "cels", "runner": "cels run (all parties on this machine)"},
    )
    ledger_sha = hashlib.sha256((ref / "ledger.json").read_bytes()).hexdigest()
    prov["release"] = {"directory": str(out.resolve()), "ledger_sha256": ledger_sha}
    with contextlib.ExitStack() as stack:
        rel = stack.enter_context(Staging(out, directory=True,
                                          replace=release_rule("out", overwrite)))  # fmt: skip
        try:
            for name in files:  # the tables and the public ledger
                shutil.copyfile(ref / name, rel.path / name)
        except OSError as exc:
            raise OutputWriteError(str(out), exc) from exc
        prule = provenance_rule(out, overwrite=overwrite)  # before the release's swap
        pst = stack.enter_context(Staging(prov_path, directory=False, private=True,
                                          replace=prule))  # fmt: skip
        try:
            with open_private(pst.path) as fh:
                fh.write((json.dumps(prov, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
        except OSError as exc:
            raise OutputWriteError(str(prov_path), exc) from exc
        tst = None
        if transcripts is not None:
            trule = Replace("transcripts", directory=True)  # absent or empty, at the swap too
            tst = stack.enter_context(Staging(transcripts, directory=True, private=True,
                                              replace=trule))  # fmt: skip
            try:
                for tf in sorted((tmpd / "transcripts").iterdir()):
                    with tf.open("rb") as src, open_private(tst.path / tf.name) as dst:
                        shutil.copyfileobj(src, dst)
            except OSError as exc:
                raise OutputWriteError(str(transcripts), exc) from exc
        for st in (rel, pst, tst):  # every target checked again before the first swap
            if st is not None:
                st.recheck()
        rel.commit()
        pst.commit()
        if tst is not None:
            tst.commit()
    return prov


def _kill_group(p: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        p.kill()


def _watch(
    procs: list[subprocess.Popen[bytes]],
    tmpd: Path,
    signals: list[tuple[int, str, int, int]],
    detect_stopped: bool,
    progress: _Progress | None = None,
) -> RunFailed | None:
    """Wait for the parties; on the first failure give the others GRACE seconds, kill the rest
    and return the diagnosis (None when every party exited 0)."""
    failed_at: dict[int, float] = {}
    stopped: set[int] = set()
    killed_by_us: set[int] = set()
    pending = list(signals)
    t_fail: float | None = None
    while True:
        now = time.monotonic()
        codes = [p.poll() for p in procs]
        for k, c in enumerate(codes):
            if k in failed_at:
                continue
            if c is not None and c != 0:
                failed_at[k] = now
            elif c is None and detect_stopped and _is_stopped(procs[k].pid):
                stopped.add(k)
                failed_at[k] = now
        if pending:
            fire = []
            for item in pending:
                watch, phase, target, sig = item
                st = _read_status(tmpd / f"P{watch}.status.json")
                if st.get("phase") in PHASES and PHASES.index(st["phase"]) >= PHASES.index(phase):
                    fire.append(item)
            for item in fire:
                pending.remove(item)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(procs[item[2]].pid, item[3])
        if progress is not None:
            progress.poll()
        if failed_at and t_fail is None:
            t_fail = min(failed_at.values())
        alive = [k for k, c in enumerate(codes) if c is None and k not in stopped]
        if t_fail is None and not alive:
            return None
        if t_fail is not None and (not alive or now - t_fail > GRACE):
            for k, p in enumerate(procs):
                if p.poll() is None:
                    killed_by_us.add(k)
                    _kill_group(p)
            for p in procs:
                p.wait()
            return _diagnose(procs, tmpd, failed_at, stopped, killed_by_us, t_fail)
        time.sleep(POLL)


class _Progress:
    """Reports (``report(text)``) each phase once every party has reached it, from the parties'
    status files (read a few times a second)."""

    def __init__(self, tmpd: Path, n: int, report: Callable[[str], None] | None) -> None:
        self.tmpd, self.n, self.report = tmpd, n, report
        self.t0 = self.last = time.monotonic()
        self.done = -1

    def poll(self) -> None:
        now = time.monotonic()
        if self.report is None or now - self.last < 0.25:
            return
        self.last = now
        at = []
        for k in range(self.n):
            ph = _read_status(self.tmpd / f"P{k}.status.json").get("phase")
            at.append(PHASES.index(ph) if ph in PHASES else (len(PHASES) if ph == "done" else -1))
        low = min(at)
        if low > self.done and low >= 0:
            self.done = low
            name = PHASES[low] if low < len(PHASES) else "done"
            self.report(f"{now - self.t0:7.1f} s  every party in phase '{name}'")


def _diagnose(
    procs: list[subprocess.Popen[bytes]],
    tmpd: Path,
    failed_at: dict[int, float],
    stopped: set[int],
    killed_by_us: set[int],
    t_fail: float,
) -> RunFailed:
    """The party at fault, the phase and the cause, from the exit codes, the status files and
    the parties' last error lines."""
    parties = _party_reports(procs, tmpd, stopped, killed_by_us)
    order = sorted(failed_at, key=lambda k: failed_at[k])
    # a party that died, was stopped or crashed (not the orderly exit 2 of a party that saw a
    # failure) is at fault; otherwise the party the others blame
    hard = [
        k
        for k in order
        if k in stopped or (procs[k].returncode not in (0, 2) and k not in killed_by_us)
    ]
    culprit: int | None
    if hard:
        culprit = hard[0]
        phase, cause = parties[culprit]["phase"], _hard_cause(parties[culprit], culprit in stopped)
    else:
        culprit, phase, cause = _blamed(parties, order)
    if culprit == 0:
        phase = _p0_phase(parties, order, phase)
    return RunFailed(culprit, phase, cause, parties, time.monotonic() - t_fail)


def _party_reports(
    procs: list[subprocess.Popen[bytes]], tmpd: Path, stopped: set[int], killed_by_us: set[int]
) -> list[dict[str, Any]]:
    """Per party: outcome, exit code, phase, state, whom it blames and when it saw the failure,
    the cause and the message (its status file, else its last error line)."""
    parties = []
    for k, p in enumerate(procs):
        st = _read_status(tmpd / f"P{k}.status.json")
        err = _last_error((tmpd / f"P{k}.err").read_bytes().decode("utf-8", "replace"))
        msg = st.get("error") or err or "no message"
        if k in killed_by_us and k not in stopped:
            msg = "still running at the deadline; killed by the runner"
        parties.append(
            {
                "party": k,
                "outcome": _outcome(p.returncode, k in stopped, k in killed_by_us),
                "exit_code": p.returncode,
                "phase": st.get("phase", "start"),
                "state": st.get("state", "starting"),
                "blames": st.get("peer"),
                "detected_at": st.get("detected_at"),
                "cause": str(st.get("cause") or msg),
                "message": msg,
            }
        )
    return parties


def _hard_cause(party: dict[str, Any], stopped: bool) -> str:
    """The cause of a party that was stopped, killed or crashed."""
    outcome = party["outcome"]
    if stopped:
        return "was stopped (SIGSTOP): it stopped responding"
    if outcome.startswith("killed"):
        return f"was {outcome}"
    cause = f"crashed ({outcome})"
    if party["message"] != "no message":
        cause += f": {party['message']}"
    return cause


def _by_detection(parties: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(
        parties, key=lambda p: (p["detected_at"] is None, p["detected_at"] or 0.0, p["party"])
    )


def _blamed(parties: list[dict[str, Any]], order: list[int]) -> tuple[int | None, str, str]:
    """Every party stopped in order: the party the others blame, the phase and the cause.

    The first party to detect the failure saw its cause; the others saw its consequences
    (connections closed, aborts relayed), so follow the earliest first-hand detection: a party
    that closed its connections because of what it received may record its detection after a
    peer has seen the close (the parties' clocks and status writes race), so a consequence
    never outranks a first-hand cause."""
    failed = [p for p in parties if p["state"] == "failed" and p["blames"] is not None]
    firsthand = [p for p in failed if not _CONSEQUENCE.match(p["cause"])]
    seen = _by_detection(firsthand or failed)
    culprit: int | None
    if seen:
        culprit = seen[0]["blames"]
    else:
        votes = Counter(p["blames"] for p in parties if p["blames"] is not None)
        culprit = votes.most_common(1)[0][0] if votes else (order[0] if order else None)
    # the cause as seen by a party that saw it first-hand (not relayed by an abort)
    witnesses = _by_detection([p for p in parties if p["blames"] == culprit])
    direct = [w for w in witnesses if not _RELAY.match(w["cause"])]
    src = (direct or witnesses or [parties[order[0] if order else 0]])[0]
    phase = parties[culprit]["phase"] if culprit is not None else src["phase"]
    cause = f"failed: {src['cause']}"
    if src["party"] != culprit:
        cause += f" (seen by P{src['party']})"
    return culprit, phase, cause


def _p0_phase(parties: list[dict[str, Any]], order: list[int], phase: str) -> str:
    """P0 waits while the data parties work: the phase is theirs when it failed — the furthest
    any of them had reached (a slower party may still be finishing the one before, which is not
    where the run was); ``phase`` if none says."""
    seen = [
        parties[k]["phase"]
        for k in order
        if k != 0 and parties[k]["blames"] == 0 and parties[k]["phase"] in PHASES
    ]
    return max(seen, key=PHASES.index) if seen else phase
