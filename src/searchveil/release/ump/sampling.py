"""Multinomial sampling of user ids (Hong et al. EDBT 2012 §3.2, Algorithm 1).

For each pair p with ``x_p > 0``, draw ``x_p`` user ids independently with probabilities
``c_pk / c_p``. Vectorised and exact: every draw is an integer uniform on ``[0, c_p)`` from the
injected ``rng`` (:meth:`RandomSource.integers_below`, rejection sampling — no floating point),
located in the pair's cumulative count row with one ``searchsorted`` over all draws. This is the
privacy-relevant randomness of the mechanism, so it comes from ``rng`` (the OS CSPRNG unless an
experiment is seeded).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import scipy.sparse as sp

from searchveil.rng import RandomSource


def sample_users(
    c: sp.csr_matrix, x: npt.NDArray[np.int64], *, rng: RandomSource
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Return (pair index, user column, count) of the sampled triplets (q, u, s)."""
    c = c.tocsr()
    c.sort_indices()
    x = np.asarray(x, dtype=np.int64)
    draws_pair = np.repeat(np.arange(x.size, dtype=np.int64), x)
    if draws_pair.size == 0:
        e = np.empty(0, dtype=np.int64)
        return e, e, e
    c_p = np.asarray(c.sum(axis=1)).ravel().astype(np.int64)
    cum = np.cumsum(c.data.astype(np.int64))  # global running total over the CSR data
    before = np.r_[0, cum][c.indptr[:-1]]  # running total before each row
    r = rng.integers_below(c_p[draws_pair].astype(np.uint64), draws_pair.size).astype(np.int64)
    pos = np.searchsorted(cum, before[draws_pair] + r, side="right")
    users = c.indices[pos].astype(np.int64)
    key = draws_pair * np.int64(c.shape[1]) + users
    uniq, counts = np.unique(key, return_counts=True)
    return uniq // c.shape[1], uniq % c.shape[1], counts.astype(np.int64)


def sampled_log(
    pairs: pl.DataFrame,
    users: npt.NDArray[Any],
    triplets: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]],
) -> pl.DataFrame:
    """The sanitized log in the input's schema: ``AnonID, Query, ClickURL, Count``."""
    p, k, n = triplets
    q = pairs.get_column("query").gather(p) if p.size else pl.Series([], dtype=pl.String)
    u = pairs.get_column("url").gather(p) if p.size else pl.Series([], dtype=pl.String)
    ids = pl.Series("AnonID", np.asarray(users)[k]) if k.size else pl.Series("AnonID", [])
    df = pl.DataFrame({"AnonID": ids, "Query": q, "ClickURL": u, "Count": n})
    return df.sort(["AnonID", "Query", "ClickURL"])
