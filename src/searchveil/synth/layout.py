"""Lay out a search log from statistics: the one place that turns users' query events into the
rows of a log — sessions, times, ranks, query-only rows, opaque tail tokens and the input's own
columns. docs/synth.md, "The layout".

Both generators use it; what differs is where the statistics come from:

* ``synth --like`` (:mod:`searchveil.synth.generate`): laws fitted exactly on a real log —
  test data, not private;
* ``release ump`` and ``synth --epsilon`` (:mod:`searchveil.release.ump.schema_log`): laws
  drawn from differentially private histograms, so everything laid out is post-processing.

A generator decides *what* each user searches (a query per event, the clicks of each event);
the layout decides *how* it is laid out:

1. :func:`session_ids` cuts each user's events into sessions whose lengths follow the session
   law (a pair of events that must stay together — a published query pair — is never cut);
2. :func:`event_times` puts the sessions in time: a start per session from the day and
   hour-of-day laws (sorted within the user, each at least :data:`SESSION_SEPARATION` seconds
   after the end of the previous one, so a 30-minute session rule reads them back as
   sessions), then the events of a session apart by gaps from the within-session gap law;
3. :func:`assemble` writes one row per click and one query-only row (no URL, no rank) per
   event without a click, all rows of an event at its time, sorted by (user, time), under the
   output's column names (:class:`Columns`).

The randomness is a numpy generator derived from the injected source (post-processing only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.synth.shape import HOURS, Histogram

__all__ = [
    "SESSION_SEPARATION",
    "TAIL_QUERY_MARK",
    "Columns",
    "TimeLaw",
    "assemble",
    "event_times",
    "session_ids",
    "tail_queries",
    "tail_urls",
]

#: seconds between the end of a session and the start of the next one of the same user, at
#: least (over the readers' default 30-minute session gap)
SESSION_SEPARATION = 1801
#: opaque tokens standing for unpublished queries: ``<6 letters>~t<n>`` (the letters a fixed
#: hash of n, so that tokens sort among real queries, not all after "t" — the DP log draws the
#: first character from a noisy histogram of how unpublished queries start: a digit, a letter
#: or "-" for any other; ``~t<n>`` marks them); their URLs are
#: ``http://tail-q<n>-r<rank>.invalid/`` (``http://tail-h<k>-r<rank>.invalid/`` for an
#: unpublished URL of the k-th published query; ``.invalid`` is a reserved domain)
TAIL_QUERY_MARK = "~t"
_I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Columns:
    """The output's column names (``None``: the column is not written). The default is the AOL
    layout, ``AnonID Query QueryTime ItemRank ClickURL``."""

    user: str = "AnonID"
    query: str = "Query"
    time: str | None = "QueryTime"
    rank: str | None = "ItemRank"
    url: str | None = "ClickURL"

    @classmethod
    def of_input(cls, mapping: object | None, *, has_header: bool = True) -> Columns:
        """The columns of an input read with ``mapping`` (a reader's ``ColumnMapping``; None is
        the AOL layout). Without a header the input's columns have no names: the AOL names are
        used. A combined "rank click" column (SogouQ) is written as a rank column."""
        if mapping is None or not has_header:
            return cls()
        get = getattr
        rank = get(mapping, "rank", None) or get(mapping, "rank_click", None)
        return cls(user=get(mapping, "user"), query=get(mapping, "query"),
                   time=get(mapping, "time", None), rank=rank,
                   url=get(mapping, "url", None))  # fmt: skip

    def names(self) -> list[str]:
        return [c for c in (self.user, self.query, self.time, self.rank, self.url) if c]


@dataclass(frozen=True)
class TimeLaw:
    """When sessions start and how far apart the events of a session are: ``days`` over day
    offsets from ``first_day`` (days since 1970-01-01), ``hours`` over 0 … 23, ``gaps`` in
    seconds."""

    first_day: int
    days: Histogram
    hours: Histogram
    gaps: Histogram

    def __post_init__(self) -> None:
        if self.hours.counts.size != HOURS:
            raise InvalidParameterError("hours", self.hours.counts.size, f"{HOURS} bins")


def _draw_lengths(need: _I64, lengths: Histogram, gen: np.random.Generator) -> tuple[_I64, _I64]:
    """Session lengths drawn i.i.d. for each user until they cover the user's events; returns
    (user of each length, length), users in order, each user's last length cut to fit."""
    mean = max(lengths.mean(), 1.0)
    users_out: list[_I64] = []
    lens_out: list[_I64] = []
    todo = np.flatnonzero(need > 0)
    left = need.copy()
    while todo.size:
        k = np.ceil(left[todo] / mean * 1.25).astype(np.int64) + 2
        u = np.repeat(todo, k)
        drawn = np.maximum(lengths.draw(int(k.sum()), gen), 1)
        gs = np.cumsum(k) - k  # where each user's draws start
        cum = np.cumsum(drawn)
        prev = cum - drawn - np.repeat(cum[gs] - drawn[gs], k)  # drawn before, in the user
        keep = prev < left[u]
        cut = np.minimum(drawn, left[u] - prev)
        users_out.append(u[keep])
        lens_out.append(cut[keep])
        covered = np.zeros(need.size, dtype=np.int64)
        np.add.at(covered, u[keep], cut[keep])
        left = left - covered
        todo = np.flatnonzero(left > 0)
    if not users_out:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    u = np.concatenate(users_out)
    ln = np.concatenate(lens_out)
    order = np.argsort(u, kind="stable")
    return u[order], ln[order]


def session_ids(
    events_per_user: npt.ArrayLike,
    lengths: Histogram,
    gen: np.random.Generator,
    *,
    joined: npt.NDArray[np.bool_] | None = None,
) -> _I64:
    """The session (0-based within its user) of each event, events grouped by user in order
    (``events_per_user[u]`` of them for user u). Lengths are i.i.d. draws of ``lengths``; an
    event with ``joined`` set stays in its predecessor's session."""
    n = np.asarray(events_per_user, dtype=np.int64)
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    u, ln = _draw_lengths(n, lengths, gen)
    user_start = np.cumsum(n) - n
    # session starts as positions within the user: cumulative lengths before each session
    first = np.r_[True, u[1:] != u[:-1]]
    cum = np.cumsum(ln)
    base = np.maximum.accumulate(np.where(first, cum - ln, 0))
    starts = user_start[u] + (cum - ln - base)
    new = np.zeros(total, dtype=bool)
    new[starts] = True
    if joined is not None:
        new &= ~np.asarray(joined, dtype=bool)
        new[user_start[n > 0]] = True
    owner = np.repeat(np.arange(n.size, dtype=np.int64), n)
    c = np.cumsum(new)
    return c - c[user_start[owner]]


def event_times(user: _I64, session: _I64, law: TimeLaw, gen: np.random.Generator) -> _I64:
    """Epoch seconds of each event (events grouped by ``user`` in order, ``session`` as
    :func:`session_ids` gives it): session starts from the day and hour laws, sorted within the
    user and kept :data:`SESSION_SEPARATION` apart; events of a session spaced by gap draws."""
    total = user.size
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    new_s = np.r_[True, (user[1:] != user[:-1]) | (session[1:] != session[:-1])]
    s_idx = np.cumsum(new_s) - 1
    n_s = int(s_idx[-1]) + 1
    s_user = user[new_s]
    gaps = law.gaps.draw(total, gen)
    gaps[new_s] = 0
    cg = np.cumsum(gaps)
    offset = cg - cg[np.flatnonzero(new_s)][s_idx]
    duration = np.zeros(n_s, dtype=np.int64)
    np.maximum.at(duration, s_idx, offset)
    start = ((law.first_day + law.days.draw(n_s, gen)) * 86400 + law.hours.draw(n_s, gen) * 3600
             + gen.integers(0, 3600, n_s))  # fmt: skip
    # chronological within the user (the session index order), then kept apart
    order = np.lexsort((start, s_user))
    start = start[order]
    first = np.r_[True, s_user[1:] != s_user[:-1]]
    step = duration + SESSION_SEPARATION
    cs = np.cumsum(step)
    c = cs - step - np.maximum.accumulate(np.where(first, cs - step, 0))  # Σ before, in user
    group = np.cumsum(first) - 1
    big = np.int64(1) << np.int64(40)
    key = start - c + group * big
    start = np.maximum.accumulate(key) - group * big + c
    return start[s_idx] + offset


def tail_queries(ids: npt.ArrayLike, *, initials: npt.ArrayLike | None = None) -> pl.Series:
    """Opaque query tokens ``<6 letters>~t<n>`` (unpublished queries, marked as such; the
    letters are a fixed hash of n). ``initials``: the first character of each token instead
    (ASCII codes: a drawn law of how unpublished queries start, so that tokens sort among
    published queries as they would)."""
    n = np.asarray(ids, dtype=np.int64)
    h = n.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x2545F4914F6CDD1D)
    h ^= h >> np.uint64(29)
    letters = np.stack([((h >> np.uint64(5 * i)) % np.uint64(26)).astype(np.uint8) + 97
                        for i in range(6)], axis=1)  # fmt: skip
    if initials is not None:
        letters[:, 0] = np.asarray(initials, dtype=np.uint8)
    word = pl.Series("w", np.ascontiguousarray(letters).view("S6").ravel().astype("U6"))
    s = pl.Series("q", n)
    return pl.select(pl.format("{}" + TAIL_QUERY_MARK + "{}", word, s)).to_series()


def tail_urls(owner: str, ids: npt.ArrayLike, ranks: npt.ArrayLike) -> pl.Series:
    """Opaque URL tokens ``http://tail-<owner><n>-r<rank>.invalid/``: the same (owner, rank)
    always gives the same URL, so different users click the same tail pairs."""
    s = pl.Series("i", np.asarray(ids, dtype=np.int64))
    r = pl.Series("r", np.asarray(ranks, dtype=np.int64))
    return pl.select(pl.format("http://tail-" + owner + "{}-r{}.invalid/", s, r)).to_series()


def assemble(
    *,
    anon: _I64,
    query: pl.Series,
    time: _I64 | None,
    click_event: _I64,
    click_url: pl.Series,
    click_rank: _I64,
    columns: Columns,
) -> pl.DataFrame:
    """The rows of a log: per event (``anon`` its user id, ``query`` its string, ``time`` its
    epoch seconds or None), one row per click (``click_event`` the event of each click, with
    its ``click_url`` and ``click_rank``, 0 = no rank) and one query-only row (no URL, no rank)
    per event without a click; rows sorted by (user, time), an event's clicks in their given
    order, under ``columns``."""
    n_ev = anon.size
    if query.len() != n_ev or (time is not None and time.size != n_ev):
        raise InvalidParameterError("events", n_ev, "one query (and time) per event")
    has = np.zeros(n_ev, dtype=bool)
    has[click_event] = True
    lone = np.flatnonzero(~has)
    ev = np.concatenate([lone, click_event.astype(np.int64)])
    order = np.arange(ev.size, dtype=np.int64)
    sort_time = time[ev] if time is not None else np.zeros(ev.size, dtype=np.int64)
    perm = np.lexsort((order, ev, sort_time, anon[ev]))
    ev = ev[perm]
    n_lone = lone.size
    is_click = perm >= n_lone
    ci = np.where(is_click, perm - n_lone, 0)
    cols: dict[str, pl.Series] = {columns.user: pl.Series(anon[ev], dtype=pl.Int64)}
    cols[columns.query] = query.gather(ev).cast(pl.String)
    if columns.time is not None:
        if time is None:
            cols[columns.time] = pl.Series([None] * ev.size, dtype=pl.String)
        else:
            cols[columns.time] = pl.from_epoch(pl.Series(time[ev]), time_unit="s").dt.strftime(
                "%Y-%m-%d %H:%M:%S"
            )
    hc = pl.Series(is_click)
    if columns.rank is not None:
        rk = click_rank[ci] if click_rank.size else np.zeros(ev.size, dtype=np.int64)
        cols[columns.rank] = pl.select(
            pl.when(hc & (pl.Series(rk) > 0)).then(pl.Series(rk)).otherwise(None)
        ).to_series()
    if columns.url is not None:
        url = click_url.cast(pl.String).gather(ci) if click_url.len() else pl.Series(
            [None] * ev.size, dtype=pl.String)  # fmt: skip
        cols[columns.url] = pl.select(pl.when(hc).then(url).otherwise(None)).to_series()
    return pl.DataFrame({k: v.alias(k) for k, v in cols.items()})
