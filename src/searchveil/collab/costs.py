"""Sizes and a bandwidth / work model of the CELS protocol as implemented in
:mod:`searchveil.collab.protocol` (compare CELS §5.3, whose O(r ℓ (m + n)) count assumes one
ciphertext per matrix entry and no packing).

:func:`protocol_sizes` computes — without any cryptography — the quantities the protocol's
cost depends on, for the same split of users into parties: n_k (each party's distinct pairs),
the universe size, n_J (pairs kept by Condition 1 and ``min_count``), m_k and m'_k (each
party's constraint rows before/after dropping dominated rows, ℓ = Σ m'_k) and the number of
output records. :func:`predict_bytes` turns them into bytes per phase (frame headers
included); :func:`predict_powmods` into modular exponentiations per party, the dominant
computation. The model is checked against measured runs in tests and docs/cels.md.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import polars as pl

from searchveil.collab import commutative as cm
from searchveil.collab.protocol import COUNT_SLOT_BITS, RECORD_CHUNK, prune_dominated
from searchveil.model import ClickHistogram
from searchveil.release.ump import constraint_block

FRAME = 20  # header bytes per frame
SLOT = 80  # fixed-point slot bits (Packer default)


@dataclass(frozen=True)
class Sizes:
    r: int
    pairs_per_party: list[int]
    universe: int
    kept_pairs: int
    rows: list[int]
    rows_pruned: list[int]
    records: int

    @property
    def ell(self) -> int:
        return sum(self.rows_pruned)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"ell": self.ell}


def protocol_sizes(hists: list[ClickHistogram], *, min_count: int = 1, records: int = 0) -> Sizes:
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
    )


def _cipher_bytes(key_bits: int) -> int:
    return 2 * key_bits // 8


def _slots(key_bits: int, slot_bits: int) -> int:
    return max(1, (key_bits - 2) // slot_bits)


def predict_bytes(s: Sizes, key_bits: int) -> dict[str, int]:
    """Total bytes sent by all parties, per phase."""
    r, n, ell = s.r, s.kept_pairs, s.ell
    c = _cipher_bytes(key_bits)
    el = cm.ELEMENT_BYTES
    sl, sc = _slots(key_bits, SLOT), _slots(key_bits, COUNT_SLOT_BITS)
    per_col = math.ceil((ell + 1) / sl)
    ab = math.ceil(ell / sl)
    out: dict[str, int] = {}
    out["setup"] = r * (FRAME + key_bits // 4 + 400)
    # each party's hashed pairs travel r hops; sets to P1; universe back to P2..Pr
    own_sets = sum(s.pairs_per_party)
    out["union"] = (
        r * r * FRAME + r * el * own_sets
        + (r - 1) * FRAME + el * (own_sets - s.pairs_per_party[0])
        + (r - 1) * (FRAME + el * s.universe)
    )  # fmt: skip
    out["sum"] = (
        (r - 1) * (FRAME + key_bits // 4 + 40)
        + r * (FRAME + c * math.ceil(s.universe / sc))
        + (r - 1) * (FRAME + 8 * s.universe)
    )  # fmt: skip
    out["rows"] = r * (r - 1) * (FRAME + 16)
    af = sum(m * ab * c for m in s.rows_pruned) + r * FRAME
    sum_chain = (r - 1) * (FRAME + c * (n * per_col + ab))
    perm_chain = (r + 1) * (FRAME + c * n * per_col) + c * ab  # Pr→P1→…→Pr→P0
    out["nlp"] = af + sum_chain + perm_chain
    x8 = 8 * n
    out["unpermute"] = (FRAME + x8) * (1 + (r - 1) + (r - 1))
    out["verify"] = r * (r - 1) * (FRAME + 30 + x8)
    elems = s.records * max(1, math.ceil(60 / RECORD_CHUNK))
    out["sample"] = (r - 1) * (FRAME + 16 * min(n, s.records))
    out["output"] = (
        (r - 1) * el * elems + el * elems + (r - 1) * el * elems + r * (FRAME + 60 * s.records)
    )
    return out


def predict_powmods(s: Sizes, key_bits: int) -> dict[str, float]:
    """Modular exponentiations per data party (average), by kind."""
    r, n, ell = s.r, s.kept_pairs, s.ell
    sl, sc = _slots(key_bits, SLOT), _slots(key_bits, COUNT_SLOT_BITS)
    per_col = math.ceil((ell + 1) / sl)
    ab = math.ceil(ell / sl)
    avg_m = ell / r if r else 0
    return {
        "paillier_encrypt": math.ceil(s.universe / sc) + n * per_col + ab + avg_m * ab,
        "paillier_rerandomize": n * per_col,  # one permutation hop per party
        "paillier_decrypt_p0": n * per_col + ab + ell * ab,
        "sra_short": r * sum(s.pairs_per_party) / r,
        "sra_full": 2 * s.records,
    }
