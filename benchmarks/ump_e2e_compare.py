"""Same-schema logs at one (ε, δ): which keeps more? (issue 29, docs/ump-reproduction.md).

``python benchmarks/ump_e2e_compare.py LOG --max-users U [--epsilon E] [--delta D]
[--conditional-timeout S] [--seed N]``

Runs, on one log and one (ε, δ) with δ ≤ 1/(10·U) by default:

* ``e2e synthetic (probe-reweight-2r)`` — ``release ump`` (the default): the probe-reweight-2r
  query-click release, a noisy profile of pairs per user, a generated log of synthetic users;
* ``e2e synthetic (zealous)`` — the same with ZEALOUS pair counts (what ``cels`` runs jointly);
* ``e2e real ids`` — Hong et al.'s sampling of real ids from an allocation of noisy counts;
* ``conditional`` — the paper's counts from the exact histogram (NOT differentially private;
  lp-floor), for reference, skipped after ``--conditional-timeout`` seconds;

and evaluates each written release with ``searchveil evaluate``'s library call: output rows,
distinct pairs, share of the input's click volume on the published pairs, KL (CELS eq. 2), Götz
index caching (hit rate at the largest cache) and query substitution (co-occurrence pairs,
coverage and MAP). Writes benchmarks/results/ump_e2e_<name>.json and prints a Markdown table.
Seeded: the figures are an experiment, not a release.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import tempfile
import time
from pathlib import Path
from typing import Any

from searchveil.evaluate import evaluate_release
from searchveil.io.readers import read_log
from searchveil.release import write_release
from searchveil.release.ump import UmpParams, release_ump
from searchveil.release.ump.e2e import E2EParams, release_ump_e2e
from searchveil.rng import SeededRandom

HERE = Path(__file__).resolve().parent


def _conditional(path: str, eps: float, delta: float, seed: int, out: str, q: Any) -> None:
    log = read_log(path)
    params = UmpParams(objective="size", epsilon=eps, delta=delta, solver="lp-floor")
    write_release(release_ump(log, params, rng=SeededRandom(seed)), out)
    q.put("done")


def _figures(log: Any, out: Path, seconds: float) -> dict[str, Any]:
    ev = evaluate_release(log, out, metrics=("caching", "substitution"))
    ump, cache, sub = ev["ump"], ev.get("caching", {}), ev.get("substitution", {})
    budgets = cache.get("budgets") or [{}]
    hit = budgets[-1].get("hit_probability_release")
    by_j = sub.get("by_j") or [{}]
    return {
        "seconds": round(seconds, 1),
        "output_rows": ump.get("output_size"),
        "output_pairs": ump.get("output_pairs"),
        "volume_share": ump.get("volume_share"),
        "kl": ump.get("kl_divergence"),
        "caching_hit_rate": hit,
        "caching_hit_rate_original": budgets[-1].get("hit_probability_original"),
        "substitution_coverage": by_j[-1].get("coverage"),
        "substitution_map": by_j[-1].get("map"),
        "caching": cache,
        "substitution": {k: v for k, v in sub.items() if k != "examples"},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--max-users", type=int, required=True)
    ap.add_argument("--epsilon", type=float, default=2.302585)
    ap.add_argument("--delta", type=float, default=None)
    ap.add_argument("--conditional-timeout", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=2029)
    a = ap.parse_args()
    delta = a.delta if a.delta is not None else 1.0 / (10 * a.max_users)
    t0 = time.perf_counter()
    log = read_log(a.log)
    read_s = time.perf_counter() - t0
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, kw in (
            # the counts log (AnonID, Query, ClickURL, Count) these figures are about; the
            # default log in the input's columns: benchmarks/ump_schema_check.py
            (
                "e2e synthetic (probe-reweight-2r)",
                {"pairs": "probe-reweight-2r", "schema": "counts"},
            ),
            ("e2e synthetic (zealous)", {"pairs": "zealous", "schema": "counts"}),
            ("e2e real ids", {"ids": "real"}),
        ):
            p = E2EParams.from_budget(epsilon=a.epsilon, delta=delta, max_users=a.max_users, **kw)
            t = time.perf_counter()
            rel = release_ump_e2e(log, p, rng=SeededRandom(a.seed), metrics=False)
            out = Path(tmp) / name.replace(" ", "_").replace("(", "").replace(")", "")
            write_release(rel, out)
            rows[name] = _figures(log, out, time.perf_counter() - t)
            rows[name]["max_pairs"] = p.max_pairs
            print(
                name,
                json.dumps(
                    {k: v for k, v in rows[name].items() if k not in ("caching", "substitution")}
                ),
                flush=True,
            )
        out = Path(tmp) / "conditional"
        q: Any = mp.get_context("spawn").Queue()
        t = time.perf_counter()
        proc = mp.get_context("spawn").Process(
            target=_conditional, args=(a.log, a.epsilon, delta, a.seed, str(out), q)
        )
        proc.start()
        proc.join(a.conditional_timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()
            rows["conditional (not DP)"] = {"not_finished_after_s": a.conditional_timeout}
        else:
            rows["conditional (not DP)"] = _figures(log, out, time.perf_counter() - t)
    res = {"log": Path(a.log).name, "max_users": a.max_users, "epsilon": a.epsilon,
           "delta": delta, "seed": a.seed, "read_seconds": round(read_s, 1),
           "methods": rows}  # fmt: skip
    (HERE / "results").mkdir(exist_ok=True)
    name = Path(a.log).name.split(".")[0]
    (HERE / "results" / f"ump_e2e_{name}.json").write_text(json.dumps(res, indent=2) + "\n")
    cols = ["output_rows", "output_pairs", "volume_share", "kl", "caching_hit_rate",
            "substitution_coverage", "substitution_map", "seconds"]  # fmt: skip
    print(f"\n{Path(a.log).name}: U = {a.max_users}, ε = {a.epsilon:g}, δ = {delta:.3g}\n")
    print("| method | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for m, r in rows.items():
        cells = [r.get(c, "—") for c in cols] if "seconds" in r else ["not finished"] * len(cols)
        print(f"| {m} | " + " | ".join(
            f"{v:.3g}" if isinstance(v, float) else str(v) for v in cells) + " |")  # fmt: skip


if __name__ == "__main__":
    main()
