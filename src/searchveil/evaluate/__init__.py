"""Utility evaluation of a release against the original log.

One module per metric family, each citing its paper section:

* :mod:`~searchveil.evaluate.distribution` — Götz et al. §6–7.1 (top-j coverage/precision, count
  distribution, average count difference) and Korolova §4.6.1 (share of distinct items/volume);
* :mod:`~searchveil.evaluate.caching` — Götz §7.2 index caching (posting-size proxy);
* :mod:`~searchveil.evaluate.substitution` — Götz §7.3 / Jones et al. 2006 query substitution;
* :mod:`~searchveil.evaluate.keywords` — Korolova §4.6.2.2 / Fuxman et al. 2008 keyword generation;
* :mod:`~searchveil.evaluate.fear` — Korolova §4.6.2.1 "fear of …" ranking;
* :mod:`~searchveil.evaluate.fidelity` — a same-schema log's columns against the original's
  (hour of day, click rank, session lengths, query-only rows, substitution MAP; issue 42);
* same-schema releases (Hong et al. UMP) are scored with the UMP metrics of
  :mod:`searchveil.release.ump.metrics` (not duplicated here).

:func:`evaluate_release` reads a release through its ledger, decides which metrics apply from the
tables it contains (see :mod:`searchveil.evaluate._release`) and returns one JSON-ready dict with
stable keys (``SCHEMA``). A metric that does not apply is ``{"applicable": false, "reason": …}``.

This reads the *original* (private) log: the numbers are for the data holder choosing a
mechanism, not for publication.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl

from searchveil.evaluate._release import (
    NEXT_COLUMNS,
    ReleaseData,
    keyword_histogram,
    load_release,
    log_as_release,
    original_histograms,
)
from searchveil.evaluate.caching import DEFAULT_BUDGETS, PostingProxy, evaluate_caching
from searchveil.evaluate.distribution import compare_histograms
from searchveil.evaluate.fear import evaluate_fears
from searchveil.evaluate.fidelity import Figure, PairDefinition, fidelity_figures
from searchveil.evaluate.keywords import DEFAULT_SEEDS, THRESHOLDS, evaluate_keywords
from searchveil.evaluate.substitution import (
    COOCCURRENCE_MAX_QUERIES,
    evaluate_substitution,
    user_query_pairs,
)
from searchveil.io.readers import read_log
from searchveil.model import PAIR_SEP, ItemKind, SearchLog
from searchveil.release.ump.metrics import evaluate_same_schema

__all__ = [
    "SCHEMA",
    "evaluate_release",
    "evaluate_loaded",
    "load_release",
    "log_as_release",
    "not_applicable",
    "original_histograms",
]

SCHEMA = "searchveil.evaluate/1"


def not_applicable(reason: str) -> dict[str, Any]:
    return {"applicable": False, "reason": reason}


def _clicks_of_log(log: SearchLog) -> pl.DataFrame:
    return (
        log.df.filter(pl.col("url").is_not_null())
        .group_by(["query", "url"])
        .agg(pl.len().cast(pl.Int64).alias("count"))
    )


def _queries_from_pairs(pairs: pl.DataFrame) -> pl.DataFrame:
    sides = pairs.select(pl.col("item").str.split_exact(PAIR_SEP, 1), "count").unnest("item")
    both = pl.concat(
        [
            sides.select(pl.col("field_0").alias("item"), "count"),
            sides.select(pl.col("field_1").alias("item"), "count"),
        ]
    )
    return both.group_by("item").agg(pl.col("count").sum())


def _ump_metrics(log: SearchLog, rel: ReleaseData) -> dict[str, Any]:
    released = rel.same_schema_log
    if released is None or not any(c in released.columns for c in ("Count", "count")):
        return not_applicable("not a same-schema (AnonID, Query, ClickURL, Count) release")
    synthetic = str(rel.mechanism).endswith("synthetic-ids")
    result = evaluate_same_schema(log, released, synthetic_ids=synthetic)
    out = dict(result) if isinstance(result, dict) else {"value": result}
    out["applicable"] = True
    return out


def _release_summary(rel: ReleaseData) -> dict[str, Any]:
    led = rel.ledger
    return {
        "dir": str(rel.path),
        "mechanism": rel.mechanism,
        "notion": led.get("notion"),
        "relation": led.get("relation"),
        "epsilon": led.get("epsilon"),
        "delta": led.get("delta"),
        "split": led.get("split") or {},
        "for_release": led.get("for_release"),
        "seeded": led.get("seeded"),
        "parameters": led.get("parameters", {}),
        "guarantee": led.get("guarantee") or led.get("privacy") or None,
        "outputs": {
            k: {kk: v.get(kk) for kk in ("file", "columns", "rows")}
            for k, v in (led.get("outputs") or {}).items()
            if isinstance(v, dict)
        },
        "item_kinds": sorted(rel.histograms),
        "derived": rel.derived,
    }


def _fidelity(
    log: SearchLog, rel: ReleaseData, orig: dict[str, pl.DataFrame], substitution_queries: int
) -> dict[str, Figure] | None:
    """The fidelity figures of a same-schema release (None for any other release)."""
    same = rel.same_schema_log
    if same is None:
        return None
    return fidelity_figures(
        log,
        same,
        original_queries=orig.get("queries"),
        original_session_pairs=orig.get("query_pairs"),
        release_queries=rel.histograms.get("queries"),
        n_queries=substitution_queries,
    )


def _fidelity_json(rel: ReleaseData, figures: dict[str, Figure] | None) -> dict[str, Any]:
    if figures is None or rel.same_schema_log is None:
        return not_applicable("not a same-schema log (no table with user and query columns)")
    return {
        "applicable": True,
        "release_columns": rel.same_schema_log.columns,
        **{k: f.to_dict() for k, f in figures.items()},
    }


def _computed(figures: dict[str, Figure] | None, pairs: PairDefinition) -> dict[str, Any] | None:
    """The substitution result the fidelity figures already computed for ``pairs``, if any."""
    f = (figures or {}).get(f"substitution_{pairs.value}")
    return f.result if f is not None else None


def _substitution(
    log: SearchLog,
    rel: ReleaseData,
    orig: dict[str, pl.DataFrame],
    substitution_queries: int,
    figures: dict[str, Figure] | None = None,
) -> dict[str, Any]:
    """Query substitution learnt from the release's query pairs (or, for a same-schema log,
    co-occurrence pairs on both sides) against the original's; the same computation as the
    fidelity figures' (``figures``) is not run twice."""
    hist = rel.histograms
    same = rel.same_schema_log
    if "query_pairs" not in hist and same is not None and "Query" in same.columns:
        # a same-schema log has users but no session order: co-occurrence pairs, the same
        # definition on the original and on the release
        done = _computed(figures, PairDefinition.COOCCURRENCE) if "queries" in hist else None
        out = dict(done or evaluate_substitution(
            orig["queries"],
            user_query_pairs(log.df),
            hist.get("queries", _queries_from_pairs(user_query_pairs(same, user="AnonID",
                                                                     query="Query"))),
            user_query_pairs(same, user="AnonID", query="Query"),
            n_queries=substitution_queries,
        ))  # fmt: skip
        out["pairs"] = (
            "co-occurrence: ordered pairs of distinct queries of one user (first "
            f"{COOCCURRENCE_MAX_QUERIES} in string order), on the original and the release"
        )
    elif "query_pairs" in hist:
        rq = hist.get("queries")
        if rq is None:
            # word statistics for phrase segmentation from the released pairs themselves
            # (both sides of each pair; post-processing of the release)
            rq = _queries_from_pairs(hist["query_pairs"])
        # the pairs of a row-level log (no query-pair table) are its sessions' consecutive
        # queries: the fidelity figures computed them already, with the same queries
        from_log = not any(c in NEXT_COLUMNS for t in rel.tables.values() for c in t.columns)
        done = (
            _computed(figures, PairDefinition.SESSION) if from_log and "queries" in hist else None
        )
        out = done or evaluate_substitution(
            orig["queries"],
            orig["query_pairs"],
            rq,
            hist["query_pairs"],
            n_queries=substitution_queries,
        )
        out = dict(out)
        out["release_queries_source"] = (
            "released queries" if "queries" in hist else "both sides of the released pairs"
        )
    else:
        out = not_applicable(
            "the release has no query pairs (query substitution learns from query pairs, Götz §7.3)"
        )
    return out


def evaluate_loaded(
    log: SearchLog,
    rel: ReleaseData,
    *,
    original: dict[str, pl.DataFrame] | None = None,
    metrics: tuple[str, ...] = (
        "distribution",
        "caching",
        "substitution",
        "keywords",
        "fears",
        "fidelity",
    ),
    seeds: dict[str, tuple[str, ...]] | None = None,
    thresholds: tuple[float, ...] = THRESHOLDS,
    alpha: float = 0.001,
    gamma: float = 0.0001,
    posting_proxy: PostingProxy | str = PostingProxy.CLICKS,
    cache_budgets: tuple[float, ...] = DEFAULT_BUDGETS,
    substitution_queries: int = 1000,
    fear_phrase: str = "fear of",
) -> dict[str, Any]:
    """:func:`evaluate_release` on an already loaded release (``original`` histograms may be
    passed in to share them between several releases, as ``compare`` does)."""
    orig = original if original is not None else original_histograms(log)
    hist = rel.histograms
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "original": log.ledger_input(),
        "release": _release_summary(rel),
    }
    if "distribution" in metrics:
        result["distribution"] = {
            kind.value: compare_histograms(orig[kind], hist[kind])
            for kind in ItemKind
            if kind in hist and kind in orig
        }
    if "caching" in metrics:
        rk = hist.get("keywords")
        if rk is None and "queries" in hist:
            rk = keyword_histogram(hist["queries"])
        result["caching"] = (
            evaluate_caching(
                orig["keywords"], rk, log=log, proxy=posting_proxy, budgets=cache_budgets
            )
            if rk is not None
            else not_applicable("the release has neither keywords nor queries")
        )
    figures = _fidelity(log, rel, orig, substitution_queries) if "fidelity" in metrics else None
    if "substitution" in metrics:
        result["substitution"] = _substitution(log, rel, orig, substitution_queries, figures)
    if "keywords" in metrics:
        result["keywords"] = (
            evaluate_keywords(
                _clicks_of_log(log),
                rel.clicks_table,
                seeds=seeds if seeds is not None else DEFAULT_SEEDS,
                thresholds=thresholds,
                alpha=alpha,
                gamma=gamma,
            )
            if rel.clicks_table is not None
            else not_applicable("the release has no query-click counts (no click graph)")
        )
    if "fears" in metrics:
        result["fears"] = (
            evaluate_fears(orig["queries"], hist["queries"], phrase=fear_phrase)
            if "queries" in hist
            else not_applicable("the release has no queries")
        )
    result["ump"] = _ump_metrics(log, rel)
    if "fidelity" in metrics:
        result["fidelity"] = _fidelity_json(rel, figures)
    return _clean(result)


def evaluate_release(
    original_log: SearchLog, release_dir: str | Path, **options: Any
) -> dict[str, Any]:
    """Every metric that applies to the release in ``release_dir`` (see module docstring), or
    to a log file given instead (``synth`` output: :func:`log_as_release`, read in the default
    AOL layout); keyword options as :func:`evaluate_loaded`."""
    path = Path(release_dir)
    rel = log_as_release(read_log(path)) if path.is_file() else load_release(path)
    return evaluate_loaded(original_log, rel, **options)


def _clean(x: Any) -> Any:
    """NaN/inf → None so the JSON is standard; numpy scalars → Python."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if hasattr(x, "item") and callable(x.item) and not isinstance(x, str | bytes):
        x = x.item()
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return x
