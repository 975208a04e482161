"""``searchveil cels``: collaborative search-log sanitization (Hong et al., TKDE 2015).

``cels party`` runs one party (P0 = recipient/solver, P1…Pr = data holders) from a
``parties.toml``; ``cels run`` starts all of them as local processes over loopback mutual TLS;
``cels local`` is the same release without the protocol (``--mode e2e``) or the paper's
local-sanitization baseline (LS, ``--mode conditional``); ``cels reproduce`` the §6
experiments. ``--mode e2e`` (default): the joint end-to-end DP release; ``--mode conditional``:
the paper's protocol, NOT differentially private (docs/privacy/cels.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
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
from searchveil.cels.local import local_e2e, local_sanitize
from searchveil.cels.params import CONDITIONAL_DEFAULTS, CelsParams, Share
from searchveil.cels.party_main import PartySpec, run_spec
from searchveil.cels.reproduce import reproduce
from searchveil.cels.runner import check_run_paths, run_local
from searchveil.cli._common import (
    PRIVATE,
    SEEDED_NOTE,
    EpsilonOpt,
    JsonOpt,
    MaxPairsOpt,
    ReplaceOpt,
    add_commands,
    emit,
    err_console,
    out_console,
    parse_split,
    private_block,
    require_epsilon_delta,
)
from searchveil.cli.options import Output, command, option_group, register_group
from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import ReleaseWriter, read_provenance
from searchveil.io.paths import REPORT, check_private_path, input_list
from searchveil.params import delta_users_warning
from searchveil.release.ump.e2e import UmpMode
from searchveil.release.ump.release import NOT_DP
from searchveil.validate import parse_choice

DeltaOpt = Annotated[
    float | None,
    typer.Option("--delta", help="δ (no default; protects everyone only if < 1/users)"),
]
COND = "conditional: "
ModeOpt = Annotated[
    str,
    typer.Option(
        "--mode",
        help="e2e (the joint end-to-end DP release: ZEALOUS pair counts, DP statistics, a log "
        f"of synthetic users) | conditional ({NOT_DP}; the paper's protocol, for reproducing "
        "it)",
    ),
]
MaxUsersOpt = Annotated[
    int | None,
    typer.Option(
        "--max-users",
        help="e2e: U, a public upper bound on the number of users of all parties you DECLARE "
        "(never read from the data): δ must be < 1/U; a larger joint input is refused",
    ),
]
PartyPairsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-party-pairs",
        help="e2e: a public bound you DECLARE on one party's distinct bounded pairs (default "
        "min(m·U, 262144); a share with more is refused before it connects): every party's list "
        "in the union is padded to exactly L = this + the most dummy digests a party adds",
    ),
]
PublishedOpt = Annotated[
    int | None,
    typer.Option(
        "--max-published-pairs",
        help="e2e: K, the most pairs (and, with --schema input, query pairs) published (the K "
        "largest noisy counts above the threshold; every reveal message is padded to K; default "
        "1000)",
    ),
]
UnionEpsOpt = Annotated[
    float | None,
    typer.Option(
        "--union-epsilon",
        help="e2e: ε_u (required, no default), the guarantee against P0 of its view of the "
        "union (which pairs the parties hold in common; hidden by dummy digests, more as ε_u "
        "shrinks; with --schema input, half of it to the pairs' union and half to the query "
        "pairs'). P0's whole view is (ε + ε_u, 2δ): what cels run and cels party spend and "
        "--budget charges; cels local (no P0) spends (ε, δ). E.g. equal to --epsilon",
    ),
]
SplitOpt = Annotated[
    str | None,
    typer.Option(
        "--split",
        help="e2e: ε weights of pair counts, the rest (the statistics of the input's columns: "
        "default 0.7,0.3; the profile with --schema counts: 0.9,0.1)",
    ),
]
#: what the joint version of the input's columns does not offer (cels run/party/local --help)
NOT_JOINT = (
    "Not supported jointly: the tail histogram of the joint holder counts of unpublished "
    "queries (the joint log uses the sum of the parties' own tail histograms: a query held at "
    "several parties counts once per party), a public SERP (--serp), the probe-reweight-2r "
    "pair step and real ids (release ump's --serp, --pairs, --ids)."
)
SchemaOpt = Annotated[
    str | None,
    typer.Option(
        "--schema",
        help="e2e: input (the input's own columns — times, ranks, query-only rows, sessions, "
        "query pairs —, every one from a DP statistic the parties sum securely; default) | "
        "counts (AnonID, Query, ClickURL, Count). " + NOT_JOINT,
    ),
]
PeriodOpt = Annotated[
    str | None,
    typer.Option(
        "--period",
        help="--schema input: the log's public period FIRST..LAST (ISO dates); default: "
        "released (the months with enough searches, summed like the other statistics)",
    ),
]
MaxEventsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-events",
        help="--schema input: E, query events per user the size counts (default: release "
        "ump's public rule, capped so that its noise is within the exact sampler's range)",
    ),
]
MaxQueryPairsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-query-pairs",
        help="--schema input: m_q, distinct query pairs per user (default: a public rule)",
    ),
]
PartyQueryPairsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-party-query-pairs",
        help="--schema input: a public bound you DECLARE on one party's distinct bounded query "
        "pairs (default min(m_q·U, 262144)): the query pairs' union lists are padded to it",
    ),
]
ObjOpt = Annotated[str | None, typer.Option("--objective", help=COND + "kl | size (no default)")]
KeyOpt = Annotated[
    int | None,
    typer.Option(
        "--key-bits",
        help=COND + "Paillier key size (default 3072; 512/1024 = paper-comparison keys, insecure)",
    ),
]
ShareOpt = Annotated[
    float | None,
    typer.Option("--output-share", help=COND + "kl: |O| as a share of |𝕆| (default 0.5)"),
]
KOpt = Annotated[
    int | None,
    typer.Option("--breakpoints", help=COND + "kl: K breakpoints (Appendix B; default 33)"),
]
MinCountOpt = Annotated[
    int | None,
    typer.Option(
        "--min-count", help=COND + "drop pairs with total count below this (default 1; paper: 20)"
    ),
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
        help="conditional: processes computing Paillier obfuscators ahead and decrypting (0 = "
        "none; default: CPUs - 1 for a party, CPUs / parties for cels run)",
    ),
]
CelsProvenanceOpt = Annotated[
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


def cels_params(
    *,
    epsilon: EpsilonOpt = None,
    delta: DeltaOpt = None,
    mode: ModeOpt = "e2e",
    max_pairs: MaxPairsOpt = None,
    max_users: MaxUsersOpt = None,
    split: SplitOpt = None,
    max_party_pairs: PartyPairsOpt = None,
    max_published_pairs: PublishedOpt = None,
    union_epsilon: UnionEpsOpt = None,
    schema: SchemaOpt = None,
    period: PeriodOpt = None,
    max_events: MaxEventsOpt = None,
    max_query_pairs: MaxQueryPairsOpt = None,
    max_party_query_pairs: PartyQueryPairsOpt = None,
    objective: ObjOpt = None,
    key_bits: KeyOpt = None,
    output_share: ShareOpt = None,
    breakpoints: KOpt = None,
    min_count: MinCountOpt = None,
) -> CelsParams:
    """The agreed parameters from the options every CELS release takes (ε, δ, --mode and each
    mode's options); an option of the other mode is an error (its name, the value and the mode
    it belongs to)."""
    epsilon, delta = require_epsilon_delta(epsilon, delta)
    m = parse_choice("mode", mode, UmpMode)
    cond = {"objective": objective, "key_bits": key_bits, "output_share": output_share,
            "breakpoints": breakpoints, "min_count": min_count}  # fmt: skip
    e2e = {"max_pairs": max_pairs, "max_users": max_users, "split": split,
           "max_party_pairs": max_party_pairs, "max_published_pairs": max_published_pairs,
           "union_epsilon": union_epsilon, "schema": schema, "period": period,
           "max_events": max_events, "max_query_pairs": max_query_pairs,
           "max_party_query_pairs": max_party_query_pairs}  # fmt: skip
    for k, v in (cond if m == UmpMode.E2E else e2e).items():
        if v is not None:
            other = "conditional" if m == UmpMode.E2E else "e2e"
            raise InvalidParameterError(
                k.replace("_", "-"), v, f"not set: it is an option of --mode {other}"
            )
    if m == UmpMode.E2E:
        return CelsParams(epsilon=epsilon, delta=delta, mode=m, max_pairs=max_pairs,
                          max_users=max_users, split=parse_split(split),
                          max_party_pairs=max_party_pairs,
                          max_published_pairs=max_published_pairs,
                          union_epsilon=union_epsilon, schema=schema, period=period,
                          max_events=max_events, max_query_pairs=max_query_pairs,
                          max_party_query_pairs=max_party_query_pairs)  # fmt: skip
    if objective is None:
        raise InvalidParameterError("objective", None, "kl | size (no default)")
    given = {k: v for k, v in cond.items() if v is not None}
    return CelsParams(epsilon=epsilon, delta=delta, mode=m, **(CONDITIONAL_DEFAULTS | given))


register_group(CelsParams, build=cels_params)


@option_group()
@dataclass(frozen=True)
class Network:
    """How long a party waits on its peers, and its Paillier workers (``cels party`` and
    ``cels run``; unset: the config's values, else the defaults)."""

    timeout: TimeoutOpt = None
    connect_timeout: ConnectTimeoutOpt = None
    heartbeat_timeout: HeartbeatOpt = None
    workers: WorkersOpt = None


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
    _print_guarantee(led)
    if led.get("seeded"):
        out_console.print(f"randomness: {SEEDED_NOTE}")


def _print_guarantee(led: dict[str, Any]) -> None:
    """ε, δ and what is released (a function of the public ledger)."""
    g = led["guarantee"]
    rows = {k: v.get("rows", 0) for k, v in led.get("outputs", {}).items()}
    if g.get("counts_are_private"):
        split = ", ".join(f"{k.replace('_', ' ')} ε {v['epsilon']:.4g}"
                          for k, v in g["split"].items())  # fmt: skip
        p0 = g.get("against_p0")
        spent = ("" if p0 is None else f"; against P0, with its view of the union, "
                 f"({p0['epsilon']:.6g}, {p0['delta']:.4g}), what is spent")  # fmt: skip
        out_console.print(
            f"end-to-end (ε, δ) = ({g['readers']['epsilon']:.6g}, {g['readers']['delta']:.4g})"
            f" — {split}{spent}; " + ", ".join(f"{k} {n:,} rows" for k, n in rows.items())
        )
    else:
        noisy = led.get("noisy", {})
        c = g.get("conditional") or {}
        out_console.print(
            f"[bold red]NOT differentially private[/] ({NOT_DP}): (ε, δ) = ({c.get('epsilon')}, "
            f"{c.get('delta')}) covers only the sampling given the counts, b = {g['b']:.6g}; "
            f"output rows {noisy.get('output_rows', 0):,}, |O| = {noisy.get('output_size', 0):,}"
            " (docs/privacy/cels.md)",
            highlight=False,
        )


def delta_warning(
    params: CelsParams, led: dict[str, Any], inputs: list[dict[str, Any]], *, party: bool
) -> str | None:
    """The δ ≥ 1/U warning of a CELS release (issue 39; what every release command prints,
    :func:`~searchveil.params.delta_users_warning`), printed on stderr and returned for
    ``--json``. δ: the ledger's (a conditional release's: that of its sampling). U: the
    declared ``--max-users`` (e2e, where δ < 1/U is then enforced: no warning), else the
    users of the joint input — ``inputs``, the input records of the provenance record: every
    party's for ``cels run``/``local``, one party's own for ``cels party``, whose count is then
    a lower bound of the joint one (a warning is certain, its absence is not)."""
    if params.mode == UmpMode.E2E and params.max_users is not None:
        return None
    cond = (led.get("guarantee") or {}).get("conditional") or {}
    given = led.get("delta") if led.get("delta") is not None else cond.get("delta")
    delta = float(params.delta if given is None else given)
    users = sum(int(i.get("users") or 0) for i in inputs)
    if users < 1:
        text: str | None = (
            f"δ = {delta:.3g} is not checked against 1/U: no --max-users was declared "
            "and this party holds no users; δ protects everyone only if δ < 1/U, U the users of "
            "the joint input (docs/privacy/delta.md)"
        )
    else:
        bound = "U here: this party's own users, a lower bound of the joint count" if party else ""
        text = delta_users_warning(delta, users, bound=bound)
    if text:
        err_console.print(f"[bold red]warning[/]: {text}", highlight=False)
    return text


# `party`, `run` and `local` take the same release options (the option group of CelsParams,
# cels_params) and write where Output says (--provenance: the CELS record, CelsProvenanceOpt)
_CELS_OUTPUT = {"provenance": CelsProvenanceOpt}


@command(omit=("output_format",), replace=_CELS_OUTPUT)
def party(
    config: Annotated[Path, typer.Option("--config", help="parties.toml")],
    id: Annotated[int, typer.Option("--id", help="this party's id (0 = solver)")],
    *,
    share: Annotated[Path | None, typer.Option("--share", help="this party's log (P1…Pr)")] = None,
    params: CelsParams,
    transcript: Annotated[
        Path | None, typer.Option("--transcript", help=TRANSCRIPT_HELP + " to this file")
    ] = None,
    net: Network,
    inject_fault: Annotated[
        str | None,
        typer.Option(
            "--inject-fault",
            hidden=True,
            help=f"TEST ONLY (needs {TEST_HOOKS_ENV}=1): PHASE:KIND[@PEER]",
        ),
    ] = None,
    out: Output,
    json_out: JsonOpt = False,
) -> None:
    """Run one CELS party (P0 = recipient, P1…Pr = data holders) from a parties.toml.

    --mode e2e (default): the joint end-to-end DP release, a log of synthetic users in the
    input's own columns (--schema input) or the four-column counts log (--schema counts).
    --mode conditional: the paper's protocol, NOT differentially private (counts
    computed from the exact histogram). Writes --out (the tables and the public ledger.json)
    and the PRIVATE provenance record beside it only if every party ends with the same
    output. --budget (a data party, e2e): this party's own dataset budget is charged, before
    its share is read, what P0 learns of it: the release's (ε, δ) and P0's view of the union,
    (ε + ε_u, 2δ) (--union-epsilon, required; the readers' guarantee stays (ε, δ)); every
    data party charges its own budget file; P0 holds no data and charges nothing (--budget on
    P0 is refused)."""
    params = params.with_parties(len(load_config(config).ids) - 1)
    if out.budget is not None and id == 0:
        raise InvalidParameterError(
            "budget", str(out.budget), "not set on P0: it holds no data, so it has no dataset "
            "budget (each data party charges its own)",
        )  # fmt: skip
    spec = PartySpec(
        config=config, me=id, params=params, out=out.out, share=share, transcript=transcript,
        provenance=out.provenance, seed=out.seed, fault=inject_fault, overwrite=out.overwrite,
        **asdict(net),
    )  # fmt: skip

    def prog(phase: str) -> None:
        if not json_out:
            err_console.print(f"P{id}: {phase}")

    with out.charged(params.cost(), f"cels party P{id}") as ch:
        res = run_spec(spec, progress=prog)
        ch.record_written(out.out)
    summary = {
        "party": id,
        "out": str(out.out),
        "digest": res.digest,
        "output_rows": res.output.height,
        "budget": out.budget_result(ch),
        "private": private_block(
            traffic=res.stats["traffic"],
            seconds=res.stats["seconds"],
            cpu_seconds=res.stats["cpu_seconds"],
            delta_warning=delta_warning(
                params,
                res.ledger,
                read_provenance(out.out, out.provenance).get("inputs") or [],
                party=True,
            ),
        ),
    }
    title = f"CELS party P{id}"
    emit(summary, json_out, lambda r: _human_summary(title, res.ledger, [res.stats]))


@command(omit=("output_format",), replace=_CELS_OUTPUT)
def run_cmd(
    share: Annotated[list[Path], typer.Option("--share", help="one log per data party (≥ 2)")],
    *,
    params: CelsParams,
    transcripts: Annotated[
        Path | None,
        typer.Option(
            "--transcripts",
            help=TRANSCRIPT_HELP + ", per party, into this directory (0700): P0.bin, P1.bin, …",
        ),
    ] = None,
    net: Network,
    out: Output,
    json_out: JsonOpt = False,
) -> None:
    """Run CELS with every party as a local process (loopback mutual TLS).

    --mode e2e (default): the joint end-to-end DP release — each party bounds its users to m
    pairs and adds its share of the noise before every secure sum (no party sees an exact
    count; every message has a public size), the published pairs (and query pairs) are
    revealed, then release ump's statistics of the input's columns (times, ranks, sessions,
    query-only rows; --schema input, the default; what is not supported jointly: --schema's
    help) or a noisy activity profile (--schema counts), and every party lays out the same log
    of synthetic users; one (ε, δ) for everything written, against
    the readers and against each data party; against P0, which also sees the union's overlap
    structure (hidden by dummy digests), (ε + ε_u, 2δ) (--union-epsilon, required), what is
    spent and what --budget charges. Progress per phase on stderr. --mode conditional: the
    paper's protocol (LP, Algorithm 2, sampling of real ids), NOT differentially private:
    counts computed from the exact histogram. Starts P0…Pr with throw-away certificates; if
    any party fails, stops them all at once and says which, in which phase and why."""
    # the paths, before the charge (which stands once the parties read the shares)
    check_run_paths(share, out.out, out.provenance, transcripts, out.overwrite)
    params = params.with_parties(len(share))
    if not json_out:
        n = len(share) + 1
        err_console.print(f"starting {n} parties ({params.mode}; P0 = recipient) …")
    with out.charged(params.cost(), "cels run") as ch:
        res = run_local(
            share, params, out.out, transcripts=transcripts, seed=out.seed,
            timeout=net.timeout or DEFAULT_TIMEOUT,
            connect_timeout=net.connect_timeout or DEFAULT_CONNECT_TIMEOUT,
            heartbeat_timeout=net.heartbeat_timeout or DEFAULT_HEARTBEAT_TIMEOUT,
            workers=net.workers, overwrite=out.overwrite, provenance=out.provenance,
            progress=None if json_out else lambda t: err_console.print(t, highlight=False),
        )  # fmt: skip
        ch.record_written(out.out)
    inputs = read_provenance(out.out, out.provenance).get("inputs") or []
    res["private"] = private_block(
        party_stats=res.pop("party_stats"),
        delta_warning=delta_warning(params, res["ledger"], inputs, party=False),
    )
    res["budget"] = out.budget_result(ch)
    title = f"CELS → {out.out}"
    emit(res, json_out, lambda r: _human_summary(title, r["ledger"], r["private"]["party_stats"]))


@command(omit=("output_format", "key_bits"), replace=_CELS_OUTPUT)
def local_cmd(
    share: Annotated[list[Path], typer.Option("--share", help="one log per party (≥ 2)")],
    *,
    params: CelsParams,
    output_size: Annotated[
        int | None,
        typer.Option(
            "--output-size", help=COND + "kl: total |O| to split by input size (optional)"
        ),
    ] = None,
    out: Output,
    json_out: JsonOpt = False,
) -> None:
    """The joint release without the protocol (e2e), or the LS baseline (conditional).

    --mode e2e (default): the shares pooled (users kept apart by party) and released as `cels
    run` releases them (--schema input or counts) — the same computation, each party's
    statistics on its own users, and the same ledger, no protocol; --union-epsilon is
    required as for `cels run` (it sets the same slots), but with no P0 only the readers' (ε, δ)
    is spent. --mode conditional: the
    paper's LS baseline, NOT differentially private: every party sanitizes alone (same b, its
    share of |O|) and the outputs are unioned."""
    params = params.with_parties(len(share))
    if params.mode == UmpMode.E2E and output_size is not None:
        raise InvalidParameterError(
            "output-size", output_size, "not set: it is an option of --mode conditional"
        )
    inputs = input_list(share=share)
    out.check(inputs)
    with out.charged(params.readers_cost(), "cels local") as ch:
        if params.mode == UmpMode.E2E:
            res = local_e2e(share, params, rng=out.rng(), progress=None if json_out else (
                lambda t: err_console.print(f"cels local: {t}", highlight=False)))  # fmt: skip
        else:
            shares = [Share.read(s) for s in share]
            res = local_sanitize(shares, params, rng=out.rng(), output_size=output_size)
        with ReleaseWriter(out.out, overwrite=out.overwrite, provenance=out.provenance,
                           inputs=inputs) as w:  # fmt: skip
            tables = res["tables"] if "tables" in res else {"log": res["log"]}
            for name, table in tables.items():
                w.write_table(name, table)
            w.write_ledger(res["ledger"])
            prov = w.write_provenance(res["provenance"])
        ch.record_written(out.out)
    skip = ("log", "tables", "ledger", "provenance")
    summary: dict[str, Any] = {"out": str(out.out), "provenance": str(prov)}
    warn = delta_warning(params, res["ledger"], res["provenance"].get("inputs") or [], party=False)
    summary["private"] = private_block(
        **{k: v for k, v in res.items() if k not in skip}, delta_warning=warn
    )
    summary["budget"] = out.budget_result(ch)
    emit(summary, json_out, lambda r: out_console.print(r))


@command
def reproduce_cmd(
    report: Annotated[Path, typer.Option("--report", help="HTML report to write")],
    key_bits: Annotated[
        int, typer.Option("--key-bits", help="Paillier key size of the measured runs")
    ] = 512,
    parties: Annotated[str, typer.Option("--parties", help="r values, e.g. 2,4,8")] = "2,4,8",
    quick: Annotated[bool, typer.Option("--quick", help="small inputs only")] = False,
    overwrite: ReplaceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Rerun §6 (conditional mode, NOT DP): CELS vs LS (Fig. 5), Table 5, runtime vs r.

    The paper's protocol and baseline (--mode conditional): not differentially private, counts
    computed from the exact histogram; kept to reproduce the paper's figures."""
    rs = tuple(int(v) for v in parties.split(",") if v.strip())
    check_private_path(report, option="report", overwrite=overwrite, owned=REPORT)  # issue 30
    res = reproduce(report, rs=rs, key_bits=key_bits, quick=quick, progress=not json_out,
                    overwrite=overwrite)  # fmt: skip
    emit(res, json_out, lambda r: out_console.print(f"report → {r['report']}"))


def register(app: typer.Typer) -> None:
    commands = {"party": party, "run": run_cmd, "local": local_cmd, "reproduce": reproduce_cmd}
    add_commands(app, "cels", commands)
