"""The HTML of ``searchveil reproduce``: paper tables and trends beside ours."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from searchveil.report.html import (
    COLORS,
    esc,
    failed_list,
    figure,
    finite,
    fmt,
    img,
    page,
    table,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _series_plot(exp: dict[str, Any]) -> Figure | None:
    plot = exp.get("plot")
    if not plot:
        return None
    fig = figure(figsize=(8, 3.8))
    ax = fig.subplots()
    for i, s in enumerate(plot["series"]):
        x, y = finite(s["x"], s["y"])
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
