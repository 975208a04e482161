"""Random power-law graphs from the configuration model (Korolova thesis §6.3.1.1).

The thesis generates its synthetic social networks as follows (§6.3.1.1, following [6] and,
for the degree cap, [137]):

1. draw the degrees ``d(v_1), ..., d(v_n)`` independently from
   ``Pr[d = x] = C x^{-α}`` for ``d_min <= x <= d_max`` (``C`` normalises the sum to 1);
2. make ``D = Σ d(v_i)`` "minivertices" (stubs), ``d(v_i)`` of them for node ``v_i``, and draw
   a uniformly random perfect matching of the stubs;
3. turn each matched pair into an edge between the owners of the two stubs;
4. "The graph has a few multi-edges and self-loops that we remove in our experiments".

``d_max`` is capped at ``√n`` ("a single person ... cannot know a constant fraction of all
users"); we use ``d_max = floor(√n)`` unless the caller gives another cap.

Decisions the thesis leaves open (each tested in ``tests/test_attacks_lookahead_graphs.py``):

* **Odd degree sum.** A perfect matching needs an even number of stubs. If the sum is odd we
  redraw the *last* node's degree from the same law until the sum is even; the sequence is
  then i.i.d. conditioned on an even sum (no node's degree leaves ``[d_min, d_max]``). If the
  law has only odd (or only even) support values of one parity and the sum cannot become
  even, the parameters are rejected.
* **Multi-edges and self-loops are removed** (the thesis's choice), by
  :func:`searchveil.io.graphs.graph_from_edges`; their counts are recorded in
  ``Graph.info`` (``self_loops``, ``duplicate_edges``). A node can thus end with degree below
  ``d_min`` (for α = 3, d_min = 5, n = 10^5 about 0.02% of the stub pairs are dropped); every node
  is kept, isolated or not, so ``n_nodes == n``.
* **Randomness**: the degrees and the matching come from ``rng.numpy_generator()`` (bulk,
  non-privacy randomness: the graph is a synthetic test bed, not a release). With a seeded
  ``rng`` the graph is reproducible.

The random matching is a uniformly random permutation of the stub array paired off two by
two, which is a uniformly random perfect matching; everything is vectorised (no Python loop
over nodes or stubs).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from searchveil.errors import InvalidParameterError
from searchveil.io.graphs import Graph, graph_from_edges
from searchveil.rng import RandomSource
from searchveil.validate import check_int, check_positive

__all__ = [
    "power_law_pmf",
    "sample_power_law_degrees",
    "configuration_model",
    "power_law_graph",
    "default_dmax",
]


def default_dmax(n: int) -> int:
    """The thesis's degree cap, ``floor(√n)`` (§6.3.1.1)."""
    return math.isqrt(check_int("n", n, minimum=1))


def _check_law(alpha: float, dmin: int, dmax: int) -> tuple[float, int, int]:
    a = check_positive("alpha", alpha)
    lo = check_int("dmin", dmin, minimum=1)
    hi = check_int("dmax", dmax, minimum=1)
    if hi < lo:
        raise InvalidParameterError("dmax", hi, f"an integer >= dmin ({lo})")
    return a, lo, hi


def power_law_pmf(
    alpha: float, dmin: int, dmax: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Support ``dmin..dmax`` and probabilities ``C x^{-α}`` (summing to 1)."""
    a, lo, hi = _check_law(alpha, dmin, dmax)
    x = np.arange(lo, hi + 1, dtype=np.int64)
    w = x.astype(np.float64) ** -a
    return x, w / w.sum()


def sample_power_law_degrees(
    n: int, alpha: float, dmin: int, dmax: int, rng: RandomSource, *, even_sum: bool = True
) -> npt.NDArray[np.int64]:
    """``n`` i.i.d. degrees from ``Pr[d = x] ∝ x^{-α}`` on ``[dmin, dmax]`` (inverse CDF).

    With ``even_sum`` the last degree is redrawn until the total is even (see the module
    docstring).
    """
    n = check_int("n", n, minimum=1)
    x, p = power_law_pmf(alpha, dmin, dmax)
    cdf = np.cumsum(p)
    cdf[-1] = 1.0
    gen = rng.numpy_generator()
    deg = x[np.minimum(np.searchsorted(cdf, gen.random(n), side="right"), x.size - 1)]
    if even_sum and int(deg.sum()) % 2 == 1:
        rest = int(deg[:-1].sum())
        if np.all((x + rest) % 2 == 1):
            raise InvalidParameterError(
                "n/dmin/dmax", (n, dmin, dmax), "a degree law whose sum can be even"
            )
        while True:
            cand = x[np.minimum(np.searchsorted(cdf, gen.random(64), side="right"), x.size - 1)]
            ok = cand[(cand + rest) % 2 == 0]
            if ok.size:
                deg[-1] = ok[0]
                break
    return deg


def configuration_model(
    degrees: npt.ArrayLike, rng: RandomSource, *, info: dict[str, Any] | None = None
) -> Graph:
    """A random graph with the given degree sequence: uniform random stub matching, then
    self-loops and multi-edges removed (thesis §6.3.1.1). Node ``i`` has ``degrees[i]`` stubs.
    """
    deg = np.asarray(degrees, dtype=np.int64).ravel()
    if deg.size == 0:
        raise InvalidParameterError("degrees", "[]", "at least one node")
    if deg.min() < 0:
        raise InvalidParameterError("degrees", int(deg.min()), "degrees >= 0")
    if int(deg.sum()) % 2:
        raise InvalidParameterError("degrees", f"sum {int(deg.sum())}", "an even degree sum")
    stubs = np.repeat(np.arange(deg.size, dtype=np.int64), deg)
    gen = rng.numpy_generator()
    gen.shuffle(stubs)
    pairs = stubs.reshape(-1, 2)
    meta = {"model": "configuration", "stubs": int(stubs.size), **(info or {})}
    return graph_from_edges(pairs[:, 0], pairs[:, 1], undirected=True, n_nodes=deg.size, info=meta)


def power_law_graph(
    n: int,
    alpha: float,
    dmin: int,
    rng: RandomSource,
    *,
    dmax: int | None = None,
) -> Graph:
    """The thesis's synthetic social network: configuration model with power-law degrees
    (α, d_min, d_max = ⌊√n⌋ by default), self-loops and multi-edges removed."""
    n = check_int("n", n, minimum=2)
    hi = default_dmax(n) if dmax is None else check_int("dmax", dmax, minimum=1)
    a, lo, hi = _check_law(alpha, dmin, hi)
    deg = sample_power_law_degrees(n, a, lo, hi, rng)
    info = {
        "alpha": a,
        "dmin": lo,
        "dmax": hi,
        "n": n,
        "seeded": rng.seeded,
    }
    return configuration_model(deg, rng, info=info)
