"""CELS e2e: the noise shared out among the parties, and its privacy map
(docs/privacy/cels.md §5).

Every party — the r data parties and P0 — adds one share of the noise to its term of each
secure sum before the sum, so the sum reveals only noisy totals, to P1 as to everyone. The
shares are sized so that **any r of the r + 1 shares are the full noise**: a party that
subtracts its own share from what it learns still faces all of it.

* **pair counts** (ZEALOUS with τ = 1 over a public domain of slots; each user holds at most m
  pairs, so a user moves m slots by 1: ℓ1 = m, ℓ2 = √m): **Skellam shares**
  (:class:`~searchveil.mechanisms.shares.SkellamShares`), the full noise of variance σ², the
  least for which the privacy loss of m shifted coordinates, computed numerically
  (:func:`~searchveil.mechanisms.shares.skellam_delta`), gives (ε_c, δ_c/2); a slot is published
  iff its noisy total exceeds τ', the least integer with 1 − (1 − π)^m ≤ δ_c/2,
  π = P[T >= τ'] for T the total noise (r + 1 shares): a pair held by one user published.
  Against ℓ1 calibration (the discrete Laplace of scale m/ε_c) the Skellam's ℓ2 calibration
  needs about half the variance and a threshold three times lower at m = 27
  (docs/privacy/cels.md §5 has the comparison);
* **activity profile** (m bins, ℓ1 = ℓ2 = 1, where the Skellam gains nothing): **Pólya
  shares** of DLap(1/ε_h) (:class:`~searchveil.mechanisms.shares.PolyaShares`), pure ε_h.

Against a party knowing its own share z: the rest of the noise is the full noise, so the noisy
values are as private as above; the δ of a published single-user pair is, averaged over z,
E_z[1 − (1 − π(z))^m] ≤ 1 − (1 − E_z π(z))^m (Jensen; E_z π(z) = π), the same δ.

* **the union's overlap structure** (P0's view: for every set S of ≥ 2 data parties, how many
  digests exactly the lists of S hold): :class:`UnionDummies` — every member of S adds the same
  z_S dummy digests, z_S = min(2s, max(0, s + X_S)), X_S ~ DLap(2m/ε_u), drawn identically by
  the data parties from their shared key; (ε_u, δ_u) against P0.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from searchveil.errors import InternalError, InvalidParameterError
from searchveil.mechanisms.budget import Part, PrivacyCost, Relation
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.shares import (
    MAX_POLYA_SCALE,
    PolyaShares,
    SkellamLaw,
    SkellamShares,
    loss_grid,
    skellam_delta,
    skellam_epsilon,
)
from searchveil.release.ump.schema import SchemaParams
from searchveil.rng import RandomSource
from searchveil.validate import check_int, check_positive, check_probability

__all__ = ["MAX_PARTY_DUMMIES", "DistributedCounts", "DistributedE2E", "UnionDummies",
           "calibrate_skellam", "solve_tau_prime"]  # fmt: skip

#: the share of δ_c for the noisy counts themselves (the rest: a single-user pair published)
RDP_DELTA_SHARE = 0.5
#: the most dummy digests one party may add (its union list grows by that many entries)
MAX_PARTY_DUMMIES = 1 << 24


@functools.lru_cache(maxsize=128)
def calibrate_skellam(m: int, epsilon: float, delta: float, shares: int) -> SkellamShares:
    """The Skellam shares of the least variance (to 0.2 %; as sampled, rounded up) whose
    full noise gives (ε, δ) on m coordinates each moved by 1 (:func:`skellam_delta`)."""

    def ok(v: float) -> bool:  # on the coarse grid: its δ bounds the fine grid's
        full = SkellamShares(v, shares).full_variance
        return skellam_delta(full, epsilon, m=m, grid=loss_grid(epsilon, m, coarse=True)) <= delta

    lo, hi = 1e-3, 1.0
    while not ok(hi):
        lo, hi = hi, hi * 4
        if hi > 1e9:
            raise InvalidParameterError("epsilon", epsilon, "a budget the Skellam noise can meet")
    while hi / lo > 1.002:  # the variance to 0.2 %
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return SkellamShares(hi, shares)


@functools.lru_cache(maxsize=128)
def solve_tau_prime(mu_total: float, m: int, delta: float) -> int:
    """The least integer τ' >= 1 with 1 − (1 − P[T >= τ'])^m <= δ, T ~ Skellam(mu_total)."""
    law = SkellamLaw(mu_total)

    def ok(t: int) -> bool:
        return -math.expm1(m * math.log1p(-law.sf(t))) <= delta

    hi = max(1, int(math.sqrt(law.variance)))
    while not ok(hi):
        hi *= 2
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


@dataclass(frozen=True)
class DistributedCounts:
    """A thresholded histogram of holders (ZEALOUS, τ = 1, over a public domain of slots; each
    user holds at most ``m`` items, so it moves m slots by 1) with Skellam shares for
    ``parties`` data parties and P0, at (``epsilon``, ``delta``): the pair counts, and the query
    pairs of the input's-columns log (module docstring)."""

    m: int
    epsilon: float
    delta: float
    parties: int

    def __post_init__(self) -> None:
        check_int("max-pairs", self.m, minimum=1)
        check_positive("epsilon", self.epsilon)
        check_probability("delta", self.delta)
        check_int("parties", self.parties, minimum=1, maximum=63)
        try:
            self.shares  # noqa: B018 - calibrated (and checked) here
        except InvalidParameterError as exc:
            raise InvalidParameterError(
                "epsilon", self.epsilon, "a budget whose count noise the exact Skellam sampler "
                f"can draw ({exc.allowed})",
            ) from exc  # fmt: skip

    @property
    def contributors(self) -> int:
        """Shares in every total: the r data parties and P0."""
        return self.parties + 1

    @property
    def delta_rdp(self) -> float:
        return self.delta * RDP_DELTA_SHARE

    @property
    def shares(self) -> SkellamShares:
        return calibrate_skellam(self.m, self.epsilon, self.delta_rdp, self.parties)

    @property
    def tau_prime(self) -> int:
        """A slot is published iff its noisy total is > τ'."""
        mu_total = self.shares.total(self.contributors).mu
        return solve_tau_prime(mu_total, self.m, self.delta - self.delta_rdp)

    @property
    def keep_single(self) -> float:
        """π: the probability that an item held by one user is published."""
        return self.shares.total(self.contributors).sf(self.tau_prime)

    def privacy(self) -> tuple[float, float]:
        """(ε, δ): the noisy totals' ε at δ/2, plus to δ the probability that one of a user's
        m items held by nobody else is published."""
        grid = loss_grid(self.epsilon, self.m)  # the calibration's, ten times finer
        eps = skellam_epsilon(self.shares.full_variance, self.delta_rdp, m=self.m, grid=grid)
        reveal = float(-math.expm1(self.m * math.log1p(-self.keep_single)))
        return eps, self.delta_rdp + reveal

    def event(self, step: str, what: str) -> dict[str, Any]:
        """The ledger event of this step (``what``: the items counted)."""
        eps, dl = self.privacy()
        shares = {"parties": self.parties, "contributors": self.contributors}
        return {"step": step, "mechanism": f"zealous (tau = 1 over a public domain of slots) "
                f"over {what}, distributed Skellam noise", "noise": self.shares.describe() | shares,
                "max_items_per_user": self.m, "l1_sensitivity": self.m,
                "l2_sensitivity_squared": self.m, "tau_prime": self.tau_prime,
                "delta_conversion": self.delta_rdp,
                "keep_probability_single_user_pair": self.keep_single,
                "epsilon": eps, "delta": dl}  # fmt: skip

    def describe(self) -> dict[str, Any]:
        return {
            "distribution": "skellam",
            "variance_of_the_full_noise": self.shares.full_variance,
            "variance_of_the_total": self.shares.total(self.contributors).variance,
            "tau_prime": self.tau_prime,
            "epsilon": self.epsilon,
            "delta": self.delta,
        }


@dataclass(frozen=True)
class DistributedE2E:
    """The distributed noise of ``cels run --mode e2e`` for ``parties`` data parties: pair
    counts (``m`` pairs per user, ``eps_counts``, ``delta_counts``) with Skellam shares, then
    either the activity profile (``eps_profile``, the counts log) with Pólya shares, or — with
    ``statistics``, the input's-columns log — every statistic of
    :mod:`searchveil.release.ump.schema` that is a sum over users, each with Pólya shares of
    ``release ump``'s own discrete Laplace (the same scale: the same ε_i), and the query pairs
    with Skellam shares like the pair counts (module docstring; docs/privacy/cels.md §5)."""

    m: int
    eps_counts: float
    delta_counts: float
    eps_profile: float
    parties: int
    statistics: SchemaParams | None = None

    def __post_init__(self) -> None:
        check_positive("epsilon", self.eps_profile)
        # the Pólya scales first: cheap, and a budget too small for them is refused before the
        # Skellam calibrations (whose search is long for a tiny ε)
        if self.statistics is None and not 1.0 / self.eps_profile <= MAX_POLYA_SCALE:
            raise InvalidParameterError(
                "epsilon", self.eps_profile, f"a budget whose activity profile noise scale is "
                f"at most {MAX_POLYA_SCALE:g} (the exact sampler's range)",
            )  # fmt: skip
        for name in self.statistic_names():
            scale = self.statistics.noise(name).scale if self.statistics else 0.0
            if not scale <= MAX_POLYA_SCALE:
                raise InvalidParameterError(
                    "epsilon", self.eps_profile, f"a budget whose {name!r} statistic has a noise "
                    f"scale of at most {MAX_POLYA_SCALE:g} (the exact Pólya sampler's range; it "
                    f"would be {scale:.6g})",
                )  # fmt: skip
        self.pairs  # noqa: B018 - every check of the pair counts
        if self.statistics is not None:
            self.query_pairs  # noqa: B018 - calibrated (and checked) here

    @functools.cached_property
    def pairs(self) -> DistributedCounts:
        """The pair counts."""
        return DistributedCounts(self.m, self.eps_counts, self.delta_counts, self.parties)

    @property
    def contributors(self) -> int:
        """Shares in every total: the r data parties and P0."""
        return self.parties + 1

    @property
    def delta_rdp(self) -> float:
        return self.pairs.delta_rdp

    @property
    def counts(self) -> SkellamShares:
        return self.pairs.shares

    @property
    def profile(self) -> PolyaShares:
        return PolyaShares(1.0 / self.eps_profile, self.parties)

    @property
    def tau_prime(self) -> int:
        """A slot is published iff its noisy total is > τ'."""
        return self.pairs.tau_prime

    @property
    def keep_single(self) -> float:
        """π: the probability that a pair held by one user is published."""
        return self.pairs.keep_single

    def counts_privacy(self) -> tuple[float, float]:
        """(ε, δ) of the pair counts (:meth:`DistributedCounts.privacy`)."""
        return self.pairs.privacy()

    # -- the input's-columns log ---------------------------------------------------------------
    def statistic_names(self) -> list[str]:
        """The discrete Laplace statistics summed jointly (all but the query pairs)."""
        if self.statistics is None:
            return []
        return [n for n in self.statistics.names() if n != "query_pairs"]

    def statistic(self, name: str) -> PolyaShares:
        """The Pólya shares of statistic ``name``: any r of them are ``release ump``'s
        DLap(ℓ1/ε_i) exactly."""
        if self.statistics is None:
            raise InternalError("no statistics in the counts log")
        return _polya(self.statistics.noise(name).scale, self.parties)

    @functools.cached_property
    def query_pairs(self) -> DistributedCounts:
        """ZEALOUS over each user's first m_q distinct query pairs, Skellam shares."""
        st = self.statistics
        if st is None:
            raise InternalError("no query pairs in the counts log")
        return DistributedCounts(st.max_query_pairs, st.eps("query_pairs"), st.delta,
                                 self.parties)  # fmt: skip

    def privacy(self) -> dict[str, Any]:
        """The (ε, δ) of everything written, its split and one event per step."""
        eps_c, dl_c = self.counts_privacy()
        shares = {"parties": self.parties, "contributors": self.contributors}
        events = [self.pairs.event("pair_counts", "each user's first m distinct clicked pairs")]
        split: dict[str, Any] = {"pair_counts": {"epsilon": eps_c, "delta": dl_c}}
        if self.statistics is None:
            eps_h = 1.0 / self.profile.effective_scale
            events.append({"step": "activity_profile", "mechanism": "discrete_laplace_histogram, "
                           "distributed Pólya noise", "noise": self.profile.describe() | shares,
                           "l1_sensitivity": 1, "bins": self.m, "epsilon": eps_h,
                           "delta": 0.0})  # fmt: skip
            split["activity_profile"] = {"epsilon": eps_h, "delta": 0.0}
            split["generation"] = {"epsilon": 0.0, "delta": 0.0, "note": "post-processing"}
        else:
            st = self.statistics
            for name in st.names():
                if name == "query_pairs":
                    e, d = self.query_pairs.privacy()
                    events.append(
                        self.query_pairs.event(
                            "query_pairs", "each user's first m_q distinct consecutive query pairs"
                        )
                    )
                    split[name] = {"epsilon": e, "delta": d}
                    continue
                sh = self.statistic(name)
                e = sh.full.epsilon(st.l1(name))
                events.append({"step": name, "mechanism": "discrete_laplace_histogram, "
                               "distributed Pólya noise", "noise": sh.describe() | shares,
                               "l1_sensitivity": st.l1(name), "epsilon": e,
                               "delta": 0.0})  # fmt: skip
                split[name] = {"epsilon": e, "delta": 0.0}
            split["layout"] = {"epsilon": 0.0, "delta": 0.0, "note": "post-processing"}
        return {"epsilon": sum(v["epsilon"] for v in split.values()),
                "delta": sum(v["delta"] for v in split.values()), "split": split,
                "events": events}  # fmt: skip

    @property
    def eps_rest(self) -> float:
        """The ε the budget gave the second part: the profile, or the statistics."""
        return self.statistics.epsilon if self.statistics is not None else self.eps_profile

    def cost(self) -> PrivacyCost:
        """User-level; one part per step as computed (the Skellam steps' ε a little below their
        share: the variance is searched on a coarser grid), the total the budget asked for —
        what is charged."""
        pr = self.privacy()
        parts = tuple(Part(k, v["epsilon"], v["delta"]) for k, v in pr["split"].items())
        eps = max(pr["epsilon"], self.eps_counts + self.eps_rest)
        dl = self.delta_counts + (self.statistics.delta if self.statistics is not None else 0.0)
        return PrivacyCost(Relation.USER, parts, eps, max(pr["delta"], dl))

    def describe(self) -> dict[str, Any]:
        """The public parameters of the noise (the ledger's ``parameters.noise``)."""
        out: dict[str, Any] = {
            "model": "every party (P0 too) adds one share before each secure sum; any "
            f"{self.parties} of the {self.contributors} shares are the full noise "
            "(docs/privacy/cels.md §5)",
            "pair_counts": self.pairs.describe(),
        }
        if self.statistics is None:
            out["activity_profile"] = {
                "distribution": "discrete_laplace (Pólya shares)",
                "scale": self.profile.scale,
                "epsilon": self.eps_profile,
            }
        else:
            out["statistics"] = {
                "distribution": "discrete_laplace (Pólya shares), the scales of release ump",
                "scales": {n: self.statistic(n).scale for n in self.statistic_names()},
            }
            out["query_pairs"] = self.query_pairs.describe()
        return out


@functools.lru_cache(maxsize=256)
def _polya(scale: float, parties: int) -> PolyaShares:
    return PolyaShares(scale, parties)


@dataclass(frozen=True)
class UnionDummies:
    """The dummy digests that hide the union's overlap structure from P0 (docs/privacy/cels.md
    §5), for ``parties`` = r data parties, ``m`` pairs per user and (``epsilon``, ``delta``) =
    (ε_u, δ_u) against P0.

    P0 joins the r lists of digests, so it sees, for every set S of data parties, how many
    digests exactly the lists of S hold: n_S. The singletons are n_{i} = L − Σ_{S ∋ i, |S| ≥ 2}
    n_S (every list has L entries, the rest being random padding), so the view is a function of
    n_S for the N = 2^r − r − 1 sets of ≥ 2 parties. Each member of such an S adds the same
    z_S dummy digests (keyed by the data parties' key, S and an index: to P0 like any digest),
    so n_S = c_S + z_S, c_S the distinct bounded pairs held by exactly the parties of S.

    *Privacy map.* Removing one user of party i moves each of its ≤ m pairs from its holder set
    S to S − {i} (if no other user of i holds it): ℓ1(c) ≤ 2m, |Δc_S| ≤ m, and at most
    min(N, 2m) of the c_S change. z_S = min(2s, max(0, s + X_S)), X_S ~ DLap(b) i.i.d. with
    b = 2m/ε_u. Where every changed coordinate's z_S and z_S − Δc_S lie in [1, 2s − 1] the
    probability ratio is Π e^{|Δc_S|/b} ≤ e^{ε_u}; elsewhere (z_S ≤ m or z_S ≥ 2s − m for a
    changed S) it is counted in δ: δ_u ≥ min(N, 2m) · 2 P[X ≤ m − s] = min(N, 2m) ·
    2p^{s−m}/(1 + p), p = e^{−1/b}. The shift s is the least integer meeting it. The cap 2s
    bounds every party's dummies by (2^{r−1} − 1)·2s, a public number (:attr:`per_party`)."""

    parties: int
    m: int
    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        check_int("parties", self.parties, minimum=2, maximum=63)
        check_int("max-pairs", self.m, minimum=1)
        check_positive("union-epsilon", self.epsilon)
        check_probability("delta", self.delta)
        DiscreteLaplace.for_epsilon(self.epsilon, 2 * self.m)  # the scale's range, checked
        if self.per_party > MAX_PARTY_DUMMIES:
            raise InvalidParameterError(
                "parties", self.parties, f"fewer data parties: each would add up to "
                f"{self.per_party:,} dummy digests to the union (at most {MAX_PARTY_DUMMIES:,}; "
                "they grow as 2^r)",
            )  # fmt: skip

    @functools.cached_property
    def sets(self) -> tuple[int, ...]:
        """The sets S of ≥ 2 data parties as bit masks (bit k − 1: Pk), ascending."""
        return tuple(s for s in range(1 << self.parties) if s.bit_count() >= 2)

    @property
    def n_sets(self) -> int:
        """N = 2^r − r − 1, the number of :attr:`sets` (without listing them)."""
        return (1 << self.parties) - self.parties - 1

    @property
    def noise(self) -> DiscreteLaplace:
        return DiscreteLaplace.for_epsilon(self.epsilon, 2 * self.m)

    @property
    def p(self) -> float:
        """e^{−1/b} of the scale actually sampled (rounded up)."""
        return math.exp(-1.0 / self.noise.effective_scale)

    @property
    def changed(self) -> int:
        """The most c_S one user changes: min(N, 2m)."""
        return min(self.n_sets, 2 * self.m)

    def outside(self, shift: int) -> float:
        """The δ of ``shift``: min(N, 2m) · 2 P[X ≤ m − shift] (an upper bound, class docstring)."""
        k = shift - self.m
        if k < 0:
            return 1.0
        p = self.p
        return min(1.0, math.exp(math.log(2 * self.changed) + k * math.log(p) - math.log1p(p)))

    @functools.cached_property
    def shift(self) -> int:
        """s: the least integer with :meth:`outside` ≤ δ_u."""
        b, p = self.noise.effective_scale, self.p
        s = self.m + max(0, math.ceil(b * math.log(2 * self.changed / ((1 + p) * self.delta))))
        while self.outside(s) > self.delta:
            s += 1
        while s > self.m and self.outside(s - 1) <= self.delta:
            s -= 1
        return s

    @property
    def cap(self) -> int:
        """The most dummies of one set: 2s."""
        return 2 * self.shift

    @property
    def per_party(self) -> int:
        """The most dummies one party adds: (2^{r−1} − 1) sets contain it, each up to 2s."""
        return ((1 << (self.parties - 1)) - 1) * self.cap

    def sample(self, rng: RandomSource, rows: int = 1) -> npt.NDArray[np.int64]:
        """``rows`` independent draws (one a run) of z_S for every set of :attr:`sets`, in that
        order: min(2s, max(0, s + X_S)); shape (rows, N)."""
        x = self.noise.sample(rows * self.n_sets, rng).reshape(rows, self.n_sets)
        return np.clip(self.shift + x, 0, self.cap).astype(np.int64)

    def privacy(self) -> tuple[float, float]:
        """(ε, δ) of P0's view of the union: 2m / b (the scale sampled) and :meth:`outside`."""
        return 2 * self.m / self.noise.effective_scale, self.outside(self.shift)

    def part(self) -> Part:
        eps, dl = self.privacy()
        return Part("union_view_p0", eps, dl)

    def describe(self) -> dict[str, Any]:
        """The public parameters of the dummies (the ledger's ``parameters.union``)."""
        eps, dl = self.privacy()
        return {
            "what": "dummy digests: every member of each set S of >= 2 data parties adds the "
            "same z_S = min(2s, max(0, s + X_S)), X_S ~ DLap(scale), drawn from the data "
            "parties' shared key (docs/privacy/cels.md §5)",
            "sets": self.n_sets,
            "scale": self.noise.scale,
            "effective_scale": self.noise.effective_scale,
            "shift": self.shift,
            "cap": self.cap,
            "max_dummies_per_party": self.per_party,
            "l1_sensitivity": 2 * self.m,
            "epsilon": eps,
            "delta": dl,
        }
