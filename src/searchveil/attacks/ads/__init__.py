"""Ad-targeting inference attacks (Korolova thesis ch. 2, §2.2.3-2.2.6): the public API.

* :mod:`searchveil.attacks.ads.population` — the synthetic population (marginals, visibility);
* :mod:`searchveil.attacks.ads.platform` — the microtargeting platform and its four policies;
* :mod:`searchveil.attacks.ads.inference` — Attack 1 / Attack 2 and the fake-account bypass;
* here: :func:`run_ads_experiment` (every policy × attack over random targets, plus the binary
  game that compares an attacker's accuracy with the ε-DP bound e^ε/(1+e^ε)) and
  :func:`ads_sections` (the HTML sections, house report style).

Expected and measured (docs/attacks-ads.md): (a) 2010 and (b) minimum reach with fake accounts
are broken by both attacks; (b) without fakes refuses every single-target campaign, and its
other bypass (broader audience + an ad naming the target) partly restores Attack 2; (c)
public-only matching stops Attack 1 for attributes that are not public (its reports do not
depend on them) but not Attack 2; (d) DP reports bound every attack's accuracy by
e^ε/(1+e^ε) for the advertiser's budget ε.
"""

from __future__ import annotations

from searchveil.attacks.ads.experiment import (
    ATTACKS,
    GAME_ATTACKS,
    dp_accuracy_bound,
    run_ads_experiment,
)
from searchveil.attacks.ads.inference import (
    QUASI_IDENTIFIERS,
    AttackOutcome,
    background_targeting,
    inference_from_clicks,
    inference_from_impressions,
)
from searchveil.attacks.ads.platform import (
    AdPlatform,
    CampaignReport,
    Delivery,
    DPReportingPolicy,
    MinReachPolicy,
    Policy,
    Policy2010,
    PublicOnlyPolicy,
    Targeting,
    noisy_report_pmf,
    true_report_pmf,
    user_delivery_pmf,
)
from searchveil.attacks.ads.population import Population, PopulationConfig, generate_population
from searchveil.attacks.ads.report import ads_sections, thesis_comparison

__all__ = [
    "ATTACKS",
    "GAME_ATTACKS",
    "run_ads_experiment",
    "ads_sections",
    "dp_accuracy_bound",
    "thesis_comparison",
    "AdPlatform",
    "AttackOutcome",
    "CampaignReport",
    "Delivery",
    "DPReportingPolicy",
    "MinReachPolicy",
    "Policy",
    "Policy2010",
    "Population",
    "PopulationConfig",
    "PublicOnlyPolicy",
    "QUASI_IDENTIFIERS",
    "Targeting",
    "background_targeting",
    "generate_population",
    "inference_from_clicks",
    "inference_from_impressions",
    "noisy_report_pmf",
    "true_report_pmf",
    "user_delivery_pmf",
]
