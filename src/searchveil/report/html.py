"""The house style of searchveil's self-contained HTML reports: one file, inline CSS, plots
embedded as base64 PNG (``<img src="data:image/png;base64,…">``), no scripts, no external links
or assets, so the file opens offline in any browser and can be attached to an e-mail.

The kit — :func:`page`, :func:`table`, :func:`img`, :func:`esc`, :func:`fmt`, :func:`pct`,
:func:`failed_list`, :func:`write_report`, the CSS — needs nothing above ``io``, so every family
builds its report with it. The reports themselves live beside it: :mod:`.evaluation`
(``searchveil evaluate``), :mod:`.comparison` (``compare``), :mod:`.reproduction`
(``reproduce``) and :mod:`.demo` (``demo``).

Plots use matplotlib's object API (``Figure``, no pyplot global state, Agg canvas). Every report
is a private file (it is computed from the exact input): :func:`write_report` writes it
owner-only (0600) through a staging directory and a rename, and refuses a path inside a release
directory or on an input (:func:`searchveil.io.paths.write_private_text`).
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from searchveil.io.paths import REPORT, REPORT_MARK, InputPaths, write_private_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "CSS",
    "COLORS",
    "esc",
    "fmt",
    "pct",
    "table",
    "setting_label",
    "failed_list",
    "figure",
    "fig_to_data_uri",
    "img",
    "finite",
    "finite_pos",
    "na",
    "page",
    "write_report",
    "REPORT_MARK",
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
font-size:16px}.guarantee table,.warn table{color:#1d2330;font-size:14px;margin:8px 0 2px}
.warn-text{color:#842029;font-weight:600}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:8px 12px;margin:10px 0;
font-size:14px}
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


def figure(**kw: Any) -> Figure:
    """A new matplotlib ``Figure`` (matplotlib is imported when the first plot is drawn:
    importing it at module top slows every CLI command's start-up)."""
    from matplotlib.figure import Figure

    return Figure(**kw)


def fig_to_data_uri(fig: Figure) -> str:
    """PNG of a matplotlib figure as a ``data:`` URI."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # see figure

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


def finite_pos(xs: Sequence[Any], ys: Sequence[Any]) -> tuple[list[float], list[float]]:
    px, py = [], []
    for x, y in zip(xs, ys, strict=False):
        if isinstance(x, int | float) and isinstance(y, int | float) and x > 0 and y > 0:
            px.append(float(x))
            py.append(float(y))
    return px, py


def finite(xs: Sequence[Any], ys: Sequence[Any]) -> tuple[list[float], list[float]]:
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


def write_report(
    path: str | Path, text: str, *, inputs: InputPaths = (), overwrite: bool = False
) -> None:
    """Write a report: private — owner-only, never inside a release directory nor on one of
    the run's ``inputs`` (:func:`searchveil.io.paths.check_private_path`); an existing file is
    replaced only with ``overwrite`` and only if it is a searchveil report (its footer,
    :data:`REPORT_MARK`)."""
    write_private_text(path, text, option="report", inputs=inputs, overwrite=overwrite,
                       owned=REPORT)  # fmt: skip
