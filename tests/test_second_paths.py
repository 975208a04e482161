"""Issue 39, the files half: every path the tool writes follows the rule ``--out`` follows
(src/searchveil/io/paths.py, ``Replace``; docs/privacy/published.md, "Where files go").

* a second path (a report, a ledger, a run record, a saved model, a transcript, the synthetic
  log) that exists is replaced only with ``--overwrite`` and only when searchveil wrote it:
  otherwise exit 2 naming the path and ``--overwrite``, the user's file byte-identical;
* a provenance record only when it belongs to the release being replaced; ``read_provenance``
  refuses another release's record; a ``kill -9`` between a release's two swaps is repaired;
* the rule is checked again at the swap (a file added to the target while a run works is
  never deleted), a symbolic link is refused up front, ``--out .``/``''`` is a clean error;
* the tiny-graph error of ``social reproduce``.

The labels half (δ ≥ 1/U warnings, conditional ledgers, banners) is in
tests/test_second_paths_labels.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from searchveil.cli import app
from searchveil.errors import InputFormatError, InvalidParameterError, OutputExistsError
from searchveil.io import paths
from searchveil.io.ledger import ReleaseWriter, build_provenance, read_provenance
from searchveil.io.paths import Staging

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "searchveil" / "data" / "aol-gayo-avello-215-users.tsv"
TAB = ROOT / "tests" / "data" / "tabular"
GRAPH = ROOT / "tests" / "data" / "attacks" / "two_triangles_and_tail.txt"
MINE = b"my own notes: not searchveil's\n"
runner = CliRunner()


def _run(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def _flat(text: str) -> str:
    return " ".join(text.split())


def _shares(d: Path) -> list[Path]:
    head = "AnonID\tQuery\tQueryTime\tItemRank\tClickURL"
    out = []
    for k in range(2):
        rows = [f"{1000 * k + u}\tquery {q}\t2006-03-01 10:00:00\t1\thttp://s{q}.com"
                for u in range(12) for q in range(u % 4 + 1)]  # fmt: skip
        p = d / f"share{k}.tsv"
        p.write_text("\n".join([head, *rows]) + "\n")
        out.append(p)
    return out


# -- 1. a second path that exists: refused unless searchveil wrote it ---------------------------
def _second_paths(d: Path) -> dict[str, list[object]]:
    """Each command of the issue with its second path at ``d/mine`` (a file of the user's)."""
    from searchveil.cels.runner import write_config

    rel, mine = d / "rel", d / "mine"
    shares = _shares(d)
    cfg = write_config(d / "tls", 3, timeout=5)
    return {
        "evaluate --report": ["evaluate", SAMPLE, rel, "--report", mine.with_suffix(".html")],
        "compare --report": ["compare", SAMPLE, "--epsilon", 1, "--delta", 1e-5, "--report",
                             mine.with_suffix(".html")],
        "synth --save-model": ["synth", "--like", SAMPLE, "--users", 5, "--out", d / "s.tsv",
                               "--save-model", mine],
        "synth --out": ["synth", "--like", SAMPLE, "--users", 5, "--out", mine],
        "social reproduce --ledger": ["social", "reproduce", "--graph", GRAPH, "--nodes", 10,
                                      "--ledger", mine],
        "attack ads --ledger": ["attack", "ads", "--epsilon", 1, "--population", 2000,
                                "--ledger", mine],
        "attack lookahead --out": ["attack", "lookahead", "--nodes", 200, "--lookahead", 1,
                                   "--strategy", "highest", "--out", mine.with_suffix(".json")],
        "cels party --transcript": ["cels", "party", "--config", cfg, "--id", 1, "--share",
                                    shares[0], "--epsilon", 2, "--delta", 1e-5,
                                    "--union-epsilon", 2, "--out", d / "p1", "--transcript",
                                    mine],
    }  # fmt: skip


def test_a_users_file_on_a_second_path_is_never_replaced(tmp_path: Path) -> None:
    """The issue's data-loss commands: without --overwrite, exit 2 naming the path and
    --overwrite; with it, still exit 2 (the file is not one searchveil wrote); byte-identical
    either way, and nothing else written. On main every one replaced the file (rc 0)."""
    r = _run("release", "kanon", SAMPLE, "--out", tmp_path / "rel", "--k", 3, "--seed", 1)
    assert r.exit_code == 0, r.output
    for name, args in _second_paths(tmp_path).items():
        mine = Path(str(args[-1]))
        mine.write_bytes(MINE)
        before = sorted(p.name for p in tmp_path.iterdir())
        for extra in ([], ["--overwrite"]):
            r = _run(*args, *extra)
            text = _flat(r.output)
            assert r.exit_code == 2, (name, extra, r.output)
            assert str(mine) in text and "--overwrite" in text, (name, text)
            assert "internal error" not in text, (name, text)
            assert mine.read_bytes() == MINE, name
            assert sorted(p.name for p in tmp_path.iterdir()) == before, name
        assert "is not one" in text, (name, text)
        mine.unlink()


def test_what_searchveil_wrote_is_replaced_only_with_overwrite(tmp_path: Path) -> None:
    """The markers: a report, a ledger, a run record, a transcript the tool wrote are
    recognised (and replaced with --overwrite); the same bytes without the marker are not."""
    from searchveil.cels.frames import open_transcript
    from searchveil.io.ledger import build_ledger
    from searchveil.io.paths import LEDGER_JSON, REPORT, RUN_RECORD, TRANSCRIPT, write_private_text
    from searchveil.mechanisms.budget import NoGuarantee
    from searchveil.report.html import page, write_report

    rep = tmp_path / "r.html"
    write_report(rep, page("t", "s", ["<p>one</p>"]))
    with pytest.raises(OutputExistsError, match="--overwrite"):
        write_report(rep, page("t", "s", ["<p>two</p>"]))
    write_report(rep, page("t", "s", ["<p>two</p>"]), overwrite=True)
    assert "two" in rep.read_text() and REPORT.problem(rep) is None
    led = build_ledger(mechanism="m", notion="n", cost=NoGuarantee("test"), parameters={},
                       rng=None)  # fmt: skip
    (tmp_path / "l.json").write_text(json.dumps(led))
    (tmp_path / "ls.json").write_text(json.dumps({"a": led, "b": led}))  # attack ads
    assert LEDGER_JSON.problem(tmp_path / "l.json") is None
    assert LEDGER_JSON.problem(tmp_path / "ls.json") is None
    assert RUN_RECORD.problem(tmp_path / "l.json") is None
    with open_transcript(tmp_path / "t.bin", 1, "s") as fh:
        fh.write(b"frames")
    assert TRANSCRIPT.problem(tmp_path / "t.bin") is None
    for kind in (REPORT, LEDGER_JSON, TRANSCRIPT, paths.MODEL, paths.SYNTHETIC_LOG):
        (tmp_path / "x").write_bytes(MINE)
        assert kind.problem(tmp_path / "x") is not None, kind.what
    (tmp_path / "x").write_text(json.dumps({"tool": "other"}))
    assert LEDGER_JSON.problem(tmp_path / "x") is not None
    # a kind replaces only its own kind: a report path never takes a provenance record's place
    with pytest.raises(OutputExistsError, match="is not one"):
        write_private_text(tmp_path / "l.json", "x", option="report", overwrite=True,
                           owned=REPORT)  # fmt: skip


# -- 2. a provenance record only of the release it belongs to -----------------------------------
def test_provenance_of_another_release_is_neither_replaced_nor_read(tmp_path: Path) -> None:
    a, b = tmp_path / "A", tmp_path / "B"
    for out, k in ((a, 3), (b, 4)):
        r = _run("release", "kanon", SAMPLE, "--out", out, "--k", k, "--seed", 1)
        assert r.exit_code == 0, r.output
    rec_a = (tmp_path / "A.private.json").read_bytes()
    led_b = (b / "ledger.json").read_bytes()
    r = _run("release", "kanon", SAMPLE, "--out", b, "--k", 5, "--seed", 2, "--overwrite",
             "--provenance", tmp_path / "A.private.json")  # fmt: skip
    text = _flat(r.output)
    assert r.exit_code == 2 and "A.private.json" in text and "another release" in text, text
    assert (tmp_path / "A.private.json").read_bytes() == rec_a
    assert (b / "ledger.json").read_bytes() == led_b
    # read_provenance (and so evaluate) refuses a record whose ledger digest is not the release's
    with pytest.raises(InputFormatError, match="not this release's provenance record"):
        read_provenance(a, tmp_path / "B.private.json")
    assert (
        read_provenance(a)["release"]["ledger_sha256"]
        == hashlib.sha256((a / "ledger.json").read_bytes()).hexdigest()
    )
    r = _run("evaluate", SAMPLE, a, "--provenance", tmp_path / "B.private.json")
    assert r.exit_code == 2 and "not this release's" in _flat(r.output), r.output
    # the record of the release being replaced is replaced
    r = _run("release", "kanon", SAMPLE, "--out", b, "--k", 5, "--seed", 2, "--overwrite")
    assert r.exit_code == 0, r.output


_KILLED_WRITE = r"""
import os, signal, sys
import polars as pl
from searchveil.io import paths
from searchveil.io.ledger import ReleaseWriter, build_provenance

commit = paths.Staging.commit

def killed_before_the_record(self):
    if self.target.name.endswith(".private.json"):
        os.kill(os.getpid(), signal.SIGKILL)  # kill -9 between the two swaps
    commit(self)

paths.Staging.commit = killed_before_the_record
with ReleaseWriter(sys.argv[1], overwrite=True) as w:
    w.write_table("t", pl.DataFrame({"x": [2]}))
    w.write_ledger({"tool": "searchveil", "notes": "second"})
    w.write_provenance(build_provenance(inputs=[], report={"run": "second"}))
"""


def _write(out: Path, run: str) -> None:
    with ReleaseWriter(out, overwrite=True) as w:
        w.write_table("t", pl.DataFrame({"x": [1]}))
        w.write_ledger({"tool": "searchveil", "notes": run})
        w.write_provenance(build_provenance(inputs=[], report={"run": run}))


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_kill_between_the_two_swaps_is_repaired_or_detected(tmp_path: Path) -> None:
    """The release is put in place first, then its record. A kill -9 between the two leaves
    the new release, the old record and the new record staged beside it: the next reader (or
    writer) puts the staged record in place; without it, the old record is refused."""
    work = tmp_path / "w"
    work.mkdir()
    out, rec = work / "rel", work / "rel.private.json"
    _write(out, "first")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    p = subprocess.run([sys.executable, "-c", _KILLED_WRITE, str(out)], env=env,  # noqa: S603
                       capture_output=True, timeout=120)  # fmt: skip
    assert p.returncode == -signal.SIGKILL, p.stderr.decode()
    assert json.loads((out / "ledger.json").read_text())["notes"] == "second"  # new release
    old = json.loads(rec.read_text())
    assert old["report"]["run"] == "first"  # old record: its digest names the old ledger
    assert old["release"]["ledger_sha256"] != _sha(out / "ledger.json")
    assert [n for n in os.listdir(work) if n.startswith(".rel.private.json.tmp-")]
    # detected: without the staged record, the old one is never taken for the new release's
    shutil.copytree(work, tmp_path / "gone")
    for d in (tmp_path / "gone").glob(".rel.private.json.tmp-*"):
        shutil.rmtree(d)
    with pytest.raises(InputFormatError, match="not this release's provenance record"):
        read_provenance(tmp_path / "gone" / "rel")
    # repaired by the writer: the next --overwrite run goes through
    shutil.copytree(work, tmp_path / "again")
    _write(tmp_path / "again" / "rel", "third")
    assert read_provenance(tmp_path / "again" / "rel")["report"]["run"] == "third"
    assert sorted(os.listdir(tmp_path / "again")) == ["rel", "rel.private.json"]
    # repaired by the reader: the staged record is put in place, the staging removed
    got = read_provenance(out)
    assert got["report"]["run"] == "second"
    assert got["release"]["ledger_sha256"] == _sha(out / "ledger.json")
    assert json.loads(rec.read_text())["report"]["run"] == "second"
    assert sorted(os.listdir(work)) == ["rel", "rel.private.json"]


# -- 3. the rule again at the swap; symbolic links ------------------------------------------------
def test_a_file_added_while_a_run_works_is_never_deleted(tmp_path: Path) -> None:
    """Checked at the swap (directory and file targets), and on what the swap replaced: a
    file that appears between that check and the swap is swapped back, unharmed."""
    from searchveil.io.paths import REPORT, Replace, release_rule

    out = tmp_path / "rel"
    _write(out, "first")
    before = sorted(p.name for p in out.iterdir())
    with Staging(out, directory=True, replace=release_rule("out", True)) as st:
        (st.path / "ledger.json").write_text("{}")
        (out / "added.txt").write_bytes(MINE)
        with pytest.raises(OutputExistsError, match="added.txt"):
            st.commit()
    assert sorted(p.name for p in out.iterdir()) == sorted([*before, "added.txt"])

    class Racy(Replace):
        def check(self, path: object) -> None:  # the file appears right after the check
            super().check(path)  # type: ignore[arg-type]
            (out / "late.txt").write_bytes(MINE)

    (out / "added.txt").unlink()
    with Staging(out, directory=True, replace=Racy("out", True, paths.RELEASE, True)) as st:
        (st.path / "ledger.json").write_text("{}")
        with pytest.raises(OutputExistsError, match="late.txt"):
            st.commit()
    assert (out / "late.txt").read_bytes() == MINE
    assert json.loads((out / "ledger.json").read_text())["notes"] == "first"
    report = tmp_path / "r.html"
    st = paths.stage_file(report, b"new", replace=Replace("report", True, REPORT))
    report.write_bytes(MINE)  # a file of the user's appears where there was none
    with pytest.raises(OutputExistsError, match="r.html"):
        st.commit()
    assert report.read_bytes() == MINE
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_cels_run_checks_release_record_and_transcripts_again_at_the_swap(
    tmp_path: Path,
) -> None:
    """``cels run --overwrite`` and ``--transcripts DIR``: a file added to either while the
    parties run is never deleted, and nothing is written when one target is refused."""
    from searchveil.cels import runner

    shares = _shares(tmp_path)
    out, trd = tmp_path / "rel", tmp_path / "tr"
    _write(out, "old")
    trd.mkdir()
    prov = runner.check_run_paths(shares, out, None, trd, True)
    tmpd = tmp_path / "run"
    (tmpd / "transcripts").mkdir(parents=True)
    for k in range(3):  # what the three parties left in the runner's directory
        with ReleaseWriter(tmpd / f"P{k}") as w:
            w.write_table("log", pl.DataFrame({"x": [7]}))
            w.write_ledger({"tool": "searchveil", "notes": "joint"})
            w.write_provenance(build_provenance(inputs=[], report={"cels_party": {"k": k}}))
        (tmpd / "transcripts" / f"P{k}.bin").write_bytes(b"CELS-TRANSCRIPT {}\n")
    led = (out / "ledger.json").read_bytes()
    (trd / "mine.txt").write_bytes(MINE)
    with pytest.raises(OutputExistsError, match="transcripts"):
        runner._publish(tmpd, 3, out, prov, trd, True)
    assert (trd / "mine.txt").read_bytes() == MINE
    assert (out / "ledger.json").read_bytes() == led  # the release was not swapped either
    (trd / "mine.txt").unlink()
    (out / "mine.txt").write_bytes(MINE)
    with pytest.raises(OutputExistsError, match="mine.txt"):
        runner._publish(tmpd, 3, out, prov, trd, True)
    assert (out / "mine.txt").read_bytes() == MINE and (out / "ledger.json").read_bytes() == led
    (out / "mine.txt").unlink()
    runner._publish(tmpd, 3, out, prov, trd, True)
    assert json.loads((out / "ledger.json").read_text())["notes"] == "joint"
    assert sorted(p.name for p in trd.iterdir()) == ["P0.bin", "P1.bin", "P2.bin"]


def test_a_symbolic_link_is_refused_up_front(tmp_path: Path) -> None:
    """synth --out a dangling link replaced the link; demo --out a link wrote at its target."""
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    r = _run("synth", "--like", SAMPLE, "--users", 5, "--out", dangling, "--overwrite")
    assert r.exit_code == 2 and "symbolic link" in _flat(r.output), r.output
    assert dangling.is_symlink() and not (tmp_path / "nowhere").exists()
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    r = _run("demo", "--out", link, "--synthetic-users", 0, "--seed", 1)
    assert r.exit_code == 2 and "symbolic link" in _flat(r.output), r.output
    assert list(target.iterdir()) == []
    rep = tmp_path / "rep.html"
    rep.symlink_to(tmp_path / "nowhere.html")
    r = _run("compare", SAMPLE, "--epsilon", 1, "--delta", 1e-5, "--report", rep)
    assert r.exit_code == 2 and "symbolic link" in _flat(r.output), r.output
    r = _run("release", "kanon", SAMPLE, "--out", link, "--k", 3)
    assert r.exit_code == 2 and list(target.iterdir()) == []


# -- 4. clean errors ---------------------------------------------------------------------------
def _release_commands(d: Path) -> dict[str, list[object]]:
    from searchveil.cels.runner import write_config

    shares = _shares(d)
    cfg = write_config(d / "tls", 3, timeout=5)
    two = ["--share", shares[0], "--share", shares[1]]
    return {
        "release korolova": ["release", "korolova", SAMPLE, "--epsilon", 2, "--delta", 1e-5,
                             "--max-queries", 3],
        "release zealous": ["release", "zealous", SAMPLE, "--epsilon", 2, "--delta", 1e-4,
                            "--max-items", 2, "--max-users", 1000, "--item-type", "queries"],
        "release kanon": ["release", "kanon", SAMPLE, "--k", 3],
        "release ump": ["release", "ump", SAMPLE, "--epsilon", 2, "--delta", 1e-5],
        "tabular anonymize": ["tabular", "anonymize", TAB / "adult.csv", "--hierarchies", TAB,
                              "--model", "kanon", "--k", 5],
        "social recommend": ["social", "recommend", "--graph", GRAPH, "--epsilon", 1,
                             "--mechanism", "exponential", "--target", 1, "--nodes", 10],
        "cels local": ["cels", "local", *two, "--epsilon", 2, "--delta", 1e-5,
                       "--union-epsilon", 2],
        "cels run": ["cels", "run", *two, "--epsilon", 2, "--delta", 1e-5, "--union-epsilon", 2],
        "cels party": ["cels", "party", "--config", cfg, "--id", 0, "--epsilon", 2,
                       "--delta", 1e-5, "--union-epsilon", 2],
        "demo": ["demo", "--synthetic-users", 0],
    }  # fmt: skip


def test_out_dot_and_empty_are_clean_errors(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Today: "internal error … PosixPath('.') has an empty name" on every release command."""
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    for name, args in _release_commands(tmp_path).items():
        for out in (".", ""):
            r = _run(*args, "--out", out)
            text = _flat(r.output)
            assert r.exit_code == 2, (name, out, r.output)
            assert "out" in text and "bug" not in text and "internal" not in text, (name, text)
    assert list(work.iterdir()) == []
    with pytest.raises(InvalidParameterError, match="out"):
        ReleaseWriter(Path("."))


def test_social_reproduce_on_a_tiny_graph_is_a_clean_error(tmp_path: Path) -> None:
    """Today an IndexError ("internal error … bug")."""
    for edges, universe in (("1 2\n", ["--public-node-set"]), ("0 1\n2 3\n", ["--nodes", 6])):
        g = tmp_path / "tiny.txt"
        g.write_text(edges)
        r = _run("social", "reproduce", "--graph", g, *universe, "--ledger", tmp_path / "l.json")
        text = _flat(r.output)
        assert r.exit_code == 2, r.output
        assert "tiny.txt" in text and "graph" in text and "internal" not in text, text
        assert "at least 3 nodes" in text
        assert not (tmp_path / "l.json").exists()


# -- slow: whole runs ------------------------------------------------------------------------------
@pytest.mark.slow
def test_demo_overwrite_never_deletes_a_file_added_while_it_runs(tmp_path: Path) -> None:
    """Today the demo's ownership check ran only at start: a file added to --out while it ran
    was deleted with the old directory at the swap."""
    from searchveil.pipelines.demo import demo
    from searchveil.rng import make_rng

    out = tmp_path / "demo"
    out.mkdir()  # empty: nothing to lose, accepted at start

    def step(desc: str):  # noqa: ANN202
        if not (out / "notes.txt").exists():
            (out / "notes.txt").write_bytes(MINE)
        return lambda: None

    with pytest.raises(OutputExistsError, match="notes.txt"):
        demo(out=out, rng=make_rng(1), synthetic_users=0, overwrite=True, step=step)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert (out / "notes.txt").read_bytes() == MINE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo"]


@pytest.mark.slow
def test_overwrite_replaces_what_searchveil_wrote(tmp_path: Path) -> None:
    """The positive side, by command: a synthetic log and its model, an evaluation report."""
    syn, model = tmp_path / "s.tsv", tmp_path / "m.json"
    args = ["synth", "--like", SAMPLE, "--users", 5, "--out", syn, "--save-model", model,
            "--workers", 1]  # fmt: skip
    assert _run(*args, "--seed", 1).exit_code == 0
    first = syn.read_bytes()
    r = _run(*args, "--seed", 2)
    assert r.exit_code == 2 and syn.read_bytes() == first, r.output
    r = _run(*args, "--seed", 2, "--overwrite")
    assert r.exit_code == 0, r.output
    assert syn.read_bytes() != first and json.loads(model.read_text())["kind"] == (
        "searchveil-synth-model"
    )
    rel, rep = tmp_path / "rel", tmp_path / "r.html"
    assert _run("release", "kanon", SAMPLE, "--out", rel, "--k", 3).exit_code == 0
    from searchveil.report.html import page, write_report

    write_report(rep, page("an earlier report", "", []))  # one searchveil wrote
    ev = ["evaluate", SAMPLE, rel, "--report", rep, "--substitution-queries", 5]
    assert _run(*ev).exit_code == 2
    r = _run(*ev, "--overwrite")
    assert r.exit_code == 0, r.output
    assert 'class="warn"' in rep.read_text()  # k-anonymity: not DP, the warning style


@pytest.mark.slow
def test_cels_run_prints_the_delta_warning(tmp_path: Path) -> None:
    """``cels run`` (every party a local process) sums the parties' users for U (the 215-user
    sample in two shares: the release's δ ≈ 0.023 ≥ 1/215)."""
    df = pl.read_csv(SAMPLE, separator="\t", quote_char=None, infer_schema=False)
    shares = [tmp_path / "s0.tsv", tmp_path / "s1.tsv"]
    for k, p in enumerate(shares):
        df.filter(pl.col("AnonID").cast(pl.Int64) % 2 == k).write_csv(p, separator="\t")
    r = _run("cels", "run", "--share", shares[0], "--share", shares[1], "--epsilon", 2,
             "--delta", 0.3, "--max-pairs", 1, "--union-epsilon", 2, "--out", tmp_path / "o",
             "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "1/U" in r.stderr and "1/U" in json.loads(r.stdout)["private"]["delta_warning"]


def test_cels_certificate_helper_never_replaces_a_file(tmp_path: Path) -> None:
    """`write_config` (the throw-away CA, keys and parties.toml of `cels run`) writes only new
    files: into a directory that already holds them it is refused and they stay as they were,
    beside a user's file of one of its names it writes nothing; keys are 0600 from their first
    byte."""
    from searchveil.cels.runner import write_config

    d = tmp_path / "tls"
    cfg = write_config(d, 2, timeout=5)
    assert (d / "p0.key").stat().st_mode & 0o777 == 0o600
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    assert {"ca.pem", "p0.pem", "p0.key", "p1.key", "parties.toml"} <= set(before)
    with pytest.raises(OutputExistsError, match="ca.pem exists"):
        write_config(d, 2, timeout=5)
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "parties.toml").write_text("the user's own\n")
    with pytest.raises(OutputExistsError, match="parties.toml exists"):
        write_config(mine, 2, timeout=5)
    assert [p.name for p in mine.iterdir()] == ["parties.toml"]  # nothing written beside it
    assert (mine / "parties.toml").read_text() == "the user's own\n"
    assert cfg.name == "parties.toml"
