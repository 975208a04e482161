"""Issue 30, item 3: the demo's d comes from public information only.

The default-d rule of the selection strategies reads a reference histogram of distinct queries
per user, and that reference *is* the bundled 215-user sample the demo releases. A replay of
the demo's release on D (the sample) and on D′ = D minus one user with 31–75 distinct queries
must publish the same ledger apart from the noisy output sizes: in the world of D′ the bundled
sample — and so the reference — would have been D′. (Before the fix the demo's d moved from
25 to 24: certain, so δ = 1 for that release.)
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

import searchveil.mechanisms.selection as selection
import searchveil.pipelines.demo as demo_mod
from _neighbour import public_ledger_diff
from searchveil.cli import app
from searchveil.io.readers import read_log
from searchveil.model import items

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "searchveil" / "data" / "aol-gayo-avello-215-users.tsv"


def _histogram(path: Path) -> tuple[tuple[int, int], ...]:
    q = items(read_log(path), "queries")
    per_user = q.group_by("user").agg(pl.col("item").n_unique().alias("k"))
    return tuple(sorted(Counter(per_user.get_column("k").to_list()).items()))


def _without_user(tmp_path: Path) -> tuple[Path, str]:
    """D′: the sample without its first user (in id order) holding 31–75 distinct queries."""
    q = items(read_log(SAMPLE), "queries")
    per_user = q.group_by("user").agg(pl.col("item").n_unique().alias("k"))
    user = str(per_user.filter(pl.col("k").is_between(31, 75)).sort("user").get_column("user")[0])
    lines = SAMPLE.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [lines[0], *(ln for ln in lines[1:] if ln.split("\t", 1)[0] != user)]
    assert len(kept) < len(lines)
    p = tmp_path / "D1.tsv"
    p.write_text("".join(kept), encoding="utf-8")
    return p, user


@pytest.mark.slow  # over 5 s on 2 cores: the full tier (tests/README.md)
def test_demo_ledger_same_on_sample_and_sample_minus_one_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the default-d rule's reference is the released sample itself
    assert _histogram(SAMPLE) == selection.REFERENCE_DISTINCT_PER_USER
    d1, _ = _without_user(tmp_path)
    runner = CliRunner()
    args = [
        "demo",
        "--synthetic-users",
        "0",
        "--seed",
        "3",
        "--json",
    ]  # probe-reweight-2r, its default
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "D")])
    assert r.exit_code == 0, r.output
    # the demo on D′: the bundled sample is D′, and so is the reference built from it
    real_read = demo_mod.read_log
    monkeypatch.setattr(demo_mod, "read_log", lambda _path, reader: real_read(d1, reader))
    monkeypatch.setattr(selection, "REFERENCE_DISTINCT_PER_USER", _histogram(d1))
    r = runner.invoke(app, [*args, "--out", str(tmp_path / "D1")])
    assert r.exit_code == 0, r.output
    a, b = tmp_path / "D" / "real", tmp_path / "D1" / "real"
    assert public_ledger_diff(a, b, noisy=("outputs.*.rows",)) == []
    led = json.loads((a / "ledger.json").read_text())
    assert "declared" in led["parameters"]["d_rule"]
