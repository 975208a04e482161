"""Korolova's Release-Data: the private query-click graph (Korolova, PhD thesis, Stanford 2012,
ch.4: Algorithm 3, Theorem 3, §4.5, §4.8).

Steps (Algorithm 3), each a fresh, independent noise draw per query / (query, url):

1. Limit-User-Activity — keep each user's first ``d`` query events and first ``d_c`` clicks
   (or a uniformly random ``d`` / ``d_c`` with ``strategy="random"``), via
   :func:`searchveil.bounding.bound_contributions`. With ``distinct=True`` the first ``d``
   *distinct* queries are kept and a query's count is its number of distinct users.
2. Select-Queries — ``Q = {q : M(q, D) + X > K}``, X discrete Laplace(b).
3. Get-Query-Counts — ``M(q, D) + X_q``, X_q discrete Laplace(b_q), fresh.
4. Get-Click-Counts — for the URLs of each released query, the bounded click count + discrete
   Laplace(b_c). Which URLs:

   * ``url_selection="serp"``: a public SERP file (query → ranked URLs, what the engine shows
     anyone who types the query). Every listed URL of a released query gets a noisy count,
     including URLs nobody clicked (true count 0) — publishing only clicked ones would leak.
   * ``url_selection="private"``: no public SERP; (query, url) pairs of released queries are
     selected by the same thresholding on their bounded click counts (each user ≤ d_c clicks;
     threshold ``url_K`` ≥ d_c, noise ``url_b``), spending their own (ε, δ).
   * ``url_selection="none"``: queries only.

Negative noisy counts can be clamped to 0 (post-processing, §4.5; recorded in the ledger).

Decisions (see ``docs/privacy/korolova.md``):

* Noise is the *discrete* Laplace; thresholds are applied to integer noisy counts. The
  reported (ε, δ) is the ``exact`` accounting of :mod:`searchveil.params` for the mechanism
  run (effective noise scales, integer counts); Theorem 3's values are recorded beside it as
  ``paper_accounting``. Parameters solved from a budget use an integer threshold, for which
  the exact values never exceed Theorem 3's.
* ``K >= d`` is enforced (``K >= 1`` for distinct-user counts); likewise ``url_K >= d_c``.
* Neighbouring logs differ by adding or removing one user's whole history.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.ledger import build_ledger, public_file_record
from searchveil.mechanisms.accounting import Budget, check_budget
from searchveil.mechanisms.budget import PrivacyCost
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.noisy_counts import CountSummary, NoisePlan, NoisyStep
from searchveil.mechanisms.threshold import keep_probability
from searchveil.model import SearchLog, items, normalize_query
from searchveil.params import single_user_exposure
from searchveil.release.counts import BoundedCounts
from searchveil.release.histogram import (
    HistogramRelease,
    check_declared_users,
    delta_users_check,
    users_bound_source,
)
from searchveil.release.korolova.params import KorolovaParams, korolova_counts
from searchveil.rng import RandomSource
from searchveil.validate import check_int

__all__ = [
    "KorolovaRelease",
    "release_korolova",
    "release_korolova_counts",
    "single_user_counts",
    "exposure_from_counts",
    "read_serp",
    "load_serp",
    "Serp",
    "MECHANISM",
]

MECHANISM = "korolova-release-data"

KorolovaRelease = HistogramRelease


def read_serp(
    path: str | Path, *, normalize: bool = True, depth: int | None = None
) -> pl.DataFrame:
    """A public SERP file: tab-separated ``query<TAB>rank<TAB>url`` lines (rank: integer >= 1,
    1 = top); an optional first line ``query<TAB>rank<TAB>url`` is a header. ``depth`` keeps the
    top ``depth`` ranks of each query. Returns distinct ``query, rank, url``."""
    p = Path(path)
    if not p.is_file():
        raise InputFormatError(str(p), "SERP file not found")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputFormatError(str(p), f"not UTF-8: {exc}") from None
    rows: list[tuple[str, int, str]] = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if i == 1 and [x.strip().lower() for x in parts] == ["query", "rank", "url"]:
            continue
        if len(parts) != 3:
            raise InputFormatError(str(p), "expected 3 tab-separated fields query, rank, url", i)
        q, r, u = parts
        try:
            rank = int(r)
        except ValueError:
            raise InputFormatError(str(p), f"rank {r!r} is not an integer", i) from None
        if rank < 1 or not u.strip() or not q.strip():
            raise InputFormatError(str(p), "rank must be >= 1 and query/url non-empty", i)
        rows.append((q, rank, u.strip()))
    df = pl.DataFrame(
        rows, schema={"query": pl.String, "rank": pl.Int64, "url": pl.String}, orient="row"
    )
    if normalize:
        df = df.with_columns(normalize_query(pl.col("query")))
    if depth is not None:
        df = df.filter(pl.col("rank") <= check_int("serp_depth", depth, minimum=1))
    return df.unique(subset=["query", "url"], keep="first").sort(["query", "rank", "url"])


@dataclass(frozen=True)
class Serp:
    """A public SERP table (``query, rank, url``) with the public ledger's record of its file
    (:func:`load_serp`: role, file name, SHA-256, rows) and the depth used."""

    table: pl.DataFrame
    source: dict[str, Any] = field(default_factory=dict)
    depth: int | None = None


def load_serp(path: str | Path, *, normalize: bool = True, depth: int | None = None) -> Serp:
    """:func:`read_serp` plus the public ledger's record of the file: its name (not its path:
    where the data holder keeps it is not published), the SHA-256 of its bytes, and its rows
    used (after ``depth``)."""
    table = read_serp(path, normalize=normalize, depth=depth)
    return Serp(
        table=table,
        source=public_file_record(path, role="serp", rows=table.height),
        depth=depth,
    )


def _serp_table(serp: Serp | pl.DataFrame | None) -> pl.DataFrame | None:
    return serp.table if isinstance(serp, Serp) else serp


def _serp_record(serp: Serp | pl.DataFrame | None) -> dict[str, Any] | None:
    """The public ledger's record of the SERP: the file's for a :class:`Serp`; for a bare
    table, the SHA-256 of its rows (``query<TAB>rank<TAB>url`` lines in the table's order)."""
    if serp is None:
        return None
    if isinstance(serp, Serp):
        return dict(serp.source)
    text = serp.select("query", "rank", "url").write_csv(separator="\t", include_header=False)
    return {
        "role": "serp",
        "source": "a table given in memory; sha256 of its query<TAB>rank<TAB>url rows",
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "rows": serp.height,
    }


def single_user_counts(
    events: pl.DataFrame, counts: pl.DataFrame, key: str
) -> tuple[pl.DataFrame, int]:
    """The rows of ``counts`` (bounded counts keyed by ``key``) whose item is held by exactly one
    user of ``events`` (columns ``user, item``), and the number of such items in ``events``:
    what the single-user exposure needs (issue 12, ``docs/privacy/delta.md``). Private figures
    for the data holder, never published. Kept out of :class:`BoundedCounts` (which every engine
    produces identically) and passed to the release as ``single_user``."""
    single = (
        events.group_by("item")
        .agg(pl.col("user").n_unique().alias("holders"))
        .filter(pl.col("holders") == 1)
        .select(pl.col("item").alias(key))
    )
    return counts.join(single, on=key, how="semi"), single.height


def exposure_from_counts(
    summary: CountSummary,
    *,
    keep: Any,
    max_single_count: int,
    delta: float,
    users: int,
    single_user: tuple[pl.DataFrame, int] | None = None,
) -> dict[str, Any]:
    """The single-user exposure of a threshold release: Σ over items held by one user of their
    exact release probability ``keep(count)``. Exact when ``single_user`` (from
    :func:`single_user_counts`; the in-memory path) is given; otherwise (counts from an engine,
    which does not count holders) an upper bound: the sum over every item whose bounded count is
    ≤ ``max_single_count`` (a single-user item cannot have more; ``summary.small``, the table's
    number of items of each small count, computed where the counts are), marked
    ``"exact": False``."""
    if single_user is not None:
        c = single_user[0].get_column("count").to_numpy()
        n = int(single_user[1])
        probs = keep(c) if c.size else np.zeros(0)
        exact = True
    else:
        small = {k: v for k, v in summary.small.items() if 1 <= k <= max_single_count}
        values = np.array(sorted(small), dtype=np.int64)
        n = int(sum(small.values()))
        # Σ_c (items of count c) · keep(c): the same sum, without an array of every item
        probs = (
            np.asarray(keep(values), dtype=np.float64) * [small[int(v)] for v in values]
            if values.size
            else np.zeros(0)
        )
        exact = False
    out = single_user_exposure(probs, delta=delta, users=users, single_user_items=n)
    out["exact"] = exact
    if not exact:
        out["note"] += (
            "; upper bound: the engine did not count holders, so every item with a bounded "
            f"count ≤ {max_single_count} is counted as single-user (single_user_items too)"
        )
    return out


def release_korolova(
    log: SearchLog,
    params: KorolovaParams,
    *,
    rng: RandomSource,
    serp: Serp | pl.DataFrame | None = None,
    max_users: int | None = None,
) -> KorolovaRelease:
    """Run Release-Data on ``log``. Returns tables ``queries`` (query, noisy_count) and, with
    URLs, ``clicks`` (query, url, noisy_count); the report; the ledger.

    ``serp``: the public SERP when ``url_selection="serp"`` — from :func:`load_serp` (the
    ledger records the file's name and SHA-256) or a table from :func:`read_serp` (the ledger
    records the SHA-256 of its rows).
    The budget is the one the parameters carry (``params.budget``: set by ``from_budget`` or
    given with the direct form), checked once, by :func:`release_korolova_counts`, before any
    noise is drawn.
    ``max_users``: a public upper bound U on the number of users the data holder *declares*
    (recorded as ``declared.max_users``; the ledger's δ < 1/U check uses it, never the exact
    count); an input with more users is refused.
    """
    _check_call(params, serp)
    check_declared_users(max_users, log.n_users)
    bounded = korolova_counts(log, params, rng=rng)
    single = single_user_counts(
        items(log, "queries"), bounded.table("queries", ["query"], ordered=False), "query"
    )
    return release_korolova_counts(
        bounded, params, rng=rng, serp=serp, single_user=single, max_users=max_users
    )


def _check_call(params: object, serp: Serp | pl.DataFrame | None) -> None:
    if not isinstance(params, KorolovaParams):
        raise InvalidParameterError("params", params, "a KorolovaParams")
    if (serp is None) == (params.url_selection == "serp"):
        raise InvalidParameterError(
            "serp",
            "given" if serp is not None else None,
            "a SERP table exactly when url_selection='serp'",
        )


def _counts_step(scale: float, clamp: bool) -> NoisyStep:
    """Get-Query-Counts / Get-Click-Counts: ``noisy_count`` = count + fresh discrete
    Laplace(scale) noise, clamped at 0 when ``clamp`` (post-processing, §4.5)."""
    return NoisyStep(DiscreteLaplace(scale=scale), publish="noisy_count", clamp=clamp)


def _click_counts(
    bounded: BoundedCounts,
    params: KorolovaParams,
    queries: pl.DataFrame,
    serp_table: pl.DataFrame | None,
    rng: RandomSource,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Step 4: the URLs of the released queries (a public SERP, or private selection by
    thresholding) and their noisy click counts; with the report's click figures. Either runs
    where the click counts are: the SERP's pairs of the released queries (public keys) get
    their counts there, or the pairs of the released queries are thresholded there."""
    assert params.d_c is not None and params.b_c is not None
    released = queries.get_column("query")
    counts_step = _counts_step(params.b_c, params.clamp_negative)
    keys = ["query", "url"]
    if params.url_selection == "serp":
        assert serp_table is not None
        dom = serp_table.join(queries.select("query"), on="query", how="semi").select(keys)
        got = bounded.release("clicks", keys, NoisePlan((counts_step,)), rng, domain=dom)
    else:
        assert params.url_K is not None and params.url_b is not None
        plan = NoisePlan((NoisyStep(DiscreteLaplace(scale=params.url_b), threshold=params.url_K),
                          counts_step))  # fmt: skip
        got = bounded.release("clicks", keys, plan, rng, within=("query", released))
    fig = bounded.figures
    report = {
        "clicks": fig["clicks"],
        "clicks_after_bounding": fig["clicks_after_bounding"],
        "candidate_pairs": got.summary.items,
        "pairs_released": got.rows.height,
    }
    return got.rows, report


def _ledger_parameters(
    params: KorolovaParams, budget: Budget | None, serp: Serp | pl.DataFrame | None
) -> dict[str, Any]:
    """The ledger's ``parameters``: the parameters, the noise scales as run, the threshold
    semantics, the budget checked, the treatment of negative counts (and the SERP depth)."""
    parameters: dict[str, Any] = params.to_dict() | {
        "noise_effective_scales": {
            "b": DiscreteLaplace(scale=params.b).effective_scale,
            "b_q": DiscreteLaplace(scale=params.b_q).effective_scale,
            **(
                {"b_c": DiscreteLaplace(scale=params.b_c).effective_scale}
                if params.b_c is not None
                else {}
            ),
            **(
                {"url_b": DiscreteLaplace(scale=params.url_b).effective_scale}
                if params.url_b is not None
                else {}
            ),
        },
        "threshold_semantics": "released iff count + noise > K (integer noisy counts)",
        "budget": None if budget is None else budget.to_dict(),
        "negative_counts": "clamped to 0 (post-processing)"
        if params.clamp_negative
        else "published as drawn",
    }
    if params.url_selection == "serp":
        parameters["serp_depth"] = serp.depth if isinstance(serp, Serp) else None
    if params.url_selection == "serp":
        parameters["serp_depth"] = serp.depth if isinstance(serp, Serp) else None
    return parameters


def _single_user(
    summary: CountSummary,
    users: int,
    params: KorolovaParams,
    delta: float,
    max_users: int | None,
    single_user: tuple[pl.DataFrame, int] | None,
) -> dict[str, Any]:
    """The report's single-user exposure of the selected queries (exact with ``single_user``,
    else an upper bound from the query table's small counts) and its δ < 1/U check."""
    b_eff = DiscreteLaplace(scale=params.b).effective_scale
    out = exposure_from_counts(
        summary, delta=delta,
        users=max_users if max_users is not None else max(1, users),
        keep=lambda c: keep_probability(c, threshold=params.K, scale=b_eff, noise="discrete"),
        max_single_count=_max_single(params), single_user=single_user,
    )  # fmt: skip
    out["delta_check"]["users_bound_source"] = users_bound_source(max_users)
    return out


def _max_single(params: KorolovaParams) -> int:
    """The largest bounded count an item one user holds can have."""
    return 1 if params.distinct else params.d


def _ledger(
    params: KorolovaParams,
    serp: Serp | pl.DataFrame | None,
    cost: PrivacyCost,
    exact: dict[str, Any],
    paper: dict[str, Any],
    max_users: int | None,
    rng: RandomSource,
) -> dict[str, Any]:
    """The public ledger of a Release-Data run: exact accounting, Theorem 3's beside it."""
    parameters = _ledger_parameters(params, params.budget, serp)
    serp_rec = _serp_record(serp)
    return build_ledger(
        mechanism=MECHANISM,
        notion="(epsilon, delta)-differential privacy, add/remove one user's history",
        cost=cost,
        parameters=parameters,
        public_inputs=[serp_rec] if serp_rec is not None else [],
        declared={"max_users": max_users} if max_users is not None else {},
        rng=rng,
        events=exact["events"],
        extra={
            "accounting": "exact: tight (ε, δ) for discrete Laplace noise as run "
            "(docs/privacy/korolova.md); Theorem 3's values under paper_accounting",
            "paper_accounting": {k: v for k, v in paper.items() if k != "events"},
            "reference": "Korolova, PhD thesis 2012, ch.4, Algorithm 3, Theorem 3, §4.8",
            "guarantee": {"delta_vs_users": delta_users_check(exact["delta"], max_users)},
        },
    )


def release_korolova_counts(
    bounded: BoundedCounts,
    params: KorolovaParams,
    *,
    rng: RandomSource,
    serp: Serp | pl.DataFrame | None = None,
    single_user: tuple[pl.DataFrame, int] | None = None,
    max_users: int | None = None,
) -> KorolovaRelease:
    """Steps 2–4 of Release-Data on counts already bounded by step 1 (from
    :func:`korolova_counts` or an engine): the one definition of the noise, thresholds,
    accounting and ledger. ``single_user``: :func:`single_user_counts` of the log, for the exact
    single-user exposure in the report (without it, an upper bound). ``max_users``: the
    declared public bound U (see :func:`release_korolova`). The one budget check of the
    release: its cost (:meth:`KorolovaParams.cost`) against ``params.budget``, before any
    noise is drawn."""
    _check_call(params, serp)
    cost = params.cost()
    check_budget(cost, params.budget, what="release korolova")
    exact = params.privacy("exact")
    check_declared_users(max_users, bounded.users)
    serp_table = _serp_table(serp)
    paper = params.privacy("paper")
    # 2. Select-Queries and 3. Get-Query-Counts (fresh noise), where the counts are
    plan = NoisePlan(
        (NoisyStep(DiscreteLaplace(scale=params.b), threshold=params.K),
         _counts_step(params.b_q, params.clamp_negative)),
        small_counts=_max_single(params),
    )  # fmt: skip
    got = bounded.release("queries", ["query"], plan, rng)
    queries, summary = got.rows, got.summary
    fig = bounded.figures
    report: dict[str, Any] = {
        "mechanism": MECHANISM,
        "users": bounded.users,
        "query_events": fig["query_events"],
        "query_events_after_bounding": fig["query_events_after_bounding"],
        "distinct_queries": summary.items,
        "queries_released": queries.height,
        "queries_dropped": summary.items - queries.height,
        "released_query_volume": int(queries.get_column("count").sum() or 0),
        "bounded_query_volume": summary.total,
    }

    # 4. URLs and click counts
    clicks_out: pl.DataFrame | None = None
    if params.url_selection != "none":
        clicks_out, click_report = _click_counts(bounded, params, queries, serp_table, rng)
        report.update(click_report)
    report["parameters"] = params.to_dict()
    report["epsilon"] = exact["epsilon"]
    report["delta"] = exact["delta"]
    report["single_user"] = _single_user(summary, bounded.users, params, exact["delta"], max_users,
                                         single_user)  # fmt: skip
    report["paper_epsilon"] = paper["epsilon"]
    report["paper_delta"] = paper["delta"]

    tables = {
        "queries": queries.select("query", "noisy_count").sort(
            ["noisy_count", "query"], descending=[True, False]
        )
    }
    if clicks_out is not None:
        tables["clicks"] = clicks_out.select("query", "url", "noisy_count").sort(
            ["query", "noisy_count", "url"], descending=[False, True, False]
        )
    ledger = _ledger(params, serp, cost, exact, paper, max_users, rng)
    return HistogramRelease(
        tables=tables, report=report, ledger=ledger, inputs=[bounded.input],
        figures={"plan": bounded.plan},
    )  # fmt: skip
