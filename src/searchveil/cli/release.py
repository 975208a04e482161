"""``searchveil release korolova|zealous|kanon`` (the demo: ``pipelines/demo.py``).

Every release reads one log (the reader options of ``searchveil stats``), computes the release
in memory, and writes the output tables plus the public ``ledger.json`` atomically into
``--out``, and the private provenance record (input path, SHA-256, exact counts, the report)
beside it (``OUT.private.json``, or ``--provenance FILE``; docs/privacy/published.md). There is
no default ε or δ: either give ``--epsilon``/``--delta`` (parameters are solved, and printed) or
give the mechanism's parameters directly (advanced form; the guarantee is computed, and checked
against ``--epsilon``/``--delta`` when those are also given).

Korolova's budget split (``--split``): relative weights of ε for the steps, in this order —
selection, query counts [, URL selection (private URLs only)] [, click counts] — default equal
weights over the steps present. With private URL selection, δ is split equally between the
two thresholding steps. The split actually used is printed and written to the ledger.

This module parses: what a release spends, checks and records (budget, split, SERP provenance)
is decided in :mod:`searchveil.release`, so the ledger of ``searchveil release korolova`` is
the ledger of :func:`searchveil.release.release_korolova` for the same parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from searchveil.cli._common import (
    INPUT_HELP,
    InputArg,
    JsonOpt,
    MaxUsersOpt,
    ReleaseDeltaOpt,
    ReleaseEpsilonOpt,
    add_commands,
    emit,
    err_console,
    progress,
    require_epsilon_delta,
    spark_settings,
)
from searchveil.cli.options import Output, command, option_group, register_group
from searchveil.cli.release_output import human, summary, top
from searchveil.errors import InvalidParameterError
from searchveil.io.paths import input_list
from searchveil.io.readers import ReaderOptions
from searchveil.mechanisms.accounting import Budget
from searchveil.mechanisms.selection import SelectionStrategy
from searchveil.release.histogram import HistogramRelease
from searchveil.release.kanonymity import KAnonParams
from searchveil.release.korolova import (
    KorolovaParams,
    default_split,
    load_serp,
    resolve_url_selection,
    split_parts,
)
from searchveil.release.run import (
    EngineChoice,
    ReleaseParams,
    check_release,
    release_file,
    release_table,
)
from searchveil.release.selection import SelectionParams
from searchveil.release.zealous import ZealousParams
from searchveil.validate import check_int

TableInputArg = Annotated[
    Path | None, typer.Argument(help=INPUT_HELP + " (none with --spark-table)")
]
BoundOpt = Annotated[
    str, typer.Option("--bounding", help="which contributions a user keeps: first | random")
]


@option_group(panel="Engine")
@dataclass(frozen=True)
class Engine:
    """Where a release runs (``--engine``, Spark), and how its provenance record hashes the
    input."""

    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            help="auto (default: polars whenever the input and options allow it, else memory; "
            "same output) | memory (validates every line) | polars (one ordered streaming pass "
            "when each user's rows are contiguous, as in AOL; else a hash plan; big logs) | "
            "spark; polars/spark read the AOL layout (TSV, .gz) or Parquet; --bounding first "
            "only",
        ),
    ] = "auto"
    spark_master: Annotated[
        str, typer.Option("--spark-master", help="Spark master URL for --engine spark")
    ] = "local[*]"
    spark_remote: Annotated[
        str | None,
        typer.Option(
            "--spark-remote", help="Spark Connect server (sc://host:port) for --engine spark"
        ),
    ] = None
    spark_table: Annotated[
        str | None,
        typer.Option(
            "--spark-table",
            help="read a table of the Spark session's catalog instead of INPUT (--engine spark; "
            "--user-col/--query-col/--time-col/--url-col name its columns)",
        ),
    ] = None
    spark_conf: Annotated[
        list[str] | None,
        typer.Option(
            "--spark-conf", help="KEY=VALUE Spark setting (a catalog, a metastore); repeat"
        ),
    ] = None
    fingerprint: Annotated[
        str,
        typer.Option(
            "--fingerprint",
            help="the provenance record's input hash with --engine polars|spark: full (SHA-256 "
            "of the file) | fast (Parquet only: SHA-256 of the footer's row-group metadata and "
            "size)",
        ),
    ] = "full"


@option_group()
@dataclass(frozen=True)
class RunOptions:
    """Where a release command reads, runs and writes, and what it prints (the options every
    release shares)."""

    output: Output
    engine: Engine
    reader: ReaderOptions
    json_out: JsonOpt = False


@option_group()
@dataclass(frozen=True)
class KorolovaOptions:
    """The mechanism options of ``release korolova`` (solved form or advanced form)."""

    epsilon: ReleaseEpsilonOpt = None
    delta: ReleaseDeltaOpt = None
    d: Annotated[
        int | None, typer.Option("--max-queries", help="d: query events kept per user")
    ] = None
    d_c: Annotated[int | None, typer.Option("--max-clicks", help="d_c: clicks kept per user")] = (
        None
    )
    urls: Annotated[
        str,
        typer.Option(
            "--urls",
            help="which URLs get click counts: none | serp (public SERP file) | private "
            "(selected by thresholding, own budget) | auto (none without --max-clicks, "
            "serp with --serp, else private)",
        ),
    ] = "auto"
    serp: Annotated[
        Path | None,
        typer.Option("--serp", help="public SERP file: query<TAB>rank<TAB>url per line"),
    ] = None
    serp_depth: Annotated[
        int | None, typer.Option("--serp-depth", help="use the top N ranks of the SERP")
    ] = None
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            help="ε weights: selection,query-counts[,url-selection][,click-counts]; default equal",
        ),
    ] = None
    threshold_rule: Annotated[
        str,
        typer.Option(
            "--threshold-rule",
            help="exact (smallest integer K for the discrete mechanism) | paper (Table 4.1) "
            "| improved (§4.8)",
        ),
    ] = "exact"
    distinct: Annotated[
        bool,
        typer.Option("--distinct-users", help="count distinct users per query (≤1 per user)"),
    ] = False
    bounding: BoundOpt = "first"
    clamp: Annotated[
        bool, typer.Option("--clamp-negative", help="publish negative noisy counts as 0")
    ] = False
    selection: Annotated[
        str | None,
        typer.Option(
            "--selection",
            help="query (and, with --max-clicks, query-click) selection on each user's first "
            "DISTINCT queries: " + " | ".join(SelectionStrategy) + " "
            "(docs/selection-strategies.md; mad, mad2r: deprecated names of probe-reweight, "
            "probe-reweight-2r); --split = selection,counts[,url-selection,"
            "click-counts]; without --max-queries d is the strategy's data-independent "
            "default. Unset: the thesis' Select-Queries",
        ),
    ] = None
    K: Annotated[float | None, typer.Option("--K", help="advanced: threshold K")] = None
    b: Annotated[float | None, typer.Option("--b", help="advanced: selection noise b")] = None
    b_q: Annotated[float | None, typer.Option("--bq", help="advanced: count noise b_q")] = None
    b_c: Annotated[float | None, typer.Option("--bc", help="advanced: click noise b_c")] = None
    url_K: Annotated[float | None, typer.Option("--url-K", help="advanced: URL threshold")] = None
    url_b: Annotated[
        float | None, typer.Option("--url-b", help="advanced: URL selection noise")
    ] = None
    max_users: MaxUsersOpt = None

    @property
    def advanced(self) -> bool:
        given = (self.K, self.b, self.b_q, self.b_c, self.url_K, self.url_b)
        return any(v is not None for v in given)


def _parse_split(split: str | None, parts: int) -> tuple[float, ...] | None:
    """``--split`` as weights (``None`` when unset)."""
    if split is None:
        return None
    try:
        vals = tuple(float(x) for x in split.replace(":", ",").split(","))
    except ValueError:
        raise InvalidParameterError("split", split, "comma-separated positive numbers") from None
    if len(vals) != parts or any(not (v > 0 and math.isfinite(v)) for v in vals):
        raise InvalidParameterError(
            "split", split, f"{parts} comma-separated positive weights for the steps present"
        )
    return vals


def _budget(epsilon: float | None, delta: float | None) -> Budget | None:
    return Budget(epsilon, delta) if epsilon is not None and delta is not None else None


def _advanced_budget(epsilon: float | None, delta: float | None) -> Budget | None:
    """The budget to check the advanced form against: ``--epsilon`` and ``--delta``, or
    neither."""
    if (epsilon is None) != (delta is None):
        raise InvalidParameterError(
            "epsilon/delta", (epsilon, delta), "both or neither in the advanced form"
        )
    return _budget(epsilon, delta)


def _release_and_write(
    params: ReleaseParams,
    input: Path | None,
    o: RunOptions,
    *,
    what: str,
    max_users: int | None = None,
    serp: Any = None,
) -> tuple[HistogramRelease, dict[str, Any] | None]:
    """:func:`~searchveil.release.run.release_file` with the command's options, under a
    progress line, charged to ``--budget`` (refused before the log is read); the warning of
    the report (if any) on stderr. Returns the release and the budget's state after it."""
    out, eng = o.output, o.engine
    conf = spark_settings(tuple(eng.spark_conf or ()))
    if (input is None) == (eng.spark_table is None):
        raise InvalidParameterError("input", input, "a log file, or --spark-table NAME (one)")
    if eng.spark_table is not None and eng.engine not in (EngineChoice.AUTO, EngineChoice.SPARK):
        raise InvalidParameterError("engine", eng.engine, "spark (or auto) with --spark-table")
    checked: dict[str, Any] = {
        "out": out.out,
        "out_format": out.output_format,
        "overwrite": out.overwrite,
        "provenance": out.provenance,
        "max_users": max_users,
        "serp": serp,
    }
    # everything that needs no byte of the log, before the charge (which then stands)
    check_release(params, input, engine=eng.engine if input is not None else "spark",
                  reader=o.reader, fingerprint=eng.fingerprint, **checked)  # fmt: skip
    common: dict[str, Any] = {
        "rng": out.rng(),
        **checked,
        "spark_master": eng.spark_master,
        "spark_remote": eng.spark_remote,
        "spark_conf": conf,
    }
    with out.charged(params.cost(), f"release {what}") as ch, progress(not o.json_out) as step:
        done = step(what)
        if eng.spark_table is not None:
            columns, normalize = o.reader.columns, o.reader.normalize
            rel = release_table(
                eng.spark_table, params, columns=columns, normalize=normalize, **common
            )
        else:
            assert input is not None
            rel = release_file(
                input,
                params,
                engine=eng.engine,
                reader=o.reader,
                fingerprint=eng.fingerprint,
                **common,
            )
        ch.record_written(out.out)
        done()
    warn = (rel.report.get("single_user") or {}).get("warning")
    if warn:
        err_console.print(f"[bold red]warning[/]: {warn}", highlight=False)
    return rel, out.budget_result(ch)


def select_params(o: KorolovaOptions) -> SelectionParams:
    """The parameters of ``release korolova --selection``: without ``--max-queries``, d is the
    strategy's data-independent default (:meth:`SelectionParams.from_budget`)."""
    assert o.selection is not None
    eps, dl = require_epsilon_delta(o.epsilon, o.delta)
    w = _parse_split(o.split, 2 if o.d_c is None else 4)
    return SelectionParams.from_budget(
        strategy=o.selection, epsilon=eps, delta=dl, d=o.d, split=w, d_c=o.d_c,
        clamp_negative=o.clamp, max_users=o.max_users,
    )  # fmt: skip


def korolova_params(o: KorolovaOptions) -> KorolovaParams:
    """The parameters of ``release korolova``: solved from ``--epsilon``/``--delta`` (with the
    split), or given directly (advanced form)."""
    if o.d is None:
        raise InvalidParameterError("max-queries", None, "an integer d >= 1 (no default)")
    check_int("max-queries", o.d, minimum=1)
    urls = resolve_url_selection(o.urls, d_c=o.d_c, serp_given=o.serp is not None)
    if o.advanced:
        if o.split is not None:
            raise InvalidParameterError("split", o.split, "unset when K, b, ... are given directly")
        if o.K is None or o.b is None or o.b_q is None:
            raise InvalidParameterError(
                "K/b/bq", (o.K, o.b, o.b_q), "all of --K, --b, --bq in the advanced form"
            )
        return KorolovaParams(
            d=o.d, K=o.K, b=o.b, b_q=o.b_q, url_selection=urls, d_c=o.d_c, b_c=o.b_c,
            url_K=o.url_K, url_b=o.url_b, distinct=o.distinct, strategy=o.bounding,
            clamp_negative=o.clamp, budget=_advanced_budget(o.epsilon, o.delta),
        )  # fmt: skip
    epsilon, delta = require_epsilon_delta(o.epsilon, o.delta)
    split = _parse_split(o.split, split_parts(urls)) or default_split(urls)
    return KorolovaParams.from_budget(
        epsilon=epsilon, delta=delta, d=o.d, url_selection=urls, d_c=o.d_c, split=split,
        threshold_rule=o.threshold_rule, distinct=o.distinct, strategy=o.bounding,
        clamp_negative=o.clamp,
    )  # fmt: skip


def _korolova(o: KorolovaOptions, input: Path | None, run: RunOptions) -> dict[str, Any]:
    """``release korolova`` (the thesis' Select-Queries)."""
    params = korolova_params(o)
    run.output.check(input_list(input=input, serp=o.serp))
    serp = None
    if o.serp is not None:
        serp = load_serp(o.serp, normalize=run.reader.normalize, depth=o.serp_depth)
    release, budget = _release_and_write(
        params, input, run, what="korolova", max_users=o.max_users, serp=serp
    )
    split = params.epsilon_split_weights
    return _summary(release, run, budget, list(split) if split else None)


def _selection(o: KorolovaOptions, input: Path | None, run: RunOptions) -> dict[str, Any]:
    """``release korolova --selection``: the options it refuses, its parameters, the release."""
    others = {"--serp": o.serp, "--K": o.K, "--b": o.b, "--bq": o.b_q, "--bc": o.b_c,
              "--url-K": o.url_K, "--url-b": o.url_b, "--serp-depth": o.serp_depth}  # fmt: skip
    for name, v in others.items():
        if v is not None:
            raise InvalidParameterError(name, v, "unset with --selection")
    allowed = ("auto", "none") if o.d_c is None else ("auto", "private")
    if o.urls not in allowed:
        raise InvalidParameterError(
            "urls",
            o.urls,
            " | ".join(allowed)
            + " with --selection"
            + ("" if o.d_c is None else " and --max-clicks"),
        )
    if o.bounding != "first" or o.distinct or o.threshold_rule != "exact":
        raise InvalidParameterError(
            "bounding/distinct-users/threshold-rule",
            (o.bounding, o.distinct, o.threshold_rule),
            "the defaults with --selection (it always uses each user's first distinct queries)",
        )
    params = select_params(o)
    what = f"korolova --selection {params.strategy}"
    release, budget = _release_and_write(params, input, run, what=what, max_users=o.max_users)
    res = _summary(release, run, budget, list(params.split))
    if o.max_users is not None:
        res["max_users"] = o.max_users
    return res


def _summary(
    release: HistogramRelease,
    run: RunOptions,
    budget: dict[str, Any] | None,
    split: Any = None,
    *,
    tops: tuple[str, ...] = ("queries", "clicks"),
) -> dict[str, Any]:
    """The command's summary of a written release, with the top rows of the tables ``tops``."""
    res = summary(release, run.output.out, split, run.output.provenance, budget)
    res["top"] = {name: top(release, name) for name in tops}
    return res


def zealous_params(
    *,
    epsilon: ReleaseEpsilonOpt = None,
    delta: ReleaseDeltaOpt = None,
    m: Annotated[
        int | None, typer.Option("--max-items", help="m: distinct items kept per user")
    ] = None,
    item_type: Annotated[
        str, typer.Option("--item-type", help="keywords | queries | clicks | query_pairs")
    ] = "queries",
    guarantee: Annotated[
        str,
        typer.Option(
            "--guarantee",
            help="probabilistic (Götz Thm 3, needs --max-users) | indistinguishability "
            "(Thm 2, corrected)",
        ),
    ] = "probabilistic",
    users: MaxUsersOpt = None,
    tau: Annotated[
        int | None,
        typer.Option("--tau", help="first threshold τ (default: Prop. 4's ⌈2m/ε⌉; 1 for Thm 2)"),
    ] = None,
    lam: Annotated[float | None, typer.Option("--lambda", help="advanced: noise scale λ")] = None,
    tau_prime: Annotated[
        float | None, typer.Option("--tau-prime", help="advanced: second threshold τ'")
    ] = None,
    bounding: BoundOpt = "first",
) -> ZealousParams:
    """The parameters of ``release zealous``: solved from ``--epsilon``/``--delta``, or λ and
    τ' given directly (advanced form)."""
    if m is None:
        raise InvalidParameterError("max-items", None, "an integer m >= 1 (no default)")
    if lam is not None or tau_prime is not None:
        if lam is None or tau_prime is None:
            raise InvalidParameterError(
                "lambda/tau-prime", (lam, tau_prime), "both in the advanced form"
            )
        return ZealousParams(
            m=m, tau=tau if tau is not None else 1, lam=lam, tau_prime=tau_prime,
            item_type=item_type, guarantee=guarantee, users=users, strategy=bounding,
            budget=_advanced_budget(epsilon, delta),
        )  # fmt: skip
    eps, dl = require_epsilon_delta(epsilon, delta)
    return ZealousParams.from_budget(
        epsilon=eps, delta=dl, m=m, item_type=item_type, guarantee=guarantee, tau=tau,
        users=users, strategy=bounding,
    )  # fmt: skip


register_group(ZealousParams, build=zealous_params)


# -- the commands (parsing only) --------------------------------------------------------------


@command
def korolova_command(o: KorolovaOptions, run: RunOptions, input: TableInputArg = None) -> None:
    """Korolova's Release-Data (thesis ch.4): private queries, clicks and noisy counts."""
    release = _korolova if o.selection is None else _selection
    emit(release(o, input, run), run.json_out, human)


@command
def zealous_command(params: ZealousParams, run: RunOptions, input: TableInputArg = None) -> None:
    """ZEALOUS (Götz et al. §4): frequent keywords / queries / clicks / query pairs."""
    release, budget = _release_and_write(params, input, run, what="zealous")
    emit(_summary(release, run, budget, tops=("items",)), run.json_out, human)


#: ``release kanon --budget``: accepted only to be refused, as ``tabular anonymize --model kanon``
KanonBudgetOpt = Annotated[
    Path | None,
    typer.Option(
        "--budget",
        help="refused: k-anonymity is not differentially private, so no budget can charge it "
        "(docs/privacy/budget.md)",
    ),
]


@command(omit=("spark_remote", "spark_table", "spark_conf"), replace={"budget": KanonBudgetOpt})
def kanon_command(
    input: InputArg,
    *,
    k: Annotated[
        int | None, typer.Option("--k", help="minimum distinct users of a published query")
    ] = None,
    run: RunOptions,
) -> None:
    """k-query anonymity (Adar; the NON-differentially-private baseline of Götz §7)."""
    if k is None:
        raise InvalidParameterError("k", None, "an integer k >= 1 (no default)")
    release, _ = _release_and_write(KAnonParams(k=k), input, run, what="kanon")
    emit(_summary(release, run, None, tops=("queries",)), run.json_out, human)


def register(app: typer.Typer) -> None:
    add_commands(
        app,
        "release",
        {"korolova": korolova_command, "zealous": zealous_command, "kanon": kanon_command},
    )
