"""A synthetic search-log generator calibrated on a real sample, for scale tests and benchmarks.

Why: the real logs we may bundle are small (the shared AOL extracts have 215 and 1,000 users);
the scale benchmarks need AOL-sized logs (36M rows, 657k users) with the *shape* that drives the
cost and the utility of the releases: how many queries a user issues, how often users repeat
themselves, how skewed query popularity is, how the vocabulary grows with the number of users,
how many clicks a query gets and how they spread over URLs, and how queries are spaced in time.

What :func:`fit` estimates from the calibration log (all stored in :class:`SynthModel`, JSON):

* ``events_per_user`` — the empirical distribution of query events per user (bootstrapped;
  optionally rescaled so that the output has about ``rows`` rows);
* ``repeat_rate`` — P(a user's query event repeats one of *their own* earlier queries);
* ``tail_rate`` — among a user's first occurrences of a query, the share of queries held by
  that user only (reported; the generator's unique tail is what the head law leaves);
* **the head** (issue 12: the share of users holding each top query must not shrink as users
  are added, and head queries must be real ones). Each *fresh draw* of a user (the first event
  and each later event that is not a repeat) picks query k with probability w·p_k, where

  - ``head_probs`` p_1..p_K are *pinned* for the K queries held by ≥ ``min_head_users`` (3)
    users of the sample, moment-matched so that Σ_users P(hold) = the sample's holders under
    this very generator (P(hold) = 1 − (1 − wp)(1 − (1−r)wp)^(n−1), :func:`hold_probability`);
  - ``head_gamma`` γ: a user's *exposure* w = E^(γ−1), E = 1 + (n−1)(1−r) their expected
    fresh draws (:func:`exposure`). Heavy users hold popular queries less often than
    independent draws predict; γ is the maximum-likelihood value (grid 0.2..1) for the sample's
    user × pinned-query holding matrix (0.62 on the bundled sample; γ = 1 is rejected);
  - ranks K+1..V continue the pinned law at the sample's average exposure ``head_join_exposure``:
    p_k = ``head_join``·(k/(K+1))^(−α), α (``head_alpha``) the log-log slope of the pinned
    p_k; V = ``head_vocab``·(U/``sample_users``)^``heaps_beta`` grows with the population
    (Heaps; β from random quarters and halves of the sample, capped to [0.3, 1]) until the
    continuation's mass reaches ``head_mass_max`` minus the average pinned mass;
    ``head_mass_max`` (0.5) is the one constant chosen against a published figure (AOL's
    10.15M distinct queries at 657k users; docs/synth.md);
  - everything else is a globally unique tail query.

  ``head_zipf_s`` (the old Zipf fit over shared queries) is kept for reports and older JSON.
* ``clicks_per_event`` — the distribution of clicks per query event (0 = a row without URL);
* ``url_rank_probs`` — the share of a query's clicks that go to its k-th most clicked URL
  (k = 1..10); each synthetic query has a deterministic list of URLs, so different users who
  issue the same query click the same (query, url) pairs as in a real log;
* ``gap_quantiles`` — 1,001 quantiles of the time between consecutive query events of a user
  (inverse-CDF sampling with linear interpolation); user start times are uniform over the
  sample's time span;
* ``words`` / ``word_probs`` / ``query_len_probs`` — the keyword distribution and the number of
  words per query, used to spell queries and URLs;
* ``head_queries`` — the sample's own queries, most users (then most events) first: head key
  k is spelled by the k-th (so ranks beyond the pinned ones are real queries of the sample too,
  up to ``max_head_strings``); keys beyond them and the tail are spelled with ≥ 3 words drawn
  from the tempered (p^½) word law, so millions of them stay distinct instead of colliding on
  frequent words ("of", "in", "county of") into a fake head.

Strings. With ``strings="real"`` (default) the output spells the head with the calibration log's
own shared queries and words, so it *reads* like a search log. **That is verbatim data of the
calibration log: a synthetic log is not a privacy-preserving release** (it is not differentially
private and is never written with a ledger). ``strings="opaque"`` spells every query and URL
with opaque tokens (``w123``) instead, keeping only the statistics.

Speed: generation is vectorised per chunk of users (numpy for the draws, Polars for the
strings and the TSV/Parquet writer), the compression of ``.gz`` output runs in a thread beside
the generation of the next chunk, and the file is written to a temporary name and renamed.
"""

from __future__ import annotations

import json
import math
import os
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from queue import Queue
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.errors import InputFormatError, InvalidParameterError, OutputExistsError
from searchveil.model import SearchLog, query_events
from searchveil.rng import RandomSource
from searchveil.validate import check_choice, check_int, check_probability

OUTPUT_FORMATS = ("tsv", "tsv.gz", "parquet")
STRING_MODES = ("real", "opaque")
_MAX_URL_RANK = 10
_MAX_CLICKS = 30
_MAX_QUERY_LEN = 6
_MAX_HEAD_VOCAB = 50_000_000
HEAD_MASS_MAX = 0.5
_MIN_TAIL_WORDS = 3
_U64 = np.uint64


@dataclass(frozen=True)
class SynthModel:
    """The fitted statistics (see the module docstring). ``to_json``/``from_json`` round-trip."""

    source: dict[str, Any]
    sample_users: int
    events_per_user: list[int]
    repeat_rate: float
    tail_rate: float
    head_zipf_s: float
    head_vocab: int
    heaps_beta: float
    clicks_per_event: list[float]
    url_rank_probs: list[float]
    gap_quantiles: list[float]
    time_start: int | None
    time_end: int | None
    has_rank: bool
    words: list[str]
    word_probs: list[float]
    query_len_probs: list[float]
    head_queries: list[str] = field(default_factory=list)
    head_probs: list[float] = field(default_factory=list)
    head_alpha: float = 1.0
    head_gamma: float = 1.0
    head_join: float = 0.0
    head_join_exposure: float = 1.0
    head_mass_max: float = 0.9

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> SynthModel:
        return cls(**json.loads(text))

    def summary(self) -> dict[str, Any]:
        """The fitted scalars (no strings) for reports and ``--json``."""
        epu = np.asarray(self.events_per_user, dtype=float)
        cpe = np.asarray(self.clicks_per_event)
        return {
            "sample_users": self.sample_users,
            "events_per_user_mean": float(epu.mean()) if epu.size else 0.0,
            "events_per_user_median": float(np.median(epu)) if epu.size else 0.0,
            "repeat_rate": self.repeat_rate,
            "tail_rate": self.tail_rate,
            "head_zipf_s": self.head_zipf_s,
            "head_vocab": self.head_vocab,
            "heaps_beta": self.heaps_beta,
            "pinned_head_queries": len(self.head_probs),
            "pinned_head_mass": float(sum(self.head_probs)),
            "head_alpha": self.head_alpha,
            "head_gamma": self.head_gamma,
            "clicks_per_event_mean": float((np.arange(cpe.size) * cpe).sum()),
            "no_click_share": float(cpe[0]) if cpe.size else 0.0,
            "url_rank_probs": [round(p, 4) for p in self.url_rank_probs],
            "median_gap_seconds": float(self.gap_quantiles[len(self.gap_quantiles) // 2])
            if self.gap_quantiles
            else None,
            "has_rank": self.has_rank,
            "vocabulary_words": len(self.words),
        }


# --------------------------------------------------------------------------------------- fit


def _zipf_exponent(holders: npt.NDArray[np.int64]) -> float:
    """Least-squares slope of log(holders) vs log(rank) over the shared queries."""
    h = np.sort(holders)[::-1].astype(float)
    if h.size < 3 or h[0] == h[-1]:
        return 1.0
    r = np.arange(1, h.size + 1, dtype=float)
    slope = np.polyfit(np.log(r), np.log(h), 1)[0]
    return float(min(max(-slope, 0.3), 3.0))


def hold_probability(
    p: npt.ArrayLike, events: npt.ArrayLike, repeat_rate: float
) -> npt.NDArray[np.float64]:
    """P(a synthetic user with ``events`` query events ever issues a query whose per-draw
    probability is ``p``), under the generator: the first event and each later event with
    probability 1 − ``repeat_rate`` are fresh draws, so the user makes F = 1 + Bin(n−1, 1−r)
    independent draws and P(hold) = 1 − E[(1−p)^F] = 1 − (1−p)(1 − (1−r)p)^(n−1).
    Broadcasts ``p`` (…, 1) against ``events`` (n,)."""
    pp = np.asarray(p, dtype=np.float64)
    n = np.asarray(events, dtype=np.float64)
    return -np.expm1(np.log1p(-pp) + (n - 1.0) * np.log1p(-(1.0 - repeat_rate) * pp))


def exposure(events: npt.ArrayLike, repeat_rate: float, gamma: float) -> npt.NDArray[np.float64]:
    """Per-user scale w = E^(γ−1) of the head probabilities, E = 1 + (n−1)(1−r) the expected
    number of fresh draws of a user with n events (w = 1 for a one-event user)."""
    n = np.asarray(events, dtype=np.float64)
    return (1.0 + (np.maximum(n, 1.0) - 1.0) * (1.0 - repeat_rate)) ** (gamma - 1.0)


def _match_head(
    holders: npt.NDArray[np.float64],
    events: npt.NDArray[np.int64],
    repeat_rate: float,
    gamma: float,
) -> npt.NDArray[np.float64]:
    """Per-draw probabilities p_k (for a one-event user) with Σ_u P(hold | n_u, w_u·p_k) =
    holders_k: moment matching on the calibration users' own activity (vectorised bisection)."""
    w = exposure(events, repeat_rate, gamma)[None, :]
    lo = np.zeros(holders.size)
    hi = np.ones(holders.size)
    for _ in range(60):
        mid = (lo + hi) / 2
        q = np.minimum(mid[:, None] * w, 1.0 - 1e-12)
        e = hold_probability(q, events[None, :], repeat_rate).sum(axis=1)
        big = e > holders
        hi = np.where(big, mid, hi)
        lo = np.where(big, lo, mid)
    return (lo + hi) / 2


def _fit_gamma(
    held: npt.NDArray[np.float64], events: npt.NDArray[np.int64], repeat_rate: float
) -> tuple[float, npt.NDArray[np.float64]]:
    """Maximum-likelihood γ on a grid (0.2..1.0 by 0.02) for the user × pinned-query holding
    matrix ``held``, with p_k moment-matched at each γ. Returns (γ, p)."""
    h = held.sum(axis=1)
    best: tuple[float, float, npt.NDArray[np.float64]] | None = None
    for g in np.round(np.arange(0.2, 1.0001, 0.02), 2):
        p = _match_head(h, events, repeat_rate, float(g))
        q = np.minimum(p[:, None] * exposure(events, repeat_rate, float(g))[None, :], 1 - 1e-12)
        pr = np.clip(hold_probability(q, events[None, :], repeat_rate), 1e-12, 1 - 1e-12)
        ll = float((held * np.log(pr) + (1 - held) * np.log1p(-pr)).sum())
        if best is None or ll > best[0]:
            best = (ll, float(g), p)
    assert best is not None
    return best[1], best[2]


def user_share_curve(events: pl.DataFrame, top: int = 100) -> npt.NDArray[np.float64]:
    """The top-``top`` curve of users-per-query / users (most held first) of a frame of query
    events with columns ``user`` and ``query`` (e.g. :func:`searchveil.model.query_events`)."""
    n_users = events.get_column("user").n_unique()
    h = (
        events.select("user", "query").unique().group_by("query").len()
        .get_column("len").sort(descending=True).head(top).to_numpy()
    )  # fmt: skip
    return h.astype(np.float64) / max(n_users, 1)


def fit(
    log: SearchLog,
    *,
    rng: RandomSource,
    max_words: int = 50_000,
    min_head_users: int = 3,
    max_head_strings: int = 20_000,
    head_mass_max: float = HEAD_MASS_MAX,
) -> SynthModel:
    """Estimate a :class:`SynthModel` from a real log (``rng`` draws the Heaps subsamples)."""
    ev = query_events(log)
    if ev.height == 0:
        raise InputFormatError(log.info.path, "the calibration log has no query events")
    users = ev.get_column("user").unique()
    n_users = users.len()
    epu = ev.group_by("user").len().get_column("len").sort().to_list()

    ev = ev.with_columns(first=pl.col("query").is_first_distinct().over("user"))
    later = ev.filter(pl.col("pos") > 0)
    n_rep = int((~later.get_column("first")).sum())
    repeat_rate = n_rep / later.height if later.height else 0.0

    uq = ev.filter(pl.col("first")).select("user", "query")
    holders = uq.group_by("query").len()
    shared = holders.filter(pl.col("len") >= 2).sort(["len", "query"], descending=[True, False])
    tail_rate = 1.0 - int(shared.get_column("len").sum()) / max(uq.height, 1)
    s = _zipf_exponent(shared.get_column("len").to_numpy())
    head_vocab = max(shared.height, 1)
    # The real head: per-draw probabilities of the queries held by >= min_head_users users,
    # matched to their user counts at the sample's own activity; the spelling list is every
    # real query of the sample, most users (then most events) first.
    check_int("min_head_users", min_head_users, minimum=2)
    ranked = (
        ev.group_by("query")
        .agg(pl.col("user").n_unique().alias("h"), pl.len().alias("e"))
        .sort(["h", "e", "query"], descending=[True, True, False])
    )
    pinned_q = ranked.filter(pl.col("h") >= min_head_users).get_column("query")
    per_user = ev.group_by("user").len().sort("user")
    epu_arr = per_user.get_column("len").to_numpy().astype(np.int64)
    gamma, head_probs = 1.0, np.zeros(0)
    if pinned_q.len():
        pairs = (
            uq.filter(pl.col("query").is_in(pinned_q.implode()))
            .join(per_user.with_row_index("ui").select("user", "ui"), on="user")
            .join(pl.DataFrame({"query": pinned_q}).with_row_index("qi"), on="query")
        )
        held = np.zeros((pinned_q.len(), per_user.height))
        held[pairs.get_column("qi").to_numpy(), pairs.get_column("ui").to_numpy()] = 1.0
        gamma, head_probs = _fit_gamma(held, epu_arr, repeat_rate)
    # the sample's average exposure per fresh draw, where the continuation joins the pinned law
    fresh = 1.0 + (epu_arr - 1.0) * (1.0 - repeat_rate)
    w_bar = float((fresh * exposure(epu_arr, repeat_rate, gamma)).sum() / fresh.sum())
    join = float(head_probs[-1]) * w_bar if head_probs.size else 0.0
    alpha = s
    if head_probs.size >= 3:
        r = np.arange(1, head_probs.size + 1, dtype=np.float64)
        alpha = float(-np.polyfit(np.log(r), np.log(head_probs), 1)[0])
    alpha = float(min(max(alpha, 0.5), 1.5))

    # Heaps: distinct shared queries in random user subsets (1/4, 1/2, all).
    gen = rng.numpy_generator()
    sizes, vocab = [], []
    uarr = users.to_numpy()
    for frac in (0.25, 0.5, 1.0):
        k = max(2, int(round(frac * n_users)))
        if k > n_users:
            continue
        pick = pl.Series("user", gen.choice(uarr, size=k, replace=False))
        sub = uq.filter(pl.col("user").is_in(pick.implode()))
        v = sub.group_by("query").len().filter(pl.col("len") >= 2).height
        sizes.append(k)
        vocab.append(max(v, 1))
    beta = 0.8
    if len(sizes) >= 2 and vocab[-1] > vocab[0]:
        beta = float(np.polyfit(np.log(sizes), np.log(vocab), 1)[0])
    # growth faster than linear cannot last (distinct queries ≤ query events): cap at 1
    beta = float(min(max(beta, 0.3), 1.0))

    clicks = ev.get_column("clicks").clip(0, _MAX_CLICKS).to_numpy()
    cpe = np.bincount(clicks, minlength=1).astype(float)
    cpe /= cpe.sum()

    cl = log.df.filter(pl.col("url").is_not_null())
    if cl.height:
        per = cl.group_by(["query", "url"]).len()
        per = per.with_columns(
            k=pl.col("len").rank("ordinal", descending=True).over("query").clip(1, _MAX_URL_RANK)
        )
        byk = per.group_by("k").agg(pl.col("len").sum()).sort("k")
        urp = np.zeros(_MAX_URL_RANK)
        urp[byk.get_column("k").to_numpy() - 1] = byk.get_column("len").to_numpy()
        urp /= urp.sum()
    else:
        urp = np.r_[1.0, np.zeros(_MAX_URL_RANK - 1)]

    times = ev.get_column("time")
    t_start = t_end = None
    gaps: list[float] = []
    if times.null_count() < times.len():
        secs = ev.select("user", (pl.col("time").dt.epoch("s")).alias("t")).drop_nulls()
        d = secs.with_columns(g=(pl.col("t") - pl.col("t").shift(1).over("user"))).get_column("g")
        d = d.drop_nulls()
        d = d.filter(d >= 0).cast(pl.Float64)
        if d.len():
            gaps = np.quantile(d.to_numpy(), np.linspace(0, 1, 1001)).tolist()
        t_start = int(secs.get_column("t").min())  # type: ignore[arg-type]
        t_end = int(secs.get_column("t").max())  # type: ignore[arg-type]

    words = (
        ev.select(pl.col("query").str.split(" ").alias("w"))
        .explode("w")
        .filter(pl.col("w").is_not_null() & (pl.col("w") != ""))
        .group_by("w")
        .len()
        .sort(["len", "w"], descending=[True, False])
        .head(max_words)
    )
    if words.height == 0:
        raise InputFormatError(log.info.path, "the calibration log has no query words")
    wp = words.get_column("len").to_numpy().astype(float)
    qlen = ev.select(pl.col("query").str.split(" ").list.len().clip(1, _MAX_QUERY_LEN)).to_series()
    qlp = np.bincount(qlen.to_numpy(), minlength=_MAX_QUERY_LEN + 1)[1:].astype(float)
    qlp /= qlp.sum()

    return SynthModel(
        source={"file": Path(log.info.path).name, "sha256": log.info.sha256, "rows": log.n_rows},
        sample_users=int(n_users),
        events_per_user=[int(x) for x in epu],
        repeat_rate=repeat_rate,
        tail_rate=tail_rate,
        head_zipf_s=s,
        head_vocab=int(head_vocab),
        heaps_beta=beta,
        clicks_per_event=cpe.tolist(),
        url_rank_probs=urp.tolist(),
        gap_quantiles=gaps,
        time_start=t_start,
        time_end=t_end,
        has_rank=bool(log.df.get_column("rank").null_count() < log.n_rows),
        words=words.get_column("w").to_list(),
        word_probs=(wp / wp.sum()).tolist(),
        query_len_probs=qlp.tolist(),
        head_queries=ranked.get_column("query").head(max_head_strings).to_list(),
        head_probs=[float(x) for x in head_probs],
        head_alpha=alpha,
        head_gamma=gamma,
        head_join=join,
        head_join_exposure=w_bar,
        head_mass_max=float(check_probability("head_mass_max", head_mass_max)),
    )


# ---------------------------------------------------------------------------------- generate


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

    def __init__(self, model: SynthModel, strings: str, head_size: int) -> None:
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
    return _Plan(
        users, rows, scale, pin_cum.size + cont_cum.size, pin_cum, cont_cum, cpe_cum, url_cum, epu
    )


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
    n_ev = plan.epu[gen.integers(0, plan.epu.size, n_users)]
    if plan.activity_scale != 1.0:
        x = n_ev * plan.activity_scale
        n_ev = np.floor(x).astype(np.int64) + (gen.random(n_users) < (x - np.floor(x)))
    n_ev = np.maximum(n_ev, 1)
    total = int(n_ev.sum())
    starts = np.repeat(np.cumsum(n_ev) - n_ev, n_ev)
    pos = np.arange(total, dtype=np.int64) - starts
    idx = np.arange(total, dtype=np.int64)

    rep = (pos > 0) & (gen.random(total) < model.repeat_rate)
    src = starts + np.floor(gen.random(total) * pos).astype(np.int64)
    ptr = np.where(rep, src, idx)
    while True:
        nxt = ptr[ptr]
        if np.array_equal(nxt, ptr):
            break
        ptr = nxt

    # a fresh draw u is head key searchsorted(cum, u / w) for the user's exposure w (so the
    # user's head probabilities are w·p_k) and a unique tail query past the head mass
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
    keys = keys[ptr]
    if keys_only:
        uid = np.repeat(np.arange(first_user, first_user + n_users, dtype=np.int64) + 1, n_ev)
        return pl.DataFrame({"user": uid, "query": keys, "pos": pos}), n_tail

    # clicks per event → rows per event
    clicks = np.searchsorted(plan.cpe_cum, gen.random(total), side="right")
    clicks = np.minimum(clicks, plan.cpe_cum.size - 1)
    nrows = np.maximum(clicks, 1)
    ev_of_row = np.repeat(idx, nrows)
    n_rows = ev_of_row.size
    row_start = np.repeat(np.cumsum(nrows) - nrows, nrows)
    within = np.arange(n_rows, dtype=np.int64) - row_start
    has_click = np.repeat(clicks > 0, nrows)
    # distinct URL ranks within one event: start at a drawn rank, then the next ones
    first_k = np.searchsorted(plan.url_cum, gen.random(total), side="right")
    k = (np.repeat(first_k, nrows) + within) % _MAX_URL_RANK

    # times: user start uniform over the span, gaps by inverse-CDF of the fitted quantiles
    cols: dict[str, Any] = {}
    user_ids = np.arange(first_user, first_user + n_users, dtype=np.int64) + 1
    cols["AnonID"] = np.repeat(np.repeat(user_ids, n_ev), nrows)
    if model.time_start is not None and model.gap_quantiles:
        q = np.asarray(model.gap_quantiles)
        gaps = np.interp(gen.random(total) * (q.size - 1), np.arange(q.size), q)
        gaps[pos == 0] = 0.0
        span = max(int(model.time_end or model.time_start) - model.time_start, 1)
        t0 = model.time_start + gen.integers(0, span, n_users)
        cs = np.cumsum(gaps)
        t_ev = np.repeat(t0, n_ev) + (cs - cs[starts]).astype(np.int64)
        time_col = pl.from_epoch(pl.Series(t_ev[ev_of_row]), time_unit="s").dt.strftime(
            "%Y-%m-%d %H:%M:%S"
        )
    else:
        time_col = pl.Series([None] * n_rows, dtype=pl.String)

    # spell each root event (non-repeat) once; repeats point at their root
    roots = np.flatnonzero(ptr == idx)
    root_pos = np.empty(total, dtype=np.int64)
    root_pos[roots] = np.arange(roots.size)
    query_col = speller.queries(keys[roots]).gather(root_pos[ptr][ev_of_row])
    url_col = speller.urls(keys[ev_of_row], k)
    hc = pl.Series(has_click)
    df = pl.DataFrame({"AnonID": cols["AnonID"]}).with_columns(
        Query=query_col,
        QueryTime=time_col.alias("QueryTime"),
        ItemRank=pl.when(hc).then(pl.Series(k + 1)).otherwise(None)
        if model.has_rank
        else pl.lit(None, pl.Int64),
        ClickURL=pl.when(hc).then(url_col).otherwise(None),
    )
    return df, n_tail


_WORKER_CACHE: dict[str, tuple[_Plan, _Speller]] = {}


def _chunk_task(
    model_json: str,
    users: int,
    rows: int | None,
    strings: str,
    chunk_index: int,
    first_user: int,
    n_users: int,
    seed: list[int],
    encode: str | None,
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


def _chunks(
    model: SynthModel,
    *,
    users: int,
    rng: RandomSource,
    rows: int | None,
    strings: str,
    chunk_users: int,
    workers: int,
    encode: str | None,
) -> Iterator[tuple[int, pl.DataFrame | bytes]]:
    check_int("users", users, minimum=1)
    if rows is not None:
        check_int("rows", rows, minimum=1)
    check_choice("strings", strings, STRING_MODES)
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
    strings: str = "real",
    chunk_users: int = 100_000,
    workers: int = 1,
) -> Iterator[pl.DataFrame]:
    """Yield the synthetic log in AOL layout, chunk by chunk (users in increasing AnonID).
    The output depends on ``rng`` and ``chunk_users`` only, not on ``workers``."""
    for _, df in _chunks(
        model, users=users, rng=rng, rows=rows, strings=strings, chunk_users=chunk_users,
        workers=workers, encode=None,
    ):  # fmt: skip
        assert isinstance(df, pl.DataFrame)
        yield df


def synthetic_events(
    model: SynthModel,
    *,
    users: int,
    rng: RandomSource,
    rows: int | None = None,
    strings: str = "real",
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
    if not spell:
        check_choice("strings", strings, STRING_MODES)
        return pl.concat(
            [
                d
                for _, d in _chunks(
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


def _factors(
    curve: npt.NDArray[np.float64], target: npt.ArrayLike
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Ratio ``curve`` / ``target`` rank by rank over their common length, and each rank's
    factor max(r, 1/r) (how far apart, whichever is above)."""
    t = np.asarray(target, dtype=np.float64)
    n = min(curve.size, t.size)
    ratio = curve[:n] / np.maximum(t[:n], 1e-12)
    return ratio, np.maximum(ratio, 1.0 / np.maximum(ratio, 1e-12))


def heldout_head_check(
    model: SynthModel,
    heldout: pl.DataFrame,
    *,
    rng: RandomSource,
    users: int = 5_000,
    observed: str = "clicked",
    top: int = 100,
) -> dict[str, Any]:
    """Compare the top-``top`` user-share curve of ``heldout`` (query events of a *different*
    real sample: ``user, query, clicks``) with the model's at matched activity.

    A held-out sample of heavy users would hold every query more often than an average one, so
    the comparison is made at the held-out users' own activity: the synthetic users' event
    counts are bootstrapped from the held-out users' instead of the calibration's (the fitted
    query law, exposure γ, repeat and click rates are unchanged). ``observed="clicked"``: the
    held-out sample shows only events with a click (as the shared top-1000 AOL extract), so a
    held-out user with n visible events is matched by a synthetic user with n / (1 − P(no
    click)) events, and the synthetic curve is counted over its clicked events only — the same
    observation filter. ``observed="all"``: all events on both sides.

    Returns both curves, the ratio synthetic / held-out per rank and its worst factor
    (max(r, 1/r)) over the top 20 and the top ``top``."""
    check_choice("observed", observed, ("all", "clicked"))
    check_int("users", users, minimum=1)
    target = user_share_curve(heldout, top)
    n_obs = heldout.group_by("user").len().get_column("len").to_numpy().astype(np.float64)
    if observed == "clicked":
        n_obs = n_obs / max(1.0 - model.clicks_per_event[0], 1e-9)
    epu = sorted(int(max(round(x), 1)) for x in n_obs)
    matched = replace(model, events_per_user=epu)
    parts = []
    for df in generate(matched, users=users, rng=rng, strings="opaque"):
        if observed == "clicked":
            df = df.filter(pl.col("ClickURL").is_not_null())
        parts.append(df.select(pl.col("AnonID").alias("user"), pl.col("Query").alias("query")))
    synth_curve = user_share_curve(pl.concat(parts), top)
    ratio, worst = _factors(synth_curve, target)
    n = ratio.size
    return {
        "observed": observed,
        "synthetic_users": users,
        "heldout_users": int(heldout.get_column("user").n_unique()),
        "heldout_curve": target[:n].tolist(),
        "synthetic_curve": synth_curve[:n].tolist(),
        "ratio": ratio.tolist(),
        "worst_factor_top20": float(worst[:20].max()),
        "within_1_5_top20": int((worst[:20] <= 1.5).sum()),
        "worst_factor_top": float(worst.max()),
    }


def heldout_split_check(
    log: SearchLog,
    *,
    rng: RandomSource,
    calibration_share: float = 0.25,
    splits: int = 3,
    users_per_heldout: int = 4,
    top: int = 100,
) -> dict[str, Any]:
    """Held-out check within one population: split the users of a real ``log`` at random into
    a calibration part (``calibration_share`` of them) and a held-out part (the rest), fit a
    model on the calibration part alone and compare its top-``top`` user-share curve, at the
    held-out users' activity (:func:`heldout_head_check`, ``observed="all"``: both sides went
    through the same observation filter, whatever it was), with the held-out users' real curve.
    ``users_per_heldout`` synthetic users per held-out user; repeated over ``splits`` disjoint
    random splits (each its own fit), so the figure is not one lucky split.

    This is what can be checked held-out with the real samples we have (docs/synth.md): the
    fitted head law must carry over to *unseen users* of the population it was fitted on and
    to a population ``1/calibration_share − 1`` times larger. Across populations (random AOL
    users → the 1,000 heaviest) the two real samples themselves disagree by more than 1.5× at
    the same activity and size (:func:`heldout_window_check`).

    Returns, per split, the worst top-20 factor (max(r, 1/r) of synthetic / held-out), the
    number of top-20 ranks within 1.5 and the worst factor over the top ``top``; the first
    split's curves; and the worst over all splits."""
    if not 0.0 < calibration_share < 1.0:
        raise InvalidParameterError("calibration_share", calibration_share, "a fraction in (0, 1)")
    check_int("splits", splits, minimum=1)
    check_int("users_per_heldout", users_per_heldout, minimum=1)
    check_int("top", top, minimum=20)
    ev = query_events(log)
    users = ev.get_column("user").unique().sort()
    n = users.len()
    k = int(round(calibration_share * n))
    if k < 2 or n - k < 2:
        raise InvalidParameterError(
            "calibration_share", calibration_share,
            f"a share leaving ≥ 2 users on each side (the log has {n} users)",
        )  # fmt: skip
    runs: list[dict[str, Any]] = []
    first: dict[str, Any] = {}
    for i in range(splits):
        order = np.argsort(rng.random_keys(n), kind="stable")
        cal_users = users.gather(order[:k]).implode()
        cal = replace(log, df=log.df.filter(pl.col("user").is_in(cal_users)))
        in_cal = ev.get_column("user").is_in(cal_users)
        held = ev.filter(~in_cal)
        m = fit(cal, rng=rng)
        res = heldout_head_check(
            m, held, rng=rng, users=(n - k) * users_per_heldout, observed="all", top=top
        )
        # the noise floor: the real calibration part against the real held-out part (same
        # population, same activity law, different users): the model cannot beat its input
        _, real_worst = _factors(user_share_curve(ev.filter(in_cal), top), res["heldout_curve"])
        runs.append(
            {
                "gamma": m.head_gamma,
                "worst_factor_top20": res["worst_factor_top20"],
                "within_1_5_top20": res["within_1_5_top20"],
                "worst_factor_top": res["worst_factor_top"],
                "real_vs_real_worst_factor_top20": float(real_worst[:20].max()),
            }
        )
        if i == 0:
            first = res
    return {
        "users": int(n),
        "calibration_users": int(k),
        "heldout_users": int(n - k),
        "synthetic_users": int((n - k) * users_per_heldout),
        "splits": runs,
        "heldout_curve": first["heldout_curve"],
        "synthetic_curve": first["synthetic_curve"],
        "ratio": first["ratio"],
        "worst_factor_top20": max(r["worst_factor_top20"] for r in runs),
        "worst_factor_top": max(r["worst_factor_top"] for r in runs),
    }


def window_share_curve(
    events: pl.DataFrame,
    lengths: npt.ArrayLike,
    *,
    rng: RandomSource,
    replicas: int = 20,
    top: int = 100,
) -> npt.NDArray[np.float64]:
    """The top-``top`` user-share curve of ``events`` (``user``, ``query``, each user's events
    in their order) *seen at another activity*: every user is replaced by ``replicas``
    pseudo-users, each holding the user's events in one random contiguous window of n events,
    n drawn uniformly from ``lengths`` (e.g. another sample's events per user; 0 allowed — such
    a pseudo-user holds nothing but counts in the denominator) and capped at the user's count.

    A model-free correction for a sample of heavy users: it asks what their curve would be if
    they had been observed only as long as the users of the other sample, with no model of how
    holding grows with activity."""
    check_int("replicas", replicas, minimum=1)
    lens = np.asarray(lengths, dtype=np.int64)
    if lens.size == 0 or int(lens.min()) < 0:
        raise InvalidParameterError("lengths", lens.size, "a non-empty list of counts ≥ 0")
    ev = events.select("user", "query").with_columns(
        pl.int_range(pl.len()).over("user").alias("pos")
    )
    users = ev.group_by("user", maintain_order=True).len()
    n_pseudo = users.height * replicas
    counts = np.repeat(users.get_column("len").to_numpy().astype(np.int64), replicas)
    n = np.minimum(lens[rng.integers_below(lens.size, n_pseudo).astype(np.int64)], counts)
    start = rng.integers_below((counts - n + 1).astype(np.uint64), n_pseudo).astype(np.int64)
    pseudo = pl.DataFrame(
        {
            "user": np.repeat(users.get_column("user").to_numpy(), replicas),
            "pseudo": np.arange(n_pseudo, dtype=np.int64),
            "lo": start,
            "hi": start + n,
        }
    )
    held = (
        ev.join(pseudo, on="user")
        .filter((pl.col("pos") >= pl.col("lo")) & (pl.col("pos") < pl.col("hi")))
        .select("pseudo", "query").unique().group_by("query").len()
        .get_column("len").sort(descending=True).head(top).to_numpy()
    )  # fmt: skip
    return held.astype(np.float64) / max(n_pseudo, 1)


def heldout_window_check(
    calibration: pl.DataFrame,
    heldout: pl.DataFrame,
    *,
    rng: RandomSource,
    model: SynthModel | None = None,
    synthetic_users: int = 50_000,
    replicas: int = 20,
    subsamples: int = 100,
    top: int = 100,
) -> dict[str, Any]:
    """The held-out head check the other way round: the held-out sample is cut down to the
    calibration sample's activity (:func:`window_share_curve`, lengths = the calibration
    users' clicked-event counts, 0 for users without a click), and compared with (1) the
    calibration sample itself — a **real vs real** comparison, no model involved — and (2)
    ``model``'s synthetic log at the calibration activity, under the same filter (clicked
    events; every user in the denominator). Both frames are query events (``user``,
    ``query``, ``clicks``, in each user's order); the held-out sample is expected to contain
    only clicked events, as the shared top-1000 AOL extract.

    If the real calibration curve itself is further than a factor 1.5 from the windowed
    held-out curve, no model that reproduces the calibration sample and lets a user's choice of
    query depend only on how long they are observed can meet a factor-1.5 check against that
    held-out sample: the two populations differ, not the model.

    Small samples: the top of a rank-ordered curve of a few hundred users is biased upward
    (with 215 users a share of 1.4% is 3 users; the queries that happened to get an extra
    holder rise to the top). So the real calibration curve is also compared with
    ``heldout_matched_curve``: the mean, over ``subsamples`` random subsets of the held-out
    users *of the calibration's size* (one window each), of their curves — both sides then
    have the same activity and the same number of users."""
    clicked = calibration.filter(pl.col("clicks") > 0)
    all_users = calibration.get_column("user").n_unique()
    per_user = clicked.group_by("user").len().get_column("len").to_numpy()
    lengths = np.concatenate([per_user, np.zeros(all_users - per_user.size, dtype=np.int64)])
    held = window_share_curve(heldout, lengths, rng=rng, replicas=replicas, top=top)
    real = user_share_curve(clicked, top) * (clicked.get_column("user").n_unique() / all_users)
    out: dict[str, Any] = {
        "calibration_users": int(all_users),
        "heldout_users": int(heldout.get_column("user").n_unique()),
        "replicas": replicas,
        "heldout_windowed_curve": held.tolist(),
        "calibration_curve": real.tolist(),
    }

    def compare(curve: npt.NDArray[np.float64], name: str) -> None:
        ratio, worst = _factors(curve, held)
        out[f"{name}_ratio"] = ratio.tolist()
        out[f"{name}_worst_factor_top20"] = float(worst[:20].max())
        out[f"{name}_within_1_5_top20"] = int((worst[:20] <= 1.5).sum())

    compare(real, "calibration")
    check_int("subsamples", subsamples, minimum=1)
    h_users = heldout.get_column("user").unique().sort()
    if all_users <= h_users.len():
        acc = np.zeros(top)
        mass20: list[float] = []
        for _ in range(subsamples):
            pick = h_users.gather(np.argsort(rng.random_keys(h_users.len()))[:all_users])
            sub = heldout.filter(pl.col("user").is_in(pick.implode()))
            c = window_share_curve(sub, lengths, rng=rng, replicas=1, top=top)
            acc[: c.size] += c
            mass20.append(float(c[:20].sum()))
        matched = acc / subsamples
        out["heldout_matched_curve"] = matched.tolist()
        ratio, worst = _factors(real, matched)
        out["calibration_vs_matched_ratio"] = ratio.tolist()
        out["calibration_vs_matched_worst_factor_top20"] = float(worst[:20].max())
        out["calibration_vs_matched_within_1_5_top20"] = int((worst[:20] <= 1.5).sum())
        # how unusual the calibration's top-20 mass would be for a same-size, same-activity
        # sample of the held-out population (share of subsamples with at least as much)
        cal_mass = float(real[:20].sum())
        out["top20_mass"] = {"calibration": cal_mass, "heldout_subsamples_max": max(mass20),
                             "heldout_subsamples_mean": float(np.mean(mass20)),
                             "share_at_least_calibration": float(np.mean(
                                 np.asarray(mass20) >= cal_mass))}  # fmt: skip
    if model is not None:
        check_int("synthetic_users", synthetic_users, minimum=1)
        parts = []
        for df in generate(model, users=synthetic_users, rng=rng, strings="opaque"):
            parts.append(
                df.filter(pl.col("ClickURL").is_not_null())
                .select(pl.col("AnonID").alias("user"), pl.col("Query").alias("query"))
            )  # fmt: skip
        syn = pl.concat(parts)
        held_syn = syn.select("user", "query").unique().group_by("query").len()
        curve = held_syn.get_column("len").sort(descending=True).head(top).to_numpy()
        synth_curve = curve.astype(np.float64) / synthetic_users
        out["synthetic_curve"] = synth_curve.tolist()
        compare(synth_curve, "synthetic")
    return out


def _format_for(path: Path, fmt: str) -> str:
    if fmt != "auto":
        check_choice("format", fmt, OUTPUT_FORMATS)
        return fmt
    name = path.name.lower()
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith(".gz"):
        return "tsv.gz"
    return "tsv"


def write_synthetic(
    model: SynthModel,
    out: Path,
    *,
    users: int,
    rng: RandomSource,
    rows: int | None = None,
    strings: str = "real",
    fmt: str = "auto",
    overwrite: bool = False,
    chunk_users: int = 100_000,
    workers: int = 1,
    on_chunk: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Write a synthetic log to ``out`` atomically (temp file + rename). ``fmt`` is
    ``tsv | tsv.gz | parquet`` or ``auto`` (from the file name). Returns a summary."""
    out = Path(out)
    fmt = _format_for(out, fmt)
    if out.exists() and not overwrite:
        raise OutputExistsError(f"{out} exists; pass overwrite=True / --overwrite to replace it")
    if not out.parent.exists():
        raise InvalidParameterError("out", str(out), "a file in an existing directory")
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    total_rows = 0
    done_users = 0
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            writer = None
            try:
                for df in generate(
                    model, users=users, rng=rng, rows=rows, strings=strings,
                    chunk_users=chunk_users, workers=workers,
                ):  # fmt: skip
                    table = df.to_arrow()
                    if writer is None:
                        writer = pq.ParquetWriter(str(tmp), table.schema, compression="zstd")
                    writer.write_table(table)
                    total_rows += df.height
                    done_users += min(chunk_users, users - done_users)
                    if on_chunk:
                        on_chunk(done_users, total_rows)
            finally:
                if writer is not None:
                    writer.close()
        else:
            total_rows, done_users = _write_tsv(
                model, tmp, users=users, rng=rng, rows=rows, strings=strings,
                gz=fmt == "tsv.gz", chunk_users=chunk_users, workers=workers,
                on_chunk=on_chunk,
            )  # fmt: skip
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return {
        "out": str(out),
        "format": fmt,
        "users": users,
        "rows": total_rows,
        "strings": strings,
        "seeded": rng.seeded,
    }


def _write_tsv(
    model: SynthModel,
    tmp: Path,
    *,
    users: int,
    rng: RandomSource,
    rows: int | None,
    strings: str,
    gz: bool,
    chunk_users: int,
    workers: int,
    on_chunk: Callable[[int, int], None] | None,
) -> tuple[int, int]:
    total_rows = 0
    done_users = 0
    with open(tmp, "wb") as fh:
        q: Queue[bytes | None] = Queue(maxsize=2)
        errors: list[BaseException] = []

        def sink() -> None:
            comp = zlib.compressobj(1, zlib.DEFLATED, 31) if gz else None
            try:
                while True:
                    item = q.get()
                    if item is None:
                        break
                    fh.write(comp.compress(item) if comp else item)
                if comp:
                    fh.write(comp.flush())
            except OSError as exc:  # disk full etc.: reported after the join
                errors.append(exc)
                while q.get() is not None:
                    pass

        th = threading.Thread(target=sink, daemon=True)
        th.start()
        try:
            for n, data in _chunks(
                model, users=users, rng=rng, rows=rows, strings=strings,
                chunk_users=chunk_users, workers=workers, encode="tsv",
            ):  # fmt: skip
                assert isinstance(data, bytes)
                q.put(data)
                total_rows += data.count(b"\n") - (1 if done_users == 0 else 0)
                done_users += n
                if on_chunk:
                    on_chunk(done_users, total_rows)
        finally:
            q.put(None)
            th.join()
        if errors:
            raise errors[0]
    return total_rows, done_users


def read_model(path: Path) -> SynthModel:
    """Load a model written by ``searchveil synth --save-model``."""
    try:
        return SynthModel.from_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError) as exc:
        raise InputFormatError(str(path), f"not a searchveil synth model: {exc}") from None


def expected_rows(model: SynthModel, users: int) -> int:
    """The expected number of rows for ``users`` users without ``rows`` rescaling."""
    epu = np.asarray(model.events_per_user, dtype=float)
    cpe = np.asarray(model.clicks_per_event, dtype=float)
    rpe = float(cpe[0] + (np.arange(cpe.size) * cpe)[1:].sum())
    return int(math.ceil(users * epu.mean() * rpe))


__all__ = [
    "SynthModel",
    "fit",
    "generate",
    "write_synthetic",
    "read_model",
    "expected_rows",
    "synthetic_events",
    "heldout_head_check",
    "heldout_split_check",
    "heldout_window_check",
    "window_share_curve",
    "user_share_curve",
    "hold_probability",
    "exposure",
    "HEAD_MASS_MAX",
]
