"""Keyword generation on the query-click graph (Korolova thesis §4.6.2.2, after Fuxman, Tsaparas,
Achan, Agrawal, "Using the wisdom of the crowds for keyword generation", WWW 2008).

An advertiser gives a concept as a set of seed URLs; keywords for it are the queries from which a
random walk on the bipartite query-click graph is likely to end in the seed set. The graph has a
query node per query and a URL node per URL, with edge weight = the click count of (query, url).
From a node the walk moves to a neighbour with probability proportional to the edge weight.
Seed URLs are absorbing ("relevant"); in addition, every step is taken only with probability
1 − α, and with probability α the walk is absorbed in a *null* state (Fuxman's penalty on long
walks). The relevance of a node is the probability of absorption in the seed set:

    r(u) = 1 for a seed URL u,
    r(x) = (1 − α) · Σ_y w(x, y) / w(x) · r(y) otherwise,

computed by value iteration from r = 0 (monotone, converges to the least fixed point, which is
the absorption probability) until the largest change is below ``gamma``. The thesis uses
Fuxman's α = 0.001, γ = 0.0001; ``gamma`` here is that convergence tolerance (our reading of γ).

Queries with relevance ≥ t are the generated keywords; the thesis reports their number at
t = 0.5, 0.7, 0.9, 0.95 for the original and the released graph, and the share of keywords from
the released graph that the original graph also generates (Table 4.5). The thesis pruned
query-URL pairs with fewer than 10 clicks for speed; ``min_clicks`` does the same (default 1:
no pruning). Noisy release counts ≤ 0 are dropped (no edge).

Seeds are URL *domains*: a URL matches domain d if its host (lower-cased, without ``www.``) is d
or ends in ``.d``. The default seed sets follow the thesis' three concepts, with domains that
occur in AOL-era logs (the thesis' exact WebMD/Wikipedia pages are not domains of their own).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import scipy.sparse as sp

from searchveil.errors import InvalidParameterError
from searchveil.evaluate._release import url_host
from searchveil.validate import check_int, check_probability

__all__ = [
    "DEFAULT_SEEDS",
    "THRESHOLDS",
    "parse_seed_spec",
    "relevance_scores",
    "generate_keywords",
    "evaluate_keywords",
]

THRESHOLDS = (0.5, 0.7, 0.9, 0.95)

DEFAULT_SEEDS: dict[str, tuple[str, ...]] = {
    "shoes": (
        "shoes.com",
        "shoebuy.com",
        "zappos.com",
        "payless.com",
        "onlineshoes.com",
        "famousfootwear.com",
    ),
    "colleges": (  # US News top ten national universities, 2009 edition
        "harvard.edu",
        "princeton.edu",
        "yale.edu",
        "mit.edu",
        "stanford.edu",
        "caltech.edu",
        "upenn.edu",
        "columbia.edu",
        "uchicago.edu",
        "duke.edu",
    ),
    "suicide": (
        "depression.com",
        "suicide.com",
        "suicide.org",
        "stopasuicide.org",
        "suicidehotlines.com",
        "allaboutdepression.com",
    ),
}


def parse_seed_spec(spec: str) -> tuple[str, tuple[str, ...]]:
    """``name=dom1,dom2`` → (name, (dom1, dom2))."""
    name, sep, rest = spec.partition("=")
    doms = tuple(d.strip().lower().removeprefix("www.") for d in rest.split(",") if d.strip())
    if not sep or not name.strip() or not doms:
        raise InvalidParameterError("seeds", spec, "NAME=domain1,domain2,...")
    return name.strip(), doms


def _matches(host: str, domains: tuple[str, ...]) -> bool:
    return any(host == d or host.endswith("." + d) for d in domains)


def relevance_scores(
    clicks: pl.DataFrame,
    seed_domains: tuple[str, ...],
    *,
    alpha: float = 0.001,
    gamma: float = 0.0001,
    max_iter: int = 10_000,
    min_clicks: int = 1,
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Relevance r(q) of every query of the click graph ``clicks`` = DataFrame[query, url,
    count]; returns (DataFrame[query, relevance] sorted by relevance, convergence info)."""
    check_probability("alpha", alpha, open_low=False, open_high=True)
    check_probability("gamma", gamma)
    check_int("max_iter", max_iter, minimum=1)
    check_int("min_clicks", min_clicks, minimum=1)
    g = (
        clicks.select("query", "url", pl.col("count").cast(pl.Float64))
        .group_by(["query", "url"])
        .agg(pl.col("count").sum())
        .filter(pl.col("count") >= min_clicks)
        .sort(["query", "url"])
    )
    queries = g.get_column("query").unique().sort()
    urls = g.get_column("url").unique().sort()
    nq, nu = queries.len(), urls.len()
    if nq == 0:
        return pl.DataFrame(
            {"query": [], "relevance": []}, schema={"query": pl.String, "relevance": pl.Float64}
        ), {"iterations": 0, "converged": True, "seed_urls": 0, "queries": 0, "urls": 0}
    qi = pl.DataFrame({"query": queries}).with_row_index("qi")
    ui = pl.DataFrame({"url": urls}).with_row_index("ui")
    e = g.join(qi, on="query").join(ui, on="url")
    rows = e.get_column("qi").to_numpy()
    cols = e.get_column("ui").to_numpy()
    w = e.get_column("count").to_numpy()
    W = sp.csr_matrix((w, (rows, cols)), shape=(nq, nu))
    wq = np.asarray(W.sum(axis=1)).ravel()
    wu = np.asarray(W.sum(axis=0)).ravel()
    P_qu = sp.diags(1.0 / wq) @ W  # query → url
    P_uq = (sp.diags(1.0 / wu) @ W.T).tocsr()  # url → query
    seed = np.array([_matches(url_host(u), seed_domains) for u in urls.to_list()], dtype=bool)
    beta = 1.0 - alpha
    r_q: npt.NDArray[np.float64] = np.zeros(nq)
    r_u: npt.NDArray[np.float64] = seed.astype(np.float64)
    it = 0
    converged = False
    while it < max_iter:
        it += 1
        new_q = beta * (P_qu @ r_u)
        new_u = np.where(seed, 1.0, beta * (P_uq @ new_q))
        delta = max(
            float(np.max(np.abs(new_q - r_q))) if nq else 0.0,
            float(np.max(np.abs(new_u - r_u))) if nu else 0.0,
        )
        r_q, r_u = new_q, new_u
        if delta < gamma:
            converged = True
            break
    out = pl.DataFrame({"query": queries, "relevance": r_q}).sort(
        ["relevance", "query"], descending=[True, False]
    )
    info = {
        "iterations": it,
        "converged": converged,
        "seed_urls": int(seed.sum()),
        "queries": int(nq),
        "urls": int(nu),
        "edges": int(g.height),
    }
    return out, info


def generate_keywords(scores: pl.DataFrame, threshold: float) -> set[str]:
    """Queries with relevance ≥ threshold."""
    return set(scores.filter(pl.col("relevance") >= threshold).get_column("query").to_list())


def evaluate_keywords(
    original_clicks: pl.DataFrame,
    released_clicks: pl.DataFrame,
    *,
    seeds: dict[str, tuple[str, ...]] | None = None,
    thresholds: tuple[float, ...] = THRESHOLDS,
    alpha: float = 0.001,
    gamma: float = 0.0001,
    min_clicks: int = 1,
) -> dict[str, Any]:
    """Table 4.5 of the thesis for each seed set: number of keywords from the original and the
    released graph at each threshold, and the overlap |K_rel ∩ K_orig| / |K_rel|."""
    seeds = dict(seeds) if seeds is not None else dict(DEFAULT_SEEDS)
    for t in thresholds:
        check_probability("threshold", t, open_low=True, open_high=False)
    out: dict[str, Any] = {
        "applicable": True,
        "alpha": alpha,
        "gamma": gamma,
        "min_clicks": min_clicks,
        "thresholds": list(thresholds),
        "graph": {
            "original_queries": int(original_clicks.get_column("query").n_unique()),
            "original_edges": int(original_clicks.height),
            "released_queries": int(
                released_clicks.filter(pl.col("count") > 0).get_column("query").n_unique()
            ),
            "released_edges": int(released_clicks.filter(pl.col("count") > 0).height),
        },
        "seed_sets": {},
    }
    rel_clicks = released_clicks.filter(pl.col("count") > 0)
    for name, doms in seeds.items():
        s_orig, i_orig = relevance_scores(
            original_clicks, doms, alpha=alpha, gamma=gamma, min_clicks=min_clicks
        )
        s_rel, i_rel = relevance_scores(
            rel_clicks, doms, alpha=alpha, gamma=gamma, min_clicks=min_clicks
        )
        rows = []
        for t in thresholds:
            ko = generate_keywords(s_orig, t)
            kr = generate_keywords(s_rel, t)
            rows.append(
                {
                    "threshold": t,
                    "original": len(ko),
                    "released": len(kr),
                    "released_share_of_original": len(kr) / len(ko) if ko else math.nan,
                    "overlap": len(kr & ko) / len(kr) if kr else math.nan,
                }
            )
        top_o = s_orig.filter(pl.col("relevance") >= thresholds[0]).head(10)
        top_r = s_rel.filter(pl.col("relevance") >= thresholds[0]).head(10)
        out["seed_sets"][name] = {
            "domains": list(doms),
            "original_graph": i_orig,
            "released_graph": i_rel,
            "by_threshold": rows,
            "top_original": [[q, float(r)] for q, r in top_o.iter_rows()],
            "top_released": [[q, float(r)] for q, r in top_r.iter_rows()],
        }
    return out
