"""CELS: the parameters every party agrees on, one data party's input (a share), a
party's result and the constants of the protocol (Hong et al., TKDE 2015).

Two modes (``--mode``, :class:`~searchveil.release.ump.e2e.UmpMode`): ``e2e`` (the default) is
the joint version of ``release ump``'s end-to-end mode — thresholded noisy pair counts, a noisy
activity profile and a log of synthetic users, (ε, δ)-DP end to end, the noise shared out among
the parties (:mod:`.distributed`) and every message of a public size (docs/privacy/cels.md §5);
``conditional`` is the paper's protocol, NOT differentially
private (counts computed from the exact histogram), kept for reproducing its figures."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from searchveil.bounding import bound_contributions
from searchveil.cels import commutative as cm
from searchveil.cels.distributed import DistributedE2E, UnionDummies
from searchveil.cels.paillier import (
    ALLOWED_KEY_BITS,
    key_strength,
)
from searchveil.errors import InvalidParameterError
from searchveil.io.readers import read_log
from searchveil.mechanisms.budget import PrivacyCost, Relation
from searchveil.mechanisms.shares import MAX_POLYA_SCALE
from searchveil.model import ClickHistogram, SearchLog, click_histogram, items
from searchveil.release.counts import count_by
from searchveil.release.histogram import check_declared_users
from searchveil.release.ump.e2e import E2EParams, UmpMode, bounded_pairs
from searchveil.release.ump.kl import cels_bound
from searchveil.release.ump.release import NOT_DP
from searchveil.release.ump.schema import SAMPLE_EVENTS, LogSchema, parse_period
from searchveil.release.ump.schema_stats import query_pair_items
from searchveil.synth.shape import log_events
from searchveil.validate import check_int, check_positive, check_probability, parse_choice

T = TypeVar("T")


class Objective(StrEnum):
    """What P0 optimises: CELS's KL loss at a fixed |O| (§2.2) or the output size (O-UMP)."""

    KL = "kl"
    SIZE = "size"


OBJECTIVES = tuple(o.value for o in Objective)
NOTION = f"{NOT_DP}; only the multinomial sampling given the counts is (ε,δ)-DP (CELS Thm 2, Thm 7)"
#: options of one mode only (an error in the other): the paper's protocol / the e2e release
CONDITIONAL_ONLY = ("objective", "key_bits", "output_share", "breakpoints", "min_count")
E2E_ONLY = ("max_pairs", "max_users", "split", "max_party_pairs", "max_published_pairs", "parties",
            "union_epsilon", "schema", "period", "max_events", "max_query_pairs",
            "max_party_query_pairs")  # fmt: skip
#: options of the input's-columns log only (``--schema input``; an error with ``counts``)
INPUT_ONLY = ("period", "max_events", "max_query_pairs", "max_party_query_pairs")
#: the e2e mode's public sizes (docs/privacy/cels.md §5): the default cap on one party's
#: distinct bounded pairs (min(m·U, this)), the default cap on the published pairs, and the
#: bytes of one revealed pair (UTF-8 query and url after their 2-byte lengths; longer pairs are not
#: counted, by every party and by ``cels local`` alike)
DEFAULT_PARTY_PAIRS = 1 << 18
DEFAULT_PUBLISHED_PAIRS = 1000
RECORD_WORDS = 72  # field elements of 7 bytes per revealed pair
PAIR_BYTES = 7 * RECORD_WORDS - 4
#: why ``--union-epsilon`` (ε_u) has no default in the e2e mode: the allowed values of the error
UNION_EPSILON_REQUIRED = (
    "a positive ε_u, required in --mode e2e (no default): the guarantee against P0 of its view "
    "of the union — which pairs the data parties hold in common, hidden by dummy digests; cels "
    "run and cels party spend ε + ε_u, cels local (no P0, but the same slots, so that it "
    "computes cels run's function) spends ε; e.g. --union-epsilon equal to --epsilon"
)
#: how each statistic of ``release ump``'s input's-columns log is computed jointly (the
#: ledger's ``parameters.statistics.joint``; docs/privacy/cels.md §5)
JOINT_STATISTICS = (
    "every statistic is a sum over users: each party computes it on its own users with release "
    "ump's bounds, adds its Pólya share of release ump's discrete Laplace and the masked ring "
    "sum gives the noisy total (the same ε_i); the query pairs are a second union and thresholded "
    "sum with Skellam shares, like the pair counts; one difference: 'tail' is the sum of the "
    "parties' own tail histograms (an unpublished query's holders counted within each party: a "
    "query held at several parties counts once per party) — the joint holder counts of "
    "unpublished queries are not computed"
)
CONDITIONAL_DEFAULTS: dict[str, Any] = {
    "key_bits": 3072, "output_share": 0.5, "breakpoints": 33, "min_count": 1,
}  # fmt: skip
ETA = 1e-6  # P0 tightens every constraint to (1 − η)·b against the LP tolerance
HOLDER_BITS = 24  # Algorithm 1 word: count·2^24 + holders, summed mod 2^64
RECORD_ID_BYTES = 8
RECORD_CHUNK = cm.PAYLOAD_BYTES - RECORD_ID_BYTES - 3  # record bytes per group element
# obfuscators under P0's key each data party computes ahead, while the union runs, before it
# knows how many it needs (P1, which also encrypts the first term of the ring sum: twice as
# many); the rest are computed once the sizes are known, any surplus is discarded
PRECOMPUTE = 384


@dataclass(frozen=True)
class CelsParams:
    """Parameters every party must agree on (checked in the setup phase).

    ``mode="e2e"`` (default): ε, δ, ``union_epsilon`` (ε_u, the guarantee against P0 of its
    view of the union; required, no default) and the end-to-end release's own options
    ``max_pairs`` (m; default: the public rule of
    :func:`~searchveil.release.ump.e2e.default_max_pairs`), ``max_users`` (a declared bound U)
    and ``split``; the pair step is ZEALOUS (:meth:`e2e`). ``mode="conditional"``: the paper's
    protocol, with ``objective`` (no default), ``key_bits``, ``output_share``, ``breakpoints``,
    ``min_count``. An option of the other mode is an error."""

    epsilon: float
    delta: float
    objective: Objective | str | None = None
    key_bits: int = 3072
    output_share: float = 0.5
    breakpoints: int = 33
    min_count: int = 1
    mode: UmpMode | str = UmpMode.E2E
    max_pairs: int | None = None
    max_users: int | None = None
    split: tuple[float, float] | None = None
    max_party_pairs: int | None = None
    max_published_pairs: int | None = None
    #: the number of data parties r (e2e: the noise shares and their accounting depend on it;
    #: set by ``cels run``/``cels party``/``cels local`` from the shares or the config)
    parties: int | None = None
    #: ε_u, the guarantee of P0's view of the union (its overlap structure, hidden by dummy
    #: digests) against P0: required in the e2e mode (no default, :data:`UNION_EPSILON_REQUIRED`)
    union_epsilon: float | None = None
    #: e2e: the log's schema, ``input`` (the input's own columns, every one from a DP statistic;
    #: the default) or ``counts`` (AnonID, Query, ClickURL, Count)
    schema: LogSchema | str | None = None
    #: ``--schema input``: a declared period ``FIRST..LAST`` (ISO dates; else released), E, m_q
    #: (default: their public rules) and the public bound on one party's distinct bounded query
    #: pairs (the query pairs' union, as ``max_party_pairs`` for the pairs')
    period: str | None = None
    max_events: int | None = None
    max_query_pairs: int | None = None
    max_party_query_pairs: int | None = None

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        check_probability("delta", self.delta)
        object.__setattr__(self, "mode", parse_choice("mode", self.mode, UmpMode))
        if self.split is not None:
            if not isinstance(self.split, tuple | list):
                raise InvalidParameterError("split", self.split, "2 positive weights")
            object.__setattr__(self, "split", tuple(self.split))
        if self.mode == UmpMode.E2E:
            schema = parse_choice("schema", self.schema or LogSchema.INPUT, LogSchema)
            object.__setattr__(self, "schema", schema)
            for k in INPUT_ONLY if schema == LogSchema.COUNTS else ():
                if getattr(self, k) is not None:
                    raise InvalidParameterError(
                        k.replace("_", "-"), getattr(self, k),
                        "not set: it is an option of --schema input",
                    )  # fmt: skip
            if self.objective is not None:
                raise InvalidParameterError(
                    "objective", self.objective, "not set: it is an option of --mode conditional "
                    "(the e2e mode runs no optimisation)",
                )  # fmt: skip
            for k, v in CONDITIONAL_DEFAULTS.items():
                if getattr(self, k) != v:
                    raise InvalidParameterError(
                        k.replace("_", "-"), getattr(self, k),
                        "not set: it is an option of --mode conditional",
                    )  # fmt: skip
            self.e2e()  # every e2e parameter checked here (typed errors)
            for k in ("max_party_pairs", "max_published_pairs", "parties", "max_party_query_pairs"):
                if getattr(self, k) is not None:
                    check_int(k.replace("_", "-"), getattr(self, k), minimum=1)
            self.union_epsilon_given()
            if self.parties is not None:
                self.noise()
                self.union()
                if self.parties * self.party_pairs >= 1 << 32:  # slots travel as 4 bytes
                    raise InvalidParameterError(
                        "max-party-pairs", self.pair_bound, "a bound whose union of r lists of "
                        "L = bound + dummies entries has fewer than 2^32 slots",
                    )  # fmt: skip
                if self.is_input and self.parties * self.query_party_pairs >= 1 << 32:
                    raise InvalidParameterError(
                        "max-party-query-pairs", self.query_pair_bound, "a bound whose union "
                        "of r lists of bound + dummies entries has fewer than 2^32 slots",
                    )  # fmt: skip
            return
        for k in E2E_ONLY:
            if getattr(self, k) is not None:
                raise InvalidParameterError(
                    k.replace("_", "-"), getattr(self, k), "not set: it is an option of --mode e2e"
                )
        if self.objective is None:
            raise InvalidParameterError("objective", None, "kl | size (no default)")
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

    def e2e(self) -> E2EParams:
        """The end-to-end parameters the joint mode starts from: ``release ump``'s synthetic-id
        mode with ZEALOUS pair counts (m, the ε/δ split, U; the one noisy histogram a secure
        sum supports; MAD2R needs several adaptive rounds and is not offered jointly); the
        noise the joint mode adds is :meth:`noise`'s."""
        if self.mode != UmpMode.E2E:
            raise InvalidParameterError("mode", str(self.mode), "e2e for the e2e parameters")
        return _e2e_params(self.epsilon, self.delta, self.max_pairs, self.max_users, self.split,
                           str(self.schema or LogSchema.INPUT), self.period, self.max_events,
                           self.max_query_pairs)  # fmt: skip

    @property
    def is_input(self) -> bool:
        """The e2e mode writes the input's own columns (``--schema input``)."""
        return self.mode == UmpMode.E2E and self.schema == LogSchema.INPUT

    def with_parties(self, parties: int) -> CelsParams:
        """These parameters for ``parties`` data parties (the e2e noise shares need it)."""
        if self.mode != UmpMode.E2E:
            return self
        return dataclasses.replace(self, parties=parties)

    def noise(self) -> DistributedE2E:
        """The e2e mode's distributed noise and its privacy map (:mod:`.distributed`)."""
        if self.parties is None:
            raise InvalidParameterError(
                "parties", None, "the number of data parties (cels run, party and local set it "
                "from the shares or the configuration)",
            )  # fmt: skip
        ep = self.e2e()
        return _noise(ep, self.parties)

    def union_epsilon_given(self) -> float:
        """ε_u, which the e2e mode requires (no default: an ε spent is one the user stated);
        checked when the parameters are built, so before any share is read or budget charged."""
        if self.union_epsilon is None:
            raise InvalidParameterError("union-epsilon", None, UNION_EPSILON_REQUIRED)
        check_positive("union-epsilon", self.union_epsilon)
        return float(self.union_epsilon)

    def union(self) -> UnionDummies:
        """The dummy digests of the union and their privacy map against P0 (:mod:`.distributed`):
        (ε_u, δ_u) with ε_u = ``union_epsilon`` (required: :meth:`union_epsilon_given`) and
        δ_u = δ."""
        return self._union_of(self.e2e().max_pairs)

    def query_union(self) -> UnionDummies:
        """The dummy digests of the query pairs' union (``--schema input``): the same map with
        m_q; each union gets half of (ε_u, δ_u), so that P0's view of both is (ε_u, δ_u)."""
        st = self.e2e().statistics
        if st is None:
            raise InvalidParameterError("schema", str(self.schema), "input for query pairs")
        return self._union_of(st.max_query_pairs)

    def _union_of(self, m: int) -> UnionDummies:
        eps = self.union_epsilon_given()
        if self.parties is None:
            raise InvalidParameterError(
                "parties", None, "the number of data parties (cels run, party and local set it "
                "from the shares or the configuration)",
            )  # fmt: skip
        if self.is_input:  # two unions: half of (ε_u, δ_u) each
            return _union(self.parties, m, eps / 2, self.delta / 2)
        return _union(self.parties, m, eps, self.delta)

    @property
    def pair_bound(self) -> int:
        """The public bound on one party's distinct bounded pairs: ``max_party_pairs``, default
        min(m·U, 2^18)."""
        if self.max_party_pairs is not None:
            return self.max_party_pairs
        m = self.e2e().max_pairs
        return min(m * self.max_users, DEFAULT_PARTY_PAIRS) if self.max_users else (
            DEFAULT_PARTY_PAIRS)  # fmt: skip

    @property
    def party_pairs(self) -> int:
        """L: every party's list in the union has exactly this many entries — room for
        :attr:`pair_bound` pairs and the most dummy digests a party adds (:meth:`union`)."""
        return self.pair_bound + self.union().per_party

    @property
    def query_pair_bound(self) -> int:
        """The public bound on one party's distinct bounded query pairs (``--schema input``):
        ``max_party_query_pairs``, default min(m_q·U, 2^18)."""
        if self.max_party_query_pairs is not None:
            return self.max_party_query_pairs
        st = self.e2e().statistics
        mq = st.max_query_pairs if st is not None else 1
        return min(mq * self.max_users, DEFAULT_PARTY_PAIRS) if self.max_users else (
            DEFAULT_PARTY_PAIRS)  # fmt: skip

    @property
    def query_party_pairs(self) -> int:
        """L_q: every party's list in the query pairs' union has exactly this many entries."""
        return self.query_pair_bound + self.query_union().per_party

    @property
    def published_pairs(self) -> int:
        """K: at most this many pairs are published (the largest noisy counts above τ')."""
        return self.max_published_pairs or DEFAULT_PUBLISHED_PAIRS

    def cost(self) -> PrivacyCost:
        """What ``cels run`` and ``cels party`` spend (their ledger's ε and δ, what --budget
        charges). The e2e mode: the guarantee against P0, which sees the most — the output
        ((ε, δ), :meth:`readers_cost`) and its view of the union ((ε_u, δ_u), :meth:`union`),
        composed: (ε + ε_u, δ + δ_u), user-level add/remove (docs/privacy/cels.md §5). The
        conditional mode: the sampling given the counts under the CELS party model —
        conditional (the counts come from the private logs), so never charged to a budget."""
        base = self.readers_cost()
        if self.mode != UmpMode.E2E:
            return base
        unions = [self.union(), *([self.query_union()] if self.is_input else [])]
        parts = [u.part() for u in unions]
        if len(parts) == 2:
            parts[1] = dataclasses.replace(parts[1], name="query_union_view_p0")
        return PrivacyCost(Relation.USER, (*base.parts, *parts),
                           base.epsilon + sum(u.epsilon for u in unions),
                           base.delta + sum(u.delta for u in unions))  # fmt: skip

    def readers_cost(self) -> PrivacyCost:
        """The guarantee of the output alone, against its readers and against each data party
        (e2e: the noise shared out among the parties, :meth:`noise`) — unchanged by the union's
        dummies; what ``cels local``, which runs no protocol, spends."""
        if self.mode == UmpMode.E2E:
            return self.noise().cost()
        return PrivacyCost.of(Relation.USER_PARTIES, self.epsilon, self.delta,
                              name="sampling_given_counts", conditional=CONDITIONAL)  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        if self.mode == UmpMode.E2E:
            d = {k: v for k, v in self.e2e().to_dict().items()
                 if k not in ("pair_counts", "profile_noise_scale")}  # fmt: skip
            d |= {"mode": "e2e", "max_users": self.max_users, "parties": self.parties,
                  "party_pairs": self.pair_bound, "published_pairs": self.published_pairs,
                  "pair_bytes": PAIR_BYTES, "union_epsilon": self.union_epsilon}  # fmt: skip
            if self.is_input:
                d["statistics"] = {k: v for k, v in d["statistics"].items() if k != "query_pairs"}
                d["statistics"]["joint"] = JOINT_STATISTICS
                d["party_query_pairs"] = self.query_pair_bound
            if self.parties:
                d |= {"noise": self.noise().describe(), "union_list_length": self.party_pairs,
                      "union": self.union().describe()}  # fmt: skip
                if self.is_input:
                    d |= {"query_union_list_length": self.query_party_pairs,
                          "query_union": self.query_union().describe()}  # fmt: skip
            return d
        d = {k: v for k, v in asdict(self).items() if k not in E2E_ONLY}
        return d | {"b": self.b, "key_strength": key_strength(self.key_bits)}


@functools.lru_cache(maxsize=64)
def _union(parties: int, m: int, epsilon: float, delta: float) -> UnionDummies:
    return UnionDummies(parties, m, epsilon, delta)


@functools.lru_cache(maxsize=64)
def _e2e_params(
    epsilon: float, delta: float, max_pairs: int | None, max_users: int | None,
    split: tuple[float, float] | None, schema: str, period: str | None,
    max_events: int | None, max_query_pairs: int | None,
) -> E2EParams:  # fmt: skip
    """``release ump``'s parameters of the joint release: ZEALOUS pairs, synthetic ids, the
    schema's own split and rules — E capped (when not given) so that the ``events`` noise
    scale E/ε_events stays within the exact Pólya sampler's range (:func:`_joint_events`)."""
    ep = E2EParams.from_budget(
        epsilon=epsilon, delta=delta, max_pairs=max_pairs, ids="synthetic", split=split,
        max_users=max_users, pairs="zealous", schema=schema, max_events=max_events,
        max_query_pairs=max_query_pairs, period=parse_period(period),
    )  # fmt: skip
    st = ep.statistics
    if st is None or max_events is not None:
        return ep
    cap = _joint_events(st.eps("events"))
    if st.max_events <= cap:
        return ep
    st = dataclasses.replace(st, max_events=cap, max_events_rule=(
        f"{st.max_events_rule}; capped at {cap} in the joint version, the largest 16·2^(k/2) "
        f"whose noise scale E/ε_events is within the exact Pólya sampler's range "
        f"({MAX_POLYA_SCALE:g})"))  # fmt: skip
    return dataclasses.replace(ep, statistics=st)


def _joint_events(eps_events: float) -> int:
    """The largest candidate E = round(16·2^(k/2)) (the rule's grid) with E/ε_events within the
    exact Pólya sampler's range; at least 16 (a smaller budget is refused by the noise)."""
    best = SAMPLE_EVENTS
    for k in range(17):
        e = int(round(16 * 2 ** (k / 2)))
        if e / eps_events <= MAX_POLYA_SCALE:
            best = e
    return best


@functools.lru_cache(maxsize=64)
def _noise(ep: E2EParams, parties: int) -> DistributedE2E:
    return DistributedE2E(m=ep.max_pairs, eps_counts=ep.eps_counts, delta_counts=ep.delta_counts,
                          eps_profile=ep.eps_profile, parties=parties,
                          statistics=ep.statistics)  # fmt: skip


@dataclass
class Share:
    """One data party's input: its click histogram and file fingerprint. In the e2e mode
    (:meth:`read` with ``max_pairs``) the histogram is that of the *bounded* log — each user's
    first m distinct clicked pairs (:func:`~searchveil.release.ump.e2e.bounded_pairs`), so
    every count is a number of holders — and ``bounded`` holds those rows (user, item, query,
    url); with ``max_query_pairs`` (``--schema input``) ``log`` is the party's whole log (its
    statistics are computed on it) and ``query_pairs`` its bounded query pairs' holders
    (:func:`bounded_query_pairs`)."""

    hist: ClickHistogram
    info: dict[str, Any]
    bounded: pl.DataFrame | None = None
    log: SearchLog | None = None
    query_pairs: pl.DataFrame | None = None

    @classmethod
    def read(
        cls, path: Path, *, max_pairs: int | None = None, max_query_pairs: int | None = None
    ) -> Share:
        log = read_log(path)
        if max_pairs is None:
            return cls(click_histogram(log), log.ledger_input())
        bounded = bounded_pairs(log, max_pairs, countable_clicks(log))
        if max_query_pairs is None:
            return cls(click_histogram(bounded), log.ledger_input(), bounded)
        qp = bounded_query_pairs(log, max_query_pairs)
        return cls(click_histogram(bounded), log.ledger_input(), bounded, log, qp)

    @classmethod
    def for_params(cls, path: Path, params: CelsParams) -> Share:
        """The share as ``params``' mode reads it (the bounded log in e2e, its whole log too
        with the input's columns)."""
        if params.mode != UmpMode.E2E:
            return cls.read(path)
        ep = params.e2e()
        mq = ep.statistics.max_query_pairs if ep.statistics is not None else None
        return cls.read(path, max_pairs=ep.max_pairs, max_query_pairs=mq)


def check_e2e_party(params: CelsParams, share: Share | None, parties: int) -> None:
    """What a party checks of the e2e mode before it connects to anyone (so that no exact
    figure of its share ever reaches a peer in an error): ε_u is given, the parameters are for
    this many data parties, its users are within the declared U and its distinct bounded pairs
    within L (with ``share=None``: the first two, before the share is read)."""
    if params.mode != UmpMode.E2E:
        return
    params.union_epsilon_given()
    if params.parties != parties:
        raise InvalidParameterError(
            "parties", params.parties, f"{parties}, the data parties of the configuration"
        )
    if share is None:
        return
    users, pairs = int(share.info["users"]), share.hist.pairs.height
    check_declared_users(params.max_users, users)
    if pairs > params.pair_bound:
        raise InvalidParameterError(
            "max-party-pairs", params.pair_bound,
            f"a public bound >= this party's distinct bounded pairs ({pairs:,}): every party's "
            "list in the union has exactly that many entries plus the most dummy digests a "
            f"party adds ({params.union().per_party:,})",
        )  # fmt: skip
    if params.is_input:
        qp = share.query_pairs.height if share.query_pairs is not None else 0
        if share.query_pairs is None or qp > params.query_pair_bound:
            raise InvalidParameterError(
                "max-party-query-pairs", params.query_pair_bound,
                f"a public bound >= this party's distinct bounded query pairs ({qp:,}): every "
                "party's list in the query pairs' union has exactly that many entries plus the "
                f"most dummy digests a party adds ({params.query_union().per_party:,})",
            )  # fmt: skip


def countable_clicks(log: SearchLog) -> pl.DataFrame:
    """The clicks the e2e mode counts: every clicked pair whose query and url take at most
    :data:`PAIR_BYTES` bytes of UTF-8 together (a revealed pair has a fixed size; a public rule
    applied to every row alike, before each user's first m distinct pairs are kept)."""
    it = items(log, "clicks")
    size = pl.col("query").str.len_bytes() + pl.col("url").str.len_bytes()
    return it.filter(size <= PAIR_BYTES)


def bounded_query_pairs(log: SearchLog, max_query_pairs: int) -> pl.DataFrame:
    """This log's bounded query pairs as a holder histogram, ``query, url, holders`` (``url``:
    the next query): each user's first m_q distinct consecutive query pairs (Götz §2.1,
    :func:`~searchveil.release.ump.schema_stats.query_pair_items`; what ``release ump``'s
    ``query_pairs`` statistic counts), the pairs longer than :data:`PAIR_BYTES` (UTF-8, both
    queries together) left out first, as for the clicked pairs (a revealed item has a fixed
    size). Sorted by (query, url)."""
    it = query_pair_items(log_events(log))
    size = pl.col("query").str.len_bytes() + pl.col("next_query").str.len_bytes()
    bounded = bound_contributions(it.filter(size <= PAIR_BYTES), max_per_user=max_query_pairs,
                                  distinct=True)  # fmt: skip
    counts = count_by(bounded, ["query", "next_query"], distinct_users=True)
    return counts.select("query", pl.col("next_query").alias("url"),
                         pl.col("count").alias("holders")).sort("query", "url")  # fmt: skip


@dataclass
class PartyResult:
    output: pl.DataFrame
    ledger: dict[str, Any]
    digest: str
    stats: dict[str, Any] = field(default_factory=dict)
    #: the e2e mode's tables (log, counts, profile); empty in the conditional mode (log only)
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)


#: why a CELS release's (ε, δ) can never be charged to a budget
CONDITIONAL = (
    "the CELS counts x are computed from the parties' private logs and are not differentially "
    "private; only the sampling given them is covered by (ε, δ) (docs/privacy/cels.md)"
)
# fields of the public ledger that are functions of the sampled output, so they differ between
# neighbouring inputs under the same seed (the neighbour audit allows exactly these)
NOISY_FIELDS = ("noisy", "outputs.log.rows")
#: the same for the e2e mode: the sizes of its tables are the DP release's (log and counts)
E2E_NOISY_FIELDS = ("outputs.*.rows",)
