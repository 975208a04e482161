"""Per-user contribution bounding — the one place where sensitivities come from.

Korolova's Limit-User-Activity (thesis ch.4, Algorithm 3) keeps the *first* d queries and the
first d_c clicks of each user; ZEALOUS (Götz §4) keeps m *distinct* items per user chosen
independently of the data's values. Both are :func:`bound_contributions` with different
options. ``strategy="random"`` keeps a uniformly random subset of size ``max_per_user`` drawn
with the injected ``rng`` (a random 64-bit key per row, then the smallest keys per user).

:class:`Sensitivities` derives the ℓ0/ℓ∞/ℓ1/ℓ2 sensitivities of the per-item count vector from
the bounds, so no release module re-derives them ad hoc.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.rng import RandomSource
from searchveil.validate import check_int, parse_choice

__all__ = ["BoundingStrategy", "bound_contributions", "Sensitivities"]


class BoundingStrategy(StrEnum):
    """Which of a user's rows :func:`bound_contributions` keeps: the first ones (by the
    order column) or a uniformly random subset."""

    FIRST = "first"
    RANDOM = "random"


@dataclass(frozen=True)
class Sensitivities:
    """Sensitivities of a vector of per-item counts when one user is added or removed.

    ``l0``: number of items one user can touch; ``linf``: the most one user adds to one item.
    """

    l0: int
    linf: int

    def __post_init__(self) -> None:
        check_int("l0", self.l0, minimum=1)
        check_int("linf", self.linf, minimum=1)
        if self.linf > self.l0 * 10**12:  # pragma: no cover - sanity
            raise InvalidParameterError("linf", self.linf, "<= l0 * 1e12")

    @classmethod
    def from_bounds(cls, *, max_per_user: int, distinct: bool) -> Sensitivities:
        """``max_per_user`` kept items; with ``distinct`` each item counts at most once."""
        d = check_int("max_per_user", max_per_user, minimum=1)
        return cls(l0=d, linf=1 if distinct else d)

    @property
    def l1(self) -> int:
        """A user adds at most ``max_per_user`` in total: ℓ1 = max over splits = l0 (distinct)
        or d (occurrences, all on one item or spread)."""
        return self.l0 if self.linf == 1 else self.linf

    @property
    def l2(self) -> float:
        """ℓ2 ≤ sqrt(l0)·linf for distinct items; for occurrences the worst case puts all d on
        one item, ℓ2 = d."""
        if self.linf == 1:
            return math.sqrt(self.l0)
        return float(self.linf)


def bound_contributions(
    df: pl.DataFrame,
    *,
    max_per_user: int,
    strategy: BoundingStrategy | str = BoundingStrategy.FIRST,
    rng: RandomSource | None = None,
    distinct: bool = False,
    user_col: str = "user",
    order_col: str = "pos",
    item_col: str = "item",
) -> pl.DataFrame:
    """Keep at most ``max_per_user`` rows per user (see module docstring).

    With ``distinct=True`` repeated (user, item) rows are first reduced to the user's first
    occurrence, so the kept rows are distinct items. Never adds or alters a row.
    """
    d = check_int("max_per_user", max_per_user, minimum=1)
    strategy = parse_choice("strategy", strategy, BoundingStrategy)
    for col in (user_col, order_col) + ((item_col,) if distinct else ()):
        if col not in df.columns:
            raise InvalidParameterError("column", col, f"one of the frame's columns {df.columns}")
    out = df.sort([user_col, order_col], maintain_order=True)
    if distinct:
        out = out.unique(subset=[user_col, item_col], keep="first", maintain_order=True)
    if strategy == "first":
        return out.filter(pl.int_range(pl.len()).over(user_col) < d)
    if rng is None:
        raise InvalidParameterError("rng", None, "a RandomSource when strategy='random'")
    keys = pl.Series("_key", rng.random_keys(out.height))
    return (
        out.with_columns(keys)
        .filter(pl.col("_key").rank("ordinal").over(user_col) <= d)
        .drop("_key")
    )
