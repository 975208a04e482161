"""``searchveil release ump``: the same-schema release (package :mod:`searchveil.release.ump`):
end to end differentially private by default (``--mode e2e``), or Hong et al. EDBT 2012's
counts from the exact histogram (``--mode conditional``, NOT differentially private);
``searchveil sanitize ump`` is its old, hidden name."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from searchveil.cli._common import (
    PRIVATE,
    InputArg,
    JsonOpt,
    MaxPairsOpt,
    MaxUsersOpt,
    ReleaseDeltaOpt,
    ReleaseEpsilonOpt,
    add_commands,
    command_group,
    emit,
    err_console,
    guarantee_text,
    kv_table,
    out_console,
    parse_split,
    print_release_table,
    private_block,
    progress,
    require_epsilon_delta,
)
from searchveil.cli.options import Output, command, option_group
from searchveil.errors import InvalidParameterError
from searchveil.io.paths import input_list
from searchveil.io.readers import ReaderOptions, read_log
from searchveil.model import SearchLog
from searchveil.release import write_release
from searchveil.release.korolova.release import load_serp
from searchveil.release.ump import UmpParams, release_ump
from searchveil.release.ump.e2e import E2EParams, UmpMode, UserIds, release_ump_e2e
from searchveil.release.ump.schema import parse_period
from searchveil.synth.layout import Columns
from searchveil.validate import parse_choice


def _human_e2e(r: dict[str, Any]) -> None:
    t = kv_table(f"{r['mechanism']} → {r['out']}")
    t.add_row("guarantee", guarantee_text(r))
    t.add_row("ε, δ (end to end)", f"{r['epsilon']:.6g}, {r['delta']:.4g}")
    for step, s in r["split"].items():
        t.add_row(f"  {step.replace('_', ' ')}", f"ε {s['epsilon']:.4g}, δ {s['delta']:.3g}")
    t.add_row("m (distinct pairs kept per user)", f"{r['max_pairs']} — {r['max_pairs_rule']}")
    t.add_row("published pairs (DP)", f"{r['pairs_published']:,}")
    for name, rows in r["outputs"].items():
        t.add_row(f"table {name}", f"{rows:,} rows")
    for k, v in (r.get("statistics") or {}).items():
        t.add_row(k.replace("_", " "), str(v))
    pv = r["private"]
    m = pv["metrics"]
    if "input_click_rows" in m:
        t.add_row("output rows / input click rows" + PRIVATE, f"{m['output_rows']:,} / "
                  f"{m['input_click_rows']:,}")  # fmt: skip
        t.add_row("share of click volume on published pairs" + PRIVATE,
                  f"{m['volume_share']:.2%}")  # fmt: skip
    else:
        t.add_row("output rows / input rows" + PRIVATE,
                  f"{m['output_rows']:,} / {m['input_rows']:,}")  # fmt: skip
        for k in ("hour_tv", "rank_tv"):
            if m.get(k) is not None:
                t.add_row(f"{k.replace('_tv', '')} distribution: TV distance" + PRIVATE,
                          f"{m[k]:.4f}")  # fmt: skip
    qp = pv.get("query_pairs_single_user_expected")
    if qp is not None:
        t.add_row("expected single-user query pairs published" + PRIVATE, f"{qp:.3g}")
    su = pv.get("single_user_items_expected")
    if su is not None:
        t.add_row("expected single-user pairs published" + PRIVATE, f"{su:.3g}")
    if "constraint_on_true_log" in pv:
        c = pv["constraint_on_true_log"]
        t.add_row("max user load / b (true log)" + PRIVATE, f"{c['max_load']:.3g} / {c['b']:.3g}")
    print_release_table(t, r)
    if r["ids"] == "real":
        out_console.print(
            "note: with real user ids each user appears with probability <= 1 - e^-b; the log "
            "is empty or nearly so at every δ < 1/U (docs/privacy/ump.md)."
        )


def _human(r: dict[str, Any]) -> None:
    t = kv_table(f"hong-ump ({r['objective']}) → {r['out']}")
    t.add_row("guarantee", guarantee_text(r))
    c = r["sampling_given_counts"]
    t.add_row(
        "ε, δ of the sampling given the counts only",
        f"[bold red]{c['epsilon']:.6g}, {c['delta']:.4g}[/] (not a DP guarantee)",
    )
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
    print_release_table(t, r)
    out_console.print(
        "[bold red]note: --mode conditional is NOT differentially private[/]: the counts x_ij "
        "are computed from the exact histogram; only the sampling given them is covered by "
        "(ε, δ) (docs/privacy/ump.md).",
        highlight=False,
    )


_CONDITIONAL_ONLY = (
    "solver", "output_size", "min_support", "time_limit", "search_seconds", "count_epsilon",
    "sensitivity",
)  # fmt: skip


# options of --mode conditional only
TimeLimitOpt = Annotated[
    float | None,
    typer.Option("--time-limit", help="conditional: seconds for a MIP solve [default: 60]"),
]
SearchSecondsOpt = Annotated[
    float | None,
    typer.Option(
        "--search-seconds", help="conditional: O-UMP local search time (lp-greedy) [default: 5]"
    ),
]
CountEpsOpt = Annotated[
    float | None,
    typer.Option("--count-epsilon", help="conditional: ε' of Laplace noise on the counts"),
]
SensitivityOpt = Annotated[
    float | None,
    typer.Option("--sensitivity", help="conditional: d, ASSUMED bound on the counts' sensitivity"),
]


UmpModeOpt = Annotated[
    str,
    typer.Option(
        "--mode",
        help="e2e (DP end to end) | conditional (the paper's counts from the exact "
        "histogram: NOT differentially private; for reproducing the paper)",
    ),
]

IdsOpt = Annotated[
    str,
    typer.Option(
        "--ids",
        help="e2e: synthetic (log generated from DP counts) | real (Hong's sampling of "
        "real ids: empty or nearly so at δ < 1/U)",
    ),
]

PairsOpt = Annotated[
    str | None,
    typer.Option(
        "--pairs",
        help="e2e: pair counts from probe-reweight-2r (query-click release; "
        "default with synthetic ids) | zealous (default with real ids)",
    ),  # fmt: skip
]

SplitOpt = Annotated[
    str | None,
    typer.Option(
        "--split",
        help="e2e synthetic: ε weights of pair counts, the rest (the statistics of "
        "the input's columns: default 0.7,0.3; the profile with --schema counts: 0.9,0.1)",
    ),  # fmt: skip
]

SchemaOpt = Annotated[
    str | None,
    typer.Option(
        "--schema",
        help="e2e synthetic: input (the input's own columns, each from a DP "
        "statistic; default) | counts (AnonID, Query, ClickURL, Count)",
    ),  # fmt: skip
]

MaxEventsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-events",
        help="--schema input: E, query events per user the size "
        "counts (default: a public rule of ε, U and the reference sample)",
    ),  # fmt: skip
]

MaxQueryPairsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-query-pairs",
        help="--schema input: distinct query pairs per user "
        "ZEALOUS counts (default: a public rule)",
    ),  # fmt: skip
]

PeriodOpt = Annotated[
    str | None,
    typer.Option(
        "--period",
        help="--schema input: the log's public period FIRST..LAST (ISO "
        "dates); default: released (the months with enough searches)",
    ),  # fmt: skip
]

UmpSerpOpt = Annotated[
    Path | None,
    typer.Option(
        "--serp",
        help="--schema input: public SERP (query<TAB>rank<TAB>url) for the "
        "ranks of published pairs, instead of their noisy rank histograms",
    ),  # fmt: skip
]

ObjectiveOpt = Annotated[
    str | None,
    typer.Option(
        "--objective",
        help="conditional: size (O-UMP) | frequent (F-UMP) | diversity (D-UMP) | kl (CELS "
        "eq. 2, needs --output-size); e2e --ids real: size | diversity",
    ),
]

OutputSizeOpt = Annotated[
    int | None,
    typer.Option("--output-size", help="conditional: |O| for --objective frequent | kl"),
]

MinSupportOpt = Annotated[
    float | None,
    typer.Option("--min-support", help="conditional: s for --objective frequent"),
]

SolverOpt = Annotated[
    str | None,
    typer.Option(
        "--solver",
        help="conditional: size: lp-greedy | lp-floor | mip; frequent: lp | mip; "
        "diversity: spe-violated | spe (paper's SPE) | mip. 'exact' = mip",
    ),
]


@option_group()
@dataclass(frozen=True)
class UmpOptions:
    """The mechanism options of ``release ump`` (both modes; each mode refuses the other's)."""

    epsilon: ReleaseEpsilonOpt = None
    delta: ReleaseDeltaOpt = None
    mode: UmpModeOpt = "e2e"
    ids: IdsOpt = "synthetic"
    max_pairs: MaxPairsOpt = None
    pairs: PairsOpt = None
    max_users: MaxUsersOpt = None
    split: SplitOpt = None
    schema: SchemaOpt = None
    max_events: MaxEventsOpt = None
    max_query_pairs: MaxQueryPairsOpt = None
    period: PeriodOpt = None
    serp: UmpSerpOpt = None
    objective: ObjectiveOpt = None
    output_size: OutputSizeOpt = None
    min_support: MinSupportOpt = None
    solver: SolverOpt = None
    time_limit: TimeLimitOpt = None
    search_seconds: SearchSecondsOpt = None
    count_epsilon: CountEpsOpt = None
    sensitivity: SensitivityOpt = None

    def budget(self) -> tuple[float, float]:
        """``--epsilon`` and ``--delta`` (no default)."""
        return require_epsilon_delta(self.epsilon, self.delta)


def _read(input: Path, reader: ReaderOptions, step: Any) -> SearchLog:
    """The input log, read with the command's reader options."""
    done = step(f"reading {input.name}")
    log = read_log(input, **reader.kwargs())
    done()
    return log


def _e2e(o: UmpOptions, input: Path, reader: ReaderOptions, out: Output, step: Any) -> Any:
    """``--mode e2e``: the end-to-end DP release (release/ump/e2e.py)."""
    given = [k for k in _CONDITIONAL_ONLY if getattr(o, k) is not None]
    if given:
        raise InvalidParameterError(
            given[0].replace("_", "-"), getattr(o, given[0]),
            "not set: it is an option of --mode conditional (the paper's counts)",
        )  # fmt: skip
    ids = parse_choice("ids", o.ids, UserIds)
    if o.objective is not None and ids != UserIds.REAL:
        raise InvalidParameterError(
            "objective", o.objective, "not set with --ids synthetic (it chooses the counts of "
            "the real-id sampling: --ids real --objective size|diversity)",
        )  # fmt: skip
    epsilon, delta = o.budget()
    params = E2EParams.from_budget(
        epsilon=epsilon, delta=delta, max_pairs=o.max_pairs, ids=ids,
        objective=o.objective or "size", split=parse_split(o.split), max_users=o.max_users,
        pairs=o.pairs, schema=o.schema, max_events=o.max_events,
        max_query_pairs=o.max_query_pairs, period=parse_period(o.period),
        serp=o.serp is not None,
    )  # fmt: skip
    out.check(input_list(input=input, serp=o.serp))
    serp = load_serp(o.serp, normalize=reader.normalize) if o.serp is not None else None
    columns = Columns.of_input(reader.columns, has_header=reader.has_header)
    with out.charged(params.cost(), "release ump") as ch:
        log = _read(input, reader, step)
        rel = release_ump_e2e(log, params, rng=out.rng(), progress=step, columns=columns,
                              serp=serp)  # fmt: skip
        done = step(f"writing {out.out}")
        write_release(rel, out.out, fmt=out.output_format, overwrite=out.overwrite,
                      provenance=out.provenance)  # fmt: skip
        ch.record_written(out.out)
        done()
    led, rep = rel.ledger, rel.report
    su = rep["single_user"]
    warn = su.get("warning")  # δ ≥ 1/U (issue 39): on stderr, and under private in --json
    if warn:
        err_console.print(f"[bold red]warning[/]: {warn}", highlight=False)
    return {
        "out": str(out.out), "provenance": str(out.provenance_path), "mode": "e2e",
        "ids": str(ids), "pairs": str(params.pairs), "mechanism": led["mechanism"],
        "notion": led["notion"],
        "epsilon": led["epsilon"], "delta": led["delta"], "split": led["guarantee"]["split"],
        "counts_are_private": True, "seeded": led["seeded"], "max_pairs": params.max_pairs,
        "max_pairs_rule": params.max_pairs_rule, "pairs_published": rep["pairs_published"],
        "schema": str(params.schema), "statistics": _statistics_summary(params),
        "outputs": {k: v.height for k, v in rel.tables.items()},
        "budget": out.budget_result(ch),
        "private": private_block(
            metrics=rep["metrics"],
            single_user_items_expected=su.get("expected_single_user_published"),
            delta_check=su.get("delta_check"), delta_warning=warn,
            **_schema_private(rep),
            **({"constraint_on_true_log": rep["constraint_on_true_log"]}
               if "constraint_on_true_log" in rep else {}),
        ),
    }  # fmt: skip


def _statistics_summary(params: E2EParams) -> dict[str, Any] | None:
    """The public bounds of the input's columns (``--schema input``), for the summary."""
    st = params.statistics
    if st is None:
        return None
    return {"max_events": st.max_events, "max_query_pairs": st.max_query_pairs,
            "period": st.to_dict()["period"] or "released", "item_ranks": st.to_dict()[
                "item_ranks"]}  # fmt: skip


def _schema_private(rep: dict[str, Any]) -> dict[str, Any]:
    """The private figures of the input's columns: the released period, the query pairs'
    expected single-user items."""
    sch = rep.get("schema")
    if not sch:
        return {}
    qp = sch.get("query_pairs_single_user") or {}
    return {
        "period_released": sch.get("period_released"),
        "query_pairs_single_user_expected": qp.get("expected_single_user_published"),
    }


def _conditional(
    o: UmpOptions, input: Path, reader: ReaderOptions, out: Output, step: Any
) -> dict[str, Any]:
    """``--mode conditional``: Hong et al.'s counts from the exact histogram (NOT DP)."""
    for k in ("ids", "max_pairs", "split", "max_users", "pairs", "schema", "max_events",
              "max_query_pairs", "period", "serp"):  # fmt: skip
        default = "synthetic" if k == "ids" else None
        if getattr(o, k) != default:
            raise InvalidParameterError(
                k.replace("_", "-"), getattr(o, k), "not set: it is an option of --mode e2e"
            )
    if o.objective is None:
        raise InvalidParameterError(
            "objective", None, "size | frequent | diversity | kl (no default)"
        )
    epsilon, delta = o.budget()
    params = UmpParams(
        objective=o.objective, epsilon=epsilon, delta=delta,
        solver="mip" if o.solver == "exact" else o.solver, output_size=o.output_size,
        min_support=o.min_support, time_limit=60.0 if o.time_limit is None else o.time_limit,
        search_seconds=5.0 if o.search_seconds is None else o.search_seconds,
        count_epsilon=o.count_epsilon, sensitivity=o.sensitivity,
    )  # fmt: skip
    if not math.isfinite(params.b):
        raise InvalidParameterError("epsilon/delta", (params.epsilon, params.delta), "finite b")
    out.check(input_list(input=input))
    # with --budget: refused (its cost is conditional: the counts are not private)
    with out.charged(params.cost(), "release ump --mode conditional") as ch:
        log = _read(input, reader, step)
        done = step(f"solving {params.objective} ({params.method}) and sampling")
        rel = release_ump(log, params, rng=out.rng())
        done()
        write_release(rel, out.out, fmt=out.output_format, overwrite=out.overwrite,
                      provenance=out.provenance)  # fmt: skip
        ch.record_written(out.out)
    led = rel.ledger
    return {
        "out": str(out.out), "provenance": str(out.provenance_path), "mode": "conditional",
        "objective": o.objective, "notion": led["notion"], "epsilon": None, "delta": None,
        "sampling_given_counts": {k: led["guarantee"]["conditional"][k]
                                  for k in ("epsilon", "delta", "relation", "covers")},
        "b": rel.report["b"], "seeded": led["seeded"],
        "outputs": {k: v.height for k, v in rel.tables.items()},
        "count_noise": rel.report.get("count_noise"), "counts_are_private": False,
        "differentially_private": False,
        "private": private_block(
            solver=rel.report["solver"], metrics=rel.report["metrics"],
            pairs_after_condition_1=rel.report["pairs_after_condition_1"],
        ),
    }  # fmt: skip


@command
def ump_command(
    input: InputArg,
    o: UmpOptions,
    out: Output,
    reader: ReaderOptions,
    json_out: JsonOpt = False,
) -> None:
    """Same-schema log with the input's own columns, DP end to end by default.

    --mode e2e (default): noisy pair counts (--pairs probe-reweight-2r: a query-click release
    with that selection; zealous: ZEALOUS over each user's first m clicked pairs), then, with
    synthetic users (--ids synthetic), every column from a DP statistic with a bounded
    contribution per user — size, period, times, sessions, clicks, ranks, the published
    head's events, query pairs, an opaque tail — and the log laid out from them in the input's
    columns (--schema input: AOL in, AnonID Query QueryTime ItemRank ClickURL out; --schema
    counts: AnonID Query ClickURL Count from the pairs and a noisy profile), or Hong et al.'s
    sampling of real ids from an allocation of the noisy counts (--ids real: empty or nearly so
    at δ < 1/U). One (ε, δ) covers everything written. --mode conditional: Hong et al. EDBT
    2012's counts from the exact histogram, NOT differentially private (only the sampling given
    the counts is); for reproducing the paper. Writes `log`, `queries`, `counts` (+ `ranks`,
    `query_pairs`, `head_profile`, `statistics`; `profile` or `pairs`), ledger.json, and the
    private provenance record beside the release."""
    o.budget()
    m = parse_choice("mode", o.mode, UmpMode)
    with progress(not json_out) as step:
        res = (_e2e if m == UmpMode.E2E else _conditional)(o, input, reader, out, step)
    res["seeded"] = bool(res["seeded"])
    emit(res, json_out, _human_e2e if m == UmpMode.E2E else _human)


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
    add_commands(app, "release", {"ump": ump_command})
    san = command_group(app, "sanitize")
    san.command("ump", short_help="Old name of `release ump`.")(sanitize_ump_command)
