"""Release directories are atomic and carry a complete ledger."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from searchveil.errors import InternalError, OutputExistsError
from searchveil.io.ledger import ReleaseWriter, build_ledger, read_ledger, write_json_atomic
from searchveil.rng import SecureRandom, SeededRandom


def ledger(rng) -> dict:
    return build_ledger(
        mechanism="test",
        notion="(ε,δ)-DP",
        epsilon=1.0,
        delta=1e-6,
        parameters={"d": 3, "K": float("inf")},
        inputs=[{"file": "x.tsv", "sha256": "0" * 64}],
        rng=rng,
    )


@pytest.mark.parametrize("fmt", ["tsv", "parquet"])
def test_release_dir_written_atomically(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "rel"
    df = pl.DataFrame({"query": ["a", "b"], "noisy_count": [3, 4]})
    with ReleaseWriter(out, fmt=fmt) as w:
        w.write_table("queries", df)
        assert not out.exists()  # nothing visible before the end
        w.write_ledger(ledger(SecureRandom()))
    led = read_ledger(out)
    assert led["outputs"]["queries"]["file"] == f"queries.{fmt}"
    assert led["outputs"]["queries"]["columns"] == ["query", "noisy_count"]
    assert led["seeded"] is False and led["for_release"] is True
    assert led["parameters"]["K"] == "inf"
    assert [p.name for p in tmp_path.iterdir()] == ["rel"]


def test_failure_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "rel"
    with pytest.raises(RuntimeError), ReleaseWriter(out) as w:
        w.write_table("queries", pl.DataFrame({"a": [1]}))
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InternalError), ReleaseWriter(out) as w:
        w.write_table("queries", pl.DataFrame({"a": [1]}))  # no ledger: refused
    assert list(tmp_path.iterdir()) == []


def test_existing_output(tmp_path: Path) -> None:
    out = tmp_path / "rel"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(OutputExistsError):
        ReleaseWriter(out)
    with ReleaseWriter(out, overwrite=True) as w:
        w.write_ledger(ledger(SecureRandom()))
    assert sorted(p.name for p in out.iterdir()) == ["ledger.json"]


def test_seeded_is_marked_not_for_release(tmp_path: Path) -> None:
    led = ledger(SeededRandom(42))
    assert led["seeded"] is True and led["for_release"] is False
    assert led["randomness"]["seed"] == 42
    assert "NOT FOR RELEASE" in led["randomness"]["note"]
    p = tmp_path / "l.json"
    write_json_atomic(p, led)
    assert json.loads(p.read_text())["mechanism"] == "test"
