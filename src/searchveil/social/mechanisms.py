"""ε-DP social recommenders (Korolova 2012 thesis §5.4) plus permute-and-flip.

Each mechanism is a frozen dataclass holding ε and the sensitivity it is calibrated to, with

* ``privacy(sensitivity)`` — its privacy map: the ε actually spent on utilities of that
  sensitivity (relaxed edge relation of §5.2.2, undirected graph);
* ``level_probabilities(values, counts, scale)`` — exact output probabilities per utility level
  (floating point, for accuracy and the exact privacy tests);
* ``recommend(target_utilities, rng)`` — one recommendation, sampled **exactly** from the
  secure source.

Every mechanism treats candidates with equal utility symmetrically, so it first picks a
utility *level* and then a uniform candidate of that level; a huge block of zero-utility
candidates costs nothing for :class:`ExponentialMechanism` and :class:`SmoothedSampling`.

Mechanisms and their exact samplers (details and proofs in docs/privacy/social.md):

* :class:`ExponentialMechanism` — A_E(ε), Definition 7: ``p_i ∝ exp(ε u_i / S)`` with S the
  ℓ1 sensitivity. Sampled by rejection from a dyadic envelope: propose level ``g`` with
  probability ∝ ``m_g 2^{−⌊x_g⌋}`` (exact big-integer weights), ``x_g = ε(u_max − u_g)/S``,
  accept with probability ``e^{−x_g} 2^{⌊x_g⌋} = e^{−frac(x_g)} (2/e)^{⌊x_g⌋}`` — a product of
  one exact Bernoulli(exp(−rational)) and ``⌊x_g⌋`` exact Bernoulli(2/e). Accepted levels are
  distributed exactly ∝ ``m_g e^{−x_g}``.
* :class:`LaplaceArgmax` — A_L(ε), Definition 8, with the project's exact **discrete** Laplace
  of scale ``S/ε`` (in integer utility units) added to the integer utilities; ties of the
  noisy maximum are broken uniformly (post-processing). ε-DP by the histogram argument of §5.4.1.
* :class:`PermuteAndFlip` — McKenna & Sheldon (NeurIPS 2020): visit candidates in a uniformly
  random order and stop at the first ``i`` with a Bernoulli(exp(−ε(u* − u_i)/(2Δ∞))) success.
  Implemented by its equivalent form: flip every candidate's coin independently and output a
  uniformly random candidate among the successes (the random order is independent of the
  coins, so the first success in it is uniform among them).
* :class:`SmoothedSampling` — A_S(x), Definition 9 / Theorem 7, with base algorithm R_best
  (uniform among the maximum-utility candidates): with probability x follow the base, else a
  uniform candidate. x is rational (≤ the x the thesis solves for ε) so the coin is exact.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from searchveil.errors import InternalError, InvalidParameterError
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.rng import RandomSource
from searchveil.social._exact import (
    bernoulli_exp,
    bernoulli_two_over_e,
    choose_weighted_big,
)
from searchveil.social.utility import FloatArray, IntArray, TargetUtilities
from searchveil.validate import check_positive, parse_name

__all__ = [
    "ExponentialMechanism",
    "LaplaceArgmax",
    "PermuteAndFlip",
    "SmoothedSampling",
    "Mechanism",
    "epsilon_fraction",
    "make_mechanism",
    "pick_member",
    "MechanismName",
    "parse_mechanism",
]


class MechanismName(StrEnum):
    """The recommenders of thesis ch. 5: A_E, A_L, permute-and-flip, A_S."""

    EXPONENTIAL = "exponential"
    LAPLACE = "laplace"
    PERMUTE_AND_FLIP = "permute_and_flip"
    SMOOTHING = "smoothing"


_MECHANISM_ALIASES = {
    "a_e": MechanismName.EXPONENTIAL, "ae": MechanismName.EXPONENTIAL,
    "a_l": MechanismName.LAPLACE, "al": MechanismName.LAPLACE,
    "pf": MechanismName.PERMUTE_AND_FLIP,
    "a_s": MechanismName.SMOOTHING, "as": MechanismName.SMOOTHING,
}  # fmt: skip


def parse_mechanism(name: MechanismName | str) -> MechanismName:
    """A mechanism's name (any case, ``-`` for ``_``, or a short alias such as ``pf``) as a
    :class:`MechanismName`; anything else raises :class:`InvalidParameterError`."""
    return parse_name("mechanism", name, MechanismName, _MECHANISM_ALIASES)


def epsilon_fraction(epsilon: float) -> Fraction:
    """ε as an exact rational no larger than the value given (denominator ≤ 10^6)."""
    return _epsilon_fraction(check_positive("epsilon", epsilon))


@functools.lru_cache(maxsize=256)
def _epsilon_fraction(eps: float) -> Fraction:
    exact = Fraction(repr(eps))
    approx = exact.limit_denominator(10**6)
    if approx > exact:
        approx = Fraction(math.floor(exact * 10**6), 10**6)
    if approx <= 0:
        raise InvalidParameterError("epsilon", eps, "a number >= 1e-6")
    return approx


def _check_sensitivity(value: Any) -> Fraction:
    try:
        s = value if isinstance(value, Fraction) else Fraction(str(value))
    except (ValueError, ZeroDivisionError):
        raise InvalidParameterError("sensitivity", value, "a positive rational") from None
    if s <= 0:
        raise InvalidParameterError("sensitivity", value, "a positive rational")
    return s


def _check_levels(values: npt.ArrayLike, counts: npt.ArrayLike) -> tuple[IntArray, IntArray]:
    v = np.asarray(values, dtype=np.int64).ravel()
    c = np.asarray(counts, dtype=np.int64).ravel()
    if v.size == 0 or v.size != c.size or (c < 1).any():
        raise InvalidParameterError(
            "levels", f"{v.size} values / {c.size} counts", "matching non-empty arrays, counts >= 1"
        )
    return v, c


def _rates(values: IntArray, eps: Fraction, denom_units: Fraction) -> tuple[list[int], int]:
    """``x_g = eps · (v_max − v_g) / denom_units`` as integer numerators over one denominator."""
    vmax = int(values.max())
    r = eps / denom_units
    nums = [(vmax - int(v)) * r.numerator for v in values.tolist()]
    return nums, r.denominator


def pick_member(tu: TargetUtilities, value: int, rng: RandomSource) -> int:
    """A uniform candidate of ``tu`` with integer utility ``value``."""
    if value != 0:
        members = tu.nodes[tu.values == value]
        if members.size == 0:
            raise InternalError(f"no candidate with utility value {value}")
        return int(members[int(rng.integers_below(int(members.size), 1)[0])])
    if tu.n_zero <= 0:
        raise InternalError("no zero-utility candidate")
    excluded = np.unique(np.concatenate([tu.neighbours, tu.nodes, [tu.target]]))
    if 4 * tu.n_zero < tu.n_nodes:
        mask = np.ones(tu.n_nodes, dtype=bool)
        mask[excluded] = False
        zeros = np.flatnonzero(mask)
        return int(zeros[int(rng.integers_below(int(zeros.size), 1)[0])])
    while True:  # rejection: uniform node, accept if it is a zero-utility candidate
        draw = rng.integers_below(tu.n_nodes, 32).astype(np.int64)
        ok = ~np.isin(draw, excluded)
        if ok.any():
            return int(draw[np.flatnonzero(ok)[0]])


def _levels_of(tu: TargetUtilities) -> tuple[IntArray, IntArray]:
    if tu.n_candidates <= 0:
        raise InvalidParameterError("target", tu.target, "a node with at least one candidate")
    return tu.levels()


class _SamplesLevels(Protocol):
    def sample_level(
        self, values: npt.ArrayLike, counts: npt.ArrayLike, scale: int, rng: RandomSource
    ) -> int: ...


class _LevelRecommender:
    """Every mechanism treats equal utilities symmetrically: a level, then a uniform member."""

    def recommend(self: _SamplesLevels, tu: TargetUtilities, rng: RandomSource) -> int:
        """One recommendation for ``tu``'s target, sampled exactly from ``rng``."""
        v, c = _levels_of(tu)
        return pick_member(tu, int(v[self.sample_level(v, c, tu.scale, rng)]), rng)


@dataclass(frozen=True)
class _Calibrated(_LevelRecommender):
    """A recommender calibrated to ε and the utilities' sensitivity."""

    epsilon: float
    sensitivity: Fraction

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        object.__setattr__(self, "sensitivity", _check_sensitivity(self.sensitivity))

    def _ratio_epsilon(self, sensitivity: Fraction | float) -> float:
        """ε scaled by the ratio of ``sensitivity`` to the calibrated one."""
        return float(epsilon_fraction(self.epsilon) * _check_sensitivity(sensitivity)) / float(
            self.sensitivity
        )

    def _description(self, mechanism: str, sensitivity_key: str, **extra: str) -> dict[str, Any]:
        """What ``describe()`` records: the mechanism, ε, the calibrated sensitivity, ``extra``."""
        return {
            "mechanism": mechanism,
            "epsilon": float(epsilon_fraction(self.epsilon)),
            sensitivity_key: float(self.sensitivity),
            **extra,
        }


@dataclass(frozen=True)
class ExponentialMechanism(_Calibrated):
    """A_E(ε) of Definition 7, ``p_i ∝ exp(ε u_i / S)`` with S the ℓ1 edge sensitivity."""

    name: str = field(default="exponential", init=False)

    def privacy(self, sensitivity: Fraction | float) -> float:
        """ε spent on monotone utilities whose ℓ1 (hence ℓ∞) sensitivity is ``sensitivity``."""
        return self._ratio_epsilon(sensitivity)

    def level_probabilities(
        self, values: npt.ArrayLike, counts: npt.ArrayLike, scale: int
    ) -> FloatArray:
        v, c = _check_levels(values, counts)
        a = float(epsilon_fraction(self.epsilon)) / (float(self.sensitivity) * scale)
        logw = np.log(c.astype(np.float64)) + a * (v - v.max()).astype(np.float64)
        logw -= logw.max()
        w = np.exp(logw)
        return np.asarray(w / w.sum(), dtype=np.float64)

    def sample_level(
        self, values: npt.ArrayLike, counts: npt.ArrayLike, scale: int, rng: RandomSource
    ) -> int:
        """Index of a level drawn exactly ∝ ``m_g exp(ε u_g / S)`` (dyadic-envelope rejection)."""
        v, c = _check_levels(values, counts)
        nums, den = _rates(v, epsilon_fraction(self.epsilon), self.sensitivity * scale)
        ks = [x // den for x in nums]
        kmax = max(ks)
        weights = [int(m) << (kmax - k) for m, k in zip(c.tolist(), ks, strict=True)]
        for _ in range(1_000_000):
            g = choose_weighted_big(weights, rng)
            frac = nums[g] - ks[g] * den
            if not bool(bernoulli_exp([frac], [den], rng)[0]):
                continue
            if ks[g] == 0 or bool(bernoulli_two_over_e(ks[g], rng).all()):
                return g
        raise InternalError(
            "exponential-mechanism rejection sampler did not accept"
        )  # pragma: no cover

    def describe(self) -> dict[str, Any]:
        sampler = "exact: dyadic-envelope rejection, Bernoulli(exp(-q)) and Bernoulli(2/e)"
        return self._description(
            "exponential (A_E, thesis Def. 7)", "sensitivity_l1", sampler=sampler
        )


@dataclass(frozen=True)
class PermuteAndFlip(_Calibrated):
    """Permute-and-flip (McKenna & Sheldon 2020) with ℓ∞ sensitivity Δ: coin
    ``exp(−ε(u* − u_i)/(2Δ))``."""

    name: str = field(default="permute_and_flip", init=False)

    def privacy(self, sensitivity: Fraction | float) -> float:
        """ε spent on utilities whose ℓ∞ sensitivity is ``sensitivity`` (any direction)."""
        return self._ratio_epsilon(sensitivity)

    def coin_probabilities(self, values: npt.ArrayLike, scale: int) -> FloatArray:
        v = np.asarray(values, dtype=np.int64)
        a = float(epsilon_fraction(self.epsilon)) / (2.0 * float(self.sensitivity) * scale)
        return np.asarray(np.exp(a * (v - v.max()).astype(np.float64)), dtype=np.float64)

    def level_probabilities(
        self, values: npt.ArrayLike, counts: npt.ArrayLike, scale: int
    ) -> FloatArray:
        """Exact for tiny inputs: ``P(i) = q_i ∫_0^1 Π_{j≠i}(1 − q_j s) ds`` (polynomial,
        integrated exactly by Gauss–Legendre with enough nodes)."""
        v, c = _check_levels(values, counts)
        q = self.coin_probabilities(v, scale)
        n = int(c.sum())
        xs, ws = np.polynomial.legendre.leggauss(max(2, (n + 2) // 2 + 1))
        s = 0.5 * (xs + 1.0)
        w = 0.5 * ws
        out = np.empty(v.size)
        for g in range(v.size):
            expo = c.astype(np.float64).copy()
            expo[g] -= 1
            prod = np.prod(np.power(1.0 - np.outer(s, q), expo), axis=1)
            out[g] = c[g] * q[g] * float(np.dot(w, prod))
        return out

    def sample_level(
        self, values: npt.ArrayLike, counts: npt.ArrayLike, scale: int, rng: RandomSource
    ) -> int:
        v, c = _check_levels(values, counts)
        nums, den = _rates(v, epsilon_fraction(self.epsilon), 2 * self.sensitivity * scale)
        num_arr = np.repeat(np.asarray(nums, dtype=np.uint64), c)
        coins = bernoulli_exp(num_arr, np.full(num_arr.size, den, dtype=np.uint64), rng)
        level_of = np.repeat(np.arange(v.size), c)
        hits = np.bincount(level_of[coins], minlength=v.size)
        total = int(hits.sum())
        if total == 0:
            raise InternalError("permute-and-flip: the top candidate's coin must succeed")
        u = int(rng.integers_below(total, 1)[0])
        return int(np.searchsorted(np.cumsum(hits), u, side="right"))

    def describe(self) -> dict[str, Any]:
        sampler = "exact: independent Bernoulli(exp(-q)) coins, uniform among successes"
        return self._description(
            "permute-and-flip (McKenna & Sheldon 2020)", "sensitivity_linf", sampler=sampler
        )


# each recommender describes its own sampler: alike in form, not merged (thesis ch. 5)
@dataclass(frozen=True)
class LaplaceArgmax(_Calibrated):
    """A_L(ε) of Definition 8: argmax of utilities + discrete Laplace(S/ε) noise."""

    name: str = field(default="laplace", init=False)

    def noise(self, scale: int) -> DiscreteLaplace:
        """The discrete Laplace of scale ``S·scale/ε`` in integer utility units."""
        return DiscreteLaplace(
            scale=float(self.sensitivity * scale / epsilon_fraction(self.epsilon))
        )

    def privacy(self, sensitivity: Fraction | float, scale: int = 1) -> float:
        """ε spent on integer utilities of ℓ1 sensitivity ``sensitivity·scale``."""
        return self.noise(scale).epsilon(float(_check_sensitivity(sensitivity) * scale))

    def level_probabilities(
        self, values: npt.ArrayLike, counts: npt.ArrayLike, scale: int
    ) -> FloatArray:
        """Exact output law for small inputs with the *effective* discrete-Laplace scale:
        ``P(i) = Σ_y P(X_i = y) ∫_0^1 Π_{j≠i} (F_j(y−1) + t·P(X_j = y)) dt`` (uniform ties)."""
        v, c = _check_levels(values, counts)
        lap = self.noise(scale)
        b = lap.effective_scale
        span = int(math.ceil(b * 60)) + 2
        ys = np.arange(int(v.min()) - span, int(v.max()) + span + 1)
        n = int(c.sum())
        xs, ws = np.polynomial.legendre.leggauss(max(2, n // 2 + 2))
        t = 0.5 * (xs + 1.0)
        w = 0.5 * ws
        pmf = lap.pmf(ys[None, :] - v[:, None])  # levels × y
        cdf_below = lap.cdf(ys[None, :] - v[:, None] - 1)
        out = np.zeros(v.size)
        for g in range(v.size):
            expo = c.astype(np.float64).copy()
            expo[g] -= 1
            # (levels, y, t)
            base = cdf_below[:, :, None] + t[None, None, :] * pmf[:, :, None]
            prod = np.prod(np.power(base, expo[:, None, None]), axis=0)  # y × t
            inner = prod @ w
            out[g] = c[g] * float(np.dot(pmf[g], inner))
        return out

    def sample_level(
        self, values: npt.ArrayLike, counts: npt.ArrayLike, scale: int, rng: RandomSource
    ) -> int:
        v, c = _check_levels(values, counts)
        lap = self.noise(scale)
        noisy = np.repeat(v, c) + lap.sample(int(c.sum()), rng)
        top = np.flatnonzero(noisy == noisy.max())
        slot = int(top[int(rng.integers_below(int(top.size), 1)[0])])
        return int(np.searchsorted(np.cumsum(c), slot, side="right"))

    def describe(self) -> dict[str, Any]:
        noise = "discrete Laplace (exact, CKS 2020) on integer-scaled utilities"
        return self._description(
            "Laplace argmax (A_L, thesis Def. 8)", "sensitivity_l1", noise=noise
        )


def smoothing_x(epsilon: float, n: int) -> Fraction:
    """The largest rational ``x`` (denominator ≤ 2^40) with ``ln(1 + n x/(1−x)) ≤ ε`` (Thm 7)."""
    eps = float(epsilon_fraction(epsilon))
    if n < 1:
        raise InvalidParameterError("n", n, "an integer >= 1")
    target = math.expm1(eps) / (math.expm1(eps) + n)
    den = 1 << 40
    x = Fraction(math.floor(target * den), den)
    while x > 0 and math.log1p(n * float(x) / (1 - float(x))) > eps:
        x -= Fraction(1, den)
    return x


@dataclass(frozen=True)
class SmoothedSampling(_LevelRecommender):
    """A_S(x) of Definition 9 over the base algorithm R_best; x chosen per target for ε."""

    epsilon: float
    name: str = field(default="smoothing", init=False)

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)

    def privacy(self, n_candidates: int) -> float:
        """Theorem 7: ``ln(1 + n x/(1−x))`` for the x used with ``n`` candidates (any
        sensitivity)."""
        x = float(smoothing_x(self.epsilon, n_candidates))
        return math.log1p(n_candidates * x / (1 - x))

    def level_probabilities(
        self, values: npt.ArrayLike, counts: npt.ArrayLike, scale: int
    ) -> FloatArray:
        v, c = _check_levels(values, counts)
        n = int(c.sum())
        x = float(smoothing_x(self.epsilon, n))
        p = (1 - x) * c / n
        p[int(np.argmax(v))] += x
        return np.asarray(p, dtype=np.float64)

    def sample_level(
        self, values: npt.ArrayLike, counts: npt.ArrayLike, scale: int, rng: RandomSource
    ) -> int:
        v, c = _check_levels(values, counts)
        n = int(c.sum())
        x = smoothing_x(self.epsilon, n)
        if bool(rng.bernoulli_ratio(x.numerator, x.denominator, 1)[0]):
            return int(np.argmax(v))
        u = int(rng.integers_below(n, 1)[0])
        return int(np.searchsorted(np.cumsum(c), u, side="right"))

    def describe(self) -> dict[str, Any]:
        return {
            "mechanism": "sampling + linear smoothing (A_S, thesis Def. 9 / Thm 7), base R_best",
            "epsilon": float(epsilon_fraction(self.epsilon)),
            "x": "per target: largest rational x with ln(1 + n x/(1-x)) <= epsilon",
        }


Mechanism = ExponentialMechanism | LaplaceArgmax | PermuteAndFlip | SmoothedSampling


def make_mechanism(
    name: MechanismName | str, *, epsilon: float, l1: Fraction, linf: Fraction
) -> Mechanism:
    """Build a mechanism by name (:func:`parse_mechanism`) with the sensitivity it is
    calibrated to."""
    kind = parse_mechanism(name)
    if kind is MechanismName.EXPONENTIAL:
        return ExponentialMechanism(epsilon=epsilon, sensitivity=l1)
    if kind is MechanismName.LAPLACE:
        return LaplaceArgmax(epsilon=epsilon, sensitivity=l1)
    if kind is MechanismName.PERMUTE_AND_FLIP:
        return PermuteAndFlip(epsilon=epsilon, sensitivity=linf)
    return SmoothedSampling(epsilon=epsilon)
