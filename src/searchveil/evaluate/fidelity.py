"""Fidelity of a same-schema release: how far the columns of a released log are from the
original's (issue 42, item 4; docs/evaluation.md, "Fidelity of a same-schema log").

A *same-schema release* is a row-level log with users: ``release ump``'s ``log.tsv`` (today
``AnonID Query ClickURL Count``), a k-anonymous log, a synthetic log (``synth``, AOL columns).
Each figure below computes one property of the rows the same way on the original and on the
release and gives the distance between the two (0 = the same). One function per figure:

* :func:`hour_of_day` — total variation distance (TV, ½ Σ_h |p_h − q_h|) between the
  distributions of the rows' hour of day (0–23, from ``QueryTime``);
* :func:`click_rank` — TV between the distributions of ``ItemRank`` over click rows (a URL and
  a rank; each rank value its own category);
* :func:`session_lengths` — TV between the distributions of the number of query events per
  session (sessions by :func:`searchveil.model.add_sessions`: the log's ``SessionID`` if it has
  one, else a new session after a gap of more than 30 minutes; query events by
  :func:`searchveil.model.query_events`), with the first Wasserstein distance (in queries) and
  both means beside it — TV says how much probability mass is on the wrong lengths, W1 how far
  it is off;
* :func:`query_only_share` — |s_R − s_O|, s the share of rows without a ``ClickURL``;
* :func:`substitution_map` — MAP@5 of query substitution learned on the release against the one
  learned on the original (Götz §7.3; :mod:`searchveil.evaluate.substitution`, reused), from
  query pairs of one of two definitions (:class:`PairDefinition`): **co-occurrence** (ordered
  pairs of distinct queries of one user among the user's first 8 distinct queries in string
  order, pairs of at least 2 users: :func:`~searchveil.evaluate.substitution.user_query_pairs`,
  the definition of the MAP 0.009 in docs/ump-reproduction.md) or **session** (consecutive
  query events of one session, Götz's own: :func:`searchveil.model.items`). 1 = the release
  suggests what the original does.

Rows. A row is a line of the log (AOL: one per click, one per query event without a click); a
release row with a count column (``Count``) stands for that many rows. A column that a release
does not have (or that is empty in every row) makes the figures that need it *not a number*:
their status is ``"not in the release"`` (``"not in the original"`` likewise), never a 0.

These figures read the original (private) log: they are for the data holder (``evaluate``),
never part of a release.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import polars as pl

from searchveil.errors import InputFormatError
from searchveil.evaluate._release import (
    COUNT_COLUMNS,
    QUERY_COLUMNS,
    TIME_COLUMNS,
    URL_COLUMNS,
    USER_COLUMNS,
)
from searchveil.evaluate.substitution import evaluate_substitution, user_query_pairs
from searchveil.model import InputInfo, SearchLog, add_sessions, items, query_events
from searchveil.validate import check_int, check_positive, parse_choice

__all__ = [
    "RANK_COLUMNS",
    "SESSION_COLUMNS",
    "FIGURES",
    "Status",
    "PairDefinition",
    "Figure",
    "LogColumns",
    "log_columns",
    "release_columns",
    "total_variation",
    "wasserstein_1",
    "hour_of_day",
    "click_rank",
    "session_lengths",
    "query_only_share",
    "substitution_map",
    "fidelity_figures",
]

RANK_COLUMNS = ("ItemRank", "rank")
SESSION_COLUMNS = ("SessionID", "session")
#: the keys of :func:`fidelity`'s result, in the order the report shows them
FIGURES = (
    "hour_of_day",
    "click_rank",
    "session_lengths",
    "query_only_share",
    "substitution_cooccurrence",
    "substitution_session",
)
#: lengths / ranks shown one by one in a figure's details; the rest summed in one "more" bin
SHOWN = 10


class Status(StrEnum):
    MEASURED = "measured"
    NOT_IN_RELEASE = "not in the release"
    NOT_IN_ORIGINAL = "not in the original"


class PairDefinition(StrEnum):
    """Which query pairs substitution is learned from (see the module docstring)."""

    COOCCURRENCE = "cooccurrence"
    SESSION = "session"


@dataclass(frozen=True)
class Figure:
    """One fidelity figure: its ``value`` (a distance, or MAP for substitution) when
    ``status`` is ``measured``, else ``None`` and the ``reason``. ``details`` holds the two
    sides' distributions; ``result`` the underlying computation where there is one (the whole
    :func:`~searchveil.evaluate.substitution.evaluate_substitution` result), not in JSON."""

    name: str
    distance: str
    definition: str
    status: Status
    value: float | None = None
    reason: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "applicable": self.status == Status.MEASURED,
            "status": self.status.value,
            "value": self.value,
            "distance": self.distance,
            "definition": self.definition,
        }
        if self.reason is not None:
            out["reason"] = self.reason
        return out | self.details


@dataclass(frozen=True)
class LogColumns:
    """A log's rows in the columns the figures read: ``user`` (String), ``query``, ``time``
    (Datetime or null), ``rank`` (Int64 or null), ``url`` (String or null), ``session`` (Int64,
    null without times) and ``weight`` (the rows a line stands for); ``has`` names which of
    ``time``, ``rank``, ``url``, ``session`` the log carries (``session_id``: its sessions are
    a SessionID column's), ``side`` is ``original`` or ``release``."""

    frame: pl.DataFrame
    has: frozenset[str]
    side: str

    def missing(self, column: str) -> Status | None:
        """The status of a figure that needs ``column``, or None if the log has it."""
        if column in self.has:
            return None
        return Status.NOT_IN_RELEASE if self.side == "release" else Status.NOT_IN_ORIGINAL


def _present(df: pl.DataFrame, col: str) -> bool:
    return col in df.columns and df.get_column(col).null_count() < df.height


def log_columns(log: SearchLog) -> LogColumns:
    """The original log's columns: its rows as read, its sessions as read (the project's rule),
    weight 1; ``url`` is carried unless the reader was told there is no URL column."""
    df = log.df.select(
        pl.col("user").cast(pl.String),
        "query",
        pl.col("time").cast(pl.Datetime("us")),
        pl.col("rank").cast(pl.Int64),
        "url",
        pl.col("session").cast(pl.Int64),
        pl.lit(1, pl.Int64).alias("weight"),
    )
    has = {c for c in ("time", "rank") if _present(df, c)}
    if log.info.columns.get("url", "url") is not None:
        has.add("url")
    if log.info.columns.get("session") is not None:
        has |= {"session", "session_id"}
    elif "time" in has:
        has.add("session")
    return LogColumns(df, frozenset(has), "original")


def _first(columns: list[str], candidates: tuple[str, ...]) -> str | None:
    return next((c for c in candidates if c in columns), None)


def _empty_as_null(col: str) -> pl.Expr:
    c = pl.col(col).cast(pl.String)
    return pl.when(c.str.strip_chars() == "").then(None).otherwise(c)


def release_columns(df: pl.DataFrame, *, gap_minutes: float = 30.0) -> LogColumns:
    """A released same-schema table's columns (AOL names or canonical ones: ``AnonID``/``user``,
    ``Query``/``query``, ``QueryTime``/``time``, ``ItemRank``/``rank``, ``ClickURL``/``url``,
    ``SessionID``, a count column such as ``Count``). Rows are ordered by user and time (a
    release's row order is sorted or random, never the input's; ties keep the release's
    order) and split into sessions by
    :func:`searchveil.model.add_sessions` (its ``SessionID`` if it has one, else the gap)."""
    gap = check_positive("gap_minutes", gap_minutes)
    cols = df.columns
    usr, q = _first(cols, USER_COLUMNS), _first(cols, QUERY_COLUMNS)
    if usr is None or q is None:
        raise InputFormatError(
            "release", f"not a same-schema log: no user or query column in {cols}"
        )
    tcol, rcol = _first(cols, TIME_COLUMNS), _first(cols, RANK_COLUMNS)
    ucol, ccol = _first(cols, URL_COLUMNS), _first(cols, COUNT_COLUMNS)
    scol = _first(cols, SESSION_COLUMNS)
    if tcol is None:
        time = pl.lit(None, pl.Datetime("us"))
    elif df.schema[tcol] == pl.String:
        time = _empty_as_null(tcol).str.to_datetime(strict=False).cast(pl.Datetime("us"))
    else:
        time = pl.col(tcol).cast(pl.Datetime("us"))
    weight = (
        pl.col(ccol).cast(pl.Float64, strict=False).round(0).cast(pl.Int64).fill_null(0).clip(0)
        if ccol is not None
        else pl.lit(1, pl.Int64)
    )
    frame = df.select(
        pl.col(usr).cast(pl.String).alias("user"),
        pl.col(q).cast(pl.String).alias("query"),
        time.alias("time"),
        (_empty_as_null(rcol).cast(pl.Int64, strict=False) if rcol else pl.lit(None, pl.Int64))
        .alias("rank"),
        (_empty_as_null(ucol) if ucol else pl.lit(None, pl.String)).alias("url"),
        weight.alias("weight"),
        *([pl.col(scol).cast(pl.String).alias("_session_raw")] if scol else []),
    )  # fmt: skip
    has = {c for c in ("time", "rank") if _present(frame, c)}
    if ucol is not None:
        has.add("url")
    if "time" in has or scol is not None:
        # stable: rows of one user at one time keep the release's order (the only order of
        # two queries typed in the same second; sorting them by query would invent one)
        order = ["user", "time"] if "time" in has else ["user", "_session_raw"]
        frame = frame.sort(order, nulls_last=True, maintain_order=True).with_row_index("row")
        frame = add_sessions(frame, gap_minutes=gap).drop("row")
        has |= {"session", "session_id"} if scol is not None else {"session"}
    else:
        frame = frame.with_columns(pl.lit(None, pl.Int64).alias("session"))
    return LogColumns(frame, frozenset(has), "release")


# -- distances --------------------------------------------------------------------------------
def _shares(df: pl.DataFrame, key: str) -> pl.DataFrame:
    """``key, share``: the weight of each key over the total (empty if the total is 0)."""
    g = df.group_by(key).agg(pl.col("weight").sum().alias("w")).filter(pl.col("w") > 0)
    total = g.get_column("w").sum()
    return g.select(key, (pl.col("w") / total).alias("share")).sort(key)


def total_variation(p: pl.DataFrame, q: pl.DataFrame, key: str) -> float:
    """TV distance ½ Σ_k |p_k − q_k| of two ``key, share`` distributions (each summing to 1);
    a key absent from one side has share 0 there."""
    j = p.join(q, on=key, how="full", coalesce=True, suffix="_r").fill_null(0.0)
    return 0.5 * float((j.get_column("share") - j.get_column("share_r")).abs().sum())


def wasserstein_1(p: pl.DataFrame, q: pl.DataFrame, key: str) -> float:
    """First Wasserstein distance Σ_k |P(X ≤ k) − Q(X ≤ k)| of two ``key, share``
    distributions over the integers (the area between the two CDFs)."""
    keys = sorted(set(p.get_column(key).to_list()) | set(q.get_column(key).to_list()))
    if not keys:
        return 0.0
    grid = np.arange(keys[0], keys[-1] + 1)

    def cdf(d: pl.DataFrame) -> np.ndarray:
        mass = np.zeros(len(grid))
        for k, s in d.select(key, "share").iter_rows():
            mass[int(k) - keys[0]] += s
        return np.cumsum(mass)

    return float(np.abs(cdf(p) - cdf(q))[:-1].sum())


def _binned(p: pl.DataFrame, key: str, shown: int = SHOWN) -> list[list[Any]]:
    """``[[k, share], ...]`` for k = 1..shown and ``[f"{shown + 1}+", share]`` for the rest."""
    d = dict(p.select(key, "share").iter_rows())
    rest = sum(s for k, s in d.items() if k > shown)
    return [[k, d.get(k, 0.0)] for k in range(1, shown + 1)] + [[f"{shown + 1}+", rest]]


def _not_measured(name: str, distance: str, definition: str, status: Status, why: str) -> Figure:
    return Figure(name, distance, definition, status, None, f"{status.value}: {why}")


def _check(
    original: LogColumns, release: LogColumns, column: str, aol: str
) -> tuple[Status, str] | None:
    """(status, why) when either side lacks ``column`` (the release first, saying when the
    original lacks it too), else None."""
    rel, orig = release.missing(column), original.missing(column)
    if rel is None and orig is None:
        return None
    why = f"no {aol} (or empty in every row)"
    if rel is not None and orig is not None:
        why += "; the original has none either"
    return (rel or orig or Status.NOT_IN_RELEASE), why


# -- the figures ------------------------------------------------------------------------------
TV = "total variation"


def hour_of_day(original: LogColumns, release: LogColumns) -> Figure:
    """TV between the hour-of-day distributions of the two logs' rows (rows weighted by their
    count; rows without a time left out). Details: the 24 shares of each side."""
    definition = "rows by the hour of their QueryTime (0–23), each log's shares; TV distance"
    miss = _check(original, release, "time", "QueryTime")
    if miss is not None:
        return _not_measured("hour_of_day", TV, definition, *miss)
    hour = pl.col("time").dt.hour().cast(pl.Int64).alias("hour")
    o, r = (
        _shares(s.frame.filter(pl.col("time").is_not_null()).select(hour, "weight"), "hour")
        for s in (original, release)
    )

    def by_hour(d: pl.DataFrame) -> list[float]:
        m = dict(d.iter_rows())
        return [float(m.get(h, 0.0)) for h in range(24)]

    details = {"original": by_hour(o), "release": by_hour(r)}
    return Figure("hour_of_day", TV, definition, Status.MEASURED, total_variation(o, r, "hour"),
                  details=details)  # fmt: skip


def click_rank(original: LogColumns, release: LogColumns) -> Figure:
    """TV between the ItemRank distributions of the click rows (a URL and a rank; weighted by
    count); each rank value is its own category. Details: shares of ranks 1–10 and above."""
    definition = "click rows (a ClickURL and an ItemRank) by ItemRank, each value a category; TV"
    miss = _check(original, release, "rank", "ItemRank") or _check(
        original, release, "url", "ClickURL"
    )
    if miss is not None:
        return _not_measured("click_rank", TV, definition, *miss)
    o, r = (
        _shares(s.frame.filter(pl.col("url").is_not_null() & pl.col("rank").is_not_null()), "rank")
        for s in (original, release)
    )
    if o.is_empty() or r.is_empty():
        st = Status.NOT_IN_RELEASE if r.is_empty() else Status.NOT_IN_ORIGINAL
        return _not_measured("click_rank", TV, definition, st, "no click row with an ItemRank")
    details = {"original": _binned(o, "rank"), "release": _binned(r, "rank")}
    return Figure("click_rank", TV, definition, Status.MEASURED, total_variation(o, r, "rank"),
                  details=details)  # fmt: skip


def _search_log(cols: LogColumns) -> SearchLog:
    """The columns as a :class:`SearchLog` (for :func:`query_events` and :func:`items`)."""
    return SearchLog(df=cols.frame, info=InputInfo(path=cols.side, sha256="", rows=0))


def _session_lengths(cols: LogColumns) -> pl.DataFrame:
    """``length, share``: the distribution of query events per (user, session)."""
    ev = query_events(_search_log(cols))
    per = ev.group_by("user", "session").agg(pl.len().cast(pl.Int64).alias("length"))
    return _shares(per.select("length", pl.lit(1, pl.Int64).alias("weight")), "length")


def _gap_sessions(cols: LogColumns, gap_minutes: float) -> LogColumns:
    """The same rows, their sessions by the gap alone (a SessionID set aside) when they have
    times; unchanged otherwise."""
    if "session_id" not in cols.has or "time" not in cols.has:
        return cols
    f = add_sessions(cols.frame.drop("session").with_row_index("row"), gap_minutes=gap_minutes)
    return LogColumns(f.drop("row"), cols.has - {"session_id"}, cols.side)


def session_lengths(
    original: LogColumns, release: LogColumns, *, gap_minutes: float = 30.0
) -> Figure:
    """TV between the distributions of query events per session (sessions by the project's
    rule, :func:`searchveil.model.add_sessions`, the same on both logs: a SessionID counts only
    when both logs have one; query events by
    :func:`searchveil.model.query_events`). Details: W1 in queries, both means, shares of
    lengths 1–10 and above."""
    definition = (
        "query events per session (sessions by one rule on both logs: their SessionID when "
        "both have one, else a gap of more than 30 min; a query event: consecutive rows of one "
        "user, query and time); TV distance"
    )
    miss = _check(original, release, "session", "QueryTime or SessionID")
    if miss is not None:
        return _not_measured("session_lengths", TV, definition, *miss)
    gap = check_positive("gap_minutes", gap_minutes)
    if ("session_id" in original.has) != ("session_id" in release.has):
        # one log has labelled sessions, the other not: the gap on both, so that the distance
        # measures the logs, not two session rules
        original, release = (_gap_sessions(c, gap) for c in (original, release))
    o, r = _session_lengths(original), _session_lengths(release)
    if r.is_empty():
        return _not_measured("session_lengths", TV, definition, Status.NOT_IN_RELEASE, "no rows")

    def mean(d: pl.DataFrame) -> float:
        return float((d.get_column("length") * d.get_column("share")).sum())

    details = {
        "wasserstein_1": wasserstein_1(o, r, "length"),
        "mean_original": mean(o),
        "mean_release": mean(r),
        "original": _binned(o, "length"),
        "release": _binned(r, "length"),
    }
    return Figure("session_lengths", TV, definition, Status.MEASURED,
                  total_variation(o, r, "length"), details=details)  # fmt: skip


def query_only_share(original: LogColumns, release: LogColumns) -> Figure:
    """|s_R − s_O|, s the share of a log's rows without a ClickURL (weighted by count). A
    release with a ClickURL column but no query-only row has s_R = 0: that is measured."""
    definition = "share of rows without a ClickURL; absolute difference"
    miss = _check(original, release, "url", "ClickURL")
    if miss is not None:
        return _not_measured("query_only_share", "absolute difference", definition, *miss)

    def share(cols: LogColumns) -> float:
        f = cols.frame
        total = int(f.get_column("weight").sum())
        no_click = int(f.filter(pl.col("url").is_null()).get_column("weight").sum())
        return no_click / total if total else math.nan

    so, sr = share(original), share(release)
    if math.isnan(sr):
        return _not_measured("query_only_share", "absolute difference", definition,
                             Status.NOT_IN_RELEASE, "no rows")  # fmt: skip
    return Figure("query_only_share", "absolute difference", definition, Status.MEASURED,
                  abs(sr - so), details={"original": so, "release": sr})  # fmt: skip


def _pairs(cols: LogColumns, pairs: PairDefinition) -> pl.DataFrame:
    if pairs == PairDefinition.COOCCURRENCE:
        return user_query_pairs(cols.frame)
    it = items(_search_log(cols), "query_pairs")
    return it.group_by("item").agg(pl.len().cast(pl.Int64).alias("count"))


def _queries(cols: LogColumns) -> pl.DataFrame:
    """The query histogram that segments phrases: query events with times, else rows (by
    count)."""
    if "session" in cols.has or cols.side == "original":
        ev = query_events(_search_log(cols))
        return ev.group_by(pl.col("query").alias("item")).agg(
            pl.len().cast(pl.Int64).alias("count")
        )
    return cols.frame.group_by(pl.col("query").alias("item")).agg(
        pl.col("weight").sum().alias("count")
    )


def substitution_map(
    original: LogColumns,
    release: LogColumns,
    *,
    pairs: PairDefinition | str,
    original_queries: pl.DataFrame | None = None,
    release_queries: pl.DataFrame | None = None,
    original_pairs: pl.DataFrame | None = None,
    n_queries: int = 1000,
    scores: dict[str, Any] | None = None,
) -> Figure:
    """MAP@5 of the top-5 substitutions learned from the release's query pairs against those
    learned from the original's (Götz §7.3; :func:`evaluate_substitution`), pairs of the given
    :class:`PairDefinition` on both sides. Histograms already computed may be passed in
    (``original_queries``: query events; ``release_queries``: the release's query histogram as
    ``evaluate`` reads it, a released query table if any; ``original_pairs``), and ``scores``,
    :func:`evaluate_substitution`'s result for these very inputs when already computed.
    Details: coverage at j = 5 and the figures at every j."""
    pairs = parse_choice("pairs", pairs, PairDefinition)
    check_int("n_queries", n_queries, minimum=1)
    name = f"substitution_{pairs.value}"
    how = (
        "ordered pairs of distinct queries of one user among the user's first 8 distinct "
        "queries in string order, pairs of ≥ 2 users"
        if pairs == PairDefinition.COOCCURRENCE
        else "consecutive query events of one session"
    )
    definition = f"MAP@5 of query substitution (Götz §7.3) learned from {how}; 1 = the original"
    if pairs == PairDefinition.SESSION:
        miss = _check(original, release, "session", "QueryTime or SessionID")
        if miss is not None:
            return _not_measured(name, "MAP@5 (higher is closer)", definition, *miss)
    if scores is None:
        scores = evaluate_substitution(
            original_queries if original_queries is not None else _queries(original),
            original_pairs if original_pairs is not None else _pairs(original, pairs),
            release_queries if release_queries is not None else _queries(release),
            _pairs(release, pairs),
            n_queries=n_queries,
        )
    at5 = next(b for b in scores["by_j"] if b["j"] == max(b2["j"] for b2 in scores["by_j"]))
    value = at5["map"]
    details = {
        "pairs": pairs.value,
        "j": at5["j"],
        "coverage": at5["coverage"],
        "queries_with_release_substitutions": at5["queries_with_release_substitutions"],
        "by_j": scores["by_j"],
    }
    if value is None or (isinstance(value, float) and math.isnan(value)):
        details["note"] = "the release yields no substitution for any evaluated query: MAP 0"
        value = 0.0
    return Figure(name, "MAP@5 (higher is closer)", definition, Status.MEASURED, float(value),
                  details=details, result=scores)  # fmt: skip


def fidelity_figures(
    original: SearchLog | LogColumns,
    release: pl.DataFrame | SearchLog | LogColumns,
    *,
    original_queries: pl.DataFrame | None = None,
    original_session_pairs: pl.DataFrame | None = None,
    release_queries: pl.DataFrame | None = None,
    n_queries: int = 1000,
    gap_minutes: float = 30.0,
    scores: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Figure]:
    """Every figure (keys :data:`FIGURES`) of ``release`` (a same-schema table, or a log read
    with :func:`searchveil.io.readers.read_log`, e.g. ``synth`` output) against ``original``.
    ``scores``: substitution results already computed, by :class:`PairDefinition` value."""
    o = original if isinstance(original, LogColumns) else log_columns(original)
    if isinstance(release, LogColumns):
        r = release
    elif isinstance(release, SearchLog):
        r = log_columns(release)
        r = LogColumns(r.frame, r.has, "release")
    else:
        r = release_columns(release, gap_minutes=gap_minutes)
    scores = scores or {}
    oq = original_queries if original_queries is not None else _queries(o)
    subst = {
        p: substitution_map(
            o,
            r,
            pairs=p,
            original_queries=oq,
            release_queries=release_queries,
            original_pairs=original_session_pairs if p == PairDefinition.SESSION else None,
            n_queries=n_queries,
            scores=scores.get(p.value),
        )  # fmt: skip
        for p in PairDefinition
    }
    return {
        "hour_of_day": hour_of_day(o, r),
        "click_rank": click_rank(o, r),
        "session_lengths": session_lengths(o, r, gap_minutes=gap_minutes),
        "query_only_share": query_only_share(o, r),
        "substitution_cooccurrence": subst[PairDefinition.COOCCURRENCE],
        "substitution_session": subst[PairDefinition.SESSION],
    }
