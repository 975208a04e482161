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
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.budget import Part, PrivacyCost, Relation
from searchveil.mechanisms.shares import (
    MAX_POLYA_SCALE,
    PolyaShares,
    SkellamLaw,
    SkellamShares,
    loss_grid,
    skellam_delta,
    skellam_epsilon,
)
from searchveil.validate import check_int, check_positive, check_probability

__all__ = ["DistributedE2E", "calibrate_skellam", "solve_tau_prime"]

#: the share of δ_c for the noisy counts themselves (the rest: a single-user pair published)
RDP_DELTA_SHARE = 0.5


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
class DistributedE2E:
    """The distributed noise of ``cels run --mode e2e`` for ``parties`` data parties: pair
    counts (``m`` pairs per user, ``eps_counts``, ``delta_counts``) with Skellam shares and the
    activity profile (``eps_profile``) with Pólya shares (module docstring)."""

    m: int
    eps_counts: float
    delta_counts: float
    eps_profile: float
    parties: int

    def __post_init__(self) -> None:
        check_int("max-pairs", self.m, minimum=1)
        check_positive("epsilon", self.eps_counts)
        check_probability("delta", self.delta_counts)
        check_positive("epsilon", self.eps_profile)
        check_int("parties", self.parties, minimum=1, maximum=63)
        if not 1.0 / self.eps_profile <= MAX_POLYA_SCALE:
            raise InvalidParameterError(
                "epsilon", self.eps_profile, f"a budget whose activity profile noise scale is "
                f"at most {MAX_POLYA_SCALE:g} (the exact sampler's range)",
            )  # fmt: skip
        try:
            self.counts  # noqa: B018 - calibrated (and checked) here
        except InvalidParameterError as exc:
            raise InvalidParameterError(
                "epsilon",
                self.eps_counts,
                "a budget whose pair-count noise the exact Skellam "
                f"sampler can draw ({exc.allowed})",
            ) from exc

    @property
    def contributors(self) -> int:
        """Shares in every total: the r data parties and P0."""
        return self.parties + 1

    @property
    def delta_rdp(self) -> float:
        return self.delta_counts * RDP_DELTA_SHARE

    @property
    def counts(self) -> SkellamShares:
        return calibrate_skellam(self.m, self.eps_counts, self.delta_rdp, self.parties)

    @property
    def profile(self) -> PolyaShares:
        return PolyaShares(1.0 / self.eps_profile, self.parties)

    @property
    def tau_prime(self) -> int:
        """A slot is published iff its noisy total is > τ'."""
        mu_total = self.counts.total(self.contributors).mu
        return solve_tau_prime(mu_total, self.m, self.delta_counts - self.delta_rdp)

    @property
    def keep_single(self) -> float:
        """π: the probability that a pair held by one user is published."""
        return self.counts.total(self.contributors).sf(self.tau_prime)

    def counts_privacy(self) -> tuple[float, float]:
        """(ε, δ) of the pair counts: the noisy totals' ε at δ_c/2, plus to δ the probability
        that one of a user's m pairs held by nobody else is published."""
        grid = loss_grid(self.eps_counts, self.m)  # the calibration's, ten times finer
        eps = skellam_epsilon(self.counts.full_variance, self.delta_rdp, m=self.m, grid=grid)
        reveal = float(-math.expm1(self.m * math.log1p(-self.keep_single)))
        return eps, self.delta_rdp + reveal

    def privacy(self) -> dict[str, Any]:
        """The (ε, δ) of everything written, its split and one event per step."""
        eps_c, dl_c = self.counts_privacy()
        eps_h = 1.0 / self.profile.effective_scale
        shares = {"parties": self.parties, "contributors": self.contributors}
        events = [
            {"step": "pair_counts", "mechanism": "zealous (tau = 1 over a public domain of "
             "slots), distributed Skellam noise", "noise": self.counts.describe() | shares,
             "max_items_per_user": self.m, "l1_sensitivity": self.m, "l2_sensitivity_squared":
             self.m, "tau_prime": self.tau_prime, "delta_conversion": self.delta_rdp,
             "keep_probability_single_user_pair": self.keep_single,
             "epsilon": eps_c, "delta": dl_c},
            {"step": "activity_profile", "mechanism": "discrete_laplace_histogram, distributed "
             "Pólya noise", "noise": self.profile.describe() | shares, "l1_sensitivity": 1,
             "bins": self.m, "epsilon": eps_h, "delta": 0.0},
        ]  # fmt: skip
        split = {
            "pair_counts": {"epsilon": eps_c, "delta": dl_c},
            "activity_profile": {"epsilon": eps_h, "delta": 0.0},
            "generation": {"epsilon": 0.0, "delta": 0.0, "note": "post-processing"},
        }
        return {"epsilon": eps_c + eps_h, "delta": dl_c, "split": split, "events": events}

    def cost(self) -> PrivacyCost:
        """User-level; one part per step as computed (the pair counts' ε a little below ε_c:
        the variance is searched on a coarser grid), the total the budget asked for
        (ε_c + ε_h, δ_c) — what is charged."""
        pr = self.privacy()
        parts = tuple(Part(k, v["epsilon"], v["delta"]) for k, v in pr["split"].items())
        eps = max(pr["epsilon"], self.eps_counts + self.eps_profile)
        return PrivacyCost(Relation.USER, parts, eps, max(pr["delta"], self.delta_counts))

    def describe(self) -> dict[str, Any]:
        """The public parameters of the noise (the ledger's ``parameters.noise``)."""
        return {
            "model": "every party (P0 too) adds one share before each secure sum; any "
            f"{self.parties} of the {self.contributors} shares are the full noise "
            "(docs/privacy/cels.md §5)",
            "pair_counts": {
                "distribution": "skellam",
                "variance_of_the_full_noise": self.counts.full_variance,
                "variance_of_the_total": self.counts.total(self.contributors).variance,
                "tau_prime": self.tau_prime,
                "epsilon": self.eps_counts,
                "delta": self.delta_counts,
            },  # fmt: skip
            "activity_profile": {
                "distribution": "discrete_laplace (Pólya shares)",
                "scale": self.profile.scale,
                "epsilon": self.eps_profile,
            },
        }
