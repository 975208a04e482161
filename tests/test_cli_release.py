"""CLI: release korolova|zealous|kanon, params. Bad parameters exit 2 and write nothing."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchveil.cli import app

runner = CliRunner()


def _run(args: list[str]):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def test_korolova_cli_writes_release(tmp_path: Path, aol_215_path: Path) -> None:
    out = tmp_path / "rel"
    r = _run(
        ["release", "korolova", aol_215_path, "--out", out, "--epsilon", "3", "--delta", "1e-4",
         "--max-queries", "2", "--max-clicks", "2", "--seed", "1", "--json"]
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    led = json.loads((out / "ledger.json").read_text())
    assert res["epsilon"] == led["epsilon"] <= 3.0 and led["delta"] <= 1e-4
    assert led["parameters"]["epsilon_split_weights"] == [1.0, 1.0, 1.0, 1.0]
    assert led["parameters"]["url_selection"] == "private"
    assert (out / "queries.tsv").exists() and (out / "clicks.tsv").exists()
    assert led["seeded"] is True and led["for_release"] is False


def test_korolova_cli_advanced_and_parquet(tmp_path: Path, aol_215_path: Path) -> None:
    out = tmp_path / "adv"
    r = _run(
        ["release", "korolova", aol_215_path, "--out", out, "--max-queries", "3", "--K", "3",
         "--b", "0.5", "--bq", "1", "--output-format", "parquet", "--seed", "2", "--json"]
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    led = json.loads((out / "ledger.json").read_text())
    assert led["parameters"]["K"] == 3.0 and (out / "queries.parquet").exists()
    assert led["epsilon"] > 0 and led["delta"] > 0


def test_korolova_cli_serp(tmp_path: Path, aol_215_path: Path) -> None:
    serp = tmp_path / "serp.tsv"
    serp.write_text("google\t1\thttp://www.google.com/\n", encoding="utf-8")
    out = tmp_path / "s"
    r = _run(
        ["release", "korolova", aol_215_path, "--out", out, "--max-queries", "3", "--K", "3",
         "--b", "0.3", "--bq", "1", "--max-clicks", "3", "--bc", "1", "--serp", serp,
         "--seed", "3", "--json"]
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    led = json.loads((out / "ledger.json").read_text())
    assert led["parameters"]["url_selection"] == "serp"
    # the public SERP by its name and hash (not its path: where it is kept is not published)
    (rec,) = led["public_inputs"]
    assert rec == {"role": "serp", "file": "serp.tsv", "sha256": rec["sha256"], "rows": 1}
    assert str(serp) not in (out / "ledger.json").read_text()


BAD_KOROLOVA = [
    [],  # no ε
    ["--epsilon", "1"],  # no δ
    ["--epsilon", "0", "--delta", "1e-5"],
    ["--epsilon", "-1", "--delta", "1e-5"],
    ["--epsilon", "1", "--delta", "1"],
    ["--epsilon", "1", "--delta", "0"],
    ["--epsilon", "1", "--delta", "1e-5", "--split", "1,2,3"],
    ["--epsilon", "1", "--delta", "1e-5", "--threshold-rule", "guess"],
    ["--K", "2", "--b", "1", "--bq", "1"],  # K < d = 5
    ["--K", "9", "--b", "1"],  # missing b_q
    ["--K", "9", "--b", "1", "--bq", "1", "--epsilon", "0.5", "--delta", "1e-5"],  # over budget
    ["--epsilon", "1", "--delta", "1e-5", "--urls", "serp", "--max-clicks", "2"],  # no SERP
]


@pytest.mark.parametrize("extra", BAD_KOROLOVA)
def test_korolova_bad_params_exit_2_nothing_written(
    tmp_path: Path, aol_215_path: Path, extra: list[str]
) -> None:
    out = tmp_path / "never"
    r = _run(["release", "korolova", aol_215_path, "--out", out, "--max-queries", "5", *extra])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_missing_max_queries_exit_2(tmp_path: Path, aol_215_path: Path) -> None:
    r = _run(["release", "korolova", aol_215_path, "--out", tmp_path / "x", "--epsilon", "1",
              "--delta", "1e-5"])  # fmt: skip
    assert r.exit_code == 2 and not (tmp_path / "x").exists()


def test_existing_output_refused(tmp_path: Path, aol_215_path: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    args = ["release", "kanon", aol_215_path, "--out", out, "--k", "3", "--seed", "1"]
    r = _run(args)
    assert r.exit_code == 2 and (out / "keep.txt").exists()
    # issue 30: --overwrite replaces only a complete searchveil release, never keep.txt
    r = _run([*args, "--overwrite", "--json"])
    assert r.exit_code == 2 and "complete searchveil release" in r.output
    assert (out / "keep.txt").read_text() == "x"
    (out / "keep.txt").unlink()
    assert _run([*args, "--json"]).exit_code == 0  # an empty directory is used as it is
    r = _run([*args, "--overwrite", "--json"])
    assert r.exit_code == 0, r.output
    assert (out / "log.tsv").exists()


def test_zealous_cli(tmp_path: Path, aol_215_path: Path) -> None:
    out = tmp_path / "z"
    r = _run(
        ["release", "zealous", aol_215_path, "--out", out, "--epsilon", "1", "--delta", "1e-5",
         "--max-items", "2", "--item-type", "clicks", "--max-users", "1000", "--seed", "1",
         "--json"]
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    led = json.loads((out / "ledger.json").read_text())
    assert led["epsilon"] <= 1 and led["delta"] <= 1e-5
    assert led["outputs"]["items"]["columns"] == ["item", "query", "url", "noisy_count"]
    assert led["parameters"]["tau"] == 4  # Proposition 4: ⌈2m/ε⌉


@pytest.mark.parametrize(
    "extra",
    [
        ["--epsilon", "1", "--delta", "1e-5", "--max-items", "2"],  # no --max-users
        ["--epsilon", "1", "--delta", "1e-5", "--max-users", "1000"],  # no m
        ["--delta", "1e-5", "--max-items", "2", "--max-users", "1000"],  # no ε
        ["--epsilon", "1", "--delta", "1e-5", "--max-items", "2", "--max-users", "10"],  # U < n
        ["--epsilon", "1", "--delta", "2", "--max-items", "2", "--max-users", "1000"],
        [
            "--epsilon",
            "1",
            "--delta",
            "1e-5",
            "--max-items",
            "2",
            "--max-users",
            "1000",
            "--item-type",
            "sessions",
        ],  # fmt: skip
    ],
)
def test_zealous_bad_params(tmp_path: Path, aol_215_path: Path, extra: list[str]) -> None:
    out = tmp_path / "z"
    r = _run(["release", "zealous", aol_215_path, "--out", out, *extra])
    assert r.exit_code == 2, r.output
    assert not out.exists()


def test_kanon_cli_requires_k(tmp_path: Path, aol_215_path: Path) -> None:
    r = _run(["release", "kanon", aol_215_path, "--out", tmp_path / "k"])
    assert r.exit_code == 2 and not (tmp_path / "k").exists()
    r = _run(["release", "kanon", aol_215_path, "--out", tmp_path / "k", "--k", "0"])
    assert r.exit_code == 2 and not (tmp_path / "k").exists()


def test_params_korolova_prints_table_4_1() -> None:
    r = _run(["params", "korolova", "--exp-epsilon", "10", "--delta", "1e-5", "--max-queries",
              "1,5,10,20,40,80,160", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert [f"{x['K_paper']:.2f}" for x in rows] == [
        "5.70", "31.99", "66.99", "140.00", "292.04", "608.16", "1264.49"
    ]  # fmt: skip
    assert [f"{x['b']:.2f}" for x in rows] == [
        "0.43", "2.17", "4.34", "8.69", "17.37", "34.74", "69.49"
    ]  # fmt: skip
    assert all(x["K_exact_discrete"] <= math.ceil(x["K_paper"]) for x in rows)


def test_params_korolova_report_and_curve() -> None:
    r = _run(["params", "korolova", "--max-queries", "20", "--K", "140", "--b", "8.69",
              "--keep-curve", "200", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    row = res["rows"][0]
    assert row["paper_delta"] == pytest.approx(10 * math.exp(-120 / 8.69))
    assert row["exact_delta"] < row["paper_delta_improved_4_8"] < row["paper_delta"]
    assert res["keep_curve"][170]["continuous"] > 0.98
    assert res["keep_curve"][110]["continuous"] < 0.02


def test_params_zealous_tables() -> None:
    r = _run(["params", "zealous", "--epsilon", "1", "--delta", "0.01", "--max-items", "2",
              "--tau", "1,3,4,5,7,9", "--max-users", "5000000", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert [f"{x['tau_prime']:.1f}" for x in json.loads(r.stdout)["rows"]] == [
        "81.1", "78.7", "78.6", "78.7", "79.3", "80.3"
    ]  # fmt: skip
    r = _run(["params", "zealous", "--max-items", "5", "--tau", "1", "--lambda", "1,5",
              "--tau-prime", "100,200", "--max-users", "500000", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["rows"]
    assert [f"{x['delta_thm3']:.1e}" for x in rows] == ["1.3e-37", "4.7e-81", "3.1e-03", "6.5e-12"]
    assert [f"{x['delta_prime_thesis']:.1e}" for x in rows] == [
        "1.4e-41", "5.1e-85", "1.4e-08", "2.9e-17"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ["params", "korolova", "--epsilon", "0", "--delta", "1e-5", "--max-queries", "5"],
        ["params", "korolova", "--epsilon", "1", "--max-queries", "5"],
        ["params", "korolova", "--epsilon", "1", "--delta", "1e-5", "--max-queries", "x"],
        ["params", "zealous", "--epsilon", "1", "--delta", "0.01", "--max-items", "2"],
        ["params", "korolova", "--max-queries", "5", "--K", "3", "--b", "1"],
    ],
)
def test_params_bad_input_exit_2(args: list[str]) -> None:
    r = _run(args)
    assert r.exit_code == 2, r.output


def _without_time(led: dict) -> dict:
    return {k: v for k, v in led.items() if k != "created_utc"}


@pytest.mark.parametrize("urls", ["serp", "private"])
def test_cli_ledger_equals_python_api_ledger(tmp_path: Path, aol_215_path: Path, urls) -> None:
    """The CLI adds nothing to a ledger: the same seeded release from the Python API writes the
    same ledger.json (split weights, threshold rule, budget, SERP provenance included)."""
    from searchveil.io.ledger import read_ledger
    from searchveil.io.readers import read_log
    from searchveil.release import KorolovaParams, release_korolova, write_release
    from searchveil.release.korolova import load_serp
    from searchveil.rng import make_rng

    serp = tmp_path / "serp.tsv"
    serp.write_text("google\t1\thttp://www.google.com/\nyahoo\t1\thttp://www.yahoo.com/\n")
    out = tmp_path / "cli"
    args = ["release", "korolova", aol_215_path, "--out", out, "--epsilon", "4", "--delta",
            "1e-4", "--max-queries", "2", "--max-clicks", "2", "--split", "2,1,1" + (
                ",1" if urls == "private" else ""), "--threshold-rule", "paper",
            "--seed", "7", "--json"]  # fmt: skip
    if urls == "serp":
        args += ["--serp", serp]
    r = _run(args)
    assert r.exit_code == 0, r.output

    split = (2.0, 1.0, 1.0) + ((1.0,) if urls == "private" else ())
    params = KorolovaParams.from_budget(
        epsilon=4.0, delta=1e-4, d=2, url_selection=urls, d_c=2, split=split,
        threshold_rule="paper",
    )  # fmt: skip
    rel = release_korolova(
        read_log(aol_215_path), params, rng=make_rng(7),
        serp=load_serp(serp) if urls == "serp" else None,
    )  # fmt: skip
    write_release(rel, tmp_path / "api")
    cli_led, api_led = read_ledger(out), read_ledger(tmp_path / "api")
    assert _without_time(cli_led) == _without_time(api_led)
    assert api_led["parameters"]["epsilon_split_weights"] == list(split)
    assert api_led["parameters"]["threshold_rule"] == "paper"
    assert api_led["parameters"]["budget"] == {"epsilon": 4.0, "delta": 1e-4}
    if urls == "serp":
        assert api_led["public_inputs"][0]["file"] == "serp.tsv"
        assert len(api_led["public_inputs"][0]["sha256"]) == 64
    else:
        assert api_led["public_inputs"] == []


def test_cli_ledger_equals_python_api_ledger_zealous(tmp_path: Path, aol_215_path: Path) -> None:
    from searchveil.io.ledger import read_ledger
    from searchveil.io.readers import read_log
    from searchveil.release import ZealousParams, release_zealous, write_release
    from searchveil.rng import make_rng

    out = tmp_path / "cli"
    r = _run(
        ["release", "zealous", aol_215_path, "--out", out, "--epsilon", "2", "--delta", "1e-4",
         "--max-items", "2", "--max-users", "1000", "--seed", "5", "--json"]
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    params = ZealousParams.from_budget(
        epsilon=2.0, delta=1e-4, m=2, item_type="queries", guarantee="probabilistic", users=1000
    )
    rel = release_zealous(read_log(aol_215_path), params, rng=make_rng(5))
    write_release(rel, tmp_path / "api")
    assert _without_time(read_ledger(out)) == _without_time(read_ledger(tmp_path / "api"))


def test_python_api_serp_table_is_fingerprinted(aol_215_path: Path) -> None:
    """A SERP given as a bare table is recorded by the SHA-256 of its rows, not as 'given'."""
    import polars as pl

    from searchveil.io.readers import read_log
    from searchveil.release import KorolovaParams, release_korolova
    from searchveil.rng import make_rng

    serp = pl.DataFrame({"query": ["google"], "rank": [1], "url": ["http://www.google.com/"]})
    p = KorolovaParams(d=2, K=3, b=0.5, b_q=1.0, url_selection="serp", d_c=2, b_c=1.0)
    rel = release_korolova(read_log(aol_215_path), p, rng=make_rng(1), serp=serp)
    (rec,) = rel.ledger["public_inputs"]
    assert rec["rows"] == 1 and rec["role"] == "serp" and len(rec["sha256"]) == 64
