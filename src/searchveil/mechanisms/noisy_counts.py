"""Noise and thresholds on a table of counts, stated in mechanism terms — the one definition
that every engine runs where its counts are (docs/privacy/noise.md, "Where the noise is
drawn").

A :class:`NoisePlan` says, without naming any release: drop the rows whose count is below
``min_count``; then for each :class:`NoisyStep` in turn add fresh integer noise of its family
and scale (:class:`~searchveil.mechanisms.noise.DiscreteLaplace`,
:class:`~searchveil.mechanisms.noise.DiscreteGaussian`) to each remaining row's ``count``, keep
the rows whose noisy count passes the step's threshold, and publish the noisy value as a column
when the step says so. :func:`apply_steps` does that to one frame of rows; an engine calls it
where the counts are (on one machine for memory and Polars, in each Spark task), and only the
rows that pass reach the caller, with :class:`CountSummary` (private report figures: rows, the
sum of the counts, how many rows have each small count).

**Where the randomness comes from.** Each row's noise is independent of every other row's and
drawn by the exact samplers of :mod:`searchveil.mechanisms.noise`, whichever process draws it:

* a real release (a secure source): any process draws its rows' noise from its own
  :class:`~searchveil.rng.SecureRandom` — no key leaves anywhere, and the order in which rows
  receive their draws is immaterial (the draws are i.i.d.);
* a seeded experiment (``--seed``, not for release): the bytes must not depend on the engine or
  on how it partitions the rows. Every row falls in one of :data:`NOISE_BUCKETS` fixed buckets
  (:func:`noise_buckets`: a function of the key's UTF-8 bytes only); within a bucket the rows are
  taken in the order of their keys, and step ``i`` of bucket ``b`` draws from the seeded stream
  ``SeededRandom(key).derive(i, b)`` (:func:`bucket_rng`), ``key`` one word of the release's
  seeded source (:func:`noise_key`). Memory, Polars and Spark therefore draw the same noise for
  the same row, with the vectorised samplers unchanged (one call per bucket and step).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import IntegerNoise
from searchveil.rng import RandomSource, SecureRandom, SeededRandom

__all__ = [
    "NOISE_BUCKETS",
    "CountSummary",
    "NoisePlan",
    "NoisyCounts",
    "NoisyStep",
    "apply_plan_local",
    "apply_steps",
    "bucket_order",
    "bucket_rng",
    "bucket_runs",
    "draw_by_bucket",
    "key_hash",
    "noise_buckets",
    "noise_key",
    "seeded_steps",
    "task_rng",
]

#: the fixed number of noise buckets of a seeded release (never a function of the data or of an
#: engine's partitioning); a Spark task draws one bucket at a time. A bucket is one call of the
#: vectorised sampler per step, and a call on a small bucket costs ≈ 1.5 ms (the discrete
#: Gaussian): 32 buckets keep a seeded probe-reweight-2r release of the 215-user sample at
#: 0.3 s (4.3 s with 256). The price, for seeded experiments only: a seeded noise stage keeps at
#: most 32 tasks busy, each holding 1/32 of the table (a real release does not bucket at all)
NOISE_BUCKETS = 32
_BUCKET_BITS = 5  # 2**5 == NOISE_BUCKETS
#: rows given noise at a time by an unseeded release on one machine (the sampler's temporaries
#: and the noisy values stay a few tens of MB whatever the table's size)
CHUNK_ROWS = 1 << 20


@dataclass(frozen=True)
class NoisyStep:
    """One draw of fresh noise per row: ``count + noise``; with ``threshold`` the rows whose
    noisy count is above it (``> threshold``, or ``>=`` when ``inclusive``) are kept, the others
    dropped; with ``publish`` the noisy count is kept as that column (clamped at 0 when
    ``clamp``; the threshold is applied to the unclamped value)."""

    noise: IntegerNoise
    threshold: float | None = None
    inclusive: bool = False
    publish: str | None = None
    clamp: bool = False


@dataclass(frozen=True)
class NoisePlan:
    """What to do to a table of counts (see the module docstring). ``small_counts``: the
    summary counts the rows with each count 1 … ``small_counts`` (for the report's single-user
    figures)."""

    steps: tuple[NoisyStep, ...]
    min_count: int | None = None
    small_counts: int = 0

    @property
    def published(self) -> list[str]:
        return [s.publish for s in self.steps if s.publish is not None]


@dataclass
class CountSummary:
    """Private report figures of a table of counts (never published): its rows, the sum of its
    counts, the rows with ``count ≥ min_count``, and ``small[c]`` = the rows whose count is c
    (1 ≤ c ≤ the plan's ``small_counts``)."""

    items: int = 0
    total: int = 0
    at_least_min: int = 0
    small: dict[int, int] = field(default_factory=dict)

    def add(self, other: CountSummary) -> None:
        self.items += other.items
        self.total += other.total
        self.at_least_min += other.at_least_min
        for c, n in other.small.items():
            self.small[c] = self.small.get(c, 0) + n

    @classmethod
    def of(cls, frame: pl.DataFrame, plan: NoisePlan) -> CountSummary:
        c = frame.get_column("count")
        small: dict[int, int] = {}
        if plan.small_counts > 0 and frame.height:
            vc = c.filter(c <= plan.small_counts).value_counts(name="n")
            small = {int(a): int(b) for a, b in vc.iter_rows() if int(a) >= 1}
        at_least = frame.height if plan.min_count is None else int((c >= plan.min_count).sum())
        return cls(frame.height, int(c.sum() or 0), at_least, small)

    def to_dict(self) -> dict[str, Any]:
        return {"items": self.items, "total": self.total, "at_least_min": self.at_least_min,
                "small": dict(sorted(self.small.items()))}  # fmt: skip


@dataclass
class NoisyCounts:
    """What a release receives from a table of counts: the rows that passed every threshold
    (keys, ``count``, the published columns), the table's :class:`CountSummary`, and how many
    rows reached the process that asked (``received``: the kept rows, or on an engine every row
    it sent back — reported in ``--json``)."""

    rows: pl.DataFrame
    summary: CountSummary
    received: int


def noise_key(rng: RandomSource) -> int | None:
    """The key of a seeded release's noise streams (one word of ``rng``), or None for a secure
    source (each process then draws from its own :class:`~searchveil.rng.SecureRandom`)."""
    if not rng.seeded:
        return None
    return int(rng.words(1)[0] >> np.uint64(1))


def bucket_rng(key: int, step: int, bucket: int) -> SeededRandom:
    """The seeded stream of ``step`` in ``bucket`` (the same in every engine and process)."""
    return SeededRandom(key).derive(step, bucket)


# ------------------------------------------------------------------------ the noise buckets
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """SplitMix64's finaliser (a bijection of 64-bit words), vectorised; wraps modulo 2^64."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _text_words(s: pl.Series) -> npt.NDArray[np.uint64]:
    """A 64-bit word per string, a fixed function of its UTF-8 bytes: its length, first 8
    and last 8 bytes, mixed (null: a distinct constant). Two strings that agree in all three
    share a bucket, which only makes that bucket larger."""
    import pyarrow as pa  # imported when first used (seeded runs): the CLI starts without it

    arr = s.cast(pl.String).to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    arr = arr.cast(pa.large_string())
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    bufs = arr.buffers()
    off = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    padded = np.concatenate([data[: int(off[-1])], np.zeros(8, dtype=np.uint8)])
    start, end = off[:-1], off[1:]
    length = (end - start).astype(np.uint64)
    first = np.zeros(n, dtype=np.uint64)
    last = np.zeros(n, dtype=np.uint64)
    for j in range(8):
        shift = np.uint64(8 * j)
        i = start + j
        ok = i < end
        first |= np.where(ok, padded[np.minimum(i, padded.size - 1)], 0).astype(np.uint64) << shift
        i = end - 8 + j
        ok = i >= start
        last |= np.where(ok, padded[np.clip(i, 0, padded.size - 1)], 0).astype(np.uint64) << shift
    h = _mix(_mix(_mix(length + _GOLDEN) ^ first) ^ last)
    if arr.null_count:
        h = np.where(np.asarray(arr.is_null()), _GOLDEN, h)
    return h


def key_hash(frame: pl.DataFrame, keys: list[str]) -> npt.NDArray[np.uint64]:
    """A 64-bit word per row, a fixed function of its key columns' UTF-8 bytes (no hash
    seeded per process, no library's unstable hash): the same on every engine, in every
    process and partitioning. Its top bits are the row's noise bucket."""
    h = np.full(frame.height, _GOLDEN, dtype=np.uint64)
    for k in keys:
        h = _mix(h ^ _text_words(frame.get_column(k)))
    return h


def noise_buckets(frame: pl.DataFrame, keys: list[str]) -> npt.NDArray[np.int64]:
    """The noise bucket (0 … NOISE_BUCKETS−1) of each row: the top bits of :func:`key_hash`."""
    return (key_hash(frame, keys) >> np.uint64(64 - _BUCKET_BITS)).astype(np.int64)


def bucket_order(
    frame: pl.DataFrame, keys: list[str]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The canonical draw order of a seeded release's rows: by :func:`key_hash` (so by bucket
    first), rows with equal words by their keys' text. Returns (the row indices in that order,
    each of them's bucket). A fixed function of the set of keys, whatever the rows' order or
    partitioning; sorting 64-bit words, not strings (the text decides only between rows whose
    length, first and last 8 bytes agree)."""
    h = key_hash(frame, keys)
    order = np.argsort(h, kind="stable")
    hs = h[order]
    tie = np.flatnonzero(hs[1:] == hs[:-1])
    if tie.size:  # rows sharing a word: ordered by their keys' text within each run of them
        rows = np.unique(np.concatenate([tie, tie + 1]))
        run = np.cumsum(np.r_[True, np.diff(rows) > 1] | np.r_[True, hs[rows][1:] != hs[rows][:-1]])
        sub = frame.select(keys)[order[rows].tolist()].with_columns(
            _run=pl.Series(run), _i=pl.Series(order[rows])
        )
        order[rows] = sub.sort(["_run", *keys]).get_column("_i").to_numpy()
    return order.astype(np.int64), (hs >> np.uint64(64 - _BUCKET_BITS)).astype(np.int64)


def bucket_runs(buckets_sorted: npt.NDArray[np.int64]) -> list[tuple[int, int]]:
    """(bucket, rows) of each run of a sorted bucket array, in order."""
    if buckets_sorted.size == 0:
        return []
    starts = np.flatnonzero(np.r_[True, buckets_sorted[1:] != buckets_sorted[:-1]])
    lens = np.diff(np.r_[starts, buckets_sorted.size])
    return list(zip(buckets_sorted[starts].tolist(), lens.tolist(), strict=True))


def draw_by_bucket(
    runs: list[tuple[int, int]], noise: IntegerNoise, key: int, step: int
) -> npt.NDArray[np.int64]:
    """Noise for rows already in the canonical order (:func:`bucket_order`), given as
    ``(bucket, rows)`` runs in increasing bucket order: one draw of the bucket's stream of
    ``step`` per bucket."""
    parts = [noise.sample(n, bucket_rng(key, step, b)) for b, n in runs if n]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


# ------------------------------------------------------------------------------ the steps
def _check(frame: pl.DataFrame, plan: NoisePlan) -> None:
    if "count" not in frame.columns:
        raise InvalidParameterError("counts", frame.columns, "a frame with a 'count' column")
    for s in plan.steps:
        if s.publish == "count" or (s.publish is not None and s.publish in frame.columns):
            raise InvalidParameterError("publish", s.publish, "a new column name")


def apply_steps(
    frame: pl.DataFrame,
    plan: NoisePlan,
    draw: Callable[[int, pl.DataFrame], npt.NDArray[np.int64]],
) -> pl.DataFrame:
    """The plan on ``frame`` (keys + ``count``): ``draw(i, rows)`` gives step ``i``'s noise for
    ``rows`` (aligned with them). Returns the rows that pass every threshold, with the
    published columns."""
    df = frame
    if plan.min_count is not None:
        df = df.filter(pl.col("count") >= plan.min_count)
    for i, st in enumerate(plan.steps):
        if df.height == 0:
            break
        noisy = df.get_column("count").to_numpy().astype(np.int64) + draw(i, df)
        cols = []
        if st.publish is not None:
            shown = np.maximum(noisy, 0) if st.clamp else noisy
            cols.append(pl.Series(st.publish, shown, dtype=pl.Int64))
        if cols:
            df = df.with_columns(cols)
        if st.threshold is not None:
            keep = noisy >= st.threshold if st.inclusive else noisy > st.threshold
            df = df.filter(pl.Series(keep))
    return _with_published(df, plan)


def _with_published(df: pl.DataFrame, plan: NoisePlan) -> pl.DataFrame:
    """Published columns present even when no row reached their step."""
    missing = [c for c in plan.published if c not in df.columns]
    return df.with_columns([pl.lit(None, dtype=pl.Int64).alias(c) for c in missing])


def seeded_steps(
    frame: pl.DataFrame, keys: list[str], plan: NoisePlan, key: int, first_step: int = 0
) -> pl.DataFrame:
    """The plan on ``frame`` with the seeded bucket streams (module docstring): the rows in
    the canonical order (:func:`bucket_order`), step ``i`` drawing bucket by bucket from the
    stream of step ``first_step + i``. Returns the kept rows in that order."""
    order, buckets = bucket_order(frame, keys)
    df = frame[order.tolist()].with_columns(_b=pl.Series(buckets, dtype=pl.Int64))

    def draw(i: int, rows: pl.DataFrame) -> npt.NDArray[np.int64]:
        runs = bucket_runs(rows.get_column("_b").to_numpy())
        return draw_by_bucket(runs, plan.steps[i].noise, key, first_step + i)

    return apply_steps(df, plan, draw).drop("_b")


def apply_plan_local(
    frame: pl.DataFrame, keys: list[str], plan: NoisePlan, rng: RandomSource, first_step: int = 0
) -> pl.DataFrame:
    """The plan on a frame held by this process (memory, Polars, or the few rows of a public
    or released domain). Seeded: :func:`seeded_steps`. Secure: the rows in chunks of
    :data:`CHUNK_ROWS`, each step's noise from ``rng`` (i.i.d. draws: the order is immaterial),
    so the noisy values of the whole table are never held at once."""
    _check(frame, plan)
    if rng.seeded:
        key = noise_key(rng)
        assert key is not None
        return seeded_steps(frame, keys, plan, key, first_step)
    parts = [
        apply_steps(frame.slice(lo, CHUNK_ROWS), plan,
                    lambda i, rows: plan.steps[i].noise.sample(rows.height, rng))
        for lo in range(0, max(frame.height, 1), CHUNK_ROWS)
    ]  # fmt: skip
    return pl.concat(parts, how="vertical_relaxed") if len(parts) > 1 else parts[0]


def task_rng() -> RandomSource:
    """A secure source for one process (an executor's task): its own ``os.urandom``."""
    return SecureRandom()
