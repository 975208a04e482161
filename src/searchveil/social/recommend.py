"""Release private recommendations for target nodes (Korolova 2012 thesis §5.4).

Privacy unit and guarantee (docs/privacy/social.md): each target receives one recommendation
that is ε-DP with respect to any one edge *not incident to that target* (the relaxed relation of
§5.2.2 used in §5.5: the target already knows its own edges). That is a per-target guarantee.
For several targets it composes only over edges incident to none of them: whoever sees the
recommendations of a set T of targets learns at most |T|·ε about an edge between two nodes
outside T (sequential composition), and **nothing is guaranteed about an edge incident to a
target in T** — a recommendation is never a neighbour of its target, so the recommendations of
many targets reveal edges incident to them with certainty. The ledger states exactly this.

**The node universe is public** (issue 21): the candidates of a target are every node of a
universe the data holder gives — a node-list file, ids ``0..N−1``, or the graph file's own node
set *declared* public — isolated nodes included. Taking it from the private edge list would make
a node seen in one edge a candidate only when that edge exists (on edges 1-2, 1-3, 2-4, 3-5, 4-5,
5-6 versus the same plus 6-7, target 1, ε = 0.5, node 7 was recommended ~600 times in 3,000
draws on one graph and never on the other, whatever the mechanism).

The release directory (written atomically by :class:`~searchveil.io.ledger.ReleaseWriter`)
holds ``recommendations.tsv`` (``target``, ``recommended``: original node ids, sorted by
target) and the public ``ledger.json`` (mechanism, ε per target, the universe's size and hash,
the number of targets); the graph's file, SHA-256 and exact figures (edges, maximum degree,
targets without candidates) go to the private provenance record beside it. No utility value is
released: the recommended node's utility is itself edge-dependent.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.io.graphs import Graph, NodeUniverse, read_edge_list
from searchveil.io.ledger import ReleaseWriter, build_ledger, build_provenance
from searchveil.mechanisms.budget import Part, PrivacyCost, Relation
from searchveil.rng import RandomSource
from searchveil.social.mechanisms import (
    Mechanism,
    MechanismName,
    PermuteAndFlip,
    SmoothedSampling,
    epsilon_fraction,
    make_mechanism,
)
from searchveil.social.utility import UtilityFunction, target_utilities

__all__ = ["recommend", "recommendation_cost", "release_recommendations", "resolve_targets"]

NOTION = (
    "epsilon-DP for one edge incident to none of the targets: each target's recommendation is "
    "epsilon_each-DP for one edge not incident to that target (Korolova 2012 thesis §5.2.2, "
    "relaxed), composed over the targets (epsilon = targets × epsilon_each)"
)


def resolve_targets(
    graph: Graph | NodeUniverse, targets: Sequence[int] | None
) -> npt.NDArray[np.int64]:
    """Node indices of the given original node ids (``None`` = every node), checked against
    the graph's nodes or a public universe; each target at most once (a second recommendation
    to the same target would spend ε again)."""
    ids_all = graph.node_ids if isinstance(graph, Graph) else graph.ids
    n = int(ids_all.size)
    if targets is None:
        return np.arange(n, dtype=np.int64)
    ids = np.asarray(list(targets), dtype=np.int64)
    if ids.size == 0:
        raise InvalidParameterError("targets", "[]", "at least one target node id")
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise InvalidParameterError("target", int(uniq[counts > 1][0]), "each target id once")
    pos = np.minimum(np.searchsorted(ids_all, ids), n - 1)
    missing = ids[ids_all[pos] != ids]
    if missing.size:
        raise InvalidParameterError("target", int(missing[0]), "a node id present in the graph")
    return pos.astype(np.int64)


def _epsilon_spent(mech: Mechanism, utility: UtilityFunction) -> float:
    """The mechanism's privacy map at the utility's sensitivity (ℓ∞ for permute-and-flip)."""
    if isinstance(mech, PermuteAndFlip):
        return mech.privacy(utility.linf_sensitivity())
    if isinstance(mech, SmoothedSampling):
        return float(epsilon_fraction(mech.epsilon))  # x is chosen per target with ε(x) ≤ ε
    return mech.privacy(utility.l1_sensitivity())


def _cost(per_target: float, n_targets: int) -> PrivacyCost:
    """Edge-level for the edges incident to no target: one recommendation per target, each
    ``per_target``-DP for such an edge, composed sequentially."""
    part = Part("one recommendation per target", per_target * n_targets)
    return PrivacyCost(Relation.EDGE_OUTSIDE_TARGETS, (part,))


def recommendation_cost(
    *,
    universe: NodeUniverse,
    utility: UtilityFunction,
    mechanism_name: MechanismName | str,
    epsilon: float,
    targets: Sequence[int] | None,
) -> PrivacyCost:
    """What :func:`release_recommendations` spends, from public facts only (the mechanism,
    the utility's sensitivity, the targets on the public universe): known before the graph
    is read."""
    mech = _mechanism(mechanism_name, epsilon, utility)
    return _cost(_epsilon_spent(mech, utility), int(resolve_targets(universe, targets).size))


def _mechanism(
    mechanism_name: MechanismName | str, epsilon: float, utility: UtilityFunction
) -> Mechanism:
    """The named mechanism calibrated to the utility's ℓ1 and ℓ∞ sensitivities."""
    return make_mechanism(mechanism_name, epsilon=epsilon, l1=utility.l1_sensitivity(),
                          linf=utility.linf_sensitivity())  # fmt: skip


def _ledger(
    mech: Mechanism,
    utility: UtilityFunction,
    universe: NodeUniverse,
    all_targets: bool,
    per_target: float,
    n_targets: int,
    rng: RandomSource,
) -> dict[str, Any]:
    """The public ledger of a recommendation release: the per-target guarantee, what it
    composes to, and what it does not cover."""
    return build_ledger(
        mechanism=f"social-{mech.name}",
        notion=NOTION,
        cost=_cost(per_target, n_targets),
        parameters={
            **utility.describe(),
            **{f"mechanism_{k}": v for k, v in mech.describe().items()},
            "targets": n_targets,
            "target_selection": "every node of the universe (--all-targets)"
            if all_targets
            else "target ids given by the data holder",
        },
        public_inputs=[universe.record],
        rng=rng,
        events=[
            {
                "event": "at most one recommendation per target",
                "epsilon_each": per_target,
                "targets": n_targets,
            }
        ],
        extra={
            "guarantee": {
                "per_target": f"each target's recommendation is {per_target:g}-DP for one edge "
                "not incident to that target",
                "edges_not_incident_to_any_target": {
                    "epsilon": per_target * n_targets,
                    "why": "sequential composition over the targets' recommendations",
                },
                "edges_incident_to_a_released_target": "no guarantee: a recommendation is "
                "never a neighbour of its target, so whoever sees a target's recommendation "
                "learns that the recommended node is not adjacent to it",
            },
            "reference": "Korolova, PhD thesis 2012, ch.5 (§5.2.2, §5.4, §5.5)",
        },
    )


def recommend(
    graph: Graph,
    utility: UtilityFunction,
    mechanism: Mechanism,
    targets: npt.NDArray[np.int64],
    rng: RandomSource,
    *,
    tick: Callable[[int], None] | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Recommended node index per target (``-1`` when the target has no candidate)."""
    if not isinstance(rng, RandomSource):
        raise InvalidParameterError("rng", rng, "a searchveil.rng.RandomSource")
    out = np.full(targets.size, -1, dtype=np.int64)
    for i, tu in enumerate(target_utilities(graph, utility, targets)):
        if tu.n_candidates > 0:
            out[i] = mechanism.recommend(tu, rng)
        if tick is not None:
            tick(i + 1)
    return targets, out


def release_recommendations(
    graph_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    universe: NodeUniverse,
    utility: UtilityFunction,
    mechanism_name: MechanismName | str,
    epsilon: float,
    targets: Sequence[int] | None,
    rng: RandomSource,
    overwrite: bool = False,
    fmt: str = "tsv",
    tick: Callable[[int], None] | None = None,
    provenance: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Read the graph on the public node ``universe``, recommend to every target (``None``:
    every node of the universe), write recommendations + the public ledger atomically and the
    private provenance record beside them."""
    if not isinstance(universe, NodeUniverse):
        raise InvalidParameterError("universe", universe, "a public NodeUniverse")
    mech = _mechanism(mechanism_name, epsilon, utility)
    out = Path(out_dir)
    # fails early if --out (or the provenance record) exists
    writer = ReleaseWriter(
        out, fmt=fmt, overwrite=overwrite, provenance=provenance, inputs=[("graph", graph_path)]
    )
    idx = resolve_targets(universe, targets)  # public: checked before the graph is read
    graph = read_edge_list(graph_path, undirected=True, universe=universe)
    utility.check_graph(graph)
    t0 = time.perf_counter()
    tgt, rec = recommend(graph, utility, mech, idx, rng, tick=tick)
    seconds = time.perf_counter() - t0
    ok = rec >= 0
    frame = pl.DataFrame(
        {
            "target": graph.node_ids[tgt[ok]],
            "recommended": graph.node_ids[rec[ok]],
        }
    ).sort("target")  # a function of the published values, not of any input order
    per_target = _epsilon_spent(mech, utility)
    n_targets = int(idx.size)
    ledger = _ledger(mech, utility, universe, targets is None, per_target, n_targets, rng)
    prov = build_provenance(
        inputs=[{**graph.describe(), "role": "graph", "path": str(graph_path)}],
        figures={
            "targets_without_candidates": int((~ok).sum()),
            "recommended": int(ok.sum()),
            "seconds": seconds,
        },
    )
    with writer as w:
        w.write_table("recommendations", frame)
        ledger = w.write_ledger(ledger)
        w.write_provenance(prov)
    return {
        "out": str(out),
        "provenance": str(writer.provenance_path),
        "graph": graph.describe(),
        "universe": universe.record,
        "mechanism": mech.name,
        "utility": utility.describe(),
        "epsilon_per_target": per_target,
        "epsilon_edges_not_incident_to_any_target": per_target * n_targets,
        "targets": n_targets,
        "recommended": int(ok.sum()),
        "seconds": seconds,
        "seeded": bool(ledger.get("seeded")),
        "preview": frame.head(10).to_dicts(),
    }
