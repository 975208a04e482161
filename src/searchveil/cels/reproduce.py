"""``cels reproduce``: the experiments of CELS §6 (Hong et al., TKDE 2015) on the data we have,
with the paper's protocol (``--mode conditional``: NOT differentially private, counts computed
from the exact histogram; the report says so).

* **Utility, CELS vs LS (Fig. 5)** for r = 2, 4, 8 parties (users split round-robin by id)
  on the AOL top-1000 sample (paper cleaning: pairs with total count ≥ 20), the MSNBC head
  (10k sequences; every category is a pair) and a synthetic AOL-like log. CELS's counts are
  the centralized solve of the joint LP — the protocol computes exactly that LP (checked by
  ``tests/test_cels_protocol.py``) — and LS is :func:`searchveil.cels.local.local_sanitize`
  with each party's share of the CELS |O|. Metric: the KL utility loss of eq. (2) of the
  counts (the expected output), and the share of pairs output (diversity).
* **Bandwidth (Table 5 layout)**: total bytes of all parties for r = 2…10, modelled by
  :mod:`searchveil.cels.costs` at the paper's key sizes (512-bit Paillier, 1024-bit
  commutative elements) beside the paper's MB, and at ours (3072-bit Paillier, 32-byte
  Curve25519 elements);
  measured runs (real processes, TLS) for small r calibrate the model.
* **Runtime vs r and vs input size (Fig. 6)**: measured protocol runs (1024-bit keys).
* **KL approximation gap vs K (Appendix B)**.

b settings: the paper sweeps b ∈ [1e-5, 1e-1] with δ far above 1/|users|; such δ lets each
user appear in the output with probability up to δ (Condition 3 is exactly that probability),
so it does NOT protect every user. The report shows one setting with δ < 1/users (protects
everyone; the output is then nearly empty) and the paper's b values, labelled as such.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
from matplotlib.figure import Figure

from searchveil.cels.costs import predict_bytes, protocol_sizes
from searchveil.cels.local import local_sanitize
from searchveil.cels.params import CelsParams, Share
from searchveil.cels.runner import run_local
from searchveil.io.readers import read_log
from searchveil.model import SearchLog, click_histogram
from searchveil.release.ump import constraint_block, constraint_matrix, preprocess
from searchveil.release.ump.kl import (
    cels_bound,
    kl_gap_table,
    kl_loss,
    max_output_size,
    solve_kl,
)
from searchveil.release.ump.release import NOT_DP
from searchveil.report.html import img, page, table, write_report
from searchveil.rng import make_rng

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data"
AOL_TOP1000 = SHARED / "aol" / "aol-top1000-users.tsv.gz"
MSNBC = SHARED / "msnbc" / "msnbc990928-head10k.seq"

# Table 5 of the paper (total MB of all parties), r = 2, 4, 6, 8, 10
PAPER_TABLE5 = {
    "AOL 1M": [3.7, 14.3, 30.3, 56.2, 85.2],
    "AOL 2M": [9.8, 28.2, 65.3, 121.2, 183.8],
    "AOL 4M": [19.3, 66.0, 152.6, 257.4, 405.3],
    "MSNBC 200K": [2.2, 8.8, 19.1, 32.6, 46.2],
    "MSNBC 400K": [4.6, 18.3, 40.9, 62.1, 87.3],
    "MSNBC 800K": [8.9, 36.5, 89.3, 132.7, 194.6],
}
TABLE5_R = (2, 4, 6, 8, 10)


def synthetic_log(users: int = 600, seed: int = 0) -> SearchLog:
    """An AOL-like log: Zipf-popular (query, url) pairs, 5–40 clicks per user."""
    gen = np.random.Generator(np.random.PCG64(seed))
    n_clicks = gen.integers(5, 40, size=users)
    uid = np.repeat(np.arange(users), n_clicks)
    pair = np.minimum(gen.zipf(1.5, size=uid.size), 3000)
    df = pl.DataFrame(
        {
            "user": [f"u{u:05d}" for u in uid],
            "query": [f"query {p}" for p in pair],
            "url": [f"http://site{p % 997}.example/{p}" for p in pair],
        }
    )
    return SearchLog.from_frame(df, name=f"synthetic(users={users}, seed={seed})")


def clean_log(log: SearchLog, min_count: int) -> SearchLog:
    """The paper's AOL cleaning (§6.1): drop click rows of pairs with total count < min_count."""
    df = log.df.filter(pl.col("url").is_not_null())
    cnt = df.group_by(["query", "url"]).len("c").filter(pl.col("c") >= min_count)
    keep = df.join(cnt.select("query", "url"), on=["query", "url"], how="semi")
    return SearchLog.from_frame(
        keep.select("user", "query", "url"),
        name=f"{log.info.path} (pairs with count ≥ {min_count})",
    )


def split_users(log: SearchLog, r: int) -> list[SearchLog]:
    """r logs with disjoint users (round-robin over the sorted user ids)."""
    users = log.df.get_column("user").unique().sort()
    part = pl.DataFrame({"user": users, "_k": np.arange(users.len()) % r})
    df = log.df.join(part, on="user")
    keep = [c for c in ("user", "query", "url", "time", "rank") if c in df.columns]
    return [
        SearchLog.from_frame(df.filter(pl.col("_k") == k).select(keep), name=f"share{k + 1}")
        for k in range(r)
    ]


def _shares(logs: list[SearchLog]) -> list[Share]:
    return [Share(click_histogram(lg), lg.ledger_input()) for lg in logs]


def utility_cels_vs_ls(
    log: SearchLog, rs: tuple[int, ...], settings: list[tuple[float, float]], *, min_count: int
) -> list[dict[str, Any]]:
    """Fig. 5: KL loss of CELS (joint LP) vs LS for each r and (ε, δ)."""
    hist = click_histogram(log)
    inp = preprocess(hist)
    keep = np.flatnonzero(inp.c_ij >= min_count)
    c = inp.matrix[keep]
    cij = inp.c_ij[keep]
    m = constraint_block(c, cij)
    m = m[np.flatnonzero(np.diff(m.indptr) > 0)]
    rows = []
    for eps, dl in settings:
        b = cels_bound(eps, dl)
        lam = max_output_size(m, b) if m.shape[0] else 0.0
        sol = solve_kl(m, b, cij, output_share=0.5) if lam >= 2 else None
        x = sol.x if sol is not None else np.zeros(cij.size, dtype=np.int64)
        cels_kl = utility_from_counts(cij, x)
        for r in rs:
            params = CelsParams(
                epsilon=eps, delta=dl, objective="kl", min_count=min_count, mode="conditional"
            )
            ls = local_sanitize(
                _shares(split_users(log, r)), params, rng=make_rng(r),
                output_size=int(x.sum()) if x.sum() else None,
            )  # fmt: skip
            rows.append(
                {
                    "epsilon": eps, "delta": dl, "b": b, "r": r,
                    "protects_everyone": dl < 1.0 / log.n_users,
                    "max_output_size": lam,
                    "cels_output_size": int(x.sum()), "cels_kl": cels_kl["kl_loss"],
                    "cels_diversity": cels_kl["diversity"],
                    "ls_output_size": ls["utility"]["output_size"],
                    "ls_kl": ls["utility"]["kl_loss"],
                    "ls_diversity": ls["utility"]["diversity"],
                }
            )  # fmt: skip
    return rows


def utility_from_counts(c: np.ndarray, x: np.ndarray) -> dict[str, Any]:
    return {
        "kl_loss": kl_loss(c, x) if c.size else None,
        "diversity": float((x > 0).mean()) if x.size else 0.0,
    }


def _write_tsv(log: SearchLog, path: Path) -> None:
    df = log.df.filter(pl.col("url").is_not_null())
    df.select(
        pl.col("user").alias("AnonID"),
        pl.col("query").alias("Query"),
        pl.lit("2006-03-01 00:00:00").alias("QueryTime"),
        pl.lit("1").alias("ItemRank"),
        pl.col("url").alias("ClickURL"),
    ).write_csv(path, separator="\t", quote_style="never")


def measured_run(
    log: SearchLog, r: int, *, key_bits: int, eps: float, dl: float, min_count: int = 1
) -> dict[str, Any]:
    """A real protocol run (separate processes, TLS) on r shares of ``log``."""
    with tempfile.TemporaryDirectory(prefix="cels-repro-") as tmp:
        d = Path(tmp)
        paths = []
        for k, lg in enumerate(split_users(log, r)):
            p = d / f"s{k + 1}.tsv"
            _write_tsv(lg, p)
            paths.append(p)
        params = CelsParams(
            epsilon=eps,
            delta=dl,
            objective="kl",
            key_bits=key_bits,
            min_count=min_count,
            mode="conditional",
        )
        t0 = time.perf_counter()
        res = run_local(paths, params, d / "out", seed=1, timeout=900)
        wall = time.perf_counter() - t0
        led = res["ledger"]
        stats = res["party_stats"]
        hists = [click_histogram(read_log(p)) for p in paths]
    sent: dict[str, int] = {}
    for p in stats:
        for k, v in p["traffic"]["sent"].items():
            sent[k] = sent.get(k, 0) + v
    sizes = protocol_sizes(hists, min_count=min_count, records=led["noisy"]["output_rows"])
    return {
        "r": r, "key_bits": key_bits, "wall_seconds": wall, "sent": sent,
        "total_bytes": sum(sent.values()), "sizes": sizes.to_dict(),
        "predicted": predict_bytes(sizes, key_bits),
        "phase_seconds_max": _phase_max(stats),
    }  # fmt: skip


def _phase_max(stats: list[dict[str, Any]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in stats:
        for k, v in p["seconds"].items():
            out[k] = max(out.get(k, 0.0), v)
    return out


def modelled_bandwidth(
    log: SearchLog, rs: tuple[int, ...], *, min_count: int, records: int
) -> list[dict[str, Any]]:
    rows = []
    for r in rs:
        sizes = protocol_sizes(
            [click_histogram(lg) for lg in split_users(log, r)], min_count=min_count,
            records=records,
        )  # fmt: skip
        paper = predict_bytes(sizes, 512)
        ours = predict_bytes(sizes, 3072)
        # paper: 1024-bit commutative elements (128 bytes) instead of our 32 (≈ 4× the union
        # and output bytes, which are almost all group elements)
        el_share = paper["union"] + paper["output"]
        paper_total = sum(paper.values()) + 3 * el_share
        rows.append(
            {"r": r, "sizes": sizes.to_dict(), "paper_keys_mb": paper_total / 1e6,
             "default_keys_mb": sum(ours.values()) / 1e6, "by_phase_default": ours}
        )  # fmt: skip
    return rows


def _fig_utility(rows: list[dict[str, Any]], title: str) -> Figure:
    fig = Figure(figsize=(8, 3.6))
    ax = fig.subplots()
    settings = sorted({(r["epsilon"], r["delta"]) for r in rows})
    for i, (e, d) in enumerate(settings):
        sub = [r for r in rows if (r["epsilon"], r["delta"]) == (e, d)]
        ax.plot([r["r"] for r in sub], [r["ls_kl"] for r in sub], "o--", color=f"C{i}",
                label=f"LS, b={sub[0]['b']:.2g}")  # fmt: skip
        ax.plot([r["r"] for r in sub], [r["cels_kl"] for r in sub], "s-", color=f"C{i}",
                label=f"CELS, b={sub[0]['b']:.2g}")  # fmt: skip
    ax.set_xlabel("parties r")
    ax.set_ylabel("KL utility loss (eq. 2)")
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def reproduce(
    report: Path,
    *,
    rs: tuple[int, ...] = (2, 4, 8),
    key_bits: int = 512,
    quick: bool = False,
    progress: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Run the experiments; write the HTML report (an existing one replaced only with
    ``overwrite``, and only a searchveil report); return the numbers."""
    say = print if progress else (lambda *a: None)
    datasets: list[tuple[str, SearchLog, int]] = []
    synth = synthetic_log(300 if quick else 1500, seed=0)
    datasets.append(("synthetic AOL-like", synth, 1))
    if not quick and AOL_TOP1000.exists():
        datasets.append(
            ("AOL top-1000 users (count ≥ 20)", clean_log(read_log(AOL_TOP1000), 20), 1)
        )
    if not quick and MSNBC.exists():
        datasets.append(("MSNBC head 10k", read_log(MSNBC), 1))
    res: dict[str, Any] = {"report": str(report), "utility": {}, "bandwidth": {}}
    for name, log, mc in datasets:
        say(f"utility: {name}")
        n = log.n_users
        settings = [(1.0, 0.5 / n), (0.02, 0.5), (0.2, 0.5)]
        res["utility"][name] = utility_cels_vs_ls(log, rs, settings, min_count=mc)
        recs = max(r["cels_output_size"] for r in res["utility"][name])
        say(f"bandwidth model: {name}")
        res["bandwidth"][name] = modelled_bandwidth(
            log, (2, 4) if quick else TABLE5_R, min_count=mc, records=recs
        )
    say("measured runs")
    meas = []
    small_synth = synthetic_log(300, seed=0)
    for r in (2, 3) if quick else (2, 3, 4):
        meas.append(measured_run(small_synth, r, key_bits=key_bits, eps=0.2, dl=0.5))
    res["measured"] = meas
    size_runs = []
    if not quick:
        for users in (150, 300, 600):
            size_runs.append(
                measured_run(synthetic_log(users, seed=1), 3, key_bits=key_bits, eps=0.2, dl=0.5)
                | {"users": users}
            )
    res["measured_vs_size"] = size_runs
    say("KL gap vs K")
    small = preprocess(click_histogram(synthetic_log(120, seed=3)))
    mm = constraint_matrix(small)
    b = cels_bound(0.2, 0.5)
    lam = max_output_size(mm, b)
    res["kl_gap"] = kl_gap_table(mm, b, small.c_ij, lam / 2, ks=(3, 5, 9, 17, 33, 65))
    write_report(report, _html(res, key_bits), overwrite=overwrite)
    return res


#: the columns of the Fig. 5 tables: (header, key of a utility row)
UTILITY_COLUMNS = (
    ("ε", "epsilon"), ("δ", "delta"), ("b", "b"), ("r", "r"), ("δ<1/users", "protects_everyone"),
    ("|𝕆|", "max_output_size"), ("CELS |O|", "cels_output_size"), ("CELS KL", "cels_kl"),
    ("LS |O|", "ls_output_size"), ("LS KL", "ls_kl"), ("CELS diversity", "cels_diversity"),
    ("LS diversity", "ls_diversity"),
)  # fmt: skip


def _html(res: dict[str, Any], key_bits: int) -> str:
    body = [
        f'<div class="warn">The paper\'s protocol (<code>--mode conditional</code>): {NOT_DP} '
        "— only the sampling given the counts is (ε, δ)-DP. The default of <code>cels run</code> "
        "is the joint end-to-end DP release (docs/privacy/cels.md §5).</div>",
        '<div class="warn">Settings with δ ≥ 1/users (the paper\'s b values) let every user '
        "appear in the output with probability up to δ: they reproduce the paper but do NOT "
        "protect everyone. The δ &lt; 1/users rows protect everyone and output almost nothing."
        "</div>",
        *_utility_section(res["utility"]),
        *_bandwidth_section(res["bandwidth"]),
        f"<h2>Measured runs (real processes over TLS, {key_bits}-bit Paillier)</h2>",
    ]
    mrows = []
    for m in res["measured"] + res["measured_vs_size"]:
        mrows.append([m.get("users", "—"), m["r"], m["sizes"]["kept_pairs"], m["sizes"]["ell"],
                      m["total_bytes"] / 1e6, sum(m["predicted"].values()) / 1e6,
                      m["wall_seconds"]])  # fmt: skip
    body.append(
        table(["users", "r", "n_J", "ℓ", "measured MB", "model MB", "wall s"], mrows, left=0)
    )
    body.append("<h2>KL approximation gap vs K (Appendix B)</h2>")
    g = res["kl_gap"]
    body.append(
        table(
            ["K", "PWL objective", "true objective", "relative gap"],
            [
                [r["K"], r["pwl_objective"], r["true_objective"], r["relative_gap"]]
                for r in g["rows"]
            ],
            left=0,
        )  # fmt: skip
    )
    return page("CELS reproduction", "Hong et al., TKDE 2015 — §6", body)


def _utility_section(utility: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Fig. 5: per input, KL loss vs r (a figure) and every setting's CELS and LS figures."""
    body = ["<h2>Utility: CELS vs local sanitization (Fig. 5)</h2>"]
    for name, rows in utility.items():
        body.append(f"<h3>{name}</h3>")
        body.append(img(_fig_utility(rows, name), f"KL loss vs r, {name}"))
        cells = [
            [str(r[k]) if k == "protects_everyone" else r[k] for _, k in UTILITY_COLUMNS]
            for r in rows
        ]
        body.append(table([h for h, _ in UTILITY_COLUMNS], cells, left=0))
    return body


def _bandwidth_section(bandwidth: dict[str, list[dict[str, Any]]]) -> list[str]:
    """Table 5's layout: the paper's printed rows, then the model's at both key sizes."""
    hdr = ["input", *[f"r={r}" for r in TABLE5_R]]
    trs = [[k, *v] for k, v in PAPER_TABLE5.items() if k in ("AOL 1M", "MSNBC 200K")]
    for name, rows in bandwidth.items():
        cells = {r["r"]: r for r in rows}
        for label, key in (
            ("512/1024-bit (paper keys)", "paper_keys_mb"),
            ("3072-bit / Curve25519 (default)", "default_keys_mb"),
        ):
            vals = [cells[r][key] if r in cells else "" for r in TABLE5_R]
            trs.append([f"{name}: {label}", *vals])
    return [
        "<h2>Bandwidth, Table 5 layout (total MB of all parties, modelled)</h2>",
        "<p>Rows 'AOL 1M' and 'MSNBC 200K' are the paper's printed numbers.</p>",
        table(hdr, trs),
    ]
