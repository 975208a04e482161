"""Synthetic logs as files: written atomically as TSV, gzip TSV or Parquet; models read back
from JSON."""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from pathlib import Path
from queue import Queue
from typing import Any

from searchveil.errors import InputFormatError, OutputWriteError
from searchveil.io.paths import SYNTHETIC_LOG, Replace, Staging, check_private_path
from searchveil.rng import RandomSource
from searchveil.synth.generate import generate, generate_chunks
from searchveil.synth.model import OutputFormat, StringMode, SynthModel
from searchveil.validate import parse_choice


def _format_for(path: Path, fmt: OutputFormat) -> OutputFormat:
    if fmt != OutputFormat.AUTO:
        return fmt
    name = path.name.lower()
    if name.endswith(".parquet"):
        return OutputFormat.PARQUET
    if name.endswith(".gz"):
        return OutputFormat.TSV_GZ
    return OutputFormat.TSV


def write_synthetic(
    model: SynthModel,
    out: Path,
    *,
    users: int,
    rng: RandomSource,
    rows: int | None = None,
    strings: StringMode | str = StringMode.REAL,
    fmt: OutputFormat | str = OutputFormat.AUTO,
    overwrite: bool = False,
    chunk_users: int = 100_000,
    workers: int = 1,
    on_chunk: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Write a synthetic log to ``out`` atomically (staged, then renamed into place) and
    owner-only: a synthetic log fitted to a private log is private (it is not a privacy-
    preserving release), so ``out`` is refused inside a release directory
    (:func:`searchveil.io.paths.check_private_path`). An existing ``out`` is replaced only
    with ``overwrite`` and only if it is a synthetic log searchveil wrote (its mark,
    :data:`~searchveil.io.paths.SYNTHETIC_LOG`); a symbolic link never. ``fmt`` is ``tsv |
    tsv.gz | parquet`` or ``auto`` (from the file name). Returns a summary."""
    out = Path(out)
    strings = parse_choice("strings", strings, StringMode)
    fmt = _format_for(out, parse_choice("format", fmt, OutputFormat))
    rule = Replace("out", overwrite, SYNTHETIC_LOG)
    check_private_path(out, option="out", overwrite=overwrite, owned=SYNTHETIC_LOG)
    total_rows = 0
    done_users = 0
    with Staging(out, directory=False, private=True, replace=rule) as st:
        tmp = st.path
        try:
            if fmt == "parquet":
                import pyarrow.parquet as pq

                writer = None
                try:
                    for df in generate(
                        model, users=users, rng=rng, rows=rows, strings=strings,
                        chunk_users=chunk_users, workers=workers,
                    ):  # fmt: skip
                        table = df.to_arrow()
                        if writer is None:
                            writer = pq.ParquetWriter(str(tmp), table.schema, compression="zstd")
                        writer.write_table(table)
                        total_rows += df.height
                        done_users += min(chunk_users, users - done_users)
                        if on_chunk:
                            on_chunk(done_users, total_rows)
                finally:
                    if writer is not None:
                        writer.close()
            else:
                total_rows, done_users = _write_tsv(
                    model, tmp, users=users, rng=rng, rows=rows, strings=strings,
                    gz=fmt == "tsv.gz", chunk_users=chunk_users, workers=workers,
                    on_chunk=on_chunk,
                )  # fmt: skip
        except OSError as exc:
            raise OutputWriteError(str(out), exc) from exc
        st.commit()
    return {
        "out": str(out),
        "format": fmt,
        "users": users,
        "rows": total_rows,
        "strings": strings,
        "seeded": rng.seeded,
    }


def _write_tsv(
    model: SynthModel,
    tmp: Path,
    *,
    users: int,
    rng: RandomSource,
    rows: int | None,
    strings: StringMode,
    gz: bool,
    chunk_users: int,
    workers: int,
    on_chunk: Callable[[int, int], None] | None,
) -> tuple[int, int]:
    total_rows = 0
    done_users = 0
    with open(tmp, "wb") as fh:
        q: Queue[bytes | None] = Queue(maxsize=2)
        errors: list[BaseException] = []

        def sink() -> None:
            comp = zlib.compressobj(1, zlib.DEFLATED, 31) if gz else None
            try:
                while True:
                    item = q.get()
                    if item is None:
                        break
                    fh.write(comp.compress(item) if comp else item)
                if comp:
                    fh.write(comp.flush())
            except OSError as exc:  # disk full etc.: reported after the join
                errors.append(exc)
                while q.get() is not None:
                    pass

        th = threading.Thread(target=sink, daemon=True)
        th.start()
        try:
            for n, data in generate_chunks(
                model, users=users, rng=rng, rows=rows, strings=strings,
                chunk_users=chunk_users, workers=workers, encode="tsv",
            ):  # fmt: skip
                assert isinstance(data, bytes)
                q.put(data)
                total_rows += data.count(b"\n") - (1 if done_users == 0 else 0)
                done_users += n
                if on_chunk:
                    on_chunk(done_users, total_rows)
        finally:
            q.put(None)
            th.join()
        if errors:
            raise errors[0]
    return total_rows, done_users


def read_model(path: Path) -> SynthModel:
    """Load a model written by ``searchveil synth --save-model``."""
    try:
        return SynthModel.from_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError) as exc:
        raise InputFormatError(str(path), f"not a searchveil synth model: {exc}") from None
