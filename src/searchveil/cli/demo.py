"""``searchveil demo``: the README's main job.

1. Korolova's Release-Data (e^ε = 10, d = d_c = 1, privately selected URLs) on the bundled real
   sample (215 AOL users), with the utility report of ``searchveil evaluate``.
2. A synthetic log of ``--synthetic-users`` users (default 500,000, thesis-like) calibrated on
   that sample (:func:`searchveil.synth.synthetic_events`, integer query keys), on which the
   demo shows the thesis' central result (Korolova, PhD thesis 2012, §4.6.1.1, Fig. 4.2): the
   percent of distinct queries and of query volume released as a function of d, for
   Release-Data and for Gaussian selection (:mod:`searchveil.evaluate.dcurve`, exact
   expectations), as a plot in ``report.html`` and a table on the terminal; and runs one real
   Release-Data selection (d = 1) on it.

δ that protects everyone (issue 12, ``docs/privacy/delta.md``). Each run's δ is solved so that
the expected number of queries held by a single user that get published is ≤
``--max-single-user-items`` (default 0.01), from a *declared* population rule, never from the
private log (issue 21): an (ε, δ)-DP release publishes a query only one user holds with
probability ≤ δ, and only a query the user kept among their first d can be published at all,
so at most N ≤ U·d such queries are candidates; δ = target / (U·d), rounded down to a power of
ten and never above 1/(10·U). U is a public bound: ``--max-users`` (required with a LOG of your
own), the bundled sample's published size (215 users), or the synthetic population's size
(``--synthetic-users``, a parameter). The count of the log's single-user queries is still
computed — for the data holder's report (private), not for choosing δ. A fixed δ such as the
thesis' 10⁻⁵ or 10⁻⁴ (≈ 3.5 single-user queries published per run on 50,000 synthetic users)
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
import shutil
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
    progress,
    reader_cli_args,
    run,
    with_reader_options,
)  # fmt: skip
from searchveil.errors import InvalidParameterError, OutputExistsError
from searchveil.evaluate import evaluate_loaded, load_release
from searchveil.evaluate.dcurve import dcurve_from_events
from searchveil.io.ledger import read_provenance, write_json_atomic
from searchveil.io.readers import ReaderOptions, read_log
from searchveil.model import SearchLog, items
from searchveil.params import SINGLE_USER_TARGET, solve_delta_single_user
from searchveil.release.counts import BoundedCounts
from searchveil.release.korolova import (
    KorolovaParams,
    release_korolova,
    release_korolova_counts,
    write_release,
)
from searchveil.report.html import demo_report, evaluation_report, write_report
from searchveil.rng import RandomSource, make_rng, secure_token
from searchveil.synth import fit, synthetic_events
from searchveil.validate import check_int, check_positive

DEMO_EPSILON = math.log(10.0)
DEMO_D = 1
DEMO_DC = 1
DEMO_SPLIT = (1.0, 1.0, 1.0, 1.0)
DEMO_DS = (1, 2, 3, 5, 10, 20, 40)
DEMO_SYNTHETIC_USERS = 500_000
SAMPLE = "aol-gayo-avello-215-users.tsv"
#: the bundled sample's published size: the public bound U the demo declares for it
SAMPLE_USERS = 215


def _delta_for(users: int, target: float) -> dict[str, Any]:
    """δ from the declared population rule N ≤ U·d (never from the private log's own count of
    single-user queries): see the module docstring."""
    sol = solve_delta_single_user(target=target, users=users, items_per_user=DEMO_D)
    sol["users_bound"] = users
    return sol


def _real_run(
    log: SearchLog, out: Path, *, target: float, rng: RandomSource, step: Any, final: Path,
    max_users: int,
) -> dict[str, Any]:  # fmt: skip
    """Release-Data with URLs on the real sample, its utility report."""
    q = items(log, "queries")
    sol = _delta_for(max_users, target)
    params = KorolovaParams.from_budget(
        epsilon=DEMO_EPSILON, delta=sol["delta"], d=DEMO_D, url_selection="private", d_c=DEMO_DC,
        split=DEMO_SPLIT, threshold_rule="exact",
    )  # fmt: skip
    done = step("Release-Data on the real sample")
    rel = release_korolova(log, params, rng=rng, budget=(DEMO_EPSILON, sol["delta"]),
                           max_users=max_users)  # fmt: skip
    write_release(rel, out / "real")
    done()
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
        "released_query_volume": r["released_query_volume"],
        "pairs_released": r.get("pairs_released", 0),
        "epsilon": rel.ledger["epsilon"],
        "delta": rel.ledger["delta"],
        "delta_solved": sol,
        "K": r["parameters"]["K"],
        "b": r["parameters"]["b"],
        "single_user": r["single_user"],
        "single_user_published": int(
            holders.filter(pl.col("item").is_in(published.implode()) & (pl.col("h") == 1)).height
        ),
        "top_queries": top,
    }


def _synthetic_run(
    log: SearchLog, out: Path, *, users: int, target: float, rng: RandomSource, step: Any,
    ds: tuple[int, ...],
) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """The d-curve of a synthetic log of ``users`` users, and one Release-Data selection on it
    (query keys; d = DEMO_D; no URLs)."""
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
    done = step(f"d-curve (d = {', '.join(map(str, ds))}; Release-Data and Gaussian selection)")
    curve = dcurve_from_events(ev, epsilon=DEMO_EPSILON, delta=sol["delta"], ds=ds)
    done()
    done = step(f"Release-Data (d = {DEMO_D}) on the synthetic log")
    kept = ev.filter(pl.int_range(pl.len()).over("user") < DEMO_D)
    counts = kept.group_by("query").agg(pl.len().cast(pl.Int64).alias("count"))
    bounded = BoundedCounts(
        counts={"queries": counts},
        figures={"users": users, "query_events": ev.height,
                 "query_events_after_bounding": kept.height},
        input={"file": f"synthetic-{users}-users (in memory, query keys)", "sha256": None,
               "rows": ev.height, "users": users, "synthetic": True},
    )  # fmt: skip
    params = KorolovaParams.from_budget(
        epsilon=DEMO_EPSILON, delta=sol["delta"], d=DEMO_D, url_selection="none",
        split=(1.0, 1.0), threshold_rule="exact",
    )  # fmt: skip
    rel = release_korolova_counts(
        bounded, params, rng=rng, budget=(DEMO_EPSILON, sol["delta"]),
        single_user=(counts.join(single, on="query", how="semi"), n_single), max_users=users,
    )  # fmt: skip
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
        "K": r["parameters"]["K"],
        "b": r["parameters"]["b"],
        "single_user": r["single_user"],
        "single_user_published": int(published.join(single, on="query", how="semi").height),
        "top_queries": [],
    }
    return run_, curve


def _curve_table(curve: dict[str, Any]) -> Table:
    t = Table(
        title=f"% released vs d (thesis Fig. 4.2): {curve['users']:,} synthetic users, "
        f"e^ε = 10, δ = {curve['delta']:.3g}; RD = Release-Data, G = Gaussian selection; "
        "expected values",
        title_justify="left",
    )
    for c in ("d", "RD K", "RD %dist", "RD %vol", "RD 1-user", "G τ", "G %dist", "G %vol",
              "G 1-user"):  # fmt: skip
        t.add_column(c, justify="right", no_wrap=True)
    by_d: dict[int, dict[str, Any]] = {}
    for r in curve["table"]:
        by_d.setdefault(r["d"], {})[r["mechanism"]] = r
    for d in sorted(by_d):
        k, g = by_d[d].get("korolova", {}), by_d[d].get("gaussian", {})
        t.add_row(
            str(d), str(k.get("K", "–")), f"{k.get('distinct_pct', math.nan):.3f}",
            f"{k.get('volume_pct', math.nan):.1f}", f"{k.get('single_user_released', 0):.2g}",
            str(g.get("tau", "–")), f"{g.get('distinct_pct', math.nan):.3f}",
            f"{g.get('volume_pct', math.nan):.1f}", f"{g.get('single_user_released', 0):.2g}",
        )  # fmt: skip
    return t


def _human(r: dict[str, Any]) -> None:
    out_console.print(
        f"[bold]searchveil demo[/]: Korolova Release-Data, e^ε = 10, d = {DEMO_D} query "
        f"(and d_c = {DEMO_DC} click on the real sample) per user; δ solved from the declared "
        f"population bound U (N ≤ U·d single-user candidates) so that the expected number of "
        f"single-user queries published is ≤ {r['parameters']['max_single_user_items']:g}"
    )
    t = Table(show_header=True)
    t.add_column("")
    for name in r["runs"]:
        t.add_column(name, justify="right")
    rows = [
        ("users", "users", "{:,}"),
        ("distinct queries in the log", "distinct_queries", "{:,}"),
        ("queries released", "queries_released", "{:,}"),
        ("released query volume", "released_query_volume", "{:,}"),
        ("threshold K / noise scale b", None, ""),
        ("ε (exact accounting)", "epsilon", "{:.4f}"),
        ("δ (solved; exact accounting)", "delta", "{:.3g}"),
        ("single-user queries in the log (private)", None, "n"),
        ("… expected published", None, "e"),
        ("… actually published", "single_user_published", "{:,}"),
    ]
    for label, key, f in rows:
        if key is None and f == "n":
            vals = [f"{x['single_user']['single_user_items']:,}" for x in r["runs"].values()]
        elif key is None and f == "e":
            vals = [f"{x['single_user']['expected_single_user_published']:.2g}"
                    for x in r["runs"].values()]  # fmt: skip
        elif key is None:
            vals = [f"{x['K']:g} / {x['b']:.3g}" for x in r["runs"].values()]
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
            "best d: Release-Data d = {} ({:.1f}% of the query volume, {:.3f}% of distinct "
            "queries); Gaussian selection d = {} ({:.1f}%, {:.3f}%)".format(
                b["korolova"]["d"], b["korolova"]["volume_pct"], b["korolova"]["distinct_pct"],
                b["gaussian"]["d"], b["gaussian"]["volume_pct"], b["gaussian"]["distinct_pct"],
            )
        )  # fmt: skip
    out_console.print(r["note"])
    if r["seeded"]:
        out_console.print("randomness: SEEDED — reproducible experiment, NOT FOR RELEASE")
    for name, x in r["runs"].items():
        out_console.print(f"{name}: release [bold]{x['release']}[/] (ledger.json)")
    out_console.print(f"real: utility report [bold]{r['runs']['real']['report']}[/]")
    out_console.print(f"demo report (δ, single-user items, d-curve): [bold]{r['report']}[/]")


def register(app: typer.Typer) -> None:
    @app.command("demo")
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
        overwrite: OverwriteOpt = False,
        seed: SeedOpt = None,
        reader: ReaderOptions = READER_DEFAULT,
        json_out: JsonOpt = False,
    ) -> None:
        """The main job: a Korolova release of the bundled 215-user AOL sample (or of LOG)
        with its utility report, and the d-curve (thesis Fig. 4.2) of a synthetic log of
        500,000 users calibrated on it, with δ chosen so that no query held by a single user
        is expected to be published."""

        def body() -> None:
            if synthetic_users < 0:
                raise InvalidParameterError("--synthetic-users", synthetic_users, "an integer ≥ 0")
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
            if out.exists() and not overwrite:
                raise OutputExistsError(f"{out} exists; pass --overwrite to replace it")
            if not out.resolve().parent.exists():
                raise InvalidParameterError("--out", str(out), "a path in an existing directory")
            rng = make_rng(seed)
            final = out.resolve()
            tmp = final.parent / f".{out.name}.tmp-{secure_token()}"
            tmp.mkdir()
            curve: dict[str, Any] | None = None
            try:
                runs: dict[str, Any] = {}
                ref = resources.files("searchveil") / "data" / SAMPLE
                name = SAMPLE if log is None else str(log)
                with resources.as_file(ref) as bundled, progress(not json_out) as step:
                    done = step(f"reading {name}")
                    real = read_log(bundled, reader) if log is None else read_log(log, reader)
                    done()
                    runs["real"] = _real_run(real, tmp, target=target, rng=rng, step=step,
                                             final=final, max_users=u_bound)  # fmt: skip
                    if synthetic_users:
                        runs["synthetic"], curve = _synthetic_run(
                            real, tmp, users=synthetic_users, target=target, rng=rng, step=step,
                            ds=DEMO_DS,
                        )  # fmt: skip
                for x in runs.values():
                    for k in ("release", "report"):
                        if k in x:
                            x[k] = str(final / Path(x[k]).name)
                res = _result(runs, curve, target=target, seeded=seed is not None,
                              final=final, synthetic_users=synthetic_users, sample=name,
                              reader=reader)  # fmt: skip
                write_report(tmp / "report.html", demo_report(res))
                for name in runs:  # the provenance records name the releases' final place
                    _relocate_provenance(tmp / f"{name}.private.json", tmp, final)
                if out.exists():
                    trash = out.resolve().parent / f".{out.name}.old-{secure_token()}"
                    os.replace(out, trash)
                    os.replace(tmp, final)
                    shutil.rmtree(trash, ignore_errors=True)
                else:
                    os.replace(tmp, final)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
            emit(res, json_out, _human)

        run(body)


def _relocate_provenance(path: Path, tmp: Path, final: Path) -> None:
    """Point a provenance record built in the temporary directory at the release's final
    directory (it stays owner-only)."""
    rec = json.loads(path.read_text(encoding="utf-8"))
    rel = rec.get("release") or {}
    if isinstance(rel.get("directory"), str):
        rel["directory"] = rel["directory"].replace(str(tmp), str(final))
    write_json_atomic(path, rec)
    os.chmod(path, 0o600)


def _result(
    runs: dict[str, Any], curve: dict[str, Any] | None, *, target: float, seeded: bool,
    final: Path, synthetic_users: int, sample: str, reader: ReaderOptions,
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
    note = (
        f"A query is published only if about K users posed it (after each user keeps d = "
        f"{DEMO_D}); with {real['users']} real users and K = {real['K']:g}, few or no queries "
        "pass — that is the price of protecting every user of a small log, not a fault. "
    )
    if curve is not None:
        note += (
            "The synthetic log (calibrated on the sample; test data, not a release) shows what "
            "a population of thesis-like size releases: a tiny share of distinct queries that "
            "covers a large share of the query volume. The d-curve gives the whole ε to the "
            "selection step (as the thesis' Fig. 4.2); the synthetic release splits ε between "
            "selection and counts, so it keeps a little less."
        )
    return {
        "out": str(final),
        "report": str(final / "report.html"),
        "sample": sample,
        "reader": reader.to_dict(),
        "seeded": seeded,
        "parameters": {
            "epsilon": DEMO_EPSILON,
            "d": DEMO_D,
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
            f"--delta {real['delta_solved']['delta']:g} --max-queries {DEMO_D} "
            f"--max-clicks {DEMO_DC} --urls private --split 1,1,1,1 "
            f"--max-users {real['delta_solved']['users_bound']}{opts}",
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
