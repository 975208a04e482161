"""What the histogram release commands (``release korolova|zealous|kanon``) print: the
``--json`` summary (:func:`summary`, private figures under ``private``) and its table
(:func:`human`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from searchveil.cli._common import (
    PRIVATE,
    guarantee_text,
    kv_table,
    out_console,
    print_release_table,
    private_block,
    release_head,
)


def summary(
    release: Any,
    out: Path,
    split: Any = None,
    provenance: Path | None = None,
    budget: dict[str, Any] | None = None,
) -> dict[str, Any]:
    led = release.ledger
    res: dict[str, Any] = {
        **release_head(out, provenance, led),
        "accounting": led.get("accounting"),
        "paper_accounting": led.get("paper_accounting"),
        "seeded": led["seeded"],
        "parameters": led["parameters"],
        "outputs": {k: v.height for k, v in release.tables.items()},
        "private": private_block(report=release.report),
    }
    if split is not None:
        res["split"] = split
    if budget is not None:
        res["budget"] = budget
    return res


def top(release: Any, name: str, n: int = 10) -> list[dict[str, Any]]:
    df = release.tables.get(name)
    return [] if df is None else df.head(n).to_dicts()


def human(r: dict[str, Any]) -> None:
    t = kv_table(f"{r['mechanism']} → {r['out']}")
    if r["epsilon"] is not None:
        t.add_row("guarantee", guarantee_text(r))
        t.add_row("ε (reported, exact accounting)", f"{r['epsilon']:.6g}")
        t.add_row("δ (reported, exact accounting)", f"{r['delta']:.4g}")
        pa = r.get("paper_accounting") or {}
        if pa:
            t.add_row("ε, δ (paper's formulas)", f"{pa['epsilon']:.6g}, {pa['delta']:.4g}")
    else:
        t.add_row("guarantee", guarantee_text(r))
    if "split" in r:
        t.add_row("ε split (weights)", str(r["split"]))
    report = r["private"]["report"]
    su = report.get("single_user")
    if su:
        t.add_row(
            "single-user items published (expected)" + PRIVATE,
            f"{su['expected_single_user_published']:.3g} of {su['single_user_items']:,} "
            + ("(exact; private figure: not in the release)" if su.get("exact")
               else "(upper bound; private figure: not in the release)"),
        )  # fmt: skip
        declared = su["delta_check"].get("users_bound_source", "").startswith("declared")
        t.add_row("δ < 1/U" + ("" if declared else " (U = the exact users: private)"),
                  "yes" if su["delta_check"]["ok"] else "NO — see warning")  # fmt: skip
    for k, v in report.items():
        if k in ("parameters", "mechanism", "notion", "epsilon", "delta"):
            continue
        if k in ("paper_epsilon", "paper_delta"):
            continue
        if isinstance(v, int | float | str):
            # how many rows a table has is public (the release shows it); the rest is not
            public = k in r["parameters"] or k == "engine_plan" or k.endswith("_released")
            mark = "" if public else PRIVATE
            t.add_row(k.replace("_", " ") + mark, f"{v:,}" if isinstance(v, int) else str(v))
    for k, v in report.get("parameters", {}).items():
        if v is not None:
            t.add_row(f"param {k}", str(v))
    for name, rows in r["outputs"].items():
        t.add_row(f"output {name}", f"{rows:,} rows")
    print_release_table(t, r)
    for name, rows in r.get("top", {}).items():
        if rows:
            from rich.table import Table  # rich only when a table is drawn (cli._common)

            tt = Table(title=f"top of {name}")
            for c in rows[0]:
                tt.add_column(c)
            for row in rows:
                tt.add_row(*[str(v) for v in row.values()])
            out_console.print(tt)
