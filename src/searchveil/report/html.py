"""Self-contained HTML reports: one file, inline CSS, plots embedded as base64 PNG
(``<img src="data:image/png;base64,…">``), no scripts, no external links or assets, so the file
opens offline in any browser and can be attached to an e-mail.

Three reports share the building blocks here:

* :func:`evaluation_report` — one release vs its original log (``searchveil evaluate``);
* :func:`comparison_report` — several releases of one input side by side (``searchveil compare``);
* :func:`reproduction_report` — paper tables/trends beside ours (``searchveil reproduce``).

Plots use matplotlib's object API (``Figure``, no pyplot global state, Agg canvas). Every report
is written with :func:`searchveil.io.ledger.write_text_atomic` (temp file + rename).
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from searchveil.io.ledger import write_text_atomic

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "fig_to_data_uri",
    "evaluation_report",
    "comparison_report",
    "reproduction_report",
    "write_report",
    "single_user_banner",
    "dcurve_figure",
    "dcurve_section",
    "demo_report",
    "failed_list",
]

CSS = """
body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0;color:#1d2330;
background:#f6f7f9;line-height:1.45;overflow-wrap:anywhere}
main{max-width:1180px;margin:0 auto;padding:24px 28px 60px}
h1{font-size:26px;margin:8px 0 4px}h2{font-size:20px;margin:34px 0 8px;border-bottom:2px solid
#d8dde6;padding-bottom:4px}h3{font-size:16px;margin:18px 0 6px}
.sub{color:#5a6475;margin:0 0 14px}
.guarantee{background:#0f5132;color:#fff;border-radius:8px;padding:14px 18px;margin:14px 0;
font-size:17px}.guarantee b{font-size:20px}
.warn{background:#842029;color:#fff;border-radius:8px;padding:12px 18px;margin:14px 0;
font-size:16px}.note{background:#fff8e1;border-left:4px solid #f0b400;padding:8px 12px;
margin:10px 0;font-size:14px}
table{border-collapse:collapse;margin:8px 0 14px;background:#fff;font-size:14px;max-width:100%}
th,td{border:1px solid #d8dde6;padding:4px 9px;text-align:right;vertical-align:top}
td{font-variant-numeric:tabular-nums;white-space:nowrap}td.l{white-space:normal}
th{background:#eef1f6;text-align:center;font-weight:600}td.l,th.l{text-align:left}
tr:nth-child(even) td{background:#fafbfc}
img,svg{max-width:100%;height:auto}
img.plot{background:#fff;border:1px solid #d8dde6;border-radius:6px;margin:6px 0}
pre{white-space:pre-wrap}
.na{color:#8a93a3;font-style:italic}code{background:#eef1f6;padding:1px 4px;border-radius:3px}
.grid{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}.grid>div{flex:1 1 360px;
min-width:0}.grid>div.plot{flex:2 1 640px}
ul.failed{background:#fff;border:1px solid #d8dde6;border-left:4px solid #842029;
padding:8px 12px 8px 30px;margin:6px 0 14px;font-size:14px}ul.failed li{margin:2px 0}
footer{margin-top:40px;color:#8a93a3;font-size:12px}
"""

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]


# -- building blocks ------------------------------------------------------------------------
def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def fmt(x: Any, digits: int = 4) -> str:
    """Numbers for tables: ints with thousands separators, floats to ``digits`` significant."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if math.isnan(x) or math.isinf(x):
            return "—"
        if x != 0 and (abs(x) >= 1e9 or abs(x) < 1e-3):
            return f"{x:.{digits - 1}e}"
        if abs(x) >= 10 ** (digits - 1):
            return f"{x:,.0f}"
        return f"{x:,.{digits}g}" if abs(x) >= 1 else f"{x:.{digits}g}"
    return esc(x)


def pct(x: Any) -> str:
    if not isinstance(x, int | float) or isinstance(x, bool) or math.isnan(x):
        return "—"
    return f"{100 * x:.2f}%"


def table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], *, left: int = 1, raw: bool = False
) -> str:
    """An HTML table; the first ``left`` columns are left-aligned text. Cells are formatted
    with :func:`fmt` unless they are already strings produced by :func:`pct`/:func:`fmt` and
    ``raw`` is set (then they are inserted as given, already escaped)."""
    out = ["<table><tr>"]
    for i, h in enumerate(headers):
        out.append(f'<th class="{"l" if i < left else ""}">{_breakable(esc(h))}</th>')
    out.append("</tr>")
    for row in rows:
        out.append("<tr>")
        for i, c in enumerate(row):
            cell = c if (raw and isinstance(c, str)) else fmt(c)
            out.append(f'<td class="{"l" if i < left else ""}">{cell}</td>')
        out.append("</tr>")
    out.append("</table>")
    return "".join(out)


def _breakable(text: str) -> str:
    """Allow a line break after ``_`` and ``/`` (snake_case headers, paths) in escaped text."""
    return text.replace("_", "_<wbr>").replace("/", "/<wbr>")


def setting_label(x: Any) -> str:
    """A setting label such as ``zealous:m=1,items=query_pairs``, escaped, that may break
    after ``:``, ``,`` and ``_`` rather than anywhere."""
    return _breakable(esc(x)).replace(",", ",<wbr>").replace(":", ":<wbr>")


def failed_list(title: str, failures: Sequence[tuple[str, str]]) -> str:
    """Settings that could not run, each with its reason, as a list under a table (reasons
    are sentences: they never go into a data cell). Empty string when nothing failed."""
    if not failures:
        return ""
    items = "".join(f"<li><b>{setting_label(what)}</b>: {esc(why)}</li>" for what, why in failures)
    return f'<p class="sub">{esc(title)}</p><ul class="failed">{items}</ul>'


def _figure(**kw: Any) -> Figure:
    """A new matplotlib ``Figure`` (matplotlib is imported when the first plot is drawn:
    importing it at module top slows every CLI command's start-up)."""
    from matplotlib.figure import Figure

    return Figure(**kw)


def fig_to_data_uri(fig: Figure) -> str:
    """PNG of a matplotlib figure as a ``data:`` URI."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # see _figure

    FigureCanvasAgg(fig)
    for ax in fig.get_axes():
        ax.title.set_fontsize(10)
        ax.xaxis.label.set_fontsize(10)
        ax.yaxis.label.set_fontsize(10)
        ax.tick_params(labelsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def img(fig: Figure, alt: str) -> str:
    return f'<img class="plot" alt="{esc(alt)}" src="{fig_to_data_uri(fig)}">'


def _finite_pos(xs: Sequence[Any], ys: Sequence[Any]) -> tuple[list[float], list[float]]:
    px, py = [], []
    for x, y in zip(xs, ys, strict=False):
        if isinstance(x, int | float) and isinstance(y, int | float) and x > 0 and y > 0:
            px.append(float(x))
            py.append(float(y))
    return px, py


def _finite(xs: Sequence[Any], ys: Sequence[Any]) -> tuple[list[float], list[float]]:
    px, py = [], []
    for x, y in zip(xs, ys, strict=False):
        if isinstance(x, int | float) and isinstance(y, int | float) and math.isfinite(y):
            px.append(float(x))
            py.append(float(y))
    return px, py


def na(d: dict[str, Any] | None) -> str | None:
    """The "not applicable" paragraph for a metric result, or None if it applies."""
    if not d:
        return '<p class="na">not computed</p>'
    if d.get("applicable") is False:
        return f'<p class="na">Not applicable: {esc(d.get("reason", ""))}</p>'
    return None


def page(title: str, subtitle: str, body: list[str]) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>"
        f'<h1>{esc(title)}</h1><p class="sub">{subtitle}</p>'
        + "\n".join(body)
        + "<footer>Generated by searchveil. Self-contained file: no external resources.</footer>"
        "</main></body></html>\n"
    )


def write_report(path: str | Path, text: str) -> None:
    write_text_atomic(path, text)


# -- guarantee banner -------------------------------------------------------------------------
def guarantee_banner(release: dict[str, Any]) -> str:
    eps, delta = release.get("epsilon"), release.get("delta")
    notion = release.get("notion") or "guarantee"
    parts = [f"<b>{esc(release.get('mechanism', 'release'))}</b> — {esc(notion)}"]
    if eps is not None:
        parts.append(f"ε = <b>{fmt(eps)}</b>")
    if delta is not None:
        parts.append(f"δ = <b>{fmt(delta)}</b>")
    g = release.get("guarantee")
    if isinstance(g, str):
        parts.append(esc(g))
    elif isinstance(g, dict):
        parts.append(esc(", ".join(f"{k} = {v}" for k, v in g.items())))
    dp = eps is not None
    cls = "guarantee" if dp else "warn"
    if not dp:
        parts.append("no differential-privacy guarantee (ε, δ not defined)")
    out = f'<div class="{cls}">{" · ".join(parts)}</div>'
    if release.get("seeded") or release.get("for_release") is False:
        out += (
            '<div class="warn">This release was produced with a fixed seed: it is an '
            "EXPERIMENT, NOT FOR RELEASE (its noise is reproducible).</div>"
        )
    return out


PRIVATE_BANNER = (
    '<div class="warn"><b>Reads the private data.</b> This analysis compares releases with the '
    "original log. It is for the data holder choosing a mechanism only — do not publish this "
    "report; only the release directories carry the privacy guarantee.</div>"
)


# -- evaluation report ------------------------------------------------------------------------
def _distribution_plot(kind: str, d: dict[str, Any]) -> Figure:
    fig = _figure(figsize=(9.5, 6.6))
    axs = fig.subplots(2, 2)
    tj = d["top_j"]
    js = tj["j"]
    ax = axs[0][0]
    x, y = _finite(js, tj["coverage"])
    ax.plot(x, y, "o-", color=COLORS[0])
    ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("top-j coverage (share of original top-j released)")
    ax.set_xlabel("j")
    ax = axs[0][1]
    x, y = _finite_pos(js, tj["avg_l1"])
    ax.plot(x, y, "o-", color=COLORS[1], label="avg L1")
    ax.set_xscale("log")
    if y:
        ax.set_yscale("log")
    ax.set_title("top-j precision: average L1 of relative frequencies")
    ax.set_xlabel("j")
    ax = axs[1][0]
    x, y = _finite(js, tj["kl"])
    ax.plot(x, y, "o-", color=COLORS[3])
    ax.set_xscale("log")
    ax.set_title("top-j precision: KL(original ‖ release), +0.5 smoothing")
    ax.set_xlabel("j")
    ax = axs[1][1]
    cd = d["count_distribution"]
    for lab, key, col in (("original", "original", COLORS[0]), ("release", "released", COLORS[1])):
        pts = cd.get(key) or []
        x, y = _finite_pos([p[0] for p in pts], [p[1] for p in pts])
        if x:
            ax.scatter(x, y, s=9, color=col, label=lab, alpha=0.7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title("count distribution (log-log)")
    ax.set_xlabel("count")
    ax.set_ylabel("items with that count")
    ax.legend()
    fig.suptitle(f"{kind}", fontsize=14)
    fig.tight_layout()
    return fig


def _caching_plot(c: dict[str, Any]) -> Figure:
    fig = _figure(figsize=(7, 3.8))
    ax = fig.subplots()
    b = c["budgets"]
    xs = [r["budget_fraction"] for r in b]
    for key, lab, col in (
        ("hit_probability_original", "cache from original log", COLORS[0]),
        ("hit_probability_release", "cache from release", COLORS[1]),
    ):
        x, y = _finite(xs, [r[key] for r in b])
        ax.plot(x, y, "o-", color=col, label=lab)
    ax.set_xscale("log")
    ax.set_xlabel("memory budget (fraction of all original postings)")
    ax.set_ylabel("hit probability on original stream")
    ax.set_ylim(0, 1)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def evaluation_sections(r: dict[str, Any], *, plots: bool = True) -> list[str]:
    """The metric sections of one evaluation result (shared by evaluate and compare)."""
    body: list[str] = []
    dist = r.get("distribution") or {}
    body.append("<h2>Released items (Götz §6–7.1, Korolova §4.6.1)</h2>")
    if dist:
        rows = []
        for kind, d in dist.items():
            rows.append(
                [
                    kind,
                    d["original_distinct"],
                    d["released_distinct"],
                    pct(d["share_distinct"]),
                    d["original_total"],
                    d["released_total"],
                    pct(d["share_volume"]),
                    fmt(d["avg_count_difference"]),
                    fmt(d["released_not_in_original"]),
                ]
            )
        body.append(
            table(
                [
                    "items",
                    "original distinct",
                    "released distinct",
                    "% distinct",
                    "original volume",
                    "released volume",
                    "% volume",
                    "avg count diff.",
                    "released, not in original",
                ],
                rows,
                raw=True,
            )
        )
        derived = (r.get("release") or {}).get("derived") or {}
        for k, why in derived.items():
            body.append(f'<p class="note"><b>{esc(k)}</b>: {esc(why)}.</p>')
        body.append(
            '<p class="note">Avg count difference: release counts scaled to the original total, '
            "mean |difference| over all original items (absent = 0). KL uses +0.5 pseudo-counts "
            "on the release side (KL is infinite when a top-j item is missing).</p>"
        )
        for kind, d in dist.items():
            body.append(f"<h3>{esc(kind)}</h3>")
            tj = d["top_j"]
            rows = [
                [j, pct(c), u, fmt(l1), fmt(kl)]
                for j, c, u, l1, kl in zip(
                    tj["j"], tj["coverage"], tj["unpublished"], tj["avg_l1"], tj["kl"], strict=False
                )
            ]
            grid = '<div class="grid"><div>'
            grid += table(["top-j", "coverage", "unpublished", "avg L1", "KL"], rows, raw=True)
            grid += "</div>"
            if plots:
                plot = img(_distribution_plot(kind, d), f"{kind} distribution")
                grid += f'<div class="plot">{plot}</div>'
            grid += "</div>"
            body.append(grid)
    else:
        body.append('<p class="na">No item histogram in this release.</p>')

    c = r.get("caching")
    body.append("<h2>Index caching (Götz §7.2)</h2>")
    msg = na(c)
    if msg or c is None:
        body.append(msg or "")
    else:
        body.append(f'<p class="note"><b>Proxy:</b> {esc(c["proxy_description"])}.</p>')
        rows = [
            [
                pct(b["budget_fraction"]),
                fmt(b["budget_postings"]),
                fmt(b["hit_probability_original"]),
                fmt(b["hit_probability_release"]),
                fmt(b["cached_original"]),
                fmt(b["cached_release"]),
                pct(b["cache_overlap"]),
            ]
            for b in c["budgets"]
        ]
        grid = '<div class="grid"><div>' + table(
            [
                "budget",
                "postings",
                "hit prob. (original)",
                "hit prob. (release)",
                "lists cached (orig.)",
                "lists cached (rel.)",
                "overlap",
            ],
            rows,
            raw=True,
        )
        grid += "</div>"
        if plots:
            plot = img(_caching_plot(c), "index caching hit probability")
            grid += f'<div class="plot">{plot}</div>'
        body.append(grid + "</div>")

    s = r.get("substitution")
    body.append("<h2>Query substitution (Götz §7.3, Jones et al. 2006)</h2>")
    msg = na(s)
    if msg or s is None:
        body.append(msg or "")
    else:
        rows = [
            [
                f"top-{b['j']}",
                b["queries_evaluated"],
                b["queries_with_original_substitutions"],
                b["queries_with_release_substitutions"],
                pct(b["coverage"]),
                fmt(b["precision"]),
                fmt(b["recall"]),
                fmt(b["map"]),
                fmt(b["ndcg"]),
            ]
            for b in s["by_j"]
        ]
        body.append(
            table(
                [
                    "j",
                    "queries",
                    "with orig. subst.",
                    "with release subst.",
                    "coverage",
                    "precision",
                    "recall",
                    "MAP",
                    "NDCG",
                ],
                rows,
                raw=True,
            )
        )
        ex = s.get("examples") or []
        if ex:
            body.append("<h3>Examples (top substitutions)</h3>")
            body.append(
                table(
                    ["query", "from original", "from release"],
                    [
                        [
                            esc(e["query"]),
                            esc("; ".join(e["original"])),
                            esc("; ".join(e["release"])),
                        ]
                        for e in ex
                    ],
                    left=3,
                    raw=True,
                )
            )

    k = r.get("keywords")
    body.append("<h2>Keyword generation (Korolova §4.6.2.2, Fuxman et al. 2008)</h2>")
    msg = na(k)
    if msg or k is None:
        body.append(msg or "")
    else:
        g = k["graph"]
        body.append(
            f'<p class="note">Random walk with absorbing seed URLs, α = {fmt(k["alpha"])}, '
            f"γ = {fmt(k['gamma'])}. Original graph: {fmt(g['original_queries'])} queries, "
            f"{fmt(g['original_edges'])} edges; released graph: {fmt(g['released_queries'])} "
            f"queries, {fmt(g['released_edges'])} edges.</p>"
        )
        rows = []
        for name, ss in k["seed_sets"].items():
            for b in ss["by_threshold"]:
                rows.append(
                    [
                        esc(name),
                        fmt(b["threshold"]),
                        fmt(b["original"]),
                        fmt(b["released"]),
                        pct(b["released_share_of_original"]),
                        pct(b["overlap"]),
                    ]
                )
        body.append(
            table(
                [
                    "seed set",
                    "relevance ≥",
                    "keywords (original)",
                    "keywords (release)",
                    "release / original",
                    "overlap (of release)",
                ],
                rows,
                raw=True,
            )
        )
        seeds = "; ".join(
            f"{esc(n)}: {esc(', '.join(ss['domains']))} ({ss['original_graph']['seed_urls']} "
            "seed URLs in the original graph)"
            for n, ss in k["seed_sets"].items()
        )
        body.append(f'<p class="note">Seed domains — {seeds}.</p>')

    f = r.get("fears")
    body.append("<h2>“Fear of …” ranking (Korolova §4.6.2.1)</h2>")
    msg = na(f)
    if msg or f is None:
        body.append(msg or "")
    else:
        n = max(len(f["original_top"]), len(f["released_top"]))
        rows = []
        for i in range(n):
            o = f["original_top"][i] if i < len(f["original_top"]) else ["", None]
            rl = f["released_top"][i] if i < len(f["released_top"]) else ["", None]
            rows.append([str(i + 1), esc(o[0]), fmt(o[1]), esc(rl[0]), fmt(rl[1])])
        if rows:
            body.append(
                table(["rank", "original", "count", "release", "count"], rows, left=2, raw=True)
            )
        body.append(
            f'<p class="note">{fmt(f["original_fears"])} distinct fears in the original, '
            f"{fmt(f['released_fears'])} in the release; top-{f['top']} overlap "
            f"{pct(f['top_overlap'])}, same order: {fmt(f['same_order'])}.</p>"
        )

    u = r.get("ump")
    if u and u.get("applicable"):
        body.append("<h2>Same-schema utility (Hong et al., UMP metrics)</h2>")
        rows = [[esc(kk), fmt(vv)] for kk, vv in u.items() if not isinstance(vv, dict | list)]
        body.append(table(["metric", "value"], rows, raw=True))
    return body


def _ledger_section(rel: dict[str, Any]) -> list[str]:
    body = ["<h2>Release ledger</h2>"]
    params = rel.get("parameters") or {}
    rows = [[esc(k), esc(v)] for k, v in params.items()]
    if rows:
        body.append(table(["parameter", "value"], rows, left=2, raw=True))
    outs = rel.get("outputs") or {}
    body.append(
        table(
            ["output", "file", "columns", "rows"],
            [
                [
                    esc(k),
                    esc(v.get("file")),
                    esc(", ".join(v.get("columns") or [])),
                    fmt(v.get("rows")),
                ]
                for k, v in outs.items()
            ],
            left=3,
            raw=True,
        )
    )
    return body


def evaluation_report(result: dict[str, Any]) -> str:
    """The HTML of ``searchveil evaluate``."""
    rel = result.get("release") or {}
    orig = result.get("original") or {}
    sub = (
        f"Release <code>{esc(rel.get('dir'))}</code> evaluated against "
        f"<code>{esc(orig.get('file'))}</code> ({fmt(orig.get('rows'))} rows, "
        f"{fmt(orig.get('users'))} users)."
    )
    body = [guarantee_banner(rel)]
    su = rel.get("single_user") or result.get("single_user")
    if su or (rel.get("delta") is not None and orig.get("users")):
        body.append(single_user_banner(su, delta=rel.get("delta"), users=orig.get("users")))
    body.append(PRIVATE_BANNER)
    body += evaluation_sections(result)
    body += _ledger_section(rel)
    return page("searchveil evaluation report", sub, body)


# -- δ that protects everyone (issue 12; docs/privacy/delta.md) -------------------------------
def single_user_banner(
    single_user: dict[str, Any] | None, *, delta: Any = None, users: Any = None
) -> str:
    """The δ-vs-1/U banner (red when δ ≥ 1/U) with, when known, the expected number of items
    held by a single user that the release publishes (a private figure: for the data holder)."""
    chk = (single_user or {}).get("delta_check") or {}
    dl = chk.get("delta", delta)
    u = chk.get("users_bound", users)
    if dl is None or not u:
        return ""
    ok = float(dl) < 1.0 / float(u)
    parts = [
        f"δ = <b>{fmt(dl)}</b> {'&lt;' if ok else '≥'} 1/U = {fmt(1.0 / float(u))} "
        f"(U = {fmt(u)} users)"
    ]
    if single_user:
        parts.append(
            "expected items held by a single user that are published: "
            f"<b>{fmt(single_user.get('expected_single_user_published'))}</b> "
            f"(of {fmt(single_user.get('single_user_items'))} single-user items"
            + ("" if single_user.get("exact", True) else ", upper bound")
            + "; a private figure, not in the release)"
        )
    if ok:
        return f'<div class="guarantee">{" · ".join(parts)}</div>'
    parts.append(
        "<b>δ does not protect everyone</b>: (ε, δ)-DP at this δ allows publishing items that "
        f"only one user holds; use δ ≤ 1/(10·U) = {fmt(0.1 / float(u))} "
        "(docs/privacy/delta.md)"
    )
    return f'<div class="warn">{" · ".join(parts)}</div>'


DCURVE_LABELS = {
    "korolova": "Release-Data (Korolova)",
    "gaussian": "Gaussian selection",
    "laplace": "Laplace (distinct users)",
    "policy-gaussian": "policy Gaussian*",
    "mad": "MAD*",
    "mad2r": "MAD2R*",
    "dp-sips": "DP-SIPS*",
}


def dcurve_figure(result: dict[str, Any]) -> Figure:
    """The thesis' Fig. 4.2 for a :func:`searchveil.evaluate.dcurve.dcurve` result: % of distinct
    queries and % of query volume released (expected) against d, one line per mechanism."""
    fig = _figure(figsize=(10, 3.8))
    axes = fig.subplots(1, 2)
    for i, mech in enumerate(DCURVE_LABELS):
        rows = [r for r in result["table"] if r["mechanism"] == mech]
        if not rows:
            continue
        ds = [r["d"] for r in rows]
        for ax, key in zip(axes, ("distinct_pct", "volume_pct"), strict=True):
            ax.plot(ds, [r[key] for r in rows], "o-", color=COLORS[i], ms=4,
                    label=DCURVE_LABELS[mech])  # fmt: skip
    for ax, lab in zip(axes, ("% of distinct queries released", "% of query volume released"),
                       strict=True):  # fmt: skip
        ax.set_xscale("log")
        ds_all = sorted({r["d"] for r in result["table"]})
        ax.set_xticks(ds_all, [str(d) for d in ds_all])
        ax.minorticks_off()
        ax.set_xlabel("d (queries kept per user)")
        ax.set_ylabel(lab)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"e^ε = {math.exp(result['epsilon']):.3g}, δ = {result['delta']:.3g}, "
        f"{result['users']:,} users (expected values)", fontsize=10,
    )  # fmt: skip
    fig.tight_layout()
    return fig


def dcurve_section(result: dict[str, Any], *, title: str, plots: bool = True) -> list[str]:
    """Heading, plot and table of a d-curve (thesis Fig. 4.2)."""
    body = [f"<h2>{esc(title)}</h2>"]
    body.append(
        f"<p>{fmt(result['users'])} users, {fmt(result['query_events'])} query events, "
        f"{fmt(result['distinct_queries'])} distinct queries; e^ε = "
        f"{fmt(math.exp(result['epsilon']))}, δ = {fmt(result['delta'])}. Expected values over "
        "the mechanisms' noise, computed exactly from the keep curves (thesis §4.6.1.1, "
        "Fig. 4.2); * one simulated run (the ℓ2-weighted rounds have no closed form).</p>"
    )
    if result.get("diagnostic"):
        body.append(
            '<p class="note">A data-holder diagnostic: every point reads the whole log it is '
            "computed on. Choosing d from the curve of a private log is a use of the data that "
            "no ledger accounts for (it costs privacy); this curve is computed on the synthetic "
            "log only, and the releases use each strategy's data-independent default d "
            "(docs/privacy/selection.md).</p>"
        )
    if plots:
        body.append(img(dcurve_figure(result), "d-curve"))
    rows = []
    for r in result["table"]:
        rows.append([
            DCURVE_LABELS.get(r["mechanism"], r["mechanism"]), r["d"],
            r.get("K", r.get("tau", fmt(r.get("threshold_units")))),
            pct(r["distinct_pct"] / 100.0),
            pct(r["volume_pct"] / 100.0), fmt(r["single_user_released"]),
        ])  # fmt: skip
    body.append(
        table(
            [
                "mechanism",
                "d",
                "threshold (K, τ, or weight in user units)",
                "% distinct released",
                "% volume released",
                "single-user queries published (expected)",
            ],
            rows,
            left=1,
            raw=True,
        )  # fmt: skip
    )
    return body


def demo_report(result: dict[str, Any], *, plots: bool = True) -> str:
    """The HTML of ``searchveil demo``: the choice of δ, each run's single-user exposure, and the
    d-curve of the synthetic log."""
    body = [PRIVATE_BANNER]
    dc = result.get("delta_choice") or {}
    if dc:
        body.append("<h2>δ that protects everyone</h2>")
        body.append(f'<p class="note">{esc(dc.get("explanation", ""))}</p>')
    for name, x in (result.get("runs") or {}).items():
        body.append(f"<h2>Release of the {esc(name)} log</h2>")
        body.append(single_user_banner(x.get("single_user")))
        body.append(
            table(
                ["figure", "value"],
                [
                    [esc(k.replace("_", " ")), fmt(x.get(k))]
                    for k in (
                        "users",
                        "distinct_queries",
                        "queries_released",
                        "released_query_volume",
                        "epsilon",
                        "delta",
                    )
                    if x.get(k) is not None
                ],
                left=1,
                raw=True,
            )  # fmt: skip
        )
        if x.get("report"):
            body.append(f"<p>Utility report: <code>{esc(x['report'])}</code></p>")
    if result.get("dcurve"):
        body += dcurve_section(
            result["dcurve"], title="What a release keeps as a function of d (synthetic log)",
            plots=plots,
        )  # fmt: skip
    sub = "The main job: Korolova's Release-Data on a real sample and the d-curve of a "
    sub += "synthetic log of thesis-like size."
    return page("searchveil demo", esc(sub), body)


# -- comparison report ------------------------------------------------------------------------
def _compare_plot(kind: str, runs: list[tuple[str, dict[str, Any]]]) -> Figure:
    fig = _figure(figsize=(11, 4.4))
    axs = fig.subplots(1, 3)
    for i, (label, r) in enumerate(runs):
        d = (r.get("distribution") or {}).get(kind)
        if not d:
            continue
        col = COLORS[i % len(COLORS)]
        tj = d["top_j"]
        x, y = _finite(tj["j"], tj["coverage"])
        axs[0].plot(x, y, "o-", color=col, label=label, ms=3)
        x, y = _finite_pos(tj["j"], tj["avg_l1"])
        axs[1].plot(x, y, "o-", color=col, label=label, ms=3)
        x, y = _finite(tj["j"], tj["kl"])
        axs[2].plot(x, y, "o-", color=col, label=label, ms=3)
    for ax, t in zip(axs, ("top-j coverage", "avg L1", "KL divergence"), strict=True):
        ax.set_xscale("log")
        ax.set_title(f"{kind}: {t}")
        ax.set_xlabel("j")
        ax.grid(alpha=0.3)
    axs[1].set_yscale("log")
    handles, labels = axs[0].get_legend_handles_labels()
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=min(3, len(handles)), fontsize=9)
    return fig


def comparison_report(
    runs: list[tuple[str, dict[str, Any]]],
    *,
    input_info: dict[str, Any],
    epsilon: float,
    delta: float,
    failures: list[tuple[str, str]] | None = None,
) -> str:
    """The HTML of ``searchveil compare``: one row per mechanism/setting, metrics grouped into
    tables of a few columns each; settings that failed are listed with their reason."""
    body = [PRIVATE_BANNER]
    body.append(
        f'<div class="guarantee">Every DP setting below is solved to spend at most '
        f"<b>ε = {fmt(epsilon)}</b>, <b>δ = {fmt(delta)}</b> on the same input (the exact "
        "amount each spends is in the columns “ε spent” and “δ spent”). They are alternatives: "
        "publishing several would add up their budgets.</div>"
    )
    kinds: list[str] = []
    for _, r in runs:
        for k in r.get("distribution") or {}:
            if k not in kinds:
                kinds.append(k)
    # one row per setting, a few columns per table (settings as columns would make the page
    # as wide as the number of settings)
    body.append("<h2>Side by side</h2>")
    body.append(
        '<p class="sub">One row per setting; each table is one group of metrics. Settings '
        "that could not run are listed under the first table with the reason.</p>"
    )
    body.append("<h3>Settings and the privacy each spends</h3>")
    body.append(
        table(
            ["setting", "mechanism", "guarantee", "ε spent", "δ spent"],
            [
                [
                    setting_label(lab),
                    esc(r["release"]["mechanism"]),
                    esc(r["release"].get("notion")),
                    fmt(r["release"].get("epsilon")),
                    fmt(r["release"].get("delta")),
                ]
                for lab, r in runs
            ],
            left=3,
            raw=True,
        )
    )
    body.append(failed_list("Settings that could not run:", failures or []))
    for kind in kinds:
        rows: list[list[Any]] = []
        for lab, r in runs:
            d = (r.get("distribution") or {}).get(kind)
            row: list[Any] = [setting_label(lab)]
            for key, f in (
                ("released_distinct", fmt),
                ("share_distinct", pct),
                ("released_total", fmt),
                ("share_volume", pct),
                ("avg_count_difference", fmt),
            ):
                row.append(f(d[key]) if d else "—")
            for j in (10, 100):
                v = "—"
                if d and j in d["top_j"]["j"]:
                    v = pct(d["top_j"]["coverage"][d["top_j"]["j"].index(j)])
                row.append(v)
            rows.append(row)
        body.append(f"<h3>Released {esc(kind)}</h3>")
        body.append(
            table(
                [
                    "setting",
                    "distinct",
                    "% distinct",
                    "volume",
                    "% volume",
                    "avg count diff.",
                    "top-10 coverage",
                    "top-100 coverage",
                ],
                rows,
                raw=True,
            )  # fmt: skip
        )
    rows = []
    for lab, r in runs:
        row = [setting_label(lab)]
        c = r.get("caching") or {}
        v = "—"
        for b in c.get("budgets") or []:
            if abs(b["budget_fraction"] - 0.1) < 1e-12:
                hr, ho = b["hit_probability_release"], b["hit_probability_original"]
                v = f"{fmt(hr)} (orig. {fmt(ho)})"
        row.append(v)
        for key in ("precision", "recall", "ndcg", "coverage"):
            s = r.get("substitution") or {}
            v = "—"
            for b in s.get("by_j") or []:
                if b["j"] == 5:
                    v = pct(b[key]) if key == "coverage" else fmt(b[key])
            row.append(v)
        k = r.get("keywords") or {}
        parts = []
        for name, ss in (k.get("seed_sets") or {}).items():
            b = ss["by_threshold"][0]
            parts.append(f"{esc(name)} {b['released']}/{b['original']}")
        row.append("; ".join(parts) or "—")
        rows.append(row)
    body.append("<h3>Applications</h3>")
    body.append(
        table(
            [
                "setting",
                "caching: hit prob. at 10% budget",
                "substitution top-5: precision",
                "recall",
                "NDCG",
                "coverage",
                "keywords ≥ 0.5 (release / original)",
            ],
            rows,
            raw=True,
        )  # fmt: skip
    )
    body.append("<h2>Top-j coverage and precision</h2>")
    for kind in kinds:
        body.append(img(_compare_plot(kind, runs), f"{kind} comparison"))
    for label, r in runs:
        body.append(f"<h2>Details: {esc(label)}</h2>")
        body.append(guarantee_banner(r["release"]))
        body += evaluation_sections(r, plots=False)
    sub = (
        f"Input <code>{esc(input_info.get('file'))}</code> ({fmt(input_info.get('rows'))} rows, "
        f"{fmt(input_info.get('users'))} users); {len(runs)} settings."
    )
    return page("searchveil comparison report", sub, body)


# -- reproduction report ----------------------------------------------------------------------
def _series_plot(exp: dict[str, Any]) -> Figure | None:
    plot = exp.get("plot")
    if not plot:
        return None
    fig = _figure(figsize=(8, 3.8))
    ax = fig.subplots()
    for i, s in enumerate(plot["series"]):
        x, y = _finite(s["x"], s["y"])
        ax.plot(
            x,
            y,
            "o-" if not s.get("paper") else "s--",
            color=COLORS[i % len(COLORS)],
            label=s["label"],
            ms=4,
        )
    ax.set_xlabel(plot.get("xlabel", ""))
    ax.set_ylabel(plot.get("ylabel", ""))
    if plot.get("xlog"):
        ax.set_xscale("log")
    if plot.get("ylog"):
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(exp.get("title", ""))
    fig.tight_layout()
    return fig


def _repro_cell(x: Any) -> str:
    """Reproduction tables hold values already rounded to the paper's precision: show every
    significant digit (up to 6), never fewer."""
    if isinstance(x, float) and math.isfinite(x) and x != 0 and abs(x) < 1e-3:
        return f"{x:.4e}"
    if isinstance(x, float) and math.isfinite(x):
        return f"{x:,.6g}"
    return fmt(x)


def reproduction_report(experiments: list[dict[str, Any]]) -> str:
    """The HTML of ``searchveil reproduce``: each experiment has ``id``, ``title``,
    ``source``, ``headers``, ``rows``, ``status`` (``exact``/``trend``/``missing``), ``notes``,
    optionally ``failed`` [(run, reason)] (listed under the table) and ``plot``
    {series:[{label,x,y,paper?}], xlabel, ylabel, xlog, ylog}."""
    body = [
        '<p class="note">Formula tables are recomputed exactly and compared with the printed '
        "values; experiment tables are re-run on the shared AOL data, which is far smaller than "
        "the papers' logs, so only trends are comparable (see each note).</p>"
    ]
    idx = table(
        ["id", "what", "status"],
        [[esc(e["id"]), esc(e["title"]), esc(e.get("status", ""))] for e in experiments],
        left=3,
        raw=True,
    )
    body.append(idx)
    for e in experiments:
        body.append(f"<h2>{esc(e['id'])}: {esc(e['title'])}</h2>")
        body.append(f'<p class="sub">{esc(e.get("source", ""))}</p>')
        if e.get("status") == "missing":
            body.append(f'<p class="na">Not reproduced: {esc(e.get("notes", ""))}</p>')
            continue
        if e.get("headers"):
            rows = [[_repro_cell(c) for c in row] for row in e["rows"]]
            body.append(table(e["headers"], rows, left=1, raw=True))
        body.append(failed_list("Runs that failed (their cells show —):", e.get("failed") or []))
        for more in e.get("more_tables") or []:
            body.append(f'<p class="sub">{esc(more["title"])}</p>')
            rows = [[_repro_cell(c) for c in row] for row in more["rows"]]
            body.append(table(more["headers"], rows, left=1, raw=True))
        fig = _series_plot(e)
        if fig is not None:
            body.append(img(fig, e["title"]))
        if e.get("notes"):
            body.append(f'<p class="note">{esc(e["notes"])}</p>')
    return page("searchveil reproduction report", "Paper tables and trends beside ours.", body)
