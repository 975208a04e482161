"""The building blocks of issue 30's write rule (src/searchveil/io/paths.py): what a complete
release is, where a private file may go, the staging directory and its crash leftovers, and a
clean error when the destination cannot be written. The commands are tested in
tests/test_write_rules.py, crash safety in tests/test_crash_safety.py."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchveil.cli import app
from searchveil.errors import InvalidParameterError, OutputExistsError, OutputWriteError
from searchveil.io.paths import (
    STAGE_MARK,
    Owned,
    Replace,
    Staging,
    check_private_path,
    check_release_out,
    clean_stale,
    release_problems,
    write_private_text,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "searchveil" / "data" / "aol-gayo-avello-215-users.tsv"


def _mode(p: Path) -> int:
    return p.stat().st_mode & 0o777


@pytest.fixture()
def release(tmp_path: Path) -> Path:
    out = tmp_path / "rel"
    r = CliRunner().invoke(
        app, ["release", "kanon", str(SAMPLE), "--out", str(out), "--k", "3", "--seed", "1"]
    )
    assert r.exit_code == 0, r.output
    return out


def test_complete_release_definition(release: Path, tmp_path: Path) -> None:
    assert release_problems(release) is None
    (release / "sub").mkdir()
    assert "not a file of the release" in (release_problems(release) or "")
    (release / "sub").rmdir()
    led = json.loads((release / "ledger.json").read_text())
    led["tool"] = "other"
    (release / "ledger.json").write_text(json.dumps(led))
    assert "not a searchveil ledger" in (release_problems(release) or "")
    empty = tmp_path / "empty"
    empty.mkdir()
    check_release_out(empty, overwrite=False)  # nothing to lose: used as it is
    with pytest.raises(OutputExistsError):
        check_release_out(release, overwrite=True)


def test_library_writer_refuses_the_same(release: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidParameterError, match="provenance"):
        check_private_path(release / "x.json", option="provenance")
    with pytest.raises(InvalidParameterError, match="outside the release directory"):
        check_private_path(tmp_path / "new" / "x.json", option="p", releases=[tmp_path / "new"])
    with pytest.raises(InvalidParameterError, match="input"):
        check_private_path(SAMPLE, option="report", inputs=[("input", SAMPLE)])
    p = write_private_text(tmp_path / "a.txt", "secret", option="x")
    assert p.read_text() == "secret" and _mode(p) == 0o600


# -- staging: crash leftovers, only our own ----------------------------------------------------
def test_clean_stale_removes_only_marked_unlocked_staging(tmp_path: Path) -> None:
    target = tmp_path / "rel"
    ours = tmp_path / ".rel.tmp-aaaaaaaaaaaa"
    (ours / "new").mkdir(parents=True)
    (ours / STAGE_MARK).write_text("x")
    theirs = tmp_path / ".rel.tmp-bbbbbbbbbbbb"  # no marker: not ours
    theirs.mkdir()
    (theirs / "data").write_text("keep")
    live = tmp_path / ".rel.tmp-cccccccccccc"  # marked but locked by a live run
    live.mkdir()
    (live / STAGE_MARK).write_text("x")
    fd = os.open(live / STAGE_MARK, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    empty = tmp_path / ".rel.tmp-eeeeeeeeeeee"  # killed before its marker: nothing to lose
    empty.mkdir()
    other = tmp_path / ".rel.tmp-notatoken"  # not our name
    other.mkdir()
    try:
        assert sorted(clean_stale(target)) == [ours, empty]
    finally:
        os.close(fd)
    assert theirs.exists() and live.exists() and other.exists()
    assert not ours.exists() and not empty.exists()
    # the fallback swap's crash window (old moved aside, new not yet in): the old comes back
    crashed = tmp_path / ".rel.tmp-dddddddddddd"
    (crashed / "old").mkdir(parents=True)
    (crashed / "old" / "ledger.json").write_text("{}")
    (crashed / STAGE_MARK).write_text("x")
    clean_stale(target)
    assert (target / "ledger.json").read_text() == "{}" and not crashed.exists()


def test_staging_swaps_and_discards(tmp_path: Path) -> None:
    target = tmp_path / "d"
    target.mkdir()
    (target / "old.txt").write_text("old")
    anything = Replace("out", True, Owned("anything", lambda _p: None), directory=True)
    with Staging(target, directory=True, replace=anything) as st:
        (st.path / "new.txt").write_text("new")
        st.commit()
    assert [p.name for p in target.iterdir()] == ["new.txt"]
    with pytest.raises(RuntimeError), Staging(target, directory=True, replace=anything) as st:
        (st.path / "half.txt").write_text("x")
        raise RuntimeError("boom")
    assert [p.name for p in target.iterdir()] == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]


def test_unwritable_destination_is_a_clean_error(tmp_path: Path) -> None:
    """A path whose parent is a regular file fails for root too."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises((InvalidParameterError, OutputWriteError)):
        write_private_text(blocker / "r.html", "x", option="report")
    with pytest.raises(OutputWriteError, match="cannot write"):
        Staging(blocker / "rel", directory=True, replace=Replace("out", directory=True))
    assert blocker.read_text() == "x"
