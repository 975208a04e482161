"""Distributed discrete Laplace noise: Pólya (negative binomial) shares, sampled exactly.

The discrete Laplace law of scale b, ``P[X = k] = (1 − p)/(1 + p) · p^|k|`` with
``p = e^{−1/b}``, is the difference G − G′ of two independent geometric variables,
``P[G = k] = (1 − p) p^k`` — and the geometric law is the negative binomial NB(1, p), which is
infinitely divisible: the sum of independent NB(a₁, p), …, NB(a_j, p) is NB(a₁ + … + a_j, p),
``P[Y = k] = Γ(k + a)/(Γ(a) k!) · (1 − p)^a p^k``. So a **Pólya share**
``S = Y − Y′`` with Y, Y′ ~ NB(1/n, p) independent has the property that **any n independent
shares sum to DLap(b) exactly**, and j shares to the symmetric "Pólya difference"
NB(j/n, p) − NB(j/n, p) (:class:`PolyaDifference`). The CELS parties each add one share to
their counts before the secure sum (docs/privacy/cels.md §5): whoever subtracts its own share
still faces n shares, the full discrete Laplace.

**Exact sampling.** NB(a, p) with rational a ≤ 1 and p = e^{−y}, y rational (the scale is
rounded up to a rational t/s exactly as :class:`~searchveil.mechanisms.noise.DiscreteLaplace`
rounds it), is drawn by inverting its distribution function F against an integer table
``f_k = ⌊2^64 F(k)⌋``: one uniform 64-bit word per draw and a binary search; a word equal to a
table entry (probability < table size / 2^64) draws further words and compares them with bounds
on F(k) computed to as many bits as that needs (:class:`_CdfInversion`). Every bound is exact
integer arithmetic: e^{−y} from :func:`searchveil.mechanisms.noise` 's Taylor bounds,
(1 − p)^a as an integer root, the ratios Γ(k + a)/(Γ(a) k!) as products of rationals — no
floating point touches a sample. F(k) = (1 − p)^a · Q(p) with Q a polynomial with rational
coefficients is transcendental (p = e^{−y} is, by Lindemann's theorem, and (1 − p)^a is
algebraic over ℚ(p)), so it is never a dyadic rational and the refinement always ends. No
Gamma–Poisson mixture (floating point) is used.

The accounting side (:class:`PolyaDifference`: pmf, survival function, variance) is numerical
(scipy's negative binomial), as the other tail computations of the package are.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import gmpy2
import numpy as np
import numpy.typing as npt
from scipy import stats

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import (
    DiscreteLaplace,
    exp_neg_bounds,
    power_bounds,
    round_up_rational,
)
from searchveil.rng import RandomSource
from searchveil.validate import check_int, check_positive

__all__ = ["MAX_POLYA_SCALE", "MAX_SHARES", "PolyaDifference", "PolyaShares", "negative_binomial"]

#: the largest scale the inversion table supports (≈ 44·scale entries, built once per scale)
MAX_POLYA_SCALE = 16384.0
MAX_SHARES = 64
_PREC = 128  # bits of the bounds the table is built from
_TOP = (1 << 64) - 1

IntArray = npt.NDArray[np.int64]


def _exp_neg(y: Fraction, prec: int) -> tuple[int, int]:
    """Integers ``lo <= 2^prec · e^(−y) <= hi`` for rational y > 0 (pieces of at most 16)."""
    pieces = max(1, math.ceil(y / 16))
    if pieces == 1:
        return exp_neg_bounds(y, prec)
    return power_bounds(y / pieces, pieces, prec)


def _root(x: int, n: int) -> tuple[int, int]:
    """⌊x^(1/n)⌋ and ⌈x^(1/n)⌉."""
    r, exact = gmpy2.iroot(gmpy2.mpz(x), n)
    return int(r), int(r) + (0 if exact else 1)


class _NegBinomialCdf:
    """Integer bounds on F(k) = P[NB(a, p) <= k], p = e^{−y}, rational 0 < a <= 1."""

    def __init__(self, shape: Fraction, y: Fraction) -> None:
        if not 0 < shape <= 1:
            raise InvalidParameterError("shape", float(shape), "a rational in (0, 1]")
        self.shape, self.y = shape, y

    def bounds(self, prec: int) -> Iterator[tuple[int, int]]:
        """``(lo, hi)`` with ``lo <= 2^prec·F(k) <= hi`` for k = 0, 1, 2, … (a few units
        apart per term): P(0) = (1 − p)^a, P(j + 1) = P(j) · p · (a + j)/(j + 1)."""
        one = 1 << prec
        plo, phi = _exp_neg(self.y, prec)
        qlo, qhi = one - phi, one - plo  # 2^prec (1 − p)
        a, b = self.shape.numerator, self.shape.denominator
        # 2^prec (1 − p)^(a/b) = (Q^a · 2^(prec·(b − a)))^(1/b)
        tlo = _root(qlo**a << (prec * (b - a)), b)[0]
        thi = _root(qhi**a << (prec * (b - a)), b)[1]
        flo, fhi = tlo, thi
        yield flo, min(fhi, one)
        j = 0
        while True:
            num, den = a + j * b, b * (j + 1)  # (a/b + j)/(j + 1)
            tlo = (tlo * plo * num) // (den << prec)
            thi = -((-thi * phi * num) // (den << prec))
            flo, fhi = flo + tlo, fhi + thi
            j += 1
            yield flo, min(fhi, one)

    def at(self, k: int, prec: int) -> tuple[int, int]:
        for i, b in enumerate(self.bounds(prec)):
            if i == k:
                return b
        raise AssertionError("unreachable")  # pragma: no cover


class _CdfInversion:
    """Exact sampler of N >= 0 with P[N <= k] = F(k), by inversion: N = min{k : U < F(k)} for
    U uniform on [0, 1) (module docstring)."""

    def __init__(self, cdf: _NegBinomialCdf) -> None:
        self.cdf = cdf
        prec = _PREC
        while True:
            f = self._floors(prec)
            if f is not None:
                break
            prec += 64  # some 2^64·F(k) within the bounds' width of an integer: finer bounds
        self.f = np.array(f, dtype=np.uint64)  # nondecreasing, last entry 2^64 − 1

    def _floors(self, prec: int) -> list[int] | None:
        shift = prec - 64
        out: list[int] = []
        for lo, hi in self.cdf.bounds(prec):
            flo, fhi = lo >> shift, hi >> shift
            if flo >= _TOP:  # F(k) >= 1 − 2^−64 and F(k) < 1: ⌊2^64 F(k)⌋ = 2^64 − 1
                out.append(_TOP)
                return out
            if flo != fhi:
                return None
            out.append(flo)
        raise AssertionError("unreachable")  # pragma: no cover

    def sample(self, n: int, rng: RandomSource) -> IntArray:
        w = rng.words(n)
        # the first k with f_k > w: U < F(k) for sure there (U < (w + 1)/2^64 <= F(k)), and
        # U >= F(j) for every j with f_j < w; undecided only where some f_j == w
        k = np.searchsorted(self.f, w, side="right").astype(np.int64)
        prev = self.f[np.maximum(k - 1, 0)]
        for i in np.flatnonzero((k > 0) & (prev == w)):  # probability < len(f)/2^64 per draw
            first = int(np.searchsorted(self.f, w[i], side="left"))
            k[i] = self._resolve(int(w[i]), first, rng)
        return k

    def _resolve(self, prefix: int, k: int, rng: RandomSource) -> int:
        """N given U's first 64 bits ``prefix`` and N >= k: test U < F(k) for k, k + 1, …,
        drawing more bits of U when the bits so far do not decide."""
        nbits = 64
        while True:
            extra = 32
            while True:
                lo, hi = self.cdf.at(k, nbits + extra)
                xlo, xhi = prefix << extra, (prefix + 1) << extra  # U·2^(nbits+extra) in here
                if lo >= xhi:  # F(k) above every U with these bits
                    return k
                if hi <= xlo:  # F(k) at or below every such U
                    break
                if lo >= xlo and hi <= xhi:  # F(k) inside U's interval: more bits of U
                    prefix = (prefix << 64) | int(rng.words(1)[0])
                    nbits += 64
                else:  # the bounds straddle an end of U's interval: finer bounds
                    extra += 64
            k += 1


@functools.lru_cache(maxsize=32)
def _table(shape: Fraction, y: Fraction) -> _CdfInversion:
    return _CdfInversion(_NegBinomialCdf(shape, y))


def negative_binomial(shape: Fraction, y: Fraction, size: int, rng: RandomSource) -> IntArray:
    """``size`` exact draws of NB(shape, e^{−y}) (rational 0 < shape <= 1, y > 0)."""
    return _table(Fraction(shape), Fraction(y)).sample(int(size), rng)


@dataclass(frozen=True)
class PolyaDifference:
    """The law of NB(shape, p) − NB(shape, p) (independent; shape 1: the discrete Laplace).
    Numerical pmf and tails for the accounting."""

    shape: float
    p: float

    @property
    def variance(self) -> float:
        return 2.0 * self.shape * self.p / (1.0 - self.p) ** 2

    def _nb(self) -> Any:
        return stats.nbinom(self.shape, 1.0 - self.p)

    def _support(self) -> npt.NDArray[np.float64]:
        hi = int(self._nb().isf(1e-40)) + 2
        return np.arange(hi, dtype=np.float64)

    def pmf(self, k: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """``P[X = k]`` = Σ_y P[Y = y] P[Y = y + |k|]."""
        kk = np.abs(np.asarray(k, dtype=np.int64))
        y = self._support()
        top = int(kk.max(initial=0))
        py = self._nb().pmf(np.arange(y.size + top, dtype=np.float64))
        head = py[: y.size]
        flat = [float(np.dot(head, py[v : v + y.size])) for v in np.ravel(kk).tolist()]
        return np.array(flat, dtype=np.float64).reshape(kk.shape)

    def sf(self, t: int) -> float:
        """``P[X >= t]`` for an integer t."""
        if t <= 0:
            return 1.0 - self.sf(1 - t)  # symmetric: P[X <= t − 1] = P[X >= 1 − t]
        nb, y = self._nb(), self._support()
        return float(np.sum(nb.pmf(y) * nb.sf(y + t - 1)))


@dataclass(frozen=True)
class PolyaShares:
    """DLap(``scale``) split into ``shares`` Pólya shares, each NB(1/shares, p) − NB(1/shares,
    p), p = e^{−1/b} with b the scale rounded up to a rational (as the discrete Laplace is).
    Any ``shares`` of them sum to DLap(b) exactly; :meth:`total` is the law of the sum of any
    number of them."""

    scale: float
    shares: int

    def __post_init__(self) -> None:
        check_positive("scale", self.scale, maximum=MAX_POLYA_SCALE)
        check_int("shares", self.shares, minimum=1, maximum=MAX_SHARES)

    @property
    def full(self) -> DiscreteLaplace:
        """What any ``shares`` shares sum to."""
        return DiscreteLaplace(scale=self.scale)

    @property
    def effective_scale_fraction(self) -> Fraction:
        return round_up_rational(float(self.scale))

    @property
    def effective_scale(self) -> float:
        return float(self.effective_scale_fraction)

    @property
    def p(self) -> float:
        return math.exp(-1.0 / self.effective_scale)

    def sample(self, size: int, rng: RandomSource) -> IntArray:
        """``size`` independent shares."""
        y = 1 / self.effective_scale_fraction
        nb = negative_binomial(Fraction(1, self.shares), y, 2 * int(size), rng)
        return (nb[: int(size)] - nb[int(size) :]).astype(np.int64)

    def total(self, count: int) -> PolyaDifference:
        """The law of the sum of ``count`` independent shares."""
        return PolyaDifference(shape=count / self.shares, p=self.p)

    def describe(self) -> dict[str, Any]:
        return {
            "distribution": "polya_shares_of_discrete_laplace",
            "scale": self.scale,
            "effective_scale": self.effective_scale,
            "shares_for_the_full_noise": self.shares,
            "share": f"NB(1/{self.shares}, p) − NB(1/{self.shares}, p), p = e^(−1/scale)",
            "sampler": "exact (inversion of the negative binomial distribution function on "
            "exact integer bounds)",
        }
