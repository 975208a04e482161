"""Differentially private selection of items (which queries to publish) — three strategies.

Setting (same for all three, so they compare at equal (ε, δ)): each user contributes a set of at
most ``d`` *distinct* items (their first d distinct queries; any data-independent choice works);
neighbouring logs differ by one user's whole set. The output is the set of selected items (their
counts are published separately with their own budget, as in Korolova's Release-Data).

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

Every strategy has ``privacy()`` (ε, δ), ``keep_probability(n)`` for an item with n users (for
policy Gaussian: for an item held only by users whose whole ℓ2 budget goes to it, a lower
bound) and ``select(user_items, rng)``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.errors import InternalError, InvalidParameterError
from searchveil.mechanisms.noise import MAX_GAUSSIAN_SIGMA, DiscreteGaussian, DiscreteLaplace
from searchveil.mechanisms.threshold import (
    exact_threshold_privacy,
    keep_probability,
    korolova_solve_exact,
)
from searchveil.rng import RandomSource
from searchveil.validate import check_choice, check_int, check_positive, check_probability

STRATEGIES = ("laplace", "gaussian", "policy-gaussian", "mad", "mad2r", "dp-sips")
#: the strategies added by issue 24 (ℓ2-weighted Gaussian rounds, exact integer noise)
ROUND_STRATEGIES = ("mad", "mad2r", "dp-sips")


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


def _pool_counts(pool: ItemPool, d: int) -> npt.NDArray[np.int64]:
    """Distinct-user count of every item id among the users' first ``d`` items."""
    return np.bincount(pool.items[pool.rank < d], minlength=pool.n_items).astype(np.int64)


def _as_frame(pool: ItemPool, ids: npt.NDArray[np.int64], d: int) -> pl.DataFrame:
    """Selected item ids as ``item, count`` (count among the users' first d items)."""
    return pl.DataFrame(
        {"item": pool.names.gather(ids), "count": _pool_counts(pool, d)[ids]},
        schema={"item": pool.names.dtype, "count": pl.Int64},
    )


def _distinct_counts(sets: pl.DataFrame) -> pl.DataFrame:
    return sets.group_by("item").agg(pl.len().cast(pl.Int64).alias("count"))


# ------------------------------------------------------------------------------ Laplace


@dataclass(frozen=True)
class LaplaceThreshold:
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

    def select_pool(self, pool: ItemPool, rng: RandomSource) -> npt.NDArray[np.int64]:
        """Selected item ids (noise drawn for the held items in id order)."""
        c = _pool_counts(pool, self.d)
        cand = np.flatnonzero(c)
        keep = c[cand] + DiscreteLaplace(self.b).sample(cand.size, rng) > self.K
        return cand[keep]

    def select(self, sets: pl.DataFrame, *, rng: RandomSource) -> pl.DataFrame:
        pool = ItemPool.from_frame(sets)
        return _as_frame(pool, self.select_pool(pool, rng), self.d)

    def describe(self) -> dict[str, Any]:
        return {"strategy": "laplace", "d": self.d, "K": self.K, "b": self.b, **self.privacy()}


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


@dataclass(frozen=True)
class GaussianThreshold:
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
        for f in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9):
            lo, hi = 0.05, 1.0
            while gaussian_delta(sigma=hi, d=d, epsilon=eps) > f * dl:
                hi *= 2
                if hi > 1e5:
                    raise InvalidParameterError("epsilon", epsilon, "a budget some σ meets")
            for _ in range(40):
                mid = (lo + hi) / 2
                if gaussian_delta(sigma=mid, d=d, epsilon=eps) <= f * dl:
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

    def select_pool(self, pool: ItemPool, rng: RandomSource) -> npt.NDArray[np.int64]:
        """Selected item ids (noise drawn for the held items in id order)."""
        c = _pool_counts(pool, self.d)
        cand = np.flatnonzero(c)
        keep = c[cand] + DiscreteGaussian(self.sigma).sample(cand.size, rng) >= self.tau
        return cand[keep]

    def select(self, sets: pl.DataFrame, *, rng: RandomSource) -> pl.DataFrame:
        pool = ItemPool.from_frame(sets)
        return _as_frame(pool, self.select_pool(pool, rng), self.d)

    def describe(self) -> dict[str, Any]:
        return {"strategy": "gaussian", "d": self.d, "sigma": self.sigma, "tau": self.tau,
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
class PolicyGaussian:
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
        it = sh_items.tolist()
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

    def select(self, sets: pl.DataFrame, *, rng: RandomSource) -> pl.DataFrame:
        pool = ItemPool.from_frame(sets)
        return _as_frame(pool, self.select_pool(pool, rng), self.d)

    def describe(self) -> dict[str, Any]:
        return {"strategy": "policy-gaussian", "d": self.d, "sigma": self.sigma, "rho": self.rho,
                "cutoff": self.cutoff, **self.privacy()}  # fmt: skip


# ---------------------------------------------------------------- ℓ2-weighted Gaussian rounds

#: noise is drawn this many items at a time (the exact sampler's temporaries stay ~50 MB)
NOISE_CHUNK = 1 << 20
#: user numbers, item ids and ranks of an :class:`ItemPool` (int32: a 20M-row log has ~9M rows)
Ids = npt.NDArray[np.int32]
#: integer weight scale s: a user with k items gives each ⌊s/√k⌋ (exact integers; ℓ2 norm ≤ s)
WEIGHT_SCALE_MAX = 1024
WEIGHT_SCALE_MIN = 16
#: bias cutoff of MAD2R's second round, in units of the first round's noise σ₁ (see docs)
MAD2R_CUTOFF_SIGMAS = 1.5
#: zCDP budget shares (must sum to 1) and the pool of items per user, as multiples of d
MAD_SHARES = (0.05, 0.95)
MAD2R_SHARES = (0.05, 0.25, 0.70)
SIPS_ROUNDS, SIPS_FACTOR = 3, 0.3
POOL_FACTOR = 2


def zcdp_delta(*, rho: float, epsilon: float) -> float:
    """δ(ε) of a ρ-zCDP mechanism: min over α > 1 of
    exp((α−1)(αρ−ε)) / (α−1) · (1 − 1/α)^α (Canonne, Kamath, Steinke 2020, Corollary 13).
    Every α gives a valid bound; the minimum is searched on a log grid and refined."""
    rho = check_positive("rho", rho)
    eps = check_positive("epsilon", epsilon)

    def f(a: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        return (a - 1) * (a * rho - eps) - np.log(a - 1) + a * np.log1p(-1 / a)

    a = np.exp(np.linspace(math.log(1.000001), math.log(1e6), 4000))
    v = f(a)
    i = int(np.argmin(v))
    lo, hi = a[max(i - 1, 0)], a[min(i + 1, a.size - 1)]
    fine = np.linspace(lo, hi, 2001)
    best = float(min(v[i], float(np.min(f(fine)))))
    return float(min(1.0, math.exp(best)))


def zcdp_rho(*, epsilon: float, delta: float) -> float:
    """The largest ρ (to 1e-9 relative) with :func:`zcdp_delta` (ρ, ε) ≤ δ."""
    eps = check_positive("epsilon", epsilon)
    dl = check_probability("delta", delta)
    lo, hi = 1e-12, 1.0
    while zcdp_delta(rho=hi, epsilon=eps) <= dl:
        hi *= 4
        if hi > 1e8:
            raise InvalidParameterError("epsilon", epsilon, "a budget a zCDP ρ can meet")
    if zcdp_delta(rho=lo, epsilon=eps) > dl:
        raise InvalidParameterError("delta", delta, "a δ some zCDP ρ > 1e-12 meets")
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if zcdp_delta(rho=mid, epsilon=eps) <= dl:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-9:
            break
    return lo


@functools.lru_cache(maxsize=16)
def _dg_tail(sigma: float) -> tuple[int, npt.NDArray[np.float64]]:
    """P[Z ≥ k] of the discrete Gaussian N_Z(0, σ²) for k = −half..half (the same numerics as
    :meth:`DiscreteGaussian.sf`), computed once per σ."""
    support, probs = DiscreteGaussian(sigma)._support()
    tail = np.append(np.cumsum(probs[::-1])[::-1], 0.0)
    return int(support[0]), tail


def _dg_sf(sigma: float, k: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """P[Z ≥ k] for Z ~ N_Z(0, σ²) (k real: P[Z ≥ ⌈k⌉])."""
    lo, tail = _dg_tail(float(sigma))
    kk = np.ceil(np.asarray(k, dtype=np.float64))
    pos = np.clip(kk - lo, 0, tail.size - 1).astype(np.int64)
    return np.asarray(tail[pos])


def unit_weights(scale: int, d: int) -> npt.NDArray[np.int64]:
    """``a[k] = ⌊scale/√k⌋`` for k = 0..d (a[0] = 0), exact: ⌊√⌊s²/k⌋⌋ = ⌊s/√k⌋, so a user
    with k items has ℓ2 norm √k·a[k] ≤ s."""
    return np.array([0] + [math.isqrt(scale * scale // k) for k in range(1, d + 1)], np.int64)


def weight_scale(sigma: float, d: int = 1) -> int:
    """The integer weight scale s of a round with noise σ (user units): σ·s ≤ 1023 when
    possible — the exact sampler's fast range (its discrete Laplace proposal by table), ~2.5×
    quicker than beyond — but s ≥ 16√d, so that flooring ⌊s/√k⌋ loses ≤ 1/16 of any weight
    (measured: −0.7% to −0.9% of the items released against s = 1024 at d = 31), and
    s ≤ WEIGHT_SCALE_MAX, σ·s ≤ MAX_GAUSSIAN_SIGMA."""
    s = min(WEIGHT_SCALE_MAX, max(int(1023 // sigma), math.ceil(16 * math.sqrt(d))))
    s = min(s, int(MAX_GAUSSIAN_SIGMA // sigma))
    if s < max(WEIGHT_SCALE_MIN, math.ceil(math.sqrt(d))):  # every weight ⌊s/√k⌋ ≥ 1
        raise InvalidParameterError(
            "epsilon",
            sigma,
            f"a budget with noise σ ≤ {MAX_GAUSSIAN_SIGMA / WEIGHT_SCALE_MIN:g} (in user units)",
        )
    return s


@dataclass(frozen=True)
class WeightedRound:
    """One round of ℓ2-weighted Gaussian thresholding on integers (Gopi et al. 2020's weighted
    Gaussian, exact): each user gives each of its k ≤ d items the weight ⌊s/√k⌋; an item is
    released when its weight plus discrete Gaussian noise N_Z(0, (σs)²) is ≥ ``threshold``.

    Privacy map: the user's vector has ℓ2 norm ≤ s, so on the items others also hold the round
    is ρ-zCDP with ρ = 1/(2σ²) (CKS 2020, Prop. 5: the Rényi divergence of discrete Gaussians
    shifted by an integer vector is at most that of continuous ones); an item only this user
    holds is released with probability ≤ :meth:`delta_unique` (exact, worst case over k)."""

    sigma: float
    threshold: int
    scale: int
    d: int

    @property
    def noise(self) -> DiscreteGaussian:
        return DiscreteGaussian(self.sigma * self.scale)

    @property
    def rho(self) -> float:
        return 1.0 / (2.0 * self.sigma**2)

    def pass_probability(self, weight: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """P[weight + Z ≥ threshold] for integer weights."""
        w = np.asarray(weight, dtype=np.float64)
        return _dg_sf(self.sigma * self.scale, self.threshold - w)

    def delta_unique(self) -> float:
        """max over k ≤ d of P[one of k items held only by this user is released]."""
        a = unit_weights(self.scale, self.d)[1:]
        p = self.pass_probability(a)
        k = np.arange(1, self.d + 1, dtype=np.float64)
        return float(np.max(-np.expm1(k * np.log1p(-np.minimum(p, 1 - 1e-300)))))

    def run(
        self, users: Ids, items: Ids, n_items: int,
        rng: RandomSource, diagnostic: np.random.Generator | None = None,
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64], npt.NDArray[np.int64]]:  # fmt: skip
        """``users``/``items``: each user's items for this round (≤ d each, users contiguous).
        Returns (released mask over all item ids, the candidate item ids in increasing order,
        their noisy weights). Noise is drawn for the candidates in item-id order.

        ``diagnostic``: a numpy generator for *simulations* on synthetic data (the d-curves):
        rounded continuous Gaussian noise instead of the exact sampler. Never for a release."""
        weight = self.weights(users, items, n_items)
        cand = np.flatnonzero(weight)  # every held item has weight ≥ 1 (s ≥ √d)
        noisy = weight[cand].astype(np.int64)
        del weight
        for lo in range(0, cand.size, NOISE_CHUNK):  # chunks: the sampler's temporaries stay small
            hi = min(lo + NOISE_CHUNK, cand.size)
            if diagnostic is not None:
                z = np.rint(diagnostic.normal(0.0, self.sigma * self.scale, hi - lo))
                noisy[lo:hi] += z.astype(np.int64)
            else:
                noisy[lo:hi] += self.noise.sample(hi - lo, rng)
        released = np.zeros(n_items, dtype=bool)
        released[cand[noisy >= self.threshold]] = True
        return released, cand, noisy

    def weights(self, users: Ids, items: Ids, n_items: int) -> npt.NDArray[np.float64]:
        """Each item's total weight Σ ⌊s/√k_u⌋ over the users holding it this round (integers,
        exact in float64 below 2^53)."""
        k = (np.bincount(users) if users.size else np.zeros(0, np.int64)).astype(np.int32)
        if k.size and int(k.max()) > self.d:
            raise InternalError("a user has more than d items in a weighted round")
        table = unit_weights(self.scale, self.d).astype(np.int32)
        return np.asarray(
            np.bincount(items, weights=table[k[users]], minlength=n_items), dtype=np.float64
        )

    def describe(self) -> dict[str, Any]:
        return {"sigma": self.sigma, "noise_sigma_integer": self.sigma * self.scale,
                "threshold": self.threshold, "threshold_units": self.threshold / self.scale,
                "rho": self.rho, "delta_unique": self.delta_unique(), "d": self.d}  # fmt: skip


def _round_threshold(sigma: float, scale: int, d: int, target: float) -> int:
    """The smallest integer threshold whose :meth:`WeightedRound.delta_unique` is ≤ target."""
    lo, hi = 1, int(scale * (1 + 40 * sigma)) + 1
    if WeightedRound(sigma, hi, scale, d).delta_unique() > target:
        raise InvalidParameterError("delta", target, "a δ share the threshold search can meet")
    while lo < hi:
        mid = (lo + hi) // 2
        if WeightedRound(sigma, mid, scale, d).delta_unique() <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _first_per_user(users: Ids, keep: npt.NDArray[np.bool_], d: int) -> npt.NDArray[np.int64]:
    """Indices of the first ``d`` rows with ``keep`` of each user (rows grouped by user, in
    rank order); int32 temporaries (a 20M-row log has ~9M rows here)."""
    idx = np.flatnonzero(keep)
    if idx.size == 0:
        return idx
    u = users[idx]
    start = np.empty(idx.size, dtype=bool)
    start[0] = True
    np.not_equal(u[1:], u[:-1], out=start[1:])
    del u
    grp = np.cumsum(start, dtype=np.int32) - 1
    firsts = np.flatnonzero(start).astype(np.int32)
    del start
    pos = np.arange(idx.size, dtype=np.int32) - firsts[grp]
    del grp
    return idx[pos < d]


@dataclass(frozen=True)
class ItemPool:
    """Each user's first L distinct items as integer arrays: ``users`` (0..U−1, contiguous, in
    canonical user order), ``items`` (ids into ``names``, in canonical item order), ``rank``
    (the item's position among the user's distinct items, 0-based)."""

    users: Ids
    items: Ids
    rank: Ids
    names: pl.Series
    user_ids: pl.Series | None = None  # the user id of each user number

    @classmethod
    def from_frame(cls, pool: pl.DataFrame) -> ItemPool:
        """``pool``: columns user, item (+ rank); each user's rows in rank order. Users are
        numbered in the order their rows come (the frame is sorted by user first unless every
        user's rows are already contiguous, as every engine delivers them); items in
        increasing order of a 64-bit hash of their text — the same on every engine, and
        strings are never sorted (10× slower). A hash collision (two texts, one hash; p ≈
        n²/2^65) is detected with a second, independent hash and then resolved by ordering
        the texts themselves."""
        df = pool.select("user", "item", *(["rank"] if "rank" in pool.columns else []))
        rid = df.get_column("user").rle_id().to_numpy()
        n = rid.size
        first_rows = np.flatnonzero(np.r_[True, rid[1:] != rid[:-1]]) if n else rid
        pos = np.arange(n, dtype=np.int64) - np.repeat(
            first_rows, np.diff(np.r_[first_rows, n])
        ).astype(np.int64)
        contiguous = df.get_column("user").n_unique() == first_rows.size
        if "rank" in df.columns:
            contiguous = contiguous and bool(np.array_equal(df.get_column("rank").to_numpy(), pos))
        if not contiguous:
            if "rank" not in df.columns:
                df = df.with_columns(rank=pl.int_range(pl.len()).over("user"))
            df = df.sort(["user", "rank"], maintain_order=True)
            rid = df.get_column("user").rle_id().to_numpy()
            first_rows = np.flatnonzero(np.r_[True, rid[1:] != rid[:-1]]) if n else rid
            pos = df.get_column("rank").to_numpy().astype(np.int64)
        item = df.get_column("item")
        h = item.hash(seed=24).to_numpy()
        _, first, inv = np.unique(h, return_index=True, return_inverse=True)
        del h
        h2 = item.hash(seed=77).to_numpy()
        clash = not np.array_equal(h2, h2[first][inv])
        del h2
        if clash:
            names = item.unique().sort()
            inv = pl.DataFrame({"item": item}).join(
                pl.DataFrame({"item": names, "_i": pl.int_range(names.len(), eager=True)}),
                on="item", how="left", maintain_order="left",
            ).get_column("_i").to_numpy()  # fmt: skip
        else:
            names = item.gather(first)
        return cls(
            users=rid.astype(np.int32),
            items=np.asarray(inv, dtype=np.int32),
            rank=pos.astype(np.int32),
            names=names,
            user_ids=df.get_column("user").gather(first_rows),
        )

    def user_order(self) -> npt.NDArray[np.int64]:
        """User numbers in the canonical order (their ids sorted as text): engines read a
        numeric id as an integer or as text, the order must not depend on which."""
        if self.user_ids is None:
            return np.arange(int(self.users.max()) + 1 if self.users.size else 0)
        return np.asarray(self.user_ids.cast(pl.String).arg_sort().to_numpy(), dtype=np.int64)

    def first(self, d: int) -> ItemPool:
        """The users' first ``d`` items only (the same ids and names)."""
        keep = self.rank < d
        return ItemPool(self.users[keep], self.items[keep], self.rank[keep], self.names,
                        self.user_ids)  # fmt: skip

    @property
    def n_items(self) -> int:
        return int(self.names.len())


@dataclass(frozen=True)
class RoundsSelection:
    """MAD, MAD2R and DP-SIPS: rounds of :class:`WeightedRound` on each user's first
    ``pool`` distinct items, with items released in earlier rounds removed (their users' weight
    goes to their other items) — see the module docstring and docs/privacy/selection.md.

    * ``mad`` — a probe round with a small share of the budget releases the items far above
      any threshold; the main round spreads each user's unit ℓ2 budget over its first d items
      the probe did not release (weight rerouted from items far above the threshold).
    * ``mad2r`` — the probe, a first round, and a second round in which each user keeps only
      its items not yet released whose first-round noisy weight is ≥ ``cutoff`` (an internal
      value, never published): the user's budget goes to items that can still make it.
    * ``dp-sips`` — Swanberg, Desfontaines, Haney 2023: R rounds with geometrically growing
      budget shares, each on the users' first d items not released before.

    Privacy (docs/privacy/selection.md): zCDP adds over rounds (ρ = Σ 1/(2σ_r²)); ε, δ_G from
    :func:`zcdp_delta`; items only the added user holds: δ_T = Σ_r delta_unique_r;
    δ = δ_G + δ_T/(1 − δ_T)."""

    name: str
    d: int
    pool: int
    rounds: tuple[WeightedRound, ...]
    epsilon: float
    cutoff: int | None = None  # mad2r: integer cutoff on the first round's noisy weight
    bias_round: int | None = None  # mad2r: the round whose noisy weights bias the next

    @classmethod
    def for_budget(cls, name: str, *, epsilon: float, delta: float, d: int,
                   pool: int | None = None) -> RoundsSelection:  # fmt: skip
        check_choice("selection", name, ROUND_STRATEGIES)
        eps = check_positive("epsilon", epsilon)
        dl = check_probability("delta", delta)
        d = check_int("d", d, minimum=1, maximum=4096)
        pool = check_int("pool", POOL_FACTOR * d if pool is None else pool, minimum=d)
        if name == "mad":
            shares: tuple[float, ...] = MAD_SHARES
        elif name == "mad2r":
            shares = MAD2R_SHARES
        else:
            w = [SIPS_FACTOR ** (SIPS_ROUNDS - 1 - r) for r in range(SIPS_ROUNDS)]
            shares = tuple(x / sum(w) for x in w)
        best: RoundsSelection | None = None
        for g in (0.2, 0.35, 0.5, 0.65, 0.8):  # share of δ for the Gaussian part
            rho = zcdp_rho(epsilon=eps, delta=g * dl * 0.999)
            sigmas = [1.0 / math.sqrt(2.0 * rho * f) for f in shares]
            d_t = (1 - g) * dl * 0.999
            # the unique-item δ is split like the budget (each round its share)
            rounds = tuple(
                WeightedRound(s, _round_threshold(s, weight_scale(s, d), d, d_t * f),
                              weight_scale(s, d), d)
                for s, f in zip(sigmas, shares, strict=True)
            )  # fmt: skip
            cutoff = bias = None
            if name == "mad2r":
                bias = 1
                cutoff = int(math.floor(MAD2R_CUTOFF_SIGMAS * sigmas[1] * rounds[1].scale))
            cand = cls(name=name, d=d, pool=pool, rounds=rounds, epsilon=eps, cutoff=cutoff,
                       bias_round=bias)  # fmt: skip
            if not (cand.privacy()["delta"] <= dl):
                continue
            key = rounds[-1].threshold / rounds[-1].scale
            if best is None or key < best.rounds[-1].threshold / best.rounds[-1].scale:
                best = cand
        if best is None:
            raise InvalidParameterError("delta", delta, "a δ the rounds can be calibrated to")
        return best

    # -- privacy map ------------------------------------------------------------------------
    def privacy(self) -> dict[str, float]:
        rho = sum(r.rho for r in self.rounds)
        d_g = zcdp_delta(rho=rho, epsilon=self.epsilon)
        d_t = sum(r.delta_unique() for r in self.rounds)
        return {"epsilon": self.epsilon, "delta": d_g + d_t / (1 - d_t), "delta_noise": d_g,
                "delta_threshold": d_t, "rho": rho}  # fmt: skip

    def keep_probability(self, n: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """For an item whose n holders give it their whole unit budget (weight s each) in every
        round until it is released (each user holding this one item): exact."""
        nn = np.asarray(n, dtype=np.float64)
        stay = np.ones_like(nn)  # P[not released so far] (and, for mad2r, the bias event)
        for i, r in enumerate(self.rounds):
            w = nn * r.scale
            p = r.pass_probability(w)
            if self.bias_round is not None and i == self.bias_round + 1:
                prev = self.rounds[self.bias_round]
                assert self.cutoff is not None
                # not released in the bias round and noisy weight ≥ cutoff, then pass this one
                ok = np.maximum(
                    prev.noise.sf(self.cutoff - nn * prev.scale)
                    - prev.pass_probability(nn * prev.scale),
                    0.0,
                )
                notrel_prev = 1 - prev.pass_probability(nn * prev.scale)
                frac = np.where(notrel_prev > 0, ok / np.maximum(notrel_prev, 1e-300), 0.0)
                stay = stay * (1 - frac * p)
            else:
                stay = stay * (1 - p)
        return np.asarray(1 - stay)

    # -- the mechanism ----------------------------------------------------------------------
    def run_pool(
        self, pool: ItemPool, rng: RandomSource, diagnostic: np.random.Generator | None = None
    ) -> dict[str, Any]:
        """Released item ids (sorted) and per-round figures (``diagnostic``: see
        :meth:`WeightedRound.run`; simulations only)."""
        n = pool.n_items
        in_pool = pool.rank < self.pool
        released = np.zeros(n, dtype=bool)
        eligible_bias: npt.NDArray[np.bool_] | None = None
        round_sets: npt.NDArray[np.int64] | None = None
        figures = []
        for i, r in enumerate(self.rounds):
            rows = self.round_rows(pool, i, released, eligible_bias, round_sets, in_pool)
            rel, cand, noisy = r.run(pool.users[rows], pool.items[rows], n, rng, diagnostic)
            new = rel & ~released
            released |= rel
            if self.bias_round is not None and i == self.bias_round:
                assert self.cutoff is not None
                eligible_bias = np.zeros(n, dtype=bool)
                eligible_bias[cand[noisy >= self.cutoff]] = True
                round_sets = rows
            figures.append({"round": i + 1, "user_items": int(rows.size),
                            "candidates": int(cand.size), "released": int(new.sum())})  # fmt: skip
        return {"released": np.flatnonzero(released), "rounds": figures}

    def round_rows(
        self, pool: ItemPool, i: int, released: npt.NDArray[np.bool_],
        eligible_bias: npt.NDArray[np.bool_] | None, bias_rows: npt.NDArray[np.int64] | None,
        in_pool: npt.NDArray[np.bool_] | None = None,
    ) -> npt.NDArray[np.int64]:  # fmt: skip
        """The pool rows round ``i`` uses, given the outputs of the rounds before (the released
        items; for MAD2R's biased round the items whose bias-round noisy weight is ≥ the cutoff
        and the bias round's rows): a function of each user's own items and of those outputs
        only — the lemma of docs/privacy/selection.md."""
        if in_pool is None:
            in_pool = pool.rank < self.pool
        if self.bias_round is not None and i == self.bias_round + 1:
            assert eligible_bias is not None and bias_rows is not None
            # the bias round's own items, not released, noisy weight ≥ cutoff
            keep = np.zeros(pool.users.size, dtype=bool)
            keep[bias_rows] = True
            keep &= eligible_bias[pool.items] & ~released[pool.items]
            return _first_per_user(pool.users, keep, self.rounds[i].d)
        return _first_per_user(pool.users, in_pool & ~released[pool.items], self.rounds[i].d)

    def select_pool(
        self, pool: ItemPool, rng: RandomSource, diagnostic: np.random.Generator | None = None
    ) -> npt.NDArray[np.int64]:
        return np.asarray(self.run_pool(pool, rng, diagnostic)["released"], dtype=np.int64)

    def select(self, sets: pl.DataFrame, *, rng: RandomSource) -> pl.DataFrame:
        """``sets``: user, item (+ rank) — each user's distinct items in order (e.g.
        :func:`user_item_pool`). Returns the selected items with their distinct-user counts
        among the users' first d items (the count step's bounded counts)."""
        pool = ItemPool.from_frame(sets)
        return _as_frame(pool, self.select_pool(pool, rng), self.d)

    def describe(self) -> dict[str, Any]:
        return {"strategy": self.name, "d": self.d, "pool": self.pool,
                "rounds": [r.describe() for r in self.rounds],
                "budget_shares": [r.rho / sum(x.rho for x in self.rounds) for r in self.rounds],
                "bias_cutoff": None if self.cutoff is None else {
                    "round": (self.bias_round or 0) + 1, "integer": self.cutoff,
                    "sigmas": MAD2R_CUTOFF_SIGMAS},
                "accounting": "zCDP over rounds (CKS 2020 Cor. 13 to (ε, δ)) + unique items",
                **self.privacy()}  # fmt: skip


def user_item_pool(df: pl.DataFrame, *, pool: int, user_col: str = "user",
                   item_col: str = "item", order_col: str = "pos") -> pl.DataFrame:  # fmt: skip
    """The first ``pool`` distinct items of every user (by ``order_col``): user, item, rank."""
    check_int("pool", pool, minimum=1)
    return (
        df.sort([user_col, order_col])
        .unique([user_col, item_col], keep="first", maintain_order=True)
        .group_by(user_col, maintain_order=True)
        .head(pool)
        .select(pl.col(user_col).alias("user"), pl.col(item_col).alias("item"))
        .with_columns(rank=pl.int_range(pl.len()).over("user").cast(pl.Int64))
    )


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

    * ``laplace``: d = 1 (the exact Korolova threshold grows linearly in d).
    * ``gaussian`` (counts, ℓ2 sensitivity √d): the d ≤ 128 maximising
      E[min(K, d)] / τ(ε, δ, d) — the items a user contributes per unit of threshold — with K
      the distinct queries per user of the public reference sample
      (:data:`REFERENCE_DISTINCT_PER_USER`) and τ ≈ σ(ε, δ/2, √d)·Φ⁻¹(1 − δ/(2d)) + 1.
    * ℓ2-weighted (``policy-gaussian``, ``mad``, ``mad2r``, ``dp-sips``): the d maximising
      E[min(1, d/K)/√min(K, d)] / ρ(ε, δ, d) — the weight one holder gives an item, per unit
      of the weighted threshold ρ = max_{t≤d} [1/√t + σΦ⁻¹((1 − δ/2)^{1/t})] (Gopi et al.).

    ``max_users`` (a declared public bound U) is checked against δ (δ < 1/U) by the caller;
    the rules depend on U only through δ (the examples use δ = 1/(10·U))."""
    from scipy import stats  # imported when first used: it doubles the CLI start-up

    check_choice("selection", strategy, STRATEGIES)
    eps = check_positive("epsilon", epsilon)
    dl = check_probability("delta", delta)
    if max_users is not None:
        check_int("max_users", max_users, minimum=1)
    if strategy == "laplace":
        return 1, "laplace: d = 1 (the exact Korolova threshold grows linearly in d)"
    k = _reference_k()
    ds = np.arange(1, DEFAULT_D_MAX + 1)
    s1 = analytic_gaussian_sigma(epsilon=eps, delta=dl / 2)
    if strategy == "gaussian":
        m = np.array([np.mean(np.minimum(k, d)) for d in ds])
        tau = np.sqrt(ds) * s1 * stats.norm.ppf(1 - dl / (2 * ds)) + 1
        d = int(ds[int(np.argmax(m / tau))])
        return d, (
            f"gaussian: d = {d} maximises E[min(K,d)]/τ(ε,δ,d) over the public reference "
            "sample's distinct queries per user (docs/privacy/selection.md)"
        )
    w = np.array([np.mean(np.minimum(1.0, d / k) / np.sqrt(np.minimum(k, d))) for d in ds])
    rho = np.array(
        [np.max(1 / np.sqrt(t) + s1 * stats.norm.ppf((1 - dl / 2) ** (1 / t)))
         for t in (np.arange(1, d + 1, dtype=np.float64) for d in ds)]
    )  # fmt: skip
    d = int(ds[int(np.argmax(w / rho))])
    return d, (
        f"{strategy}: d = {d} maximises E[min(1,d/K)/√min(K,d)]/ρ(ε,δ,d) over the public "
        "reference sample's distinct queries per user (docs/privacy/selection.md)"
    )


Strategy = LaplaceThreshold | GaussianThreshold | PolicyGaussian | RoundsSelection


def make_strategy(name: str, *, epsilon: float, delta: float, d: int) -> Strategy:
    """The strategy ``name`` calibrated to (ε, δ) for users with ≤ d distinct items."""
    check_choice("selection", name, STRATEGIES)
    if name == "laplace":
        return LaplaceThreshold.for_budget(epsilon=epsilon, delta=delta, d=d)
    if name == "gaussian":
        return GaussianThreshold.for_budget(epsilon=epsilon, delta=delta, d=d)
    if name == "policy-gaussian":
        return PolicyGaussian.for_budget(epsilon=epsilon, delta=delta, d=d)
    return RoundsSelection.for_budget(name, epsilon=epsilon, delta=delta, d=d)


def select_items(
    df: pl.DataFrame, *, strategy: str, epsilon: float, delta: float, d: int, rng: RandomSource
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Bound users to d distinct items, run the strategy; returns (selected items with their
    *true* distinct-user counts — never publish those; publish noisy counts separately —, the
    strategy's description)."""
    strat = make_strategy(strategy, epsilon=epsilon, delta=delta, d=d)
    sets = user_item_sets(df, d=d)
    return strat.select(sets, rng=rng), strat.describe()
