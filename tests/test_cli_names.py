"""Command names match package names (issue 25): ``release ump`` is the UMP command (package
``searchveil.release.ump``); ``sanitize ump`` stays, hidden, as its old name for one release,
with a one-line note on stderr (none with ``--json``)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from searchveil.cli import app
from searchveil.cli.sanitize import DEPRECATED

runner = CliRunner()
# lp-floor: deterministic (lp-greedy's local search stops on the clock, so two runs under load
# may differ)
ARGS = ["--mode", "conditional",
        "--objective", "size", "--solver", "lp-floor", "--epsilon", "0.7", "--delta", "0.5",
        "--seed", "3"]  # fmt: skip


def test_release_ump_is_the_command_and_sanitize_ump_its_hidden_old_name(
    tmp_path: Path, aol_215_path: Path
) -> None:
    new, old = tmp_path / "new", tmp_path / "old"
    r = runner.invoke(app, ["release", "ump", str(aol_215_path), "--out", str(new), *ARGS])
    assert r.exit_code == 0, r.output
    assert DEPRECATED not in r.output
    r = runner.invoke(app, ["sanitize", "ump", str(aol_215_path), "--out", str(old), *ARGS])
    assert r.exit_code == 0, r.output
    assert DEPRECATED in r.stderr and DEPRECATED not in r.stdout
    for f in sorted(p.name for p in new.iterdir()):
        a, b = (new / f).read_text(), (old / f).read_text()
        if f == "ledger.json":
            a, b = ({k: v for k, v in json.loads(x).items() if k != "created_utc"} for x in (a, b))
        assert a == b, f
    r = runner.invoke(
        app, ["sanitize", "ump", str(aol_215_path), "--out", str(tmp_path / "j"), *ARGS, "--json"]
    )
    assert r.exit_code == 0 and DEPRECATED not in r.output
    assert json.loads(r.output)["objective"] == "size"
    top = runner.invoke(app, ["--help"])
    assert "│ sanitize" not in top.output and "│ release" in top.output  # (a hidden group)
    rel = runner.invoke(app, ["release", "--help"])
    assert "ump" in rel.output
