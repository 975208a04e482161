"""``cels run`` in the e2e mode against the conditional mode on the test share sets (issue 29;
the table in docs/cels.md, "The e2e mode: time against the conditional mode").

``PYTHONPATH=src python benchmarks/cels_modes_bench.py [--modes e2e,cond512,cond3072]
[--runs N]``: one JSON line per run — wall seconds of ``run_local`` (start to the release on
disk), the slowest party's phase seconds, the CPU seconds of all parties and workers, the MB
sent, the load average before and after. The share sets are the tests' own:
``tests/test_cels_protocol.py``'s 90 users and ``tests/test_cels_e2e.py``'s crafted 3,000 users,
in three shares each. e2e: ε = ε_u = 2, δ = 1e-5, U = 10⁴, m = 4; conditional: ε = 2, δ = 0.3, KL
objective (δ this large only so that the paper's protocol outputs anything).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from searchveil.cels.params import CelsParams
from searchveil.cels.runner import run_local

TESTS = Path(__file__).resolve().parents[1] / "tests"

MODES = {
    # the counts log, as docs/cels.md's table measured it (issue 29); the input's columns:
    # benchmarks/cels_scale_bench.py
    "e2e": CelsParams(epsilon=2.0, delta=1e-5, max_users=10_000, max_pairs=4, union_epsilon=2.0,
                      schema="counts"),
    "cond512": CelsParams(epsilon=2.0, delta=0.3, objective="kl", key_bits=512,
                          mode="conditional"),  # TEST KEY (insecure): the tests' key size
    "cond3072": CelsParams(epsilon=2.0, delta=0.3, objective="kl", mode="conditional"),
}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="e2e,cond512")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    sys.path.insert(0, str(TESTS))
    from test_cels_e2e import _write_crafted_shares  # the tests' share sets
    from test_cels_protocol import _write_shares

    with tempfile.TemporaryDirectory(prefix="cels-modes-") as tmp:
        d = Path(tmp)
        (d / "a").mkdir()
        sets = {"90 users": _write_shares(d / "a"), "3,000 users": _write_crafted_shares(d / "b")}
        for sname, shares in sets.items():
            for mname in args.modes.split(","):
                for i in range(args.runs):
                    load = os.getloadavg()[0]
                    t0 = time.perf_counter()
                    out = d / f"out-{sname[:2].strip()}-{mname}-{i}"
                    res = run_local(shares, MODES[mname], out, seed=1, timeout=900)
                    st = res["party_stats"]
                    row = {
                        "shares": sname, "mode": mname,
                        "wall_seconds": round(time.perf_counter() - t0, 2),
                        "slowest_party_seconds": round(
                            max(sum(p["seconds"].values()) for p in st), 2),
                        "cpu_seconds": round(sum(sum(p["cpu_seconds"].values())
                                                 + sum(p.get("worker_cpu_seconds", {}).values())
                                                 for p in st), 2),
                        "mb_sent": round(sum(p["traffic"]["sent_total"] for p in st) / 1e6, 3),
                        "load_before": round(load, 1), "load_after": round(os.getloadavg()[0], 1),
                    }  # fmt: skip
                    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
