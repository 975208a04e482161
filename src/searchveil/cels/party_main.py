"""One CELS party as a process of its own, started from a :class:`PartySpec` — no command line.

:func:`~searchveil.cels.runner.run_local` writes each party's spec (the agreed
:class:`~searchveil.cels.params.CelsParams` and the party's files) as JSON, owner-only, into the
run's private directory and starts ``python -m searchveil.cels.party_main SPEC`` once per party;
:func:`main` reads it and calls :func:`run_spec` — the library call ``searchveil cels party``
makes too (one party per machine, from a ``parties.toml``). The process exits 0 on success, 2
on a failure it reports (``error: …`` on stderr: a peer's fault, bad input, bad parameters),
1 on a bug, as the CLI does; the runner's diagnosis reads these codes and the status file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchveil.cels.config import load_config
from searchveil.cels.frames import open_private
from searchveil.cels.params import CelsParams, PartyResult, Share, check_e2e_party
from searchveil.cels.protocol import run_party
from searchveil.errors import InputFormatError, SearchveilError
from searchveil.rng import make_rng

#: the parameters' fields held as floats (the runner has always handed floats to the parties)
_FLOAT_FIELDS = ("epsilon", "delta", "output_share", "union_epsilon")
_PATH_FIELDS = ("config", "out", "share", "transcript", "status", "provenance")


@dataclass(frozen=True)
class PartySpec:
    """Everything one party needs: the ``parties.toml`` (``config``), its id (``me``), the
    agreed ``params``, its files (``out``, ``share`` — none for P0 —, ``transcript``,
    ``provenance``; ``overwrite`` replaces only what the tool wrote there), ``seed``
    (experiments only), ``workers`` (None: CPUs − 1), the config's
    timeouts overridden where given, and for :func:`~searchveil.cels.runner.run_local`: the
    ``status`` file, the runner's ``parent_pid`` and the test hook ``fault``."""

    config: Path
    me: int
    params: CelsParams
    out: Path
    share: Path | None = None
    transcript: Path | None = None
    provenance: Path | None = None
    seed: int | None = None
    workers: int | None = None
    timeout: float | None = None
    connect_timeout: float | None = None
    heartbeat_timeout: float | None = None
    fault: str | None = None
    status: Path | None = None
    parent_pid: int | None = None
    overwrite: bool = False

    def to_json(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d = {k: str(v) if k in _PATH_FIELDS and v is not None else v for k, v in d.items()}
        return d | {"params": params_to_json(self.params)}

    @classmethod
    def from_json(cls, d: dict[str, Any], source: str = "<party spec>") -> PartySpec:
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(d, dict) or set(d) != names:
            raise InputFormatError(source, f"a CELS party spec has the fields {sorted(names)}")
        paths = {k: Path(d[k]) for k in _PATH_FIELDS if d[k] is not None}
        return cls(**(d | paths | {"params": params_from_json(d["params"], source)}))


def params_to_json(params: CelsParams) -> dict[str, Any]:
    """The parameters as JSON values (enums as their names, ``split`` as a list)."""
    d: dict[str, Any] = {}
    for f in dataclasses.fields(params):
        v = getattr(params, f.name)
        if f.name in _FLOAT_FIELDS and v is not None:  # union_epsilon: None in conditional
            v = float(v)
        elif f.name == "split" and v is not None:
            v = [float(w) for w in v]
        elif f.name in ("mode", "objective") and v is not None:
            v = str(v)
        d[f.name] = v
    return d


def params_from_json(d: dict[str, Any], source: str = "<party spec>") -> CelsParams:
    """:func:`params_to_json` back (validated again by :class:`CelsParams`)."""
    names = {f.name for f in dataclasses.fields(CelsParams)}
    if not isinstance(d, dict) or set(d) != names:
        raise InputFormatError(source, f"CELS parameters have the fields {sorted(names)}")
    return CelsParams(**(d | {"split": tuple(d["split"]) if d["split"] is not None else None}))


def write_spec(path: Path, spec: PartySpec) -> None:
    """The spec as JSON, owner-only (0600): it names the party's private files."""
    with open_private(path) as fh:
        fh.write(json.dumps(spec.to_json(), indent=1).encode("utf-8"))


def read_spec(path: Path) -> PartySpec:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputFormatError(str(path), f"not a CELS party spec: {exc}") from exc
    return PartySpec.from_json(data, str(path))


def watch_parent(pid: int) -> None:
    """Exit at once if the process ``pid`` (the runner) goes away (the peers then see the
    connection close and stop too), so no orphaned party keeps computing."""

    def watch() -> None:
        while os.getppid() == pid:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def run_spec(spec: PartySpec, *, progress: Callable[[str], None] | None = None) -> PartyResult:
    """Run the party of ``spec`` to completion (:func:`~searchveil.cels.protocol.run_party`,
    which ends the process if its main thread does not stop within seconds of a failure)."""
    if spec.parent_pid is not None:
        watch_parent(spec.parent_pid)
    cfg = load_config(spec.config)
    cfg = dataclasses.replace(
        cfg,
        timeout=spec.timeout or cfg.timeout,
        connect_timeout=spec.connect_timeout or cfg.connect_timeout,
        heartbeat_timeout=spec.heartbeat_timeout or cfg.heartbeat_timeout,
    )
    # the parameters (ε_u given, for this many data parties) before the share is read
    check_e2e_party(spec.params, None, len(cfg.ids) - 1)
    share = Share.for_params(spec.share, spec.params) if spec.share is not None else None
    workers = spec.workers if spec.workers is not None else max(0, (os.cpu_count() or 1) - 1)
    return run_party(
        cfg, spec.me, spec.params, share=share, out=spec.out, rng=make_rng(spec.seed),
        transcript=spec.transcript, progress=progress, fault=spec.fault, workers=workers,
        status=spec.status, hard_exit=True, provenance=spec.provenance, overwrite=spec.overwrite,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """``python -m searchveil.cels.party_main SPEC``: run that party; the exit code as the
    CLI's (0 done, 2 a reported failure, 1 a bug, 130 interrupted)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m searchveil.cels.party_main SPEC.json\n")
        return 2
    try:
        run_spec(read_spec(Path(args[0])))
    except SearchveilError as exc:
        _say(f"error: {exc}")
        return 2
    except KeyboardInterrupt:
        _say("interrupted; nothing was written")
        return 130
    except Exception as exc:  # noqa: BLE001 - last-resort bug report, exits 1
        _say(f"internal error (this is probably a bug in searchveil): {type(exc).__name__}: {exc}")
        return 1
    return 0


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main())
