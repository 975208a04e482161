"""The Polars engine gives the in-memory results exactly (same seed → same noise), writes the
same public ledger (the engine and the input record are in the private provenance record),
rejects what it cannot do, and the CLI exposes it."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from _engine_cases import CASES, same_tables
from searchveil import KorolovaParams, ZealousParams, make_rng, read_log
from searchveil.cli import app
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.files import file_sha256, parquet_footer_sha256
from searchveil.release import release_kanon, release_korolova, release_zealous
from searchveil.release.run import run_release

FN = {"korolova": release_korolova, "zealous": release_zealous, "kanon": release_kanon}
runner = CliRunner()


@pytest.mark.parametrize("case", range(len(CASES)))
def test_polars_engine_equals_memory(case: int, aol_215_path: Path, aol_top1000_path: Path):
    algo, params = CASES[case]
    for path in (aol_215_path, aol_top1000_path):
        mem = FN[algo](read_log(path), params, rng=make_rng(11))
        eng = run_release("polars", algo, path, params, rng=make_rng(11))
        assert same_tables(mem, eng) == [], (algo, path.name)
        assert eng.inputs[0]["sha256"] == mem.inputs[0]["sha256"]
        assert eng.inputs[0]["rows"] == mem.inputs[0]["rows"]
        assert eng.inputs[0]["users"] == mem.inputs[0]["users"]
        assert eng.figures["engine"]["engine"] == "polars"
        # the public ledger does not say which engine ran (the plan depends on the input)
        drop = ("created_utc",)
        assert {k: v for k, v in eng.ledger.items() if k not in drop} == {
            k: v for k, v in mem.ledger.items() if k not in drop
        }


def test_parquet_input_and_reduction_is_small(tmp_path: Path, aol_top1000) -> None:
    pq = tmp_path / "log.parquet"
    aol_top1000.df.select(
        aol_top1000.df.get_column("user").cast(str).alias("AnonID"),
        aol_top1000.df.get_column("query").alias("Query"),
        aol_top1000.df.get_column("time").dt.strftime("%Y-%m-%d %H:%M:%S").alias("QueryTime"),
        aol_top1000.df.get_column("rank").cast(str).alias("ItemRank"),
        aol_top1000.df.get_column("url").alias("ClickURL"),
    ).sort("AnonID", maintain_order=True).write_parquet(pq)
    algo, params = CASES[0]
    eng = run_release("polars", algo, pq, params, rng=make_rng(2))
    mem = release_korolova(aol_top1000, params, rng=make_rng(2))
    assert eng.report["engine_plan"] == "ordered single pass"
    assert eng.report["query_events_after_bounding"] <= 1000 * params.d
    assert eng.report["clicks_after_bounding"] <= 1000 * params.d_c
    assert same_tables(mem, eng) == []


def test_unsupported_item_type_is_a_typed_error(aol_215_path: Path) -> None:
    p = ZealousParams(m=2, tau=1, lam=1.0, tau_prime=3, item_type="query_pairs",
                      guarantee="indistinguishability")  # fmt: skip
    with pytest.raises(InvalidParameterError, match="item-type"):
        run_release("polars", "zealous", aol_215_path, p, rng=make_rng(1))


@pytest.mark.slow  # ~4 s on 2 cores, its module covered by faster tests: the full tier
def test_cli_engine_option(tmp_path: Path, aol_top1000_path: Path) -> None:
    out_m, out_p = tmp_path / "m", tmp_path / "p"
    base = ["release", "kanon", str(aol_top1000_path), "--k", "5", "--seed", "3", "--json"]
    r1 = runner.invoke(app, [*base, "--out", str(out_m)])
    r2 = runner.invoke(app, [*base, "--out", str(out_p), "--engine", "polars"])
    assert r1.exit_code == 0 and r2.exit_code == 0, (r1.output, r2.output)
    assert (out_m / "queries.tsv").read_text() == (out_p / "queries.tsv").read_text()
    assert (
        json.loads((tmp_path / "p.private.json").read_text())["figures"]["engine"]["engine"]
        == "polars"
    )
    assert "engine" not in json.loads((out_p / "ledger.json").read_text())
    bad = tmp_path / "bad"
    for extra in (["--engine", "flink"], ["--engine", "polars", "--encoding", "latin-1"]):
        r = runner.invoke(app, [*base, "--out", str(bad), *extra])
        assert r.exit_code == 2 and not bad.exists(), r.output


def test_engines_refuse_random_bounding(tmp_path: Path, aol_215_path: Path) -> None:
    """The engines keep the first contributions; --bounding random is refused, not ignored."""
    out = tmp_path / "r"
    r = runner.invoke(app, ["release", "korolova", str(aol_215_path), "--out", str(out),
                            "--epsilon", "2.3", "--delta", "1e-5", "--max-queries", "2",
                            "--engine", "polars", "--bounding", "random"])  # fmt: skip
    assert r.exit_code == 2 and "bounding" in r.output and not out.exists(), r.output
    p = KorolovaParams(d=2, K=2, b=1.0, b_q=1.0, strategy="random")
    with pytest.raises(InvalidParameterError, match="bounding"):
        run_release("polars", "korolova", aol_215_path, p, rng=make_rng(1))


def test_engine_ledger_and_report(tmp_path: Path, aol_top1000_path: Path) -> None:
    out = tmp_path / "k"
    r = runner.invoke(app, ["release", "korolova", str(aol_top1000_path), "--out", str(out),
                            "--epsilon", "2.3", "--delta", "1e-5", "--max-queries", "5",
                            "--engine", "polars", "--json", "--no-normalize"])  # fmt: skip
    assert r.exit_code == 0, r.output
    led = json.loads((out / "ledger.json").read_text())
    assert led["seeded"] is False and "engine" not in led and "inputs" not in led
    prov = json.loads((tmp_path / "k.private.json").read_text())
    assert prov["figures"]["engine"]["mode"] == "ordered single pass"
    assert prov["inputs"][0]["users"] == 1000 and prov["inputs"][0]["queries_normalized"] is False


def _tiny_parquet(path: Path, shift: int = 0, first_user: int = 1) -> Path:
    """A small user-sorted AOL-layout Parquet file (no shared data needed)."""
    users = [u for u in range(first_user, first_user + 40) for _ in range(6)]
    pl.DataFrame(
        {
            "AnonID": users,
            "Query": [f"Query {(u * 7 + i + shift) % 9}" for i, u in enumerate(users)],
            "QueryTime": [f"2006-03-01 00:{i % 60:02d}:00" for i in range(len(users))],
            "ItemRank": [None] * len(users),
            "ClickURL": [None] * len(users),
        },
        schema_overrides={"ItemRank": pl.Int64, "ClickURL": pl.String},
    ).write_parquet(path, row_group_size=100)
    return path


def test_fast_fingerprint_hashes_the_footer_and_the_ledger_says_so(tmp_path: Path) -> None:
    pq = _tiny_parquet(tmp_path / "log.parquet")
    params = KorolovaParams(d=3, K=3, b=0.5, b_q=1.0, url_selection="none")
    full = run_release("polars", "korolova", pq, params, rng=make_rng(5))
    fast = run_release("polars", "korolova", pq, params, rng=make_rng(5), fingerprint="fast")
    assert full.inputs[0]["fingerprint"] == "full"
    assert full.inputs[0]["sha256"] == file_sha256(pq)
    assert fast.inputs[0]["fingerprint"] == "fast"
    assert fast.inputs[0]["sha256"] == parquet_footer_sha256(pq) != file_sha256(pq)
    assert full.tables["queries"].height > 0
    assert fast.tables["queries"].equals(full.tables["queries"])  # same release, same seed
    # other data -> other footer statistics -> another fast fingerprint
    other = _tiny_parquet(tmp_path / "other.parquet", first_user=2)
    assert parquet_footer_sha256(other) != parquet_footer_sha256(pq)
    # the documented limit: data pages with the same sizes and statistics (here the queries
    # permuted within their range) are not seen by the footer hash, only by the full one
    same_footer = _tiny_parquet(tmp_path / "permuted.parquet", shift=1)
    assert parquet_footer_sha256(same_footer) == parquet_footer_sha256(pq)
    assert file_sha256(same_footer) != file_sha256(pq)
    # fast is Parquet only; unknown modes and non-Parquet bytes are typed errors
    tsv = tmp_path / "log.tsv"
    tsv.write_text("AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n1\ta\t2006-03-01 00:00:00\t\t\n")
    with pytest.raises(InvalidParameterError, match="fingerprint"):
        run_release("polars", "korolova", tsv, params, rng=make_rng(5), fingerprint="fast")
    with pytest.raises(InvalidParameterError, match="fingerprint"):
        run_release("polars", "korolova", pq, params, rng=make_rng(5), fingerprint="medium")
    fake = tmp_path / "fake.parquet"
    fake.write_bytes(b"not parquet at all, just text")
    with pytest.raises(InputFormatError, match="Parquet"):
        parquet_footer_sha256(fake)


def test_cli_fingerprint_option(tmp_path: Path) -> None:
    pq = _tiny_parquet(tmp_path / "log.parquet")
    base = ["release", "korolova", str(pq), "--epsilon", "2.3", "--delta", "1e-3",
            "--max-queries", "3", "--seed", "1", "--json"]  # fmt: skip
    r = runner.invoke(app, [*base, "--out", str(tmp_path / "f"), "--engine", "polars",
                            "--fingerprint", "fast"])  # fmt: skip
    assert r.exit_code == 0, r.output
    prov = json.loads((tmp_path / "f.private.json").read_text())
    assert prov["inputs"][0]["fingerprint"] == "fast"
    bad = tmp_path / "bad"
    r = runner.invoke(
        app, [*base, "--out", str(bad), "--fingerprint", "fast", "--engine", "memory"]
    )
    assert r.exit_code == 2 and "fingerprint" in r.output and not bad.exists(), r.output


def test_release_command_starts_without_the_plotting_and_spark_stacks() -> None:
    """Start-up (issue 17): ``searchveil release ...`` imports only its own command module."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from searchveil.cli import main\n"
        "sys.argv = ['searchveil', 'release', 'korolova', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('matplotlib', 'scipy.stats', 'pyspark', 'searchveil.cli.attack_ads')"
        " if m in sys.modules]\n"
        "print('HEAVY', heavy,)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "--fingerprint" in r.stdout  # the command's help was printed
    assert "HEAVY []" in r.stdout, r.stdout[-500:]
