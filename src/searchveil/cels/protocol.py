"""The CELS protocol (Hong et al., TKDE 2015, §4.2: Algorithms 1–3 and local sampling), one
party per process: P0 is the solver and data recipient, P1…Pr hold disjoint users' logs.

Phases (each party runs :func:`run_party`; docs/privacy/cels.md has the full analysis):

0. **mesh**, **setup** — TLS connections (:mod:`.wire`); P0 sends its Paillier public key (n and
   the fixed base h_s of the obfuscators) and the agreed parameters. From here every data party
   computes obfuscators under P0's key in worker processes (:mod:`.precompute`).
1. **union** — the pair universe by commutative encryption (Algorithm 3 applied to the hashed
   (query, url) pairs, on the prime-order subgroup of Curve25519, :mod:`.commutative`): each
   party's hashed pairs travel the ring P1→…→Pr→P1 and are encrypted by every party (order
   kept, so the owner can map its own pairs); the last hop carries 16-byte digests of the fully
   encrypted elements; every party sends its digest set to the coordinator P1, which
   broadcasts the sorted union. Universe positions are all the parties learn about other
   parties' pairs.
2. **sum** — Algorithm 1 as a masked ring sum: P1 adds a uniform 64-bit mask (CSPRNG) to its
   (count, holders) vector over the universe, P2…Pr add theirs, P1 removes the mask and sends
   every party the pairs J kept by Condition 1 (≥ 2 holders) and the optional paper cleaning
   (total count ≥ ``min_count``), with their total counts. (Same guarantee as Paillier under
   P1's key, which P1 alone could decrypt; see docs/privacy/cels.md §2.)
3. **rows** — each party builds its constraint rows (``constraint_block`` with the global
   totals), drops rows dominated by another of its rows (ℓ reduction) and announces m'_k.
4. **nlp** — Algorithm 2 (P0's Paillier key) *fixed*: line 6 raises a ciphertext to a
   ciphertext, which Paillier cannot do; each party knows A_k and T_k, computes A_kT_k in the
   clear, and only encrypts it (signed fixed point, packed). P1 encrypts its block, P2…Pr add
   theirs homomorphically along the ring; the permutation chain starts at Pr (which thereby
   re-randomises the sum before P1 sees it): Pr → P1 → … → Pr−1 → P0, each permuting the pair
   columns and re-randomising. Pr sends Enc(AB) to P0; each party sends A_kF_k to P0 in the
   clear (P0 decrypted it anyway).
5. **solve** — P0 decrypts (in worker processes), reduces ATx + AFy = (1−η)AB, y ≥ 0 to
   (AF)⁻¹: M̃x ≤ 1 − η and solves the KL (Appendix B) or size objective.
6. **unpermute** — x goes P0→Pr−1→…→P1→Pr, each applying its inverse permutation; Pr
   broadcasts x.
7. **verify** — every party checks *all* its users' constraints exactly (float64, no
   tolerance); a party whose user is over b repairs x (removing draws); x = min over parties.
8. **sample** — the global multinomial sampling, exactly: the x_i draws are split among the
   parties by sequential binomials along the ring (Pk draws Bin(t, c^k/R) with R the count
   not yet assigned), then each party samples its users (``sample_users``).
9. **output** — Algorithm 3 on the sampled records (invertible encoding, invertible scalars,
   shuffled at every hop), decrypted along the ring; Pr broadcasts the joint output.
10. **commit** — all parties exchange their statistics, build the same ledger, exchange the
    SHA-256 of (output, ledger) and write only if every digest agrees.

Failures (:mod:`.wire`): any peer that dies, stalls, aborts or sends a malformed or truncated
frame stops every party within seconds; the error names the peer, the phase and the cause, and
nothing is written.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl
import scipy.sparse as sp

from searchveil.cels import commutative as cm
from searchveil.cels.paillier import (
    ALLOWED_KEY_BITS,
    Packer,
    PrivateKey,
    PublicKey,
    generate_keypair,
    key_strength,
)
from searchveil.cels.precompute import Precomputer, decrypt_batch
from searchveil.cels.wire import (
    FAULT_KINDS,
    PHASES,
    Config,
    Frame,
    Mesh,
    ProtocolError,
    expect,
    why,
)
from searchveil.cels.wire import VERSION as WIRE_VERSION
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.ledger import (
    ReleaseWriter,
    build_ledger,
    build_provenance,
    check_public_ledger,
    write_json_atomic,
)
from searchveil.io.readers import read_log
from searchveil.model import ClickHistogram, click_histogram
from searchveil.release.ump import constraint_block, sample_users, solve_oump
from searchveil.release.ump.kl import cels_bound, kl_loss, solve_kl
from searchveil.release.ump.solvers import repair
from searchveil.rng import RandomSource, SecureRandom
from searchveil.validate import check_int, check_positive, check_probability, parse_choice

T = TypeVar("T")


class Objective(StrEnum):
    """What P0 optimises: CELS's KL loss at a fixed |O| (§2.2) or the output size (O-UMP)."""

    KL = "kl"
    SIZE = "size"


OBJECTIVES = tuple(o.value for o in Objective)
NOTION = "(ε,δ)-DP of the multinomial sampling given the counts (CELS Thm 2, Thm 7)"
ETA = 1e-6  # P0 tightens every constraint to (1 − η)·b against the LP tolerance
HOLDER_BITS = 24  # Algorithm 1 word: count·2^24 + holders, summed mod 2^64
RECORD_ID_BYTES = 8
RECORD_CHUNK = cm.PAYLOAD_BYTES - RECORD_ID_BYTES - 3  # record bytes per group element
TEST_HOOKS_ENV = "SEARCHVEIL_CELS_TEST_HOOKS"
PARTY_FAULTS = ("crash", "kill", "stop", "schema", "pause", *FAULT_KINDS)
PAUSE_SECONDS = 1.5
# obfuscators under P0's key each data party computes ahead, while the union runs, before it
# knows how many it needs (P1, which also encrypts the first term of the ring sum: twice as
# many); the rest are computed once the sizes are known, any surplus is discarded
PRECOMPUTE = 384
FAULT_PHASES = PHASES


@dataclass(frozen=True)
class CelsParams:
    """Parameters every party must agree on (checked in the setup phase)."""

    epsilon: float
    delta: float
    objective: Objective | str
    key_bits: int = 3072
    output_share: float = 0.5
    breakpoints: int = 33
    min_count: int = 1

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        check_probability("delta", self.delta)
        object.__setattr__(self, "objective", parse_choice("objective", self.objective, Objective))
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


def _blob_to_ints(f: Frame, n: int) -> npt.NDArray[np.int64]:
    if len(f.blob) != 8 * n:
        raise ProtocolError(
            f"P{f.peer} sent a malformed {f.type!r}: {len(f.blob)} bytes, expected {n} integers",
            peer=f.peer,
        )
    return np.frombuffer(f.blob, dtype=">i8").astype(np.int64)


def _perm(n: int) -> npt.NDArray[np.int64]:
    """A uniformly random permutation from the OS CSPRNG (sort by random 64-bit keys)."""
    return np.argsort(SecureRandom().random_keys(n), kind="stable").astype(np.int64)


def _shuffle(xs: list[T]) -> list[T]:
    return [xs[i] for i in _perm(len(xs))]


def secure_normal(src: SecureRandom, shape: tuple[int, ...]) -> npt.NDArray[np.float64]:
    """Standard normal floats from the CSPRNG (Box–Muller on 53-bit uniforms)."""
    size = int(np.prod(shape))
    half = (size + 1) // 2
    u1 = 1.0 - src.uniform(half)  # (0, 1]
    u2 = src.uniform(half)
    rad = np.sqrt(-2.0 * np.log(u1))
    z = np.concatenate([rad * np.cos(2 * np.pi * u2), rad * np.sin(2 * np.pi * u2)])[:size]
    return z.reshape(shape)


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
        self.cpu: dict[str, float] = {}
        self._t = time.perf_counter()
        self._c = time.process_time()
        self._phase = "setup"

    def enter(self, phase: str) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        self.seconds[self._phase] = self.seconds.get(self._phase, 0.0) + now - self._t
        self.cpu[self._phase] = self.cpu.get(self._phase, 0.0) + cpu - self._c
        self._t, self._c, self._phase = now, cpu, phase


def _pk_body(pk: PublicKey) -> dict[str, Any]:
    return {"n": format(pk.n, "x"), "hs": format(pk.hs, "x")}


def _pk_from(body: Any, bits: int, peer: int) -> PublicKey:
    if not isinstance(body, dict):
        raise ProtocolError(f"P{peer} sent a malformed public key", peer=peer)
    expect(body, {"n": str, "hs": str}, peer)
    try:
        n, hs = int(body["n"], 16), int(body["hs"], 16)
    except ValueError as exc:
        raise ProtocolError(f"P{peer} sent a malformed public key", peer=peer) from exc
    if n.bit_length() != bits or n % 2 == 0:
        raise ProtocolError(
            f"P{peer} sent a {n.bit_length()}-bit key; {bits} bits were agreed", peer=peer
        )
    pk = PublicKey(n, hs)
    try:
        pk.check_fixed_base()
    except InputFormatError as exc:
        raise ProtocolError(f"P{peer}: {exc.problem}", peer=peer) from exc
    return pk


def _parse(f: Frame, fn: Callable[[bytes], T]) -> T:
    """Parse a frame's blob; a malformed blob is the sender's fault."""
    try:
        return fn(f.blob)
    except InputFormatError as exc:
        raise ProtocolError(
            f"P{f.peer} sent a malformed {f.type!r}: {exc.problem}", peer=f.peer
        ) from exc


def _elements_parser(width: int) -> Callable[[bytes], list[bytes]]:
    return lambda b: cm.elements_from_bytes(b, width)


def _self_signal(sig: int) -> None:
    sys.stderr.flush()
    os.kill(os.getpid(), sig)
    time.sleep(0.5)


def inject_fault(mesh: Mesh | None, kind: str, target: int | None) -> None:
    """Test hook (``cels party --inject-fault PHASE:KIND[@PEER]`` with
    ``SEARCHVEIL_CELS_TEST_HOOKS=1``), run at the start of PHASE: ``crash`` exits the process at
    once (exit 17, no abort message), ``kill``/``stop`` send SIGKILL/SIGSTOP to this process,
    ``garbage``/``truncated``/``drop`` send bytes that are not a frame / half a frame and close /
    close the connection to PEER (every peer by default), ``schema`` sends a well-framed message
    with unexpected fields — after these four the party goes no further until the failure
    reaches it —, ``pause`` waits 1.5 s (so a test can signal another process while
    this one is in PHASE)."""
    if kind == "crash":
        sys.stderr.flush()
        os._exit(17)
    if kind == "kill":
        _self_signal(signal.SIGKILL)
    if kind == "stop":
        _self_signal(signal.SIGSTOP)
        return
    if kind == "pause":  # keeps this party in PHASE for a moment (heartbeats continue)
        time.sleep(PAUSE_SECONDS)
        return
    if mesh is None:
        return
    if kind in FAULT_KINDS:
        mesh.inject(kind, target)
    elif kind == "schema":
        for j in [target] if target is not None else mesh.others:
            mesh.send(j, "stats", {"surprise": 1})
    # a party that misbehaved goes no further: it stays in PHASE until the failure reaches it
    deadline = time.monotonic() + 30
    while mesh.failure is None and time.monotonic() < deadline:
        time.sleep(0.05)


def parse_fault(spec: str | None) -> tuple[str, str, int | None] | None:
    if spec is None:
        return None
    if os.environ.get(TEST_HOOKS_ENV) != "1":
        raise InvalidParameterError(
            "inject_fault", spec, f"a test-only option: set {TEST_HOOKS_ENV}=1 to use it"
        )
    ph, _, rest = spec.partition(":")
    kind, _, tgt = rest.partition("@")
    if ph not in FAULT_PHASES or kind not in PARTY_FAULTS or (tgt and not tgt.isdigit()):
        raise InvalidParameterError(
            "inject_fault", spec, f"PHASE:KIND[@PEER], PHASE in {FAULT_PHASES}, KIND in "
            f"{PARTY_FAULTS}",
        )  # fmt: skip
    return ph, kind, int(tgt) if tgt else None


# -- the party --------------------------------------------------------------------------------
class Party:
    def __init__(
        self,
        mesh: Mesh,
        params: CelsParams,
        share: Share | None,
        rng: RandomSource,
        *,
        precomp: Precomputer | None = None,
        progress: Callable[[str], None] | None = None,
        fault: tuple[str, str, int | None] | None = None,
        precompute: int = PRECOMPUTE,
    ) -> None:
        self.mesh, self.params, self.share, self.rng = mesh, params, share, rng
        self.me = mesh.me
        self.r = len(mesh.config.ids) - 1
        self.data = list(range(1, self.r + 1))
        self.clock = _Clock()
        self.extra: dict[str, Any] = {}
        self.progress = progress or (lambda s: None)
        self.fault = fault
        self.precomp = precomp or Precomputer(0)
        self.precompute = precompute
        # the permutation chain of Algorithm 2: Pr first (it re-randomises the ring sum before
        # P1 sees it), then P1 … Pr−1, then P0
        self.perm_order = [self.r, *range(1, self.r)]

    # ring among the data parties
    def succ(self, k: int | None = None) -> int:
        k = self.me if k is None else k
        return k % self.r + 1

    def pred(self, k: int | None = None) -> int:
        k = self.me if k is None else k
        return (k - 2) % self.r + 1

    def phase(self, name: str) -> None:
        self.clock.enter(name)
        self.mesh.phase = name
        self.progress(name)
        if self.fault is not None and self.fault[0] == name:
            inject_fault(self.mesh, self.fault[1], self.fault[2])

    def check(self) -> None:
        self.mesh.check()

    # -- setup: P0's key and the agreed parameters ------------------------------------------
    def setup(self) -> PrivateKey | PublicKey:
        p = self.params.to_dict()
        if self.me == 0:
            sk = generate_keypair(self.params.key_bits)
            for j in self.data:
                self.mesh.send(j, "pk", {"key": _pk_body(sk.public), "params": p})
            return sk
        f = self.mesh.recv(0, "pk")
        expect(f.body, {"key": dict, "params": dict}, 0)
        if f.body["params"] != json.loads(json.dumps(p)):
            raise ProtocolError("P0 runs with different parameters", peer=0)
        pk0 = _pk_from(f.body["key"], self.params.key_bits, 0)
        # obfuscators under P0's key for Algorithm 2, computed while the union runs
        self.precomp.produce("pk0", pk0, self.precompute * (2 if self.me == 1 else 1))
        return pk0

    # -- 1. union of the pairs ------------------------------------------------------------------
    def union(self) -> npt.NDArray[np.int64]:
        """Universe position of every local pair; returns the positions, sets self.n_universe."""
        assert self.share is not None
        h = self.share.hist
        q = h.pairs.get_column("query").to_list()
        u = h.pairs.get_column("url").to_list()
        key = cm.UnionKey.generate()
        order = _perm(len(q))
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
            got = _parse(f, _elements_parser(width))
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
                pool.update(_parse(f, lambda b: cm.elements_from_bytes(b, dw)))
            universe = sorted(pool)
            blob = cm.elements_to_bytes(universe, dw)
            for j in self.data[1:]:
                self.mesh.send(j, "universe", {"n": len(universe)}, blob)
        else:
            self.mesh.send(1, "union_set", {}, cm.elements_to_bytes(full, dw))
            f = self.mesh.recv(1, "universe")
            expect(f.body, {"n": int}, 1)
            universe = _parse(f, lambda b: cm.elements_from_bytes(b, dw))
            if len(universe) != f.body["n"] or any(
                a >= b for a, b in zip(universe, universe[1:], strict=False)
            ):
                raise ProtocolError("P1 sent a malformed universe (not sorted, or repeats)", peer=1)
        index = {y: i for i, y in enumerate(universe)}
        pos = np.empty(len(q), dtype=np.int64)
        try:
            pos[order] = [index[y] for y in mine]
        except KeyError as exc:
            raise ProtocolError("the universe from P1 misses one of my pairs", peer=1) from exc
        self.n_universe = len(universe)
        return pos

    # -- 2. secure counts sum (Algorithm 1, masked) -----------------------------------------------
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
        if self.me == 1:
            mask = SecureRandom().words(n)
            self.mesh.send(self.succ(), "sum_fwd", {"n": n}, (vec + mask).astype(">u8").tobytes())
            f = self.mesh.recv(self.pred(), "sum_fwd")
            expect(f.body, {"n": int}, f.peer)
            if f.body["n"] != n or len(f.blob) != 8 * n:
                raise ProtocolError(f"P{f.peer} sent a sum of the wrong length", peer=f.peer)
            tot = np.frombuffer(f.blob, dtype=">u8").astype(np.uint64) - mask
            c_tot = (tot >> np.uint64(HOLDER_BITS)).astype(np.int64)
            h_tot = (tot & np.uint64((1 << HOLDER_BITS) - 1)).astype(np.int64)
            keep = np.flatnonzero((h_tot >= 2) & (c_tot >= self.params.min_count))
            c_keep = c_tot[keep]
            blob = _ints_to_blob(np.r_[keep, c_keep])
            for j in self.data[1:]:
                self.mesh.send(j, "sum_result", {"n": n, "j": int(keep.size)}, blob)
        else:
            f = self.mesh.recv(self.pred(), "sum_fwd")
            expect(f.body, {"n": int}, f.peer)
            if f.body["n"] != n or len(f.blob) != 8 * n:
                raise ProtocolError(f"P{f.peer} sent a sum of the wrong length", peer=f.peer)
            acc = np.frombuffer(f.blob, dtype=">u8").astype(np.uint64) + vec
            self.mesh.send(self.succ(), "sum_fwd", {"n": n}, acc.astype(">u8").tobytes())
            f = self.mesh.recv(1, "sum_result")
            expect(f.body, {"n": int, "j": int}, 1)
            nj = f.body["j"]
            if f.body["n"] != n or not 0 <= nj <= n:
                raise ProtocolError("P1 sent a malformed sum result", peer=1)
            arr = _blob_to_ints(f, 2 * nj)
            keep, c_keep = arr[:nj], arr[nj:]
            if (np.diff(keep) <= 0).any() or (nj and (keep[0] < 0 or keep[-1] >= n)):
                raise ProtocolError("P1 sent a malformed sum result", peer=1)
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
        for j in self.data:
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
        self.offset = sum(self.ms[: self.me - 1])
        self.extra.update({"constraint_rows": int(self.t_all.shape[0]), "rows_after_pruning": m_me})

    # -- 4. secure NLP (Algorithm 2, fixed) -------------------------------------------------
    def obfuscators_needed(self, nz: int, nb: int) -> int:
        """Paillier obfuscators this party needs in Algorithm 2: one per ciphertext of its
        permutation hop, plus (P1) the encryption of the ring sum's first term."""
        return nz + (nz + nb if self.me == 1 else 0)

    def nlp(self, pk0: PublicKey) -> None:
        n, ell, mk = int(self.J.size), self.ell, int(self.t_red.shape[0])
        packer = Packer(pk0.n)
        per_col = packer.n_plaintexts(ell + 1)
        nz, nb = n * per_col, packer.n_plaintexts(ell)
        self.precomp.produce("pk0", pk0, self.obfuscators_needed(nz, nb))
        src = SecureRandom()  # masks: CSPRNG (not privacy noise, but secrets)
        a_k = secure_normal(src, (ell, mk))
        f_k = 0.5 + 1.5 * src.uniform(mk)
        at = np.asarray(self.t_red.T @ a_k.T).reshape(n, ell) if mk else np.zeros((n, ell))
        z = np.zeros((n, ell + 1))
        z[:, :ell] = at
        if self.me == 1:
            z[:, ell] = self.cJ  # the count vector v rides along as row ℓ of every column
        ab = self.params.b * a_k.sum(axis=1) if mk else np.zeros(ell)
        af = a_k * f_k[None, :]
        # A_kF_k is party k's own block of AF: nothing to add, and P0 decrypts it anyway, so it
        # goes to P0 as it is (float64, ℓ × m'_k, column-major)
        af_blob = np.ascontiguousarray(af.T, dtype="<f8").tobytes()
        self.mesh.send(0, "nlp_af", {"l": ell, "m": mk}, af_blob)
        plains = [m for j in range(n) for m in packer.pack(z[j])] + packer.pack(ab)
        shape = {"n": n, "l": ell}
        if self.me == 1:
            acc = pk0.encrypt_many(plains, self.precomp.take("pk0", pk0, nz + nb))
        else:
            f = self.mesh.recv(self.pred(), "nlp_sum")
            expect(f.body, {"n": int, "l": int}, f.peer)
            if (f.body["n"], f.body["l"]) != (n, ell):
                raise ProtocolError(f"P{f.peer} sent a matrix of the wrong shape", peer=f.peer)
            got = _parse(f, lambda b: pk0.from_bytes(b, nz + nb))
            acc = pk0.add_plain_many(got, plains)
        self.check()
        if self.me < self.r:
            self.mesh.send(self.succ(), "nlp_sum", shape, pk0.to_bytes(acc))
            cols_in = None
        else:  # Pr: the ring sum is complete; Enc(AB) to P0, Enc(π(AT)), Enc(π(v)) down the chain
            self.mesh.send(0, "nlp_b", {"l": ell}, pk0.to_bytes(acc[nz:]))
            cols_in = acc[:nz]
        # permutation chain Pr → P1 → … → Pr−1 → P0
        i = self.perm_order.index(self.me)
        if cols_in is None:
            prev = self.perm_order[i - 1]
            f = self.mesh.recv(prev, "nlp_perm")
            expect(f.body, {"n": int, "l": int}, prev)
            if (f.body["n"], f.body["l"]) != (n, ell):
                raise ProtocolError(f"P{prev} sent a matrix of the wrong shape", peer=prev)
            cols_in = _parse(f, lambda b: pk0.from_bytes(b, nz))
        self.sigma = _perm(n)  # new column i = old column sigma[i]
        perm = [cols_in[j * per_col + t] for j in self.sigma for t in range(per_col)]
        out = pk0.rerandomize_many(perm, self.precomp.take("pk0", pk0, nz))
        if i + 1 < len(self.perm_order):
            self.mesh.send(self.perm_order[i + 1], "nlp_perm", shape, pk0.to_bytes(out))
        else:
            self.mesh.send(0, "nlp_p0", shape | {"ms": self.ms}, pk0.to_bytes(out))
        self.extra["obfuscators_computed_inline"] = self.precomp.produced_inline

    def solve(self, sk: PrivateKey) -> None:
        """P0: decrypt, reduce to M̃x ≤ 1 − η, solve, send π(x) down the chain."""
        pk = sk.public
        packer = Packer(pk.n)
        af_blocks = []
        for j in self.data:
            f = self.mesh.recv(j, "nlp_af")
            expect(f.body, {"l": int, "m": int}, j)
            af_blocks.append(f)
        last = self.perm_order[-1]
        fb = self.mesh.recv(self.r, "nlp_b")
        expect(fb.body, {"l": int}, self.r)
        f = self.mesh.recv(last, "nlp_p0")
        expect(f.body, {"n": int, "l": int, "ms": list}, last)
        n, ell, ms = f.body["n"], f.body["l"], f.body["ms"]
        if (
            n < 0 or ell < 0 or len(ms) != self.r
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ms)
            or sum(ms) != ell or fb.body["l"] != ell
            or [b.body["m"] for b in af_blocks] != ms or any(b.body["l"] != ell for b in af_blocks)
        ):  # fmt: skip
            raise ProtocolError("the parties sent inconsistent matrix shapes", peer=last)
        self.phase("solve")
        per_col = packer.n_plaintexts(ell + 1)
        nb = packer.n_plaintexts(ell)
        cz = _parse(f, lambda b: pk.from_bytes(b, n * per_col))
        cb = _parse(fb, lambda b: pk.from_bytes(b, nb))
        cts = [int(c) for c in cz + cb]
        step = max(8, -(-len(cts) // max(1, 4 * self.precomp.workers)))
        dec = self.precomp.map(
            decrypt_batch, sk, [cts[i : i + step] for i in range(0, len(cts), step)]
        )
        z = np.vstack(
            [packer.unpack(dec[j * per_col : (j + 1) * per_col], ell + 1, self.r) for j in range(n)]
        ) if n else np.zeros((0, ell + 1))  # fmt: skip
        ab = packer.unpack(dec[n * per_col :], ell, self.r)
        cols = []
        for b in af_blocks:
            m = b.body["m"]
            if len(b.blob) != 8 * ell * m:
                raise ProtocolError(
                    f"P{b.peer} sent an A_kF_k block of the wrong size", peer=b.peer
                )
            blk = np.frombuffer(b.blob, dtype="<f8").reshape(m, ell).T if m else np.zeros((ell, 0))
            if not np.isfinite(blk).all():
                raise ProtocolError(f"P{b.peer} sent a non-finite A_kF_k block", peer=b.peer)
            cols.append(blk)
        af = np.hstack(cols) if cols else np.zeros((ell, 0))
        v = np.rint(z[:, ell]).astype(np.int64)
        at = z[:, :ell].T  # ℓ × n
        x, info = self.precomp.call(
            p0_solve, af, at, ab, v, n, ell, self.params.objective, self.params.output_share,
            self.params.breakpoints,
        )  # fmt: skip
        if info.get("error"):
            raise ProtocolError(info["error"], peer=None)
        self.extra["solver"] = info
        self.phase("unpermute")
        self.mesh.send(last, "x_perm", {"n": n}, _ints_to_blob(x))

    # -- 6. un-permute --------------------------------------------------------------------------
    def wait_x(self) -> Frame:
        """The permuted x, from P0 (the last permuter) or from the next party in the chain."""
        i = self.perm_order.index(self.me)
        src = 0 if i == len(self.perm_order) - 1 else self.perm_order[i + 1]
        return self.mesh.recv(src, "x_perm" if src == 0 else "x_unperm")

    def unpermute(self, f: Frame) -> npt.NDArray[np.int64]:
        n = int(self.J.size)
        expect(f.body, {"n": int}, f.peer)
        xp = _blob_to_ints(f, n)
        if (xp < 0).any():
            raise ProtocolError(f"P{f.peer} sent negative counts", peer=f.peer)
        x = np.empty(n, dtype=np.int64)
        x[self.sigma] = xp
        i = self.perm_order.index(self.me)
        if i > 0:
            self.mesh.send(self.perm_order[i - 1], "x_unperm", {"n": n}, _ints_to_blob(x))
            f = self.mesh.recv(self.r, "x_final")
            expect(f.body, {"n": int}, self.r)
            x = _blob_to_ints(f, n)
        else:  # Pr undid the first permutation: x is in J order
            for j in self.data[:-1]:
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
                expect(f.body, {"n": int, "changed": bool}, j)
                xj = _blob_to_ints(f, n)
                if (xj > x).any() or (xj < 0).any():
                    raise ProtocolError(f"P{j}'s repair increased a count", peer=j)
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
            expect(f.body, {"k": int}, self.pred())
            arr = _blob_to_ints(f, 2 * idx.size)
            t, rem = arr[: idx.size], arr[idx.size :]
            if (t < 0).any() or (rem < a).any() or (t > x[idx]).any():
                raise ProtocolError(
                    "the sampling split is inconsistent with my counts", peer=self.pred()
                )
        if self.me < self.r:
            draws_pair = np.repeat(np.arange(idx.size), t)
            u = self.rng.integers_below(rem[draws_pair].astype(np.uint64), draws_pair.size)
            hit = u < a[draws_pair].astype(np.uint64)
            y = np.bincount(draws_pair[hit], minlength=idx.size).astype(np.int64)
            nxt = np.r_[t - y, rem - a]
            self.mesh.send(self.succ(), "split", {"k": self.me}, _ints_to_blob(nxt))
        else:
            if (rem != a).any():
                raise ProtocolError(
                    "the sampling split does not add up to the totals", peer=self.pred()
                )
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
    def _encode_records(self, records: list[str]) -> list[bytes]:
        elems = []
        for rec in records:
            data = rec.encode("utf-8")
            rid = os.urandom(RECORD_ID_BYTES)
            chunks = [data[i : i + RECORD_CHUNK] for i in range(0, len(data), RECORD_CHUNK)]
            chunks = chunks or [b""]
            if len(chunks) > 255:
                raise InvalidParameterError(
                    "record", len(data), f"at most {255 * RECORD_CHUNK} bytes per record"
                )
            for i, ch in enumerate(chunks):
                self.check()
                elems.append(cm.encode_chunk(rid + bytes([i, len(chunks), len(ch)]) + ch))
        return elems

    def output_union(self, records: list[str]) -> list[str]:
        key = cm.RecordKey.generate()
        elems = self._encode_records(records)

        def enc_all(xs: list[bytes]) -> list[bytes]:
            self.check()
            return _shuffle([key.encrypt(e) for e in xs])

        def elements(f: Frame) -> list[bytes]:
            return _parse(f, cm.elements_from_bytes)

        cur = enc_all(elems)
        for hop in range(1, self.r):
            self.mesh.send(self.succ(), "out_fwd", {"hop": hop}, cm.elements_to_bytes(cur))
            f = self.mesh.recv(self.pred(), "out_fwd")
            expect(f.body, {"hop": int}, f.peer)
            if f.body["hop"] != hop:
                raise ProtocolError(f"P{f.peer}: output union hop mismatch", peer=f.peer)
            cur = enc_all(elements(f))
        if self.me == 1:
            pool = list(cur)
            for j in self.data[1:]:
                f = self.mesh.recv(j, "out_pool")
                expect(f.body, {}, j)
                pool.extend(elements(f))
            cur = _shuffle([key.decrypt(y) for y in pool])
            self.mesh.send(self.succ(), "out_dec", {}, cm.elements_to_bytes(cur))
            f = self.mesh.recv(self.r, "output")
            expect(f.body, {"rows": int}, self.r)
            return self._records_from(f)
        self.mesh.send(1, "out_pool", {}, cm.elements_to_bytes(cur))
        f = self.mesh.recv(self.pred(), "out_dec")
        expect(f.body, {}, self.pred())
        cur = _shuffle([key.decrypt(y) for y in elements(f)])
        if self.me < self.r:
            self.mesh.send(self.succ(), "out_dec", {}, cm.elements_to_bytes(cur))
            f = self.mesh.recv(self.r, "output")
            expect(f.body, {"rows": int}, self.r)
            return self._records_from(f)
        # P_r holds the plaintexts: reassemble and broadcast the joint output
        parts: dict[bytes, dict[int, bytes]] = {}
        totals: dict[bytes, int] = {}
        bad = ProtocolError("a decrypted record is malformed", peer=self.pred())
        for y in cur:
            raw = _parse_chunk(y, bad)
            rid, i, tot, ln = raw[:8], raw[8], raw[9], raw[10]
            if ln > RECORD_CHUNK:
                raise bad
            parts.setdefault(rid, {})[i] = raw[11 : 11 + ln]
            if totals.setdefault(rid, tot) != tot:
                raise bad
        out = []
        for rid, by_index in parts.items():
            if sorted(by_index) != list(range(totals[rid])):
                raise ProtocolError("a record lost a chunk in the union", peer=self.pred())
            try:
                out.append(b"".join(by_index[i] for i in range(totals[rid])).decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise bad from exc
        out.sort()
        blob = "\n".join(out).encode("utf-8")
        for j in [0, *self.data[:-1]]:
            self.mesh.send(j, "output", {"rows": len(out)}, blob)
        return out

    def _records_from(self, f: Frame) -> list[str]:
        try:
            text = f.blob.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError("the joint output is not UTF-8", peer=f.peer) from exc
        rows = text.split("\n") if text else []
        if len(rows) != f.body["rows"] or any(r.count("\t") != 3 for r in rows):
            raise ProtocolError("the joint output is malformed", peer=f.peer)
        return rows

    # -- 10. commit --------------------------------------------------------------------------
    def commit(self, records: list[str]) -> PartyResult:
        """Agree on the public ledger and the output: exchange only public facts (whether each
        party was seeded, P0's clock), build the same ledger, exchange SHA-256(ledger, output).
        Per-party figures (bytes, seconds, solver report, repairs) stay in this party's private
        provenance record (``PartyResult.stats``)."""
        self.phase("commit")
        pub: dict[str, Any] = {
            "party": self.me,
            "seeded": bool(self.rng.seeded),
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        for j in self.mesh.config.ids:
            if j != self.me:
                self.mesh.send(j, "stats", pub)
        allpub = {self.me: pub}
        for j in self.mesh.config.ids:
            if j != self.me:
                f = self.mesh.recv(j, "stats")
                expect(f.body, {"party": int, "seeded": bool, "time_utc": str}, j)
                if f.body["party"] != j:
                    raise ProtocolError(f"P{j} sent another party's statistics", peer=j)
                allpub[j] = f.body
        df = _records_frame(records)
        seeded = any(p["seeded"] for p in allpub.values())
        ledger = public_ledger(
            self.params, self.r, df, created=allpub[0]["time_utc"], seeded=seeded
        )
        canon = json.dumps(ledger, sort_keys=True, ensure_ascii=False).encode("utf-8")
        digest = hashlib.sha256(canon + b"\x00" + "\n".join(records).encode("utf-8")).hexdigest()
        for j in self.mesh.config.ids:
            if j != self.me:
                self.mesh.send(j, "commit", {"digest": digest})
        for j in self.mesh.config.ids:
            if j != self.me:
                f = self.mesh.recv(j, "commit")
                expect(f.body, {"digest": str}, j)
                if f.body["digest"] != digest:
                    raise ProtocolError(f"P{j} ended with a different output or ledger", peer=j)
        self.clock.enter("commit")
        stats = {
            "party": self.me,
            "traffic": self.mesh.traffic.to_dict(),
            "seconds": {k: round(v, 3) for k, v in self.clock.seconds.items()},
            "cpu_seconds": {k: round(v, 3) for k, v in self.clock.cpu.items()},
            "worker_cpu_seconds": {k: round(v, 3) for k, v in self.precomp.worker_cpu.items()},
            "seeded": bool(self.rng.seeded),
            "extra": self.extra,
        }
        return PartyResult(df, ledger, digest, json.loads(json.dumps(stats, default=float)))


NEIGHBOURING = (
    "add, remove or replace one user's whole log (CELS §2.3 Cases 1-3); the users of the "
    "parties are disjoint"
)
# fields of the public ledger that are functions of the sampled output, so they differ between
# neighbouring inputs under the same seed (the neighbour audit allows exactly these)
NOISY_FIELDS = ("noisy", "outputs.log.rows")


def public_ledger(
    params: CelsParams, r: int, df: pl.DataFrame, *, created: str, seeded: bool
) -> dict[str, Any]:
    """The public ledger of a CELS release — identical on every party, and a function of the
    public parameters and the released log only."""
    ledger = build_ledger(
        mechanism="cels",
        notion=NOTION,
        neighbouring=NEIGHBOURING,
        epsilon=params.epsilon,
        delta=params.delta,
        parameters=params.to_dict() | {"parties": r},
        rng=None,
        noisy={
            "output_rows": df.height,
            "output_size": int(df.get_column("Count").sum()) if df.height else 0,
            "note": "functions of the released log (the mechanism's draws), not of the input",
        },
        extra={
            "guarantee": {
                "b": params.b,
                "counts_are_private": False,
                "warning": "the counts x come from the private logs and are not differentially "
                "private; the guarantee covers the sampling (docs/privacy/cels.md)",
            },
            "protocol": {
                "parties": r,
                "paillier_bits": params.key_bits,
                "paillier": key_strength(params.key_bits),
                "commutative_group": cm.GROUP_NAME,
                "wire_version": WIRE_VERSION,
            },
        },
    )
    ledger["created_utc"] = created
    ledger["seeded"] = seeded
    ledger["for_release"] = not seeded
    ledger["randomness"] = (
        {"source": "SeededRandom (a party was seeded)", "seeded": True,
         "note": "seeded randomness: reproducible experiment, NOT FOR RELEASE"}
        if seeded else {"source": "SecureRandom (every party)", "seeded": False}
    )  # fmt: skip
    check_public_ledger(ledger)
    return ledger


def _parse_chunk(y: bytes, bad: ProtocolError) -> bytes:
    try:
        return cm.decode_chunk(y)
    except InputFormatError as exc:
        raise bad from exc


def p0_solve(
    af: npt.NDArray[np.float64], at: npt.NDArray[np.float64], ab: npt.NDArray[np.float64],
    v: npt.NDArray[np.int64], n: int, ell: int, objective: str, output_share: float,
    breakpoints: int,
) -> tuple[npt.NDArray[np.int64], dict[str, Any]]:  # fmt: skip
    """P0's solve (run in a worker process): (AF)⁻¹[AT | AB] = F⁻¹[T | B] → M̃x ≤ 1 − η."""
    t0 = time.perf_counter()
    if ell:
        try:
            sol = np.linalg.solve(af, np.c_[at, ab])  # rows in party order
        except np.linalg.LinAlgError as exc:
            return np.zeros(0, dtype=np.int64), {"error": f"AF is singular ({exc})"}
        h = sol[:, -1]
        if (h <= 0).any() or not np.isfinite(sol).all():
            return np.zeros(0, dtype=np.int64), {
                "error": "the transformed constraints are inconsistent (AF ill-conditioned?)"
            }
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
    elif objective == "size":
        s = solve_oump(mtil, b1, method="lp-greedy", search_seconds=0.0)
        x, info = s.x, s.summary()
    else:
        s = solve_kl(mtil, b1, v.astype(np.float64), output_share=output_share, k=breakpoints)
        x, info = s.x, s.summary()
    info["reduce_seconds"] = time.perf_counter() - t0
    info["transformed_rows"] = ell
    info["pairs"] = n
    return np.asarray(x, dtype=np.int64), json.loads(json.dumps(info, default=float))


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


class _Status:
    """The party's current phase and outcome in a small JSON file (for ``cels run``)."""

    def __init__(self, path: Path | None, me: int) -> None:
        self.path, self.me = path, me
        self.phase = "mesh"

    def write(self, state: str, **kw: Any) -> None:
        if self.path is None:
            return
        rec = {"party": self.me, "pid": os.getpid(), "phase": self.phase, "state": state,
               "time": time.time()} | kw  # fmt: skip
        try:
            write_json_atomic(self.path, rec)
        except OSError:  # pragma: no cover - the runner's directory vanished
            pass


def _failure_text(me: int, err: ProtocolError) -> str:
    blame = f" because of P{err.peer}" if err.peer is not None and err.peer != me else ""
    return f"P{me} stopped in phase '{err.phase}'{blame}: {err.cause}"


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
    workers: int = 0,
    precompute: int = PRECOMPUTE,
    status: Path | None = None,
    hard_exit: bool = False,
    provenance: Path | None = None,
) -> PartyResult:
    """Run party ``me`` to completion; writes ``out`` (atomically: ``log.tsv`` and the public
    ``ledger.json``) and this party's private provenance record (``provenance``, by default
    ``<out>.private.json`` beside it) only if every party agrees, and ``transcript``
    (owner-only permissions) only then too. Any failure sends ``abort`` to
    all peers and raises :class:`ProtocolError` naming the phase, the peer and the cause.

    ``workers``: processes computing obfuscators / decryptions ahead (0 = inline);
    ``hard_exit``: end the process if the main thread does not stop within seconds of a
    failure (the CLI sets it); ``fault``: test hook (see :func:`inject_fault`)."""
    if (me == 0) != (share is None):
        raise InvalidParameterError("share", share, "a share for P1…Pr, none for P0")
    if out is not None:  # fail early if the release or its provenance record exists
        ReleaseWriter(out, overwrite=overwrite, provenance=provenance)
    flt = parse_fault(fault)
    st = _Status(status, me)
    partial = transcript.with_name(transcript.name + ".partial") if transcript else None

    def drop_partial() -> None:
        if partial is not None and partial.exists():
            partial.unlink()

    def on_phase(name: str) -> None:
        st.phase = name
        st.write("running")
        if progress is not None:
            progress(name)

    def stuck(err: ProtocolError) -> None:  # pragma: no cover - runs in a subprocess
        text = _failure_text(me, err)
        st.write("failed", peer=err.peer, cause=err.cause, error=text, detected_at=err.at)
        drop_partial()
        sys.stderr.write(f"error: {text} (stopped by the watchdog)\n")
        sys.stderr.flush()
        os._exit(2)

    precomp = Precomputer(workers)  # forks now, before any thread exists
    on_phase("mesh")
    ok = False
    try:
        if flt is not None and flt[0] == "mesh" and flt[1] in ("crash", "kill", "stop"):
            inject_fault(None, flt[1], flt[2])
        mesh_fault = (
            (flt[1], flt[2]) if flt and flt[0] == "mesh" and flt[1] in FAULT_KINDS else None
        )
        with Mesh(config, me, transcript=partial, on_stuck=stuck if hard_exit else None,
                  mesh_fault=mesh_fault) as mesh:  # fmt: skip
            precomp.check = mesh.check
            party = Party(
                mesh, params, share, rng, precomp=precomp, progress=on_phase,
                fault=flt if flt and flt[0] != "mesh" else None, precompute=precompute,
            )  # fmt: skip
            try:
                party.phase("setup")
                key = party.setup()
                if me == 0:
                    assert isinstance(key, PrivateKey)
                    party.phase("nlp")
                    party.solve(key)
                    party.phase("output")
                    f = mesh.recv(party.r, "output")
                    expect(f.body, {"rows": int}, party.r)
                    records = party._records_from(f)
                else:
                    assert isinstance(key, PublicKey)
                    party.phase("union")
                    pos = party.union()
                    party.phase("sum")
                    keep, c_keep = party.secure_sum(pos)
                    party.phase("rows")
                    party.rows(pos, keep, c_keep)
                    party.phase("nlp")
                    party.nlp(key)
                    party.phase("solve")
                    fx = party.wait_x()
                    party.phase("unpermute")
                    x = party.unpermute(fx)
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
                err = _as_protocol_error(exc, mesh)
                text = _failure_text(me, err)
                mesh.abort(text, culprit=err.peer if err.peer is not None else me)
                raise ProtocolError(err.cause, peer=err.peer, phase=err.phase, at=err.at) from exc
            except BaseException as exc:
                mesh.abort(f"P{me} crashed in phase '{mesh.phase}': {why(exc)}", culprit=me)
                raise
        ok = True
    except ProtocolError as exc:
        if exc.phase is None:
            exc.phase = st.phase
        st.phase = exc.phase  # where it failed (the status may already show the next phase)
        st.write(
            "failed", peer=exc.peer, cause=exc.cause, error=_failure_text(me, exc),
            detected_at=exc.at,
        )  # fmt: skip
        raise PartyFailed(me, exc) from exc
    except BaseException as exc:
        st.write("failed", peer=me, cause=why(exc), error=f"P{me} crashed: {why(exc)}")
        raise
    finally:
        precomp.close()
        if not ok:
            drop_partial()
    if out is not None:
        with ReleaseWriter(out, overwrite=overwrite, provenance=provenance) as w:
            w.write_table("log", result.output)
            w.write_ledger(result.ledger)
            w.write_provenance(party_provenance(share, result.stats))
    if partial is not None and transcript is not None:
        os.replace(partial, transcript)
    st.phase = "done"
    st.write("done")
    return result


def party_provenance(share: Share | None, stats: dict[str, Any]) -> dict[str, Any]:
    """This party's private provenance record: its input file and its figures of the run."""
    return build_provenance(
        inputs=[share.info] if share is not None else [],
        report={"cels_party": stats},
        extra={"mechanism": "cels", "party": stats.get("party")},
    )


class PartyFailed(ProtocolError):
    """:class:`ProtocolError` as reported by one party: ``P1 stopped in phase 'union' because
    of P2: …``."""

    def __init__(self, party: int, err: ProtocolError) -> None:
        super().__init__(err.cause, peer=err.peer, phase=err.phase, at=err.at)
        self.party = party
        self.args = (_failure_text(party, err),)

    def __str__(self) -> str:
        return str(self.args[0])


def _as_protocol_error(exc: BaseException, mesh: Mesh) -> ProtocolError:
    """The error to report: the mesh's failure if there is one (it explains the others)."""
    f = mesh.failure
    if f is not None:
        return ProtocolError(f.cause, peer=f.peer, phase=f.phase, at=f.at)
    if isinstance(exc, ProtocolError):
        return ProtocolError(exc.cause, peer=exc.peer, phase=exc.phase or mesh.phase, at=exc.at)
    return ProtocolError(str(exc), peer=None, phase=mesh.phase)
