"""The differentially private statistics of a same-schema log (what :mod:`.schema` defines):
counted on each user's bounded contribution, discrete Laplace noise (ZEALOUS for the query
pairs), written as tables of the release, and post-processed into the laws the layout draws
from (:class:`SchemaStats`). docs/privacy/ump.md, "Every column from a DP statistic".

Order of the draws (each step reads the log and the earlier *published* outputs only —
adaptive composition): size (``events``, ``activity``), the period (``months``, unless
declared), the shape (``days``, ``hours``, ``gaps``, ``sessions``, ``clicks``, ``ranks``,
``multiplicity``), the head (``head_events`` and ``pair_ranks`` on the pair step's published
queries and pairs), ``query_pairs`` (ZEALOUS), then ``tail``, ``head_share``, ``head_profile``
and ``tail_initials`` (given everything published; the last two: :mod:`.schema_profile`).
"""

from __future__ import annotations

import calendar
import dataclasses
import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.bounding import bound_contributions
from searchveil.errors import InternalError
from searchveil.model import PAIR_SEP, SearchLog
from searchveil.release.counts import BoundedCounts, count_by
from searchveil.release.korolova.release import single_user_counts
from searchveil.release.ump.monotone import decreasing, increasing
from searchveil.release.ump.schema import (
    HEAD_HOLDINGS,
    HOLDINGS,
    INITIALS,
    MAX_REPEATS,
    MAX_SESSIONS,
    MONTHS_PER_USER,
    PERIOD_BETA,
    PROFILE_EDGES,
    SAMPLE_EVENTS,
    TAIL_EDGES,
    TAIL_ITEMS,
    SchemaParams,
)
from searchveil.release.ump.schema_profile import (
    HeadProfile,
    head_profile_counts,
    head_profile_law,
    tail_initials_counts,
)
from searchveil.release.zealous.release import release_zealous_counts
from searchveil.rng import RandomSource
from searchveil.synth.layout import TimeLaw
from searchveil.synth.shape import (
    Histogram,
    log_events,
    month_domain,
    rank_counts,
    shape_counts,
    shape_edges,
)

__all__ = [
    "SchemaStats",
    "decreasing",
    "draw_statistics",
    "exact_statistics",
    "holdings",
    "published_strings",
    "query_pair_items",
    "released_period",
    "statistics_tables",
]

_I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SchemaStats:
    """The statistics after post-processing (clipped at 0, shrunk toward global laws): public,
    a function of the release's noisy outputs only. ``head``: ``query, holders, events``;
    ``pairs``: ``query, url, holders, clicks`` with ``pair_ranks`` (one row of rank-bin
    weights per pair, bins of the ``ranks`` law); ``query_pairs``: ``query, next_query,
    count``; ``times`` None when no period was released."""

    total_events: int
    activity: Histogram
    sessions: Histogram
    clicks: Histogram
    ranks: Histogram
    multiplicity: Histogram
    tail: Histogram
    times: TimeLaw | None
    head: pl.DataFrame
    pairs: pl.DataFrame
    pair_ranks: npt.NDArray[np.float64]
    query_pairs: pl.DataFrame
    #: published-query holdings per user, by bin of the ``activity`` law (non-decreasing)
    head_rate: npt.NDArray[np.float64]

    #: the noisy number of users (see :func:`_users`)
    users: int
    #: users by (distinct queries, published queries) (:mod:`.schema_profile`)
    profile: HeadProfile
    #: the first characters of unpublished queries (noisy, clipped; bins of ``INITIALS``)
    initials: npt.NDArray[np.float64]


def _label_rows(name: str, lo: _I64, hi: _I64, noisy: _I64, labels: list[str]) -> pl.DataFrame:
    return pl.DataFrame({
        "statistic": [name] * lo.size, "bin": labels,
        "lo": pl.Series(lo, dtype=pl.Int64), "hi": pl.Series(hi, dtype=pl.Int64),
        "noisy_count": pl.Series(noisy, dtype=pl.Int64),
    })  # fmt: skip


def _iso(day: int) -> str:
    return (dt.date(1970, 1, 1) + dt.timedelta(days=int(day))).isoformat()


def _period_of(months: _I64, noisy: _I64, scale: float) -> tuple[int, int] | None:
    """The released period: from the first to the last month whose noisy count of users
    exceeds λ·ln(|months|/β) (an empty month passes with probability ≤ β/|months|)."""
    tau = scale * math.log(months.size / PERIOD_BETA)
    ok = np.flatnonzero(noisy > tau)
    if ok.size == 0:
        return None
    a, b = int(months[ok[0]]), int(months[ok[-1]])
    first = dt.date(a // 100, a % 100, 1)
    last = dt.date(b // 100, b % 100, calendar.monthrange(b // 100, b % 100)[1])
    return (first - dt.date(1970, 1, 1)).days, (last - dt.date(1970, 1, 1)).days


def _month_users(ev: pl.DataFrame) -> _I64:
    """Users per month of :func:`month_domain`, each user's first distinct months only."""
    t = ev.filter(pl.col("time").is_not_null())
    year, month = pl.col("time").dt.year().cast(pl.Int64), pl.col("time").dt.month()
    ym = t.select("user", "pos", (year * 100 + month.cast(pl.Int64)).alias("ym"))
    firsts = ym.sort("user", "pos").unique(["user", "ym"], keep="first", maintain_order=True)
    firsts = firsts.filter(pl.int_range(pl.len()).over("user") < MONTHS_PER_USER)
    dom = month_domain()
    pos = np.searchsorted(dom, firsts.get_column("ym").to_numpy())
    ok = (pos < dom.size) & (
        dom[np.minimum(pos, dom.size - 1)] == firsts.get_column("ym").to_numpy()
    )
    return np.bincount(pos[ok], minlength=dom.size).astype(np.int64)


def holdings(ev: pl.DataFrame) -> pl.DataFrame:
    """Each user's distinct queries (``user, query, pos`` of the first event, ``n`` events,
    ``k`` 0-based order of first occurrence within the user), sorted by (user, k)."""
    h = ev.group_by("user", "query").agg(pl.col("pos").min(), pl.len().alias("n"))
    h = h.sort("user", "pos")
    first = pl.col("user") != pl.col("user").shift(1)
    start = pl.when(first.fill_null(True)).then(pl.int_range(pl.len())).forward_fill()
    return h.with_columns(k=(pl.int_range(pl.len()) - start).cast(pl.Int64))


def _head_extras(
    hold: pl.DataFrame, log: SearchLog, queries: pl.DataFrame, pairs: pl.DataFrame,
    bounded_pairs: pl.DataFrame, d: int,
) -> tuple[_I64, _I64, _I64]:  # fmt: skip
    """Exact ``head_events``: per published query (in ``queries`` order) and pair (``pairs``
    order), Σ over the users counting it of min(events, r) − 1 (``hold``: :func:`holdings`,
    the whole log); and each counted (user, pair)'s first-click rank bin (pairs × bins)."""
    extra = (pl.col("n").clip(upper_bound=MAX_REPEATS) - 1).sum().alias("x")
    qx = (hold.filter(pl.col("k") < d).join(queries.select("query"), on="query", how="semi")
          .group_by("query").agg(extra))  # fmt: skip
    q_extra = queries.select("query").join(qx, on="query", how="left").get_column("x")
    clicks = log.df.filter(pl.col("url").is_not_null()).select(
        "user", "query", "url", "rank", "row"
    )
    held = bounded_pairs.select("user", "query", "url").join(
        pairs.select("query", "url"), on=["query", "url"], how="semi")  # fmt: skip
    per_p = (clicks.join(held, on=["user", "query", "url"], how="semi")
             .sort("row").group_by("user", "query", "url", maintain_order=True)
             .agg(pl.len().alias("n"), pl.col("rank").first().alias("rank")))  # fmt: skip
    px = per_p.group_by("query", "url").agg((pl.col("n").clip(upper_bound=MAX_REPEATS) - 1).sum()
                                            .alias("x"))  # fmt: skip
    p_extra = pairs.select("query", "url").join(px, on=["query", "url"], how="left").get_column("x")
    edges = shape_edges("ranks")
    pid = pairs.select("query", "url").with_row_index("pid")
    pr = per_p.join(pid, on=["query", "url"])
    r = pr.get_column("rank").fill_null(0).to_numpy().astype(np.int64)
    b = np.clip(np.searchsorted(edges, r, side="right") - 1, 0, edges.size - 2)
    ranks = np.zeros((pairs.height, edges.size - 1), dtype=np.int64)
    np.add.at(ranks, (pr.get_column("pid").to_numpy().astype(np.int64), b), 1)
    return (q_extra.fill_null(0).to_numpy().astype(np.int64),
            p_extra.fill_null(0).to_numpy().astype(np.int64), ranks)  # fmt: skip


def query_pair_items(ev: pl.DataFrame) -> pl.DataFrame:
    """Query pairs (Götz §2.1; :func:`searchveil.model.items` ``query_pairs``) from the query
    events: consecutive events of one user in one session."""
    same = (pl.col("user") == pl.col("user").shift(-1)) & (
        pl.col("session") == pl.col("session").shift(-1)
    )
    nxt = pl.col("query").shift(-1)
    return ev.select("user", "query", nxt.alias("next_query"), same.alias("same")).filter(
        pl.col("same").fill_null(False)
    ).select(
        "user", (pl.col("query") + PAIR_SEP + pl.col("next_query")).alias("item"),
        pl.int_range(pl.len()).over("user").cast(pl.Int64).alias("pos"), "query", "next_query",
    )  # fmt: skip


def _query_pairs(
    log: SearchLog, ev: pl.DataFrame, params: SchemaParams, rng: RandomSource
) -> tuple[pl.DataFrame, Any]:
    """ZEALOUS over each user's first m_q distinct query pairs (Götz §7.3's pairs)."""
    # its share is part of the release's cost (checked once, by the pair step's release, and
    # charged whole to a dataset budget): no budget check of its own
    zp = dataclasses.replace(params.query_pair_params(), budget=None)
    it = query_pair_items(ev)
    bounded = bound_contributions(it, max_per_user=zp.m, distinct=True)
    counts = count_by(bounded, ["item", "query", "next_query"], distinct_users=True)
    bc = BoundedCounts(counts={"items": counts},
                       figures={"users": log.n_users, "items": it.height,
                                "items_after_bounding": bounded.height},
                       input=log.ledger_input())  # fmt: skip
    rel = release_zealous_counts(
        bc, zp, rng=rng, single_user=single_user_counts(it, counts, "item")
    )
    table = rel.tables["items"].select("query", "next_query", "noisy_count").sort(
        "query", "next_query")  # fmt: skip
    return table, rel.report["single_user"]


def published_strings(
    queries: pl.DataFrame, pairs: pl.DataFrame, query_pairs: pl.DataFrame
) -> pl.Series:
    """Every published query string (of the released queries, pairs and query pairs): what
    ``tail`` and ``head_share`` take as given."""
    return pl.concat([queries.get_column("query"), pairs.get_column("query"),
                      query_pairs.get_column("query"),
                      query_pairs.get_column("next_query")]).unique()  # fmt: skip


def _tail(hold: pl.DataFrame, published: pl.Series) -> _I64:
    """Unpublished queries by holders (bins of ``TAIL_EDGES``), each user's first distinct
    unpublished queries only (``hold``: :func:`holdings`)."""
    firsts = hold.join(pl.DataFrame({"query": published}), on="query", how="anti")
    firsts = firsts.filter(pl.int_range(pl.len()).over("user") < TAIL_ITEMS)
    h = firsts.group_by("query").len().get_column("len").to_numpy().astype(np.int64)
    edges = np.asarray([*TAIL_EDGES, 2 * TAIL_EDGES[-1]], dtype=np.int64)
    idx = np.clip(np.searchsorted(edges, h, side="right") - 1, 0, edges.size - 2)
    return np.bincount(idx, minlength=edges.size - 1).astype(np.int64)


def _head_share(hold: pl.DataFrame, published: pl.Series, edges: _I64, max_events: int) -> _I64:
    """Per bin of activity (the user's events, capped at E), the published queries its users
    hold (each user's first ``HEAD_HOLDINGS``)."""
    act = hold.group_by("user").agg(pl.col("n").sum().clip(upper_bound=max_events).alias("a"))
    held = hold.join(pl.DataFrame({"query": published}), on="query", how="semi")
    head = held.group_by("user").len("h").with_columns(pl.col("h").clip(upper_bound=HEAD_HOLDINGS))
    j = act.join(head, on="user", how="left").with_columns(pl.col("h").fill_null(0))
    a = j.get_column("a").to_numpy().astype(np.int64)
    b = np.clip(np.searchsorted(edges, a, side="right") - 1, 0, edges.size - 2)
    w = j.get_column("h").to_numpy().astype(np.float64)
    return np.bincount(b, weights=w, minlength=edges.size - 1).astype(np.int64)


def _multiplicity(hold: pl.DataFrame, salt: int) -> _I64:
    """Holdings by events (bins of ``multiplicity``), ``HOLDINGS`` of each user's holdings
    chosen uniformly at random (a hash of (user, query) keyed by a random ``salt``: a user's
    first holdings have had the longest time to be repeated, so a sample of them would
    overstate the repeats; a user's choice depends on no other user)."""
    key = pl.struct("user", "query").hash(seed=salt)
    keyed = hold.select("user", "n", key.alias("key"))
    pick = keyed.sort("user", "key").filter(pl.int_range(pl.len()).over("user") < HOLDINGS)
    n = pick.get_column("n").to_numpy().astype(np.int64)
    e = shape_edges("multiplicity")
    idx = np.clip(np.searchsorted(e, n, side="right") - 1, 0, e.size - 2)
    return np.bincount(idx, minlength=e.size - 1).astype(np.int64)


def _shrunk(extra: npt.NDArray[np.float64], holders: npt.NDArray[np.float64], prior: float,
            scale: float) -> npt.NDArray[np.float64]:  # fmt: skip
    """Extra events per holder: the noisy ratio where the holders outweigh the noise, the
    global prior where they do not (weight h²/(h² + 2λ²))."""
    w = holders**2 / (holders**2 + 2 * scale**2)
    ratio = np.where(holders > 0, np.clip(extra, 0, None) / np.maximum(holders, 1), prior)
    return np.clip(w * ratio + (1 - w) * prior, 0, MAX_REPEATS - 1)


@dataclass
class _Counts:
    """The exact statistics of one log (the data-dependent half of :func:`draw_statistics`):
    its query events, their first ``E`` and ``S`` per user, and the holdings."""

    log: SearchLog
    params: SchemaParams
    salt: int = 0

    def __post_init__(self) -> None:
        self.ev = log_events(self.log)
        self.ev_e = self.ev.filter(pl.col("pos") < self.params.max_events)
        self.ev_s = self.ev.filter(pl.col("pos") < SAMPLE_EVENTS)
        self.hold = holdings(self.ev)
        self.hold_e = holdings(self.ev_e)

    def exact(
        self, name: str, *, period: tuple[int, int] | None = None,
        queries: pl.DataFrame | None = None, pairs: pl.DataFrame | None = None,
        bounded_pairs: pl.DataFrame | None = None, published: pl.Series | None = None,
    ) -> _I64:  # fmt: skip
        """The exact vector of statistic ``name`` (``period``, the published ``queries``,
        ``pairs`` and ``published`` strings: earlier outputs, fixed here)."""
        p = self.params
        if name == "events":
            return np.asarray([self.ev_e.height], dtype=np.int64)
        if name == "activity":
            return shape_counts(self.ev_e, ("activity",), max_events=p.max_events)[name]
        if name == "months":
            return _month_users(self.ev_e)
        if name in ("days", "hours", "gaps", "clicks"):
            return shape_counts(self.ev_s, (name,), period=period)[name]
        if name == "sessions":
            return shape_counts(self.ev_e, (name,), sessions=MAX_SESSIONS)[name]
        if name == "multiplicity":
            return _multiplicity(self.hold, self.salt)
        if name == "ranks":
            return rank_counts(self.log, SAMPLE_EVENTS)
        assert queries is not None and pairs is not None and bounded_pairs is not None
        if name in ("head_events", "pair_ranks"):
            qx, px, pr = _head_extras(self.hold, self.log, queries, pairs, bounded_pairs,
                                      p.head_queries)  # fmt: skip
            return np.r_[qx, px] if name == "head_events" else pr.ravel()
        assert published is not None
        if name == "tail":
            return _tail(self.hold, published)
        if name == "head_share":
            edges = shape_edges("activity", max_events=p.max_events)
            return _head_share(self.hold, published, edges, p.max_events)
        if name == "head_profile":
            return head_profile_counts(self.hold_e, published, p.max_events)
        if name == "tail_initials":
            return tail_initials_counts(self.hold, published)
        raise InternalError(f"no statistic {name!r}")


def exact_statistics(
    log: SearchLog, params: SchemaParams, names: tuple[str, ...], *, salt: int = 0,
    **given: Any,
) -> dict[str, _I64]:  # fmt: skip
    """The exact vectors of the statistics ``names`` (``given``: the earlier outputs each
    needs — ``period``, ``queries``, ``pairs``, ``bounded_pairs``, ``published``): what the
    noise is added to, for the neighbour checks of the tests."""
    c = _Counts(log, params, salt)
    return {n: c.exact(n, **given) for n in names}


def _rows(name: str, noisy: _I64, period: tuple[int, int] | None, max_events: int) -> pl.DataFrame:
    """The ``statistics`` table's rows of one histogram (its public bins and noisy counts)."""
    if name == "events":
        return _label_rows(name, np.zeros(1, np.int64), np.zeros(1, np.int64), noisy, ["total"])
    if name == "months":
        dom = month_domain()
        return _label_rows(name, dom, dom + 1, noisy, [f"{m // 100}-{m % 100:02d}" for m in dom])
    if name == "days":
        assert period is not None
        lo = np.arange(period[0], period[1] + 1, dtype=np.int64)
        return _label_rows(name, lo, lo + 1, noisy, [_iso(int(d)) for d in lo])
    if name in ("activity", "head_share"):
        e = shape_edges("activity", max_events=max_events)
    elif name == "tail":
        e = np.asarray([*TAIL_EDGES, 2 * TAIL_EDGES[-1]], dtype=np.int64)
    elif name == "tail_initials":
        i = np.arange(len(INITIALS) + 1, dtype=np.int64)
        return _label_rows(name, i, i + 1, noisy, [*INITIALS, "other"])
    else:
        e = shape_edges(name)
    labels = ["none" if (name == "ranks" and a == 0) else str(a) for a in e[:-1]]
    return _label_rows(name, e[:-1], e[1:], noisy, labels)


def draw_statistics(
    log: SearchLog,
    params: SchemaParams,
    *,
    queries: pl.DataFrame,
    pairs: pl.DataFrame,
    bounded_pairs: pl.DataFrame,
    serp: pl.DataFrame | None,
    rng: RandomSource,
    phase: Callable[[str], Callable[[], None]],
) -> tuple[dict[str, pl.DataFrame], SchemaStats, dict[str, Any]]:
    """Every statistic of :mod:`.schema` (module docstring for the order). ``queries``
    (``query, noisy_count``) and ``pairs`` (``query, url, noisy_count``) are the pair step's
    published outputs; ``bounded_pairs`` (``user, query, url``) what it counted. Returns the
    tables (``statistics``, ``ranks``, ``query_pairs``, and the extra ``noisy_events`` /
    ``noisy_clicks`` columns of ``queries`` / ``counts``), the post-processed statistics and
    the private report figures."""
    done = phase("size, period and shape statistics (noisy histograms)")
    c = _Counts(log, params, int(rng.words(1)[0] >> np.uint64(1)))
    noisy: dict[str, _I64] = {}
    given: dict[str, Any] = {"queries": queries, "pairs": pairs, "bounded_pairs": bounded_pairs}

    def draw(name: str) -> _I64:
        noisy[name] = params.noise(name).release(c.exact(name, **given), rng)
        return noisy[name]

    draw("events")
    draw("activity")
    period = params.period
    if period is None:
        draw("months")
        period = released_period(params, noisy["months"])
    given["period"] = period
    for name in ("days", "hours", "gaps", "sessions", "clicks", "ranks", "multiplicity"):
        if name != "days" or period is not None:
            draw(name)
    done()
    done = phase("head: noisy events per published query, clicks and ranks per published pair")
    draw("head_events")
    if not params.serp:
        draw("pair_ranks")
    done()
    done = phase("query pairs (ZEALOUS), head share by activity, the unpublished tail")
    qp_table, qp_single = _query_pairs(log, c.ev, params, rng)
    given["published"] = published_strings(queries, pairs, qp_table)
    draw("tail")
    draw("head_share")
    draw("head_profile")
    draw("tail_initials")
    done()
    tables, stats = statistics_tables(params, noisy, period, queries=queries, pairs=pairs,
                                      query_pairs=qp_table, serp=serp)  # fmt: skip
    report = {"period_released": None if period is None else [_iso(period[0]), _iso(period[1])],
              "query_pairs_single_user": qp_single,
              "exact_events_bounded": c.ev_e.height}  # fmt: skip
    return tables, stats, report


def released_period(params: SchemaParams, noisy_months: _I64) -> tuple[int, int] | None:
    """The period released by the noisy ``months`` histogram (post-processing: the months whose
    noisy count of users exceeds λ·ln(|months|/β)); None when no month passes."""
    return _period_of(month_domain(), noisy_months, params.noise("months").effective_scale)


def statistics_tables(
    params: SchemaParams, noisy: dict[str, _I64], period: tuple[int, int] | None, *,
    queries: pl.DataFrame, pairs: pl.DataFrame, query_pairs: pl.DataFrame,
    serp: pl.DataFrame | None,
) -> tuple[dict[str, pl.DataFrame], SchemaStats]:  # fmt: skip
    """The release's tables and the post-processed laws from the noisy vectors alone
    (``noisy``: statistic → its noisy vector; ``head_events`` holds the published ``queries``
    then ``pairs``, ``pair_ranks`` pairs × rank bins; ``query_pairs``: the published query
    pairs, ``query, next_query, noisy_count``): post-processing, shared with the CELS joint
    version (whose noisy vectors are secure sums)."""
    qp_table, head = query_pairs, noisy["head_events"]
    q_noisy, p_noisy = head[: queries.height], head[queries.height :]
    n_bins = shape_edges("ranks").size - 1
    ranks_noisy = (
        noisy["pair_ranks"].reshape(pairs.height, n_bins) if "pair_ranks" in noisy else None
    )
    stats = _post_process(params, noisy, period, queries, pairs, q_noisy, p_noisy, ranks_noisy,
                          serp, qp_table, int(noisy["events"][0]))  # fmt: skip
    skip = ("head_events", "pair_ranks", "head_profile")  # tables of their own
    order = [n for n in params.names() if n in noisy and n not in skip]
    tables: dict[str, pl.DataFrame] = {
        "statistics": pl.concat([_rows(n, noisy[n], period, params.max_events) for n in order]),
        "query_pairs": qp_table,
        "head_profile": _profile_rows(noisy["head_profile"], params.max_events),
        "queries_events": queries.select("query").with_columns(
            noisy_events=queries.get_column("noisy_count") + pl.Series(q_noisy)),
        "counts_clicks": pairs.select("query", "url").with_columns(
            noisy_clicks=pairs.get_column("noisy_count") + pl.Series(p_noisy)),
    }  # fmt: skip
    if ranks_noisy is not None:
        r_edges = shape_edges("ranks")
        n_b = r_edges.size - 1
        at = np.repeat(np.arange(pairs.height), n_b)
        tables["ranks"] = pl.DataFrame({
            "query": pairs.get_column("query").gather(at),
            "url": pairs.get_column("url").gather(at),
            "rank_from": np.tile(r_edges[:-1], pairs.height),
            "rank_to": np.tile(r_edges[1:], pairs.height),
            "noisy_count": ranks_noisy.ravel(),
        }).sort("query", "url", "rank_from")  # fmt: skip
    return tables, stats


def _profile_rows(noisy: _I64, max_events: int) -> pl.DataFrame:
    """The ``head_profile`` table: one row per cell (users with ``distinct_from`` …
    ``distinct_to`` − 1 distinct queries of which ``published_from`` … ``published_to`` − 1
    published), its noisy count."""
    ke = shape_edges("activity", max_events=max_events)
    he = np.asarray(PROFILE_EDGES, dtype=np.int64)
    kb = np.repeat(np.arange(ke.size - 1), he.size - 1)
    hb = np.tile(np.arange(he.size - 1), ke.size - 1)
    return pl.DataFrame({"distinct_from": ke[kb], "distinct_to": ke[kb + 1],
                         "published_from": he[hb], "published_to": he[hb + 1],
                         "noisy_count": pl.Series(noisy, dtype=pl.Int64)})  # fmt: skip


def _total(params: SchemaParams, total: int, activity: _I64) -> int:
    """The log's events: the noisy total and the total the noisy activity histogram implies
    (users per bin × the bin's midpoint), weighted by the inverse of their noise variances
    (two DP estimates of one figure: post-processing), at least 0."""
    e = shape_edges("activity", max_events=params.max_events)
    mid = (e[:-1] + e[1:] - 1) / 2.0
    v1 = params.noise("events").variance
    v2 = params.noise("activity").variance * float((mid**2).sum())
    est = (total / v1 + float(np.dot(activity, mid)) / v2) / (1 / v1 + 1 / v2)
    return max(int(round(est)), 0)


def _users(raw: _I64, total_events: int, activity: Histogram) -> int:
    """The noisy number of users: the raw sum of the noisy activity histogram, unless the
    events total over the mean activity says more (a small log, whose histogram is mostly
    noise and clipped away), at least 1."""
    alt = total_events / max(activity.mean(), 1.0)
    return max(int(round(max(float(raw.sum()), alt))), 1)


def _post_process(
    params: SchemaParams, noisy: dict[str, _I64], period: tuple[int, int] | None,
    queries: pl.DataFrame, pairs: pl.DataFrame, q_noisy: _I64, p_noisy: _I64,
    ranks_noisy: _I64 | None, serp: pl.DataFrame | None, qp_table: pl.DataFrame, total: int,
) -> SchemaStats:  # fmt: skip
    """The laws of :class:`SchemaStats` from the noisy outputs (and the public SERP) only."""

    def fitted(name: str, edges: npt.NDArray[np.int64]) -> Histogram:
        return Histogram.of(edges, decreasing(noisy[name], np.diff(edges)))

    mult = fitted("multiplicity", shape_edges("multiplicity"))
    mid = (mult.lo + mult.hi - 1) / 2.0
    w = mult.weights()
    prior = float(np.dot(w, np.minimum(mid, MAX_REPEATS) - 1))  # extra events per holding, ≤ r
    lift = float(np.dot(w, mid - 1)) / prior if prior > 0 else 1.0  # uncapped / capped extras
    hq = np.clip(queries.get_column("noisy_count").to_numpy().astype(np.float64), 0, None)
    lam = params.noise("head_events").effective_scale
    rq = _shrunk(q_noisy.astype(np.float64), hq, prior, lam) * lift
    head = pl.DataFrame({"query": queries.get_column("query"), "holders": hq,
                         "events": hq * (1 + rq)})  # fmt: skip
    hp = np.clip(pairs.get_column("noisy_count").to_numpy().astype(np.float64), 0, None)
    rp = _shrunk(p_noisy.astype(np.float64), hp, prior, lam) * lift
    pairs_t = pl.DataFrame({"query": pairs.get_column("query"), "url": pairs.get_column("url"),
                            "holders": hp, "clicks": hp * (1 + rp)})  # fmt: skip
    ranks = Histogram.of(shape_edges("ranks"), noisy["ranks"])
    n_b = ranks.counts.size
    g = ranks.weights()
    if ranks_noisy is not None:
        lam_r = params.noise("pair_ranks").effective_scale
        pr = np.clip(ranks_noisy - 2 * lam_r, 0, None) + lam_r * n_b * g[None, :]
    elif serp is not None and pairs.height:
        pos = pairs.select("query", "url").join(serp.select("query", "url", "rank"),
                                                on=["query", "url"], how="left")  # fmt: skip
        r = pos.get_column("rank").to_numpy()
        known = ~np.isnan(r.astype(np.float64))
        b = np.clip(np.searchsorted(ranks.lo, np.nan_to_num(r, nan=0).astype(np.int64),
                                    side="right") - 1, 0, n_b - 1)  # fmt: skip
        pr = np.tile(g, (pairs.height, 1))
        pr[known] = 0.0
        pr[np.flatnonzero(known), b[known]] = 1.0
    else:
        pr = np.tile(g, (pairs.height, 1))
    times = None
    if period is not None:
        days = noisy.get("days", np.ones(period[1] - period[0] + 1, dtype=np.int64))
        times = TimeLaw(
            first_day=period[0],
            days=Histogram.of(np.arange(days.size + 1), days),
            hours=Histogram.of(shape_edges("hours"), noisy["hours"]),
            gaps=Histogram.of(shape_edges("gaps"), noisy["gaps"]),
        )
    t_edges = np.asarray([*TAIL_EDGES, 2 * TAIL_EDGES[-1]], dtype=np.int64)
    users_b = np.clip(noisy["activity"], 0, None).astype(np.float64)
    activity = fitted("activity", shape_edges("activity", max_events=params.max_events))
    t_events = _total(params, total, noisy["activity"])
    return SchemaStats(
        total_events=t_events, users=_users(noisy["activity"], t_events, activity),
        activity=activity,
        sessions=fitted("sessions", shape_edges("sessions")),
        clicks=fitted("clicks", shape_edges("clicks")),
        ranks=ranks, multiplicity=mult, tail=fitted("tail", t_edges), times=times,
        head=head, pairs=pairs_t, pair_ranks=pr,
        query_pairs=qp_table.rename({"noisy_count": "count"}).with_columns(
            pl.col("count").clip(lower_bound=0)),
        head_rate=increasing(np.clip(noisy["head_share"], 0, None) / np.maximum(users_b, 1),
                             users_b),
        profile=head_profile_law(noisy["head_profile"], params.max_events,
                                 params.noise("head_profile").variance),
        initials=np.clip(noisy["tail_initials"], 0, None).astype(np.float64),
    )  # fmt: skip
