"""Noise and thresholds as a plan run where the counts are (issue 40,
``searchveil.mechanisms.noisy_counts``): the seeded bucket streams are a function of the keys
only — whatever the row order or the partitioning, the same noise per row —, the plan's steps
do what they say, and the distributed draw has the central sampler's distribution (χ² at
α = 1e-6)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats

from searchveil.engines.contract import LocalCounts
from searchveil.mechanisms.noise import DiscreteGaussian, DiscreteLaplace
from searchveil.mechanisms.noisy_counts import (
    NOISE_BUCKETS,
    CountSummary,
    NoisePlan,
    NoisyStep,
    apply_plan_local,
    bucket_order,
    noise_buckets,
    noise_key,
    seeded_steps,
)
from searchveil.rng import SecureRandom, SeededRandom, make_rng

ALPHA = 1e-6


def _counts(n: int, seed: int = 1) -> pl.DataFrame:
    g = np.random.default_rng(seed)
    words = np.array(["news", "weather", "ébène", "x" * 30, "", "a b", "q"])
    q = [f"{words[i % 7]} {j}" for i, j in enumerate(g.permutation(n))]
    return pl.DataFrame({"query": q, "count": g.integers(0, 40, n)})


PLAN = NoisePlan(
    (NoisyStep(DiscreteLaplace(2.0), threshold=10),
     NoisyStep(DiscreteLaplace(3.0), publish="noisy_count", clamp=True)),
    small_counts=5,
)  # fmt: skip


def test_buckets_and_order_are_a_function_of_the_keys() -> None:
    df = _counts(5000)
    b = noise_buckets(df, ["query"])
    assert b.min() >= 0 and b.max() < NOISE_BUCKETS and np.unique(b).size > NOISE_BUCKETS // 2
    order, buckets = bucket_order(df, ["query"])
    assert (np.diff(buckets) >= 0).all()  # bucket-major
    shuffled = df.sample(fraction=1.0, shuffle=True, seed=3)
    o2, _ = bucket_order(shuffled, ["query"])
    assert shuffled[o2.tolist()].equals(df[order.tolist()])
    # strings that agree in length and first and last 8 bytes share a word: ordered by text
    tie = pl.DataFrame({"query": ["abcdefgh-Z-12345678", "abcdefgh-A-12345678", "other"]})
    o3, _ = bucket_order(tie, ["query"])
    got = tie[o3.tolist()].get_column("query").to_list()
    assert got.index("abcdefgh-A-12345678") + 1 == got.index("abcdefgh-Z-12345678")


def test_seeded_noise_is_independent_of_the_partitioning() -> None:
    """What a cluster does — partial counts split over tasks, each bucket's rows brought
    together in some partition, summed, and drawn from the bucket's streams — gives the same
    rows as one machine's release, for any split into partitions."""
    df = _counts(4000)
    key = noise_key(SeededRandom(5))
    assert key is not None
    whole = seeded_steps(df, ["query"], PLAN, key).sort("query")
    g = np.random.default_rng(2)
    for parts in (1, 5):
        # partial counts: every count split in two rows, as two tasks would send it
        a = df.with_columns(count=pl.col("count") // 2)
        partial = pl.concat([a, df.with_columns(count=pl.col("count") - a.get_column("count"))])
        where = g.integers(0, parts, NOISE_BUCKETS)[noise_buckets(partial, ["query"])]
        got = []
        for p in range(parts):
            mine = partial.filter(pl.Series(where == p)).sample(fraction=1.0, shuffle=True, seed=p)
            summed = mine.group_by("query").agg(pl.col("count").sum())
            got.append(seeded_steps(summed, ["query"], PLAN, key))
        assert pl.concat(got).sort("query").equals(whole), parts
    # another key draws other noise
    other = seeded_steps(df, ["query"], PLAN, key + 1).sort("query")
    assert not other.equals(whole)


def test_the_steps_do_what_they_say() -> None:
    df = _counts(3000).with_columns(count=pl.col("count") * 10)
    plan = NoisePlan(
        (NoisyStep(DiscreteLaplace(0.1), threshold=200, inclusive=True, publish="v"),),
        min_count=100, small_counts=30,
    )  # fmt: skip
    for rng in (make_rng(1), SecureRandom()):
        out = LocalCounts(df, ["query"]).release(plan, rng)
        s = out.summary
        c = df.get_column("count")
        assert (s.items, s.total) == (df.height, int(c.sum()))
        assert s.at_least_min == int((c >= 100).sum())
        assert s.small == {k: int((c == k).sum()) for k in (10, 20, 30) if (c == k).any()}
        rows = out.rows
        assert rows.get_column("count").min() >= 100  # min_count before any noise
        assert (rows.get_column("v") >= 200).all()  # ≥ with inclusive
        # scale 0.1: the noise is almost always 0
        assert abs(rows.height - int((c >= 200).sum())) <= 20
    # no row reaches a publishing step: the column is still there
    none = NoisePlan((NoisyStep(DiscreteLaplace(1.0), threshold=10**9),
                      NoisyStep(DiscreteLaplace(1.0), publish="p")))  # fmt: skip
    assert "p" in apply_plan_local(df, ["query"], none, make_rng(2)).columns


def test_summary_adds_up() -> None:
    df = _counts(1000)
    a, b = df.slice(0, 400), df.slice(400)
    s = CountSummary.of(a, PLAN)
    s.add(CountSummary.of(b, PLAN))
    assert s == CountSummary.of(df, PLAN)


@pytest.mark.parametrize(
    "noise", [DiscreteLaplace(3.0), pytest.param(DiscreteGaussian(2.5), marks=pytest.mark.slow)]
)
def test_bucketed_draws_have_the_central_distribution(noise: DiscreteLaplace) -> None:
    """Per row, the seeded bucket streams' noise (200,000 rows of count 0, 32
    buckets) and the secure path's (chunks) follow the exact pmf; and two-sample against the
    central sampler's draws (χ² at α = 1e-6)."""
    from test_noise import chi2_pvalue

    n = 200_000
    df = pl.DataFrame({"query": [f"item {i}" for i in range(n)], "count": np.zeros(n, np.int64)})
    plan = NoisePlan((NoisyStep(noise, publish="v"),))
    central = noise.sample(n, SeededRandom(9))
    for rng in (SeededRandom(8), SecureRandom()):
        x = apply_plan_local(df, ["query"], plan, rng).get_column("v").to_numpy()
        assert x.size == n
        assert chi2_pvalue(x, noise.pmf, -15, 15) > ALPHA
        edges = np.arange(-16, 18) - 0.5
        a, _ = np.histogram(np.clip(x, -16, 16), edges)
        c, _ = np.histogram(np.clip(central, -16, 16), edges)
        keep = (a + c) > 10
        assert stats.chi2_contingency(np.vstack([a[keep], c[keep]])).pvalue > ALPHA
