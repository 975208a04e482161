"""Attack simulators that show how non-private interfaces leak (Korolova thesis ch. 2 and 6).

* :mod:`searchveil.attacks.lookahead` — lookahead link-stealing (ch. 6): configuration-model
  power-law graphs (§6.3.1.1), the five bribing strategies of §6.2.3 with incremental coverage,
  Theorem 8 and Corollaries 2–3 (§6.4.1, Table 6.2), the chapter's experiments and their HTML;
* :mod:`searchveil.attacks.ads` — ad-targeting inference (§2.2.3–2.2.6) against a simulated
  microtargeting platform under four policies;
* :mod:`searchveil.attacks.record` — the JSON record of a run (not a release).

The two subpackages never import each other. These are simulations, not differentially
private releases.
"""
