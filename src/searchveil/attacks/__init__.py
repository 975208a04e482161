"""Attack simulators that show how non-private interfaces leak (Korolova thesis ch. 2 and 6).

* :mod:`searchveil.attacks.graphs` — configuration-model power-law graphs (§6.3.1.1);
* :mod:`searchveil.attacks.lookahead` — lookahead link-stealing: the five bribing strategies
  of §6.2.3 with incremental coverage;
* :mod:`searchveil.attacks.theory` — Theorem 8 and Corollaries 2–3 (§6.4.1, Table 6.2);
* :mod:`searchveil.attacks.reproduce` — chapter 6's experiments and their HTML sections;
* :mod:`searchveil.attacks.ads` — ad-targeting inference (§2.2.3–2.2.6) against a simulated
  microtargeting platform under four policies (ads_population, ads_platform, ads_attacks).

These are simulations, not differentially private releases.
"""

from __future__ import annotations

from searchveil.attacks.graphs import configuration_model, power_law_graph
from searchveil.attacks.lookahead import STRATEGIES, AttackRun, coverage_of, run_attack
from searchveil.attacks.reproduce import (
    lookahead_report,
    lookahead_sections,
    run_lookahead_experiments,
)
from searchveil.attacks.theory import table_6_2

__all__ = [
    "STRATEGIES",
    "AttackRun",
    "configuration_model",
    "coverage_of",
    "lookahead_report",
    "lookahead_sections",
    "power_law_graph",
    "run_attack",
    "run_lookahead_experiments",
    "table_6_2",
]
