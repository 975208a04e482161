"""The fidelity figures of a same-schema log (issue 42 item 4) on small hand-built logs whose
answers are derived in the comments; a release without the columns; the CLI's JSON keys."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from searchveil.cli import app
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.evaluate import evaluate_release
from searchveil.evaluate.fidelity import (
    FIGURES,
    LogColumns,
    PairDefinition,
    Status,
    click_rank,
    fidelity_figures,
    hour_of_day,
    log_columns,
    query_only_share,
    release_columns,
    session_lengths,
    substitution_map,
    total_variation,
    wasserstein_1,
)
from searchveil.io.ledger import ReleaseWriter, build_ledger
from searchveil.mechanisms.budget import PrivacyCost, Relation
from searchveil.model import SearchLog
from searchveil.report.evaluation import evaluation_sections
from searchveil.report.fidelity import fidelity_section, fidelity_table

runner = CliRunner()
T0 = datetime(2006, 3, 1, 10, 0)


def _t(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _orig(rows: list[tuple]) -> LogColumns:
    """(user, query, time, rank, url) rows → the original's columns."""
    df = pl.DataFrame(
        rows,
        schema={"user": pl.String, "query": pl.String, "time": pl.Datetime("us"),
                "rank": pl.Int64, "url": pl.String},
        orient="row",
    )  # fmt: skip
    return log_columns(SearchLog.from_frame(df))


def _aol(rows: list[tuple], count: list[int] | None = None) -> pl.DataFrame:
    """(AnonID, Query, QueryTime, ItemRank, ClickURL) rows as a release writes them: strings,
    empty for none (and a Count column if given)."""
    df = pl.DataFrame(
        [["" if v is None else str(v) for v in r] for r in rows],
        schema=["AnonID", "Query", "QueryTime", "ItemRank", "ClickURL"],
        orient="row",
    )
    return df if count is None else df.with_columns(pl.Series("Count", [str(c) for c in count]))


def test_distances_by_hand() -> None:
    p = pl.DataFrame({"k": [1, 2], "share": [0.5, 0.5]})
    q = pl.DataFrame({"k": [1, 3], "share": [0.75, 0.25]})
    # TV = ½(|0.5 − 0.75| + |0.5 − 0| + |0 − 0.25|) = ½ · 1 = 0.5
    assert total_variation(p, q, "k") == pytest.approx(0.5)
    # CDFs at 1, 2: (0.5, 1) vs (0.75, 0.75): W1 = 0.25 + 0.25 = 0.5
    assert wasserstein_1(p, q, "k") == pytest.approx(0.5)
    assert total_variation(p, p, "k") == 0.0


def test_hour_of_day_by_hand() -> None:
    o = _orig([("1", "a", _t(0), None, None), ("1", "b", _t(5), None, None),
               ("2", "a", _t(60), None, None), ("2", "c", _t(70), None, None)])  # fmt: skip
    # release rows: hour 10 with Count 3, hour 12 with Count 1
    r = release_columns(
        _aol([("7", "a", "2006-03-01 10:30:00", None, "http://x"),
              ("8", "b", "2006-03-02 12:00:00", None, None)], count=[3, 1])
    )  # fmt: skip
    f = hour_of_day(o, r)
    # original: 10 h ½, 11 h ½; release: 10 h ¾, 12 h ¼ → TV = ½(¼ + ½ + ¼) = 0.5
    assert f.status == Status.MEASURED and f.value == pytest.approx(0.5)
    assert f.details["original"][10] == 0.5 and f.details["release"][12] == 0.25


def test_click_rank_by_hand() -> None:
    o = _orig([("1", "a", _t(0), 1, "u1"), ("1", "a", _t(0), 1, "u2"), ("1", "b", _t(3), 2, "u"),
               ("2", "c", _t(0), 3, "u"), ("2", "d", _t(1), None, None)])  # fmt: skip
    r = release_columns(
        _aol([("9", "a", "2006-03-01 10:00:00", 1, "u1"), ("9", "b", "2006-03-01 10:01:00", 2, "u"),
              ("9", "b", "2006-03-01 10:01:00", 2, "u3"),
              ("9", "c", "2006-03-01 10:02:00", 4, None)])  # a rank without a click: not counted
    )  # fmt: skip
    f = click_rank(o, r)
    # original 1: ½, 2: ¼, 3: ¼; release 1: ⅓, 2: ⅔ → TV = ½(⅙ + 5/12 + ¼) = 5/12
    assert f.value == pytest.approx(5 / 12)
    assert f.details["release"][1] == [2, pytest.approx(2 / 3)]


def test_session_lengths_by_hand_and_row_order() -> None:
    # user 1: a, b 5 min apart, then c 55 min later (a new session); user 2: one query event of
    # two rows (two clicks, same time) → sessions of 2, 1 and 1 query events
    o = _orig([("1", "a", _t(0), None, None), ("1", "b", _t(5), None, None),
               ("1", "c", _t(60), None, None), ("2", "d", _t(0), 1, "u"),
               ("2", "d", _t(0), 2, "v")])  # fmt: skip
    rows = [
        ("5", q, f"2006-03-01 10:{m:02d}:00", None, None)
        for q, m in (("a", 0), ("b", 9), ("c", 20))
    ]
    for order in (rows, rows[::-1]):  # a release's row order says nothing: sorted by time
        f = session_lengths(o, release_columns(_aol(order)))
        # P(1) = ⅔, P(2) = ⅓ against P(3) = 1: TV = ½(⅔ + ⅓ + 1) = 1; W1 = 3 − 4/3 = 5/3
        assert f.value == pytest.approx(1.0)
        assert f.details["wasserstein_1"] == pytest.approx(5 / 3)
        assert f.details["mean_original"] == pytest.approx(4 / 3)
        assert f.details["mean_release"] == pytest.approx(3.0)
    # a SessionID on the release only: one rule on both logs, the gap (test below) → still 1
    with_ids = _aol(rows).with_columns(pl.Series("SessionID", ["1", "1", "2"]))
    assert session_lengths(o, release_columns(with_ids)).value == pytest.approx(1.0)
    # a SessionID without times, the only sessions the release has: its rows are grouped by
    # it (b | a, c): sessions of 2 and 1, P(1) = P(2) = ½ → TV = ½(⅙ + ⅙) = ⅙
    no_time = _aol([("5", q, "", None, None) for q in "abc"])
    f3 = session_lengths(o, release_columns(no_time.with_columns(
        pl.Series("SessionID", ["2", "1", "2"]))))  # fmt: skip
    assert f3.value == pytest.approx(1 / 6)


def test_session_lengths_one_rule_on_both_logs(tmp_path: Path) -> None:
    from searchveil.io.readers import read_log

    # labelled sessions (SessionID) a, b | c — though c follows b after 5 minutes
    p = tmp_path / "labelled.tsv"
    p.write_text("AnonID\tQuery\tQueryTime\tItemRank\tClickURL\tSessionID\n"
                 "1\ta\t2006-03-01 10:00:00\t\t\t0\n1\tb\t2006-03-01 10:05:00\t\t\t0\n"
                 "1\tc\t2006-03-01 10:10:00\t\t\t1\n", encoding="utf-8")  # fmt: skip
    o = log_columns(read_log(p))
    assert "session_id" in o.has
    rows = _aol([("1", q, f"2006-03-01 10:{m:02d}:00", None, None) for q, m in
                 (("a", 0), ("b", 5), ("c", 10))])  # fmt: skip
    # a release without SessionID: the gap on both logs (a, b, c: one session each) → 0; with
    # the labels on one side only it would be ½·(½ + ½ + 1) = 1
    assert session_lengths(o, release_columns(rows)).value == 0.0
    # both labelled: the labels on both → 0 as well
    labelled = rows.with_columns(pl.Series("SessionID", ["0", "0", "1"]))
    assert session_lengths(o, release_columns(labelled)).value == 0.0


def test_query_only_share_by_hand() -> None:
    o = _orig([("1", "a", _t(0), None, "u"), ("1", "b", _t(1), None, "u"),
               ("1", "c", _t(2), None, "u"), ("2", "d", _t(0), None, None)])  # fmt: skip
    # original: 1 of 4 rows without a click = 0.25
    same = release_columns(_aol([("1", "a", "", None, "u"), ("2", "b", "", None, None)], [3, 1]))
    f = query_only_share(o, same)
    assert f.details == {"original": 0.25, "release": 0.25} and f.value == 0.0
    # a four-column log: every row a click → 0, measured (the column is there, no row lacks it)
    four = pl.DataFrame({"AnonID": ["1"], "Query": ["a"], "ClickURL": ["u"], "Count": ["5"]})
    f4 = query_only_share(o, release_columns(four))
    assert f4.status == Status.MEASURED and f4.value == pytest.approx(0.25)


def _users(groups: list[tuple[list[str], int]], user0: int = 0) -> list[tuple]:
    """Rows of ``n`` users holding each query set, one query a minute."""
    rows, u = [], user0
    for queries, n in groups:
        for _ in range(n):
            rows += [(str(u), q, _t(i), None, None) for i, q in enumerate(queries)]
            u += 1
    return rows


def test_substitution_map_by_hand() -> None:
    # 3 users hold {a, b}, 3 hold {c, d}: co-occurrence substitutions a↔b, c↔d
    o = _orig(_users([(["a", "b"], 3), (["c", "d"], 3)]))

    def rel(groups: list[tuple[list[str], int]]) -> LogColumns:
        return release_columns(_aol([(u, q, t.isoformat(" "), r, url)
                                     for u, q, t, r, url in _users(groups, 100)]))  # fmt: skip

    co = PairDefinition.COOCCURRENCE
    assert substitution_map(o, rel([(["a", "b"], 3), (["c", "d"], 3)]), pairs=co).value == 1.0
    # a↔b kept, c→e and d→f instead of c↔d: AP 1, 1, 0, 0 → MAP 0.5, every query covered
    half = substitution_map(o, rel([(["a", "b"], 3), (["c", "e"], 3), (["d", "f"], 3)]), pairs=co)
    assert half.value == pytest.approx(0.5) and half.details["coverage"] == 1.0
    # random pairing (a, c) and (b, d): no right suggestion
    assert substitution_map(o, rel([(["a", "c"], 3), (["b", "d"], 3)]), pairs=co).value == 0.0
    # session pairs: consecutive queries (a → b, c → d); the same log scores 1
    s = substitution_map(o, rel([(["a", "b"], 3), (["c", "d"], 3)]), pairs="session")
    assert s.value == 1.0 and s.details["pairs"] == "session"
    with pytest.raises(InvalidParameterError, match="pairs"):
        substitution_map(o, o, pairs="adjacent")


def test_release_without_the_columns_says_so() -> None:
    o = _orig(_users([(["a", "b"], 3), (["c", "d"], 3)]))
    four = pl.DataFrame({"AnonID": ["1", "1", "2", "2"], "Query": ["a", "b", "a", "b"],
                         "ClickURL": ["u", "v", "u", "v"], "Count": ["1", "2", "1", "1"]},
                        )  # fmt: skip
    figs = fidelity_figures(o, four)
    assert list(figs) == list(FIGURES)
    for key in ("hour_of_day", "click_rank", "session_lengths", "substitution_session"):
        assert figs[key].status == Status.NOT_IN_RELEASE and figs[key].value is None
        d = figs[key].to_dict()
        assert d["applicable"] is False and d["reason"].startswith("not in the release")
    # ItemRank is in neither: the reason says so
    assert "the original has none either" in figs["click_rank"].reason
    assert figs["query_only_share"].status == Status.MEASURED
    assert figs["substitution_cooccurrence"].status == Status.MEASURED
    # the original lacking a column: "not in the original"
    r = release_columns(_aol([("1", "a", "2006-03-01 10:00:00", 1, "u")]))
    assert click_rank(o, r).status == Status.NOT_IN_ORIGINAL
    with pytest.raises(InputFormatError):
        release_columns(pl.DataFrame({"Query": ["a"]}))


def _write_log(path: Path, rows: list[tuple]) -> Path:
    lines = ["AnonID\tQuery\tQueryTime\tItemRank\tClickURL"]
    lines += ["\t".join("" if v is None else (v.isoformat(" ") if isinstance(v, datetime) else
                                               str(v)) for v in r) for r in rows]  # fmt: skip
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_cli_json_keys_and_report(tmp_path: Path) -> None:
    # c and a typed in the same minute, in that order: the session pairs are (c, a), (a, b)
    rows = [(u, q, _t(m + 60 * int(u)), 1 + i, f"http://{q}" if i % 2 else None)
            for u in ("1", "2", "3") for i, (q, m) in enumerate([("c", 0), ("a", 0), ("b", 9)])
            ]  # fmt: skip
    orig = _write_log(tmp_path / "orig.tsv", rows)
    rel = tmp_path / "rel"
    four = pl.DataFrame({"AnonID": ["1", "2"], "Query": ["b", "b"], "ClickURL": ["http://b"] * 2,
                         "Count": [1, 2]})  # fmt: skip
    with ReleaseWriter(rel) as w:
        w.write_table("log", four)
        w.write_ledger(build_ledger(mechanism="ump-e2e-synthetic-ids", notion="DP",
                                    cost=PrivacyCost.of(Relation.USER, 1.0, 1e-6),
                                    parameters={}, rng=None))  # fmt: skip
    r = runner.invoke(app, ["evaluate", str(orig), str(rel), "--json",
                            "--substitution-queries", "10"])  # fmt: skip
    assert r.exit_code == 0, r.output
    fid = json.loads(r.stdout)["fidelity"]
    assert set(fid) == {"applicable", "release_columns", *FIGURES}
    assert fid["release_columns"] == ["AnonID", "Query", "ClickURL", "Count"]
    for key in FIGURES:
        assert {"applicable", "status", "value", "distance", "definition"} <= set(fid[key])
    assert fid["hour_of_day"]["status"] == "not in the release"
    assert fid["query_only_share"]["value"] == pytest.approx(6 / 9)  # 6 of 9 rows: no click
    # a log file (synth output) as the release: every column, compared with itself
    r2 = runner.invoke(app, ["evaluate", str(orig), str(orig), "--json",
                             "--substitution-queries", "10"])  # fmt: skip
    assert r2.exit_code == 0, r2.output
    res = json.loads(r2.stdout)
    assert res["release"]["mechanism"].startswith("log file")
    for key in ("hour_of_day", "click_rank", "session_lengths", "query_only_share"):
        assert res["fidelity"][key]["value"] == 0.0, key
    # and the same substitutions (the tie keeps the log's order: sorted by query it would not)
    for key in ("substitution_cooccurrence", "substitution_session"):
        assert res["fidelity"][key]["value"] == 1.0, key
    text = "".join(evaluation_sections(res, plots=False))
    assert "Fidelity of the same-schema log" in text and "not in the release" not in text
    assert "<img" in "".join(fidelity_section(res))  # the three distributions, plotted
    assert fidelity_table([("log", res)])[0].startswith("<h3>Fidelity")
    assert fidelity_table([("x", {"fidelity": {"applicable": False}})]) == []


def test_evaluate_kanon_release_on_aol_sample(aol_215, tmp_path: Path) -> None:
    """A k-anonymous log (AOL columns, a random AnonID per session) of the real sample."""
    from searchveil.release.histogram import write_release
    from searchveil.release.kanonymity import KAnonParams, release_kanon
    from searchveil.rng import make_rng

    out = tmp_path / "k"
    write_release(release_kanon(aol_215, KAnonParams(k=2), rng=make_rng(3)), out)
    fid = evaluate_release(aol_215, out, metrics=("fidelity",), substitution_queries=50)["fidelity"]
    # k-anonymity drops the rare queries' rows: the hours and sessions move a little
    assert 0.0 < fid["hour_of_day"]["value"] < 0.5
    assert 0.0 < fid["session_lengths"]["value"] < 1.0
    assert fid["click_rank"]["status"] == "not in the release"  # the sample has no ranks
    # a new AnonID for every session: the pairs a user forms across sessions are gone, the
    # consecutive queries of a session are kept
    assert fid["substitution_cooccurrence"]["value"] < fid["substitution_session"]["value"]
