"""Differentially private selection of items (which queries to publish): the strategies and
their registry.

Setting (same for every strategy, so they compare at equal (ε, δ)): each user contributes a set
of at most ``d`` *distinct* items (their first d distinct queries; any data-independent choice
works); neighbouring logs differ by one user's whole set. The output is the set of selected items
(their counts are published separately with their own budget, as in Korolova's Release-Data).

* ``laplace`` — Korolova's Select-Queries on distinct-user counts: count + DLap(b) > K with
  b = d/ε and the smallest integer K whose *exact* discrete (ε, δ) fits
  (:func:`searchveil.params.exact_threshold_privacy`, ``distinct=True``).
* ``gaussian`` — Gaussian thresholding (Google DP library; Wilson et al. 2020): count + discrete
  Gaussian(σ) ≥ τ. A user shifts ≤ d counts by 1 (ℓ2 sensitivity √d). δ = δ_G + δ_T: δ_G is
  the **exact** hockey-stick divergence of the d-dimensional discrete Gaussian shifted by the
  all-ones vector, computed from the distribution of the sum of d noises (the privacy loss is
  (2S + d)/(2σ²)); δ_T = 1 − (1 − P[1 + Z ≥ τ])^d covers items only this user holds. For a
  target (ε, δ) we search the δ split (σ smallest with δ_G ≤ f·δ, then τ smallest with
  δ_T ≤ (1−f)·δ) and keep the split with the smallest τ.
* ``policy-gaussian`` — Policy Gaussian differentially private set union (Gopi et al., ICML
  2020, Alg. 4 / Thm 5.3): users in a uniformly random order each add to the weights of their
  items the gaps to a cutoff Γ, scaled to ℓ2 norm ≤ 1; then weight + N(0, σ²) > ρ is selected,
  σ from the analytic Gaussian mechanism (Balle & Wang 2018) at (ε, δ/2) with sensitivity 1 and
  ρ = max_{1≤t≤d} [1/√t + σ Φ⁻¹((1 − δ/2)^{1/t})]; Γ = ρ + 3σ by default.
  Decision: the weights are real numbers, not counts, so this strategy uses *continuous*
  Gaussian noise (Box–Muller on 53-bit uniforms from the injected secure ``rng``); only the
  selected set is output, never a noisy weight, so the floating-point attacks on released
  noisy values (Mironov 2012) have nothing to read. The other two use exact integer noise.

The ℓ2-weighted rounds (probe-reweight, probe-reweight-2r, DP-SIPS) are in
:mod:`searchveil.mechanisms.rounds`.

Every strategy is a class with ``FACTS`` (its name, label, rounds, units, default-d rule,
accounting: :class:`~searchveil.mechanisms.selection_facts.StrategyFacts`) and
``for_budget(*, epsilon, delta, d)``; a calibrated strategy has ``privacy()`` (ε, δ),
``keep_probability(n)`` for an item with n users (for policy Gaussian: for an item held only by
users whose whole ℓ2 budget goes to it, a lower bound), ``select_pool(pool, rng)``,
``select(user_items, rng)`` and ``describe()``. :data:`REGISTRY` lists them: the
``--selection`` names (:class:`SelectionStrategy`), :func:`make_strategy` and
:func:`default_d` are read from it.
"""

from __future__ import annotations

import array
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import DiscreteGaussian, DiscreteLaplace
from searchveil.mechanisms.pool_rounds import RoundSpec
from searchveil.mechanisms.rounds import (
    DpSips,
    ItemPool,
    PoolSelection,
    ProbeReweight,
    ProbeReweight2R,
)
from searchveil.mechanisms.selection_facts import Accounting, DefaultD, StrategyFacts, Units
from searchveil.mechanisms.threshold import (
    exact_threshold_privacy,
    keep_probability,
    korolova_solve_exact,
)
from searchveil.rng import RandomSource
from searchveil.validate import (
    check_int,
    check_positive,
    check_probability,
    parse_choice,
)

# ----------------------------------------------------------------------------- shared pieces


def user_item_sets(df: pl.DataFrame, *, d: int, user_col: str = "user", item_col: str = "item",
                   order_col: str = "pos") -> pl.DataFrame:  # fmt: skip
    """The first ``d`` distinct items of every user (by ``order_col``): columns user, item."""
    check_int("d", d, minimum=1)
    return (
        df.sort([user_col, order_col])
        .unique([user_col, item_col], keep="first", maintain_order=True)
        .group_by(user_col, maintain_order=True)
        .head(d)
        .select(pl.col(user_col).alias("user"), pl.col(item_col).alias("item"))
    )


def _distinct_counts(sets: pl.DataFrame) -> pl.DataFrame:
    return sets.group_by("item").agg(pl.len().cast(pl.Int64).alias("count"))


# ------------------------------------------------------------------------------ Laplace


@dataclass(frozen=True)
class LaplaceThreshold(PoolSelection):
    FACTS: ClassVar[StrategyFacts] = StrategyFacts(
        name="laplace", label="Laplace (distinct users)", short_label="Lap", rounds=1,
        units=Units.COUNTS, default_d=DefaultD.ONE, accounting=Accounting.EXACT,
    )  # fmt: skip

    d: int
    K: int
    b: float

    @classmethod
    def for_budget(cls, *, epsilon: float, delta: float, d: int) -> LaplaceThreshold:
        r = korolova_solve_exact(epsilon=epsilon, delta=delta, d=d, distinct=True)
        return cls(d=d, K=int(r["K"]), b=float(r["b"]))

    def privacy(self) -> dict[str, float]:
        pr = exact_threshold_privacy(d=self.d, K=self.K, b=self.b, distinct=True)
        return {"epsilon": pr.epsilon, "delta": pr.delta}

    def keep_probability(self, n: npt.ArrayLike) -> npt.NDArray[np.float64]:
        return np.asarray(keep_probability(np.asarray(n), threshold=self.K, scale=self.b,
                                           noise="discrete"))  # fmt: skip

    def round_specs(self) -> list[RoundSpec]:
        """One round: each item's count among the users' first d items (weight 1 per holder)
        plus discrete Laplace(b), released when > K."""
        return [RoundSpec(d=self.d, pool=self.d, weights=(0,) + (1,) * self.d,
                          noise=DiscreteLaplace(self.b), threshold=self.K,
                          inclusive=False)]  # fmt: skip

    def describe(self) -> dict[str, Any]:
        return {
            "strategy": self.FACTS.name,
            "d": self.d,
            "K": self.K,
            "b": self.b,
            **self.privacy(),
        }


# ----------------------------------------------------------------------------- Gaussian


def _sum_pmf(sigma: float, d: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Support and pmf of the sum of d i.i.d. discrete Gaussians N_Z(0, σ²)."""
    from scipy import signal  # imported when first used: it doubles the CLI start-up

    half = int(math.ceil(sigma * 14)) + 2
    k = np.arange(-half, half + 1, dtype=np.float64)
    w = np.exp(-(k**2) / (2 * sigma**2))
    w /= w.sum()
    out = np.array([1.0])
    base = w
    n = d
    while n:
        if n & 1:
            out = np.clip(signal.fftconvolve(out, base), 0.0, None)
        n >>= 1
        if n:
            base = np.clip(signal.fftconvolve(base, base), 0.0, None)
    out /= out.sum()
    support = np.arange(out.size, dtype=np.float64) - half * d
    return support, out


def gaussian_delta(*, sigma: float, d: int, epsilon: float) -> float:
    """Exact δ(ε) of the d-dimensional discrete Gaussian mechanism for a shift by the all-ones
    vector: E[(1 − e^{ε − L})₊] with L = (2S + d)/(2σ²), S the sum of the d noises."""
    s, p = _sum_pmf(sigma, d)
    loss = (2 * s + d) / (2 * sigma**2)
    with np.errstate(over="ignore"):  # e^{ε−L} overflows where L ≪ ε: (1 − ∞)₊ = 0, exact
        return float(np.sum(p * np.clip(-np.expm1(epsilon - loss), 0.0, None)))


def _threshold_delta(sigma: float, tau: int, d: int) -> float:
    # at the effective (rounded-up) σ the sampler draws with, not the requested one: a larger σ
    # makes a single-user item more likely to cross τ (issue 21)
    p1 = float(DiscreteGaussian(DiscreteGaussian(sigma).effective_sigma).sf(tau - 1))  # P[1+Z≥τ]
    return float(-np.expm1(d * np.log1p(-min(p1, 1 - 1e-300))))


# opens like LaplaceThreshold on purpose: every strategy states its FACTS first
@dataclass(frozen=True)
class GaussianThreshold(PoolSelection):
    FACTS: ClassVar[StrategyFacts] = StrategyFacts(
        name="gaussian", label="Gaussian selection", short_label="G", rounds=1,
        units=Units.COUNTS, default_d=DefaultD.COUNTS, accounting=Accounting.EXACT,
    )  # fmt: skip

    d: int
    sigma: float
    tau: int
    epsilon: float

    @classmethod
    def for_budget(cls, *, epsilon: float, delta: float, d: int) -> GaussianThreshold:
        eps = check_positive("epsilon", epsilon)
        dl = check_probability("delta", delta)
        d = check_int("d", d, minimum=1)
        best: GaussianThreshold | None = None
        known: dict[float, float] = {}  # the nine searches start alike: each σ computed once

        def delta_at(sigma: float) -> float:
            if sigma not in known:
                known[sigma] = gaussian_delta(sigma=sigma, d=d, epsilon=eps)
            return known[sigma]

        for f in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
            lo, hi = 0.05, 1.0
            while delta_at(hi) > f * dl:
                hi *= 2
                if hi > 1e5:
                    raise InvalidParameterError("epsilon", epsilon, "a budget some σ meets")
            for _ in range(40):
                mid = (lo + hi) / 2
                if delta_at(mid) <= f * dl:
                    hi = mid
                else:
                    lo = mid
            sigma = hi
            tau = 2
            while _threshold_delta(sigma, tau, d) > (1 - f) * dl:
                tau += max(1, int(sigma // 4))
            while tau > 2 and _threshold_delta(sigma, tau - 1, d) <= (1 - f) * dl:
                tau -= 1
            cand = cls(d=d, sigma=sigma, tau=tau, epsilon=eps)
            if best is None or cand.tau < best.tau:
                best = cand
        assert best is not None
        return best

    def privacy(self) -> dict[str, float]:
        dg = gaussian_delta(sigma=self.sigma, d=self.d, epsilon=self.epsilon)
        dt = _threshold_delta(self.sigma, self.tau, self.d)
        return {"epsilon": self.epsilon, "delta": dg + dt, "delta_noise": dg,
                "delta_threshold": dt}  # fmt: skip

    def keep_probability(self, n: npt.ArrayLike) -> npt.NDArray[np.float64]:
        nn = np.asarray(n, dtype=np.float64)
        sigma_eff = DiscreteGaussian(self.sigma).effective_sigma  # the sampler's σ
        return np.asarray(DiscreteGaussian(sigma_eff).sf(self.tau - nn))

    def round_specs(self) -> list[RoundSpec]:
        """One round: each item's count among the users' first d items (weight 1 per holder)
        plus discrete Gaussian(σ), released when ≥ τ."""
        return [RoundSpec(d=self.d, pool=self.d, weights=(0,) + (1,) * self.d,
                          noise=DiscreteGaussian(self.sigma), threshold=self.tau,
                          inclusive=True)]  # fmt: skip

    def describe(self) -> dict[str, Any]:
        return {"strategy": self.FACTS.name, "d": self.d, "sigma": self.sigma, "tau": self.tau,
                **self.privacy()}  # fmt: skip


# ------------------------------------------------------------------------ policy Gaussian


def analytic_gaussian_sigma(*, epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest σ with Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ) ≤ δ (Balle & Wang 2018, Thm 8)."""
    eps = check_positive("epsilon", epsilon)
    dl = check_probability("delta", delta)
    from scipy import special  # imported when first used: it doubles the CLI start-up

    def dlt(s: float) -> float:
        a = sensitivity / (2 * s)
        b = eps * s / sensitivity
        return float(special.ndtr(a - b) - math.exp(eps) * special.ndtr(-a - b))

    lo, hi = 1e-6, 1.0
    while dlt(hi) > dl:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if dlt(mid) <= dl:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class PolicyGaussian(PoolSelection):
    # keep_probability(1) is an upper bound: a user may give its item less than its budget
    FACTS: ClassVar[StrategyFacts] = StrategyFacts(
        name="policy-gaussian", label="policy Gaussian*", short_label="PG", rounds=1,
        units=Units.L2_WEIGHT, default_d=DefaultD.L2_WEIGHTED, accounting=Accounting.ANALYTIC,
        single_user_exact=False,
    )  # fmt: skip

    d: int
    sigma: float
    rho: float
    cutoff: float
    epsilon: float
    delta: float

    @classmethod
    def for_budget(
        cls, *, epsilon: float, delta: float, d: int, cutoff_sigmas: float = 3.0
    ) -> PolicyGaussian:
        from scipy import stats  # imported when first used: it doubles the CLI start-up

        eps = check_positive("epsilon", epsilon)
        dl = check_probability("delta", delta)
        d = check_int("d", d, minimum=1)
        sigma = analytic_gaussian_sigma(epsilon=eps, delta=dl / 2)
        t = np.arange(1, d + 1, dtype=np.float64)
        rho = float(np.max(1 / np.sqrt(t) + sigma * stats.norm.ppf((1 - dl / 2) ** (1 / t))))
        return cls(d=d, sigma=sigma, rho=rho, cutoff=rho + cutoff_sigmas * sigma, epsilon=eps,
                   delta=dl)  # fmt: skip

    def privacy(self) -> dict[str, float]:
        return {"epsilon": self.epsilon, "delta": self.delta}

    def keep_probability(self, n: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """For an item whose n users give it their whole unit budget (weight min(n, Γ))."""
        from scipy import stats  # imported when first used: it doubles the CLI start-up

        w = np.minimum(np.asarray(n, dtype=np.float64), self.cutoff)
        return np.asarray(stats.norm.sf((self.rho - w) / self.sigma))

    def _weights_arrays(
        self, pool: ItemPool, rng: RandomSource
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The policy over users in a uniformly random order (one key per user from ``rng``,
        drawn in canonical user order): item ids and their weights, exactly the sequential
        rule. Items only one user holds never interact with another user, so their gaps are
        Γ when that user comes: users without a shared item are done in one vectorised step,
        and the sequential loop visits only the shared items of the other users."""
        gamma = self.cutoff
        users, items = pool.users, pool.items
        n_users = int(users.max()) + 1 if users.size else 0
        # one key per user, drawn in the canonical user order (ids sorted as text)
        keys = np.empty(n_users, dtype=np.uint64)
        keys[pool.user_order()] = rng.random_keys(n_users)
        holders = np.bincount(items, minlength=pool.n_items)
        shared = holders[items] > 1
        n_solo = np.bincount(users[~shared], minlength=n_users).astype(np.float64)
        n_shared = np.bincount(users[shared], minlength=n_users)
        weight = np.zeros(pool.n_items, dtype=np.float64)
        # users without shared items: gaps Γ on all their items
        scale = np.ones(n_users, dtype=np.float64)
        solo_norm = np.sqrt(n_solo) * gamma
        scale = np.where(solo_norm > 1.0, 1.0 / np.maximum(solo_norm, 1e-300), 1.0)
        # users with shared items, in the random order, sequentially over their shared items
        seq = np.flatnonzero(n_shared > 0)
        seq = seq[np.argsort(keys[seq], kind="stable")]
        srows = np.flatnonzero(shared)  # grouped by user (pool rows are)
        sh_users = users[srows]
        sh_ids, sh_items = np.unique(items[srows], return_inverse=True)
        starts = np.searchsorted(sh_users, np.arange(n_users), side="left")
        ends = np.searchsorted(sh_users, np.arange(n_users), side="right")
        h = [0.0] * int(sh_ids.size)
        # the shared rows' item numbers as C ints (a list of Python ints took 36 bytes a row:
        # 82 MB at d = 40 on 300,000 users); a slice per user is made into ints as it is read
        it = array.array("i", sh_items.astype(np.intc).tobytes())
        del sh_items, srows, sh_users
        solo2 = (n_solo * gamma * gamma).tolist()
        st, en = starts.tolist(), ends.tolist()
        sc = scale.tolist()
        for u in seq.tolist():
            norm2 = solo2[u]
            open_ = []  # (item, gap) of the user's shared items still below Γ
            for i in it[st[u] : en[u]]:
                g = gamma - h[i]
                if g > 0.0:
                    norm2 += g * g
                    open_.append((i, g))
            if norm2 == 0.0:
                sc[u] = 1.0
                continue
            f = 1.0 if norm2 <= 1.0 else 1.0 / math.sqrt(norm2)
            sc[u] = f
            for i, g in open_:
                h[i] += g * f
        scale = np.asarray(sc, dtype=np.float64)
        solo_rows = np.flatnonzero(~shared)
        weight[items[solo_rows]] = gamma * scale[users[solo_rows]]
        weight[sh_ids] = np.asarray(h, dtype=np.float64)
        present = np.flatnonzero(holders > 0)
        return present, weight[present]

    def weights(self, sets: pl.DataFrame, *, rng: RandomSource) -> dict[str, float]:
        """Run the policy over users in a uniformly random order (keys from ``rng``)."""
        pool = ItemPool.from_frame(sets).first(self.d)
        ids, w = self._weights_arrays(pool, rng)
        return dict(zip(pool.names.gather(ids).to_list(), w.tolist(), strict=True))

    def select_pool(
        self, pool: ItemPool, rng: RandomSource, diagnostic: np.random.Generator | None = None
    ) -> npt.NDArray[np.int64]:
        pool = pool.first(self.d)
        ids, w = self._weights_arrays(pool, rng)
        if diagnostic is not None:  # simulations on synthetic data only
            z = diagnostic.standard_normal(ids.size)
        else:
            u1 = rng.uniform(ids.size)
            u2 = rng.uniform(ids.size)
            z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * math.pi * u2)  # Box–Muller
        keep = w + self.sigma * z > self.rho
        return ids[keep]

    def describe(self) -> dict[str, Any]:
        return {"strategy": self.FACTS.name, "d": self.d, "sigma": self.sigma, "rho": self.rho,
                "cutoff": self.cutoff, **self.privacy()}  # fmt: skip


# ------------------------------------------------------------------------------ the registry
class SelectionMechanism(Protocol):
    """What every registered strategy class provides: its facts, a constructor for a budget,
    and, calibrated, its privacy map, keep probability, selection and public description."""

    FACTS: ClassVar[StrategyFacts]

    @property
    def d(self) -> int:
        """The contribution bound the strategy is calibrated for."""
        ...

    @classmethod
    def for_budget(cls, *, epsilon: float, delta: float, d: int) -> SelectionMechanism:
        """The strategy calibrated to (ε, δ) for users with ≤ d distinct items."""
        ...

    def privacy(self) -> dict[str, float]:
        """(ε, δ) (and, for a zCDP strategy, ``rho``, ``delta_threshold``)."""
        ...

    def keep_probability(self, n: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """P[an item held by n users is selected] (see each strategy for its model)."""
        ...

    def select_pool(self, pool: ItemPool, rng: RandomSource) -> npt.NDArray[np.int64]:
        """The selected item ids of ``pool`` (noise from ``rng``)."""
        ...

    def select(self, sets: pl.DataFrame, *, rng: RandomSource) -> pl.DataFrame:
        """The selected items of ``sets`` (user, item (+ rank)) with their counts."""
        ...

    def describe(self) -> dict[str, Any]:
        """The public parameters the ledger records (``strategy``: ``FACTS.name``)."""
        ...


#: every selection strategy, in the order the names are listed (``--selection``, the d-curves,
#: the demo): a new strategy is one entry here (CONTRIBUTING.md, "Adding a selection strategy")
REGISTRY: tuple[type[SelectionMechanism], ...] = (
    LaplaceThreshold,
    GaussianThreshold,
    PolicyGaussian,
    ProbeReweight,
    ProbeReweight2R,
    DpSips,
)
_BY_NAME = {cls.FACTS.name: cls for cls in REGISTRY}
#: deprecated spellings → names (``mad`` → ``probe-reweight``, ``mad2r`` → ``probe-reweight-2r``)
ALIASES = {a: cls.FACTS.name for cls in REGISTRY for a in cls.FACTS.aliases}


class _StrategyName(StrEnum):
    """The members are the registry's names; a deprecated alias parses to its new name."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        return cls._value2member_map_.get(ALIASES.get(str(value), ""))


if TYPE_CHECKING:

    class SelectionStrategy(_StrategyName):
        """``--selection``: the strategy that selects queries (and pairs) on each user's first
        distinct items (one member per :data:`REGISTRY` entry)."""

else:  # built from the registry, so the names and the strategies cannot disagree
    SelectionStrategy = _StrategyName(
        "SelectionStrategy",
        [(cls.FACTS.name.upper().replace("-", "_"), cls.FACTS.name) for cls in REGISTRY],
        module=__name__,
    )


def strategy_facts(name: str) -> StrategyFacts:
    """The facts of the strategy ``name`` (or a deprecated alias of it)."""
    return _BY_NAME[parse_choice("selection", name, SelectionStrategy)].FACTS


# ---------------------------------------------------------- the default d (no tuning on data)

#: distinct queries per user in the public reference sample bundled with searchveil (215 random
#: AOL users, src/searchveil/data): (count, users) pairs. A public population model, never the
#: log being released; tests check it against the bundled file.
REFERENCE_DISTINCT_PER_USER: tuple[tuple[int, int], ...] = (
    (1, 20), (2, 16), (3, 15), (4, 10), (5, 6), (6, 10), (7, 9), (8, 7), (9, 6), (10, 9),
    (11, 8), (12, 10), (13, 4), (14, 2), (15, 3), (16, 6), (17, 5), (18, 5), (20, 2), (21, 3),
    (22, 1), (23, 3), (24, 1), (25, 2), (26, 2), (28, 1), (29, 2), (31, 5), (34, 1), (35, 2),
    (36, 1), (37, 1), (38, 1), (39, 2), (40, 2), (41, 1), (47, 2), (48, 1), (50, 1), (51, 1),
    (54, 1), (58, 1), (59, 1), (60, 1), (61, 1), (67, 2), (75, 1), (83, 1), (85, 1), (96, 1),
    (97, 1), (101, 1), (103, 1), (105, 1), (115, 1), (118, 1), (121, 1), (123, 1), (131, 1),
    (137, 1), (210, 1), (220, 1), (228, 1), (305, 1), (322, 1),
)  # fmt: skip
DEFAULT_D_MAX = 128


def _reference_k() -> npt.NDArray[np.float64]:
    return np.repeat(
        np.array([k for k, _ in REFERENCE_DISTINCT_PER_USER], dtype=np.float64),
        [n for _, n in REFERENCE_DISTINCT_PER_USER],
    )


def default_d(
    strategy: str, *, epsilon: float, delta: float, max_users: int | None = None
) -> tuple[int, str]:
    """The strategy's contribution bound when the user gives none: a documented rule from the
    selection step's (ε, δ) and public knowledge only — never the private log (choosing d on
    the log itself is a use of the data no ledger accounts for). Returns (d, the rule).

    The rule is the strategy's ``FACTS.default_d`` (:class:`DefaultD`):

    * ``ONE`` (``laplace``): d = 1 (the exact Korolova threshold grows linearly in d).
    * ``COUNTS`` (``gaussian``: counts, ℓ2 sensitivity √d): the d ≤ 128 maximising
      E[min(K, d)] / τ(ε, δ, d) — the items a user contributes per unit of threshold — with K
      the distinct queries per user of the public reference sample
      (:data:`REFERENCE_DISTINCT_PER_USER`) and τ ≈ σ(ε, δ/2, √d)·Φ⁻¹(1 − δ/(2d)) + 1.
    * ``L2_WEIGHTED`` (``policy-gaussian``, ``probe-reweight``, ``probe-reweight-2r``,
      ``dp-sips``): the d maximising
      E[min(1, d/K)/√min(K, d)] / ρ(ε, δ, d) — the weight one holder gives an item, per unit
      of the weighted threshold ρ = max_{t≤d} [1/√t + σΦ⁻¹((1 − δ/2)^{1/t})] (Gopi et al.).

    ``max_users`` (a declared public bound U) is checked against δ (δ < 1/U) by the caller;
    the rules depend on U only through δ (the examples use δ = 1/(10·U))."""
    from scipy import stats  # imported when first used: it doubles the CLI start-up

    facts = strategy_facts(strategy)
    eps = check_positive("epsilon", epsilon)
    dl = check_probability("delta", delta)
    if max_users is not None:
        check_int("max_users", max_users, minimum=1)
    if facts.default_d is DefaultD.ONE:
        return 1, f"{facts.name}: d = 1 (the exact Korolova threshold grows linearly in d)"
    k = _reference_k()
    ds = np.arange(1, DEFAULT_D_MAX + 1)
    s1 = analytic_gaussian_sigma(epsilon=eps, delta=dl / 2)
    if facts.default_d is DefaultD.COUNTS:
        m = np.array([np.mean(np.minimum(k, d)) for d in ds])
        tau = np.sqrt(ds) * s1 * stats.norm.ppf(1 - dl / (2 * ds)) + 1
        d = int(ds[int(np.argmax(m / tau))])
        return d, (
            f"{facts.name}: d = {d} maximises E[min(K,d)]/τ(ε,δ,d) over the public reference "
            "sample's distinct queries per user (docs/privacy/selection.md)"
        )
    w = np.array([np.mean(np.minimum(1.0, d / k) / np.sqrt(np.minimum(k, d))) for d in ds])
    rho = np.array(
        [np.max(1 / np.sqrt(t) + s1 * stats.norm.ppf((1 - dl / 2) ** (1 / t)))
         for t in (np.arange(1, d + 1, dtype=np.float64) for d in ds)]
    )  # fmt: skip
    d = int(ds[int(np.argmax(w / rho))])
    return d, (
        f"{facts.name}: d = {d} maximises E[min(1,d/K)/√min(K,d)]/ρ(ε,δ,d) over the public "
        "reference sample's distinct queries per user (docs/privacy/selection.md)"
    )


def make_strategy(name: str, *, epsilon: float, delta: float, d: int) -> SelectionMechanism:
    """The strategy ``name`` (or a deprecated alias) calibrated to (ε, δ) for users with ≤ d
    distinct items."""
    cls = _BY_NAME[parse_choice("selection", name, SelectionStrategy)]
    return cls.for_budget(epsilon=epsilon, delta=delta, d=d)


def select_items(
    df: pl.DataFrame, *, strategy: str, epsilon: float, delta: float, d: int, rng: RandomSource
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Bound users to d distinct items, run the strategy; returns (selected items with their
    *true* distinct-user counts — never publish those; publish noisy counts separately —, the
    strategy's description)."""
    strat = make_strategy(strategy, epsilon=epsilon, delta=delta, d=d)
    sets = user_item_sets(df, d=d)
    return strat.select(sets, rng=rng), strat.describe()
