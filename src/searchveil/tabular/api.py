"""One-call API behind ``searchveil tabular``: load a table with its ARX hierarchies, run a
model, write the release directory (generalized table + ``ledger.json``) atomically."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from searchveil.errors import InvalidParameterError
from searchveil.io.files import file_sha256
from searchveil.io.ledger import ReleaseWriter, build_ledger, build_provenance
from searchveil.mechanisms.budget import NoGuarantee, PrivacyCost, Relation
from searchveil.rng import RandomSource
from searchveil.tabular.baselines import kanonymize, safepub
from searchveil.tabular.dp import record_bound_error
from searchveil.tabular.hierarchy import EncodedTable, encode_table, load_hierarchies, read_table
from searchveil.tabular.lattice import Lattice, distinct_records
from searchveil.tabular.measures import Measures, UtilityKind, make_measures
from searchveil.tabular.metrics import release_metrics
from searchveil.tabular.recoding import (
    SELECTION_SHARE,
    Score,
    advise,
    anonymize_recoding,
)
from searchveil.tabular.release import (
    TabularRelease,
    anonymize_aggregate,
    anonymize_dp,
    anonymize_threshold,
    shuffle_release,
)
from searchveil.validate import check_int, check_positive, check_probability, parse_choice

__all__ = [
    "Model",
    "load",
    "table_stats",
    "run_model",
    "write_release",
    "ModelParams",
    "model_cost",
    "release_cost",
]


class Model(StrEnum):
    """The release models of ``searchveil tabular anonymize --model``."""

    DP = "dp"
    FOUAD2014 = "fouad2014"
    AGGREGATE = "aggregate"
    THRESHOLD = "threshold"
    KANON = "kanon"
    SAFEPUB = "safepub"


#: the differentially private models (record-level); the others protect no relation
DP_MODELS = (Model.DP, Model.FOUAD2014, Model.SAFEPUB)
NOT_DP = "this model is not differentially private (it protects no neighbouring relation)"
DECLARED = ("max_records",)


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
    utility: UtilityKind | str = UtilityKind.DEPTH
    c: float | None = None
    k: int | None = None
    max_suppression: float = 0.0
    search_share: float = 0.1
    steps: int = 100
    utility_sharpness: float = 0.0
    score: Score | str = Score.AUTO
    selection_share: float = SELECTION_SHARE
    max_records: int | None = None


def model_cost(model: Model | str, p: ModelParams) -> PrivacyCost | NoGuarantee:
    """What a model may spend, known before the table is read: the declared (ε, δ) of a DP
    model (record-level; the written ledger's cost, :func:`release_cost`, never exceeds it),
    or :class:`NoGuarantee` for the models that are not DP."""
    model = parse_choice("model", model, Model)
    if model not in DP_MODELS:
        return NoGuarantee(NOT_DP)
    b = _budget(p, model)
    check_public(model, p)
    return PrivacyCost.of(Relation.RECORD, b["epsilon"], b["delta"], name="declared (ε, δ)")


def check_public(model: Model | str, p: ModelParams) -> None:
    """The checks of a DP model's parameters that need no byte of the table — made before a
    ``--budget`` charge is admitted (it stands once the table is read): the ranges of ε, δ
    and the shares, β, θ, a declared ``max_records`` and the δ < 1/n policy against it. The
    models check them again (and what needs the table) when they run."""
    model = parse_choice("model", model, Model)
    eps = check_positive("epsilon", _need("epsilon", p.epsilon, model))
    delta = check_probability("delta", _need("delta", p.delta, model))
    if model == Model.FOUAD2014:
        check_probability("beta", _need("beta", p.beta, model))
        theta0 = check_probability("theta0", _need("theta0", p.theta0, model))
        if check_probability("theta1", p.theta1, open_high=False) <= theta0:
            raise InvalidParameterError("theta1", p.theta1, f"> theta0 = {theta0}")
        return
    if p.max_records is not None:
        n = check_int("max_records", p.max_records, minimum=1)
        if delta >= 1.0 / n:
            raise record_bound_error(delta, n)
    if model == Model.DP:
        parse_choice("score", p.score, Score)
        advise(eps, delta, lattice_size=1, beta=p.beta, count=p.max_records is None,
               selection_share=p.selection_share)  # fmt: skip
    else:  # safepub
        check_probability("search_share", p.search_share)
        check_int("steps", p.steps, minimum=0)


def release_cost(rel: TabularRelease) -> PrivacyCost | NoGuarantee:
    """The cost a release reports: record-level, one part per event, its stated (ε, δ)."""
    if rel.epsilon is None:
        return NoGuarantee(NOT_DP)
    return PrivacyCost.from_events(Relation.RECORD, rel.events, epsilon=rel.epsilon,
                                   delta=rel.delta)  # fmt: skip


def _need(name: str, v: Any, model: str) -> Any:
    if v is None:
        raise InvalidParameterError(name, None, f"a value (required by --model {model})")
    return v


def _budget(p: ModelParams, model: str) -> dict[str, float]:
    """The (ε, δ) a differentially private model needs (both required), as its keywords."""
    return {"epsilon": _need("epsilon", p.epsilon, model), "delta": _need("delta", p.delta, model)}


def run_model(
    t: EncodedTable,
    model: Model | str,
    p: ModelParams,
    *,
    rng: RandomSource,
    side_table: EncodedTable | None = None,
) -> tuple[TabularRelease, Measures]:
    """Run one model. Every model's output rows come back in a uniformly random order drawn
    from ``rng`` (never the input's order: docs/privacy/tabular.md)."""
    model = parse_choice("model", model, Model)
    meas = make_measures(t.hierarchies, utility=p.utility, lam=p.lam, kappa=p.kappa, phi0=p.phi0)
    if model == "dp":
        rel = anonymize_recoding(
            t,
            meas,
            **_budget(p, model),
            rng=rng,
            beta=p.beta,
            max_records=p.max_records,
            score=p.score,
            selection_share=p.selection_share,
        )
    elif model == "fouad2014":
        rel = anonymize_dp(
            t,
            meas,
            **_budget(p, model),
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
            **_budget(p, model),
            rng=rng,
            search_share=p.search_share,
            steps=p.steps,
            max_records=p.max_records,
        )
    if model in (Model.FOUAD2014, Model.SAFEPUB):  # they shuffle their rows themselves
        return rel, meas
    return shuffle_release(rel, rng), meas


def _release_inputs(
    t: EncodedTable, side_table: EncodedTable | None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The public inputs (hierarchies, a side table Θ) and the private one (the table) as the
    ledger and the provenance record list them."""
    public_inputs: list[dict[str, Any]] = [
        {
            "role": "generalization hierarchy",
            "attribute": h.attribute,
            "file": Path(h.source).name,
            "sha256": h.sha256,
            "height": h.height,
        }
        for h in t.hierarchies
    ]
    private_inputs: list[dict[str, Any]] = [
        {
            "role": "private input table",
            "path": str(Path(t.source).resolve()),
            "sha256": file_sha256(t.source),
            "rows": t.n,
        }  # fmt: skip
    ]
    if side_table is not None:
        public_inputs.append(
            {
                "role": "public side table Θ (must be independent of the input)",
                "file": Path(side_table.source).name,
                "sha256": file_sha256(side_table.source),
                "rows": side_table.n,
            }
        )
    return public_inputs, private_inputs


def write_release(
    rel: TabularRelease,
    out: str | Path,
    meas: Measures,
    *,
    rng: RandomSource,
    overwrite: bool = False,
    fmt: str = "tsv",
    side_table: EncodedTable | None = None,
    provenance: str | Path | None = None,
    figures: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Write ``table`` + the public ``ledger.json`` atomically, and the private provenance
    record beside the directory (``<out>.private.json`` or ``provenance``). Returns
    ``(ledger, provenance record)``.

    Public: mechanism, guarantee, ε/δ and their split, public parameters, the hierarchies
    (public inputs, with their SHA-256), a public side table Θ, noisy counts. Private: the
    input's path/SHA-256/rows, the exact sampled/suppressed counts and every utility metric
    computed from the exact input (:func:`~searchveil.tabular.metrics.release_metrics`)."""
    t = rel.table
    public_inputs, private_inputs = _release_inputs(t, side_table)
    metrics = release_metrics(rel, meas)
    if rel.epsilon is None:
        notes = "NOT differentially private: " + rel.notion
    else:
        notes = "rows are published in a uniformly random order (not the input's)"
    # outputs of the mechanism (the chosen level vector, released count, values derived from a
    # charged count) are "noisy": they may differ between neighbouring inputs
    noisy = {**rel.noisy, **rel.info}
    declared = {k: v for k, v in rel.parameters.items() if k in DECLARED and v is not None}
    params = {k: v for k, v in rel.parameters.items() if k not in noisy and k not in declared}
    ledger = build_ledger(
        mechanism=rel.mechanism,
        notion=rel.notion,
        cost=release_cost(rel),
        parameters={**params, "quasi_identifiers": list(t.qi)},
        rng=rng,
        public_inputs=public_inputs,
        declared=declared,
        noisy=noisy,
        events=rel.events,
        extra={"notes": notes},
    )
    prov = build_provenance(
        inputs=private_inputs,
        report={**rel.private, "released": int(rel.rows.size)},
        figures={"metrics": metrics, **(figures or {})},
    )
    inputs = [("table", t.source), *(("hierarchies", h.source) for h in t.hierarchies)]
    if side_table is not None:
        inputs.append(("side-table", side_table.source))
    with ReleaseWriter(
        out, fmt=fmt, overwrite=overwrite, provenance=provenance, inputs=inputs
    ) as w:
        w.write_table("table", rel.frame)
        led = w.write_ledger(ledger)
        w.write_provenance(prov)
    return led, prov
