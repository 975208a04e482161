"""Link-analysis utility functions for social recommendations and their edge sensitivity.

Korolova (2012), thesis chapter 5: §5.2.1 (utility vector u^{G,r}), §5.3.3 (common neighbours,
weighted paths ``score(s, y) = Σ_{l≥2} γ^{l−2} |paths^{(l)}_{(s,y)}|``), §5.5.1 (paths of length
≤ 3, candidates are the nodes the target is not connected to), Definition 7 (sensitivity
``S(u) = max_r max_{G=G'+e} ||u^{G,r} − u^{G',r}||_1``).

Decisions (derivations in docs/privacy/social.md):

* **Candidates.** As in §5.5.1, the nodes that may be recommended to ``r`` are every node except
  ``r`` and its neighbours. The utility vector is indexed by candidates only.
* **Neighbouring relation.** §5.2.2's relaxed relation, which §5.5 uses: graphs differ in one
  edge *not incident to the target* (the target knows its own edges). The candidate set is then
  the same on both graphs, so utility vectors are comparable coordinate by coordinate.
* **Paths are walks.** ``A²`` and ``A³`` count walks; for a candidate ``y`` (not ``r``, not a
  neighbour of ``r``) every walk of length 2 or 3 from ``r`` to ``y`` is a simple path, so the
  counts are the thesis's path counts exactly.
* **Exact integer utilities.** γ is a rational ``p/q`` (parsed from its decimal text), and the
  utility is stored as the integer ``q·#P2 + p·#P3`` (= ``q · utility``). Mechanisms work on
  these integers, so no rounding enters the privacy analysis.
* **Sensitivity.** Common neighbours: ``S = 1`` for any graph. Weighted paths: the maximum over
  all graphs depends on the degree, so it is taken over graphs with maximum degree ≤ ``D``, a
  *declared public* bound (a graph violating it is an error): ``S = 1 + γ(2D − 3)`` (ℓ1) and
  ``1 + γ(D − 2)`` (ℓ∞), for D ≥ 2. Both utilities only grow when an edge is added
  (monotone), which the exponential mechanism's privacy proof with ``exp(ε u / S)`` needs.
* Undirected graphs only: the derivation is for undirected edges (§5.5 makes G_WV undirected).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from searchveil.errors import InvalidParameterError
from searchveil.io.graphs import Graph
from searchveil.validate import parse_name

__all__ = [
    "CommonNeighbours",
    "WeightedPaths",
    "TargetUtilities",
    "UtilityFunction",
    "parse_gamma",
    "target_utilities",
    "utility_from_name",
    "UtilityName",
    "parse_utility",
]

#: the array types of the social package
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def parse_gamma(gamma: str | float | Fraction) -> Fraction:
    """γ as an exact rational: a decimal string or float is read as the decimal it prints as."""
    try:
        g = gamma if isinstance(gamma, Fraction) else Fraction(str(gamma))
    except (ValueError, ZeroDivisionError):
        raise InvalidParameterError("gamma", gamma, "a rational number in (0, 1)") from None
    if not (0 < g < 1) or g.denominator > 10**9:
        raise InvalidParameterError(
            "gamma", gamma, "a rational number in (0, 1), denominator ≤ 1e9"
        )
    return g


@dataclass(frozen=True)
class CommonNeighbours:
    """``u_i = C(i, r)``, the number of common neighbours (§5.2.4); sensitivity 1."""

    name: str = field(default="common_neighbours", init=False)

    @property
    def scale(self) -> int:
        """Integer utilities are ``scale ·`` utility."""
        return 1

    def l1_sensitivity(self) -> Fraction:
        return Fraction(1)

    def linf_sensitivity(self) -> Fraction:
        return Fraction(1)

    def check_graph(self, graph: Graph) -> None:
        _check_undirected(graph)

    def integer_rows(self, adj: sp.csr_matrix, targets: IntArray) -> sp.csr_matrix:
        """Rows ``scale · u^{G,r}`` over all nodes (not yet restricted to candidates)."""
        return sp.csr_matrix(adj[targets] @ adj)

    def describe(self) -> dict[str, Any]:
        return {
            "utility": self.name,
            "l1_sensitivity": float(self.l1_sensitivity()),
            "linf_sensitivity": float(self.linf_sensitivity()),
        }


@dataclass(frozen=True)
class WeightedPaths:
    """``u_i = #P2(r,i) + γ·#P3(r,i)`` (§5.3.3.2 truncated at length 3 as in §5.5.1).

    ``degree_bound`` is the public maximum degree D the sensitivity is derived for.
    """

    gamma: Fraction
    degree_bound: int
    name: str = field(default="weighted_paths", init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "gamma", parse_gamma(self.gamma))
        if (
            not isinstance(self.degree_bound, int | np.integer)
            or isinstance(self.degree_bound, bool)
            or self.degree_bound < 2
        ):
            raise InvalidParameterError("degree_bound", self.degree_bound, "an integer >= 2")

    @property
    def scale(self) -> int:
        return self.gamma.denominator

    def l1_sensitivity(self) -> Fraction:
        """``1 + γ(2D − 3)``: docs/privacy/social.md, case "one endpoint adjacent to r"."""
        return 1 + self.gamma * (2 * int(self.degree_bound) - 3)

    def linf_sensitivity(self) -> Fraction:
        return 1 + self.gamma * (int(self.degree_bound) - 2)

    def check_graph(self, graph: Graph) -> None:
        _check_undirected(graph)
        dmax = int(graph.degrees.max()) if graph.n_nodes else 0
        if dmax > self.degree_bound:
            raise InvalidParameterError(
                "degree_bound",
                self.degree_bound,
                f"an integer >= the graph's maximum degree {dmax} (the sensitivity holds only "
                "for graphs within the declared bound)",
            )

    def integer_rows(self, adj: sp.csr_matrix, targets: IntArray) -> sp.csr_matrix:
        p2 = sp.csr_matrix(adj[targets] @ adj)
        p3 = sp.csr_matrix(p2 @ adj)
        g = self.gamma
        return sp.csr_matrix(p2 * g.denominator + p3 * g.numerator)

    def describe(self) -> dict[str, Any]:
        return {
            "utility": self.name,
            "gamma": str(self.gamma),
            "gamma_float": float(self.gamma),
            "max_path_length": 3,
            "degree_bound": int(self.degree_bound),
            "l1_sensitivity": float(self.l1_sensitivity()),
            "linf_sensitivity": float(self.linf_sensitivity()),
        }


UtilityFunction = CommonNeighbours | WeightedPaths


class UtilityName(StrEnum):
    """The utility functions of thesis §5.4."""

    COMMON_NEIGHBOURS = "common_neighbours"
    WEIGHTED_PATHS = "weighted_paths"


_UTILITY_ALIASES = {
    "common_neighbors": UtilityName.COMMON_NEIGHBOURS,
    "cn": UtilityName.COMMON_NEIGHBOURS,
    "wp": UtilityName.WEIGHTED_PATHS,
}


def parse_utility(name: UtilityName | str) -> UtilityName:
    """A utility's name (any case, ``-`` for ``_``, or an alias: ``cn``, ``wp``,
    ``common_neighbors``) as a :class:`UtilityName`; anything else raises
    :class:`InvalidParameterError`."""
    return parse_name("utility", name, UtilityName, _UTILITY_ALIASES)


def utility_from_name(
    name: UtilityName | str, *, gamma: str | float | None = None, degree_bound: int | None = None
) -> UtilityFunction:
    """``common_neighbours`` (alias ``cn``) or ``weighted_paths`` (``wp``; needs γ and D)."""
    if parse_utility(name) is UtilityName.COMMON_NEIGHBOURS:
        return CommonNeighbours()
    if gamma is None:
        raise InvalidParameterError("gamma", None, "a rational in (0, 1) for weighted_paths")
    if degree_bound is None:
        raise InvalidParameterError(
            "degree_bound", None, "the public maximum degree D for weighted_paths"
        )
    return WeightedPaths(gamma=parse_gamma(gamma), degree_bound=int(degree_bound))


def _check_undirected(graph: Graph) -> None:
    if graph.directed:
        raise InvalidParameterError(
            "graph", "directed", "an undirected graph (read it with undirected=True)"
        )


@dataclass(frozen=True)
class TargetUtilities:
    """The utility vector of one target over its candidates, stored sparsely.

    ``nodes``/``values``: candidates with non-zero utility and their integer utilities
    (``value = scale · utility``); the other ``n_candidates − len(nodes)`` candidates have
    utility 0. ``neighbour_common``: ``C(a, r)`` for each neighbour ``a`` of ``r`` (used for
    the Corollary 1 construction).
    """

    target: int
    degree: int
    n_nodes: int
    n_candidates: int
    nodes: IntArray
    values: IntArray
    scale: int
    neighbours: IntArray
    neighbour_common: IntArray

    @property
    def n_zero(self) -> int:
        return self.n_candidates - int(self.nodes.size)

    @property
    def max_value(self) -> int:
        return int(self.values.max()) if self.values.size else 0

    def levels(self) -> tuple[IntArray, IntArray]:
        """Distinct integer utilities (descending) and how many candidates have each."""
        vals, counts = np.unique(self.values, return_counts=True)
        vals, counts = vals[::-1].astype(np.int64), counts[::-1].astype(np.int64)
        if self.n_zero > 0:
            vals = np.append(vals, np.int64(0))
            counts = np.append(counts, np.int64(self.n_zero))
        return vals, counts

    def dense(self) -> tuple[IntArray, IntArray]:
        """All candidates (ascending node index) and their integer utilities (small graphs)."""
        excl = np.zeros(self.n_nodes, dtype=bool)
        excl[self.target] = True
        excl[self.neighbours] = True
        full = np.zeros(self.n_nodes, dtype=np.int64)
        full[self.nodes] = self.values
        cand = np.flatnonzero(~excl)
        return cand, full[cand]


def _rows_to_targets(
    rows: sp.csr_matrix, adj: sp.csr_matrix, targets: IntArray, scale: int, a2_rows: sp.csr_matrix
) -> list[TargetUtilities]:
    out: list[TargetUtilities] = []
    n = adj.shape[0]
    for j, r in enumerate(targets):
        r = int(r)
        nb = adj.indices[adj.indptr[r] : adj.indptr[r + 1]].astype(np.int64)
        lo, hi = rows.indptr[j], rows.indptr[j + 1]
        cols = rows.indices[lo:hi].astype(np.int64)
        vals = rows.data[lo:hi].astype(np.int64)
        excluded = np.zeros(cols.size, dtype=bool)
        if cols.size:
            excluded = np.isin(cols, nb, assume_unique=False) | (cols == r) | (vals == 0)
        a_lo, a_hi = a2_rows.indptr[j], a2_rows.indptr[j + 1]
        a_cols = a2_rows.indices[a_lo:a_hi]
        a_vals = a2_rows.data[a_lo:a_hi]
        common = np.zeros(nb.size, dtype=np.int64)
        if nb.size and a_cols.size:
            pos = np.searchsorted(a_cols, nb)
            pos = np.minimum(pos, a_cols.size - 1)
            hit = a_cols[pos] == nb
            common[hit] = a_vals[pos[hit]]
        out.append(
            TargetUtilities(
                target=r,
                degree=int(nb.size),
                n_nodes=int(n),
                n_candidates=int(n - 1 - nb.size),
                nodes=cols[~excluded],
                values=vals[~excluded],
                scale=scale,
                neighbours=nb,
                neighbour_common=common,
            )
        )
    return out


def _int_adjacency(graph: Graph) -> sp.csr_matrix:
    adj = sp.csr_matrix(graph.adjacency, dtype=np.int64)
    adj.sort_indices()
    return adj


def target_utilities(
    graph: Graph,
    utility: UtilityFunction,
    targets: Sequence[int] | IntArray,
    *,
    chunk: int = 256,
) -> Iterator[TargetUtilities]:
    """Utility vectors of ``targets``, computed ``chunk`` targets at a time by sparse
    mat-mat products (one per path length)."""
    utility.check_graph(graph)
    t = np.asarray(targets, dtype=np.int64).ravel()
    if t.size and (t.min() < 0 or t.max() >= graph.n_nodes):
        raise InvalidParameterError(
            "targets", "out of range", f"node indices in [0, {graph.n_nodes})"
        )
    if chunk < 1:
        raise InvalidParameterError("chunk", chunk, "an integer >= 1")
    adj = _int_adjacency(graph)
    for start in range(0, t.size, chunk):
        part = t[start : start + chunk]
        rows = utility.integer_rows(adj, part)
        rows.sort_indices()
        a2 = rows if isinstance(utility, CommonNeighbours) else sp.csr_matrix(adj[part] @ adj)
        a2.sort_indices()
        yield from _rows_to_targets(rows, adj, part, utility.scale, a2)


def brute_force_utilities(
    adj_dense: npt.NDArray[np.int64], utility: UtilityFunction, target: int
) -> npt.NDArray[np.float64]:
    """Reference: utilities of every node for ``target`` by explicit simple-path enumeration
    (tiny graphs; tests). Non-candidates get NaN."""
    n = adj_dense.shape[0]
    nb = set(np.flatnonzero(adj_dense[target]).tolist())
    out = np.full(n, math.nan)
    gamma = float(utility.gamma) if isinstance(utility, WeightedPaths) else 0.0
    for y in range(n):
        if y == target or y in nb:
            continue
        p2 = sum(1 for a in nb if adj_dense[a, y])
        p3 = 0
        for a in nb:
            for b in np.flatnonzero(adj_dense[a]).tolist():
                if b not in (target, y) and adj_dense[b, y]:
                    p3 += 1
        out[y] = p2 + gamma * p3
    return out
