"""Privacy of the social recommenders (Korolova thesis §5.4): exact output laws on every
neighbouring tiny graph (ratio ≤ e^ε), exact samplers vs their laws, and a statistical audit."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from searchveil.audit import audit_event
from searchveil.io.graphs import graph_from_edges
from searchveil.rng import SeededRandom
from searchveil.social._exact import bernoulli_exp, bernoulli_two_over_e
from searchveil.social.mechanisms import (
    ExponentialMechanism,
    LaplaceArgmax,
    PermuteAndFlip,
    SmoothedSampling,
    make_mechanism,
)
from searchveil.social.utility import CommonNeighbours, WeightedPaths, target_utilities

BOUND = 3


def _node_probs(mech, tu) -> dict[int, float]:
    vals, counts = tu.levels()
    p = mech.level_probabilities(vals, counts, tu.scale)
    cand, v = tu.dense()
    idx = {int(x): i for i, x in enumerate(vals.tolist())}
    return {
        int(c): float(p[idx[int(u)]] / counts[idx[int(u)]]) for c, u in zip(cand, v, strict=True)
    }


def _graphs(seed: int, n: int = 6, count: int = 3) -> list[np.ndarray]:
    gen = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        a = np.zeros((n, n), dtype=np.int64)
        for i, j in itertools.combinations(range(n), 2):
            if gen.random() < 0.45 and a[i].sum() < BOUND and a[j].sum() < BOUND:
                a[i, j] = a[j, i] = 1
        out.append(a)
    return out


def _tu(a: np.ndarray, utility, r: int):
    i, j = np.nonzero(np.triu(a))
    g = graph_from_edges(i, j, undirected=True, n_nodes=a.shape[0])
    return next(iter(target_utilities(g, utility, [r])))


def _max_log_ratio(mech_for, utility, graphs) -> float:
    """Largest |ln p_G(i) − ln p_G'(i)| over graphs, targets, toggles not incident to the target
    (both graphs within the degree bound) and candidates i."""
    worst = 0.0
    n = graphs[0].shape[0]
    for a in graphs:
        for r in range(n):
            base = _tu(a, utility, r)
            if base.max_value == 0 and base.n_candidates == 0:
                continue
            for x, y in itertools.combinations([v for v in range(n) if v != r], 2):
                b = a.copy()
                b[x, y] ^= 1
                b[y, x] ^= 1
                if b.sum(axis=1).max() > BOUND:
                    continue
                other = _tu(b, utility, r)
                if base.n_candidates == 0:
                    continue
                p = _node_probs(mech_for(base), base)
                q = _node_probs(mech_for(other), other)
                assert p.keys() == q.keys()
                assert sum(p.values()) == pytest.approx(1.0, abs=1e-9)
                for i in p:
                    worst = max(worst, abs(math.log(p[i]) - math.log(q[i])))
    return worst


UTILS = [CommonNeighbours(), WeightedPaths(Fraction(1, 2), BOUND)]


@pytest.mark.parametrize("utility", UTILS, ids=["cn", "wp"])
@pytest.mark.parametrize("eps", [0.5, 2.0])
@pytest.mark.parametrize("name", ["exponential", "permute_and_flip", "laplace", "smoothing"])
def test_exact_privacy_on_all_neighbouring_tiny_graphs(utility, eps, name):
    mech = make_mechanism(
        name, epsilon=eps, l1=utility.l1_sensitivity(), linf=utility.linf_sensitivity()
    )
    worst = _max_log_ratio(lambda _tu: mech, utility, _graphs(7))
    assert worst <= eps * (1 + 1e-9)
    assert worst > 0.05 * eps  # the check is not vacuous: outputs do depend on the edge


def test_uncalibrated_mechanism_is_caught():
    # the same exact check fails for A_E calibrated to a sensitivity 4x too small
    utility = WeightedPaths(Fraction(1, 2), BOUND)
    bad = ExponentialMechanism(epsilon=1.0, sensitivity=utility.l1_sensitivity() / 4)
    worst = _max_log_ratio(lambda _tu: bad, utility, _graphs(7))
    assert worst > 1.0


def _permutation_law(values: list[int], q: list[float]) -> list[float]:
    n = len(values)
    out = [0.0] * n
    for perm in itertools.permutations(range(n)):
        rest = 1.0
        for i in perm:
            out[i] += rest * q[i]
            rest *= 1 - q[i]
    return [x / math.factorial(n) for x in out]


def test_permute_and_flip_law_matches_permutation_enumeration():
    pf = PermuteAndFlip(epsilon=1.3, sensitivity=Fraction(1))
    v = np.array([4, 2, 1, 0])
    c = np.array([1, 2, 1, 2])
    q = pf.coin_probabilities(v, 1)
    full = np.repeat(v, c).tolist()
    law = _permutation_law(full, np.repeat(q, c).tolist())
    per_level = [sum(law[i] for i in range(len(full)) if full[i] == x) for x in v]
    assert np.allclose(pf.level_probabilities(v, c, 1), per_level, atol=1e-12)


def _chi2_p(counts: np.ndarray, probs: np.ndarray) -> float:
    return float(stats.chisquare(counts, probs * counts.sum()).pvalue)


@pytest.mark.parametrize(
    "mech",
    [
        ExponentialMechanism(epsilon=1.7, sensitivity=Fraction(3, 2)),
        PermuteAndFlip(epsilon=1.7, sensitivity=Fraction(3, 2)),
        LaplaceArgmax(epsilon=1.7, sensitivity=Fraction(3, 2)),
        SmoothedSampling(epsilon=1.7),
    ],
    ids=lambda m: m.name,
)
def test_exact_sampler_matches_its_law(mech):
    rng = SeededRandom(11)
    v = np.array([9, 6, 4, 1, 0])
    c = np.array([1, 2, 1, 3, 40])
    probs = mech.level_probabilities(v, c, 2)
    n = 2500
    draws = np.bincount([mech.sample_level(v, c, 2, rng) for _ in range(n)], minlength=v.size)
    assert _chi2_p(draws, probs) > 1e-6


def test_bernoulli_primitives_exact_rates():
    rng = SeededRandom(3)
    n = 200_000
    got = bernoulli_two_over_e(n, rng).mean()
    assert abs(got - 2 / math.e) < 5 * math.sqrt(0.25 / n)
    got = bernoulli_exp(np.full(n, 7), np.full(n, 3), rng).mean()
    assert abs(got - math.exp(-7 / 3)) < 5 * math.sqrt(0.25 / n)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["exponential", "permute_and_flip", "laplace", "smoothing"])
def test_statistical_audit(name):
    """Empirical ε lower bound (Clopper–Pearson, α = 1e-6) on the most sensitive event of the
    tight case-A pair stays below the claim."""
    eps = 1.0
    utility = WeightedPaths(Fraction(1, 2), BOUND)
    # r=0 adjacent to x=1 and c=3; x–c edge; y=2 has candidate neighbours 4, 5; toggle x–y
    base = [(0, 1), (0, 3), (1, 3), (2, 4), (2, 5)]
    s, t = zip(*base, strict=True)
    g0 = graph_from_edges(s, t, undirected=True, n_nodes=6)
    g1 = graph_from_edges(list(s) + [1], list(t) + [2], undirected=True, n_nodes=6)
    tu0 = next(iter(target_utilities(g0, utility, [0])))
    tu1 = next(iter(target_utilities(g1, utility, [0])))
    mech = make_mechanism(
        name, epsilon=eps, l1=utility.l1_sensitivity(), linf=utility.linf_sensitivity()
    )
    p0, p1 = _node_probs(mech, tu0), _node_probs(mech, tu1)
    event = max(p0, key=lambda i: abs(math.log(p1[i] / p0[i])))
    rng = SeededRandom(2024)
    trials = 4000

    def sampler(tu):
        return lambda n: sum(mech.recommend(tu, rng) == event for _ in range(n))

    res = audit_event(sampler(tu0), sampler(tu1), trials=trials, epsilon=eps, delta=0.0)
    assert res.passed, res
    # the event really distinguishes the graphs (the audit is not vacuous)
    assert abs(p0[event] - p1[event]) > 0.01
