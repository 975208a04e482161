"""CELS: a party's shared machinery — wire helpers (integer blobs, keys, parsed frames),
CSPRNG permutations, the phase clock — and :class:`PartyBase`, the state every phase works on."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from searchveil.cels import commutative as cm
from searchveil.cels.faults import inject_fault
from searchveil.cels.frames import Frame
from searchveil.cels.paillier import (
    Packer,
    PrivateKey,
    PublicKey,
    generate_keypair,
)
from searchveil.cels.params import PRECOMPUTE, CelsParams, Share
from searchveil.cels.precompute import Precomputer
from searchveil.cels.wire import (
    Mesh,
    ProtocolError,
    expect,
)
from searchveil.errors import InputFormatError
from searchveil.rng import RandomSource, SecureRandom

T = TypeVar("T")


def ints_to_blob(a: npt.NDArray[Any]) -> bytes:
    return np.ascontiguousarray(a, dtype=">i8").tobytes()


def blob_to_ints(f: Frame, n: int) -> npt.NDArray[np.int64]:
    if len(f.blob) != 8 * n:
        raise ProtocolError(
            f"P{f.peer} sent a malformed {f.type!r}: {len(f.blob)} bytes, expected {n} integers",
            peer=f.peer,
        )
    return np.frombuffer(f.blob, dtype=">i8").astype(np.int64)


def secure_perm(n: int) -> npt.NDArray[np.int64]:
    """A uniformly random permutation from the OS CSPRNG (sort by random 64-bit keys)."""
    return np.argsort(SecureRandom().random_keys(n), kind="stable").astype(np.int64)


def secure_shuffle(xs: list[T]) -> list[T]:
    return [xs[i] for i in secure_perm(len(xs))]


def secure_normal(src: SecureRandom, shape: tuple[int, ...]) -> npt.NDArray[np.float64]:
    """Standard normal floats from the CSPRNG (Box–Muller on 53-bit uniforms)."""
    size = int(np.prod(shape))
    half = (size + 1) // 2
    u1 = 1.0 - src.uniform(half)  # (0, 1]
    u2 = src.uniform(half)
    rad = np.sqrt(-2.0 * np.log(u1))
    z = np.concatenate([rad * np.cos(2 * np.pi * u2), rad * np.sin(2 * np.pi * u2)])[:size]
    return z.reshape(shape)


class PhaseClock:
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


def pk_body(pk: PublicKey) -> dict[str, Any]:
    return {"n": format(pk.n, "x"), "hs": format(pk.hs, "x")}


def pk_from(body: Any, bits: int, peer: int) -> PublicKey:
    """P0's public key as a data party uses it: P0's n (of the agreed size) and a fixed base
    of this party's own; P0's base is checked (:meth:`PublicKey.check_fixed_base`), not used."""
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
    # no public check can tell an honest base from one of small order (PublicKey.
    # check_fixed_base): this party randomises under P0's n with a base of its own
    return pk.with_own_base()


def parse_frame(f: Frame, fn: Callable[[bytes], T]) -> T:
    """Parse a frame's blob; a malformed blob is the sender's fault."""
    try:
        return fn(f.blob)
    except InputFormatError as exc:
        raise ProtocolError(
            f"P{f.peer} sent a malformed {f.type!r}: {exc.problem}", peer=f.peer
        ) from exc


def elements_parser(width: int) -> Callable[[bytes], list[bytes]]:
    return lambda b: cm.elements_from_bytes(b, width)


class PartyBase:
    """One party's state, its place on the ring and the setup phase; the protocol's phases
    are added by :class:`~searchveil.cels.union.UnionPhases`,
    :class:`~searchveil.cels.solve.SolvePhases` and :class:`~searchveil.cels.output.OutputPhases`
    (composed in :class:`searchveil.cels.protocol.Party`)."""

    # set by the phases (union → rows) and read by the later ones
    n_universe: int
    J: npt.NDArray[np.int64]
    local_of_j: npt.NDArray[np.int64]
    cJ: npt.NDArray[np.int64]
    c_k: sp.csr_matrix
    cJ_mine: npt.NDArray[np.int64]
    t_all: sp.csr_matrix
    t_red: sp.csr_matrix
    ms: list[int]
    ell: int
    offset: int
    sigma: npt.NDArray[np.int64]
    pk0_n: int

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
        self.clock = PhaseClock()
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

    def send_positions(
        self, type_: str, key: str, pos: npt.NDArray[np.int64], values: npt.NDArray[np.int64]
    ) -> None:
        """P1: ascending universe positions and a value for each, to the other data parties
        (body ``{"n": universe size, key: how many}``, blob: positions then values)."""
        blob = ints_to_blob(np.r_[pos, values])
        for j in self.data[1:]:
            self.mesh.send(j, type_, {"n": self.n_universe, key: int(pos.size)}, blob)

    def recv_positions(
        self, type_: str, key: str, what: str
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """:meth:`send_positions`' frame from P1, checked: the universe size agrees and the
        positions are strictly ascending inside it (else P1 sent a malformed ``what``)."""
        n = self.n_universe
        f = self.mesh.recv(1, type_)
        expect(f.body, {"n": int, key: int}, 1)
        k = f.body[key]
        if f.body["n"] != n or not 0 <= k <= n:
            raise ProtocolError(f"P1 sent a malformed {what}", peer=1)
        arr = blob_to_ints(f, 2 * k)
        pos, values = arr[:k], arr[k:]
        if (np.diff(pos) <= 0).any() or (k and (pos[0] < 0 or pos[-1] >= n)):
            raise ProtocolError(f"P1 sent a malformed {what}", peer=1)
        return pos, values

    def allow_after_rows(self, n: int, ell: int, ms: list[int], key_n: int) -> None:
        """The frame caps of phases 4–8 (:meth:`Mesh.allow`) from the sizes every party knows
        once the rows are announced: n = |J|, ℓ = Σ m'_k, the m'_k and P0's modulus."""
        packer = Packer(key_n)
        per_col = packer.n_plaintexts(ell + 1)
        nz, nb = n * per_col, packer.n_plaintexts(ell)
        c = PublicKey(key_n).ciphertext_bytes
        self.mesh.allow("nlp", max(c * (nz + nb), 8 * ell * max(ms, default=0), 8 * n))
        for phase in ("solve", "unpermute", "verify"):
            self.mesh.allow(phase, 8 * n)
        self.mesh.allow("sample", 16 * n)

    # -- setup: P0's key and the agreed parameters ------------------------------------------
    def setup(self) -> PrivateKey | PublicKey:
        p = self.params.to_dict()
        if self.me == 0:
            sk = generate_keypair(self.params.key_bits)
            for j in self.data:
                self.mesh.send(j, "pk", {"key": pk_body(sk.public), "params": p})
            return sk
        f = self.mesh.recv(0, "pk")
        expect(f.body, {"key": dict, "params": dict}, 0)
        if f.body["params"] != json.loads(json.dumps(p)):
            raise ProtocolError("P0 runs with different parameters", peer=0)
        pk0 = pk_from(f.body["key"], self.params.key_bits, 0)
        self.pk0_n = pk0.n
        # obfuscators under P0's key for Algorithm 2, computed while the union runs
        self.precomp.produce("pk0", pk0, self.precompute * (2 if self.me == 1 else 1))
        return pk0
