"""Chapter-6 experiments and the ``searchveil attack`` CLI: result layout (Table 6.1 keys
``f1_f2``/``f2_f3``, Table 6.2 simulated beside the formulas), the HTML sections, the run
record (not a DP release, seeded), errors exit 2 and write nothing; Table 6.2's simulated
Random f_s at the thesis's n = 100,000."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from searchveil.attacks.lookahead.attack import run_attack
from searchveil.attacks.lookahead.experiments import graph_fingerprint, run_lookahead_experiments
from searchveil.attacks.lookahead.graphs import power_law_graph
from searchveil.attacks.lookahead.report import lookahead_sections
from searchveil.attacks.lookahead.theory import THESIS_TABLE_6_2, independent_random_fraction
from searchveil.attacks.record import run_record
from searchveil.cli import app
from searchveil.errors import InvalidParameterError
from searchveil.io.graphs import read_edge_list
from searchveil.rng import make_rng

DATA = Path(__file__).parent / "data" / "attacks"
TINY = DATA / "two_triangles_and_tail.txt"
runner = CliRunner()


def _run(args: list[object]):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def small_result() -> dict:
    return run_lookahead_experiments(
        rng=make_rng(3),
        n=600,
        dmin=3,
        real_graphs={"tiny": TINY},
        lookaheads=(1, 2, 3),
        table_6_1_nodes=None,
    )


def test_result_layout(small_result: dict) -> None:
    r = small_result
    assert [row["coverage"] for row in r["table_6_1"]] == [0.7, 0.8, 0.9, 0.95, 0.99]
    for row in r["table_6_1"]:
        assert row["f1_f2"] == pytest.approx(row["f1"] / row["f2"])
        assert row["f2_f3"] == pytest.approx(row["f2"] / row["f3"])
        assert row["f1"] >= row["f2"] >= row["f3"] > 0  # more lookahead never needs more
    for row in r["table_6_2"]:
        assert row["random_fs"] is not None and row["highest_fs"] is not None
        assert row["highest_fs"] <= row["random_fs"]
        assert row["thesis"] == THESIS_TABLE_6_2[row["epsilon"]]
    runs = r["synthetic"]["runs"]
    assert set(runs) == {"benchmark", "greedy", "highest", "random", "crawler"}
    bench = runs["benchmark"]["1"]["curve"]
    rand = runs["random"]["1"]["curve"]
    assert all(b["bribes"] <= q["bribes"] for b, q in zip(bench, rand, strict=True))
    tiny = r["real"]["tiny"]
    assert tiny["graph"]["nodes"] == 11 and tiny["graph"]["edges"] == 11
    json.dumps(r)  # JSON-able as is


def test_sections_and_record(small_result: dict) -> None:
    parts = lookahead_sections(small_result)
    html = "\n".join(parts)
    for text in ("Table 6.1", "Table 6.2", "tiny", "not a differentially private release"):
        assert text in html
    assert html.count("data:image/png;base64,") == 4  # two figures for synthetic, two for tiny
    rec = run_record(small_result, make_rng(3), command="reproduce")
    assert rec["notion"].startswith("none") and rec["epsilon"] is None
    assert rec["seeded"] is True and rec["for_release"] is False
    names = [i["source"] for i in rec["public_inputs"]]
    assert names == ["synthetic-1", "tiny"]
    assert len(rec["public_inputs"][0]["sha256"]) == 64


def test_seeded_experiments_repeat() -> None:
    kw = {"n": 300, "dmin": 2, "strategies": ("random",), "table_6_1_nodes": None}
    a = run_lookahead_experiments(rng=make_rng(8), **kw)
    b = run_lookahead_experiments(rng=make_rng(8), **kw)
    for ell in ("1", "2", "3"):  # everything but the timings
        ra, rb = a["synthetic"]["runs"]["random"][ell], b["synthetic"]["runs"]["random"][ell]
        assert ra["curve"] == rb["curve"]
    assert (
        a["synthetic"]["graphs"][0]["fingerprint_sha256"]
        == (b["synthetic"]["graphs"][0]["fingerprint_sha256"])
    )


def test_table_6_1_on_its_own_graphs() -> None:
    r = run_lookahead_experiments(
        rng=make_rng(5), n=300, dmin=2, strategies=("highest",), table_6_1_nodes=3000
    )
    assert [g["nodes"] for g in r["table_6_1_graphs"]] == [3000]
    for row in r["table_6_1"]:
        assert row["nodes"] == 3000
        assert row["bribes"][0] == pytest.approx(row["f1"] * 3000)
        assert row["f1_f2_main"] is not None  # the main graphs' factors are kept too
    rec = run_record(r, make_rng(5), command="reproduce")
    assert [i["source"] for i in rec["public_inputs"]] == ["synthetic-1", "table-6.1-1"]


def test_experiment_parameter_errors() -> None:
    with pytest.raises(InvalidParameterError, match="nodes"):
        run_lookahead_experiments(rng=make_rng(0), n=50)
    with pytest.raises(InvalidParameterError, match="nodes"):
        run_lookahead_experiments(rng=make_rng(0), n=120, dmin=12)  # ⌊√120⌋ = 10 < 12
    with pytest.raises(InvalidParameterError, match="strategy"):
        run_lookahead_experiments(rng=make_rng(0), n=200, strategies=("best",))


def test_table_6_2_random_fs_at_thesis_size() -> None:
    """Uniform-Random at n = 100,000, α = 3, d_min = 5, lookahead 1: the simulated f_s is
    the thesis's (0.103, 0.183, 0.259) and our limit formula's, to within sampling noise."""
    g = power_law_graph(100_000, 3.0, 5, make_rng(2012))
    r = run_attack(g, strategy="random", lookahead=1, rng=make_rng(6), target_coverage=0.9)
    for eps in (0.4, 0.2, 0.1):
        f = r.fraction_needed(1 - eps)
        assert f is not None
        assert abs(f - THESIS_TABLE_6_2[eps]["random_fs"]) < 0.006
        assert abs(f - independent_random_fraction(eps, alpha=3.0, dmin=5, dmax=316)) < 0.006


def test_real_graph_reader_is_the_shared_one(wiki_vote_path: Path) -> None:
    g = read_edge_list(wiki_vote_path, undirected=True)
    assert g.n_nodes == 7115 and g.n_edges == 100_762
    ks = []
    for ell in (1, 2, 3):
        r = run_attack(g, strategy="highest", lookahead=ell, rng=make_rng(1), target_coverage=0.9)
        ks.append(r.bribes_needed(0.9))
    assert ks[0] > 10 * ks[1] and ks[1] > ks[2]  # steep drop with lookahead, as in Fig 6.5


def test_facebook_graph(facebook_path: Path) -> None:
    g = read_edge_list(facebook_path, undirected=True)
    r = run_attack(g, strategy="crawler", lookahead=2, rng=make_rng(1), target_coverage=0.9)
    assert r.final_coverage >= 0.9 and r.bribed.size < 0.01 * g.n_nodes
    assert len(graph_fingerprint(g)) == 64


# -- CLI ------------------------------------------------------------------------------------------
@pytest.mark.slow  # ~4 s on 2 cores, its module covered by faster tests: the full tier
def test_cli_reproduce_writes_report_and_record(tmp_path: Path) -> None:
    report = tmp_path / "attacks.html"
    r = _run(
        ["attack", "reproduce", "--report", report, "--nodes", 400, "--dmin", 3, "--seed", 1,
         "--real-graph", f"tiny={TINY}", "--strategies", "highest,random,crawler", "--json",
         "--table61-nodes", 0, "--fig62-nodes", "400,1600", "--ads-epsilon", "1,4",
         "--ads-population", 3000, "--ads-targets", 5]
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    # chapter 2's ads table rides along: every policy (a)-(d) measured, (d) at each swept ε
    policies = {row["policy"] for row in res["ads"]["blueprint"]}
    assert len(policies) >= 4, policies
    assert "Ad-targeting inference" in report.read_text()
    assert {"f1_f2", "f2_f3"} <= set(res["table_6_1"][0])
    assert [row["nodes"] for row in res["fig_6_2"]] == [400, 1600]
    k = [row["bribes"]["0.9"] for row in res["fig_6_2"]]
    assert 0 < k[0] <= k[1]  # more nodes, more bribes (linear in n, §6.3.1.3)
    assert report.exists() and "Table 6.1" in report.read_text()
    rec = json.loads((tmp_path / "attacks.run.json").read_text())
    assert rec["seeded"] is True and rec["parameters"]["n"] == 400
    assert [i["source"] for i in rec["public_inputs"]] == [
        "synthetic-1",
        "fig-6.2-n400",
        "fig-6.2-n1600",
        "tiny",
    ]
    assert "Fig 6.2" in report.read_text()
    human = _run(["attack", "reproduce", "--nodes", 300, "--dmin", 2, "--seed", 2, "--strategies",
                  "highest", "--lookaheads", "1,2,3", "--table61-nodes", 1000,
                  "--fig62-nodes", "", "--ads-epsilon", ""])  # fmt: skip
    assert human.exit_code == 0, human.output
    assert "Table 6.1" in human.stdout and "112.3" in human.stdout


def test_cli_lookahead(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    r = _run(
        ["attack", "lookahead", "--graph", TINY, "--lookahead", 1, "--strategy", "benchmark",
         "--coverage", 1.0, "--out", out, "--json"]
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    # ball_1(3) = {1,2,3,4}, ball_1(6) = {4,5,6,7}, then {8,9} and {10,11}
    assert res["bribes"] == 4 and res["final_coverage"] == 1.0
    rec = json.loads(out.read_text())
    assert rec["seeded"] is False and rec["public_inputs"][0]["file"] == TINY.name
    g = _run(["attack", "lookahead", "--nodes", 500, "--dmin", 3, "--lookahead", 2,
              "--strategy", "Uniform-Random", "--seed", 4])  # fmt: skip
    assert g.exit_code == 0, g.output
    assert "Uniform-Random" in g.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["attack", "lookahead", "--lookahead", 1, "--strategy", "random"],  # no graph
        [
            "attack",
            "lookahead",
            "--nodes",
            300,
            "--graph",
            TINY,
            "--lookahead",
            1,
            "--strategy",
            "random",
        ],  # fmt: skip
        ["attack", "lookahead", "--nodes", 300, "--strategy", "random"],  # no lookahead
        ["attack", "lookahead", "--nodes", 300, "--lookahead", 1],  # no strategy
        [
            "attack",
            "lookahead",
            "--graph",
            DATA / "malformed.txt",
            "--lookahead",
            1,
            "--strategy",
            "random",
        ],  # fmt: skip
        [
            "attack",
            "lookahead",
            "--nodes",
            300,
            "--lookahead",
            1,
            "--strategy",
            "random",
            "--coverage",
            1.5,
        ],  # fmt: skip
        ["attack", "reproduce", "--nodes", 50],
        ["attack", "lookahead", "--nodes", 10**10, "--lookahead", 1, "--strategy", "random"],
        ["attack", "reproduce", "--nodes", 300, "--real-graph", "nofile"],
        ["attack", "reproduce", "--nodes", 300, "--lookaheads", "1,x"],
        ["attack", "reproduce", "--nodes", 300, "--fig62-nodes", "10"],
    ],
)
def test_cli_errors_exit_2_and_write_nothing(tmp_path: Path, args: list[object]) -> None:
    out = tmp_path / "rec.json"
    r = _run([*args, "--out", out])
    assert r.exit_code == 2, r.output
    assert "error" in r.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_cli_report_path_errors(tmp_path: Path) -> None:
    r = _run(["attack", "reproduce", "--nodes", 300, "--report", tmp_path])
    assert r.exit_code == 2
    r = _run(["attack", "reproduce", "--nodes", 300, "--report", tmp_path / "x.txt"])
    assert r.exit_code == 2 and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_benchmark_beats_highest_at_thesis_size() -> None:
    """n = 100,000 (§6.3.1.2): Benchmark-Greedy needs no more bribes than Highest-Degree at
    lookahead 2 (it is the benchmark), and Highest ≈ Benchmark below 90% coverage."""
    g = power_law_graph(100_000, 3.0, 5, make_rng(1))
    b = run_attack(g, strategy="benchmark", lookahead=2, rng=make_rng(2), target_coverage=0.95)
    h = run_attack(g, strategy="highest", lookahead=2, rng=make_rng(2), target_coverage=0.95)
    for c in (0.5, 0.8, 0.9, 0.95):
        kb, kh = b.bribes_needed(c), h.bribes_needed(c)
        assert kb is not None and kh is not None and kb <= kh
    assert h.bribes_needed(0.8) <= 1.3 * b.bribes_needed(0.8)


def test_common_random_numbers_make_lookahead_monotone() -> None:
    """Each strategy reuses its randomness across lookaheads: more lookahead never needs more
    bribes for the fixed-order strategies (Random, Highest): the same order, larger balls."""
    r = run_lookahead_experiments(
        rng=make_rng(12), n=800, dmin=2, strategies=("random", "highest"), table_6_1_nodes=None
    )
    for s in ("random", "highest"):
        runs = r["synthetic"]["runs"][s]
        for c in range(len(runs["1"]["curve"])):
            k = [runs[e]["curve"][c]["bribes"] for e in ("1", "2", "3")]
            assert k[0] >= k[1] >= k[2], (s, k)


def test_docs_python_example_runs() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "attacks.md").read_text(encoding="utf-8")
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(compile(code, "docs/attacks.md", "exec"), scope)  # noqa: S102 - our own doc example
    assert scope["run"].bribes_needed(0.8) is not None
    assert any("Table 6.1" in part for part in scope["parts"])
