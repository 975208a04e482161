"""``searchveil synth --like LOG --epsilon E --delta D --max-users U``: a differentially
private synthetic log — every column from a DP statistic of LOG (the statistics of ``release
ump``'s same-schema log, :mod:`searchveil.release.ump.schema`), laid out at the size asked for
(``--users``, ``--rows``; by default the DP estimates of the users and rows of LOG: the noisy
totals the statistics already draw) by the one layout (:mod:`searchveil.synth.layout`). Written
as a release: a directory with the log, the statistics and the public ledger, the private
provenance record beside it (docs/synth.md, "A synthetic log with a guarantee"); charged to
``--budget`` like the release commands: admitted before LOG is read, the charge standing once
it is (docs/privacy/budget.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from searchveil.cli._common import (
    PRIVATE,
    budget_result,
    charged,
    emit,
    kv_table,
    print_release_table,
    private_block,
)
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.ledger import check_release_dir
from searchveil.io.paths import input_list
from searchveil.io.readers import ReaderOptions, read_log
from searchveil.release import write_release
from searchveil.release.ump.e2e import E2EParams, release_ump_e2e
from searchveil.rng import make_rng
from searchveil.synth.layout import Columns

__all__ = ["dp_synth"]


def _human(r: dict[str, Any]) -> None:
    t = kv_table(f"searchveil synth (differentially private) → {r['out']}")
    t.add_row("guarantee", r["notion"])
    t.add_row("ε, δ (end to end)", f"{r['epsilon']:.6g}, {r['delta']:.4g}")
    asked = [("users", r["users_asked"]), ("rows", r["rows_asked"])]
    t.add_row("size", ", ".join(f"{k}: {'the DP estimate' if v is None else f'{v:,} asked'}"
                                for k, v in asked))  # fmt: skip
    g = r["generated"]
    t.add_row("synthetic users / rows written", f"{g['synthetic_users']:,} / {g['rows']:,}")
    for name, rows in r["outputs"].items():
        t.add_row(f"table {name}", f"{rows:,} rows")
    m = r["private"]["metrics"]
    t.add_row("input rows" + PRIVATE, f"{m['input_rows']:,}")
    print_release_table(t, r)


def dp_synth(
    *,
    like: Path,
    out: Path,
    epsilon: float,
    delta: float,
    max_users: int | None,
    users: int | None,
    rows: int | None,
    seed: int | None,
    overwrite: bool,
    out_format: str,
    budget: Path | None,
    reader: ReaderOptions,
    json_out: bool,
    step: Any,
) -> None:
    """The DP synth run (module docstring): the budget, the release, the written directory.
    ``users``/``rows`` None: the DP estimates."""
    fmt = {"auto": "tsv", "tsv": "tsv", "parquet": "parquet"}.get(out_format)
    if fmt is None:
        raise InvalidParameterError(
            "--output-format", out_format, "auto | tsv | parquet with --epsilon (a release)"
        )
    params = E2EParams.from_budget(epsilon=epsilon, delta=delta, max_users=max_users)
    # public checks first (before --budget admits the charge): the input exists, and the
    # release directory would be accepted by the writer (io/paths.py)
    if not like.exists():
        raise InputFormatError(
            str(like), "no such file or directory (--like): nothing was read or charged"
        )
    check_release_dir(out, fmt=fmt, overwrite=overwrite, inputs=input_list(like=like))
    rng = make_rng(seed)
    columns = Columns.of_input(reader.columns, has_header=reader.has_header)
    # admission is the last public step: from here on the charge stands (docs/privacy/budget.md)
    with charged(budget, params.cost(), "synth --epsilon", out) as ch:
        done = step(f"reading {like.name}")
        log = read_log(like, **reader.kwargs())
        done()
        rel = release_ump_e2e(log, params, rng=rng, progress=step, users=users, rows=rows,
                              columns=columns)  # fmt: skip
        done = step(f"writing {out}")
        led = write_release(rel, out, fmt=fmt, overwrite=overwrite)
        ch.record_written(out)
        done()
    res = {
        "out": str(out), "provenance": f"{out}.private.json", "differentially_private": True,
        "mechanism": led["mechanism"], "notion": led["notion"], "epsilon": led["epsilon"],
        "delta": led["delta"], "split": led["guarantee"]["split"], "seeded": led["seeded"],
        "users_asked": users, "rows_asked": rows,
        "generated": {k: rel.report["schema"]["generator"][k] for k in ("synthetic_users",
                                                                          "rows")},
        "outputs": {k: v.height for k, v in rel.tables.items()},
        "budget": budget_result(budget, ch),
        "private": private_block(metrics=rel.report.get("metrics")),
    }  # fmt: skip
    emit(res, json_out, _human)
