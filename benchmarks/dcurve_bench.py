"""The d-curve on a thesis-sized synthetic log (issue 12 item 5): fit the generator on the
bundled 215-user AOL sample, draw N users' query events in memory, compute the expected
% distinct / % volume released by Release-Data and Gaussian selection for each d, exactly
(searchveil.evaluate.dcurve). Prints the table and the time of each stage.

    PYTHONPATH=src python benchmarks/dcurve_bench.py --users 500000 [--workers 2] [--json] [--spell]

Without ``--spell`` the events carry integer query keys (searchveil.synth.synthetic_events(...,
spell=False)): the same draws, several times faster.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from searchveil.evaluate.dcurve import DEFAULT_DS, dcurve_from_events, format_dcurve
from searchveil.io.readers import read_log
from searchveil.rng import make_rng
from searchveil.synth import fit, synthetic_events

SAMPLE = Path(__file__).resolve().parents[1] / "src/searchveil/data/aol-gayo-avello-215-users.tsv"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--users", type=int, default=500_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--epsilon", type=float, default=math.log(10.0))  # thesis: e^ε = 10
    ap.add_argument("--seed", type=int, default=2012)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--spell", action="store_true", help="spell the queries (slower; same draws, same curve)"
    )
    a = ap.parse_args()
    delta = 1.0 / (10.0 * a.users)  # δ ≤ 1/(10·U): protects everyone (issue 12 item 1)
    t0 = time.perf_counter()
    model = fit(read_log(SAMPLE), rng=make_rng(a.seed))
    t1 = time.perf_counter()
    ev = synthetic_events(
        model, users=a.users, rng=make_rng(a.seed), workers=a.workers, spell=a.spell
    )
    t2 = time.perf_counter()
    res = dcurve_from_events(ev, epsilon=a.epsilon, delta=delta, ds=DEFAULT_DS)
    t3 = time.perf_counter()
    res["seconds"] = {"fit": t1 - t0, "generate": t2 - t1, "dcurve": t3 - t2, "total": t3 - t0}
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(
        f"users {res['users']:,}  query events {res['query_events']:,}  distinct queries "
        f"{res['distinct_queries']:,}  single-user queries {res['single_user_queries']:,}"
    )
    print(f"epsilon {a.epsilon:.4g}  delta {delta:.3g}")
    print(format_dcurve(res))
    print("best:", json.dumps(res["best"]))
    print("seconds:", json.dumps({k: round(v, 1) for k, v in res["seconds"].items()}))


if __name__ == "__main__":
    main()
