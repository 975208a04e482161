"""Expected accuracy of the social recommenders and the Corollary 1 upper bound.

Korolova (2012) thesis: Definition 5 (accuracy ``Σ u_i p_i / u_max``), Lemma 8 / Corollary 1
(``1 − δ ≤ 1 − c(n−k)/(n−k+(k+1)e^{εt})``, with the example n = 4·10^8, c = 0.99, k = 100,
t = 150, ε = 0.1 → 0.46), §5.5.1 (node- and graph-specific use: t computed for the utility
vector) and Lemma 10 (Laplace, two candidates).

* A_E: closed form ``Σ p_i u_i / u_max``.
* Permute-and-flip: exact law ``P(i) = q_i ∫_0^1 Π_{j≠i}(1 − q_j s) ds`` (coins view, see
  mechanisms.py), integrated by Gauss–Legendre on geometric panels in ``s``.
* A_L (Definition 8, continuous Laplace of scale b = S/ε): ``P(win in level g) = m_g ∫ f(y−u_g)
  Π_h F(y−u_h)^{m_h} / F(y−u_g) dy`` by Gauss–Legendre (8 nodes) on panels of width ≤ b (the
  20 highest levels, where the integrand has kinks, are panel edges) over
  ``[u_max − 25b, u_max + 25b]`` (levels below ``u_max − 60b`` are dropped; both truncations
  change the result by less than ``N e^{−25}``). The released sampler uses discrete Laplace of
  the same scale on integer-scaled utilities; its exact law is
  ``LaplaceArgmax.level_probabilities`` (within ≈1% of this one at scale 1/ε, closer as the
  integer scale grows; docs/privacy/social.md).
* Corollary 1 per target: the bound is minimised over every admissible c (one per utility
  level) with k = #{u_i > (1−c)u_max}, n = number of candidates and t from an explicit edge
  construction (common neighbours / weighted paths; docs/privacy/social.md). Our t is the
  length of a valid construction, so the bound is a valid upper bound on any monotone ε-DP
  algorithm's accuracy (the thesis's t is the minimum; a larger t only loosens the bound).
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import numpy.typing as npt

from searchveil.errors import InvalidParameterError
from searchveil.social.mechanisms import SmoothedSampling, epsilon_fraction
from searchveil.social.utility import (
    CommonNeighbours,
    FloatArray,
    IntArray,
    TargetUtilities,
    UtilityFunction,
)
from searchveil.validate import check_int, check_positive

__all__ = [
    "corollary1",
    "node_bound",
    "min_utility_candidate_degree",
    "min_edges_to_top",
    "exponential_accuracy",
    "permute_and_flip_accuracy",
    "laplace_accuracy",
    "smoothing_accuracy",
    "laplace_two_nodes",
    "monte_carlo_accuracy",
]


def corollary1(*, n: float, c: float, k: float, t: float, epsilon: float) -> float:
    """Corollary 1: the largest accuracy any monotone ε-DP recommender can guarantee.

    ``1 − c(n−k) / (n−k + (k+1)e^{εt})`` evaluated stably for large ``εt``.
    """
    check_positive("n", n)
    check_positive("epsilon", epsilon)
    if not (0 < c < 1) and c != 1:
        raise InvalidParameterError("c", c, "a number in (0, 1]")
    if not (0 <= k < n):
        raise InvalidParameterError("k", k, f"a number in [0, n={n:g})")
    if t < 0:
        raise InvalidParameterError("t", t, "a number >= 0")
    if math.isinf(t):
        return 1.0
    r = math.log(k + 1) - math.log(n - k) + epsilon * t
    # c / (1 + e^r) computed without overflow
    frac = math.exp(-r) / (1.0 + math.exp(-r)) if r > 0 else 1.0 / (1.0 + math.exp(r))
    return 1.0 - c * frac


def min_edges_to_top(
    tu: TargetUtilities, utility: UtilityFunction, *, strict: bool = False
) -> float:
    """Edges (none incident to the target) that lift a minimum-utility candidate x to the top
    utility level, by the construction in docs/privacy/social.md; ``inf`` when it cannot.

    ``strict=False`` (default) lets x *tie* with the best candidates: enough for recommenders
    that give equal-utility candidates equal probability (every mechanism here, and any that
    "only use the utilities", §5.3.2.3). ``strict=True`` makes x the unique maximum, as
    Lemma 8 needs for an arbitrary monotone algorithm.
    """
    vals, _ = tu.levels()
    vmax, vmin = int(vals[0]), int(vals[-1])
    if isinstance(utility, CommonNeighbours):
        if not strict:
            return float(vmax - vmin)
        if vmax + 1 <= tu.degree:
            return float(vmax + 1 - vmin)
        # u_max = d_r: cut one edge from every top node to N(r), connect x to all of N(r)
        top = int(np.count_nonzero(tu.values == vmax))
        return float(tu.degree - vmin + top)
    q, p = utility.gamma.denominator, utility.gamma.numerator
    have = vmin // q  # neighbours of r the minimum-utility node x may already be adjacent to
    avail = np.sort(tu.neighbour_common)[: max(tu.degree - have, 0)][::-1]
    if avail.size == 0:
        return math.inf
    j = np.arange(1, avail.size + 1, dtype=np.float64)
    gain = vmin + j * q + p * np.cumsum(avail.astype(np.float64))
    rival = vmax + p * j  # x's neighbours gain γ per added edge (conservative: the top node)
    ok = np.flatnonzero(gain > rival if strict else gain >= rival)
    return float(ok[0] + 1) if ok.size else math.inf


def min_utility_candidate_degree(tu: TargetUtilities, degrees: IntArray, order: IntArray) -> int:
    """Smallest degree of a minimum-utility candidate (``order``: nodes by ascending degree)."""
    if tu.n_zero > 0:
        excluded = np.concatenate([tu.neighbours, tu.nodes, [tu.target]])
        head = order[: excluded.size + 1]
        free = head[~np.isin(head, excluded)]
        return int(degrees[free[0]])
    members = tu.nodes[tu.values == tu.values.min()]
    return int(degrees[members].min())


def node_bound(
    tu: TargetUtilities,
    utility: UtilityFunction,
    epsilon: float,
    *,
    x_degree: int = 0,
    strict: bool = False,
) -> float:
    """Node-specific Corollary 1 bound (§5.5), minimised over c.

    For weighted paths the lifted node's ``x_degree`` neighbours gain utility too and may join
    the high group of the modified graph, so ``k + 1`` becomes ``k + 1 + x_degree`` in Lemma 8
    (common neighbours: only x changes).
    """
    eps = float(epsilon_fraction(epsilon))
    vals, counts = tu.levels()
    if vals.size < 2 or vals[0] <= 0:
        return 1.0
    t = min_edges_to_top(tu, utility, strict=strict)
    if math.isinf(t):
        return 1.0
    extra = 0 if isinstance(utility, CommonNeighbours) else int(x_degree)
    n = float(counts.sum())
    ks = np.cumsum(counts)[:-1].astype(np.float64)  # k for c just reaching the next level
    cs = 1.0 - vals[1:].astype(np.float64) / float(vals[0])
    best = 1.0
    for c, k in zip(cs.tolist(), ks.tolist(), strict=True):
        if c <= 0:
            continue
        # Lemma 8 with the high group of G2 of size at most k + 1 + extra
        r = math.log(k + 1 + extra) - math.log(n - k) + eps * t
        frac = math.exp(-r) / (1.0 + math.exp(-r)) if r > 0 else 1.0 / (1.0 + math.exp(r))
        best = min(best, 1.0 - c * frac)
    return best


def _levels(values: npt.ArrayLike, counts: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    v = np.asarray(values, dtype=np.float64).ravel()
    c = np.asarray(counts, dtype=np.float64).ravel()
    if v.size == 0 or v.size != c.size or (c < 1).any() or v.max() <= 0:
        raise InvalidParameterError(
            "utilities", f"{v.size} levels", "non-empty levels with a positive maximum"
        )
    return v, c


def exponential_accuracy(
    values: npt.ArrayLike, counts: npt.ArrayLike, *, epsilon: float, sensitivity: float
) -> float:
    """A_E: ``Σ p_i u_i / u_max`` with ``p_i ∝ exp(ε u_i / S)`` (utilities in utility units)."""
    v, c = _levels(values, counts)
    a = float(epsilon_fraction(epsilon)) / float(sensitivity)
    logw = np.log(c) + a * (v - v.max())
    w = np.exp(logw - logw.max())
    return float(np.dot(w, v) / w.sum() / v.max())


def _geom_panels(scale: float, n_panels: int = 32, order: int = 8) -> tuple[FloatArray, FloatArray]:
    edges = np.concatenate([[0.0], np.geomspace(min(1e-3 / scale, 0.5), 1.0, n_panels)])
    xs, ws = np.polynomial.legendre.leggauss(order)
    lo, hi = edges[:-1, None], edges[1:, None]
    nodes = (lo + (hi - lo) * 0.5 * (xs[None, :] + 1.0)).ravel()
    weights = ((hi - lo) * 0.5 * ws[None, :]).ravel()
    return nodes, weights


def permute_and_flip_accuracy(
    values: npt.ArrayLike, counts: npt.ArrayLike, *, epsilon: float, sensitivity: float
) -> float:
    """Permute-and-flip with ℓ∞ sensitivity Δ (coins ``exp(ε(u−u*)/(2Δ))``)."""
    v, c = _levels(values, counts)
    a = float(epsilon_fraction(epsilon)) / (2.0 * float(sensitivity))
    q = np.exp(a * (v - v.max()))
    s, w = _geom_panels(float(np.dot(c, q)))
    lq = np.log1p(-np.outer(s, q))  # nodes × levels
    total = lq @ c
    probs = c * q * (w @ np.exp(total[:, None] - lq))
    return float(np.dot(probs, v) / probs.sum() / v.max())


def laplace_accuracy(
    values: npt.ArrayLike, counts: npt.ArrayLike, *, epsilon: float, sensitivity: float
) -> float:
    """A_L with continuous Laplace noise of scale ``S/ε`` (Definition 8)."""
    v, c = _levels(values, counts)
    b = float(sensitivity) / float(epsilon_fraction(epsilon))
    order = np.argsort(-v)
    v, c = v[order], c[order]
    keep = v >= v.max() - 60 * b
    v, c = v[keep], c[keep]
    edges = np.linspace(v.max() - 25 * b, v.max() + 25 * b, 51)
    # the integrand has kinks at the levels: make the (up to 20) highest ones panel edges
    kinks = v[:20][v[:20] > edges[0]]
    edges = np.unique(np.concatenate([edges, kinks]))
    xs, ws = np.polynomial.legendre.leggauss(8)
    lo, hi = edges[:-1, None], edges[1:, None]
    y = (lo + (hi - lo) * 0.5 * (xs[None, :] + 1.0)).ravel()
    wy = ((hi - lo) * 0.5 * ws[None, :]).ravel()
    z = y[:, None] - v[None, :]  # nodes × levels
    neg = z < 0
    az = np.abs(z) / b
    e = np.exp(-az)
    lf_pos = np.log1p(-0.5 * e)
    lf = np.where(neg, -az - math.log(2.0), lf_pos)
    total = lf @ c
    # log f(z) − log F(z): −log b for z < 0, else −|z|/b − log 2b − log F(z)
    ratio = np.where(neg, -math.log(b), -az - math.log(2 * b) - lf_pos)
    probs = c * (wy @ np.exp(total[:, None] + ratio))
    return float(np.dot(probs, v) / probs.sum() / v.max())


def smoothing_accuracy(values: npt.ArrayLike, counts: npt.ArrayLike, *, epsilon: float) -> float:
    """A_S over R_best: ``x + (1−x)·mean(u)/u_max`` (exact)."""
    v, c = _levels(values, counts)
    p = SmoothedSampling(epsilon=epsilon).level_probabilities(
        v.astype(np.int64), c.astype(np.int64), 1
    )
    return float(np.dot(p, v) / v.max())


def laplace_two_nodes(u1: float, u2: float, epsilon: float) -> float:
    """Lemma 10: ``P[u1 + X1 > u2 + X2]`` for Laplace(1/ε) noise, ``u1 >= u2``."""
    d = epsilon * (u1 - u2)
    if d < 0:
        raise InvalidParameterError("u1", u1, f"a number >= u2 = {u2}")
    return 1.0 - 0.5 * math.exp(-d) - d / (4.0 * math.exp(d))


# the float-noise recommenders monte_carlo_accuracy can simulate (checks only, never a release)
SimulatedMechanism = Literal["laplace", "permute_and_flip", "exponential"]


def monte_carlo_accuracy(
    values: npt.ArrayLike,
    counts: npt.ArrayLike,
    *,
    mechanism: SimulatedMechanism,
    epsilon: float,
    sensitivity: float,
    trials: int,
    gen: np.random.Generator,
) -> float:
    """Monte-Carlo accuracy with floating-point noise (an *estimate* for checks; never a release):
    ``laplace`` (Definition 8) or ``permute_and_flip`` (exponential-noise report-max form)."""
    check_int("trials", trials, minimum=1)
    v, c = _levels(values, counts)
    full = np.repeat(v, c.astype(np.int64))
    eps = float(epsilon_fraction(epsilon))
    got = 0.0
    for _ in range(trials):
        if mechanism == "laplace":
            noisy = full + gen.laplace(0.0, sensitivity / eps, full.size)
        elif mechanism == "permute_and_flip":
            noisy = full + gen.exponential(2.0 * sensitivity / eps, full.size)
        elif mechanism == "exponential":
            noisy = full * (eps / sensitivity) + gen.gumbel(0.0, 1.0, full.size)
        else:
            raise InvalidParameterError("mechanism", mechanism, "laplace | permute_and_flip")
        got += full[int(np.argmax(noisy))]
    return float(got / trials / v.max())
