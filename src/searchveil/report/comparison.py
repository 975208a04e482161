"""The HTML of ``searchveil compare``: several releases of one input side by side."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from searchveil.report.html import (
    COLORS,
    esc,
    failed_list,
    figure,
    finite,
    finite_pos,
    fmt,
    img,
    page,
    pct,
    setting_label,
    table,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from searchveil.io.ledger import differentially_private, says_not_dp
from searchveil.report.evaluation import PRIVATE_BANNER, evaluation_sections, guarantee_banner
from searchveil.report.fidelity import fidelity_table


def _compare_plot(kind: str, runs: list[tuple[str, dict[str, Any]]]) -> Figure:
    fig = figure(figsize=(11, 4.4))
    axs = fig.subplots(1, 3)
    for i, (label, r) in enumerate(runs):
        d = (r.get("distribution") or {}).get(kind)
        if not d:
            continue
        col = COLORS[i % len(COLORS)]
        tj = d["top_j"]
        x, y = finite(tj["j"], tj["coverage"])
        axs[0].plot(x, y, "o-", color=col, label=label, ms=3)
        x, y = finite_pos(tj["j"], tj["avg_l1"])
        axs[1].plot(x, y, "o-", color=col, label=label, ms=3)
        x, y = finite(tj["j"], tj["kl"])
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


def _released_tables(kinds: list[str], runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Per item kind: each setting's released distinct items, volume and top-j coverage."""
    body: list[str] = []
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
    return body


def _applications_table(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """Each setting's caching, substitution and keyword figures in one table."""
    body: list[str] = []
    rows: list[list[Any]] = []
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
    return body


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
                    _guarantee_cell(r["release"]),
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
    body += _released_tables(kinds, runs)
    body += _applications_table(runs)
    body += fidelity_table(runs)
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


def _guarantee_cell(release: dict[str, Any]) -> str:
    """The notion of a setting, in the warning style when it is not differentially private."""
    notion = str(release.get("notion") or "")
    if differentially_private(release):
        return esc(notion)
    label = notion if says_not_dp(notion) else f"NOT differentially private: {notion}"
    return f'<span class="warn-text">{esc(label)}</span>'
