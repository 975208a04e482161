"""The end-to-end differentially private same-schema release (the default of ``release ump``;
docs/privacy/ump.md, "The end-to-end mode", which holds the proof).

Pipeline — nothing after the noisy statistics reads the log:

1. **Pair counts** (``pairs``): the query-click release of probe-reweight-2r (queries, then
   pairs among their clicks, fresh Laplace holder counts) or ZEALOUS over each user's first
   ``m`` distinct clicked pairs — (ε_c, δ_c)-DP.
2. ``ids="synthetic"``, ``schema="input"`` (the default): **every column from a DP
   statistic** (:mod:`.schema`, :mod:`.schema_stats`: the log's size, period, times, sessions,
   clicks, ranks, the published head's events and ranks, query pairs, the tail), then the log
   **laid out** in the input's own columns (:mod:`.schema_log` on
   :mod:`searchveil.synth.layout`). Total (ε_c + ε_s, δ_c + δ_s).
   ``schema="counts"``: the **activity profile** — users holding
   exactly j published pairs, plus DLap(1/ε_h) — and the log (AnonID, Query, ClickURL, Count)
   **generated** from both (:mod:`.generate`). Total (ε_c + ε_h, δ_c).
   ``ids="real"``: Hong et al.'s sampling of real holders (:mod:`.real_ids`). Total
   (ε_c + b, δ_c + (1 − e^{−b}) + γ).

Any DP log with real ids shows each user with probability ≤ δ (the theorem in the docs): empty
or nearly so at every δ < 1/U; the synthetic ids are the default.

Decisions: the holders of a pair are weighted 1 each (the bounded log holds a pair once per user);
the default ``m`` is :func:`default_max_pairs` (public: (ε_c, δ_c) and a public reference sample);
the ε split is ``split`` (pair counts / the rest: 0.7 / 0.3 for the input's columns, 0.9 / 0.1
for the counts log; inside probe-reweight-2r, :data:`SELECTION_SPLIT`); δ goes 3/4 to the pair
counts, 1/4 to the query pairs with the input's columns; with real ids δ is split 1/2 pair
counts, 1/4 sampler, 1/4 lower bounds, and ε_c = ε − b.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.bounding import bound_contributions
from searchveil.engines.contract import BoundedCounts
from searchveil.errors import InternalError, InvalidParameterError
from searchveil.io.ledger import build_ledger
from searchveil.mechanisms.budget import Part, PrivacyCost, Relation
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.selection import default_d
from searchveil.model import SearchLog, items
from searchveil.release.counts import count_by
from searchveil.release.histogram import (
    HistogramRelease,
    check_declared_users,
    delta_users_check,
    release_delta_check,
)
from searchveil.release.korolova.release import single_user_counts
from searchveil.release.selection import SelectionParams, release_selection
from searchveil.release.ump.generate import generated_tables
from searchveil.release.ump.metrics import counts_log_metrics
from searchveil.release.ump.real_ids import E2EObjective, lower_bound_margin, real_id_tables
from searchveil.release.ump.schema import LogSchema, SchemaParams
from searchveil.release.ump.schema_log import same_schema_metrics, same_schema_tables
from searchveil.release.zealous.params import ZealousParams
from searchveil.release.zealous.release import release_zealous_counts
from searchveil.rng import RandomSource
from searchveil.synth.layout import Columns
from searchveil.validate import check_int, check_positive, check_probability, parse_choice

__all__ = [
    "E2EParams",
    "MECHANISM_REAL",
    "MECHANISM_SYNTHETIC",
    "REFERENCE_DISTINCT_PAIRS_PER_USER",
    "UmpMode",
    "UserIds",
    "bounded_pairs",
    "default_max_pairs",
    "release_ump_e2e",
]

MECHANISM_SYNTHETIC = "ump-e2e-synthetic-ids"
MECHANISM_REAL = "ump-e2e-real-ids"
NOTION = (
    "(ε, δ)-differential privacy of everything written (end to end: counts, allocation and "
    "log; docs/privacy/ump.md)"
)
MAX_PAIRS_LIMIT = 4096
DEFAULT_MAX_PAIRS_CAP = 64
#: δ shares with real ids: pair counts, sampler (1 − e^{−b}), lower-bound failure γ
REAL_DELTA_SHARES = (0.5, 0.25, 0.25)
#: δ share of the statistics (their query pairs) with the input's columns
STATISTICS_DELTA_SHARE = 0.25
#: the probe-reweight-2r pair step's ε weights (select queries, query counts, select URLs,
#: click counts) per log schema: with the input's columns the released queries are the log's
#: head (its only real query strings), so their selection gets twice the others' share
SELECTION_SPLIT = {LogSchema.INPUT: (2.0, 1.0, 1.0, 1.0), LogSchema.COUNTS: (1.0, 1.0, 1.0, 1.0)}
#: default ε weights (pair counts, the rest) per log schema
DEFAULT_SPLIT = {LogSchema.INPUT: (0.7, 0.3), LogSchema.COUNTS: (0.9, 0.1)}

#: distinct clicked (query, url) pairs per user, (count, users), in the public reference sample
#: bundled with searchveil (the 168 of its 215 random AOL users who clicked; src/searchveil/data).
#: A public population model for the default m, never the log being released; a test checks it
#: against the bundled file.
REFERENCE_DISTINCT_PAIRS_PER_USER: tuple[tuple[int, int], ...] = (
    (1, 26), (2, 13), (3, 14), (4, 6), (5, 8), (6, 7), (7, 9), (8, 5), (9, 7), (10, 4), (11, 2),
    (12, 2), (13, 1), (14, 1), (15, 4), (16, 1), (18, 4), (20, 3), (21, 2), (22, 1), (23, 2),
    (24, 2), (25, 4), (27, 2), (28, 1), (29, 2), (31, 2), (34, 1), (35, 1), (37, 1), (38, 2),
    (45, 2), (52, 1), (53, 1), (54, 1), (55, 2), (56, 1), (57, 1), (60, 1), (75, 1), (78, 2),
    (87, 1), (97, 1), (115, 2), (128, 1), (137, 1), (150, 1), (175, 1), (178, 1), (179, 1),
    (198, 1), (200, 1), (271, 1), (396, 1), (448, 1),
)  # fmt: skip


class UmpMode(StrEnum):
    """``--mode``: ``e2e`` (DP end to end, the default) or ``conditional`` (the papers' counts
    from the exact histogram — NOT differentially private; for reproducing their tables)."""

    E2E = "e2e"
    CONDITIONAL = "conditional"


class UserIds(StrEnum):
    """``--ids`` of the end-to-end mode: ``synthetic`` (a log generated from DP statistics) or
    ``real`` (Hong et al.'s sampling of real holders; empty or nearly so at δ < 1/U)."""

    SYNTHETIC = "synthetic"
    REAL = "real"


class PairStep(StrEnum):
    """``--pairs``: the DP release of pair counts the log is built from. ``probe-reweight-2r``
    (formerly ``mad2r``, accepted): ``release korolova --selection probe-reweight-2r
    --max-clicks m`` (query selection, then pair selection among their clicks, fresh Laplace
    click counts; the released queries are published too); ``zealous``: ZEALOUS over clicks
    (one noisy thresholded histogram; what the CELS joint version runs, and real ids need)."""

    PROBE_REWEIGHT_2R = "probe-reweight-2r"
    ZEALOUS = "zealous"

    @classmethod
    def _missing_(cls, value: object) -> PairStep | None:
        return cls.PROBE_REWEIGHT_2R if value == "mad2r" else None  # the deprecated name


@functools.lru_cache(maxsize=512)
def _zealous(epsilon: float, delta: float, m: int) -> ZealousParams:
    return ZealousParams.from_budget(
        epsilon=epsilon, delta=delta, m=m, item_type="clicks", guarantee="indistinguishability"
    )


def default_max_pairs(*, epsilon: float, delta: float) -> tuple[int, str]:
    """The default m from the pair-count step's (ε_c, δ_c) and public knowledge only: the
    m ≤ 64 maximising E[min(K, m)]² / τ'(m), with K the distinct clicked pairs per user of the
    public reference sample (:data:`REFERENCE_DISTINCT_PAIRS_PER_USER`) and τ'(m) the ZEALOUS
    threshold. Why: a pair whose holders keep it among their first m has count ∝ E[min(K, m)];
    with a power-law tail of pair popularity (pairs with more than t holders ∝ t^−2) the rows of
    the published pairs grow as E[min(K, m)]² / τ'(m) (docs/privacy/ump.md)."""
    ks = np.repeat(
        np.array([k for k, _ in REFERENCE_DISTINCT_PAIRS_PER_USER], dtype=np.float64),
        [n for _, n in REFERENCE_DISTINCT_PAIRS_PER_USER],
    )
    best = (-1.0, 1)
    for m in range(1, DEFAULT_MAX_PAIRS_CAP + 1):
        score = float(np.minimum(ks, m).mean()) ** 2 / _zealous(epsilon, delta, m).tau_prime
        if score > best[0]:
            best = (score, m)
    m = best[1]
    return m, (
        f"m = {m} maximises E[min(K,m)]²/τ'(m) over the public reference sample's distinct "
        "clicked pairs per user (docs/privacy/ump.md)"
    )


@dataclass(frozen=True)
class E2EParams:
    """Parameters of the end-to-end release; build with :meth:`from_budget` (default m, the
    δ < 1/U refusal, the statistics of the input's columns with their default rules)."""

    epsilon: float
    delta: float
    max_pairs: int
    ids: UserIds | str = UserIds.SYNTHETIC
    objective: E2EObjective | str = E2EObjective.SIZE
    #: ε weights (pair counts, the rest); ``None``: :data:`DEFAULT_SPLIT` of the schema
    split: tuple[float, float] | None = None
    max_users: int | None = None
    max_pairs_rule: str = "given (--max-pairs)"
    #: ``None``: probe-reweight-2r with synthetic ids, zealous with real ids
    pairs: PairStep | str | None = None
    #: ``None``: the input's columns with synthetic ids, the counts log with real ids
    schema: LogSchema | str | None = None
    #: the statistics of ``schema="input"`` (``None``: built with their default rules)
    statistics: SchemaParams | None = None

    def __post_init__(self) -> None:
        self._resolve_schema()
        real = parse_choice("ids", self.ids, UserIds) == UserIds.REAL
        default = PairStep.ZEALOUS if real else PairStep.PROBE_REWEIGHT_2R
        pairs = default if self.pairs is None else parse_choice("pairs", self.pairs, PairStep)
        object.__setattr__(self, "pairs", pairs)
        if real and self.pairs != "zealous":
            raise InvalidParameterError(
                "pairs", str(self.pairs), "zealous with --ids real (the lower confidence "
                "bounds need one noisy count per pair with a known per-user bound)",
            )  # fmt: skip
        check_positive("epsilon", self.epsilon)
        check_probability("delta", self.delta)
        check_int("max-pairs", self.max_pairs, minimum=1, maximum=MAX_PAIRS_LIMIT)
        object.__setattr__(self, "ids", parse_choice("ids", self.ids, UserIds))
        object.__setattr__(
            self, "objective", parse_choice("objective", self.objective, E2EObjective)
        )
        if (
            self.split is None
            or len(self.split) != 2
            or not all(
                isinstance(w, int | float) and w > 0 and math.isfinite(w) for w in self.split
            )
        ):
            raise InvalidParameterError(
                "split", self.split, "2 positive weights (pair counts, the rest)"
            )
        if self.max_users is not None:
            check_int("max-users", self.max_users, minimum=1)
            if not self.delta < 1.0 / self.max_users:
                raise InvalidParameterError("delta", self.delta, f"a number < 1/U = "
                    f"{1.0 / self.max_users:.3g} (--max-users {self.max_users}; δ = 1/(10·U) = "
                    f"{0.1 / self.max_users:.3g} is the documented choice)")  # fmt: skip
        if self.ids == UserIds.REAL and not self.epsilon > self.b:
            b = f"a number > b = {self.b:.3g} (the sampler's share)"
            raise InvalidParameterError("epsilon", self.epsilon, b)
        self.pair_privacy()  # the pair-count step must be solvable within its share
        if self.schema == LogSchema.INPUT:
            self._check_statistics()

    def _resolve_schema(self) -> None:
        real = parse_choice("ids", self.ids, UserIds) == UserIds.REAL
        schema = (LogSchema.COUNTS if real else LogSchema.INPUT) if self.schema is None else (
            parse_choice("schema", self.schema, LogSchema))  # fmt: skip
        if real and schema == LogSchema.INPUT:
            raise InvalidParameterError("schema", str(schema), "counts with --ids real")
        object.__setattr__(self, "schema", schema)
        if self.split is None:
            object.__setattr__(self, "split", DEFAULT_SPLIT[schema])
        if schema == LogSchema.COUNTS and self.statistics is not None:
            raise InvalidParameterError("statistics", "given", "none with --schema counts")

    def _check_statistics(self) -> None:
        """The statistics' share and bounds must be this release's (built here if not given)."""
        d, d_c = self.head_bounds()
        st = self.statistics
        if st is None:
            st = SchemaParams.from_budget(epsilon=self.eps_profile, delta=self.delta_statistics,
                                          head_queries=d, head_pairs=d_c,
                                          max_users=self.max_users)  # fmt: skip
            object.__setattr__(self, "statistics", st)
        share = (st.epsilon, st.delta, st.head_queries, st.head_pairs)
        if not np.allclose(share, (self.eps_profile, self.delta_statistics, d, d_c), rtol=1e-12):
            raise InvalidParameterError(
                "statistics", "given", "the share (ε, δ) and the pair step's bounds (d, d_c) "
                "of this release (build them with E2EParams.from_budget)",
            )  # fmt: skip

    def head_bounds(self) -> tuple[int, int]:
        """(d, d_c): the published queries and pairs one user is counted in by the pair step."""
        if self.pairs == PairStep.ZEALOUS:
            return self.max_pairs, self.max_pairs
        sp = self.select()
        assert sp.d_c is not None
        return sp.d, sp.d_c

    @classmethod
    def from_budget(
        cls,
        *,
        epsilon: float,
        delta: float,
        max_pairs: int | None = None,
        ids: UserIds | str = UserIds.SYNTHETIC,
        objective: E2EObjective | str = E2EObjective.SIZE,
        split: tuple[float, float] | None = None,
        max_users: int | None = None,
        pairs: PairStep | str | None = None,
        schema: LogSchema | str | None = None,
        max_events: int | None = None,
        max_query_pairs: int | None = None,
        period: tuple[int, int] | None = None,
        serp: bool = False,
    ) -> E2EParams:
        """The parameters for a total (ε, δ); without ``max_pairs`` the default rule
        (:func:`default_max_pairs`) picks m from the pair-count step's share alone; ``pairs``
        defaults to ``probe-reweight-2r`` with synthetic ids and ``zealous`` with real ids;
        ``schema`` to the input's columns with synthetic ids, whose statistics take
        ``max_events``, ``max_query_pairs`` (default: their rules), a declared ``period``
        (day numbers) and ``serp`` (ranks of published pairs from a public SERP)."""
        probe = cls(epsilon=epsilon, delta=delta, max_pairs=1, ids=ids, objective=objective,
                    split=split, max_users=max_users, pairs=pairs, schema=schema)  # fmt: skip
        if max_pairs is None:
            m, rule = default_max_pairs(epsilon=probe.eps_counts, delta=probe.delta_counts)
        else:
            m, rule = check_int("max-pairs", max_pairs, minimum=1), "given (--max-pairs)"
        base = cls(epsilon=epsilon, delta=delta, max_pairs=m, ids=ids, objective=objective,
                   split=probe.split, max_users=max_users, max_pairs_rule=rule,
                   pairs=probe.pairs, schema=probe.schema)  # fmt: skip
        if base.schema != LogSchema.INPUT:
            for name, v in (("max-events", max_events), ("max-query-pairs", max_query_pairs),
                            ("period", period), ("serp", serp or None)):  # fmt: skip
                if v is not None:
                    raise InvalidParameterError(name, v, "not set with --schema counts")
            return base
        d, d_c = base.head_bounds()
        st = SchemaParams.from_budget(
            epsilon=base.eps_profile, delta=base.delta_statistics, head_queries=d,
            head_pairs=d_c, max_users=max_users, max_events=max_events,
            max_query_pairs=max_query_pairs, period=period, serp=serp,
        )  # fmt: skip
        return cls(epsilon=epsilon, delta=delta, max_pairs=m, ids=ids, objective=objective,
                   split=base.split, max_users=max_users, max_pairs_rule=rule,
                   pairs=base.pairs, schema=base.schema, statistics=st)  # fmt: skip

    # -- the split ------------------------------------------------------------------------
    @property
    def delta_counts(self) -> float:
        if self.ids == UserIds.REAL:
            return self.delta * REAL_DELTA_SHARES[0]
        return self.delta - self.delta_statistics

    @property
    def delta_statistics(self) -> float:
        """δ of the statistics (their query pairs) with the input's columns."""
        return self.delta * STATISTICS_DELTA_SHARE if self.schema == LogSchema.INPUT else 0.0

    @property
    def delta_sampler(self) -> float:
        """1 − e^{−b}: each user's probability of appearing (real ids)."""
        return self.delta * REAL_DELTA_SHARES[1] if self.ids == UserIds.REAL else 0.0

    @property
    def gamma(self) -> float:
        """The probability, per user, that a lower bound fails (real ids)."""
        return self.delta * REAL_DELTA_SHARES[2] if self.ids == UserIds.REAL else 0.0

    @property
    def b(self) -> float:
        """The sampler's ε and every user's load bound: b = −ln(1 − δ_s) (real ids)."""
        return -math.log1p(-self.delta_sampler) if self.ids == UserIds.REAL else 0.0

    @property
    def eps_counts(self) -> float:
        if self.ids == UserIds.REAL:
            return self.epsilon - self.b
        assert self.split is not None
        return self.epsilon * self.split[0] / sum(self.split)

    @property
    def eps_profile(self) -> float:
        """ε of the second part: the activity profile (counts log) or the statistics (input's
        columns)."""
        if self.ids == UserIds.REAL:
            return 0.0
        assert self.split is not None
        return self.epsilon * self.split[1] / sum(self.split)

    def zealous(self) -> ZealousParams:
        return _zealous(self.eps_counts, self.delta_counts, self.max_pairs)

    def select(self) -> SelectionParams:
        """The query-click release of ``pairs="probe-reweight-2r"``: d by its own public default
        rule, d_c = m, the selection family's equal split of the pair step's (ε_c, δ_c)."""
        strategy = PairStep.PROBE_REWEIGHT_2R.value
        w = SELECTION_SPLIT[LogSchema(str(self.schema))]
        probe = SelectionParams(strategy=strategy, epsilon=self.eps_counts, delta=self.delta_counts,
                                d=1, d_c=self.max_pairs, split=w)  # fmt: skip
        d, rule = default_d(strategy, epsilon=probe.eps_selection, delta=probe.delta_selection)
        return SelectionParams(strategy=strategy, epsilon=self.eps_counts, delta=self.delta_counts,
                               d=d, d_c=self.max_pairs, split=w, d_rule=rule)  # fmt: skip

    def pair_privacy(self) -> dict[str, Any]:
        """(ε, δ) and events of the pair-count step."""
        if self.pairs == PairStep.ZEALOUS:
            zpr = self.zealous().privacy("exact")
            return {"epsilon": float(zpr["epsilon"]), "delta": float(zpr["delta"]),
                    "events": list(zpr["events"])}  # fmt: skip
        sp = self.select()
        pr = sp.privacy()
        event = {"step": "query_click_release",
                 "mechanism": f"query-release-selection ({self.pairs})",
                 "d": sp.d, "d_c": sp.d_c, "epsilon": pr["epsilon"], "delta": pr["delta"],
                 "note": "its own events are in the selection family's ledger "
                 "(docs/privacy/selection.md); basic composition of its four steps"}  # fmt: skip
        return {"epsilon": pr["epsilon"], "delta": pr["delta"], "events": [event]}

    def profile_noise(self) -> DiscreteLaplace:
        return DiscreteLaplace.for_epsilon(self.eps_profile, 1)

    def privacy(self) -> dict[str, Any]:
        """The exact (ε, δ) of the whole pipeline, its split and one event per step."""
        ppr = self.pair_privacy()
        events = list(ppr["events"])
        eps, dl = float(ppr["epsilon"]), float(ppr["delta"])
        split: dict[str, Any] = {"pair_counts": {"epsilon": eps, "delta": dl}}
        if self.statistics is not None:
            spr = self.statistics.privacy()
            events += spr["events"]
            split |= spr["split"]
            split["layout"] = {"epsilon": 0.0, "delta": 0.0, "note": "post-processing"}
            eps += spr["epsilon"]
            dl += spr["delta"]
        elif self.ids == UserIds.SYNTHETIC:
            lap = self.profile_noise()
            e_h = lap.epsilon(1)
            events.append({"step": "activity_profile", "mechanism": "discrete_laplace_histogram",
                           "noise": lap.describe(), "l1_sensitivity": 1, "bins": self.max_pairs,
                           "epsilon": e_h, "delta": 0.0})  # fmt: skip
            split["activity_profile"] = {"epsilon": e_h, "delta": 0.0}
            split["generation"] = {"epsilon": 0.0, "delta": 0.0, "note": "post-processing"}
            eps += e_h
        else:
            tg = lower_bound_margin(self.zealous(), gamma=self.gamma)
            events.append({"step": "lower_bounds", "margin_tau_gamma": tg, "epsilon": 0.0,
                           "delta": self.gamma, "note": "P[a holder count below its bound] "
                           "over a user's m pairs"})  # fmt: skip
            events.append({"step": "multinomial_sampling", "b": self.b, "epsilon": self.b,
                           "delta": self.delta_sampler, "reference": "Hong et al. EDBT 2012 "
                           "Thm 1, robust top-m constraint"})  # fmt: skip
            split["lower_bounds"] = {"epsilon": 0.0, "delta": self.gamma}
            split["sampling"] = {"epsilon": self.b, "delta": self.delta_sampler}
            eps += self.b
            dl += self.delta_sampler + self.gamma
        return {"epsilon": eps, "delta": dl, "split": split, "events": events}

    def cost(self) -> PrivacyCost:
        """What the release spends: user-level, one part per step of :meth:`privacy`'s split
        (the probe-reweight-2r pair step keeps its zCDP ρ). Each part is within its share of (ε, δ):
        the pair step's own release checks its cost, the profile's noise is calibrated to ε_h."""
        pr = self.privacy()
        sel = (self.select().cost().as_part("pair_counts")
               if self.pairs == PairStep.PROBE_REWEIGHT_2R else None)  # fmt: skip
        parts = [sel if sel and k == "pair_counts" else Part(k, v["epsilon"], v["delta"])
                 for k, v in pr["split"].items()]  # fmt: skip
        return PrivacyCost(Relation.USER, tuple(parts), pr["epsilon"], pr["delta"])

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("max_users")
        d["split"] = list(self.split or ())
        d["statistics"] = self.statistics.to_dict() if self.statistics is not None else None
        if self.pairs == PairStep.ZEALOUS:
            zp = self.zealous()
            d["pair_counts"] = {"mechanism": "zealous", "lambda": zp.lam, "tau": zp.tau,
                                "tau_prime": zp.tau_prime, "epsilon": self.eps_counts,
                                "delta": self.delta_counts}  # fmt: skip
        else:
            d["pair_counts"] = {"mechanism": "query-release-selection"} | self.select().to_dict()
        if self.ids == UserIds.REAL:
            zp = self.zealous()
            d |= {"b": self.b, "tau_gamma": lower_bound_margin(zp, gamma=self.gamma)}
        elif self.schema == LogSchema.COUNTS:
            d |= {"profile_noise_scale": self.profile_noise().scale}
        return d


# -- the steps ---------------------------------------------------------------------------------
def bounded_pairs(log: SearchLog, m: int, clicks: pl.DataFrame | None = None) -> pl.DataFrame:
    """Step 1: ``user, item, query, url`` — each user's first m distinct clicked pairs
    (``clicks``: ``items(log, "clicks")`` if already computed)."""
    it = items(log, "clicks") if clicks is None else clicks
    return bound_contributions(it, max_per_user=m, distinct=True).select(
        "user", "item", "query", "url"
    )


def _pair_counts(
    log: SearchLog, clicks: pl.DataFrame, bounded: pl.DataFrame, zp: ZealousParams, *,
    rng: RandomSource,
) -> HistogramRelease:  # fmt: skip
    """Step 2: ZEALOUS over the bounded pairs (the one definition of its noise and accounting)."""
    counts = count_by(bounded, ["item", "query", "url"], distinct_users=True)
    bc = BoundedCounts(
        counts={"items": counts},
        figures={"users": log.n_users, "items": clicks.height,
                 "items_after_bounding": bounded.height},
        input=log.ledger_input(),
    )  # fmt: skip
    # the exact single-user exposure for the (private) report
    single = single_user_counts(clicks, counts, "item")
    return release_zealous_counts(bc, zp, rng=rng, single_user=single)


def _pairs_step(
    log: SearchLog, params: E2EParams, *, rng: RandomSource
) -> tuple[pl.DataFrame, dict[str, pl.DataFrame], pl.DataFrame, dict[str, Any]]:
    """Step 2 (module docstring): the published pairs (``query, url, noisy_count``), other
    published tables, the bounded pairs every user holds (``user, item, query, url``: what the
    counts counted, for the profile and the sampler) and the private single-user figures."""
    clicks = items(log, "clicks")
    if params.pairs == PairStep.ZEALOUS:
        bounded = bounded_pairs(log, params.max_pairs, clicks)
        zrel = _pair_counts(log, clicks, bounded, params.zealous(), rng=rng)
        return zrel.tables["items"], {}, bounded, zrel.report["single_user"]
    sp = params.select()
    srel = release_selection(log, sp, rng=rng, max_users=params.max_users)
    published = srel.tables["clicks"]
    # what the click counts counted: each user's first d_c distinct pairs on released queries
    # among their first click_pool distinct pairs (docs/privacy/selection.md)
    assert sp.click_pool is not None and sp.d_c is not None
    pool = bound_contributions(clicks, max_per_user=sp.click_pool, distinct=True)
    on_released = pool.join(srel.tables["queries"].select("query"), on="query", how="semi")
    bounded = bound_contributions(on_released, max_per_user=sp.d_c, distinct=True).select(
        "user", "item", "query", "url"
    )
    return published, {"queries": srel.tables["queries"]}, bounded, srel.report["single_user"]


def activity_profile(bounded: pl.DataFrame, published: pl.DataFrame, m: int) -> np.ndarray:
    """Exact a_j (j = 1…m): the users of the bounded log holding exactly j published pairs."""
    keys = published.select("query", "url")  # (ZEALOUS writes its own item label: join on both)
    per_user = bounded.join(keys, on=["query", "url"], how="semi").group_by("user").len()
    j = per_user.get_column("len").to_numpy()
    return np.bincount(j, minlength=m + 1)[1 : m + 1].astype(np.int64)


def synthetic_tables(
    published: pl.DataFrame,
    exact_profile: npt.ArrayLike,
    params: E2EParams,
    *,
    rng: RandomSource,
    progress: Any = None,
) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:
    """Steps 3–4 with synthetic ids, from the published pairs (``query, url, noisy_count``) and
    the *exact* activity profile (j = 1…m) of the pairs with a positive noisy count: the profile
    gets its noise here, then the log is generated. The one definition for ``release ump`` and
    the CELS joint version (whose exact profile is a secure sum). Returns the tables ``log``,
    ``counts``, ``profile`` and the generator's figures."""

    def phase(label: str) -> Any:
        return progress(label) if progress is not None else (lambda: None)

    done = phase("noisy activity profile")
    exact = np.asarray(exact_profile, dtype=np.int64)
    if exact.size != params.max_pairs:
        raise InternalError(f"the activity profile has {exact.size} bins, not m = "
                            f"{params.max_pairs}")  # fmt: skip
    noisy = np.clip(params.profile_noise().release(exact, rng), 0, None)
    done()
    done = phase("generating the log (synthetic users)")
    tables, figures = generated_tables(published, noisy, params.max_pairs, rng=rng)
    done()
    return tables, figures


def e2e_ledger(
    params: E2EParams, *, rng: RandomSource | None, extra: dict[str, Any] | None = None,
    public_inputs: list[dict[str, Any]] | None = None, log_size: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The public ledger of an end-to-end release (``extra``: further ledger keys, e.g. the
    CELS ``protocol``; ``public_inputs``: e.g. the SERP's record; ``log_size``: the users and
    rows asked for, ``synth --epsilon``). A function of the public parameters only."""
    pr = params.privacy()
    covers = "everything written: the published pair counts, the allocation and the log"
    if params.schema == LogSchema.INPUT:
        covers = (
            "everything written: the published pair counts, every statistic (tables ranks, "
            "query_pairs, statistics) and every column of the log"
        )
    guarantee = {
        "covers": covers,
        "counts_are_private": True,
        "split": pr["split"],
        "delta_vs_users": delta_users_check(pr["delta"], params.max_users),
        "user_ids": str(params.ids),
        "schema": str(params.schema),
    }
    if params.schema == LogSchema.INPUT:
        guarantee["tail_tokens"] = (
            "queries <6 characters>~t<n> and URLs http://tail-q<n>-r<rank>.invalid/ are opaque "
            "tokens standing for unpublished items (docs/privacy/ump.md)"
        )
    if params.ids == UserIds.REAL:
        guarantee["note"] = (
            "each user's id appears with probability <= 1 - e^{-b}; the log is empty or nearly "
            "so at every delta < 1/U (docs/privacy/ump.md)"
        )
    mechanism = MECHANISM_SYNTHETIC if params.ids == UserIds.SYNTHETIC else MECHANISM_REAL
    return build_ledger(
        mechanism=mechanism,
        notion=NOTION,
        cost=params.cost(),
        parameters=params.to_dict() | ({"log_size": log_size} if log_size else {}),
        declared={"max_users": params.max_users} if params.max_users is not None else {},
        rng=rng,
        events=pr["events"],
        public_inputs=public_inputs,
        extra={"guarantee": guarantee,
               "reference": "Hong et al., EDBT 2012 (same-schema release); Götz et al., TKDE "
               "2012 (ZEALOUS); docs/privacy/ump.md (end-to-end mode)"} | (extra or {}),
    )  # fmt: skip


def release_ump_e2e(
    log: SearchLog,
    params: E2EParams,
    *,
    rng: RandomSource,
    progress: Any = None,
    metrics: bool = True,
    columns: Columns | None = None,
    serp: Any = None,
    users: int | None = None,
    rows: int | None = None,
) -> HistogramRelease:
    """The end-to-end release. With the input's columns (the default): ``log`` in ``columns``
    (default the AOL layout), ``queries``, ``counts``, ``ranks``, ``query_pairs``,
    ``statistics`` (:func:`~.schema_log.same_schema_tables`; ``serp``: a public SERP — a
    :class:`~searchveil.release.korolova.release.Serp` — for the ranks of published pairs;
    ``users``/``rows``: the size of the log, default the noisy ones). With the counts log:
    ``log`` (AnonID, Query, ClickURL, Count), ``counts`` (query, url, x_ij), ``profile``
    (pairs_per_user, users) (and ``queries`` with ``pairs="probe-reweight-2r"``); with real ids
    ``pairs`` (query, url, noisy_count: the published counts the allocation read).
    ``metrics=False`` skips the private utility figures (audits run the release many times).
    ``progress(label)`` (optional) is called at the start of each phase with a label and
    returns a function ending it."""

    def phase(label: str) -> Any:
        return progress(label) if progress is not None else (lambda: None)

    check_declared_users(params.max_users, log.n_users)
    if (serp is not None) != (params.statistics is not None and params.statistics.serp):
        raise InvalidParameterError("serp", serp is not None, "given exactly with serp=True")
    serp_rec = [dict(serp.source)] if serp is not None else None
    if (users, rows) != (None, None) and params.statistics is None:
        raise InvalidParameterError("users/rows", (users, rows), "only with --schema input")
    # the accounting, before any noise is drawn
    size = {"synthetic_users_asked": users, "synthetic_rows_asked": rows} if (users, rows) != (
        None, None) else None  # fmt: skip
    ledger = e2e_ledger(params, rng=rng, public_inputs=serp_rec, log_size=size)
    done = phase(f"noisy pair counts ({params.pairs}; at most {params.max_pairs} pairs per user)")
    published, extra, bounded, single = _pairs_step(log, params, rng=rng)
    done()
    report: dict[str, Any] = {"mechanism": ledger["mechanism"], "users": log.n_users,
                              "pairs_published": published.height,
                              "single_user": single}  # fmt: skip
    cols = columns if columns is not None else Columns()
    if params.statistics is not None:
        tables, report["schema"] = same_schema_tables(
            log, params.statistics, published=published, queries=extra.get("queries"),
            bounded=bounded, serp=None if serp is None else serp.table, rng=rng, phase=phase,
            columns=cols, users=users, rows=rows,
        )  # fmt: skip
    elif params.ids == UserIds.SYNTHETIC:
        positive = published.filter(pl.col("noisy_count") > 0)  # the pairs the log will hold
        exact = activity_profile(bounded, positive, params.max_pairs)
        tables, report["generator"] = synthetic_tables(published, exact, params, rng=rng,
                                                       progress=progress)  # fmt: skip
        tables = extra | tables
        report["profile_exact"] = exact.tolist()
    else:
        done = phase("allocation from the noisy counts and sampling of real holders")
        out_log, counts, check = real_id_tables(
            bounded, published, params.zealous(), gamma=params.gamma, b=params.b,
            objective=params.objective, rng=rng,
        )  # fmt: skip
        done()
        tables = {"log": out_log, "counts": counts.filter(pl.col("x_ij") > 0),
                  "pairs": published.select("query", "url", "noisy_count").sort(
                      "query", "url")}  # fmt: skip
        report["constraint_on_true_log"] = check
        users = params.max_users or log.n_users
        report["expected_users_bound"] = {"rule": "E[users in the log] <= U·(1 − e^{−b})",
                                          "users_bound": users,
                                          "value": users * params.delta_sampler}  # fmt: skip
    if metrics:
        done = phase("utility figures (private report)")
        report["metrics"] = (
            same_schema_metrics(log, tables["log"], cols) if params.statistics is not None
            else counts_log_metrics(log, tables["log"], synthetic=params.ids == "synthetic")
        )  # fmt: skip
        done()
    report["parameters"] = params.to_dict()
    report["epsilon"], report["delta"] = ledger["epsilon"], ledger["delta"]
    # the δ < 1/U check and warning of the whole release (its δ, not the pair step's): issue 39
    report["single_user"] |= release_delta_check(ledger["delta"], params.max_users, log.n_users)
    return HistogramRelease(
        tables=tables, report=report, ledger=ledger, inputs=[log.ledger_input()]
    )
