"""Ad-targeting inference (Korolova thesis §2.2.3-2.2.6): the simulator's marginals match its
configuration; Attacks 1 and 2 break the 2010 policy and the reach threshold (with fake
accounts); public-only matching makes reports independent of non-public attributes (exact);
DP reports satisfy ε exactly on neighbouring populations and pass the statistical audit."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from searchveil.attacks.ads import (
    AdPlatform,
    Delivery,
    DPReportingPolicy,
    MinReachPolicy,
    Policy2010,
    PopulationConfig,
    PublicOnlyPolicy,
    Targeting,
    ads_sections,
    background_targeting,
    dp_accuracy_bound,
    generate_population,
    inference_from_clicks,
    inference_from_impressions,
    noisy_report_pmf,
    run_ads_experiment,
    true_report_pmf,
)
from searchveil.attacks.ads.population import AGE_BANDS, ATTRIBUTES, EVERYONE, ONLY_ME
from searchveil.audit import audit_event
from searchveil.cli import app
from searchveil.errors import BudgetExceededError, InvalidParameterError
from searchveil.rng import make_rng


@pytest.fixture(scope="module")
def pop_big():  # type: ignore[no-untyped-def]
    return generate_population(200_000, rng=make_rng(11))


@pytest.fixture(scope="module")
def pop_small():  # type: ignore[no-untyped-def]
    return generate_population(20_000, rng=make_rng(12))


def _close(observed: float, p: float, n: int, sigmas: float = 5.0) -> bool:
    return abs(observed - p) <= sigmas * math.sqrt(p * (1 - p) / n) + 1e-12


# -- the simulator -------------------------------------------------------------------------
def test_marginals_match_the_configuration(pop_big) -> None:  # type: ignore[no-untyped-def]
    cfg, pop, n = PopulationConfig(), pop_big, pop_big.size
    assert _close(float((pop.values["gender"] == 1).mean()), cfg.female_share, n)
    ages = pop.values["age"].astype(int) + 12
    for (lo, hi), p in zip(AGE_BANDS, cfg.age_band_probs, strict=True):
        assert _close(float(((ages >= lo) & (ages <= hi)).mean()), p, n), (lo, hi)
    ii = pop.values["interested_in"]
    assert _close(float((ii > 0).mean()), cfg.interested_in_listed, n)
    listed = ii > 0
    opposite = np.where(pop.values["gender"] == 1, 1, 2)
    same = float((ii[listed] != opposite[listed]).mean())
    assert _close(same, cfg.same_sex_share, int(listed.sum()))
    for a in ATTRIBUTES:
        for v, p in enumerate(cfg.visibility_probs(a)):
            assert _close(float((pop.visibility[a] == v).mean()), p, n), (a, v)
    assert _close(float(pop.topic.mean()), cfg.topic_prevalence, n)
    daily = float((pop.login_p == cfg.daily_login_p).mean())
    assert _close(daily, cfg.daily_user_share, n)
    # correlations: married share rises with age; 'none' religion is commoner among the young
    rel, rg = pop.values["relationship"], pop.values["religion"]
    young, old = (ages >= 18) & (ages <= 24), ages >= 45
    assert (rel[old] == 4).mean() > 5 * (rel[young] == 4).mean()
    assert (rg[ages < 30] == 5).mean() > 1.5 * (rg[ages >= 30] == 5).mean()


def test_invalid_configuration_and_targeting_are_typed_errors() -> None:
    with pytest.raises(InvalidParameterError, match="female_share"):
        PopulationConfig(female_share=1.5)
    with pytest.raises(InvalidParameterError, match="age_band_probs"):
        PopulationConfig(age_band_probs=(0.5, 0.5, 0.5, 0, 0, 0))
    with pytest.raises(InvalidParameterError, match="age"):
        Targeting.of(age=0)
    with pytest.raises(InvalidParameterError, match="attribute"):
        Targeting.of(shoe_size=3)
    with pytest.raises(InvalidParameterError, match="population"):
        generate_population(0, rng=make_rng(1))
    with pytest.raises(InvalidParameterError, match="epsilon"):
        run_ads_experiment(epsilons=[], rng=make_rng(1), population=100, targets=1)
    with pytest.raises(InvalidParameterError, match="epsilon_per_report"):
        DPReportingPolicy(epsilon_per_report=0.0, advertiser_budget=1.0)


def test_matching_equals_a_brute_force_scan(pop_small) -> None:  # type: ignore[no-untyped-def]
    pop = pop_small
    t = Targeting.of(gender=1, age=range(10, 20), interests=[1, 2, 3], religion=[1, 5])
    for policy in (Policy2010(), PublicOnlyPolicy()):
        got = AdPlatform(pop, policy, rng=make_rng(1)).match(t)
        ok = np.ones(pop.size, dtype=bool)
        for a, codes in t.criteria:
            col = pop.values[a]
            hit = np.isin(col, codes)
            hit = hit.any(axis=1) if col.ndim == 2 else hit
            if policy.public_only:
                hit &= pop.visibility[a] == EVERYONE
            ok &= hit
        assert got.tolist() == np.flatnonzero(ok).tolist()
        assert got.size > 0


# -- the attacks ----------------------------------------------------------------------------
def _targets(pop, attribute: str, k: int, seed: int) -> list[int]:  # type: ignore[no-untyped-def]
    g = np.random.Generator(np.random.PCG64(seed))
    ok = (pop.values[attribute] > 0) & (pop.visibility[attribute] != EVERYONE)
    return [int(u) for u in g.choice(np.flatnonzero(ok), k, replace=False)]


def _attack1(plat, targets, fakes=False):  # type: ignore[no-untyped-def]
    return Counter(
        inference_from_impressions(
            plat, u, "interested_in", [1, 2], advertiser=f"x{u}", rounds=3, use_fakes=fakes
        ).outcome
        for u in targets
    )


def test_attacks_break_the_2010_policy(pop_small) -> None:  # type: ignore[no-untyped-def]
    targets = _targets(pop_small, "interested_in", 40, 1)
    plat = AdPlatform(pop_small, Policy2010(), rng=make_rng(2))
    c = _attack1(plat, targets)
    assert c["correct"] >= 0.7 * len(targets), c
    assert c["wrong"] <= 0.1 * len(targets), c
    clicks = Counter(
        inference_from_clicks(plat, u, advertiser=f"c{u}", rounds=3).outcome for u in targets
    )
    assert clicks["correct"] >= 0.5 * len(targets), clicks


def test_reach_threshold_refuses_then_fake_accounts_bypass_it(pop_small) -> None:  # type: ignore[no-untyped-def]
    targets = _targets(pop_small, "interested_in", 40, 3)
    plat = AdPlatform(pop_small, MinReachPolicy(20), rng=make_rng(4))
    naive = [
        inference_from_impressions(plat, u, "interested_in", [1, 2], advertiser=f"n{u}", rounds=1)
        for u in targets
    ]
    assert sum(o.outcome == "correct" for o in naive) == 0
    assert sum(o.reason.startswith("refused") for o in naive) >= 0.9 * len(targets)
    c = _attack1(plat, targets, fakes=True)
    assert c["correct"] >= 0.7 * len(targets), c
    out = inference_from_impressions(
        plat, targets[0], "interested_in", [1, 2], advertiser="f", rounds=1, use_fakes=True
    )
    assert out.fake_accounts == 20
    # the fakes were retired after the attack: a campaign on them alone is refused again
    _, profile = background_targeting(plat, targets[0], exclude="interested_in")
    assert plat.estimated_reach(Targeting.of(**profile)) < 20


def test_broader_personalised_ad_bypasses_the_threshold_for_attack_2(pop_small) -> None:  # type: ignore[no-untyped-def]
    g = np.random.Generator(np.random.PCG64(13))
    users = [int(u) for u in g.choice(np.flatnonzero(pop_small.topic), 20, replace=False)]
    users += [int(u) for u in g.choice(np.flatnonzero(~pop_small.topic), 20, replace=False)]
    plat = AdPlatform(pop_small, MinReachPolicy(20), rng=make_rng(14))
    outs = [
        inference_from_clicks(plat, u, advertiser=f"p{u}", rounds=1, broaden=True) for u in users
    ]
    assert all(o.outcome != "inconclusive" for o in outs)
    hits = sum(o.guess == 1 for o in outs[:20])
    false = sum(o.guess == 1 for o in outs[20:])
    assert hits > false  # better than chance: interested targets click more often
    with pytest.raises(InvalidParameterError, match="named_user"):
        plat.run_campaign("p", Targeting.of(gender=1), creative="personalized")
    with pytest.raises(InvalidParameterError, match="broaden"):
        inference_from_clicks(
            plat, users[0], advertiser="q", rounds=1, broaden=True, use_fakes=True
        )


def test_public_only_reports_do_not_depend_on_hidden_attributes(pop_small) -> None:  # type: ignore[no-untyped-def]
    """Exact: for a target, every non-public attribute flipped → bit-identical reports for the
    same platform randomness, and identical exact report distributions."""
    pop = pop_small
    targets = _targets(pop, "interested_in", 15, 5)
    for u in targets:
        plat = AdPlatform(pop, PublicOnlyPolicy(), rng=make_rng(6))
        base, _ = background_targeting(plat, u, exclude="interested_in")
        campaigns = [base.with_criterion("interested_in", v) for v in (1, 2)]
        campaigns += [base, Targeting.of(interested_in=[1, 2]), Targeting.of(religion=[1, 2, 5])]
        hidden = [a for a in ATTRIBUTES if a != "interests" and pop.visibility[a][u] != EVERYONE]
        assert "interested_in" in hidden

        def reports(p, campaigns):  # type: ignore[no-untyped-def]
            plat = AdPlatform(p, PublicOnlyPolicy(), rng=make_rng(7))
            return [plat.run_campaign("adv", t).report for t in campaigns]

        before = reports(pop, campaigns)
        old = {a: int(pop.values[a][u]) for a in hidden}
        try:
            for a in hidden:
                pop.set_value(u, a, (old[a] % (pop.n_values[a] - 1)) + 1)
            after = reports(pop, campaigns)
        finally:
            for a in hidden:
                pop.set_value(u, a, old[a])
        assert before == after
        assert AdPlatform(pop, Policy2010(), rng=make_rng(1)).match(campaigns[0]).size >= 0
    # the contrast: under the 2010 policy the target's hidden value decides the match
    u = targets[0]
    plat = AdPlatform(pop, Policy2010(), rng=make_rng(8))
    base, _ = background_targeting(plat, u, exclude="interested_in")
    v = int(pop.values["interested_in"][u])
    assert u in plat.match(base.with_criterion("interested_in", v)).tolist()
    assert u not in plat.match(base.with_criterion("interested_in", 3 - v)).tolist()


def test_public_only_stops_attack_1_on_only_me_attributes(pop_small) -> None:  # type: ignore[no-untyped-def]
    pop = pop_small
    g = np.random.Generator(np.random.PCG64(9))
    ok = (pop.values["interested_in"] > 0) & (pop.visibility["interested_in"] == ONLY_ME)
    targets = [int(u) for u in g.choice(np.flatnonzero(ok), 30, replace=False)]
    plat = AdPlatform(pop, PublicOnlyPolicy(), rng=make_rng(10))
    for u in targets:
        o = inference_from_impressions(
            plat, u, "interested_in", [1, 2], advertiser=f"p{u}", rounds=2
        )
        # the target itself never matches, so whatever the attacker concludes comes from others
        assert u not in plat.match(Targeting.of(interested_in=[1, 2])).tolist()
        assert o.outcome in ("inconclusive", "correct", "wrong")


# -- DP reports: exact neighbour check, audit, budget ---------------------------------------
SMALL = Delivery(days=2, frequency_cap=2)


def _neighbour_case(pop, seed):  # type: ignore[no-untyped-def]
    g = np.random.Generator(np.random.PCG64(seed))
    ok = np.flatnonzero((pop.values["interested_in"] > 0) & (pop.login_p > 0.9))
    for u in g.permutation(ok):
        plat = AdPlatform(pop, Policy2010(), rng=make_rng(1), delivery=SMALL)
        base, _ = background_targeting(plat, int(u), exclude="interested_in")
        t = base.with_criterion("interested_in", int(pop.values["interested_in"][u]))
        if 1 <= plat.match(t).size <= 4:
            return int(u), t
    raise AssertionError("no small audience found")


@pytest.mark.parametrize("eps", [0.3, 1.0, 3.0])
def test_dp_report_pmf_ratio_is_at_most_e_eps_on_neighbours(pop_small, eps: float) -> None:  # type: ignore[no-untyped-def]
    pop = pop_small
    pol = DPReportingPolicy(epsilon_per_report=eps, advertiser_budget=10 * eps)
    for seed in (1, 2):
        u, t = _neighbour_case(pop, seed)
        for creative in ("innocuous", "topic"):
            plat = AdPlatform(pop, pol, rng=make_rng(3), delivery=SMALL)
            p_d = true_report_pmf(plat, t, creative=creative)
            old = int(pop.values["interested_in"][u])
            old_topic = bool(pop.topic[u])
            try:
                pop.set_value(u, "interested_in", 3 - old)  # the target leaves the audience
                pop.topic[u] = not old_topic
                p_n = true_report_pmf(plat, t, creative=creative)
            finally:
                pop.set_value(u, "interested_in", old)
                pop.topic[u] = old_topic
            assert math.isclose(p_d.sum(), 1.0) and math.isclose(p_n.sum(), 1.0)
            grid = np.array(
                [(r, i, c) for r in range(-3, 7) for i in range(-6, 20, 2) for c in range(-2, 4)]
            )
            a = noisy_report_pmf(p_d, pol, SMALL, grid)
            b = noisy_report_pmf(p_n, pol, SMALL, grid)
            ratio = np.abs(np.log(a / b))
            assert ratio.max() <= eps * (1 + 1e-9), (ratio.max(), eps)
            assert ratio.max() >= 0.2 * eps  # not vacuous: the target does change the report


@pytest.mark.audit
def test_dp_reports_pass_the_statistical_audit(pop_small) -> None:  # type: ignore[no-untyped-def]
    pop = pop_small
    eps = 3.0
    u, t = _neighbour_case(pop, 1)
    pol = DPReportingPolicy(epsilon_per_report=eps, advertiser_budget=1e9)
    rng = make_rng(20260101)
    old = int(pop.values["interested_in"][u])

    def sample(value: int):  # type: ignore[no-untyped-def]
        def f(trials: int) -> int:
            pop.set_value(u, "interested_in", value)
            try:
                plat = AdPlatform(pop, pol, rng=rng, delivery=SMALL)
                return sum(
                    (plat.run_campaign("a", t).report.reach or 0) >= 1 for _ in range(trials)
                )
            finally:
                pop.set_value(u, "interested_in", old)

        return f

    res = audit_event(sample(old), sample(3 - old), trials=4000, epsilon=eps, delta=0.0, alpha=1e-6)
    assert res.passed, res
    assert res.epsilon_lower_bound > 0.1, res  # the audit detects the target's influence


def test_budget_is_enforced_before_noise_and_recorded(pop_small) -> None:  # type: ignore[no-untyped-def]
    pol = DPReportingPolicy(epsilon_per_report=0.4, advertiser_budget=1.0)
    plat = AdPlatform(pop_small, pol, rng=make_rng(5))
    t = Targeting.of(gender=1, age=5)
    plat.run_campaign("eve", t)
    plat.run_campaign("eve", t)
    with pytest.raises(BudgetExceededError, match="eve"):
        plat.run_campaign("eve", t)
    assert len(plat.events) == 2  # nothing drawn for the refused report
    plat.run_campaign("bob", t)
    led = plat.ledger()
    assert led["accounting"]["advertisers"]["eve"]["spent"] == pytest.approx(0.8)
    assert led["accounting"]["advertisers"]["bob"]["spent"] == pytest.approx(0.4)
    assert led["seeded"] is True and led["for_release"] is False
    assert led["epsilon"] == 1.0 and led["delta"] == 0.0
    # the population is the private input: its size and fingerprint are in the provenance record
    prov = plat.provenance()
    assert len(prov["inputs"][0]["sha256"]) == 64 and prov["inputs"][0]["sha256"] not in str(led)
    assert "inputs" not in led and led["relation"] == "user"


def test_dp_accuracy_bound() -> None:
    assert dp_accuracy_bound(math.log(3)) == pytest.approx(0.75)
    with pytest.raises(InvalidParameterError):
        dp_accuracy_bound(0.0)


# -- the experiment, report and CLI ----------------------------------------------------------
def test_experiment_table_and_sections() -> None:
    r = run_ads_experiment(epsilons=[0.5], rng=make_rng(21), population=20_000, targets=30)
    pols = {b["policy"] for b in r["blueprint"]}
    assert len(pols) == 6 and len(r["blueprint"]) == 16 and len(r["binary_game"]) == 11
    by = {(b["policy"], b["attack"]): b for b in r["blueprint"]}
    assert by[("a: 2010", "impressions: interested in")]["success_rate"] >= 0.6
    assert by[("b: min reach 20", "impressions: interested in")]["success_rate"] == 0.0
    assert by[("b: min reach 20 + fakes", "impressions: interested in")]["success_rate"] >= 0.6
    for v, rate in by[("c: public only", "impressions: interested in")][
        "success_by_visibility"
    ].items():
        assert rate["success_rate"] <= 0.25, v  # (c) ~ 0.85 if it matched hidden attributes
    for g in r["binary_game"]:
        if g["epsilon"]:
            assert g["ci95_low"] <= g["bound"]
    html = "\n".join(ads_sections(r))
    assert "Binary game" in html and "c: public only" in html and "<img" in html
    assert "d: DP ε=0.5" in r["ledgers"]


def test_cli_requires_epsilon_and_writes_report_and_ledger(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(
        app, ["attack", "ads", "--population", "2000", "--report", str(tmp_path / "r.html")]
    )
    assert res.exit_code == 2 and "--epsilon" in res.output
    assert not (tmp_path / "r.html").exists()
    res = runner.invoke(app, ["attack", "ads", "--epsilon", "1,abc", "--population", "2000"])
    assert res.exit_code == 2
    res = runner.invoke(
        app,
        [
            "attack",
            "ads",
            "--epsilon",
            "1",
            "--population",
            "5000",
            "--targets",
            "8",
            "--seed",
            "4",
            "--report",
            str(tmp_path / "r.html"),
            "--ledger",
            str(tmp_path / "l.json"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["seeded"] is True and len(out["blueprint"]) == 16
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    led = json.loads((tmp_path / "l.json").read_text())
    assert led["d: DP ε=1"]["mechanism"] == "ads-dp-campaign-reports"
    prov = tmp_path / "l.json.private.json"
    assert (prov.stat().st_mode & 0o777) == 0o600
    assert json.loads(prov.read_text())["inputs"][0]["profiles"] == 5000
    assert (
        json.loads(prov.read_text())["inputs"][0]["sha256"] not in (tmp_path / "l.json").read_text()
    )
    res = runner.invoke(
        app,
        [
            "attack",
            "ads",
            "--epsilon",
            "2",
            "--population",
            "3000",
            "--targets",
            "4",
            "--seed",
            "5",
            "--report",
            str(tmp_path / "s.html"),
        ],
    )
    assert res.exit_code == 0, res.output
    led = json.loads((tmp_path / "s.html.ledger.json").read_text())
    assert led["d: DP ε=2"]["epsilon"] == 2.0 and led["d: DP ε=2"]["seeded"] is True
