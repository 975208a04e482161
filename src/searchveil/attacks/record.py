"""The JSON record of an attack-simulation run (lookahead or ads): parameters, the graphs
attacked, the seed; marked as not a differentially private release."""

from __future__ import annotations

from typing import Any

from searchveil.io.ledger import build_ledger
from searchveil.mechanisms.budget import NoGuarantee
from searchveil.rng import RandomSource

NOT_A_RELEASE = (
    "Attack simulation, not a differentially private release: nothing here is published, no "
    "privacy budget is spent, and the record only makes the experiment reproducible."
)


def run_record(
    result: dict[str, Any], rng: RandomSource, *, command: str, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The JSON record of a run (:func:`searchveil.io.ledger.build_ledger`): parameters, the
    graphs attacked (generated ones by their fingerprint; a graph file by its name, SHA-256 and
    graph fingerprint), randomness (seed). An attack simulation releases nothing under a
    guarantee: ε and δ are null. ``extra``: further public ledger keys (e.g. ``accounting``
    holding the ads DP policy's ledgers)."""
    inputs: list[dict[str, Any]] = []

    def generated(name: str, sha: str) -> None:
        inputs.append({"role": "generated graph", "source": name, "sha256": sha})

    syn = result.get("synthetic")
    if syn:
        for i, g in enumerate(syn["graphs"]):
            generated(f"synthetic-{i + 1}", g["fingerprint_sha256"])
    for row in result.get("fig_6_2") or []:
        generated(f"fig-6.2-n{row['nodes']}", row["fingerprint_sha256"])
    for i, g in enumerate(result.get("table_6_1_graphs") or []):
        generated(f"table-6.1-{i + 1}", g["fingerprint_sha256"])

    def attacked(name: str, g: dict[str, Any]) -> None:
        rec: dict[str, Any] = {"role": "attacked graph (simulation input)", "source": name,
               "note": f"graph fingerprint {g['fingerprint_sha256']}"}  # fmt: skip
        if g.get("file"):
            rec |= {"file": g["file"], "sha256": g.get("sha256")}
        inputs.append(rec)

    for name, real in (result.get("real") or {}).items():
        attacked(name, real["graph"])
    if "graph" in result:  # a single-graph run
        g = result["graph"]
        attacked(g.get("file", "generated"), g)
    return build_ledger(
        mechanism=f"attack-simulation:{command}",
        notion="none (attack simulation, not a differentially private release)",
        cost=NoGuarantee("nothing is released under a guarantee"),
        # "nodes" asked of a generated graph is a parameter, recorded under a name that is not
        # one of the ledger's private keys
        parameters={
            ("generated_nodes" if k == "nodes" else k): v
            for k, v in (result.get("parameters") or {}).items()
        },
        public_inputs=inputs,
        rng=rng,
        extra={"notes": NOT_A_RELEASE, **(extra or {})},
    )
