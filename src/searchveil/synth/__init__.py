"""A synthetic search-log generator calibrated on a real sample, for scale tests and benchmarks.

Why: the real logs we may bundle are small (the shared AOL extracts have 215 and 1,000 users);
the scale benchmarks need AOL-sized logs (36M rows, 657k users) with the *shape* that drives the
cost and the utility of the releases: how many queries a user issues, how often users repeat
themselves, how skewed query popularity is, how the vocabulary grows with the number of users,
how many clicks a query gets and how they spread over URLs, and how queries are spaced in time.

What :func:`fit` estimates from the calibration log (all stored in :class:`SynthModel`, JSON):

* ``events_per_user`` — the empirical distribution of query events per user (bootstrapped;
  optionally rescaled so that the output has about ``rows`` rows);
* ``repeat_rate`` — P(a user's query event repeats one of *their own* earlier queries);
* ``tail_rate`` — among a user's first occurrences of a query, the share of queries held by
  that user only (reported; the generator's unique tail is what the head law leaves);
* **the head** (issue 12: the share of users holding each top query must not shrink as users
  are added, and head queries must be real ones). Each *fresh draw* of a user (the first event
  and each later event that is not a repeat) picks query k with probability w·p_k, where

  - ``head_probs`` p_1..p_K are *pinned* for the K queries held by ≥ ``min_head_users`` (3)
    users of the sample, moment-matched so that Σ_users P(hold) = the sample's holders under
    this very generator (P(hold) = 1 − (1 − wp)(1 − (1−r)wp)^(n−1), :func:`hold_probability`);
  - ``head_gamma`` γ: a user's *exposure* w = E^(γ−1), E = 1 + (n−1)(1−r) their expected
    fresh draws (:func:`exposure`). Heavy users hold popular queries less often than
    independent draws predict; γ is the maximum-likelihood value (grid 0.2..1) for the sample's
    user × pinned-query holding matrix (0.62 on the bundled sample; γ = 1 is rejected);
  - ranks K+1..V continue the pinned law at the sample's average exposure ``head_join_exposure``:
    p_k = ``head_join``·(k/(K+1))^(−α), α (``head_alpha``) the log-log slope of the pinned
    p_k; V = ``head_vocab``·(U/``sample_users``)^``heaps_beta`` grows with the population
    (Heaps; β from random quarters and halves of the sample, capped to [0.3, 1]) until the
    continuation's mass reaches ``head_mass_max`` minus the average pinned mass;
    ``head_mass_max`` (0.5) is the one constant chosen against a published figure (AOL's
    10.15M distinct queries at 657k users; docs/synth.md);
  - everything else is a globally unique tail query.

  ``head_zipf_s`` (the old Zipf fit over shared queries) is kept for reports and older JSON.
* ``clicks_per_event`` — the distribution of clicks per query event (0 = a row without URL);
* ``url_rank_probs`` — the share of a query's clicks that go to its k-th most clicked URL
  (k = 1..10); each synthetic query has a deterministic list of URLs, so different users who
  issue the same query click the same (query, url) pairs as in a real log;
* ``gap_quantiles`` — 1,001 quantiles of the time between consecutive query events of a user
  (inverse-CDF sampling with linear interpolation); user start times are uniform over the
  sample's time span;
* ``words`` / ``word_probs`` / ``query_len_probs`` — the keyword distribution and the number of
  words per query, used to spell queries and URLs;
* ``head_queries`` — the sample's own queries, most users (then most events) first: head key
  k is spelled by the k-th (so ranks beyond the pinned ones are real queries of the sample too,
  up to ``max_head_strings``); keys beyond them and the tail are spelled with ≥ 3 words drawn
  from the tempered (p^½) word law, so millions of them stay distinct instead of colliding on
  frequent words ("of", "in", "county of") into a fake head.

Strings. With ``strings="real"`` (default) the output spells the head with the calibration log's
own shared queries and words, so it *reads* like a search log. **That is verbatim data of the
calibration log: a synthetic log is not a privacy-preserving release** (it is not differentially
private and is never written with a ledger). ``strings="opaque"`` spells every query and URL
with opaque tokens (``w123``) instead, keeping only the statistics.

Speed: generation is vectorised per chunk of users (numpy for the draws, Polars for the
strings and the TSV/Parquet writer), the compression of ``.gz`` output runs in a thread beside
the generation of the next chunk, and the file is written to a temporary name and renamed.
"""

from searchveil.synth.check import (
    Observed,
    heldout_head_check,
    heldout_split_check,
    heldout_window_check,
    window_share_curve,
)
from searchveil.synth.files import read_model, write_synthetic
from searchveil.synth.fit import exposure, fit, hold_probability, user_share_curve
from searchveil.synth.generate import generate, synthetic_events
from searchveil.synth.model import (
    HEAD_MASS_MAX,
    OutputFormat,
    StringMode,
    SynthModel,
    expected_rows,
)

__all__ = [
    "SynthModel",
    "fit",
    "generate",
    "write_synthetic",
    "read_model",
    "expected_rows",
    "synthetic_events",
    "heldout_head_check",
    "heldout_split_check",
    "heldout_window_check",
    "window_share_curve",
    "user_share_curve",
    "hold_probability",
    "exposure",
    "HEAD_MASS_MAX",
    "StringMode",
    "Observed",
    "OutputFormat",
]
