"""An offline microtargeting ad platform (Korolova thesis §2.2.2.2) with four reporting /
matching policies (§2.2.6), as the target of the attacks in :mod:`searchveil.attacks.ads.inference`.

**Targeting** (:class:`Targeting`, §2.2.2.2.1): a conjunction over attributes of disjunctions
over values ("24-30 years old AND (likes skiing OR snowboarding)"). A profile matches a criterion
when its value is one of the listed codes (code 0, "not listed", never matches).

**Auction stand-in** (:class:`Delivery`): a matched user who logs in on a day (their own
probability) sees the ad with probability ``win_probability`` (the attacker's "very high bid"
of Attack 1 step 4 wins most auctions), ``1 + Binomial(frequency_cap − 1, extra_impressions)``
times that day; each impression is clicked with the creative's click-through rate (an
innocuous ad: ``base_ctr``; a topic ad, Attack 2: ``topic_ctr_interested`` for users whose
latent ``topic`` is set, ``topic_ctr_other`` otherwise). Users are independent given the
campaign, so the true report's distribution is a convolution of per-user pmfs
(:func:`user_delivery_pmf`, :func:`true_report_pmf`) — exact neighbour checks use it.

**The advertiser's report** (:class:`CampaignReport`): impressions, reach (unique users with
≥ 1 impression — the thesis's "unique impressions"), clicks and unique clicks, over the campaign.

**Policies** (§2.2.6):

* :class:`Policy2010` — summer-2010 behaviour: matching uses every attribute whatever its
  visibility; exact reports.
* :class:`MinReachPolicy` — Facebook's response (§2.2.6.1): a campaign whose Estimated Reach
  (matching profiles, fake accounts included) is below ``threshold`` (≈ 20) is refused. The
  thesis calls it a *soft* threshold ("suggests to target a broader audience"); we make it
  hard, the strongest reading. A refusal reveals nothing beyond the threshold bit.
* :class:`PublicOnlyPolicy` — "use only profile information designated as visible to
  Everyone" when matching; exact reports.
* :class:`DPReportingPolicy` — matching as in 2010, but each report releases (reach,
  impressions, unique clicks) plus independent discrete Laplace noise from
  :mod:`searchveil.mechanisms.noise` with the secure source, and charges ``epsilon_per_report``
  to the advertiser's budget (basic composition, the one budget check
  :func:`~searchveil.mechanisms.accounting.check_budget`), refusing with
  :class:`~searchveil.errors.BudgetExceededError` before any noise is drawn once the budget is
  spent. Privacy unit: one *real* user's whole data (attributes and behaviour); neighbouring
  populations differ in one user's data. Per report the user changes reach and unique clicks
  by ≤ 1 and impressions by ≤ ``days · frequency_cap``; ε is split across the three counts by
  ``weights`` (scale = sensitivity / ε_part). Total clicks are not reported (unbounded
  sensitivity without a click cap). Decisions: no Estimated-Reach box and no reach threshold
  under this policy (an exact reach count or an exact threshold would leak outside the
  budget); the budget is per advertiser account, so an attacker who opens many advertiser
  accounts (Sybil advertisers, the analogue of §2.2.4.4's fake profiles) multiplies it — the
  platform must bind budgets to something costlier than an account.

Fake accounts (§2.2.4.4, §2.2.6.1's bypass) are real profiles on the platform owned by an
advertiser: they count towards Estimated Reach and receive impressions, never click, log in
every day, and their owner sees their impressions (``run_campaign(..., observe=...)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

from searchveil.attacks.ads.population import ATTRIBUTES, EVERYONE, Population
from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import build_ledger, build_provenance
from searchveil.mechanisms.accounting import check_budget
from searchveil.mechanisms.budget import NoGuarantee, PrivacyCost, Relation
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.rng import RandomSource
from searchveil.validate import (
    check_choice,
    check_int,
    check_positive,
    check_probability,
    parse_choice,
)

__all__ = [
    "Targeting",
    "Delivery",
    "Policy2010",
    "MinReachPolicy",
    "PublicOnlyPolicy",
    "DPReportingPolicy",
    "Policy",
    "CampaignReport",
    "CampaignRun",
    "AdPlatform",
    "user_delivery_pmf",
    "true_report_pmf",
    "noisy_report_pmf",
    "Creative",
]


class Creative(StrEnum):
    """The ad's creative: one that no one is drawn to, one on the topic, or one naming a user."""

    INNOCUOUS = "innocuous"
    TOPIC = "topic"
    PERSONALIZED = "personalized"


@dataclass(frozen=True)
class Targeting:
    """Conjunction of per-attribute disjunctions: ``criteria = ((attribute, codes), ...)``."""

    criteria: tuple[tuple[str, tuple[int, ...]], ...]

    @classmethod
    def of(cls, **criteria: Any) -> Targeting:
        items = []
        for a, v in criteria.items():
            check_choice("attribute", a, ATTRIBUTES)
            codes = (int(v),) if np.ndim(v) == 0 else tuple(sorted({int(x) for x in v}))
            if not codes or min(codes) < 1:
                raise InvalidParameterError(a, v, "one or more value codes >= 1")
            items.append((a, codes))
        return cls(tuple(sorted(items)))

    def with_criterion(self, attribute: str, codes: Any) -> Targeting:
        d = dict(self.criteria)
        d[attribute] = codes
        return Targeting.of(**d)

    def without(self, attribute: str) -> Targeting:
        return Targeting(tuple(c for c in self.criteria if c[0] != attribute))

    def describe(self) -> dict[str, list[int]]:
        return {a: list(v) for a, v in self.criteria}


# (fields alike SynthModel's in form only: plain defaults)
@dataclass(frozen=True)
class Delivery:
    """The auction stand-in and user response model (module docstring)."""

    days: int = 7
    win_probability: float = 0.9
    frequency_cap: int = 3
    extra_impressions: float = 0.3
    base_ctr: float = 0.001
    topic_ctr_interested: float = 0.15
    topic_ctr_other: float = 0.002
    #: a topic ad that names the target (§2.2.6.1's alternative bypass): others ignore it
    personalized_ctr_other: float = 0.0005

    def __post_init__(self) -> None:
        check_int("days", self.days, minimum=1, maximum=365)
        check_int("frequency_cap", self.frequency_cap, minimum=1, maximum=100)
        for name in (
            "win_probability",
            "extra_impressions",
            "base_ctr",
            "topic_ctr_interested",
            "topic_ctr_other",
        ):
            check_probability(name, getattr(self, name), open_low=False, open_high=False)

    @property
    def max_impressions_per_user(self) -> int:
        return self.days * self.frequency_cap

    def ctr(
        self,
        creative: str,
        topic: npt.NDArray[np.bool_],
        users: npt.NDArray[np.int64] | None = None,
        named_user: int | None = None,
    ) -> npt.NDArray[np.float64]:
        """Per-impression click probability of each user in the audience."""
        if creative == "topic":
            return np.where(topic, self.topic_ctr_interested, self.topic_ctr_other)
        if creative == "personalized":
            named = (users == named_user) if users is not None else np.zeros(topic.shape, bool)
            on_topic = np.where(topic, self.topic_ctr_interested, self.topic_ctr_other)
            return np.where(named, on_topic, self.personalized_ctr_other)
        return np.full(topic.shape, self.base_ctr)


@dataclass(frozen=True)
class Policy2010:
    """Summer-2010 Facebook: private attributes used for matching, exact reports."""

    name: str = "a: 2010"
    public_only: bool = False
    min_reach: int = 0

    def describe(self) -> dict[str, Any]:
        return _describe(self)


@dataclass(frozen=True)
class MinReachPolicy:
    """Refuse campaigns whose Estimated Reach is below ``threshold`` (§2.2.6.1)."""

    threshold: int = 20
    name: str = "b: min reach"
    public_only: bool = False

    def __post_init__(self) -> None:
        check_int("threshold", self.threshold, minimum=1)

    @property
    def min_reach(self) -> int:
        return self.threshold

    def describe(self) -> dict[str, Any]:
        return _describe(self, min_estimated_reach=self.threshold)


@dataclass(frozen=True)
class PublicOnlyPolicy(Policy2010):
    """2010's platform matching only on attributes the user made visible to everyone
    (§2.2.6.1)."""

    name: str = "c: public only"
    public_only: bool = True


@dataclass(frozen=True)
class DPReportingPolicy:
    """ε-DP campaign reports with a per-advertiser budget (module docstring)."""

    epsilon_per_report: float
    advertiser_budget: float
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0)
    name: str = "d: DP reports"
    public_only: bool = False
    min_reach: int = 0

    def __post_init__(self) -> None:
        check_positive("epsilon_per_report", self.epsilon_per_report)
        check_positive("advertiser_budget", self.advertiser_budget)
        if len(self.weights) != 3:
            raise InvalidParameterError("weights", self.weights, "three weights > 0")
        for w in self.weights:
            check_positive("weights", w)

    def noises(
        self, delivery: Delivery
    ) -> tuple[DiscreteLaplace, DiscreteLaplace, DiscreteLaplace]:
        """Discrete Laplace for (reach, impressions, unique clicks)."""
        total = sum(self.weights)
        sens = (1, delivery.max_impressions_per_user, 1)
        return tuple(  # type: ignore[return-value]
            DiscreteLaplace.for_epsilon(self.epsilon_per_report * w / total, s)
            for w, s in zip(self.weights, sens, strict=True)
        )

    def report_cost(self) -> PrivacyCost:
        """What one noisy campaign report spends (user-level, pure ε)."""
        return PrivacyCost.of(Relation.USER, self.epsilon_per_report, name="campaign report")

    def cost(self) -> PrivacyCost:
        """The guarantee of the policy: ε = the budget of each advertiser account."""
        return PrivacyCost.of(Relation.USER, self.advertiser_budget, name="per advertiser account")

    def describe(self) -> dict[str, Any]:
        return _describe(
            self,
            "discrete Laplace on reach, impressions, unique clicks",
            epsilon_per_report=self.epsilon_per_report,
            advertiser_budget=self.advertiser_budget,
            weights=list(self.weights),
        )


Policy = Policy2010 | MinReachPolicy | PublicOnlyPolicy | DPReportingPolicy


def _describe(policy: Policy, reports: str = "exact", **extra: Any) -> dict[str, Any]:
    """What the ledger records of a policy: its name, what it matches on, its reports, ``extra``."""
    matching = "'everyone' attributes only" if policy.public_only else "all attributes"
    return {"policy": policy.name, "matching": matching, "reports": reports, **extra}


# (optional fields alike PartySpec's in form only)
@dataclass(frozen=True)
class CampaignReport:
    """What the advertiser sees. ``accepted`` False: refused (``reason``), all counts None."""

    advertiser: str
    campaign: int
    accepted: bool
    reason: str | None = None
    impressions: int | None = None
    reach: int | None = None
    clicks: int | None = None
    unique_clicks: int | None = None
    epsilon: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class CampaignRun:
    report: CampaignReport
    #: per observed (own fake) account: impressions, reached, clicks
    observed: dict[str, npt.NDArray[np.int64]]
    #: platform-internal truth, for the experiment's bookkeeping only (never shown to attackers)
    true_reach: int
    matched: int


@dataclass
class _Fakes:
    values: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    owner: list[str] = field(default_factory=list)
    by_owner: dict[str, list[int]] = field(default_factory=dict)
    active: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))


class AdPlatform:
    """The platform: a population, fake accounts, a policy, a delivery model, budgets."""

    def __init__(
        self,
        population: Population,
        policy: Policy,
        *,
        rng: RandomSource,
        delivery: Delivery | None = None,
    ) -> None:
        if not isinstance(rng, RandomSource):
            raise InvalidParameterError("rng", rng, "a searchveil.rng.RandomSource")
        self.population = population
        self.policy = policy
        self.delivery = delivery or Delivery()
        self.rng = rng
        self._gen = rng.numpy_generator()  # auction / behaviour simulation (not privacy noise)
        self._fakes = _Fakes(
            {a: np.zeros(0 if a != "interests" else (0, 3), dtype=np.int64) for a in ATTRIBUTES}
        )
        self.spent: dict[str, float] = {}
        self.events: list[dict[str, Any]] = []
        self._campaigns = 0

    # -- fake accounts ---------------------------------------------------------------------
    def create_fake_accounts(self, owner: str, profile: dict[str, int], count: int) -> list[int]:
        """``count`` fake profiles with the given attribute codes (interests: one code);
        returns their ids (``population.size + k``)."""
        count = check_int("count", count, minimum=1, maximum=100_000)
        start = self.population.size + len(self._fakes.owner)
        for a in ATTRIBUTES:
            code = int(profile.get(a, 0))
            col = self._fakes.values[a]
            new: npt.NDArray[np.int64]
            if a == "interests":
                new = np.zeros((count, 3), dtype=np.int64)
                new[:, 0] = code
            else:
                new = np.full(count, code, dtype=np.int64)
            self._fakes.values[a] = np.concatenate([col, new])
        self._fakes.owner.extend([owner] * count)
        new_idx = list(range(start - self.population.size, start - self.population.size + count))
        self._fakes.by_owner.setdefault(owner, []).extend(new_idx)
        self._fakes.active = np.concatenate([self._fakes.active, np.asarray(new_idx, np.int64)])
        return list(range(start, start + count))

    def edit_fake_accounts(self, owner: str, ids: list[int], attribute: str, code: int) -> None:
        idx = np.asarray(ids, dtype=np.int64) - self.population.size
        if idx.size and (idx.min() < 0 or any(self._fakes.owner[i] != owner for i in idx)):
            raise InvalidParameterError("ids", ids, f"fake accounts owned by {owner!r}")
        self._fakes.values[attribute][idx] = int(code)

    def delete_fake_accounts(self, owner: str) -> None:
        """Retire every fake account of ``owner`` (they never match again)."""
        idx = np.asarray(self._fakes.by_owner.pop(owner, []), dtype=np.int64)
        for a in ATTRIBUTES:
            self._fakes.values[a][idx] = 0
        self._fakes.active = np.setdiff1d(self._fakes.active, idx)

    @property
    def fake_count(self) -> int:
        return len(self._fakes.owner)

    # -- matching --------------------------------------------------------------------------
    def _criterion_ok(
        self, attribute: str, codes: tuple[int, ...], users: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.bool_]:
        pop = self.population
        lut = np.zeros(pop.n_values[attribute], dtype=np.bool_)
        lut[[c for c in codes if c < lut.size]] = True
        col = pop.values[attribute][users]
        ok = lut[col].any(axis=1) if col.ndim == 2 else lut[col]
        if self.policy.public_only:
            ok &= pop.visibility[attribute][users] == EVERYONE
        return ok

    def match(self, targeting: Targeting) -> npt.NDArray[np.int64]:
        """Indices of the real profiles matching ``targeting`` under the policy."""
        pop = self.population
        if not targeting.criteria:
            return np.arange(pop.size, dtype=np.int64)
        arrays = {a: np.asarray(c, dtype=np.int64) for a, c in targeting.criteria}
        arrays = {a: c[c < pop.n_values[a]] for a, c in arrays.items()}
        first = min(arrays, key=lambda a: pop.candidate_count(a, arrays[a]))
        users = pop.candidates(first, arrays[first])
        for a, codes in targeting.criteria:
            if users.size == 0:
                break
            users = users[self._criterion_ok(a, codes, users)]
        return users

    def _match_fakes(self, targeting: Targeting) -> npt.NDArray[np.int64]:
        act = self._fakes.active
        ok = np.ones(act.size, dtype=np.bool_)
        for a, codes in targeting.criteria:
            if not act.size:
                break
            col = self._fakes.values[a][act]
            hit = np.isin(col, codes)
            ok &= hit.any(axis=1) if col.ndim == 2 else hit
        # fake profiles are made fully public by their owner, so every policy matches them
        return act[ok]

    def estimated_reach(self, targeting: Targeting) -> int:
        """Matching profiles (fakes included) — used by :class:`MinReachPolicy`."""
        return int(self.match(targeting).size + self._match_fakes(targeting).size)

    # -- delivery --------------------------------------------------------------------------
    def _deliver(
        self, login_p: npt.NDArray[np.float64], ctr: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """Per-user (impressions, clicks) over the campaign."""
        d, g = self.delivery, self._gen
        days = g.binomial(d.days, login_p * d.win_probability)
        imps = days + g.binomial(days * (d.frequency_cap - 1), d.extra_impressions)
        clicks = g.binomial(imps, ctr)
        return imps.astype(np.int64), clicks.astype(np.int64)

    def run_campaign(
        self,
        advertiser: str,
        targeting: Targeting,
        *,
        creative: Creative | str = Creative.INNOCUOUS,
        named_user: int | None = None,
        observe: list[int] | None = None,
    ) -> CampaignRun:
        """Create, run and report one campaign (module docstring). A ``personalized``
        creative names ``named_user``: only that user responds to it as to a topic ad."""
        creative = parse_choice("creative", creative, Creative)
        if (creative == "personalized") != (named_user is not None):
            raise InvalidParameterError(
                "named_user", named_user, "a user id exactly when creative='personalized'"
            )
        self._campaigns += 1
        cid = self._campaigns
        real = self.match(targeting)
        fakes = self._match_fakes(targeting)
        est = int(real.size + fakes.size)
        pol = self.policy
        if pol.min_reach and est < pol.min_reach:
            # the refusal says only that the threshold was missed, not the count
            rep = CampaignReport(advertiser, cid, False, f"estimated reach below {pol.min_reach}")
            return CampaignRun(rep, {}, 0, int(real.size))
        if isinstance(pol, DPReportingPolicy):  # account eagerly: before anything is drawn
            spent = self.spent.get(advertiser, 0.0)
            check_budget(pol.report_cost(), (pol.advertiser_budget - spent, 0.0),
                         what=f"advertiser {advertiser!r} privacy budget")  # fmt: skip
            self.spent[advertiser] = spent + pol.epsilon_per_report
        pop = self.population
        imps_r, clicks_r = self._deliver(
            pop.login_p[real], self.delivery.ctr(creative, pop.topic[real], real, named_user)
        )
        imps_f, _ = self._deliver(np.ones(fakes.size), np.zeros(fakes.size))
        imps = int(imps_r.sum() + imps_f.sum())
        reach = int((imps_r > 0).sum() + (imps_f > 0).sum())
        clicks = int(clicks_r.sum())
        uclicks = int((clicks_r > 0).sum())
        if isinstance(pol, DPReportingPolicy):
            n_reach, n_imp, n_clk = pol.noises(self.delivery)
            rep = CampaignReport(
                advertiser,
                cid,
                True,
                None,
                impressions=int(n_imp.release([imps], self.rng)[0]),
                reach=int(n_reach.release([reach], self.rng)[0]),
                clicks=None,
                unique_clicks=int(n_clk.release([uclicks], self.rng)[0]),
                epsilon=pol.epsilon_per_report,
            )
            self.events.append(
                {
                    "advertiser": advertiser,
                    "campaign": cid,
                    "mechanism": "discrete_laplace",
                    "epsilon": pol.epsilon_per_report,
                    "scales": [x.scale for x in (n_reach, n_imp, n_clk)],
                }
            )
        else:
            rep = CampaignReport(advertiser, cid, True, None, imps, reach, clicks, uclicks)
        observed = self._observed(advertiser, observe, fakes, imps_f) if observe else {}
        return CampaignRun(rep, observed, int((imps_r > 0).sum()), int(real.size))

    def _observed(
        self,
        advertiser: str,
        observe: list[int],
        fakes: npt.NDArray[np.int64],
        imps_f: npt.NDArray[np.int64],
    ) -> dict[str, npt.NDArray[np.int64]]:
        """What the advertiser sees on its own fake accounts ``observe`` (its own only)."""
        want = np.asarray(observe, dtype=np.int64) - self.population.size
        own = [i for i in want if self._fakes.owner[i] == advertiser]
        if len(own) != len(want):
            raise InvalidParameterError("observe", observe, f"accounts owned by {advertiser!r}")
        pos = {int(f): k for k, f in enumerate(fakes)}
        got = np.array([imps_f[pos[int(i)]] if int(i) in pos else 0 for i in want], dtype=np.int64)
        return {
            "impressions": got,
            "reached": (got > 0).astype(np.int64),
            "clicks": np.zeros(want.size, dtype=np.int64),
        }

    # -- budgets & ledger -------------------------------------------------------------------
    def ledger(self, *, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
        """The public privacy ledger of the reporting policy: ε spent per advertiser, one event
        per noisy report. Nothing about the population (its size, fingerprint): that is the
        private input, in :meth:`provenance`."""
        pol = self.policy
        dp = isinstance(pol, DPReportingPolicy)
        budget = pol.advertiser_budget if isinstance(pol, DPReportingPolicy) else None
        return build_ledger(
            mechanism="ads-dp-campaign-reports" if dp else f"ads-{pol.name}",
            notion="pure ε-DP per advertiser (basic composition); privacy unit: one user's data"
            if dp
            else "none (not a DP policy)",
            cost=pol.cost()
            if isinstance(pol, DPReportingPolicy)
            else NoGuarantee("not a differentially private policy"),
            parameters={
                "policy": pol.describe(),
                "delivery": self.delivery.__dict__,
                **(parameters or {}),
            },
            rng=self.rng,
            events=self.events,
            extra={
                "accounting": {
                    "composition": "basic, per advertiser account",
                    "advertisers": {
                        a: {"spent": s, "budget": budget} for a, s in sorted(self.spent.items())
                    },
                }
            },
        )

    def provenance(self) -> dict[str, Any]:
        """The private provenance record: the population the platform ran on."""
        return build_provenance(
            inputs=[
                {
                    "role": "population",
                    "name": "synthetic population",
                    "profiles": self.population.size,
                    "sha256": self.population.fingerprint(),
                }
            ],
            figures={"campaigns": self._campaigns, "fake_accounts": self.fake_count},
        )


# -- exact distributions (small audiences) -----------------------------------------------------
def user_delivery_pmf(login_p: float, ctr: float, delivery: Delivery) -> npt.NDArray[np.float64]:
    """Exact joint pmf of one matched user's (reached, impressions, unique click), shape
    ``(2, days·cap + 1, 2)``."""
    d = delivery
    m = d.max_impressions_per_user
    out = np.zeros((2, m + 1, 2))
    ps = stats.binom.pmf(np.arange(d.days + 1), d.days, login_p * d.win_probability)
    for s in range(d.days + 1):
        extra = s * (d.frequency_cap - 1)
        pe = stats.binom.pmf(np.arange(extra + 1), extra, d.extra_impressions)
        n = s + np.arange(extra + 1)
        pc = 1.0 - (1.0 - ctr) ** n
        r = int(s > 0)
        out[r, n, 1] += ps[s] * pe * pc
        out[r, n, 0] += ps[s] * pe * (1.0 - pc)
    return out


def true_report_pmf(
    platform: AdPlatform,
    targeting: Targeting,
    *,
    creative: str = "innocuous",
    named_user: int | None = None,
    max_users: int = 12,
) -> npt.NDArray[np.float64]:
    """Exact pmf of the true (reach, impressions, unique clicks) of a campaign on the real
    profiles it matches (no fakes), by convolving per-user pmfs. Small audiences only."""
    users = platform.match(targeting)
    if users.size > max_users:
        raise InvalidParameterError(
            "targeting", targeting.describe(), f"an audience of at most {max_users} profiles"
        )
    pop = platform.population
    ctr = platform.delivery.ctr(creative, pop.topic[users], users, named_user)
    total = np.ones((1, 1, 1))
    for u, c in zip(users, ctr, strict=True):
        p = user_delivery_pmf(float(pop.login_p[u]), float(c), platform.delivery)
        total = _convolve3(total, p)
    return total


def _convolve3(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    out = np.zeros(tuple(x + y - 1 for x, y in zip(a.shape, b.shape, strict=True)))
    for idx in zip(*np.nonzero(b), strict=True):
        i, j, k = idx
        out[i : i + a.shape[0], j : j + a.shape[1], k : k + a.shape[2]] += a * b[idx]
    return out


def noisy_report_pmf(
    true_pmf: npt.NDArray[np.float64],
    policy: DPReportingPolicy,
    delivery: Delivery,
    outputs: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """Exact probability of each noisy report ``outputs[i] = (reach, impressions, uclicks)``
    under :class:`DPReportingPolicy` (a finite sum over the true pmf's support)."""
    n_r, n_i, n_c = policy.noises(delivery)
    t = np.argwhere(true_pmf > 0)
    w = true_pmf[tuple(t.T)]
    o = np.asarray(outputs, dtype=np.int64)
    pr = n_r.pmf(o[:, None, 0] - t[None, :, 0])
    pi = n_i.pmf(o[:, None, 1] - t[None, :, 1])
    pc = n_c.pmf(o[:, None, 2] - t[None, :, 2])
    return (pr * pi * pc * w[None, :]).sum(axis=1)
