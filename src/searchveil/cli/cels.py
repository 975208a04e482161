"""``searchveil cels``: collaborative search-log sanitization (Hong et al., TKDE 2015).

``cels party`` runs one party (P0 = solver, P1…Pr = data holders) from a ``parties.toml``;
``cels run`` starts all of them as local processes over loopback mutual TLS; ``cels local`` is
the paper's local-sanitization baseline (LS); ``cels reproduce`` the §6 experiments."""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from searchveil.cels.config import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_HEARTBEAT_TIMEOUT,
    DEFAULT_TIMEOUT,
    load_config,
)
from searchveil.cels.faults import TEST_HOOKS_ENV
from searchveil.cels.local import local_sanitize
from searchveil.cels.params import CelsParams, Share
from searchveil.cels.protocol import run_party
from searchveil.cels.reproduce import reproduce
from searchveil.cels.runner import run_local
from searchveil.cli._common import (
    PRIVATE,
    BudgetOpt,
    JsonOpt,
    OutDirOpt,
    OverwriteOpt,
    SeedOpt,
    budget_result,
    charged,
    emit,
    err_console,
    out_console,
    private_block,
    run,
)
from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import ReleaseWriter
from searchveil.io.paths import check_private_path, input_list
from searchveil.rng import make_rng

EpsOpt = Annotated[float | None, typer.Option("--epsilon", help="ε (no default)")]
DeltaOpt = Annotated[
    float | None,
    typer.Option("--delta", help="δ (no default; protects everyone only if < 1/users)"),
]
ObjOpt = Annotated[str | None, typer.Option("--objective", help="kl | size (no default)")]
KeyOpt = Annotated[
    int,
    typer.Option(
        "--key-bits", help="Paillier key size (3072; 512/1024 = paper-comparison keys, insecure)"
    ),
]
ShareOpt = Annotated[float, typer.Option("--output-share", help="kl: |O| as a share of |𝕆|")]
KOpt = Annotated[int, typer.Option("--breakpoints", help="kl: K breakpoints (Appendix B)")]
MinCountOpt = Annotated[
    int, typer.Option("--min-count", help="drop pairs with total count below this (paper: 20)")
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        help="seconds a party waits for one expected message from a live peer (default: the "
        "config's, else 600)",
    ),
]
ConnectTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--connect-timeout",
        help="seconds to connect the mesh (default: the config's, else 60)",
    ),
]
HeartbeatOpt = Annotated[
    float | None,
    typer.Option(
        "--heartbeat-timeout",
        help="a peer silent this long (no message, no heartbeat) is dead: stopped, hung or cut "
        "off (default: the config's, else 10)",
    ),
]
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        help="processes computing Paillier obfuscators ahead and decrypting (0 = none; default: "
        "CPUs - 1 for a party, CPUs / parties for cels run)",
    ),
]
ProvenanceOpt = Annotated[
    Path | None,
    typer.Option(
        "--provenance",
        help="where the PRIVATE provenance record goes (input files, per-party figures); "
        "default <out>.private.json beside the release, never inside it",
    ),
]
TRANSCRIPT_HELP = (
    "PRIVATE (holds other parties' encrypted and partly aggregated data; written owner-only, "
    "0600, and only if the run succeeds): save every byte received"
)


def _params(
    epsilon: float | None, delta: float | None, objective: str | None, key_bits: int,
    output_share: float, breakpoints: int, min_count: int,
) -> Any:  # fmt: skip

    if epsilon is None:
        raise InvalidParameterError("epsilon", None, "a number > 0 (no default ε)")
    if delta is None:
        raise InvalidParameterError("delta", None, "a number in (0, 1) (no default δ)")
    if objective is None:
        raise InvalidParameterError("objective", None, "kl | size (no default)")
    return CelsParams(
        epsilon=epsilon, delta=delta, objective=objective, key_bits=key_bits,
        output_share=output_share, breakpoints=breakpoints, min_count=min_count,
    )  # fmt: skip


def _human_summary(title: str, led: dict[str, Any], stats: list[dict[str, Any]]) -> None:
    """The public ledger's figures and (private, this machine's) per-party traffic and time."""
    t = Table(title=title + " — per-party traffic and time" + PRIVATE, show_header=True)
    for c in ("party", "sent", "received", "wall s", "CPU s (with workers)"):
        t.add_column(c, justify="right")
    for p in stats:
        tr = p["traffic"]
        t.add_row(
            f"P{p['party']}", f"{tr['sent_total']:,}", f"{tr['received_total']:,}",
            f"{sum(p['seconds'].values()):.1f}",
            f"{sum(p['cpu_seconds'].values()) + sum(p.get('worker_cpu_seconds', {}).values()):.1f}",
        )  # fmt: skip
    out_console.print(t)
    noisy = led.get("noisy", {})
    out_console.print(
        f"ε = {led['epsilon']}, δ = {led['delta']}, b = {led['guarantee']['b']:.6g}; "
        f"output rows {noisy.get('output_rows', 0):,}, |O| = {noisy.get('output_size', 0):,}"
    )
    if led.get("seeded"):
        out_console.print("randomness: SEEDED — reproducible experiment, NOT FOR RELEASE")


def _watch_parent(pid: int) -> None:
    """Started by ``cels run``: exit at once if the runner goes away (the peers then see the
    connection close and stop too), so no orphaned party keeps computing."""

    def watch() -> None:
        while os.getppid() == pid:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()


def party(
    config: Annotated[Path, typer.Option("--config", help="parties.toml")],
    id: Annotated[int, typer.Option("--id", help="this party's id (0 = solver)")],
    out: OutDirOpt,
    share: Annotated[Path | None, typer.Option("--share", help="this party's log (P1…Pr)")] = None,
    epsilon: EpsOpt = None,
    delta: DeltaOpt = None,
    objective: ObjOpt = None,
    key_bits: KeyOpt = 3072,
    output_share: ShareOpt = 0.5,
    breakpoints: KOpt = 33,
    min_count: MinCountOpt = 1,
    transcript: Annotated[
        Path | None, typer.Option("--transcript", help=TRANSCRIPT_HELP + " to this file")
    ] = None,
    timeout: TimeoutOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    heartbeat_timeout: HeartbeatOpt = None,
    workers: WorkersOpt = None,
    inject_fault: Annotated[
        str | None,
        typer.Option(
            "--inject-fault",
            hidden=True,
            help=f"TEST ONLY (needs {TEST_HOOKS_ENV}=1): PHASE:KIND[@PEER]",
        ),
    ] = None,
    status_file: Annotated[
        Path | None,
        typer.Option("--status-file", hidden=True, help="cels run: phase/outcome JSON"),
    ] = None,
    parent_pid: Annotated[
        int | None,
        typer.Option("--parent-pid", hidden=True, help="cels run: stop if the runner dies"),
    ] = None,
    seed: SeedOpt = None,
    provenance: ProvenanceOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run one CELS party (P0 = solver, P1…Pr = data holders) from a parties.toml.

    Writes --out (log.tsv and the public ledger.json) and the PRIVATE provenance record beside
    it only if every party ends with the same output."""

    def body() -> None:

        params = _params(epsilon, delta, objective, key_bits, output_share, breakpoints, min_count)
        if parent_pid is not None:
            _watch_parent(parent_pid)
        cfg = load_config(config)
        cfg = dataclasses.replace(
            cfg,
            timeout=timeout or cfg.timeout,
            connect_timeout=connect_timeout or cfg.connect_timeout,
            heartbeat_timeout=heartbeat_timeout or cfg.heartbeat_timeout,
        )
        sh = Share.read(share) if share is not None else None
        nworkers = workers if workers is not None else max(0, (os.cpu_count() or 1) - 1)

        def prog(phase: str) -> None:
            if not json_out:
                err_console.print(f"P{id}: {phase}")

        res = run_party(
            cfg, id, params, share=sh, out=out, rng=make_rng(seed), transcript=transcript,
            progress=prog, fault=inject_fault, workers=nworkers, status=status_file,
            hard_exit=True, provenance=provenance,
        )  # fmt: skip
        summary = {
            "party": id,
            "out": str(out),
            "digest": res.digest,
            "output_rows": res.output.height,
            "private": private_block(
                traffic=res.stats["traffic"],
                seconds=res.stats["seconds"],
                cpu_seconds=res.stats["cpu_seconds"],
            ),  # fmt: skip
        }
        emit(
            summary, json_out,
            lambda r: _human_summary(f"CELS party P{id}", res.ledger, [res.stats]),
        )  # fmt: skip

    run(body)


def run_cmd(
    share: Annotated[list[Path], typer.Option("--share", help="one log per data party (≥ 2)")],
    out: OutDirOpt,
    epsilon: EpsOpt = None,
    delta: DeltaOpt = None,
    objective: ObjOpt = None,
    key_bits: KeyOpt = 3072,
    output_share: ShareOpt = 0.5,
    breakpoints: KOpt = 33,
    min_count: MinCountOpt = 1,
    transcripts: Annotated[
        Path | None,
        typer.Option(
            "--transcripts",
            help=TRANSCRIPT_HELP + ", per party, into this directory (0700): P0.bin, P1.bin, …",
        ),
    ] = None,
    timeout: TimeoutOpt = None,
    connect_timeout: ConnectTimeoutOpt = None,
    heartbeat_timeout: HeartbeatOpt = None,
    workers: WorkersOpt = None,
    seed: SeedOpt = None,
    overwrite: OverwriteOpt = False,
    provenance: ProvenanceOpt = None,
    budget: BudgetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Run CELS with every party as a local process (loopback mutual TLS).

    Starts P0…Pr with throw-away certificates; if any party fails, stops them all at once and
    says which, in which phase and why."""

    def body() -> None:

        params = _params(epsilon, delta, objective, key_bits, output_share, breakpoints, min_count)
        if not json_out:
            err_console.print(f"starting {len(share) + 1} parties (P0 = solver) …")
        with charged(budget, params.cost(), "cels run") as ch:
            res = run_local(
                share, params, out, transcripts=transcripts, seed=seed,
                timeout=timeout or DEFAULT_TIMEOUT,
                connect_timeout=connect_timeout or DEFAULT_CONNECT_TIMEOUT,
                heartbeat_timeout=heartbeat_timeout or DEFAULT_HEARTBEAT_TIMEOUT,
                workers=workers, overwrite=overwrite, provenance=provenance,
            )  # fmt: skip
            ch.record_written(out)
        res["private"] = private_block(party_stats=res.pop("party_stats"))
        res["budget"] = budget_result(budget, ch)
        emit(
            res, json_out,
            lambda r: _human_summary(f"CELS → {out}", r["ledger"], r["private"]["party_stats"]),
        )  # fmt: skip

    run(body)


def local_cmd(
    share: Annotated[list[Path], typer.Option("--share", help="one log per party (≥ 2)")],
    out: OutDirOpt,
    epsilon: EpsOpt = None,
    delta: DeltaOpt = None,
    objective: ObjOpt = None,
    output_share: ShareOpt = 0.5,
    breakpoints: KOpt = 33,
    min_count: MinCountOpt = 1,
    output_size: Annotated[
        int | None,
        typer.Option("--output-size", help="kl: total |O| to split by input size (optional)"),
    ] = None,
    seed: SeedOpt = None,
    overwrite: OverwriteOpt = False,
    provenance: ProvenanceOpt = None,
    budget: BudgetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """The LS baseline: every party sanitizes alone and the outputs are unioned.

    Each party uses the same b and its share of |O|."""

    def body() -> None:

        params = _params(epsilon, delta, objective, 3072, output_share, breakpoints, min_count)
        inputs = input_list(share=share)
        ReleaseWriter(out, overwrite=overwrite, provenance=provenance, inputs=inputs)
        with charged(budget, params.cost(), "cels local") as ch:
            shares = [Share.read(s) for s in share]
            res = local_sanitize(shares, params, rng=make_rng(seed), output_size=output_size)
            with ReleaseWriter(out, overwrite=overwrite, provenance=provenance,
                               inputs=inputs) as w:  # fmt: skip
                w.write_table("log", res["log"])
                w.write_ledger(res["ledger"])
                prov = w.write_provenance(res["provenance"])
            ch.record_written(out)
        summary: dict[str, Any] = {"out": str(out), "provenance": str(prov)}
        summary["private"] = private_block(
            **{k: v for k, v in res.items() if k not in ("log", "ledger", "provenance")}
        )
        summary["budget"] = budget_result(budget, ch)
        emit(summary, json_out, lambda r: out_console.print(r))

    run(body)


def reproduce_cmd(
    report: Annotated[Path, typer.Option("--report", help="HTML report to write")],
    key_bits: KeyOpt = 512,
    parties: Annotated[str, typer.Option("--parties", help="r values, e.g. 2,4,8")] = "2,4,8",
    quick: Annotated[bool, typer.Option("--quick", help="small inputs only")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Rerun §6: CELS vs LS utility (Fig. 5), bandwidth (Table 5), runtime vs r."""

    def body() -> None:

        rs = tuple(int(v) for v in parties.split(",") if v.strip())
        check_private_path(report, option="report")  # before any work (issue 30)
        res = reproduce(report, rs=rs, key_bits=key_bits, quick=quick, progress=not json_out)
        emit(res, json_out, lambda r: out_console.print(f"report → {r['report']}"))

    run(body)


def register(app: typer.Typer) -> None:
    cels = typer.Typer(
        help="CELS: parties jointly sanitize their search logs (Hong et al. TKDE 2015).",
        no_args_is_help=True,
    )
    app.add_typer(cels, name="cels")
    cels.command("party")(party)
    cels.command("run")(run_cmd)
    cels.command("local")(local_cmd)
    cels.command("reproduce")(reproduce_cmd)
