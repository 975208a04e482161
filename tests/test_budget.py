"""One privacy budget (issue 31): the typed cost and relation, the ledger fields every family
derives from it, the one budget check per release, composition across releases (in memory, in a
dataset's budget file, from the CLI), refusals before the input is read, refunds, pending
charges of killed runs and two processes racing for one budget."""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import searchveil
from searchveil.cli import app
from searchveil.errors import BudgetExceededError, InternalError, InvalidParameterError
from searchveil.mechanisms.accounting import Budget
from searchveil.mechanisms.budget import (
    Accountant,
    NoGuarantee,
    Part,
    PrivacyCost,
    Relation,
    in_relation,
    zcdp_epsilon,
)
from searchveil.mechanisms.budget_file import DatasetBudget, init_budget
from searchveil.mechanisms.rounds import zcdp_delta
from searchveil.release.korolova import KorolovaParams
from searchveil.release.selection import SelectionParams
from searchveil.release.zealous import ZealousParams
from searchveil.report.evaluation import evaluation_report
from searchveil.rng import make_rng
from searchveil.session import Session

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
LN10 = math.log(10)


def _cli(*args: object) -> object:
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def _kor() -> KorolovaParams:
    return KorolovaParams.from_budget(epsilon=LN10, delta=1e-7, d=3, split=(1, 1))


def _zea(eps: float) -> ZealousParams:
    return ZealousParams.from_budget(epsilon=eps, delta=1e-7, m=2, item_type="queries",
                                     guarantee="indistinguishability")  # fmt: skip


# -- the cost type ---------------------------------------------------------------------------
def test_a_cost_is_its_parts_and_never_states_less() -> None:
    c = PrivacyCost(Relation.USER, (Part("a", 0.5, 1e-7), Part("b", 0.25)))
    assert (c.epsilon, c.delta) == (0.75, 1e-7)
    assert c.split == {"a": {"epsilon": 0.5, "delta": 1e-7}, "b": {"epsilon": 0.25, "delta": 0.0}}
    assert PrivacyCost(Relation.USER, c.parts, 1.0, 1e-6).epsilon == 1.0  # a stated bound
    with pytest.raises(InternalError, match="below the sum"):
        PrivacyCost(Relation.USER, c.parts, 0.7, 1e-7)
    with pytest.raises(InternalError, match="distinct names"):
        PrivacyCost(Relation.USER, (Part("a", 1.0), Part("a", 1.0)))
    with pytest.raises(InvalidParameterError, match="relation"):
        PrivacyCost("row", c.parts)  # type: ignore[arg-type]
    assert PrivacyCost.from_dict(c.to_dict()) == c
    assert c.rho is None  # part a is (ε, δ) with δ > 0: not zCDP
    z = PrivacyCost(Relation.USER, (Part("r", 1.0, 1e-6, 0.1, 1e-8), Part("l", 0.2)))
    assert z.rho == pytest.approx(0.1 + 0.02) and z.rho_delta == 1e-8
    assert z.as_part("all") == Part("all", z.epsilon, z.delta, z.rho, 1e-8)


def test_zcdp_epsilon_inverts_the_zcdp_delta_of_the_selection_rounds() -> None:
    for rho, dl in ((0.01, 1e-7), (0.3, 1e-6), (2.0, 1e-9)):
        eps = zcdp_epsilon(rho, dl)
        assert zcdp_delta(rho=rho, epsilon=eps) == pytest.approx(dl, rel=1e-3)
        assert eps < rho + 2 * math.sqrt(rho * math.log(1 / dl))  # tighter than Bun–Steinke


def test_relations_compose_only_where_documented() -> None:
    u = PrivacyCost.of(Relation.USER, 1.0, 1e-7)
    assert in_relation(u, "user", what="x")[0] is u
    rep, how = in_relation(u, "user-replace", what="x")
    assert rep.epsilon == 2.0 and rep.delta == pytest.approx((1 + math.e) * 1e-7) and "2ε" in how
    cels = PrivacyCost.of(Relation.USER_PARTIES, 1.0, 1e-7)
    assert in_relation(cels, "user", what="x")[0].epsilon == 1.0
    rec = PrivacyCost.of(Relation.RECORD, 1.0, 1e-7)
    with pytest.raises(InvalidParameterError, match="one-record-per-user"):
        in_relation(rec, "user", what="tabular")
    assert in_relation(rec, "user", one_record_per_user=True, what="x")[0].epsilon == 1.0
    with pytest.raises(InvalidParameterError, match="indistinguishability"):
        in_relation(PrivacyCost.of(Relation.USER_REPLACE, 1.0), "user", what="zealous")
    with pytest.raises(InvalidParameterError, match="edge-outside-targets"):
        in_relation(PrivacyCost.of(Relation.EDGE_OUTSIDE_TARGETS, 1.0), "user", what="social")
    with pytest.raises(InvalidParameterError, match="not differentially private"):
        in_relation(PrivacyCost.of(Relation.USER, 1.0, conditional="not differentially "
                                   "private"), "user", what="ump")  # fmt: skip
    with pytest.raises(InvalidParameterError, match="k-anon"):
        in_relation(NoGuarantee("k-anonymity protects nothing"), "user", what="kanon")


# -- every family's ledger from the one cost type --------------------------------------------
def test_every_ledger_builder_takes_the_cost() -> None:
    """One road: every build_ledger call in the package passes ``cost=`` and none passes the
    old free-text ``neighbouring`` or raw ``epsilon``/``delta``."""
    calls = []
    for p in (ROOT / "src" / "searchveil").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "build_ledger":
                kw = {k.arg for k in node.keywords}
                calls.append(p.name)
                assert "cost" in kw and not kw & {"neighbouring", "epsilon", "delta"}, p
    assert len(calls) == 13  # a new builder is added here deliberately (13: cels e2e, issue 41)


def _family_ledgers(tmp: Path, aol_215, aol_215_path) -> dict[str, tuple[dict, object]]:  # noqa: ANN001
    """(ledger, the family's stated cost) of every family, small and fast."""
    import numpy as np
    import polars as pl

    from searchveil.attacks.ads.platform import AdPlatform, DPReportingPolicy, Policy2010
    from searchveil.attacks.ads.population import generate_population
    from searchveil.attacks.record import run_record
    from searchveil.cels.e2e_release import e2e_public_ledger
    from searchveil.cels.local import local_sanitize
    from searchveil.cels.output import public_ledger
    from searchveil.cels.params import CelsParams, Share
    from searchveil.io.graphs import node_universe_range
    from searchveil.model import click_histogram
    from searchveil.release import release_kanon, release_korolova, release_zealous
    from searchveil.release.kanonymity import KAnonParams
    from searchveil.release.selection import release_selection
    from searchveil.release.ump import UmpParams, release_ump
    from searchveil.release.ump.e2e import E2EParams, e2e_ledger
    from searchveil.social.recommend import recommendation_cost, release_recommendations
    from searchveil.social.utility import utility_from_name
    from searchveil.tabular.api import Model, ModelParams, load, release_cost, run_model

    rng = make_rng(3)
    out: dict[str, tuple[dict, object]] = {}
    kp, zp = _kor(), _zea(1.0)
    out["korolova"] = (release_korolova(aol_215, kp, rng=rng).ledger, kp.cost())
    out["zealous"] = (release_zealous(aol_215, zp, rng=rng).ledger, zp.cost())
    zpp = ZealousParams.from_budget(epsilon=1, delta=1e-7, m=2, item_type="queries",
                                    guarantee="probabilistic", users=1000)  # fmt: skip
    out["zealous probabilistic"] = (release_zealous(aol_215, zpp, rng=rng).ledger, zpp.cost())
    sp = SelectionParams(strategy="probe-reweight-2r", epsilon=2.0, delta=1e-6, d=2, d_c=1,
                      split=(1, 1, 1, 1))  # fmt: skip
    out["selection"] = (release_selection(aol_215, sp, rng=rng).ledger, sp.cost())
    ka = KAnonParams(k=5)
    out["kanon"] = (release_kanon(aol_215, ka, rng=rng).ledger, ka.cost())
    for ids in ("synthetic", "real"):
        ep = E2EParams.from_budget(epsilon=2.0, delta=1e-6, ids=ids, max_pairs=2)
        out[f"ump e2e {ids}"] = (e2e_ledger(ep, rng=rng), ep.cost())
    small = aol_215.df.filter(pl.col("user").is_in(aol_215.df.get_column("user").unique()
                                                    .sort().head(12).implode()))  # fmt: skip
    up = UmpParams(objective="size", epsilon=1.0, delta=1e-5)
    out["ump conditional"] = (
        release_ump(type(aol_215)(small, aol_215.info), up, rng=rng).ledger,
        up.cost(),
    )
    ce = CelsParams(epsilon=2.0, delta=1e-6, max_users=1000, max_pairs=2, parties=2,
                    union_epsilon=1.0)  # fmt: skip
    out["cels e2e"] = (e2e_public_ledger(ce, 2), ce.cost())
    cp = CelsParams(epsilon=2.0, delta=0.3, mode="conditional", objective="size", key_bits=512)
    empty = pl.DataFrame(schema={"AnonID": pl.String, "Query": pl.String,
                                 "ClickURL": pl.String, "Count": pl.Int64})  # fmt: skip
    out["cels joint"] = (public_ledger(cp, 2, empty, created="t", seeded=True), cp.cost())
    shares = [Share(click_histogram(type(aol_215)(small, aol_215.info)), {})]
    out["cels local"] = (local_sanitize(shares * 2, cp, rng=rng)["ledger"], cp.cost())
    tab = load(ROOT / "tests/data/tabular/adult.csv", ROOT / "tests/data/tabular")
    for model in ("dp", "kanon"):
        mp = ModelParams(epsilon=2.0, delta=1e-4, k=3, max_records=1000)
        rel, meas = run_model(tab, model, mp, rng=rng)
        from searchveil.tabular.api import write_release

        led, _ = write_release(rel, tmp / f"tab-{model}", meas, rng=rng)
        out[f"tabular {model}"] = (led, release_cost(rel))
        assert model != Model.DP or led["epsilon"] == 2.0
    g = tmp / "g.txt"
    g.write_text("".join(f"{i}\t{j}\n" for i in range(12) for j in range(i + 1, 12)
                         if (i * 7 + j) % 3 == 0))  # fmt: skip
    uni, util = node_universe_range(12), utility_from_name("common_neighbours")
    kw = dict(universe=uni, utility=util, mechanism_name="exponential", epsilon=0.5,
              targets=[1, 2, 3])  # fmt: skip
    res = release_recommendations(g, tmp / "soc", rng=rng, **kw)  # type: ignore[arg-type]
    out["social"] = (json.loads((tmp / "soc" / "ledger.json").read_text()),
                     recommendation_cost(**kw))  # type: ignore[arg-type]  # fmt: skip
    assert res["targets"] == 3
    pop = generate_population(2000, rng=make_rng(1))
    dp = DPReportingPolicy(epsilon_per_report=0.5, advertiser_budget=2.0)
    out["ads dp policy"] = (AdPlatform(pop, dp, rng=rng).ledger(), dp.cost())
    out["ads 2010 policy"] = (AdPlatform(pop, Policy2010(), rng=rng).ledger(),
                              NoGuarantee("not a differentially private policy"))  # fmt: skip
    out["attack record"] = (run_record({}, rng, command="x"),
                            NoGuarantee("nothing is released under a guarantee"))  # fmt: skip
    assert np is not None
    return out


FAMILIES = {
    "korolova": "user", "zealous": "user", "zealous probabilistic": "user-replace",
    "selection": "user", "kanon": "none", "ump e2e synthetic": "user", "ump e2e real": "user",
    # a conditional release is not DP: its ledger names no relation (issue 39)
    "ump conditional": "none", "cels e2e": "user", "cels joint": "none", "cels local": "none",
    "tabular dp": "record", "tabular kanon": "none", "social": "edge-outside-targets",
    "ads dp policy": "user", "ads 2010 policy": "none", "attack record": "none",
}  # fmt: skip


def test_every_family_ledger_gets_its_privacy_fields_from_the_cost(
    tmp_path: Path,
    aol_215,
    aol_215_path,  # noqa: ANN001
) -> None:
    ledgers = _family_ledgers(tmp_path, aol_215, aol_215_path)
    assert set(ledgers) == set(FAMILIES)
    for name, (led, cost) in ledgers.items():
        assert led["relation"] == FAMILIES[name], name
        fields = cost.ledger_fields()  # type: ignore[attr-defined]
        assert {k: led[k] for k in fields} == json.loads(json.dumps(fields)), name
        if isinstance(cost, PrivacyCost) and cost.conditional is not None:
            # not DP: nothing at the top level; the sampling's (ε, δ) under guarantee only
            assert led["epsilon"] is None and led["delta"] is None and led["split"] == {}
            cond = led["guarantee"]["conditional"]
            assert led["guarantee"]["differentially_private"] is False, name
            assert (cond["epsilon"], cond["delta"]) == (cost.epsilon, cost.delta), name
            assert cond["relation"] == str(cost.relation), name
        elif isinstance(cost, PrivacyCost):
            assert led["neighbouring"] == Relation(led["relation"]).neighbouring
            assert PrivacyCost.from_dict(led) == PrivacyCost(
                cost.relation, cost.parts, cost.epsilon, cost.delta), name  # fmt: skip
            assert led["split"] and math.fsum(p["epsilon"] for p in led["split"].values()) \
                <= led["epsilon"] * (1 + 1e-9), name  # fmt: skip
        else:
            assert led["epsilon"] is None and led["split"] == {}
            assert led["neighbouring"].startswith("none: "), name


# -- the budget is checked once per release ------------------------------------------------
@pytest.fixture()
def count_checks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[float, float]]]:
    """Every call of check_budget (in every module that imported it), with its limit."""
    import searchveil.mechanisms.accounting as acc

    real = acc.check_budget
    calls: list[tuple[str, tuple[float, float]]] = []

    def counting(spent, budget, *, what=""):  # noqa: ANN001, ANN202
        if budget is not None:
            lim = (budget.epsilon, budget.delta) if isinstance(budget, Budget) else tuple(budget)
            calls.append((what, lim))
        return real(spent, budget, what=what)

    for mod in list(sys.modules.values()):
        if getattr(mod, "check_budget", None) is real and mod.__name__.startswith("searchveil"):
            monkeypatch.setattr(mod, "check_budget", counting)
    return calls


@pytest.mark.parametrize("engine", ["memory", "polars"])
def test_the_release_budget_is_checked_once(engine, tmp_path, aol_215_path, count_checks) -> None:  # noqa: ANN001
    kp = KorolovaParams.from_budget(epsilon=2.0, delta=1e-6, d=3, split=(1, 1, 1, 1),
                                    url_selection="private", d_c=1)  # fmt: skip
    zp = _zea(1.0)
    sp = SelectionParams(strategy="laplace", epsilon=1.0, delta=1e-6, d=2)
    for params in (kp, zp, sp):
        count_checks.clear()
        searchveil.release_file(aol_215_path, params, rng=make_rng(1), engine=engine)
        assert len(count_checks) == 1, (params, count_checks)
    if engine == "memory":  # release ump: its pair step's release checks, once
        from searchveil.io.readers import read_log
        from searchveil.release.ump.e2e import E2EParams, release_ump_e2e

        log = read_log(aol_215_path)
        for pairs in ("zealous", "probe-reweight-2r"):
            ep = E2EParams.from_budget(epsilon=1.0, delta=1e-6, pairs=pairs, max_pairs=2)
            count_checks.clear()
            release_ump_e2e(log, ep, rng=make_rng(1), metrics=False)
            assert len(count_checks) == 1, (pairs, count_checks)
    count_checks.clear()
    session = Session(total=Budget(10.0, 1e-5), relation="user")
    session.release_file(aol_215_path, kp, rng=make_rng(1), engine=engine, out=tmp_path / "r")
    # the parameters' own budget once, the dataset's remaining budget once
    assert sorted(lim for _, lim in count_checks) == [(2.0, 1e-6), (10.0, 1e-5)]


# -- the acceptance scenario: ε = 3, Korolova at ln 10, ZEALOUS at 1 refused ----------------
def test_done_when_from_the_command_line(tmp_path: Path, aol_215_path: Path) -> None:
    book = tmp_path / "aol.budget.json"
    r = _cli("budget", "init", book, "--epsilon", 3, "--delta", 1e-6, "--relation", "user")
    assert r.exit_code == 0, r.output
    r = _cli("release", "korolova", aol_215_path, "--out", tmp_path / "rel1", "--epsilon", LN10,
             "--delta", 1e-7, "--max-queries", 3, "--budget", book, "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["budget"]["left"]["epsilon"] == pytest.approx(3 - res["epsilon"])
    sha = hashlib.sha256((tmp_path / "rel1" / "ledger.json").read_bytes()).hexdigest()
    (charge,) = json.loads(book.read_text())["charges"]
    assert charge["state"] == "committed" and charge["ledger_sha256"] == sha
    assert charge["what"] == "release korolova" and charge["cost"]["epsilon"] == res["epsilon"]
    before = book.read_bytes()
    fifo = tmp_path / "not-read.tsv"  # refused before the log is read: a FIFO never opened
    os.mkfifo(fifo)
    r = _cli("release", "zealous", fifo, "--out", tmp_path / "rel2", "--epsilon", 1,
             "--delta", 1e-7, "--max-items", 2, "--guarantee", "indistinguishability",
             "--budget", book)  # fmt: skip
    assert r.exit_code == 2, r.output
    msg = " ".join(r.output.split())
    assert "requested 1.0 but only 0.697" in msg and "over by 0.302" in msg, msg
    assert not (tmp_path / "rel2").exists() and not (tmp_path / "rel2.private.json").exists()
    assert book.read_bytes() == before  # nothing written
    r = _cli("budget", "show", book, "--json")
    left = json.loads(r.output)["left"]["epsilon"]
    assert left == pytest.approx(0.70, abs=0.005)
    assert "0.697" in _cli("budget", "show", book).output
    # the release's report shows its charge, spent and left (found by its ledger's SHA-256)
    spent = DatasetBudget(book).release_budget(tmp_path / "rel1")
    assert spent["charge"]["epsilon"] == res["epsilon"] and spent["left"]["epsilon"] == left
    html = evaluation_report({"budget": spent})
    assert "Dataset budget" in html and "release korolova" in html and "0.697" in html
    with pytest.raises(InvalidParameterError, match="SHA-256"):
        DatasetBudget(
            init_budget(tmp_path / "other.json", epsilon=1, delta=0, relation="user").path
        ).release_budget(tmp_path / "rel1")


def test_cels_end_to_end_is_charged_like_release_ump(tmp_path: Path, aol_215_path: Path) -> None:
    """CELS' end-to-end mode (the default) is a user-level DP release of the union: --budget
    charges it and records its ledger; the paper's conditional mode is refused (above)."""
    book = tmp_path / "joint.budget.json"
    assert _cli("budget", "init", book, "--epsilon", 3, "--delta", 1e-5, "--relation",
                "user").exit_code == 0  # fmt: skip
    r = _cli("cels", "local", "--share", aol_215_path, "--share", aol_215_path, "--out",
             tmp_path / "c", "--epsilon", 1, "--delta", 1e-6, "--max-users", 1000,
             "--union-epsilon", 0.5, "--seed", 1, "--budget", book, "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    led = json.loads((tmp_path / "c" / "ledger.json").read_text())
    (charge,) = json.loads(book.read_text())["charges"]
    assert charge["state"] == "committed" and charge["what"] == "cels local"
    assert charge["cost"]["epsilon"] == led["epsilon"] == pytest.approx(1.0)  # no P0: ε alone
    assert led["parameters"]["union_epsilon"] == 0.5  # stated; it sets the slots
    assert (
        charge["ledger_sha256"]
        == hashlib.sha256((tmp_path / "c" / "ledger.json").read_bytes()).hexdigest()
    )


def test_done_when_in_python(tmp_path: Path, aol_215_path: Path) -> None:
    session = Session(total=Budget(3.0, 1e-6), relation="user")
    rel = session.release_file(aol_215_path, _kor(), rng=make_rng(None), out=tmp_path / "rel1")
    assert rel.ledger["epsilon"] == pytest.approx(LN10, rel=1e-6)
    os.mkfifo(tmp_path / "never-read.tsv")  # opening it to read would block the test
    with pytest.raises(BudgetExceededError, match="requested 1.0 but only 0.697") as exc:
        session.release_file(tmp_path / "never-read.tsv", _zea(1.0), rng=make_rng(None),
                             out=tmp_path / "rel2")  # fmt: skip
    assert exc.value.requested - exc.value.remaining == pytest.approx(1 - 0.6974, abs=1e-3)
    assert not (tmp_path / "rel2").exists()
    assert session.remaining()[0] == pytest.approx(0.70, abs=0.005)
    (c,) = session.summary()["charges"]
    assert c["state"] == "committed" and c["ledger_sha256"] == hashlib.sha256(
        (tmp_path / "rel1" / "ledger.json").read_bytes()).hexdigest()  # fmt: skip
    # the same against a file: a session and the command line share it
    book = tmp_path / "b.json"
    Session.create(book, epsilon=3.0, delta=1e-6, relation="user").release_file(
        aol_215_path, _kor(), rng=make_rng(None), out=tmp_path / "rel3"
    )
    with pytest.raises(BudgetExceededError):
        Session.open(book).release_file(aol_215_path, _zea(1.0), rng=make_rng(None))
    assert Session.open(book).remaining()[0] == pytest.approx(0.70, abs=0.005)


# -- failures, refunds, killed runs ----------------------------------------------------------
def test_a_run_that_fails_after_reading_its_input_stays_charged(tmp_path: Path) -> None:
    """Issue 39: a charge stands once private data has been read — a malformed log fails
    after it was opened, so each of three tries spends its cost (``failed``); a missing log
    is refused before the charge (nothing appended)."""
    bad = tmp_path / "bad.tsv"
    bad.write_text("not\ta\tsearch\tlog\n")
    session = Session.create(tmp_path / "b.json", epsilon=3.5, delta=1e-6, relation="user")
    for _ in range(3):
        with pytest.raises(searchveil.SearchveilError):
            session.release_file(bad, _zea(1.0), rng=make_rng(1), out=tmp_path / "x")
    s = session.summary()
    assert [c["state"] for c in s["charges"]] == ["failed"] * 3
    assert s["spent"]["epsilon"] == 3.0 and s["left"]["epsilon"] == 0.5
    assert "release" not in s["charges"][0]  # a settled charge holds no path
    assert not (tmp_path / "x").exists()
    with pytest.raises(searchveil.SearchveilError, match="no such file"):
        session.release_file(tmp_path / "typo.tsv", _zea(0.5), rng=make_rng(1))
    assert len(session.summary()["charges"]) == 3
    acc = Accountant(Budget(1.0, 0.0), "user")
    with pytest.raises(RuntimeError), acc.charge(PrivacyCost.of("user", 0.6), what="x"):
        raise RuntimeError("the release failed")
    assert acc.state.remaining() == (pytest.approx(0.4), 0.0)


_CHILD = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from searchveil.errors import BudgetExceededError
    from searchveil.mechanisms.budget import PrivacyCost
    from searchveil.mechanisms.budget_file import DatasetBudget
    book, go, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    while not go.exists():
        time.sleep(0.005)
    try:
        with DatasetBudget(book).charge(PrivacyCost.of("user", 1.0, 1e-7), what="race") as ch:
            if mode == "die":
                os._exit(9)  # killed mid-release: the charge stays pending
            time.sleep(0.05)
    except BudgetExceededError:
        sys.exit(2)
""")


def _children(book: Path, go: Path, n: int, mode: str = "run") -> list[subprocess.Popen]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return [subprocess.Popen([sys.executable, "-c", _CHILD, str(book), str(go), mode], env=env)
            for _ in range(n)]  # fmt: skip


def test_processes_racing_for_one_budget_never_overspend_it(tmp_path: Path) -> None:
    book = tmp_path / "race.budget.json"
    init_budget(book, epsilon=2.5, delta=1e-6, relation="user")
    go = tmp_path / "go"
    procs = _children(book, go, 4)
    time.sleep(1.0)  # let them import and wait at the barrier (the result does not depend on it)
    go.touch()
    codes = sorted(p.wait(timeout=120) for p in procs)
    assert codes == [0, 0, 2, 2]
    s = DatasetBudget(book).summary()
    assert [c["state"] for c in s["charges"]] == ["committed"] * 2
    assert s["spent"]["epsilon"] == 2.0 and s["left"]["epsilon"] == 0.5


def test_a_killed_run_stays_pending_until_an_operator_refunds_it(tmp_path: Path) -> None:
    book = tmp_path / "b.json"
    init_budget(book, epsilon=3.0, delta=1e-6, relation="user")
    go = tmp_path / "go"
    go.touch()
    (p,) = _children(book, go, 1, "die")
    assert p.wait(timeout=120) == 9
    s = DatasetBudget(book).summary()
    (c,) = s["charges"]
    assert c["state"] == "pending" and c["process_running_here"] is False
    assert s["pending"]["epsilon"] == 1.0 and s["left"]["epsilon"] == 2.0  # counted as spent
    shown = " ".join(_cli("budget", "show", book).output.split())
    assert "pending (process ended: refund after checking nothing was published)" in shown
    r = _cli("budget", "refund", book, "--charge", c["id"], "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["left"]["epsilon"] == 3.0
    r = _cli("budget", "refund", book, "--charge", c["id"])  # not pending any more
    assert r.exit_code == 2 and "a pending charge" in " ".join(r.output.split())
    # a pending charge whose process still runs here is not refunded
    with DatasetBudget(book).charge(PrivacyCost.of("user", 0.5), what="running") as ch:
        r = _cli("budget", "refund", book, "--charge", ch.id)
        assert r.exit_code == 2 and "still runs on this machine" in " ".join(r.output.split())


# -- relations, non-DP releases and public facts, from the command line -----------------------
def test_releases_that_do_not_compose_are_refused_up_front(tmp_path: Path, aol_215_path) -> None:  # noqa: ANN001
    user = tmp_path / "user.json"
    init_budget(user, epsilon=5.0, delta=1e-5, relation="user")
    tab = ROOT / "tests" / "data" / "tabular"
    base = ["tabular", "anonymize", tab / "adult.csv", "--hierarchies", tab, "--epsilon", 2,
            "--delta", 1e-4, "--max-records", 1000, "--seed", 1]  # fmt: skip
    graph = tmp_path / "g.txt"
    graph.write_text("0\t1\n1\t2\n2\t3\n")
    before = user.read_bytes()
    cases = [
        ([*base, "--out", tmp_path / "t1", "--model", "dp"], "one-record-per-user"),
        ([*base, "--out", tmp_path / "t2", "--model", "kanon", "--k", 3], "not differentially"),
        (["release", "ump", aol_215_path, "--out", tmp_path / "u", "--epsilon", 1, "--delta",
          1e-6, "--mode", "conditional", "--objective", "size"], "conditional"),
        (["release", "zealous", aol_215_path, "--out", tmp_path / "z", "--epsilon", 1,
          "--delta", 1e-6, "--max-items", 2, "--max-users", 1000], "user-replace"),
        (["cels", "local", "--share", aol_215_path, "--share", aol_215_path, "--out",
          tmp_path / "c", "--epsilon", 1, "--delta", 1e-3, "--mode", "conditional",
          "--objective", "kl"],
         "not differentially private"),
        (["social", "recommend", "--graph", graph, "--nodes", 12, "--out", tmp_path / "s",
          "--epsilon", 1, "--mechanism", "exponential", "--target", 1], "edge-outside-targets"),
    ]  # fmt: skip
    for args, why in cases:
        r = _cli(*args, "--budget", user)
        assert r.exit_code == 2 and why in " ".join(r.output.split()), (args, r.output)
        assert not Path(args[args.index("--out") + 1]).exists()
    assert user.read_bytes() == before
    # declared one record per user: the tabular extract of the same users composes
    users = tmp_path / "users.json"
    init_budget(users, epsilon=5.0, delta=1e-2, relation="user", one_record_per_user=True)
    r = _cli(*cases[0][0], "--budget", users, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["budget"]["spent"]["epsilon"] == 2.0
    # a replace-one-user budget takes ZEALOUS' probabilistic guarantee, and a user-level
    # release at twice its ε (replace = remove + add)
    rep = tmp_path / "replace.json"
    init_budget(rep, epsilon=5.0, delta=1e-4, relation="user-replace")
    r = _cli(*cases[3][0], "--budget", rep, "--json")
    assert r.exit_code == 0, r.output
    r = _cli("release", "korolova", aol_215_path, "--out", tmp_path / "k", "--epsilon", 1,
             "--delta", 1e-7, "--max-queries", 2, "--budget", rep, "--json")  # fmt: skip
    res = json.loads(r.output)
    assert res["budget"]["spent"]["epsilon"] == pytest.approx(1.0 + 2 * res["epsilon"])


def test_the_budget_file_holds_only_public_facts(tmp_path: Path, aol_215_path: Path) -> None:
    book = tmp_path / "b.json"
    init_budget(book, epsilon=9.0, delta=1e-5, relation="user")
    r = _cli("release", "korolova", aol_215_path, "--out", tmp_path / "rel", "--epsilon", 2,
             "--delta", 1e-6, "--selection", "probe-reweight-2r", "--max-clicks", 1, "--budget",
             book, "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    text = book.read_text()
    prov = json.loads((tmp_path / "rel.private.json").read_text())
    for secret in (str(aol_215_path), aol_215_path.name, prov["inputs"][0]["sha256"],
                   str(prov["inputs"][0]["rows"]), str(tmp_path)):  # fmt: skip
        assert secret not in text, secret
    s = DatasetBudget(book).summary()
    assert s["zcdp"] is not None and s["zcdp"]["epsilon"] > 0  # every part zCDP: stated
    # the zCDP figure is only stated when every charge is zCDP (Korolova's thresholds are not)
    acc = Accountant(Budget(9.0, 1e-5), "user")
    with acc.charge(_kor().cost(), what="k"):
        pass
    assert acc.summary()["zcdp"] is None


def test_a_session_charges_any_family_through_charge(tmp_path: Path, aol_215) -> None:  # noqa: ANN001
    from searchveil.release import write_release
    from searchveil.release.ump.e2e import E2EParams, release_ump_e2e

    session = Session(total=Budget(3.0, 1e-5), relation="user")
    p = E2EParams.from_budget(epsilon=1.0, delta=1e-6, pairs="zealous", max_pairs=2)
    with session.charge(p.cost(), what="release ump") as ch:
        rel = release_ump_e2e(aol_215, p, rng=make_rng(1), metrics=False)
        write_release(rel, tmp_path / "san")
        ch.record_written(tmp_path / "san")
    s = session.summary()
    assert s["spent"]["epsilon"] == rel.ledger["epsilon"] == p.cost().epsilon
    assert s["charges"][0]["cost"]["split"] == rel.ledger["split"]


@pytest.mark.slow
def test_two_release_commands_racing_never_overspend(tmp_path: Path, aol_215_path: Path) -> None:
    """Two `release korolova` processes started at once against a budget that holds one."""
    book = tmp_path / "b.json"
    init_budget(book, epsilon=3.0, delta=1e-6, relation="user")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    procs = [subprocess.Popen(
        [sys.executable, "-m", "searchveil", "release", "korolova", str(aol_215_path), "--out",
         str(tmp_path / f"r{i}"), "--epsilon", "2", "--delta", "1e-7", "--max-queries", "3",
         "--budget", str(book), "--json"], env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL) for i in range(2)]  # fmt: skip
    assert sorted(p.wait(timeout=600) for p in procs) == [0, 2]
    assert sum((tmp_path / f"r{i}").exists() for i in range(2)) == 1
    s = DatasetBudget(book).summary()
    assert [c["state"] for c in s["charges"]] == ["committed"] and s["left"]["epsilon"] > 0.99


def test_the_readme_session_runs(tmp_path: Path, aol_215_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    """The README's "From Python" two-release session, on the bundled sample."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("```python\nfrom searchveil import (Budget, BudgetExceededError")
    code = text[start + len("```python\n") : text.index("```", start + 10)]
    monkeypatch.chdir(tmp_path)
    exec(code.replace('"aol-top1000-users.tsv.gz"', repr(str(aol_215_path))), {})  # noqa: S102
    out = capsys.readouterr().out
    assert "requested 2.30" in out and "remains" in out
    assert (tmp_path / "rel1").is_dir() and (tmp_path / "rel2").is_dir()
    assert not (tmp_path / "rel3").exists()


def test_a_commit_records_what_the_ledger_spent(tmp_path: Path) -> None:
    """Below the admitted charge (a declared (ε, δ) spent in part): the ledger's cost counts;
    above it (a bug): recorded all the same, then raised."""
    acc = Accountant(Budget(3.0, 1e-6), "record")
    with acc.charge(PrivacyCost.of("record", 1.0, 1e-7), what="t") as ch:
        ch.record(PrivacyCost.of("record", 0.75, 1e-8).ledger_fields())
    assert acc.state.spent() == (0.75, 1e-8)
    with pytest.raises(InternalError, match="spends"):
        with acc.charge(PrivacyCost.of("record", 0.5), what="t") as ch:
            ch.record(PrivacyCost.of("record", 0.8).ledger_fields())
    assert acc.state.spent() == (1.55, 1e-8)


def test_budget_init_and_show_refuse_bad_input(tmp_path: Path) -> None:
    book = tmp_path / "b.json"
    r = _cli("budget", "init", book, "--epsilon", 1, "--relation", "user")  # no δ
    assert r.exit_code == 2 and "delta" in r.output and not book.exists()
    r = _cli("budget", "init", book, "--epsilon", 1, "--delta", 0, "--relation", "row")
    assert r.exit_code == 2 and "relation" in r.output and not book.exists()
    assert _cli("budget", "init", book, "--epsilon", 1, "--delta", 0, "--relation",
                "user").exit_code == 0  # fmt: skip
    before = book.read_bytes()
    r = _cli("budget", "init", book, "--epsilon", 9, "--delta", 0, "--relation", "user")
    assert r.exit_code == 2 and "already exists" in r.output and book.read_bytes() == before
    doc = json.loads(before)
    doc["charges"] = [{"id": "x", "what": "y", "state": "spent", "charged": {}}]
    book.write_text(json.dumps(doc))
    r = _cli("budget", "show", book)
    assert r.exit_code == 2 and "malformed budget file" in " ".join(r.output.split())
    (tmp_path / "n.json").write_text("{}")
    assert _cli("budget", "show", tmp_path / "n.json").exit_code == 2
    assert _cli("budget", "show", tmp_path / "none.json").exit_code == 2
