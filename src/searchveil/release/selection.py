"""Query (and query-click) releases with a modern selection strategy (``release korolova
--selection ...``).

Release-Data's structure (Korolova thesis ch.4, Algorithm 3) with the Select-Queries step
replaced by one of :mod:`searchveil.mechanisms.selection`'s strategies — Laplace thresholding on
distinct-user counts, Gaussian thresholding, policy Gaussian set union, or the ℓ2-weighted
rounds probe-reweight, probe-reweight-2r and DP-SIPS — followed by Get-Query-Counts: every selected
query's distinct-user count (among the users' first d distinct queries) plus fresh discrete Laplace
noise of scale d/ε₂. With ``d_c`` (``--max-clicks``) the same strategy then selects (query, url)
pairs among the clicks on the released queries (each user's first d_c distinct such pairs), and
their distinct-user counts get discrete Laplace noise of scale d_c/ε₄ — the private-URL form of
Release-Data.

Privacy unit: a user's whole log. What a user contributes is fixed by data-independent rules:
their first ``pool`` distinct queries (a strategy with several rounds may use up to 2d; the
others d) and their first ``click_pool`` distinct clicked (query, url) pairs. Selection is
(ε₁, δ₁)-DP (the strategy's own analysis), the query counts ε₂-DP (ℓ1 sensitivity d), the
pair selection (ε₃, δ₃)-DP and the click counts ε₄-DP (ℓ1 sensitivity d_c), so the release is
(Σε, δ₁ + δ₃)-DP by basic composition; δ is split equally between the two selections.
``split`` gives the relative ε weights (default equal).

The data-size work — each user's first items — is done by :func:`pools_from_log` in memory, or
by an engine (``Engine.item_pools``: the Polars ordered pass, Spark);
:func:`release_selection_pools` is the one definition of the noise, accounting and ledger for both.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from searchveil.bounding import Stream, bound_log
from searchveil.engines.contract import Bounding, BoundingPlan, Item, LocalCounts, UserItemPools
from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import build_ledger
from searchveil.mechanisms.accounting import Budget, check_budget
from searchveil.mechanisms.budget import Part, PrivacyCost, Relation
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.noisy_counts import NoisePlan, NoisyStep
from searchveil.mechanisms.pool_rounds import PairSource, PoolTable
from searchveil.mechanisms.rounds import POOL_FACTOR, ItemPool, LocalPool
from searchveil.mechanisms.selection import (
    SelectionStrategy,
    default_d,
    make_strategy,
    strategy_facts,
)
from searchveil.mechanisms.selection_facts import Accounting
from searchveil.model import PAIR_SEP, SearchLog, items
from searchveil.params import single_user_exposure
from searchveil.release.histogram import (
    HistogramRelease,
    check_declared_users,
    delta_users_check,
    users_bound_source,
)
from searchveil.rng import RandomSource
from searchveil.validate import check_int, check_positive, check_probability, parse_choice

__all__ = [
    "MECHANISM",
    "SelectionParams",
    "UserItemPools",
    "pools_from_log",
    "release_selection",
    "release_selection_pools",
]

MECHANISM = "query-release-selection"
#: each user's first CLICK_POOL_FACTOR·d_c distinct clicked pairs are candidates
CLICK_POOL_FACTOR = 4


@dataclass(frozen=True)
class SelectionParams:
    strategy: SelectionStrategy | str  # (a member once constructed)
    epsilon: float
    delta: float
    d: int
    split: tuple[float, ...] = (1.0, 1.0)
    clamp_negative: bool = False
    d_c: int | None = None
    #: how d was chosen (``"--max-queries"`` or the data-independent default rule); recorded
    d_rule: str = "given (--max-queries)"

    def __post_init__(self) -> None:
        strategy = parse_choice("selection", self.strategy, SelectionStrategy)
        object.__setattr__(self, "strategy", strategy)
        check_positive("epsilon", self.epsilon)
        check_probability("delta", self.delta)
        check_int("d", self.d, minimum=1, maximum=4096)
        if self.d_c is not None:
            check_int("max-clicks", self.d_c, minimum=1, maximum=4096)
        parts = 2 if self.d_c is None else 4
        if len(self.split) != parts or any(
            not isinstance(w, int | float) or not (w > 0) or not np.isfinite(w) for w in self.split
        ):
            raise InvalidParameterError(
                "split",
                self.split,
                f"{parts} positive weights (selection, counts"
                + (", url-selection, click-counts)" if parts == 4 else ")"),
            )

    @classmethod
    def from_budget(
        cls, *, strategy: SelectionStrategy | str, epsilon: float, delta: float,
        d: int | None = None, split: tuple[float, ...] | None = None, d_c: int | None = None,
        clamp_negative: bool = False, max_users: int | None = None, d_rule: str | None = None,
    ) -> SelectionParams:  # fmt: skip
        """The parameters from a budget (ε, δ) and public bounds, the one place options become
        them (the CLI, the demo, a Python user): ``split`` defaults to equal weights; without
        ``d``, the strategy's data-independent default (:func:`default_d`, from the selection
        step's ε, δ and ``max_users``; recorded as ``d_rule``). ``max_users``: a declared
        public bound U on the users, refused unless δ < 1/U. ``d_rule``: how a given ``d``
        was chosen (default ``"given (--max-queries)"``)."""
        parse_choice("selection", strategy, SelectionStrategy)
        w = split if split is not None else tuple([1.0] * (2 if d_c is None else 4))
        if max_users is not None:
            check_int("max-users", max_users, minimum=1)
            if not delta < 1.0 / max_users:
                raise InvalidParameterError(
                    "delta",
                    delta,
                    f"a number < 1/U = {1.0 / max_users:.3g} (--max-users {max_users}"
                    f"; δ = 1/(10·U) = {0.1 / max_users:.3g} is the documented choice)",
                )
        if d is None:
            probe = cls(strategy=strategy, epsilon=epsilon, delta=delta, d=1, split=w, d_c=d_c)
            d, rule = default_d(probe.strategy, epsilon=probe.eps_selection,
                                delta=probe.delta_selection, max_users=max_users)  # fmt: skip
        else:
            d = check_int("max-queries", d, minimum=1, maximum=4096)
            rule = "given (--max-queries)"
        return cls(strategy=strategy, epsilon=epsilon, delta=delta, d=d, split=w,
                   clamp_negative=clamp_negative, d_c=d_c, d_rule=d_rule or rule)  # fmt: skip

    def _eps(self, i: int) -> float:
        return self.epsilon * self.split[i] / sum(self.split)

    @property
    def eps_selection(self) -> float:
        return self._eps(0)

    @property
    def eps_counts(self) -> float:
        return self._eps(1)

    @property
    def eps_url_selection(self) -> float | None:
        return None if self.d_c is None else self._eps(2)

    @property
    def eps_click_counts(self) -> float | None:
        return None if self.d_c is None else self._eps(3)

    @property
    def delta_selection(self) -> float:
        """δ of each selection step: all of δ without clicks, half with them."""
        return self.delta if self.d_c is None else self.delta / 2

    @property
    def budget(self) -> Budget:
        """The (ε, δ) the release must meet (its cost is checked against it once)."""
        return Budget(self.epsilon, self.delta)

    def strategies(self) -> tuple[Any, Any]:
        """The query strategy and (with clicks) the pair strategy, calibrated to their shares
        (computed once per parameter set)."""
        return _strategies(self)

    def cost(self) -> PrivacyCost:
        """What the release spends: user-level; selection (ε₁, δ₁) + counts ε₂ (+ pair
        selection (ε₃, δ₃) + click counts ε₄) by basic composition; the rounds strategies'
        parts carry their zCDP ρ (computed once per parameter set)."""
        return _cost(self)

    def privacy(self) -> dict[str, float]:
        """(ε, δ) of the release (:meth:`cost`)."""
        c = self.cost()
        return {"epsilon": c.epsilon, "delta": c.delta}

    @property
    def pool(self) -> int:
        """Distinct queries per user the strategy may use."""
        return POOL_FACTOR * self.d if strategy_facts(self.strategy).rounds > 1 else self.d

    @property
    def click_pool(self) -> int | None:
        return None if self.d_c is None else CLICK_POOL_FACTOR * self.d_c

    def bounding_plan(self) -> BoundingPlan:
        """What an engine keeps for a selection release: each user's first ``pool`` distinct
        queries and, with clicks, first ``click_pool`` distinct clicked (query, url) pairs."""
        return BoundingPlan(Bounding.POOLS, Item.QUERIES, self.pool, True, self.click_pool)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "selection": self.strategy,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "d": self.d,
            "d_rule": self.d_rule,
            "pool": self.pool,
            "split": list(self.split),
            "epsilon_selection": self.eps_selection,
            "epsilon_counts": self.eps_counts,
            "count_noise_scale": self.d / self.eps_counts,
            "clamp_negative": self.clamp_negative,
        }
        if self.d_c is not None:
            assert self.eps_url_selection is not None and self.eps_click_counts is not None
            out |= {
                "d_c": self.d_c,
                "click_pool": self.click_pool,
                "epsilon_url_selection": self.eps_url_selection,
                "epsilon_click_counts": self.eps_click_counts,
                "click_count_noise_scale": self.d_c / self.eps_click_counts,
                "delta_split": "equal between query and (query, url) selection",
            }
        return out


@functools.lru_cache(maxsize=64)
def _strategies(p: SelectionParams) -> tuple[Any, Any]:
    strat = make_strategy(p.strategy, epsilon=p.eps_selection, delta=p.delta_selection, d=p.d)
    pair_strat = None
    if p.d_c is not None:
        assert p.eps_url_selection is not None
        pair_strat = make_strategy(p.strategy, epsilon=p.eps_url_selection,
                                   delta=p.delta_selection, d=p.d_c)  # fmt: skip
    return strat, pair_strat


def _strategy_part(name: str, strategy: str, pr: dict[str, Any]) -> Part:
    """A selection step as a part: a zCDP strategy (the rounds) is ρ-zCDP outside the event
    that one of the user's own items is released (δ_T/(1 − δ_T), docs/privacy/selection.md)."""
    if strategy_facts(strategy).accounting is not Accounting.ZCDP:
        return Part(name, float(pr["epsilon"]), float(pr["delta"]))
    dt = float(pr["delta_threshold"])
    return Part(name, float(pr["epsilon"]), float(pr["delta"]), float(pr["rho"]), dt / (1 - dt))


@functools.lru_cache(maxsize=64)
def _cost(p: SelectionParams) -> PrivacyCost:
    strat, pair_strat = p.strategies()
    sel = strat.privacy()
    eps = float(sel["epsilon"]) + p.eps_counts
    delta = float(sel["delta"])
    parts = [_strategy_part("select_queries", p.strategy, sel), Part("query_counts", p.eps_counts)]
    if pair_strat is not None:
        assert p.eps_click_counts is not None
        pp = pair_strat.privacy()
        eps += float(pp["epsilon"]) + p.eps_click_counts
        delta += float(pp["delta"])
        parts += [
            _strategy_part("select_urls", p.strategy, pp),
            Part("click_counts", p.eps_click_counts),
        ]
    return PrivacyCost(Relation.USER, tuple(parts), eps, delta)


def pools_from_log(log: SearchLog, params: SelectionParams) -> UserItemPools:
    """Each user's first items by the data-independent rules of ``params``, in memory (the
    bounding kernel, :func:`~searchveil.bounding.bound_log`, as on the engines)."""
    kept, fig = bound_log(log.df, params.bounding_plan().kernel_spec())
    qp = kept[Stream.EVENTS].select("user", item="query", rank="rank")
    figures = {"users": fig["users"], "query_events": fig["events"], "pool_queries": qp.height}
    cp = None
    if params.d_c is not None:
        cp = kept[Stream.CLICKS].select("user", "query", "url", "rank")
        figures |= {"clicks": fig["clicks"], "pool_clicks": cp.height}
    q = items(log, "queries")
    return UserItemPools(queries=qp, clicks=cp, figures=figures, input=log.ledger_input(),
                         events=q.select("user", "item"))  # fmt: skip


def release_selection(
    log: SearchLog, params: SelectionParams, *, rng: RandomSource, max_users: int | None = None
) -> HistogramRelease:
    """The release on an in-memory log (:func:`pools_from_log` + :func:`release_selection_pools`).
    ``max_users``: a declared public bound U on the users (``declared.max_users``; the ledger's
    δ < 1/U check uses it, never the exact count)."""
    return release_selection_pools(
        pools_from_log(log, params), params, rng=rng, max_users=max_users
    )


def _query_table(pools: UserItemPools) -> PoolTable:
    """The query pools as a pool table: the engine's own (a cluster's), or the frame's
    arrays in this process (its frame of strings, hundreds of MB at 20M rows, is freed)."""
    q = pools.queries
    if isinstance(q, PoolTable):
        return q
    table = LocalPool(ItemPool.from_frame(q), canonical=True)
    pools.queries = q.clear()
    return table


def _pair_table(pools: UserItemPools, released: pl.Series) -> PoolTable:
    """The clicked pairs of the released queries, re-ranked per user, as a pool table."""
    c = pools.clicks
    if isinstance(c, PairSource):
        return c.pairs(released)
    assert c is not None
    cand = (
        c.join(pl.DataFrame({"query": released}), on="query", how="semi")
        .sort(["user", "rank"])
        .with_columns(
            item=pl.col("query") + PAIR_SEP + pl.col("url"),
            rank=pl.int_range(pl.len()).over("user").cast(pl.Int64),
        )
    )
    return LocalPool(ItemPool.from_frame(cand.select("user", "item", "rank")), canonical=True)


def _noisy(selected: pl.DataFrame, scale: float, clamp: bool, rng: RandomSource) -> pl.DataFrame:
    """``item, count, noisy_count``: the selected items' counts plus fresh discrete Laplace
    noise (the released items only: the selection ran where the pools are)."""
    step = NoisyStep(DiscreteLaplace(scale), publish="noisy_count", clamp=clamp)
    return LocalCounts(selected, ["item"]).release(NoisePlan((step,)), rng).rows


def _single_user(pools: UserItemPools, table: PoolTable, d: int, keep1: float,
                 delta: float, max_users: int | None) -> dict[str, Any]:  # fmt: skip
    """Expected number of single-user queries published (issue 12). Exact in memory (holders
    counted over every query event); from an engine's pools, an upper bound (an item one user
    holds among the pools may have other holders beyond their pools)."""
    local = (pools.single_items is not None or pools.events is not None) and isinstance(
        table, LocalPool
    )
    if local:
        assert isinstance(table, LocalPool)
        pool = table.pool
        single = (
            pools.single_items.select("item")
            if pools.single_items is not None
            else pools.events.group_by("item")  # type: ignore[union-attr]
            .agg(pl.col("user").n_unique().alias("h"))
            .filter(pl.col("h") == 1)
            .select("item")
        )
        n_single = single.height
        is_single = np.zeros(pool.n_items, dtype=bool)
        hit = (
            pl.DataFrame({"item": pool.names})
            .with_row_index("_i")
            .join(single, on="item", how="semi")
        )
        is_single[hit.get_column("_i").to_numpy()] = True
        cand = int(is_single[pool.items[pool.rank < d]].sum())
        exact = True
    else:
        fig = table.figures(d)
        n_single, cand, exact = fig.single_items, fig.single_first_d, False
    out = single_user_exposure(
        np.full(cand, keep1), delta=delta,
        users=max_users if max_users is not None else max(1, pools.users),
        single_user_items=n_single,
    )  # fmt: skip
    out["delta_check"]["users_bound_source"] = users_bound_source(max_users)
    out["exact"] = exact
    if not exact:
        out["note"] += (
            "; upper bound: computed on the users' first items (an engine does not count "
            "holders over the whole log)"
        )
    return out


def _select_pairs(
    pools: UserItemPools,
    params: SelectionParams,
    queries: pl.DataFrame,
    pair_strat: Any,
    rng: RandomSource,
) -> tuple[pl.DataFrame, dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The (query, url) pairs of the released queries: selection by the same strategy among
    each user's first clicks, then noisy click counts. Returns the table, the strategy's
    description, the report's figures and the ledger events."""
    assert pools.clicks is not None and params.d_c is not None
    assert params.eps_click_counts is not None
    ptable = _pair_table(pools, queries.get_column("query"))
    try:
        where, released = pair_strat.select_on(ptable, rng)
        psel = where.counts(released, params.d_c)
        lap_c = DiscreteLaplace(params.d_c / params.eps_click_counts)
        noisy = _noisy(psel, lap_c.scale, params.clamp_negative, rng)
        candidates = ptable.figures(params.d_c).items
    finally:
        ptable.finish()
    parts = noisy.get_column("item").str.split_exact(PAIR_SEP, 1)
    clicks = pl.DataFrame(
        {
            "query": parts.struct.field("field_0"),
            "url": parts.struct.field("field_1"),
            "noisy_count": noisy.get_column("noisy_count"),
        }
    )
    clicks = clicks.sort(["query", "noisy_count", "url"], descending=[False, True, False])
    detail: dict[str, Any] = pair_strat.describe()
    report = {
        "clicks": pools.figures.get("clicks", 0),
        "candidate_pairs": candidates,
        "pairs_released": clicks.height,
        "url_selection": detail,
    }
    events = [
        {"step": "select_urls", **_event(detail)},
        {"step": "click_counts", "mechanism": "laplace", "noise": lap_c.describe(),
         "l1_sensitivity": params.d_c, "epsilon": params.eps_click_counts, "delta": 0.0},
    ]  # fmt: skip
    return clicks, detail, report, events


def release_selection_pools(
    pools: UserItemPools,
    params: SelectionParams,
    *,
    rng: RandomSource,
    max_users: int | None = None,
) -> HistogramRelease:
    """Selection, counts (and pair selection, click counts) from the users' first items,
    where the pools are held (:class:`~searchveil.mechanisms.pool_rounds.PoolTable`: this
    process, or a cluster). ``max_users``: the declared bound U (see :func:`release_selection`)."""
    if not isinstance(params, SelectionParams):
        raise InvalidParameterError("params", params, "a SelectionParams")
    check_declared_users(max_users, pools.users)
    if (params.d_c is None) != (pools.clicks is None):
        raise InvalidParameterError(
            "max-clicks", params.d_c, "set exactly when the pools include clicks"
        )
    strat, pair_strat = params.strategies()
    sel_priv = strat.describe()
    # accounting first: the one check of the whole release's cost, before any noise is drawn
    cost = params.cost()
    check_budget(cost, params.budget, what="release korolova --selection")
    eps, delta = cost.epsilon, cost.delta

    qtable = _query_table(pools)
    try:
        where, released = strat.select_on(qtable, rng)
        selected = where.counts(released, params.d)
        lap = DiscreteLaplace(params.d / params.eps_counts)
        noisy = _noisy(selected, lap.scale, params.clamp_negative, rng)
        figs = qtable.figures(params.d)
        # single-user exposure (issue 12): an item held by one user has weight/count of one
        # user; for policy Gaussian keep_probability(1) is an upper bound (it may get less)
        p1 = float(np.asarray(strat.keep_probability(np.array([1]))).ravel()[0])
        single = _single_user(pools, qtable, params.d, p1, delta, max_users)
    finally:
        qtable.finish()
    queries = noisy.select(pl.col("item").alias("query"), "noisy_count").sort(
        ["noisy_count", "query"], descending=[True, False]
    )
    tables = {"queries": queries}

    report: dict[str, Any] = {
        "mechanism": MECHANISM,
        "users": pools.users,
        "query_events": pools.figures["query_events"],
        "items_after_bounding": figs.rows_first_d,
        "pool_items": figs.rows,
        "queries_released": queries.height,
        "released_bounded_volume": int(selected.get_column("count").sum() or 0),
        "selection": sel_priv,
    }
    if pools.events is not None:
        total = pools.events.height
        vol = int(
            pools.events.join(queries.select(pl.col("query").alias("item")), on="item",
                              how="semi").height
        )  # fmt: skip
        report["distinct_queries"] = int(pools.events.get_column("item").n_unique())
        report["released_query_volume"] = vol
        report["released_volume_share"] = vol / total if total else 0.0

    events: list[dict[str, Any]] = [
        {"step": "select_queries", **_event(sel_priv)},
        {"step": "query_counts", "mechanism": "laplace", "noise": lap.describe(),
         "l1_sensitivity": params.d, "epsilon": params.eps_counts, "delta": 0.0},
    ]  # fmt: skip
    clicks_detail = None
    if pair_strat is not None:
        clicks, clicks_detail, click_report, click_events = _select_pairs(
            pools, params, queries, pair_strat, rng
        )
        tables["clicks"] = clicks
        report |= click_report
        events += click_events
    report["epsilon"] = eps
    report["delta"] = delta
    report["parameters"] = params.to_dict()
    report["single_user"] = single
    report["single_user"]["exact"] = bool(
        report["single_user"]["exact"] and strategy_facts(params.strategy).single_user_exact
    )
    ledger = build_ledger(
        mechanism=MECHANISM,
        notion="(ε,δ)-DP, add/remove one user's log",
        cost=cost,
        parameters=params.to_dict()
        | {"selection_detail": sel_priv, "count_noise": lap.describe()}
        | ({"url_selection_detail": clicks_detail} if clicks_detail else {}),
        declared={"max_users": max_users} if max_users is not None else {},
        rng=rng,
        events=events,
        extra={
            "accounting": "basic composition: selection (ε₁, δ₁) + counts ε₂ (discrete Laplace)"
            + (" + pair selection (ε₃, δ₃) + click counts ε₄" if clicks_detail else ""),
            "guarantee": {"delta_vs_users": delta_users_check(delta, max_users)},
        },
    )
    return HistogramRelease(tables=tables, report=report, ledger=ledger, inputs=[pools.input])


def _event(detail: dict[str, Any]) -> dict[str, Any]:
    """The ledger event of a selection step: the strategy's public parameters."""
    keys = ("strategy", "d", "pool", "epsilon", "delta", "delta_noise", "delta_threshold",
            "rho", "sigma", "tau", "K", "b", "rho", "cutoff", "rounds", "budget_shares",
            "bias_cutoff", "accounting")  # fmt: skip
    return {"mechanism": "selection"} | {k: detail[k] for k in keys if k in detail}
