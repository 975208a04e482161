"""The neighbour audit (issue 21, docs/privacy/published.md): every release path run on D and on a
neighbour D′ with the same seeded randomness publishes nothing that tells them apart outside its
noise.

For each CLI release command — ``release korolova`` (thesis Select-Queries, ``--urls private``,
``--urls serp``, each ``--selection``), ``release zealous``, ``sanitize ump``, ``social
recommend`` and the ads platform's DP reporting policy — on a real held-out block of 128 AOL
users (D′: D without the user holding the most queries no other user holds), and on wiki-Vote:

(a) the public ledgers are identical apart from the creation time and the fields the mechanism
    declares noisy (the sizes of the released tables);
(b) the release directory holds only the files the family declares public (the private
    provenance record is beside it, owner-only, marked private in its first field);
(c) no file of the release holds the input's SHA-256, its path or its exact size.

``release kanon`` is not DP: only (b) and (c). The social counterexample of the issue (edges
1-2, 1-3, 2-4, 3-5, 4-5, 5-6 vs the same plus 6-7, target 1, ε = 0.5) is rerun as a
Clopper–Pearson audit: with the node universe public, the lower bound on the privacy loss of
every outcome stays ≤ ε (on the old code node 7 was recommended ~20% of the time on one graph
and never on the other). The last section checks that no output carries its input's row order.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from _neighbour import (
    assert_no_private_traces,
    assert_only_public_files,
    assert_provenance_beside,
    assert_same_public_ledger,
)
from conftest import AOL_TOP1000, BUNDLED_AOL_215
from searchveil.cli import app

runner = CliRunner()
SEED = "20210"
NOISY_SIZES = ("outputs.*.rows",)  # how many rows a table has is part of the noisy output


def _run(*args: Any) -> Any:
    r = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return r


# -- the data: a held-out block of 128 real AOL users and its neighbour ------------------------


def _rarest_user(df: pl.DataFrame) -> str:
    """The user holding the most queries that no other user of the block holds."""
    held = df.select("AnonID", "Query").unique()
    single = held.group_by("Query").agg(pl.len().alias("h")).filter(pl.col("h") == 1)
    per_user = (
        held.join(single, on="Query", how="semi")
        .group_by("AnonID")
        .agg(pl.len().alias("n"))
        .sort(["n", "AnonID"], descending=[True, False])
    )
    return str(per_user.get_column("AnonID")[0])


def _write(df: pl.DataFrame, path: Path) -> Path:
    df.write_csv(path, separator="\t", quote_style="never", null_value="")
    return path


@pytest.fixture(scope="module")
def block(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """D (128 users: the top-1000 file's users 512..639, a block no other test reads; the
    bundled 215-user sample's first 128 users without ../shared) and D′ = D minus one user."""
    src = AOL_TOP1000 if AOL_TOP1000.exists() else BUNDLED_AOL_215
    df = pl.read_csv(src, separator="\t", quote_char=None, infer_schema=False)
    df = df.select("AnonID", "Query", "QueryTime", "ItemRank", "ClickURL")
    users = df.get_column("AnonID").unique(maintain_order=True)
    lo = 512 if users.len() >= 640 else 0
    d = df.filter(pl.col("AnonID").is_in(users.slice(lo, 128).implode()))
    gone = _rarest_user(d)
    d1 = d.filter(pl.col("AnonID") != gone)
    tmp = tmp_path_factory.mktemp("block")
    return {
        "D": _write(d, tmp / "held-out-block.tsv"),
        "D1": _write(d1, tmp / "held-out-block-minus-one.tsv"),
        "exact": {
            "D": {"rows": d.height, "users": 128},
            "D1": {"rows": d1.height, "users": 127},
        },
        "tmp": tmp,
        "df": d,
    }


def _serp(block: dict[str, Any]) -> Path:
    """A public SERP file (the same for D and D′): the block's 40 most common queries with
    their two most clicked URLs, and a URL nobody clicked."""
    p = block["tmp"] / "serp.tsv"
    if p.exists():
        return p
    d = block["df"].with_columns(pl.col("Query").str.to_lowercase().str.strip_chars())
    top = (
        d.group_by("Query").agg(pl.len().alias("n")).sort(["n", "Query"], descending=[True, False])
    )
    lines = []
    for q in top.head(40).get_column("Query"):
        urls = (
            d.filter((pl.col("Query") == q) & pl.col("ClickURL").is_not_null())
            .group_by("ClickURL")
            .agg(pl.len().alias("n"))
            .sort(["n", "ClickURL"], descending=[True, False])
            .head(2)
            .get_column("ClickURL")
            .to_list()
        )
        for r, u in enumerate([*urls, "http://nobody.example/"], start=1):
            lines.append(f"{q}\t{r}\t{u}")
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def _audit_pair(
    block: dict[str, Any],
    name: str,
    argv: list[Any],
    public: list[str],
    *,
    dp: bool = True,
    prefix: tuple[str, ...] = ("release", "korolova"),
) -> tuple[Path, Path]:
    """Run ``prefix INPUT --out OUT argv`` on D and D′; check (a), (b), (c)."""
    outs = []
    for which in ("D", "D1"):
        out = block["tmp"] / f"{name}-{which}"
        _run(*prefix, block[which], "--out", out, *argv, "--seed", SEED, "--json")
        assert_only_public_files(out, public)  # (b)
        assert_provenance_beside(out)
        assert_no_private_traces(out, [block[which]], exact=block["exact"][which])  # (c)
        outs.append(out)
    if dp:
        assert_same_public_ledger(*outs, noisy=NOISY_SIZES)  # (a)
    return outs[0], outs[1]


EPS_DELTA = ("--epsilon", 2.3, "--delta", 1e-7)

KOROLOVA = {
    "thesis": (["--max-queries", 5], ["queries.tsv"]),
    "thesis-declared-U": (["--max-queries", 5, "--max-users", 1000], ["queries.tsv"]),
    "urls-private": (
        ["--max-queries", 5, "--max-clicks", 2, "--urls", "private"],
        ["queries.tsv", "clicks.tsv"],
    ),
    "selection-laplace": (["--max-queries", 10, "--selection", "laplace"], ["queries.tsv"]),
    "selection-gaussian": (["--max-queries", 10, "--selection", "gaussian"], ["queries.tsv"]),
    "selection-policy-gaussian": (
        ["--max-queries", 10, "--selection", "policy-gaussian", "--max-users", 1000],
        ["queries.tsv"],
    ),
    # issue 24's strategies: d from (ε, δ, U) alone (no --max-queries), rounds, pair selection
    "selection-probe-reweight": (
        ["--max-queries", 10, "--selection", "probe-reweight"],
        ["queries.tsv"],
    ),
    "selection-dp-sips": (["--max-queries", 10, "--selection", "dp-sips"], ["queries.tsv"]),
    "selection-probe-reweight-2r-default-d": (
        ["--selection", "probe-reweight-2r", "--max-users", 1000],
        ["queries.tsv"],
    ),
    # the deprecated spelling mad2r runs probe-reweight-2r
    "selection-mad2r-clicks": (
        ["--selection", "mad2r", "--max-users", 1000, "--max-clicks", 2, "--urls", "private"],
        ["queries.tsv", "clicks.tsv"],
    ),
}


@pytest.mark.parametrize("variant", list(KOROLOVA))
def test_korolova_neighbours(block: dict[str, Any], variant: str) -> None:
    argv, public = KOROLOVA[variant]
    a, _ = _audit_pair(block, f"korolova-{variant}", [*EPS_DELTA, *argv], public)
    led = json.loads((a / "ledger.json").read_text())
    assert led["neighbouring"] == "add/remove one user's entire history"
    chk = led["guarantee"]["delta_vs_users"]
    if "--max-users" in argv:  # the δ < 1/U check uses the declared bound, named as such
        assert led["declared"] == {"max_users": 1000} and chk["users_bound"] == 1000
    else:
        assert chk["checked"] is False and led["declared"] == {}


def test_korolova_serp_neighbours(block: dict[str, Any]) -> None:
    serp = _serp(block)
    argv = [*EPS_DELTA, "--max-queries", 5, "--max-clicks", 2, "--urls", "serp", "--serp", serp]
    a, _ = _audit_pair(block, "korolova-serp", argv, ["queries.tsv", "clicks.tsv"])
    led = json.loads((a / "ledger.json").read_text())
    # the SERP is a public input: its name and hash are published, not where it is kept
    (rec,) = led["public_inputs"]
    assert rec["role"] == "serp" and rec["file"] == "serp.tsv" and len(rec["sha256"]) == 64
    assert str(serp.parent) not in (a / "ledger.json").read_text()


def test_zealous_neighbours(block: dict[str, Any]) -> None:
    argv = ["--epsilon", 2.0, "--delta", 1e-7, "--max-items", 2, "--max-users", 1000]
    a, _ = _audit_pair(block, "zealous", argv, ["items.tsv"], prefix=("release", "zealous"))
    assert json.loads((a / "ledger.json").read_text())["declared"] == {"max_users": 1000}


def test_kanon_leaves_no_private_traces(block: dict[str, Any]) -> None:
    """k-anonymity is not DP (no (a)); it still publishes no fingerprint of its input."""
    public = ["queries.tsv", "keywords.tsv", "query_pairs.tsv", "log.tsv"]
    _audit_pair(block, "kanon", ["--k", 5], public, dp=False, prefix=("release", "kanon"))


SAME_SCHEMA = ["log.tsv", "counts.tsv", "queries.tsv", "ranks.tsv", "query_pairs.tsv",
               "head_profile.tsv", "statistics.tsv"]  # fmt: skip


@pytest.mark.parametrize(
    ("ids", "public", "extra"),
    [("synthetic", SAME_SCHEMA, []),
     ("synthetic", ["log.tsv", "counts.tsv", "profile.tsv", "queries.tsv"], ["--schema", "counts"]),
     ("real", ["log.tsv", "counts.tsv", "pairs.tsv"], [])],
)  # fmt: skip
def test_ump_e2e_neighbours(
    block: dict[str, Any], ids: str, public: list[str], extra: list[str]
) -> None:
    """The default mode of release ump (issue 29): end to end DP, no mode flag; with synthetic
    ids, the log in the input's columns by default (issue 42) and the counts log."""
    argv = ["--epsilon", 2.3, "--delta", 1e-7, "--max-users", 1000, "--ids", ids, *extra]
    a, _ = _audit_pair(block, f"ump-e2e-{ids}-{len(extra)}", argv, public,
                       prefix=("release", "ump"))  # fmt: skip
    led = json.loads((a / "ledger.json").read_text())
    g = led["guarantee"]
    assert g["counts_are_private"] is True and g["user_ids"] == ids
    assert led["epsilon"] <= 2.3 * (1 + 1e-9) and led["delta"] <= 1e-7
    assert sum(s["epsilon"] for s in g["split"].values()) == pytest.approx(led["epsilon"])


def test_ump_neighbours(block: dict[str, Any]) -> None:
    argv = [
        "--mode",
        "conditional",
        "--objective",
        "size",
        "--search-seconds",
        0,
        "--epsilon",
        0.69,
        "--delta",
        1e-7,
    ]
    a, _ = _audit_pair(block, "ump", argv, ["log.tsv", "counts.tsv"], prefix=("release", "ump"))
    led = json.loads((a / "ledger.json").read_text())
    assert "solver" not in led and led["guarantee"]["counts_are_private"] is False


# -- the same-schema statistics (issue 42): D minus its heaviest and its lightest user ------------


@pytest.fixture(scope="module")
def heavy_light(block: dict[str, Any]) -> dict[str, Any]:
    """D′ = D minus the user with the most rows, D″ = D minus the user with the fewest."""
    d = block["df"]
    per = d.group_by("AnonID").len().sort(["len", "AnonID"], descending=[True, False])
    out = {}
    for name, user in (("heavy", per.get_column("AnonID")[0]),
                       ("light", per.get_column("AnonID")[-1])):  # fmt: skip
        dn = d.filter(pl.col("AnonID") != user)
        out[name] = _write(dn, block["tmp"] / f"held-out-block-minus-{name}.tsv")
        out[f"exact_{name}"] = {"rows": dn.height, "users": 127}
    return out


@pytest.mark.parametrize("prefix", [("release", "ump"), ("synth",)])
def test_same_schema_neighbours_heavy_and_light(
    block: dict[str, Any], heavy_light: dict[str, Any], prefix: tuple[str, ...]
) -> None:
    """``release ump`` (the input's columns) and ``synth --epsilon`` on D, on D minus its
    heaviest user and on D minus its lightest, one seed: identical public ledgers but for the
    tables' noisy sizes, only the declared files, no trace of the input. With --period, so that
    every time statistic is drawn whatever the data."""
    argv = ["--epsilon", 2.3, "--delta", 1e-7, "--max-users", 1000, "--period",
            "2006-03-01..2006-05-31"]  # fmt: skip
    if prefix == ("synth",):
        argv = ["--epsilon", 2.3, "--delta", 1e-7, "--max-users", 1000, "--users", 300]
    outs = []
    inputs = [("D", block["D"], block["exact"]["D"]),
              ("heavy", heavy_light["heavy"], heavy_light["exact_heavy"]),
              ("light", heavy_light["light"], heavy_light["exact_light"])]  # fmt: skip
    for which, path, exact in inputs:
        out = block["tmp"] / f"schema-{prefix[0]}-{which}"
        if prefix == ("synth",):
            _run("synth", "--like", path, "--out", out, *argv, "--seed", SEED, "--json")
        else:
            _run(*prefix, path, "--out", out, *argv, "--seed", SEED, "--json")
        assert_only_public_files(out, SAME_SCHEMA)
        assert_provenance_beside(out)
        assert_no_private_traces(out, [path], exact=exact)
        outs.append(out)
    for other in outs[1:]:
        assert_same_public_ledger(outs[0], other, noisy=NOISY_SIZES)
    led = json.loads((outs[0] / "ledger.json").read_text())
    split = led["guarantee"]["split"]
    for stat in ("events", "activity", "days", "hours", "gaps", "sessions", "clicks", "ranks",
                 "multiplicity", "head_events", "head_share", "head_profile", "pair_ranks",
                 "tail", "tail_initials", "query_pairs"):  # fmt: skip
        assert split[stat]["epsilon"] > 0, stat  # every statistic is in the ledger's split
    assert sum(x["epsilon"] for x in split.values()) == pytest.approx(led["epsilon"])
    assert led["epsilon"] <= 2.3 * (1 + 1e-9) and led["delta"] <= 1e-7


# -- social recommendations --------------------------------------------------------------------

COUNTER_G = [(1, 2), (1, 3), (2, 4), (3, 5), (4, 5), (5, 6)]
COUNTER_G1 = [*COUNTER_G, (6, 7)]
MECHANISMS = ("exponential", "laplace", "permute_and_flip", "smoothing")


def _edges(path: Path, edges: list[tuple[int, int]]) -> Path:
    path.write_text("".join(f"{a}\t{b}\n" for a, b in edges))
    return path


@pytest.fixture(scope="module")
def counterexample(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("social")
    nodes = tmp / "nodes.txt"
    nodes.write_text("# the public node universe\n" + "".join(f"{i}\n" for i in range(1, 8)))
    return {
        "D": _edges(tmp / "g.txt", COUNTER_G),
        "D1": _edges(tmp / "g-plus-6-7.txt", COUNTER_G1),
        "nodes": nodes,
        "tmp": tmp,
    }


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_social_counterexample_ledgers_and_files(
    counterexample: dict[str, Path], mechanism: str
) -> None:
    ce = counterexample
    outs = []
    for which, n_edges in (("D", 6), ("D1", 7)):
        out = ce["tmp"] / f"rec-{mechanism}-{which}"
        r = _run("social", "recommend", "--graph", ce[which], "--out", out, "--epsilon", 0.5,
                 "--mechanism", mechanism, "--target", 1, "--node-list", ce["nodes"],
                 "--seed", SEED, "--json")  # fmt: skip
        assert json.loads(r.stdout)["universe"]["nodes"] == 7
        assert_only_public_files(out, ["recommendations.tsv"])
        assert_provenance_beside(out)
        # (the universe's size, 7, is public: it is the node list's, declared by the holder)
        assert_no_private_traces(out, [ce[which]], exact={"edges": n_edges})
        led = json.loads((out / "ledger.json").read_text())
        assert "max_degree" not in json.dumps(led) and '"edges"' not in json.dumps(led)
        outs.append(out)
    assert_same_public_ledger(*outs)
    # the same seed draws the same recommendation: node 7 is a candidate on both graphs
    a, b = ((o / "recommendations.tsv").read_text() for o in outs)
    assert a == b


@pytest.mark.slow  # over 5 s on 2 cores: the full tier (tests/README.md)
def test_social_counterexample_clopper_pearson(counterexample: dict[str, Path]) -> None:
    """3,000 recommendations to target 1 on each graph, per mechanism: for every outcome (each
    candidate recommended), the Clopper–Pearson lower bound on the privacy loss is ≤ ε = 0.5."""
    from searchveil.audit import epsilon_lower_bound
    from searchveil.io.graphs import read_edge_list, read_node_list
    from searchveil.rng import make_rng
    from searchveil.social.mechanisms import make_mechanism
    from searchveil.social.recommend import recommend
    from searchveil.social.utility import CommonNeighbours

    ce = counterexample
    universe = read_node_list(ce["nodes"])
    util = CommonNeighbours()
    n = 3000
    for mechanism in MECHANISMS:
        mech = make_mechanism(mechanism, epsilon=0.5, l1=util.l1_sensitivity(),
                              linf=util.linf_sensitivity())  # fmt: skip
        counts = []
        for which, seed in (("D", 1), ("D1", 2)):
            g = read_edge_list(ce[which], undirected=True, universe=universe)
            target = universe.index_of([1])
            _, rec = recommend(g, util, mech, np.repeat(target, n), make_rng(seed))
            counts.append(np.bincount(rec, minlength=universe.size))
        assert counts[0][universe.index_of([7])[0]] > 0  # node 7 is a candidate on G too
        for node in range(universe.size):
            lb = epsilon_lower_bound(int(counts[0][node]), int(counts[1][node]), n, delta=0.0,
                                     alpha=1e-6)  # fmt: skip
            assert lb <= 0.5, (mechanism, int(universe.ids[node]), counts)


def test_social_wiki_vote_neighbours(wiki_vote_path: Path, tmp_path: Path) -> None:
    """wiki-Vote with its node list public, and the graph minus an edge to a degree-1 node (the
    node the old code would have dropped from the candidates)."""
    from searchveil.io.graphs import read_edge_list

    g = read_edge_list(wiki_vote_path, undirected=True)
    deg = g.degrees
    leaf = int(np.flatnonzero(deg == 1)[0])
    (other,) = g.neighbors(leaf).tolist()
    target = int(g.node_ids[np.flatnonzero((deg > 1) & (np.arange(g.n_nodes) != other))[0]])
    gone = {int(g.node_ids[leaf]), int(g.node_ids[other])}
    nodes = tmp_path / "wiki-vote-nodes.txt"
    nodes.write_text("".join(f"{int(x)}\n" for x in g.node_ids))
    lines = wiki_vote_path.read_text().splitlines(keepends=True)
    minus = tmp_path / "wiki-Vote-minus-one-edge.txt"
    minus.write_text(
        "".join(ln for ln in lines if ln.startswith("#") or {int(x) for x in ln.split()} != gone)
    )
    exact = {"D": {"edges": g.n_edges}, "D1": {"edges": g.n_edges - 1}}
    outs = []
    for which, path in (("D", wiki_vote_path), ("D1", minus)):
        out = tmp_path / f"rec-{which}"
        _run("social", "recommend", "--graph", path, "--out", out, "--epsilon", 1,
             "--mechanism", "exponential", "--target", target, "--node-list", nodes,
             "--seed", SEED, "--json")  # fmt: skip
        assert_only_public_files(out, ["recommendations.tsv"])
        assert_provenance_beside(out)
        assert_no_private_traces(out, [path], exact=exact[which])
        outs.append(out)
    assert_same_public_ledger(*outs)


# -- the ads platform's DP reporting policy ----------------------------------------------------


def test_ads_dp_policy_neighbours() -> None:
    """The same campaigns on a population and on it without one profile, same seed: the public
    ledgers are identical (no size, no fingerprint of the population)."""
    from searchveil.attacks.ads.platform import AdPlatform, DPReportingPolicy, Targeting
    from searchveil.attacks.ads.population import Population, generate_population
    from searchveil.rng import make_rng

    pop = generate_population(3000, rng=make_rng(3))
    keep = np.arange(pop.size) != 17
    pop1 = Population(
        values={a: v[keep] for a, v in pop.values.items()},
        visibility={a: v[keep] for a, v in pop.visibility.items()},
        login_p=pop.login_p[keep],
        topic=pop.topic[keep],
        n_values=dict(pop.n_values),
        config=pop.config,
    )
    ledgers, provs = [], []
    for p in (pop, pop1):
        plat = AdPlatform(p, DPReportingPolicy(epsilon_per_report=0.25, advertiser_budget=1.0),
                          rng=make_rng(9))  # fmt: skip
        for adv, t in (("a1", Targeting.of(gender=1)), ("a2", Targeting.of(age=range(10, 30)))):
            for _ in range(3):
                plat.run_campaign(adv, t)
        ledgers.append(plat.ledger())
        provs.append(plat.provenance())
    drop = ("created_utc",)
    a, b = ({k: v for k, v in led.items() if k not in drop} for led in ledgers)
    assert a == b
    for led, prov in zip(ledgers, provs, strict=True):
        text = json.dumps(led)
        assert prov["inputs"][0]["sha256"] not in text
        assert f'"profiles": {prov["inputs"][0]["profiles"]}' not in text
    assert provs[0]["inputs"][0]["profiles"] == 3000 and provs[1]["inputs"][0]["profiles"] == 2999


# -- no input order in any output --------------------------------------------------------------


def _reversed_users(block: dict[str, Any]) -> Path:
    """D with its users' blocks in the reverse order (each user's rows as they were)."""
    p = block["tmp"] / "held-out-block-users-reversed.tsv"
    if not p.exists():
        d = block["df"]
        order = d.get_column("AnonID").unique(maintain_order=True).reverse()
        parts = [d.filter(pl.col("AnonID") == u) for u in order]
        _write(pl.concat(parts), p)
    return p


ORDER_CASES = {
    "korolova": (("release", "korolova"), [*EPS_DELTA, "--max-queries", 5, "--max-clicks", 2,
                                           "--urls", "private"]),
    "selection": (("release", "korolova"), [*EPS_DELTA, "--max-queries", 10, "--selection",
                                            "gaussian"]),
    "zealous": (("release", "zealous"), ["--epsilon", 2.0, "--delta", 1e-7, "--max-items", 2,
                                         "--max-users", 1000]),
    "kanon": (("release", "kanon"), ["--k", 5]),
    "ump-e2e": (("release", "ump"), ["--epsilon", 2.3, "--delta", 1e-4, "--max-users", 1000,
                                      "--max-pairs", 2]),
    "ump": (("release", "ump"), ["--mode", "conditional",
                                 "--objective", "size", "--search-seconds", 0, "--epsilon",
                                  0.69, "--delta", 1e-7]),
}  # fmt: skip


@pytest.mark.parametrize("family", list(ORDER_CASES))
def test_output_is_not_in_input_order(block: dict[str, Any], family: str) -> None:
    """The input with its users in ascending and in descending order of AnonID gives the same
    bytes under the same seed: every table's row order is a function of its published values,
    never of where a user's rows sat in the input (a log sorted by user id does not come out
    sorted by user id, nor by anything the input's order encodes)."""
    prefix, argv = ORDER_CASES[family]
    outs = []
    for name, path in (("asc", block["D"]), ("desc", _reversed_users(block))):
        out = block["tmp"] / f"order-{family}-{name}"
        _run(*prefix, path, "--out", out, *argv, "--seed", SEED)
        outs.append(out)
    files = sorted(p.name for p in outs[0].iterdir() if p.name != "ledger.json")
    assert files
    for f in files:
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    if family.startswith("ump"):  # the log is sorted by its published ids, not the input's order
        ids = pl.read_csv(outs[1] / "log.tsv", separator="\t").get_column("AnonID").to_list()
        assert ids == sorted(ids)


def test_social_output_is_not_in_input_order(counterexample: dict[str, Path]) -> None:
    ce = counterexample
    rev = _edges(ce["tmp"] / "g-reversed.txt", [(b, a) for a, b in reversed(COUNTER_G1)])
    outs = []
    for name, path in (("fwd", ce["D1"]), ("rev", rev)):
        out = ce["tmp"] / f"order-{name}"
        _run("social", "recommend", "--graph", path, "--out", out, "--epsilon", 0.5,
             "--mechanism", "exponential", "--target", 6, "--target", 1, "--target", 4,
             "--node-list", ce["nodes"], "--seed", SEED)  # fmt: skip
        outs.append((out / "recommendations.tsv").read_text())
    assert outs[0] == outs[1]
    targets = [int(ln.split("\t")[0]) for ln in outs[0].splitlines()[1:]]
    assert targets == sorted(targets)  # by published target id, not in the order asked


def test_provenance_option_places_the_private_record(block: dict[str, Any]) -> None:
    """``--provenance FILE`` puts the private record where asked; inside the release it is
    refused (exit 2, nothing written)."""
    out = block["tmp"] / "prov-opt"
    prov = block["tmp"] / "elsewhere.json"
    _run("release", "korolova", block["D"], "--out", out, *EPS_DELTA, "--max-queries", 5,
         "--provenance", prov, "--seed", SEED)  # fmt: skip
    assert prov.exists() and not (block["tmp"] / "prov-opt.private.json").exists()
    assert (os.stat(prov).st_mode & 0o777) == 0o600
    bad = block["tmp"] / "prov-bad"
    r = runner.invoke(app, ["release", "korolova", str(block["D"]), "--out", str(bad),
                            *map(str, EPS_DELTA), "--max-queries", "5", "--provenance",
                            str(bad / "p.json")])  # fmt: skip
    assert r.exit_code == 2 and not bad.exists(), r.output
