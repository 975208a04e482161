"""``searchveil synth``: a synthetic AOL-layout log calibrated on a real sample (for scale tests
and benchmarks; see :mod:`searchveil.synth` for what is fitted). The output is NOT a privacy-
preserving release: by default it spells the head with the calibration log's own queries."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from searchveil.cli._common import (
    READER_DEFAULT,
    JsonOpt,
    OverwriteOpt,
    SeedOpt,
    emit,
    err_console,
    out_console,
    run,
    with_reader_options,
)  # fmt: skip
from searchveil.errors import InvalidParameterError, OutputExistsError
from searchveil.io.ledger import write_text_atomic
from searchveil.io.readers import ReaderOptions, read_log
from searchveil.rng import make_rng
from searchveil.synth import fit, read_model, write_synthetic


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


def register(app: typer.Typer) -> None:
    @app.command("synth")
    @with_reader_options
    def synth(
        out: Annotated[Path, typer.Option("--out", help="output file (.tsv, .tsv.gz, .parquet)")],
        users: Annotated[int, typer.Option("--users", help="number of synthetic users")],
        like: Annotated[
            Path | None, typer.Option("--like", help="real log to calibrate on (any reader format)")
        ] = None,
        model: Annotated[
            Path | None, typer.Option("--model", help="a model saved with --save-model")
        ] = None,
        rows: Annotated[
            int | None,
            typer.Option("--rows", help="rescale activity so that the output has about N rows"),
        ] = None,
        strings: Annotated[
            str, typer.Option("--strings", help="real (sample's words/queries) | opaque (w123)")
        ] = "real",
        out_format: Annotated[
            str, typer.Option("--output-format", help="auto | tsv | tsv.gz | parquet")
        ] = "auto",
        workers: Annotated[
            int | None, typer.Option("--workers", help="processes (default: number of CPUs)")
        ] = None,
        chunk_users: Annotated[
            int, typer.Option("--chunk-users", help="users generated per chunk")
        ] = 100_000,
        save_model: Annotated[
            Path | None, typer.Option("--save-model", help="also write the fitted model (JSON)")
        ] = None,
        seed: SeedOpt = None,
        overwrite: OverwriteOpt = False,
        reader: ReaderOptions = READER_DEFAULT,
        json_out: JsonOpt = False,
    ) -> None:
        """Generate a synthetic AOL-layout log calibrated on a real sample (--like) or a saved
        model (--model). Fits queries/user, repeats, query popularity and vocabulary growth,
        clicks/query, URL spread and time gaps; writes atomically. Test data, not a release."""

        def body() -> None:

            if (like is None) == (model is None):
                raise InvalidParameterError(
                    "--like/--model", "both" if like else "neither", "exactly one of them"
                )
            if users < 1:
                raise InvalidParameterError("--users", users, "an integer ≥ 1")
            if rows is not None and rows < 1:
                raise InvalidParameterError("--rows", rows, "an integer ≥ 1")
            n_workers = workers if workers is not None else max(1, min(os.cpu_count() or 1, 8))
            if n_workers < 1:
                raise InvalidParameterError("--workers", n_workers, "an integer ≥ 1")
            if out.exists() and not overwrite:
                raise OutputExistsError(f"{out} exists; pass --overwrite to replace it")
            rng = make_rng(seed)
            if like is not None:
                kw = reader.kwargs()
                m = fit(read_log(like, **kw), rng=rng)
            else:
                assert model is not None
                m = read_model(model)
            show = not json_out and err_console.is_terminal
            t0 = time.perf_counter()
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

                res = write_synthetic(
                    m, out, users=users, rng=rng, rows=rows, strings=strings, fmt=out_format,
                    overwrite=overwrite, chunk_users=chunk_users, workers=n_workers,
                    on_chunk=on_chunk,
                )  # fmt: skip
            dt = time.perf_counter() - t0
            if save_model is not None:
                write_text_atomic(save_model, m.to_json())
            res.update(
                seconds=dt,
                rows_per_second=res["rows"] / dt if dt > 0 else 0.0,
                workers=n_workers,
                seed=seed,
                model={"source": m.source, "fitted": m.summary()},
            )
            emit(res, json_out, _human)

        run(body)
