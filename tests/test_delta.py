"""δ that protects everyone (issue 12, docs/privacy/delta.md): the expected number of items held
by a single user that a release publishes (exact, from the keep curves; checked against brute
force and by simulation), the δ < 1/U check and warning, the δ solver, and ``--engine auto``
(same tables as memory under a seed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from searchveil.cli import app
from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.threshold import discrete_sf, exact_threshold_privacy
from searchveil.model import SearchLog
from searchveil.params import single_user_check, single_user_exposure, solve_delta_single_user
from searchveil.release.advice import korolova_advice
from searchveil.release.korolova import KorolovaParams, release_korolova
from searchveil.release.selection import SelectionParams, release_selection
from searchveil.release.zealous import ZealousParams, release_zealous
from searchveil.rng import make_rng

runner = CliRunner()
SAMPLE = Path(__file__).resolve().parents[1] / "src/searchveil/data/aol-gayo-avello-215-users.tsv"


def _run(args: list[object]):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def _log() -> SearchLog:
    """12 users: one private query each, first (user 0 poses it twice), then 'common' (held by
    all; twice for users 0-5) and 'pair' (users 0 and 1)."""
    rows = []
    for u in range(12):
        rows.append((f"u{u}", f"private {u}"))
        if u == 0:
            rows.append((f"u{u}", "private 0"))
        rows.append((f"u{u}", "common"))
        if u < 6:
            rows.append((f"u{u}", "common"))
        if u < 2:
            rows.append((f"u{u}", "pair"))
    df = pl.DataFrame(rows, schema=["user", "query"], orient="row").with_columns(
        # distinct times: a repeated query is a new query event
        time=pl.datetime(2006, 3, 1) + pl.duration(minutes=pl.int_range(pl.len()))
    )
    return SearchLog.from_frame(df)


def _params(delta: float, d: int = 3) -> KorolovaParams:
    return KorolovaParams.from_budget(epsilon=math.log(10), delta=delta, d=d,
                                      url_selection="none", split=(1.0, 1.0),
                                      threshold_rule="exact")  # fmt: skip


def test_exposure_is_the_exact_sum_over_single_user_queries() -> None:
    p = _params(0.2)
    rel = release_korolova(_log(), p, rng=make_rng(1))
    su = rel.report["single_user"]
    assert su["single_user_items"] == 12 and su["exact"] is True
    # by hand: user 0's private query has bounded count 2 (posed twice, d = 3), the 11 others 1
    b = DiscreteLaplace(scale=p.b).effective_scale
    T = math.floor(p.K) + 1
    want = float(discrete_sf(T - 2, b)) + 11 * float(discrete_sf(T - 1, b))
    assert su["expected_single_user_published"] == pytest.approx(want, rel=1e-12)
    # any (ε, δ)-DP release publishes a one-user item with probability ≤ δ
    assert su["expected_single_user_published"] <= su["bound_items_times_delta"] + 1e-12
    # δ ≥ 1/U here (U = 12): warned (the private report checks the exact count) ...
    assert su["warning"] and "1/U" in su["warning"]
    assert (
        su["delta_check"]["users_bound"] == 12
        and "private" in su["delta_check"]["users_bound_source"]
    )
    # ... and the public ledger checks only a declared bound (none here), never the count
    assert rel.ledger["guarantee"]["delta_vs_users"]["checked"] is False
    assert "expected_single_user_published" not in json.dumps(rel.ledger)
    assert "single_user_items" not in json.dumps(rel.ledger)
    declared = release_korolova(_log(), p, rng=make_rng(1), max_users=20)
    chk = declared.ledger["guarantee"]["delta_vs_users"]
    assert (
        chk["ok"] is False
        and chk["users_bound"] == 20
        and declared.ledger["declared"] == {"max_users": 20}
    )
    with pytest.raises(InvalidParameterError, match="max-users"):
        release_korolova(_log(), p, rng=make_rng(1), max_users=11)  # the log has 12 users


def test_exposure_matches_simulation() -> None:
    """Seeded: the mean number of single-user queries published over 300 releases agrees with
    the exact expectation (z < 5)."""
    p = _params(0.3)
    log = _log()
    exp = release_korolova(log, p, rng=make_rng(0)).report["single_user"]
    mu = exp["expected_single_user_published"]
    rng = make_rng(2024)
    n = 300
    hits = np.array([
        release_korolova(log, p, rng=rng).tables["queries"]
        .filter(pl.col("query").str.starts_with("private")).height
        for _ in range(n)
    ])  # fmt: skip
    se = math.sqrt(max(mu, 1e-3) / n)
    assert abs(hits.mean() - mu) < 5 * se, (hits.mean(), mu)
    assert mu > 0.3  # the test has power: single-user queries are often published at this δ


def test_zealous_and_select_report_exposure() -> None:
    log = _log()
    z = release_zealous(
        log,
        ZealousParams.from_budget(epsilon=2.0, delta=1e-3, m=2, item_type="queries",
                                  guarantee="indistinguishability"),
        rng=make_rng(1),
    )  # fmt: skip
    zs = z.report["single_user"]
    assert zs["single_user_items"] == 12 and zs["delta_check"]["users_bound"] == 12
    assert 0 <= zs["expected_single_user_published"] <= zs["bound_items_times_delta"] + 1e-12
    assert z.ledger["guarantee"]["delta_vs_users"]["checked"] is False  # no declared bound
    for strat in ("laplace", "gaussian"):
        s = release_selection(log, SelectionParams(strategy=strat, epsilon=2.0, delta=0.2, d=2),
                           rng=make_rng(1))  # fmt: skip
        ss = s.report["single_user"]
        # each user's private query is their first distinct query: all 12 are candidates
        assert ss["single_user_items"] == 12
        assert ss["delta_check"]["ok"] is False and ss["warning"]
        assert "single_user_items" not in json.dumps(s.ledger)


def test_single_user_check_and_solver() -> None:
    assert single_user_check(1e-4, 50_000)["ok"] is False
    assert single_user_check(1e-6, 50_000)["ok"] is True
    # the issue's numbers: ~48,000 single-user queries, target 0.01 → δ = 1e-7 (power of ten)
    s = solve_delta_single_user(target=0.01, single_user_items=48_000, users=50_000)
    assert s["delta"] == pytest.approx(1e-7) and s["delta_unrounded"] == pytest.approx(0.01 / 48e3)
    assert s["expected_single_user_published_at_most"] <= 0.01
    # data-independent: N ≤ U · d
    s = solve_delta_single_user(target=0.01, users=1000, items_per_user=5)
    assert s["single_user_items_bound"] == 5000 and s["delta"] == pytest.approx(1e-6)
    # never above 1/(10·U)
    s = solve_delta_single_user(target=0.01, single_user_items=1, users=1000)
    assert s["delta"] <= 1e-4
    with pytest.raises(InvalidParameterError, match="single-user-items/max-users"):
        solve_delta_single_user(target=0.01)
    with pytest.raises(InvalidParameterError, match="target"):
        solve_delta_single_user(target=0, users=10)
    with pytest.raises(InvalidParameterError, match="delta"):
        single_user_exposure([0.1], delta=1.5, users=10)


def test_advisor_issue_numbers() -> None:
    """δ = 1e-4, e^ε = 10, d = 1, ~48,000 single-user queries among 50,000 users: several
    single-user queries published per run (the issue's ≈ 3.5 is for the demo's split budget),
    and δ ≥ 1/U is flagged; solving for 0.01 brings it under 0.01."""
    r = korolova_advice(epsilon=math.log(10), delta=1e-4, d_list=[1], K=None, b=None, b_q=None,
                        d_c=None, b_c=None, distinct=False, keep_curve=None, users=50_000,
                        single_user_items=48_000)  # fmt: skip
    row = r["rows"][0]
    # d = 1: the exact δ is the keep probability of a one-user query
    pr = exact_threshold_privacy(d=1, K=row["K_exact_discrete"], b=math.log(10) ** -1)
    assert row["keep_prob_single_user_query"] == pytest.approx(pr.delta)
    assert 1.0 < row["expected_single_user_published"] < 5.0
    assert row["delta_lt_1_over_U"] is False and r["warnings"]
    r = korolova_advice(epsilon=math.log(10), delta=None, d_list=[1, 5], K=None, b=None,
                        b_q=None, d_c=None, b_c=None, distinct=False, keep_curve=None,
                        users=50_000, single_user_items=48_000,
                        max_single_user_items=0.01)  # fmt: skip
    assert r["delta_solved"]["delta"] == pytest.approx(1e-7)
    assert all(x["expected_single_user_published"] <= 0.01 for x in r["rows"])
    assert "warnings" not in r


def test_params_cli(tmp_path: Path) -> None:
    r = _run(["params", "korolova", "--exp-epsilon", 10, "--max-queries", "1,5",
              "--max-single-user-items", 0.01, "--max-users", 50000, "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    # N ≤ U·max(d) = 250,000 → δ = 1e-8
    assert res["delta_solved"]["delta"] == pytest.approx(1e-8)
    r = _run(["params", "korolova", "--exp-epsilon", 10, "--max-queries", 1, "--delta", 1e-4,
              "--max-single-user-items", 0.01, "--max-users", 50000])  # fmt: skip
    assert r.exit_code == 2 and "delta" in r.output
    r = _run(["params", "korolova", "--exp-epsilon", 10, "--max-queries", 1, "--delta", 1e-4,
              "--max-users", 50000, "--single-user-items", 48000])  # fmt: skip
    assert r.exit_code == 0 and "warning" in r.output and "1/U" in r.output


def test_release_cli_warns_when_delta_does_not_protect_everyone(tmp_path: Path) -> None:
    r = _run(
        [
            "release",
            "korolova",
            SAMPLE,
            "--out",
            tmp_path / "r",
            "--epsilon",
            2.3,
            "--delta",
            0.01,
            "--max-queries",
            1,
            "--urls",
            "none",
            "--seed",
            1,
            "--json",
        ]
    )
    assert r.exit_code == 0, r.output
    assert "warning" in r.output and "1/U" in r.output
    led = json.loads((tmp_path / "r" / "ledger.json").read_text())
    assert led["guarantee"]["delta_vs_users"]["checked"] is False  # no --max-users
    prov = json.loads((tmp_path / "r.private.json").read_text())
    assert prov["report"]["single_user"]["delta_check"]["ok"] is False
    r = _run(
        [
            "release",
            "korolova",
            SAMPLE,
            "--out",
            tmp_path / "r2",
            "--epsilon",
            2.3,
            "--delta",
            1e-6,
            "--max-queries",
            1,
            "--urls",
            "none",
            "--seed",
            1,
        ]
    )
    assert r.exit_code == 0, r.output
    assert "warning" not in r.output and "single-user items published" in r.output


@pytest.mark.parametrize(
    "args",
    [
        ["korolova", "--epsilon", 2.3, "--delta", 1e-4, "--max-queries", 2, "--max-clicks", 1],
        ["zealous", "--epsilon", 2.0, "--delta", 1e-4, "--max-items", 2, "--max-users", 1000,
         "--item-type", "queries"],
    ],
)  # fmt: skip
def test_engine_auto_same_tables_as_memory(tmp_path: Path, args: list[object]) -> None:
    outs = {}
    for eng in ("memory", "auto"):
        out = tmp_path / eng
        r = _run(["release", args[0], SAMPLE, "--out", out, *args[1:], "--seed", 7,
                  "--engine", eng, "--json"])  # fmt: skip
        assert r.exit_code == 0, r.output
        outs[eng] = json.loads(r.stdout)
    assert outs["auto"]["private"]["report"]["engine"]["engine"] == "polars"
    assert "engine" not in outs["memory"]["private"]["report"]
    files = sorted(p.name for p in (tmp_path / "memory").iterdir() if p.suffix == ".tsv")
    assert files
    for f in files:
        assert (tmp_path / "memory" / f).read_bytes() == (tmp_path / "auto" / f).read_bytes()
    la = json.loads((tmp_path / "auto" / "ledger.json").read_text())
    lm = json.loads((tmp_path / "memory" / "ledger.json").read_text())
    la.pop("created_utc"), lm.pop("created_utc")
    assert la == lm  # the ledger does not depend on the engine auto chose


def test_engine_auto_falls_back_to_memory(tmp_path: Path) -> None:
    """A CSV with its own column names is not the AOL layout: auto runs in memory."""
    src = tmp_path / "log.csv"
    rows = ["who,text"] + [f"u{i % 40},query {i % 7}" for i in range(400)]
    src.write_text("\n".join(rows) + "\n")
    r = _run(["release", "korolova", src, "--out", tmp_path / "r", "--user-col", "who",
              "--query-col", "text", "--time-col", "", "--url-col", "", "--rank-col", "",
              "--epsilon", 2.3, "--delta", 1e-4, "--max-queries", 1, "--urls", "none",
              "--seed", 1, "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "engine" not in json.loads(r.stdout)["private"]["report"]
