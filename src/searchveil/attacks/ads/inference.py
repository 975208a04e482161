"""Attack 1 (Inference from Impressions) and Attack 2 (Inference from Clicks) of Korolova's
thesis §2.2.3, with the fake-account bypass of the minimum-reach threshold (§2.2.6.1), run
against the simulated platform of :mod:`searchveil.attacks.ads.platform`.

Attacker model (§2.2.4.1): the attacker knows the target's quasi-identifiers — gender, age,
location, workplace, college and their least popular interest ("a fairly obscure interest")
— as background knowledge (a friend, an employer with the résumé), and targets them all
(step 3: "so that one reasonably believes only U matches"). Against the public-only policy
(c) the attacker knows the policy and uses only the quasi-identifiers U shows to everyone
(the others can no longer match U).

* Attack 1, step 4-5: ``k`` campaigns ``A ∧ f_i`` with an innocuous creative; "if only one
  campaign A_j receives impressions, from a unique user, conclude f_j; otherwise refine". Our
  refinement: if no campaign was shown, run another round (another week) up to ``rounds``;
  if several were, or one reached more than one user, stop *inconclusive* (the attacker has no
  more background knowledge to add).
* Attack 2: one campaign ``A`` with a topic creative; once it reaches exactly one user,
  conclude "interested" iff it was clicked; no impressions after ``rounds`` rounds or a
  reach above one is inconclusive.
* Fake-account bypass (§2.2.6.1): the attacker creates ``threshold`` fake profiles that match
  ``A`` (for Attack 1 they are edited between campaigns to carry ``f_i`` — one set of fakes,
  not one per value), so every campaign passes the reach check; the attacker subtracts the
  fakes' impressions, which it observes as their owner.

Two measurements:

* **Blueprint** (:func:`inference_from_impressions` / :func:`inference_from_clicks` with
  ``mode='blueprint'``) on random targets whose attribute is *not* public: rates of correct,
  wrong and inconclusive conclusions and the cost (campaigns, fake accounts, ε spent).
* **Binary game** (``mode='guess'``): the experimenter flips a fair coin and sets the target's
  hidden bit (interested in men/women, kept "only me"; or the latent topic for Attack 2) —
  two neighbouring populations — and the attacker must guess. Any attacker against an ε-DP
  interface has accuracy ≤ e^ε / (1 + e^ε) (ε = the advertiser's total budget); under the
  public-only policy Attack 1's reports do not depend on the bit at all, so accuracy is 1/2.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from searchveil.attacks.ads.platform import AdPlatform, DPReportingPolicy, Targeting
from searchveil.attacks.ads.population import EVERYONE
from searchveil.errors import BudgetExceededError, InvalidParameterError
from searchveil.rng import RandomSource
from searchveil.validate import check_int, parse_choice

__all__ = [
    "QUASI_IDENTIFIERS",
    "AttackOutcome",
    "background_targeting",
    "inference_from_impressions",
    "inference_from_clicks",
]

QUASI_IDENTIFIERS = ("gender", "age", "location", "workplace", "college", "interests")


class AttackMode(StrEnum):
    """``blueprint``: the attack as the thesis ran it (it may end inconclusive); ``guess``: the
    binary game, where the attacker must guess the target's bit."""

    BLUEPRINT = "blueprint"
    GUESS = "guess"


@dataclass(frozen=True)
class AttackOutcome:
    """One attack on one target. ``outcome``: correct | wrong | inconclusive."""

    target: int
    truth: int
    guess: int | None
    outcome: str
    reason: str
    campaigns: int
    fake_accounts: int
    epsilon_spent: float


def background_targeting(
    platform: AdPlatform, user: int, *, exclude: str | None = None
) -> tuple[Targeting, dict[str, int]]:
    """Step 3: the targeting ``A`` built from the target's quasi-identifiers (module
    docstring) and the profile a fake account needs to match it."""
    pop = platform.population
    public_only = platform.policy.public_only
    crit: dict[str, int] = {}
    for a in QUASI_IDENTIFIERS:
        if a == exclude or (public_only and pop.visibility[a][user] != EVERYONE):
            continue
        if a == "interests":
            slots = [int(c) for c in pop.values[a][user] if c > 0]
            if slots:
                crit[a] = min(slots, key=lambda c: pop.candidate_count(a, np.array([c])))
        else:
            code = int(pop.values[a][user])
            if code > 0:
                crit[a] = code
    return Targeting.of(**crit), crit


def _spent(platform: AdPlatform, advertiser: str) -> float:
    return float(platform.spent.get(advertiser, 0.0))


def _outcome(platform: AdPlatform, advertiser: str, user: int, truth: int, guess: int | None,
             why: str, campaigns: int, fakes: int) -> AttackOutcome:  # fmt: skip
    """The end of an attack: the fake accounts deleted, the guess judged against the truth."""
    platform.delete_fake_accounts(advertiser)
    out = "inconclusive" if guess is None else ("correct" if guess == truth else "wrong")
    return AttackOutcome(
        user, truth, guess, out, why, campaigns, fakes, _spent(platform, advertiser)
    )


def _fakes(platform: AdPlatform, advertiser: str, profile: dict[str, int], use: bool) -> list[int]:
    if not use or not platform.policy.min_reach:
        return []
    return platform.create_fake_accounts(advertiser, profile, platform.policy.min_reach)


def _coin(rng: RandomSource | None, options: list[int]) -> int:
    if rng is None:
        raise InvalidParameterError("rng", rng, "a RandomSource for the guesses of guess mode")
    return int(options[int(rng.integers_below(len(options), 1)[0])])


def inference_from_impressions(
    platform: AdPlatform,
    user: int,
    attribute: str,
    candidates: list[int],
    *,
    advertiser: str,
    rounds: int,
    mode: AttackMode | str = AttackMode.BLUEPRINT,
    use_fakes: bool = False,
    rng: RandomSource | None = None,
) -> AttackOutcome:
    """Attack 1 (thesis §2.2.3.1) against ``user``'s ``attribute`` among ``candidates``."""
    mode = parse_choice("mode", mode, AttackMode)
    rounds = check_int("rounds", rounds, minimum=1)
    if len(candidates) < 2:
        raise InvalidParameterError("candidates", candidates, "two or more value codes")
    truth = int(platform.population.values[attribute][user])
    base, profile = background_targeting(platform, user, exclude=attribute)
    fakes = _fakes(platform, advertiser, {**profile, attribute: candidates[0]}, use_fakes)
    k = len(candidates)
    reach_sum = np.zeros(k)
    stat = np.zeros(k)
    max_round_reach = np.zeros(k)
    campaigns = 0
    reason = "no impressions"
    dp = isinstance(platform.policy, DPReportingPolicy)
    weights = (1.0, 1.0)
    if dp:
        n_r, n_i, _ = platform.policy.noises(platform.delivery)  # type: ignore[union-attr]
        weights = (1.0 / n_r.scale, 1.0 / n_i.scale)
    d = platform.delivery  # known to the attacker by experiment (§2.2.4.3)
    m_imp = d.days * d.win_probability * (1 + (d.frequency_cap - 1) * d.extra_impressions)

    def finish(guess: int | None, why: str) -> AttackOutcome:
        return _outcome(platform, advertiser, user, truth, guess, why, campaigns, len(fakes))

    done = False
    for _ in range(rounds):
        for i, f in enumerate(candidates):
            if fakes:
                platform.edit_fake_accounts(advertiser, fakes, attribute, f)
            try:
                run = platform.run_campaign(
                    advertiser, base.with_criterion(attribute, f), observe=fakes or None
                )
            except BudgetExceededError:
                reason, done = "budget exhausted", True
                break
            campaigns += 1
            rep = run.report
            if not rep.accepted:
                if mode == "guess":  # forced to guess: a refusal carries no information here
                    return finish(_coin(rng, candidates), f"refused, guessed: {rep.reason}")
                return finish(None, f"refused: {rep.reason}")
            own_reach = int(run.observed["reached"].sum()) if fakes else 0
            own_imps = int(run.observed["impressions"].sum()) if fakes else 0
            r = int(rep.reach or 0) - own_reach
            reach_sum[i] += r
            max_round_reach[i] = max(max_round_reach[i], r)
            imps = int(rep.impressions or 0) - own_imps
            if dp:  # Laplace likelihood ratio of "U is in this audience" vs not: clipped counts
                stat[i] += weights[0] * min(max(r, 0), 1) + weights[1] * min(max(imps, 0), m_imp)
            else:
                stat[i] += r + imps
        if done:
            break
        if mode == "blueprint":
            shown = np.flatnonzero(reach_sum > 0)
            if shown.size == 1 and max_round_reach[shown[0]] == 1:
                return finish(candidates[int(shown[0])], "one campaign reached one user")
            if shown.size > 1 or (shown.size == 1 and max_round_reach[shown[0]] > 1):
                return finish(None, "several campaigns shown or reach > 1 (A not unique)")
    if mode == "blueprint":
        return finish(None, reason)
    best = np.flatnonzero(stat == stat.max())
    if best.size == 1:
        return finish(candidates[int(best[0])], "argmax of campaign statistics")
    return finish(_coin(rng, [candidates[int(i)] for i in best]), "argmax, tie broken at random")


def inference_from_clicks(
    platform: AdPlatform,
    user: int,
    *,
    advertiser: str,
    rounds: int,
    mode: AttackMode | str = AttackMode.BLUEPRINT,
    use_fakes: bool = False,
    broaden: bool = False,
    rng: RandomSource | None = None,
) -> AttackOutcome:
    """Attack 2 (thesis §2.2.3.2): is ``user`` interested in the ad's topic?

    ``broaden``: §2.2.6.1's other bypass of a reach threshold — drop the most selective
    criteria until the campaign is accepted and name the target in the ad, so that only the
    target responds; "interested" iff the campaign gets a click (the attacker cannot tell
    whether the target saw it) beyond what the others' stray clicks explain."""
    mode = parse_choice("mode", mode, AttackMode)
    rounds = check_int("rounds", rounds, minimum=1)
    if broaden and use_fakes:
        raise InvalidParameterError("broaden", broaden, "one bypass at a time (not with fakes)")
    truth = int(bool(platform.population.topic[user]))
    base, profile = background_targeting(platform, user)
    fakes = _fakes(platform, advertiser, profile, use_fakes)
    if broaden:
        out = _clicks_broadened(platform, user, base, truth, advertiser=advertiser, rounds=rounds)
        if mode == "guess" and out.guess is None:
            g = _coin(rng, [0, 1])
            return AttackOutcome(
                user,
                truth,
                g,
                "correct" if g == truth else "wrong",
                f"guessed: {out.reason}",
                out.campaigns,
                0,
                out.epsilon_spent,
            )
        return out
    campaigns = 0
    clicks_sum = 0
    reason = "no impressions"

    def finish(guess: int | None, why: str) -> AttackOutcome:
        return _outcome(platform, advertiser, user, truth, guess, why, campaigns, len(fakes))

    for _ in range(rounds):
        try:
            run = platform.run_campaign(advertiser, base, creative="topic", observe=fakes or None)
        except BudgetExceededError:
            reason = "budget exhausted"
            break
        campaigns += 1
        rep = run.report
        if not rep.accepted:
            if mode == "guess":
                return finish(_coin(rng, [0, 1]), f"refused, guessed: {rep.reason}")
            return finish(None, f"refused: {rep.reason}")
        own_reach = int(run.observed["reached"].sum()) if fakes else 0
        reach = int(rep.reach or 0) - own_reach
        clicks = int(rep.unique_clicks or 0)  # fake accounts never click
        # clipped to [0, 1]: the Laplace likelihood-ratio statistic for "clicked or not"
        clicks_sum += min(max(clicks, 0), 1)
        if mode == "blueprint":
            if reach == 1:
                return finish(int(clicks >= 1), "reached one user")
            if reach > 1:
                return finish(None, "reach > 1 (A not unique)")
    if mode == "blueprint":
        return finish(None, reason)
    return finish(int(clicks_sum >= 0.4 * max(campaigns, 1)), "clicks above 0.4 per campaign")


#: the order in which a broadening attacker drops criteria: least selective first, so the
#: audience grows as little as possible at each step ("a slightly broader audience")
BROADEN_ORDER = ("gender", "location", "college", "workplace", "interests")


def _broadening_steps(base: Targeting) -> list[Targeting]:
    """Ever broader targetings: widen the age window (±1, ±2, ±4, ±8 years), then drop the
    other criteria, least selective first."""
    crit = dict(base.criteria)
    steps: list[Targeting] = []
    widest = base
    if "age" in crit:
        a0 = crit["age"][0]
        for w in (1, 2, 4, 8):
            widest = base.with_criterion("age", range(max(1, a0 - w), a0 + w + 1))
            steps.append(widest)
    for a in BROADEN_ORDER:
        if a in crit and a != "age":
            widest = widest.without(a)
            steps.append(widest)
    return steps


def _clicks_broadened(
    platform: AdPlatform,
    user: int,
    base: Targeting,
    truth: int,
    *,
    advertiser: str,
    rounds: int,
) -> AttackOutcome:
    attempts = 0
    targeting = base
    clicks = 0
    steps = _broadening_steps(base)
    ran = 0
    ctr_other = platform.delivery.personalized_ctr_other

    def outcome(guess: int | None, why: str) -> AttackOutcome:
        if guess is None:
            out = "inconclusive"
        else:
            out = "correct" if guess == truth else "wrong"
        return AttackOutcome(
            user, truth, guess, out, why, attempts, 0, _spent(platform, advertiser)
        )

    while True:
        try:
            run = platform.run_campaign(
                advertiser, targeting, creative="personalized", named_user=user
            )
        except BudgetExceededError:
            break
        attempts += 1
        if run.report.accepted:
            # stray clicks by the others ~ Poisson(impressions · their CTR), which the attacker
            # knows by experiment (§2.2.4.3); with a click by the target if shown and
            # interested, the likelihood ratio exceeds 1 iff clicks > that expectation
            stray = max(int(run.report.impressions or 0), 0) * ctr_other
            clicks = int(int(run.report.unique_clicks or 0) > stray)
            ran += 1
            if ran >= rounds or clicks:
                break
            continue
        if not steps:
            return outcome(None, "refused at every breadth")
        targeting = steps.pop(0)
    if not ran:
        return outcome(None, "budget exhausted")
    return outcome(int(clicks >= 1), "broadened audience, personalised ad")
