"""Social utilities (Korolova thesis §5.3.3, §5.5.1): values and edge sensitivity by brute force."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from searchveil.errors import InvalidParameterError
from searchveil.io.graphs import graph_from_edges
from searchveil.social.utility import (
    CommonNeighbours,
    WeightedPaths,
    brute_force_utilities,
    parse_gamma,
    target_utilities,
    utility_from_name,
)


def _random_graph(n: int, p: float, seed: int, max_degree: int | None = None) -> np.ndarray:
    gen = np.random.default_rng(seed)
    a = np.zeros((n, n), dtype=np.int64)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    for i, j in pairs:
        if gen.random() < p:
            if max_degree is not None and (a[i].sum() >= max_degree or a[j].sum() >= max_degree):
                continue
            a[i, j] = a[j, i] = 1
    return a


def _graph(a: np.ndarray):
    i, j = np.nonzero(np.triu(a))
    return graph_from_edges(i, j, undirected=True, n_nodes=a.shape[0])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("utility", [CommonNeighbours(), WeightedPaths(Fraction(1, 20), 12)])
def test_utilities_match_simple_path_enumeration(seed, utility):
    a = _random_graph(12, 0.3, seed, max_degree=12)
    g = _graph(a)
    tus = list(target_utilities(g, utility, np.arange(12), chunk=5))
    for tu in tus:
        ref = brute_force_utilities(a, utility, tu.target)
        cand, vals = tu.dense()
        assert np.allclose(vals / tu.scale, ref[cand])
        assert np.isnan(ref[np.setdiff1d(np.arange(12), cand)]).all()
        assert tu.n_candidates == cand.size == 11 - a[tu.target].sum()
        # neighbour_common = C(a, r) for each neighbour a of r
        assert np.array_equal(tu.neighbour_common, (a @ a)[tu.target, tu.neighbours])


def _utility_matrix(a: np.ndarray, gamma: Fraction) -> np.ndarray:
    """Integer utilities q·A² + p·A³ (rows = targets) for a batch of graphs (..., n, n)."""
    a2 = a @ a
    return gamma.denominator * a2 + gamma.numerator * (a2 @ a)


def _brute_sensitivity(graphs: np.ndarray, gamma: Fraction, bound: int) -> tuple[float, float]:
    """Max ℓ1 and ℓ∞ change of candidate utility vectors over every target and every edge
    toggle not incident to it that keeps both graphs within the degree bound."""
    n = graphs.shape[1]
    u = _utility_matrix(graphs, gamma)
    eye = np.eye(n, dtype=bool)
    best1 = bestinf = 0
    for x, y in itertools.combinations(range(n), 2):
        other = graphs.copy()
        other[:, x, y] ^= 1
        other[:, y, x] ^= 1
        ok = (graphs.sum(axis=2).max(axis=1) <= bound) & (other.sum(axis=2).max(axis=1) <= bound)
        if not ok.any():
            continue
        g, o = graphs[ok], other[ok]
        diff = np.abs(u[ok] - _utility_matrix(o, gamma))
        cand = (g == 0) & ~eye  # same candidates on both graphs for targets r ∉ {x, y}
        diff = np.where(cand, diff, 0)
        rows = [r for r in range(n) if r not in (x, y)]
        best1 = max(best1, int(diff[:, rows, :].sum(axis=2).max()))
        bestinf = max(bestinf, int(diff[:, rows, :].max()))
    return best1 / gamma.denominator, bestinf / gamma.denominator


def _all_graphs(n: int) -> np.ndarray:
    pairs = list(itertools.combinations(range(n), 2))
    m = len(pairs)
    codes = np.arange(1 << m)
    out = np.zeros((codes.size, n, n), dtype=np.int64)
    for b, (i, j) in enumerate(pairs):
        bit = (codes >> b) & 1
        out[:, i, j] = bit
        out[:, j, i] = bit
    return out


@pytest.fixture(scope="module")
def all_six_node_graphs() -> np.ndarray:
    return _all_graphs(6)


@pytest.mark.parametrize("gamma", [Fraction(1, 2), Fraction(1, 20), Fraction(3, 7)])
def test_weighted_paths_sensitivity_exhaustive_is_exact(all_six_node_graphs, gamma):
    # every graph on 6 nodes with max degree 3: the derived S is attained and never exceeded
    l1, linf = _brute_sensitivity(all_six_node_graphs, gamma, 3)
    wp = WeightedPaths(gamma, 3)
    assert l1 == pytest.approx(float(wp.l1_sensitivity()))  # 1 + γ(2D−3)
    assert linf == pytest.approx(float(wp.linf_sensitivity()))  # 1 + γ(D−2)


def test_common_neighbours_sensitivity_exhaustive(all_six_node_graphs):
    l1, linf = _brute_sensitivity(all_six_node_graphs, Fraction(0), 5)
    assert l1 == 1 == float(CommonNeighbours().l1_sensitivity())
    assert linf == 1


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("bound", [3, 4, 6])
def test_weighted_paths_sensitivity_random_graphs(seed, bound):
    gamma = Fraction(1, 10)
    graphs = np.stack([_random_graph(10, 0.45, seed * 100 + k, bound) for k in range(6)])
    l1, linf = _brute_sensitivity(graphs, gamma, bound)
    wp = WeightedPaths(gamma, bound)
    assert l1 <= float(wp.l1_sensitivity()) + 1e-12
    assert linf <= float(wp.linf_sensitivity()) + 1e-12
    assert l1 > 0


def test_tight_construction_attains_l1():
    # the case-A construction of docs/privacy/social.md with D = 5 on 2D = 10 nodes
    d, gamma = 5, Fraction(1, 3)
    r, x, y = 0, 1, 2
    common = list(range(3, 3 + d - 2))
    zs = list(range(3 + d - 2, 3 + d - 2 + d - 1))
    edges = [(r, x)] + [(r, c) for c in common] + [(x, c) for c in common] + [(y, z) for z in zs]
    s, t = zip(*edges, strict=True)
    g0 = graph_from_edges(s, t, undirected=True, n_nodes=2 * d)
    g1 = graph_from_edges(list(s) + [x], list(t) + [y], undirected=True, n_nodes=2 * d)
    wp = WeightedPaths(gamma, d)
    u0 = next(iter(target_utilities(g0, wp, [r]))).dense()
    u1 = next(iter(target_utilities(g1, wp, [r]))).dense()
    assert np.array_equal(u0[0], u1[0])
    assert Fraction(int(np.abs(u1[1] - u0[1]).sum()), wp.scale) == wp.l1_sensitivity()


def test_degree_bound_enforced_and_errors():
    a = _random_graph(8, 0.9, 0)
    g = _graph(a)
    with pytest.raises(InvalidParameterError, match="degree_bound"):
        list(target_utilities(g, WeightedPaths(Fraction(1, 10), 2), [0]))
    with pytest.raises(InvalidParameterError, match="gamma"):
        parse_gamma("1.5")
    with pytest.raises(InvalidParameterError, match="gamma"):
        parse_gamma("abc")
    with pytest.raises(InvalidParameterError, match="degree_bound"):
        WeightedPaths(Fraction(1, 10), 1)
    with pytest.raises(InvalidParameterError, match="utility"):
        utility_from_name("pagerank")
    with pytest.raises(InvalidParameterError, match="degree_bound"):
        utility_from_name("wp", gamma="0.05")
    assert utility_from_name("wp", gamma="0.005", degree_bound=9).gamma == Fraction(1, 200)
    directed = graph_from_edges([0, 1], [1, 2], undirected=False)
    with pytest.raises(InvalidParameterError, match="undirected"):
        list(target_utilities(directed, CommonNeighbours(), [0]))
    with pytest.raises(InvalidParameterError, match="targets"):
        list(target_utilities(g, CommonNeighbours(), [99]))


def test_wiki_vote_shape(wiki_vote_path):
    from searchveil.io.graphs import read_edge_list

    g = read_edge_list(wiki_vote_path, undirected=True)
    d = g.describe()
    assert (d["nodes"], d["edges"], d["max_degree"]) == (7115, 100762, 1065)
    tus = list(target_utilities(g, WeightedPaths(Fraction(1, 200), 1065), [0, 1, 2]))
    for tu in tus:
        assert tu.n_candidates == 7114 - tu.degree
        assert (tu.values > 0).all()
