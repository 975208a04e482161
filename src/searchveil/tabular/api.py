"""One-call API behind ``searchveil tabular``: load a table with its ARX hierarchies, run a
model, write the release directory (generalized table + ``ledger.json``) atomically."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchveil.errors import InvalidParameterError
from searchveil.io.files import file_sha256
from searchveil.io.ledger import ReleaseWriter, build_ledger_unchecked
from searchveil.rng import RandomSource
from searchveil.tabular.baselines import kanonymize, safepub
from searchveil.tabular.hierarchy import EncodedTable, encode_table, load_hierarchies, read_table
from searchveil.tabular.lattice import Lattice, distinct_records
from searchveil.tabular.measures import Measures, make_measures
from searchveil.tabular.metrics import release_metrics
from searchveil.tabular.release import (
    TabularRelease,
    anonymize_aggregate,
    anonymize_dp,
    anonymize_threshold,
)
from searchveil.validate import check_choice

__all__ = ["MODELS", "load", "table_stats", "run_model", "write_release", "ModelParams"]

MODELS = ("dp", "aggregate", "threshold", "kanon", "safepub")


def load(path: str | Path, hierarchies: str | Path, qi: list[str] | None = None) -> EncodedTable:
    """Read the table and the hierarchy CSVs of its quasi-identifiers. Default QIs: every
    column that has a hierarchy file in the directory except the table's last column (ARX's
    layout puts the class / sensitive attribute last; it is released verbatim)."""
    frame = read_table(path)
    d = Path(hierarchies)
    if qi is None:
        cols = frame.columns[:-1] if len(frame.columns) > 1 else frame.columns
        qi = [c for c in cols if (d / f"{c}.csv").is_file() or any(d.glob(f"*hierarchy_{c}.csv"))]
        if not qi:
            raise InvalidParameterError(
                "hierarchies", str(d), "a directory with a hierarchy CSV for some column"
            )
    hs = load_hierarchies(d, qi)
    return encode_table(frame, hs, source=str(path))


def table_stats(t: EncodedTable) -> dict[str, Any]:
    lat = Lattice(tuple(h.height for h in t.hierarchies))
    return {
        "file": t.source,
        "rows": t.n,
        "columns": t.frame.columns,
        "quasi_identifiers": [
            {
                "attribute": h.attribute,
                "height": h.height,
                "leaves": h.n_leaves,
                "distinct_in_table": int(len(set(t.leaves[:, i].tolist()))),
                "hierarchy": h.source,
                "sha256": h.sha256,
            }
            for i, h in enumerate(t.hierarchies)
        ],
        "lattice_size": lat.size,
        "distinct_qi_tuples": distinct_records(t.leaves).m,
    }


@dataclass(frozen=True)
class ModelParams:
    """Parameters of every model (unused ones are ignored). No default ε/δ."""

    epsilon: float | None = None
    delta: float | None = None
    beta: float | None = None
    theta0: float | None = None
    theta1: float = 1.0
    lam: float = 1.0
    kappa: int = 1
    phi0: float | None = None
    utility: str = "depth"
    c: float | None = None
    k: int | None = None
    max_suppression: float = 0.0
    search_share: float = 0.1
    steps: int = 100
    utility_sharpness: float = 0.0


def _need(name: str, v: Any, model: str) -> Any:
    if v is None:
        raise InvalidParameterError(name, None, f"a value (required by --model {model})")
    return v


def run_model(
    t: EncodedTable,
    model: str,
    p: ModelParams,
    *,
    rng: RandomSource,
    side_table: EncodedTable | None = None,
) -> tuple[TabularRelease, Measures]:
    model = check_choice("model", model, MODELS)
    meas = make_measures(t.hierarchies, utility=p.utility, lam=p.lam, kappa=p.kappa, phi0=p.phi0)
    if model == "dp":
        rel = anonymize_dp(
            t,
            meas,
            epsilon=_need("epsilon", p.epsilon, model),
            delta=_need("delta", p.delta, model),
            beta=_need("beta", p.beta, model),
            theta0=_need("theta0", p.theta0, model),
            theta1=p.theta1,
            rng=rng,
            side_table=side_table,
            utility_sharpness=p.utility_sharpness,
        )
    elif model == "aggregate":
        rel = anonymize_aggregate(t, meas, side_table=side_table)
    elif model == "threshold":
        rel = anonymize_threshold(t, meas, c=_need("c", p.c, model), side_table=side_table)
    elif model == "kanon":
        rel = kanonymize(t, k=_need("k", p.k, model), max_suppression=p.max_suppression)
    else:
        rel = safepub(
            t,
            epsilon=_need("epsilon", p.epsilon, model),
            delta=_need("delta", p.delta, model),
            rng=rng,
            search_share=p.search_share,
            steps=p.steps,
        )
    return rel, meas


def write_release(
    out: str | Path,
    rel: TabularRelease,
    meas: Measures,
    *,
    rng: RandomSource,
    overwrite: bool = False,
    fmt: str = "tsv",
    side_table: EncodedTable | None = None,
) -> dict[str, Any]:
    """Write ``table`` + ``ledger.json`` atomically; returns the ledger."""
    t = rel.table
    inputs = [{"file": str(t.source), "sha256": file_sha256(t.source), "rows": t.n}]
    if side_table is not None:
        inputs.append(
            {
                "file": str(side_table.source),
                "role": "public side table Θ (must be independent of the input)",
                "sha256": file_sha256(side_table.source),
                "rows": side_table.n,
            }
        )
    hier = [
        {"attribute": h.attribute, "file": h.source, "sha256": h.sha256, "height": h.height}
        for h in t.hierarchies
    ]
    metrics = release_metrics(rel, meas)
    ledger = build_ledger_unchecked(
        mechanism=rel.mechanism,
        notion=rel.notion,
        epsilon=rel.epsilon,
        delta=rel.delta,
        parameters={**rel.parameters, "quasi_identifiers": list(t.qi)},
        inputs=inputs,
        rng=rng,
        events=rel.events,
        extra={"hierarchies": hier, "summary": rel.info, "metrics": metrics},
    )
    with ReleaseWriter(out, fmt=fmt, overwrite=overwrite) as w:
        w.write_table("table", rel.frame)
        return w.write_ledger(ledger)
