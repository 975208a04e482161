"""``cels run``: P0…Pr as separate local processes on 127.0.0.1 with throw-away certificates.

The runner writes a CA, one certificate per party and ``parties.toml`` into a temporary
directory, starts ``python -m searchveil cels party …`` once per party, waits (bounded), and
— only if every party exited 0 and all r+1 release directories are byte-identical — moves
P0's release (``log.tsv``, ``ledger.json``) to ``--out``. If any party fails, every other party
stops (abort messages / closed connections / timeouts) and nothing is written.
"""

from __future__ import annotations

import filecmp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from searchveil.collab.protocol import CelsParams
from searchveil.collab.wire import ProtocolError, make_certificates
from searchveil.errors import InvalidParameterError, OutputExistsError
from searchveil.io.ledger import read_ledger
from searchveil.rng import secure_token


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


def write_config(
    directory: Path, n_parties: int, *, timeout: float, session: str | None = None
) -> Path:
    """Certificates and ``parties.toml`` for ``n_parties`` local parties; returns its path."""
    files = make_certificates(directory, n_parties)
    ports = free_ports(n_parties)
    lines = [
        f'ca = "{files["ca"]}"',
        f'session = "{session or secure_token()}"',
        f"timeout = {timeout}",
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
    cfg.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return cfg


def party_command(
    config: Path,
    k: int,
    params: CelsParams,
    *,
    share: Path | None,
    out: Path,
    transcript: Path | None = None,
    seed: int | None = None,
    fault: str | None = None,
) -> list[str]:
    cmd = [
        sys.executable, "-m", "searchveil", "cels", "party", "--config", str(config),
        "--id", str(k), "--epsilon", repr(params.epsilon), "--delta", repr(params.delta),
        "--objective", params.objective, "--key-bits", str(params.key_bits),
        "--output-share", repr(params.output_share), "--breakpoints", str(params.breakpoints),
        "--min-count", str(params.min_count), "--out", str(out), "--json",
    ]  # fmt: skip
    if share is not None:
        cmd += ["--share", str(share)]
    if transcript is not None:
        cmd += ["--transcript", str(transcript)]
    if seed is not None:
        cmd += ["--seed", str(seed + k)]
    if fault is not None:
        cmd += ["--inject-fault", fault]
    return [*cmd, "--parent-pid", str(os.getpid())]


def run_local(
    shares: list[Path],
    params: CelsParams,
    out: Path,
    *,
    transcripts: Path | None = None,
    seed: int | None = None,
    timeout: float = 600.0,
    overwrite: bool = False,
    faults: dict[int, str] | None = None,
    config_hook: Any = None,
) -> dict[str, Any]:
    """Run the protocol with one local process per party; returns a summary."""
    if len(shares) < 2:
        raise InvalidParameterError("share", len(shares), "at least two --share files")
    for s in shares:
        if not Path(s).is_file():
            raise InvalidParameterError("share", str(s), "an existing log file")
    out = Path(out)
    if out.exists() and not overwrite:
        raise OutputExistsError(f"output {str(out)!r} already exists; choose a new --out")
    if not out.parent.exists():
        raise InvalidParameterError("out", str(out), "a path whose parent directory exists")
    if transcripts is not None:
        transcripts.mkdir(parents=True, exist_ok=True)
    n = len(shares) + 1
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="cels-") as tmp:
        tmpd = Path(tmp)
        cfg = write_config(tmpd / "tls", n, timeout=timeout)
        if config_hook is not None:
            config_hook(tmpd / "tls")
        procs = []
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")]
        )
        for k in range(n):
            cmd = party_command(
                cfg, k, params, share=None if k == 0 else Path(shares[k - 1]).resolve(),
                out=tmpd / f"P{k}",
                transcript=(transcripts / f"P{k}.bin") if transcripts is not None else None,
                seed=seed, fault=(faults or {}).get(k),
            )  # fmt: skip
            procs.append(
                subprocess.Popen(  # noqa: S603 - our own interpreter and module
                    cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp
                )
            )
        outs: list[tuple[int, str, str]] = []
        # no overall limit while every party is alive (each one has its own liveness timeout);
        # once one fails, the others get timeout + 30 s to stop, then are killed
        deadline: float | None = None
        while any(p.poll() is None for p in procs):
            if deadline is None and any(p.returncode not in (None, 0) for p in procs):
                deadline = time.monotonic() + timeout + 30
            if deadline is not None and time.monotonic() > deadline:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
            time.sleep(0.2)
        for p in procs:
            so, se = p.communicate()
            outs.append(
                (p.returncode, so.decode("utf-8", "replace"), se.decode("utf-8", "replace"))
            )
        failed = [(k, o) for k, o in enumerate(outs) if o[0] != 0]
        if failed:
            msgs = []
            for k, (rc, _so, err_text) in failed:
                lines = [ln.strip() for ln in err_text.strip().splitlines() if ln.strip()]
                starts = [i for i, ln in enumerate(lines) if ln.startswith(("error:", "internal"))]
                # the CLI wraps long messages: keep the last error block, joined
                text = " ".join(lines[starts[-1] :]) if starts else (lines[-1] if lines else "")
                msgs.append(f"P{k} (exit {rc}): {text or 'no message'}")
            written = [k for k in range(n) if (tmpd / f"P{k}").exists()]
            if written:  # a party committed although another failed after the commit round
                msgs.append(f"parties {written} had committed; their outputs are discarded")
            raise ProtocolError("CELS run failed, nothing written — " + "; ".join(msgs))
        ref = tmpd / "P0"
        for k in range(1, n):
            other = tmpd / f"P{k}"
            for name in ("log.tsv", "ledger.json"):
                if not filecmp.cmp(ref / name, other / name, shallow=False):
                    raise ProtocolError(f"P{k}'s {name} differs from P0's")
        if out.exists():
            shutil.rmtree(out)
        staged = out.parent / f".{out.name}.tmp-{secure_token()}"
        shutil.copytree(ref, staged)
        staged.rename(out)
    ledger = read_ledger(out)
    return {
        "out": str(out),
        "parties": n - 1,
        "wall_seconds": round(time.perf_counter() - t0, 2),
        "ledger": ledger,
        "transcripts": str(transcripts) if transcripts is not None else None,
    }
