"""Exact random primitives for the social mechanisms (internal).

Only uniform integers from a :class:`~searchveil.rng.RandomSource` and integer arithmetic are
used, so every probability below is exactly the stated one:

* :func:`bernoulli_exp` — Bernoulli(exp(−num/den)) by Canonne–Kamath–Steinke (NeurIPS 2020)
  Algorithm 1, re-exported from :mod:`searchveil.mechanisms.noise` (the sampler under the
  project's discrete Laplace and Gaussian noise).
* :func:`bernoulli_two_over_e` — Bernoulli(2/e): ``2/e = 1 − (1/3)(1 − (1/4)(1 − (1/5)(…)))``,
  so with ``K = 3, 4, …`` drawn Bernoulli(1/K) until the first failure, the number of successes
  ``j`` is even with probability ``Σ_{j even} 2(j+2)/(j+3)! = 2/e``.
* :func:`uniform_below_big` — a uniform integer below an arbitrary-size ``M`` (rejection on
  ``bit_length(M)`` random bits).
"""

from __future__ import annotations

import bisect
from itertools import accumulate

import numpy as np
import numpy.typing as npt

from searchveil.errors import InternalError
from searchveil.mechanisms.noise import bernoulli_exp as bernoulli_exp  # re-exported
from searchveil.rng import RandomSource

U64 = npt.NDArray[np.uint64]
BoolArray = npt.NDArray[np.bool_]


def bernoulli_two_over_e(n: int, rng: RandomSource) -> BoolArray:
    """``n`` independent exact Bernoulli(2/e) draws (see the module docstring)."""
    succ = np.zeros(n, dtype=np.int64)
    idx = np.arange(n)
    k = 3
    while idx.size:
        a = rng.integers_below(k, idx.size) == 0
        succ[idx[a]] += 1
        idx = idx[a]
        k += 1
        if k > 260:  # pragma: no cover
            raise InternalError("Bernoulli(2/e) sampler did not terminate")
    return (succ % 2) == 0


def uniform_below_big(m: int, rng: RandomSource) -> int:
    """A uniform integer in ``[0, m)`` for any ``m >= 1`` (Python int)."""
    if m < 1:
        raise InternalError("uniform_below_big needs m >= 1")
    if m < 2**63:
        return int(rng.integers_below(m, 1)[0])
    bits = m.bit_length()
    words = (bits + 63) // 64
    mask = (1 << bits) - 1
    while True:  # accepts with probability > 1/2 per round
        w = rng.words(words)
        x = 0
        for v in w.tolist():
            x = (x << 64) | int(v)
        x &= mask
        if x < m:
            return x


def choose_weighted_big(weights: list[int], rng: RandomSource) -> int:
    """Index ``i`` with probability ``weights[i] / sum(weights)`` (non-negative Python ints)."""
    cum = list(accumulate(weights))
    if not cum or cum[-1] <= 0:
        raise InternalError("choose_weighted_big needs a positive total weight")
    u = uniform_below_big(cum[-1], rng)
    return bisect.bisect_right(cum, u)
