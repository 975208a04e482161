"""CELS phases 1–3 (see :mod:`searchveil.cels.protocol`): the union of the pairs by
commutative encryption (Algorithm 3), the masked ring sum of counts and holders (Algorithm 1),
and each party's constraint rows with dominated rows pruned."""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from searchveil.cels import commutative as cm
from searchveil.cels.params import HOLDER_BITS
from searchveil.cels.party import (
    PartyBase,
    elements_parser,
    parse_frame,
    secure_perm,
)
from searchveil.cels.wire import (
    ProtocolError,
    expect,
)
from searchveil.errors import InvalidParameterError
from searchveil.release.ump import constraint_block
from searchveil.rng import SecureRandom

T = TypeVar("T")


def prune_dominated(t: sp.csr_matrix, *, max_candidates: int = 4096) -> npt.NDArray[np.int64]:
    """Rows of ``t`` (non-negative) not dominated by another row: row a is dropped if some
    row c ≠ a has t[c, j] ≥ t[a, j] for every j (then t_c x ≤ b implies t_a x ≤ b for x ≥ 0);
    among equal rows the first is kept. Candidates for dominating a are the rows holding a's
    rarest pair (at most ``max_candidates`` of them, those with the largest row sums: keeping
    a dominated row is always safe), compared in one vectorised block per row."""
    t = sp.csr_matrix(t)
    t.sort_indices()
    csc = t.tocsc()
    holders = np.diff(csc.indptr)
    nnz = np.diff(t.indptr)
    rowsum = np.asarray(t.sum(axis=1)).ravel()
    keep = nnz > 0
    for a in np.argsort(nnz, kind="stable"):
        lo, hi = t.indptr[a], t.indptr[a + 1]
        if lo == hi:
            continue
        cols, vals = t.indices[lo:hi], t.data[lo:hi]
        rare = cols[np.argmin(holders[cols])]
        cand = csc.indices[csc.indptr[rare] : csc.indptr[rare + 1]]
        cand = cand[(cand != a) & keep[cand] & (nnz[cand] >= hi - lo)]
        if cand.size == 0:
            continue
        if cand.size > max_candidates:
            cand = cand[np.argsort(-rowsum[cand], kind="stable")[:max_candidates]]
        sub = t[cand][:, cols].toarray()
        ge = (sub >= vals[None, :]).all(axis=1)
        strict = (sub > vals[None, :]).any(axis=1) | (nnz[cand] > hi - lo) | (cand < a)
        if (ge & strict).any():
            keep[a] = False
    return np.flatnonzero(keep)


class UnionPhases(PartyBase):
    """Phases 1–3 of a data party."""

    # -- 1. union of the pairs ------------------------------------------------------------------
    def _announce_pairs(self, mine: int) -> dict[int, int]:
        """Every data party's pair count (each list's length on the ring shows it anyway), so
        that the union's frames can be capped before they arrive (:meth:`Mesh.allow`)."""
        counts = {self.me: mine}
        for j in self.data:
            if j != self.me:
                self.mesh.send(j, "union_size", {"pairs": mine})
        for j in self.data:
            if j != self.me:
                f = self.mesh.recv(j, "union_size")
                expect(f.body, {"pairs": int}, j)
                if f.body["pairs"] < 0:
                    raise ProtocolError(f"P{j} announced a negative pair count", peer=j)
                counts[j] = f.body["pairs"]
        self.mesh.allow("union", cm.ELEMENT_BYTES * sum(counts.values()))
        return counts

    def union(self) -> npt.NDArray[np.int64]:
        """Universe position of every local pair; returns the positions, sets self.n_universe."""
        assert self.share is not None
        h = self.share.hist
        q = h.pairs.get_column("query").to_list()
        u = h.pairs.get_column("url").to_list()
        counts = self._announce_pairs(len(q))
        key = cm.UnionKey.generate()
        order = secure_perm(len(q))
        cur: list[bytes] = []
        step = 2048
        for s in range(0, len(order), step):
            self.check()
            cur.extend(
                key.encrypt(cm.hash_to_group(f"{q[i]}\t{u[i]}".encode()))
                for i in order[s : s + step]
            )
        mine: list[bytes] | None = None
        for hop in range(1, self.r + 1):
            width = cm.DIGEST_BYTES if hop == self.r else cm.ELEMENT_BYTES
            self.mesh.send(self.succ(), "union_fwd", {"hop": hop}, cm.elements_to_bytes(cur, width))
            f = self.mesh.recv(self.pred(), "union_fwd")
            expect(f.body, {"hop": int}, f.peer)
            if f.body["hop"] != hop:
                raise ProtocolError(
                    f"P{f.peer} sent union hop {f.body['hop']} ≠ {hop}", peer=f.peer
                )
            got = parse_frame(f, elements_parser(width))
            origin = (self.me - 1 - hop) % self.r + 1  # whose pairs this list holds
            if len(got) != counts[origin]:
                raise ProtocolError(
                    f"P{f.peer} sent {len(got)} pairs of P{origin}, which announced "
                    f"{counts[origin]}", peer=f.peer,
                )  # fmt: skip
            if hop < self.r:
                cur = []
                for s in range(0, len(got), step):
                    self.check()
                    cur.extend(key.encrypt_many(got[s : s + step]))
                if hop + 1 == self.r:  # fully encrypted: only ever compared from here on
                    cur = [cm.digest(x) for x in cur]
            else:
                mine = got  # my own list, encrypted by all r parties, in my order
        assert mine is not None
        if len(mine) != len(q):
            raise ProtocolError(
                f"P{self.pred()} returned {len(mine)} of my {len(q)} pairs", peer=self.pred()
            )
        full = sorted(set(mine))
        dw = cm.DIGEST_BYTES
        if self.me == 1:
            pool = set(full)
            for j in self.data[1:]:
                f = self.mesh.recv(j, "union_set")
                expect(f.body, {}, j)
                pool.update(parse_frame(f, lambda b: cm.elements_from_bytes(b, dw)))
            universe = sorted(pool)
            blob = cm.elements_to_bytes(universe, dw)
            for j in self.data[1:]:
                self.mesh.send(j, "universe", {"n": len(universe)}, blob)
        else:
            self.mesh.send(1, "union_set", {}, cm.elements_to_bytes(full, dw))
            f = self.mesh.recv(1, "universe")
            expect(f.body, {"n": int}, 1)
            universe = parse_frame(f, lambda b: cm.elements_from_bytes(b, dw))
            if len(universe) != f.body["n"] or any(
                a >= b for a, b in zip(universe, universe[1:], strict=False)
            ):
                raise ProtocolError("P1 sent a malformed universe (not sorted, or repeats)", peer=1)
        self.mesh.allow("sum", 16 * len(universe))  # (count, holders) words; J's totals
        index = {y: i for i, y in enumerate(universe)}
        pos = np.empty(len(q), dtype=np.int64)
        try:
            pos[order] = [index[y] for y in mine]
        except KeyError as exc:
            raise ProtocolError("the universe from P1 misses one of my pairs", peer=1) from exc
        self.n_universe = len(universe)
        return pos

    # -- 2. secure counts sum (Algorithm 1, masked) -----------------------------------------------
    def ring_sum(self, vec: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64] | None:
        """Algorithm 1 as a masked ring sum (docs/privacy/cels.md §2, correction 7): the sum
        mod 2⁶⁴ of every data party's ``vec`` (all of one length), known to P1 alone (returned
        there; None at the others). P1 adds a uniform 64-bit mask from the CSPRNG, P2…Pr add
        their vectors along the ring, P1 removes the mask: every value another party sees is
        uniform."""
        n = int(vec.size)
        if self.me == 1:
            mask = SecureRandom().words(n)
            self.mesh.send(self.succ(), "sum_fwd", {"n": n}, (vec + mask).astype(">u8").tobytes())
        f = self.mesh.recv(self.pred(), "sum_fwd")
        expect(f.body, {"n": int}, f.peer)
        if f.body["n"] != n or len(f.blob) != 8 * n:
            raise ProtocolError(f"P{f.peer} sent a sum of the wrong length", peer=f.peer)
        acc = np.frombuffer(f.blob, dtype=">u8").astype(np.uint64)
        if self.me == 1:
            return acc - mask
        self.mesh.send(self.succ(), "sum_fwd", {"n": n}, (acc + vec).astype(">u8").tobytes())
        return None

    def secure_sum(self, pos: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], ...]:
        """J (universe positions kept by Condition 1 and ``min_count``) and their totals."""
        assert self.share is not None
        n = self.n_universe
        cnt = self.share.hist.pairs.get_column("count").to_numpy().astype(np.int64)
        hol = self.share.hist.pairs.get_column("holders").to_numpy().astype(np.int64)
        if hol.size and int(hol.max()) >= 1 << 20:
            raise InvalidParameterError("holders", int(hol.max()), "< 2^20 users per pair")
        if cnt.size and int(cnt.max()) >= 1 << 36:
            raise InvalidParameterError("count", int(cnt.max()), "< 2^36 clicks per pair")
        if self.r >= 16:
            raise InvalidParameterError("parties", self.r, "at most 15 data parties")
        vec = np.zeros(n, dtype=np.uint64)
        vec[pos] = (cnt.astype(np.uint64) << np.uint64(HOLDER_BITS)) | hol.astype(np.uint64)
        tot = self.ring_sum(vec)
        if tot is not None:  # P1
            c_tot = (tot >> np.uint64(HOLDER_BITS)).astype(np.int64)
            h_tot = (tot & np.uint64((1 << HOLDER_BITS) - 1)).astype(np.int64)
            keep = np.flatnonzero((h_tot >= 2) & (c_tot >= self.params.min_count))
            c_keep = c_tot[keep]
            self.send_positions("sum_result", "j", keep, c_keep)
        else:
            keep, c_keep = self.recv_positions("sum_result", "j", "sum result")
        # consistency with my own counts
        where = np.full(n, -1, dtype=np.int64)
        where[keep] = np.arange(keep.size)
        lj = where[pos]
        mine = lj >= 0
        if (c_keep[lj[mine]] < cnt[mine]).any():
            raise ProtocolError("the secure sum is inconsistent with my own counts", peer=1)
        sure = (hol >= 2) & (cnt >= self.params.min_count)
        if (sure & ~mine).any():
            raise ProtocolError("the secure sum dropped a pair that passes on my data", peer=1)
        return keep, c_keep

    # -- 3. constraint rows -------------------------------------------------------------------
    def rows(
        self, pos: npt.NDArray[np.int64], keep: npt.NDArray[np.int64], c_keep: npt.NDArray[Any]
    ) -> None:
        assert self.share is not None
        self.J = keep
        nj = keep.size
        where = np.full(self.n_universe, -1, dtype=np.int64)
        where[keep] = np.arange(nj)
        local_j = where[pos]  # J position of each local pair (−1: removed)
        sel = np.flatnonzero(local_j >= 0)
        self.local_of_j = np.full(nj, -1, dtype=np.int64)
        self.local_of_j[local_j[sel]] = sel
        mat = self.share.hist.matrix.tocsr()[sel]
        coo = mat.tocoo()
        self.cJ = c_keep.astype(np.int64)
        c_k = sp.csr_matrix(
            (coo.data.astype(np.int64), (local_j[sel][coo.row], coo.col)),
            shape=(nj, mat.shape[1]),
        )
        self.c_k = c_k
        self.cJ_mine = np.asarray(c_k.sum(axis=1)).ravel().astype(np.int64)
        t_all = constraint_block(c_k, self.cJ) if nj else sp.csr_matrix((mat.shape[1], 0))
        active = np.flatnonzero(np.diff(t_all.indptr) > 0)
        self.t_all = t_all[active]
        kept = prune_dominated(self.t_all) if active.size else np.zeros(0, dtype=np.int64)
        self.t_red = self.t_all[kept]
        m_me = int(self.t_red.shape[0])
        for j in [0, *self.data]:  # P0 too: it caps Algorithm 2's frames with them
            if j != self.me:
                self.mesh.send(j, "rows", {"m": m_me, "n": int(nj)})
        ms = {self.me: m_me}
        for j in self.data:
            if j != self.me:
                f = self.mesh.recv(j, "rows")
                expect(f.body, {"m": int, "n": int}, j)
                if f.body["n"] != nj or f.body["m"] < 0:
                    raise ProtocolError(f"P{j} disagrees on the number of pairs", peer=j)
                ms[j] = f.body["m"]
        self.ms = [ms[j] for j in self.data]
        self.ell = sum(self.ms)
        self.allow_after_rows(int(nj), self.ell, self.ms, self.pk0_n)
        self.offset = sum(self.ms[: self.me - 1])
        self.extra.update({"constraint_rows": int(self.t_all.shape[0]), "rows_after_pruning": m_me})
