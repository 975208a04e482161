"""CELS, the joint log with the input's own columns (``--schema input``, the default of the e2e
mode; docs/privacy/cels.md §5): ``release ump``'s statistics (:mod:`searchveil.release.ump.
schema`) computed by the parties together, each on its own users, with the noise shared out.

After the pair round (:meth:`~.e2e.E2EPhases.item_round`: union, sum, publish, output):

* **query_union … query_output** — a second item round over each user's first m_q distinct
  consecutive query pairs (ZEALOUS, the ``query_pairs`` statistic): keyed digests under their
  own personalisation, their own dummies (half of ε_u), Skellam shares, the threshold τ'_q and
  the reveal, with the same K as the pairs.
* **shape** — one masked ring sum of the size, period and shape histograms (``events``,
  ``activity``, ``months`` unless the period is declared, ``hours``, ``gaps``, ``sessions``,
  ``clicks``, ``ranks``, ``multiplicity``): every party its own users' exact vector and its
  Pólya share of each statistic's discrete Laplace (``release ump``'s scale: any r of the r + 1
  shares are that noise exactly); P1 sends the noisy sum to every party. The period follows
  from the noisy ``months`` (post-processing), or is declared.
* **head** — a second ring sum, of what needs the published values: ``days`` of the period,
  ``head_events`` (per published query then pair, each padded to K), ``pair_ranks`` (K pairs ×
  rank bins), ``tail``, ``head_share``; P1 sends the noisy sum and a generation key.
* **tables** — every party lays out the same log from those DP values with ``release ump``'s
  code (:func:`~searchveil.release.ump.schema_stats.statistics_tables`,
  :func:`~searchveil.release.ump.schema_log.laid_out_tables`), randomness from the key; no
  message (the commit round checks that every party built the same bytes).

Every vector has a public length: its bins (the period's days once the period is out), or K
per published item. ``tail`` is the one statistic that is not the joint one: its sum over the
parties counts an unpublished query's holders within each party (:data:`~.params.
JOINT_STATISTICS`). :func:`party_vector` and :func:`joint_tables` are shared with ``cels
local`` (:func:`~.local.local_e2e`), so that both compute the same function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.cels.distributed import DistributedE2E
from searchveil.cels.e2e import E2EPhases
from searchveil.cels.e2e_release import KeyedStream
from searchveil.cels.party import ints_to_blob
from searchveil.cels.wire import ProtocolError, expect
from searchveil.errors import InternalError
from searchveil.model import SearchLog
from searchveil.release.ump.schema import INITIALS, PROFILE_EDGES, TAIL_EDGES, SchemaParams
from searchveil.release.ump.schema_log import laid_out_tables, published_head
from searchveil.release.ump.schema_stats import (
    exact_statistics,
    published_strings,
    released_period,
    statistics_tables,
)
from searchveil.rng import RandomSource
from searchveil.synth.shape import activity_edges, month_domain, shape_edges

__all__ = [
    "STAGES",
    "SchemaPhases",
    "joint_tables",
    "noise_vector",
    "party_vector",
    "query_pair_table",
    "segments",
    "unpack",
]

_I64 = npt.NDArray[np.int64]
#: the statistics of each joint sum, in vector order (``query_pairs``: an item round)
STAGES: dict[str, tuple[str, ...]] = {
    "shape": ("events", "activity", "months", "hours", "gaps", "sessions", "clicks", "ranks",
              "multiplicity"),
    "head": ("days", "head_events", "pair_ranks", "tail", "head_share", "head_profile",
             "tail_initials"),
}  # fmt: skip
Segments = list[tuple[str, int]]


def _stage_names(noise: DistributedE2E, stage: str) -> list[str]:
    names = noise.statistic_names()
    known = {n for s in STAGES.values() for n in s}
    missing = [n for n in names if n not in known]
    if missing:  # a statistic added to release ump without a joint version
        raise InternalError(f"the statistics {missing} have no joint (CELS) version")
    return [n for n in STAGES[stage] if n in names]


def _length(st: SchemaParams, name: str, period: tuple[int, int] | None, k: int) -> int:
    """The public length of one statistic's vector (its bins; K per published item)."""
    if name == "events":
        return 1
    if name == "months":
        return int(month_domain().size)
    if name == "days":
        assert period is not None
        return period[1] - period[0] + 1
    if name in ("activity", "head_share"):
        return int(shape_edges("activity", max_events=st.max_events).size) - 1
    if name == "tail":
        return len(TAIL_EDGES)
    if name == "head_events":
        return 2 * k
    if name == "head_profile":
        n_k = int(activity_edges(st.max_events).size) - 1
        return n_k * (len(PROFILE_EDGES) - 1)
    if name == "tail_initials":
        return len(INITIALS) + 1
    if name == "pair_ranks":
        return k * (int(shape_edges("ranks").size) - 1)
    return int(shape_edges(name).size) - 1


def segments(
    noise: DistributedE2E, stage: str, *, period: tuple[int, int] | None, k: int
) -> Segments:
    """(statistic, length) of the ``stage`` sum's vector, in order: a function of the public
    parameters and, for ``days``, of the period (declared or released; no ``days`` without
    one)."""
    st = noise.statistics
    if st is None:
        raise InternalError("no statistics in the counts log")
    names = [n for n in _stage_names(noise, stage) if n != "days" or period is not None]
    return [(n, _length(st, n, period, k)) for n in names]


def _pad(v: _I64, n: int) -> _I64:
    if v.size > n:
        raise InternalError(f"a per-item vector of {v.size} entries for {n} places")
    return np.r_[v, np.zeros(n - v.size, dtype=np.int64)].astype(np.int64)


def party_vector(
    segs: Segments, log: SearchLog | None, st: SchemaParams, *, salt: int, k: int,
    given: dict[str, Any],
) -> _I64:  # fmt: skip
    """One party's exact vector of a joint sum: ``release ump``'s exact statistics on its own
    users (:func:`~searchveil.release.ump.schema_stats.exact_statistics`; ``given``: the
    published values each needs, ``salt``: this party's random choice of holdings for
    ``multiplicity``), per-item statistics padded to K; zeros for P0 (``log`` None)."""
    total = sum(n for _, n in segs)
    if log is None:
        return np.zeros(total, dtype=np.int64)
    exact = exact_statistics(log, st, tuple(n for n, _ in segs), salt=salt, **given)
    parts = []
    for name, length in segs:
        v = np.asarray(exact[name], dtype=np.int64)
        if name == "head_events":
            nq = given["queries"].height
            v = np.r_[_pad(v[:nq], k), _pad(v[nq:], k)]
        elif name == "pair_ranks":
            v = _pad(v, length)
        if v.size != length:
            raise InternalError(f"statistic {name!r}: {v.size} values for {length} bins")
        parts.append(v)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def noise_vector(noise: DistributedE2E, segs: Segments, rng: RandomSource) -> _I64:
    """One party's noise share of a joint sum: a Pólya share of each statistic's noise."""
    parts = [noise.statistic(name).sample(length, rng) for name, length in segs]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


def unpack(vec: _I64, segs: Segments, *, queries: int = 0, pairs: int = 0, k: int = 0) -> dict[
    str, _I64
]:  # fmt: skip
    """The noisy statistics of a joint sum's vector, the padding of the per-item ones dropped
    (``queries``, ``pairs``: how many were published)."""
    out: dict[str, _I64] = {}
    at = 0
    for name, length in segs:
        v = vec[at : at + length]
        at += length
        if name == "head_events":
            v = np.r_[v[:queries], v[k : k + pairs]]
        elif name == "pair_ranks":
            v = v[: pairs * (length // max(k, 1))]
        out[name] = v.astype(np.int64)
    if at != vec.size:
        raise InternalError("a joint sum of another length than its statistics")
    return out


def query_pair_table(revealed: pl.DataFrame) -> pl.DataFrame:
    """The revealed query pairs (``query, url, noisy_count``) as ``release ump`` publishes them:
    ``query, next_query, noisy_count``, sorted."""
    return revealed.select(
        "query", pl.col("url").alias("next_query"), "noisy_count"
    ).sort("query", "next_query")  # fmt: skip


def head_given(
    period: tuple[int, int] | None, pairs: pl.DataFrame, query_pairs: pl.DataFrame,
    bounded: pl.DataFrame | None,
) -> dict[str, Any]:  # fmt: skip
    """What the ``head`` sum's statistics take as given: the period, the published queries and
    pairs (:func:`~searchveil.release.ump.schema_log.published_head`), what the pair step
    counted of this party's users (``bounded``), every published string."""
    p, q = published_head(pairs, None)
    return {"period": period, "queries": q, "pairs": p,
            "bounded_pairs": bounded if bounded is not None else pl.DataFrame(
                schema={"user": pl.String, "item": pl.String, "query": pl.String,
                        "url": pl.String}),
            "published": published_strings(q, p, query_pairs)}  # fmt: skip


def joint_tables(
    st: SchemaParams, noisy: dict[str, _I64], period: tuple[int, int] | None, *,
    pairs: pl.DataFrame, query_pairs: pl.DataFrame, key: bytes,
) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:  # fmt: skip
    """The release's tables from the joint noisy values alone, with ``release ump``'s code and
    randomness from the generation ``key`` (every party builds the same bytes): the log in the
    input's columns (AOL), ``queries``, ``counts``, ``ranks``, ``query_pairs``, ``statistics``;
    and the generator's figures."""
    p, q = published_head(pairs, None)
    tables, stats = statistics_tables(st, noisy, period, queries=q, pairs=p,
                                      query_pairs=query_pairs, serp=None)  # fmt: skip
    return laid_out_tables(tables, stats, pairs=p, queries=q, rng=KeyedStream(key),
                           phase=_no_phase)  # fmt: skip


def _no_phase(_label: str) -> Callable[[], None]:
    return lambda: None


class SchemaPhases(E2EPhases):
    """The phases of the input's-columns log (module docstring), after the pair round."""

    @property
    def statistics(self) -> SchemaParams:
        st = self.noise.statistics
        if st is None:
            raise InternalError("the input's columns without statistics")
        return st

    def run_e2e_input(self) -> dict[str, pl.DataFrame]:
        """Setup and every phase of the input's-columns log; returns the tables (to commit)."""
        self.setup_e2e()
        st, k = self.statistics, self.params.published_pairs
        _, _, pairs = self.item_round(self.pair_round, self.my_pairs)
        mine = self.share.query_pairs if self.share is not None else None
        _, _, revealed = self.item_round(self.query_round, mine)
        qp = query_pair_table(revealed)
        salt = int(self.rng.words(1)[0] >> np.uint64(1))  # multiplicity's choice: this party's
        self.phase("shape")
        seg_a = segments(self.noise, "shape", period=None, k=k)
        noisy, _ = self.noisy_stage("shape", seg_a, {}, salt)
        period = st.period if st.period is not None else released_period(st, noisy["months"])
        self.phase("head")
        seg_b = segments(self.noise, "head", period=period, k=k)
        self.mesh.allow("head", 8 * sum(n for _, n in seg_b) + 32)
        bounded = self.share.bounded if self.share is not None else None
        given = head_given(period, pairs, qp, bounded)
        noisy_b, key = self.noisy_stage("head", seg_b, given, salt, key=True)
        self.phase("tables")  # every party lays out the same log (no message)
        tables, figures = joint_tables(st, noisy | noisy_b, period, pairs=pairs, query_pairs=qp,
                                       key=key)  # fmt: skip
        self.extra["generator"] = figures  # from DP values only
        return tables

    def allow_e2e(self) -> None:
        """The e2e frame caps and the ``shape`` phase's (public: its bins)."""
        super().allow_e2e()
        if self.params.is_input:
            seg = segments(self.noise, "shape", period=None, k=self.params.published_pairs)
            self.mesh.allow("shape", 8 * sum(n for _, n in seg))

    def noisy_stage(
        self, stage: str, segs: Segments, given: dict[str, Any], salt: int, *, key: bool = False
    ) -> tuple[dict[str, _I64], bytes]:
        """One joint sum: this party's exact vector and noise share into the masked ring sum;
        P1 sends the noisy total (and, with ``key``, a 32-byte generation key) to every party.
        Returns the noisy statistics and the key (empty without)."""
        k = self.params.published_pairs
        n = sum(length for _, length in segs)
        log = self.share.log if self.share is not None else None
        vec = party_vector(segs, log, self.statistics, salt=salt, k=k, given=given)
        tot = self.noisy_sum(vec, noise_vector(self.noise, segs, self.noise_rng))
        extra = 32 if key else 0
        if self.me == 1:
            assert tot is not None
            gen = self.rng.words(4).astype(">u8").tobytes() if key else b""
            for j in [*self.data[1:], 0]:
                self.mesh.send(j, "e2e_stats", {"n": n}, ints_to_blob(tot) + gen)
        else:
            f = self.mesh.recv(1, "e2e_stats")
            expect(f.body, {"n": int}, 1)
            if f.body["n"] != n or len(f.blob) != 8 * n + extra:
                raise ProtocolError(f"P1 sent malformed {stage} statistics", peer=1)
            tot = np.frombuffer(f.blob[: 8 * n], dtype=">i8").astype(np.int64)
            gen = f.blob[8 * n :]
        nq = given["queries"].height if "queries" in given else 0
        npairs = given["pairs"].height if "pairs" in given else 0
        return unpack(tot, segs, queries=nq, pairs=npairs, k=k), gen
