"""``cels local``. ``--mode e2e`` (:func:`local_e2e`): the joint end-to-end release computed
without the protocol — the shares pooled, users kept apart by party, the same computation and
the same noise (r + 1 Pólya shares on every slot) as ``cels run``, the same ledger but for the
protocol's keys (docs/privacy/cels.md §5).

``--mode conditional`` (:func:`local_sanitize`, NOT differentially private): local
sanitization (LS), the baseline of CELS §6.4 (Hong et al., TKDE 2015, Fig. 5): every
party sanitizes its own log alone — Condition 1 and the constraints computed from its *own*
counts, the same b = min(ε/2, ln 1/(1−δ)), and its share of |O| — and the outputs are unioned.

Share of |O| (objective ``kl``): with ``output_size`` (e.g. the CELS run's |O|) party k asks
for ⌊|O| · |D_k| / |D|⌋ draws, capped at its own LP maximum; without it, each party uses
``output_share`` of its own |𝕆_k| (the same rule CELS applies globally). Objective ``size``:
each party maximises its own output. Utility is measured against the *global* input (CELS
eq. 2 over the pairs that pass the global Condition 1), exactly as for the CELS output — a
figure of the exact private input, so it goes to the private provenance record, never to the
public ledger.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.cels.distributed import DistributedCounts
from searchveil.cels.e2e_release import KeyedStream, e2e_public_ledger, published_slots
from searchveil.cels.e2e_schema import (
    head_given,
    joint_tables,
    noise_vector,
    party_vector,
    query_pair_table,
    segments,
    unpack,
)
from searchveil.cels.output import conditional_ledger
from searchveil.cels.params import CelsParams, Share, bounded_query_pairs, countable_clicks
from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import build_provenance
from searchveil.io.readers import read_log
from searchveil.model import ClickHistogram, InputInfo, SearchLog
from searchveil.release.counts import count_by
from searchveil.release.histogram import check_declared_users
from searchveil.release.ump import (
    constraint_matrix,
    preprocess,
    sample_users,
    sampled_log,
    solve_oump,
)
from searchveil.release.ump.e2e import activity_profile, bounded_pairs
from searchveil.release.ump.generate import generated_tables
from searchveil.release.ump.kl import kl_loss, max_output_size, solve_kl
from searchveil.release.ump.release import NOT_DP
from searchveil.release.ump.schema_stats import released_period
from searchveil.rng import RandomSource

NOTION = (
    f"{NOT_DP}; only each party's multinomial sampling given its counts is (ε,δ)-DP (CELS Thm 2)"
)


def pooled_log(logs: list[SearchLog]) -> SearchLog:
    """The parties' logs as one: every user named by its party (``P<k>:<id>``, so users of two
    parties stay apart, as in the protocol), each user's rows in their order."""
    frames, offset = [], 0
    for k, lg in enumerate(logs, start=1):
        df = lg.df.with_columns(
            pl.format("P{}:{}", pl.lit(k), pl.col("user")).alias("user"),
            (pl.col("row") + offset).alias("row"),
        )
        frames.append(df)
        offset += lg.n_rows
    df = pl.concat(frames, how="vertical_relaxed")
    info = InputInfo(path="<cels local: pooled shares>", sha256="", rows=df.height, format="memory")
    return SearchLog(df=df, info=info)


def local_e2e(
    paths: list[Path], params: CelsParams, *, rng: RandomSource,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """``cels local --mode e2e``: the tables (``release ump``'s of the input's columns, or log,
    counts, profile), the public ledger (that of ``cels run`` without its ``protocol`` key;
    randomness as described by ``rng``) and the private provenance record (every share's input
    record and the release's report); ``progress(label)`` at the start of each step.

    The same function as ``cels run`` with the same noise: the shares pooled (users kept apart
    by party), each user's first m distinct countable pairs, every one of the V = r·L slots
    noised with the sum of r + 1 Pólya shares (slots no pair holds too: they are published with
    a small probability, never revealed, and can take a place among the K published), the
    published pairs, the profile with r + 1 shares, the log generated from them."""
    say = progress or (lambda _label: None)
    params = params.with_parties(len(paths))
    noise = params.noise()
    say("reading the shares")
    logs = [read_log(p) for p in paths]
    log = pooled_log(logs)
    check_declared_users(params.max_users, log.n_users)
    ledger = e2e_public_ledger(params, len(paths), rng=rng, protocol=False)
    bounded = bounded_pairs(log, noise.m, countable_clicks(log))  # users kept apart by party
    counts = count_by(bounded, ["query", "url"], distinct_users=True)
    say("pair counts (the noise of every slot, the published pairs)")
    published, n_pub = _local_round(counts, len(paths) * params.party_pairs, noise.pairs,
                                    params.published_pairs, "max-party-pairs", rng=rng)  # fmt: skip
    report: dict[str, Any] = {"users": log.n_users, "pairs_published": published.height,
                              "slots_published": n_pub}  # fmt: skip
    if params.is_input:
        tables, more = _local_input(params, logs, published, rng=rng, say=say)
        report |= more
    else:
        exact = activity_profile(bounded, published, noise.m)
        prof = exact + sum(noise.profile.sample(noise.m, rng) for _ in range(noise.contributors))
        key = rng.words(4).astype(">u8").tobytes()
        tables, report["generator"] = generated_tables(
            published.sort("query", "url"), np.clip(prof, 0, None), noise.m,
            rng=KeyedStream(key),
        )  # fmt: skip
        report["profile_exact"] = exact.tolist()
    report["parameters"] = params.to_dict()
    provenance = build_provenance(
        inputs=[lg.ledger_input() for lg in logs],
        report=report,
        extra={"mechanism": ledger["mechanism"],
               "runner": "cels local (the joint e2e release without the protocol)"},
    )  # fmt: skip
    return {
        "tables": tables,
        "ledger": ledger,
        "provenance": provenance,
        "mode": "e2e",
        "parties": len(paths),
        "pairs_published": published.height,
        "outputs": {k: v.height for k, v in tables.items()},
    }


def _local_round(
    counts: pl.DataFrame, n_slots: int, dc: DistributedCounts, k: int, bound: str, *,
    rng: RandomSource,
) -> tuple[pl.DataFrame, int]:  # fmt: skip
    """An item round without the protocol: the items' joint holder counts (``query, url,
    count``) at random slots of [0, ``n_slots``), every slot noised with r + 1 Skellam shares,
    the published slots (above τ', the ``k`` largest) and the items they hold
    (``query, url, noisy_count``, sorted); and the number of published slots."""
    counts = counts.sort("query", "url")
    if counts.height > n_slots:
        raise InvalidParameterError(bound, n_slots, "a bound >= each share's distinct items")
    slot = np.argsort(rng.random_keys(n_slots), kind="stable")[: counts.height]  # random slots
    total = np.zeros(n_slots, dtype=np.int64)
    total[slot] = counts.get_column("count").to_numpy()
    for _ in range(dc.contributors):
        total += dc.shares.sample(n_slots, rng)
    pub, noisy = published_slots(total, dc.tau_prime, k, rng=rng)
    where = np.full(n_slots, -1, dtype=np.int64)
    where[slot] = np.arange(counts.height)
    real = where[pub] >= 0
    published = (
        counts[where[pub][real]]
        .select("query", "url")
        .with_columns(noisy_count=pl.Series(noisy[real], dtype=pl.Int64))
    )
    return published.sort("query", "url"), int(pub.size)


def _local_input(
    params: CelsParams, logs: list[SearchLog], published: pl.DataFrame, *, rng: RandomSource,
    say: Callable[[str], None],
) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:  # fmt: skip
    """The input's-columns log without the protocol, as :class:`~.e2e_schema.SchemaPhases`
    computes it: the query pairs' round, then the two joint sums — each party's exact vector
    (:func:`~.e2e_schema.party_vector`, its own salt) summed, r + 1 noise shares added —,
    the period, the tables (:func:`~.e2e_schema.joint_tables`)."""
    noise, k = params.noise(), params.published_pairs
    st = noise.statistics
    assert st is not None
    say("query pairs (ZEALOUS, the published ones)")
    qp = [bounded_query_pairs(lg, st.max_query_pairs) for lg in logs]
    qcounts = pl.concat(qp).group_by("query", "url").agg(pl.col("holders").sum().alias("count"))
    revealed, _ = _local_round(qcounts, len(logs) * params.query_party_pairs, noise.query_pairs,
                               k, "max-party-query-pairs", rng=rng)  # fmt: skip
    qtable = query_pair_table(revealed)
    salts = [int(rng.words(1)[0] >> np.uint64(1)) for _ in logs]

    def joint(segs: list[tuple[str, int]], given: list[dict[str, Any]]) -> npt.NDArray[np.int64]:
        vec = sum(party_vector(segs, lg, st, salt=s, k=k, given=g)
                  for lg, s, g in zip(logs, salts, given, strict=True))  # fmt: skip
        for _ in range(noise.contributors):
            vec = vec + noise_vector(noise, segs, rng)
        return np.asarray(vec, dtype=np.int64)

    say("size, period and shape statistics (each party's own, summed, noised)")
    seg_a = segments(noise, "shape", period=None, k=k)
    noisy = unpack(joint(seg_a, [{}] * len(logs)), seg_a)
    period = st.period if st.period is not None else released_period(st, noisy["months"])
    say("days, head, tail and head share statistics")
    seg_b = segments(noise, "head", period=period, k=k)
    bounded = [bounded_pairs(lg, noise.m, countable_clicks(lg)) for lg in logs]  # each party's
    given = [head_given(period, published, qtable, b) for b in bounded]
    noisy |= unpack(joint(seg_b, given), seg_b, queries=given[0]["queries"].height,
                    pairs=given[0]["pairs"].height, k=k)  # fmt: skip
    key = rng.words(4).astype(">u8").tobytes()
    say("laying out the log (synthetic users, sessions, times, clicks)")
    tables, figures = joint_tables(st, noisy, period, pairs=published, query_pairs=qtable,
                                   key=key)  # fmt: skip
    return tables, {"query_pairs_published": revealed.height, "generator": figures}


def global_counts(hists: list[ClickHistogram]) -> pl.DataFrame:
    """(query, url, count, holders) over all parties, after the global Condition 1."""
    frames = [h.pairs.select("query", "url", "count", "holders") for h in hists]
    allp = (
        pl.concat(frames)
        .group_by(["query", "url"])
        .agg(pl.col("count").sum(), pl.col("holders").sum())
    )
    return allp.filter(pl.col("holders") >= 2).sort(["query", "url"])


def utility(global_pairs: pl.DataFrame, log: pl.DataFrame) -> dict[str, Any]:
    """KL loss (eq. 2) and diversity of a released log against the global input."""
    x = pair_counts(global_pairs, log)
    c = global_pairs.get_column("count").to_numpy().astype(np.float64)
    return {
        "kl_loss": kl_loss(c, x) if c.size else None,
        "output_size": int(x.sum()),
        "output_pairs": int((x > 0).sum()),
        "diversity": float((x > 0).mean()) if x.size else 0.0,
    }


def pair_counts(global_pairs: pl.DataFrame, log: pl.DataFrame) -> npt.NDArray[np.int64]:
    agg = log.group_by(["Query", "ClickURL"]).agg(pl.col("Count").sum().alias("x"))
    j = global_pairs.select("query", "url").join(
        agg.rename({"Query": "query", "ClickURL": "url"}), on=["query", "url"], how="left"
    )
    return j.get_column("x").fill_null(0).to_numpy().astype(np.int64)


def local_sanitize(
    shares: list[Share],
    params: CelsParams,
    *,
    rng: RandomSource,
    output_size: int | None = None,
) -> dict[str, Any]:
    """Run LS; returns the unioned ``log``, its public ``ledger``, the private ``provenance``
    record, and (private) per-party details and utility."""
    sizes = [int(s.hist.pairs.get_column("count").sum()) for s in shares]
    total = sum(sizes)
    logs, parties = [], []
    for k, sh in enumerate(shares, start=1):
        want = None
        if output_size is not None:  # this party's share of |O|, by input size
            want = math.floor(output_size * sizes[k - 1] / total)
        lg, info = _sanitize_one(k, sh, params, rng=rng, output_size=want)
        if lg is not None:
            logs.append(lg)
        parties.append(info)
    schema = pl.Schema(
        {"AnonID": pl.String, "Query": pl.String, "ClickURL": pl.String, "Count": pl.Int64}
    )
    log = (
        pl.concat([lg.cast(schema) for lg in logs]) if logs else pl.DataFrame(schema=schema)
    ).sort(["AnonID", "Query", "ClickURL"])
    gp = global_counts([s.hist for s in shares])
    gp = gp.filter(pl.col("count") >= params.min_count)
    util = utility(gp, log)
    ledger = conditional_ledger(
        "cels-local-sanitization", NOTION, params, log,
        parameters={"parties": len(shares), "output_size": output_size}, rng=rng,
        warning="each party's counts x come from its private log and are not differentially "
        "private; the guarantee covers the sampling",
    )  # fmt: skip
    provenance = build_provenance(
        inputs=[s.info for s in shares],
        report={"parties": parties},
        figures={"utility_against_the_global_input": util},
        extra={"mechanism": "cels-local-sanitization"},
    )
    return {
        "log": log,
        "ledger": ledger,
        "provenance": provenance,
        "parties": parties,
        "utility": util,
    }


def _sanitize_one(
    k: int, share: Share, params: CelsParams, *, rng: RandomSource, output_size: int | None
) -> tuple[pl.DataFrame | None, dict[str, Any]]:
    """Party ``k`` alone: its counts x from its own log (objective ``size``: the largest
    output; ``kl``: ``output_size`` draws, capped at its LP maximum, else ``output_share`` of
    it), then its users sampled; its log (None if empty) and its (private) figures."""
    inp = preprocess(share.hist)
    info: dict[str, Any] = {"party": k, "pairs_after_condition_1": inp.n_pairs}
    if inp.n_pairs == 0:
        x = np.zeros(0, dtype=np.int64)
    else:
        m = constraint_matrix(inp)
        if params.objective == "size":
            sol = solve_oump(m, params.b, method="lp-greedy", search_seconds=0.0)
        else:
            lam = max_output_size(m, params.b)
            if output_size is not None:
                want = min(output_size, math.floor(lam))
            else:
                want = math.floor(params.output_share * lam)
            info["requested_output_size"] = want
            sol = solve_kl(m, params.b, inp.c_ij, output_size=want, k=params.breakpoints)
        x = sol.x
        info["solver"] = sol.summary()
    info["output_size"] = int(x.sum())
    trip = sample_users(inp.matrix, x, rng=rng) if x.size else None
    if trip is not None and trip[0].size:
        return sampled_log(inp.pairs, inp.users, trip), info
    return None, info
