"""CELS, the joint end-to-end mode (the default of ``cels run`` / ``cels party``): the phases of
:mod:`searchveil.cels.protocol` in ``--mode e2e`` (docs/privacy/cels.md §5).

No party sees an exact joint count, and every frame has a size fixed by public values only
(L = the declared cap on one party's distinct bounded pairs, V = r·L slots, K = the cap on
published pairs, m, r):

* **setup** — P0 sends the agreed parameters.
* **union** — the data parties agree on a key nobody else knows (each sends the others 32
  random bytes); each sends P0 the keyed digests of its bounded distinct pairs and its dummy
  digests — for every set S of ≥ 2 data parties it belongs to, the same z_S dummies as every
  other member of S, z_S drawn from the shared key (:class:`~.distributed.UnionDummies`), so
  that the overlap structure P0 sees is noisy —, padded with random digests to exactly L,
  sorted; P0 joins the r lists and answers each party with a random slot in [0, V) for each of
  its L digests (equal digests, equal slots). A dummy's slot holds no pair (count 0).
* **sum** — a masked ring sum P1 → … → Pr → P0 → P1 over the V slots: every data party adds its
  holder counts and one share of the noise, P0 a share too (:mod:`.distributed`); P1
  learns the noisy totals only.
* **publish** — P1 sends the data parties the published slots (noisy total > τ', the K largest)
  with their noisy totals, padded to K.
* **output** — the published pairs' strings, by a masked ring sum mod 2^61 − 1 of R·(1, pair)
  over the K published entries: every holder of a published slot adds a random multiple R of
  its pair's encoding, so the sum is a random multiple of the one pair, whatever the number of
  holders; P1 broadcasts the sums and the noisy totals (no slot) to every party, P0 included,
  and each decodes them. Slots nobody holds decode as empty.
* **profile** — a second noisy ring sum (with P0) of the parties' activity profiles over the
  published pairs; P1 clips it at 0 and sends it with a generation key to every party.
* **tables** — every party generates the same log from those DP values and the key
  (:mod:`.e2e_release`); the commit round checks that they agree.

Phases rows … sample (the LP, Algorithm 2, the sampling of real ids) do not run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.cels.distributed import DistributedCounts, DistributedE2E, UnionDummies
from searchveil.cels.e2e_release import (
    FIELD,
    KeyedStream,
    decode_records,
    encode_pair,
    published_slots,
)
from searchveil.cels.params import RECORD_WORDS
from searchveil.cels.party import PartyBase, blob_to_ints, ints_to_blob, secure_perm
from searchveil.cels.wire import ProtocolError, expect
from searchveil.errors import InternalError
from searchveil.release.ump.e2e import activity_profile
from searchveil.release.ump.generate import generated_tables
from searchveil.rng import RandomSource, SecureRandom, SeededRandom

__all__ = ["E2EPhases", "ItemRound"]

_KEY_LABEL = b"searchveil cels e2e union key v1"
_DUMMY_LABEL = b"searchveil cels e2e dummy counts v1"
_QDUMMY_LABEL = b"searchveil cels e2e query-pair dummy counts v1"
#: BLAKE2b personalisations: a pair's digest and a dummy's never coincide (nor a query pair's)
_PAIR, _DUMMY = b"sv-cels-pair", b"sv-cels-dummy"
_QPAIR, _QDUMMY = b"sv-cels-qpair", b"sv-cels-qdummy"


@dataclass(frozen=True)
class ItemRound:
    """One union → noisy sum → publish → reveal of items that are two strings (clicked pairs
    (query, url); with the input's columns also consecutive query pairs (query, next query)):
    its phases, its public sizes (L entries per party's list, K published at most), its noise
    and its union's dummies, and the labels that keep its digests apart from another round's."""

    phases: tuple[str, str, str, str]
    big_l: int
    k: int
    counts: DistributedCounts
    union: UnionDummies
    person: bytes
    dummy_person: bytes
    dummy_label: bytes
    #: the key of this round's figures in P1's private record
    what: str


class E2EPhases(PartyBase):
    """The e2e mode's phases (module docstring), on the state of
    :class:`~searchveil.cels.party.PartyBase`; the data parties' share holds the bounded log
    (:meth:`~searchveil.cels.params.Share.read` with ``max_pairs``)."""

    def run_e2e(self) -> dict[str, pl.DataFrame]:
        """Setup and every e2e phase of the counts log; returns the release's tables (to
        commit)."""
        self.setup_e2e()
        slots, pub, revealed = self.item_round(self.pair_round, self.my_pairs)
        self.phase("profile")
        profile, key = self.noisy_profile(slots, pub)
        tables, figures = generated_tables(revealed, profile, self.noise.m, rng=KeyedStream(key))
        self.extra["generator"] = figures  # from DP values only
        return tables

    def setup_e2e(self) -> None:
        self.phase("setup")
        self.setup_params()
        self.allow_e2e()

    def item_round(
        self, rd: ItemRound, items: pl.DataFrame | None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], pl.DataFrame]:
        """The four phases of ``rd`` over this party's ``items`` (``query, url, holders``; P0:
        None): the slot of each item, the published slots, the revealed items
        (``query, url, noisy_count``, sorted)."""
        self.phase(rd.phases[0])
        slots = self.e2e_union(rd, items)
        self.phase(rd.phases[1])
        vec = self.holder_vector(rd, slots, items)
        total = self.noisy_sum(vec, rd.counts.shares.sample(vec.size, self.noise_rng))
        self.phase(rd.phases[2])
        pub, noisy = self.publish(rd, total)
        self.phase(rd.phases[3])
        return slots, pub, self.reveal(rd, items, slots, pub, noisy)

    @property
    def my_pairs(self) -> pl.DataFrame | None:
        """This party's bounded pairs, ``query, url, holders`` (P0: None)."""
        return self.share.hist.pairs if self.share is not None else None

    # -- public sizes ------------------------------------------------------------------------
    @property
    def noise(self) -> DistributedE2E:
        return self.params.noise()

    @property
    def n_slots(self) -> int:
        """V = r·L: the slots of the pairs' union (at least as many as distinct digests)."""
        return self.r * self.params.party_pairs

    @functools.cached_property
    def pair_round(self) -> ItemRound:
        p = self.params
        return ItemRound(("union", "sum", "publish", "output"), p.party_pairs, p.published_pairs,
                         self.noise.pairs, p.union(), _PAIR, _DUMMY, _DUMMY_LABEL,
                         "pair_counts")  # fmt: skip

    @functools.cached_property
    def query_round(self) -> ItemRound:
        """The query pairs' round (``--schema input``): the same K as the pairs'."""
        p = self.params
        return ItemRound(("query_union", "query_sum", "query_publish", "query_output"),
                         p.query_party_pairs, p.published_pairs, self.noise.query_pairs,
                         p.query_union(), _QPAIR, _QDUMMY, _QDUMMY_LABEL,
                         "query_pairs")  # fmt: skip

    @functools.cached_property
    def noise_rng(self) -> RandomSource:
        """This party's source of noise shares, one stream for the whole run (a seeded run
        gives every party its own, whatever seed each was given)."""
        return self.rng.spawn(self.me) if isinstance(self.rng, SeededRandom) else self.rng

    def allow_e2e(self) -> None:
        """Every frame cap of the e2e phases known at the start, from public values only
        (issue 30; the input's-columns log's ``head`` phase: once the period is known)."""
        rounds = [self.pair_round, *([self.query_round] if self.params.is_input else [])]
        for rd in rounds:
            union, total, publish, output = rd.phases
            self.mesh.allow(union, 16 * rd.big_l)
            self.mesh.allow(total, 8 * self.r * rd.big_l)
            self.mesh.allow(publish, 16 * rd.k)
            self.mesh.allow(output, 8 * rd.k * (RECORD_WORDS + 2))
        if not self.params.is_input:
            self.mesh.allow("profile", 8 * self.noise.m + 32)

    # -- setup: the agreed parameters --------------------------------------------------------
    def setup_params(self) -> None:
        p = self.params.to_dict()
        if self.me == 0:
            for j in self.data:
                self.mesh.send(j, "params", {"params": p})
            return
        f = self.mesh.recv(0, "params")
        expect(f.body, {"params": dict}, 0)
        if f.body["params"] != json.loads(json.dumps(p)):
            raise ProtocolError("P0 runs with different parameters", peer=0)

    # -- union: keyed digests, joined by P0 -----------------------------------------------------
    def union_key(self) -> bytes:
        """A key the data parties share and P0 does not: each sends every other data party
        32 random bytes; the key hashes all of them in party order."""
        mine = os.urandom(32)
        for j in self.data:
            if j != self.me:
                self.mesh.send(j, "union_key", {}, mine)
        parts = {self.me: mine}
        for j in self.data:
            if j != self.me:
                f = self.mesh.recv(j, "union_key")
                expect(f.body, {}, j)
                if len(f.blob) != 32:
                    raise ProtocolError(f"P{j} sent a malformed key share", peer=j)
                parts[j] = f.blob
        return hashlib.sha256(_KEY_LABEL + b"".join(parts[j] for j in self.data)).digest()

    @property
    def shared_key(self) -> bytes:
        """The data parties' union key, agreed once (every round's digests are keyed by it, each
        round under its own personalisation). Not a ``functools.cached_property``: Python 3.11
        holds one lock per such property for all instances, and the in-process tests run every
        party's agreement at once."""
        if self._shared_key is None:
            self._shared_key = self.union_key()
        return self._shared_key

    _shared_key: bytes | None = None

    def e2e_union(self, rd: ItemRound, items: pl.DataFrame | None) -> npt.NDArray[np.int64]:
        """The slot of every local item (P0: joins the lists and returns an empty array)."""
        big_l = rd.big_l
        if self.me == 0:
            self._join_digests(big_l, self.r * big_l)
            return np.zeros(0, dtype=np.int64)
        assert items is not None
        key = self.shared_key
        q, u = items.get_column("query").to_list(), items.get_column("url").to_list()
        self.check()
        dig = b"".join(
            hashlib.blake2b(
                f"{a}\t{b}".encode(), key=key, digest_size=16, person=rd.person
            ).digest()
            for a, b in zip(q, u, strict=True)
        ) + self.dummy_digests(rd, key)
        n = len(dig) // 16
        if n > big_l:  # never: L = the bound (checked before connecting) + the dummies' cap
            raise InternalError("a party's pairs and dummies exceed the union's list length")
        rows = np.concatenate([
            np.frombuffer(dig, dtype=">u8").astype(np.uint64).reshape(-1, 2),
            SecureRandom().words(2 * (big_l - n)).reshape(-1, 2),  # random padding
        ])  # fmt: skip
        order = np.lexsort((rows[:, 1], rows[:, 0]))
        self.mesh.send(0, "union_set", {}, rows[order].astype(">u8").tobytes())
        f = self.mesh.recv(0, "union_slots")
        expect(f.body, {}, 0)
        if len(f.blob) != 4 * big_l:
            raise ProtocolError("P0 sent a malformed list of slots", peer=0)
        slots = np.frombuffer(f.blob, dtype=">u4").astype(np.int64)
        if (slots >= self.r * big_l).any() or np.unique(slots).size != big_l:
            raise ProtocolError("P0 sent slots outside the union or repeated", peer=0)
        rank = np.empty(big_l, dtype=np.int64)
        rank[order] = np.arange(big_l)
        return slots[rank[: len(q)]]

    def dummy_digests(self, rd: ItemRound, key: bytes) -> bytes:
        """This party's dummy digests: for every set S of ≥ 2 data parties it belongs to, z_S
        digests keyed by the shared key, S and an index — the same at every member of S; every
        data party draws the same z (a stream keyed by the shared key)."""
        union = rd.union
        z = union.sample(KeyedStream(hashlib.sha256(rd.dummy_label + key).digest()))[0]
        bit = 1 << (self.me - 1)
        return b"".join(
            hashlib.blake2b(s.to_bytes(8, "big") + i.to_bytes(8, "big"), key=key,
                            digest_size=16, person=rd.dummy_person).digest()
            for s, n in zip(union.sets, z.tolist(), strict=True) if s & bit for i in range(n)
        )  # fmt: skip

    def _join_digests(self, big_l: int, n_slots: int) -> None:
        """P0: every list (L distinct sorted digests), joined; a random slot of [0, V) for each
        distinct digest, sent back in each list's order."""
        lists = []
        for j in self.data:
            f = self.mesh.recv(j, "union_set")
            expect(f.body, {}, j)
            if len(f.blob) != 16 * big_l:
                raise ProtocolError(f"P{j} sent a list of the wrong size", peer=j)
            rows = np.frombuffer(f.blob, dtype=">u8").astype(np.uint64).reshape(-1, 2)
            hi, lo = rows[:, 0], rows[:, 1]
            if ((hi[1:] < hi[:-1]) | ((hi[1:] == hi[:-1]) & (lo[1:] <= lo[:-1]))).any():
                raise ProtocolError(f"P{j} sent a list that is not sorted or repeats", peer=j)
            lists.append(rows)
        self.check()
        uniq, inv = np.unique(np.vstack(lists), axis=0, return_inverse=True)
        slot_of = secure_perm(n_slots)[: uniq.shape[0]]
        inv = np.asarray(inv).ravel()
        for i, j in enumerate(self.data):
            block = slot_of[inv[i * big_l : (i + 1) * big_l]]
            self.mesh.send(j, "union_slots", {}, block.astype(">u4").tobytes())

    # -- sum: the noisy holder counts ---------------------------------------------------------
    def holder_vector(
        self, rd: ItemRound, slots: npt.NDArray[np.int64], items: pl.DataFrame | None
    ) -> npt.NDArray[np.int64]:
        """This party's holders of each slot of ``rd``'s union (P0: none)."""
        vec = np.zeros(self.r * rd.big_l, dtype=np.int64)
        if items is not None:
            vec[slots] = items.get_column("holders").to_numpy()
        return vec

    def noisy_sum(
        self, vec: npt.NDArray[np.int64], noise: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64] | None:
        """The sum over every party of ``vec`` plus its ``noise`` share (one share each, P0
        included), known to P1 alone (returned there; None elsewhere): a ring P1 → … → Pr → P0
        → P1 mod 2^64, P1 adding a uniform mask first, so every partial sum another party sees
        is uniform."""
        ring = [*self.data, 0]
        at = ring.index(self.me)
        succ, pred = ring[(at + 1) % len(ring)], ring[at - 1]
        n = int(vec.size)
        if noise.shape != vec.shape:
            raise InternalError("a noise share of another length than its sum")
        term = (vec + noise).view(np.uint64)
        mask = SecureRandom().words(n) if self.me == 1 else None
        if mask is not None:
            self.mesh.send(succ, "sum_fwd", {"n": n}, (term + mask).astype(">u8").tobytes())
        f = self.mesh.recv(pred, "sum_fwd")
        expect(f.body, {"n": int}, pred)
        if f.body["n"] != n or len(f.blob) != 8 * n:
            raise ProtocolError(f"P{pred} sent a sum of the wrong length", peer=pred)
        acc = np.frombuffer(f.blob, dtype=">u8").astype(np.uint64)
        if mask is not None:
            return (acc - mask).view(np.int64)
        self.mesh.send(succ, "sum_fwd", {"n": n}, (acc + term).astype(">u8").tobytes())
        return None

    # -- publish: P1's threshold on the noisy totals --------------------------------------------
    def publish(
        self, rd: ItemRound, total: npt.NDArray[np.int64] | None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """P1: the published slots and their noisy totals, padded to K, to the data parties;
        they receive and check them. P0 takes no part (it never learns a slot's total)."""
        k, tau, n_slots = rd.k, rd.counts.tau_prime, self.r * rd.big_l
        if self.me == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if self.me == 1:
            assert total is not None
            pub, noisy = published_slots(total, tau, k, rng=self.rng)
            pad = k - pub.size
            blob = ints_to_blob(np.r_[pub, np.full(pad, -1), noisy, np.zeros(pad, np.int64)])
            for j in self.data[1:]:
                self.mesh.send(j, "e2e_pub", {"k": k}, blob)
            self.extra[rd.what] = {"slots": n_slots, "tau_prime": tau,
                                         "published_slots": int(pub.size), "cap": k,
                                         "above_tau_prime": int((total > tau).sum())}  # fmt: skip
            return pub, noisy
        f = self.mesh.recv(1, "e2e_pub")
        expect(f.body, {"k": int}, 1)
        arr = blob_to_ints(f, 2 * k) if f.body["k"] == k else np.zeros(0, dtype=np.int64)
        pub, noisy = arr[:k], arr[k:]
        n = int((pub >= 0).sum())
        if (
            arr.size != 2 * k
            or (pub[n:] != -1).any()
            or (noisy[n:] != 0).any()
            or (np.diff(pub[:n]) <= 0).any()
            or (n and pub[n - 1] >= n_slots)
            or (noisy[:n] <= tau).any()
        ):
            raise ProtocolError("P1 sent a malformed list of published slots", peer=1)
        return pub[:n], noisy[:n]

    # -- output: the published pairs' strings ---------------------------------------------------
    def reveal(
        self, rd: ItemRound, items: pl.DataFrame | None, slots: npt.NDArray[np.int64],
        pub: npt.NDArray[np.int64], noisy: npt.NDArray[np.int64],
    ) -> pl.DataFrame:  # fmt: skip
        """The published items (``query, url, noisy_count``), revealed by a masked ring sum of
        random multiples of their encodings (module docstring); every data party checks that
        its own published items are there unaltered."""
        k, width = rd.k, RECORD_WORDS + 1
        if self.me == 0:
            sums, counts = self._recv_revealed(k, width)
        else:
            assert items is not None
            mine = self._my_published(slots, pub)
            sums = self._reveal_ring(self._contribution(items, mine, k, width))
            if self.me == 1:
                counts = np.r_[noisy, np.zeros(k - noisy.size, np.int64)]
                blob = ints_to_blob(counts) + sums.astype(">u8").tobytes()
                for j in self.data[1:]:
                    self.mesh.send(j, "output", {"k": k}, blob)
                o = secure_perm(k)  # P0 knows every slot's holders: rows in no slot order
                self.mesh.send(
                    0, "output", {"k": k}, ints_to_blob(counts[o]) + sums[o].astype(">u8").tobytes()
                )
            else:
                sums, counts = self._recv_revealed(k, width)
        records = decode_records(sums, peer=1)
        if self.me:
            for i, loc in self._my_published(slots, pub):
                assert items is not None
                want = (items.get_column("query")[loc], items.get_column("url")[loc])
                if records[i] != want or counts[i] != noisy[i]:
                    raise ProtocolError("the revealed pairs miss or alter one of mine", peer=1)
        rows = [(q, u, int(c)) for rec, c in zip(records, counts, strict=True)
                if rec is not None for q, u in [rec]]  # fmt: skip
        df = pl.DataFrame(rows, schema={"query": pl.String, "url": pl.String,
                                        "noisy_count": pl.Int64}, orient="row")  # fmt: skip
        if (
            df.select("query", "url").is_duplicated().any()
            or (df.get_column("noisy_count") <= rd.counts.tau_prime).any()
        ):
            raise ProtocolError("P1 sent revealed pairs that repeat or were not published", peer=1)
        return df.sort("query", "url")

    def _my_published(
        self, slots: npt.NDArray[np.int64], pub: npt.NDArray[np.int64]
    ) -> list[tuple[int, int]]:
        """(index in the published list, local pair) of every published slot this party holds."""
        where = {int(s): i for i, s in enumerate(pub.tolist())}
        return [(where[int(s)], loc) for loc, s in enumerate(slots.tolist()) if int(s) in where]

    def _contribution(
        self, items: pl.DataFrame, mine: list[tuple[int, int]], k: int, width: int
    ) -> npt.NDArray[np.uint64]:
        """R·(1, encoding) mod FIELD for each published item this party holds, 0 elsewhere."""
        out = np.zeros((k, width), dtype=np.uint64)
        q, u = items.get_column("query"), items.get_column("url")
        rs = SecureRandom().integers_below(FIELD - 1, len(mine)) + np.uint64(1)
        for (i, loc), r in zip(mine, rs.tolist(), strict=True):
            out[i] = [r, *((r * w) % FIELD for w in encode_pair(q[loc], u[loc]))]
        return out

    def _reveal_ring(self, term: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        """The masked ring sum mod FIELD among the data parties; the sum at P1 (else the
        partial sum, unused)."""
        field = np.uint64(FIELD)
        shape = term.shape
        if self.me == 1:
            mask = SecureRandom().integers_below(FIELD, term.size).reshape(shape)
            self.mesh.send(self.succ(), "out_fwd", {"n": term.size},
                           ((term + mask) % field).astype(">u8").tobytes())  # fmt: skip
        f = self.mesh.recv(self.pred(), "out_fwd")
        expect(f.body, {"n": int}, self.pred())
        if f.body["n"] != term.size or len(f.blob) != 8 * term.size:
            raise ProtocolError(f"P{self.pred()} sent a sum of the wrong length", peer=self.pred())
        acc = np.frombuffer(f.blob, dtype=">u8").astype(np.uint64).reshape(shape)
        if (acc >= field).any():
            raise ProtocolError(f"P{self.pred()} sent a malformed sum", peer=self.pred())
        if self.me == 1:
            return (acc + field - mask) % field
        self.mesh.send(self.succ(), "out_fwd", {"n": term.size},
                       ((acc + term) % field).astype(">u8").tobytes())  # fmt: skip
        return acc

    def _recv_revealed(
        self, k: int, width: int
    ) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        f = self.mesh.recv(1, "output")
        expect(f.body, {"k": int}, 1)
        if f.body["k"] != k or len(f.blob) != 8 * k * (width + 1):
            raise ProtocolError("P1 sent a malformed list of revealed pairs", peer=1)
        counts = np.frombuffer(f.blob[: 8 * k], dtype=">i8").astype(np.int64)
        sums = np.frombuffer(f.blob[8 * k :], dtype=">u8").astype(np.uint64).reshape(k, width)
        if (sums >= np.uint64(FIELD)).any():
            raise ProtocolError("P1 sent a malformed list of revealed pairs", peer=1)
        return sums, counts

    # -- profile: the noisy activity profile and the generation key -----------------------------
    def noisy_profile(
        self, slots: npt.NDArray[np.int64], pub: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], bytes]:
        """The joint activity profile over the published pairs (users holding exactly j of
        them, j = 1…m) with the parties' noise shares, clipped at 0, and the generation key —
        both from P1, to every party."""
        m = self.noise.m
        local = np.zeros(m, dtype=np.int64)
        if self.share is not None and self.share.bounded is not None:
            locs = [loc for _, loc in self._my_published(slots, pub)]
            mine = self.share.hist.pairs[locs].select("query", "url")
            local = activity_profile(self.share.bounded, mine, m)
            self.extra["profile_own_share"] = local.tolist()  # this party's own users only
        tot = self.noisy_sum(local, self.noise.profile.sample(m, self.noise_rng))
        if self.me == 1:
            assert tot is not None
            noisy = np.clip(tot, 0, None)
            key = self.rng.words(4).astype(">u8").tobytes()  # P1's randomness (seeded: --seed)
            for j in [*self.data[1:], 0]:
                self.mesh.send(j, "e2e_profile", {"m": m}, ints_to_blob(noisy) + key)
            return noisy, key
        f = self.mesh.recv(1, "e2e_profile")
        expect(f.body, {"m": int}, 1)
        if f.body["m"] != m or len(f.blob) != 8 * m + 32:
            raise ProtocolError("P1 sent a malformed activity profile", peer=1)
        noisy = np.frombuffer(f.blob[: 8 * m], dtype=">i8").astype(np.int64)
        if (noisy < 0).any():
            raise ProtocolError("P1 sent a malformed activity profile", peer=1)
        return noisy, f.blob[8 * m :]
