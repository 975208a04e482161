"""k-query anonymity (Adar 2007, as described by Götz et al. TKDE 2012 §2.2 and §7): the
baseline the differentially private releases are compared with. It gives **no** differential
privacy (Götz §3 shows active attacks), so the ledger's ε and δ are null.

Algorithm: drop every query posed by fewer than ``k`` distinct users; replace user ids by a fresh
random id per *session* (so sessions of one user cannot be linked through the id); publish the
resulting log and its histograms of queries, keywords and query pairs.

Decisions: a query's support is its number of distinct *users* (not sessions); the random ids
are a uniformly random permutation of 0..(sessions-1) drawn from the injected ``rng``; times,
ranks and clicked URLs of kept rows are published as in the input (Adar's k-query anonymous
log keeps them). The log is written in the AOL layout so searchveil can read it back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

from searchveil.engines.contract import Bounding, BoundingPlan, Item
from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import build_ledger
from searchveil.mechanisms.budget import NoGuarantee
from searchveil.model import InputInfo, SearchLog, items, query_events
from searchveil.release.counts import count_by
from searchveil.release.histogram import HistogramRelease
from searchveil.rng import RandomSource
from searchveil.validate import check_int

__all__ = ["KAnonParams", "release_kanon"]

MECHANISM = "k-query-anonymity"


@dataclass(frozen=True)
class KAnonParams:
    """``k``: minimum number of distinct users of a published query."""

    k: int

    def __post_init__(self) -> None:
        check_int("k", self.k, minimum=1)

    def bounding_plan(self) -> BoundingPlan:
        """What an engine keeps for k-query anonymity: the rows of the queries posed by at
        least k distinct users (with the whole input's sessions)."""
        return BoundingPlan(Bounding.SHARED, Item.QUERIES, self.k)

    def cost(self) -> NoGuarantee:
        """k-anonymity protects no neighbouring relation: it has no cost in any budget and is
        never charged to one (publishing it is outside every guarantee)."""
        return NoGuarantee(
            "k-anonymity is not differential privacy (no neighbouring relation is protected)"
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def release_kanon(log: SearchLog, params: KAnonParams, *, rng: RandomSource) -> HistogramRelease:
    """Tables ``queries`` (query, count, users), ``keywords`` (keyword, count), ``query_pairs``
    (query, next_query, count) and ``log`` (AOL layout, per-session random AnonID)."""
    if not isinstance(params, KAnonParams):
        raise InvalidParameterError("params", params, "a KAnonParams")
    if not isinstance(rng, RandomSource):
        raise InvalidParameterError("rng", rng, "a searchveil.rng.RandomSource")
    ev = query_events(log)
    support = ev.group_by("query").agg(pl.col("user").n_unique().alias("users"))
    kept_q = support.filter(pl.col("users") >= params.k)
    rows = log.df.join(kept_q.select("query"), on="query", how="semi")
    sessions = rows.select("user", "session").unique().sort(["user", "session"])
    n = sessions.height
    perm = np.argsort(rng.random_keys(n), kind="stable").astype(np.int64)
    sessions = sessions.with_columns(anon=pl.Series(perm))
    anon = (
        rows.join(sessions, on=["user", "session"])
        .with_columns(pl.col("anon").alias("user"), pl.lit(0, pl.Int64).alias("session"))
        .drop("anon")
        .sort(["user", "row"])
    )
    anon_log = SearchLog(
        df=anon,
        info=InputInfo(path="<k-anonymous log>", sha256="", rows=anon.height, format="memory"),
    )
    aev = query_events(anon_log)
    queries = (
        count_by(aev, ["query"])
        .join(kept_q, on="query")
        .sort(["count", "query"], descending=[True, False])
    )
    kw = items(anon_log, "keywords").rename({"item": "keyword"})
    keywords = count_by(kw, ["keyword"]).sort(["count", "keyword"], descending=[True, False])
    qp = items(anon_log, "query_pairs")
    pairs = count_by(qp, ["query", "next_query"]).sort(
        ["count", "query", "next_query"], descending=[True, False, False]
    )
    # row order: a function of the published values only (the random id, then time and the
    # other columns), not of the input's row order
    out_log = anon.select(
        pl.col("user").alias("AnonID"),
        pl.col("query").alias("Query"),
        pl.col("time").dt.strftime("%Y-%m-%d %H:%M:%S").alias("QueryTime"),
        pl.col("rank").alias("ItemRank"),
        pl.col("url").alias("ClickURL"),
    ).sort(["AnonID", "QueryTime", "Query", "ItemRank", "ClickURL"], nulls_last=True)
    report = {
        "mechanism": MECHANISM,
        "k": params.k,
        "users": log.n_users,
        "query_events": ev.height,
        "distinct_queries": support.height,
        "queries_released": kept_q.height,
        "queries_dropped": support.height - kept_q.height,
        "query_events_released": aev.height,
        "rows_released": out_log.height,
        "sessions_released": n,
    }
    ledger = build_ledger(
        mechanism=MECHANISM,
        notion="k-anonymity (k-query anonymity, Adar 2007); NOT differential privacy",
        cost=params.cost(),
        parameters=params.to_dict()
        | {
            "support": "distinct users per query",
            "ids": "fresh uniformly random id per session",
        },
        rng=rng,
        events=[],
        extra={
            "reference": "Adar 2007; Götz et al. TKDE 2012 §2.2, §7",
            "notes": "k-anonymity gives no protection against active attacks (Götz §3)",
        },
    )
    return HistogramRelease(
        tables={"queries": queries, "keywords": keywords, "query_pairs": pairs, "log": out_log},
        report=report,
        ledger=ledger,
        inputs=[log.ledger_input()],
    )
