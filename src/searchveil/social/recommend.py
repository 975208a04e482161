"""Release private recommendations for target nodes (Korolova 2012 thesis §5.4).

Privacy unit and guarantee: each target receives one recommendation that is ε-DP with respect
to any one edge *not incident to that target* (the relaxed relation of §5.2.2 used in §5.5: the
target already knows its own edges). A party who sees the recommendations of m targets learns
at most m·ε about an edge (sequential composition); the ledger records both figures.

The output directory (written atomically by :class:`~searchveil.io.ledger.ReleaseWriter`) holds
``recommendations.tsv`` (``target``, ``recommended``: original node ids) and ``ledger.json``.
No utility value is released: the recommended node's utility is itself edge-dependent.
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
from searchveil.io.graphs import Graph, read_edge_list
from searchveil.io.ledger import ReleaseWriter, build_ledger_unchecked
from searchveil.rng import RandomSource
from searchveil.social.mechanisms import (
    Mechanism,
    PermuteAndFlip,
    SmoothedSampling,
    epsilon_fraction,
    make_mechanism,
)
from searchveil.social.utility import UtilityFunction, target_utilities

__all__ = ["recommend", "release_recommendations", "resolve_targets"]

NOTION = (
    "epsilon-DP per target recommendation; neighbouring graphs differ in one edge not incident "
    "to the target (Korolova 2012 thesis §5.2.2, relaxed)"
)


def resolve_targets(graph: Graph, targets: Sequence[int] | None) -> npt.NDArray[np.int64]:
    """Node indices of the given original node ids (``None`` = every node)."""
    if targets is None:
        return np.arange(graph.n_nodes, dtype=np.int64)
    ids = np.asarray(list(targets), dtype=np.int64)
    if ids.size == 0:
        raise InvalidParameterError("targets", "[]", "at least one target node id")
    pos = np.searchsorted(graph.node_ids, ids)
    pos = np.minimum(pos, graph.n_nodes - 1)
    missing = ids[graph.node_ids[pos] != ids]
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
    utility: UtilityFunction,
    mechanism_name: str,
    epsilon: float,
    targets: Sequence[int] | None,
    rng: RandomSource,
    overwrite: bool = False,
    fmt: str = "tsv",
    tick: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Read the graph, recommend to every target, write recommendations + ledger atomically."""
    mech = make_mechanism(
        mechanism_name,
        epsilon=epsilon,
        l1=utility.l1_sensitivity(),
        linf=utility.linf_sensitivity(),
    )
    out = Path(out_dir)
    writer = ReleaseWriter(out, fmt=fmt, overwrite=overwrite)  # fails early if --out exists
    graph = read_edge_list(graph_path, undirected=True)
    utility.check_graph(graph)
    idx = resolve_targets(graph, targets)
    t0 = time.perf_counter()
    tgt, rec = recommend(graph, utility, mech, idx, rng, tick=tick)
    seconds = time.perf_counter() - t0
    ok = rec >= 0
    frame = pl.DataFrame(
        {
            "target": graph.node_ids[tgt[ok]],
            "recommended": graph.node_ids[rec[ok]],
        }
    )
    per_target = _epsilon_spent(mech, utility)
    ledger = build_ledger_unchecked(
        mechanism=f"social-{mech.name}",
        notion=NOTION,
        epsilon=per_target,
        delta=0.0,
        parameters={
            **utility.describe(),
            **{f"mechanism_{k}": v for k, v in mech.describe().items()},
            "targets": int(idx.size),
            "targets_without_candidates": int((~ok).sum()),
            "epsilon_if_one_party_sees_all": per_target * int(ok.sum()),
        },
        inputs=[{**graph.describe(), "role": "graph"}],
        rng=rng,
        events=[
            {
                "event": "one recommendation per target",
                "epsilon_each": per_target,
                "count": int(ok.sum()),
            }
        ],
    )
    with writer as w:
        w.write_table("recommendations", frame)
        ledger = w.write_ledger(ledger)
    return {
        "out": str(out),
        "graph": graph.describe(),
        "mechanism": mech.name,
        "utility": utility.describe(),
        "epsilon_per_target": per_target,
        "targets": int(idx.size),
        "recommended": int(ok.sum()),
        "seconds": seconds,
        "seeded": bool(ledger.get("seeded")),
        "preview": frame.head(10).to_dicts(),
    }
