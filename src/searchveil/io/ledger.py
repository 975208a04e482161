"""Release directories and the privacy ledger.

A release is a directory holding its output tables and ``ledger.json``. :class:`ReleaseWriter`
builds it in a temporary sibling directory (``.<name>.tmp-<random>``) and renames it into place
only when every table and the ledger are written, so a failed run leaves nothing behind and a
reader never sees a half-written release. An existing output directory is an error unless
``overwrite=True`` (then it is replaced after the new release is complete).

The ledger (``build_ledger``) records: tool version, mechanism, privacy notion, ε, δ, every
parameter, each input (file name, SHA-256, rows, users, bad rows skipped), the randomness
(seeded or not — seeded releases are marked NOT FOR RELEASE), the privacy events that compose
to the total, and ``outputs``: output name → {file, columns, rows}.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import polars as pl

from searchveil.errors import (
    InputFormatError,
    InternalError,
    InvalidParameterError,
    OutputExistsError,
)
from searchveil.rng import RandomSource, secure_token
from searchveil.validate import check_choice
from searchveil.version import __version__

__all__ = [
    "ReleaseWriter",
    "build_ledger",
    "read_ledger",
    "write_json_atomic",
    "write_text_atomic",
    "check_release_dir",
    "LEDGER_NAME",
]

LEDGER_NAME = "ledger.json"


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return str(x)
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return _jsonable(x.item())
    if isinstance(x, Path):
        return str(x)
    return x


def build_ledger(
    *,
    mechanism: str,
    notion: str,
    epsilon: float | None,
    delta: float | None,
    parameters: dict[str, Any],
    inputs: list[dict[str, Any]],
    rng: RandomSource | None,
    events: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ledger dict for one release (``outputs`` is filled in by :class:`ReleaseWriter`)."""
    randomness = rng.describe() if rng is not None else {"source": None, "seeded": False}
    ledger: dict[str, Any] = {
        "tool": "searchveil",
        "tool_version": __version__,
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mechanism": mechanism,
        "notion": notion,
        "epsilon": epsilon,
        "delta": delta,
        "parameters": parameters,
        "inputs": inputs,
        "seeded": bool(randomness.get("seeded")),
        "randomness": randomness,
        "for_release": not bool(randomness.get("seeded")),
        "events": events or [],
        "outputs": {},
    }
    if extra:
        ledger.update(extra)
    result: dict[str, Any] = _jsonable(ledger)
    return result


def read_ledger(release_dir: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(release_dir) / LEDGER_NAME
    if not path.is_file():
        raise InputFormatError(str(path), "no ledger.json: not a searchveil release directory")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputFormatError(str(path), f"ledger is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or "outputs" not in data:
        raise InputFormatError(str(path), "ledger has no 'outputs' map")
    return data


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write JSON to ``path`` via a temp file + rename."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp-{secure_token()}")
    try:
        tmp.write_text(
            json.dumps(_jsonable(obj), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp-{secure_token()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()


def check_release_dir(
    out_dir: str | os.PathLike[str], *, fmt: str = "tsv", overwrite: bool = False
) -> None:
    """Fail early — before reading or computing anything — when :class:`ReleaseWriter` would
    refuse ``out_dir`` (it exists and ``overwrite`` is off) or ``fmt``. Writes nothing."""
    ReleaseWriter(out_dir, fmt=fmt, overwrite=overwrite)


class ReleaseWriter:
    """Write a release directory atomically (see module docstring).

    >>> with ReleaseWriter(out, fmt="tsv") as w:          # doctest: +SKIP
    ...     w.write_table("queries", df)
    ...     w.write_ledger(ledger)
    """

    def __init__(
        self, out_dir: str | os.PathLike[str], *, fmt: str = "tsv", overwrite: bool = False
    ) -> None:
        self.out_dir = Path(out_dir)
        self.fmt = check_choice("format", fmt, ("tsv", "parquet"))
        self.overwrite = overwrite
        self._tmp: Path | None = None
        self._outputs: dict[str, dict[str, Any]] = {}
        self._ledger_written = False
        if self.out_dir.exists() and not overwrite:
            if not self.out_dir.is_dir() or any(self.out_dir.iterdir()):
                raise OutputExistsError(
                    f"output {str(self.out_dir)!r} already exists; "
                    "choose a new --out or pass --overwrite"
                )

    def __enter__(self) -> ReleaseWriter:
        parent = self.out_dir.parent
        if not parent.exists():
            raise InvalidParameterError(
                "out", str(self.out_dir), "a path whose parent directory exists"
            )
        self._tmp = parent / f".{self.out_dir.name}.tmp-{secure_token()}"
        self._tmp.mkdir()
        return self

    @property
    def tmp_dir(self) -> Path:
        if self._tmp is None:
            raise InternalError("ReleaseWriter used outside its 'with' block")
        return self._tmp

    def write_table(self, name: str, df: pl.DataFrame) -> str:
        """Write one output table; returns its file name (relative to the release dir)."""
        fname = f"{name}.{'tsv' if self.fmt == 'tsv' else 'parquet'}"
        path = self.tmp_dir / fname
        if self.fmt == "tsv":
            df.write_csv(path, separator="\t", quote_style="never")
        else:
            df.write_parquet(path)
        self._outputs[name] = {
            "file": fname,
            "columns": df.columns,
            "rows": df.height,
            "format": self.fmt,
        }
        return fname

    def write_file(self, name: str, fname: str, content: str | bytes) -> str:
        path = self.tmp_dir / fname
        if isinstance(content, str):
            path.write_text(content, encoding="utf-8")
        else:
            path.write_bytes(content)
        self._outputs[name] = {"file": fname}
        return fname

    def write_ledger(self, ledger: dict[str, Any]) -> dict[str, Any]:
        ledger = dict(ledger)
        ledger["outputs"] = dict(self._outputs)
        ledger["release_format"] = self.fmt
        (self.tmp_dir / LEDGER_NAME).write_text(
            json.dumps(_jsonable(ledger), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        self._ledger_written = True
        return ledger

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tmp = self._tmp
        if tmp is None:
            return
        if exc_type is not None or not self._ledger_written:
            shutil.rmtree(tmp, ignore_errors=True)
            if exc_type is None:
                raise InternalError("release finished without a ledger; nothing was written")
            return
        if self.out_dir.exists():
            old = self.out_dir.parent / f".{self.out_dir.name}.old-{secure_token()}"
            os.replace(self.out_dir, old)
            os.replace(tmp, self.out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, self.out_dir)
