"""Issue 30, item 1: one rule for every path the tool writes (src/searchveil/io/paths.py).

Whatever the options: a private file (provenance record, transcripts, reports, saved models,
synthetic logs, run records) never lands inside a release directory and is written owner-only;
``--overwrite`` replaces only a complete searchveil release and never one holding an input;
every refusal happens before any work, with exit 2 and a message naming the option. (The
rule's building blocks are tested in tests/test_paths.py.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchveil.cli import app

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "searchveil" / "data" / "aol-gayo-avello-215-users.tsv"
TAB = ROOT / "tests" / "data" / "tabular"
GRAPH = ROOT / "tests" / "data" / "attacks" / "two_triangles_and_tail.txt"
runner = CliRunner()


def _run(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _mode(p: Path) -> int:
    return p.stat().st_mode & 0o777


@pytest.fixture()
def release(tmp_path: Path) -> Path:
    """A complete searchveil release (k-anonymity: fast) at tmp_path/rel."""
    out = tmp_path / "rel"
    r = _run("release", "kanon", SAMPLE, "--out", out, "--k", 3, "--seed", 1, "--json")
    assert r.exit_code == 0, r.output
    return out


# -- --overwrite: only a complete release, never an input ---------------------------------------
def test_overwrite_never_deletes_the_input_or_unrelated_files(tmp_path: Path) -> None:
    """The issue's first case: --out is the directory holding the input log and notes.txt."""
    indir = tmp_path / "indir"
    indir.mkdir()
    shutil.copy(SAMPLE, indir / "D.tsv")
    (indir / "notes.txt").write_text("mine")
    before = _tree(indir)
    r = _run("release", "korolova", indir / "D.tsv", "--out", indir, "--overwrite",
             "--epsilon", 2, "--delta", 1e-5, "--max-queries", 3, "--seed", 1)  # fmt: skip
    assert r.exit_code == 2, r.output
    assert "input" in r.output and "--out" in r.output
    assert _tree(indir) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["indir"]


def test_overwrite_refuses_an_input_inside_a_complete_release(release: Path) -> None:
    """Even a complete release is not replaced while it holds an input of the run."""
    before = _tree(release)
    r = _run("release", "kanon", release / "log.tsv", "--out", release, "--overwrite",
             "--k", 2, "--seed", 1)  # fmt: skip
    assert r.exit_code == 2 and "outside --out" in r.output, r.output
    assert _tree(release) == before


def test_overwrite_refuses_a_release_with_an_extra_file(release: Path) -> None:
    (release / "report.html").write_text("<html>mine</html>")
    before = _tree(release)
    r = _run("release", "kanon", SAMPLE, "--out", release, "--overwrite", "--k", 2)
    assert r.exit_code == 2 and "report.html" in r.output and "overwrite" in r.output
    assert _tree(release) == before
    (release / "report.html").unlink()
    r = _run("release", "kanon", SAMPLE, "--out", release, "--overwrite", "--k", 2, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads((release / "ledger.json").read_text())["parameters"]["k"] == 2


def test_provenance_overwrite_replaces_only_a_record(release: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    r = _run("release", "kanon", SAMPLE, "--out", release, "--overwrite", "--k", 2,
             "--provenance", notes)  # fmt: skip
    assert r.exit_code == 2 and "provenance record" in r.output, r.output
    assert notes.read_text() == "mine"


# -- private files never inside a release ------------------------------------------------------
def test_provenance_refused_inside_another_release(release: Path, tmp_path: Path) -> None:
    before = _tree(release)
    r = _run("release", "kanon", SAMPLE, "--out", tmp_path / "r2", "--k", 3,
             "--provenance", release / "p.json")  # fmt: skip
    assert r.exit_code == 2 and "provenance" in r.output and "release" in r.output
    assert _tree(release) == before and not (tmp_path / "r2").exists()


def test_evaluate_and_compare_reports_refused_inside_the_release(release: Path) -> None:
    before = _tree(release)
    r = _run("evaluate", SAMPLE, release, "--report", release / "report.html")
    assert r.exit_code == 2 and "report" in r.output, r.output
    sub = release / "sub"
    r = _run("compare", SAMPLE, "--epsilon", 1, "--delta", 1e-5, "--report",
             release / "cmp.html")  # fmt: skip
    assert r.exit_code == 2 and "report" in r.output, r.output
    assert _tree(release) == before and not sub.exists()


def test_reports_are_owner_only(release: Path, tmp_path: Path) -> None:
    rep = tmp_path / "report.html"
    r = _run("evaluate", SAMPLE, release, "--report", rep, "--substitution-queries", 20)
    assert r.exit_code == 0, r.output
    assert _mode(rep) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rel", "rel.private.json", "report.html"]


def test_synth_outputs_are_private(release: Path, tmp_path: Path) -> None:
    model = tmp_path / "model.json"
    out = tmp_path / "syn.tsv"
    r = _run("synth", "--like", SAMPLE, "--users", 50, "--out", out, "--save-model", model,
             "--seed", 1, "--workers", 1)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert _mode(model) == 0o600 and _mode(out) == 0o600
    # inside a release, or over the log it is fitted on: refused before any work
    r = _run("synth", "--like", SAMPLE, "--users", 50, "--out", tmp_path / "s2.tsv",
             "--save-model", release / "m.json")  # fmt: skip
    assert r.exit_code == 2 and "save-model" in r.output
    like = tmp_path / "like.tsv"
    shutil.copy(SAMPLE, like)
    r = _run("synth", "--like", like, "--users", 50, "--out", like, "--overwrite")
    assert r.exit_code == 2 and "like" in r.output
    assert like.read_bytes() == SAMPLE.read_bytes()
    assert not (release / "m.json").exists() and not (tmp_path / "s2.tsv").exists()


def test_tabular_social_attack_refuse_before_any_work(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(TAB, data)
    before = _tree(data)
    r = _run("tabular", "anonymize", data / "adult.csv", "--hierarchies", data, "--out", data,
             "--overwrite", "--model", "kanon", "--k", 5)  # fmt: skip
    assert r.exit_code == 2 and ("table" in r.output or "hierarchies" in r.output), r.output
    g = tmp_path / "g"
    g.mkdir()
    shutil.copy(GRAPH, g / "graph.txt")
    r = _run("social", "recommend", "--graph", g / "graph.txt", "--out", g, "--overwrite",
             "--epsilon", 1, "--mechanism", "exponential", "--target", 1,
             "--nodes", 10)  # fmt: skip
    assert r.exit_code == 2 and "graph" in r.output, r.output
    assert _tree(data) == before and (g / "graph.txt").read_bytes() == GRAPH.read_bytes()
    rel = tmp_path / "rel"
    r = _run("release", "kanon", SAMPLE, "--out", rel, "--k", 3)
    assert r.exit_code == 0
    r = _run("attack", "lookahead", "--nodes", 200, "--lookahead", 1, "--strategy", "highest",
             "--out", rel / "run.json")  # fmt: skip
    assert r.exit_code == 2 and "out" in r.output and not (rel / "run.json").exists()


# -- CELS: transcripts and provenance, before any party starts ---------------------------------
def _shares(d: Path) -> list[Path]:
    rows = ["AnonID\tQuery\tQueryTime\tItemRank\tClickURL"]
    out = []
    for k in range(2):
        lines = [
            f"{1000 * k + u}\tquery {q}\t2006-03-01 10:00:00\t1\thttp://s{q}.com"
            for u in range(12)
            for q in range(u % 4 + 1)
        ]
        p = d / f"share{k}.tsv"
        p.write_text("\n".join(rows + lines) + "\n")
        out.append(p)
    return out


def test_cels_private_outputs_refused_up_front(tmp_path: Path) -> None:
    shares = _shares(tmp_path)
    base = ["cels", "run", *sum((["--share", s] for s in shares), []), "--epsilon", 2,
            "--delta", 0.3, "--mode", "conditional", "--objective", "kl", "--key-bits", 512,
            "--seed", 1]  # fmt: skip
    r = _run(*base, "--out", tmp_path / "r6", "--transcripts", tmp_path / "r6")
    assert r.exit_code == 2 and "transcripts" in r.output, r.output
    r = _run(*base, "--out", tmp_path / "r2", "--provenance", tmp_path / "r2" / "p.json")
    assert r.exit_code == 2 and "provenance" in r.output, r.output
    assert "internal error" not in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["share0.tsv", "share1.tsv"]
    r = _run("cels", "local", *sum((["--share", s] for s in shares), []), "--epsilon", 2,
             "--delta", 0.3, "--mode", "conditional", "--objective", "kl", "--out", tmp_path,
             "--overwrite")  # fmt: skip
    assert r.exit_code == 2 and "share" in r.output, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["share0.tsv", "share1.tsv"]


# -- the demo ----------------------------------------------------------------------------------
def test_demo_reports_owner_only_and_overwrite_rules(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    r = _run("demo", "--out", out, "--synthetic-users", 0, "--seed", 1, "--json")
    assert r.exit_code == 0, r.output
    for f in ("report.html", "real-report.html", "real.private.json"):
        assert _mode(out / f) == 0o600, f
    (out / "notes.txt").write_text("mine")
    r = _run("demo", "--out", out, "--synthetic-users", 0, "--overwrite")
    assert r.exit_code == 2 and "notes.txt" in r.output
    assert (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    log = out / "log.tsv"
    shutil.copy(SAMPLE, log)
    r = _run("demo", log, "--max-users", 215, "--out", out, "--synthetic-users", 0,
             "--overwrite")  # fmt: skip
    assert r.exit_code == 2 and log.exists()
