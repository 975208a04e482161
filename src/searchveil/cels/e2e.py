"""CELS, the joint end-to-end mode (the default of ``cels run`` / ``cels party``): the phases
of :mod:`searchveil.cels.protocol` in ``--mode e2e`` (docs/privacy/cels.md §5).

The same pipeline as ``release ump``'s synthetic-id mode with ZEALOUS pair counts, on the
parties' joint data — one definition of every step (:mod:`.e2e_release`):

* **setup** — P0 sends the agreed parameters (no Paillier key: nothing is encrypted under
  P0's key in this mode, so none is generated).
* **union** — every data party bounds its own users (first m distinct clicked pairs,
  :func:`~searchveil.release.ump.e2e.bounded_pairs`; parties hold disjoint users, so this is
  the bounding of the union) and the bounded pairs' universe is computed as in the
  conditional mode (commutative encryption, positions only).
* **sum** — Algorithm 1's masked ring sum of the holder counts over the universe (and of the
  parties' user counts, for the declared ``--max-users``): P1 learns the exact joint bounded
  holder counts, as it learns the exact totals in the conditional mode.
* **publish** — P1 runs ZEALOUS on them with its injected randomness
  (:func:`~searchveil.cels.e2e_release.joint_pair_counts`) and sends the data parties the
  published positions with their noisy counts.
* **output** — the strings of the published pairs: each data party contributes a record
  (position, query, url, noisy count) for each published position it holds, through the
  output union (Algorithm 3 with shuffles); P_r drops the repeats of pairs several parties hold
  and broadcasts the list to every party, P0 included.
* **profile** — each data party's exact activity profile (its users holding exactly j of the
  published pairs, j = 1…m) and a second masked ring sum give P1 the joint profile; P1 runs
  :func:`~searchveil.release.ump.e2e.synthetic_tables` (profile noise, then the generated log)
  and sends the tables to every party, which checks them against the published pairs.
* **commit** — as in the conditional mode, with ``release ump``'s end-to-end ledger.

Phases rows … sample (the LP, Algorithm 2, the sampling of real ids) do not run.
"""

from __future__ import annotations

import json

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.cels.e2e_release import (
    check_tables,
    decode_tables,
    encode_tables,
    joint_pair_counts,
    tables_size_bound,
)
from searchveil.cels.output import OutputPhases
from searchveil.cels.union import UnionPhases
from searchveil.cels.wire import ProtocolError, expect
from searchveil.release.histogram import check_declared_users
from searchveil.release.ump.e2e import activity_profile, synthetic_tables

__all__ = ["E2EPhases"]


class E2EPhases(UnionPhases, OutputPhases):
    """The e2e mode's phases (module docstring), on the state of
    :class:`~searchveil.cels.party.PartyBase`; the data parties' share holds the bounded log
    (:meth:`~searchveil.cels.params.Share.read` with ``max_pairs``)."""

    def run_e2e(self) -> dict[str, pl.DataFrame]:
        """Setup and every e2e phase of this party; returns the release's tables (to commit)."""
        self.phase("setup")
        self.setup_params()
        if self.me == 0:
            self.phase("output")
            self.allow_output(self.recv_padded_length())  # the union's padded length (issue 30)
            f = self.mesh.recv(self.r, "output")
            expect(f.body, {"rows": int}, self.r)
            published = _published_frame(self._records_from(f), self.r)
            self.phase("profile")
            return self.receive_tables(published)
        self.phase("union")
        pos = self.union()
        self.phase("sum")
        tot = self.ring_sum(self.holder_vector(pos))
        self.phase("publish")
        pub, noisy = self.publish(tot)
        self.phase("output")
        published = self.reveal(pos, pub, noisy)
        self.phase("profile")
        return self.profile(pos, pub, published)

    # -- setup: the agreed parameters, no key ------------------------------------------------
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

    # -- sum: joint bounded holder counts ------------------------------------------------------
    def holder_vector(self, pos: npt.NDArray[np.int64]) -> npt.NDArray[np.uint64]:
        """This party's term of the first ring sum: the holders of each universe position among
        its bounded pairs, then its number of users (for the declared bound)."""
        assert self.share is not None
        users = int(self.share.info["users"])
        check_declared_users(self.params.max_users, users)  # fails early, before any sum
        vec = np.zeros(self.n_universe + 1, dtype=np.uint64)
        vec[pos] = self.share.hist.pairs.get_column("holders").to_numpy().astype(np.uint64)
        vec[-1] = users
        return vec

    # -- publish: P1's ZEALOUS step ----------------------------------------------------------
    def publish(
        self, tot: npt.NDArray[np.uint64] | None
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """P1: ZEALOUS on the joint holder counts, sent to the data parties; the others
        receive it. Returns the published positions (ascending) and their noisy counts."""
        n = self.n_universe
        tau_prime = self.params.e2e().zealous().tau_prime
        if self.me == 1:
            assert tot is not None
            holders, users = tot[:n].astype(np.int64), int(tot[n])
            check_declared_users(self.params.max_users, users)
            if (holders < 1).any():
                raise ProtocolError("the holder sum has a position no party holds", peer=None)
            pub, noisy, report = joint_pair_counts(
                holders, self.params.e2e(), users=users, rng=self.rng
            )
            self.extra["pair_counts"] = report  # private: P1's provenance record
            self.send_positions("e2e_pub", "k", pub, noisy)
            return pub, noisy
        self.mesh.allow("publish", 16 * n)  # at most n positions and n counts, 8 bytes each
        pub, noisy = self.recv_positions("e2e_pub", "k", "list of published pairs")
        if (noisy <= tau_prime).any():
            raise ProtocolError("P1 sent a malformed list of published pairs", peer=1)
        return pub, noisy

    # -- output: the published pairs' strings --------------------------------------------------
    def reveal(
        self, pos: npt.NDArray[np.int64], pub: npt.NDArray[np.int64], noisy: npt.NDArray[np.int64]
    ) -> pl.DataFrame:
        """The published pairs (``position, query, url, noisy_count``), every party's held
        ones revealed through the output union; checked against the published list."""
        assert self.share is not None
        pairs = self.share.hist.pairs
        held = np.flatnonzero(np.isin(pos, pub))
        where = np.searchsorted(pub, pos)  # (read only where held)
        q = pairs.get_column("query").gather(held).to_list() if held.size else []
        u = pairs.get_column("url").gather(held).to_list() if held.size else []
        records = [
            f"{int(pos[i])}\t{qq}\t{uu}\t{int(noisy[where[i]])}"
            for i, qq, uu in zip(held, q, u, strict=True)
        ]
        published = _published_frame(self.output_union(records, dedupe=True), self.r)
        if not (
            np.array_equal(published.get_column("position").to_numpy(), pub)
            and np.array_equal(published.get_column("noisy_count").to_numpy(), noisy)
        ):
            raise ProtocolError(
                "the revealed pairs are not the published ones (missing, repeated or altered)",
                peer=self.r,
            )
        return published

    # -- profile: the joint activity profile and P1's tables ------------------------------------
    def profile(
        self, pos: npt.NDArray[np.int64], pub: npt.NDArray[np.int64], published: pl.DataFrame
    ) -> dict[str, pl.DataFrame]:
        """The second ring sum (this party's exact profile over the published pairs it holds),
        then P1 generates the tables and sends them to every party."""
        assert self.share is not None and self.share.bounded is not None
        ep = self.params.e2e()
        mine = self.share.hist.pairs.filter(pl.Series(np.isin(pos, pub))).select("query", "url")
        local = activity_profile(self.share.bounded, mine, ep.max_pairs)
        tot = self.ring_sum(local.astype(np.uint64))
        if self.me != 1:
            return self.receive_tables(published)
        assert tot is not None
        exact = tot.astype(np.int64)
        tables, figures = synthetic_tables(
            published.select("query", "url", "noisy_count"), exact, ep, rng=self.rng
        )
        tables = {name: tables[name] for name in ("log", "counts", "profile")}
        self.extra["generator"] = figures  # computed from DP values only
        self.extra["profile_exact"] = exact.tolist()  # private: P1's provenance record
        blob = encode_tables(tables)
        for j in [0, *self.data[1:]]:
            self.mesh.send(j, "e2e_tables", {"bytes": len(blob)}, blob)
        return tables

    def receive_tables(self, published: pl.DataFrame) -> dict[str, pl.DataFrame]:
        # the frame cap of P1's tables, from public values only (issue 30)
        self.mesh.allow("profile", tables_size_bound(published, self.params.e2e().max_pairs))
        f = self.mesh.recv(1, "e2e_tables")
        expect(f.body, {"bytes": int}, 1)
        if f.body["bytes"] != len(f.blob):
            raise ProtocolError("P1 sent truncated release tables", peer=1)
        tables = decode_tables(f.blob, 1)
        check_tables(tables, published, self.params.e2e().max_pairs, 1)
        return tables


def _published_frame(records: list[str], peer: int) -> pl.DataFrame:
    """The revealed records as ``position, query, url, noisy_count``, by position."""
    rows = []
    for rec in records:
        p, q, u, c = rec.split("\t")
        if not (p.isdigit() and c.isdigit()):
            raise ProtocolError("a revealed pair record is malformed", peer=peer)
        rows.append((int(p), q, u, int(c)))
    df = pl.DataFrame(
        rows, orient="row",
        schema={"position": pl.Int64, "query": pl.String, "url": pl.String,
                "noisy_count": pl.Int64},
    ).sort("position")  # fmt: skip
    if df.get_column("position").is_duplicated().any() or (
        df.select("query", "url").is_duplicated().any()
    ):
        raise ProtocolError("the revealed pairs repeat a position or a pair", peer=peer)
    return df
