"""Utility and risk measures of Fouad et al. TKDE 2014 §II-A and §IV-A.

* Utility ``u(x) = Σ_i d_i(x_i)`` with ``d_i`` one of (§II-A, citing ARUBA [13] eq. 5/6, and the
  depth variant of §IV-A): ``inverse`` ``1/n_i(x_i)``, ``log`` ``ln(n_i(⊥)/n_i(x_i))`` and
  ``depth`` ``h_i − level(x_i)`` (distance from the root ``⊥``), where ``n_i(x)`` is the number
  of leaves under node ``x``.
* Risk ``r^a(x) = Φ^a(x)/|ρ(x, Θ)|`` with the modular ``Φ^a(x) = Σ_i w_i(x_i)``; the
  sensitivity weights ``w_i`` follow §IV-A: leaves carry a weight (``leaf_weight``, 1 by
  default), an inner node with children ``c_1..c_l`` gets the "modified harmonic mean"
  ``w_p = 1/Σ_j (1/w_{c_j})`` and the root (suppression) gets 0.
* The aggregate objective (eq. 2) ``f^a(x) = λ/r^a(x) + u(x)^κ``.

Decisions (documented in docs/tabular.md):
1. With root weight 0, ``Φ^a(⊥) = 0`` and eq. (2) is infinite at ``⊥`` (full suppression would
   always be optimal). We use ``Φ̃ = Φ + φ₀`` in ``f`` with a *risk floor* ``φ₀ > 0`` (default:
   the smallest positive node weight of any hierarchy); adding a constant keeps ``Φ̃`` modular,
   so Prop. 2/Cor. 1 still apply. The threshold model's risk ``r`` uses the paper's ``Φ``.
2. ``f`` is written ``λ·(|ρ|/|Θ|)/Φ̃ + u^κ``: the paper's λ equals ours divided by ``|Θ|``, which
   makes one λ meaningful across table sizes (and gives the DP sampler a public normaliser).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
import numpy.typing as npt

from searchveil.errors import InvalidParameterError
from searchveil.tabular.hierarchy import Hierarchy
from searchveil.validate import check_int, check_nonnegative, check_positive, parse_choice

__all__ = [
    "Measures",
    "UtilityKind",
    "utility_table",
    "sensitivity_table",
    "make_measures",
]


class UtilityKind(StrEnum):
    """The utility ``d_i`` of a generalization level (§IV-A)."""

    DEPTH = "depth"
    INVERSE = "inverse"
    LOG = "log"


def utility_table(h: Hierarchy, kind: UtilityKind | str) -> npt.NDArray[np.float64]:
    """``d_i`` per leaf and level, ``(n_leaves, h+1)``."""
    kind = parse_choice("utility", kind, UtilityKind)
    n = h.leaf_counts().astype(np.float64)
    if kind == "inverse":
        return 1.0 / n
    if kind == "log":
        return np.log(n[:, -1:] / n)
    depth = h.height - np.arange(h.height + 1, dtype=np.float64)
    return np.broadcast_to(depth, n.shape).copy()


def sensitivity_table(h: Hierarchy, leaf_weight: float = 1.0) -> npt.NDArray[np.float64]:
    """``w_i`` per leaf and level by the modified harmonic mean of §IV-A (root weight 0)."""
    check_positive("leaf_weight", leaf_weight)
    out = np.empty(h.codes.shape, dtype=np.float64)
    node_w = np.full(len(h.labels[0]), float(leaf_weight))
    out[:, 0] = node_w[h.codes[:, 0]]
    for lvl in range(1, h.height + 1):
        child = h.codes[:, lvl - 1].astype(np.int64)
        parent = h.codes[:, lvl].astype(np.int64)
        pairs = np.unique(np.stack([parent, child], axis=1), axis=0)  # distinct children
        inv_sum = np.bincount(
            pairs[:, 0], weights=1.0 / node_w[pairs[:, 1]], minlength=len(h.labels[lvl])
        )
        node_w = 1.0 / inv_sum
        out[:, lvl] = node_w[parent]
    out[:, h.height] = 0.0  # the root: suppressed data carries no sensitivity
    return out


@dataclass(frozen=True)
class Measures:
    """Per-attribute tables ``d[i]`` (utility) and ``w[i]`` (sensitivity), ``(n_leaves, h+1)``,
    and the parameters of eq. (2)."""

    d: tuple[npt.NDArray[np.float64], ...]
    w: tuple[npt.NDArray[np.float64], ...]
    lam: float
    kappa: int
    phi0: float
    utility: UtilityKind

    def per_record(
        self, leaves: npt.NDArray[np.int32]
    ) -> tuple[list[npt.NDArray[np.float64]], list[npt.NDArray[np.float64]]]:
        """``(D_i, W_i)``: for each attribute, ``(m, h_i+1)`` utility/weight by record and level."""
        return (
            [t[leaves[:, i]] for i, t in enumerate(self.d)],
            [t[leaves[:, i]] for i, t in enumerate(self.w)],
        )

    def u_max(self) -> float:
        return float(sum(t.max() for t in self.d))

    def f(
        self,
        rho: npt.NDArray[np.float64],
        theta_size: float,
        u: npt.NDArray[np.float64],
        phi: npt.NDArray[np.float64],
    ) -> npt.NDArray[np.float64]:
        """Eq. (2): ``λ (|ρ|/|Θ|)/(Φ + φ₀) + u^κ``."""
        out = phi + self.phi0
        np.divide(rho, out, out=out)
        out *= self.lam / theta_size
        out += self.u_power(u)
        return out

    def u_power(self, u: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """``u^κ`` by repeated multiplication (κ is a small integer)."""
        if self.kappa == 1:
            return u
        out = u.copy()
        for _ in range(self.kappa - 1):
            out *= u
        return out


def make_measures(
    hierarchies: list[Hierarchy] | tuple[Hierarchy, ...],
    *,
    utility: UtilityKind | str = UtilityKind.DEPTH,
    lam: float = 1.0,
    kappa: int = 1,
    phi0: float | None = None,
    leaf_weights: list[float] | None = None,
) -> Measures:
    utility = parse_choice("utility", utility, UtilityKind)
    lam = check_nonnegative("lam", lam)
    kappa = check_int("kappa", kappa, minimum=1, maximum=16)
    lw = leaf_weights or [1.0] * len(hierarchies)
    if len(lw) != len(hierarchies):
        raise InvalidParameterError("leaf_weights", lw, f"{len(hierarchies)} positive numbers")
    d = tuple(utility_table(h, utility) for h in hierarchies)
    w = tuple(sensitivity_table(h, x) for h, x in zip(hierarchies, lw, strict=True))
    if phi0 is None:
        pos = [float(t[t > 0].min()) for t in w if (t > 0).any()]
        phi0 = min(pos) if pos else 1.0
    phi0 = check_positive("phi0", phi0)
    return Measures(d, w, lam, kappa, phi0, utility)
