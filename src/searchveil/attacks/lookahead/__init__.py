"""Lookahead link-stealing (Korolova thesis ch. 6): the public API.

* :mod:`.graphs` — configuration-model power-law graphs (§6.3.1.1);
* :mod:`.attack` — the five bribing strategies of §6.2.3 with incremental coverage;
* :mod:`.theory` — Theorem 8 and Corollaries 2–3 (§6.4.1, Table 6.2);
* :mod:`.experiments` — chapter 6's experiments (:func:`run_lookahead_experiments`);
* :mod:`.report` — their HTML sections (:func:`lookahead_sections`, :func:`lookahead_report`).
"""

from __future__ import annotations

from searchveil.attacks.lookahead.attack import STRATEGIES, AttackRun, coverage_of, run_attack
from searchveil.attacks.lookahead.experiments import run_lookahead_experiments
from searchveil.attacks.lookahead.graphs import configuration_model, power_law_graph
from searchveil.attacks.lookahead.report import lookahead_report, lookahead_sections
from searchveil.attacks.lookahead.theory import table_6_2

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
