"""CLI and release files of ``searchveil tabular`` (default tests use the 300-row Adult slice
in tests/data/tabular; the full Adult run uses the ``adult_dir`` fixture)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from searchveil.cli import app
from searchveil.tabular.api import load
from searchveil.tabular.hierarchy import read_table
from searchveil.tabular.lattice import class_sizes_at, distinct_records

DATA = Path(__file__).parent / "data" / "tabular"
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, ["tabular", *args])


def check_theta0(table_path: Path, hier: Path, out: Path, theta0: float) -> int:
    """Every released row generalizes at least θ₀·|D| input records."""
    t = load(table_path, hier)
    rel = read_table(out / "table.tsv")
    prov = json.loads(out.with_name(out.name + ".private.json").read_text())
    d = distinct_records(t.leaves)
    n_in = t.n
    # level of each released value, recovered from the labels
    checked = 0
    for row in rel.iter_rows(named=True):
        level = []
        for h in t.hierarchies:
            v = row[h.attribute]
            level.append(next(lv for lv in range(h.height + 1) if v in h.labels[lv]))
        sizes = class_sizes_at(d.leaves, d.count, t.hierarchies, np.array(level))
        gen = [
            [h.labels[lv][c] for c in h.codes[d.leaves[:, i], lv]]
            for i, (h, lv) in enumerate(zip(t.hierarchies, level, strict=True))
        ]
        match = [
            j
            for j in range(d.m)
            if all(gen[i][j] == row[h.attribute] for i, h in enumerate(t.hierarchies))
        ]
        assert match, row
        assert sizes[match[0]] >= theta0 * n_in, (row, sizes[match[0]])
        checked += 1
        if checked >= 50:
            break
    assert prov["report"]["k_used"] >= theta0 * n_in
    return checked


def test_stats_json() -> None:
    r = invoke("stats", str(DATA / "adult.csv"), "--hierarchies", str(DATA), "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["rows"] == 300 and s["lattice_size"] == 6480
    assert [q["attribute"] for q in s["quasi_identifiers"]][0] == "sex"
    assert all(len(q["sha256"]) == 64 for q in s["quasi_identifiers"])


def test_fouad2014_release_writes_table_and_ledger(tmp_path: Path) -> None:
    out = tmp_path / "rel"
    r = invoke(
        "anonymize",
        str(DATA / "adult.csv"),
        "--hierarchies",
        str(DATA),
        "--model",
        "fouad2014",
        "--epsilon",
        "3",
        "--delta",
        "1e-3",
        "--beta",
        "0.5",
        "--theta0",
        "0.05",
        "--theta1",
        "0.06",
        "--lambda",
        "1",
        "--seed",
        "4",
        "--out",
        str(out),
        "--json",
    )
    assert r.exit_code == 0, r.output
    led = json.loads((out / "ledger.json").read_text())
    assert led["mechanism"].startswith("fouad2014-dp-sampler") and led["seeded"] is True
    assert led["epsilon"] == 3 and led["delta"] == 1e-3
    p = {**led["parameters"], **led["noisy"]}  # values derived from n̂ are noisy
    for key in ("beta", "theta0", "t", "k", "eps_anon", "eps_em", "eps_count", "delta_total"):
        assert key in p
    assert p["delta_total"] <= 1e-3
    prov = json.loads((tmp_path / "rel.private.json").read_text())
    assert prov["report"]["k_used"] >= 0.05 * 300
    assert p["eps_anon"] + p["eps_em"] + p["eps_count"] == pytest.approx(3.0)
    hier = [x for x in led["public_inputs"] if x["role"] == "generalization hierarchy"]
    assert len(hier) == 8 and all(len(h["sha256"]) == 64 for h in hier)
    assert len(prov["inputs"][0]["sha256"]) == 64 and "inputs" not in led
    tab = read_table(out / "table.tsv")
    assert tab.columns == read_table(DATA / "adult.csv").columns
    if tab.height:
        check_theta0(DATA / "adult.csv", DATA, out, 0.05)


def test_side_table_release_has_theta0_rows(tmp_path: Path) -> None:
    # mechanics only: a real Θ must be public and independent of the input (not a copy)
    src = read_table(DATA / "adult.csv")
    side = tmp_path / "side.csv"
    src.write_csv(side, separator=";")
    out = tmp_path / "rel"
    r = invoke(
        "anonymize",
        str(DATA / "adult.csv"),
        "--hierarchies",
        str(DATA),
        "--model",
        "fouad2014",
        "--epsilon",
        "3",
        "--delta",
        "1e-3",
        "--beta",
        "0.5",
        "--theta0",
        "0.05",
        "--theta1",
        "0.051",
        "--side-table",
        str(side),
        "--seed",
        "1",
        "--out",
        str(out),
        "--json",
    )
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["private"]["summary"]["released"] > 0
    assert check_theta0(DATA / "adult.csv", DATA, out, 0.05) > 0
    led = json.loads((out / "ledger.json").read_text())
    assert led["public_inputs"][-1]["role"].startswith("public side table")


@pytest.mark.parametrize(
    ("model", "extra"),
    [
        ("aggregate", []),
        ("threshold", ["--c", "0.05"]),
        ("kanon", ["--k", "5", "--max-suppression", "0.1"]),
        ("safepub", ["--epsilon", "2", "--delta", "1e-3", "--steps", "20"]),
    ],
)
def test_other_models(tmp_path: Path, model: str, extra: list[str]) -> None:
    out = tmp_path / model
    r = invoke(
        "anonymize",
        str(DATA / "adult.csv"),
        "--hierarchies",
        str(DATA),
        "--model",
        model,
        *extra,
        "--seed",
        "2",
        "--out",
        str(out),
        "--json",
    )
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    tab = pl.read_csv(out / "table.tsv", separator="\t", infer_schema_length=0)
    assert tab.height == res["private"]["summary"]["released"]
    if model == "kanon":
        counts = tab.group_by(tab.columns).len()
        assert counts.get_column("len").min() >= 5
        assert res["private"]["summary"]["suppressed"] <= 30
    if model == "aggregate":
        assert tab.height == 300


@pytest.mark.parametrize(
    "args",
    [
        ["--model", "dp", "--delta", "1e-3"],  # no ε
        ["--model", "dp", "--epsilon", "1"],  # no δ
        ["--model", "fouad2014", "--epsilon", "1", "--delta", "1e-3"],  # no β/θ₀
        ["--model", "dp", "--epsilon", "1", "--delta", "0.5", "--beta", "0.5", "--theta0", "0.05"],
        [
            "--model",
            "dp",
            "--epsilon",
            "-1",
            "--delta",
            "1e-3",
            "--beta",
            "0.5",
            "--theta0",
            "0.05",
        ],
        ["--model", "nope"],
        ["--model", "kanon"],
    ],
)
def test_bad_parameters_exit_2_and_write_nothing(tmp_path: Path, args: list[str]) -> None:
    out = tmp_path / "x"
    r = invoke(
        "anonymize", str(DATA / "adult.csv"), "--hierarchies", str(DATA), *args, "--out", str(out)
    )
    assert r.exit_code == 2, r.output
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".x")]


def test_bad_hierarchy_exit_2(tmp_path: Path) -> None:
    for f in DATA.glob("*.csv"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "adult_hierarchy_sex.csv").write_text("Male;*\r\n")  # Female missing
    r = invoke("stats", str(tmp_path / "adult.csv"), "--hierarchies", str(tmp_path))
    assert r.exit_code == 2
    assert "Female" in r.output and "line" in r.output


@pytest.mark.slow
def test_reproduce_quick_report(tmp_path: Path) -> None:
    rep = tmp_path / "tabular.html"
    r = invoke("reproduce", "--data", str(DATA), "--quick", "--report", str(rep), "--json")
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    html = rep.read_text()
    assert "Fig. 3" in html and "Fig. 4" in html and "SafePub" in html
    assert (
        res["fig3"]["by_attributes"][0]["poly_agrees_with_enumeration"].split("/")[0]
        == res["fig3"]["by_attributes"][0]["poly_agrees_with_enumeration"].split("/")[1]
    )
    assert {x["model"] for x in res["comparison"]} >= {"dp", "safepub", "fouad2014"}
    assert "accuracy vs epsilon" in html


@pytest.mark.slow
def test_adult_dp_command_from_the_issue(adult_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "adult"
    r = invoke(
        "anonymize",
        str(adult_dir / "adult.csv"),
        "--hierarchies",
        str(adult_dir),
        "--model",
        "fouad2014",
        "--epsilon",
        "1",
        "--delta",
        "1e-5",
        "--beta",
        "0.1",
        "--theta0",
        "0.01",
        "--seed",
        "5",
        "--out",
        str(out),
        "--json",
    )
    assert r.exit_code == 0, r.output
    led = json.loads((out / "ledger.json").read_text())
    assert led["noisy"]["k"] >= 0.01 * 30162
    assert led["noisy"]["delta_total"] <= 1e-5
    tab = read_table(out / "table.tsv")
    if tab.height:
        check_theta0(adult_dir / "adult.csv", adult_dir, out, 0.01)
