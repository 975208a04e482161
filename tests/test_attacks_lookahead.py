"""Lookahead bribing strategies (thesis §6.2.3): hand-checked graphs, and on random small
graphs a from-scratch recount of the coverage after every bribe plus a check of each
strategy's choice rule against a brute-force evaluation of every candidate."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searchveil.attacks.lookahead.attack import (
    STRATEGIES,
    AttackRun,
    coverage_of,
    normalize_strategy,
    run_attack,
)
from searchveil.attacks.lookahead.graphs import power_law_graph
from searchveil.errors import InvalidParameterError
from searchveil.io.graphs import Graph, graph_from_edges
from searchveil.rng import make_rng


# -- a pure-Python reference -----------------------------------------------------------------
def adj_lists(g: Graph) -> list[list[int]]:
    a = g.adjacency
    return [a.indices[a.indptr[i] : a.indptr[i + 1]].tolist() for i in range(g.n_nodes)]


def distances_from(adj: list[list[int]], sources: list[int]) -> list[float]:
    dist = [float("inf")] * len(adj)
    q: deque[int] = deque()
    for s in sources:
        if dist[s] != 0:
            dist[s] = 0
            q.append(s)
    while q:
        u = q.popleft()
        for w in adj[u]:
            if dist[w] == float("inf"):
                dist[w] = dist[u] + 1
                q.append(w)
    return dist


def ball(adj: list[list[int]], v: int, ell: int) -> set[int]:
    return {u for u, d in enumerate(distances_from(adj, [v])) if d <= ell}


def check_run(g: Graph, run: AttackRun) -> None:
    """Coverage after each bribe = recount; each choice obeys the strategy's rule."""
    adj = adj_lists(g)
    ell, n = run.lookahead, g.n_nodes
    deg = [len(x) for x in adj]
    bribed: list[int] = []
    assert len(set(run.bribed.tolist())) == run.bribed.size  # no node bribed twice
    for step, b in enumerate(run.bribed.tolist()):
        dist = distances_from(adj, bribed) if bribed else [float("inf")] * n
        covered = {u for u in range(n) if dist[u] <= ell}
        unseen = [0 if u in covered else sum(w not in covered for w in adj[u]) for u in range(n)]
        if run.strategy == "benchmark":
            gains = [len(ball(adj, v, ell) - covered) for v in range(n)]
            assert gains[b] == max(gains) > 0
        elif run.strategy == "greedy":
            assert b not in covered
            assert unseen[b] == max(unseen[u] for u in range(n) if u not in covered)
        elif run.strategy == "crawler":
            assert b not in covered
            frontier = [u for u in range(n) if dist[u] == ell + 1]
            if frontier:
                assert b in frontier
                assert unseen[b] == max(unseen[u] for u in frontier)
        elif run.strategy == "highest" and step:
            assert deg[b] <= deg[run.bribed[step - 1]]
        bribed.append(b)
        # the recount: nodes within distance ℓ of the bribed set
        expect = sum(d <= ell for d in distances_from(adj, bribed))
        assert run.covered[step] == expect, (run.strategy, ell, step)
        assert coverage_of(g, bribed, ell) == expect
    if run.strategy == "highest":
        top = sorted(deg, reverse=True)[: run.bribed.size]
        assert sorted((deg[b] for b in run.bribed.tolist()), reverse=True) == top


def path_star() -> Graph:
    # star 0-{1,2,3,4}, then the path 4-5-6
    src = [0, 0, 0, 0, 4, 5]
    dst = [1, 2, 3, 4, 5, 6]
    return graph_from_edges(src, dst, undirected=True, n_nodes=7)


# -- hand-checked ------------------------------------------------------------------------------
def test_benchmark_on_star_with_tail() -> None:
    g = path_star()
    r = run_attack(g, strategy="benchmark", lookahead=1, rng=make_rng(0), target_coverage=1.0)
    # 0 covers {0,1,2,3,4}; then 5 and 6 both cover {5,6}: the lower index wins
    assert r.bribed.tolist() == [0, 5]
    assert r.covered.tolist() == [5, 7]
    r2 = run_attack(g, strategy="benchmark", lookahead=2, rng=make_rng(0), target_coverage=1.0)
    # ball_2(4) = {0,1,2,3,4,5,6}: everything in one bribe
    assert r2.bribed.tolist() == [4] and r2.covered.tolist() == [7]


def test_greedy_and_highest_on_star_with_tail() -> None:
    g = path_star()
    r = run_attack(g, strategy="greedy", lookahead=1, rng=make_rng(0), target_coverage=1.0)
    # unseen degrees 4 (node 0); then 5 and 6 each have one unseen edge (5-6): lower index
    assert r.bribed.tolist() == [0, 5] and r.covered.tolist() == [5, 7]
    h = run_attack(g, strategy="highest", lookahead=1, rng=make_rng(0), target_coverage=1.0)
    assert h.bribed[0] == 0 and set(h.bribed[1:3].tolist()) <= {4, 5}
    assert h.covered.tolist()[-1] == 7


def test_lookahead_zero_covers_only_the_bribed() -> None:
    g = path_star()
    r = run_attack(g, strategy="random", lookahead=0, rng=make_rng(3), target_coverage=1.0)
    assert r.covered.tolist() == list(range(1, 8))


def test_crawler_stays_inside_what_it_has_seen() -> None:
    # two triangles joined by nothing: the crawler must restart once to cover both
    g = graph_from_edges([0, 1, 2, 3, 4, 5], [1, 2, 0, 4, 5, 3], undirected=True, n_nodes=6)
    r = run_attack(g, strategy="crawler", lookahead=1, rng=make_rng(1), target_coverage=1.0)
    assert r.covered.tolist() == [3, 6]
    assert r.stats["restarts"] == 1
    check_run(g, r)


def test_bribes_needed_and_fraction() -> None:
    g = path_star()
    r = run_attack(g, strategy="benchmark", lookahead=1, rng=make_rng(0), target_coverage=1.0)
    assert r.bribes_needed(5 / 7) == 1
    assert r.bribes_needed(0.72) == 2
    assert r.bribes_needed(1.0) == 2
    assert r.fraction_needed(1.0) == pytest.approx(2 / 7)
    assert r.summary()["strategy_name"] == "Benchmark-Greedy"
    short = run_attack(g, strategy="random", lookahead=0, rng=make_rng(0), max_bribes=2)
    assert short.bribed.size == 2 and short.bribes_needed(0.99) is None


def test_strategy_names_and_errors() -> None:
    assert normalize_strategy("Degree-Greedy-Crawler") == "crawler"
    assert normalize_strategy("HIGHEST-DEGREE") == "highest"
    g = path_star()
    with pytest.raises(InvalidParameterError, match="strategy"):
        run_attack(g, strategy="smart", lookahead=1, rng=make_rng(0))
    with pytest.raises(InvalidParameterError, match="lookahead"):
        run_attack(g, strategy="random", lookahead=-1, rng=make_rng(0))
    with pytest.raises(InvalidParameterError, match="target_coverage"):
        run_attack(g, strategy="random", lookahead=1, rng=make_rng(0), target_coverage=0)
    directed = graph_from_edges([0, 1], [1, 2], undirected=False)
    with pytest.raises(InvalidParameterError, match="undirected"):
        run_attack(directed, strategy="random", lookahead=1, rng=make_rng(0))
    with pytest.raises(InvalidParameterError, match="bribed"):
        coverage_of(g, [9], 1)


def test_seeded_runs_repeat() -> None:
    rng_g = make_rng(5).numpy_generator()
    s, d = rng_g.integers(0, 60, 200), rng_g.integers(0, 60, 200)
    g = graph_from_edges(s, d, undirected=True, n_nodes=60)
    for strat in ("random", "highest", "crawler"):
        a = run_attack(g, strategy=strat, lookahead=1, rng=make_rng(9))
        b = run_attack(g, strategy=strat, lookahead=1, rng=make_rng(9))
        assert a.bribed.tolist() == b.bribed.tolist()


# -- property test on random small graphs -----------------------------------------------------
@st.composite
def small_graphs(draw: st.DrawFn) -> Graph:
    n = draw(st.integers(min_value=1, max_value=18))
    m = draw(st.integers(min_value=0, max_value=3 * n))
    src = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    dst = draw(st.lists(st.integers(0, n - 1), min_size=m, max_size=m))
    return graph_from_edges(src, dst, undirected=True, n_nodes=n)


@settings(max_examples=60, deadline=None)
@given(
    g=small_graphs(),
    strategy=st.sampled_from(STRATEGIES),
    ell=st.integers(min_value=0, max_value=3),
    target=st.sampled_from([0.5, 0.9, 1.0]),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_coverage_equals_recount(
    g: Graph, strategy: str, ell: int, target: float, seed: int
) -> None:
    r = run_attack(g, strategy=strategy, lookahead=ell, rng=make_rng(seed), target_coverage=target)
    check_run(g, r)
    # the attack stops as soon as the target is met, and always meets it (every node can be
    # bribed, so full coverage is reachable)
    need = int(np.ceil(target * g.n_nodes - 1e-9))
    assert r.covered[-1] >= need
    assert r.covered.size == 1 or r.covered[-2] < need


def test_all_strategies_on_a_power_law_graph() -> None:
    g = power_law_graph(150, 3.0, 2, make_rng(11))
    for strat in STRATEGIES:
        for ell in (1, 2):
            r = run_attack(g, strategy=strat, lookahead=ell, rng=make_rng(4), target_coverage=0.9)
            check_run(g, r)


def test_benchmark_ball_matrix_counts_do_not_wrap() -> None:
    """Hub 255 has 255 leaves: its (hub, hub) entry of (A + I)² is 256, which an 8-bit type
    wraps to 0 (and scipy drops), making its gain 255 — a tie with the other star's centre 0
    (254 leaves, gain 255), which the lower index would win. Gains must stay exact."""
    src = [0] * 254 + [255] * 255
    dst = list(range(1, 255)) + list(range(256, 511))
    g = graph_from_edges(src, dst, undirected=True, n_nodes=511)
    r = run_attack(g, strategy="benchmark", lookahead=2, rng=make_rng(0), target_coverage=1.0)
    assert r.bribed.tolist() == [255, 0] and r.covered.tolist() == [256, 511]
    check_run(g, r)
