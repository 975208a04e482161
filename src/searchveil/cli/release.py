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
    READER_DEFAULT,
    RELEASE_GROUP_HELP,
    BudgetOpt,
    InputArg,
    JsonOpt,
    MaxUsersOpt,
    OutDirOpt,
    OutFmtOpt,
    OverwriteOpt,
    ProvenanceOpt,
    SeedOpt,
    SparkConfOpt,
    SparkRemoteOpt,
    SparkTableOpt,
    TableInputArg,
    budget_result,
    charged,
    command_group,
    emit,
    err_console,
    progress,
    run,
    spark_settings,
    with_reader_options,
)  # fmt: skip
from searchveil.cli.release_output import human, summary, top
from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import check_release_dir
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
from searchveil.release.run import EngineChoice, ReleaseParams, release_file, release_table
from searchveil.release.selection import SelectionParams
from searchveil.release.zealous import ZealousParams
from searchveil.rng import make_rng
from searchveil.validate import check_int

EpsOpt = Annotated[
    float | None, typer.Option("--epsilon", help="total ε of the release (no default)")
]
DeltaOpt = Annotated[
    float | None, typer.Option("--delta", help="total δ of the release (no default)")
]
EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="auto (default: polars whenever the input and options allow it, else memory; "
        "same output) | memory (validates every line) | polars (one ordered streaming pass "
        "when each user's rows are contiguous, as in AOL; else a hash plan; big logs) | spark; "
        "polars/spark read the AOL layout (TSV, .gz) or Parquet; --bounding first only",
    ),
]
SparkMasterOpt = Annotated[
    str, typer.Option("--spark-master", help="Spark master URL for --engine spark")
]
FingerprintOpt = Annotated[
    str,
    typer.Option(
        "--fingerprint",
        help="the provenance record's input hash with --engine polars|spark: full (SHA-256 of "
        "the file) | fast (Parquet only: SHA-256 of the footer's row-group metadata and size)",
    ),
]
BoundOpt = Annotated[
    str, typer.Option("--bounding", help="which contributions a user keeps: first | random")
]


@dataclass(frozen=True)
class RunOptions:
    """Where a release command reads, runs and writes (the options every release shares)."""

    input: Path | None
    reader: ReaderOptions
    out: Path
    out_fmt: str
    overwrite: bool
    seed: int | None
    json_out: bool
    engine: str = "auto"
    spark_master: str = "local[*]"
    fingerprint: str = "full"
    provenance: Path | None = None
    spark_table: str | None = None
    spark_remote: str | None = None
    spark_conf: tuple[str, ...] = ()
    budget: Path | None = None


@dataclass(frozen=True)
class KorolovaOptions:
    """The mechanism options of ``release korolova`` (solved form or advanced form)."""

    epsilon: float | None
    delta: float | None
    d: int | None
    d_c: int | None = None
    urls: str = "auto"
    serp: Path | None = None
    serp_depth: int | None = None
    split: str | None = None
    threshold_rule: str = "exact"
    distinct: bool = False
    bounding: str = "first"
    clamp: bool = False
    K: float | None = None
    b: float | None = None
    b_q: float | None = None
    b_c: float | None = None
    url_K: float | None = None
    url_b: float | None = None
    max_users: int | None = None

    @property
    def advanced(self) -> bool:
        return any(v is not None for v in (self.K, self.b, self.b_q, self.b_c, self.url_K,
                                           self.url_b))  # fmt: skip


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


def _need_budget(epsilon: float | None, delta: float | None) -> None:
    if epsilon is None:
        raise InvalidParameterError("epsilon", None, "a number > 0 (there is no default ε)")
    if delta is None:
        raise InvalidParameterError("delta", None, "a number in (0, 1) (no default δ)")


def _release_and_write(
    params: ReleaseParams,
    o: RunOptions,
    *,
    what: str,
    max_users: int | None = None,
    serp: Any = None,
) -> tuple[HistogramRelease, dict[str, Any] | None]:
    """:func:`~searchveil.release.run.release_file` with the command's options, under a
    progress line, charged to ``--budget`` (refused before the log is read); the warning of
    the report (if any) on stderr. Returns the release and the budget's state after it."""
    conf = spark_settings(o.spark_conf)
    if (o.input is None) == (o.spark_table is None):
        raise InvalidParameterError("input", o.input, "a log file, or --spark-table NAME (one)")
    if o.spark_table is not None and o.engine not in (EngineChoice.AUTO, EngineChoice.SPARK):
        raise InvalidParameterError("engine", o.engine, "spark (or auto) with --spark-table")
    check_release_dir(o.out, fmt=o.out_fmt, overwrite=o.overwrite, provenance=o.provenance,
                      inputs=input_list(input=o.input))  # fmt: skip
    with (
        charged(o.budget, params.cost(), f"release {what}") as ch,
        progress(not o.json_out) as step,
    ):
        done = step(what)
        if o.spark_table is not None:
            rel = release_table(
                o.spark_table, params, rng=make_rng(o.seed), columns=o.reader.columns,
                normalize=o.reader.normalize, out=o.out, out_format=o.out_fmt,
                overwrite=o.overwrite, provenance=o.provenance, max_users=max_users, serp=serp,
                spark_master=o.spark_master, spark_remote=o.spark_remote, spark_conf=conf,
            )  # fmt: skip
        else:
            assert o.input is not None
            rel = release_file(
                o.input, params, rng=make_rng(o.seed), engine=o.engine, reader=o.reader,
                out=o.out, out_format=o.out_fmt, overwrite=o.overwrite, provenance=o.provenance,
                max_users=max_users, serp=serp, spark_master=o.spark_master,
                fingerprint=o.fingerprint, spark_remote=o.spark_remote, spark_conf=conf,
            )  # fmt: skip
        ch.record_written(o.out)
        done()
    warn = (rel.report.get("single_user") or {}).get("warning")
    if warn:
        err_console.print(f"[bold red]warning[/]: {warn}", highlight=False)
    return rel, budget_result(o.budget, ch)


def select_params(
    *,
    selection: str,
    epsilon: float | None,
    delta: float | None,
    d: int | None,
    d_c: int | None,
    split: str | None,
    clamp: bool,
    max_users: int | None,
) -> SelectionParams:
    """The parameters of ``release korolova --selection``: without ``--max-queries``, d is the
    strategy's data-independent default (:meth:`SelectionParams.from_budget`)."""
    _need_budget(epsilon, delta)
    assert epsilon is not None and delta is not None
    w = _parse_split(split, 2 if d_c is None else 4)
    return SelectionParams.from_budget(strategy=selection, epsilon=epsilon, delta=delta, d=d,
                                       split=w, d_c=d_c, clamp_negative=clamp,
                                       max_users=max_users)  # fmt: skip


def _selected(
    run_opts: RunOptions, params: SelectionParams, max_users: int | None = None
) -> dict[str, Any]:
    o = run_opts
    release, budget = _release_and_write(
        params, o, what=f"korolova --selection {params.strategy}", max_users=max_users
    )
    res = summary(release, o.out, list(params.split), o.provenance, budget)
    res["top"] = {"queries": top(release, "queries"), "clicks": top(release, "clicks")}
    return res


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
        if (o.epsilon is None) != (o.delta is None):
            raise InvalidParameterError(
                "epsilon/delta", (o.epsilon, o.delta), "both or neither in the advanced form"
            )
        return KorolovaParams(
            d=o.d, K=o.K, b=o.b, b_q=o.b_q, url_selection=urls, d_c=o.d_c, b_c=o.b_c,
            url_K=o.url_K, url_b=o.url_b, distinct=o.distinct, strategy=o.bounding,
            clamp_negative=o.clamp, budget=_budget(o.epsilon, o.delta),
        )  # fmt: skip
    _need_budget(o.epsilon, o.delta)
    assert o.epsilon is not None and o.delta is not None
    split = _parse_split(o.split, split_parts(urls)) or default_split(urls)
    return KorolovaParams.from_budget(
        epsilon=o.epsilon, delta=o.delta, d=o.d, url_selection=urls, d_c=o.d_c, split=split,
        threshold_rule=o.threshold_rule, distinct=o.distinct, strategy=o.bounding,
        clamp_negative=o.clamp,
    )  # fmt: skip


def _korolova(o: KorolovaOptions, run_opts: RunOptions) -> dict[str, Any]:
    params = korolova_params(o)
    check_release_dir(
        run_opts.out, fmt=run_opts.out_fmt, overwrite=run_opts.overwrite,
        provenance=run_opts.provenance, inputs=input_list(input=run_opts.input, serp=o.serp),
    )  # fmt: skip
    serp = (
        load_serp(o.serp, normalize=run_opts.reader.normalize, depth=o.serp_depth)
        if o.serp is not None
        else None
    )
    release, budget = _release_and_write(
        params, run_opts, what="korolova", max_users=o.max_users, serp=serp
    )
    split = params.epsilon_split_weights
    res = summary(release, run_opts.out, list(split) if split else None, run_opts.provenance,
                   budget)  # fmt: skip
    res["top"] = {"queries": top(release, "queries"), "clicks": top(release, "clicks")}
    return res


def _zealous(
    run_opts: RunOptions,
    *,
    epsilon: float | None,
    delta: float | None,
    m: int | None,
    item_type: str,
    guarantee: str,
    users: int | None,
    tau: int | None,
    lam: float | None,
    tau_prime: float | None,
    bounding: str,
) -> dict[str, Any]:
    if m is None:
        raise InvalidParameterError("max-items", None, "an integer m >= 1 (no default)")
    if lam is not None or tau_prime is not None:
        if lam is None or tau_prime is None:
            raise InvalidParameterError(
                "lambda/tau-prime", (lam, tau_prime), "both in the advanced form"
            )
        if (epsilon is None) != (delta is None):
            raise InvalidParameterError(
                "epsilon/delta", (epsilon, delta), "both or neither in the advanced form"
            )
        params = ZealousParams(
            m=m, tau=tau if tau is not None else 1, lam=lam, tau_prime=tau_prime,
            item_type=item_type, guarantee=guarantee, users=users, strategy=bounding,
            budget=_budget(epsilon, delta),
        )  # fmt: skip
    else:
        _need_budget(epsilon, delta)
        assert epsilon is not None and delta is not None
        params = ZealousParams.from_budget(
            epsilon=epsilon, delta=delta, m=m, item_type=item_type, guarantee=guarantee,
            tau=tau, users=users, strategy=bounding,
        )  # fmt: skip
    release, budget = _release_and_write(params, run_opts, what="zealous")
    res = summary(release, run_opts.out, provenance=run_opts.provenance, budget=budget)
    res["top"] = {"items": top(release, "items")}
    return res


def _kanon(run_opts: RunOptions, *, k: int | None) -> dict[str, Any]:
    if k is None:
        raise InvalidParameterError("k", None, "an integer k >= 1 (no default)")
    release, _ = _release_and_write(KAnonParams(k=k), run_opts, what="kanon")
    res = summary(release, run_opts.out, provenance=run_opts.provenance)
    res["top"] = {"queries": top(release, "queries")}
    return res


def _selection(selection: str, o: KorolovaOptions, run_opts: RunOptions) -> dict[str, Any]:
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
    params = select_params(
        selection=selection, epsilon=o.epsilon, delta=o.delta, d=o.d, d_c=o.d_c, split=o.split,
        clamp=o.clamp, max_users=o.max_users,
    )  # fmt: skip
    res = _selected(run_opts, params, o.max_users)
    if o.max_users is not None:
        res["max_users"] = o.max_users
    return res


# -- the commands (parsing only) --------------------------------------------------------------


@with_reader_options
def korolova_command(
    out: OutDirOpt,
    input: TableInputArg = None,
    epsilon: EpsOpt = None,
    delta: DeltaOpt = None,
    max_queries: Annotated[
        int | None, typer.Option("--max-queries", help="d: query events kept per user")
    ] = None,
    max_clicks: Annotated[
        int | None, typer.Option("--max-clicks", help="d_c: clicks kept per user")
    ] = None,
    urls: Annotated[
        str,
        typer.Option(
            "--urls",
            help="which URLs get click counts: none | serp (public SERP file) | private "
            "(selected by thresholding, own budget) | auto (none without --max-clicks, "
            "serp with --serp, else private)",
        ),
    ] = "auto",
    serp: Annotated[
        Path | None,
        typer.Option("--serp", help="public SERP file: query<TAB>rank<TAB>url per line"),
    ] = None,
    serp_depth: Annotated[
        int | None, typer.Option("--serp-depth", help="use the top N ranks of the SERP")
    ] = None,
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            help="ε weights: selection,query-counts[,url-selection][,click-counts]; default equal",
        ),
    ] = None,
    threshold_rule: Annotated[
        str,
        typer.Option(
            "--threshold-rule",
            help="exact (smallest integer K for the discrete mechanism) | paper (Table 4.1) "
            "| improved (§4.8)",
        ),
    ] = "exact",
    distinct_users: Annotated[
        bool,
        typer.Option("--distinct-users", help="count distinct users per query (≤1 per user)"),
    ] = False,
    bounding: BoundOpt = "first",
    clamp_negative: Annotated[
        bool, typer.Option("--clamp-negative", help="publish negative noisy counts as 0")
    ] = False,
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
    ] = None,
    engine: EngineOpt = "auto",
    spark_master: SparkMasterOpt = "local[*]",
    spark_remote: SparkRemoteOpt = None,
    spark_table: SparkTableOpt = None,
    spark_conf: SparkConfOpt = None,
    fingerprint: FingerprintOpt = "full",
    K: Annotated[float | None, typer.Option("--K", help="advanced: threshold K")] = None,
    b: Annotated[float | None, typer.Option("--b", help="advanced: selection noise b")] = None,
    b_q: Annotated[float | None, typer.Option("--bq", help="advanced: count noise b_q")] = None,
    b_c: Annotated[float | None, typer.Option("--bc", help="advanced: click noise b_c")] = None,
    url_K: Annotated[float | None, typer.Option("--url-K", help="advanced: URL threshold")] = None,
    url_b: Annotated[
        float | None, typer.Option("--url-b", help="advanced: URL selection noise")
    ] = None,
    max_users: MaxUsersOpt = None,
    seed: SeedOpt = None,
    output_format: OutFmtOpt = "tsv",
    overwrite: OverwriteOpt = False,
    provenance: ProvenanceOpt = None,
    budget: BudgetOpt = None,
    reader: ReaderOptions = READER_DEFAULT,
    json_out: JsonOpt = False,
) -> None:
    """Korolova's Release-Data (thesis ch.4): private queries, clicks and noisy counts."""

    def body() -> None:
        run_opts = RunOptions(input=input, reader=reader, out=out, out_fmt=output_format,
                              overwrite=overwrite, seed=seed, json_out=json_out, engine=engine,
                              spark_master=spark_master, fingerprint=fingerprint,
                              provenance=provenance, spark_table=spark_table,
                              spark_remote=spark_remote,
                              spark_conf=tuple(spark_conf or ()), budget=budget)  # fmt: skip
        opts = KorolovaOptions(
            epsilon=epsilon, delta=delta, d=max_queries, d_c=max_clicks, urls=urls,
            serp=serp, serp_depth=serp_depth, split=split, threshold_rule=threshold_rule,
            distinct=distinct_users, bounding=bounding, clamp=clamp_negative, K=K, b=b,
            b_q=b_q, b_c=b_c, url_K=url_K, url_b=url_b, max_users=max_users,
        )  # fmt: skip
        if selection is not None:
            res = _selection(selection, opts, run_opts)
        else:
            res = _korolova(opts, run_opts)
        emit(res, json_out, human)

    run(body)


@with_reader_options
def zealous_command(
    out: OutDirOpt,
    input: TableInputArg = None,
    epsilon: EpsOpt = None,
    delta: DeltaOpt = None,
    max_items: Annotated[
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
    max_users: MaxUsersOpt = None,
    tau: Annotated[
        int | None,
        typer.Option("--tau", help="first threshold τ (default: Prop. 4's ⌈2m/ε⌉; 1 for Thm 2)"),
    ] = None,
    lam: Annotated[float | None, typer.Option("--lambda", help="advanced: noise scale λ")] = None,
    tau_prime: Annotated[
        float | None, typer.Option("--tau-prime", help="advanced: second threshold τ'")
    ] = None,
    bounding: BoundOpt = "first",
    engine: EngineOpt = "auto",
    spark_master: SparkMasterOpt = "local[*]",
    spark_remote: SparkRemoteOpt = None,
    spark_table: SparkTableOpt = None,
    spark_conf: SparkConfOpt = None,
    fingerprint: FingerprintOpt = "full",
    seed: SeedOpt = None,
    output_format: OutFmtOpt = "tsv",
    overwrite: OverwriteOpt = False,
    provenance: ProvenanceOpt = None,
    budget: BudgetOpt = None,
    reader: ReaderOptions = READER_DEFAULT,
    json_out: JsonOpt = False,
) -> None:
    """ZEALOUS (Götz et al. §4): frequent keywords / queries / clicks / query pairs."""

    def body() -> None:
        run_opts = RunOptions(input=input, reader=reader, out=out, out_fmt=output_format,
                              overwrite=overwrite, seed=seed, json_out=json_out, engine=engine,
                              spark_master=spark_master, fingerprint=fingerprint,
                              provenance=provenance, spark_table=spark_table,
                              spark_remote=spark_remote,
                              spark_conf=tuple(spark_conf or ()), budget=budget)  # fmt: skip
        res = _zealous(
            run_opts, epsilon=epsilon, delta=delta, m=max_items, item_type=item_type,
            guarantee=guarantee, users=max_users, tau=tau, lam=lam, tau_prime=tau_prime,
            bounding=bounding,
        )  # fmt: skip
        emit(res, json_out, human)

    run(body)


@with_reader_options
def kanon_command(
    input: InputArg,
    out: OutDirOpt,
    k: Annotated[
        int | None, typer.Option("--k", help="minimum distinct users of a published query")
    ] = None,
    engine: EngineOpt = "auto",
    spark_master: SparkMasterOpt = "local[*]",
    fingerprint: FingerprintOpt = "full",
    seed: SeedOpt = None,
    output_format: OutFmtOpt = "tsv",
    overwrite: OverwriteOpt = False,
    provenance: ProvenanceOpt = None,
    reader: ReaderOptions = READER_DEFAULT,
    json_out: JsonOpt = False,
) -> None:
    """k-query anonymity (Adar; the NON-differentially-private baseline of Götz §7)."""

    def body() -> None:
        run_opts = RunOptions(input=input, reader=reader, out=out, out_fmt=output_format,
                              overwrite=overwrite, seed=seed, json_out=json_out, engine=engine,
                              spark_master=spark_master, fingerprint=fingerprint,
                              provenance=provenance)  # fmt: skip
        emit(_kanon(run_opts, k=k), json_out, human)

    run(body)


def register(app: typer.Typer) -> None:
    rel = command_group(app, "release", RELEASE_GROUP_HELP)
    rel.command("korolova")(korolova_command)
    rel.command("zealous")(zealous_command)
    rel.command("kanon")(kanon_command)
