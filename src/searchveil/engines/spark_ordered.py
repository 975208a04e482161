"""Spark's ordered pass: contribution bounding of user-sorted input, partition by partition,
with no shuffle of rows by user (issue 17).

The Polars engine bounds a log whose users' rows are contiguous in one ordered scan
(:mod:`searchveil.engines.ordered`). On Spark the same scan is cut into partitions (Parquet
splits by row group; a ``.gz`` file is one partition), and a user may straddle the cut. Each
partition runs :class:`PartitionPass` over its Arrow batches (``mapInArrow``), in file order:

* *interior* users (neither the partition's first nor its last run of rows) are complete in
  the partition: their bounded items are counted there, and only ``(item, count)`` rows leave
  the partition (one small aggregation sums them over partitions);
* the partition's first and last run (one run if the partition holds a single user) are
  *boundary* runs: the partition emits their candidates — the rows that could still be kept
  whatever precedes them — and their open state, and the driver stitches each user whose rows
  continue across partitions (:func:`stitch`);
* every run emits its user id, and the aggregation returns the users seen in more than one run:
  the driver accepts them only as a chain of boundary runs across adjacent partitions. Any
  other repeat means the users are not contiguous (:class:`NotContiguous`), and the caller
  falls back to the window plan (one shuffle by user), so unsorted input is slower, never wrong.

Candidates of a boundary run (enough to make the stitched bounding exact):

* Korolova, first d events: the run's event starts with local event number ≤ d, and its click
  rows with local click number ≤ d_c. (The run's first row starts an event locally but may
  continue the previous partition's last event — same user, time and normalised query — and
  then every number shifts down by one; but the user already has ≥ 1 event before the run, so
  the run's (d + 1)-th local event is never kept either way.)
* first m *distinct* items (Korolova ``distinct``, ZEALOUS): the run's first m distinct items.
  Of them, at most k are among the k < m items the user already kept, so at least the m - k
  the user still may keep are there. A first row that continues the previous event repeats an
  item already kept, so it changes nothing here.

The open state: the run's number of events and click rows, and the raw query and time of its
first and last row (to decide whether a first row continues an event).

Same definitions as the in-memory path (:mod:`searchveil.model`, :mod:`searchveil.bounding`)
and the ordered pass: an event starts where the user, the time or the normalised query
differ from the previous row (a null time always starts one); only rows whose raw text
differs from the previous row's at the same user and time are normalised to decide. Users
are compared as Spark reads them (an integer column as is, text ids stripped of blanks), as
in the window plan.

Partition order: Spark numbers a single file's splits in file order (equal-sized splits keep
their order when Spark sorts them by size), and each partition reads its rows in order — the
same assumption as the window plan's ``monotonically_increasing_id``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import polars as pl
import pyarrow as pa

from searchveil.engines.contract import Bounding, BoundingPlan
from searchveil.model import PAIR_SEP, normalize_query

__all__ = [
    "OUTPUT_SCHEMA",
    "OUTPUT_DDL",
    "GROUP_KEYS",
    "NotContiguous",
    "PartitionPass",
    "stitch",
    "CHUNK_ROWS",
]

CHUNK_ROWS = 1 << 20  # rows gathered from Spark's Arrow batches before one vectorised step
FOLD_ROWS = 4_000_000  # kept items held before counting them

OUTPUT_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # q: item count, c: click count, u: user run, f: figure, b: boundary
        ("sub", pa.string()),  # boundary row: e event, c click, d distinct item, s state
        ("query", pa.string()),
        ("url", pa.string()),
        ("user", pa.string()),
        ("n", pa.int64()),
        ("part", pa.int32()),
        ("pos", pa.int32()),  # boundary run: 0 first, 1 last, 2 the partition's only run
        ("seq", pa.int64()),
        ("rnk", pa.int64()),
        ("t", pa.string()),
        ("q2", pa.string()),
        ("t2", pa.string()),
    ]
)
OUTPUT_DDL = ", ".join(
    f"{f.name} {'string' if f.type == pa.string() else ('int' if f.type == pa.int32() else 'long')}"
    for f in OUTPUT_SCHEMA
)
GROUP_KEYS = [f.name for f in OUTPUT_SCHEMA if f.name != "n"]

# a string that is not equal to its normalisation contains one of these (A-Z, any character
# outside printable ASCII, two spaces in a row, or a space at either end)
_NEEDS_NORMALIZING = r"[^ !-@\[-~]|  |^ | $"


class NotContiguous(Exception):
    """A user's rows are not contiguous in the input: use the window plan."""


def normalized(s: pl.Series, normalize: bool) -> pl.Series:
    """``normalize_query`` applied only to the strings it would change."""
    if not normalize or s.len() == 0:
        return s
    mask = s.str.contains(_NEEDS_NORMALIZING).fill_null(False)
    if not mask.any():
        return s
    idx = mask.arg_true()
    fixed = pl.select(normalize_query(pl.lit(s.gather(idx)))).to_series()
    return s.scatter(idx, fixed)


def _running(start: pl.Expr, counted: pl.Expr, carried: int) -> pl.Expr:
    """1-based running count of ``counted`` rows within each run (``start`` marks a run's first
    row); the run open at the chunk's start continues from ``carried``."""
    c = counted.cast(pl.Int64)
    cs = c.cum_sum()
    base = pl.when(start).then(cs - c).otherwise(None).forward_fill().fill_null(-carried)
    return cs - base


def _frame(cols: dict[str, Any], height: int) -> pa.RecordBatch:
    """A batch of :data:`OUTPUT_SCHEMA` (absent columns null)."""
    arrays = []
    for f in OUTPUT_SCHEMA:
        v = cols.get(f.name)
        if v is None:
            arrays.append(pa.nulls(height, f.type))
        elif isinstance(v, pl.Series):
            arrays.append(v.to_arrow().cast(f.type))
        else:
            arrays.append(pa.array([v] * height, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=OUTPUT_SCHEMA)


@dataclass
class _Run:
    """A boundary run's state (its candidates are gathered in :class:`PartitionPass`)."""

    user: Any = None
    first_q: str | None = None
    first_t: str | None = None
    last_q: str | None = None
    last_t: str | None = None
    events: int = 0
    clicks: int = 0


@dataclass
class PartitionPass:
    """The ordered pass over one partition's rows (``u, q, t`` [+ ``url``], in file order).

    :meth:`run` consumes Arrow batches and yields batches of :data:`OUTPUT_SCHEMA`.
    """

    plan: BoundingPlan
    normalize: bool
    part: int
    with_url: bool
    # carried from chunk to chunk
    _u: Any = None
    _q: str | None = None
    _t: str | None = None
    _events: int = 0
    _clicks: int = 0
    _ri: int = -1  # run index of the open run (0 = the partition's first run)
    _dist: pl.DataFrame | None = None  # the kept distinct keys of run _dist_ri
    _dist_ri: int = -1
    _pending: pl.DataFrame | None = None  # candidates of the open run (not run 0)
    _first: pl.DataFrame | None = None  # candidates of run 0
    _run0: _Run = field(default_factory=_Run)
    _kept_q: list[pl.DataFrame] = field(default_factory=list)
    _kept_c: list[pl.DataFrame] = field(default_factory=list)
    _held: int = 0
    _counts_q: list[pl.DataFrame] = field(default_factory=list)
    _counts_c: list[pl.DataFrame] = field(default_factory=list)
    _fig: Counter[str] = field(default_factory=Counter)

    @property
    def _keys(self) -> list[str]:
        return ["query", "url"] if self.plan.item == "clicks" else ["query"]

    def run(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        buf: list[pa.RecordBatch] = []
        n = 0
        for b in batches:
            if b.num_rows == 0:
                continue
            buf.append(b)
            n += b.num_rows
            if n >= CHUNK_ROWS:
                yield from self._chunk(buf)
                buf, n = [], 0
        if buf:
            yield from self._chunk(buf)
        yield from self._finish()

    # ------------------------------------------------------------------------------ per chunk

    def _chunk(self, batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        df = pl.DataFrame(pl.from_arrow(pa.Table.from_batches(batches)))
        cols = ["u", "q", "t"] + (["url"] if self.with_url else [])
        df = df.select(cols).with_columns(pl.col("q").fill_null(""))
        df = self._mark(df)
        us = df.get_column("_us")
        new_users = df.get_column("u").filter(us)
        if new_users.len():
            yield _frame({"kind": "u", "user": new_users.cast(pl.String), "n": 1}, new_users.len())
        last = df.row(df.height - 1, named=True)
        first_ri = self._ri
        if self._ri < 0:  # the partition's first row
            self._run0.user = df.item(0, "u")
            self._run0.first_q, self._run0.first_t = df.item(0, "q"), df.item(0, "t")
        # run 0's totals while it is open
        r0 = df.filter(pl.col("_ri") == 0)
        if r0.height:
            tail = r0.row(r0.height - 1, named=True)
            self._run0.events = int(tail["_er"])
            self._run0.clicks = int(tail["_cr"]) if self.with_url else 0
            self._run0.last_q, self._run0.last_t = tail["q"], tail["t"]
        self._fig["rows"] += df.height
        self._fig["runs"] += int(us.sum())
        self._fig["events"] += int(df.get_column("_es").sum())
        if self.with_url:
            self._fig["clicks"] += int(df.get_column("url").is_not_null().sum())
        cand = self._candidates(df, first_ri)
        self._u, self._q, self._t = last["u"], last["q"], last["t"]
        self._events = int(last["_er"])
        self._clicks = int(last["_cr"]) if self.with_url else 0
        last_ri = int(last["_ri"])
        self._ri = last_ri
        if self._pending is not None and self._pending.height:
            cand = pl.concat([self._pending, cand])
        ri = pl.col("_ri")
        zero = cand.filter(ri == 0)
        if zero.height:
            self._first = zero if self._first is None else pl.concat([self._first, zero])
        self._pending = cand.filter((ri == last_ri) & (ri != 0))
        self._keep_interior(cand.filter((ri != 0) & (ri != last_ri)))
        self._fold(force=False)

    def _mark(self, df: pl.DataFrame) -> pl.DataFrame:
        """``_us`` (a run's first row), ``_es`` (an event's first row), ``_ri`` (run index),
        ``_er`` (the run's event number) and ``_cr`` (its click number)."""
        dt = df.schema
        u, q, t = pl.col("u"), pl.col("q"), pl.col("t")
        pu = u.shift(1, fill_value=pl.lit(self._u, dt["u"]))
        pq = q.shift(1, fill_value=pl.lit(self._q, pl.String))
        pt = t.shift(1, fill_value=pl.lit(self._t, pl.String))
        same_ut = ((u == pu) & (t == pt)).fill_null(False)
        same_q = (q == pq).fill_null(False)
        out = df.with_columns(
            _us=(u != pu).fill_null(True), _es=~(same_ut & same_q), _amb=same_ut & ~same_q
        )
        amb = out.get_column("_amb")
        if self.normalize and amb.any():
            idx = amb.arg_true().cast(pl.Int64)
            qs = out.get_column("q")
            prev = qs.gather((idx - 1).clip(lower_bound=0))
            if idx[0] == 0:
                prev = prev.scatter([0], self._q)
            same = normalized(qs.gather(idx), True) == normalized(prev, True)
            out = out.with_columns(out.get_column("_es").scatter(idx, ~same).alias("_es"))
        us = pl.col("_us")
        marks = [
            (us.cast(pl.Int64).cum_sum() + self._ri).alias("_ri"),
            _running(us, pl.col("_es"), self._events).alias("_er"),
        ]
        if self.with_url:
            marks.append(_running(us, pl.col("url").is_not_null(), self._clicks).alias("_cr"))
        return out.with_columns(marks).drop("_amb")

    def _candidates(self, df: pl.DataFrame, first_ri: int) -> pl.DataFrame:
        """Rows that may be kept (for a boundary run, whatever precedes it): ``_ri, _k`` (e
        event, c click, d distinct item), ``_r`` (rank in the run), ``query`` (normalised),
        ``url``."""
        bp = self.plan
        parts = []
        url = pl.col("url") if self.with_url else pl.lit(None, pl.String)
        if bp.keep == Bounding.EVENTS and not bp.distinct:
            ev = df.filter(pl.col("_es") & (pl.col("_er") <= bp.per_user)).select(
                "_ri", _k=pl.lit("e"), _r="_er", query="q", url=pl.lit(None, pl.String)
            )
            parts.append(ev)
            if bp.clicks_per_user is not None:
                cl = df.filter(
                    pl.col("url").is_not_null() & (pl.col("_cr") <= bp.clicks_per_user)
                ).select("_ri", _k=pl.lit("c"), _r="_cr", query="q", url=url)
                parts.append(cl)
        else:
            if bp.item == "clicks":
                pool = df.filter(pl.col("url").is_not_null()).select("_ri", query="q", url=url)
            else:
                pool = df.filter(pl.col("_es")).select(
                    "_ri", query="q", url=pl.lit(None, pl.String)
                )
            pool = pool.with_columns(query=normalized(pool.get_column("query"), self.normalize))
            parts.append(self._distinct(pool, first_ri))
        out = pl.concat(parts) if len(parts) > 1 else parts[0]
        if bp.keep == Bounding.EVENTS and not bp.distinct:
            out = out.with_columns(query=normalized(out.get_column("query"), self.normalize))
        return out

    def _distinct(self, pool: pl.DataFrame, carry_ri: int) -> pl.DataFrame:
        """Each run's first m distinct items (the open run continues from its kept keys)."""
        keys = self._keys
        n_carry = 0
        if self._dist is not None and self._dist.height and pool.height:
            if pool.item(0, "_ri") == self._dist_ri == carry_ri:
                pre = self._dist.select(pl.lit(carry_ri, pl.Int64).alias("_ri"), "query", "url")
                pool = pl.concat([pre, pool.with_columns(pl.col("_ri").cast(pl.Int64))])
                n_carry = pre.height
        key = pl.struct("_ri", *keys)
        marked = pool.with_columns(_f=key.is_first_distinct())
        marked = marked.with_columns(_r=pl.col("_f").cast(pl.Int64).cum_sum().over("_ri"))
        kept = marked.filter(pl.col("_f") & (pl.col("_r") <= self.plan.per_user)).drop("_f")
        if pool.height:
            last_ri = pool.item(pool.height - 1, "_ri")
            self._dist = kept.filter(pl.col("_ri") == last_ri).select("query", "url")
            self._dist_ri = int(last_ri)
        kept = kept.slice(n_carry) if n_carry else kept
        return kept.select("_ri", _k=pl.lit("d"), _r="_r", query="query", url="url")

    def _keep_interior(self, cand: pl.DataFrame) -> None:
        """Complete runs that are not boundary runs: keep what the bounding keeps."""
        if cand.height == 0:
            return
        bp = self.plan
        if bp.keep == Bounding.EVENTS and not bp.distinct:
            q = cand.filter((pl.col("_k") == "e") & (pl.col("_r") <= bp.per_user))
            self._kept_q.append(q.select("query"))
            self._fig["kept"] += q.height
            self._held += q.height
            if bp.clicks_per_user is not None:
                c = cand.filter(pl.col("_k") == "c")
                self._kept_c.append(c.select("query", "url"))
                self._fig["kept_c"] += c.height
                self._held += c.height
        else:
            self._kept_q.append(cand.select(self._keys))
            self._fig["kept"] += cand.height
            self._held += cand.height

    def _fold(self, *, force: bool) -> None:
        if not force and self._held < FOLD_ROWS:
            return
        for kept, counts, keys in (
            (self._kept_q, self._counts_q, self._keys),
            (self._kept_c, self._counts_c, ["query", "url"]),
        ):
            if kept:
                counts.append(pl.concat(kept).group_by(keys).len("n"))
                kept.clear()
            if len(counts) > 1:
                merged = pl.concat(counts).group_by(keys).agg(pl.col("n").sum())
                counts[:] = [merged]
        self._held = 0

    # ------------------------------------------------------------------------------ the end

    def _finish(self) -> Iterator[pa.RecordBatch]:
        if self._ri < 0:  # an empty partition
            return
        self._fold(force=True)
        for kind, counts in (("q", self._counts_q), ("c", self._counts_c)):
            for c in counts:
                cols: dict[str, Any] = {"kind": kind, "query": c.get_column("query")}
                cols["n"] = c.get_column("n").cast(pl.Int64)
                if "url" in c.columns:
                    cols["url"] = c.get_column("url")
                yield _frame(cols, c.height)
        names = list(self._fig)
        yield _frame(
            {
                "kind": "f",
                "query": pl.Series(names, dtype=pl.String),
                "n": pl.Series([self._fig[k] for k in names], dtype=pl.Int64),
            },
            len(names),
        )
        last = _Run(
            user=self._u, last_q=self._q, last_t=self._t, events=self._events, clicks=self._clicks
        )
        if self._ri == 0:  # one run: both the first and the last
            r0 = self._run0
            r0.last_q, r0.last_t = self._q, self._t
            r0.events, r0.clicks = self._events, self._clicks
            yield from self._boundary(2, r0, self._first)
        else:
            yield from self._boundary(0, self._run0, self._first)
            yield from self._boundary(1, last, self._pending)

    def _boundary(self, pos: int, run: _Run, cand: pl.DataFrame | None) -> Iterator[pa.RecordBatch]:
        user = None if run.user is None else str(run.user)
        base = {"kind": "b", "part": self.part, "pos": pos, "user": user}
        yield _frame(
            base
            | {
                "sub": "s",
                "n": run.clicks,
                "rnk": run.events,
                "query": run.first_q,
                "t": run.first_t,
                "q2": run.last_q,
                "t2": run.last_t,
            },
            1,
        )
        if cand is not None and cand.height:
            yield _frame(
                base
                | {
                    "sub": cand.get_column("_k"),
                    "rnk": cand.get_column("_r").cast(pl.Int64),
                    "seq": pl.Series(range(cand.height), dtype=pl.Int64),
                    "query": cand.get_column("query"),
                    "url": cand.get_column("url"),
                    "n": 1,
                },
                cand.height,
            )


# ---------------------------------------------------------------------------------- driver


def _same_event(
    q1: str | None, t1: str | None, q2: str | None, t2: str | None, normalize: bool
) -> bool:
    """Does a row (q2, t2) continue the previous row's (q1, t1) event (same user assumed)?"""
    if t1 is None or t2 is None or t1 != t2:
        return False
    a, b = q1 or "", q2 or ""
    if a == b:
        return True
    if not normalize:
        return False
    s = normalized(pl.Series([a, b], dtype=pl.String), True)
    return bool(s[0] == s[1])


def stitch(
    out: pl.DataFrame, bp: BoundingPlan, *, normalize: bool
) -> tuple[dict[str, pl.DataFrame], dict[str, int], int]:
    """Counts, figures and rows from the aggregated partition output (``kind, ..., n``);
    raises :class:`NotContiguous` when a user's rows are not contiguous."""
    by_events = bp.keep == Bounding.EVENTS
    fig = Counter(
        dict(out.filter(pl.col("kind") == "f").group_by("query").agg(pl.col("n").sum()).iter_rows())
    )
    repeats = dict(out.filter(pl.col("kind") == "u").select("user", "n").iter_rows())
    b = out.filter(pl.col("kind") == "b")
    states = b.filter(pl.col("sub") == "s").sort("part", "pos")
    cands = b.filter(pl.col("sub") != "s").sort("part", "pos", "seq")
    by_run: dict[tuple[int, int], pl.DataFrame] = {
        (int(k[0]), int(k[1])): g for k, g in cands.group_by(["part", "pos"], maintain_order=True)
    }
    # boundary runs in file order; chains: runs of one user across adjacent partitions
    chains: list[list[dict[str, Any]]] = []
    prev_last: dict[str, Any] | None = None
    for st in states.iter_rows(named=True):
        if st["pos"] in (0, 2):
            if prev_last is not None and st["user"] is not None and st["user"] == prev_last["user"]:
                chains[-1].append(st)
            else:
                chains.append([st])
            if st["pos"] == 2:
                prev_last = st
            else:
                prev_last = None
        else:
            chains.append([st])
            prev_last = st
    legit: Counter[Any] = Counter()
    n_chains: Counter[Any] = Counter()
    for ch in chains:
        if len(ch) > 1:
            legit[ch[0]["user"]] += len(ch)
            n_chains[ch[0]["user"]] += 1
    if any(v > 1 for v in n_chains.values()) or dict(legit) != repeats:
        raise NotContiguous
    kept_q: list[tuple[Any, ...]] = []
    kept_c: list[tuple[Any, ...]] = []
    flips = 0
    for ch in chains:
        off_e = off_c = 0
        seen: set[tuple[Any, ...]] = set()
        prev: dict[str, Any] | None = None
        for st in ch:
            flip = prev is not None and _same_event(
                prev["q2"], prev["t2"], st["query"], st["t"], normalize
            )
            flips += int(flip)
            c = by_run.get((int(st["part"]), int(st["pos"])))
            if c is not None:
                for k, r, q, url in c.select("sub", "rnk", "query", "url").iter_rows():
                    if k == "e":
                        if not (flip and r == 1) and off_e + r - flip <= bp.per_user:
                            kept_q.append((q,))
                    elif k == "c":
                        if off_c + r <= (bp.clicks_per_user or 0):
                            kept_c.append((q, url))
                    else:
                        key = (q,) if bp.item != "clicks" else (q, url)
                        if len(seen) < bp.per_user and key not in seen:
                            seen.add(key)
                            kept_q.append(key)
            off_e += int(st["rnk"]) - int(flip)
            off_c += int(st["n"])
            prev = st
    rows = int(fig["rows"])
    users = int(fig["runs"]) - sum(len(ch) - 1 for ch in chains)
    events = int(fig["events"]) - flips
    keys = ["query", "url"] if bp.item == "clicks" else ["query"]

    def count(kind: str, ks: list[str], extra: list[tuple[Any, ...]]) -> pl.DataFrame:
        inner = out.filter(pl.col("kind") == kind).select(*ks, pl.col("n").alias("count"))
        schema = {k: pl.String for k in ks}
        more = pl.DataFrame(extra, schema=schema, orient="row").with_columns(
            count=pl.lit(1, pl.Int64)
        )
        both = pl.concat([inner.cast({"count": pl.Int64}), more])
        if not extra:  # Spark summed the interior counts already (one row per item)
            return inner.cast({"count": pl.Int64})
        # the seeded releases sort by key themselves (BoundedCounts.table)
        return both.group_by(ks).agg(pl.col("count").sum())

    if by_events and not bp.distinct:
        counts = {"queries": count("q", ["query"], kept_q)}
        figures = {
            "users": users,
            "query_events": events,
            "query_events_after_bounding": int(fig["kept"]) + len(kept_q),
        }
        if bp.clicks_per_user is not None:
            counts["clicks"] = count("c", ["query", "url"], kept_c)
            figures |= {
                "clicks": int(fig["clicks"]),
                "clicks_after_bounding": int(fig["kept_c"]) + len(kept_c),
            }
        return counts, figures, rows
    res = count("q", keys, kept_q)
    kept = int(fig["kept"]) + len(kept_q)
    if by_events:
        return (
            {"queries": res},
            {"users": users, "query_events": events, "query_events_after_bounding": kept},
            rows,
        )
    if bp.item == "queries":
        res = res.with_columns(item=pl.col("query")).select("item", "count")
        n_items = events
    else:
        res = res.with_columns(item=pl.col("query") + PAIR_SEP + pl.col("url"))
        res = res.select("item", "query", "url", "count")
        n_items = int(fig["clicks"])
    return {"items": res}, {"users": users, "items": n_items, "items_after_bounding": kept}, rows
