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
from searchveil.mechanisms.noise import DiscreteLaplace, exp_neg_bounds, round_up_rational
from searchveil.rng import RandomSource
from searchveil.validate import check_int, check_positive

__all__ = [
    "loss_grid",
    "MAX_POISSON_MEAN",
    "MAX_POLYA_SCALE",
    "MAX_SHARES",
    "PolyaDifference",
    "PolyaShares",
    "SkellamLaw",
    "SkellamShares",
    "negative_binomial",
    "poisson",
    "skellam_delta",
    "skellam_epsilon",
]

#: the largest scale the inversion table supports (≈ 44·scale entries, built once per scale)
MAX_POLYA_SCALE = 16384.0
MAX_SHARES = 64
#: the largest mean of one Poisson share (drawn as a sum of draws of mean <= 2048, each by
#: inversion of a table of ≈ mean + 20·√mean entries)
MAX_POISSON_MEAN = 1 << 20
_TABLE_MEAN = 2048
_PREC = 128  # bits of the bounds the table is built from
_TOP = (1 << 64) - 1

IntArray = npt.NDArray[np.int64]


def _exp_neg(y: Fraction, prec: int) -> tuple[int, int]:
    """Integers ``lo <= 2^prec · e^(−y) <= hi`` for rational y > 0: e^(−y/n) for pieces y/n of
    at most 16, raised to the n-th power by squaring with every product rounded down (lo) or
    up (hi) to as many guard bits as the steps need."""
    pieces = max(1, math.ceil(y / 16))
    if pieces == 1:
        return exp_neg_bounds(y, prec)
    work = prec + 2 * pieces.bit_length() + 16
    blo, bhi = exp_neg_bounds(y / pieces, work)
    rlo = rhi = 1 << work
    n = pieces
    while n:
        if n & 1:
            rlo, rhi = (rlo * blo) >> work, -((-rhi * bhi) >> work)
        n >>= 1
        if n:
            blo, bhi = (blo * blo) >> work, -((-bhi * bhi) >> work)
    return rlo >> (work - prec), -((-rhi) >> (work - prec))


def _root(x: int, n: int) -> tuple[int, int]:
    """⌊x^(1/n)⌋ and ⌈x^(1/n)⌉."""
    r, exact = gmpy2.iroot(gmpy2.mpz(x), n)
    return int(r), int(r) + (0 if exact else 1)


class _Cdf:
    """Integer bounds on a distribution function F of a variable N >= 0: :meth:`bounds` yields
    ``(lo, hi)`` with ``lo <= 2^prec·F(k) <= hi`` for k = 0, 1, 2, …; ``min_prec`` is the least
    precision at which they are a few units wide."""

    min_prec = 0

    def bounds(self, prec: int) -> Iterator[tuple[int, int]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def at(self, k: int, prec: int) -> tuple[int, int]:
        work = max(prec, self.min_prec)
        for i, (lo, hi) in enumerate(self.bounds(work)):
            if i == k:
                sh = work - prec
                return lo >> sh, -((-hi) >> sh)
        raise AssertionError("unreachable")  # pragma: no cover


class _NegBinomialCdf(_Cdf):
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


class _PoissonCdf(_Cdf):
    """Integer bounds on F(k) = P[Poisson(μ) <= k] for rational μ > 0: P(0) = e^{−μ},
    P(j + 1) = P(j)·μ/(j + 1). The terms grow by up to e^μ from the first, so the bounds are
    computed with 1.45·μ bits more than asked."""

    def __init__(self, mu: Fraction) -> None:
        if not 0 < mu <= _TABLE_MEAN:
            raise InvalidParameterError("mu", float(mu), f"a rational in (0, {_TABLE_MEAN}]")
        self.mu = mu
        self.min_prec = _PREC + math.ceil(1.45 * float(mu)) + 8

    def bounds(self, prec: int) -> Iterator[tuple[int, int]]:
        one = 1 << prec
        tlo, thi = _exp_neg(self.mu, prec)
        flo, fhi = tlo, thi
        yield flo, min(fhi, one)
        a, b = self.mu.numerator, self.mu.denominator
        j = 0
        while True:
            tlo = (tlo * a) // (b * (j + 1))
            thi = -((-thi * a) // (b * (j + 1)))
            flo, fhi = flo + tlo, fhi + thi
            j += 1
            yield flo, min(fhi, one)


class _CdfInversion:
    """Exact sampler of N >= 0 with P[N <= k] = F(k), by inversion: N = min{k : U < F(k)} for
    U uniform on [0, 1) (module docstring)."""

    def __init__(self, cdf: _Cdf) -> None:
        self.cdf = cdf
        prec = max(_PREC, cdf.min_prec)
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


@functools.lru_cache(maxsize=32)
def _poisson_table(mu: Fraction) -> _CdfInversion:
    return _CdfInversion(_PoissonCdf(mu))


def poisson(mu: Fraction, size: int, rng: RandomSource) -> IntArray:
    """``size`` exact draws of Poisson(mu) (rational 0 < mu <= :data:`MAX_POISSON_MEAN`): the
    sum of n draws of Poisson(mu/n), n the least with mu/n <= :data:`_TABLE_MEAN` (the law is
    additive in its mean), each by inversion of its table."""
    mu = Fraction(mu)
    if not 0 < mu <= MAX_POISSON_MEAN:
        raise InvalidParameterError("mu", float(mu), f"a rational in (0, {MAX_POISSON_MEAN}]")
    pieces = max(1, math.ceil(mu / _TABLE_MEAN))
    table = _poisson_table(mu / pieces)
    out = table.sample(int(size), rng)
    for _ in range(pieces - 1):
        out += table.sample(int(size), rng)
    return out


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


# -- Skellam shares (Agarwal, Kairouz, Liu, NeurIPS 2021) -------------------------------------
RDP_ORDERS = tuple(range(2, 257))


@dataclass(frozen=True)
class SkellamLaw:
    """Poisson(mu) − Poisson(mu) (independent), the symmetric Skellam law of variance 2·mu."""

    mu: float

    @property
    def variance(self) -> float:
        return 2.0 * self.mu

    def pmf(self, k: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return np.asarray(stats.skellam.pmf(np.asarray(k), self.mu, self.mu), dtype=np.float64)

    def sf(self, t: int) -> float:
        """``P[X >= t]`` for an integer t."""
        return float(stats.skellam.sf(t - 1, self.mu, self.mu))


def skellam_rdp(alpha: int, variance: float, l1: float, l2sq: float) -> float:
    """Rényi DP of order ``alpha`` (integer > 1) of adding Skellam noise of ``variance`` to
    every coordinate of an integer vector of ℓ1 sensitivity ``l1`` and squared ℓ2 sensitivity
    ``l2sq`` (Agarwal, Kairouz, Liu 2021, the Skellam mechanism's RDP bound):
    α·Δ₂²/(2σ²) + min(((2α − 1)·Δ₂² + 6Δ₁)/(4σ⁴), 3Δ₁/(2σ²)). A cross-check of
    :func:`skellam_delta` (which is tighter), not the accounting."""
    v = variance
    return alpha * l2sq / (2 * v) + min(((2 * alpha - 1) * l2sq + 6 * l1) / (4 * v * v),
                                        3 * l1 / (2 * v))  # fmt: skip


def skellam_rdp_epsilon(variance: float, delta: float, *, l1: float, l2sq: float) -> float:
    """The ε that the Rényi bound gives at δ (Canonne, Kamath, Steinke 2020, Prop. 12)."""
    best = math.inf
    for a in RDP_ORDERS:
        eps = skellam_rdp(a, variance, l1, l2sq)
        eps += (math.log(1 / delta) - math.log(a - 1) + a * math.log1p(-1 / a)) / (a - 1)
        best = min(best, eps)
    return best


_LOSS_GRID = 1e-4  # the privacy loss is rounded up to multiples of this (at least)
_MAX_GRID_POINTS = 1 << 22


@functools.lru_cache(maxsize=256)
def _skellam_loss(
    variance: float, m: int, grid: float
) -> tuple[npt.NDArray[np.float64], float, float, float]:
    """The privacy loss of a Skellam of ``variance`` on m coordinates each shifted by 1, as a
    law on a grid (rounded up), for the hockey-stick divergence: ``(mass, grid step, lowest
    loss, mass of an unbounded loss)``."""
    mu = variance / 2
    law = stats.skellam(mu, mu)
    k_hi = int(law.isf(1e-30)) + 2
    k = np.arange(-k_hi, k_hi + 2, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):  # −inf far out: dropped below
        lp1 = law.logpmf(k - 1)  # ln P[X = k − 1]: the coordinate with the user (one more)
        p1 = np.exp(lp1)
        loss = lp1 - law.logpmf(k)
    ok = np.isfinite(loss) & (p1 > 0)
    p1, loss = p1[ok], loss[ok]
    outside = max(0.0, 1.0 - float(p1.sum()))  # the far tails: counted as an unbounded loss
    span = m * (float(loss.max()) - float(loss.min()))
    h = grid * max(1, math.ceil(span / (_MAX_GRID_POINTS // 2) / grid))  # a multiple of grid
    base = math.floor(float(loss.min()) / h)
    idx = (np.ceil(loss / h) - base).astype(np.int64)
    one: npt.NDArray[np.float64] = np.bincount(idx, weights=p1).astype(np.float64)
    out = np.array([1.0])
    power, e = one, m
    while e:  # the m-fold convolution by squaring
        if e & 1:
            out = _convolve(out, power)
        e >>= 1
        if e:
            power = _convolve(power, power)
    return np.clip(out, 0.0, None), h, base * h * m, 1.0 - (1.0 - outside) ** m


def _convolve(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    n = a.size + b.size - 1
    size = 1 << (n - 1).bit_length()
    return np.fft.irfft(np.fft.rfft(a, size) * np.fft.rfft(b, size), size)[:n]


def loss_grid(epsilon: float, m: int, coarse: bool = False) -> float:
    """The grid the privacy loss is rounded up to: 10⁻⁴, or finer (a power of ten) so that
    m steps of it stay below ε/200; ``coarse``: ten times coarser (the calibration's)."""
    g = _LOSS_GRID
    while m * g > epsilon / 200:
        g /= 10
    return g * (10 if coarse else 1)


def skellam_delta(variance: float, epsilon: float, *, m: int, grid: float | None = None) -> float:
    """The δ of (ε, δ)-DP — an upper bound, within its floating-point evaluation — of adding
    Skellam noise of ``variance`` to every coordinate of an integer vector that a neighbour
    moves by at most 1 on at most m coordinates: the hockey-stick divergence
    E[(1 − e^{ε − L})₊] of the privacy loss L of the m shifted coordinates (the worst case; the
    Skellam law is symmetric, so adding and removing are alike), with every loss rounded up to
    a grid (:func:`loss_grid`) and the far tails counted as an unbounded loss. A coarser
    ``grid`` (a multiple of it) rounds more: its δ is never smaller."""
    g = loss_grid(epsilon, m) if grid is None else grid
    mass, h, low, unbounded = _skellam_loss(float(variance), int(m), float(g))
    loss = low + h * np.arange(mass.size)
    above = loss > epsilon
    fft_slack = mass.size * 1e-16  # the rounding of the FFT convolutions, bounded generously
    return float(np.sum(mass[above] * -np.expm1(epsilon - loss[above]))) + unbounded + fft_slack


def skellam_epsilon(variance: float, delta: float, *, m: int, grid: float) -> float:
    """The least ε (to 1e-6) with :func:`skellam_delta` <= δ on the given grid."""
    lo, hi = 0.0, 1.0
    while skellam_delta(variance, hi, m=m, grid=grid) > delta:
        hi *= 2
    while hi - lo > 1e-6:
        mid = (lo + hi) / 2
        ok = skellam_delta(variance, mid, m=m, grid=grid) <= delta
        lo, hi = (lo, mid) if ok else (mid, hi)
    return hi


@dataclass(frozen=True)
class SkellamShares:
    """Skellam noise of ``variance`` split into ``shares`` shares: each Poisson(μ) − Poisson(μ)
    with μ = variance/(2·shares) rounded up to a rational (as the discrete Laplace's scale is:
    rounding up only adds noise). Any ``shares`` of them are the Skellam law of variance
    2·shares·μ (>= ``variance``) exactly (the Poisson law is additive in its mean)."""

    variance: float
    shares: int

    def __post_init__(self) -> None:
        check_positive("variance", self.variance)
        check_int("shares", self.shares, minimum=1, maximum=MAX_SHARES)
        if not self.mu <= MAX_POISSON_MEAN:
            raise InvalidParameterError(
                "variance", self.variance, f"at most {2 * self.shares * MAX_POISSON_MEAN:g} "
                "(the exact Poisson sampler's range)",
            )  # fmt: skip

    @property
    def mu_fraction(self) -> Fraction:
        return round_up_rational(self.variance / (2 * self.shares))

    @property
    def mu(self) -> float:
        return float(self.mu_fraction)

    @property
    def full_variance(self) -> float:
        """The variance of any ``shares`` shares (the noise a party does not know)."""
        return 2.0 * self.shares * self.mu

    def sample(self, size: int, rng: RandomSource) -> IntArray:
        """``size`` independent shares."""
        p = poisson(self.mu_fraction, 2 * int(size), rng)
        return (p[: int(size)] - p[int(size) :]).astype(np.int64)

    def total(self, count: int) -> SkellamLaw:
        """The law of the sum of ``count`` independent shares."""
        return SkellamLaw(mu=count * self.mu)

    def describe(self) -> dict[str, Any]:
        return {
            "distribution": "skellam_shares",
            "variance": self.variance,
            "variance_of_the_full_noise": self.full_variance,
            "shares_for_the_full_noise": self.shares,
            "share": f"Poisson(mu) − Poisson(mu), mu = {self.mu:.6g}",
            "sampler": "exact (inversion of the Poisson distribution function on exact integer "
            "bounds)",
            "accounting": "the privacy loss of the shifted coordinates, computed numerically "
            "(rounded up) — the hockey-stick divergence (skellam_delta)",
        }
