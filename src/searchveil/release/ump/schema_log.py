"""A same-schema log laid out from the DP statistics of :mod:`.schema_stats` (post-processing:
it reads nothing but :class:`~.schema_stats.SchemaStats` and the rng). docs/privacy/ump.md,
"Every column from a DP statistic"; the layout itself is :mod:`searchveil.synth.layout`.

1. **Users.** N users (the noisy ``activity`` total, or the number asked for), each with a
   number of distinct queries and of published ones drawn from ``head_profile``
   (:mod:`.schema_profile`), the distinct ones scaled so that the events add up to the noisy
   ``events`` total (or to ``rows`` rows); every count below is scaled by N / (noisy users)
   when N is asked for.
2. **Holdings** (a user holding a query, with its number of events): each published query's
   noisy holders (lifted to the ``head_share`` total), its events spread over them (the noisy
   event count); a published query pair (q, q') is a *unit* — two consecutive events of one
   user, never cut by a session boundary — and takes one holder and one event of each side;
   the tail fills each user's other queries: opaque tokens (``<6 characters>~t<n>``,
   synth/layout.py; the first character from ``tail_initials``) whose numbers of holders
   follow the ``tail`` law and whose holdings' events follow the ``multiplicity`` law.
3. **Dealing**: the published holdings into each user's published slots (brought to the
   head's holdings among the user's other queries), the tokens into the rest (the
   configuration model of :func:`~.generate.deal_tokens`: a user holds a query at most once).
4. **Events**: each user's holdings in random order (a holding's events apart, a unit's two
   together), cut into sessions and put in time by the layout.
5. **Clicks**: each published pair's noisy clicks on distinct events of its query, ranks from
   the pair's noisy rank histogram shrunk toward the global one (or the public SERP); the other
   events of a published query click a tail URL of it with the probability that brings the
   query to the global click rate, else are query-only rows; tail events click by the
   ``clicks`` law, on tail URLs (``http://tail-q<n>-r<rank>.invalid/``) at ranks of the
   ``ranks`` law.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.model import SearchLog
from searchveil.release.ump.generate import deal_tokens
from searchveil.release.ump.schema import SchemaParams
from searchveil.release.ump.schema_profile import initial_codes
from searchveil.release.ump.schema_stats import SchemaStats, draw_statistics
from searchveil.rng import RandomSource
from searchveil.synth.layout import (
    Columns,
    assemble,
    event_times,
    session_ids,
    tail_queries,
    tail_urls,
)
from searchveil.synth.shape import Histogram

__all__ = [
    "generate_schema_log",
    "laid_out_tables",
    "published_head",
    "same_schema_metrics",
    "same_schema_tables",
]

_I64 = npt.NDArray[np.int64]
_F64 = npt.NDArray[np.float64]
#: items dealt one by one before the others (the most held ones; each costs a pass over the
#: users, and a small population makes most items "large")
MAX_LARGE = 512


def _round(x: _F64, gen: np.random.Generator) -> _I64:
    """Randomized rounding (expectation preserved)."""
    f = np.floor(x)
    return (f + (gen.random(x.size) < (x - f))).astype(np.int64)


def _spread(n_items: _I64, extra: _I64, gen: np.random.Generator) -> _I64:
    """Per holding (items' holdings in order, ``n_items[i]`` of item i): 1 + its share of the
    item's ``extra`` events, spread uniformly."""
    total = int(n_items.sum())
    mult = np.ones(total, dtype=np.int64)
    has = (n_items > 0) & (extra > 0)
    if total and has.any():
        item = np.repeat(np.flatnonzero(has), extra[has])
        start = (np.cumsum(n_items) - n_items)[item]
        pick = start + np.floor(gen.random(item.size) * n_items[item]).astype(np.int64)
        mult += np.bincount(pick, minlength=total)
    return mult


def _head_holdings(
    stats: SchemaStats, scale: float, gen: np.random.Generator
) -> tuple[_I64, _I64, _I64]:
    """Step 2, the head: per item (head queries, then units) its holdings, and per holding its
    events; returns (holdings per item, events per head-query holding, units)."""
    head_q = stats.head.get_column("query")
    qp = stats.query_pairs
    units = _round(qp.get_column("count").to_numpy().astype(np.float64) * scale, gen)
    # events and holders a unit takes from each side that is a published query
    idx = {q: i for i, q in enumerate(head_q.to_list())}
    used = np.zeros(head_q.len(), dtype=np.int64)
    for side in ("query", "next_query"):
        for q, u in zip(qp.get_column(side).to_list(), units.tolist(), strict=True):
            if q in idx:
                used[idx[q]] += u
    # the pair step counted a holder only among its first d distinct queries: the head share
    # (every published query a user holds, up to 32) says how many holdings there are
    hq = stats.head.get_column("holders").to_numpy()
    share = float(np.dot(stats.head_rate, stats.activity.counts))
    lift = float(np.clip(share / hq.sum(), 1.0, 3.0)) if hq.sum() > 0 and share > 0 else 1.0
    h = _round(hq * lift * scale, gen)
    e = np.maximum(_round(stats.head.get_column("events").to_numpy() * lift * scale, gen), h)
    h_left = np.maximum(h - used, 0)
    e_left = np.maximum(e - used, h_left)
    head_mult = _spread(h_left, e_left - h_left, gen)
    return np.concatenate([h_left, units]), head_mult, units


def _tail_holdings(stats: SchemaStats, n_hold: int, gen: np.random.Generator) -> tuple[_I64, _I64]:
    """Step 2, the tail: tokens whose numbers of holders follow the ``tail`` law, ``n_hold``
    holdings in all (the last token cut to fit), and the events of each holding (the
    ``multiplicity`` law). Returns (holders per token, events per holding)."""
    tail_h = np.zeros(0, dtype=np.int64)
    if n_hold > 0 and stats.tail.total > 0:
        n_tok = max(1, int(round(n_hold / max(stats.tail.mean(), 1.0))))
        tail_h = np.maximum(stats.tail.draw(n_tok, gen), 1)
        while int(tail_h.sum()) < n_hold:
            tail_h = np.r_[tail_h, np.maximum(stats.tail.draw(n_tok // 4 + 1, gen), 1)]
        c = np.cumsum(tail_h)
        last = int(np.searchsorted(c, n_hold))  # the token that reaches n_hold
        tail_h = tail_h[: last + 1]
        tail_h[-1] -= int(c[last]) - n_hold
    elif n_hold > 0:
        tail_h = np.ones(n_hold, dtype=np.int64)
    return tail_h, np.maximum(stats.multiplicity.draw(int(tail_h.sum()), gen), 1)


def _profile(
    stats: SchemaStats, n: int, x_head: int, head_events: int, target: int,
    gen: np.random.Generator,
) -> tuple[_I64, _I64]:  # fmt: skip
    """Step 3's slots: each user's distinct queries k and published ones h (``head_profile``);
    k scaled so that the events add up to ``target`` (the head's ``head_events`` plus the tail's
    holdings at the ``multiplicity`` law's mean), h brought to the ``x_head`` head holdings
    (published among a user's other queries, in proportion to them, or taken in proportion to
    what they hold), every user ≥ 1 holding."""
    k, h = stats.profile.draw(n, gen)
    want = x_head + max(target - head_events, 0) / max(stats.multiplicity.mean(), 1.0)
    f = want / max(float(k.sum()), 1.0)
    if abs(f - 1.0) > 1e-9:
        k = np.maximum(_round((k * f).astype(np.float64), gen), 1)
        h = np.minimum(_round((h * min(f, 1.0)).astype(np.float64), gen), k)
    for _ in range(16):  # h to x_head: each round within every user's room
        d = x_head - int(h.sum())
        if d == 0:
            break
        if d > 0:  # more head holdings than slots: among the users' other queries
            room = k - h
            if not (room > 0).any():
                extra = _alloc(np.ones(n), d, gen)
                k, h = k + extra, h + extra
                break
            h = h + np.minimum(_alloc(room.astype(np.float64), d, gen), room)
        else:  # fewer: taken from users in proportion to what they hold
            h = h - np.minimum(_alloc(h.astype(np.float64), -d, gen), h)
    d = x_head - int(h.sum())
    if d > 0:
        extra = _alloc(np.ones(n), d, gen)
        k, h = k + extra, h + extra
    elif d < 0:  # one by one from random holders (rare: the rounds above leave a few)
        for u in gen.permutation(np.repeat(np.arange(n), h))[:-d]:
            h[u] -= 1
    return k, h


def _events(
    item: _I64, user: _I64, mult: _I64, n_head: int, n_units: int, gen: np.random.Generator
) -> tuple[_I64, _I64, npt.NDArray[np.bool_], _I64]:
    """Step 4: blocks (a holding's single events, a unit's pair) in random order per user,
    expanded. Returns per event: its user, its item (a unit's second event: item −1 − unit),
    whether it is joined to the previous one, and its unit's side (0 / 1; −1 otherwise)."""
    is_unit = (item >= n_head) & (item < n_head + n_units)
    reps = np.where(is_unit, 1, mult)
    b_item = np.repeat(item, reps)
    b_user = np.repeat(user, reps)
    b_len = np.where(np.repeat(is_unit, reps), 2, 1)
    order = np.argsort((b_user << np.int64(31)) | gen.integers(0, 1 << 31, b_user.size))
    b_item, b_user, b_len = b_item[order], b_user[order], b_len[order]
    ev_item = np.repeat(b_item, b_len)
    ev_user = np.repeat(b_user, b_len)
    start = np.cumsum(b_len) - b_len
    side = np.full(ev_item.size, -1, dtype=np.int64)
    two = np.flatnonzero(b_len == 2)
    side[start[two]] = 0
    side[start[two] + 1] = 1
    return ev_user, ev_item, side == 1, side


def _rank_of(law: Histogram, bins: _I64, gen: np.random.Generator) -> _I64:
    width = law.hi[bins] - law.lo[bins]
    return law.lo[bins] + np.floor(gen.random(bins.size) * width).astype(np.int64)


def _clicks(
    stats: SchemaStats, ev_q: _I64, key: _I64, scale: float, gen: np.random.Generator
) -> tuple[_I64, pl.Series, _I64, dict[str, Any]]:
    """Step 5: (event, url, rank) of every click (``ev_q``, ``key``: :func:`_click_keys`)."""
    head_q = stats.head.get_column("query").to_list()
    idx = {q: i for i, q in enumerate(head_q)}
    ranks = stats.ranks
    n_ev = ev_q.size
    ev_list, url_list, rank_list = [], [], []
    clicked = np.zeros(n_ev, dtype=bool)
    by_q = np.argsort(ev_q, kind="stable")
    bounds = np.searchsorted(ev_q[by_q], np.arange(-1, len(head_q) + 1))
    pairs = stats.pairs
    c = _round(pairs.get_column("clicks").to_numpy() * scale, gen)
    for p, (q, url) in enumerate(zip(pairs.get_column("query").to_list(),
                                     pairs.get_column("url").to_list(), strict=True)):  # fmt: skip
        i = idx.get(q)
        if i is None or c[p] == 0:
            continue
        evs = by_q[bounds[i + 1] : bounds[i + 2]]
        k = int(min(c[p], evs.size))
        if k == 0:
            continue
        chosen = gen.choice(evs, size=k, replace=False)
        w = stats.pair_ranks[p] / stats.pair_ranks[p].sum()
        ev_list.append(chosen)
        url_list.append(pl.Series([url] * k, dtype=pl.String))
        rank_list.append(_rank_of(ranks, gen.choice(w.size, size=k, p=w), gen))
        clicked[chosen] = True
    p0 = float(stats.clicks.weights()[0])
    on_head = ev_q >= 0
    n_q = np.bincount(ev_q[on_head], minlength=len(head_q)).astype(np.float64)
    c_q = np.bincount(ev_q[on_head & clicked], minlength=len(head_q)).astype(np.float64)
    pi = np.clip(((1 - p0) * n_q - c_q) / np.maximum(n_q - c_q, 1), 0, 1)
    more = np.flatnonzero(on_head & ~clicked)
    more = more[gen.random(more.size) < pi[ev_q[more]]]
    tail_ev = np.flatnonzero(~on_head)
    ccount = stats.clicks.draw(tail_ev.size, gen)
    w1 = stats.clicks.counts[1:]
    k_more = (Histogram(stats.clicks.lo[1:], stats.clicks.hi[1:], w1).draw(more.size, gen)
              if w1.sum() > 0 else np.ones(more.size, dtype=np.int64))  # fmt: skip
    for evs, k_clicks, owner in ((more, k_more, "h"), (tail_ev, ccount, "q")):
        e = np.repeat(evs, k_clicks)
        if e.size == 0:
            continue
        r = ranks.draw(e.size, gen)
        ev_list.append(e)
        url_list.append(tail_urls(owner, ev_q[e] if owner == "h" else key[e], r))
        rank_list.append(r)
    if not ev_list:
        return (np.zeros(0, dtype=np.int64), pl.Series([], dtype=pl.String),
                np.zeros(0, dtype=np.int64), {"clicks": 0})  # fmt: skip
    return (np.concatenate(ev_list), pl.concat(url_list), np.concatenate(rank_list),
            {"clicks": int(sum(x.size for x in ev_list))})  # fmt: skip


def generate_schema_log(
    stats: SchemaStats,
    *,
    rng: RandomSource,
    users: int | None = None,
    rows: int | None = None,
    columns: Columns = Columns(),
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The log of the module docstring and the generator's figures (public: functions of the
    statistics). ``users``/``rows``: the size asked for (default: the noisy ones)."""
    gen = rng.numpy_generator()
    n0 = max(stats.users, 1)
    n = users if users is not None else stats.users
    scale = n / n0
    rpe = float(np.dot(stats.clicks.weights(), np.maximum(stats.clicks.lo, 1)))
    target = int(round(rows / max(rpe, 1.0))) if rows is not None else int(
        round(stats.total_events * scale))  # fmt: skip
    empty = assemble(anon=np.zeros(0, np.int64), query=pl.Series([], dtype=pl.String),
                     time=None, click_event=np.zeros(0, np.int64),
                     click_url=pl.Series([], dtype=pl.String), click_rank=np.zeros(0, np.int64),
                     columns=columns)  # fmt: skip
    if n <= 0 or target <= 0:
        return empty, {"synthetic_users": 0, "events": 0, "rows": 0}
    xh, head_mult, units = _head_holdings(stats, scale, gen)
    head_events = int(head_mult.sum()) + 2 * int(units.sum())
    k, h = _profile(stats, n, int(xh.sum()), head_events, target, gen)
    ts = k - h
    tail_h, tail_mult = _tail_holdings(stats, int(ts.sum()), gen)
    x = np.concatenate([xh, tail_h])
    mult = np.concatenate([head_mult, np.full(int(units.sum()), 2, dtype=np.int64), tail_mult])
    figs = {"head_events": int(head_mult.sum()), "query_pair_units": int(units.sum()),
            "tail_tokens": int(tail_h.size), "tail_events": int(tail_mult.sum())}  # fmt: skip
    n_head, n_units = stats.head.height, stats.query_pairs.height
    item, user, rounds = _deal(xh, h, tail_h, ts, gen)
    # the multiplicities of each item's holdings, in the order the dealer placed them
    order = np.argsort(item, kind="stable")
    held = np.empty_like(mult)
    held[order] = mult[(np.cumsum(x) - x)[item[order]] + _rank_within(item[order])]
    ev_user, ev_item, joined, side = _events(item, user, held, n_head, n_units, gen)
    per_user = np.bincount(ev_user, minlength=n)
    sess = session_ids(per_user, stats.sessions, gen, joined=joined)
    times = event_times(ev_user, sess, stats.times, gen) if stats.times is not None else None
    ev_q, key = _click_keys(stats, ev_item, side, n_head, n_units)
    c_ev, c_url, c_rank, cfig = _clicks(stats, ev_q, key, scale, gen)
    query = _spell(stats, ev_item, side, n_head, n_units, gen)
    anon = gen.permutation(n).astype(np.int64) + 1
    log = assemble(anon=anon[ev_user], query=query, time=times, click_event=c_ev,
                   click_url=c_url, click_rank=c_rank, columns=columns)  # fmt: skip
    figs |= cfig | {"synthetic_users": int(n), "events": int(ev_user.size), "rows": log.height,
                    "repair_rounds": rounds, "tail_holders": int(tail_h.sum())}  # fmt: skip
    return log, figs


def _deal(
    xh: _I64, hs: _I64, xt: _I64, ts: _I64, gen: np.random.Generator
) -> tuple[_I64, _I64, int]:
    """Step 3: the head's holdings (published queries and units, ``xh`` per item) into the
    users' head slots ``hs``, the tail's (``xt`` per token) into their tail slots ``ts`` (the
    configuration model: a user holds an item once). Returns the item (tail tokens numbered
    after the head's) and user of every holding and the repair rounds."""
    i1, u1, r1 = deal_tokens(xh.copy(), hs, gen, max_large=MAX_LARGE)
    i2, u2, r2 = deal_tokens(xt.copy(), ts, gen, max_large=MAX_LARGE)
    return np.concatenate([i1, i2 + xh.size]), np.concatenate([u1, u2]), max(r1, r2)


def _alloc(
    w: npt.ArrayLike, total: int, gen: np.random.Generator, *, minimum: npt.ArrayLike = 0
) -> _I64:
    """``total`` units over users: ``minimum`` each first (if there are enough), the rest in
    proportion to ``w`` (floors, then the remainders drawn by their fractional parts)."""
    w = np.asarray(w, dtype=np.float64)
    n = w.size
    base = np.broadcast_to(np.asarray(minimum, dtype=np.int64), (n,)).copy()
    if base.sum() > total:
        base[:] = 0
    rest = total - int(base.sum())
    share = w * (rest / w.sum()) if w.sum() > 0 else np.full(n, rest / max(n, 1))
    fl = np.floor(share).astype(np.int64)
    left = rest - int(fl.sum())
    frac = share - fl
    if left > 0:
        p = frac / frac.sum() if frac.sum() > 0 else np.full(n, 1.0 / n)
        fl[gen.choice(n, size=min(left, int((p > 0).sum())), replace=False, p=p)] += 1
        left = rest - int(fl.sum())
        if left > 0:
            np.add.at(fl, gen.integers(0, n, left), 1)
    return base + fl


def _rank_within(sorted_items: _I64) -> _I64:
    """0-based position of each entry within its run of equal items."""
    if sorted_items.size == 0:
        return sorted_items
    first = np.r_[True, sorted_items[1:] != sorted_items[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(sorted_items.size), 0))
    return np.arange(sorted_items.size) - start


def _click_keys(
    stats: SchemaStats, ev_item: _I64, side: _I64, n_head: int, n_units: int
) -> tuple[_I64, _I64]:
    """Per event: the published query it is (index, −1 if none: a unit's side is resolved) and
    the number of its tail URLs (``tail-q<n>``: the tail token's number; a unit side that is
    not a published query: numbered after the tail tokens)."""
    ev_q = np.where(ev_item < n_head, ev_item, -1)
    key = ev_item - n_head - n_units
    unit = side >= 0
    if unit.any():
        qp = stats.query_pairs
        idx = {q: i for i, q in enumerate(stats.head.get_column("query").to_list())}
        u = ev_item[unit] - n_head
        left = np.array([idx.get(q, -1) for q in qp.get_column("query").to_list()], np.int64)
        right = np.array([idx.get(q, -1) for q in qp.get_column("next_query").to_list()],
                         np.int64)  # fmt: skip
        ev_q[unit] = np.where(side[unit] == 0, left[u], right[u])
        key[unit] = int(ev_item.max()) + 1 + 2 * u + side[unit]
    return ev_q, key


def _spell(
    stats: SchemaStats, ev_item: _I64, side: _I64, n_head: int, n_units: int,
    gen: np.random.Generator,
) -> pl.Series:  # fmt: skip
    """The query string of every event: a published query, a query pair's side, or a tail
    token (numbered from 0 in order of the tail items; its first character drawn from the
    ``tail_initials`` law)."""
    head_q = stats.head.get_column("query")
    qp = stats.query_pairs
    tail = ev_item >= n_head + n_units
    unit = side >= 0
    head = ~tail & ~unit
    out = pl.Series("query", [None] * ev_item.size, dtype=pl.String)
    parts = []
    if head.any():
        parts.append((np.flatnonzero(head), head_q.gather(ev_item[head])))
    if unit.any():
        u = ev_item[unit] - n_head
        left = qp.get_column("query").gather(u)
        right = qp.get_column("next_query").gather(u)
        s = pl.select(pl.when(pl.Series(side[unit] == 0)).then(left).otherwise(right)).to_series()
        parts.append((np.flatnonzero(unit), s))
    if tail.any():
        tok = ev_item[tail] - n_head - n_units
        first = initial_codes(stats.initials, int(tok.max()) + 1, gen)
        parts.append((np.flatnonzero(tail), tail_queries(tok, initials=first[tok])))
    for where, values in parts:
        out = out.scatter(where, values.cast(pl.String))
    return out


def same_schema_tables(
    log: SearchLog,
    params: SchemaParams,
    *,
    published: pl.DataFrame,
    queries: pl.DataFrame | None,
    bounded: pl.DataFrame,
    serp: pl.DataFrame | None,
    rng: RandomSource,
    phase: Callable[[str], Callable[[], None]],
    columns: Columns = Columns(),
    users: int | None = None,
    rows: int | None = None,
) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:
    """The statistics of ``params`` drawn on ``log`` given the pair step's outputs
    (``published``: ``query, url, noisy_count``; ``queries``: ``query, noisy_count`` or None
    for ZEALOUS pairs, whose queries are those of the published pairs with their holders
    summed; ``bounded``: what it counted), and the log laid out from them. Tables: ``log``
    (first), ``queries`` (+ ``noisy_events``), ``counts`` (``x_ij``, + ``noisy_clicks``),
    ``ranks`` (per published pair, unless a SERP gives them), ``query_pairs``,
    ``statistics``. Returns them and the private report figures."""
    pairs, queries = published_head(published, queries)
    st, stats, report = draw_statistics(log, params, queries=queries, pairs=pairs,
                                        bounded_pairs=bounded, serp=serp, rng=rng,
                                        phase=phase)  # fmt: skip
    tables, report["generator"] = laid_out_tables(
        st, stats, pairs=pairs, queries=queries, rng=rng, phase=phase, columns=columns,
        users=users, rows=rows,
    )  # fmt: skip
    return tables, report


def published_head(
    published: pl.DataFrame, queries: pl.DataFrame | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The pair step's published pairs (``query, url, noisy_count``, sorted) and queries
    (``query, noisy_count``, sorted; ``None``: ZEALOUS pairs, whose queries are those of the
    published pairs with their noisy holders, clipped at 0, summed)."""
    pairs = published.select("query", "url", "noisy_count").sort("query", "url")
    if queries is None:
        queries = pairs.group_by("query").agg(pl.col("noisy_count").clip(lower_bound=0).sum())
    return pairs, queries.select("query", "noisy_count").sort("query")


def laid_out_tables(
    st: dict[str, pl.DataFrame], stats: SchemaStats, *, pairs: pl.DataFrame,
    queries: pl.DataFrame, rng: RandomSource, phase: Callable[[str], Callable[[], None]],
    columns: Columns = Columns(), users: int | None = None, rows: int | None = None,
) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:  # fmt: skip
    """The log laid out from the post-processed statistics and the release's tables (``st``:
    the statistics' tables, :func:`~.schema_stats.statistics_tables`; ``pairs``, ``queries``:
    :func:`published_head`) — post-processing, shared with the CELS joint version; returns the
    tables and the generator's figures."""
    done = phase("laying out the log (synthetic users, sessions, times, clicks)")
    out, figs = generate_schema_log(stats, rng=rng, users=users, rows=rows, columns=columns)
    done()
    counts = pairs.select("query", "url", pl.col("noisy_count").clip(lower_bound=0).alias("x_ij"))
    tables = {
        "log": out,
        "queries": queries.join(st["queries_events"], on="query").sort(
            ["noisy_count", "query"], descending=[True, False]),
        "counts": counts.join(st["counts_clicks"], on=["query", "url"]).filter(
            pl.col("x_ij") > 0),
        **({"ranks": st["ranks"]} if "ranks" in st else {}),
        "query_pairs": st["query_pairs"],
        "head_profile": st["head_profile"],
        "statistics": st["statistics"],
    }  # fmt: skip
    return tables, figs


def same_schema_metrics(log: SearchLog, out: pl.DataFrame, columns: Columns) -> dict[str, Any]:
    """The private utility figures of a laid-out log against its input (report only): sizes,
    the share of query-only rows, and the total-variation distances of the hour-of-day and
    click-rank distributions of the rows."""
    df = log.df
    u, t, r = columns.url, columns.time, columns.rank
    o_qonly = out.get_column(u).is_null().cast(pl.Float64).mean() if u and out.height else None
    res: dict[str, Any] = {
        "input_rows": df.height, "output_rows": out.height, "input_users": log.n_users,
        "output_users": out.get_column(columns.user).n_unique() if out.height else 0,
        "input_query_only_share": df.get_column("url").is_null().cast(pl.Float64).mean(),
        "output_query_only_share": o_qonly,
        "user_ids": "synthetic",
    }  # fmt: skip
    if t and out.height and df.get_column("time").null_count() < df.height:
        hi = np.bincount(df.get_column("time").drop_nulls().dt.hour().to_numpy(), minlength=24)
        ot = out.get_column(t).drop_nulls().str.to_datetime("%Y-%m-%d %H:%M:%S")
        ho = np.bincount(ot.dt.hour().to_numpy(), minlength=24)
        res["hour_tv"] = _tv(hi, ho) if ho.sum() else None
    if r and out.height:
        ri = df.filter(pl.col("url").is_not_null()).get_column("rank").fill_null(0).to_numpy()
        ro = out.filter(pl.col(u).is_not_null()).get_column(r).fill_null(0).to_numpy() if u else ri
        res["rank_tv"] = _tv(np.bincount(np.clip(ri, 0, 1000), minlength=1001),
                             np.bincount(np.clip(ro, 0, 1000), minlength=1001))  # fmt: skip
    return res


def _tv(a: npt.ArrayLike, b: npt.ArrayLike) -> float | None:
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.sum() <= 0 or y.sum() <= 0:
        return None
    return float(0.5 * np.abs(x / x.sum() - y / y.sum()).sum())
