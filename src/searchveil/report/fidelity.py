"""The fidelity section of the ``evaluate`` and ``compare`` reports: how far a same-schema
log's columns are from the original's (:mod:`searchveil.evaluate.fidelity`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from searchveil.report.html import COLORS, esc, figure, fmt, img, pct, setting_label, table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: the figures in report order: JSON key, label
LABELS = (
    ("hour_of_day", "hour of day of the rows"),
    ("click_rank", "click rank (ItemRank of click rows)"),
    ("session_lengths", "session lengths (queries per session)"),
    ("query_only_share", "share of query-only rows"),
    ("substitution_cooccurrence", "query substitution, co-occurrence pairs"),
    ("substitution_session", "query substitution, session pairs"),
)


def _value(f: dict[str, Any]) -> str:
    """The figure's number, or what it is not (e.g. "not in the release")."""
    if f.get("value") is None:
        return f'<span class="na">{esc(f.get("status"))}</span>'
    return fmt(f["value"])


def _sides(key: str, f: dict[str, Any]) -> str:
    """What the two logs hold, in a few words."""
    if f.get("value") is None:
        return esc(f.get("reason", ""))
    if key == "query_only_share":
        return f"original {pct(f['original'])}, release {pct(f['release'])}"
    if key == "session_lengths":
        return (
            f"mean {fmt(f['mean_original'])} vs {fmt(f['mean_release'])} queries; "
            f"W1 {fmt(f['wasserstein_1'])}"
        )
    if key.startswith("substitution"):
        return (
            f"coverage {pct(f['coverage'])}; release suggests for "
            f"{fmt(f['queries_with_release_substitutions'])} queries"
            + (f" ({esc(f['note'])})" if f.get("note") else "")
        )
    return ""


def _plot(fid: dict[str, Any]) -> Figure | None:
    """Original vs release: hour of day, click rank, session lengths (those measured)."""
    panels = [
        (k, t)
        for k, t in (
            ("hour_of_day", "rows by hour of day"),
            ("click_rank", "click rows by rank"),
            ("session_lengths", "sessions by queries"),
        )
        if (fid.get(k) or {}).get("value") is not None
    ]
    if not panels:
        return None
    fig = figure(figsize=(3.6 * len(panels), 3.2))
    axs = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (k, title) in zip(axs, panels, strict=True):
        f = fid[k]
        if k == "hour_of_day":
            xs, o, r = list(range(24)), f["original"], f["release"]
            labels = [str(x) for x in xs]
        else:
            labels = [str(p[0]) for p in f["original"]]
            xs, o, r = (
                list(range(len(labels))),
                [p[1] for p in f["original"]],
                [p[1] for p in f["release"]],
            )
        ax.bar([x - 0.2 for x in xs], o, width=0.4, color=COLORS[0], label="original")
        ax.bar([x + 0.2 for x in xs], r, width=0.4, color=COLORS[1], label="release")
        step = 4 if k == "hour_of_day" else 1
        ax.set_xticks(xs[::step], labels[::step], fontsize=8)
        ax.set_title(f"{title} (TV {fmt(f['value'])})")
        ax.set_ylabel("share")
    axs[0].legend()
    fig.tight_layout()
    return fig


def fidelity_section(r: dict[str, Any], *, plots: bool = True) -> list[str]:
    """The fidelity table (and plot) of one evaluation; nothing for a release that is not a
    same-schema log."""
    fid = r.get("fidelity")
    if not fid or not fid.get("applicable"):
        return []
    body = [
        "<h2>Fidelity of the same-schema log (issue 42)</h2>",
        '<p class="note">Each figure computes one property of the rows the same way on the '
        "original and on the released log (columns: "
        f"{esc(', '.join(fid.get('release_columns') or []))}). Distances: 0 = the same; MAP: "
        "1 = the release suggests the original's substitutions. A column the release does not "
        "have is said so, not scored.</p>",
    ]
    rows = [
        [esc(label), esc(fid[k]["distance"]), _value(fid[k]), _sides(k, fid[k])]
        for k, label in LABELS
        if k in fid
    ]
    body.append(table(["figure", "measure", "value", "the two logs"], rows, left=2, raw=True))
    defs = "".join(
        f"<li><b>{esc(label)}</b>: {esc(fid[k]['definition'])}</li>"
        for k, label in LABELS
        if k in fid
    )
    body.append(f'<ul class="note">{defs}</ul>')
    if plots:
        fig = _plot(fid)
        if fig is not None:
            body.append(img(fig, "fidelity: original vs release"))
    return body


def fidelity_table(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """``compare``: one row per setting whose release is a same-schema log; nothing if none."""
    rows = []
    for lab, r in runs:
        fid = r.get("fidelity") or {}
        if fid.get("applicable"):
            rows.append([setting_label(lab), *(_value(fid[k]) for k, _ in LABELS if k in fid)])
    if not rows:
        return []
    heads = ["hour of day (TV)", "click rank (TV)", "session lengths (TV)",
             "query-only share (diff.)", "MAP@5 co-occur.", "MAP@5 sessions"]  # fmt: skip
    return ["<h3>Fidelity of the same-schema logs</h3>", table(["setting", *heads], rows, raw=True)]
