"""``searchveil synth``: a synthetic AOL-layout log calibrated on a real sample (for scale tests
and benchmarks; see :mod:`searchveil.synth` for what is fitted). The output is NOT a privacy-
preserving release: by default it spells the head with the calibration log's own queries."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from searchveil.cli._common import (
    READER_DEFAULT,
    BudgetOpt,
    JsonOpt,
    OverwriteOpt,
    SeedOpt,
    add_commands,
    emit,
    err_console,
    out_console,
    progress,
    require_epsilon_delta,
)
from searchveil.cli.options import command
from searchveil.cli.synth_dp import dp_synth
from searchveil.errors import InvalidParameterError
from searchveil.io.paths import (
    MODEL,
    SYNTHETIC_LOG,
    check_private_path,
    input_list,
    write_private_text,
)
from searchveil.io.readers import ReaderOptions, read_log
from searchveil.model import query_events
from searchveil.rng import make_rng
from searchveil.synth import (
    Observed,
    OutputFormat,
    StringMode,
    fit,
    heldout_head_check,
    heldout_split_check,
    heldout_window_check,
    read_model,
    write_synthetic,
)
from searchveil.validate import check_int, parse_choice


def _human(r: dict[str, Any]) -> None:
    t = Table(title=f"searchveil synth → {r['out']}", show_header=False)
    t.add_column("")
    t.add_column("", justify="right")
    t.add_row("users", f"{r['users']:,}")
    t.add_row("rows", f"{r['rows']:,}")
    t.add_row("format", r["format"])
    t.add_row("strings", r["strings"])
    t.add_row("seconds", f"{r['seconds']:.1f}")
    t.add_row("rows/s", f"{r['rows_per_second']:,.0f}")
    out_console.print(t)
    m = Table(title=f"fitted on {r['model']['source']['file']}", show_header=False)
    m.add_column("")
    m.add_column("", justify="right")
    for k, v in r["model"]["fitted"].items():
        if not isinstance(v, list):
            m.add_row(k.replace("_", " "), f"{v:,.4g}" if isinstance(v, float) else str(v))
    out_console.print(m)
    if r["strings"] == "real":
        err_console.print(
            "note: the synthetic log spells its head with the calibration log's own queries; "
            "it is test data, not a privacy-preserving release."
        )


def _check_synth_counts(
    like: Path | None, model: Path | None, users: int | None, rows: int | None, *, dp: bool
) -> None:
    """Exactly one of --like/--model; --users (required unless ``dp``) and --rows at least 1."""
    if (like is None) == (model is None):
        raise InvalidParameterError(
            "--like/--model", "both" if like else "neither", "exactly one of them"
        )
    if users is None and not dp:
        raise InvalidParameterError(
            "--users", None, "an integer ≥ 1 (required without --epsilon: the exact synthetic "
            "log has no size of its own)",
        )  # fmt: skip
    if users is not None and users < 1:
        raise InvalidParameterError("--users", users, "an integer ≥ 1")
    if rows is not None and rows < 1:
        raise InvalidParameterError("--rows", rows, "an integer ≥ 1")


@contextmanager
def _generation_progress(show: bool, users: int) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr (when ``show``); yields the ``on_chunk(done, rows)`` callback."""
    with Progress(
        TextColumn("generating"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("users · {task.fields[rows]:,} rows"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        disable=not show,
    ) as prog:
        task = prog.add_task("synth", total=users, rows=0)

        def on_chunk(done: int, nrows: int) -> None:
            prog.update(task, completed=done, rows=nrows)

        yield on_chunk


SynthOutOpt = Annotated[Path, typer.Option("--out", help="output file (.tsv, .tsv.gz, .parquet)")]
SynthUsersOpt = Annotated[
    int | None,
    typer.Option(
        "--users",
        help="number of synthetic users (required without --epsilon; with --epsilon the "
        "default is the DP estimate of the users of --like, and N scales every DP statistic "
        "to N users)",
    ),  # fmt: skip
]
SynthLikeOpt = Annotated[
    Path | None, typer.Option("--like", help="real log to calibrate on (any reader format)")
]
SynthModelOpt = Annotated[
    Path | None, typer.Option("--model", help="a model saved with --save-model")
]
SynthRowsOpt = Annotated[
    int | None,
    typer.Option(
        "--rows",
        help="rescale activity so that the output has about N rows (with --epsilon: default "
        "the DP estimate of the rows of --like, scaled to --users)",
    ),  # fmt: skip
]
SynthStringsOpt = Annotated[
    str, typer.Option("--strings", help="real (sample's words/queries) | opaque (w123)")
]
SynthOutFormatOpt = Annotated[
    str, typer.Option("--output-format", help="auto | tsv | tsv.gz | parquet")
]
SynthWorkersOpt = Annotated[
    int | None, typer.Option("--workers", help="processes (default: number of CPUs)")
]
SynthChunkUsersOpt = Annotated[int, typer.Option("--chunk-users", help="users generated per chunk")]
SynthSaveModelOpt = Annotated[
    Path | None, typer.Option("--save-model", help="also write the fitted model (JSON)")
]
SynthEpsilonOpt = Annotated[
    float | None,
    typer.Option(
        "--epsilon",
        help="a DP synthetic log (with --delta, --like): every column "
        "from a DP statistic; --out is then a release directory",
    ),  # fmt: skip
]
SynthDeltaOpt = Annotated[float | None, typer.Option("--delta", help="δ of the DP synthetic log")]
SynthMaxUsersOpt = Annotated[
    int | None,
    typer.Option(
        "--max-users",
        help="U: a public bound on the users of --like you DECLARE "
        "(the δ < 1/U check; the DP synthetic log's default rules)",
    ),  # fmt: skip
]


@command
def synth(
    out: SynthOutOpt,
    users: SynthUsersOpt = None,
    like: SynthLikeOpt = None,
    model: SynthModelOpt = None,
    rows: SynthRowsOpt = None,
    strings: SynthStringsOpt = "real",
    out_format: SynthOutFormatOpt = "auto",
    workers: SynthWorkersOpt = None,
    chunk_users: SynthChunkUsersOpt = 100_000,
    save_model: SynthSaveModelOpt = None,
    seed: SeedOpt = None,
    overwrite: OverwriteOpt = False,
    epsilon: SynthEpsilonOpt = None,
    delta: SynthDeltaOpt = None,
    max_users: SynthMaxUsersOpt = None,
    budget: BudgetOpt = None,
    reader: ReaderOptions = READER_DEFAULT,
    json_out: JsonOpt = False,
) -> None:
    """Generate a synthetic AOL-layout log calibrated on a real sample (test data).

    Calibrated on a real sample (--like) or a saved model (--model). Fits queries/user,
    repeats, query popularity and vocabulary growth, clicks/query, URL spread, sessions and
    times; writes atomically. Test data, not a release. With --epsilon and --delta: a
    differentially private synthetic log of --like instead (every column from a DP
    statistic, docs/synth.md), written as a release directory with its ledger and charged
    to --budget; its size defaults to the DP estimates of the users and rows of --like."""
    if epsilon is not None or delta is not None:
        _dp(like, model, out, users, rows, strings, out_format, save_model, seed, overwrite,
            epsilon, delta, max_users, budget, reader, json_out)  # fmt: skip
        return
    if max_users is not None:
        raise InvalidParameterError("--max-users", max_users, "set only with --epsilon")
    if budget is not None:
        raise InvalidParameterError(
            "--budget", str(budget), "set only with --epsilon: without it synth writes test "
            "data fitted exactly on --like, not differentially private, outside every guarantee",
        )  # fmt: skip
    _check_synth_counts(like, model, users, rows, dp=False)
    assert users is not None
    mode = parse_choice("--strings", strings, StringMode)
    fmt = parse_choice("--output-format", out_format, OutputFormat)
    n_workers = workers if workers is not None else max(1, min(os.cpu_count() or 1, 8))
    if n_workers < 1:
        raise InvalidParameterError("--workers", n_workers, "an integer ≥ 1")
    # private outputs (a log fitted to a private one, its model): never inside a release
    # directory, never on an input; checked before any work (issue 30)
    inputs = input_list(like=like, model=model)
    check_private_path(out, option="out", inputs=inputs, overwrite=overwrite,
                       owned=SYNTHETIC_LOG)  # fmt: skip
    if save_model is not None:
        check_private_path(save_model, option="save-model", inputs=[*inputs, ("out", out)],
                           overwrite=overwrite, owned=MODEL)  # fmt: skip
    rng = make_rng(seed)
    if like is not None:
        kw = reader.kwargs()
        m = fit(read_log(like, **kw), rng=rng)
    else:
        assert model is not None
        m = read_model(model)
    show = not json_out and err_console.is_terminal
    t0 = time.perf_counter()
    with _generation_progress(show, users) as on_chunk:
        res = write_synthetic(
            m, out, users=users, rng=rng, rows=rows, strings=mode, fmt=fmt,
            overwrite=overwrite, chunk_users=chunk_users, workers=n_workers,
            on_chunk=on_chunk,
        )  # fmt: skip
    dt = time.perf_counter() - t0
    if save_model is not None:
        write_private_text(save_model, m.to_json(), option="save-model", inputs=inputs,
                           overwrite=overwrite, owned=MODEL)  # fmt: skip
    res.update(
        seconds=dt,
        rows_per_second=res["rows"] / dt if dt > 0 else 0.0,
        workers=n_workers,
        seed=seed,
        model={"source": m.source, "fitted": m.summary()},
    )
    emit(res, json_out, _human)


def _dp(
    like: Path | None, model: Path | None, out: Path, users: int | None, rows: int | None,
    strings: str, out_format: str, save_model: Path | None, seed: int | None, overwrite: bool,
    epsilon: float | None, delta: float | None, max_users: int | None, budget: Path | None,
    reader: ReaderOptions, json_out: bool,
) -> None:  # fmt: skip
    """``--epsilon``: the DP synthetic log (cli/synth_dp.py), after refusing what it cannot
    take (a saved model or --save-model: the model is exact statistics; --strings: its head
    is the DP-published queries, its tail opaque tokens)."""
    eps, dl = require_epsilon_delta(epsilon, delta)
    for name, bad in (("--model", model), ("--save-model", save_model),
                      ("--strings", None if strings == "real" else strings)):  # fmt: skip
        if bad is not None:
            raise InvalidParameterError(name, str(bad), "not set with --epsilon")
    if like is None:
        raise InvalidParameterError("--like", None, "the log the DP statistics are drawn from")
    _check_synth_counts(like, None, users, rows, dp=True)
    with progress(not json_out) as step:
        dp_synth(like=like, out=out, epsilon=eps, delta=dl, max_users=max_users, users=users,
                 rows=rows, seed=seed, overwrite=overwrite, out_format=out_format,
                 budget=budget, reader=reader, json_out=json_out, step=step)  # fmt: skip


CheckLikeOpt = Annotated[Path, typer.Option("--like", help="real log the model is calibrated on")]
CheckHeldoutOpt = Annotated[
    Path | None,
    typer.Option(
        "--heldout",
        help="a DIFFERENT real log to compare the head with; without it, only the "
        "split check of --like runs",
    ),
]
CheckUsersOpt = Annotated[int, typer.Option("--users", help="synthetic users at matched activity")]
CheckHeldoutClickedOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--heldout-clicked-only/--heldout-all-events",
        help="the held-out log shows only events with a click (the shared top-1000 AOL "
        "extract): compare clicked events on both sides",
    ),
]
CheckSubsamplesOpt = Annotated[
    int, typer.Option("--subsamples", help="same-size held-out subsamples (real vs real)")
]
CheckTopOpt = Annotated[int, typer.Option("--top", help="ranks of the user-share curve")]
CheckSplitShareOpt = Annotated[
    float,
    typer.Option(
        "--split-share",
        help="split check: share of the users a model is calibrated on; it is compared "
        "with the other users of the same log (the --heldout log if given, else --like)",
    ),
]
CheckSplitsOpt = Annotated[
    int, typer.Option("--splits", help="split check: random splits (0 = skip it)")
]


@command
def synth_check(
    like: CheckLikeOpt,
    heldout: CheckHeldoutOpt = None,
    users: CheckUsersOpt = 20_000,
    heldout_clicked_only: CheckHeldoutClickedOnlyOpt = True,
    subsamples: CheckSubsamplesOpt = 300,
    top: CheckTopOpt = 100,
    split_share: CheckSplitShareOpt = 0.25,
    splits: CheckSplitsOpt = 3,
    seed: SeedOpt = None,
    reader: ReaderOptions = READER_DEFAULT,
    json_out: JsonOpt = False,
) -> None:
    """Held-out check of the synthetic head against real logs (docs/synth.md).

    The top-N user-share curve of
    a model calibrated on --like against a different real log, (1) at the held-out users'
    activity (model extrapolated) and (2) with the held-out users cut down to the
    calibration's activity and size (real vs real, model-free); and (3) the split check:
    a model calibrated on a random --split-share of one log's users against the rest of
    that log (unseen users of the same population, a larger population). Prints each
    with the worst factor over the top 20. Reads both logs with the same reader options."""
    check_int("--users", users, minimum=1)
    check_int("--subsamples", subsamples, minimum=1)
    check_int("--top", top, minimum=20)
    check_int("--splits", splits, minimum=0)
    if not 0.0 < split_share < 1.0:
        raise InvalidParameterError("--split-share", split_share, "a fraction in (0, 1)")
    if heldout is None and splits == 0:
        raise InvalidParameterError(
            "--splits", splits, "≥ 1 when no --heldout log is given (nothing to check)"
        )
    rng = make_rng(seed)
    kw = reader.kwargs()
    cal = read_log(like, **kw)
    res: dict[str, Any] = {"calibration": str(like), "seed": seed}
    split_log = cal
    if heldout is not None:
        held_log = read_log(heldout, **kw)
        held = query_events(held_log)
        m = fit(cal, rng=rng)
        observed = Observed.CLICKED if heldout_clicked_only else Observed.ALL
        up = heldout_head_check(m, held, rng=rng, users=users, observed=observed, top=top)
        down = heldout_window_check(
            query_events(cal), held, rng=rng, model=m, synthetic_users=users,
            subsamples=subsamples, top=top,
        )  # fmt: skip
        res.update(heldout=str(heldout),
                   model={"source": m.source, "fitted": m.summary()},
                   matched_activity=up, calibration_activity=down)  # fmt: skip
        split_log = held_log
    if splits:
        res["split"] = heldout_split_check(
            split_log, rng=rng, calibration_share=split_share, splits=splits, top=top
        )
        res["split"]["log"] = str(heldout if heldout is not None else like)
    emit(res, json_out, _human_check)


def register(app: typer.Typer) -> None:
    add_commands(app, None, {"synth": synth, "synth-check": synth_check})


def _human_check(r: dict[str, Any]) -> None:
    if "matched_activity" in r:
        _human_cross(r)
    if "split" in r:
        _human_split(r["split"])


def _human_split(s: dict[str, Any]) -> None:
    t = Table(
        title=f"split check of {s['log']}: calibrated on {s['calibration_users']} users, "
        f"compared with the other {s['heldout_users']} (first split)"
    )
    for c in ("rank", "held-out (real)", "synthetic @ held-out activity", "ratio"):
        t.add_column(c, justify="right")
    for i in range(min(20, len(s["ratio"]))):
        t.add_row(str(i + 1), f"{100 * s['heldout_curve'][i]:.2f}%",
                  f"{100 * s['synthetic_curve'][i]:.2f}%", f"{s['ratio'][i]:.2f}")  # fmt: skip
    out_console.print(t)
    for i, x in enumerate(s["splits"], 1):
        out_console.print(
            f"split {i}: γ = {x['gamma']:.2f}, worst top-20 factor {x['worst_factor_top20']:.2f} "
            f"({x['within_1_5_top20']}/20 within 1.5; real calibration part vs held-out: "
            f"{x['real_vs_real_worst_factor_top20']:.2f}), worst top-{len(s['ratio'])} "
            f"{x['worst_factor_top']:.2f}"
        )
    out_console.print(
        f"split check: worst top-20 factor over all splits {s['worst_factor_top20']:.2f}"
    )


def _human_cross(r: dict[str, Any]) -> None:
    up, down = r["matched_activity"], r["calibration_activity"]
    t = Table(title=f"top-20 user shares: {r['calibration']} (calibration) vs {r['heldout']}")
    for c in ("rank", "held-out", "synthetic @ held-out activity", "ratio",
              "held-out @ calib. activity & size", "calibration (real)", "ratio"):  # fmt: skip
        t.add_column(c, justify="right")
    for i in range(min(20, len(up["ratio"]))):
        matched = down.get("heldout_matched_curve", [float("nan")] * 20)
        ratio2 = down.get("calibration_vs_matched_ratio", [float("nan")] * 20)
        t.add_row(
            str(i + 1), f"{100 * up['heldout_curve'][i]:.2f}%",
            f"{100 * up['synthetic_curve'][i]:.2f}%", f"{up['ratio'][i]:.2f}",
            f"{100 * matched[i]:.2f}%", f"{100 * down['calibration_curve'][i]:.2f}%",
            f"{ratio2[i]:.2f}",
        )  # fmt: skip
    out_console.print(t)
    out_console.print(
        f"model at the held-out activity: worst top-20 factor {up['worst_factor_top20']:.2f} "
        f"({up['within_1_5_top20']}/20 within 1.5)"
    )
    if "calibration_vs_matched_worst_factor_top20" in down:
        mass = down["top20_mass"]
        out_console.print(
            "real vs real at the calibration's activity and size: worst top-20 factor "
            f"{down['calibration_vs_matched_worst_factor_top20']:.2f} "
            f"({down['calibration_vs_matched_within_1_5_top20']}/20 within 1.5); top-20 mass "
            f"{mass['calibration']:.3f} vs held-out subsamples mean "
            f"{mass['heldout_subsamples_mean']:.3f} (max {mass['heldout_subsamples_max']:.3f})"
        )
