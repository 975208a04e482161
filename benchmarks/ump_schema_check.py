"""The done-when figures of issue 42 for a same-schema release in the input's columns: the
release's row count against the input's, the total-variation distance of the rows' hour-of-day
and click-rank distributions, the share of query-only rows, and query-substitution MAP learnt
from co-occurrence (evaluate's definition for a same-schema log: ``user_query_pairs`` — each
user's first 8 distinct queries in string order — on both sides; Götz §7.3).

``python benchmarks/ump_schema_check.py ORIGINAL RELEASE_DIR_OR_LOG [--seeds ...]``

To reproduce docs/privacy/ump.md ("Measured"):

    searchveil synth --like src/searchveil/data/aol-gayo-avello-215-users.tsv --users 100000 \\
        --rows 3000000 --seed 7 --out syn100k.tsv.gz
    searchveil release ump syn100k.tsv.gz --out R --epsilon 2.302585 --delta 1e-6 \\
        --max-users 100000
    python benchmarks/ump_schema_check.py syn100k.tsv.gz R
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from searchveil.evaluate.substitution import evaluate_substitution, user_query_pairs
from searchveil.io.readers import read_log
from searchveil.model import SearchLog, items


def _tv(a: np.ndarray, b: np.ndarray) -> float:
    return float(0.5 * np.abs(a / a.sum() - b / b.sum()).sum())


def _queries(log: SearchLog) -> pl.DataFrame:
    """The query histogram (query events per query), as evaluate counts the original's."""
    return items(log, "queries").group_by("item").agg(pl.len().cast(pl.Int64).alias("count"))


def check(original: Path, release: Path) -> dict[str, Any]:
    """The figures of the module docstring (``release``: a release directory or its log)."""
    t0 = time.perf_counter()
    orig = read_log(original)
    rel = read_log(release / "log.tsv" if release.is_dir() else release)
    o, r = orig.df, rel.df
    out: dict[str, Any] = {"rows_original": o.height, "rows_release": r.height,
                           "rows_ratio": r.height / o.height}  # fmt: skip
    ho = np.bincount(o["time"].drop_nulls().dt.hour().to_numpy(), minlength=24)
    hr = np.bincount(r["time"].drop_nulls().dt.hour().to_numpy(), minlength=24)
    out["hour_tv"] = _tv(ho, hr) if hr.sum() else None
    ro = o.filter(pl.col("url").is_not_null())["rank"].fill_null(0).clip(0, 1000).to_numpy()
    rr = r.filter(pl.col("url").is_not_null())["rank"].fill_null(0).clip(0, 1000).to_numpy()
    out["rank_tv"] = _tv(np.bincount(ro, minlength=1001), np.bincount(rr, minlength=1001))
    out["query_only_original"] = o["url"].null_count() / o.height
    out["query_only_release"] = r["url"].null_count() / max(r.height, 1)
    oq, rq = _queries(orig), _queries(rel)
    res = evaluate_substitution(oq, user_query_pairs(o), rq, user_query_pairs(r), n_queries=1000)
    out["substitution"] = {f"j={b['j']}": {k: b[k] for k in ("coverage", "precision", "map")}
                           for b in res["by_j"]}  # fmt: skip
    out["seconds"] = round(time.perf_counter() - t0, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("original", type=Path)
    ap.add_argument("release", type=Path)
    a = ap.parse_args()
    print(json.dumps(check(a.original, a.release), indent=2))


if __name__ == "__main__":
    main()
