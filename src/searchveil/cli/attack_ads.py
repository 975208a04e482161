"""``searchveil attack ads``: the ad-targeting inference attacks of Korolova's thesis §2.2.3-2.2.6
run against a simulated microtargeting platform under four policies, with an HTML report
(house style) and the DP policy's privacy ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from searchveil.attacks.ads import ads_sections, run_ads_experiment
from searchveil.cli._common import (
    SEEDED_NOTE,
    JsonOpt,
    ProvenanceOpt,
    ReplaceOpt,
    SeedOpt,
    check_private_files,
    emit,
    ledger_beside,
    out_console,
    progress,
)
from searchveil.cli.options import command
from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import (
    build_provenance,
    check_ledger_file,
    provenance_path,
    write_ledger_file,
)
from searchveil.io.paths import LEDGER_JSON, write_private_json
from searchveil.report.html import page, write_report
from searchveil.rng import make_rng

__all__ = ["ads", "parse_epsilons", "human_ads"]


def parse_epsilons(text: str | None) -> list[float]:
    """``"0.5,1,2"`` → ``[0.5, 1.0, 2.0]``; ε has no default."""
    if text is None or not text.strip():
        raise InvalidParameterError(
            "--epsilon", text, "a comma-separated list of advertiser budgets ε > 0 (no default)"
        )
    out = []
    for part in text.split(","):
        try:
            v = float(part)
        except ValueError:
            raise InvalidParameterError("--epsilon", text, "numbers > 0, e.g. 0.5,1,2") from None
        if not v > 0 or v == float("inf"):
            raise InvalidParameterError("--epsilon", text, "numbers > 0, e.g. 0.5,1,2")
        out.append(v)
    return out


def _print_by_attack(
    title: str, figures: tuple[str, ...], rows: list[dict[str, Any]], cells: Any
) -> None:
    """A table of one row per policy and attack, with the columns ``figures``
    (``cells(row)``)."""
    t = Table(title=title)
    for c in ("policy", "attack"):
        t.add_column(c, justify="left")
    for c in figures:
        t.add_column(c, justify="right")
    for row in rows:
        t.add_row(row["policy"], row["attack"], *cells(row))
    out_console.print(t)


def _blueprint_cells(b: dict[str, Any]) -> list[str]:
    return [
        f"{b['success_rate']:.1%}",
        f"{b['wrong_rate']:.1%}",
        f"{b['inconclusive'] / b['targets']:.1%}",
        f"{b['mean_campaigns']:.2f}",
        f"{b['mean_fake_accounts']:.0f}",
    ]


def _game_cells(x: dict[str, Any]) -> list[str]:
    return [
        f"{x['accuracy']:.1%}",
        f"{x['ci95_low']:.1%}–{x['ci95_high']:.1%}",
        "—" if x["epsilon"] is None else f"{x['epsilon']:g}",
        "—" if x["bound"] is None else f"{x['bound']:.1%}",
    ]


def human_ads(r: dict[str, Any]) -> None:
    _print_by_attack(
        f"Ad-targeting inference — {r['population']['profiles']:,} profiles",
        ("success", "wrong", "inconclusive", "campaigns", "fakes"),
        r["blueprint"],
        _blueprint_cells,
    )
    _print_by_attack(
        "Binary game (fair coin on the target's hidden bit)",
        ("accuracy", "95% CI", "ε", "bound"),
        r["binary_game"],
        _game_cells,
    )
    if r["seeded"]:
        out_console.print(f"randomness: {SEEDED_NOTE}")
    for k in ("report", "ledger", "provenance"):
        if r.get(k):
            out_console.print(f"{k}: {r[k]}")


AdsEpsilonOpt = Annotated[
    str | None,
    typer.Option(
        "--epsilon",
        help="advertiser budgets ε of the DP policy (d), comma-separated (no default)",
    ),
]
AdsReportOpt = Annotated[Path | None, typer.Option("--report", help="write the HTML report here")]
AdsLedgerOpt = Annotated[
    Path | None,
    typer.Option(
        "--ledger",
        help="write the DP policy's privacy ledgers (JSON) here "
        "(default with --report: REPORT.ledger.json)",
    ),
]
AdsPopulationOpt = Annotated[
    int, typer.Option("--population", help="synthetic profiles (≥ 10^6 realistic)")
]
AdsTargetsOpt = Annotated[int, typer.Option("--targets", help="random targets per attack")]
AdsThresholdOpt = Annotated[
    int, typer.Option("--threshold", help="minimum Estimated Reach of policy (b)")
]
AdsRoundsOpt = Annotated[
    int, typer.Option("--rounds", help="campaign periods an attacker tries, (a)-(c)")
]
AdsDpReportsOpt = Annotated[
    int, typer.Option("--dp-reports", help="reports per advertiser budget under (d)")
]


@command
def ads(
    epsilon: AdsEpsilonOpt = None,
    report: AdsReportOpt = None,
    ledger: AdsLedgerOpt = None,
    population: AdsPopulationOpt = 1_000_000,
    targets: AdsTargetsOpt = 200,
    threshold: AdsThresholdOpt = 20,
    rounds: AdsRoundsOpt = 3,
    dp_reports: AdsDpReportsOpt = 8,
    provenance: ProvenanceOpt = None,
    seed: SeedOpt = None,
    overwrite: ReplaceOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Ad-targeting inference attacks against four platform policies (thesis ch. 2).

    Korolova thesis §2.2.3-2.2.6: Inference from Impressions / from Clicks (with the
    fake-account bypass) against (a) 2010, (b) min reach, (c) public-only matching and
    (d) DP reports with a per-advertiser budget."""
    eps = parse_epsilons(epsilon)
    led_path = ledger_beside(report, ledger)  # every run with an output gets a ledger
    prov_path = provenance_path(led_path, provenance, option="ledger") if led_path else None
    check_private_files({"report": report}, overwrite=overwrite)
    if led_path is not None and prov_path is not None:
        check_ledger_file(led_path, prov_path, overwrite=overwrite)
    rng = make_rng(seed)
    with progress(not json_out) as step:
        state: dict[str, Any] = {}

        def on_step(desc: str) -> None:
            if "done" in state:
                state["done"]()
            state["done"] = step(desc)

        result = run_ads_experiment(
            epsilons=eps, rng=rng, population=population, targets=targets,
            threshold=threshold, rounds=rounds, dp_reports=dp_reports, on_step=on_step,
        )  # fmt: skip
        if "done" in state:
            state["done"]()
    _write_outputs(result, report, led_path, provenance, overwrite)
    emit(result, json_out, human_ads)


def _write_outputs(
    result: dict[str, Any],
    report: Path | None,
    led: Path | None,
    provenance: Path | None,
    overwrite: bool,
) -> None:
    """Write the HTML report, the DP policy's public ledgers and the private provenance
    record (each only when asked for, each under the write rule), naming them in
    ``result``."""
    if report is not None:
        text = page(
            "Ad-targeting inference attacks",
            "Korolova 2012 thesis, chapter 2 (§2.2.3–2.2.6), on a simulated platform",
            ads_sections(result),
        )
        write_report(report, text, overwrite=overwrite)
        result["report"] = str(report)
    provs = result.pop("provenances", {})
    if led is not None:
        # the public ledgers of the DP policy; the population they ran on is private
        result["ledger"] = str(led)
        if provs:
            first = next(iter(provs.values()))
            rec = build_provenance(
                inputs=first["inputs"],
                figures={name: p["figures"] for name, p in provs.items()},
            )
            prov = provenance_path(led, provenance, option="ledger")
            write_ledger_file(led, result["ledgers"], prov, rec, overwrite=overwrite)
            result["provenance"] = str(prov)
        else:
            write_private_json(led, result["ledgers"], option="ledger", overwrite=overwrite,
                               owned=LEDGER_JSON, private=False)  # fmt: skip
