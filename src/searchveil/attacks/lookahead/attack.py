"""Lookahead link-stealing attacks on a social graph (Korolova thesis §6.2–6.3).

**Model (thesis §6.2.2, Definition 11).** A social network has *lookahead* ``ℓ`` if a user can
see all edges incident to the nodes within distance ``ℓ`` of him. An attacker who *bribes* a
user (gains access to the account) therefore learns every edge incident to a node within
distance ``ℓ`` of that user. In the thesis's words (§6.2.3), "each time the attacker gains
access to or bribes a user account, he immediately *covers* all nodes that are at a distance of
no more than the lookahead ℓ"; nodes at distance ``ℓ + 1`` are *seen* (their existence is
known) but not covered.

**Coverage, as implemented (the thesis's operational definition).** With ``B`` the bribed set,
node ``u`` is covered iff ``dist(u, B) <= ℓ`` (the bribed nodes themselves included, as in
§6.4.2.1: ``D_ℓ(B) = |∪_{0<=i<=ℓ} N_i(B)|``), and seen iff ``dist(u, B) <= ℓ + 1``. Coverage is
(number of covered nodes) / n. Decision: §6.2.3 also says a node is covered "iff the attacker
knows precisely which nodes it is connected to"; a node all of whose neighbours are covered
is known in that stronger sense too (when degrees are public) but the thesis's experiments and
analysis count only ``dist <= ℓ``, and so do we: our coverage is the thesis's (a lower bound on
what an attacker can infer).

**Strategies (§6.2.3), each using only what the thesis says the attacker may see.**

* ``benchmark`` — Benchmark-Greedy: knows ``G``; bribes the node covering the most
  not-yet-covered nodes, ``|ball_ℓ(v) \\ covered|`` (a greedy set cover; the benchmark, not a
  feasible attack for ℓ > 1).
* ``greedy`` — Degree-Greedy: knows the user list, every degree, and what bribed accounts
  reveal; bribes the node of maximum *unseen degree* = degree minus the number of its edges
  already known. An edge is known iff one of its endpoints is covered, so a covered node has
  unseen degree 0 and an uncovered node's unseen degree is its number of uncovered neighbours.
  Candidates are the uncovered nodes (a covered node's unseen degree is 0; choosing an
  uncovered one when every unseen degree is 0 still makes progress).
* ``highest`` — Highest-Degree: bribes in descending order of degree (ties in a random order
  drawn once from ``rng``), whether or not the next node is already covered (the thesis's
  literal rule and the one Corollary 3 analyses).
* ``random`` — Uniform-Random: bribes a uniformly random permutation of the users (without
  replacement, covered or not; Corollary 2).
* ``crawler`` — Degree-Greedy-Crawler: knows degrees but not the user list; bribes the seen,
  uncovered node of maximum unseen degree. Decisions the thesis leaves open: the first bribe is
  a uniformly random node (the attacker's own account); if no seen node is left uncovered
  (the attacker's component is covered) it restarts at a uniformly random uncovered node
  (counted in ``stats["restarts"]``).

Ties among equal keys (Benchmark, Greedy, Crawler) go to the lowest node index.

**Algorithms.** State is the array ``dist[u] = min(dist(u, B), ℓ + 2)``. Bribing ``b`` runs a
BFS from ``b`` that only continues through nodes whose distance strictly decreases, so each
node's distance is lowered at most ``ℓ + 2`` times and the whole attack costs ``O(ℓ m)`` for the
coverage updates (no rescans). Greedy/Crawler keep each node's number of uncovered neighbours,
updated from the newly covered nodes. Benchmark's gain ``|ball_ℓ(v) \\ covered|`` is maintained
exactly for ℓ <= 2 from the sparse ball matrix (``A + I``, or ``(A + I)²`` when ``Σ deg²`` is at
most 4·10⁷): the relation is symmetric, so a newly covered ``u`` lowers the gain of exactly the
nodes of ``ball_ℓ(u)``; for ℓ >= 3 it is computed on demand, with upper-bound keys (exact
``|ball_2|`` then union bounds, or walk counts): for ℓ = 3 as one gather of ``ball_2`` rows
(``ball_3(v) = ∪_{u ∈ N[v]} ball_2(u)``) when that is smaller than 2m, else by a BFS that does
not continue through a node ``w`` reached at depth ``j`` with ``dist[w] <= j`` (everything
beyond it is covered). All three use lazy-greedy priority queues: keys only decrease, so a
popped entry whose recomputed key is still >= the best remaining stale key is a true maximum.
Highest and Random have fixed orders, so their whole coverage curve is computed at once: the
first bribe that covers ``u`` is ``min`` over ``ball_ℓ(u)`` of the bribe ranks, i.e. ``ℓ``
rounds of "min over neighbours" (vectorised with ``np.minimum.reduceat`` on the CSR arrays), and
the coverage after ``k`` bribes is a cumulative histogram.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from searchveil.errors import InvalidParameterError
from searchveil.io.graphs import Graph
from searchveil.rng import RandomSource
from searchveil.validate import check_int, check_probability, parse_choice

__all__ = [
    "STRATEGIES",
    "Strategy",
    "STRATEGY_NAMES",
    "MAX_LOOKAHEAD",
    "AttackRun",
    "run_attack",
    "normalize_strategy",
    "coverage_of",
]


class Strategy(StrEnum):
    """The five bribing strategies of §6.2.3 (:data:`STRATEGY_NAMES`: the thesis's names)."""

    BENCHMARK = "benchmark"
    GREEDY = "greedy"
    HIGHEST = "highest"
    RANDOM = "random"
    CRAWLER = "crawler"


STRATEGIES: tuple[str, ...] = tuple(s.value for s in Strategy)
STRATEGY_NAMES: dict[str, str] = {
    "benchmark": "Benchmark-Greedy",
    "greedy": "Degree-Greedy",
    "highest": "Highest-Degree",
    "random": "Uniform-Random",
    "crawler": "Degree-Greedy-Crawler",
}
_ALIASES = {v.lower(): k for k, v in STRATEGY_NAMES.items()}
MAX_LOOKAHEAD = 20

IntArray = npt.NDArray[np.int64]


def normalize_strategy(name: str) -> Strategy:
    """``benchmark`` … ``crawler``, also accepting the thesis's long names (any case)."""
    if isinstance(name, Strategy):
        return name
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    return parse_choice("strategy", key, Strategy)


@dataclass(frozen=True)
class AttackRun:
    """One attack: the bribes in order and the number of covered nodes after each."""

    strategy: str
    lookahead: int
    n_nodes: int
    bribed: IntArray
    covered: IntArray
    target_coverage: float
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def final_coverage(self) -> float:
        return float(self.covered[-1]) / self.n_nodes if self.covered.size else 0.0

    def bribes_needed(self, coverage: float) -> int | None:
        """Fewest bribes after which coverage >= ``coverage`` (None if never reached)."""
        c = check_probability("coverage", coverage, open_low=False, open_high=False)
        need = _needed(c, self.n_nodes)
        k = int(np.searchsorted(self.covered, need, side="left"))
        return k + 1 if k < self.covered.size else None

    def fraction_needed(self, coverage: float) -> float | None:
        """``f`` of the thesis: bribes needed for ``coverage``, as a fraction of n."""
        k = self.bribes_needed(coverage)
        return None if k is None else k / self.n_nodes

    def curve(self, levels: npt.ArrayLike) -> list[dict[str, Any]]:
        """``[{coverage, bribes, fraction}]`` at the given coverage levels."""
        out = []
        for c in np.asarray(levels, dtype=np.float64).ravel():
            k = self.bribes_needed(float(c))
            out.append(
                {
                    "coverage": float(c),
                    "bribes": k,
                    "fraction": None if k is None else k / self.n_nodes,
                }
            )
        return out

    def summary(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "strategy_name": STRATEGY_NAMES[self.strategy],
            "lookahead": self.lookahead,
            "nodes": self.n_nodes,
            "bribes": int(self.bribed.size),
            "final_coverage": self.final_coverage,
            "target_coverage": self.target_coverage,
            "stats": dict(self.stats),
        }


def _needed(coverage: float, n: int) -> int:
    """Smallest covered count with count / n >= coverage (float-safe)."""
    need = int(np.ceil(coverage * n - 1e-9))
    return max(0, min(n, need))


# -- graph plumbing -----------------------------------------------------------------------------
def _csr(graph: Graph) -> tuple[IntArray, npt.NDArray[np.int32], IntArray]:
    if graph.directed:
        raise InvalidParameterError(
            "graph", "directed", "an undirected graph (read it with undirected=True)"
        )
    a = graph.adjacency
    indptr = np.asarray(a.indptr, dtype=np.int64)
    indices = np.asarray(a.indices, dtype=np.int32)
    return indptr, indices, np.diff(indptr)


def _gather(indptr: IntArray, indices: npt.NDArray[np.int32], nodes: IntArray) -> IntArray:
    """Concatenated neighbour lists of ``nodes`` (with repeats), vectorised."""
    if nodes.size == 1:
        v = int(nodes[0])
        return indices[indptr[v] : indptr[v + 1]].astype(np.int64)
    starts = indptr[nodes]
    lens = indptr[nodes + 1] - starts
    total = int(lens.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    ends = np.cumsum(lens)
    offs = np.repeat(starts - ends + lens, lens) + np.arange(total, dtype=np.int64)
    return indices[offs].astype(np.int64)


def _dedupe(nodes: IntArray, scratch: IntArray) -> IntArray:
    """Distinct values of ``nodes`` without sorting (``scratch``: an int64 array of size n)."""
    if nodes.size <= 1:
        return nodes
    pos = np.arange(nodes.size, dtype=np.int64)
    scratch[nodes] = pos
    return nodes[scratch[nodes] == pos]


class _State:
    """``dist[u] = min(dist(u, B), ℓ + 2)`` with incremental updates."""

    def __init__(self, graph: Graph, lookahead: int) -> None:
        self.indptr, self.indices, self.deg = _csr(graph)
        self.n = graph.n_nodes
        self.ell = lookahead
        self.inf = lookahead + 2
        self.dist = np.full(self.n, self.inf, dtype=np.int16)
        self.n_covered = 0
        self.scratch = np.zeros(self.n, dtype=np.int64)

    def bribe(self, b: int) -> tuple[IntArray, IntArray]:
        """Bribe ``b``; returns (newly covered nodes, newly seen nodes)."""
        ell, dist = self.ell, self.dist
        old = int(dist[b])
        cov: list[IntArray] = []
        seen: list[IntArray] = []
        if old == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        node = np.array([b], dtype=np.int64)
        if old > ell:
            cov.append(node)
        if old > ell + 1:
            seen.append(node)
        dist[b] = 0
        frontier = node
        for j in range(1, ell + 2):
            nb = _gather(self.indptr, self.indices, frontier)
            nb = nb[dist[nb] > j]
            if nb.size == 0:
                break
            nb = _dedupe(nb, self.scratch)
            prev = dist[nb]
            dist[nb] = j
            if j <= ell:
                cov.append(nb[prev > ell])
            seen.append(nb[prev > ell + 1])
            frontier = nb
        newly = np.concatenate(cov) if cov else np.empty(0, dtype=np.int64)
        self.n_covered += int(newly.size)
        return newly, (np.concatenate(seen) if seen else np.empty(0, dtype=np.int64))


# -- strategies ---------------------------------------------------------------------------------
def run_attack(
    graph: Graph,
    *,
    strategy: str,
    lookahead: int,
    rng: RandomSource,
    target_coverage: float = 0.99,
    max_bribes: int | None = None,
) -> AttackRun:
    """Run one bribing strategy until ``target_coverage`` (fraction of nodes covered) is reached,
    ``max_bribes`` bribes were made, or no further progress is possible.

    ``rng`` supplies the attack's own randomness (Random's order, Highest's tie order,
    Crawler's start); these simulations are not privacy mechanisms, so a seeded source is fine.
    """
    s = normalize_strategy(strategy)
    ell = check_int("lookahead", lookahead, minimum=0, maximum=MAX_LOOKAHEAD)
    target = check_probability("target_coverage", target_coverage, open_high=False)
    n = graph.n_nodes
    if n == 0:
        raise InvalidParameterError("graph", "0 nodes", "a graph with at least one node")
    limit = n if max_bribes is None else check_int("max_bribes", max_bribes, minimum=1)
    need = _needed(target, n)
    if s in ("highest", "random"):
        return _fixed_order(graph, s, ell, rng, target, need, limit)
    return _adaptive(graph, s, ell, rng, target, need, limit)


def _fixed_order(
    graph: Graph, s: str, ell: int, rng: RandomSource, target: float, need: int, limit: int
) -> AttackRun:
    indptr, indices, deg = _csr(graph)
    n = graph.n_nodes
    gen = rng.numpy_generator()
    if s == "random":
        order = gen.permutation(n).astype(np.int64)
    else:
        order = np.lexsort((gen.permutation(n), -deg)).astype(np.int64)
    first = _first_cover_time(order, indptr, indices, deg, ell)
    covered = np.cumsum(np.bincount(first, minlength=n)[:n]).astype(np.int64)
    k = int(np.searchsorted(covered, need, side="left")) + 1
    k = min(k, limit, n)
    return AttackRun(
        strategy=s,
        lookahead=ell,
        n_nodes=n,
        bribed=order[:k].copy(),
        covered=covered[:k].copy(),
        target_coverage=target,
        stats={},
    )


def _first_cover_time(
    order: IntArray,
    indptr: IntArray,
    indices: npt.NDArray[np.int32],
    deg: IntArray,
    ell: int,
) -> IntArray:
    """For every node, the index (0-based) of the first bribe in ``order`` that covers it:
    ``min`` of the ranks over its ℓ-ball, by ℓ rounds of min over neighbours."""
    n = order.size
    t = np.empty(n, dtype=np.int64)
    t[order] = np.arange(n, dtype=np.int64)
    has = deg > 0
    starts = indptr[:-1][has]
    for _ in range(ell):
        if indices.size == 0:
            break
        vals = t[indices]
        m = np.minimum.reduceat(vals, starts)
        t_new = t.copy()
        t_new[has] = np.minimum(t[has], m)
        t = t_new
    return t


def _adaptive(
    graph: Graph, s: str, ell: int, rng: RandomSource, target: float, need: int, limit: int
) -> AttackRun:
    st = _State(graph, ell)
    n = st.n
    stats: dict[str, Any] = {}
    bribed: list[int] = []
    covered: list[int] = []
    pick: _BenchmarkPicker | _DegreePicker
    if s == "benchmark":
        pick = _BenchmarkPicker(st, stats)
    else:
        pick = _DegreePicker(st, s, rng, stats)
    while st.n_covered < need and len(bribed) < limit:
        b = pick.choose()
        if b is None:
            break
        newly, seen = st.bribe(b)
        pick.update(b, newly, seen)
        bribed.append(b)
        covered.append(st.n_covered)
        if st.n_covered >= n:
            break
    return AttackRun(
        strategy=s,
        lookahead=ell,
        n_nodes=n,
        bribed=np.asarray(bribed, dtype=np.int64),
        covered=np.asarray(covered, dtype=np.int64),
        target_coverage=target,
        stats=stats,
    )


class _DegreePicker:
    """Degree-Greedy and Degree-Greedy-Crawler: max unseen degree, lazy heap."""

    def __init__(self, st: _State, s: str, rng: RandomSource, stats: dict[str, Any]) -> None:
        self.st = st
        self.crawler = s == "crawler"
        self.unc = st.deg.copy()  # uncovered neighbours of each node
        self.stats = stats
        self.gen = rng.numpy_generator() if self.crawler else None
        self.heap: list[tuple[int, int]] = []
        if self.crawler:
            stats.update({"restarts": 0, "start": None})
        else:
            self.heap = list(zip((-self.unc).tolist(), range(st.n), strict=True))
            heapq.heapify(self.heap)
        stats["stale_pops"] = 0

    def _random_uncovered(self) -> int | None:
        assert self.gen is not None
        cand = np.flatnonzero(self.st.dist > self.st.ell)
        if cand.size == 0:
            return None
        return int(cand[self.gen.integers(cand.size)])

    def choose(self) -> int | None:
        st, heap, unc = self.st, self.heap, self.unc
        while heap:
            negk, v = heapq.heappop(heap)
            if st.dist[v] <= st.ell:
                continue  # covered: unseen degree 0, no longer a candidate
            cur = int(unc[v])
            if cur == -negk:
                return v
            self.stats["stale_pops"] += 1
            heapq.heappush(heap, (-cur, v))
        if not self.crawler:
            return None
        v0 = self._random_uncovered()
        if v0 is None:
            return None
        if self.stats["start"] is None:
            self.stats["start"] = v0
        else:
            self.stats["restarts"] += 1
        return v0

    def update(self, b: int, newly: IntArray, seen: IntArray) -> None:
        st = self.st
        if newly.size:
            nb = _gather(st.indptr, st.indices, newly)
            if nb.size:
                np.subtract.at(self.unc, nb, 1)
        if self.crawler and seen.size:
            frontier = seen[st.dist[seen] > st.ell]
            for v, k in zip(frontier.tolist(), self.unc[frontier].tolist(), strict=True):
                heapq.heappush(self.heap, (-k, v))


class _BenchmarkPicker:
    """Benchmark-Greedy: max ``|ball_ℓ(v) \\ covered|``, lazy heap with upper-bound keys."""

    def __init__(self, st: _State, stats: dict[str, Any]) -> None:
        self.st = st
        self.stats = stats
        n = st.n
        # Exact gains maintained incrementally when the ℓ-balls fit in memory (ℓ <= 2): the
        # ball relation is symmetric, so a newly covered node u lowers the gain of exactly the
        # nodes in ball_ℓ(u), one each. Otherwise: BFS evaluations with upper-bound keys.
        self.ball = _ball_matrix(st, st.ell)
        self.gain: IntArray | None = None
        if self.ball is not None:
            self.gain = np.diff(self.ball.indptr).astype(np.int64)
            keys = self.gain.copy()
        else:
            keys = _ball_size_bounds(st)
        self.heap = list(zip((-keys).tolist(), range(n), strict=True))
        heapq.heapify(self.heap)
        self.mark = np.zeros(n, dtype=np.int64)
        self.stamp = 0
        stats.update({"gain_evaluations": 0})
        # ℓ = 3: ball_3(v) = ∪_{u ∈ N[v]} ball_2(u), one gather of ball_2 rows (2-3x faster
        # than the BFS) when the ball_2 matrix fits
        self.ball2 = _ball_matrix(st, 2) if st.ell == 3 else None
        self.ball2_indptr = (
            np.asarray(self.ball2.indptr, dtype=np.int64) if self.ball2 is not None else None
        )
        self.ball2_len = np.diff(self.ball2_indptr) if self.ball2_indptr is not None else None

    def exact_gain(self, v: int) -> int:
        st = self.st
        if self.gain is not None:
            return int(self.gain[v])
        self.stats["gain_evaluations"] += 1
        dist, ell = st.dist, st.ell
        if self.ball2 is not None and self.ball2_indptr is not None and self.ball2_len is not None:
            nodes = np.empty(int(st.deg[v]) + 1, dtype=np.int64)
            nodes[0] = v
            nodes[1:] = st.indices[st.indptr[v] : st.indptr[v + 1]]
            size = int(self.ball2_len[nodes].sum())
            if size <= st.indices.size:  # cheaper than the BFS's worst case (2m)
                idx = _gather(self.ball2_indptr, self.ball2.indices, nodes)
                idx = idx[dist[idx] > ell]
                return int(_dedupe(idx, st.scratch).size)
        self.stamp += 1
        stamp, mark = self.stamp, self.mark
        mark[v] = stamp
        count = int(dist[v] > ell)
        frontier = np.array([v], dtype=np.int64) if dist[v] > 0 else np.empty(0, dtype=np.int64)
        for j in range(1, ell + 1):
            if frontier.size == 0:
                break
            nb = _gather(st.indptr, st.indices, frontier)
            nb = nb[mark[nb] != stamp]
            if nb.size == 0:
                break
            nb = _dedupe(nb, st.scratch)
            mark[nb] = stamp
            d = dist[nb]
            count += int(np.count_nonzero(d > ell))
            frontier = nb[d > j]
        return count

    def choose(self) -> int | None:
        heap = self.heap
        while heap:
            negk, v = heapq.heappop(heap)
            g = self.exact_gain(v)
            if g == 0:
                continue  # gains never grow back: drop
            if not heap or g >= -heap[0][0]:
                return v
            heapq.heappush(heap, (-g, v))
        return None

    def update(self, b: int, newly: IntArray, seen: IntArray) -> None:
        if self.gain is not None and self.ball is not None and newly.size:
            idx = _gather(np.asarray(self.ball.indptr, dtype=np.int64), self.ball.indices, newly)
            if idx.size:
                np.subtract.at(self.gain, idx, 1)


_EXACT_BALL2_BUDGET = 40_000_000  # max Σ deg² for the exact |ball_2| product (memory)


def _ball_matrix(st: _State, ell: int) -> sp.csr_matrix | None:
    """The 0/1 matrix of ``dist(u, v) <= ell`` (CSR, int32 indices) for ell <= 2 when it fits
    (``Σ deg² <= _EXACT_BALL2_BUDGET`` for ell = 2), else None."""
    n = st.n
    eye = sp.identity(n, format="csr", dtype=np.int8)
    if ell == 0:
        return eye
    if ell > 2:
        return None
    a = sp.csr_matrix(
        (np.ones(st.indices.size, dtype=np.int8), st.indices, st.indptr), shape=(n, n)
    )
    b = (a + eye).tocsr()
    if ell == 2:
        if float(np.sum(st.deg.astype(np.float64) ** 2)) > _EXACT_BALL2_BUDGET:
            return None
        # int32 counts: scipy drops entries whose sum is 0, so narrow types could wrap to 0
        b = b.astype(np.int32)
        b.data[:] = 1
        b = (b @ b).tocsr()
    b.sort_indices()
    return b


def _ball_size_bounds(st: _State) -> IntArray:
    """Upper bounds on ``|ball_ℓ(v)|`` for every node (ℓ >= 2), capped at n: exact
    ``|ball_2|`` from the sparse product ``(A + I)²`` when ``Σ deg²`` is small enough, then
    ``|ball_{j+1}(v)| <= Σ_{u ∈ N[v]} |ball_j(u)|`` (union bound) for each further level;
    otherwise walk counts (``Σ_{j<=ℓ} A^j 1``)."""
    n, ell = st.n, st.ell
    a = _adjacency_float(st)
    if float(np.sum(st.deg.astype(np.float64) ** 2)) <= _EXACT_BALL2_BUDGET:
        b = (a + sp.identity(n, format="csr", dtype=np.float64)).tocsr()
        b.data[:] = 1.0
        ub = np.diff((b @ b).indptr).astype(np.float64)
        for _ in range(ell - 2):
            ub = np.minimum(b @ ub, float(n))
        return np.minimum(ub, float(n)).astype(np.int64)
    ub = np.ones(n, dtype=np.float64)
    w = np.ones(n, dtype=np.float64)
    for _ in range(ell):
        w = np.minimum(a @ w, float(n))
        ub += w
    return np.minimum(ub, float(n)).astype(np.int64)


def _adjacency_float(st: _State) -> sp.csr_matrix:
    data = np.ones(st.indices.size, dtype=np.float64)
    return sp.csr_matrix((data, st.indices, st.indptr), shape=(st.n, st.n))


def coverage_of(graph: Graph, bribed: npt.ArrayLike, lookahead: int) -> int:
    """Number of nodes within distance ``lookahead`` of the ``bribed`` set (multi-source BFS
    from scratch; the reference the incremental attacks are tested against)."""
    ell = check_int("lookahead", lookahead, minimum=0, maximum=MAX_LOOKAHEAD)
    indptr, indices, _ = _csr(graph)
    b = np.unique(np.asarray(bribed, dtype=np.int64))
    if b.size and (b.min() < 0 or b.max() >= graph.n_nodes):
        raise InvalidParameterError("bribed", "node ids out of range", f"[0, {graph.n_nodes})")
    seen = np.zeros(graph.n_nodes, dtype=bool)
    seen[b] = True
    frontier = b
    for _ in range(ell):
        if frontier.size == 0:
            break
        nb = np.unique(_gather(indptr, indices, frontier)) if frontier.size else frontier
        nb = nb[~seen[nb]]
        seen[nb] = True
        frontier = nb
    return int(seen.sum())
