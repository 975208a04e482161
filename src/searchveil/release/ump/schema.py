"""The statistics behind a same-schema log with the input's own columns (docs/privacy/ump.md,
"Every column from a DP statistic"): what each statistic counts, how much one user may add to
it, and its share of the budget. Counting and noise: :mod:`.schema_stats`; the log laid out
from them: :mod:`.schema_log`.

Each statistic is a histogram (or a vector of per-item counts) to which every user adds a
bounded amount; the bound fixes the ℓ1 sensitivity and the discrete Laplace scale. Every bound
and every default is public: a constant of this module, a declared option, or a rule of
(ε, δ), the declared user bound U and the public reference sample bundled with searchveil —
never a figure of the log being released.

=================  =============================================================  ============
statistic          what one user adds                                              ℓ1
=================  =============================================================  ============
``events``         the number of their first E query events (the log's size)      E
``activity``       1 to the bin of that number (users by events)                  1
``months``         1 to each of the first 4 distinct months of those events        4
``days``           their first S events, by day of the period                     S
``hours``          their first S events, by hour of day                           S
``gaps``           the gaps between their first S events inside a session         S
``sessions``       their first 8 sessions (of the E events), by length            8
``clicks``         their first S events, by number of clicks                      S
``ranks``          their first S clicks (rows with a URL), by rank                S
``multiplicity``   16 of their distinct queries (holdings; a uniformly random     16
                   choice), by their events
``head_events``    per published query (pair) they hold among the d (d_c) the     (r−1)(d+d_c)
                   pair step counted: extra events (clicks) beyond the first, ≤ r−1
``head_share``     to the bin of their activity, the number of published queries  32
                   they hold (their first 32)
``head_profile``   1 to the cell of (their distinct queries among the E events,   1
                   the published queries among those, ≤ 32)
``pair_ranks``     per published pair they hold among those d_c: 1 to the rank    d_c
                   bin of their first click on it
``tail``           their first 8 distinct unpublished queries: each moves the     2·8
                   query between bins of its number of holders
``tail_initials``  their first 8 distinct unpublished queries, by first          8
                   character (a–z, 0–9, other)
``query_pairs``    ZEALOUS over their first m_q distinct consecutive query pairs  (ZEALOUS)
=================  =============================================================  ============

(S = :data:`SAMPLE_EVENTS`, r = :data:`MAX_REPEATS`; d, d_c the pair step's bounds.) All but
the query pairs are ε_i-DP discrete Laplace histograms; given the published pairs and queries
(an earlier output), adaptive composition; total: the sum of the ε_i, and ZEALOUS' δ.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.release.zealous.params import ZealousParams
from searchveil.synth.shape import day_number
from searchveil.validate import check_int, check_positive, check_probability

__all__ = [
    "INITIALS",
    "LogSchema",
    "MAX_REPEATS",
    "PROFILE_EDGES",
    "REFERENCE_DISTINCT_QUERY_PAIRS_PER_USER",
    "REFERENCE_EVENTS_PER_USER",
    "SAMPLE_EVENTS",
    "STATISTIC_WEIGHTS",
    "SchemaParams",
    "default_max_events",
    "default_max_query_pairs",
    "parse_period",
]


class LogSchema(StrEnum):
    """``--schema`` of the end-to-end log: ``input`` (the input's own columns — user, query,
    time, rank, URL — every one from a DP statistic; the default) or ``counts`` (AnonID, Query,
    ClickURL, Count: the published pairs dealt to synthetic users). The CELS joint version
    writes either."""

    INPUT = "input"
    COUNTS = "counts"


#: each user's first S query events feed the shape histograms (days, hours, gaps, clicks),
#: their first S clicks the rank histogram
SAMPLE_EVENTS = 16
#: sessions, holdings, tail queries and months counted per user
MAX_SESSIONS = 8
HOLDINGS = 16
TAIL_ITEMS = 8
MONTHS_PER_USER = 4
HEAD_HOLDINGS = 32
#: events (clicks) of one user on one published query (pair) counted, at most
MAX_REPEATS = 4
#: holders of an unpublished query: bins [e_i, e_{i+1})
TAIL_EDGES = (1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129)
#: published queries held per user, bins [e_i, e_{i+1}) of ``head_profile`` (≤ HEAD_HOLDINGS)
PROFILE_EDGES = (0, 1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33)
#: first characters of unpublished queries, one bin each, and a last bin for any other
INITIALS = "0123456789abcdefghijklmnopqrstuvwxyz"
#: the chance that a month nobody searched in enters the released period, at most
PERIOD_BETA = 1e-3
#: default U in the rule for E when no bound on the users is declared
RULE_USERS = 10_000

#: relative ε weights of the statistics (public constants; ``months`` is dropped when the
#: period is declared, ``pair_ranks`` with a SERP): what the log needs most precisely — its
#: query pairs and head — gets most
STATISTIC_WEIGHTS: dict[str, float] = {
    "query_pairs": 0.30, "head_events": 0.20, "head_share": 0.05, "head_profile": 0.08,
    "pair_ranks": 0.08, "tail": 0.08, "tail_initials": 0.03,
    "events": 0.10, "activity": 0.05, "months": 0.03, "days": 0.03, "hours": 0.03,
    "gaps": 0.03, "sessions": 0.03, "clicks": 0.03, "ranks": 0.03, "multiplicity": 0.03,
}  # fmt: skip

#: query events per user, (events, users), in the public reference sample bundled with
#: searchveil (its 215 random AOL users; src/searchveil/data); a test checks it against the file
REFERENCE_EVENTS_PER_USER: tuple[tuple[int, int], ...] = (
    (1, 19), (2, 10), (3, 14), (4, 10), (5, 7), (6, 6), (7, 6), (8, 7), (9, 5), (10, 2),
    (11, 5), (12, 10), (13, 6), (14, 3), (15, 4), (16, 3), (17, 6), (18, 6), (19, 3), (20, 2),
    (21, 3), (22, 4), (23, 5), (24, 3), (25, 2), (26, 2), (27, 2), (28, 1), (29, 1), (32, 2),
    (33, 1), (34, 1), (36, 1), (37, 1), (38, 2), (39, 1), (43, 1), (44, 1), (45, 1), (46, 2),
    (49, 2), (50, 3), (52, 1), (53, 1), (54, 2), (55, 1), (62, 1), (66, 1), (69, 1), (72, 1),
    (74, 1), (76, 1), (83, 1), (85, 1), (86, 1), (95, 1), (98, 1), (99, 1), (101, 1), (105, 1),
    (109, 1), (115, 1), (120, 1), (125, 1), (126, 1), (130, 2), (136, 2), (144, 1), (151, 1),
    (163, 1), (166, 1), (195, 1), (212, 1), (262, 1), (380, 1), (381, 1), (386, 1), (784, 1),
)  # fmt: skip

#: distinct consecutive query pairs (Götz §2.1) per user, (pairs, users), same sample
REFERENCE_DISTINCT_QUERY_PAIRS_PER_USER: tuple[tuple[int, int], ...] = (
    (1, 24), (2, 17), (3, 15), (4, 16), (5, 14), (6, 11), (7, 7), (8, 8), (9, 3), (10, 5),
    (11, 5), (12, 3), (13, 3), (14, 2), (15, 2), (17, 2), (18, 1), (19, 3), (20, 2), (21, 3),
    (22, 1), (23, 1), (24, 1), (26, 1), (27, 1), (28, 3), (29, 1), (31, 3), (32, 1), (33, 2),
    (38, 2), (45, 1), (46, 1), (50, 1), (55, 1), (57, 1), (62, 1), (66, 2), (69, 1), (70, 1),
    (85, 1), (89, 1), (92, 1), (110, 1), (112, 1), (156, 1), (170, 1), (195, 1), (266, 1),
)  # fmt: skip


def _expand(table: tuple[tuple[int, int], ...]) -> np.ndarray:
    return np.repeat(np.array([k for k, _ in table], dtype=np.float64), [n for _, n in table])


def default_max_events(*, epsilon: float, max_users: int | None) -> tuple[int, str]:
    """E, the events per user the size counts: among 16·2^(k/2) ≤ 4096, the one minimising
    (share of the reference sample's events beyond each user's E-th) + (relative std of the
    noisy total, √2·E/(ε·U·mean events per user of the sample)); U the declared bound
    (:data:`RULE_USERS` when none is declared). Public: (ε, U) and the reference sample."""
    a = _expand(REFERENCE_EVENTS_PER_USER)
    users = max_users if max_users is not None else RULE_USERS
    best = (math.inf, 16)
    for k in range(17):
        e = int(round(16 * 2 ** (k / 2)))
        cost = np.maximum(a - e, 0).sum() / a.sum() + math.sqrt(2) * e / (
            epsilon * users * a.mean()
        )
        if cost < best[0]:
            best = (cost, e)
    u = f"U = {users:,}" + ("" if max_users is not None else " (no --max-users: the rule's U)")
    return best[1], (
        f"E = {best[1]} minimises the reference sample's truncated share + the noisy total's "
        f"relative std at ε = {epsilon:.4g}, {u} (docs/privacy/ump.md)"
    )


@functools.lru_cache(maxsize=256)
def _zealous_pairs(epsilon: float, delta: float, m: int) -> ZealousParams:
    return ZealousParams.from_budget(epsilon=epsilon, delta=delta, m=m, item_type="query_pairs",
                                     guarantee="indistinguishability")  # fmt: skip


def default_max_query_pairs(*, epsilon: float, delta: float) -> tuple[int, str]:
    """m_q, the distinct query pairs per user ZEALOUS counts: the m ≤ 64 maximising
    E[min(K, m)]²/τ'(m) over the reference sample's distinct query pairs per user (the rule of
    the pair step's default m, docs/privacy/ump.md)."""
    ks = _expand(REFERENCE_DISTINCT_QUERY_PAIRS_PER_USER)
    best = (-1.0, 1)
    for m in range(1, 65):
        score = float(np.minimum(ks, m).mean()) ** 2 / _zealous_pairs(epsilon, delta, m).tau_prime
        if score > best[0]:
            best = (score, m)
    return best[1], (
        f"m_q = {best[1]} maximises E[min(K,m)]²/τ'(m) over the reference sample's distinct "
        "query pairs per user"
    )


def parse_period(text: str | None) -> tuple[int, int] | None:
    """``--period FIRST..LAST`` (ISO dates, inclusive) as day numbers; None if not given."""
    if text is None:
        return None
    try:
        a, b = (dt.date.fromisoformat(x.strip()) for x in text.split(".."))
    except ValueError:
        raise InvalidParameterError(
            "period", text, "FIRST..LAST, two ISO dates (e.g. 2006-03-01..2006-05-31)"
        ) from None
    if not a <= b or (b - a).days > 3660:
        raise InvalidParameterError("period", text, "FIRST..LAST with FIRST ≤ LAST, ≤ 10 years")
    return day_number(a), day_number(b)


@dataclass(frozen=True)
class SchemaParams:
    """The statistics' share (ε, δ) of a same-schema release and their public bounds; build
    with :meth:`from_budget`. ``head_queries``/``head_pairs``: the pair step's per-user bounds
    on the published queries and pairs it counted (d and d_c), which bound ``head_events`` and
    ``pair_ranks``."""

    epsilon: float
    delta: float
    max_events: int
    max_query_pairs: int
    head_queries: int
    head_pairs: int
    period: tuple[int, int] | None = None
    serp: bool = False
    max_events_rule: str = "given (--max-events)"
    max_query_pairs_rule: str = "given (--max-query-pairs)"

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        check_probability("delta", self.delta)
        check_int("max-events", self.max_events, minimum=SAMPLE_EVENTS, maximum=1 << 20)
        check_int("max-query-pairs", self.max_query_pairs, minimum=1, maximum=4096)
        check_int("head_queries", self.head_queries, minimum=1)
        check_int("head_pairs", self.head_pairs, minimum=1)
        self.query_pair_params()  # ZEALOUS must be solvable within its share

    @classmethod
    def from_budget(
        cls, *, epsilon: float, delta: float, head_queries: int, head_pairs: int,
        max_users: int | None = None, max_events: int | None = None,
        max_query_pairs: int | None = None, period: tuple[int, int] | None = None,
        serp: bool = False,
    ) -> SchemaParams:  # fmt: skip
        """The statistics for their share (ε, δ); E and m_q by their public rules unless given."""
        probe = cls(epsilon=epsilon, delta=delta, max_events=SAMPLE_EVENTS, max_query_pairs=1,
                    head_queries=head_queries, head_pairs=head_pairs, period=period,
                    serp=serp)  # fmt: skip
        if max_events is None:
            e, e_rule = default_max_events(epsilon=probe.eps("events"), max_users=max_users)
        else:
            e, e_rule = check_int("max-events", max_events, minimum=SAMPLE_EVENTS), None
        if max_query_pairs is None:
            q, q_rule = default_max_query_pairs(epsilon=probe.eps("query_pairs"), delta=delta)
        else:
            q, q_rule = check_int("max-query-pairs", max_query_pairs, minimum=1), None
        return cls(epsilon=epsilon, delta=delta, max_events=e, max_query_pairs=q,
                   head_queries=head_queries, head_pairs=head_pairs, period=period, serp=serp,
                   max_events_rule=e_rule or cls.max_events_rule,
                   max_query_pairs_rule=q_rule or cls.max_query_pairs_rule)  # fmt: skip

    # -- the split --------------------------------------------------------------------------
    def names(self) -> list[str]:
        """The statistics this release draws, in ledger order."""
        drop = {"months"} if self.period is not None else set()
        drop |= {"pair_ranks"} if self.serp else set()
        return [k for k in STATISTIC_WEIGHTS if k not in drop]

    def eps(self, name: str) -> float:
        w = {k: STATISTIC_WEIGHTS[k] for k in self.names()}
        return self.epsilon * w[name] / sum(w.values())

    def l1(self, name: str) -> int:
        """The ℓ1 sensitivity of a Laplace statistic (module docstring)."""
        s = SAMPLE_EVENTS
        return {
            "events": self.max_events, "activity": 1, "months": MONTHS_PER_USER, "days": s,
            "hours": s, "gaps": s, "sessions": MAX_SESSIONS, "clicks": s, "ranks": s,
            "multiplicity": HOLDINGS, "tail": 2 * TAIL_ITEMS, "pair_ranks": self.head_pairs,
            "head_share": HEAD_HOLDINGS, "head_profile": 1, "tail_initials": TAIL_ITEMS,
            "head_events": (MAX_REPEATS - 1) * (self.head_queries + self.head_pairs),
        }[name]  # fmt: skip

    def noise(self, name: str) -> DiscreteLaplace:
        return _laplace(self.eps(name), self.l1(name))

    def query_pair_params(self) -> ZealousParams:
        return _zealous_pairs(self.eps("query_pairs"), self.delta, self.max_query_pairs)

    def privacy(self) -> dict[str, Any]:
        """(ε, δ), split and events of the statistics."""
        zpr = self.query_pair_params().privacy("exact")
        split: dict[str, Any] = {}
        events: list[dict[str, Any]] = []
        for name in self.names():
            if name == "query_pairs":
                split[name] = {"epsilon": float(zpr["epsilon"]), "delta": float(zpr["delta"])}
                for ev in zpr["events"]:
                    events.append({**ev, "step": f"query_pairs.{ev.get('step', 'zealous')}"})
                continue
            lap = self.noise(name)
            e = lap.epsilon(self.l1(name))
            split[name] = {"epsilon": e, "delta": 0.0}
            events.append({"step": name, "mechanism": "discrete_laplace_histogram",
                           "noise": lap.describe(), "l1_sensitivity": self.l1(name),
                           "epsilon": e, "delta": 0.0})  # fmt: skip
        return {"epsilon": sum(s["epsilon"] for s in split.values()),
                "delta": sum(s["delta"] for s in split.values()), "split": split,
                "events": events}  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        zp = self.query_pair_params()
        return {
            "epsilon": self.epsilon, "delta": self.delta, "max_events": self.max_events,
            "max_events_rule": self.max_events_rule, "sample_events": SAMPLE_EVENTS,
            "max_sessions": MAX_SESSIONS, "holdings": HOLDINGS, "tail_items": TAIL_ITEMS,
            "months_per_user": MONTHS_PER_USER, "max_repeats": MAX_REPEATS,
            "max_query_pairs": self.max_query_pairs,
            "max_query_pairs_rule": self.max_query_pairs_rule,
            "query_pairs": {"mechanism": "zealous", "lambda": zp.lam, "tau": zp.tau,
                            "tau_prime": zp.tau_prime},
            "period": None if self.period is None else [_iso(d) for d in self.period],
            "period_rule": "declared (--period)" if self.period is not None else
            f"released: the months whose noisy count of users exceeds λ·ln(600/β), β = "
            f"{PERIOD_BETA}",
            "item_ranks": "public SERP (--serp)" if self.serp else "noisy rank per pair",
            "noise_scales": {k: self.noise(k).scale for k in self.names() if k != "query_pairs"},
            "weights": {k: STATISTIC_WEIGHTS[k] for k in self.names()},
        }  # fmt: skip


def _iso(day: int) -> str:
    return (dt.date(1970, 1, 1) + dt.timedelta(days=day)).isoformat()


@functools.lru_cache(maxsize=256)
def _laplace(epsilon: float, l1: int) -> DiscreteLaplace:
    return DiscreteLaplace.for_epsilon(epsilon, l1)
