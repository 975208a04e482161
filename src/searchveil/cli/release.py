"""``searchveil release korolova|zealous|kanon`` (the demo lives in ``cli/demo.py``).

Every release reads one log (the reader options of ``searchveil stats``), computes the release
in memory, and writes the output tables plus ``ledger.json`` atomically into ``--out``. There is
no default ε or δ: either give ``--epsilon``/``--delta`` (parameters are solved, and printed) or
give the mechanism's parameters directly (advanced form; the guarantee is computed, and checked
against ``--epsilon``/``--delta`` when those are also given).

Korolova's budget split (``--split``): relative weights of ε for the steps, in this order —
selection, query counts [, URL selection (private URLs only)] [, click counts] — default equal
weights over the steps present. With private URL selection, δ is split equally between the
two thresholding steps. The split actually used is printed and written to the ledger.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from searchveil.cli._common import (
    BadRowsOpt,
    DelimOpt,
    EncodingOpt,
    FormatOpt,
    GapOpt,
    InputArg,
    JsonOpt,
    NoNormOpt,
    OutDirOpt,
    OutFmtOpt,
    OverwriteOpt,
    QueryColOpt,
    RankColOpt,
    SeedOpt,
    SessionColOpt,
    TimeColOpt,
    UrlColOpt,
    UserColOpt,
    emit,
    out_console,
    progress,
    reader_kwargs,
    run,
)  # fmt: skip
from searchveil.errors import InvalidParameterError

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
        help="memory (validates every line) | polars (one ordered streaming pass when each "
        "user's rows are contiguous, as in AOL; else a hash plan; big logs) | spark; "
        "polars/spark read the AOL layout (TSV, .gz) or Parquet; --bounding first only",
    ),
]
SparkMasterOpt = Annotated[
    str, typer.Option("--spark-master", help="Spark master URL for --engine spark")
]
BoundOpt = Annotated[
    str, typer.Option("--bounding", help="which contributions a user keeps: first | random")
]


def _parse_split(split: str | None, parts: int) -> tuple[float, ...]:
    if split is None:
        return tuple([1.0] * parts)
    try:
        vals = tuple(float(x) for x in split.replace(":", ",").split(","))
    except ValueError:
        raise InvalidParameterError("split", split, "comma-separated positive numbers") from None
    if len(vals) != parts or any(not (v > 0 and math.isfinite(v)) for v in vals):
        raise InvalidParameterError(
            "split", split, f"{parts} comma-separated positive weights for the steps present"
        )
    return vals


def _read(input: Path, kw: dict[str, Any], json_out: bool) -> Any:
    from searchveil.io.readers import read_log

    with progress(not json_out) as step:
        done = step(f"reading {input.name}")
        log = read_log(input, **kw)
        done()
    return log


def _summary(release: Any, out: Path, split: Any = None) -> dict[str, Any]:
    led = release.ledger
    res: dict[str, Any] = {
        "out": str(out),
        "mechanism": led["mechanism"],
        "notion": led["notion"],
        "epsilon": led["epsilon"],
        "delta": led["delta"],
        "accounting": led.get("accounting"),
        "paper_accounting": led.get("paper_accounting"),
        "seeded": led["seeded"],
        "report": release.report,
        "outputs": {k: v.height for k, v in release.tables.items()},
    }
    if split is not None:
        res["split"] = split
    return res


def _top(release: Any, name: str, n: int = 10) -> list[dict[str, Any]]:
    df = release.tables.get(name)
    return [] if df is None else df.head(n).to_dicts()


def _human(r: dict[str, Any]) -> None:
    t = Table(title=f"{r['mechanism']} → {r['out']}", show_header=False)
    t.add_column("")
    t.add_column("", justify="right")
    if r["epsilon"] is not None:
        t.add_row("guarantee", r["notion"])
        t.add_row("ε (reported, exact accounting)", f"{r['epsilon']:.6g}")
        t.add_row("δ (reported, exact accounting)", f"{r['delta']:.4g}")
        pa = r.get("paper_accounting") or {}
        if pa:
            t.add_row("ε, δ (paper's formulas)", f"{pa['epsilon']:.6g}, {pa['delta']:.4g}")
    else:
        t.add_row("guarantee", r["notion"])
    if "split" in r:
        t.add_row("ε split (weights)", str(r["split"]))
    for k, v in r["report"].items():
        if k in ("parameters", "mechanism", "notion", "epsilon", "delta"):
            continue
        if k in ("paper_epsilon", "paper_delta"):
            continue
        if isinstance(v, int | float | str):
            t.add_row(k.replace("_", " "), f"{v:,}" if isinstance(v, int) else str(v))
    for k, v in r["report"].get("parameters", {}).items():
        if v is not None:
            t.add_row(f"param {k}", str(v))
    for name, rows in r["outputs"].items():
        t.add_row(f"output {name}", f"{rows:,} rows")
    if r["seeded"]:
        t.add_row("randomness", "SEEDED — reproducible experiment, NOT FOR RELEASE")
    out_console.print(t)
    for name, rows in r.get("top", {}).items():
        if rows:
            tt = Table(title=f"top of {name}")
            for c in rows[0]:
                tt.add_column(c)
            for row in rows:
                tt.add_row(*[str(v) for v in row.values()])
            out_console.print(tt)


def _release_with(
    engine: str,
    spark_master: str,
    algorithm: str,
    input: Path,
    kw: dict[str, Any],
    params: Any,
    *,
    rng: Any,
    json_out: bool,
    release_kwargs: dict[str, Any] | None = None,
) -> Any:
    """Read + release in memory, or bound on an engine and release the reduced log."""
    from searchveil.engines.plans import ENGINES, run_release
    from searchveil.release import release_kanon, release_korolova, release_zealous
    from searchveil.validate import check_choice

    check_choice("engine", engine, ENGINES)
    if engine == "memory":
        log = _read(input, kw, json_out)
        fn: dict[str, Any] = {
            "korolova": release_korolova,
            "zealous": release_zealous,
            "kanon": release_kanon,
        }
        with progress(not json_out) as step:
            done = step(algorithm)
            rel = fn[algorithm](log, params, rng=rng, **(release_kwargs or {}))
            done()
        return rel
    defaults = reader_kwargs()
    for key in ("columns", "delimiter", "encoding", "on_bad_rows", "session_gap_minutes"):
        if kw.get(key) != defaults.get(key):
            raise InvalidParameterError(
                key.replace("_", "-"), kw.get(key), f"the default with --engine {engine}"
            )
    if kw.get("fmt") not in ("auto", "aol", "parquet"):
        raise InvalidParameterError(
            "format", kw.get("fmt"), f"aol | parquet with --engine {engine}"
        )
    if not input.exists():
        from searchveil.errors import InputFormatError

        raise InputFormatError(str(input), "file not found")
    with progress(not json_out) as step:
        done = step(f"{algorithm} on the {engine} engine")
        rel = run_release(
            engine, algorithm, input, params, rng=rng, spark_master=spark_master,
            normalize=kw.get("normalize", True), release_kwargs=release_kwargs,
        )  # fmt: skip
        done()
    return rel


def _selected(
    input: Path,
    kw: dict[str, Any],
    *,
    out: Path,
    selection: str,
    epsilon: float | None,
    delta: float | None,
    d: int | None,
    split: str | None,
    clamp: bool,
    seed: int | None,
    out_fmt: str,
    overwrite: bool,
    json_out: bool,
) -> dict[str, Any]:
    from searchveil.io.ledger import ReleaseWriter
    from searchveil.release import write_release
    from searchveil.release.select import SelectParams, release_select
    from searchveil.rng import make_rng

    if epsilon is None:
        raise InvalidParameterError("epsilon", None, "a number > 0 (there is no default ε)")
    if delta is None:
        raise InvalidParameterError("delta", None, "a number in (0, 1) (no default δ)")
    if d is None:
        raise InvalidParameterError("max-queries", None, "an integer d >= 1 (no default)")
    w = _parse_split(split, 2)
    params = SelectParams(strategy=selection, epsilon=epsilon, delta=delta, d=d,
                          split=(w[0], w[1]), clamp_negative=clamp)  # fmt: skip
    ReleaseWriter(out, fmt=out_fmt, overwrite=overwrite)  # fail early if --out exists
    log = _read(input, kw, json_out)
    with progress(not json_out) as step:
        done = step(f"selection ({selection}) and counts")
        release = release_select(log, params, rng=make_rng(seed))
        done()
    write_release(release, out, fmt=out_fmt, overwrite=overwrite)
    res = _summary(release, out, list(w))
    res["top"] = {"queries": _top(release, "queries")}
    return res


def _korolova(
    input: Path,
    kw: dict[str, Any],
    *,
    out: Path,
    epsilon: float | None,
    delta: float | None,
    d: int | None,
    d_c: int | None,
    urls: str,
    serp: Path | None,
    serp_depth: int | None,
    split: str | None,
    threshold_rule: str,
    distinct: bool,
    bounding: str,
    clamp: bool,
    K: float | None,
    b: float | None,
    b_q: float | None,
    b_c: float | None,
    url_K: float | None,
    url_b: float | None,
    seed: int | None,
    out_fmt: str,
    overwrite: bool,
    json_out: bool,
    engine: str = "memory",
    spark_master: str = "local[*]",
) -> dict[str, Any]:
    from searchveil.io.ledger import ReleaseWriter
    from searchveil.release.korolova import (
        KorolovaParams,
        read_serp,
        write_release,
    )
    from searchveil.rng import make_rng
    from searchveil.validate import check_choice, check_int

    if d is None:
        raise InvalidParameterError("max-queries", None, "an integer d >= 1 (no default)")
    check_int("max-queries", d, minimum=1)
    check_choice("urls", urls, ("auto", "none", "serp", "private"))
    if urls == "auto":
        urls = "none" if d_c is None else ("serp" if serp is not None else "private")
    if urls != "none" and d_c is None:
        raise InvalidParameterError("max-clicks", None, f"an integer d_c >= 1 with --urls {urls}")
    if urls == "serp" and serp is None:
        raise InvalidParameterError("serp", None, "a SERP file with --urls serp")
    if urls != "serp" and serp is not None:
        raise InvalidParameterError("serp", str(serp), "only with --urls serp")
    if urls == "none" and d_c is not None:
        raise InvalidParameterError("max-clicks", d_c, "unset with --urls none")
    advanced = any(v is not None for v in (K, b, b_q, b_c, url_K, url_b))
    split_used: tuple[float, ...] | None = None
    if advanced:
        if split is not None:
            raise InvalidParameterError("split", split, "unset when K, b, ... are given directly")
        if K is None or b is None or b_q is None:
            raise InvalidParameterError(
                "K/b/bq", (K, b, b_q), "all of --K, --b, --bq in the advanced form"
            )
        if (epsilon is None) != (delta is None):
            raise InvalidParameterError(
                "epsilon/delta", (epsilon, delta), "both or neither in the advanced form"
            )
        params = KorolovaParams(
            d=d, K=K, b=b, b_q=b_q, url_selection=urls, d_c=d_c, b_c=b_c, url_K=url_K,
            url_b=url_b, distinct=distinct, strategy=bounding, clamp_negative=clamp,
        )  # fmt: skip
    else:
        if epsilon is None:
            raise InvalidParameterError("epsilon", None, "a number > 0 (there is no default ε)")
        if delta is None:
            raise InvalidParameterError("delta", None, "a number in (0, 1) (no default δ)")
        parts = {"none": 2, "serp": 3, "private": 4}[urls]
        split_used = _parse_split(split, parts)
        params = KorolovaParams.from_budget(
            epsilon=epsilon, delta=delta, d=d, url_selection=urls, d_c=d_c, split=split_used,
            threshold_rule=threshold_rule, distinct=distinct, strategy=bounding,
            clamp_negative=clamp,
        )  # fmt: skip
    budget = (epsilon, delta) if epsilon is not None and delta is not None else None
    if budget is not None:
        pr = params.privacy("exact")
        if pr["epsilon"] > budget[0] * (1 + 1e-9) or pr["delta"] > budget[1] * (1 + 1e-9):
            from searchveil.errors import BudgetExceededError

            raise BudgetExceededError(
                "release korolova (ε)" if pr["epsilon"] > budget[0] * (1 + 1e-9) else "(δ)",
                pr["epsilon"] if pr["epsilon"] > budget[0] * (1 + 1e-9) else pr["delta"],
                budget[0] if pr["epsilon"] > budget[0] * (1 + 1e-9) else budget[1],
            )
    serp_df = (
        read_serp(serp, normalize=kw.get("normalize", True), depth=serp_depth) if serp else None
    )
    ReleaseWriter(out, fmt=out_fmt, overwrite=overwrite)  # fail early if --out exists
    rng = make_rng(seed)
    release = _release_with(
        engine, spark_master, "korolova", input, kw, params, rng=rng, json_out=json_out,
        release_kwargs={"serp": serp_df, "budget": budget},
    )  # fmt: skip
    if split_used is not None:
        release.ledger["parameters"]["epsilon_split_weights"] = list(split_used)
        release.ledger["parameters"]["threshold_rule"] = threshold_rule
    if serp is not None:
        import hashlib

        release.ledger["public_inputs"]["serp"] = {
            "path": str(serp),
            "sha256": hashlib.sha256(serp.read_bytes()).hexdigest(),
            "depth": serp_depth,
        }
    write_release(release, out, fmt=out_fmt, overwrite=overwrite)
    res = _summary(release, out, list(split_used) if split_used else None)
    res["top"] = {"queries": _top(release, "queries"), "clicks": _top(release, "clicks")}
    return res


def register(app: typer.Typer) -> None:
    rel = typer.Typer(
        help="Private releases: korolova (query-click graph), zealous, kanon (baseline).",
        no_args_is_help=True,
    )
    app.add_typer(rel, name="release")

    @rel.command("korolova")
    def korolova(
        input: InputArg,
        out: OutDirOpt,
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
                help="ε weights: selection,query-counts[,url-selection][,click-counts]; "
                "default equal",
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
                help="query selection on each user's first d DISTINCT queries: laplace | "
                "gaussian | policy-gaussian (docs/selection-strategies.md); queries only, "
                "--split = selection,counts. Unset: the thesis' Select-Queries",
            ),
        ] = None,
        engine: EngineOpt = "memory",
        spark_master: SparkMasterOpt = "local[*]",
        K: Annotated[float | None, typer.Option("--K", help="advanced: threshold K")] = None,
        b: Annotated[float | None, typer.Option("--b", help="advanced: selection noise b")] = None,
        b_q: Annotated[float | None, typer.Option("--bq", help="advanced: count noise b_q")] = None,
        b_c: Annotated[float | None, typer.Option("--bc", help="advanced: click noise b_c")] = None,
        url_K: Annotated[
            float | None, typer.Option("--url-K", help="advanced: URL threshold")
        ] = None,
        url_b: Annotated[
            float | None, typer.Option("--url-b", help="advanced: URL selection noise")
        ] = None,
        seed: SeedOpt = None,
        output_format: OutFmtOpt = "tsv",
        overwrite: OverwriteOpt = False,
        fmt: FormatOpt = "auto",
        user_col: UserColOpt = None,
        query_col: QueryColOpt = None,
        time_col: TimeColOpt = None,
        url_col: UrlColOpt = None,
        rank_col: RankColOpt = None,
        session_col: SessionColOpt = None,
        delimiter: DelimOpt = None,
        encoding: EncodingOpt = "utf-8",
        on_bad_rows: BadRowsOpt = "error",
        no_normalize: NoNormOpt = False,
        session_gap: GapOpt = 30.0,
        json_out: JsonOpt = False,
    ) -> None:
        """Korolova's Release-Data (thesis ch.4): private queries and clicks with noisy counts."""

        def body() -> None:
            kw = reader_kwargs(
                fmt, user_col, query_col, time_col, url_col, rank_col, session_col,
                delimiter, encoding, on_bad_rows, no_normalize, session_gap,
            )  # fmt: skip
            if selection is not None:
                others = {"--max-clicks": max_clicks, "--serp": serp, "--K": K, "--b": b,
                          "--bq": b_q, "--bc": b_c, "--url-K": url_K, "--url-b": url_b}  # fmt: skip
                for name, v in others.items():
                    if v is not None:
                        raise InvalidParameterError(name, v, "unset with --selection")
                if urls not in ("auto", "none"):
                    raise InvalidParameterError("urls", urls, "none with --selection")
                res = _selected(
                    input, kw, out=out, selection=selection, epsilon=epsilon, delta=delta,
                    d=max_queries, split=split, clamp=clamp_negative, seed=seed,
                    out_fmt=output_format, overwrite=overwrite, json_out=json_out,
                )  # fmt: skip
                emit(res, json_out, _human)
                return
            res = _korolova(
                input, kw, out=out, epsilon=epsilon, delta=delta, d=max_queries,
                d_c=max_clicks, urls=urls, serp=serp, serp_depth=serp_depth, split=split,
                threshold_rule=threshold_rule, distinct=distinct_users, bounding=bounding,
                clamp=clamp_negative, K=K, b=b, b_q=b_q, b_c=b_c, url_K=url_K, url_b=url_b,
                seed=seed, out_fmt=output_format, overwrite=overwrite, json_out=json_out,
                engine=engine, spark_master=spark_master,
            )  # fmt: skip
            emit(res, json_out, _human)

        run(body)

    @rel.command("zealous")
    def zealous(
        input: InputArg,
        out: OutDirOpt,
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
        max_users: Annotated[
            int | None,
            typer.Option(
                "--max-users",
                help="U: a public upper bound on the number of users (never read from the data)",
            ),
        ] = None,
        tau: Annotated[
            int | None,
            typer.Option(
                "--tau", help="first threshold τ (default: Prop. 4's ⌈2m/ε⌉; 1 for Thm 2)"
            ),
        ] = None,
        lam: Annotated[
            float | None, typer.Option("--lambda", help="advanced: noise scale λ")
        ] = None,
        tau_prime: Annotated[
            float | None, typer.Option("--tau-prime", help="advanced: second threshold τ'")
        ] = None,
        bounding: BoundOpt = "first",
        engine: EngineOpt = "memory",
        spark_master: SparkMasterOpt = "local[*]",
        seed: SeedOpt = None,
        output_format: OutFmtOpt = "tsv",
        overwrite: OverwriteOpt = False,
        fmt: FormatOpt = "auto",
        user_col: UserColOpt = None,
        query_col: QueryColOpt = None,
        time_col: TimeColOpt = None,
        url_col: UrlColOpt = None,
        rank_col: RankColOpt = None,
        session_col: SessionColOpt = None,
        delimiter: DelimOpt = None,
        encoding: EncodingOpt = "utf-8",
        on_bad_rows: BadRowsOpt = "error",
        no_normalize: NoNormOpt = False,
        session_gap: GapOpt = 30.0,
        json_out: JsonOpt = False,
    ) -> None:
        """ZEALOUS (Götz et al. §4): frequent keywords / queries / clicks / query pairs."""

        def body() -> None:
            from searchveil.errors import BudgetExceededError
            from searchveil.io.ledger import ReleaseWriter
            from searchveil.release import ZealousParams, write_release
            from searchveil.rng import make_rng

            if max_items is None:
                raise InvalidParameterError("max-items", None, "an integer m >= 1 (no default)")
            kw = reader_kwargs(
                fmt, user_col, query_col, time_col, url_col, rank_col, session_col,
                delimiter, encoding, on_bad_rows, no_normalize, session_gap,
            )  # fmt: skip
            if lam is not None or tau_prime is not None:
                if lam is None or tau_prime is None:
                    raise InvalidParameterError(
                        "lambda/tau-prime", (lam, tau_prime), "both in the advanced form"
                    )
                if (epsilon is None) != (delta is None):
                    raise InvalidParameterError(
                        "epsilon/delta", (epsilon, delta), "both or neither in the advanced form"
                    )
                t = tau if tau is not None else 1
                params = ZealousParams(
                    m=max_items, tau=t, lam=lam, tau_prime=tau_prime, item_type=item_type,
                    guarantee=guarantee, users=max_users, strategy=bounding,
                )  # fmt: skip
            else:
                if epsilon is None:
                    raise InvalidParameterError("epsilon", None, "a number > 0 (no default ε)")
                if delta is None:
                    raise InvalidParameterError("delta", None, "a number in (0, 1) (no default δ)")
                params = ZealousParams.from_budget(
                    epsilon=epsilon, delta=delta, m=max_items, item_type=item_type,
                    guarantee=guarantee, tau=tau, users=max_users, strategy=bounding,
                )  # fmt: skip
            budget = (epsilon, delta) if epsilon is not None and delta is not None else None
            pr = params.privacy("exact")
            if budget is not None and pr["epsilon"] > budget[0] * (1 + 1e-9):
                raise BudgetExceededError("release zealous (ε)", pr["epsilon"], budget[0])
            if budget is not None and pr["delta"] > budget[1] * (1 + 1e-9):
                raise BudgetExceededError("release zealous (δ)", pr["delta"], budget[1])
            ReleaseWriter(out, fmt=output_format, overwrite=overwrite)
            release = _release_with(
                engine, spark_master, "zealous", input, kw, params, rng=make_rng(seed),
                json_out=json_out, release_kwargs={"budget": budget},
            )  # fmt: skip
            write_release(release, out, fmt=output_format, overwrite=overwrite)
            res = _summary(release, out)
            res["top"] = {"items": _top(release, "items")}
            emit(res, json_out, _human)

        run(body)

    @rel.command("kanon")
    def kanon(
        input: InputArg,
        out: OutDirOpt,
        k: Annotated[
            int | None, typer.Option("--k", help="minimum distinct users of a published query")
        ] = None,
        engine: EngineOpt = "memory",
        spark_master: SparkMasterOpt = "local[*]",
        seed: SeedOpt = None,
        output_format: OutFmtOpt = "tsv",
        overwrite: OverwriteOpt = False,
        fmt: FormatOpt = "auto",
        user_col: UserColOpt = None,
        query_col: QueryColOpt = None,
        time_col: TimeColOpt = None,
        url_col: UrlColOpt = None,
        rank_col: RankColOpt = None,
        session_col: SessionColOpt = None,
        delimiter: DelimOpt = None,
        encoding: EncodingOpt = "utf-8",
        on_bad_rows: BadRowsOpt = "error",
        no_normalize: NoNormOpt = False,
        session_gap: GapOpt = 30.0,
        json_out: JsonOpt = False,
    ) -> None:
        """k-query anonymity (Adar; the NON-differentially-private baseline of Götz §7)."""

        def body() -> None:
            from searchveil.io.ledger import ReleaseWriter
            from searchveil.release import KAnonParams, write_release
            from searchveil.rng import make_rng

            if k is None:
                raise InvalidParameterError("k", None, "an integer k >= 1 (no default)")
            params = KAnonParams(k=k)
            kw = reader_kwargs(
                fmt, user_col, query_col, time_col, url_col, rank_col, session_col,
                delimiter, encoding, on_bad_rows, no_normalize, session_gap,
            )  # fmt: skip
            ReleaseWriter(out, fmt=output_format, overwrite=overwrite)
            release = _release_with(
                engine, spark_master, "kanon", input, kw, params, rng=make_rng(seed),
                json_out=json_out,
            )  # fmt: skip
            write_release(release, out, fmt=output_format, overwrite=overwrite)
            res = _summary(release, out)
            res["top"] = {"queries": _top(release, "queries")}
            emit(res, json_out, _human)

        run(body)
