"""Query releases with a modern selection strategy (``release korolova --selection ...``).

Release-Data's structure (Korolova thesis ch.4, Algorithm 3) with the Select-Queries step
replaced by one of :mod:`searchveil.mechanisms.selection` — Laplace thresholding on distinct-user
counts, Gaussian thresholding, or policy Gaussian set union — followed by Get-Query-Counts:
every selected query's distinct-user count plus fresh discrete Laplace noise of scale d/ε₂.

Privacy unit: a user's whole log; each user contributes their first d *distinct* queries (a
data-independent rule). Selection is (ε₁, δ)-DP (the strategy's own analysis), the counts are
ε₂-DP (ℓ1 sensitivity d of the distinct-user counts), so the release is (ε₁ + ε₂, δ)-DP by basic
composition. ``split`` gives the relative weights of ε₁ and ε₂ (default equal). Click counts
are not part of this path (use the default Korolova path for the query-click graph).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import build_ledger
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.selection import STRATEGIES, make_strategy, user_item_sets
from searchveil.model import SearchLog, items
from searchveil.release.histogram import HistogramRelease
from searchveil.rng import RandomSource
from searchveil.validate import check_choice, check_int, check_positive, check_probability

MECHANISM = "query-release-selection"


@dataclass(frozen=True)
class SelectParams:
    strategy: str
    epsilon: float
    delta: float
    d: int
    split: tuple[float, float] = (1.0, 1.0)
    clamp_negative: bool = False

    def __post_init__(self) -> None:
        check_choice("selection", self.strategy, STRATEGIES)
        check_positive("epsilon", self.epsilon)
        check_probability("delta", self.delta)
        check_int("d", self.d, minimum=1)
        if len(self.split) != 2 or any(not (w > 0) for w in self.split):
            raise InvalidParameterError(
                "split", self.split, "2 positive weights (selection, counts)"
            )

    @property
    def eps_selection(self) -> float:
        return self.epsilon * self.split[0] / sum(self.split)

    @property
    def eps_counts(self) -> float:
        return self.epsilon * self.split[1] / sum(self.split)

    def to_dict(self) -> dict[str, Any]:
        return {
            "selection": self.strategy,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "d": self.d,
            "split": list(self.split),
            "epsilon_selection": self.eps_selection,
            "epsilon_counts": self.eps_counts,
            "count_noise_scale": self.d / self.eps_counts,
            "clamp_negative": self.clamp_negative,
        }


def release_select(log: SearchLog, params: SelectParams, *, rng: RandomSource) -> HistogramRelease:
    strat = make_strategy(params.strategy, epsilon=params.eps_selection, delta=params.delta,
                          d=params.d)  # fmt: skip
    q = items(log, "queries")
    sets = user_item_sets(q, d=params.d)
    selected = strat.select(sets, rng=rng)
    lap = DiscreteLaplace(params.d / params.eps_counts)
    noisy = selected.get_column("count").to_numpy() + lap.sample(selected.height, rng)
    queries = selected.select(pl.col("item").alias("query")).with_columns(
        noisy_count=pl.Series(noisy, dtype=pl.Int64)
    )
    if params.clamp_negative:
        queries = queries.with_columns(pl.col("noisy_count").clip(lower_bound=0))
    queries = queries.sort(["noisy_count", "query"], descending=[True, False])
    sel_priv = strat.describe()
    eps = float(sel_priv["epsilon"]) + params.eps_counts
    delta = float(sel_priv["delta"])
    total_volume = q.height
    released_volume = int(
        q.join(queries.select(pl.col("query").alias("item")), on="item", how="semi").height
    )
    report: dict[str, Any] = {
        "mechanism": MECHANISM,
        "users": log.n_users,
        "query_events": total_volume,
        "distinct_queries": int(q.get_column("item").n_unique()),
        "items_after_bounding": sets.height,
        "queries_released": queries.height,
        "released_query_volume": released_volume,
        "released_volume_share": released_volume / total_volume if total_volume else 0.0,
        "selection": sel_priv,
        "epsilon": eps,
        "delta": delta,
        "parameters": params.to_dict(),
    }
    ledger = build_ledger(
        mechanism=MECHANISM,
        notion="(ε,δ)-DP, add/remove one user's log",
        epsilon=eps,
        delta=delta,
        parameters=params.to_dict() | {"selection_detail": sel_priv},
        inputs=[log.ledger_input()],
        rng=rng,
        extra={
            "composition": "basic: selection (ε₁, δ) + counts ε₂ (discrete Laplace)",
            "count_noise": lap.describe(),
        },  # fmt: skip
    )
    return HistogramRelease(tables={"queries": queries}, report=report, ledger=ledger)
