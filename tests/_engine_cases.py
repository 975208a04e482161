"""Shared cases for the engine equivalence tests (Polars in the default suite, Spark marked)."""

from __future__ import annotations

from typing import Any

from searchveil import KAnonParams, KorolovaParams, ZealousParams

CASES = [
    ("korolova", KorolovaParams(d=5, K=5, b=1.0, b_q=2.0, url_selection="private", d_c=2,
                                b_c=2.0, url_K=2, url_b=1.0)),
    ("korolova", KorolovaParams(d=1, K=2, b=0.5, b_q=1.0, url_selection="none")),
    ("zealous", ZealousParams(m=3, tau=1, lam=1.0, tau_prime=3, item_type="queries",
                              guarantee="indistinguishability")),
    ("zealous", ZealousParams(m=2, tau=1, lam=1.0, tau_prime=3, item_type="clicks",
                              guarantee="indistinguishability")),
    ("kanon", KAnonParams(k=3)),
]  # fmt: skip


def same_tables(a, b) -> list[str]:
    """Names of the tables that differ (the k-anonymous log's random ids aside)."""
    bad = []
    for name, ta in a.tables.items():
        tb = b.tables[name]
        if name == "log":
            ta, tb = ta.drop("AnonID"), tb.drop("AnonID")
        if not ta.sort(ta.columns).equals(tb.sort(tb.columns)):
            bad.append(name)
    return bad


def distinct_plans(cases: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The first case of each (algorithm, bounding plan): the bounded counts and figures
    depend on nothing else, so a later case with the same plan repeats the same checks (in the
    bounding cases of test_spark.py and test_spark_ordered.py, three of 24: CASES' two
    ZEALOUS cases again, and a Korolova d = 1 that differs only in K)."""
    seen: list[tuple[str, Any]] = []
    out = []
    for algo, params in cases:
        key = (algo, params.bounding_plan())
        if key not in seen:
            seen.append(key)
            out.append((algo, params))
    return out
