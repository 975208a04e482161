"""``searchveil demo``: the README's main job.

1. Korolova's Release-Data (e^ε = 10, δ = 1e-4, d = d_c = 1, privately selected URLs) on the
   bundled real sample (215 AOL users), with the utility report of ``searchveil evaluate``.
2. The same release on a synthetic log of ``--synthetic-users`` users calibrated on that sample
   (``searchveil synth``), with its report — because a differentially private release of search
   queries needs many users: with 215 users no query can pass a threshold set for δ = 1e-4, and
   the demo shows that honestly before showing what an AOL-sized population releases.

Everything goes into ``--out`` (default ``searchveil-demo``), built in a temporary sibling
directory and renamed into place at the end, so a failed or interrupted demo leaves nothing.
"""

from __future__ import annotations

import math
import os
import shutil
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from searchveil.cli._common import JsonOpt, OverwriteOpt, SeedOpt, emit, out_console, progress, run
from searchveil.errors import InvalidParameterError, OutputExistsError
from searchveil.evaluate import evaluate_loaded, load_release
from searchveil.io.readers import read_log
from searchveil.release.korolova import KorolovaParams, release_korolova, write_release
from searchveil.report.html import evaluation_report, write_report
from searchveil.rng import make_rng, secure_token
from searchveil.synth import fit, write_synthetic

DEMO_EPSILON = math.log(10.0)
DEMO_DELTA = 1e-4
DEMO_D = 1
DEMO_DC = 1
DEMO_SPLIT = (1.0, 1.0, 1.0, 1.0)
SAMPLE = "aol-gayo-avello-215-users.tsv"


def _release_and_report(
    log_path: Path, out: Path, name: str, *, rng: Any, step: Any, final: Path, log: Any = None
) -> dict[str, Any]:
    """Release into ``out/name`` (a temporary directory that becomes ``final``) and report."""
    import json

    if log is None:
        done = step(f"reading {log_path.name}")
        log = read_log(log_path)
        done()
    params = KorolovaParams.from_budget(
        epsilon=DEMO_EPSILON, delta=DEMO_DELTA, d=DEMO_D, url_selection="private", d_c=DEMO_DC,
        split=DEMO_SPLIT, threshold_rule="exact",
    )  # fmt: skip
    done = step(f"Release-Data on {name}")
    rel = release_korolova(log, params, rng=rng, budget=(DEMO_EPSILON, DEMO_DELTA))
    write_release(rel, out / name)
    done()
    done = step(f"evaluating the {name} release")
    result = evaluate_loaded(log, load_release(out / name), substitution_queries=300)
    # the report names the release where it will live, not the temporary build directory
    result = json.loads(json.dumps(result, default=str).replace(str(out), str(final)))
    report = out / f"{name}-report.html"
    write_report(report, evaluation_report(result))
    done()
    r = rel.report
    top = rel.tables["queries"].sort("noisy_count", descending=True).head(8).to_dicts()
    return {
        "release": str(out / name),
        "report": str(report),
        "users": r["users"],
        "distinct_queries": r["distinct_queries"],
        "queries_released": r["queries_released"],
        "released_query_volume": r["released_query_volume"],
        "pairs_released": r["pairs_released"],
        "epsilon": rel.ledger["epsilon"],
        "delta": rel.ledger["delta"],
        "K": r["parameters"]["K"],
        "b": r["parameters"]["b"],
        "top_queries": top,
    }


def _human(r: dict[str, Any]) -> None:
    out_console.print(
        f"[bold]searchveil demo[/]: Korolova Release-Data, e^ε = 10, δ = {DEMO_DELTA:g}, "
        f"d = {DEMO_D} query and d_c = {DEMO_DC} click per user, URLs selected privately"
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
        ("(query, url) pairs released", "pairs_released", "{:,}"),
        ("threshold K / noise scale b", None, ""),
        ("ε (exact accounting)", "epsilon", "{:.4f}"),
        ("δ (exact accounting)", "delta", "{:.3g}"),
    ]
    for label, key, f in rows:
        if key is None:
            vals = [f"{x['K']:g} / {x['b']:.3g}" for x in r["runs"].values()]
        else:
            vals = [f.format(x[key]) for x in r["runs"].values()]
        t.add_row(label, *vals)
    out_console.print(t)
    for name, x in r["runs"].items():
        if x["top_queries"]:
            tops = ", ".join(f"{q['query']} ({q['noisy_count']})" for q in x["top_queries"])
            out_console.print(f"top released queries ({name}): {tops}")
    out_console.print(r["note"])
    if r["seeded"]:
        out_console.print("randomness: SEEDED — reproducible experiment, NOT FOR RELEASE")
    for name, x in r["runs"].items():
        out_console.print(f"{name}: release [bold]{x['release']}[/] (ledger.json)")
        out_console.print(f"{name}: report  [bold]{x['report']}[/]")


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        out: Annotated[Path, typer.Option("--out", help="directory to create")] = Path(
            "searchveil-demo"
        ),
        synthetic_users: Annotated[
            int,
            typer.Option(
                "--synthetic-users",
                help="users of the synthetic log calibrated on the sample (0 = skip)",
            ),
        ] = 50_000,
        overwrite: OverwriteOpt = False,
        seed: SeedOpt = None,
        json_out: JsonOpt = False,
    ) -> None:
        """The main job: a Korolova release of the bundled 215-user AOL sample and of a
        synthetic log calibrated on it, each with an HTML utility report; prints the paths."""

        def body() -> None:

            if synthetic_users < 0:
                raise InvalidParameterError("--synthetic-users", synthetic_users, "an integer ≥ 0")
            if out.exists() and not overwrite:
                raise OutputExistsError(f"{out} exists; pass --overwrite to replace it")
            if not out.resolve().parent.exists():
                raise InvalidParameterError("--out", str(out), "a path in an existing directory")
            rng = make_rng(seed)
            final = out.resolve()
            tmp = final.parent / f".{out.name}.tmp-{secure_token()}"
            tmp.mkdir()
            try:
                runs: dict[str, Any] = {}
                ref = resources.files("searchveil") / "data" / SAMPLE
                with resources.as_file(ref) as sample, progress(not json_out) as step:
                    done = step(f"reading {SAMPLE}")
                    real = read_log(sample)
                    done()
                    runs["real"] = _release_and_report(
                        sample, tmp, "real", rng=rng, step=step, final=final, log=real
                    )
                    if synthetic_users:
                        done = step(f"generating a synthetic log of {synthetic_users:,} users")
                        syn = tmp / "synthetic-log.tsv.gz"
                        write_synthetic(
                            fit(real, rng=rng), syn, users=synthetic_users, rng=rng,
                            workers=max(1, min(os.cpu_count() or 1, 4)),
                        )  # fmt: skip
                        done()
                        runs["synthetic"] = _release_and_report(
                            syn, tmp, "synthetic", rng=rng, step=step, final=final
                        )
                for x in runs.values():
                    for k in ("release", "report"):
                        x[k] = str(final / Path(x[k]).name)
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
            res = {
                "out": str(out.resolve()),
                "sample": SAMPLE,
                "seeded": seed is not None,
                "parameters": {
                    "epsilon": DEMO_EPSILON,
                    "delta": DEMO_DELTA,
                    "d": DEMO_D,
                    "d_c": DEMO_DC,
                    "urls": "private",
                    "split": list(DEMO_SPLIT),
                },  # fmt: skip
                "runs": runs,
                "note": (
                    "A query is published only if about K users posed it (after each user keeps "
                    f"d = {DEMO_D}); with {runs['real']['users']} real users few or no queries "
                    "pass. The synthetic log (calibrated on the sample; test data, not a "
                    "release) shows what a larger population releases. Open the reports for "
                    "what was lost (docs/evaluation.md)."
                ),
                "equivalent_commands": [
                    f"searchveil release korolova {SAMPLE} --out real --epsilon {DEMO_EPSILON!r} "
                    f"--delta {DEMO_DELTA:g} --max-queries {DEMO_D} --max-clicks {DEMO_DC} "
                    "--urls private --split 1,1,1,1",
                    f"searchveil evaluate {SAMPLE} real --report real-report.html",
                    f"searchveil synth --like {SAMPLE} --users {synthetic_users} "
                    "--out synthetic-log.tsv.gz",
                ],
            }
            emit(res, json_out, _human)

        run(body)
