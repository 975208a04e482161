"""Fit a :class:`~searchveil.synth.model.SynthModel` on a real search log (the statistics
listed in :mod:`searchveil.synth`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.errors import InputFormatError
from searchveil.model import SearchLog, query_events
from searchveil.rng import RandomSource
from searchveil.synth.model import HEAD_MASS_MAX, MAX_URL_RANK, SynthModel
from searchveil.synth.shape import shape_counts
from searchveil.validate import check_int, check_probability

_MAX_CLICKS = 30
_MAX_QUERY_LEN = 6


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
    users: npt.NDArray[np.float64],
    repeat_rate: float,
    gamma: float,
) -> npt.NDArray[np.float64]:
    """Per-draw probabilities p_k (for a one-event user) with Σ_u P(hold | n_u, w_u·p_k) =
    holders_k: moment matching on the calibration users' own activity (vectorised bisection).
    The users come grouped by activity: ``users[j]`` of them have ``events[j]`` events (the
    sum over users depends on a user through n_u alone)."""
    w = exposure(events, repeat_rate, gamma)[None, :]
    lo = np.zeros(holders.size)
    hi = np.ones(holders.size)
    for _ in range(60):
        mid = (lo + hi) / 2
        q = np.minimum(mid[:, None] * w, 1.0 - 1e-12)
        e = hold_probability(q, events[None, :], repeat_rate) @ users
        big = e > holders
        hi = np.where(big, mid, hi)
        lo = np.where(big, lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class _Holdings:
    """Who holds the pinned queries, in the form the head's fit needs — the sparse user ×
    query holding matrix collapsed to what its likelihood depends on: a user through their
    number of events n, a query through its number of holders h (both the match of p and the
    likelihood are sums of functions of (h, n)). ``events``/``users``: the distinct n and the
    users with each; ``holders``/``queries``: the distinct h and the pinned queries with each;
    ``held[i, j]``: the holdings of queries with ``holders[i]`` holders by users with
    ``events[j]`` events; ``of_query``: each pinned query's index into ``holders``."""

    events: npt.NDArray[np.int64]
    users: npt.NDArray[np.float64]
    holders: npt.NDArray[np.float64]
    queries: npt.NDArray[np.float64]
    held: npt.NDArray[np.float64]
    of_query: npt.NDArray[np.int64]

    @classmethod
    def of(cls, q_idx: npt.ArrayLike, u_idx: npt.ArrayLike, n_queries: int,
           user_events: npt.NDArray[np.int64]) -> _Holdings:  # fmt: skip
        """From the holdings (query index, user index) of ``n_queries`` pinned queries and
        each user's events — memory in the holdings, never queries × users."""
        qi = np.asarray(q_idx, dtype=np.int64)
        ui = np.asarray(u_idx, dtype=np.int64)
        events, of_user = np.unique(user_events, return_inverse=True)
        h = np.bincount(qi, minlength=n_queries)
        holders, of_query = np.unique(h, return_inverse=True)
        cell = of_query[qi] * events.size + of_user[ui]
        held = np.bincount(cell, minlength=holders.size * events.size).astype(np.float64)
        return cls(events=events, users=np.bincount(of_user).astype(np.float64),
                   holders=holders.astype(np.float64),
                   queries=np.bincount(of_query).astype(np.float64),
                   held=held.reshape(holders.size, events.size), of_query=of_query)  # fmt: skip


def _fit_gamma(hold: _Holdings, repeat_rate: float) -> tuple[float, npt.NDArray[np.float64]]:
    """Maximum-likelihood γ on a grid (0.2..1.0 by 0.02) for the user × pinned-query holding
    matrix (:class:`_Holdings`: the log-likelihood Σ_{k,u} held·log P + (1 − held)·log(1 − P)
    summed by (h, n)), with p_k moment-matched at each γ. Returns (γ, p per pinned query)."""
    best: tuple[float, float, npt.NDArray[np.float64]] | None = None
    for g in np.round(np.arange(0.2, 1.0001, 0.02), 2):
        p = _match_head(hold.holders, hold.events, hold.users, repeat_rate, float(g))
        w = exposure(hold.events, repeat_rate, float(g))
        q = np.minimum(p[:, None] * w[None, :], 1 - 1e-12)
        pr = np.clip(hold_probability(q, hold.events[None, :], repeat_rate), 1e-12, 1 - 1e-12)
        miss = np.log1p(-pr)
        ll = float(hold.queries @ (miss @ hold.users) + (hold.held * (np.log(pr) - miss)).sum())
        if best is None or ll > best[0]:
            best = (ll, float(g), p)
    assert best is not None
    return best[1], best[2][hold.of_query]


def user_share_curve(events: pl.DataFrame, top: int = 100) -> npt.NDArray[np.float64]:
    """The top-``top`` curve of users-per-query / users (most held first) of a frame of query
    events with columns ``user`` and ``query`` (e.g. :func:`searchveil.model.query_events`)."""
    n_users = events.get_column("user").n_unique()
    h = (
        events.select("user", "query").unique().group_by("query").len()
        .get_column("len").sort(descending=True).head(top).to_numpy()
    )  # fmt: skip
    return h.astype(np.float64) / max(n_users, 1)


@dataclass(frozen=True)
class _HeadLaw:
    """The fitted head: the spelling ranking, the pinned probabilities, γ, and the continuation."""

    ranked: pl.DataFrame
    head_probs: npt.NDArray[np.float64]
    gamma: float
    w_bar: float
    join: float
    alpha: float


def _fit_head(
    ev: pl.DataFrame, uq: pl.DataFrame, repeat_rate: float, s: float, min_head_users: int
) -> _HeadLaw:
    """The real head: per-draw probabilities of the queries held by >= min_head_users users,
    matched to their user counts at the sample's own activity; the spelling list is every real
    query of the sample, most users (then most events) first."""
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
        hold = _Holdings.of(pairs.get_column("qi").to_numpy(), pairs.get_column("ui").to_numpy(),
                            pinned_q.len(), epu_arr)  # fmt: skip
        gamma, head_probs = _fit_gamma(hold, repeat_rate)
    # the sample's average exposure per fresh draw, where the continuation joins the pinned law
    fresh = 1.0 + (epu_arr - 1.0) * (1.0 - repeat_rate)
    w_bar = float((fresh * exposure(epu_arr, repeat_rate, gamma)).sum() / fresh.sum())
    join = float(head_probs[-1]) * w_bar if head_probs.size else 0.0
    alpha = s
    if head_probs.size >= 3:
        r = np.arange(1, head_probs.size + 1, dtype=np.float64)
        alpha = float(-np.polyfit(np.log(r), np.log(head_probs), 1)[0])
    alpha = float(min(max(alpha, 0.5), 1.5))
    return _HeadLaw(ranked, head_probs, gamma, w_bar, join, alpha)


def _heaps_beta(uq: pl.DataFrame, users: pl.Series, rng: RandomSource) -> float:
    """Heaps' exponent: distinct shared queries in random user subsets (1/4, 1/2, all)."""
    n_users = users.len()
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
    return float(min(max(beta, 0.3), 1.0))


def _click_laws(
    ev: pl.DataFrame, log: SearchLog
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Clicks per query event, and the share of a query's clicks on its k-th URL (k ≤ 10)."""
    clicks = ev.get_column("clicks").clip(0, _MAX_CLICKS).to_numpy()
    cpe = np.bincount(clicks, minlength=1).astype(float)
    cpe /= cpe.sum()
    cl = log.df.filter(pl.col("url").is_not_null())
    if cl.height:
        per = cl.group_by(["query", "url"]).len()
        per = per.with_columns(
            k=pl.col("len").rank("ordinal", descending=True).over("query").clip(1, MAX_URL_RANK)
        )
        byk = per.group_by("k").agg(pl.col("len").sum()).sort("k")
        urp = np.zeros(MAX_URL_RANK)
        urp[byk.get_column("k").to_numpy() - 1] = byk.get_column("len").to_numpy()
        urp /= urp.sum()
    else:
        urp = np.r_[1.0, np.zeros(MAX_URL_RANK - 1)]
    return cpe, urp


def _gap_law(ev: pl.DataFrame) -> tuple[list[float], int | None, int | None]:
    """Quantiles of the time between a user's consecutive query events, and the time span."""
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
    return gaps, t_start, t_end


def _word_laws(
    ev: pl.DataFrame, log: SearchLog, max_words: int
) -> tuple[list[str], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The most frequent query words, their probabilities, and the words-per-query law."""
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
    return words.get_column("w").to_list(), wp / wp.sum(), qlp


def _shape(ev: pl.DataFrame) -> dict[str, Any]:
    """The exact shape histograms the layout draws from (:mod:`searchveil.synth.shape`): when
    sessions start (hours, days of the log's own period), the gaps inside a session and the
    events per session — every event counted (not private)."""
    out: dict[str, Any] = {"sessions": shape_counts(ev, ("sessions",))["sessions"].tolist()}
    times = ev.get_column("time").drop_nulls()
    if times.len():
        days = times.dt.date().cast(pl.Int64)
        first, last = int(days.min()), int(days.max())  # type: ignore[arg-type]
        c = shape_counts(ev, ("hours", "days", "gaps"), period=(first, last))
        out |= {"first_day": first} | {k: v.tolist() for k, v in c.items()}
    return out


# keyword options alike heldout_split_check's in form only
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
    check_int("min_head_users", min_head_users, minimum=2)
    head = _fit_head(ev, uq, repeat_rate, s, min_head_users)
    beta = _heaps_beta(uq, users, rng)
    cpe, urp = _click_laws(ev, log)
    gaps, t_start, t_end = _gap_law(ev)
    words, wp, qlp = _word_laws(ev, log, max_words)

    return SynthModel(
        source={"file": Path(log.info.path).name, "sha256": log.info.sha256, "rows": log.n_rows},
        sample_users=int(users.len()),
        events_per_user=[int(x) for x in epu],
        repeat_rate=repeat_rate,
        tail_rate=tail_rate,
        head_zipf_s=s,
        head_vocab=int(max(shared.height, 1)),
        heaps_beta=beta,
        clicks_per_event=cpe.tolist(),
        url_rank_probs=urp.tolist(),
        gap_quantiles=gaps,
        time_start=t_start,
        time_end=t_end,
        has_rank=bool(log.df.get_column("rank").null_count() < log.n_rows),
        words=words,
        word_probs=wp.tolist(),
        query_len_probs=qlp.tolist(),
        head_queries=head.ranked.get_column("query").head(max_head_strings).to_list(),
        head_probs=[float(x) for x in head.head_probs],
        head_alpha=head.alpha,
        head_gamma=head.gamma,
        head_join=head.join,
        head_join_exposure=head.w_bar,
        head_mass_max=float(check_probability("head_mass_max", head_mass_max)),
        shape=_shape(ev),
    )
