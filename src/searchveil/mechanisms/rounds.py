"""ℓ2-weighted Gaussian selection in rounds — probe-reweight and probe-reweight-2r (after Chen
et al., ICML 2025's adaptive weighting) and DP-SIPS (Swanberg et al. 2023) — and the integer
item pools every selection strategy runs on.

Split out of :mod:`searchveil.mechanisms.selection` (issue 25: no module over 700 lines); the
privacy analysis is in docs/privacy/selection.md: each round is exact ℓ2-weighted
discrete-Gaussian thresholding on integer weights, zCDP over rounds (:func:`zcdp_delta`,
:func:`zcdp_rho`), and the exact δ of items only one user holds
(:meth:`WeightedRound.delta_unique`). :class:`ItemPool` is the one encoding of the users' first
items (integer ids, hash-ordered) that :mod:`~searchveil.mechanisms.selection`'s strategies and
the release layer share. A rounds strategy is a subclass of :class:`RoundsSelection` that states
its facts (:class:`~searchveil.mechanisms.selection_facts.StrategyFacts`) and its budget
shares.
"""

from __future__ import annotations

import functools
import math
from abc import ABC
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.bounding import first_per_user
from searchveil.errors import InternalError, InvalidParameterError
from searchveil.mechanisms.noise import MAX_GAUSSIAN_SIGMA, DiscreteGaussian
from searchveil.mechanisms.noisy_counts import bucket_order, bucket_runs, draw_by_bucket
from searchveil.mechanisms.pool_rounds import PoolFigures, PoolTable, RoundSpec, run_rounds
from searchveil.mechanisms.selection_facts import Accounting, DefaultD, StrategyFacts, Units
from searchveil.rng import RandomSource
from searchveil.validate import check_int, check_positive, check_probability


def pool_counts(pool: ItemPool, d: int) -> npt.NDArray[np.int64]:
    """Distinct-user count of every item id among the users' first ``d`` items."""
    return np.bincount(pool.items[pool.rank < d], minlength=pool.n_items).astype(np.int64)


def pool_frame(pool: ItemPool, ids: npt.NDArray[np.int64], d: int) -> pl.DataFrame:
    """Selected item ids as ``item, count`` (count among the users' first d items)."""
    return pl.DataFrame(
        {"item": pool.names.gather(ids), "count": pool_counts(pool, d)[ids]},
        schema={"item": pool.names.dtype, "count": pl.Int64},
    )


# ---------------------------------------------------------------- ℓ2-weighted Gaussian rounds

#: noise is drawn this many items at a time (the exact sampler's temporaries stay ~50 MB)
NOISE_CHUNK = 1 << 20
#: user numbers, item ids and ranks of an :class:`ItemPool` (int32: a 20M-row log has ~9M rows)
Ids = npt.NDArray[np.int32]
#: integer weight scale s: a user with k items gives each ⌊s/√k⌋ (exact integers; ℓ2 norm ≤ s)
WEIGHT_SCALE_MAX = 1024
WEIGHT_SCALE_MIN = 16
#: bias cutoff of probe-reweight-2r's last round, in units of the round before's noise σ (docs)
CUTOFF_SIGMAS = 1.5
#: the pool of items per user of a strategy with more than one round, as a multiple of d
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


def pool_weights(
    users: Ids, items: Ids, n_items: int, table: npt.ArrayLike, d: int
) -> npt.NDArray[np.float64]:
    """Each item's total weight Σ table[k_u] over the users holding it (k_u: the user's rows
    here, ≤ d; integers, exact in float64 below 2^53)."""
    k = (np.bincount(users) if users.size else np.zeros(0, np.int64)).astype(np.int32)
    if k.size and int(k.max()) > d:
        raise InternalError("a user has more than d items in a weighted round")
    # float64 weights (integers, exact): bincount sums in float64 anyway, so an integer
    # gather would be one more copy of the rows
    w = np.asarray(table, dtype=np.float64)
    return np.asarray(np.bincount(items, weights=w[k[users]], minlength=n_items), dtype=np.float64)


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

    def weights(self, users: Ids, items: Ids, n_items: int) -> npt.NDArray[np.float64]:
        """Each item's total weight Σ ⌊s/√k_u⌋ over the users holding it this round (integers,
        exact in float64 below 2^53)."""
        return pool_weights(users, items, n_items, unit_weights(self.scale, self.d), self.d)

    def spec(self, pool: int, *, cutoff: int | None = None, after_bias: bool = False) -> RoundSpec:
        """The round in mechanism terms (:class:`~searchveil.mechanisms.pool_rounds.RoundSpec`):
        weights ⌊s/√k⌋, discrete Gaussian noise N_Z(0, (σs)²), released when ≥ the threshold."""
        table = tuple(int(x) for x in unit_weights(self.scale, self.d))
        return RoundSpec(d=self.d, pool=pool, weights=table, noise=self.noise,
                         threshold=self.threshold, inclusive=True, cutoff=cutoff,
                         after_bias=after_bias)  # fmt: skip

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


def user_rows_first(users: Ids, keep: npt.NDArray[np.bool_], d: int) -> npt.NDArray[np.int32]:
    """Indices of the first ``d`` rows with ``keep`` of each user (rows grouped by user, in
    rank order); int32 indices and temporaries (a 20M-row log has ~9M rows here)."""
    idx = np.flatnonzero(keep).astype(np.int32)
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


class LocalPool(PoolTable):
    """A pool table held by this process: an :class:`ItemPool`'s numpy arrays (released
    sets are boolean masks over item ids, a round's rows are row indices).

    Seeded noise: with ``canonical`` (a release: the selection family's tables) it comes from
    the bucket streams in the canonical order of the items' names (computed once per pool), so
    it equals a cluster's draw item for item; without (the mechanism on its own —
    :meth:`PoolSelection.select_pool`: the audits, benchmarks), from the one seeded stream in
    item-id order, as fast as one vectorised call (the same distribution: i.i.d. draws).
    ``diagnostic``: see :meth:`RoundsSelection.run_pool`."""

    def __init__(
        self, pool: ItemPool, diagnostic: np.random.Generator | None = None, *,
        canonical: bool = False,
    ) -> None:  # fmt: skip
        self.pool = pool
        self.diagnostic = diagnostic
        self.canonical = canonical
        self._canon: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None

    def nothing(self) -> npt.NDArray[np.bool_]:
        return np.zeros(self.pool.n_items, dtype=bool)

    def round_rows(self, spec: RoundSpec, released: Any, bias: Any) -> npt.NDArray[np.int32]:
        p = self.pool
        if spec.after_bias:
            bias_rows, eligible = bias
            keep = np.zeros(p.users.size, dtype=bool)
            keep[bias_rows] = True
            keep &= eligible[p.items] & ~released[p.items]
            return user_rows_first(p.users, keep, spec.d)
        return user_rows_first(p.users, (p.rank < spec.pool) & ~released[p.items], spec.d)

    def _canonical(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Each item id's position in the canonical draw order and its noise bucket."""
        if self._canon is None:
            order, buckets = bucket_order(pl.DataFrame({"item": self.pool.names}), ["item"])
            pos = np.empty(order.size, dtype=np.int64)
            pos[order] = np.arange(order.size)
            bucket = np.empty(order.size, dtype=np.int64)
            bucket[order] = buckets
            self._canon = (pos, bucket)
        return self._canon

    def _noise(
        self, cand: npt.NDArray[np.int64], spec: RoundSpec, step: int, key: int | None,
        rng: RandomSource,
    ) -> npt.NDArray[np.int64]:  # fmt: skip
        out = np.empty(cand.size, dtype=np.int64)
        if key is None or self.diagnostic is not None or not self.canonical:
            for lo in range(0, cand.size, NOISE_CHUNK):  # the sampler's temporaries stay small
                hi = min(lo + NOISE_CHUNK, cand.size)
                if self.diagnostic is not None:
                    sd = float(getattr(spec.noise, "sigma", 0.0))
                    out[lo:hi] = np.rint(self.diagnostic.normal(0.0, sd, hi - lo)).astype(np.int64)
                else:
                    out[lo:hi] = spec.noise.sample(hi - lo, rng)
            return out
        pos, bucket = self._canonical()
        order = np.argsort(pos[cand], kind="stable")
        out[order] = draw_by_bucket(bucket_runs(bucket[cand[order]]), spec.noise, key, step)
        return out

    def run_round(
        self, rows: Any, spec: RoundSpec, step: int, key: int | None, rng: RandomSource
    ) -> tuple[Any, Any, dict[str, int]]:
        p = self.pool
        weight = pool_weights(p.users[rows], p.items[rows], p.n_items, spec.weights, spec.d)
        cand = np.flatnonzero(weight)  # every held item has weight ≥ 1
        noisy = weight[cand].astype(np.int64)
        del weight
        noisy += self._noise(cand, spec, step, key, rng)
        passed = noisy >= spec.threshold if spec.inclusive else noisy > spec.threshold
        released = np.zeros(p.n_items, dtype=bool)
        released[cand[passed]] = True
        more = None
        if spec.cutoff is not None:
            eligible = np.zeros(p.n_items, dtype=bool)
            eligible[cand[noisy >= spec.cutoff]] = True
            more = (rows, eligible)
        return released, more, {"user_items": int(np.size(rows)), "candidates": int(cand.size)}

    def union(self, released: Any, more: Any) -> Any:
        return released | more

    def size(self, released: Any) -> int:
        return int(np.count_nonzero(released))

    def names(self, released: Any) -> pl.Series:
        return self.pool.names.gather(np.flatnonzero(released)).alias("item")

    def counts(self, released: Any, d: int) -> pl.DataFrame:
        return pool_frame(self.pool, np.flatnonzero(released), d)

    def figures(self, d: int) -> PoolFigures:
        p = self.pool
        holders = np.bincount(p.items, minlength=p.n_items)
        single = holders == 1
        first = p.rank < d
        return PoolFigures(rows=int(p.items.size), rows_first_d=int(first.sum()),
                           items=p.n_items, single_items=int(single.sum()),
                           single_first_d=int(single[p.items[first]].sum()))  # fmt: skip

    def collect_pool(self) -> ItemPool:
        return self.pool


class PoolSelection(ABC):
    """A strategy that selects from an :class:`ItemPool` (every registered strategy): it states
    its rounds (:meth:`round_specs`) or, if it cannot run where the pools are, overrides
    ``select_pool``; ``select`` on a frame of users' item sets is the same for all."""

    d: int

    def select_pool(self, pool: ItemPool, rng: RandomSource) -> npt.NDArray[np.int64]:
        """The selected item ids of ``pool`` (its :meth:`round_specs` on a :class:`LocalPool`)."""
        specs = self.round_specs()
        if specs is None:  # pragma: no cover - a strategy without rounds overrides this
            raise InternalError(f"{type(self).__name__} states no rounds and no select_pool")
        released, _ = run_rounds(LocalPool(pool), specs, rng)
        return np.flatnonzero(released).astype(np.int64)

    def round_specs(self) -> list[RoundSpec] | None:
        """The strategy as thresholding rounds on the pools (mechanism terms), or None when it
        cannot run where the pools are held (a sequential strategy: policy Gaussian)."""
        return None

    def select(self, sets: pl.DataFrame, *, rng: RandomSource) -> pl.DataFrame:
        """``sets``: user, item (+ rank) — each user's distinct items in order (e.g.
        :func:`user_item_pool`). Returns the selected items with their distinct-user counts
        among the users' first d items (the count step's bounded counts)."""
        pool = ItemPool.from_frame(sets)
        return pool_frame(pool, self.select_pool(pool, rng), self.d)

    def select_on(self, table: PoolTable, rng: RandomSource) -> tuple[PoolTable, Any]:
        """The selection on a pool table, where it is held: (the table the released set belongs
        to, the released set). A strategy without :meth:`round_specs` runs on the whole pool
        in this process (:meth:`PoolTable.collect_pool`)."""
        specs = self.round_specs()
        if specs is None:
            pool = table.collect_pool()
            ids = self.select_pool(pool, rng)
            mask = np.zeros(pool.n_items, dtype=bool)
            mask[ids] = True
            return LocalPool(pool), mask
        released, _ = run_rounds(table, specs, rng)
        return table, released


@dataclass(frozen=True)
class RoundsSelection(PoolSelection):
    """Rounds of :class:`WeightedRound` on each user's first ``pool`` distinct items, with
    items released in earlier rounds removed (their users' weight goes to their other items) —
    see the module docstring and docs/privacy/selection.md. A subclass is one strategy: its
    ``FACTS``, its zCDP budget ``SHARES`` (one per round, summing to 1) and, for a biased last
    round, ``BIAS_ROUND`` (:class:`ProbeReweight`, :class:`ProbeReweight2R`, :class:`DpSips`).

    Privacy (docs/privacy/selection.md): zCDP adds over rounds (ρ = Σ 1/(2σ_r²)); ε, δ_G from
    :func:`zcdp_delta`; items only the added user holds: δ_T = Σ_r delta_unique_r;
    δ = δ_G + δ_T/(1 − δ_T)."""

    FACTS: ClassVar[StrategyFacts]
    SHARES: ClassVar[tuple[float, ...]]
    #: the round whose noisy weights (≥ the cutoff) choose the next round's items, if any
    BIAS_ROUND: ClassVar[int | None] = None

    d: int
    pool: int
    rounds: tuple[WeightedRound, ...]
    epsilon: float
    cutoff: int | None = None  # the integer cutoff on the bias round's noisy weight
    bias_round: int | None = None  # the round whose noisy weights bias the next

    @property
    def name(self) -> str:
        return self.FACTS.name

    @classmethod
    def for_budget(cls, *, epsilon: float, delta: float, d: int,
                   pool: int | None = None) -> RoundsSelection:  # fmt: skip
        eps = check_positive("epsilon", epsilon)
        dl = check_probability("delta", delta)
        d = check_int("d", d, minimum=1, maximum=4096)
        pool = check_int("pool", POOL_FACTOR * d if pool is None else pool, minimum=d)
        shares = cls.SHARES
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
            if cls.BIAS_ROUND is not None:
                bias = cls.BIAS_ROUND
                cutoff = int(math.floor(CUTOFF_SIGMAS * sigmas[bias] * rounds[bias].scale))
            cand = cls(d=d, pool=pool, rounds=rounds, epsilon=eps, cutoff=cutoff,
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
        stay = np.ones_like(nn)  # P[not released so far] (and, with a bias round, its event)
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
    def round_specs(self) -> list[RoundSpec]:
        """The rounds in mechanism terms, for :func:`~searchveil.mechanisms.pool_rounds.
        run_rounds` on any pool table (see the module docstring)."""
        bias = self.bias_round
        return [
            r.spec(self.pool, cutoff=self.cutoff if i == bias else None,
                   after_bias=bias is not None and i == bias + 1)
            for i, r in enumerate(self.rounds)
        ]  # fmt: skip

    def run_pool(
        self, pool: ItemPool, rng: RandomSource, diagnostic: np.random.Generator | None = None
    ) -> dict[str, Any]:
        """Released item ids (sorted) and per-round figures (``diagnostic``: rounded continuous
        Gaussian noise from that generator instead of the exact sampler — simulations on
        synthetic data, the d-curves; never a release)."""
        local = LocalPool(pool, diagnostic)
        released, figures = run_rounds(local, self.round_specs(), rng)
        return {"released": np.flatnonzero(released), "rounds": figures}

    def round_rows(
        self, pool: ItemPool, i: int, released: npt.NDArray[np.bool_],
        eligible_bias: npt.NDArray[np.bool_] | None, bias_rows: npt.NDArray[np.int32] | None,
    ) -> npt.NDArray[np.int32]:  # fmt: skip
        """The pool rows round ``i`` uses, given the outputs of the rounds before (the released
        items; for a biased round (probe-reweight-2r's last) the items whose bias-round noisy
        weight is ≥ the cutoff and the bias round's rows): a function of each user's own items and
        of those outputs only — the lemma of docs/privacy/selection.md."""
        spec = self.round_specs()[i]
        bias = (bias_rows, eligible_bias) if spec.after_bias else None
        return np.asarray(LocalPool(pool).round_rows(spec, released, bias))

    def select_pool(
        self, pool: ItemPool, rng: RandomSource, diagnostic: np.random.Generator | None = None
    ) -> npt.NDArray[np.int64]:
        return np.asarray(self.run_pool(pool, rng, diagnostic)["released"], dtype=np.int64)

    def describe(self) -> dict[str, Any]:
        return {"strategy": self.name, "d": self.d, "pool": self.pool,
                "rounds": [r.describe() for r in self.rounds],
                "budget_shares": [r.rho / sum(x.rho for x in self.rounds) for r in self.rounds],
                "bias_cutoff": None if self.cutoff is None else {
                    "round": (self.bias_round or 0) + 1, "integer": self.cutoff,
                    "sigmas": CUTOFF_SIGMAS},
                "accounting": "zCDP over rounds (CKS 2020 Cor. 13 to (ε, δ)) + unique items",
                **self.privacy()}  # fmt: skip


class ProbeReweight(RoundsSelection):
    """A probe round plus a reweighted main round. The probe, with a small share of the budget,
    releases the items far above any threshold; the main round spreads each user's unit ℓ2
    budget over its first d items the probe did not release — weight that would have gone to
    items far above the threshold goes to the user's other items.

    The idea of moving a user's weight away from items that need none is Chen et al.'s (ICML
    2025, MaxAdaptiveDegree); their rule (each item's excess over the threshold rerouted within
    one round) is not this one: here a probe round finds the items to drop, so every round is
    plain ℓ2-weighted thresholding and the privacy proof is the rounds' zCDP composition.
    Formerly ``mad`` (still accepted, deprecated)."""

    FACTS = StrategyFacts(
        name="probe-reweight", label="probe-reweight*", short_label="PR", rounds=2,
        units=Units.L2_WEIGHT, default_d=DefaultD.L2_WEIGHTED, accounting=Accounting.ZCDP,
        aliases=("mad",),
    )  # fmt: skip
    SHARES = (0.05, 0.95)


class ProbeReweight2R(RoundsSelection):
    """The probe, a first reweighted round, and a second one in which each user keeps only its
    items not yet released whose first-round noisy weight is ≥ ``cutoff`` (an internal value,
    never published): the user's budget goes to items that can still make it. Inspired by Chen
    et al.'s two-round MAD2R (ICML 2025), not their rule (see :class:`ProbeReweight`). Formerly
    ``mad2r`` (still accepted, deprecated)."""

    FACTS = StrategyFacts(
        name="probe-reweight-2r", label="probe-reweight-2r*", short_label="PR2", rounds=3,
        units=Units.L2_WEIGHT, default_d=DefaultD.L2_WEIGHTED, accounting=Accounting.ZCDP,
        aliases=("mad2r",),
    )  # fmt: skip
    SHARES = (0.05, 0.25, 0.70)
    BIAS_ROUND = 1


#: DP-SIPS: rounds and the ratio of consecutive budget shares
SIPS_ROUNDS, SIPS_FACTOR = 3, 0.3
_SIPS_W = [SIPS_FACTOR ** (SIPS_ROUNDS - 1 - r) for r in range(SIPS_ROUNDS)]


class DpSips(RoundsSelection):
    """DP-SIPS (Swanberg, Desfontaines, Haney 2023): R rounds with geometrically growing budget
    shares, each on the users' first d items not released before."""

    FACTS = StrategyFacts(
        name="dp-sips", label="DP-SIPS*", short_label="SIPS", rounds=SIPS_ROUNDS,
        units=Units.L2_WEIGHT, default_d=DefaultD.L2_WEIGHTED, accounting=Accounting.ZCDP,
    )  # fmt: skip
    SHARES = tuple(x / sum(_SIPS_W) for x in _SIPS_W)


def user_item_pool(df: pl.DataFrame, *, pool: int, user_col: str = "user",
                   item_col: str = "item", order_col: str = "pos") -> pl.DataFrame:  # fmt: skip
    """The first ``pool`` distinct items of every user (by ``order_col``): user, item, rank —
    the bounding kernel's rule (:func:`~searchveil.bounding.first_per_user`)."""
    check_int("pool", pool, minimum=1)
    first = first_per_user(df.sort([user_col, order_col]), pool, user=user_col,
                           distinct_on=[item_col], rank="rank")  # fmt: skip
    return first.select(pl.col(user_col).alias("user"), pl.col(item_col).alias("item"), "rank")
