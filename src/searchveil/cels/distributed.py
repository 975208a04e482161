"""CELS e2e: the noise shared out among the parties, and its privacy map
(docs/privacy/cels.md §5).

Every party — the r data parties and P0 — adds one Pólya share of the noise
(:class:`~searchveil.mechanisms.polya.PolyaShares`, sized 1/r) to its term of each secure sum
before the sum, so the sum reveals only noisy totals, to P1 as to everyone. The shares are
sized so that **any r of the r + 1 shares sum to the full discrete Laplace noise**: a party that
subtracts its own share from what it learns still faces DLap(λ). The total a reader of the
output sees carries r + 1 shares: a Pólya difference NB((r+1)/r, p) − NB((r+1)/r, p), variance
(r + 1)/r that of DLap(λ).

Two sums are noised this way:

* **pair counts** (ZEALOUS with τ = 1 over a public domain of slots): each user holds at most m
  pairs, λ = m/ε_c; a slot is published iff its noisy total exceeds τ', the least integer with
  1 − (1 − π)^m ≤ δ_c, π = P[T >= τ'] for T the total noise (a pair held by one user published).
  ε_c = m·max(1/λ, −ln(1 − π)) as ZEALOUS's exact map (:func:`~searchveil.release.zealous.
  accounting.zealous_exact_privacy`), here with the tail of the noise actually added;
* **activity profile** (m bins, ℓ1 sensitivity 1): λ_h = 1/ε_h, pure ε_h.

Against a party knowing its own share z: the rest of the noise is DLap(λ) (any r shares), so
the noisy values are ε-DP as above; the δ of a published single-user pair is, averaged over z,
E_z[1 − (1 − π(z))^m] ≤ 1 − (1 − E_z π(z))^m = δ (Jensen; E_z π(z) = π), the same δ.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.budget import Part, PrivacyCost, Relation
from searchveil.mechanisms.polya import MAX_POLYA_SCALE, PolyaShares
from searchveil.validate import check_int, check_positive, check_probability

__all__ = ["DistributedE2E", "solve_tau_prime"]


@functools.lru_cache(maxsize=128)
def solve_tau_prime(scale: float, shares: int, contributors: int, m: int, delta: float) -> int:
    """The least integer τ' >= 1 with 1 − (1 − P[T >= τ'])^m <= δ and m·(−ln(1 − P[T >= τ']))
    <= m/λ_eff, T the sum of ``contributors`` Pólya shares of DLap(``scale``)."""
    sh = PolyaShares(scale, shares)
    total = sh.total(contributors)
    lam = sh.effective_scale

    def ok(t: int) -> bool:
        pi = total.sf(t)
        return -math.expm1(m * math.log1p(-pi)) <= delta and -math.log1p(-pi) <= 1.0 / lam

    hi = max(1, int(lam))
    while not ok(hi):
        hi *= 2
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class DistributedE2E:
    """The distributed noise of ``cels run --mode e2e`` for ``parties`` data parties: pair
    counts (``m`` pairs per user, ``eps_counts``, ``delta_counts``) and the activity profile
    (``eps_profile``), each a Pólya-shared discrete Laplace (module docstring)."""

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
        for what, scale in (("pair counts", self.m / self.eps_counts),
                            ("activity profile", 1.0 / self.eps_profile)):  # fmt: skip
            if not scale <= MAX_POLYA_SCALE:
                raise InvalidParameterError(
                    "epsilon", self.eps_counts if what == "pair counts" else self.eps_profile,
                    f"a budget whose {what} noise scale is at most {MAX_POLYA_SCALE:g} (the "
                    f"distributed noise's exact sampler; it would be {scale:.4g})",
                )  # fmt: skip

    @property
    def contributors(self) -> int:
        """Shares in every total: the r data parties and P0."""
        return self.parties + 1

    @property
    def counts(self) -> PolyaShares:
        return PolyaShares(self.m / self.eps_counts, self.parties)

    @property
    def profile(self) -> PolyaShares:
        return PolyaShares(1.0 / self.eps_profile, self.parties)

    @property
    def tau_prime(self) -> int:
        """A slot is published iff its noisy total is > τ'."""
        return solve_tau_prime(
            self.counts.scale, self.parties, self.contributors, self.m, self.delta_counts
        )

    @property
    def keep_single(self) -> float:
        """π: the probability that a pair held by one user is published."""
        return self.counts.total(self.contributors).sf(self.tau_prime)

    def counts_privacy(self) -> tuple[float, float]:
        pi = self.keep_single
        lam = self.counts.effective_scale
        eps = self.m * max(1.0 / lam, -math.log1p(-pi))
        return eps, float(-math.expm1(self.m * math.log1p(-pi)))

    def privacy(self) -> dict[str, Any]:
        """The (ε, δ) of everything written, its split and one event per step."""
        eps_c, dl_c = self.counts_privacy()
        eps_h = 1.0 / self.profile.effective_scale
        shares = {"parties": self.parties, "contributors": self.contributors,
                  "shares_for_the_full_noise": self.parties}  # fmt: skip
        events = [
            {"step": "pair_counts", "mechanism": "zealous (tau = 1 over a public domain of "
             "slots), distributed noise", "noise": self.counts.describe() | shares,
             "max_items_per_user": self.m, "tau_prime": self.tau_prime,
             "keep_probability_single_user_pair": self.keep_single,
             "epsilon": eps_c, "delta": dl_c},
            {"step": "activity_profile", "mechanism": "discrete_laplace_histogram, distributed "
             "noise", "noise": self.profile.describe() | shares, "l1_sensitivity": 1,
             "bins": self.m, "epsilon": eps_h, "delta": 0.0},
        ]  # fmt: skip
        split = {
            "pair_counts": {"epsilon": eps_c, "delta": dl_c},
            "activity_profile": {"epsilon": eps_h, "delta": 0.0},
            "generation": {"epsilon": 0.0, "delta": 0.0, "note": "post-processing"},
        }
        return {"epsilon": eps_c + eps_h, "delta": dl_c, "split": split, "events": events}

    def cost(self) -> PrivacyCost:
        pr = self.privacy()
        parts = tuple(Part(k, v["epsilon"], v["delta"]) for k, v in pr["split"].items())
        return PrivacyCost(Relation.USER, parts, pr["epsilon"], pr["delta"])

    def describe(self) -> dict[str, Any]:
        """The public parameters of the noise (the ledger's ``parameters.noise``)."""
        total = self.counts.total(self.contributors)
        return {
            "model": "every party (P0 too) adds one Pólya share before each secure sum; any "
            f"{self.parties} of the {self.contributors} shares sum to the full discrete "
            "Laplace (docs/privacy/cels.md §5)",
            "pair_counts": {
                "scale": self.counts.scale,
                "tau_prime": self.tau_prime,
                "epsilon": self.eps_counts,
                "delta": self.delta_counts,
                "total_variance": total.variance,
            },  # fmt: skip
            "activity_profile": {"scale": self.profile.scale, "epsilon": self.eps_profile},
        }
