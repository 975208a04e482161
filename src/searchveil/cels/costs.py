"""Sizes and a bandwidth / work model of the CELS protocol as implemented in
:mod:`searchveil.cels.protocol` (compare CELS §5.3, whose O(r ℓ (m + n)) count assumes one
ciphertext per matrix entry and no packing).

:func:`protocol_sizes` computes — without any cryptography — the quantities the protocol's
cost depends on, for the same split of users into parties: n_k (each party's distinct pairs),
the universe size, n_J (pairs kept by Condition 1 and ``min_count``), m_k and m'_k (each
party's constraint rows before/after dropping dominated rows, ℓ = Σ m'_k) and the number of
output records. :func:`predict_bytes` turns them into bytes per phase, every frame header and
JSON body included, exactly as the parties count them (heartbeats are not counted);
:func:`predict_work` into the dominant operations per party: Curve25519 scalar
multiplications and hashes for the union, Paillier obfuscators (fixed-base exponentiations)
for Algorithm 2, P0's decryptions. The model is checked against measured runs in tests and
docs/cels.md.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

from searchveil.cels import commutative as cm
from searchveil.cels.params import RECORD_CHUNK
from searchveil.cels.union import prune_dominated
from searchveil.model import ClickHistogram
from searchveil.release.ump import constraint_block
from searchveil.rng import secure_token

FRAME = 20  # header bytes per frame
SLOT = 80  # fixed-point slot bits (Packer default)
RECORD_BYTES = 60  # assumed UTF-8 bytes of one output record (user, query, url, count)
SESSION_CHARS = len(secure_token())


def _js(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))


@dataclass(frozen=True)
class Sizes:
    r: int
    pairs_per_party: list[int]
    universe: int
    kept_pairs: int
    rows: list[int]
    rows_pruned: list[int]
    records: int
    record_bytes: int = RECORD_BYTES
    pairs_with_draws: int | None = None

    @property
    def ell(self) -> int:
        return sum(self.rows_pruned)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ell": self.ell}


def protocol_sizes(
    hists: list[ClickHistogram],
    *,
    min_count: int = 1,
    records: int = 0,
    record_bytes: int = RECORD_BYTES,
    pairs_with_draws: int | None = None,
) -> Sizes:
    """The quantities the protocol's cost depends on (no cryptography)."""
    frames = [h.pairs.select("query", "url", "count", "holders") for h in hists]
    allp = (
        pl.concat(frames)
        .group_by(["query", "url"])
        .agg(pl.col("count").sum().alias("c"), pl.col("holders").sum().alias("h"))
    )
    kept = allp.filter((pl.col("h") >= 2) & (pl.col("c") >= min_count))
    rows, pruned = [], []
    for h in hists:
        j = h.pairs.with_row_index("local").join(kept, on=["query", "url"], how="inner")
        sel = j.get_column("local").to_numpy()
        if sel.size == 0:
            rows.append(0)
            pruned.append(0)
            continue
        t = constraint_block(h.matrix.tocsr()[sel], j.get_column("c").to_numpy().astype(np.int64))
        t = t[np.flatnonzero(np.diff(t.indptr) > 0)]
        rows.append(int(t.shape[0]))
        pruned.append(int(prune_dominated(t).size) if t.shape[0] else 0)
    return Sizes(
        r=len(hists),
        pairs_per_party=[h.n_pairs for h in hists],
        universe=allp.height,
        kept_pairs=kept.height,
        rows=rows,
        rows_pruned=pruned,
        records=records,
        record_bytes=record_bytes,
        pairs_with_draws=pairs_with_draws,
    )


def _cipher_bytes(key_bits: int) -> int:
    return 2 * key_bits // 8


def _slots(key_bits: int, slot_bits: int) -> int:
    return max(1, (key_bits - 2) // slot_bits)


def predict_bytes(s: Sizes, key_bits: int) -> dict[str, int]:
    """Total bytes sent by all parties, per phase (the phase the sender is in)."""
    r, n, ell, u = s.r, s.kept_pairs, s.ell, s.universe
    c = _cipher_bytes(key_bits)
    sl = _slots(key_bits, SLOT)
    per_col = math.ceil((ell + 1) / sl)
    nz, nb = n * per_col, math.ceil(ell / sl)
    el, dg = cm.ELEMENT_BYTES, cm.DIGEST_BYTES
    own = sum(s.pairs_per_party)
    out: dict[str, int] = {}
    out["mesh"] = (r + 1) * r // 2 * (FRAME + _js({"id": r, "session": "x" * SESSION_CHARS}))
    params = 220  # the agreed parameters as JSON (≈; depends on how the floats print)
    out["setup"] = r * (FRAME + _js({"key": {"n": "", "hs": ""}, "params": {}}) + params)
    out["setup"] += r * (key_bits // 4 + 2 * key_bits // 4)
    # each party's hashed pairs travel r hops (the last as digests); sets to P1; universe back
    out["union"] = (
        sum((r - 1) * (FRAME + _js({"pairs": k})) for k in s.pairs_per_party)  # announced
        + sum(r * (FRAME + _js({"hop": h})) for h in range(1, r + 1))
        + own * (el * (r - 1) + dg)
        + (r - 1) * (FRAME + 2) + dg * (own - s.pairs_per_party[0])
        + (r - 1) * (FRAME + _js({"n": u}) + dg * u)
    )  # fmt: skip
    out["sum"] = r * (FRAME + _js({"n": u}) + 8 * u) + (r - 1) * (
        FRAME + _js({"n": u, "j": n}) + 16 * n
    )
    out["rows"] = sum(
        r * (FRAME + _js({"m": m, "n": n})) for m in s.rows_pruned
    )  # each party to the r − 1 others and P0
    out["nlp"] = (
        sum(FRAME + _js({"l": ell, "m": m}) + 8 * ell * m for m in s.rows_pruned)
        + (r - 1) * (FRAME + _js({"n": n, "l": ell}) + c * (nz + nb))  # ring sum
        + FRAME + _js({"l": ell}) + c * nb  # Enc(AB) to P0
        + (r - 1) * (FRAME + _js({"n": n, "l": ell}) + c * nz)  # permutation chain
        + FRAME + _js({"n": n, "l": ell, "ms": s.rows_pruned}) + c * nz  # to P0
    )  # fmt: skip
    xmsg = FRAME + _js({"n": n}) + 8 * n
    out["unpermute"] = xmsg * (1 + (r - 1) + (r - 1))
    out["verify"] = r * (r - 1) * (FRAME + _js({"n": n, "changed": False}) + 8 * n)
    drawn = min(n, s.records) if s.pairs_with_draws is None else s.pairs_with_draws
    out["sample"] = (r - 1) * (FRAME + _js({"k": r}) + 16 * drawn)
    chunks = max(1, math.ceil(s.record_bytes / RECORD_CHUNK))
    e = s.records * chunks  # N: the record chunks of all parties; every list is padded to N
    text = s.records * (s.record_bytes + 1)
    out["output"] = (
        r * (FRAME + _js({"v": 2**63})) + r * (FRAME + _js({"total": e}))  # N, then to all
        + r * (r - 1) * (FRAME + _js({"hop": 1})) + r * (r - 1) * el * e  # encryption hops
        + (r - 1) * (FRAME + 2 + el * e)  # pools to P1
        + (r - 1) * (FRAME + 2 + el * e * r)  # decryption chain
        + r * (FRAME + _js({"rows": s.records}) + text)
    )  # fmt: skip
    pub = {"party": r, "seeded": False, "time_utc": "2026-01-01T00:00:00Z"}
    out["commit"] = (r + 1) * r * (2 * FRAME + _js(pub) + _js({"digest": "x" * 64}))
    return out


def predict_work(s: Sizes, key_bits: int) -> dict[str, float]:
    """Dominant operations per data party (average) and at P0."""
    r, n, ell = s.r, s.kept_pairs, s.ell
    sl = _slots(key_bits, SLOT)
    per_col = math.ceil((ell + 1) / sl)
    nz, nb = n * per_col, math.ceil(ell / sl)
    own = sum(s.pairs_per_party) / r
    return {
        "hash_to_group": own,
        "x25519": own * r,
        "paillier_obfuscators": (r * nz + nz + nb) / r,  # P1 also encrypts the ring sum
        "paillier_obfuscators_p1": 2 * nz + nb,
        "paillier_decrypt_p0": nz + nb,
        # every party's list is padded to all parties' chunks: r lists of N, encrypted and
        # decrypted by every party
        "record_scalar_mults": 2 * r * s.records * math.ceil(s.record_bytes / RECORD_CHUNK),
    }
