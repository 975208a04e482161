"""The ads experiment (Korolova thesis §2.2.3-2.2.6): every policy × attack over random
targets, plus the binary game that compares an attacker's accuracy with the ε-DP bound
e^ε/(1+e^ε)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from searchveil.attacks.ads.inference import (
    AttackOutcome,
    inference_from_clicks,
    inference_from_impressions,
)
from searchveil.attacks.ads.platform import (
    # the policies the package's API exports too: the experiment runs each one
    AdPlatform,
    Delivery,
    DPReportingPolicy,
    MinReachPolicy,
    Policy,
    Policy2010,
    PublicOnlyPolicy,
)
from searchveil.attacks.ads.population import (
    EVERYONE,
    ONLY_ME,
    VISIBILITY_NAMES,
    Population,
    PopulationConfig,
    age_code,
    code_age,
    generate_population,
)
from searchveil.audit import clopper_pearson
from searchveil.errors import InvalidParameterError
from searchveil.rng import RandomSource
from searchveil.validate import check_int, check_positive

ATTACKS = ("impressions: interested in", "impressions: age", "clicks: topic")
GAME_ATTACKS = ("impressions: interested in", "clicks: topic")

# how the attacker gets around a minimum-reach policy: not at all, fake accounts, or a broader
# audience with an ad naming the target
Bypass = Literal["", "fakes", "broaden"]


def dp_accuracy_bound(epsilon: float) -> float:
    """Best accuracy of any guess of one bit with prior 1/2 from an ε-DP view: e^ε/(1+e^ε)."""
    eps = check_positive("epsilon", epsilon)
    return 1.0 / (1.0 + math.exp(-eps))


def _policies(
    epsilons: Sequence[float], threshold: int, dp_reports: int
) -> list[tuple[str, Policy, Bypass]]:
    """(row name, policy, bypass: '' | 'fakes' | 'broaden')."""
    out: list[tuple[str, Policy, Bypass]] = [
        ("a: 2010", Policy2010(), ""),
        (f"b: min reach {threshold}", MinReachPolicy(threshold), ""),
        (f"b: min reach {threshold} + fakes", MinReachPolicy(threshold), "fakes"),
        (
            f"b: min reach {threshold} + broader personalised ad",
            MinReachPolicy(threshold),
            "broaden",
        ),
        ("c: public only", PublicOnlyPolicy(), ""),
    ]
    for e in epsilons:
        pol = DPReportingPolicy(epsilon_per_report=e / dp_reports, advertiser_budget=e)
        out.append((f"d: DP ε={e:g}", pol, ""))
    return out


def _summary(
    policy: str,
    attack: str,
    outs: list[AttackOutcome],
    epsilon: float | None,
    visibility: np.ndarray | None = None,
) -> dict[str, Any]:
    """Rates and costs; with ``visibility`` (the targets' visibility of the attacked
    attribute) also the success rate per visibility level."""
    n = len(outs)
    c = sum(o.outcome == "correct" for o in outs)
    w = sum(o.outcome == "wrong" for o in outs)
    reasons: dict[str, int] = {}
    for o in outs:
        if o.outcome == "inconclusive":
            key = o.reason.split(":")[0]
            reasons[key] = reasons.get(key, 0) + 1
    return {
        "policy": policy,
        "attack": attack,
        "targets": n,
        "correct": c,
        "wrong": w,
        "inconclusive": n - c - w,
        "success_rate": c / n if n else None,
        "wrong_rate": w / n if n else None,
        "inconclusive_reasons": reasons,
        "mean_campaigns": float(np.mean([o.campaigns for o in outs])) if n else None,
        "mean_fake_accounts": float(np.mean([o.fake_accounts for o in outs])) if n else None,
        "mean_epsilon_spent": float(np.mean([o.epsilon_spent for o in outs])) if n else None,
        "advertiser_budget": epsilon,
        "success_by_visibility": _by_visibility(outs, visibility),
    }


def _by_visibility(outs: list[AttackOutcome], vis: np.ndarray | None) -> dict[str, Any] | None:
    if vis is None:
        return None
    out: dict[str, Any] = {}
    for code, label in enumerate(VISIBILITY_NAMES):
        sel = [o for o in outs if int(vis[o.target]) == code]
        if sel:
            ok = sum(o.outcome == "correct" for o in sel)
            out[label] = {"targets": len(sel), "success_rate": ok / len(sel)}
    return out


@dataclass(frozen=True)
class _Targets:
    """The attacked profiles: hidden 'interested in', hidden age (with each one's campaign
    ages), and a topic half of whom are interested."""

    interested_in: np.ndarray
    age: np.ndarray
    clicks: np.ndarray
    age_lo: dict[int, int]


def _pick_targets(pop: Population, gen: np.random.Generator, targets: int) -> _Targets:
    n = pop.size

    def pick(mask: np.ndarray, k: int) -> np.ndarray:
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            raise InvalidParameterError("population", n, "a population with eligible targets")
        return np.sort(gen.choice(idx, size=min(k, idx.size), replace=False))

    hidden = pop.visibility["interested_in"] != EVERYONE
    t_int = pick((pop.values["interested_in"] > 0) & hidden, targets)
    t_age = pick(pop.visibility["age"] != EVERYONE, targets)
    half = targets // 2
    t_clk = np.sort(
        np.concatenate([pick(pop.topic, targets - half), pick(~pop.topic, half)])
    )  # balanced: half interested, half not
    age_lo = {}
    for u in t_age:
        a = code_age(int(pop.values["age"][u]))
        lo = int(np.clip(a - int(gen.integers(0, 5)), 13, 60))
        age_lo[int(u)] = lo
    return _Targets(t_int, t_age, t_clk, age_lo)


@dataclass(frozen=True)
class _Run:
    """One policy's attack settings: the row name, campaign rounds and the bypass used."""

    name: str
    rounds: int
    fakes: bool
    broaden: bool


def _blueprint_attacks(
    plat: AdPlatform, run: _Run, t: _Targets
) -> tuple[list[AttackOutcome], list[AttackOutcome], list[AttackOutcome]]:
    """Attack 1 on 'interested in' and on age, Attack 2 on the topic, as the thesis ran them.
    Advertiser accounts are named by the target's position, not by its profile index (targets
    are drawn using private attributes; the public ledger names the accounts)."""
    name, r, fakes, broaden = run.name, run.rounds, run.fakes, run.broaden
    t1 = t.interested_in[:0] if broaden else t.interested_in  # personalised ad: Attack 2 only
    t2 = t.age[:0] if broaden else t.age
    o1 = [
        inference_from_impressions(
            plat, int(u), "interested_in", [1, 2], advertiser=f"{name}/int/{i}", rounds=r,
            use_fakes=fakes,
        )
        for i, u in enumerate(t1)
    ]  # fmt: skip
    o2 = [
        inference_from_impressions(
            plat, int(u), "age", [age_code(t.age_lo[int(u)] + j) for j in range(5)],
            advertiser=f"{name}/age/{i}", rounds=r, use_fakes=fakes,
        )
        for i, u in enumerate(t2)
    ]  # fmt: skip
    o3 = [
        inference_from_clicks(
            plat, int(u), advertiser=f"{name}/clk/{i}", rounds=r, use_fakes=fakes,
            broaden=broaden,
        )
        for i, u in enumerate(t.clicks)
    ]  # fmt: skip
    return o1, o2, o3


def _binary_game(
    plat: AdPlatform, pop: Population, run: _Run, t: _Targets, rng: RandomSource
) -> tuple[list[AttackOutcome], list[AttackOutcome]]:
    """The binary game on neighbouring populations: each target's hidden bit is set by a fair
    coin (and restored after), and the attacker guesses it."""
    name, r, fakes, broaden = run.name, run.rounds, run.fakes, run.broaden
    t1 = t.interested_in[:0] if broaden else t.interested_in
    g1: list[AttackOutcome] = []
    for i, u in enumerate(t1):
        u = int(u)
        old_v, old_vis = (
            int(pop.values["interested_in"][u]),
            int(pop.visibility["interested_in"][u]),
        )
        b = int(rng.integers_below(2, 1)[0])
        pop.set_value(u, "interested_in", 1 + b, visibility=ONLY_ME)
        try:
            g1.append(
                inference_from_impressions(
                    plat, u, "interested_in", [1, 2], advertiser=f"{name}/game1/{i}", rounds=r,
                    mode="guess", use_fakes=fakes, rng=rng,
                )
            )  # fmt: skip
        finally:
            pop.set_value(u, "interested_in", old_v, visibility=old_vis)
    g2: list[AttackOutcome] = []
    for i, u in enumerate(t.clicks):
        u = int(u)
        old_t = bool(pop.topic[u])
        pop.topic[u] = bool(rng.integers_below(2, 1)[0])
        try:
            g2.append(
                inference_from_clicks(
                    plat, u, advertiser=f"{name}/game2/{i}", rounds=r, mode="guess",
                    use_fakes=fakes, broaden=broaden, rng=rng,
                )
            )  # fmt: skip
        finally:
            pop.topic[u] = old_t
    return g1, g2


def _game_rows(
    name: str, games: tuple[list[AttackOutcome], list[AttackOutcome]], budget: float | None
) -> list[dict[str, Any]]:
    """One row per game attack: accuracy, its Clopper-Pearson 95% CI and the ε-DP bound."""
    rows = []
    for att, outs in zip(GAME_ATTACKS, games, strict=True):
        if not outs:
            continue
        k = sum(o.outcome == "correct" for o in outs)
        ci_lo, ci_hi = clopper_pearson(k, len(outs), 0.05)
        bound = dp_accuracy_bound(budget) if budget else None
        rows.append(
            {
                "policy": name,
                "attack": att,
                "trials": len(outs),
                "correct": k,
                "accuracy": k / len(outs),
                "ci95_low": ci_lo,
                "ci95_high": ci_hi,
                "epsilon": budget,
                "bound": bound,
                "mean_epsilon_spent": float(np.mean([o.epsilon_spent for o in outs])),
                "within_bound": (ci_lo <= bound) if bound is not None else None,
            }
        )
    return rows


def _population(
    population: int | Population,
    rng: RandomSource,
    config: PopulationConfig | None,
    step: Callable[[str], None],
) -> tuple[Population, float | None]:
    """The population given, or ``population`` profiles built (and how long that took)."""
    if isinstance(population, Population):
        return population, None
    t0 = time.perf_counter()
    step(f"building {population:,} profiles")
    pop = generate_population(population, rng=rng, config=config)
    return pop, time.perf_counter() - t0


def run_ads_experiment(
    *,
    epsilons: Sequence[float],
    rng: RandomSource,
    population: int | Population = 1_000_000,
    targets: int = 200,
    threshold: int = 20,
    rounds: int = 3,
    dp_reports: int = 8,
    delivery: Delivery | None = None,
    config: PopulationConfig | None = None,
    on_step: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every policy × attack over ``targets`` random targets, and the binary game.

    ``epsilons``: the advertiser budgets of the DP policy (d) to measure (no default);
    each report spends ``ε / dp_reports``. ``rounds``: how many campaign periods the attacker
    tries under (a)-(c) (under (d) it runs until its budget is spent).
    """
    if not isinstance(rng, RandomSource):
        raise InvalidParameterError("rng", rng, "a searchveil.rng.RandomSource")
    eps_list = [check_positive("epsilon", e) for e in epsilons]
    if not eps_list:
        raise InvalidParameterError("epsilons", list(epsilons), "one or more ε > 0 (no default)")
    targets = check_int("targets", targets, minimum=1, maximum=100_000)
    threshold = check_int("threshold", threshold, minimum=1)
    rounds = check_int("rounds", rounds, minimum=1, maximum=100)
    dp_reports = check_int("dp_reports", dp_reports, minimum=1, maximum=1000)
    step = on_step or (lambda _s: None)
    t0 = time.perf_counter()
    pop, build_seconds = _population(population, rng, config, step)
    tg = _pick_targets(pop, rng.numpy_generator(), targets)

    blueprint: list[dict[str, Any]] = []
    game: list[dict[str, Any]] = []
    ledgers: dict[str, Any] = {}
    provenances: dict[str, Any] = {}
    timings: dict[str, float] = {}
    for name, pol, bypass in _policies(eps_list, threshold, dp_reports):
        step(f"attacks under policy {name}")
        tp = time.perf_counter()
        plat = AdPlatform(pop, pol, rng=rng, delivery=delivery)
        dp = isinstance(pol, DPReportingPolicy)
        run = _Run(name, max(rounds, dp_reports) if dp else rounds, bypass == "fakes",
                   bypass == "broaden")  # fmt: skip
        budget = pol.advertiser_budget if isinstance(pol, DPReportingPolicy) else None
        outcomes = _blueprint_attacks(plat, run, tg)
        vis = (pop.visibility["interested_in"], pop.visibility["age"], None)
        for att, outs, v in zip(ATTACKS, outcomes, vis, strict=True):
            if outs:
                blueprint.append(_summary(name, att, outs, budget, v))
        game += _game_rows(name, _binary_game(plat, pop, run, tg, rng), budget)
        if dp:
            ledgers[name] = plat.ledger(parameters={"dp_reports_per_budget": dp_reports})
            provenances[name] = plat.provenance()
        timings[name] = time.perf_counter() - tp
    return {
        "experiment": "ad-targeting inference (Korolova 2012 thesis §2.2.3-2.2.6)",
        "population": {
            **pop.describe(),
            "build_seconds": build_seconds,
            "sha256": pop.fingerprint(),
        },
        "parameters": {
            "targets": targets,
            "threshold": threshold,
            "rounds": rounds,
            "dp_reports_per_budget": dp_reports,
            "epsilons": eps_list,
            "delivery": (delivery or Delivery()).__dict__,
        },
        "randomness": rng.describe(),
        "seeded": bool(rng.seeded),
        "blueprint": blueprint,
        "binary_game": game,
        "ledgers": ledgers,
        "provenances": provenances,
        "policy_seconds": timings,
        "seconds": time.perf_counter() - t0,
    }
