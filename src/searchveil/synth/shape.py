"""The shape of a search log as histograms over public bins: when users search (hour of day,
day of the period), how they group searches into sessions (session lengths, the gaps inside a
session), how much they search (events per user, events per query they hold), how they click
(clicks per query event, the rank of the first click). docs/synth.md, "The layout".

One definition, two sources. :func:`shape_counts` counts the histograms on a log's query events
— every event (``synth --like``: exact, not private) or each user's first events only (the
differentially private statistics of ``release ump`` and ``synth --epsilon``, which add noise
to exactly these counts, :mod:`searchveil.release.ump.schema`). :class:`Histogram` turns counts
(exact, or noisy and clipped at 0) into the laws :mod:`searchveil.synth.layout` draws from.

Every bin edge here is public: a constant of this module or the log's declared period, never
read from a log. A count is a sum over users of what each user contributes, so the counts of
several parties' users add up (a secure sum feeds the same layout).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.model import SearchLog, query_events

__all__ = [
    "CLICKS_MAX",
    "GAP_EDGES",
    "HOURS",
    "MONTH_DOMAIN",
    "MULTIPLICITY_MAX",
    "RANK_EDGES",
    "SESSION_MAX",
    "Histogram",
    "activity_edges",
    "day_number",
    "log_events",
    "month_domain",
    "rank_counts",
    "shape_counts",
    "shape_edges",
]

HOURS = 24
#: the public calendar domain of the month histogram (the period, when it is not declared)
MONTH_DOMAIN = (1990, 2039)
#: within-session gaps between consecutive query events, seconds: bins [e_i, e_{i+1}); the
#: last bin is [86400, 172800)
GAP_EDGES = (0, 1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300, 450, 600, 900, 1200, 1800,
             3600, 7200, 14400, 28800, 86400, 172800)  # fmt: skip
#: query events per session: 1 … SESSION_MAX (the last bin holds longer sessions)
SESSION_MAX = 32
#: clicks per query event: 0 … CLICKS_MAX (the last bin holds more)
CLICKS_MAX = 10
#: ranks of a click: 1 … 10 one by one, then [11, 21), [21, 51), [51, 101), [101, 501),
#: [501, 1001); "no rank" is a bin of its own (bin 0)
RANK_EDGES = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 21, 51, 101, 501, 1001)
#: query events per (user, query) holding: 1 … MULTIPLICITY_MAX (the last bin holds more)
MULTIPLICITY_MAX = 16

_EPOCH = dt.date(1970, 1, 1)


def day_number(d: dt.date) -> int:
    """Days since 1970-01-01."""
    return (d - _EPOCH).days


def month_domain() -> npt.NDArray[np.int64]:
    """The public month domain as YYYYMM integers."""
    years = np.arange(MONTH_DOMAIN[0], MONTH_DOMAIN[1] + 1, dtype=np.int64)
    return (years[:, None] * 100 + np.arange(1, 13, dtype=np.int64)[None, :]).ravel()


def activity_edges(max_events: int) -> npt.NDArray[np.int64]:
    """Bins of events per user, up to the per-user bound: 1 … 16 one by one, then widths
    growing by 25% (public: a function of the bound alone). Edges [e_i, e_{i+1})."""
    edges = list(range(1, min(max_events, 16) + 1))
    while edges[-1] < max_events:
        edges.append(min(max_events, int(np.ceil(edges[-1] * 1.25))))
    return np.asarray([*edges, max_events + 1], dtype=np.int64)


def shape_edges(name: str, *, max_events: int | None = None) -> npt.NDArray[np.int64]:
    """The bin edges of a shape histogram ([e_i, e_{i+1})), ``days`` and ``months`` excepted."""
    if name == "hours":
        return np.arange(HOURS + 1, dtype=np.int64)
    if name == "gaps":
        return np.asarray(GAP_EDGES, dtype=np.int64)
    if name == "sessions":
        return np.arange(1, SESSION_MAX + 2, dtype=np.int64)
    if name == "clicks":
        return np.arange(CLICKS_MAX + 2, dtype=np.int64)
    if name == "ranks":  # bin 0 is "no rank": edges [0, 1) stand for it
        return np.asarray((0, *RANK_EDGES), dtype=np.int64)
    if name == "multiplicity":
        return np.arange(1, MULTIPLICITY_MAX + 2, dtype=np.int64)
    if name == "activity":
        if max_events is None:
            raise InvalidParameterError("max_events", None, "the per-user bound of activity")
        return activity_edges(max_events)
    raise InvalidParameterError("statistic", name, "a shape histogram with fixed bins")


@dataclass(frozen=True)
class Histogram:
    """Counts over integer bins [lo_i, hi_i) (exact, or noisy and clipped at 0): a law to draw
    values from — a bin by its weight, then a value uniform within it."""

    lo: npt.NDArray[np.int64]
    hi: npt.NDArray[np.int64]
    counts: npt.NDArray[np.float64]

    @classmethod
    def of(cls, edges: npt.ArrayLike, counts: npt.ArrayLike) -> Histogram:
        e = np.asarray(edges, dtype=np.int64)
        c = np.clip(np.asarray(counts, dtype=np.float64), 0.0, None)
        if c.size != e.size - 1:
            raise InvalidParameterError("counts", c.size, f"{e.size - 1} bins")
        return cls(e[:-1].copy(), e[1:].copy(), c)

    @property
    def total(self) -> float:
        return float(self.counts.sum())

    def weights(self) -> npt.NDArray[np.float64]:
        """The bin probabilities (uniform when every count is 0: nothing to go on)."""
        t = self.total
        if t <= 0:
            return np.full(self.counts.size, 1.0 / max(self.counts.size, 1))
        return self.counts / t

    def mean(self) -> float:
        """Mean value under the law (a bin's mean is its midpoint)."""
        mid = (self.lo + self.hi - 1) / 2.0
        return float(np.dot(self.weights(), mid))

    def draw(self, n: int, gen: np.random.Generator) -> npt.NDArray[np.int64]:
        """``n`` values: a bin by weight, then uniform in [lo, hi)."""
        if n <= 0:
            return np.zeros(0, dtype=np.int64)
        b = gen.choice(self.counts.size, size=n, p=self.weights())
        width = self.hi[b] - self.lo[b]
        return self.lo[b] + np.floor(gen.random(n) * width).astype(np.int64)


def log_events(log: SearchLog) -> pl.DataFrame:
    """One row per query event (:func:`searchveil.model.query_events`): ``user, query, time,
    session, pos, clicks`` and ``rank`` (the rank of the event's first click; null without a
    click or a rank)."""
    return query_events(log, rank=True)


def _bin(values: npt.NDArray[np.int64], edges: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Counts of ``values`` in [e_i, e_{i+1}); values past the last edge go to the last bin."""
    idx = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, edges.size - 2)
    return np.bincount(idx[values >= edges[0]], minlength=edges.size - 1).astype(np.int64)


def _first_sessions(ev: pl.DataFrame, sessions: int | None) -> pl.DataFrame:
    """Events per session (``n``) for each user's first ``sessions`` sessions (``ev`` in
    (user, pos) order, as :func:`log_events` gives it: a session is a run of events)."""
    new = (pl.col("user") != pl.col("user").shift(1)) | (
        pl.col("session") != pl.col("session").shift(1)
    )
    runs = ev.select("user", new.fill_null(True).cum_sum().alias("run"))
    per = runs.group_by("run", maintain_order=True).agg(pl.col("user").first(), pl.len().alias("n"))
    if sessions is not None:
        first = (pl.col("user") != pl.col("user").shift(1)).fill_null(True)
        start = pl.when(first).then(pl.int_range(pl.len())).forward_fill()
        per = per.filter(pl.int_range(pl.len()) - start < sessions)
    return per


def _gaps(timed: pl.DataFrame) -> npt.NDArray[np.int64]:
    t = timed.select("user", "session", pl.col("time").dt.epoch("s").alias("t"))
    same = (pl.col("user") == pl.col("user").shift(1)) & (
        pl.col("session") == pl.col("session").shift(1)
    )
    g = t.select((pl.col("t") - pl.col("t").shift(1)).alias("g"), same.alias("same"))
    g = g.filter(pl.col("same").fill_null(False) & (pl.col("g") >= 0))
    return _bin(g.get_column("g").to_numpy(), shape_edges("gaps"))


def _months(timed: pl.DataFrame) -> npt.NDArray[np.int64]:
    t = timed.get_column("time")
    ym = (t.dt.year().cast(pl.Int64) * 100 + t.dt.month().cast(pl.Int64)).to_numpy()
    dom = month_domain()
    pos = np.searchsorted(dom, ym)
    ok = (pos < dom.size) & (dom[np.minimum(pos, dom.size - 1)] == ym)
    return np.bincount(pos[ok], minlength=dom.size).astype(np.int64)


def _days(timed: pl.DataFrame, period: tuple[int, int] | None) -> npt.NDArray[np.int64]:
    if period is None:
        raise InvalidParameterError("period", None, "(first day, last day) for days")
    d = timed.get_column("time").dt.date().cast(pl.Int64).to_numpy() - period[0]
    n = period[1] - period[0] + 1
    return np.bincount(d[(d >= 0) & (d < n)], minlength=n).astype(np.int64)


def _multiplicity(ev: pl.DataFrame, holdings: int | None) -> npt.NDArray[np.int64]:
    per = ev.group_by("user", "query").agg(pl.len().alias("n"), pl.col("pos").min())
    if holdings is not None:
        per = per.sort("user", "pos").filter(pl.int_range(pl.len()).over("user") < holdings)
    return _bin(per.get_column("n").to_numpy().astype(np.int64), shape_edges("multiplicity"))


def rank_counts(log: SearchLog, first: int | None = None) -> npt.NDArray[np.int64]:
    """Click rows by rank (bins of :data:`RANK_EDGES`; bin 0: no rank), each user's first
    ``first`` click rows only (all with None)."""
    clicks = log.df.filter(pl.col("url").is_not_null()).select("user", "rank", "row")
    if first is not None:
        clicks = clicks.sort("user", "row").filter(pl.int_range(pl.len()).over("user") < first)
    r = clicks.get_column("rank").fill_null(0).to_numpy().astype(np.int64)
    return _bin(r, shape_edges("ranks"))


def shape_counts(
    ev: pl.DataFrame,
    names: tuple[str, ...],
    *,
    period: tuple[int, int] | None = None,
    sessions: int | None = None,
    max_events: int | None = None,
    holdings: int | None = None,
) -> dict[str, npt.NDArray[np.int64]]:
    """Exact counts of the shape histograms ``names`` over the query events ``ev`` (columns of
    :func:`log_events`; already cut to each user's first events when bounded):

    * ``hours`` (events by hour of day), ``months`` (by month of :func:`month_domain`),
      ``days`` (by day of ``period`` = (first day, last day), day numbers), ``gaps`` (seconds
      between consecutive events of one session), ``clicks`` (events by clicks);
    * ``sessions``: sessions by their number of events (each user's first ``sessions`` sessions);
    * ``activity``: users by their number of events (bins of :func:`activity_edges`);
    * ``multiplicity``: (user, query) holdings by their number of events (each user's first
      ``holdings`` distinct queries).

    With ``ev`` cut to each user's first k events, one user adds at most k to any of them but
    ``activity`` (1), ``sessions`` (its bound) and ``multiplicity`` (its bound)."""
    has_time = ev.height > 0 and ev.get_column("time").null_count() < ev.height
    timed = ev.filter(pl.col("time").is_not_null()) if has_time else ev.clear()
    out: dict[str, npt.NDArray[np.int64]] = {}
    for name in names:
        if name == "hours":
            h = timed.get_column("time").dt.hour().cast(pl.Int64).to_numpy()
            out[name] = np.bincount(h, minlength=HOURS).astype(np.int64)
        elif name == "months":
            out[name] = _months(timed)
        elif name == "days":
            out[name] = _days(timed, period)
        elif name == "gaps":
            out[name] = _gaps(timed)
        elif name == "clicks":
            c = ev.get_column("clicks").cast(pl.Int64).to_numpy()
            out[name] = np.bincount(np.minimum(c, CLICKS_MAX), minlength=CLICKS_MAX + 1)
        elif name == "sessions":
            per = _first_sessions(ev, sessions).get_column("n").to_numpy().astype(np.int64)
            out[name] = _bin(per, shape_edges("sessions"))
        elif name == "activity":
            a = ev.group_by("user").len().get_column("len").to_numpy().astype(np.int64)
            out[name] = _bin(a, shape_edges("activity", max_events=max_events))
        elif name == "multiplicity":
            out[name] = _multiplicity(ev, holdings)
        else:
            raise InvalidParameterError("statistic", name, "a shape histogram")
    return out
