"""``searchveil demo``: the README's main job.

1. A query-click release with the best selection strategy measured (``--selection``,
   default probe-reweight-2r: docs/selection-strategies.md; e^ε = 10, d from public
   information only — on the bundled sample a declared d = 21 (the thesis' d; the default
   rule's reference is that very sample, docs/privacy/selection.md), on your own LOG the
   strategy's data-independent default, d_c = 1 click, queries and (query, url) pairs selected
   privately) on the bundled real sample (215 AOL users), with the utility report of ``searchveil
   evaluate``. ``--selection korolova`` runs the thesis' Release-Data instead (d = d_c = 1,
   privately selected URLs).
2. A synthetic log of ``--synthetic-users`` users (default 500,000, thesis-like) calibrated on
   that sample (:func:`searchveil.synth.synthetic_events`, integer query keys), on which the
   demo shows the thesis' central result (Korolova, PhD thesis 2012, §4.6.1.1, Fig. 4.2): the
   percent of distinct queries and of query volume released as a function of d, for
   Release-Data and every selection strategy (:mod:`searchveil.evaluate.dcurve`: exact
   expectations, or one simulated run for the ℓ2-weighted strategies), as a plot in
   ``report.html`` and a table on the terminal; and runs one real release with the same
   strategy on it. The curve is a data-holder diagnostic computed on the synthetic log only:
   the releases never choose d from it (choosing d on the private log costs privacy).

δ that protects everyone (issue 12, ``docs/privacy/delta.md``). Each run's δ is solved so that
the expected number of queries held by a single user that get published is ≤
``--max-single-user-items`` (default 0.01), from a *declared* population rule, never from the
private log (issue 21): an (ε, δ)-DP release publishes a query only one user holds with
probability ≤ δ, and only a query the user kept among their first d can be published at all,
so at most N ≤ U·d such queries are candidates; δ = target / (U·d) with d = 1, rounded down to
a power of ten and never above 1/(10·U). The selection strategies keep more queries per user
(their default d), but their δ bounds the chance that *any* of one user's single-user queries is
published (1 − (1 − p)^k over the user's k items), so U users, not U·d items, is the count that
matters there; the report shows the expected number each release publishes, computed exactly.
U is a public bound: ``--max-users`` (required with a LOG of your own), the bundled sample's
published size (215 users), or the synthetic population's size (``--synthetic-users``, a
parameter). The count of the log's single-user queries is still computed — for the data holder's
report (private), not for choosing δ. A fixed δ such as the thesis' 10⁻⁵ or 10⁻⁴ (≈ 3.5
single-user queries published per run on 50,000 synthetic users)
does not protect everyone.

Why few queries pass on the real sample: a query is published only if about K users posed it
(K ≈ 20 at δ = 10⁻⁶, d = 1), and with 215 users almost no query is that common.

Everything goes into ``--out`` (default ``searchveil-demo``), built in a temporary sibling
directory and renamed into place at the end, so a failed or interrupted demo leaves nothing.
Each release directory (``real/``, ``synthetic/``) holds only what is published; its private
provenance record (``real.private.json``, ...) sits beside it, and the utility report reads the
release's private figures from there.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import polars as pl
import typer
from rich.table import Table

from searchveil.cli._common import (
    READER_DEFAULT,
    JsonOpt,
    OverwriteOpt,
    SeedOpt,
    emit,
    out_console,
    private_block,
    progress,
    reader_cli_args,
    run,
    with_reader_options,
)  # fmt: skip
from searchveil.errors import InvalidParameterError, OutputExistsError
from searchveil.evaluate import evaluate_loaded, load_release
from searchveil.evaluate.dcurve import ALL_MECHANISMS, SIMULATED, dcurve_from_events
from searchveil.io.ledger import is_provenance_record, read_provenance, write_private_json
from searchveil.io.paths import (
    Staging,
    check_private_path,
    enclosing_release,
    input_list,
    is_within,
    release_problems,
)
from searchveil.io.readers import ReaderOptions, read_log
from searchveil.mechanisms.rounds import user_item_pool
from searchveil.mechanisms.selection import ALIASES, REGISTRY, SelectionStrategy, default_d
from searchveil.model import SearchLog, items
from searchveil.params import SINGLE_USER_TARGET, solve_delta_single_user
from searchveil.release.counts import BoundedCounts
from searchveil.release.korolova import (
    KorolovaParams,
    release_korolova,
    release_korolova_counts,
    write_release,
)
from searchveil.release.selection import (
    SelectionParams,
    UserItemPools,
    release_selection,
    release_selection_pools,
)
from searchveil.report.demo import demo_report
from searchveil.report.evaluation import evaluation_report
from searchveil.report.html import REPORT_MARK, write_report
from searchveil.rng import RandomSource, make_rng
from searchveil.synth import fit, synthetic_events
from searchveil.validate import check_choice, check_int, check_positive

DEMO_EPSILON = math.log(10.0)
#: the demo's strategy: the best measured at its default d (docs/selection-strategies.md)
DEMO_SELECTION = "probe-reweight-2r"
DEMO_SELECTIONS = ("korolova", *(s.value for s in SelectionStrategy))
DEMO_D = 1
DEMO_DC = 1
DEMO_SPLIT = (1.0, 1.0, 1.0, 1.0)
DEMO_DS = (1, 2, 3, 5, 10, 20, 40)
#: the simulated curves (one run of the ℓ2-weighted strategies per point on 19M events) at
#: fewer d: ~0.7 s a point for the rounds, ~3.5 s for policy Gaussian's sequential pass
DEMO_SIM_DS = (1, 3, 10, 20, 40)
DEMO_POLICY_DS = (1, 10, 40)
DEMO_SYNTHETIC_USERS = 500_000
SAMPLE = "aol-gayo-avello-215-users.tsv"
#: the bundled sample's published size: the public bound U the demo declares for it
SAMPLE_USERS = 215
#: d of the selection strategies on the bundled sample, declared: the thesis' d for a week of
#: another engine's log (Korolova 2012, §4.6.1.2; Fig. 4.2 peaks near d = 20) — public, and not
#: computed from the sample, whose own distinct-queries histogram is the default-d reference
DEMO_SAMPLE_D = 21
DEMO_SAMPLE_D_RULE = (
    "declared by the demo: d = 21, the thesis' d (Korolova 2012 §4.6.1.2), because the default "
    "rule's reference sample is the very sample released"
)
#: the exact figures of the logs in each run of the demo's --json (labelled private)
DEMO_PRIVATE_FIGURES = ("users", "distinct_queries", "released_query_volume",
                        "released_volume_pct", "single_user", "single_user_published")  # fmt: skip
#: what a demo directory may hold, so --overwrite replaces only a directory the demo wrote
DEMO_ENTRIES = {"real": "release", "synthetic": "release", "real.private.json": "record",
                "synthetic.private.json": "record", "real-report.html": "report",
                "report.html": "report"}  # fmt: skip


def _delta_for(users: int, target: float) -> dict[str, Any]:
    """δ from the declared population rule N ≤ U·d (never from the private log's own count of
    single-user queries): see the module docstring."""
    sol = solve_delta_single_user(target=target, users=users, items_per_user=DEMO_D)
    sol["users_bound"] = users
    return sol


def _select_params(
    selection: str, delta: float, d_c: int | None, max_users: int, *, sample: bool = False
) -> SelectionParams:
    """The demo's selection release: the whole budget split equally between the steps, d from
    public information only (never tuned on the log; U the declared bound). The strategy's
    default rule (:func:`default_d`) reads the public reference sample — the bundled sample
    itself — so releasing that sample (``sample``) takes :data:`DEMO_SAMPLE_D` instead: d
    chosen on the data released would make the release's parameters a function of its input
    (issue 30); Laplace's rule (d = 1) reads nothing."""
    parts = 2 if d_c is None else 4
    probe = SelectionParams(strategy=selection, epsilon=DEMO_EPSILON, delta=delta, d=1,
                         split=tuple([1.0] * parts), d_c=d_c)  # fmt: skip
    d, rule = default_d(selection, epsilon=probe.eps_selection, delta=probe.delta_selection,
                        max_users=max_users)  # fmt: skip
    if sample and selection != "laplace":
        d, rule = DEMO_SAMPLE_D, DEMO_SAMPLE_D_RULE
    return SelectionParams(strategy=selection, epsilon=DEMO_EPSILON, delta=delta, d=d,
                        split=tuple([1.0] * parts), d_c=d_c, d_rule=rule)  # fmt: skip


def _threshold(rel: Any, selection: str) -> tuple[float, float]:
    """(threshold, noise) of a release's selection step, for the summary table."""
    r = rel.report
    if selection == "korolova":
        return float(r["parameters"]["K"]), float(r["parameters"]["b"])
    sel = r["selection"]
    if "rounds" in sel:
        last = sel["rounds"][-1]
        return float(last["threshold_units"]), float(last["sigma"])
    return float(sel.get("K", sel.get("tau", sel.get("rho", math.nan)))), float(
        sel.get("b", sel.get("sigma", math.nan))
    )


def real_release(
    log: SearchLog, *, target: float, rng: RandomSource, max_users: int, selection: str,
    sample: bool, step: Any = None,
) -> tuple[Any, dict[str, Any], int]:  # fmt: skip
    """The demo's release step on the real log: (release, δ solution, d). ``sample``: the log
    is the bundled sample (d then comes from :data:`DEMO_SAMPLE_D`, see
    :func:`_select_params`)."""
    step = step or (lambda _desc: lambda: None)
    sol = _delta_for(max_users, target)
    if selection == "korolova":
        params = KorolovaParams.from_budget(
            epsilon=DEMO_EPSILON, delta=sol["delta"], d=DEMO_D, url_selection="private",
            d_c=DEMO_DC, split=DEMO_SPLIT, threshold_rule="exact",
        )  # fmt: skip
        done = step("Release-Data on the real sample")
        rel = release_korolova(log, params, rng=rng, max_users=max_users)
        done()
        return rel, sol, DEMO_D
    sp = _select_params(selection, sol["delta"], DEMO_DC, max_users, sample=sample)
    done = step(f"{selection} selection (d = {sp.d}, d_c = {DEMO_DC}) on the real sample")
    rel = release_selection(log, sp, rng=rng, max_users=max_users)
    done()
    return rel, sol, sp.d


def _real_run(
    log: SearchLog, out: Path, *, target: float, rng: RandomSource, step: Any, final: Path,
    max_users: int, selection: str, sample: bool,
) -> dict[str, Any]:  # fmt: skip
    """The query-click release on the real sample, its utility report."""
    q = items(log, "queries")
    rel, sol, sel_d = real_release(log, target=target, rng=rng, max_users=max_users,
                                   selection=selection, sample=sample, step=step)  # fmt: skip
    write_release(rel, out / "real")
    done = step("evaluating the real release")
    result = evaluate_loaded(log, load_release(out / "real"), substitution_queries=300)
    # the release's private figures come from its provenance record, as for `evaluate`
    prov = read_provenance(out / "real")
    result["release"]["single_user"] = prov["report"]["single_user"]
    # the report names the release where it will live, not the temporary build directory
    result = json.loads(json.dumps(result, default=str).replace(str(out), str(final)))
    write_report(out / "real-report.html", evaluation_report(result))
    done()
    r = rel.report
    top = rel.tables["queries"].sort("noisy_count", descending=True).head(8).to_dicts()
    published = rel.tables["queries"].get_column("query")
    holders = q.group_by("item").agg(pl.col("user").n_unique().alias("h"))
    return {
        "release": str(out / "real"),
        "report": str(out / "real-report.html"),
        "users": r["users"],
        "distinct_queries": int(q.get_column("item").n_unique()),
        "queries_released": r["queries_released"],
        "released_query_volume": int(
            q.join(published.to_frame("item"), on="item", how="semi").height
        ),
        "pairs_released": r.get("pairs_released", 0),
        "epsilon": rel.ledger["epsilon"],
        "delta": rel.ledger["delta"],
        "delta_solved": sol,
        "selection": selection,
        "d": sel_d,
        "threshold": _threshold(rel, selection),
        "single_user": r["single_user"],
        "single_user_published": int(
            holders.filter(pl.col("item").is_in(published.implode()) & (pl.col("h") == 1)).height
        ),
        "top_queries": top,
    }


def _synthetic_run(
    log: SearchLog, out: Path, *, users: int, target: float, rng: RandomSource, step: Any,
    ds: tuple[int, ...], selection: str,
) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """The d-curve of a synthetic log of ``users`` users (every strategy), and one release with
    ``selection`` on it (query keys; the strategy's default d; no URLs)."""
    done = step(f"generating a synthetic log of {users:,} users (query keys)")
    ev = synthetic_events(fit(log, rng=rng), users=users, rng=rng, spell=False,
                          workers=max(1, min(os.cpu_count() or 1, 2)))  # fmt: skip
    done()
    done = step("counting the synthetic log's queries")
    holders = ev.group_by("query").agg(pl.col("user").n_unique().alias("h"))
    single = holders.filter(pl.col("h") == 1).select("query")
    n_single = single.height
    sol = _delta_for(users, target)  # U = the synthetic population's size (a parameter)
    done()
    done = step(f"d-curves (d = {', '.join(map(str, ds))}; Release-Data and every strategy)")
    curve = dcurve_from_events(ev, epsilon=DEMO_EPSILON, delta=sol["delta"], ds=ds,
                               mechanisms=ALL_MECHANISMS, simulation=rng.numpy_generator(),
                               ds_for={m: DEMO_SIM_DS for m in SIMULATED}
                               | {"policy-gaussian": DEMO_POLICY_DS})  # fmt: skip
    done()
    synthetic_input = {"file": f"synthetic-{users}-users (in memory, query keys)",
                       "sha256": None, "rows": ev.height, "users": users,
                       "synthetic": True}  # fmt: skip
    if selection == "korolova":
        done = step(f"Release-Data (d = {DEMO_D}) on the synthetic log")
        kept = ev.filter(pl.int_range(pl.len()).over("user") < DEMO_D)
        counts = kept.group_by("query").agg(pl.len().cast(pl.Int64).alias("count"))
        bounded = BoundedCounts(
            counts={"queries": counts},
            figures={"users": users, "query_events": ev.height,
                     "query_events_after_bounding": kept.height},
            input=synthetic_input,
        )  # fmt: skip
        params = KorolovaParams.from_budget(
            epsilon=DEMO_EPSILON, delta=sol["delta"], d=DEMO_D, url_selection="none",
            split=(1.0, 1.0), threshold_rule="exact",
        )  # fmt: skip
        rel = release_korolova_counts(
            bounded, params, rng=rng,
            single_user=(counts.join(single, on="query", how="semi"), n_single),
            max_users=users,
        )  # fmt: skip
        sel_d = DEMO_D
    else:
        sp = _select_params(selection, sol["delta"], None, users)
        sel_d = sp.d
        done = step(f"{selection} selection (d = {sp.d}) on the synthetic log")
        pools = UserItemPools(
            queries=user_item_pool(ev.rename({"query": "item"}), pool=sp.pool),
            clicks=None,
            figures={"users": users, "query_events": ev.height},
            input=synthetic_input,
            events=ev.select("user", pl.col("query").alias("item")),
            single_items=single.rename({"query": "item"}),
        )
        rel = release_selection_pools(pools, sp, rng=rng, max_users=users)
    write_release(rel, out / "synthetic")
    done()
    published = rel.tables["queries"].select("query")
    r = rel.report
    vol = int(ev.join(published, on="query", how="semi").height)
    run_ = {
        "release": str(out / "synthetic"),
        "users": users,
        "distinct_queries": int(holders.height),
        "queries_released": r["queries_released"],
        "released_query_volume": vol,
        "released_volume_pct": 100.0 * vol / max(1, ev.height),
        "epsilon": rel.ledger["epsilon"],
        "delta": rel.ledger["delta"],
        "delta_solved": sol,
        "selection": selection,
        "d": sel_d,
        "threshold": _threshold(rel, selection),
        "single_user": r["single_user"],
        "single_user_published": int(published.join(single, on="query", how="semi").height),
        "top_queries": [],
    }
    return run_, curve


CURVE_SHORT = {"korolova": "RD"} | {c.FACTS.name: c.FACTS.short_label for c in REGISTRY}


def _curve_table(curve: dict[str, Any]) -> Table:
    """% of the query volume released against d, one row per strategy: RD = Release-Data,
    then each strategy's short label (``FACTS.short_label``; the ℓ2-weighted ones are one
    simulated run each, the others expected values)."""
    mechs = [m for m in CURVE_SHORT if any(r["mechanism"] == m for r in curve["table"])]
    ds = sorted({r["d"] for r in curve["table"]})
    t = Table(
        title=f"% of the query volume released vs d (thesis Fig. 4.2): {curve['users']:,} "
        f"synthetic users, e^ε = 10, δ = {curve['delta']:.3g}; "
        + ", ".join(f"{CURVE_SHORT[m]} = {m}" for m in mechs)
        + ". A data-holder diagnostic on the synthetic log: releases never choose d from it",
        title_justify="left",
    )
    t.add_column("d", no_wrap=True)
    for d in ds:
        t.add_column(str(d), justify="right", no_wrap=True)
    by: dict[tuple[str, int], dict[str, Any]] = {(r["mechanism"], r["d"]): r
                                                 for r in curve["table"]}  # fmt: skip
    for m in mechs:
        cells = [f"{by[(m, d)]['volume_pct']:.1f}" if (m, d) in by else "–" for d in ds]
        t.add_row(f"{CURVE_SHORT[m]} %vol", *cells)
    return t


def _human(r: dict[str, Any]) -> None:
    sel = r["parameters"]["selection"]
    what = (
        f"Korolova Release-Data, e^ε = 10, d = {DEMO_D} query"
        if sel == "korolova"
        else f"{sel} selection, e^ε = 10, d = {r['parameters']['d']} (public: declared on the "
        "sample, the strategy's default on a LOG) "
        "queries"
    )
    out_console.print(
        f"[bold]searchveil demo[/]: {what} (and d_c = {DEMO_DC} click on the real sample) per "
        "user; δ solved from the declared population bound U so that the expected number of "
        f"single-user queries published is ≤ {r['parameters']['max_single_user_items']:g}"
    )
    t = Table(show_header=True)
    t.add_column("")
    for name in r["runs"]:
        t.add_column(name, justify="right")
    rows = [
        ("users (private)", "users", "{:,}"),
        ("distinct queries in the log (private)", "distinct_queries", "{:,}"),
        ("queries released", "queries_released", "{:,}"),
        ("released query volume (private)", "released_query_volume", "{:,}"),
        ("threshold / noise (last round; user units)", None, ""),
        ("ε (exact accounting)", "epsilon", "{:.4f}"),
        ("δ (solved; exact accounting)", "delta", "{:.3g}"),
        ("single-user queries in the log (private)", None, "n"),
        ("… expected published (private)", None, "e"),
        ("… actually published (private)", "single_user_published", "{:,}"),
    ]
    for label, key, f in rows:
        if key is None and f == "n":
            vals = [f"{x['single_user']['single_user_items']:,}" for x in r["runs"].values()]
        elif key is None and f == "e":
            vals = [f"{x['single_user']['expected_single_user_published']:.2g}"
                    for x in r["runs"].values()]  # fmt: skip
        elif key is None:
            vals = [f"{x['threshold'][0]:.4g} / {x['threshold'][1]:.3g}"
                    for x in r["runs"].values()]  # fmt: skip
        else:
            vals = [f.format(x[key]) for x in r["runs"].values()]
        t.add_row(label, *vals)
    out_console.print(t)
    for name, x in r["runs"].items():
        if x["top_queries"]:
            tops = ", ".join(f"{q['query']} ({q['noisy_count']})" for q in x["top_queries"])
            out_console.print(f"top released queries ({name}): {tops}")
    if r.get("dcurve"):
        out_console.print(_curve_table(r["dcurve"]))
        b = r["dcurve"]["best"]
        out_console.print(
            "best d on the synthetic log (for reference, never used to choose d): "
            + "; ".join(
                f"{m} d = {x['d']} ({x['volume_pct']:.1f}% of the query volume, "
                f"{x['distinct_pct']:.3f}% of distinct queries)"
                for m, x in b.items()
            )
        )
    out_console.print(r["note"])
    if r["seeded"]:
        out_console.print("randomness: SEEDED — reproducible experiment, NOT FOR RELEASE")
    for name, x in r["runs"].items():
        out_console.print(f"{name}: release [bold]{x['release']}[/] (ledger.json)")
    out_console.print(f"real: utility report [bold]{r['runs']['real']['report']}[/]")
    out_console.print(f"demo report (δ, single-user items, d-curve): [bold]{r['report']}[/]")


@with_reader_options
def demo(
    log: Annotated[
        Path | None,
        typer.Argument(
            help="a search log to run the demo on (default: the bundled 215-user AOL "
            "sample); read with the reader options below, as every command",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ] = None,
    out: Annotated[Path, typer.Option("--out", help="directory to create")] = Path(
        "searchveil-demo"
    ),
    synthetic_users: Annotated[
        int,
        typer.Option(
            "--synthetic-users",
            help="users of the synthetic log calibrated on the sample (0 = skip)",
        ),
    ] = DEMO_SYNTHETIC_USERS,
    max_single_user_items: Annotated[
        float,
        typer.Option(
            "--max-single-user-items",
            help="δ is solved so that the expected single-user queries published ≤ this",
        ),
    ] = SINGLE_USER_TARGET,
    max_users: Annotated[
        int | None,
        typer.Option(
            "--max-users",
            help="U: a public upper bound on LOG's users you DECLARE (required with a LOG; "
            f"default for the bundled sample: its published size, {SAMPLE_USERS}); δ is "
            "solved from it, never from the log",
        ),
    ] = None,
    selection: Annotated[
        str,
        typer.Option(
            "--selection",
            help=f"the releases' strategy: {DEMO_SELECTION} (default: the best measured, "
            "docs/selection-strategies.md) | "
            + " | ".join(s for s in SelectionStrategy if s != DEMO_SELECTION)
            + " | korolova (the thesis' Release-Data, d = 1)",
        ),
    ] = DEMO_SELECTION,
    overwrite: OverwriteOpt = False,
    seed: SeedOpt = None,
    reader: ReaderOptions = READER_DEFAULT,
    json_out: JsonOpt = False,
) -> None:
    """The main job: a private release of the AOL sample, and a synthetic d-curve.

    A Korolova release of the bundled 215-user AOL sample (or of LOG) with its utility report,
    and the d-curve (thesis Fig. 4.2) of a synthetic log of 500,000 users calibrated on it,
    with δ chosen so that no query held by a single user is expected to be published."""

    def body() -> None:
        nonlocal selection
        if synthetic_users < 0:
            raise InvalidParameterError("--synthetic-users", synthetic_users, "an integer ≥ 0")
        selection = ALIASES.get(selection, selection)  # mad, mad2r: deprecated spellings
        check_choice("selection", selection, DEMO_SELECTIONS)
        target = check_positive("max-single-user-items", max_single_user_items)
        if max_users is None and log is not None:
            raise InvalidParameterError(
                "--max-users",
                None,
                "a public upper bound U on the users of LOG (δ is solved from it: "
                "the demo never chooses δ from the private log)",
            )
        u_bound = check_int("--max-users", SAMPLE_USERS if max_users is None else max_users,
                            minimum=1)  # fmt: skip
        _check_out(out, overwrite=overwrite, log=log)
        rng = make_rng(seed)
        final = out.resolve()
        stage = Staging(final, directory=True)
        tmp = stage.path
        curve: dict[str, Any] | None = None
        with stage:
            runs: dict[str, Any] = {}
            ref = resources.files("searchveil") / "data" / SAMPLE
            name = SAMPLE if log is None else str(log)
            with resources.as_file(ref) as bundled, progress(not json_out) as step:
                done = step(f"reading {name}")
                real = read_log(bundled, reader) if log is None else read_log(log, reader)
                done()
                runs["real"] = _real_run(real, tmp, target=target, rng=rng, step=step,
                                         final=final, max_users=u_bound,
                                         selection=selection, sample=log is None)  # fmt: skip
                if synthetic_users:
                    runs["synthetic"], curve = _synthetic_run(
                        real, tmp, users=synthetic_users, target=target, rng=rng, step=step,
                        ds=DEMO_DS, selection=selection,
                    )  # fmt: skip
            for x in runs.values():
                for k in ("release", "report"):
                    if k in x:
                        x[k] = str(final / Path(x[k]).name)
            res = _result(runs, curve, target=target, seeded=seed is not None,
                          final=final, synthetic_users=synthetic_users, sample=name,
                          reader=reader, selection=selection)  # fmt: skip
            write_report(tmp / "report.html", demo_report(res))
            for name in runs:  # the provenance records name the releases' final place
                _relocate_provenance(tmp / f"{name}.private.json", tmp, final)
            stage.commit()  # the old demo directory is removed only once this one is in place
        emit(res, json_out, _human)

    run(body)


def _relocate_provenance(path: Path, tmp: Path, final: Path) -> None:
    """Point a provenance record built in the temporary directory at the release's final
    directory (it stays owner-only)."""
    rec = json.loads(path.read_text(encoding="utf-8"))
    rel = rec.get("release") or {}
    if isinstance(rel.get("directory"), str):
        rel["directory"] = rel["directory"].replace(str(tmp), str(final))
    write_private_json(path, rec, option="provenance")


def _demo_problem(out: Path) -> str | None:
    """Why ``out`` is not a directory the demo wrote (so --overwrite may not replace it)."""
    for e in sorted(os.scandir(out), key=lambda e: e.name):
        kind = DEMO_ENTRIES.get(e.name)
        p = Path(e.path)
        if kind is None or e.is_symlink():
            return f"{e.name!r} is not something the demo writes"
        if kind == "release" and (not p.is_dir() or release_problems(p) is not None):
            return f"{e.name!r} is not a complete searchveil release"
        if kind == "record" and not is_provenance_record(p):
            return f"{e.name!r} is not a searchveil provenance record"
        if kind == "report" and not (p.is_file() and REPORT_MARK in p.read_bytes()[-400:]):
            return f"{e.name!r} is not a searchveil report"
    return None


def _check_out(out: Path, *, overwrite: bool, log: Path | None) -> None:
    """Before any work (issue 30): --out may hold private files, so it is refused inside a
    release directory; --overwrite replaces only a directory the demo wrote, and never one
    that holds LOG."""
    if not out.exists():
        check_private_path(out, option="out", inputs=input_list(log=log), directory=True)
        return
    if not out.is_dir() or out.is_symlink():
        raise OutputExistsError(f"{out} exists and is not a demo directory; choose a new --out")
    if not overwrite:
        raise OutputExistsError(f"{out} exists; pass --overwrite to replace it")
    if log is not None and is_within(log, out):
        raise InvalidParameterError("log", str(log), f"a path outside --out {str(out)!r}")
    why = _demo_problem(out)
    if why is not None:
        raise OutputExistsError(
            f"--overwrite replaces only a directory the demo wrote, and {str(out)!r} is not "
            f"one: {why}. Nothing was changed; choose a new --out"
        )
    if enclosing_release(out.resolve().parent) is not None:
        raise InvalidParameterError("out", str(out), "a path outside any release directory")


def _result(
    runs: dict[str, Any], curve: dict[str, Any] | None, *, target: float, seeded: bool,
    final: Path, synthetic_users: int, sample: str, reader: ReaderOptions, selection: str,
) -> dict[str, Any]:  # fmt: skip
    real = runs["real"]
    opts = "".join(f" {a}" for a in reader_cli_args(reader))
    quoted = shlex.quote(sample)
    explanation = (
        f"δ is solved per log so that the expected number of queries held by a single user that "
        f"get published is ≤ {target:g}: any (ε, δ)-DP release publishes such a query with "
        f"probability ≤ δ, and only a query among a user's first d = {DEMO_D} can be published, "
        "so at most U·d are candidates: δ = target / (U·d), rounded down to a power of ten and "
        "never above 1/(10·U), with U a declared public bound (the bundled sample's published "
        "size, --max-users for your own log, the synthetic population's size) — never the "
        "private log's own count, which would make δ a function of the data outside the "
        "accounting. The number of single-user queries in the log is a private figure (shown "
        "here to the data holder; not in the releases or ledgers). A fixed δ does not protect "
        "everyone: at δ = 1e-4 on 50,000 synthetic users, about 3.5 single-user queries would "
        "be published per run."
    )
    thr = real["threshold"][0]
    unit = "users" if selection in ("korolova", "laplace", "gaussian") else "users' full weight"
    note = (
        f"A query is published only if about {thr:.3g} {unit} posed it (after each user keeps "
        f"d = {real['d']}); with {real['users']} real users few or no queries pass — that is "
        "the price of protecting every user of a small log, not a fault. "
    )
    if curve is not None:
        note += (
            "The synthetic log (calibrated on the sample; test data, not a release) shows what "
            "a population of thesis-like size releases: a tiny share of distinct queries that "
            "covers a large share of the query volume. The d-curve gives the whole ε to the "
            "selection step (as the thesis' Fig. 4.2); the synthetic release splits ε between "
            "selection and counts, so it keeps a little less. The curves read the whole "
            "(synthetic) log: a data-holder diagnostic; choosing d from the curve of a private "
            "log costs privacy, so the releases take d from public information only."
        )
    return {
        "out": str(final),
        "report": str(final / "report.html"),
        "private": private_block(figures=[f"runs.*.{k}" for k in DEMO_PRIVATE_FIGURES]),
        "sample": sample,
        "reader": reader.to_dict(),
        "seeded": seeded,
        "parameters": {
            "epsilon": DEMO_EPSILON,
            "selection": selection,
            "d": real["d"],
            "d_c": DEMO_DC,
            "urls": "private (real sample); none (synthetic)",
            "split": list(DEMO_SPLIT),
            "max_single_user_items": target,
            "delta": {k: v["delta"] for k, v in runs.items()},
        },
        "delta_choice": {"target": target, "explanation": explanation},
        "runs": runs,
        "dcurve": curve,
        "note": note,
        "equivalent_commands": [
            f"searchveil params korolova --exp-epsilon 10 --max-queries {DEMO_D} "
            f"--max-single-user-items {target:g} "
            f"--max-users {real['delta_solved']['users_bound']}",
            f"searchveil release korolova {quoted} --out real --epsilon {DEMO_EPSILON!r} "
            f"--delta {real['delta_solved']['delta']:g} --max-queries {real['d']} "
            f"--max-clicks {DEMO_DC} --urls private --split 1,1,1,1 "
            f"--max-users {real['delta_solved']['users_bound']}"
            + ("" if selection == "korolova" else f" --selection {selection}")
            + opts,
            f"searchveil evaluate {quoted} real --report real-report.html",
        ]
        + (
            [
                f"searchveil synth --like {quoted} --users {synthetic_users} "
                f"--out synthetic-log.tsv.gz{opts}"
            ]
            if synthetic_users
            else []
        ),  # fmt: skip
    }


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)
