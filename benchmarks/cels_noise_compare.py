"""The noise of CELS' pair counts: central vs distributed (issue 41 item 1), at the same (ε, δ).

For the pair-count step of the e2e mode (m pairs per user, ε_c = 0.9 ε, δ_c = δ): the noise
variance a reader of the output faces and the publication threshold τ', for

* central: ZEALOUS with DLap(m/ε_c) as ``release ump`` runs it (τ' from Götz Theorem 2) and
  with τ' solved exactly for the discrete tail (what the distributed version does);
* Pólya shares (what ``cels run`` runs): every party, P0 too, adds NB(1/r, p) − NB(1/r, p), any
  r of the r + 1 shares = DLap(m/ε_c); and the variant without P0's share (1/(r − 1));
* Skellam shares (Agarwal, Kairouz, Liu 2021): every party adds Sk of variance σ²/r, any r
  shares have variance σ²; σ² the least meeting ε_c through the Rényi bound of their
  Corollary 3.6 (ℓ1 = m, ℓ2 = √m) converted to (ε, δ₁) (Balle et al. 2020), τ' the least meeting
  δ₂ = δ_c − δ₁ with the tail of the r + 1 shares (δ₁ = δ₂ = δ_c/2).

``PYTHONPATH=src python benchmarks/cels_noise_compare.py`` prints the table of
docs/privacy/cels.md §5.
"""

from __future__ import annotations

import math

from scipy import stats

from searchveil.cels.distributed import solve_tau_prime
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.polya import PolyaShares
from searchveil.release.ump.e2e import E2EParams

ALPHAS = [*range(2, 64), *range(64, 1025, 8)]


def skellam_epsilon(m: int, var: float, delta: float) -> float:
    """(ε, δ) of a Skellam of variance ``var`` per coordinate on a vector of ℓ1 = m, ℓ2² = m
    (AKL21 Cor. 3.6, integer orders; the conversion of Balle et al. 2020)."""
    best = math.inf
    for a in ALPHAS:
        rdp = a * m / (2 * var) + min(((2 * a - 1) * m + 6 * m) / (4 * var**2), 3 * m / (2 * var))
        eps = rdp + math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1)
        best = min(best, eps)
    return best


def skellam(m: int, eps: float, delta: float, r: int) -> tuple[float, int]:
    lo, hi = 1e-3, 1e7
    for _ in range(200):  # the least variance meeting ε at δ/2
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if skellam_epsilon(m, mid, delta / 2) <= eps else (mid, hi)
    var_total = hi * (r + 1) / r
    law = stats.skellam(var_total / 2, var_total / 2)
    t = 1
    while 1 - (1 - law.sf(t - 1)) ** m > delta / 2:
        t += 1
    return var_total, t


def main() -> None:
    for eps, delta in ((math.log(10), 1e-6), (1.0, 1e-7)):
        ep = E2EParams.from_budget(epsilon=eps, delta=delta, pairs="zealous")
        m, ec = ep.max_pairs, ep.eps_counts
        lam = m / ec
        central = DiscreteLaplace(lam)
        print(f"\nε = {eps:.4g}, δ = {delta:g}: m = {m}, ε_c = {ec:.4g}, λ = {lam:.4g}")
        print("| noise | parties | variance (reader) | × central | τ' |")
        print("|---|---|---|---|---|")
        v0 = central.variance
        print(f"| central DLap, τ' of Theorem 2 (release ump) | — | {v0:.0f} | 1.00 | "
              f"{ep.zealous().tau_prime:.0f} |")  # fmt: skip
        print(f"| central DLap, exact τ' | — | {v0:.0f} | 1.00 | "
              f"{solve_tau_prime(lam, 1, 1, m, delta)} |")  # fmt: skip
        for r in (3, 5):
            for name, shares, contrib in (("Pólya, P0 adds a share (run)", r, r + 1),
                                          ("Pólya, data parties only", r - 1, r)):  # fmt: skip
                v = PolyaShares(lam, shares).total(contrib).variance
                t = solve_tau_prime(lam, shares, contrib, m, delta)
                print(f"| {name} | {r} | {v:.0f} | {v / v0:.2f} | {t} |")
            v, t = skellam(m, ec, delta, r)
            print(f"| Skellam (RDP, AKL21), P0 adds a share | {r} | {v:.0f} | {v / v0:.2f} | {t} |")


if __name__ == "__main__":
    main()
