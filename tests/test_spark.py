"""The Spark engine (marked ``spark``; CI runs it, Java 17 + pyspark from the dev extra): the
same releases as the in-memory path — bounded histograms *and* noisy outputs, since noise is
drawn on the driver from the same seeded source in the same order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from _engine_cases import CASES, same_tables
from searchveil import make_rng, read_log
from searchveil.cli import app
from searchveil.engines.plans import run_release
from searchveil.release import release_kanon, release_korolova, release_zealous

pytestmark = pytest.mark.spark
FN = {"korolova": release_korolova, "zealous": release_zealous, "kanon": release_kanon}


@pytest.fixture(scope="module")
def spark_master() -> str:
    from searchveil.engines.spark import spark_session

    spark_session("local[2]")
    return "local[2]"


@pytest.mark.parametrize("case", range(len(CASES)))
def test_spark_equals_memory_and_polars(case: int, spark_master: str, aol_215_path: Path,
                                        aol_top1000_path: Path) -> None:  # fmt: skip
    algo, params = CASES[case]
    for path in (aol_215_path, aol_top1000_path):
        mem = FN[algo](read_log(path), params, rng=make_rng(4))
        sp = run_release("spark", algo, path, params, rng=make_rng(4), spark_master=spark_master)
        pl_ = run_release("polars", algo, path, params, rng=make_rng(4))
        assert same_tables(mem, sp) == [], (algo, path.name)
        assert same_tables(pl_, sp) == [], (algo, path.name)
        assert sp.ledger["inputs"][0]["users"] == mem.ledger["inputs"][0]["users"]
        assert sp.ledger["engine"] == {"engine": "spark", "version": sp.ledger["engine"]["version"],
                                       "master": spark_master}  # fmt: skip


def test_cli_spark(tmp_path: Path, spark_master: str, aol_215_path: Path) -> None:
    out = tmp_path / "s"
    args = ["release", "zealous", str(aol_215_path), "--out", str(out), "--epsilon", "1",
            "--delta", "0.01", "--max-items", "2", "--guarantee", "indistinguishability",
            "--engine", "spark", "--spark-master", spark_master, "--seed", "1",
            "--json"]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    led = json.loads((out / "ledger.json").read_text())
    assert led["engine"]["engine"] == "spark" and led["seeded"] is True
