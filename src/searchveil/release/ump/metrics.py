"""Utility of a same-schema release (Hong et al. EDBT 2012 §6, CELS §3).

* output size |O| = Σ x_ij;
* frequent pairs at minimum support s (EDBT eq. 8): S₀ = {c_ij/|D| ≥ s}, S = {x_ij/|O| ≥ s};
  precision = |S₀ ∩ S|/|S|, recall = |S₀ ∩ S|/|S₀|; support distance Σ/avg over S₀ of
  |x_ij/|O| − c_ij/|D||;
* diversity: the share of the (non-unique) input pairs output at least once (EDBT Fig. 3);
* DiffRatio of the triplets (q, u, s) (EDBT eq. 9): |x_ijk/|O| − c_ijk/|D|| / (c_ijk/|D|) for
  every input triplet, as a histogram over 10% bins (last bin: ≥ 100%);
* KL divergence of the pair distribution with +1 smoothing (CELS eq. 2):
  Σ_i c_i/|D| · ln(c_i/|D| · (|O| + n) / (x_i + 1)).
|D| is the total count after Condition 1 (the paper's convention).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import scipy.sparse as sp

from searchveil.model import SearchLog, click_histogram
from searchveil.release.ump.constraints import preprocess


def frequent_pairs(
    c_ij: npt.NDArray[np.int64], x: npt.NDArray[np.int64], min_support: float
) -> dict[str, Any]:
    size_d = float(c_ij.sum())
    size_o = float(x.sum())
    s0 = c_ij / size_d >= min_support
    s = (x / size_o >= min_support) if size_o > 0 else np.zeros_like(s0)
    both = int((s0 & s).sum())
    dist = np.abs((x[s0] / size_o if size_o else 0.0) - c_ij[s0] / size_d)
    return {
        "min_support": min_support,
        "frequent_in_input": int(s0.sum()),
        "frequent_in_output": int(s.sum()),
        "precision": both / int(s.sum()) if s.any() else None,
        "recall": both / int(s0.sum()) if s0.any() else None,
        "sum_support_distance": float(np.sum(dist)),
        "avg_support_distance": float(np.mean(dist)) if s0.any() else None,
    }


def diff_ratio_histogram(
    c: sp.csr_matrix, triplets: tuple[npt.NDArray[np.int64], ...], *, bins: int = 10
) -> dict[str, Any]:
    """DiffRatio (eq. 9) histograms: over the triplets present in the output (what EDBT
    Fig. 4 plots) and over every input triplet (absent ones have ratio exactly 1)."""
    p, k, n = triplets
    coo = c.tocoo()
    size_d = float(coo.data.sum())
    size_o = float(n.sum())
    out = sp.csr_matrix((n.astype(float), (p, k)), shape=c.shape) if n.size else None
    x = np.asarray(out[coo.row, coo.col]).ravel() if out is not None else np.zeros(coo.nnz)
    base = coo.data / size_d
    ratio = np.abs((x / size_o if size_o else 0.0) - base) / base
    edges = np.r_[np.linspace(0, 1, bins + 1), np.inf]  # [0, 10%), ..., [90%, 100%), ≥ 100%
    labels = [f"{round(100 * i / bins)}–{round(100 * (i + 1) / bins)}%" for i in range(bins)]
    labels.append("≥100%")
    present = ratio[x > 0]
    return {
        "bins": labels,
        "output_triplets": int(present.size),
        "counts": np.histogram(present, bins=edges)[0].tolist(),
        "share_below_40pct": float((present < 0.4).mean()) if present.size else None,
        "input_triplets": int(coo.nnz),
        "counts_all_input": np.histogram(ratio, bins=edges)[0].tolist(),
        "median_all_input": float(np.median(ratio)) if ratio.size else None,
    }


def kl_divergence(c_ij: npt.NDArray[np.int64], x: npt.NDArray[np.int64]) -> float:
    size_d = float(c_ij.sum())
    n = c_ij.size
    pd = c_ij / size_d
    return float(np.sum(pd * np.log(pd * (float(x.sum()) + n) / (x + 1.0))))


def ump_metrics(
    c: sp.csr_matrix,
    c_ij: npt.NDArray[np.int64],
    x: npt.NDArray[np.int64],
    triplets: tuple[npt.NDArray[np.int64], ...] | None = None,
    *,
    min_support: float = 1 / 500,
) -> dict[str, Any]:
    res: dict[str, Any] = {
        "input_size": int(c_ij.sum()),
        "input_pairs": int(c_ij.size),
        "output_size": int(x.sum()),
        "output_pairs": int((x > 0).sum()),
        "diversity": float((x > 0).mean()) if x.size else 0.0,
        "volume_share": float(c_ij[x > 0].sum() / c_ij.sum()) if c_ij.sum() else 0.0,
        "kl_divergence": kl_divergence(c_ij, x) if x.size else None,
        "frequent": frequent_pairs(c_ij, x, min_support),
    }
    if triplets is not None:
        res["diff_ratio"] = diff_ratio_histogram(c, triplets)
    return res


def evaluate_same_schema(
    log: Any, released: Any, *, min_support: float = 1 / 500, synthetic_ids: bool = False
) -> dict[str, Any]:
    """The metrics above for a released same-schema log (``AnonID, Query, ClickURL, Count``)
    against its original log (used by ``searchveil evaluate``). With ``synthetic_ids`` (the
    end-to-end mode's generated users) the ids name no input user: the pair metrics are
    computed, the per-triplet DiffRatio is not."""
    import polars as pl

    inp = preprocess(click_histogram(log))
    cnt = "Count" if "Count" in released.columns else "count"
    rel = released.select(
        pl.col("AnonID").cast(pl.String).alias("user"),
        pl.col("Query").alias("query"),
        pl.col("ClickURL").alias("url"),
        pl.col(cnt).cast(pl.Int64).alias("n"),
    )
    pairs = inp.pairs.select("pair_id", "query", "url")
    users = pl.DataFrame({"user": [str(u) for u in inp.users]}).with_row_index("uidx")
    j = rel.join(pairs, on=["query", "url"], how="left")
    if synthetic_ids:  # no user to match: pair-level figures only
        known = j.drop_nulls(["pair_id"])
        p = known.get_column("pair_id").to_numpy().astype(np.int64)
        x = np.bincount(p, weights=known.get_column("n").to_numpy(), minlength=inp.n_pairs)
        res = ump_metrics(inp.matrix, inp.c_ij, x.astype(np.int64), None, min_support=min_support)
        res["rows_not_in_input"] = j.height - known.height
        res["user_ids"] = "synthetic (no triplet DiffRatio)"
        return res
    j = j.join(users, on="user", how="left")
    unknown = j.filter(pl.col("pair_id").is_null() | pl.col("uidx").is_null())
    known = j.drop_nulls(["pair_id", "uidx"])
    p = known.get_column("pair_id").to_numpy().astype(np.int64)
    k = known.get_column("uidx").to_numpy().astype(np.int64)
    n = known.get_column("n").to_numpy().astype(np.int64)
    x = np.bincount(p, weights=n, minlength=inp.n_pairs).astype(np.int64)
    res = ump_metrics(inp.matrix, inp.c_ij, x, (p, k, n), min_support=min_support)
    res["rows_not_in_input"] = unknown.height
    return res


def counts_log_metrics(log: SearchLog, out_log: pl.DataFrame, *, synthetic: bool) -> dict[str, Any]:
    """The private utility figures of a counts log (AnonID, Query, ClickURL, Count) against
    the input (report only)."""
    hist = click_histogram(log)
    pairs = hist.pairs.select("query", "url", pl.col("count").alias("c"))
    got = out_log.group_by(pl.col("Query").alias("query"), pl.col("ClickURL").alias("url")).agg(
        pl.col("Count").sum().alias("x")
    )
    j = pairs.join(got, on=["query", "url"], how="left").with_columns(pl.col("x").fill_null(0))
    c = j.get_column("c").to_numpy()
    x = j.get_column("x").to_numpy()
    total = float(c.sum()) or 1.0
    return {
        "input_click_rows": int(c.sum()),
        "input_pairs": int(c.size),
        "output_rows": int(out_log.get_column("Count").sum()) if out_log.height else 0,
        "output_log_lines": out_log.height,
        "output_pairs": int((x > 0).sum()),
        "volume_share": float(c[x > 0].sum()) / total,
        "kl_divergence": kl_divergence(c, x) if c.size else None,
        "user_ids": "synthetic" if synthetic else "real",
    }
