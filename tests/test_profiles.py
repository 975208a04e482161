"""Input profiles, positional columns, time formats, name clashes and the shared reader options
(issue 12 items 2-3), on small hand-made files in tests/data/readers/."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
import typer
from typer.testing import CliRunner

from searchveil.cli import app
from searchveil.cli._common import READER_PARAM_NAMES, build_reader_options
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.readers import INTERNAL_COLUMNS, ColumnMapping, ReaderOptions, read_log

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "readers"
SOGOU = DATA / "sogouq_sample.txt"  # GBK bytes, 12 users, 36 rows
HEADERLESS = DATA / "headerless.csv"  # epoch,user,query,url,rank; 10 users, 30 rows
TREC = DATA / "trec_session.xml"
POSITIONAL = ["--no-header", "--user-col", "2", "--query-col", "3", "--time-col", "1",
              "--time-format", "epoch", "--url-col", "4", "--rank-col", "5"]  # fmt: skip
# δ < 1/(10·users) for every example below (12 and 10 users)
DP = ["--epsilon", "1", "--delta", "0.0005", "--max-queries", "2", "--seed", "3"]


def cli(*args: object) -> object:
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    p = tmp_path / name
    p.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return p


# -- SogouQ ------------------------------------------------------------------------------------


def test_sogouq_profile_reads_gbk_brackets_rank_click(tmp_path: Path) -> None:
    text = (
        "08:01:02\tu1\t[天气 预报]\t2 1\twww.weather.com.cn/\n"
        "23:59:59\tu2\t[手机]\t10 3\tzol.com/\n"
    )
    p = write(tmp_path, "sogou.txt", text.encode("gbk"))
    log = read_log(p, ReaderOptions.from_profile("sogouq", date="2008-06-01"))
    df = log.df.sort("row")
    assert df.get_column("user").to_list() == ["u1", "u2"]
    assert df.get_column("query").to_list() == ["天气 预报", "手机"]
    assert df.get_column("rank").to_list() == [2, 10]
    assert df.get_column("click_order").to_list() == [1, 3]
    assert df.get_column("url").to_list() == ["www.weather.com.cn/", "zol.com/"]
    assert df.get_column("time").dt.strftime("%Y-%m-%d %H:%M:%S").to_list() == [
        "2008-06-01 08:01:02",
        "2008-06-01 23:59:59",
    ]
    assert log.info.reader is not None and log.info.reader["profile"] == "sogouq"
    # the same bytes read as UTF-8 (an explicit option overrides the profile) fail clearly
    with pytest.raises(InputFormatError, match="not valid utf-8"):
        read_log(p, ReaderOptions.from_profile("sogouq", encoding="utf-8"))


def test_sogouq_without_date_is_1970_and_bad_rank_click_names_line(tmp_path: Path) -> None:
    log = read_log(SOGOU, ReaderOptions.from_profile("sogouq"))
    assert log.df.height == 36 and log.df.get_column("user").n_unique() == 12
    assert set(log.df.get_column("time").dt.year().unique().to_list()) == {1970}
    assert not log.df.get_column("query").str.contains(r"[\[\]]").any()
    bad = write(tmp_path, "s.txt", "08:01:02\tu1\t[a]\t2 1\tx/\n08:01:03\tu1\t[b]\t2\tx/\n")
    with pytest.raises(InputFormatError, match="RANK CLICK") as e:
        read_log(bad, ReaderOptions.from_profile("sogouq"))
    assert e.value.line == 2


def test_stats_and_releases_on_sogouq_layout(tmp_path: Path) -> None:
    r = cli("stats", SOGOU, "--profile", "sogouq", "--date", "2008-06-01", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["rows"] == 36 and s["users"] == 12 and s["input"]["encoding"] == "gb18030"
    r = cli("release", "kanon", SOGOU, "--profile", "sogouq", "--k", "2",
            "--out", tmp_path / "k", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    # reader options and the exact input figures are in the private provenance record
    prov = json.loads((tmp_path / "k.private.json").read_text(encoding="utf-8"))
    assert prov["inputs"][0]["reader"]["profile"] == "sogouq"
    assert prov["inputs"][0]["users"] == 12
    r = cli("release", "korolova", SOGOU, "--profile", "sogouq", *DP, "--out", tmp_path / "r",
            "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    ledger = json.loads((tmp_path / "r" / "ledger.json").read_text(encoding="utf-8"))
    prov = json.loads((tmp_path / "r.private.json").read_text(encoding="utf-8"))
    assert prov["inputs"][0]["reader"]["columns"]["rank_click"] == "4"
    assert ledger["delta"] <= 0.0005 and ledger["delta"] < 1 / (10 * 12)


# -- headerless, positional --------------------------------------------------------------------


def test_stats_and_releases_on_headerless_positional_csv(tmp_path: Path) -> None:
    r = cli("stats", HEADERLESS, *POSITIONAL, "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["rows"] == 30 and s["users"] == 10 and s["clicks"] == 30
    r = cli("release", "kanon", HEADERLESS, *POSITIONAL, "--k", "2", "--out", tmp_path / "k")
    assert r.exit_code == 0, r.output
    r = cli("release", "korolova", HEADERLESS, *POSITIONAL, *DP, "--out", tmp_path / "r")
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "r.private.json").read_text(encoding="utf-8"))["inputs"][0]
    assert rec["reader"]["has_header"] is False and rec["reader"]["columns"]["user"] == "2"
    # evaluate without reader options reads the original with the provenance record's mapping
    r = cli("evaluate", HEADERLESS, tmp_path / "r", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["original"]["rows"] == 30
    # ... and with explicit (wrong) options uses those instead
    r = cli("evaluate", HEADERLESS, tmp_path / "r", "--format", "aol", "--json")
    assert r.exit_code == 2


def test_positional_values_and_time_column_types() -> None:
    log = read_log(
        HEADERLESS,
        fmt="csv",
        has_header=False,
        time_format="epoch",
        columns=ColumnMapping(user="2", query="3", time="1", url="4", rank="5"),
    )
    first = log.df.sort("row").row(0, named=True)
    assert first["user"] == 1 and first["rank"] == 1
    assert str(first["time"]) == "2006-03-01 07:13:52"  # 1141197232 s after 1970 (UTC)


@pytest.mark.parametrize(
    ("fmt", "good", "bad", "expected"),
    [
        ("epoch", "1141197232", "yesterday", "2006-03-01 07:13:52"),
        ("epoch-ms", "1141197232500", "12:00", "2006-03-01 07:13:52.500000"),
        ("iso", "2006-03-01T07:13:52Z", "01/03/2006", "2006-03-01 07:13:52"),
        ("%d/%m/%Y %H:%M", "01/03/2006 07:13", "2006-03-01 07:13", "2006-03-01 07:13:00"),
        ("%H:%M:%S", "07:13:52", "7h13", "1970-01-01 07:13:52"),
    ],
)
def test_time_formats_and_bad_time_names_the_row(
    tmp_path: Path, fmt: str, good: str, bad: str, expected: str
) -> None:
    p = write(tmp_path, "t.csv", f"u,q,t\n1,a,{good}\n2,b,{good}\n3,c,{bad}\n")
    cols = ColumnMapping(user="u", query="q", time="t", url=None, rank=None)
    with pytest.raises(InputFormatError, match="time in column 't'") as e:
        read_log(p, fmt="csv", columns=cols, time_format=fmt)
    assert e.value.line == 4
    log = read_log(p, fmt="csv", columns=cols, time_format=fmt, on_bad_rows="skip")
    assert log.info.bad_rows == 1
    assert str(log.df.sort("row").get_column("time")[0]) == expected
    r = cli("stats", p, "--user-col", "u", "--query-col", "q", "--time-col", "t",
            "--time-format", fmt)  # fmt: skip
    assert r.exit_code == 2 and "line 4" in r.output and "Traceback" not in r.output


def test_date_only_with_time_of_day_and_valid() -> None:
    with pytest.raises(InvalidParameterError, match="date"):
        read_log(HEADERLESS, time_format="epoch", date="2008-06-01")
    with pytest.raises(InvalidParameterError, match="date"):
        read_log(SOGOU, ReaderOptions.from_profile("sogouq", date="2008-02-30"))
    with pytest.raises(InvalidParameterError, match="time-format"):
        read_log(HEADERLESS, time_format="seconds")


# -- name clashes ------------------------------------------------------------------------------


def test_header_with_every_internal_name(tmp_path: Path) -> None:
    names = [*INTERNAL_COLUMNS, "_line", "_session_raw", "__c0", "input_time"]
    values = {n: f"v{i}" for i, n in enumerate(names)}
    values.update({"user": "7", "query": "Foo", "time": "2006-03-01 07:17:12", "rank": "1",
                   "url": "http://a/", "row": "99", "session": "s",
                   "click_order": "2"})  # fmt: skip
    line = "\t".join(values[n] for n in names)
    p = write(tmp_path, "clash.tsv", "\t".join(names) + "\n" + line + "\n" + line + "\n")
    # the case: a column named `time` that is not the time column
    r = cli("stats", p, "--user-col", "user", "--query-col", "query", "--time-col", "", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["users"] == 1
    log = read_log(p, fmt="csv", columns=ColumnMapping(user="user", query="query", time=""))
    df = log.df
    assert df.get_column("time").null_count() == 2
    assert df.get_column("input_time").to_list() == ["2006-03-01 07:17:12"] * 2
    assert df.get_column("row").to_list() == [0, 1]  # ours, not the input's 99
    assert df.get_column("input_row").to_list() == ["99", "99"]
    assert "input_time_" in df.columns and "input__line" in df.columns
    # every internal name mapped
    full = ColumnMapping(user="user", query="query", time="time", url="url", rank="rank",
                         session="session")  # fmt: skip
    df = read_log(p, fmt="csv", columns=full).df
    assert df.get_column("rank").to_list() == [1, 1]
    assert df.get_column("query").to_list() == ["foo", "foo"]
    assert len(set(df.columns)) == len(df.columns)


# -- TREC Session Track --------------------------------------------------------------------------


def test_trec_session_xml() -> None:
    log = read_log(TREC, profile="trec-session", fmt="trec-session")
    df = log.df.sort("row")
    assert df.get_column("user").to_list() == ["t11-s1"] * 4 + ["t12-s2"]
    assert df.get_column("rank").to_list()[:2] == [1, 3]  # clicks in rank order
    assert df.get_column("url").to_list()[:2] == ["http://trails.example/a",
                                                   "http://trails.example/c"]  # fmt: skip
    assert df.get_column("url")[2] is None and df.get_column("query")[4] == "cheap flights"
    r = cli("stats", TREC, "--profile", "trec-session", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["users"] == 2


def test_trec_refuses_entities_and_bad_xml(tmp_path: Path) -> None:
    bomb = write(tmp_path, "b.xml", '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]>'
                 "<sessiontrack2014><session num='1'/></sessiontrack2014>")  # fmt: skip
    with pytest.raises(InputFormatError, match="DTD"):
        read_log(bomb, fmt="trec-session")
    broken = write(tmp_path, "c.xml", "<sessiontrack2014><session num='1'>\n<topic>")
    with pytest.raises(InputFormatError, match="not well-formed"):
        read_log(broken, fmt="trec-session")
    empty = write(tmp_path, "d.xml", "<sessiontrack2014></sessiontrack2014>")
    with pytest.raises(InputFormatError, match="no <session>"):
        read_log(empty)


# -- one set of options ------------------------------------------------------------------------


def _commands(group: object, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for name, cmd in getattr(group, "commands", {}).items():
        if getattr(cmd, "commands", None):
            out.update(_commands(cmd, f"{prefix}{name} "))
        else:
            out[f"{prefix}{name}"] = cmd
    return out


def test_every_reading_command_has_the_same_reader_options() -> None:
    cmds = _commands(typer.main.get_command(app))
    readers = ["stats", "synth", "release korolova", "release zealous", "release kanon",
               "sanitize ump", "evaluate", "compare"]  # fmt: skip
    expected = set(READER_PARAM_NAMES)
    for name in readers:
        params = {p.name for p in cmds[name].params}  # type: ignore[attr-defined]
        assert expected <= params, (name, expected - params)


def test_reader_options_round_trip_and_profile_override() -> None:
    o = build_reader_options(profile="sogouq", encoding="gbk", user_col="3", time_col="")
    assert o.encoding == "gbk" and o.columns is not None and o.columns.user == "3"
    assert o.columns.time is None and o.columns.rank_click == "4" and o.has_header is False
    assert ReaderOptions.from_dict(json.loads(json.dumps(o.to_dict()))) == o
    with pytest.raises(InvalidParameterError, match="profile"):
        ReaderOptions.from_profile("sogou")
    assert build_reader_options(user_col="a").fmt == "csv"  # a mapping reads a delimited file
    assert build_reader_options() == ReaderOptions()


def test_engines_refuse_non_default_reader_options(tmp_path: Path) -> None:
    for extra in (["--profile", "sogouq"], POSITIONAL):
        src = SOGOU if extra[0] == "--profile" else HEADERLESS
        r = cli("release", "korolova", src, *extra, *DP, "--engine", "polars",
                "--out", tmp_path / "e")  # fmt: skip
        assert r.exit_code == 2, r.output
        assert "--engine polars" in r.output and not (tmp_path / "e").exists()


def test_parquet_keeps_working_with_a_mapping(tmp_path: Path) -> None:
    p = tmp_path / "l.parquet"
    pl.DataFrame({"who": [1, 2], "q": ["a", "b"], "time": ["x", "y"]}).write_parquet(p)
    log = read_log(p, columns=ColumnMapping(user="who", query="q", time=""))
    assert log.df.get_column("input_time").to_list() == ["x", "y"]


def test_read_log_profile_keyword_applies_the_profile() -> None:
    log = read_log(SOGOU, profile="sogouq", date="2008-06-01")
    assert log.df.height == 36 and log.info.encoding == "gb18030"
    assert set(log.df.get_column("time").dt.year().unique().to_list()) == {2008}
    with pytest.raises(InputFormatError, match="not valid utf-8"):
        read_log(SOGOU, profile="sogouq", encoding="utf-8")  # a keyword overrides the profile


def test_explicit_column_beats_profile_through_release(tmp_path: Path) -> None:
    # column 5 (the URL) as the user id: 8 distinct "users"
    r = cli("release", "kanon", SOGOU, "--profile", "sogouq", "--user-col", "5", "--k", "2",
            "--out", tmp_path / "k")  # fmt: skip
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "k.private.json").read_text(encoding="utf-8"))["inputs"][0]
    assert rec["reader"]["columns"]["user"] == "5" and rec["reader"]["columns"]["query"] == "3"
    assert rec["users"] == 8
    o = ReaderOptions.from_profile("sogouq")
    assert read_log(SOGOU, **o.kwargs()).info.reader == o.to_dict()


def test_compare_and_synth_take_the_mapping(tmp_path: Path) -> None:
    r = cli("compare", HEADERLESS, *POSITIONAL, "--epsilon", "1", "--delta", "0.0005",
            "--seed", "1", "--mechanisms", "kanon:k=2", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["input"]["rows"] == 30
    r = cli("compare", HEADERLESS, "--epsilon", "1", "--delta", "0.0005", "--seed", "1",
            "--mechanisms", "kanon:k=2")  # fmt: skip
    assert r.exit_code == 2  # without the mapping the headerless file is not AOL
    r = cli("synth", "--like", SOGOU, "--profile", "sogouq", "--users", "5", "--seed", "1",
            "--out", tmp_path / "s.tsv", "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["users"] == 5


def test_bad_reader_options_exit_2_naming_the_option() -> None:
    r = cli("stats", HEADERLESS, "--profile", "foo")
    assert r.exit_code == 2 and "profile" in r.output and "sogouq" in r.output
    r = cli("stats", HEADERLESS, "--user-col", "")
    assert r.exit_code == 2 and "user-col" in r.output
    r = cli("stats", TREC, "--json")  # .xml is read as TREC Session Track without a profile
    assert r.exit_code == 0 and json.loads(r.stdout)["input"]["format"] == "trec-session"
