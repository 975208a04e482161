"""CELS phases 4–7 (see :mod:`searchveil.cels.protocol`): the secure NLP (Algorithm 2,
fixed), P0's solve, un-permuting x along the ring, and the exact verification and repair."""

from __future__ import annotations

import json
import time
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from searchveil.cels.frames import Frame
from searchveil.cels.paillier import (
    Packer,
    PrivateKey,
    PublicKey,
)
from searchveil.cels.params import ETA
from searchveil.cels.party import (
    PartyBase,
    blob_to_ints,
    ints_to_blob,
    parse_frame,
    secure_normal,
    secure_perm,
)
from searchveil.cels.precompute import decrypt_batch
from searchveil.cels.wire import (
    ProtocolError,
    expect,
)
from searchveil.release.ump import solve_oump
from searchveil.release.ump.kl import solve_kl
from searchveil.release.ump.solvers import repair
from searchveil.rng import SecureRandom

T = TypeVar("T")


class SolvePhases(PartyBase):
    """Phases 4–7 (P0 solves, the data parties run the rest)."""

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
            got = parse_frame(f, lambda b: pk0.from_bytes(b, nz + nb))
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
            cols_in = parse_frame(f, lambda b: pk0.from_bytes(b, nz))
        self.sigma = secure_perm(n)  # new column i = old column sigma[i]
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
        rows = []
        for j in self.data:  # the sizes announced in phase 3: they cap what follows
            f = self.mesh.recv(j, "rows")
            expect(f.body, {"m": int, "n": int}, j)
            rows.append(f.body)
        if any(b["n"] != rows[0]["n"] or b["n"] < 0 or b["m"] < 0 for b in rows):
            raise ProtocolError("the parties announced inconsistent sizes", peer=None)
        announced = [b["m"] for b in rows]
        self.allow_after_rows(rows[0]["n"], sum(announced), announced, pk.n)
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
            or ms != announced or n != rows[0]["n"]
        ):  # fmt: skip
            raise ProtocolError("the parties sent inconsistent matrix shapes", peer=last)
        self.phase("solve")
        per_col = packer.n_plaintexts(ell + 1)
        nb = packer.n_plaintexts(ell)
        cz = parse_frame(f, lambda b: pk.from_bytes(b, n * per_col))
        cb = parse_frame(fb, lambda b: pk.from_bytes(b, nb))
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
        self.mesh.send(last, "x_perm", {"n": n}, ints_to_blob(x))

    # -- 6. un-permute --------------------------------------------------------------------------
    def wait_x(self) -> Frame:
        """The permuted x, from P0 (the last permuter) or from the next party in the chain."""
        i = self.perm_order.index(self.me)
        src = 0 if i == len(self.perm_order) - 1 else self.perm_order[i + 1]
        return self.mesh.recv(src, "x_perm" if src == 0 else "x_unperm")

    def unpermute(self, f: Frame) -> npt.NDArray[np.int64]:
        n = int(self.J.size)
        expect(f.body, {"n": int}, f.peer)
        xp = blob_to_ints(f, n)
        if (xp < 0).any():
            raise ProtocolError(f"P{f.peer} sent negative counts", peer=f.peer)
        x = np.empty(n, dtype=np.int64)
        x[self.sigma] = xp
        i = self.perm_order.index(self.me)
        if i > 0:
            self.mesh.send(self.perm_order[i - 1], "x_unperm", {"n": n}, ints_to_blob(x))
            f = self.mesh.recv(self.r, "x_final")
            expect(f.body, {"n": int}, self.r)
            x = blob_to_ints(f, n)
        else:  # Pr undid the first permutation: x is in J order
            for j in self.data[:-1]:
                self.mesh.send(j, "x_final", {"n": n}, ints_to_blob(x))
        return x

    # -- 7. exact verification and repair ---------------------------------------------------------
    def verify(self, x: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        b = self.params.b
        n = x.size
        mine = repair(self.t_all, x, b) if self.t_all.shape[0] else x
        changed = bool((mine != x).any())
        for j in self.data:
            if j != self.me:
                self.mesh.send(j, "repair", {"n": n, "changed": changed}, ints_to_blob(mine))
        final = mine.copy()
        for j in self.data:
            if j != self.me:
                f = self.mesh.recv(j, "repair")
                expect(f.body, {"n": int, "changed": bool}, j)
                xj = blob_to_ints(f, n)
                if (xj > x).any() or (xj < 0).any():
                    raise ProtocolError(f"P{j}'s repair increased a count", peer=j)
                final = np.minimum(final, xj)
        loads = np.asarray(self.t_all @ final.astype(np.float64)).ravel()
        if (loads > b).any():
            raise ProtocolError("a privacy constraint still fails after the repair")
        self.extra["draws_removed_by_repair"] = int(x.sum() - final.sum())
        self.extra["max_load_over_b"] = float(loads.max(initial=0.0) / b)
        return final


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
