"""One library call per release (:func:`searchveil.release.run.release_file`): it reproduces
``searchveil release korolova`` byte for byte under a seed, and a file's format is detected by
its content (:mod:`searchveil.io.formats`), so a gzip file named ``.tsv`` or a Parquet file
without a suffix takes the same path in memory and on the Polars engine."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from searchveil import KorolovaParams, ZealousParams, make_rng, read_log, release_file
from searchveil.cli import app
from searchveil.errors import BudgetExceededError, InputFormatError, InvalidParameterError
from searchveil.io.formats import Container, Layout, container, layout
from searchveil.mechanisms.accounting import Budget
from searchveil.release.kanonymity import KAnonParams

runner = CliRunner()
DROP = ("created_utc",)


def _ledger(path: Path) -> dict:
    led = json.loads(path.read_text())
    return {k: v for k, v in led.items() if k not in DROP}


def _provenance(path: Path) -> dict:
    rec = json.loads(path.read_text())
    rec.pop("created_utc", None)
    rec.pop("release", None)  # names the release directory and its ledger's hash
    # a private float summed over the engine's counts in the order they arrive (not fixed):
    # equal up to the last bits from run to run, on main as here
    su = rec["report"].get("single_user") or {}
    if "expected_single_user_published" in su:
        su["expected_single_user_published"] = float(f"{su['expected_single_user_published']:.12g}")
    return rec


def test_release_file_reproduces_the_cli_byte_for_byte(tmp_path: Path, aol_215_path: Path):
    cli_out, lib_out = tmp_path / "cli", tmp_path / "lib"
    r = runner.invoke(app, ["release", "korolova", str(aol_215_path), "--out", str(cli_out),
                            "--epsilon", "2", "--delta", "1e-5", "--max-queries", "3",
                            "--seed", "7"])  # fmt: skip
    assert r.exit_code == 0, r.output
    # the README's "From Python" call
    params = KorolovaParams.from_budget(epsilon=2, delta=1e-5, d=3, split=(1, 1))
    release_file(aol_215_path, params, rng=make_rng(7), out=lib_out)
    names = sorted(p.name for p in cli_out.iterdir())
    assert names == sorted(p.name for p in lib_out.iterdir()) and "ledger.json" in names
    for name in names:
        if name == "ledger.json":
            assert _ledger(cli_out / name) == _ledger(lib_out / name)
        else:
            assert (cli_out / name).read_bytes() == (lib_out / name).read_bytes(), name
    cli_prov = _provenance(tmp_path / "cli.private.json")
    assert cli_prov == _provenance(tmp_path / "lib.private.json")
    assert cli_prov["figures"]["engine"]["engine"] == "polars"  # auto chose the engine


def test_release_file_checks_the_budget_the_parameters_carry(tmp_path: Path, aol_215_path):
    small = KorolovaParams(d=3, K=20, b=2.0, b_q=3.0, budget=Budget(0.01, 1e-5))
    with pytest.raises(BudgetExceededError):
        release_file(aol_215_path, small, rng=make_rng(1), out=tmp_path / "x")
    assert not (tmp_path / "x").exists()
    with pytest.raises(InvalidParameterError, match="serp"):
        release_file(aol_215_path, KAnonParams(k=3), rng=make_rng(1), serp=object())
    with pytest.raises(InvalidParameterError, match="engine"):
        release_file(aol_215_path, KAnonParams(k=3), rng=make_rng(1), engine="flink")


def _disguised(tmp_path: Path, aol_215_path: Path) -> dict[str, tuple[Path, Path]]:
    """The same log as plain TSV, gzip and Parquet: (a properly named copy, a disguised one —
    gzip named .tsv, Parquet without a suffix)."""
    plain = tmp_path / "plain.tsv"
    shutil.copy(aol_215_path, plain)
    gz, gz_named = tmp_path / "gzipped.tsv", tmp_path / "named.tsv.gz"
    gz.write_bytes(gzip.compress(aol_215_path.read_bytes()))
    shutil.copy(gz, gz_named)
    pq, pq_named = tmp_path / "columns", tmp_path / "named.parquet"
    frame = pl.read_csv(aol_215_path, separator="\t", infer_schema=False, quote_char=None)
    # only the AOL columns, integer user ids: with a SessionID column, or user ids as text, the
    # in-memory Parquet reader and the engines give k-anonymity different query pairs / user
    # pseudonyms (a difference of the readers, not of format detection; not in scope here)
    frame.select(
        pl.col("AnonID").cast(pl.Int64), "Query", "QueryTime", "ItemRank", "ClickURL"
    ).write_parquet(pq)
    shutil.copy(pq, pq_named)
    return {"plain": (plain, plain), "gzip": (gz_named, gz), "parquet": (pq_named, pq)}


def test_the_format_is_detected_by_content(tmp_path: Path, aol_215_path: Path) -> None:
    files = _disguised(tmp_path, aol_215_path)
    assert container(files["plain"][1]) == Container.TEXT
    assert container(files["gzip"][1]) == Container.GZIP
    assert container(files["parquet"][1]) == Container.PARQUET
    assert layout(files["parquet"][1]) == Layout.PARQUET and layout(files["gzip"][1]) == Layout.AOL
    cases = [
        KorolovaParams.from_budget(epsilon=2, delta=1e-5, d=3, split=(1, 1)),
        ZealousParams(
            m=2, tau=1, lam=1.0, tau_prime=3, item_type="queries", guarantee="indistinguishability"
        ),  # fmt: skip
        KAnonParams(k=3),
    ]
    for params in cases:
        for kind, (named, path) in files.items():
            # the reference: the properly named file in memory
            ref = release_file(named, params, rng=make_rng(3), engine="memory")
            mem = release_file(path, params, rng=make_rng(3), engine="memory")
            eng = release_file(path, params, rng=make_rng(3), engine="polars")
            auto = release_file(path, params, rng=make_rng(3))
            assert auto.figures["engine"]["engine"] == "polars", kind
            for rel in (mem, eng, auto):
                assert rel.tables.keys() == ref.tables.keys()
                for name, df in ref.tables.items():
                    assert rel.tables[name].equals(df), (kind, name)
                assert {k: v for k, v in rel.ledger.items() if k not in DROP} == {
                    k: v for k, v in ref.ledger.items() if k not in DROP
                }, kind
            assert eng.inputs[0]["format"] == mem.inputs[0]["format"], kind
            assert eng.inputs[0]["sha256"] == mem.inputs[0]["sha256"], kind


def test_a_text_file_named_parquet_is_refused_in_the_users_terms(tmp_path: Path, aol_215_path):
    fake = tmp_path / "log.parquet"
    shutil.copy(aol_215_path, fake)
    params = KAnonParams(k=3)
    for engine in ("memory", "polars"):
        with pytest.raises(InputFormatError, match="not a Parquet file"):
            release_file(fake, params, rng=make_rng(1), engine=engine)
    assert read_log(fake, fmt="aol").n_users == 215  # an explicit --format is honoured
