"""The noise of CELS' pair counts: central vs distributed (issue 41 item 1), at the same (ε, δ).

For the pair-count step of the e2e mode (m pairs per user, ε_c = 0.9 ε, δ_c = δ): the variance
of the noise a reader of the output faces and the publication threshold τ', for

* central: ZEALOUS with DLap(m/ε_c) as ``release ump`` runs it (τ' from Götz Theorem 2) and with
  τ' solved exactly for the discrete tail;
* Pólya shares: every party, P0 too, adds NB(1/r, p) − NB(1/r, p), any r of the r + 1 shares =
  DLap(m/ε_c); and the variant without P0's share (1/(r − 1));
* Skellam shares (what ``cels run`` runs): every party, P0 too, adds Sk of variance σ²/r, any r
  shares have variance σ²; σ² the least meeting (ε_c, δ_c/2) on m coordinates moved by 1 — by
  the exact privacy loss (:func:`searchveil.mechanisms.shares.skellam_delta`, as run), and by the
  Rényi bound of Agarwal, Kairouz, Liu 2021 converted by Canonne, Kamath, Steinke 2020 Prop. 12
  (for comparison); τ' the least meeting δ_c/2 with the tail of the r + 1 shares.

``PYTHONPATH=src python benchmarks/cels_noise_compare.py`` prints the tables of
docs/privacy/cels.md §5.
"""

from __future__ import annotations

import math

from searchveil.cels.distributed import DistributedE2E, solve_tau_prime
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.shares import PolyaShares, skellam_rdp_epsilon
from searchveil.release.ump.e2e import E2EParams


def skellam_renyi(m: int, eps: float, delta: float, r: int) -> tuple[float, int]:
    """(variance of the r + 1 shares, τ') with the Rényi accounting."""
    lo, hi = 1e-3, 1e7
    for _ in range(200):  # the least variance meeting ε at δ/2
        mid = math.sqrt(lo * hi)
        ok = skellam_rdp_epsilon(mid, delta / 2, l1=m, l2sq=m) <= eps
        lo, hi = (lo, mid) if ok else (mid, hi)
    var_total = hi * (r + 1) / r
    return var_total, solve_tau_prime(var_total / 2, m, delta / 2)


def polya_tau(lam: float, shares: int, contrib: int, m: int, delta: float) -> int:
    """The least τ' with 1 − (1 − P[T >= τ'])^m <= δ, T the sum of ``contrib`` shares."""
    law = PolyaShares(lam, shares).total(contrib)

    def ok(t: int) -> bool:
        return 1 - (1 - law.sf(t)) ** m <= delta

    lo, hi = 1, max(2, int(lam))
    while not ok(hi):
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid + 1, hi)
    return lo


def main() -> None:
    for eps, delta in ((math.log(10), 1e-6), (1.0, 1e-7)):
        ep = E2EParams.from_budget(epsilon=eps, delta=delta, pairs="zealous")
        m, ec = ep.max_pairs, ep.eps_counts
        lam = m / ec
        v0 = DiscreteLaplace(lam).variance
        print(f"\nε = {eps:.4g}, δ = {delta:g}: m = {m}, ε_c = {ec:.4g}, λ = {lam:.4g}")
        print("| noise | parties | variance (reader) | × central | τ' |")
        print("|---|---|---|---|---|")
        print(f"| central DLap, τ' of Theorem 2 (release ump) | — | {v0:.0f} | 1.00 | "
              f"{ep.zealous().tau_prime:.0f} |")  # fmt: skip
        print(f"| central DLap, exact τ' | — | {v0:.0f} | 1.00 | "
              f"{polya_tau(lam, 1, 1, m, delta)} |")  # fmt: skip
        for r in (3, 5):
            for name, shares, contrib in (("Pólya, P0 adds a share", r, r + 1),
                                          ("Pólya, data parties only", r - 1, r)):  # fmt: skip
                v = PolyaShares(lam, shares).total(contrib).variance
                t = polya_tau(lam, shares, contrib, m, delta)
                print(f"| {name} | {r} | {v:.0f} | {v / v0:.2f} | {t} |")
            v, t = skellam_renyi(m, ec, delta, r)
            print(f"| Skellam, Rényi accounting | {r} | {v:.0f} | {v / v0:.2f} | {t} |")
            d = DistributedE2E(m=m, eps_counts=ec, delta_counts=delta, eps_profile=eps - ec,
                               parties=r)  # fmt: skip
            v = d.counts.total(d.contributors).variance
            print(f"| **Skellam, exact privacy loss (cels run)** | {r} | {v:.0f} | "
                  f"{v / v0:.2f} | {d.tau_prime} |")  # fmt: skip


if __name__ == "__main__":
    main()
