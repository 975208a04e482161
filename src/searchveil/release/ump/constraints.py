"""The privacy constraints of Hong et al., EDBT 2012 §4 (Theorem 1), built vectorised.

Sampling user ids for each (query, url) pair, ``x_ij`` multinomial draws with probabilities
``c_ijk / c_ij``, is (ε, δ)-probabilistically differentially private (add/remove one user's log
A_k) if

1. no pair held by a single user is output (Condition 1: such pairs are removed up front), and
2. for every user k: ``Σ_{(i,j) ∈ A_k} x_ij · ln t_ijk ≤ b`` with ``t_ijk = c_ij / (c_ij − c_ijk)``
   and ``b = min(ε, ln 1/(1−δ))`` (Conditions 2 and 3 combined, EDBT eq. 4).

The constraint matrix ``M`` (users × pairs, ``M[k, p] = ln t_pk``) is built from the sparse
histogram without Python loops over non-zeros: ``ln t = −log1p(−c_ijk / c_ij)``. For the
multi-party protocol of CELS, :func:`constraint_block` builds the rows of one party's users
from their own counts and the *global* pair totals ``c_ij``; :func:`stack_blocks` stacks them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import scipy.sparse as sp

from searchveil.model import ClickHistogram
from searchveil.validate import check_positive, check_probability


def privacy_bound(epsilon: float, delta: float) -> float:
    """``b = min(ε, ln 1/(1−δ))`` — the right-hand side of every user's constraint."""
    eps = check_positive("epsilon", epsilon)
    dl = check_probability("delta", delta)
    return min(eps, -math.log1p(-dl))


@dataclass
class UmpInput(ClickHistogram):
    """The click histogram after Condition 1: ``matrix`` (pairs × users CSR, int64), ``pairs``
    (pair_id, query, url, count, holders; pair_id = row of ``matrix``), ``users`` (ids, one per
    column), and ``c_ij`` (pair totals) and what preprocessing removed."""

    c_ij: npt.NDArray[np.int64]
    removed_pairs: int
    removed_clicks: int
    removed_users: int

    @property
    def size(self) -> int:
        """|D|: the total count of the (non-unique) pairs."""
        return int(self.c_ij.sum())


def preprocess(hist: ClickHistogram) -> UmpInput:
    """Condition 1: drop every pair held by one user, then users left without pairs."""
    holders = hist.pairs.get_column("holders").to_numpy()
    keep = np.flatnonzero(holders >= 2)
    c = hist.matrix[keep].tocsr().astype(np.int64)
    user_nnz = np.diff(c.tocsc().indptr)
    ukeep = np.flatnonzero(user_nnz > 0)
    c = c[:, ukeep].tocsr()
    c.sort_indices()
    pairs = (
        hist.pairs[keep.tolist()]
        .drop("pair_id")
        .with_row_index("pair_id")
        .with_columns(pl.col("pair_id").cast(pl.Int64))
    )
    c_ij = np.asarray(c.sum(axis=1)).ravel().astype(np.int64)
    removed = np.setdiff1d(np.arange(hist.n_pairs), keep)
    removed_clicks = int(hist.pairs.get_column("count").to_numpy()[removed].sum())
    return UmpInput(
        matrix=c,
        c_ij=c_ij,
        pairs=pairs,
        users=hist.users[ukeep],
        removed_pairs=int(removed.size),
        removed_clicks=removed_clicks,
        removed_users=int(hist.n_users - ukeep.size),
    )


def constraint_block(c_block: sp.spmatrix, c_ij: npt.NDArray[np.int64]) -> sp.csr_matrix:
    """Rows of M for the users (columns) of ``c_block`` (pairs × these users), given the global
    pair totals: ``M[k, p] = ln(c_p / (c_p − c_pk))``. Needs ``c_pk < c_p`` (Condition 1)."""
    coo = sp.coo_matrix(c_block)
    share = coo.data.astype(np.float64) / c_ij[coo.row].astype(np.float64)
    if share.size and share.max() >= 1.0:
        raise ValueError("a pair held by one user only reached the constraints (Condition 1)")
    vals = -np.log1p(-share)
    return sp.csr_matrix((vals, (coo.col, coo.row)), shape=(coo.shape[1], coo.shape[0]))


def stack_blocks(blocks: list[sp.csr_matrix]) -> sp.csr_matrix:
    """Stack the constraint rows of several parties (users are disjoint across parties)."""
    return sp.vstack(blocks, format="csr")


def constraint_matrix(inp: UmpInput, *, parties: int = 1) -> sp.csr_matrix:
    """M (users × pairs) for the whole input, built from ``parties`` column blocks of users
    (the result does not depend on ``parties``; the blocks are how CELS would assemble it)."""
    return stack_blocks([constraint_block(b, inp.c_ij) for b in inp.user_blocks(max(1, parties))])


def user_loads(m: sp.csr_matrix, x: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """``Σ_p M[k, p] · x_p`` for every user k (compare with b)."""
    return np.asarray(m @ np.asarray(x, dtype=np.float64)).ravel()


def is_feasible(m: sp.csr_matrix, x: npt.NDArray[Any], b: float, *, tol: float = 1e-9) -> bool:
    x = np.asarray(x)
    return bool((x >= 0).all() and (user_loads(m, x) <= b * (1 + tol) + 1e-12).all())
