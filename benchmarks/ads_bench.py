"""Benchmark the ad-platform simulator (Korolova thesis §2.2): build a population of 10^6
profiles, then time single campaigns (a unique-target campaign as in Attack 1, a broad one,
a public-only one, a DP-reported one) and one full Attack 1 run.

    PYTHONPATH=src python benchmarks/ads_bench.py [--population 1000000] [--repeat 200]

Timings on a shared 2-core machine are inflated; the script prints medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from searchveil.attacks.ads import (
    AdPlatform,
    DPReportingPolicy,
    Policy2010,
    PublicOnlyPolicy,
    Targeting,
    background_targeting,
    generate_population,
    inference_from_impressions,
)
from searchveil.attacks.ads.population import EVERYONE
from searchveil.rng import make_rng


def _median_ms(fn: Callable[[], Any], repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return 1000 * statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--population", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = make_rng(a.seed)
    t = time.perf_counter()
    pop = generate_population(a.population, rng=rng)
    build = time.perf_counter() - t
    t = time.perf_counter()
    for attr in ("gender", "age", "location", "workplace", "college", "interests"):
        pop.candidates(attr, np.array([1]))  # builds the inverted index
    index = time.perf_counter() - t
    g = np.random.Generator(np.random.PCG64(a.seed))
    ok = (pop.values["interested_in"] > 0) & (pop.visibility["interested_in"] != EVERYONE)
    users = [int(u) for u in g.choice(np.flatnonzero(ok), a.repeat, replace=False)]
    plat = AdPlatform(pop, Policy2010(), rng=rng)
    unique = [background_targeting(plat, u, exclude="interested_in")[0] for u in users]
    it = iter(unique * 2)
    broad = Targeting.of(gender=1, age=range(10, 20))
    pub = AdPlatform(pop, PublicOnlyPolicy(), rng=rng)
    dp = AdPlatform(pop, DPReportingPolicy(epsilon_per_report=0.1, advertiser_budget=1e9), rng=rng)
    res = {
        "population": a.population,
        "build_seconds": round(build, 3),
        "index_seconds": round(index, 3),
        "unique_campaign_ms": _median_ms(lambda: plat.run_campaign("b", next(it)), a.repeat),
        "broad_campaign_ms": _median_ms(lambda: plat.run_campaign("b", broad), 20),
        "broad_audience": int(plat.match(broad).size),
        "public_only_broad_campaign_ms": _median_ms(lambda: pub.run_campaign("b", broad), 20),
        "dp_unique_campaign_ms": _median_ms(lambda: dp.run_campaign("b", unique[0]), a.repeat),
    }
    it2 = iter(users * 2)
    res["attack1_ms"] = _median_ms(
        lambda: (
            lambda u: inference_from_impressions(
                plat, u, "interested_in", [1, 2], advertiser=f"a{u}", rounds=3
            )
        )(next(it2)),
        a.repeat,
    )
    print(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
