"""Generate a synthetic log from a fitted model, chunk by chunk of users (numpy draws, Polars
strings), in worker processes when asked."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.rng import RandomSource
from searchveil.synth.fit import exposure
from searchveil.synth.layout import Columns, TimeLaw, assemble, event_times, session_ids
from searchveil.synth.model import MAX_URL_RANK, StringMode, SynthModel
from searchveil.synth.shape import Histogram, shape_edges
from searchveil.validate import check_int, parse_choice

# a chunk as a frame (None), as TSV bytes, or as integer query keys only (no spelling)
ChunkEncoding = Literal["tsv", "keys"]
_MAX_HEAD_VOCAB = 50_000_000
_MIN_TAIL_WORDS = 3
_U64 = np.uint64


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64 finaliser: a fixed bijective hash of 64-bit keys (spelling, not randomness)."""
    with np.errstate(over="ignore"):
        z = x + _U64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
        return z ^ (z >> _U64(31))


class _Alias:
    """Walker/Vose alias table: O(1) vectorised draws from a fixed discrete distribution, fed
    with 64-bit hashes or uniform words (spelling and synthetic draws, never privacy noise)."""

    def __init__(self, probs: npt.NDArray[np.float64]) -> None:
        p = np.asarray(probs, dtype=float)
        n = p.size
        scaled = p / p.sum() * n
        prob = np.ones(n)
        alias = np.arange(n, dtype=np.int64)
        small = [i for i in range(n) if scaled[i] < 1.0]
        large = [i for i in range(n) if scaled[i] >= 1.0]
        while small and large:
            s_, l_ = small.pop(), large.pop()
            prob[s_] = scaled[s_]
            alias[s_] = l_
            scaled[l_] = scaled[l_] + scaled[s_] - 1.0
            (small if scaled[l_] < 1.0 else large).append(l_)
        self.prob, self.alias, self.n = prob, alias, n

    def from_hash(self, h: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        col = ((h >> _U64(32)) * _U64(self.n)) >> _U64(32)
        frac = (h & _U64(0xFFFFFFFF)).astype(np.float64) * (1.0 / 4294967296.0)
        c = col.astype(np.int64)
        return np.where(frac < self.prob[c], c, self.alias[c])


class _Speller:
    """Deterministic strings for query keys and (query key, url rank) pairs."""

    def __init__(self, model: SynthModel, strings: StringMode, head_size: int) -> None:
        if strings == "real":
            self.words = pl.Series("w", model.words, dtype=pl.String)
            self.head = pl.Series("q", model.head_queries[:head_size], dtype=pl.String)
        else:
            self.words = pl.Series("w", [f"w{i}" for i in range(len(model.words))])
            self.head = pl.Series("q", [], dtype=pl.String)
        self.head_vocab = head_size
        self.word_alias = _Alias(np.asarray(model.word_probs, dtype=float))
        # words of synthetic (non-listed) queries: the word law tempered (p^½), so that
        # millions of ≥3-word spellings stay distinct instead of colliding on frequent words
        self.tail_word_alias = _Alias(np.sqrt(np.asarray(model.word_probs, dtype=float)))
        self.len_alias = _Alias(np.asarray(model.query_len_probs, dtype=float))

    def queries(self, keys: npt.NDArray[np.uint64]) -> pl.Series:
        """The query string of each key (head keys spell as the sample's shared queries).
        Keys may repeat; callers pass each distinct key about once (the spelling is a pure
        function of the key, so duplicates only cost time)."""
        import pyarrow as pa

        base = _mix(keys ^ _U64(0x51A7))
        length = self.len_alias.from_hash(base) + 1
        # keys without a real spelling are meant to be distinct queries: short spellings drawn
        # from the word law would collide on frequent words ("in", "of", "county of") and
        # invent a fake head, so they get >= 3 words from the tempered word law
        length = np.maximum(length, _MIN_TAIL_WORDS)
        offsets = np.zeros(keys.size + 1, dtype=np.int64)
        np.cumsum(length, out=offsets[1:])
        flat_key = np.repeat(base, length)
        j = np.arange(offsets[-1], dtype=np.uint64) - np.repeat(offsets[:-1], length).astype(
            np.uint64
        )
        widx = self.tail_word_alias.from_hash(_mix(flat_key + j + _U64(1)))
        values = self.words.gather(widx).to_arrow()
        lists = pa.LargeListArray.from_arrays(pa.array(offsets), values)
        spelled = pl.Series(pl.from_arrow(lists)).list.join(" ")
        if self.head.len():
            in_head = keys < _U64(self.head.len())
            if in_head.any():
                hv = self.head.gather(np.where(in_head, keys, 0).astype(np.int64))
                spelled = pl.select(
                    pl.when(pl.Series(in_head)).then(hv).otherwise(spelled)
                ).to_series()
        return spelled.alias("Query")

    def urls(self, keys: npt.NDArray[np.uint64], k: npt.NDArray[np.int64]) -> pl.Series:
        h1 = _mix((keys * _U64(16)) + k.astype(np.uint64) + _U64(0xC11C))
        h2 = _mix(h1)
        a = self.words.gather(self.word_alias.from_hash(h1))
        b = self.words.gather(self.word_alias.from_hash(h2))
        return pl.select(
            pl.concat_str([pl.lit("http://www."), a, b, pl.lit(".com")]).alias("ClickURL")
        ).to_series()


@dataclass
class _Plan:
    users: int
    rows_target: int | None
    activity_scale: float
    head_vocab: int
    pin_cum: npt.NDArray[np.float64]
    cont_cum: npt.NDArray[np.float64]
    cpe_cum: npt.NDArray[np.float64]
    url_cum: npt.NDArray[np.float64]
    epu: npt.NDArray[np.int64]
    sessions: Histogram
    times: TimeLaw | None


def _layout_laws(model: SynthModel) -> tuple[Histogram, TimeLaw | None]:
    """The session and time laws the layout draws from: the model's exact shape histograms;
    for a model saved before the layout, derived from its gap quantiles (a gap of at most 30
    minutes continues a session: geometric session lengths; days and hours uniform over the
    model's time span)."""
    sh = model.shape
    if sh.get("sessions"):
        sessions = Histogram.of(shape_edges("sessions"), sh["sessions"])
        if "first_day" not in sh:
            return sessions, None
        days = np.asarray(sh["days"], dtype=np.float64)
        return sessions, TimeLaw(
            first_day=int(sh["first_day"]),
            days=Histogram.of(np.arange(days.size + 1), days),
            hours=Histogram.of(shape_edges("hours"), sh["hours"]),
            gaps=Histogram.of(shape_edges("gaps"), sh["gaps"]),
        )
    q = np.asarray(model.gap_quantiles, dtype=np.float64)
    inside = q[q <= 1800]
    p = inside.size / q.size if q.size else 0.0
    lengths = p ** np.arange(shape_edges("sessions").size - 1) * (1 - p)
    sessions = Histogram.of(shape_edges("sessions"), lengths if p < 1 else [1.0])
    if model.time_start is None or not q.size:
        return sessions, None
    edges = shape_edges("gaps")
    gaps = np.histogram(inside, bins=edges)[0] if inside.size else np.ones(edges.size - 1)
    first, last = model.time_start // 86400, (model.time_end or model.time_start) // 86400
    return sessions, TimeLaw(
        first_day=int(first),
        days=Histogram.of(np.arange(last - first + 2), np.ones(last - first + 1)),
        hours=Histogram.of(shape_edges("hours"), np.ones(24)),
        gaps=Histogram.of(edges, gaps),
    )


def _plan(model: SynthModel, users: int, rows: int | None) -> _Plan:
    epu = np.asarray(model.events_per_user, dtype=np.int64)
    cpe = np.asarray(model.clicks_per_event, dtype=float)
    rows_per_event = float(cpe[0] + (np.arange(cpe.size) * cpe)[1:].sum())
    scale = 1.0
    if rows is not None:
        expected = users * float(epu.mean()) * rows_per_event
        scale = rows / expected
    vocab = max(1, int(round(model.head_vocab * (users / model.sample_users) ** model.heaps_beta)))
    vocab = min(vocab, _MAX_HEAD_VOCAB)
    pin_cum, cont_cum = _head_law(model, vocab)
    cpe_cum = np.cumsum(cpe) / cpe.sum()
    url_cum = np.cumsum(np.asarray(model.url_rank_probs, dtype=float))
    url_cum /= url_cum[-1]
    sessions, times = _layout_laws(model)
    return _Plan(users, rows, scale, pin_cum.size + cont_cum.size, pin_cum, cont_cum, cpe_cum,
                 url_cum, epu, sessions, times)  # fmt: skip


def _head_law(
    model: SynthModel, vocab: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Cumulative per-draw probabilities of the pinned head (ranks 1..K, for a one-event user;
    a user draws them with probabilities w·p_k, w = :func:`exposure`) and of the continuation
    (ranks K+1..V, the same for every user).

    Pinned ranks keep their fitted probabilities at every population size, so the share of
    users holding each of them does not shrink as users are added. The continuation goes on
    from the pinned law at the sample's average exposure, p_k = c0·(k/(K+1))^(−α), with V
    growing as the sample's shared vocabulary (Heaps, β); its mass is capped at
    ``head_mass_max`` − (average exposure)·(pinned mass) (V is cut where the cap is reached).
    A model without a pinned head (older JSON) gets Zipf(s) at mass 1 − ``tail_rate``."""
    pinned = np.asarray(model.head_probs, dtype=np.float64)
    if pinned.size == 0:
        w = np.arange(1, vocab + 1, dtype=np.float64) ** (-model.head_zipf_s)
        return np.zeros(0), np.cumsum(w) / w.sum() * (1.0 - model.tail_rate)
    k0 = pinned.size
    n = max(vocab - k0, 0)
    ranks = np.arange(k0 + 1, k0 + n + 1, dtype=np.float64)
    cont = model.head_join * (ranks / (k0 + 1)) ** (-model.head_alpha)
    cum = np.cumsum(cont)
    room = max(model.head_mass_max - model.head_join_exposure * float(pinned.sum()), 0.0)
    cut = int(np.searchsorted(cum, room, side="right"))
    return np.cumsum(pinned), cum[:cut]


def _events_per_user(plan: _Plan, gen: np.random.Generator, n_users: int) -> npt.NDArray[np.int64]:
    """Query events per user: the fitted law, scaled to the row target (randomized rounding),
    at least one."""
    n_ev = plan.epu[gen.integers(0, plan.epu.size, n_users)]
    if plan.activity_scale != 1.0:
        x = n_ev * plan.activity_scale
        n_ev = np.floor(x).astype(np.int64) + (gen.random(n_users) < (x - np.floor(x)))
    return np.maximum(n_ev, 1)


def _repeat_roots(
    model: SynthModel,
    gen: np.random.Generator,
    starts: npt.NDArray[np.int64],
    pos: npt.NDArray[np.int64],
    idx: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """Per event, the earlier event of the same user it repeats, followed to its root (itself
    for a fresh event)."""
    total = idx.size
    rep = (pos > 0) & (gen.random(total) < model.repeat_rate)
    src = starts + np.floor(gen.random(total) * pos).astype(np.int64)
    ptr = np.where(rep, src, idx)
    while True:
        nxt = ptr[ptr]
        if np.array_equal(nxt, ptr):
            break
        ptr = nxt
    return ptr


def _fresh_keys(
    model: SynthModel,
    plan: _Plan,
    gen: np.random.Generator,
    n_ev: npt.NDArray[np.int64],
    tail_offset: int,
) -> tuple[npt.NDArray[np.uint64], int]:
    """A fresh query key per event and the number of tail keys used: a draw u is head key
    searchsorted(cum, u / w) for the user's exposure w (so the user's head probabilities are
    w·p_k) and a unique tail query past the head mass."""
    total = int(n_ev.sum())
    w_ev = np.repeat(exposure(n_ev, model.repeat_rate, model.head_gamma), n_ev)
    u = gen.random(total)
    pin_mass = float(plan.pin_cum[-1]) if plan.pin_cum.size else 0.0
    in_pin = u < w_ev * pin_mass
    k_pin = np.searchsorted(plan.pin_cum, u / w_ev, side="right")
    k_cont = plan.pin_cum.size + np.searchsorted(plan.cont_cum, u - w_ev * pin_mass, side="right")
    keys = np.where(in_pin, k_pin, k_cont).astype(_U64)
    tail = keys >= _U64(plan.head_vocab)
    n_tail = int(tail.sum())
    keys[tail] = _U64(plan.head_vocab + tail_offset) + np.arange(n_tail, dtype=np.uint64)
    return keys, n_tail


def _chunk(
    model: SynthModel,
    plan: _Plan,
    speller: _Speller,
    gen: np.random.Generator,
    first_user: int,
    n_users: int,
    tail_offset: int,
    keys_only: bool = False,
) -> tuple[pl.DataFrame, int]:
    """One chunk of users. Returns the AOL-layout frame and the number of tail keys used
    (``keys_only``: the query events ``user, query (key), pos`` instead, before any draw of
    clicks or times, so the keys are those of the full chunk)."""
    n_ev = _events_per_user(plan, gen, n_users)
    total = int(n_ev.sum())
    starts = np.repeat(np.cumsum(n_ev) - n_ev, n_ev)
    pos = np.arange(total, dtype=np.int64) - starts
    idx = np.arange(total, dtype=np.int64)
    ptr = _repeat_roots(model, gen, starts, pos, idx)
    keys, n_tail = _fresh_keys(model, plan, gen, n_ev, tail_offset)
    keys = keys[ptr]
    if keys_only:
        uid = np.repeat(np.arange(first_user, first_user + n_users, dtype=np.int64) + 1, n_ev)
        return pl.DataFrame({"user": uid, "query": keys, "pos": pos}), n_tail

    # clicks per event: 0 is a query-only row; the clicked URLs are distinct ranks of the
    # query's URL list, starting at a drawn rank
    clicks = np.searchsorted(plan.cpe_cum, gen.random(total), side="right")
    clicks = np.minimum(clicks, plan.cpe_cum.size - 1)
    click_event = np.repeat(idx, clicks)
    within = np.arange(click_event.size, dtype=np.int64) - np.repeat(np.cumsum(clicks) - clicks,
                                                                     clicks)  # fmt: skip
    first_k = np.searchsorted(plan.url_cum, gen.random(total), side="right")
    k = (first_k[click_event] + within) % MAX_URL_RANK

    # the layout: sessions, then times (when the model has them)
    owner = np.repeat(np.arange(n_users, dtype=np.int64), n_ev)
    sess = session_ids(n_ev, plan.sessions, gen)
    times = event_times(owner, sess, plan.times, gen) if plan.times is not None else None

    # spell each root event (non-repeat) once; repeats point at their root
    roots = np.flatnonzero(ptr == idx)
    root_pos = np.empty(total, dtype=np.int64)
    root_pos[roots] = np.arange(roots.size)
    query_col = speller.queries(keys[roots]).gather(root_pos[ptr])
    df = assemble(
        anon=owner + first_user + 1, query=query_col, time=times, click_event=click_event,
        click_url=speller.urls(keys[click_event], k), click_rank=k + 1, columns=Columns(),
    )  # fmt: skip
    return df, n_tail


_WORKER_CACHE: dict[str, tuple[_Plan, _Speller]] = {}


def _chunk_task(
    model_json: str,
    users: int,
    rows: int | None,
    strings: StringMode,
    chunk_index: int,
    first_user: int,
    n_users: int,
    seed: list[int],
    encode: ChunkEncoding | None,
) -> pl.DataFrame | bytes:
    """One chunk, computed from scratch (also in a worker process). Chunks are independent:
    each has its own generator (from ``seed``) and its own range of tail keys, so the output
    does not depend on the number of workers."""
    cached = _WORKER_CACHE.get(model_json + f"|{users}|{rows}|{strings}")
    model = SynthModel.from_json(model_json)
    if cached is None:
        plan = _plan(model, users, rows)
        cached = (plan, _Speller(model, strings, plan.head_vocab))
        _WORKER_CACHE.clear()
        _WORKER_CACHE[model_json + f"|{users}|{rows}|{strings}"] = cached
    plan, speller = cached
    gen = np.random.Generator(np.random.PCG64(seed))
    df, _ = _chunk(
        model, plan, speller, gen, first_user, n_users, chunk_index << 36, encode == "keys"
    )
    if encode == "tsv":
        return df.write_csv(
            separator="\t", include_header=chunk_index == 0, null_value="", quote_style="never"
        ).encode()
    return df


def generate_chunks(
    model: SynthModel,
    *,
    users: int,
    rng: RandomSource,
    rows: int | None,
    strings: StringMode,
    chunk_users: int,
    workers: int,
    encode: ChunkEncoding | None,
) -> Iterator[tuple[int, pl.DataFrame | bytes]]:
    check_int("users", users, minimum=1)
    if rows is not None:
        check_int("rows", rows, minimum=1)
    check_int("chunk_users", chunk_users, minimum=1)
    check_int("workers", workers, minimum=1)
    mj = model.to_json()
    starts = list(range(0, users, chunk_users))
    seeds = rng.words(4 * len(starts)).reshape(-1, 4)
    tasks = [
        (mj, users, rows, strings, i, first, min(chunk_users, users - first),
         [int(x) for x in seeds[i]], encode)
        for i, first in enumerate(starts)
    ]  # fmt: skip
    if workers == 1 or len(tasks) == 1:
        for t in tasks:
            yield t[6], _chunk_task(*t)
        return
    import multiprocessing as mp
    from collections import deque
    from concurrent.futures import Future, ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as ex:
        pending: deque[tuple[int, Future[pl.DataFrame | bytes]]] = deque()
        it = iter(tasks)
        for t in it:
            pending.append((t[6], ex.submit(_chunk_task, *t)))
            if len(pending) > workers:
                break
        while pending:
            n, fut = pending.popleft()
            yield n, fut.result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append((nxt[6], ex.submit(_chunk_task, *nxt)))


def generate(
    model: SynthModel,
    *,
    users: int,
    rng: RandomSource,
    rows: int | None = None,
    strings: StringMode | str = StringMode.REAL,
    chunk_users: int = 100_000,
    workers: int = 1,
) -> Iterator[pl.DataFrame]:
    """Yield the synthetic log in AOL layout, chunk by chunk (users in increasing AnonID).
    The output depends on ``rng`` and ``chunk_users`` only, not on ``workers``."""
    strings = parse_choice("strings", strings, StringMode)
    for _, df in generate_chunks(
        model, users=users, rng=rng, rows=rows, strings=strings, chunk_users=chunk_users,
        workers=workers, encode=None,
    ):  # fmt: skip
        assert isinstance(df, pl.DataFrame)
        yield df


# generate()'s keyword arguments on purpose: the same arguments give the same draws
def synthetic_events(
    model: SynthModel,
    *,
    users: int,
    rng: RandomSource,
    rows: int | None = None,
    strings: StringMode | str = StringMode.REAL,
    chunk_users: int = 100_000,
    workers: int = 1,
    spell: bool = True,
) -> pl.DataFrame:
    """The query events (``user, query, pos``, as :func:`searchveil.model.query_events`
    returns) of the synthetic log :func:`generate` yields for the same arguments, without
    writing it: for in-memory experiments (e.g. :mod:`searchveil.evaluate.dcurve`) at scale.
    A query event is a run of rows with the same (user, query, time).

    ``spell=False``: ``query`` is the synthetic query's integer key (UInt64) instead of its
    string, and no clicks, times or strings are made (several times faster). The keys are the
    same draws as the spelled log's; only spelling collisions (rare: ≥ 3-word spellings) and
    consecutive repeats at the same second (merged into one event there) differ."""
    strings = parse_choice("strings", strings, StringMode)
    if not spell:
        return pl.concat(
            [
                d
                for _, d in generate_chunks(
                    model, users=users, rng=rng, rows=rows, strings=strings,
                    chunk_users=chunk_users, workers=workers, encode="keys",
                )
                if isinstance(d, pl.DataFrame)
            ]
        )  # fmt: skip
    parts = []
    for df in generate(
        model, users=users, rng=rng, rows=rows, strings=strings, chunk_users=chunk_users,
        workers=workers,
    ):  # fmt: skip
        same = (
            (pl.col("AnonID") == pl.col("AnonID").shift(1))
            & (pl.col("Query") == pl.col("Query").shift(1))
            & (pl.col("QueryTime").fill_null("") == pl.col("QueryTime").shift(1).fill_null(""))
        ).fill_null(False)
        parts.append(
            df.filter(~same).select(
                pl.col("AnonID").alias("user"),
                pl.col("Query").alias("query"),
                pl.int_range(pl.len()).over("AnonID").cast(pl.Int64).alias("pos"),
            )
        )
    return pl.concat(parts)
