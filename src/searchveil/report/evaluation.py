"""The HTML of ``searchveil evaluate``: one release against its original log — the guarantee
and δ banners, the metric sections (shared with :mod:`searchveil.report.comparison`) and the
release's ledger."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from searchveil.io.ledger import differentially_private, says_not_dp
from searchveil.report.fidelity import fidelity_section
from searchveil.report.html import (
    COLORS,
    esc,
    figure,
    finite,
    finite_pos,
    fmt,
    img,
    na,
    page,
    pct,
    table,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure


# -- guarantee banner -------------------------------------------------------------------------
def split_table(split: Any) -> str:
    """The ε/δ split of a guarantee as a small table (part, ε, δ), or '' when there is none."""
    if not isinstance(split, dict) or not split:
        return ""
    rows = [
        [esc(str(name).replace("_", " ")), fmt(p.get("epsilon")), fmt(p.get("delta")),
         esc(p.get("note") or "")]
        for name, p in split.items()
        if isinstance(p, dict)
    ]  # fmt: skip
    notes = any(r[3] for r in rows)
    head = ["part", "ε", "δ"] + (["note"] if notes else [])
    return table(head, [r if notes else r[:3] for r in rows], raw=True)


def guarantee_banner(release: dict[str, Any]) -> str:
    """The guarantee of a release, on top of its report: green when it is differentially
    private (ε, δ, what it covers and the ε/δ split as a small table), in the warning style
    when it is not — a release that protects nothing, or a conditional one whose (ε, δ)
    covers only the sampling given counts computed from the exact data (issue 39)."""
    eps, delta = release.get("epsilon"), release.get("delta")
    notion = release.get("notion") or "guarantee"
    dp = differentially_private(release)
    parts = [f"<b>{esc(release.get('mechanism', 'release'))}</b> — {esc(notion)}"]
    if dp and eps is not None:
        parts.append(f"ε = <b>{fmt(eps)}</b>")
    if dp and delta is not None:
        parts.append(f"δ = <b>{fmt(delta)}</b>")
    g = release.get("guarantee")
    split: Any = release.get("split") or {}
    cond: Any = None
    if isinstance(g, str):
        parts.append(esc(g))
    elif isinstance(g, dict):
        scalars = {
            k: v
            for k, v in g.items()
            if isinstance(v, str | int | float | bool) and k != "differentially_private"
        }
        parts.append(esc(", ".join(f"{k.replace('_', ' ')} = {v}" for k, v in scalars.items())))
        split = split or g.get("split") or {}
        cond = g.get("conditional")
    if not dp:
        if not says_not_dp(notion):
            parts.insert(0, "<b>NOT differentially private</b>")
        if isinstance(cond, dict):
            parts.append(
                f"(ε, δ) = ({fmt(cond.get('epsilon'))}, {fmt(cond.get('delta'))}) covers "
                f"{esc(cond.get('covers', 'only the sampling given the counts'))} — not the "
                "counts, which come from the exact data"
            )
            split = cond.get("split") or {}
        else:
            parts.append("no differential-privacy guarantee (ε, δ not defined)")
    cls = "guarantee" if dp else "warn"
    out = f'<div class="{cls}">{" · ".join(p for p in parts if p)}{split_table(split)}</div>'
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
    fig = figure(figsize=(9.5, 6.6))
    axs = fig.subplots(2, 2)
    tj = d["top_j"]
    js = tj["j"]
    ax = axs[0][0]
    x, y = finite(js, tj["coverage"])
    ax.plot(x, y, "o-", color=COLORS[0])
    ax.set_xscale("log")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("top-j coverage (share of original top-j released)")
    ax.set_xlabel("j")
    ax = axs[0][1]
    x, y = finite_pos(js, tj["avg_l1"])
    ax.plot(x, y, "o-", color=COLORS[1], label="avg L1")
    ax.set_xscale("log")
    if y:
        ax.set_yscale("log")
    ax.set_title("top-j precision: average L1 of relative frequencies")
    ax.set_xlabel("j")
    ax = axs[1][0]
    x, y = finite(js, tj["kl"])
    ax.plot(x, y, "o-", color=COLORS[3])
    ax.set_xscale("log")
    ax.set_title("top-j precision: KL(original ‖ release), +0.5 smoothing")
    ax.set_xlabel("j")
    ax = axs[1][1]
    cd = d["count_distribution"]
    for lab, key, col in (("original", "original", COLORS[0]), ("release", "released", COLORS[1])):
        pts = cd.get(key) or []
        x, y = finite_pos([p[0] for p in pts], [p[1] for p in pts])
        if x:
            ax.scatter(x, y, s=9, color=col, label=lab, alpha=0.7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title("count distribution (log-log)")
    ax.set_xlabel("count")
    ax.set_ylabel("items with that count")
    ax.legend()
    fig.suptitle(f"{kind}", fontsize=14)
    # fixed margins: tight_layout measured every log-scale tick label of the four axes (0.4 s
    # of CPU a figure, three figures in each report); the saved PNG is still cropped to its
    # content (bbox_inches="tight" in fig_to_data_uri), so nothing is cut off
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.08, top=0.9, wspace=0.25, hspace=0.42)
    return fig


def _caching_plot(c: dict[str, Any]) -> Figure:
    fig = figure(figsize=(7, 3.8))
    ax = fig.subplots()
    b = c["budgets"]
    xs = [r["budget_fraction"] for r in b]
    for key, lab, col in (
        ("hit_probability_original", "cache from original log", COLORS[0]),
        ("hit_probability_release", "cache from release", COLORS[1]),
    ):
        x, y = finite(xs, [r[key] for r in b])
        ax.plot(x, y, "o-", color=col, label=lab)
    ax.set_xscale("log")
    ax.set_xlabel("memory budget (fraction of all original postings)")
    ax.set_ylabel("hit probability on original stream")
    ax.set_ylim(0, 1)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _distribution_section(r: dict[str, Any], *, plots: bool) -> list[str]:
    """Released items: counts, shares and top-j coverage/precision per item kind."""
    body: list[str] = []
    dist = r.get("distribution") or {}
    body.append("<h2>Released items (Götz §6–7.1, Korolova §4.6.1)</h2>")
    if dist:
        rows = [
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
            for kind, d in dist.items()
        ]
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
    return body


def _open_section(
    r: dict[str, Any], key: str, heading: str
) -> tuple[list[str], dict[str, Any] | None]:
    """A section's heading and the metric's figures; None (the reason in the body instead)
    when the metric does not apply to the release."""
    s = r.get(key)
    msg = na(s)
    if msg or s is None:
        return [heading, msg or ""], None
    return [heading], s


def _caching_section(r: dict[str, Any], *, plots: bool) -> list[str]:
    """Index caching hit probability, original vs release cache."""
    body, c = _open_section(r, "caching", "<h2>Index caching (Götz §7.2)</h2>")
    if c is not None:
        body.append(f'<p class="note"><b>Proxy:</b> {esc(c["proxy_description"])}.</p>')
        numbers = (
            "budget_postings",
            "hit_probability_original",
            "hit_probability_release",
            "cached_original",
            "cached_release",
        )
        rows = [
            [pct(b["budget_fraction"]), *(fmt(b[k]) for k in numbers), pct(b["cache_overlap"])]
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
    return body


def _substitution_section(r: dict[str, Any]) -> list[str]:
    """Query substitution quality at each top-j."""
    body, s = _open_section(
        r, "substitution", "<h2>Query substitution (Götz §7.3, Jones et al. 2006)</h2>"
    )
    if s is not None:
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
    return body


def _keywords_section(r: dict[str, Any]) -> list[str]:
    """Keyword generation by random walk from seed domains."""
    body, k = _open_section(
        r, "keywords", "<h2>Keyword generation (Korolova §4.6.2.2, Fuxman et al. 2008)</h2>"
    )
    if k is not None:
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
    return body


def _fears_section(r: dict[str, Any]) -> list[str]:
    """The “fear of …” ranking, original beside release."""
    body, f = _open_section(r, "fears", "<h2>“Fear of …” ranking (Korolova §4.6.2.1)</h2>")
    if f is not None:
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
    return body


def _ump_section(r: dict[str, Any]) -> list[str]:
    """The same-schema UMP metrics, when they apply."""
    body: list[str] = []
    u = r.get("ump")
    if u and u.get("applicable"):
        body.append("<h2>Same-schema utility (Hong et al., UMP metrics)</h2>")
        rows = [[esc(kk), fmt(vv)] for kk, vv in u.items() if not isinstance(vv, dict | list)]
        body.append(table(["metric", "value"], rows, raw=True))
    return body


def evaluation_sections(r: dict[str, Any], *, plots: bool = True) -> list[str]:
    """The metric sections of one evaluation result (shared by evaluate and compare)."""
    return [
        *_distribution_section(r, plots=plots),
        *_caching_section(r, plots=plots),
        *_substitution_section(r),
        *_keywords_section(r),
        *_fears_section(r),
        *_ump_section(r),
        *fidelity_section(r, plots=plots),
    ]


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


def _budget_section(b: dict[str, Any] | None) -> list[str]:
    """The dataset's budget (``evaluate --budget FILE``): what this release was charged, what
    all releases of the dataset spent and what is left (public facts, from the budget file)."""
    if not b:
        return []
    c = b["charge"]
    rows = [
        ["this release", esc(c["what"]), fmt(c["epsilon"]), fmt(c["delta"])],
        ["dataset total", esc(b["relation"]), fmt(b["total"]["epsilon"]), fmt(b["total"]["delta"])],
        ["spent (committed)", f"{b['charges']} charges", fmt(b["spent"]["epsilon"]),
         fmt(b["spent"]["delta"])],
        ["pending", "", fmt(b["pending"]["epsilon"]), fmt(b["pending"]["delta"])],
        ["left", "", fmt(b["left"]["epsilon"]), fmt(b["left"]["delta"])],
    ]  # fmt: skip
    return [
        "<h2>Dataset budget</h2>",
        f"<p>From <code>{esc(b['file'])}</code> (sequential composition: ε and δ add over the "
        "releases of the dataset; docs/privacy/budget.md).</p>",
        table(["", "", "ε", "δ"], rows, left=2, raw=True),
    ]


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
    body += _budget_section(result.get("budget"))
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
