"""CELS phases 8–10 (see :mod:`searchveil.cels.protocol`): the exact global multinomial
sampling split along the ring, the secure union of the sampled records (Algorithm 3), and the
commit: the same public ledger on every party, written only if every digest agrees."""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.cels import commutative as cm
from searchveil.cels.e2e_release import e2e_public_ledger, encode_tables
from searchveil.cels.frames import Frame
from searchveil.cels.paillier import (
    key_strength,
)
from searchveil.cels.params import (
    NOTION,
    RECORD_CHUNK,
    RECORD_ID_BYTES,
    CelsParams,
    PartyResult,
)
from searchveil.cels.party import (
    PartyBase,
    blob_to_ints,
    ints_to_blob,
    parse_frame,
    secure_shuffle,
)
from searchveil.cels.wire import VERSION as WIRE_VERSION
from searchveil.cels.wire import (
    ProtocolError,
    expect,
)
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.ledger import (
    build_ledger,
    check_public_ledger,
)
from searchveil.release.ump import sample_users
from searchveil.release.ump.e2e import UmpMode
from searchveil.release.ump.release import NOT_DP
from searchveil.rng import RandomSource

T = TypeVar("T")


class OutputPhases(PartyBase):
    """Phases 8–10."""

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
            arr = blob_to_ints(f, 2 * idx.size)
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
            self.mesh.send(self.succ(), "split", {"k": self.me}, ints_to_blob(nxt))
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

    def _padded_length(self, mine: int) -> int:
        """N, the total number of record chunks of all parties: a masked ring sum (P1 adds a
        uniform 64-bit mask, as in Algorithm 1, phase 2), which P1 then sends to every party.
        N is a function of the joint output every party receives, so it reveals nothing
        more; each party pads its list to N, so no list's length says how many rows its party
        owns (issue 30). Sets the output phase's frame cap from N."""
        mod = 1 << 64
        if self.me == 1:
            mask = int.from_bytes(os.urandom(8), "big")
            self.mesh.send(self.succ(), "out_size", {"v": (mine + mask) % mod})
            f = self.mesh.recv(self.pred(), "out_size")
            expect(f.body, {"v": int}, f.peer)
            total = (f.body["v"] - mask) % mod
            for j in [0, *self.data[1:]]:
                self.mesh.send(j, "out_len", {"total": total})
        else:
            f = self.mesh.recv(self.pred(), "out_size")
            expect(f.body, {"v": int}, f.peer)
            self.mesh.send(self.succ(), "out_size", {"v": (f.body["v"] + mine) % mod})
            total = self.recv_padded_length()
        if not mine <= total < 1 << 40:
            raise ProtocolError(f"P1 announced {total} record chunks in all; I hold {mine}", peer=1)
        self.allow_output(total)
        return total

    def recv_padded_length(self) -> int:
        f = self.mesh.recv(1, "out_len")
        expect(f.body, {"total": int}, 1)
        return int(f.body["total"])

    def allow_output(self, total: int) -> None:
        """The output phase's frame cap: P1's pool holds r lists of ``total`` chunks; the
        joint output's text is at most a chunk's bytes and a newline per chunk."""
        self.mesh.allow("output", max(cm.ELEMENT_BYTES * self.r * total, 19 * total))

    def output_union(self, records: list[str], *, dedupe: bool = False) -> list[str]:
        """The joint list of every party's ``records`` (Algorithm 3 with shuffles), sorted;
        ``dedupe`` (the e2e mode's reveal, where parties holding the same published pair send
        the same record): P_r drops repeated records before it broadcasts the list."""
        key = cm.RecordKey.generate()
        elems = self._encode_records(records)
        total = self._padded_length(len(elems))
        # dummy chunks (a record's chunk count 0: dropped by P_r after the last decryption),
        # encrypted and shuffled like the real ones
        elems += [
            cm.encode_chunk(os.urandom(RECORD_ID_BYTES) + bytes(3))
            for _ in range(total - len(elems))
        ]

        def enc_all(xs: list[bytes]) -> list[bytes]:
            self.check()
            return secure_shuffle([key.encrypt(e) for e in xs])

        def elements(f: Frame) -> list[bytes]:
            return parse_frame(f, cm.elements_from_bytes)

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
            cur = secure_shuffle([key.decrypt(y) for y in pool])
            self.mesh.send(self.succ(), "out_dec", {}, cm.elements_to_bytes(cur))
            f = self.mesh.recv(self.r, "output")
            expect(f.body, {"rows": int}, self.r)
            return self._records_from(f)
        self.mesh.send(1, "out_pool", {}, cm.elements_to_bytes(cur))
        f = self.mesh.recv(self.pred(), "out_dec")
        expect(f.body, {}, self.pred())
        cur = secure_shuffle([key.decrypt(y) for y in elements(f)])
        if self.me < self.r:
            self.mesh.send(self.succ(), "out_dec", {}, cm.elements_to_bytes(cur))
            f = self.mesh.recv(self.r, "output")
            expect(f.body, {"rows": int}, self.r)
            return self._records_from(f)
        # P_r holds the plaintexts: reassemble and broadcast the joint output
        parts: dict[bytes, dict[int, bytes]] = {}
        totals: dict[bytes, int] = {}
        bad = ProtocolError("a decrypted record is malformed", peer=self.pred())
        real = 0
        for y in cur:
            raw = _parse_chunk(y, bad)
            rid, i, tot, ln = raw[:8], raw[8], raw[9], raw[10]
            if tot == 0:  # padding
                continue
            real += 1
            if ln > RECORD_CHUNK:
                raise bad
            parts.setdefault(rid, {})[i] = raw[11 : 11 + ln]
            if totals.setdefault(rid, tot) != tot:
                raise bad
        if real != total or len(cur) != self.r * total:
            raise ProtocolError("the output union lost or gained record chunks", peer=self.pred())
        out = []
        for rid, by_index in parts.items():
            if sorted(by_index) != list(range(totals[rid])):
                raise ProtocolError("a record lost a chunk in the union", peer=self.pred())
            try:
                out.append(b"".join(by_index[i] for i in range(totals[rid])).decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise bad from exc
        out = sorted(set(out)) if dedupe else sorted(out)
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
    def commit(
        self, records: list[str], tables: dict[str, pl.DataFrame] | None = None
    ) -> PartyResult:
        """Agree on the public ledger and the output: exchange only public facts (whether each
        party was seeded, P0's clock), build the same ledger, exchange SHA-256(ledger, output).
        Per-party figures (bytes, seconds, solver report, repairs) stay in this party's private
        provenance record (``PartyResult.stats``). ``tables``: the e2e mode's release (log,
        counts, profile; ``records`` unused), in place of the joint records."""
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
        df = _records_frame(records) if tables is None else tables["log"]
        seeded = any(p["seeded"] for p in allpub.values())
        ledger = public_ledger(
            self.params, self.r, df, created=allpub[0]["time_utc"], seeded=seeded
        )
        canon = json.dumps(ledger, sort_keys=True, ensure_ascii=False).encode("utf-8")
        body = "\n".join(records).encode("utf-8") if tables is None else encode_tables(tables)
        digest = hashlib.sha256(canon + b"\x00" + body).hexdigest()
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
        return PartyResult(df, ledger, digest, json.loads(json.dumps(stats, default=float)),
                           tables=tables or {})  # fmt: skip


def public_ledger(
    params: CelsParams, r: int, df: pl.DataFrame, *, created: str, seeded: bool
) -> dict[str, Any]:
    """The public ledger of a CELS release — identical on every party, and a function of the
    public parameters and the released log only (the e2e mode's: of the parameters only)."""
    if params.mode == UmpMode.E2E:
        return _stamped(e2e_public_ledger(params, r), created=created, seeded=seeded)
    ledger = conditional_ledger(
        "cels", NOTION, params, df, parameters={"parties": r}, rng=None,
        warning="the counts x come from the private logs and are not differentially private; "
        "the guarantee covers the sampling (docs/privacy/cels.md)",
        protocol={
            "parties": r,
            "paillier_bits": params.key_bits,
            "paillier": key_strength(params.key_bits),
            "commutative_group": cm.GROUP_NAME,
            "wire_version": WIRE_VERSION,
        },
    )  # fmt: skip
    return _stamped(ledger, created=created, seeded=seeded)


def conditional_ledger(
    mechanism: str, notion: str, params: CelsParams, log: pl.DataFrame, *,
    parameters: dict[str, Any], rng: RandomSource | None, warning: str, **extra: Any,
) -> dict[str, Any]:  # fmt: skip
    """The public ledger of a conditional-mode release (``cels run``'s or the LS baseline's):
    the parameters, what the sampled ``log`` holds (functions of the mechanism's draws) and the
    guarantee — NOT differentially private, ``warning`` saying why — then ``extra``."""
    return build_ledger(
        mechanism=mechanism,
        notion=notion,
        cost=params.cost(),
        parameters=params.to_dict() | parameters,
        rng=rng,
        noisy={
            "output_rows": log.height,
            "output_size": int(log.get_column("Count").sum()) if log.height else 0,
            "note": "functions of the released log (the mechanism's draws), not of the input",
        },
        extra={
            "guarantee": {
                "mode": "conditional",
                "differentially_private": False,
                "label": NOT_DP,
                "b": params.b,
                "counts_are_private": False,
                "warning": warning,
            },
            **extra,
        },
    )


def _stamped(ledger: dict[str, Any], *, created: str, seeded: bool) -> dict[str, Any]:
    """The commit round's public facts: P0's clock, whether any party was seeded."""
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
