"""Reader errors in the user's terms (issue 26): damaged and malformed inputs given to the
command line — random bytes, truncated gzip and Parquet, short and long rows, NUL bytes, a wrong
delimiter, a file named ``.parquet`` that is not Parquet, ... — through ``stats`` (the in-memory
reader) and ``release korolova --out`` (which reads AOL-layout files with the streaming engine).

Every case must exit 2 with one message that names the file (and the line, where there is
one), says what was expected and which option helps, shows no traceback, writes nothing, and
never names a library's own parameters or types (``missing_columns``, ``ComputeError``,
``polars``, ...). The inputs come from a seeded generator (bounded: a few dozen files, each
read by two commands), so the suite is deterministic; hypothesis adds random mutations of a
valid log.
"""

from __future__ import annotations

import gzip
import io
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from searchveil.cli import _common, app

runner = CliRunner()
READERS = Path(__file__).resolve().parent / "data" / "readers"
HEADER = "AnonID\tQuery\tQueryTime\tItemRank\tClickURL"
# words that belong to the libraries underneath, not to the user
LIBRARY_WORDS = re.compile(
    r"missing_columns|truncate_ragged_lines|schema_overrides|infer_schema|ignore_errors|"
    r"raise_if_empty|n_missing|ComputeError|PolarsError|ArrowInvalid|ArrowException|"
    r"polars|pyarrow|Py4J|py4j|Traceback|BadGzipFile|zlib\.error|EOFError|"
    r"internal error",
    re.I,
)


def _good_rows(n: int = 40, seed: int = 0) -> list[str]:
    r = random.Random(seed)
    rows = []
    for u in range(1, 9):
        for k in range(n // 8):
            q = r.choice(["weather", "cheap flights", "news", "how to tie a tie", "maps"])
            if r.random() < 0.5:
                rows.append(f"{u}\t{q}\t2006-03-0{1 + k % 9} 10:0{k % 10}:00\t1\thttp://x{k}.com")
            else:
                rows.append(f"{u}\t{q}\t2006-03-0{1 + k % 9} 10:0{k % 10}:00\t\t")
    return rows


def _good_text(seed: int = 0) -> str:
    return HEADER + "\n" + "\n".join(_good_rows(seed=seed)) + "\n"


def _parquet_bytes() -> bytes:
    rows = [x.split("\t") for x in _good_rows()]
    df = pl.DataFrame(
        {
            "AnonID": [int(x[0]) for x in rows],
            "Query": [x[1] for x in rows],
            "QueryTime": [x[2] for x in rows],
            "ItemRank": [x[3] for x in rows],
            "ClickURL": [x[4] for x in rows],
        }
    )
    buf = io.BytesIO()
    df.write_parquet(buf)
    return buf.getvalue()


@dataclass
class Case:
    name: str
    filename: str
    data: bytes
    line: int | None = None  # the line the message must name
    hint: str | None = None  # an option the message must name
    engine_reads: bool = False  # the streaming engine reads it (see the case)


def _cases() -> Iterator[Case]:
    """The seeded corpus (deterministic)."""
    rnd = random.Random(26)
    good = _good_text()
    lines = good.splitlines()
    # random bytes, as a .tsv, a .gz, a .parquet and with no extension
    for i, size in enumerate((1, 17, 300, 5000)):
        blob = bytes(rnd.randrange(256) for _ in range(size))
        for ext in (".tsv", ".gz", ".parquet", ""):
            yield Case(f"random-{i}{ext or '-noext'}", f"r{i}{ext}", blob)
    # random bytes after a valid header
    yield Case("header-then-noise", "h.tsv", (HEADER + "\n").encode() + bytes(range(256)))
    # short rows and long rows (the issue's example first: a header and one short row)
    yield Case(
        "issue-short-row", "short.tsv", f"{HEADER}\n1\tfoo\t2006-03-01 10:00:00\n".encode(),
        line=2, hint="--on-bad-rows skip",
    )  # fmt: skip
    for k in (3, 17, len(lines) - 1):
        short = lines.copy()
        short[k - 1] = "\t".join(short[k - 1].split("\t")[:2])
        yield Case(f"short-row-{k}", f"s{k}.tsv", ("\n".join(short) + "\n").encode(), line=k,
                   hint="--on-bad-rows skip")  # fmt: skip
        long = lines.copy()
        long[k - 1] += "\textra\tfields"
        yield Case(f"long-row-{k}", f"l{k}.tsv", ("\n".join(long) + "\n").encode(), line=k,
                   hint="--on-bad-rows skip")  # fmt: skip
        # the same in a .gz (the streaming engine's inflating reader)
        yield Case(f"short-row-{k}-gz", f"s{k}.tsv.gz",
                   gzip.compress(("\n".join(short) + "\n").encode()), line=k,
                   hint="--on-bad-rows skip")  # fmt: skip
    # a bad user id / time at a known line
    bad = lines.copy()
    f = bad[9].split("\t")
    bad[9] = "\t".join(["", *f[1:]])
    yield Case("missing-user", "u.tsv", ("\n".join(bad) + "\n").encode(), line=10,
               hint="--on-bad-rows skip")  # fmt: skip
    bad = lines.copy()
    f = bad[5].split("\t")
    bad[5] = "\t".join([f[0], f[1], "yesterday", *f[3:]])
    # the streaming engine compares times as written and never parses them (docs/engines.md),
    # so only the in-memory reader (stats) refuses a time it cannot parse
    yield Case("bad-time", "t.tsv", ("\n".join(bad) + "\n").encode(), line=6,
               hint="--time-format", engine_reads=True)  # fmt: skip
    # NUL bytes
    for pos in (len(HEADER) + 5, len(good) // 2):
        data = good.encode()
        nul_line = data.count(b"\n", 0, pos) + 1
        yield Case(f"nul-{pos}", f"n{pos}.tsv", data[:pos] + b"\0" + data[pos:], line=nul_line)
    # a wrong delimiter: comma-separated AOL layout named .tsv, and a ';' csv
    yield Case("commas-as-tsv", "c.tsv", good.replace("\t", ",").encode(), line=1,
               hint="--delimiter")  # fmt: skip
    yield Case("semicolons-as-tsv", "c2.tsv", good.replace("\t", ";").encode(), line=1,
               hint="--delimiter")  # fmt: skip
    # not UTF-8
    yield Case("latin1", "lat.tsv", (good + "7\tcaf\xe9\t2006-03-01 10:00:00\t\t\n").encode(
        "latin-1"), line=len(lines) + 1, hint="--encoding")  # fmt: skip
    # empty, blank, header only, no header
    yield Case("empty", "e.tsv", b"")
    yield Case("blank", "b.tsv", b"\n\n  \n")
    yield Case("header-only", "ho.tsv", (HEADER + "\n").encode())
    yield Case("no-header", "nh.tsv", ("\n".join(lines[1:]) + "\n").encode(), line=1,
               hint="--no-header")  # fmt: skip
    # truncated and damaged gzip
    gz = gzip.compress(good.encode() * 20)
    for cut in (1, 10, len(gz) // 3, len(gz) - 4):
        yield Case(f"gzip-cut-{cut}", f"g{cut}.tsv.gz", gz[:cut])
    damaged = bytearray(gz)
    for i in range(30, 60):
        damaged[i] ^= 0x55
    yield Case("gzip-damaged", "gd.tsv.gz", bytes(damaged))
    yield Case(
        "gzip-of-noise", "gn.gz", gzip.compress(bytes(rnd.randrange(256) for _ in range(999)))
    )
    # truncated Parquet, and files named .parquet that are not Parquet
    pq = _parquet_bytes()
    for cut in (3, 8, len(pq) // 2, len(pq) - 9, len(pq) - 1):
        yield Case(f"parquet-cut-{cut}", f"p{cut}.parquet", pq[:cut])
    yield Case("tsv-named-parquet", "t.parquet", good.encode())
    yield Case(
        "par1-then-noise", "pn.parquet", b"PAR1" + bytes(rnd.randrange(256) for _ in range(500))
    )
    yield Case("parquet-footer-only", "pf.parquet", pq[:4] + pq[-300:])
    # the other text formats: TREC Session Track XML cut short, MSNBC sequences with a bad token
    trec = (READERS / "trec_session.xml").read_bytes()
    yield Case(
        "trec-cut", "t.xml", trec[: len(trec) // 2], line=trec[: len(trec) // 2].count(b"\n") + 1
    )
    yield Case("trec-noise", "n.xml", b"<session>" + bytes(range(1, 200)))
    yield Case("msnbc-bad-token", "m.seq", b"1 2 3\n4 99 2\n", line=2)
    yield Case("msnbc-nul", "m0.seq", b"1 2 3\n4 \0 2\n", line=2)


CASES = list(_cases())


@pytest.fixture(autouse=True)
def _wide_console() -> Iterator[None]:
    """Error messages on one line (the console wraps at 80 columns when not a terminal)."""
    old = _common.err_console.width
    _common.err_console.width = 10_000
    yield
    _common.err_console.width = old


def _release_args(path: Path, out: Path) -> list[str]:
    """A Korolova release with --out (AOL-layout input: the streaming engine reads it)."""
    return ["release", "korolova", str(path), "--out", str(out), "--epsilon", "1", "--delta",
            "1e-5", "--max-queries", "1", "--max-clicks", "1"]  # fmt: skip


def _check_error(case: Case, path: Path, args: list[str], out: Path | None) -> str:
    before = sorted(p.name for p in path.parent.iterdir())
    r = runner.invoke(app, args)
    text = r.output
    where = f"{case.name}: {' '.join(args[:2])}"
    assert r.exit_code == 2, f"{where}: exit {r.exit_code}\n{text}\n{r.exception!r}"
    assert "error:" in text, f"{where}: {text}"
    assert str(path) in text, f"{where}: the message does not name the file\n{text}"
    m = LIBRARY_WORDS.search(text)
    assert m is None, f"{where}: library term {m.group(0)!r} in\n{text}"
    if case.line is not None:
        assert re.search(rf"line {case.line}\b", text), f"{where}: no 'line {case.line}'\n{text}"
    if case.hint is not None:
        assert case.hint in text, f"{where}: no {case.hint!r}\n{text}"
    assert sorted(p.name for p in path.parent.iterdir()) == before, f"{where}: wrote files"
    if out is not None:
        assert not out.exists()
    return text


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reader_errors_say_what_to_do(case: Case, tmp_path: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    path = d / case.filename
    path.write_bytes(case.data)
    _check_error(case, path, ["stats", str(path)], None)
    if case.engine_reads:
        return
    out = tmp_path / "rel"
    _check_error(case, path, _release_args(path, out), out)


def test_the_issue_example_names_line_2_and_the_option(tmp_path: Path) -> None:
    """The example of issue 26, word for word as the user sees it."""
    p = tmp_path / "short.tsv"
    p.write_text(f"{HEADER}\n1\tfoo\t2006-03-01 10:00:00\n")
    out = tmp_path / "rel"
    r = runner.invoke(app, _release_args(p, out))
    assert r.exit_code == 2
    assert f"{p}, line 2:" in r.output and "--on-bad-rows skip" in r.output
    assert "expected 5 fields" in r.output and "found 3" in r.output
    # and the option does what the message says
    r = runner.invoke(app, [*_release_args(p, out), "--on-bad-rows", "skip"])
    assert r.exit_code == 2 and "no data rows left" in r.output  # its only row was skipped


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    cuts=st.lists(st.integers(0, 10_000), min_size=1, max_size=4),
    junk=st.binary(min_size=1, max_size=8),
    gz=st.booleans(),
)
def test_mutated_logs_never_crash(tmp_path: Path, cuts: list[int], junk: bytes, gz: bool) -> None:
    """Random splices of junk bytes into a valid log: either the file still reads (exit 0) or
    the error is a user error (exit 2) naming the file, with no library words."""
    data = bytearray(_good_text(seed=3).encode())
    for c in cuts:
        c %= len(data) + 1
        data[c:c] = junk
    raw = gzip.compress(bytes(data)) if gz else bytes(data)
    d = tmp_path / f"m{abs(hash((tuple(cuts), junk, gz)))}"
    d.mkdir()
    path = d / ("log.tsv.gz" if gz else "log.tsv")
    path.write_bytes(raw)
    for args in (["stats", str(path)], _release_args(path, d / "rel")):
        r = runner.invoke(app, args)
        assert r.exit_code in (0, 2), f"{args[:2]} exit {r.exit_code}: {r.output}"
        if r.exit_code == 2:
            assert str(path) in r.output, r.output
            m = LIBRARY_WORDS.search(r.output)
            assert m is None, f"library term {m.group(0)!r}: {r.output}"
            assert not (d / "rel").exists()


def test_engine_skips_blank_lines_as_the_memory_reader_does(tmp_path: Path) -> None:
    """Blank and white-space lines are not rows for either reader: the streaming engine's
    field-count check lets them through, with the same counts as without them."""
    from searchveil.engines.ordered import ordered_counts
    from searchveil.release.korolova import KorolovaParams

    rows = _good_rows()
    plain, blanks = tmp_path / "plain.tsv", tmp_path / "blanks.tsv"
    plain.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    spaced = rows[:5] + ["", "  \t "] + rows[5:20] + ["\r"] + rows[20:]
    blanks.write_text(HEADER + "\n" + "\n".join(spaced) + "\n\n")
    params = KorolovaParams(d=2, K=2.0, b=1.0, b_q=1.0)
    a = ordered_counts(plain, params.bounding_plan(), normalize=True)
    b = ordered_counts(blanks, params.bounding_plan(), normalize=True)
    assert a[0]["queries"].sort("query").equals(b[0]["queries"].sort("query"))
    assert a[1] == b[1] and a[2] == b[2]


def test_unsorted_input_is_checked_on_the_hash_plan_too(tmp_path: Path) -> None:
    """Users not contiguous: the ordered pass gives up and the hash plan reads the file lazily;
    the file is checked first, so a short row still names its line."""
    rows = _good_rows()
    rows = rows[::2] + rows[1::2]  # every user's rows in two runs
    rows[30] = "\t".join(rows[30].split("\t")[:2])
    p = tmp_path / "unsorted.tsv"
    p.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    r = runner.invoke(app, _release_args(p, tmp_path / "rel"))
    assert r.exit_code == 2, r.output
    assert f"{p}, line 32:" in r.output and "--on-bad-rows skip" in r.output
    assert not (tmp_path / "rel").exists()
