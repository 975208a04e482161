"""Issue 30, item 4: exact figures of the private input that a command prints (users, the
exact U behind 1/U, max degree, per-party traffic, utility metrics, ...) are labelled as
private — under a ``private`` sub-object of ``--json`` and with "(private)" in tables — and
``--public-node-set`` says what declaring the node set public gives away."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from searchveil.cli import app

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "searchveil" / "data" / "aol-gayo-avello-215-users.tsv"
TAB = ROOT / "tests" / "data" / "tabular"
GRAPH = ROOT / "tests" / "data" / "attacks" / "two_triangles_and_tail.txt"
runner = CliRunner()


def _run(*args: object, wide: bool = True):
    r = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "250"} if wide else None)
    assert r.exit_code == 0, r.output
    return r


def test_release_json_and_table_label_private_figures(tmp_path: Path) -> None:
    args = ["release", "korolova", SAMPLE, "--epsilon", 2, "--delta", 1e-5, "--max-queries", 3,
            "--seed", 1]  # fmt: skip
    r = json.loads(_run(*args, "--out", tmp_path / "a", "--json").stdout)
    assert "report" not in r and r["private"]["report"]["users"] == 215
    assert "never publish" in r["private"]["note"]
    table = _run(*args, "--out", tmp_path / "b").stdout
    assert re.search(r"users \(private\)\s+│\s+215", table)
    assert "δ < 1/U (U = the exact users: private)" in table  # no --max-users: U is exact
    assert re.search(r"queries released\s+│", table)  # the released count is public


def test_other_commands_label_private_figures(tmp_path: Path) -> None:
    r = json.loads(_run("social", "recommend", "--graph", GRAPH, "--out", tmp_path / "s",
                        "--epsilon", 1, "--mechanism", "exponential", "--target", 1,
                        "--public-node-set", "--seed", 1, "--json").stdout)  # fmt: skip
    assert "graph" not in r and r["private"]["graph"]["max_degree"] >= 1
    r = json.loads(_run("tabular", "anonymize", TAB / "adult.csv", "--hierarchies", TAB,
                        "--model", "kanon", "--k", 5, "--out", tmp_path / "t", "--seed", 1,
                        "--json").stdout)  # fmt: skip
    assert "metrics" not in r and "summary" not in r
    assert r["private"]["metrics"]["records"] == 300
    r = json.loads(_run("stats", SAMPLE, "--json").stdout)
    assert r["users"] == 215 and "never publish" in r["private"]["note"]


def test_public_node_set_help_states_its_consequence() -> None:
    r = _run("social", "recommend", "--help")
    text = " ".join(r.output.replace("│", " ").split())
    assert "visible with certainty" in text
