"""The CELS protocol (Hong et al., TKDE 2015, §4.2: Algorithms 1–3 and local sampling), one
party per process: P0 is the solver and data recipient, P1…Pr hold disjoint users' logs.

Phases (each party runs :func:`run_party`; docs/privacy/cels.md has the full analysis):

1. **union** — the pair universe by commutative encryption (Algorithm 3 applied to the hashed
   (query, url) pairs): each party's hashed pairs travel the ring P1→…→Pr→P1 and are
   encrypted by every party (order kept, so the owner can map its own pairs); every party
   sends its fully encrypted set to the coordinator P1, which broadcasts the sorted union.
   Universe positions are all the parties learn about other parties' pairs.
2. **sum** — Algorithm 1 (P1's Paillier key): Σ_k (c^k_i, holders^k_i) over the universe,
   packed, along the ring; P1 decrypts and broadcasts the totals. Condition 1 (≥ 2 holders) and
   the optional paper cleaning (total count ≥ ``min_count``) select the pairs J.
3. **rows** — each party builds its constraint rows (``constraint_block`` with the global
   totals), drops rows dominated by another of its rows (ℓ reduction) and announces m'_k.
4. **nlp** — Algorithm 2 (P0's Paillier key) *fixed*: line 6 raises a ciphertext to a
   ciphertext, which Paillier cannot do; each party knows A_k and T_k, computes A_kT_k in the
   clear, and only encrypts it (signed fixed point, packed); the sums run along the ring with
   fresh encryptions; then every party permutes the pair columns and re-randomises; Pr sends
   Enc(π(AT)), Enc(π(v)), Enc(AB) to P0; each party sends Enc(A_kF_k) to P0.
5. **solve** — P0 decrypts, reduces ATx + AFy = (1−η)AB, y ≥ 0 to (AF)⁻¹: M̃x ≤ 1 − η and
   solves the KL (Appendix B) or size objective with the single-party solvers.
6. **unpermute** — x goes P0→Pr→…→P1, each applying its inverse permutation; P1 broadcasts x.
7. **verify** — every party checks *all* its users' constraints exactly (float64, no
   tolerance); a party whose user is over b repairs x (removing draws); x = min over parties.
8. **sample** — the global multinomial sampling, exactly: the x_i draws are split among the
   parties by sequential binomials along the ring (Pk draws Bin(t, c^k/R) with R the count
   not yet assigned), then each party samples its users (``sample_users``).
9. **output** — Algorithm 3 on the sampled records (invertible encoding, full SRA keys,
   shuffled at every hop), decrypted along the ring; Pr broadcasts the joint output.
10. **commit** — all parties exchange their statistics, build the same ledger, exchange the
    SHA-256 of (output, ledger) and write only if every digest agrees.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import scipy.sparse as sp

from searchveil.collab import commutative as cm
from searchveil.collab.paillier import (
    ALLOWED_KEY_BITS,
    Packer,
    PrivateKey,
    PublicKey,
    generate_keypair,
    key_strength,
)
from searchveil.collab.wire import Config, Mesh, ProtocolError, expect
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.ledger import ReleaseWriter, build_ledger_unchecked
from searchveil.io.readers import read_log
from searchveil.model import ClickHistogram, click_histogram
from searchveil.release.ump import constraint_block, sample_users, solve_oump
from searchveil.release.ump.kl import cels_bound, kl_loss, solve_kl
from searchveil.release.ump.solvers import repair
from searchveil.rng import RandomSource, SecureRandom
from searchveil.validate import check_choice, check_int, check_positive, check_probability

OBJECTIVES = ("kl", "size")
NOTION = "(ε,δ)-DP of the multinomial sampling given the counts (CELS Thm 2, Thm 7)"
ETA = 1e-6  # P0 tightens every constraint to (1 − η)·b against the LP tolerance
COUNT_SLOT_BITS = 48
RECORD_CHUNK = 180


@dataclass(frozen=True)
class CelsParams:
    """Parameters every party must agree on (checked in the setup phase)."""

    epsilon: float
    delta: float
    objective: str
    key_bits: int = 3072
    output_share: float = 0.5
    breakpoints: int = 33
    min_count: int = 1

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        check_probability("delta", self.delta)
        check_choice("objective", self.objective, OBJECTIVES)
        if self.key_bits not in ALLOWED_KEY_BITS:
            raise InvalidParameterError("key_bits", self.key_bits, f"one of {ALLOWED_KEY_BITS}")
        if not 0 < self.output_share <= 1:
            raise InvalidParameterError("output_share", self.output_share, "a share in (0, 1]")
        check_int("breakpoints", self.breakpoints, minimum=2)
        check_int("min_count", self.min_count, minimum=1)

    @property
    def b(self) -> float:
        return cels_bound(self.epsilon, self.delta)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"b": self.b, "key_strength": key_strength(self.key_bits)}


@dataclass
class Share:
    """One data party's input: its click histogram and file fingerprint."""

    hist: ClickHistogram
    info: dict[str, Any]

    @classmethod
    def read(cls, path: Path) -> Share:
        log = read_log(path)
        return cls(click_histogram(log), log.ledger_input())


@dataclass
class PartyResult:
    output: pl.DataFrame
    ledger: dict[str, Any]
    digest: str
    stats: dict[str, Any] = field(default_factory=dict)


# -- helpers ---------------------------------------------------------------------------------
def _ints_to_blob(a: npt.NDArray[Any]) -> bytes:
    return np.ascontiguousarray(a, dtype=">i8").tobytes()


def _blob_to_ints(blob: bytes, n: int, who: str) -> npt.NDArray[np.int64]:
    if len(blob) != 8 * n:
        raise ProtocolError(f"malformed message from {who}: expected {n} integers")
    return np.frombuffer(blob, dtype=">i8").astype(np.int64)


def _perm(n: int) -> npt.NDArray[np.int64]:
    """A uniformly random permutation from the OS CSPRNG (sort by random 64-bit keys)."""
    return np.argsort(SecureRandom().random_keys(n), kind="stable").astype(np.int64)


def _shuffle(xs: list[int]) -> list[int]:
    return [xs[i] for i in _perm(len(xs))]


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


class _Clock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._t = time.perf_counter()
        self._phase = "setup"

    def enter(self, mesh: Mesh | None, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[self._phase] = self.seconds.get(self._phase, 0.0) + now - self._t
        self._t, self._phase = now, phase
        if mesh is not None:
            mesh.phase = phase


def _pk_body(pk: PublicKey) -> dict[str, Any]:
    return {"n": format(pk.n, "x")}


def _pk_from(body: dict[str, Any], bits: int, who: str) -> PublicKey:
    expect(body, {"n": str}, who)
    try:
        n = int(body["n"], 16)
    except ValueError as exc:
        raise ProtocolError(f"malformed public key from {who}") from exc
    if n.bit_length() != bits or n % 2 == 0:
        raise ProtocolError(f"{who} sent a {n.bit_length()}-bit key; {bits} bits were agreed")
    return PublicKey(n)


def _encrypt_all(pk: PublicKey, plains: list[int]) -> list[int]:
    return [pk.encrypt(m) for m in plains]


# -- the party --------------------------------------------------------------------------------
class Party:
    def __init__(
        self,
        mesh: Mesh,
        params: CelsParams,
        share: Share | None,
        rng: RandomSource,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.mesh, self.params, self.share, self.rng = mesh, params, share, rng
        self.me = mesh.me
        self.r = len(mesh.config.ids) - 1
        self.data = list(range(1, self.r + 1))
        self.clock = _Clock()
        self.extra: dict[str, Any] = {}
        self.progress = progress or (lambda s: None)
        self.fault: tuple[str, str] | None = None

    # ring among the data parties
    def succ(self, k: int | None = None) -> int:
        k = self.me if k is None else k
        return k % self.r + 1

    def pred(self, k: int | None = None) -> int:
        k = self.me if k is None else k
        return (k - 2) % self.r + 1

    def phase(self, name: str) -> None:
        self.clock.enter(self.mesh, name)
        self.progress(name)
        if self.fault is not None and self.fault[0] == name:
            inject_fault(self.mesh, self.fault[1])

    # -- setup: P0's key and the agreed parameters ------------------------------------------
    def setup(self) -> PrivateKey | PublicKey:
        p = self.params.to_dict()
        if self.me == 0:
            sk = generate_keypair(self.params.key_bits)
            for j in self.data:
                self.mesh.send(j, "pk", {"key": _pk_body(sk.public), "params": p})
            return sk
        f = self.mesh.recv(0, "pk")
        expect(f.body, {"key": dict, "params": dict}, "party 0")
        if f.body["params"] != json.loads(json.dumps(p)):
            raise ProtocolError("party 0 runs with different parameters")
        return _pk_from(f.body["key"], self.params.key_bits, "party 0")

    # -- 1. union of the pairs ------------------------------------------------------------------
    def union(self) -> npt.NDArray[np.int64]:
        """Universe position of every local pair; returns the positions, sets self.n_universe."""
        assert self.share is not None
        h = self.share.hist
        q = h.pairs.get_column("query").to_list()
        u = h.pairs.get_column("url").to_list()
        key = cm.CommutativeKey.generate("short")
        order = _perm(len(q))
        cur = [key.encrypt(cm.hash_to_group(f"{q[i]}\t{u[i]}".encode())) for i in order]
        mine: list[int] | None = None
        for hop in range(1, self.r + 1):
            self.mesh.send(self.succ(), "union_fwd", {"hop": hop}, cm.elements_to_bytes(cur))
            f = self.mesh.recv(self.pred(), "union_fwd")
            expect(f.body, {"hop": int}, f"party {f.peer}")
            if f.body["hop"] != hop:
                raise ProtocolError(f"party {f.peer} sent union hop {f.body['hop']} ≠ {hop}")
            got = cm.elements_from_bytes(f.blob)
            if hop < self.r:
                cur = [key.encrypt(y) for y in got]
            else:
                mine = got  # my own list, encrypted by all r parties, in my order
        assert mine is not None
        full = sorted(set(mine))
        if self.me == 1:
            pool = set(full)
            for j in self.data[1:]:
                f = self.mesh.recv(j, "union_set")
                expect(f.body, {}, f"party {j}")
                pool.update(cm.elements_from_bytes(f.blob))
            universe = sorted(pool)
            blob = cm.elements_to_bytes(universe)
            for j in self.data[1:]:
                self.mesh.send(j, "universe", {"n": len(universe)}, blob)
        else:
            self.mesh.send(1, "union_set", {}, cm.elements_to_bytes(full))
            f = self.mesh.recv(1, "universe")
            expect(f.body, {"n": int}, "party 1")
            universe = cm.elements_from_bytes(f.blob)
            if len(universe) != f.body["n"] or universe != sorted(set(universe)):
                raise ProtocolError("party 1 sent a malformed universe")
        index = {y: i for i, y in enumerate(universe)}
        pos = np.empty(len(q), dtype=np.int64)
        try:
            pos[order] = [index[y] for y in mine]
        except KeyError as exc:
            raise ProtocolError("the universe misses one of my pairs") from exc
        self.n_universe = len(universe)
        return pos

    # -- 2. secure counts sum (Algorithm 1) ------------------------------------------------
    def secure_sum(self, pos: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], ...]:
        assert self.share is not None
        n = self.n_universe
        cnt = self.share.hist.pairs.get_column("count").to_numpy().astype(np.int64)
        hol = self.share.hist.pairs.get_column("holders").to_numpy().astype(np.int64)
        vec = np.zeros(n, dtype=np.int64)
        # count and holders in one slot: count·2^20 + holders (holders < 2^20 in total)
        if hol.size and int(hol.max()) >= 1 << 16:
            raise InvalidParameterError("holders", int(hol.max()), "< 65536 users per pair")
        vec[pos] = cnt * (1 << 20) + hol
        if self.me == 1:
            sk = generate_keypair(self.params.key_bits)
            pk = sk.public
            for j in self.data[1:]:
                self.mesh.send(j, "pk", {"key": _pk_body(pk), "params": {}})
        else:
            f = self.mesh.recv(1, "pk")
            expect(f.body, {"key": dict, "params": dict}, "party 1")
            pk = _pk_from(f.body["key"], self.params.key_bits, "party 1")
        packer = Packer(pk.n, slot_bits=COUNT_SLOT_BITS, frac_bits=0, headroom=7)
        np_ = packer.n_plaintexts(n)
        own = _encrypt_all(pk, packer.pack(vec.astype(np.float64)))
        if float(vec.max(initial=0)) >= 2**53:
            raise InvalidParameterError("count", int(vec.max()), "total counts < 2^33")
        if self.me == 1:
            self.mesh.send(self.succ(), "sum_fwd", {"n": n}, pk.to_bytes(own))
            f = self.mesh.recv(self.pred(), "sum_fwd")
            expect(f.body, {"n": int}, f"party {f.peer}")
            total = pk.from_bytes(f.blob, np_)
            plain = packer.unpack([sk.decrypt(c) for c in total], n, self.r)
            tot = np.rint(plain).astype(np.int64)
            for j in self.data[1:]:
                self.mesh.send(j, "sum_result", {"n": n}, _ints_to_blob(tot))
        else:
            f = self.mesh.recv(self.pred(), "sum_fwd")
            expect(f.body, {"n": int}, f"party {f.peer}")
            if f.body["n"] != n:
                raise ProtocolError("the count vector has the wrong length")
            acc = [pk.add(a, c) for a, c in zip(pk.from_bytes(f.blob, np_), own, strict=True)]
            self.mesh.send(self.succ(), "sum_fwd", {"n": n}, pk.to_bytes(acc))
            f = self.mesh.recv(1, "sum_result")
            expect(f.body, {"n": int}, "party 1")
            tot = _blob_to_ints(f.blob, n, "party 1")
        c_tot, h_tot = tot >> 20, tot & ((1 << 20) - 1)
        if (c_tot[pos] < cnt).any() or (h_tot[pos] < hol).any():
            raise ProtocolError("the secure sum is inconsistent with my own counts")
        return c_tot, h_tot

    # -- 3. constraint rows -------------------------------------------------------------------
    def rows(
        self, pos: npt.NDArray[np.int64], c_tot: npt.NDArray[np.int64], h_tot: npt.NDArray[Any]
    ) -> None:
        assert self.share is not None
        keep = np.flatnonzero((h_tot >= 2) & (c_tot >= self.params.min_count))
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
        self.cJ = c_tot[keep]
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
        for j in self.data:
            if j != self.me:
                self.mesh.send(j, "rows", {"m": m_me, "n": int(nj)})
        ms = {self.me: m_me}
        for j in self.data:
            if j != self.me:
                f = self.mesh.recv(j, "rows")
                expect(f.body, {"m": int, "n": int}, f"party {j}")
                if f.body["n"] != nj or f.body["m"] < 0:
                    raise ProtocolError(f"party {j} disagrees on the number of pairs")
                ms[j] = f.body["m"]
        self.ms = [ms[j] for j in self.data]
        self.ell = sum(self.ms)
        self.offset = sum(self.ms[: self.me - 1])
        self.extra.update({"constraint_rows": int(self.t_all.shape[0]), "rows_after_pruning": m_me})

    # -- 4. secure NLP (Algorithm 2, fixed) -------------------------------------------------
    def nlp(self, pk0: PublicKey) -> None:
        n, ell, mk = int(self.J.size), self.ell, int(self.t_red.shape[0])
        packer = Packer(pk0.n)
        per_col = packer.n_plaintexts(ell + 1)
        gen = SecureRandom().numpy_generator()  # masking randomness, not privacy noise
        a_k = gen.standard_normal((ell, mk))
        f_k = gen.uniform(0.5, 2.0, mk)
        at = np.asarray(self.t_red.T @ a_k.T).reshape(n, ell) if mk else np.zeros((n, ell))
        z = np.zeros((n, ell + 1))
        z[:, :ell] = at
        if self.me == 1:
            z[:, ell] = self.cJ  # the count vector v rides along as row ℓ of every column
        ab = self.params.b * a_k.sum(axis=1) if mk else np.zeros(ell)
        af = a_k * f_k[None, :]
        # each party's A_kF_k block goes straight to P0 (nothing to add there)
        af_c = [pk0.encrypt(m) for j in range(mk) for m in packer.pack(af[:, j])]
        self.mesh.send(0, "nlp_af", {"l": ell, "m": mk}, pk0.to_bytes(af_c))
        own_z = [pk0.encrypt(m) for j in range(n) for m in packer.pack(z[j])]
        own_b = [pk0.encrypt(m) for m in packer.pack(ab)]
        nz, nb = n * per_col, packer.n_plaintexts(ell)
        who = f"party {self.pred()}"
        if self.me == 1:
            acc_z, acc_b = own_z, own_b
        else:
            f = self.mesh.recv(self.pred(), "nlp_sum")
            expect(f.body, {"n": int, "l": int}, who)
            if (f.body["n"], f.body["l"]) != (n, ell):
                raise ProtocolError(f"{who} sent a matrix of the wrong shape")
            got = pk0.from_bytes(f.blob, nz + nb)
            acc_z = [pk0.add(a, c) for a, c in zip(got[:nz], own_z, strict=True)]
            acc_b = [pk0.add(a, c) for a, c in zip(got[nz:], own_b, strict=True)]
        if self.me < self.r:
            self.mesh.send(self.succ(), "nlp_sum", {"n": n, "l": ell}, pk0.to_bytes(acc_z + acc_b))
        else:
            self.mesh.send(1, "nlp_perm", {"n": n, "l": ell}, pk0.to_bytes(acc_z))
            self._ab = acc_b
        # permutation chain P1 → … → Pr → P0
        f = self.mesh.recv(self.pred(), "nlp_perm")
        expect(f.body, {"n": int, "l": int}, who)
        if (f.body["n"], f.body["l"]) != (n, ell):
            raise ProtocolError(f"{who} sent a matrix of the wrong shape")
        got = pk0.from_bytes(f.blob, nz)
        self.sigma = _perm(n)  # new column i = old column sigma[i]
        cols = [got[j * per_col : (j + 1) * per_col] for j in range(n)]
        out = [pk0.rerandomize(c) for i in self.sigma for c in cols[i]]
        if self.me < self.r:
            self.mesh.send(self.succ(), "nlp_perm", {"n": n, "l": ell}, pk0.to_bytes(out))
        else:
            body = {"n": n, "l": ell, "ms": self.ms}
            self.mesh.send(0, "nlp_p0", body, pk0.to_bytes(out + self._ab))

    def solve(self, sk: PrivateKey) -> None:
        """P0: decrypt, reduce to M̃x ≤ 1 − η, solve, send π(x) to Pr."""
        pk = sk.public
        packer = Packer(pk.n)
        af_blocks = []
        for j in self.data:
            f = self.mesh.recv(j, "nlp_af")
            expect(f.body, {"l": int, "m": int}, f"party {j}")
            af_blocks.append((j, f.body["l"], f.body["m"], f.blob))
        f = self.mesh.recv(self.r, "nlp_p0")
        expect(f.body, {"n": int, "l": int, "ms": list}, f"party {self.r}")
        n, ell, ms = f.body["n"], f.body["l"], f.body["ms"]
        if (
            n < 0 or ell < 0 or len(ms) != self.r
            or not all(isinstance(v, int) and v >= 0 for v in ms) or sum(ms) != ell
            or [b[2] for b in af_blocks] != ms or any(b[1] != ell for b in af_blocks)
        ):  # fmt: skip
            raise ProtocolError("the parties sent inconsistent matrix shapes")
        self.phase("solve")
        per_col = packer.n_plaintexts(ell + 1)
        cz = pk.from_bytes(f.blob, n * per_col + packer.n_plaintexts(ell))
        dec = [sk.decrypt(c) for c in cz]
        z = np.vstack(
            [packer.unpack(dec[j * per_col : (j + 1) * per_col], ell + 1, self.r) for j in range(n)]
        ) if n else np.zeros((0, ell + 1))  # fmt: skip
        ab = packer.unpack(dec[n * per_col :], ell, self.r)
        af = np.zeros((ell, ell))
        col = 0
        for _, _, m, blob in af_blocks:
            pcol = packer.n_plaintexts(ell)
            cs = pk.from_bytes(blob, m * pcol)
            for j in range(m):
                af[:, col] = packer.unpack(
                    [sk.decrypt(c) for c in cs[j * pcol : (j + 1) * pcol]], ell, 1
                )
                col += 1
        v = np.rint(z[:, ell]).astype(np.int64)
        at = z[:, :ell].T  # ℓ × n
        t0 = time.perf_counter()
        if ell:
            sol = np.linalg.solve(af, np.c_[at, ab])  # = F⁻¹[T | B] (rows in party order)
            h = sol[:, -1]
            if (h <= 0).any():
                raise ProtocolError("the transformed constraints are inconsistent (AF singular?)")
            mt = sol[:, :-1] / h[:, None]
            tiny = 1e-9 * max(1.0, float(np.abs(mt).max(initial=0.0)))
            mt[mt < tiny] = 0.0
        else:
            mt = np.zeros((0, n))
        mtil = sp.csr_matrix(mt)
        b1 = 1.0 - ETA
        if n == 0:
            x = np.zeros(0, dtype=np.int64)
            info: dict[str, Any] = {"status": "no pairs after Condition 1"}
        elif self.params.objective == "size":
            s = solve_oump(mtil, b1, method="lp-greedy", search_seconds=0.0)
            x, info = s.x, s.summary()
        else:
            s = solve_kl(
                mtil, b1, v.astype(np.float64), output_share=self.params.output_share,
                k=self.params.breakpoints,
            )  # fmt: skip
            x, info = s.x, s.summary()
        info["reduce_seconds"] = time.perf_counter() - t0
        info["transformed_rows"] = ell
        info["pairs"] = n
        self.extra["solver"] = info
        self.phase("unpermute")
        self.mesh.send(self.r, "x_perm", {"n": n}, _ints_to_blob(x))

    # -- 6. un-permute --------------------------------------------------------------------------
    def unpermute(self) -> npt.NDArray[np.int64]:
        n = int(self.J.size)
        src = 0 if self.me == self.r else self.me + 1
        f = self.mesh.recv(src, "x_perm" if src == 0 else "x_unperm")
        expect(f.body, {"n": int}, f"party {src}")
        xp = _blob_to_ints(f.blob, n, f"party {src}")
        if (xp < 0).any():
            raise ProtocolError(f"party {src} sent negative counts")
        x = np.empty(n, dtype=np.int64)
        x[self.sigma] = xp
        if self.me > 1:
            self.mesh.send(self.me - 1, "x_unperm", {"n": n}, _ints_to_blob(x))
            f = self.mesh.recv(1, "x_final")
            expect(f.body, {"n": int}, "party 1")
            x = _blob_to_ints(f.blob, n, "party 1")
        else:
            for j in self.data[1:]:
                self.mesh.send(j, "x_final", {"n": n}, _ints_to_blob(x))
        return x

    # -- 7. exact verification and repair ---------------------------------------------------------
    def verify(self, x: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        b = self.params.b
        n = x.size
        mine = repair(self.t_all, x, b) if self.t_all.shape[0] else x
        changed = bool((mine != x).any())
        for j in self.data:
            if j != self.me:
                self.mesh.send(j, "repair", {"n": n, "changed": changed}, _ints_to_blob(mine))
        final = mine.copy()
        for j in self.data:
            if j != self.me:
                f = self.mesh.recv(j, "repair")
                expect(f.body, {"n": int, "changed": bool}, f"party {j}")
                xj = _blob_to_ints(f.blob, n, f"party {j}")
                if (xj > x).any() or (xj < 0).any():
                    raise ProtocolError(f"party {j}'s repair increased a count")
                final = np.minimum(final, xj)
        loads = np.asarray(self.t_all @ final.astype(np.float64)).ravel()
        if (loads > b).any():
            raise ProtocolError("a privacy constraint still fails after the repair")
        self.extra["draws_removed_by_repair"] = int(x.sum() - final.sum())
        self.extra["max_load_over_b"] = float(loads.max(initial=0.0) / b)
        return final

    # -- 8. exact global multinomial sampling, split along the ring -------------------------------
    def sample(self, x: npt.NDArray[np.int64]) -> list[str]:
        assert self.share is not None
        idx = np.flatnonzero(x > 0)
        a = self.cJ_mine[idx]
        if self.me == 1:
            t, rem = x[idx].copy(), self.cJ[idx].copy()
        else:
            f = self.mesh.recv(self.pred(), "split")
            expect(f.body, {"k": int}, f"party {self.pred()}")
            arr = _blob_to_ints(f.blob, 2 * idx.size, f"party {self.pred()}")
            t, rem = arr[: idx.size], arr[idx.size :]
            if (t < 0).any() or (rem < a).any() or (t > x[idx]).any():
                raise ProtocolError("the sampling split is inconsistent with my counts")
        if self.me < self.r:
            draws_pair = np.repeat(np.arange(idx.size), t)
            u = self.rng.integers_below(rem[draws_pair].astype(np.uint64), draws_pair.size)
            hit = u < a[draws_pair].astype(np.uint64)
            y = np.bincount(draws_pair[hit], minlength=idx.size).astype(np.int64)
            nxt = np.r_[t - y, rem - a]
            self.mesh.send(self.succ(), "split", {"k": self.me}, _ints_to_blob(nxt))
        else:
            if (rem != a).any():
                raise ProtocolError("the sampling split does not add up to the totals")
            y = t
        y_full = np.zeros(x.size, dtype=np.int64)
        y_full[idx] = y
        p, k, cnt = sample_users(self.c_k, y_full, rng=self.rng)
        h = self.share.hist
        lp = self.local_of_j[p]
        q = h.pairs.get_column("query").gather(lp).to_list() if lp.size else []
        uu = h.pairs.get_column("url").gather(lp).to_list() if lp.size else []
        users = [str(v) for v in h.users[k]] if k.size else []
        self.extra["sampled_draws"] = int(y.sum())
        return [
            "\t".join((usr, qq, ur, str(int(c))))
            for usr, qq, ur, c in zip(users, q, uu, cnt, strict=True)
        ]

    # -- 9. secure union of the sampled records (Algorithm 3) ---------------------------------
    def output_union(self, records: list[str]) -> list[str]:
        key = cm.CommutativeKey.generate("full")
        elems = []
        for rec in records:
            data = rec.encode("utf-8")
            rid = secrets.token_bytes(8)
            chunks = [data[i : i + RECORD_CHUNK] for i in range(0, len(data), RECORD_CHUNK)]
            if len(chunks) > 255:
                raise InvalidParameterError("record", len(data), "at most 45 kB per record")
            for i, ch in enumerate(chunks or [b""]):
                elems.append(cm.encode_bytes(rid + bytes([i, len(chunks or [b""])]) + ch))
        cur = _shuffle([key.encrypt(e) for e in elems])
        for hop in range(1, self.r):
            self.mesh.send(self.succ(), "out_fwd", {"hop": hop}, cm.elements_to_bytes(cur))
            f = self.mesh.recv(self.pred(), "out_fwd")
            expect(f.body, {"hop": int}, f"party {f.peer}")
            if f.body["hop"] != hop:
                raise ProtocolError("output union hop mismatch")
            cur = _shuffle([key.encrypt(y) for y in cm.elements_from_bytes(f.blob)])
        if self.me == 1:
            pool = list(cur)
            for j in self.data[1:]:
                f = self.mesh.recv(j, "out_pool")
                expect(f.body, {}, f"party {j}")
                pool.extend(cm.elements_from_bytes(f.blob))
            cur = _shuffle([key.decrypt(y) for y in pool])
            self.mesh.send(self.succ(), "out_dec", {}, cm.elements_to_bytes(cur))
            f = self.mesh.recv(self.r, "output")
            expect(f.body, {"rows": int}, f"party {self.r}")
            return self._records_from(f)
        self.mesh.send(1, "out_pool", {}, cm.elements_to_bytes(cur))
        f = self.mesh.recv(self.pred(), "out_dec")
        expect(f.body, {}, f"party {self.pred()}")
        cur = _shuffle([key.decrypt(y) for y in cm.elements_from_bytes(f.blob)])
        if self.me < self.r:
            self.mesh.send(self.succ(), "out_dec", {}, cm.elements_to_bytes(cur))
            f = self.mesh.recv(self.r, "output")
            expect(f.body, {"rows": int}, f"party {self.r}")
            return self._records_from(f)
        # P_r holds the plaintexts: reassemble and broadcast the joint output
        parts: dict[bytes, dict[int, bytes]] = {}
        totals: dict[bytes, int] = {}
        for y in cur:
            raw = cm.decode_bytes(y)
            if len(raw) < 10:
                raise ProtocolError("a decrypted record is malformed")
            rid, i, tot = raw[:8], raw[8], raw[9]
            parts.setdefault(rid, {})[i] = raw[10:]
            if totals.setdefault(rid, tot) != tot:
                raise ProtocolError("a decrypted record is malformed")
        out = []
        for rid, by_index in parts.items():
            if sorted(by_index) != list(range(totals[rid])):
                raise ProtocolError("a record lost a chunk in the union")
            out.append(b"".join(by_index[i] for i in range(totals[rid])).decode("utf-8"))
        out.sort()
        blob = "\n".join(out).encode("utf-8")
        for j in [0, *self.data[:-1]]:
            self.mesh.send(j, "output", {"rows": len(out)}, blob)
        return out

    def _records_from(self, f: Any) -> list[str]:
        try:
            text = f.blob.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError("the joint output is not UTF-8") from exc
        rows = text.split("\n") if text else []
        if len(rows) != f.body["rows"] or any(r.count("\t") != 3 for r in rows):
            raise ProtocolError("the joint output is malformed")
        return rows

    # -- 10. commit --------------------------------------------------------------------------
    def commit(self, records: list[str]) -> PartyResult:
        self.phase("commit")
        stats = {
            "party": self.me,
            "traffic": self.mesh.traffic.to_dict(),
            "seconds": {k: round(v, 3) for k, v in self.clock.seconds.items()},
            "input": self.share.info if self.share is not None else None,
            "seeded": bool(self.rng.seeded),
            "extra": self.extra,
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        stats = json.loads(json.dumps(stats, default=float))
        for j in self.mesh.config.ids:
            if j != self.me:
                self.mesh.send(j, "stats", stats)
        allstats = {self.me: stats}
        for j in self.mesh.config.ids:
            if j != self.me:
                f = self.mesh.recv(j, "stats")
                expect(
                    f.body,
                    {"party": int, "traffic": dict, "seconds": dict, "input": (dict, type(None)),
                     "seeded": bool, "extra": dict, "time_utc": str},
                    f"party {j}",
                )  # fmt: skip
                if f.body["party"] != j:
                    raise ProtocolError(f"party {j} sent another party's statistics")
                allstats[j] = f.body
        ordered = [allstats[j] for j in self.mesh.config.ids]
        df = _records_frame(records)
        seeded = any(s["seeded"] for s in ordered)
        ledger = build_ledger_unchecked(
            mechanism="cels",
            notion=NOTION,
            epsilon=self.params.epsilon,
            delta=self.params.delta,
            parameters=self.params.to_dict() | {"parties": self.r},
            inputs=[s["input"] for s in ordered if s["input"] is not None],
            rng=None,
            extra={
                "b": self.params.b,
                "counts_are_private": False,
                "warning": "the counts x come from the private logs and are not differentially "
                "private; the guarantee covers the sampling (docs/privacy/cels.md)",
                "key_sizes": {
                    "paillier_bits": self.params.key_bits,
                    "paillier": key_strength(self.params.key_bits),
                    "commutative_group": "RFC 3526 2048-bit MODP (group 14)",
                },
                "parties": ordered,
                "output_rows": df.height,
                "output_size": int(df.get_column("Count").sum()) if df.height else 0,
            },
        )
        ledger["created_utc"] = allstats[0]["time_utc"]
        ledger["seeded"] = seeded
        ledger["for_release"] = not seeded
        ledger["randomness"] = (
            {"source": "SeededRandom (a party was seeded)", "seeded": True,
             "note": "seeded randomness: reproducible experiment, NOT FOR RELEASE"}
            if seeded else {"source": "SecureRandom (every party)", "seeded": False}
        )  # fmt: skip
        canon = json.dumps(ledger, sort_keys=True, ensure_ascii=False).encode("utf-8")
        digest = hashlib.sha256(canon + b"\x00" + "\n".join(records).encode("utf-8")).hexdigest()
        for j in self.mesh.config.ids:
            if j != self.me:
                self.mesh.send(j, "commit", {"digest": digest})
        for j in self.mesh.config.ids:
            if j != self.me:
                f = self.mesh.recv(j, "commit")
                expect(f.body, {"digest": str}, f"party {j}")
                if f.body["digest"] != digest:
                    raise ProtocolError(f"party {j} ended with a different output or ledger")
        return PartyResult(df, ledger, digest, stats)


FAULTS = ("crash", "garbage", "schema")


def inject_fault(mesh: Mesh, kind: str) -> None:
    """Test hook (``cels party --inject-fault PHASE:KIND``): ``crash`` exits the process at
    once (no abort message); ``garbage`` sends bytes that are not a frame to every peer;
    ``schema`` sends a well-framed message with unexpected fields to every peer."""
    if kind == "crash":
        os._exit(17)
    for j in mesh.config.ids:
        if j == mesh.me:
            continue
        if kind == "garbage":
            mesh.send_raw(j, b"NOT A CELS FRAME" * 4)
        else:
            mesh.send(j, "stats", {"surprise": 1})


def _records_frame(records: list[str]) -> pl.DataFrame:
    cols: list[list[str]] = [[], [], [], []]
    for r in records:
        for i, v in enumerate(r.split("\t")):
            cols[i].append(v)
    return pl.DataFrame(
        {
            "AnonID": cols[0],
            "Query": cols[1],
            "ClickURL": cols[2],
            "Count": [int(v) for v in cols[3]],
        },
        schema={"AnonID": pl.String, "Query": pl.String, "ClickURL": pl.String, "Count": pl.Int64},
    ).sort(["AnonID", "Query", "ClickURL"])


def run_party(
    config: Config,
    me: int,
    params: CelsParams,
    *,
    share: Share | None,
    out: Path | None,
    rng: RandomSource,
    transcript: Path | None = None,
    overwrite: bool = False,
    progress: Callable[[str], None] | None = None,
    fault: str | None = None,
) -> PartyResult:
    """Run party ``me`` to completion; writes ``out`` (atomically) only if every party agrees.
    Any failure sends ``abort`` to all peers and raises (nothing is written)."""
    if (me == 0) != (share is None):
        raise InvalidParameterError("share", share, "a share for P1…Pr, none for P0")
    if out is not None:
        ReleaseWriter(out, overwrite=overwrite)  # fail early if it exists
    with Mesh(config, me, transcript=transcript) as mesh:
        party = Party(mesh, params, share, rng, progress)
        if fault is not None:
            ph, _, kind = fault.partition(":")
            if kind not in FAULTS:
                raise InvalidParameterError("inject_fault", fault, f"PHASE:{'|'.join(FAULTS)}")
            party.fault = (ph, kind)
        try:
            key = party.setup()
            if me == 0:
                assert isinstance(key, PrivateKey)
                party.phase("nlp")
                party.solve(key)
                f = mesh.recv(party.r, "output")
                expect(f.body, {"rows": int}, f"party {party.r}")
                mesh.phase = "output"
                records = party._records_from(f)
            else:
                assert isinstance(key, PublicKey)
                party.phase("union")
                pos = party.union()
                party.phase("sum")
                c_tot, h_tot = party.secure_sum(pos)
                party.phase("rows")
                party.rows(pos, c_tot, h_tot)
                party.phase("nlp")
                party.nlp(key)
                party.phase("unpermute")
                x = party.unpermute()
                party.phase("verify")
                x = party.verify(x)
                party.extra["output_size"] = int(x.sum())
                party.extra["kl_loss_of_counts"] = kl_loss(party.cJ, x) if x.size else None
                party.phase("sample")
                recs = party.sample(x)
                party.phase("output")
                records = party.output_union(recs)
            result = party.commit(records)
        except (ProtocolError, InputFormatError, InvalidParameterError) as exc:
            mesh.abort(f"party {me}: {exc}")
            raise ProtocolError(f"party {me} stopped: {exc}") from exc
        except BaseException as exc:
            mesh.abort(f"party {me} crashed: {type(exc).__name__}")
            raise
    if out is not None:
        with ReleaseWriter(out, overwrite=overwrite) as w:
            w.write_table("log", result.output)
            w.write_ledger(result.ledger)
    return result
