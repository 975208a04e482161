"""Who holds the published queries, and how the unpublished ones sort: two statistics of the
same-schema log (:mod:`.schema`: ``head_profile``, ``tail_initials``), their exact vectors and
their post-processing into the laws the layout draws from. docs/privacy/ump.md, "Every column
from a DP statistic" (and "Measured": why they are there).

* ``head_profile``: users by (their distinct queries among their first E events, in the bins
  of :func:`~searchveil.synth.shape.activity_edges`; the published queries among those, ≤ 32,
  in the bins of :data:`~.schema.PROFILE_EDGES`). A user adds 1 to one cell (ℓ1 = 1). The
  layout gives each synthetic user a number of distinct queries and of published ones from it:
  co-occurrence between published queries is how many users hold several of them, which a
  mean per activity bin (``head_share``) does not say — dealt by that mean, every user with 8
  queries or more got some published queries and two thirds of the one-query users one, where
  the 100,000-user test log (docs/privacy/ump.md, "Measured") leaves 28% and 77% of them
  without any.
* ``tail_initials``: each user's first 8 distinct unpublished queries by first character
  (``0``–``9``, ``a``–``z``, any other). A user adds at most 8 (ℓ1 = 8). The opaque tail tokens
  start with a character drawn from it, so that they sort among the published queries as the
  unpublished queries do: an analysis keeping each user's first queries in string order (the
  co-occurrence of docs/evaluation.md) then sees the published queries it would see.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.release.ump.monotone import decreasing, pava
from searchveil.release.ump.schema import HEAD_HOLDINGS, INITIALS, PROFILE_EDGES, TAIL_ITEMS
from searchveil.synth.shape import activity_edges

__all__ = [
    "HeadProfile",
    "head_profile_counts",
    "head_profile_law",
    "initial_codes",
    "tail_initials_counts",
]

_I64 = npt.NDArray[np.int64]
_F64 = npt.NDArray[np.float64]
#: the bytes tail tokens start with: one per bin of INITIALS, '-' for "other"
_CODES = np.frombuffer((INITIALS + "-").encode(), dtype=np.uint8)


def _bins(edges: npt.ArrayLike, values: npt.ArrayLike) -> _I64:
    e = np.asarray(edges, dtype=np.int64)
    return np.clip(np.searchsorted(e, np.asarray(values), side="right") - 1, 0, e.size - 2)


def head_profile_counts(hold_e: pl.DataFrame, published: pl.Series, max_events: int) -> _I64:
    """Exact ``head_profile`` (cells row-major: distinct-query bin, then published bin) from
    each user's distinct queries among their first E events (``hold_e``: ``holdings`` of those
    events) and the published strings."""
    pub = hold_e.select("user", pl.col("query").is_in(published.implode()).alias("p"))
    per = pub.group_by("user").agg(pl.len().alias("k"), pl.col("p").sum().alias("h"))
    ke = activity_edges(max_events)
    kb = _bins(ke, per.get_column("k").to_numpy())
    hb = _bins(PROFILE_EDGES, np.minimum(per.get_column("h").to_numpy(), HEAD_HOLDINGS))
    n_h = len(PROFILE_EDGES) - 1
    return np.bincount(kb * n_h + hb, minlength=(ke.size - 1) * n_h).astype(np.int64)


def tail_initials_counts(hold: pl.DataFrame, published: pl.Series) -> _I64:
    """Exact ``tail_initials``: each user's first 8 distinct unpublished queries (``hold``:
    ``holdings``, sorted by user and first event) by first character."""
    firsts = hold.join(pl.DataFrame({"query": published}), on="query", how="anti")
    firsts = firsts.filter(pl.int_range(pl.len()).over("user") < TAIL_ITEMS)
    c = firsts.select(pl.col("query").str.slice(0, 1).alias("c")).get_column("c")
    table = pl.DataFrame({"c": list(INITIALS), "i": range(len(INITIALS))})
    idx = pl.DataFrame({"c": c}).join(table, on="c", how="left").get_column("i")
    return np.bincount(idx.fill_null(len(INITIALS)).to_numpy(),
                       minlength=len(INITIALS) + 1).astype(np.int64)  # fmt: skip


def initial_codes(
    weights: npt.ArrayLike, n: int, gen: np.random.Generator
) -> npt.NDArray[np.uint8]:
    """``n`` first characters (ASCII codes) of tail tokens, drawn by ``weights`` (the noisy
    ``tail_initials``, clipped; uniform over the letters when nothing is left)."""
    w = np.clip(np.asarray(weights, dtype=np.float64), 0, None)
    if w.sum() <= 0:
        w = np.r_[np.zeros(10), np.ones(26), 0.0]
    return _CODES[gen.choice(w.size, size=n, p=w / w.sum())]


@dataclass(frozen=True)
class HeadProfile:
    """The law of (distinct queries, published queries) of a user: ``users`` per distinct-query
    bin (``k_edges``); per bin, the published-query bins' weights ``empirical`` (rows of the
    noisy cells) mixed, with weight ``trust``, with a binomial Bin(k, ``share``) where the
    noise outweighs the bin's users."""

    k_edges: _I64
    users: _F64
    empirical: _F64
    trust: _F64
    share: _F64

    def draw(self, n: int, gen: np.random.Generator) -> tuple[_I64, _I64]:
        """Distinct queries k and published queries h ≤ k of ``n`` users."""
        if n <= 0 or self.users.sum() <= 0:
            return np.ones(max(n, 0), dtype=np.int64), np.zeros(max(n, 0), dtype=np.int64)
        lo, hi = self.k_edges[:-1], self.k_edges[1:]
        kb = gen.choice(self.users.size, size=n, p=self.users / self.users.sum())
        k = lo[kb] + np.floor(gen.random(n) * (hi[kb] - lo[kb])).astype(np.int64)
        he = np.asarray(PROFILE_EDGES, dtype=np.int64)
        cum = np.cumsum(self.empirical, axis=1)
        hb = np.minimum((gen.random(n)[:, None] * cum[kb, -1:] > cum[kb]).sum(axis=1),
                        he.size - 2)  # fmt: skip
        h_emp = he[hb] + np.floor(gen.random(n) * (he[hb + 1] - he[hb])).astype(np.int64)
        h_bin = gen.binomial(k, self.share[kb])
        h = np.where(gen.random(n) < self.trust[kb], h_emp, h_bin)
        return k, np.minimum(h, k)


def head_profile_law(noisy: npt.ArrayLike, max_events: int, cell_variance: float) -> HeadProfile:
    """Post-processing of the noisy ``head_profile`` (public: the noisy cells, the bins and
    the noise's variance). Cells that cannot hold a user (more published queries than the
    bin's distinct queries) are 0; users per distinct-query bin: the non-increasing density
    fit of the rows' noisy sums; per bin, the row without its cells of at most twice the
    noise's scale (its weight: users² / (users² + the row's noise variance)) and the share
    of its queries that are published (noisy mean over the bin's midpoint), fitted
    non-increasing in k (heavy users hold a smaller share of popular queries), weighted by
    its precision."""
    ke = activity_edges(max_events)
    he = np.asarray(PROFILE_EDGES, dtype=np.int64)
    n_k, n_h = ke.size - 1, he.size - 1
    cells = np.asarray(noisy, dtype=np.float64).reshape(n_k, n_h)
    ok = he[None, :-1] <= (ke[1:, None] - 1)  # a bin of h ≤ the bin's largest k
    cells = np.where(ok, cells, 0.0)
    users = decreasing(cells.sum(axis=1), np.diff(ke))
    # a cell at most twice the noise's scale is taken as empty: clipped noise in the many
    # cells of few users would otherwise give heavy users phantom published queries
    empirical = np.where(cells > 2 * np.sqrt(cell_variance / 2), cells, 0.0)
    noise = ok.sum(axis=1) * cell_variance
    trust = np.where(empirical.sum(axis=1) > 0, users**2 / (users**2 + noise + 1e-12), 0.0)
    h_mid = (he[:-1] + he[1:] - 1) / 2.0
    k_mid = (ke[:-1] + ke[1:] - 1) / 2.0
    s = np.maximum(users, 1.0)
    share = np.clip(cells @ h_mid / s / k_mid, 0, 1)
    var = (ok * h_mid[None, :] ** 2).sum(axis=1) * cell_variance / (s * k_mid) ** 2 + 1 / s
    share = np.clip(pava(share, 1 / var), 0, 1)
    return HeadProfile(k_edges=ke, users=users, empirical=empirical, trust=trust, share=share)
