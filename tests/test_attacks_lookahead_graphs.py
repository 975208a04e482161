"""Configuration-model power-law graphs (thesis §6.3.1.1): the degree law (KS and χ² tests on
large samples, with a check that the same tests reject a wrong α), d_max = ⌊√n⌋, the even
stub count, and the removal of self-loops and multi-edges."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from searchveil.attacks.lookahead.graphs import (
    configuration_model,
    default_dmax,
    power_law_graph,
    power_law_pmf,
    sample_power_law_degrees,
)
from searchveil.errors import InvalidParameterError
from searchveil.rng import make_rng


def discrete_ks(sample: np.ndarray, alpha: float, dmin: int, dmax: int) -> tuple[float, float]:
    """KS distance sup_x |ECDF(x) − F(x)| over the integer support, and its asymptotic p-value
    (Kolmogorov distribution; conservative for a discrete law). scipy's ``kstest`` assumes a
    continuous law and counts the jumps of a discrete CDF as distance."""
    x, p = power_law_pmf(alpha, dmin, dmax)
    counts = np.bincount(np.clip(sample, dmin, dmax) - dmin, minlength=x.size)[: x.size]
    below = np.count_nonzero(sample < dmin)
    ecdf = (below + np.cumsum(counts)) / sample.size
    d = float(max(np.max(np.abs(ecdf - np.cumsum(p))), below / sample.size))
    return d, float(stats.kstwobign.sf(d * np.sqrt(sample.size)))


def chi2_pvalue(sample: np.ndarray, alpha: float, dmin: int, dmax: int) -> float:
    x, p = power_law_pmf(alpha, dmin, dmax)
    counts = np.bincount(sample - dmin, minlength=x.size)[: x.size].astype(float)
    expected = p * sample.size
    # pool the tail so every cell expects >= 20
    keep = np.flatnonzero(np.cumsum(expected[::-1])[::-1] >= 20)
    last = keep.max()
    obs = np.append(counts[:last], counts[last:].sum())
    exp = np.append(expected[:last], expected[last:].sum())
    return float(stats.chisquare(obs, exp).pvalue)


def test_degree_law_ks_and_chi2() -> None:
    n, alpha, dmin = 200_000, 3.0, 5
    dmax = default_dmax(n)
    deg = sample_power_law_degrees(n, alpha, dmin, dmax, make_rng(7))
    assert deg.min() >= dmin and deg.max() <= dmax and int(deg.sum()) % 2 == 0
    _, pvalue = discrete_ks(deg, alpha, dmin, dmax)
    assert pvalue > 1e-6
    assert chi2_pvalue(deg, alpha, dmin, dmax) > 1e-6
    # the same tests have power: a 5% change of the exponent is rejected
    assert discrete_ks(deg, 2.85, dmin, dmax)[1] < 1e-6
    assert chi2_pvalue(deg, 2.85, dmin, dmax) < 1e-6


def test_graph_degrees_follow_the_law_after_cleanup() -> None:
    n = 50_000
    g = power_law_graph(n, 3.0, 5, make_rng(3))
    info = g.describe()
    assert g.n_nodes == n and info["dmax"] == 223 == default_dmax(n)
    assert 2 * g.n_edges == info["stubs"] - 2 * (info["self_loops"] + info["duplicate_edges"])
    assert info["self_loops"] + info["duplicate_edges"] < 0.002 * info["stubs"]
    assert g.degrees.max() <= 223
    d, _ = discrete_ks(g.degrees, 3.0, 5, 223)
    assert d < 0.01  # removal moves a negligible mass below d_min


def test_configuration_model_keeps_degrees_of_a_simple_matching() -> None:
    deg = np.array([1, 1, 2, 2, 0])
    g = configuration_model(deg, make_rng(0))
    assert g.n_nodes == 5 and g.degrees[4] == 0
    lost = g.info["self_loops"] + g.info["duplicate_edges"]
    assert g.degrees.sum() == deg.sum() - 2 * lost
    with pytest.raises(InvalidParameterError, match="even"):
        configuration_model([1, 2], make_rng(0))
    with pytest.raises(InvalidParameterError, match="degrees"):
        configuration_model([-1, 1], make_rng(0))


def test_seeded_graphs_repeat_and_differ_by_seed() -> None:
    a = power_law_graph(2000, 2.5, 3, make_rng(1))
    b = power_law_graph(2000, 2.5, 3, make_rng(1))
    c = power_law_graph(2000, 2.5, 3, make_rng(2))
    assert (a.adjacency != b.adjacency).nnz == 0
    assert (a.adjacency != c.adjacency).nnz > 0


def test_parameter_errors() -> None:
    with pytest.raises(InvalidParameterError, match="dmax"):
        power_law_graph(100, 3.0, 20, make_rng(0))  # ⌊√100⌋ = 10 < d_min
    with pytest.raises(InvalidParameterError, match="alpha"):
        power_law_graph(100, 0.0, 2, make_rng(0))
    with pytest.raises(InvalidParameterError, match="n"):
        power_law_graph(1, 3.0, 1, make_rng(0))
    # one node with an odd-only support can never have an even degree sum
    with pytest.raises(InvalidParameterError, match="even"):
        sample_power_law_degrees(1, 3.0, 3, 3, make_rng(0))
