"""The default tier's one Spark test (tests/README.md): a release through the command line on
the Spark engine writes what the in-memory engine writes under the same seed. The Spark engine's
other tests (tests/test_spark.py, the Spark part of tests/test_spark_ordered.py) are the full
tier's (``-m slow``): each starts a JVM and runs many Spark jobs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchveil.cli import app

pytestmark = pytest.mark.spark
SAMPLE = Path(__file__).resolve().parents[1] / "src/searchveil/data/aol-gayo-avello-215-users.tsv"


def _release(out: Path, *engine: str) -> dict:
    args = ["release", "korolova", str(SAMPLE), "--out", str(out), "--epsilon", "3",
            "--delta", "1e-4", "--max-queries", "2", "--max-clicks", "2", "--urls", "private",
            "--seed", "1", "--json", *engine]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    return json.loads((out / "ledger.json").read_text())


def test_spark_release_equals_memory(tmp_path: Path) -> None:
    spark = _release(tmp_path / "spark", "--engine", "spark", "--spark-master", "local[2]")
    memory = _release(tmp_path / "memory", "--engine", "memory")
    names = sorted(p.name for p in (tmp_path / "memory").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "spark").iterdir())
    assert "queries.tsv" in names and "clicks.tsv" in names
    for name in names:
        if name != "ledger.json":
            assert (tmp_path / "spark" / name).read_bytes() == (
                tmp_path / "memory" / name
            ).read_bytes()
    spark.pop("created_utc"), memory.pop("created_utc")
    assert spark == memory
    prov = json.loads((tmp_path / "spark.private.json").read_text())
    assert prov["figures"]["engine"]["engine"] == "spark"
