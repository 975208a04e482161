"""``searchveil release ump``: the same-schema release of Hong et al. EDBT 2012 (package
:mod:`searchveil.release.ump`); ``searchveil sanitize ump`` is its old, hidden name."""

from __future__ import annotations

import functools
import math
from typing import Annotated, Any

import typer
from rich.table import Table

from searchveil.cli._common import (
    PRIVATE,
    READER_DEFAULT,
    RELEASE_GROUP_HELP,
    InputArg,
    JsonOpt,
    OutDirOpt,
    OutFmtOpt,
    OverwriteOpt,
    ProvenanceOpt,
    SeedOpt,
    command_group,
    emit,
    err_console,
    out_console,
    private_block,
    progress,
    run,
    with_reader_options,
)  # fmt: skip
from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import check_release_dir, provenance_path
from searchveil.io.paths import input_list
from searchveil.io.readers import ReaderOptions, read_log
from searchveil.release import write_release
from searchveil.release.ump import UmpParams, release_ump
from searchveil.rng import make_rng


def _human(r: dict[str, Any]) -> None:
    t = Table(title=f"hong-ump ({r['objective']}) → {r['out']}", show_header=False)
    t.add_column("")
    t.add_column("", justify="right")
    t.add_row("guarantee", r["notion"])
    t.add_row("ε, δ (sampling)", f"{r['epsilon']:.6g}, {r['delta']:.4g}")
    t.add_row("b (privacy bound of every user)", f"{r['b']:.6g}")
    pv = r["private"]
    s = pv["solver"]
    t.add_row("solver", f"{s['method']} — {s['status']} ({s['seconds']:.2f} s)")
    for k in ("lp_optimum", "lp_floor", "mip_gap", "actual_output_size", "added_back"):
        if k in s:
            t.add_row(f"solver {k.replace('_', ' ')}" + PRIVATE, f"{s[k]:,.4g}")
    m = pv["metrics"]
    t.add_row("pairs after Condition 1" + PRIVATE, f"{pv['pairs_after_condition_1']:,}")
    t.add_row("output size |O|", f"{m['output_size']:,}")
    t.add_row("output pairs (diversity)" + PRIVATE,
              f"{m['output_pairs']:,} ({m['diversity']:.2%})")  # fmt: skip
    fr = m["frequent"]
    rec = "—" if fr["recall"] is None else f"{fr['recall']:.3f}"
    pre = "—" if fr["precision"] is None else f"{fr['precision']:.3f}"
    t.add_row(f"frequent pairs (s = {fr['min_support']:.4g}) recall / precision" + PRIVATE,
              f"{rec} / {pre}")  # fmt: skip
    kl = "—" if m["kl_divergence"] is None else f"{m['kl_divergence']:.4f}"
    t.add_row("KL divergence (CELS eq. 2)" + PRIVATE, kl)
    if r.get("count_noise"):
        cn = r["count_noise"]
        t.add_row(
            "count noise",
            f"Lap({cn['sensitivity_assumed']}/{cn['count_epsilon']}) — ε' valid only if the "
            "assumed sensitivity holds",
        )
    if r["seeded"]:
        t.add_row("randomness", "SEEDED — reproducible experiment, NOT FOR RELEASE")
    t.add_row("private provenance (do not publish)", r["provenance"])
    out_console.print(t)
    out_console.print(
        "note: the counts x_ij come from the private log; only the sampling is covered by "
        "(ε, δ) (docs/privacy/ump.md)."
    )


@with_reader_options
def ump_command(
    input: InputArg,
    out: OutDirOpt,
    objective: Annotated[
        str | None,
        typer.Option(
            "--objective",
            help="size (O-UMP) | frequent (F-UMP) | diversity (D-UMP) | kl (CELS eq. 2, "
            "needs --output-size; b = min(ε/2, ln 1/(1−δ)))",
        ),
    ] = None,
    epsilon: Annotated[
        float | None, typer.Option("--epsilon", help="ε of the sampling (no default)")
    ] = None,
    delta: Annotated[
        float | None, typer.Option("--delta", help="δ of the sampling (no default)")
    ] = None,
    output_size: Annotated[
        int | None, typer.Option("--output-size", help="|O| for --objective frequent | kl")
    ] = None,
    min_support: Annotated[
        float | None, typer.Option("--min-support", help="s for --objective frequent")
    ] = None,
    solver: Annotated[
        str | None,
        typer.Option(
            "--solver",
            help="size: lp-greedy | lp-floor | mip; frequent: lp | mip; diversity: "
            "spe-violated | spe (paper's SPE) | mip. 'exact' = mip",
        ),
    ] = None,
    time_limit: Annotated[
        float, typer.Option("--time-limit", help="seconds for a MIP solve")
    ] = 60.0,
    search_seconds: Annotated[
        float, typer.Option("--search-seconds", help="O-UMP local search time (lp-greedy)")
    ] = 5.0,
    count_epsilon: Annotated[
        float | None,
        typer.Option("--count-epsilon", help="ε' of Laplace noise on the counts (optional)"),
    ] = None,
    sensitivity: Annotated[
        float | None,
        typer.Option("--sensitivity", help="d: ASSUMED bound on the counts' sensitivity"),
    ] = None,
    seed: SeedOpt = None,
    output_format: OutFmtOpt = "tsv",
    overwrite: OverwriteOpt = False,
    provenance: ProvenanceOpt = None,
    reader: ReaderOptions = READER_DEFAULT,
    json_out: JsonOpt = False,
) -> None:
    """UMP (Hong et al. EDBT 2012): a same-schema log of sampled user ids.

    Optimal output counts per (query, url) pair under the per-user privacy constraints, then
    multinomial sampling of user ids. Writes `log` (AnonID, Query, ClickURL, Count) and
    `counts` (query, url, x_ij) + ledger.json, and the private provenance record (solver
    figures, metrics) beside the release."""

    def body() -> None:

        if objective is None:
            raise InvalidParameterError(
                "objective", None, "size | frequent | diversity | kl (no default)"
            )
        if epsilon is None:
            raise InvalidParameterError("epsilon", None, "a number > 0 (no default ε)")
        if delta is None:
            raise InvalidParameterError("delta", None, "a number in (0, 1) (no default δ)")
        sv = solver
        if sv == "exact":
            sv = "mip"
        params = UmpParams(
            objective=objective, epsilon=epsilon, delta=delta, solver=sv,
            output_size=output_size, min_support=min_support, time_limit=time_limit,
            search_seconds=search_seconds, count_epsilon=count_epsilon,
            sensitivity=sensitivity,
        )  # fmt: skip
        kw = reader.kwargs()
        check_release_dir(out, fmt=output_format, overwrite=overwrite, provenance=provenance,
                          inputs=input_list(input=input))  # fmt: skip
        with progress(not json_out) as step:
            done = step(f"reading {input.name}")
            log = read_log(input, **kw)
            done()
            done = step(f"solving {params.objective} ({params.method}) and sampling")
            rel = release_ump(log, params, rng=make_rng(seed))
            done()
        write_release(rel, out, fmt=output_format, overwrite=overwrite, provenance=provenance)
        led = rel.ledger
        res = {
            "out": str(out),
            "provenance": str(provenance_path(out, provenance)),
            "objective": objective,
            "notion": led["notion"],
            "epsilon": led["epsilon"],
            "delta": led["delta"],
            "b": rel.report["b"],
            "seeded": led["seeded"],
            "outputs": {k: v.height for k, v in rel.tables.items()},
            "count_noise": rel.report.get("count_noise"),
            "counts_are_private": False,
            "private": private_block(
                solver=rel.report["solver"],
                metrics=rel.report["metrics"],
                pairs_after_condition_1=rel.report["pairs_after_condition_1"],
            ),  # fmt: skip
        }
        if not math.isfinite(res["b"]):
            raise InvalidParameterError("epsilon/delta", (epsilon, delta), "finite b")
        emit(res, json_out, _human)

    run(body)


DEPRECATED = (
    "note: `searchveil sanitize ump` is now `searchveil release ump` (same options); the old "
    "name will be removed in a future release"
)


@functools.wraps(ump_command)
def sanitize_ump_command(*args: Any, **kwargs: Any) -> None:
    # the old name of ``release ump`` (hidden; its help is release ump's): a one-line note on
    # stderr — not with --json, whose output stays machine-readable — then the command
    if not kwargs.get("json_out"):
        err_console.print(DEPRECATED, highlight=False, soft_wrap=True)
    ump_command(*args, **kwargs)


def register(app: typer.Typer) -> None:
    """``release ump`` (in the ``release`` group, :func:`command_group`) and ``sanitize ump``,
    its hidden old name, kept for one release."""
    command_group(app, "release", RELEASE_GROUP_HELP).command("ump")(ump_command)
    san = typer.Typer(
        help="Old name of `release ump` (hidden; kept for one release).", no_args_is_help=True
    )
    app.add_typer(san, name="sanitize", hidden=True)
    san.command("ump", short_help="Old name of `release ump`.")(sanitize_ump_command)
