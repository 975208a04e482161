"""Entry point of every engine release: :func:`run_release` (and :func:`make_engine`).

The public ledger does not depend on the engine: which engine and plan ran, and the input
record (path, SHA-256, exact rows and users), go to the private provenance record.

Korolova and ZEALOUS ask the engine for bounded counts (``engine.bounded_counts``: the Polars
ordered pass of :mod:`searchveil.engines.ordered`, Spark's window plan, or the row plan of
:mod:`searchveil.engines.rows`) and hand them to ``release_korolova_counts`` /
``release_zealous_counts`` — the one definition of the mechanism (noise, thresholds,
accounting, ledger). k-anonymity runs the row plan and the in-memory release on its rows.

PySpark is optional: :func:`make_engine` is the one place that imports
:mod:`searchveil.engines.spark` (and with it pyspark), when ``--engine spark`` is asked for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from searchveil.engines.base import BoundingPlan, Engine, PlanParams
from searchveil.engines.polars import PolarsEngine
from searchveil.engines.rows import (
    FINGERPRINTS,
    PLAN_ALGORITHMS,
    check_fingerprint,
    input_info,
    input_record,
    reduced_rows,
    to_search_log,
)
from searchveil.errors import InvalidParameterError
from searchveil.release.histogram import HistogramRelease
from searchveil.release.kanonymity import KAnonParams, release_kanon
from searchveil.release.korolova import KorolovaParams, release_korolova_counts
from searchveil.release.select import SelectParams, release_select_pools
from searchveil.release.zealous import ZealousParams, release_zealous_counts
from searchveil.rng import RandomSource

__all__ = [
    "ENGINES",
    "FINGERPRINTS",
    "PLAN_ALGORITHMS",
    "check_fingerprint",
    "make_engine",
    "check_plan",
    "run_release",
    "run_select",
]

ENGINES = ("memory", "polars", "spark")


def make_engine(
    name: str, *, spark_master: str = "local[*]", normalize: bool = True, fingerprint: str = "full"
) -> Engine:
    check_fingerprint(fingerprint)
    if name == "polars":
        return PolarsEngine(normalize=normalize, fingerprint=fingerprint)
    if name == "spark":
        try:
            # the one import of the optional engine (pyspark is imported by that module)
            from searchveil.engines.spark import SparkEngine
        except ImportError as exc:
            raise InvalidParameterError(
                "engine", name, f"polars | memory (PySpark is not installed: {exc})"
            ) from None
        return SparkEngine(master=spark_master, normalize=normalize, fingerprint=fingerprint)
    raise InvalidParameterError("engine", name, "polars | spark (memory runs without an engine)")


def check_plan(algorithm: str, params: PlanParams, engine_name: str) -> None:
    """What the engines cannot do raises a typed error before any data are read."""
    if algorithm not in PLAN_ALGORITHMS:
        raise InvalidParameterError("algorithm", algorithm, ", ".join(PLAN_ALGORITHMS))
    expected = {"korolova": KorolovaParams, "zealous": ZealousParams, "kanon": KAnonParams}
    if not isinstance(params, expected[algorithm]):
        raise InvalidParameterError("params", params, f"a {expected[algorithm].__name__}")
    if isinstance(params, KorolovaParams | ZealousParams) and params.strategy != "first":
        raise InvalidParameterError(
            "bounding", params.strategy, f"first with --engine {engine_name} (random: memory)"
        )
    if isinstance(params, ZealousParams) and params.item_type not in ("queries", "clicks"):
        raise InvalidParameterError(
            "item-type", params.item_type, "queries | clicks with --engine polars|spark"
        )


def run_release(
    engine_name: str,
    algorithm: str,
    path: Path,
    params: PlanParams,
    *,
    rng: RandomSource,
    spark_master: str = "local[*]",
    normalize: bool = True,
    release_kwargs: dict[str, Any] | None = None,
    fingerprint: str = "full",
) -> HistogramRelease:
    """Bound on the engine, release in memory; the report and the provenance figures name the
    engine (the public ledger does not).

    Korolova and ZEALOUS: the engine returns bounded counts (:class:`BoundedCounts`) and the
    release runs from them; k-anonymity: the engine returns the rows of the queries with ≥ k
    users and the in-memory release runs on them. ``fingerprint``: the input hash of the
    provenance record, ``full`` (SHA-256 of the file) or ``fast`` (Parquet only: SHA-256 of its
    footer and size; see :mod:`searchveil.engines.rows`); the private input record says which.
    """
    check_plan(algorithm, params, engine_name)
    check_fingerprint(fingerprint, Path(path))
    engine = make_engine(
        engine_name, spark_master=spark_master, normalize=normalize, fingerprint=fingerprint
    )
    if isinstance(params, KAnonParams):
        rel = _run_kanon(engine, path, params, rng=rng, normalize=normalize, fp=fingerprint)
    else:
        bounded = engine.bounded_counts(Path(path), algorithm, params)
        kw: dict[str, Any] = release_kwargs or {}
        if isinstance(params, KorolovaParams):
            rel = release_korolova_counts(bounded, params, rng=rng, **kw)
        else:
            rel = release_zealous_counts(bounded, params, rng=rng, **kw)
        rel.report["engine_plan"] = bounded.plan
        if "rows_after_engine_bounding" in bounded.figures:
            rel.report["rows_after_engine_bounding"] = bounded.figures["rows_after_engine_bounding"]
    # which engine and plan ran is private: the plan depends on the input's layout (whether
    # each user's rows are contiguous), so it goes to the provenance record, not the ledger —
    # and every engine then writes the same public ledger
    rel.report["engine"] = engine.describe()
    rel.figures["engine"] = engine.describe()
    return rel


def _run_kanon(
    engine: Engine, path: Path, params: KAnonParams, *, rng: RandomSource, normalize: bool, fp: str
) -> HistogramRelease:
    reduced, totals, sha = reduced_rows(engine, path, "kanon", params, fingerprint=fp)
    log = to_search_log(reduced, input_info(path, sha, totals["rows"], normalize))
    rel: HistogramRelease = release_kanon(log, params, rng=rng)
    rel.report["rows_after_engine_bounding"] = reduced.height
    rel.report["users"] = totals["users"]
    # the private input record is the whole file's (the release saw only the reduced rows)
    rel.inputs = [input_record(path, sha, totals["rows"], totals["users"], normalize, fp)]
    return rel


def run_select(
    engine_name: str,
    path: Path,
    params: SelectParams,
    *,
    rng: RandomSource,
    spark_master: str = "local[*]",
    normalize: bool = True,
    fingerprint: str = "full",
    max_users: int | None = None,
) -> HistogramRelease:
    """``release korolova --selection`` on an engine: the engine extracts each user's first
    items (:meth:`Engine.item_pools`: the Polars ordered pass, Spark's pool plan), the release
    runs on them (:func:`~searchveil.release.select.release_select_pools`); both engines give
    the same tables and public ledger under a seed (tested). Which engine and plan ran goes to
    the report and the provenance figures, as for :func:`run_release`."""
    if not isinstance(params, SelectParams):
        raise InvalidParameterError("params", params, "a SelectParams")
    check_fingerprint(fingerprint, Path(path))
    engine = make_engine(
        engine_name, spark_master=spark_master, normalize=normalize, fingerprint=fingerprint
    )
    pools = engine.item_pools(Path(path), BoundingPlan.for_pools(params.pool, params.click_pool))
    rel = release_select_pools(pools, params, rng=rng, max_users=max_users)
    rel.report["engine_plan"] = pools.plan
    rel.report["engine"] = engine.describe()
    rel.figures["engine"] = engine.describe()
    return rel
