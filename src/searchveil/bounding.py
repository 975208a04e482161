"""Per-user contribution bounding — the one place where sensitivities come from, and the one
definition of which rows a user keeps.

Korolova's Limit-User-Activity (thesis ch.4, Algorithm 3) keeps the *first* d query events and
the first d_c clicks of each user; ZEALOUS (Götz §4) and the selection strategies keep the
first m *distinct* items per user — choices independent of the data's values.

**The bounding kernel** (second half of this module) is that definition, written once and run
by the in-memory releases (:func:`bound_log`), the Polars ordered pass
(:mod:`searchveil.engines.ordered`) and Spark's partitions (:mod:`searchveil.engines.
spark_ordered`, through ``mapInArrow``); the engines only move batches through it. It reads rows
``u, q, t`` (+ ``url``) in input order, each user's rows together, and keeps, per *stream* — the
first row of each query event (key: the query), or each row with a clicked URL (key: query and
URL) — each user's first ``n`` rows (:class:`Rule`), or the first row of each of the user's
first ``n`` distinct keys. Polars expressions do it a batch at a time (:func:`cut`): a running
comparison with the previous row, running counts that restart at each user. A batch may be cut
anywhere: its first user's kept rows are held with ranks counted from the batch's start, and
:func:`resolve` joins the batch to the :class:`Carry` of what came before — the same join
whether the batch is the next chunk of one stream (the Polars pass, a Spark partition's own
chunks) or a Spark partition joined on the driver (:meth:`Bounder.summary`).

The rules for rows the inputs could make ambiguous (tested in tests/test_kernel.py):

* **An event** starts where the user, the time or the normalised query differs from the
  previous row's (:func:`~searchveil.model.same_event`); a null (or blank) time always starts
  one. Raw text is compared first; only rows whose raw query differs from the previous row's
  at the same user and time are normalised to decide.
* **Equal times** are equal *instants*: the in-memory reader compares the times it parsed; the
  engines compare the text of canonical ``YYYY-MM-DD HH:MM:SS`` times and parse any other layout
  as the reader does (:func:`~searchveil.engines.sources.canonical_times`) — so ``2006-03-01
  10:00``, ``2006-03-01T10:00:00`` and ``2006-03-01 10:00:00`` are one instant everywhere
  (before this kernel the engines saw three). A Parquet time is cut to the second, as the
  reader cuts it.
* **Rows with equal timestamps** keep their input order: the first d_c clicks of an event are
  its first click rows as written, never sorted.
* **Distinct clicks** are distinct (query, URL) pairs, compared as pairs (a query holding a tab
  cannot make two pairs one).
* **Users** are compared as read: integer ids as integers (``007`` is ``7`` when every id is an
  integer), text ids without surrounding blanks. A user whose rows are not contiguous raises
  :class:`NotContiguous` where the caller asked for the check; the engines then sort (Polars)
  or shuffle (Spark) the rows by user, in input order, and run the same kernel.

``strategy="random"`` (in memory only) keeps a uniformly random subset of size
``max_per_user`` drawn with the injected ``rng`` (a random 64-bit key per row, then the smallest
keys per user); :func:`bound_contributions` applies either rule to a frame of items (keywords,
query pairs).

:class:`Sensitivities` derives the ℓ0/ℓ∞/ℓ1/ℓ2 sensitivities of the per-item count vector from
the bounds, so no release module re-derives them ad hoc.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import polars as pl

from searchveil.errors import InternalError, InvalidParameterError
from searchveil.model import normalize_query, same_event
from searchveil.rng import RandomSource
from searchveil.validate import check_int, parse_choice

__all__ = [
    "STREAM_KEYS",
    "Bounder",
    "BoundingStrategy",
    "Carry",
    "KernelSpec",
    "NotContiguous",
    "Rule",
    "Segment",
    "Sensitivities",
    "Stream",
    "bound_contributions",
    "bound_log",
    "cut",
    "first_per_user",
    "normalized",
    "resolve",
]


class BoundingStrategy(StrEnum):
    """Which of a user's rows :func:`bound_contributions` keeps (``--bounding``): the first
    ones (by the order column) or a uniformly random subset (in memory only)."""

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
    if strategy == "first":
        return first_per_user(out, d, user=user_col, distinct_on=[item_col] if distinct else None)
    if distinct:
        out = out.unique(subset=[user_col, item_col], keep="first", maintain_order=True)
    if rng is None:
        raise InvalidParameterError("rng", None, "a RandomSource when strategy='random'")
    keys = pl.Series("_key", rng.random_keys(out.height))
    return (
        out.with_columns(keys)
        .filter(pl.col("_key").rank("ordinal").over(user_col) <= d)
        .drop("_key")
    )


# --------------------------------------------------------------------------- the kernel
#
# Everything below is the one definition of "a user's first d events / first d distinct items"
# that the in-memory releases, the Polars ordered pass and Spark's partitions all run.


class NotContiguous(Exception):
    """A user's rows are not contiguous in the input (the ordered plans need them to be)."""


class Stream(StrEnum):
    """The rows a rule counts: ``events`` — the first row of each query event (key: the
    query); ``clicks`` — every row with a clicked URL (key: the query and the URL)."""

    EVENTS = "events"
    CLICKS = "clicks"


#: the key columns of each stream's kept rows
STREAM_KEYS: dict[Stream, list[str]] = {Stream.EVENTS: ["query"], Stream.CLICKS: ["query", "url"]}
# a string that is not equal to its normalisation contains one of these (A-Z, any character
# outside printable ASCII — Unicode upper case and white space, tabs, controls — two spaces in a
# row, or a space at either end); strings without them are left as they are
_NEEDS_NORMALIZING = r"[^ !-@\[-~]|  |^ | $"


@dataclass(frozen=True)
class Rule:
    """Keep each user's first ``n`` rows of a stream; with ``distinct``, the first occurrence
    of each of the user's first ``n`` distinct keys."""

    n: int
    distinct: bool = False


@dataclass(frozen=True)
class KernelSpec:
    """What the kernel keeps: a rule per stream (``None``: the stream is not kept), and whether
    queries are normalised (:func:`~searchveil.model.normalize_query`) — the engines read raw
    text; the in-memory log is normalised by its reader already."""

    events: Rule | None = None
    clicks: Rule | None = None
    normalize: bool = False

    def rules(self) -> list[tuple[Stream, Rule]]:
        return [(s, r) for s, r in ((Stream.EVENTS, self.events), (Stream.CLICKS, self.clicks))
                if r is not None]  # fmt: skip


def normalized(s: pl.Series, normalize: bool) -> pl.Series:
    """:func:`~searchveil.model.normalize_query` applied only to the strings it would change."""
    if not normalize or s.len() == 0:
        return s
    mask = s.str.contains(_NEEDS_NORMALIZING).fill_null(False)
    if not mask.any():
        return s
    idx = mask.arg_true()
    fixed = pl.select(normalize_query(pl.lit(s.gather(idx)))).to_series()
    return s.scatter(idx, fixed)


def _run_ranks(counted: np.ndarray, starts: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The rule on arrays: ``counted`` (bool, a row per element), ``starts`` (the index of each
    run's first row, ascending, from 0) — (kept: a run's first ``n`` counted rows; rank: the
    0-based number of counted rows before each row within its run), a running count that
    restarts at each run, without grouping."""
    before = np.cumsum(counted, dtype=np.int64) - counted  # counted rows before each row
    rank = before - np.repeat(before[starts], np.diff(starts, append=counted.size))
    return counted & (rank < n), rank


def _bools(df: pl.DataFrame, name: str) -> np.ndarray:
    return df.get_column(name).to_numpy()


def _first_rows(df: pl.DataFrame, run: str, keys: list[str] | None, n: int) -> pl.DataFrame:
    """The rule on a frame: the first ``n`` rows of each run of ``run`` (with ``keys``: the
    first row of each of the run's first ``n`` distinct keys), with ``_rank``."""
    # every row counts (runs are never null), or the first of each distinct key
    first = pl.struct(run, *keys).is_first_distinct() if keys else pl.col(run).is_not_null()
    marks = df.select(c=first, s=(pl.col(run) != pl.col(run).shift(1)).fill_null(True))
    kept, rank = _run_ranks(_bools(marks, "c"), np.flatnonzero(_bools(marks, "s")), n)
    return df.filter(pl.Series(kept)).with_columns(_rank=pl.Series(rank[kept], dtype=pl.Int64))


def first_per_user(
    df: pl.DataFrame,
    n: int,
    *,
    user: str = "user",
    distinct_on: list[str] | None = None,
    rank: str | None = None,
) -> pl.DataFrame:
    """Each user's first ``n`` rows (with ``distinct_on``: the first row of each of the user's
    first ``n`` distinct values of those columns), ``df`` holding each user's rows together and
    in order; with ``rank``, a column of that name gives the 0-based rank within the user.
    The kernel's rule (:func:`_first_rows`) on a whole frame."""
    check_int("n", n, minimum=1)
    runs = df.with_columns(_run=(pl.col(user) != pl.col(user).shift(1)).fill_null(True).cum_sum())
    out = _first_rows(runs, "_run", distinct_on, n).drop("_run")
    return out.rename({"_rank": rank}) if rank else out.drop("_rank")


def _flags(df: pl.DataFrame, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per row (bool arrays): a user's first row in the frame, and a query event's first row —
    one that does not continue the previous row's (:func:`~searchveil.model.same_event`); the
    frame's first row starts both. ``same_event`` is taken as its two halves, the same user and
    time (``same_event`` with any query) and the same raw query, so each comparison runs once;
    rows whose raw query differs from the previous row's at the same user and time are settled
    on the normalised text."""
    u, q, t = pl.col("u"), pl.col("q"), pl.col("t")
    pu, pq, pt = u.shift(1), q.shift(1), t.shift(1)
    any_q = pl.lit(True)
    marks = df.select(
        us=(u != pu).fill_null(True),
        ut=same_event(u, any_q, t, pu, any_q, pt),
        sq=(q == pq).fill_null(False),
    )
    us, ut, sq = (_bools(marks, c) for c in ("us", "ut", "sq"))
    es = ~(ut & sq)
    if normalize:
        amb = ut & es  # same user and time, another raw query (or a missing one)
        if amb.any():
            rows = pl.Series(amb)
            pair = df.select(a=q.filter(rows), b=pq.filter(rows))
            same = normalized(pair.get_column("a"), True) == normalized(pair.get_column("b"), True)
            es[amb] = ~same.fill_null(False).to_numpy()
    return us, es


@dataclass
class Carry:
    """The open user at the end of what a :class:`Bounder` was fed: its last row, the number
    of rows of each stream it has so far, and (distinct rules) the keys it kept."""

    user: Any
    q: Any
    t: Any
    count: dict[Stream, int]
    keys: dict[Stream, pl.DataFrame]


@dataclass
class Segment:
    """A stretch of rows bounded on its own, as if its first row started a user (so it can be
    cut anywhere, in any thread or on any executor): its first run's kept rows with ranks
    counted from the segment's start (``head``: final once the rows before it are known, by
    :meth:`Bounder.add`), its first and last row, the number of stream rows of its first and
    last run, the last run's kept keys, and its figures. The kept rows of its other runs are
    final and returned beside it (:func:`cut`)."""

    first: tuple[Any, Any, Any]  # (user, query, time) of the first row
    last: Carry  # the last run, as a carry (its counts and keys from the segment's start)
    runs: int
    head: dict[Stream, pl.DataFrame]
    head_count: dict[Stream, int]
    figures: dict[str, int]
    run_users: pl.Series | None = None


@dataclass(frozen=True)
class _Runs:
    """The runs of a frame (a run: a user's consecutive rows): the first row of each; the first
    run is rows ``[0, head_end)``, the last one ``[tail_start, height)``."""

    starts: np.ndarray
    height: int

    @property
    def head_end(self) -> int:
        return int(self.starts[1]) if self.starts.size > 1 else self.height

    @property
    def tail_start(self) -> int:
        return int(self.starts[-1])

    def ids(self) -> np.ndarray:
        """The run of each row (0-based)."""
        marks = np.zeros(self.height, dtype=np.int64)
        marks[self.starts[1:]] = 1
        return np.cumsum(marks)


def _stream_kept(df: pl.DataFrame, stream: Stream, rule: Rule, counted: np.ndarray, runs: _Runs,
                 normalize: bool) -> tuple[pl.DataFrame, int, int]:  # fmt: skip
    """A stream's kept rows (``u``, keys, ``_rank``, in input order) and how many of them come
    before the second run and before the last run. A first-``n`` rule ranks the ``counted``
    rows in place and copies out only the kept ones; a distinct rule needs every stream row's
    normalised key first."""
    cols: list[str | pl.Expr] = ["u", pl.col("q").alias("query")]
    if stream == Stream.CLICKS:
        cols.append("url")
    if rule.distinct:  # distinctness is decided on the normalised keys
        rows = df.select(cols).filter(pl.Series(counted))
        rows = rows.with_columns(query=normalized(rows.get_column("query"), normalize),
                                 _run=pl.Series(runs.ids()[counted]))  # fmt: skip
        kept = _first_rows(rows, "_run", STREAM_KEYS[stream], rule.n)
        run = kept.get_column("_run").to_numpy()
        n_head = int(np.searchsorted(run, 1, "left"))
        n_tail = int(np.searchsorted(run, runs.starts.size - 1, "left"))
        return kept.drop("_run"), n_head, n_tail
    keep, rank = _run_ranks(counted, runs.starts, rule.n)
    kept = df.select(cols).filter(pl.Series(keep))
    kept = kept.with_columns(query=normalized(kept.get_column("query"), normalize),
                             _rank=pl.Series(rank[keep], dtype=pl.Int64))  # fmt: skip
    n_head = int(np.count_nonzero(keep[: runs.head_end]))
    return kept, n_head, int(np.count_nonzero(keep[: runs.tail_start]))


def cut(df: pl.DataFrame, spec: KernelSpec) -> tuple[Segment, dict[Stream, pl.DataFrame]]:
    """Bound one non-empty frame of rows ``u, q, t`` (+ ``url``) in order, each user's rows
    together: the :class:`Segment` and the final kept rows (``u``, keys, ``_rank``) of every
    run but the first."""
    # one chunk per column: a batch of a Parquet scan comes in many, and eager filters and
    # shifts over many chunks cost several times the copy
    df = df.rechunk()
    us, es = _flags(df, spec.normalize)
    runs = _Runs(np.flatnonzero(us), df.height)
    clicked = None
    if "url" in df.columns and spec.clicks is not None:
        clicked = df.get_column("url").is_not_null().to_numpy()
    head: dict[Stream, pl.DataFrame] = {}
    body: dict[Stream, pl.DataFrame] = {}
    head_count: dict[Stream, int] = {}
    tail_count: dict[Stream, int] = {}
    tail_keys: dict[Stream, pl.DataFrame] = {}
    for stream, rule in spec.rules():
        counted = es if stream == Stream.EVENTS else clicked
        if counted is None:
            raise InternalError("a click rule on rows without a url column")
        head_count[stream] = int(np.count_nonzero(counted[: runs.head_end]))
        tail_count[stream] = int(np.count_nonzero(counted[runs.tail_start :]))
        # kept rows are in input order: the first run's are a prefix, the last run's a suffix
        kept, n_head, n_tail = _stream_kept(df, stream, rule, counted, runs, spec.normalize)
        head[stream], body[stream] = kept.slice(0, n_head), kept.slice(n_head)
        tail_keys[stream] = kept.slice(n_tail).select(STREAM_KEYS[stream])
    first = df.row(0, named=True)
    last = df.row(df.height - 1, named=True)
    figures = {
        "rows": df.height,
        "runs": runs.starts.size,
        "events": int(np.count_nonzero(es)),
        "clicks": df.height - df.get_column("url").null_count() if "url" in df.columns else 0,
    }
    seg = Segment(
        first=(first["u"], first["q"], first["t"]),
        last=Carry(last["u"], last["q"], last["t"], tail_count, tail_keys),
        runs=runs.starts.size,
        head=head,
        head_count=head_count,
        figures=figures,
        run_users=df.get_column("u").filter(pl.Series(us)),
    )
    return seg, body


def _continues(carry: Carry | None, first: tuple[Any, Any, Any], normalize: bool) -> tuple[
    bool, bool]:  # fmt: skip
    """(the segment's first row is the carried user's, it continues the carried query event)
    — :func:`_flags` on the two rows."""
    if carry is None or first[0] is None or carry.user != first[0]:
        return False, False
    pair = pl.DataFrame(
        {"u": [carry.user, first[0]], "q": [carry.q, first[1]], "t": [carry.t, first[2]]}
    )
    return True, not bool(_flags(pair, normalize)[1][1])


def resolve(
    carry: Carry | None, seg: Segment, spec: KernelSpec
) -> tuple[dict[Stream, pl.DataFrame], dict[Stream, int], Carry, bool, bool]:
    """Join a segment to what precedes it: its first run's kept rows, now final (ranks counted
    from the carried user's start), the carried user's stream counts after that run, the new
    carry, and (whether the first run continues the carried user, whether its first row
    continues the carried query event).

    For the carried user the rule goes on where it stopped: a first-``n`` rule keeps the run's
    rows whose rank, shifted by the user's earlier rows, is below ``n`` (a first row that
    continues the carried event is not an event, and every later event moves down by one); a
    distinct rule keeps the run's kept keys the user has not kept yet, up to ``n`` in all.
    The run's own first ``n`` (distinct) rows are enough for both: the user's earlier rows only
    ever take places away."""
    cont, flip = _continues(carry, seg.first, spec.normalize)
    head: dict[Stream, pl.DataFrame] = {}
    total: dict[Stream, int] = {}
    keys_after: dict[Stream, pl.DataFrame] = {}
    for stream, rule in spec.rules():
        cand, keys = seg.head[stream], STREAM_KEYS[stream]
        skip = int(flip and stream == Stream.EVENTS)
        if not cont:
            kept, before = cand, 0
        elif rule.distinct:
            assert carry is not None
            had = carry.keys[stream]
            fresh = cand.filter(~pl.struct(keys).is_in(had.select(pl.struct(keys)).to_series()))
            kept = fresh.head(max(0, rule.n - had.height)).with_columns(
                _rank=pl.int_range(pl.len(), dtype=pl.Int64) + had.height
            )
            before = carry.count[stream]
        else:
            assert carry is not None
            before = carry.count[stream]
            shifted = cand.filter(pl.col("_rank") >= skip).with_columns(
                pl.col("_rank") + (before - skip)
            )
            kept = shifted.filter(pl.col("_rank") < rule.n)
        head[stream] = kept
        total[stream] = before + seg.head_count[stream] - skip
        if cont and rule.distinct:
            assert carry is not None
            keys_after[stream] = pl.concat([carry.keys[stream], kept.select(keys)])
        else:
            keys_after[stream] = kept.select(keys)
    if seg.runs == 1:  # the segment is one run: the carry is that run, carried on
        new = Carry(seg.last.user, seg.last.q, seg.last.t, total, keys_after)
    else:
        new = seg.last
    return head, total, new, cont, flip


class Bounder:
    """Feeds frames of rows (:func:`cut`) in order and returns, for each, the final kept rows
    of every stream (``u``, keys, ``_rank``), holding the :class:`Carry` from frame to frame.

    ``detached``: the rows fed are a stretch of a longer input (a Spark partition) whose
    first run may continue a user of the stretch before it: that run's kept rows are held
    back (:meth:`summary` hands them on as a :class:`Segment`, to be :meth:`add`-ed in order
    where the stretches meet). ``check``: raise :class:`NotContiguous` when a user starts a
    second run. :attr:`figures`: ``rows``, ``users``, ``events``, ``clicks`` so far."""

    def __init__(self, spec: KernelSpec, *, detached: bool = False, check: bool = False) -> None:
        self.spec, self.detached, self.check = spec, detached, check
        self.carry: Carry | None = None
        self.figures: dict[str, int] = {"rows": 0, "users": 0, "events": 0, "clicks": 0}
        self._seen: set[Any] = set()
        self._first: tuple[Any, Any, Any] | None = None
        self._held: dict[Stream, list[pl.DataFrame]] = {s: [] for s, _ in spec.rules()}
        self._held_count: dict[Stream, int] = {}
        self._first_open = False

    def feed(self, df: pl.DataFrame) -> dict[Stream, pl.DataFrame]:
        """The final kept rows of ``df`` (non-empty), given everything fed before."""
        return self.add(*cut(df, self.spec))

    def add(
        self, seg: Segment, body: dict[Stream, pl.DataFrame] | None = None
    ) -> dict[Stream, pl.DataFrame]:
        """Join ``seg`` (and the final rows ``body`` of its other runs) to what came before."""
        first_seg = self._first is None
        head, total, carry, cont, flip = resolve(self.carry, seg, self.spec)
        if self.check and seg.run_users is not None:
            new = seg.run_users.slice(1) if cont else seg.run_users
            fresh = set(new.to_list())
            if len(fresh) < new.len() or not self._seen.isdisjoint(fresh):
                raise NotContiguous
            self._seen |= fresh
        f = self.figures
        f["rows"] += seg.figures["rows"]
        f["users"] += seg.runs - int(cont)
        f["events"] += seg.figures["events"] - int(flip)
        f["clicks"] += seg.figures["clicks"]
        if first_seg:
            self._first = seg.first
        hold = self.detached and (first_seg or (self._first_open and cont))
        out = {}
        for stream, _ in self.spec.rules():
            parts = [] if hold else [head[stream]]
            if hold:
                self._held[stream].append(head[stream])
            if body is not None and body[stream].height:
                parts.append(body[stream])
            out[stream] = pl.concat(parts) if len(parts) > 1 else (
                parts[0] if parts else head[stream].clear())  # fmt: skip
        if hold:
            self._held_count = total
        self._first_open = hold and seg.runs == 1
        self.carry = carry
        return out

    def summary(self) -> Segment:
        """What a detached bounder was fed, as one segment (its held first run as the head)."""
        if self._first is None or self.carry is None:
            raise InternalError("summary() of a bounder fed no rows")
        head = {s: pl.concat(parts) for s, parts in self._held.items()}
        return Segment(
            first=self._first, last=self.carry, runs=self.figures["users"], head=head,
            head_count=self._held_count,
            figures=self.figures | {"runs": self.figures["users"]},
        )  # fmt: skip


def bound_log(df: pl.DataFrame, spec: KernelSpec) -> tuple[dict[Stream, pl.DataFrame], dict[str,
              int]]:  # fmt: skip
    """The kernel on an in-memory log (``user, query, time, url``, each user's rows together
    and in order — :class:`~searchveil.model.SearchLog` is sorted by user and row): the kept
    rows of each stream (``user``, keys, ``rank``) and the figures."""
    cols = {"u": pl.col("user"), "q": pl.col("query"), "t": pl.col("time"), "url": pl.col("url")}
    b = Bounder(spec)
    if df.height == 0:
        empty = df.select(user=pl.col("user"), query=pl.col("query"), url=pl.col("url"))
        kept = {s: empty.select("user", *STREAM_KEYS[s]).with_columns(rank=pl.lit(0, pl.Int64))
                for s, _ in spec.rules()}  # fmt: skip
        return kept, b.figures
    kept = b.feed(df.select(**cols))
    return {s: k.rename({"u": "user", "_rank": "rank"}) for s, k in kept.items()}, b.figures
