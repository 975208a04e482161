"""CELS, the joint end-to-end mode (docs/privacy/cels.md §5): what the parties compute and
agree on besides the wire — the published slots, the fixed-size encoding of a revealed pair,
the generation randomness every party derives from one key, the tables and the public ledger.

Every party builds the release's tables itself from the same DP values (the revealed pairs with
their noisy counts, the noisy activity profile) and the same generation key, with ``release
ump``'s generator (:func:`~searchveil.release.ump.generate.generated_tables`): no table travels
on the wire, and the commit round checks that every party built the same bytes.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.cels.params import JOINT_STATISTICS, PAIR_BYTES, RECORD_WORDS, CelsParams
from searchveil.cels.wire import VERSION as WIRE_VERSION
from searchveil.cels.wire import ProtocolError
from searchveil.io.ledger import build_ledger
from searchveil.release.histogram import delta_users_check
from searchveil.release.ump.e2e import NOTION
from searchveil.rng import RandomSource

__all__ = [
    "FIELD",
    "MECHANISM",
    "KeyedStream",
    "decode_records",
    "e2e_public_ledger",
    "encode_pair",
    "encode_tables",
    "published_slots",
]

MECHANISM = "cels-e2e-synthetic-ids"
#: the prime field of the reveal's sums (2^61 − 1): a pair's 7-byte words are below it
FIELD = (1 << 61) - 1
_WORD = 7


def published_slots(
    total: npt.NDArray[np.int64], tau_prime: int, cap: int, *, rng: RandomSource
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The published slots (ascending) and their noisy totals: every slot whose noisy total is
    > τ', the ``cap`` largest if more, ties broken at random (``rng``) — a function of the noisy
    totals and fresh randomness only: not of the slots' order, which P0 chose knowing which
    digests the parties share (docs/privacy/cels.md §5)."""
    above = np.flatnonzero(total > tau_prime)
    if above.size > cap:
        ties = rng.random_keys(above.size)
        order = np.lexsort((ties, -total[above]))  # largest totals first, then at random
        above = np.sort(above[order[:cap]])
    return above.astype(np.int64), total[above].astype(np.int64)


def encode_pair(query: str, url: str) -> list[int]:
    """A pair as :data:`~searchveil.cels.params.RECORD_WORDS` field elements: the 2-byte
    lengths of the query's and the url's UTF-8, the query, the url, zeros — 7 bytes per
    element."""
    q, u = query.encode("utf-8"), url.encode("utf-8")
    if len(q) + len(u) > PAIR_BYTES:  # never: longer pairs are not counted (countable_clicks)
        raise ValueError("a pair longer than the record")
    raw = len(q).to_bytes(2, "big") + len(u).to_bytes(2, "big") + q + u
    raw += bytes(_WORD * RECORD_WORDS - len(raw))
    return [int.from_bytes(raw[i : i + _WORD], "big") for i in range(0, len(raw), _WORD)]


def decode_records(sums: npt.NDArray[np.uint64], peer: int) -> list[tuple[str, str] | None]:
    """The reveal's sums (one row R·(1, words) per published slot, mod :data:`FIELD`) as pairs;
    None where R = 0 (no party holds the slot). A row that is not R times a pair's encoding is
    ``peer``'s fault."""
    bad = ProtocolError(f"P{peer} sent revealed pairs that do not decode", peer=peer)
    out: list[tuple[str, str] | None] = []
    for row in sums.tolist():
        r = int(row[0])
        if r == 0:
            if any(row[1:]):
                raise bad
            out.append(None)
            continue
        inv = pow(r, FIELD - 2, FIELD)
        words = [(int(w) * inv) % FIELD for w in row[1:]]
        if any(w >> (8 * _WORD) for w in words):
            raise bad
        raw = b"".join(w.to_bytes(_WORD, "big") for w in words)
        nq, nu = int.from_bytes(raw[:2], "big"), int.from_bytes(raw[2:4], "big")
        if 4 + nq + nu > len(raw) or any(raw[4 + nq + nu :]):
            raise bad
        try:
            out.append((raw[4 : 4 + nq].decode("utf-8"), raw[4 + nq : 4 + nq + nu].decode("utf-8")))
        except UnicodeDecodeError as exc:
            raise bad from exc
    return out


class KeyedStream(RandomSource):
    """Randomness every party derives from the same 32-byte key: a ChaCha20 keystream. The
    generation of the log (post-processing of the DP values) draws from it, so every party
    builds the same tables; P1 draws the key from its own randomness source."""

    seeded = False

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

        if len(key) != 32:
            raise ValueError("a 32-byte key")
        self._enc = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()

    def words(self, n: int) -> npt.NDArray[np.uint64]:
        if n <= 0:
            return np.empty(0, dtype=np.uint64)
        return np.frombuffer(self._enc.update(bytes(8 * n)), dtype=np.uint64).copy()


def e2e_public_ledger(
    params: CelsParams, r: int, *, rng: RandomSource | None = None, protocol: bool = True
) -> dict[str, Any]:
    """The e2e mode's public ledger — of ``cels run`` before the commit round's creation time
    and randomness; of ``cels local`` (``protocol=False``) with its ``rng``: a function of the
    public parameters and the number of parties only. ``cels run`` spends what P0 sees, the
    output and the union's overlap structure ((ε + ε_u, δ + δ_u): the ledger's ε and δ, what
    is charged); the readers' guarantee, (ε, δ), is ``guarantee.readers`` — the ledger's ε and
    δ for ``cels local``, which runs no protocol."""
    params = params.with_parties(r)
    noise = params.noise()
    pr = noise.privacy()
    ep = params.e2e()
    readers = params.readers_cost()
    covers = "everything written: the published pair counts, the profile and the log"
    if params.is_input:
        covers = (
            "everything written: the published pair counts, every statistic (tables "
            "queries, counts, ranks, query_pairs, statistics) and every column of the log"
        )
    guarantee: dict[str, Any] = {
        "covers": covers,
        "counts_are_private": True,
        "readers": {"epsilon": readers.epsilon, "delta": readers.delta},
        "split": pr["split"],
        "delta_vs_users": delta_users_check(pr["delta"], ep.max_users),
        "user_ids": "synthetic",
        "schema": str(params.schema),
        "model": "semi-honest parties, P0 and P1…Pr; the same (ε, δ) against the readers of "
        "the output and against each data party, which knows its own noise share"
        + ("; against P0, which also sees the union's overlap structure, hidden by dummy "
           "digests: (ε + ε_u, δ + δ_u), against_p0" if protocol else "")
        + " (docs/privacy/cels.md §5)",
    }  # fmt: skip
    if params.is_input:
        guarantee["tail_tokens"] = (
            "queries <6 letters>~t<n> and URLs http://tail-q<n>-r<rank>.invalid/ are opaque "
            "tokens standing for unpublished items (docs/privacy/ump.md)"
        )
        guarantee["joint_statistics"] = JOINT_STATISTICS
    events = list(pr["events"])
    if protocol:
        guarantee["against_p0"] = _against_p0(params)
        unions = [("union_view_p0", params.union(), "pairs")]
        if params.is_input:
            unions.append(("query_union_view_p0", params.query_union(), "query pairs"))
        for step, u, what in unions:
            events.append({"step": step, "mechanism": "dummy digests (shifted, truncated "
                           f"discrete Laplace numbers) for every set of >= 2 data parties: the "
                           f"union of the {what}", **u.describe()})  # fmt: skip
    return build_ledger(
        mechanism=MECHANISM,
        notion=NOTION,
        cost=params.cost() if protocol else readers,
        parameters=params.to_dict(),
        declared={"max_users": ep.max_users} if ep.max_users is not None else {},
        rng=rng,
        events=events,
        extra={
            "guarantee": guarantee,
            "reference": "Hong et al., TKDE 2015 (CELS); Götz et al., TKDE 2012 (ZEALOUS); "
            "docs/privacy/cels.md §5",
        }
        | ({"protocol": _protocol(r, params)} if protocol else {}),
    )


def _against_p0(params: CelsParams) -> dict[str, Any]:
    unions = [params.union(), *([params.query_union()] if params.is_input else [])]
    views = [u.privacy() for u in unions]
    spent = params.cost()
    return {
        "epsilon": spent.epsilon,
        "delta": spent.delta,
        "union_view": {
            "epsilon": sum(e for e, _ in views),
            "delta": sum(d for _, d in views),
            "union_epsilon": params.union_epsilon_given(),
            "union_delta": sum(u.delta for u in unions),
            "unions": len(unions),
        },  # fmt: skip
        "delta_vs_users": delta_users_check(spent.delta, params.max_users),
        "why": "P0 sees the overlap structure of the union ((ε_u, δ_u): the dummy digests) and "
        "the output ((ε, δ)), composed: the ledger's epsilon and delta, what a budget is "
        "charged; the readers' guarantee is unchanged (readers)",
    }


def _protocol(r: int, params: CelsParams) -> dict[str, Any]:
    if params.is_input:
        return {
            "mode": "e2e",
            "schema": "input",
            "parties": r,
            "wire_version": WIRE_VERSION,
            "unions": "keyed BLAKE2b digests (a key shared by the data parties) of the pairs, "
            "then of the query pairs, with dummy digests shared by every set of >= 2 data "
            "parties in noisy numbers, padded to the public sizes; P0 joins them and assigns "
            "random slots",
            "secure_sums": "masked ring sums mod 2^64 over public sizes, every party adding its "
            "noise share: the pair counts and the query pairs (Skellam), the size, period and "
            "shape statistics, then the head, tail and days statistics (Pólya)",
            "reveal": "masked ring sums of random multiples of the published pairs' and query "
            "pairs' encodings, mod 2^61 - 1",
            "paillier": "none",
        }
    return {
        "mode": "e2e",
        "parties": r,
        "wire_version": WIRE_VERSION,
        "union": "keyed BLAKE2b digests of the pairs (a key shared by the data parties) and "
        "dummy digests shared by every set of >= 2 data parties in noisy numbers, padded to "
        "the public size; P0 joins them and assigns random slots",
        "secure_sums": "masked ring sums mod 2^64 over public sizes, every party adding "
        "its noise share: the pair counts (Skellam), then the activity profile (Pólya)",
        "reveal": "a masked ring sum of random multiples of the published pairs' "
        "encodings, mod 2^61 - 1",
        "paillier": "none",
    }


def encode_tables(tables: dict[str, pl.DataFrame]) -> bytes:
    """The release's tables (in the order they are written) in one canonical encoding: what
    every party's commit digest covers — each table's name, columns and types (JSON), then its
    rows as CSV (polars' writer: the same bytes for the same values on every party)."""
    out = []
    for name, df in tables.items():
        head = [name, [[c, str(t)] for c, t in df.schema.items()], df.height]
        out.append(json.dumps(head, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
        out.append(df.write_csv(separator="\t", quote_style="necessary").encode("utf-8"))
    return b"\x00".join(out)
