"""CLI: ``searchveil social recommend | accuracy | reproduce`` (Korolova thesis ch. 5)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from searchveil.cli import app

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.fixture()
def small_graph(tmp_path):
    gen = np.random.default_rng(4)
    lines = ["# tiny test graph", "# FromNodeId\tToNodeId"]
    for i, j in itertools.combinations(range(40), 2):
        if gen.random() < 0.12:
            lines.append(f"{100 + i}\t{100 + j}")
    p = tmp_path / "g.txt"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_accuracy_thesis_example():
    r = _run(
        "social",
        "accuracy",
        "--nodes",
        400000000,
        "--c",
        0.99,
        "--k",
        100,
        "--t",
        150,
        "--epsilon",
        0.1,
    )
    assert r.exit_code == 0, r.output
    assert "0.46" in r.output
    r = _run(
        "social",
        "accuracy",
        "--nodes",
        400000000,
        "--c",
        0.99,
        "--k",
        100,
        "--t",
        150,
        "--epsilon",
        0.1,
        "--json",
    )
    d = json.loads(r.output)
    assert d["accuracy_upper_bound_2dp"] == "0.46"
    assert d["accuracy_upper_bound"] == pytest.approx(0.45766, abs=1e-5)


def test_accuracy_bad_parameter_exits_2():
    r = _run("social", "accuracy", "--nodes", 100, "--c", 2, "--k", 1, "--t", 1, "--epsilon", 1)
    assert r.exit_code == 2
    assert "c" in r.output


@pytest.mark.parametrize("mechanism", ["exponential", "laplace", "permute_and_flip", "smoothing"])
def test_recommend_writes_release_and_ledger(small_graph, tmp_path, mechanism):
    out = tmp_path / f"rec-{mechanism}"
    r = _run(
        "social",
        "recommend",
        "--graph",
        small_graph,
        "--out",
        out,
        "--epsilon",
        1,
        "--mechanism",
        mechanism,
        "--utility",
        "wp",
        "--gamma",
        "0.05",
        "--degree-bound",
        30,
        "--all-targets",
        "--public-node-set",
        "--seed",
        1,
        "--json",
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["targets"] == d["private"]["graph"]["nodes"] == d["universe"]["nodes"]
    rows = (out / "recommendations.tsv").read_text().splitlines()
    assert rows[0] == "target\trecommended"
    led = json.loads((out / "ledger.json").read_text())
    # ε per target ≤ 1; the release's ε (edges incident to no target) composes the targets'
    each = led["events"][0]["epsilon_each"]
    assert each <= 1.0 and led["seeded"] is True and led["for_release"] is False
    assert led["relation"] == "edge-outside-targets"
    assert led["epsilon"] == pytest.approx(each * d["targets"])
    assert led["parameters"]["l1_sensitivity"] == pytest.approx(1 + 0.05 * 57)
    # public: the node universe (its size and the hash of its ids), never the graph's hash or
    # edge count, which are in the private provenance record beside the release
    (uni,) = led["public_inputs"]
    assert uni["role"] == "node universe" and uni["nodes"] == d["universe"]["nodes"]
    prov = json.loads((tmp_path / f"rec-{mechanism}.private.json").read_text())
    assert prov["inputs"][0]["sha256"] not in (out / "ledger.json").read_text()
    assert prov["inputs"][0]["edges"] == d["private"]["graph"]["edges"]
    assert "edges" not in json.dumps(led["parameters"])
    # a recommendation is never the target itself nor one of its neighbours
    edges = {
        tuple(sorted(map(int, ln.split())))
        for ln in small_graph.read_text().splitlines()
        if not ln.startswith("#")
    }
    for ln in rows[1:]:
        t, rec = map(int, ln.split("\t"))
        assert t != rec and tuple(sorted((t, rec))) not in edges


def test_recommend_errors_write_nothing(small_graph, tmp_path):
    out = tmp_path / "rec"
    base = (
        "social",
        "recommend",
        "--graph",
        small_graph,
        "--out",
        out,
        "--epsilon",
        1,
        "--mechanism",
        "exponential",
        "--public-node-set",
    )
    assert _run(*base[:-1], "--target", 100).exit_code == 2  # no public node universe
    assert _run(*base, "--target", 100, "--nodes", 200).exit_code == 2  # two universes
    assert _run(*base[:-1], "--target", 100, "--nodes", 120).exit_code == 2  # edge outside it
    assert _run(*base, "--target", 100, "--target", 100).exit_code == 2  # a target twice
    assert _run(*base, "--target", 99999).exit_code == 2
    assert _run(*base).exit_code == 2  # no target
    assert (
        _run(
            *base, "--target", 100, "--utility", "wp", "--gamma", "0.05", "--degree-bound", 2
        ).exit_code
        == 2
    )  # graph exceeds the declared bound
    assert _run(*base[:-3], "--mechanism", "magic", "--target", 100).exit_code == 2
    assert (
        _run(*base[:-5], "--epsilon", 0, "--mechanism", "exponential", "--target", 100).exit_code
        == 2
    )
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".rec")]


def test_reproduce_small_graph(small_graph, tmp_path):
    report = tmp_path / "social.html"
    r = _run(
        "social",
        "reproduce",
        "--graph",
        small_graph,
        "--report",
        report,
        "--epsilons",
        "0.5,3",
        "--gammas",
        "0.05",
        "--target-fraction",
        0.5,
        "--public-node-set",
        "--seed",
        3,
        "--json",
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert {"nodes", "edges", "max_degree"} <= d["private"].keys()
    assert d["private"]["nodes"] == 40 and len(d["runs"]) == 4
    html = report.read_text()
    assert html.count("<img") >= 3 and "Corollary 1" in html
    led = json.loads((tmp_path / "social.html.ledger.json").read_text())
    assert led["seeded"] is True and led["public_inputs"][0]["nodes"] == 40
    prov = json.loads((tmp_path / "social.html.ledger.json.private.json").read_text())
    assert prov["PRIVATE"] and prov["inputs"][0]["sha256"] not in json.dumps(led)
    for run in d["runs"]:
        s = run["summary"]
        # monotone symmetric ε-DP mechanisms never beat the Corollary 1 bound
        assert s["exponential"]["mean"] <= s["bound"]["mean"] + 1e-9
        assert 0 <= s["permute_and_flip"]["p50"] <= 1


def test_reproduce_needs_an_output(small_graph):
    r = _run("social", "reproduce", "--graph", small_graph)
    assert r.exit_code == 2


def test_public_api_and_doc_example(wiki_vote_path):
    import searchveil.social as social
    from searchveil.io.graphs import read_edge_list
    from searchveil.rng import make_rng

    for name in social.__all__:
        assert getattr(social, name) is not None
    # the Python example of docs/social.md
    g = read_edge_list(wiki_vote_path, undirected=True)
    cn = social.CommonNeighbours()
    mech = social.ExponentialMechanism(epsilon=1.0, sensitivity=cn.l1_sensitivity())
    for tu in social.target_utilities(g, cn, [0, 1, 2]):
        rec = mech.recommend(tu, make_rng())
        assert rec != tu.target and rec not in set(tu.neighbours.tolist())
