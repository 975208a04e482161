"""Graphs from SNAP-style edge lists, as CSR adjacency matrices.

Shared by every family that works on social graphs (``social/`` recommendations, ``attacks/``
lookahead), so that both read the same file into the same graph.

Format (SNAP): one edge per line, two integer node ids separated by tabs or spaces; lines that
start with ``#`` are comments; blank lines are ignored; ``.gz`` files are read transparently.
A line that is not two integers is an :class:`InputFormatError` naming the file and line.

Decisions:

* **Self-loops** (``u u``) are dropped and counted (``info["self_loops"]``): none of the
  graph algorithms here gives them a meaning (a node is not its own neighbour).
* **Duplicate edges** are merged and counted (``info["duplicate_edges"]``); for an undirected
  graph, ``u v`` and ``v u`` are the same edge, so a directed file read with
  ``undirected=True`` reports its reciprocated pairs as duplicates. wiki-Vote read this way has
  7,115 nodes and 100,762 edges, the figures of Korolova's thesis §5.5.
* Node ids are relabelled to ``0..n-1`` in increasing order of the original id;
  ``Graph.node_ids[i]`` is the original id of node ``i``. Only nodes that occur in some kept
  edge exist (a node seen only in a self-loop does not).
* The adjacency is a ``scipy.sparse.csr_matrix`` of ``int8`` ones with sorted indices,
  symmetric when undirected; ``adjacency @ x`` is one sparse mat-vec.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import scipy.sparse as sp

from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.files import file_sha256

__all__ = ["Graph", "read_edge_list", "graph_from_edges"]


@dataclass(frozen=True)
class Graph:
    """A simple graph: CSR adjacency (no self-loops, no multi-edges) and the original node ids."""

    adjacency: sp.csr_matrix
    node_ids: npt.NDArray[np.int64]
    directed: bool
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def n_nodes(self) -> int:
        return int(self.adjacency.shape[0])

    @property
    def n_edges(self) -> int:
        """Number of edges (undirected: each unordered pair once)."""
        nnz = int(self.adjacency.nnz)
        return nnz if self.directed else nnz // 2

    @property
    def degrees(self) -> npt.NDArray[np.int64]:
        """Out-degree (undirected: degree) of every node."""
        return np.diff(self.adjacency.indptr).astype(np.int64)

    def neighbors(self, i: int) -> npt.NDArray[np.int32]:
        a = self.adjacency
        return a.indices[a.indptr[i] : a.indptr[i + 1]]

    def describe(self) -> dict[str, Any]:
        """The figures a ledger or report records about the graph."""
        deg = self.degrees
        return {
            **self.info,
            "nodes": self.n_nodes,
            "edges": self.n_edges,
            "directed": self.directed,
            "max_degree": int(deg.max()) if deg.size else 0,
        }


def graph_from_edges(
    src: npt.ArrayLike,
    dst: npt.ArrayLike,
    *,
    undirected: bool,
    n_nodes: int | None = None,
    info: dict[str, Any] | None = None,
) -> Graph:
    """A :class:`Graph` from two arrays of node ids.

    With ``n_nodes`` the ids must already be ``0..n_nodes-1`` (isolated nodes are kept);
    without it they are relabelled to ``0..n-1`` over the ids that occur in kept edges.
    Self-loops are dropped and duplicate edges merged; both are counted in ``info``.
    """
    s = np.asarray(src, dtype=np.int64).ravel()
    d = np.asarray(dst, dtype=np.int64).ravel()
    if s.shape != d.shape:
        raise InvalidParameterError("dst", f"{d.size} ids", f"as many ids as src ({s.size})")
    loops = s == d
    n_loops = int(loops.sum())
    s, d = s[~loops], d[~loops]
    if n_nodes is None:
        ids, inv = np.unique(np.concatenate([s, d]), return_inverse=True)
        s, d = inv[: s.size], inv[s.size :]
        n = int(ids.size)
    else:
        if n_nodes < 0:
            raise InvalidParameterError("n_nodes", n_nodes, "an integer >= 0")
        if s.size and (min(s.min(), d.min()) < 0 or max(s.max(), d.max()) >= n_nodes):
            raise InvalidParameterError("src/dst", "ids out of range", f"ids in [0, {n_nodes})")
        ids = np.arange(n_nodes, dtype=np.int64)
        n = n_nodes
    if undirected:
        s, d = np.minimum(s, d), np.maximum(s, d)
    key = np.unique(s * max(n, 1) + d)
    n_dup = int(s.size - key.size)
    s, d = key // max(n, 1), key % max(n, 1)
    if undirected:
        s, d = np.concatenate([s, d]), np.concatenate([d, s])
    adj = sp.csr_matrix((np.ones(s.size, dtype=np.int8), (s, d)), shape=(n, n), dtype=np.int8)
    adj.sort_indices()
    meta = dict(info or {})
    meta.update({"self_loops": n_loops, "duplicate_edges": n_dup})
    return Graph(adjacency=adj, node_ids=ids.astype(np.int64), directed=not undirected, info=meta)


def read_edge_list(path: str | os.PathLike[str], *, undirected: bool) -> Graph:
    """Read a SNAP edge list (``#`` comments, tab or space separated, ``.gz`` ok)."""
    p = Path(path)
    if not p.is_file():
        raise InputFormatError(str(p), "no such file")
    try:
        raw = pl.read_csv(
            p,
            has_header=False,
            separator="\x1f",
            quote_char=None,
            new_columns=["line"],
            schema_overrides={"line": pl.String},
            infer_schema=False,
        )
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as e:
        raise InputFormatError(
            str(p),
            "cannot be read as a text edge list: not UTF-8 text, or a damaged .gz "
            "(SEARCHVEIL_DEBUG=1 shows the reader's own message)",
        ) from e
    lines = raw.with_row_index("lineno", offset=1).with_columns(pl.col("line").str.strip_chars())
    lines = lines.filter(
        pl.col("line").is_not_null() & (pl.col("line") != "") & ~pl.col("line").str.starts_with("#")
    )
    parts = lines.with_columns(
        pl.col("line").str.extract_groups(r"^(-?\d+)\s+(-?\d+)$").alias("g")
    ).unnest("g")
    bad = parts.filter(pl.col("1").is_null())
    if bad.height:
        row = bad.row(0, named=True)
        raise InputFormatError(
            str(p),
            f"expected two integer node ids separated by whitespace, got {row['line'][:80]!r}",
            line=int(row["lineno"]),
        )
    src = parts["1"].cast(pl.Int64, strict=False)
    dst = parts["2"].cast(pl.Int64, strict=False)
    if src.null_count() or dst.null_count():
        raise InputFormatError(str(p), "a node id does not fit in a 64-bit integer")
    info = {"file": p.name, "sha256": file_sha256(p), "edge_lines": int(parts.height)}
    return graph_from_edges(src.to_numpy(), dst.to_numpy(), undirected=undirected, info=info)
