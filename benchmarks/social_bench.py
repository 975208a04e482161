"""Speed of private social recommendations (Korolova thesis ch. 5) on a large power-law graph.

Builds a 10^6-node configuration-model graph (power-law degrees, exponent 2.5, project rng),
then for 1,000 uniformly drawn targets times: utility vectors (common neighbours and weighted
paths, γ = 0.005) and one exact recommendation per target with each mechanism; plus all
targets of wiki-Vote when ../shared is present.

    PYTHONPATH=src python benchmarks/social_bench.py [--nodes 1000000] [--targets 1000]
"""

from __future__ import annotations

import argparse
import json
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from searchveil.io.graphs import Graph, graph_from_edges, read_edge_list
from searchveil.rng import SeededRandom
from searchveil.social.experiments import sample_targets
from searchveil.social.mechanisms import make_mechanism
from searchveil.social.recommend import recommend
from searchveil.social.utility import CommonNeighbours, WeightedPaths, target_utilities

WIKI = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "graphs" / "wiki-Vote.txt"


def power_law_graph(n: int, exponent: float, max_degree: int, rng: SeededRandom) -> Graph:
    """Configuration model: degrees ∝ k^(−exponent) on [1, max_degree], stubs paired at random;
    self-loops and multi-edges are dropped by graph_from_edges."""
    gen = rng.numpy_generator()
    ks = np.arange(1, max_degree + 1, dtype=np.float64)
    p = ks**-exponent
    deg = gen.choice(np.arange(1, max_degree + 1), size=n, p=p / p.sum())
    if deg.sum() % 2:
        deg[0] += 1
    stubs = np.repeat(np.arange(n, dtype=np.int64), deg)
    gen.shuffle(stubs)
    return graph_from_edges(stubs[0::2], stubs[1::2], undirected=True, n_nodes=n)


def bench(graph: Graph, targets: np.ndarray, label: str, mechanisms: list[str], slow: int) -> dict:
    """Time utilities and recommendations; mechanisms whose cost is one coin/noise per
    candidate (permute_and_flip, laplace) run on the first ``slow`` targets only."""
    rng = SeededRandom(7)
    out: dict = {"graph": label, **graph.describe(), "targets": int(targets.size)}
    dmax = int(graph.degrees.max())
    for util in (CommonNeighbours(), WeightedPaths(Fraction(1, 200), max(dmax, 2))):
        t0 = time.perf_counter()
        tus = list(target_utilities(graph, util, targets, chunk=64))
        out[f"{util.name}_utilities_s"] = time.perf_counter() - t0
        out[f"{util.name}_mean_levels"] = float(np.mean([tu.levels()[0].size for tu in tus]))
        for name in mechanisms:
            mech = make_mechanism(
                name, epsilon=1.0, l1=util.l1_sensitivity(), linf=util.linf_sensitivity()
            )
            part = tus if name in ("exponential", "smoothing") else tus[:slow]
            t0 = time.perf_counter()
            rec = [mech.recommend(tu, rng) for tu in part]
            dt = time.perf_counter() - t0
            out[f"{util.name}_{name}_targets"] = len(part)
            out[f"{util.name}_{name}_s"] = dt
            out[f"{util.name}_{name}_ms_per_target"] = 1000 * dt / max(len(part), 1)
            assert min(rec) >= 0
        print(json.dumps(out), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1_000_000)
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--mechanisms", default="exponential,smoothing,permute_and_flip,laplace")
    ap.add_argument("--slow-targets", type=int, default=50)
    args = ap.parse_args()
    mechs = args.mechanisms.split(",")
    rng = SeededRandom(2012)
    t0 = time.perf_counter()
    g = power_law_graph(args.nodes, 2.5, 1000, rng)
    print(json.dumps({"generate_s": time.perf_counter() - t0, **g.describe()}), flush=True)
    targets = sample_targets(g.n_nodes, args.targets / g.n_nodes, rng)
    bench(g, targets, f"power-law n={args.nodes}", mechs, args.slow_targets)
    if WIKI.is_file():
        w = read_edge_list(WIKI, undirected=True)
        t0 = time.perf_counter()
        _, rec = recommend(
            w,
            CommonNeighbours(),
            make_mechanism(
                "exponential",
                epsilon=1.0,
                l1=CommonNeighbours().l1_sensitivity(),
                linf=CommonNeighbours().linf_sensitivity(),
            ),
            np.arange(w.n_nodes),
            SeededRandom(1),
        )
        print(json.dumps({"wiki_vote_all_targets_cn_exponential_s": time.perf_counter() - t0}))
        bench(w, np.arange(w.n_nodes), "wiki-Vote (all targets)", mechs, w.n_nodes)


if __name__ == "__main__":
    main()
