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

import numpy as np
import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import build_ledger
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.selection import STRATEGIES, make_strategy, user_item_sets
from searchveil.model import SearchLog, items
from searchveil.params import single_user_exposure
from searchveil.release.histogram import (
    USER_NEIGHBOURS,
    HistogramRelease,
    check_declared_users,
    delta_users_check,
    users_bound_source,
)
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


def release_select(
    log: SearchLog, params: SelectParams, *, rng: RandomSource, max_users: int | None = None
) -> HistogramRelease:
    """Select queries with ``params.strategy`` and release their noisy distinct-user counts.
    ``max_users``: a declared public bound U on the users (``declared.max_users``; the ledger's
    δ < 1/U check uses it, never the exact count)."""
    check_declared_users(max_users, log.n_users)
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
    # single-user exposure (issue 12): an item held by one user has distinct-user count 1 if the
    # user kept it among their first d, else it is not a candidate; for policy Gaussian,
    # keep_probability(1) is an upper bound (the user may give it less than the full weight)
    single = q.group_by("item").agg(pl.col("user").n_unique().alias("h")).filter(pl.col("h") == 1)
    cand = sets.join(single.select("item"), on="item", how="semi").height
    p1 = float(np.asarray(strat.keep_probability(np.array([1]))).ravel()[0])
    report["single_user"] = single_user_exposure(
        np.full(cand, p1), delta=delta,
        users=max_users if max_users is not None else max(1, log.n_users),
        single_user_items=single.height,
    ) | {"exact": params.strategy != "policy-gaussian"}  # fmt: skip
    report["single_user"]["delta_check"]["users_bound_source"] = users_bound_source(max_users)
    ledger = build_ledger(
        mechanism=MECHANISM,
        notion="(ε,δ)-DP, add/remove one user's log",
        neighbouring=USER_NEIGHBOURS,
        epsilon=eps,
        delta=delta,
        parameters=params.to_dict() | {"selection_detail": sel_priv, "count_noise": lap.describe()},
        declared={"max_users": max_users} if max_users is not None else {},
        rng=rng,
        events=[
            {"step": "select_queries", **sel_priv},
            {
                "step": "query_counts",
                "mechanism": "laplace",
                "noise": lap.describe(),
                "l1_sensitivity": params.d,
                "epsilon": params.eps_counts,
                "delta": 0.0,
            },
        ],  # fmt: skip
        extra={
            "accounting": "basic composition: selection (ε₁, δ) + counts ε₂ (discrete Laplace)",
            "guarantee": {"delta_vs_users": delta_users_check(delta, max_users)},
        },
    )
    return HistogramRelease(
        tables={"queries": queries}, report=report, ledger=ledger, inputs=[log.ledger_input()]
    )
