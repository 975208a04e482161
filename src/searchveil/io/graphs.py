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
* **A public node universe** (:class:`NodeUniverse`, ``read_edge_list(..., universe=)``): when
  the set of nodes is public (a node-list file, ids ``0..N−1``, or the graph file's own node set
  *declared* public), the graph has exactly those nodes — isolated ones included — indexed in
  increasing id order, and an edge naming a node outside it is an :class:`InputFormatError`.
  A release whose output domain is the node set (social recommendations) needs this: taken from
  the private edge list, a node seen in one edge would exist only when that edge does.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import scipy.sparse as sp

from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.files import file_sha256

__all__ = [
    "Graph",
    "NodeUniverse",
    "read_edge_list",
    "read_node_list",
    "node_universe_range",
    "node_universe_of_graph_file",
    "graph_from_edges",
]


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


@dataclass(frozen=True)
class NodeUniverse:
    """A *public* set of node ids (sorted, unique) and the public ledger's record of it (role,
    where it comes from, its size and, when it was read from a file, a SHA-256)."""

    ids: npt.NDArray[np.int64]
    record: dict[str, Any]

    @property
    def size(self) -> int:
        return int(self.ids.size)

    def index_of(self, node_ids: npt.ArrayLike, *, what: str = "target") -> npt.NDArray[np.int64]:
        """Positions of ``node_ids`` in the universe (a typed error for an id outside it)."""
        ids = np.asarray(node_ids, dtype=np.int64).ravel()
        pos = np.minimum(np.searchsorted(self.ids, ids), max(self.size - 1, 0))
        bad = ids[(self.ids[pos] != ids)] if self.size else ids
        if bad.size:
            raise InvalidParameterError(what, int(bad[0]), "a node id of the public node universe")
        return pos.astype(np.int64)


def _ids_sha256(ids: npt.NDArray[np.int64]) -> str:
    """SHA-256 of the canonical text of a node set: the sorted ids, one per line."""
    text = "".join(f"{int(x)}\n" for x in ids)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _universe(ids: npt.ArrayLike, **record: Any) -> NodeUniverse:
    arr = np.unique(np.asarray(ids, dtype=np.int64))
    if arr.size == 0:
        raise InvalidParameterError("nodes", 0, "a node universe with at least one node")
    return NodeUniverse(ids=arr, record={"role": "node universe", **record, "nodes": int(arr.size)})


def node_universe_range(n: int) -> NodeUniverse:
    """The public universe ``0..n−1`` (``--nodes N``)."""
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or not 1 <= n <= 2**31:
        raise InvalidParameterError("nodes", n, "an integer N in [1, 2^31] (ids 0..N-1)")
    arr = np.arange(int(n), dtype=np.int64)
    return NodeUniverse(
        ids=arr, record={"role": "node universe", "source": f"ids 0..{n - 1} (--nodes {n})",
                         "nodes": int(n)},
    )  # fmt: skip


def read_node_list(path: str | os.PathLike[str]) -> NodeUniverse:
    """A public node-list file: one integer node id per line (``#`` comments and blank lines
    ignored, duplicates merged). The ledger records its name, SHA-256 and size."""
    p = Path(path)
    if not p.is_file():
        raise InputFormatError(str(p), "no such node-list file")
    ids: list[int] = []
    with p.open("r", encoding="utf-8", errors="strict") as fh:
        try:
            for i, line in enumerate(fh, start=1):
                t = line.strip()
                if not t or t.startswith("#"):
                    continue
                try:
                    ids.append(int(t))
                except ValueError:
                    raise InputFormatError(
                        str(p), f"expected one integer node id, got {t[:80]!r}", line=i
                    ) from None
        except UnicodeDecodeError as e:
            raise InputFormatError(str(p), f"not UTF-8 text: {e}") from None
    return _universe(ids, file=p.name, sha256=file_sha256(p), source="node-list file")


def node_universe_of_graph_file(path: str | os.PathLike[str]) -> NodeUniverse:
    """The node ids that occur in a graph file's edges, which the data holder *declares*
    public (``--public-node-set``): the ledger records the size and the SHA-256 of the sorted id
    list, never the graph file's own hash."""
    src, dst, _ = _edge_arrays(Path(path))
    arr = np.unique(np.concatenate([src, dst]))
    return _universe(
        arr, sha256=_ids_sha256(arr),
        source="the node ids of the graph file, declared public by the data holder "
        "(--public-node-set); sha256 of the sorted ids, one per line",
        declared_by="data holder",
    )  # fmt: skip


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


def _edge_arrays(p: Path) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], Any]:
    """The two id columns of a SNAP edge list and the line numbers of its edges."""
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
    return src.to_numpy(), dst.to_numpy(), parts.get_column("lineno").to_numpy()


def read_edge_list(
    path: str | os.PathLike[str], *, undirected: bool, universe: NodeUniverse | None = None
) -> Graph:
    """Read a SNAP edge list (``#`` comments, tab or space separated, ``.gz`` ok).

    ``universe``: a public node set; the graph then has exactly its nodes (isolated ones
    included, node ``i`` = ``universe.ids[i]``) and an edge naming another id is an error."""
    p = Path(path)
    src, dst, lineno = _edge_arrays(p)
    info = {"file": p.name, "sha256": file_sha256(p), "edge_lines": int(src.size)}
    if universe is None:
        return graph_from_edges(src, dst, undirected=undirected, info=info)
    ids = universe.ids
    n = universe.size
    ps = np.minimum(np.searchsorted(ids, src), n - 1)
    pd_ = np.minimum(np.searchsorted(ids, dst), n - 1)
    ok = (ids[ps] == src) & (ids[pd_] == dst)
    if not ok.all():
        i = int(np.argmin(ok))
        x = int(src[i]) if ids[ps[i]] != src[i] else int(dst[i])
        raise InputFormatError(
            str(p),
            f"node id {x} is not in the public node universe ({universe.size:,} nodes, "
            f"{universe.record.get('source') or universe.record.get('file')})",
            line=int(lineno[i]),
        )
    g = graph_from_edges(ps, pd_, undirected=undirected, n_nodes=n, info=info)
    return replace(g, node_ids=ids.astype(np.int64))
