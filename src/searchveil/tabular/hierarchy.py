"""Inputs for tabular release: the table and ARX-format value generalization hierarchies.

Fouad, Elbassioni & Bertino (TKDE 2014) §II-A model each quasi-identifier by a value
generalization hierarchy (VGH) ``L_i``; the generalizations of a value ``a_i`` form the chain
``a_i^+`` (the value, its parent, ..., the root ``⊥``), written as levels ``0..h_i``. ARX stores
a VGH as a CSV file with one row per leaf value: ``value;level1;...;*`` (``;``-separated, CRLF
allowed). :func:`read_hierarchy` validates that file (same number of levels on every row, a
single root, every node has exactly one parent) and encodes it as integer codes per level, so
generalizing a column to level ``h`` is one array lookup (:attr:`Hierarchy.codes`).

Decisions: a value of the table that is missing from its hierarchy is an
:class:`~searchveil.errors.InputFormatError` naming the table file and line (we do not invent
leaves); values are compared as exact strings after stripping surrounding whitespace.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.errors import InputFormatError, InvalidParameterError

__all__ = [
    "Hierarchy",
    "EncodedTable",
    "read_table",
    "read_hierarchy",
    "load_hierarchies",
    "encode_table",
    "hierarchy_from_rows",
]


@dataclass(frozen=True)
class Hierarchy:
    """One VGH. ``labels[l][c]`` is the label of node ``c`` at level ``l``; ``codes[leaf, l]``
    is the node of level ``l`` that generalizes leaf ``leaf`` (level 0 = the leaf itself)."""

    attribute: str
    labels: tuple[tuple[str, ...], ...]
    codes: npt.NDArray[np.int32]  # (n_leaves, height + 1)
    source: str = ""
    sha256: str = ""
    leaf_index: dict[str, int] = field(default_factory=dict, compare=False, repr=False)

    @property
    def height(self) -> int:
        return int(self.codes.shape[1] - 1)

    @property
    def n_leaves(self) -> int:
        return int(self.codes.shape[0])

    def leaf_counts(self) -> npt.NDArray[np.int64]:
        """``n_i(node)`` per leaf and level: the number of leaves under the node that
        generalizes the leaf at that level (``(n_leaves, height + 1)``)."""
        out = np.empty(self.codes.shape, dtype=np.int64)
        for lvl in range(self.height + 1):
            col = self.codes[:, lvl]
            out[:, lvl] = np.bincount(col)[col]
        return out

    def label(self, leaf: npt.NDArray[np.int64], level: npt.NDArray[np.int64]) -> list[str]:
        """Labels of the generalization of ``leaf[j]`` to ``level[j]``."""
        codes = self.codes[leaf, level]
        return [self.labels[int(lv)][int(c)] for lv, c in zip(level, codes, strict=True)]


def hierarchy_from_rows(
    attribute: str,
    rows: list[list[str]],
    *,
    source: str = "",
    sha256: str = "",
    line_numbers: list[int] | None = None,
) -> Hierarchy:
    """Build and validate a hierarchy from rows ``[leaf, level1, ..., root]``."""
    where = source or attribute
    if not rows:
        raise InputFormatError(where, "hierarchy has no rows")
    lines = line_numbers or list(range(1, len(rows) + 1))
    width = len(rows[0])
    for r, ln in zip(rows, lines, strict=True):
        if len(r) != width:
            raise InputFormatError(
                where, f"row has {len(r)} levels, the first row has {width}", line=ln
            )
        if any(v == "" for v in r):
            raise InputFormatError(where, "empty label in hierarchy row", line=ln)
    roots = {r[-1] for r in rows}
    if len(roots) != 1:
        raise InputFormatError(
            where, f"hierarchy has {len(roots)} roots {sorted(roots)[:5]}; need 1"
        )
    leaf_index: dict[str, int] = {}
    for i, (r, ln) in enumerate(zip(rows, lines, strict=True)):
        if r[0] in leaf_index:
            raise InputFormatError(where, f"leaf value {r[0]!r} listed twice", line=ln)
        leaf_index[r[0]] = i
    n = len(rows)
    codes = np.empty((n, width), dtype=np.int32)
    labels: list[tuple[str, ...]] = []
    for lvl in range(width):
        col = [r[lvl] for r in rows]
        uniq: dict[str, int] = {}
        for v in col:
            uniq.setdefault(v, len(uniq))
        codes[:, lvl] = [uniq[v] for v in col]
        labels.append(tuple(uniq))
        if lvl > 0:  # every node of level lvl-1 has exactly one parent at level lvl
            parent: dict[int, int] = {}
            for j, (c, p) in enumerate(zip(codes[:, lvl - 1], codes[:, lvl], strict=True)):
                if parent.setdefault(int(c), int(p)) != int(p):
                    raise InputFormatError(
                        where,
                        f"node {labels[lvl - 1][int(c)]!r} (level {lvl - 1}) has two parents "
                        f"{labels[lvl][parent[int(c)]]!r} and {labels[lvl][int(p)]!r}",
                        line=lines[j],
                    )
    return Hierarchy(attribute, tuple(labels), codes, source, sha256, leaf_index)


def _split_lines(text: str) -> list[tuple[int, str]]:
    out = []
    for i, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), 1):
        if line.strip():
            out.append((i, line))
    return out


def read_hierarchy(path: str | Path, attribute: str | None = None) -> Hierarchy:
    """Read an ARX hierarchy CSV (``value;level1;...;*``; ``;``, ``,`` or tab separated)."""
    p = Path(path)
    if not p.is_file():
        raise InputFormatError(str(p), "hierarchy file not found")
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputFormatError(str(p), f"not UTF-8 text: {exc}") from None
    lines = _split_lines(text)
    if not lines:
        raise InputFormatError(str(p), "hierarchy file is empty")
    first = lines[0][1]
    sep = ";" if ";" in first else ("\t" if "\t" in first else ",")
    rows = [[v.strip() for v in line.split(sep)] for _, line in lines]
    if len(rows[0]) < 2:
        raise InputFormatError(str(p), "a hierarchy row needs a value and at least the root", 1)
    name = attribute or p.stem.removeprefix("adult_hierarchy_")
    return hierarchy_from_rows(
        name,
        rows,
        source=str(p),
        sha256=hashlib.sha256(raw).hexdigest(),
        line_numbers=[ln for ln, _ in lines],
    )


def read_table(path: str | Path, *, separator: str | None = None) -> pl.DataFrame:
    """Read a table as strings: CSV/TSV (``;``, ``,`` or tab sniffed from the header; CRLF ok)
    or Parquet (``.parquet``)."""
    p = Path(path)
    if not p.is_file():
        raise InputFormatError(str(p), "table file not found")
    if p.suffix.lower() in (".parquet", ".pq"):
        try:
            df = pl.read_parquet(p)
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise InputFormatError(str(p), f"cannot read Parquet: {exc}") from None
        return df.select(pl.all().cast(pl.Utf8).str.strip_chars())
    with p.open("rb") as fh:
        head = fh.readline().decode("utf-8-sig", errors="replace")
    if separator is None:
        separator = max((";", "\t", ","), key=head.count)
        if head.count(separator) == 0:
            raise InputFormatError(str(p), "cannot find a field separator in the header", 1)
    try:
        df = pl.read_csv(
            p,
            separator=separator,
            infer_schema_length=0,
            encoding="utf8",
            truncate_ragged_lines=False,
        )
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputFormatError(
            str(p), f"cannot parse as {separator!r}-separated text: {exc}"
        ) from None
    df = df.rename({c: c.strip() for c in df.columns})
    return df.select(pl.all().str.strip_chars())


def load_hierarchies(directory: str | Path, attributes: list[str]) -> list[Hierarchy]:
    """Find ``<attr>.csv`` or ``*hierarchy_<attr>.csv`` for each attribute in ``directory``."""
    d = Path(directory)
    if not d.is_dir():
        raise InvalidParameterError("hierarchies", str(d), "a directory of hierarchy CSVs")
    out = []
    for a in attributes:
        cands = [d / f"{a}.csv", *sorted(d.glob(f"*hierarchy_{a}.csv"))]
        found = [c for c in cands if c.is_file()]
        if not found:
            raise InputFormatError(str(d), f"no hierarchy file for attribute {a!r}")
        out.append(read_hierarchy(found[0], a))
    return out


@dataclass(frozen=True)
class EncodedTable:
    """The quasi-identifiers of a table as leaf indices (``(n, k)`` int32), with the
    hierarchies, the other columns kept verbatim, and the source fingerprint."""

    leaves: npt.NDArray[np.int32]
    hierarchies: tuple[Hierarchy, ...]
    frame: pl.DataFrame
    qi: tuple[str, ...]
    source: str = ""

    @property
    def n(self) -> int:
        return int(self.leaves.shape[0])

    @property
    def heights(self) -> npt.NDArray[np.int64]:
        return np.array([h.height for h in self.hierarchies], dtype=np.int64)

    def subset(self, rows: npt.NDArray[np.int64]) -> EncodedTable:
        return EncodedTable(
            self.leaves[rows], self.hierarchies, self.frame[rows], self.qi, self.source
        )


def encode_table(
    frame: pl.DataFrame, hierarchies: list[Hierarchy], *, source: str = "table"
) -> EncodedTable:
    """Map each quasi-identifier column to leaf indices; unknown values are an error naming
    the first offending line (header = line 1)."""
    cols = []
    for h in hierarchies:
        if h.attribute not in frame.columns:
            raise InputFormatError(
                source, f"no column {h.attribute!r} (columns: {', '.join(frame.columns)})"
            )
        s = frame.get_column(h.attribute)
        mapping = pl.DataFrame(
            {"v": list(h.leaf_index), "i": np.fromiter(h.leaf_index.values(), np.int32)},
            schema={"v": pl.Utf8, "i": pl.Int32},
        )
        idx = pl.DataFrame({"v": s}).join(mapping, on="v", how="left", maintain_order="left")
        leaf = idx.get_column("i")
        if leaf.null_count():
            bad = int(np.flatnonzero(leaf.is_null().to_numpy())[0])
            raise InputFormatError(
                source,
                f"value {s[bad]!r} of column {h.attribute!r} is not in its hierarchy "
                f"{h.source or h.attribute}",
                line=bad + 2,
            )
        cols.append(leaf.to_numpy().astype(np.int32))
    leaves = np.stack(cols, axis=1) if cols else np.empty((frame.height, 0), np.int32)
    return EncodedTable(
        leaves, tuple(hierarchies), frame, tuple(h.attribute for h in hierarchies), source
    )
