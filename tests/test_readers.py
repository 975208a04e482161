"""Readers on the shared real logs and on hostile inputs."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from searchveil.cli import app
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.readers import ColumnMapping, read_log, scan_log
from searchveil.model import log_stats

runner = CliRunner()
HEADER = "AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n"


def write(tmp_path: Path, name: str, data: bytes | str) -> Path:
    p = tmp_path / name
    p.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return p


def test_aol_top1000_counts(aol_top1000) -> None:
    s = log_stats(aol_top1000)
    assert s["rows"] == 407_929
    assert s["users"] == 1_000
    assert s["query_events"] == 318_023
    assert s["clicks"] == 407_929  # every row has a click in this extract
    assert aol_top1000.info.sha256 and len(aol_top1000.info.sha256) == 64


def test_aol_215_sessions_from_column(aol_215) -> None:
    s = log_stats(aol_215)
    assert s["rows"] == 10_235 and s["users"] == 215
    # sessions come from the human-labelled SessionID column
    raw = pl.read_csv(
        aol_215.info.path,
        separator="\t",
        quote_char=None,
        infer_schema=False,
    )
    assert s["sessions"] == raw.select(pl.struct("AnonID", "SessionID").n_unique()).item()
    assert "sessionid" not in aol_215.df.columns or True


def test_msnbc_reader(msnbc_path) -> None:
    log = read_log(msnbc_path)
    assert log.n_users == 10_000
    first = log.df.filter(pl.col("user") == 1)
    assert first.get_column("query").to_list() == ["frontpage", "frontpage"]
    assert log.df.get_column("url").null_count() == 0


def test_msnbc_reader_on_the_bundled_slice(msnbc_500_path: Path) -> None:
    log = read_log(msnbc_500_path)
    assert log.n_users == 500 and log.info.format == "msnbc"
    assert log.df.filter(pl.col("user") == 1).get_column("query").to_list() == [
        "frontpage",
        "frontpage",
    ]
    # line 3 of the file: "3 2 2 4 2 2 2 3 3" (3 = tech, 2 = news, 4 = local), in file order
    third = log.df.filter(pl.col("user") == 3).get_column("query").to_list()
    assert third == ["tech", "news", "news", "local", "news", "news", "news", "tech", "tech"]


def test_gz_and_plain_agree(tmp_path: Path, aol_215_path: Path) -> None:
    gz = tmp_path / "x.tsv.gz"
    gz.write_bytes(gzip.compress(aol_215_path.read_bytes()))
    a = read_log(aol_215_path).df.drop("row")
    b = read_log(gz).df.drop("row")
    assert a.equals(b)


def test_parquet_roundtrip(tmp_path: Path, aol_215_path: Path) -> None:
    raw = pl.read_csv(aol_215_path, separator="\t", quote_char=None, infer_schema=False)
    raw = raw.with_columns(pl.col("AnonID").cast(pl.Int64))
    pq = tmp_path / "x.parquet"
    raw.write_parquet(pq)
    a = read_log(aol_215_path)
    b = read_log(pq)
    assert a.n_rows == b.n_rows and a.n_users == b.n_users
    assert a.df.get_column("query").to_list() == b.df.get_column("query").to_list()


def test_generic_csv_with_mapping(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "log.csv",
        "uid,q,ts,link\nu1,Hello  World,2006-03-01 10:00:00,http://a\n"
        "u1,hello world,2006-03-01 10:01:00,\nu2,foo,2006-03-01 11:00:00,http://b\n",
    )
    m = ColumnMapping(user="uid", query="q", time="ts", url="link", rank=None)
    log = read_log(p, fmt="csv", columns=m)
    assert log.df.get_column("query").to_list() == ["hello world", "hello world", "foo"]
    assert log.df.get_column("url").to_list() == ["http://a", None, "http://b"]
    assert log.df.get_column("user").dtype == pl.String
    raw = read_log(p, fmt="csv", columns=m, normalize=False)
    assert raw.df.get_column("query")[0] == "Hello  World"


def test_gbk_bytes_read_as_utf8_is_a_typed_error(tmp_path: Path) -> None:
    p = write(tmp_path, "gbk.tsv", (HEADER + "1\t你好\t2006-03-01 10:00:00\t\t\n").encode("gbk"))
    with pytest.raises(InputFormatError) as e:
        read_log(p)
    assert e.value.line == 2 and "utf-8" in str(e.value)
    log = read_log(p, encoding="gb18030")
    assert log.df.get_column("query").to_list() == ["你好"]


def test_unknown_encoding(tmp_path: Path) -> None:
    p = write(tmp_path, "a.tsv", HEADER + "1\tq\t2006-03-01 10:00:00\t\t\n")
    with pytest.raises(InvalidParameterError):
        read_log(p, encoding="no-such-codec")


def test_ragged_rows_error_and_skip(tmp_path: Path) -> None:
    body = (
        HEADER
        + "1\ta\t2006-03-01 10:00:00\t\t\n"
        + "1\tb\t2006-03-01 10:00:00\n"
        + "2\tc\t2006-03-01 10:00:00\t1\thttp://x\textra\n"
        + "3\td\t2006-03-01 10:00:00\t\t\n"
    )
    p = write(tmp_path, "rag.tsv", body)
    with pytest.raises(InputFormatError) as e:
        read_log(p)
    assert e.value.line == 3 and "ragged" in str(e.value)
    log = read_log(p, on_bad_rows="skip")
    assert log.info.bad_rows == 2 and log.n_rows == 2
    assert {ex["line"] for ex in log.info.bad_row_examples} == {3, 4}


@pytest.mark.parametrize(
    ("content", "problem"),
    [(b"", "empty"), (HEADER.encode(), "header only"), (b"\n\n", "empty")],
)
def test_empty_inputs(tmp_path: Path, content: bytes, problem: str) -> None:
    p = write(tmp_path, "e.tsv", content)
    with pytest.raises(InputFormatError) as e:
        read_log(p)
    assert problem in str(e.value)


def test_missing_columns(tmp_path: Path) -> None:
    p = write(tmp_path, "m.tsv", "AnonID\tQuery\n1\tq\n")
    with pytest.raises(InputFormatError) as e:
        read_log(p)
    assert "QueryTime" in str(e.value) and e.value.line == 1
    # with an explicit mapping that has no time/url the file is fine
    log = read_log(
        p,
        fmt="csv",
        delimiter="\t",
        columns=ColumnMapping(user="AnonID", query="Query", time=None, url=None, rank=None),
    )
    assert log.n_rows == 1


def test_bad_values(tmp_path: Path) -> None:
    p = write(
        tmp_path, "v.tsv", HEADER + "1\tq\t2006-03-01 10:00:00\t\t\n" + "x\tq\tnot a time\t\t\n"
    )
    with pytest.raises(InputFormatError) as e:
        read_log(p)
    assert e.value.line == 3
    assert read_log(p, on_bad_rows="skip").info.bad_rows == 1


def test_one_user_million_repeats(tmp_path: Path) -> None:
    row = "7\tsame query\t2006-03-01 10:00:00\t\t\n"
    p = tmp_path / "rep.tsv.gz"
    p.write_bytes(gzip.compress((HEADER + row * 1_000_000).encode()))
    log = read_log(p)
    s = log_stats(log)
    assert s["rows"] == 1_000_000 and s["users"] == 1
    assert s["distinct_queries"] == 1
    # identical (user, query, time) rows are clicks of one query event
    assert s["query_events"] == 1 and s["clicks"] == 0


def test_binary_and_directory_inputs(tmp_path: Path) -> None:
    p = write(tmp_path, "bin.tsv", b"AnonID\x00\x01\x02")
    with pytest.raises(InputFormatError):
        read_log(p)
    with pytest.raises(InputFormatError):
        read_log(tmp_path)
    with pytest.raises(InputFormatError):
        read_log(tmp_path / "nope.tsv")
    bad_gz = write(tmp_path, "bad.tsv.gz", b"\x1f\x8b\x08garbage")
    with pytest.raises(InputFormatError):
        read_log(bad_gz)


def test_crlf_and_bom(tmp_path: Path) -> None:
    body = "\ufeff" + HEADER.replace("\n", "\r\n") + "1\tq\t2006-03-01 10:00:00\t\thttp://a\r\n"
    log = read_log(write(tmp_path, "crlf.tsv", body))
    assert log.df.get_column("url").to_list() == ["http://a"]


def test_scan_log_matches(aol_215_path: Path) -> None:
    lf = scan_log(aol_215_path)
    df = lf.collect()
    assert df.height == 10_235
    assert set(df.columns) >= {"user", "query", "time", "url", "row"}


# --- CLI ---------------------------------------------------------------------------------


def test_cli_stats_json(aol_top1000_path: Path) -> None:
    r = runner.invoke(app, ["stats", str(aol_top1000_path), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["rows"] == 407_929 and data["users"] == 1_000


def test_cli_stats_user_error_exits_2(tmp_path: Path) -> None:
    p = write(tmp_path, "gbk.tsv", (HEADER + "1\t你好\t2006-03-01 10:00:00\t\t\n").encode("gbk"))
    r = runner.invoke(app, ["stats", str(p)])
    assert r.exit_code == 2
    assert "line 2" in r.stderr and "Traceback" not in r.output + r.stderr
    r = runner.invoke(app, ["stats", str(p), "--encoding", "gb18030", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["distinct_queries"] == 1


def test_cli_stats_column_mapping(tmp_path: Path) -> None:
    p = write(tmp_path, "log.csv", "uid;q;link\na;x;http://1\nb;y;\n")
    r = runner.invoke(
        app,
        [
            "stats",
            str(p),
            "--user-col",
            "uid",
            "--query-col",
            "q",
            "--url-col",
            "link",
            "--time-col",
            "",
            "--rank-col",
            "",
            "--delimiter",
            ";",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["users"] == 2
