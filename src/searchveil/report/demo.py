"""The HTML of ``searchveil demo``: the choice of δ, each run's single-user exposure, and the
d-curve of the synthetic log (thesis Fig. 4.2)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from searchveil.report.html import (
    COLORS,
    esc,
    figure,
    fmt,
    img,
    page,
    pct,
    table,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from searchveil.mechanisms.selection import REGISTRY
from searchveil.report.evaluation import PRIVATE_BANNER, single_user_banner

_LABELS = {c.FACTS.name: c.FACTS.label for c in REGISTRY}
#: the curves of the figure, in their colours' order (Release-Data, Gaussian and Laplace first,
#: as the figure has always had them, then the other strategies in the registry's order)
DCURVE_LABELS = {"korolova": "Release-Data (Korolova)"} | {
    m: _LABELS[m] for m in ("gaussian", "laplace", *_LABELS)
}


def dcurvefigure(result: dict[str, Any]) -> Figure:
    """The thesis' Fig. 4.2 for a :func:`searchveil.evaluate.dcurve.dcurve` result: % of distinct
    queries and % of query volume released (expected) against d, one line per mechanism."""
    fig = figure(figsize=(10, 3.8))
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
            "log only, and the releases take d from public information only — a declared d "
            "on the bundled sample, each strategy's data-independent default otherwise "
            "(docs/privacy/selection.md).</p>"
        )
    if plots:
        body.append(img(dcurvefigure(result), "d-curve"))
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
