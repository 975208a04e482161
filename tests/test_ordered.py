"""The ordered single pass (``searchveil.engines.ordered``) bounds exactly as the in-memory
definition does: random logs, written as AOL TSV (plain and gzip) and Parquet, read in chunks of
a few bytes so that every carry across chunk boundaries is exercised, give the same bounded
counts and report figures as ``korolova_counts`` / ``zealous_counts`` on ``read_log``."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from searchveil import KorolovaParams, ZealousParams, make_rng, read_log
from searchveil.bounding import NotContiguous
from searchveil.engines import ordered, sources
from searchveil.engines.ordered import ordered_counts
from searchveil.errors import InputFormatError
from searchveil.release.korolova import korolova_counts, release_korolova
from searchveil.release.run import run_release
from searchveil.release.zealous import zealous_counts

# raw queries that normalise to the same text ("a b") or differ only in case / blanks
QUERIES = ["a b", "A b", "a  b", " a b", "a\u00a0b", "b", "B", "c d e", ""]
TIMES = ["2006-03-01 10:00:00", "2006-03-01 10:00:05", "2006-03-01 11:00:00", ""]
URLS = ["", "", "http://x.com", "http://y.com", " http://x.com "]

row = st.tuples(st.sampled_from(QUERIES), st.sampled_from(TIMES), st.sampled_from(URLS))
user_rows = st.lists(st.lists(row, min_size=1, max_size=9), min_size=1, max_size=7)

PARAMS = [
    ("korolova", KorolovaParams(d=2, K=2, b=1.0, b_q=1.0)),
    ("korolova", KorolovaParams(d=1, K=1, b=1.0, b_q=1.0, distinct=True)),
    ("korolova", KorolovaParams(d=3, K=3, b=1.0, b_q=1.0, distinct=True)),
    ("korolova", KorolovaParams(d=3, K=3, b=1.0, b_q=1.0, url_selection="private", d_c=2,
                                b_c=1.0, url_K=2, url_b=1.0)),
    ("zealous", ZealousParams(m=2, tau=1, lam=1.0, tau_prime=3, item_type="queries",
                              guarantee="indistinguishability")),
    ("zealous", ZealousParams(m=2, tau=1, lam=1.0, tau_prime=3, item_type="clicks",
                              guarantee="indistinguishability")),
]  # fmt: skip


def _write(path: Path, users: list[list[tuple[str, str, str]]], ids: list[str]) -> None:
    lines = ["AnonID\tQuery\tQueryTime\tItemRank\tClickURL"]
    for uid, rows in zip(ids, users, strict=True):
        for q, t, u in rows:
            lines.append(f"{uid}\t{q}\t{t}\t{'1' if u.strip() else ''}\t{u}")
    text = "\n".join(lines) + "\n"
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)


def _key_cols(df: pl.DataFrame) -> list[str]:
    return [c for c in df.columns if c != "count"]


def _same_counts(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    keys = _key_cols(a)
    a = a.select(*keys, pl.col("count").cast(pl.Int64)).sort(keys)
    b = b.select(*keys, pl.col("count").cast(pl.Int64)).sort(keys)
    return a.equals(b)


def _check(path: Path) -> None:
    log = read_log(path)
    for algo, params in PARAMS:
        fn = korolova_counts if algo == "korolova" else zealous_counts
        mem = fn(log, params, rng=make_rng(0))
        counts, figures, rows, sha = ordered_counts(path, params.bounding_plan(), normalize=True)
        assert rows == log.n_rows and sha == log.info.sha256
        assert figures == mem.figures, (algo, params)
        for name, table in mem.counts.items():
            assert _same_counts(table, counts[name]), (algo, params, name)


@pytest.mark.slow
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(users=user_rows, block=st.integers(20, 200), gz=st.booleans(), text_ids=st.booleans())
def test_ordered_pass_equals_memory_bounding(
    users, block: int, gz: bool, text_ids: bool, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(sources, "BLOCK_BYTES", block)
    ids = [f"u{i}x" if text_ids else str(100 - 7 * i) for i in range(len(users))]  # unsorted ids
    path = tmp_path / ("log.tsv.gz" if gz else "log.tsv")
    _write(path, users, ids)
    _check(path)


@pytest.mark.slow
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(users=user_rows, batch=st.integers(1, 9), text_ids=st.booleans())
def test_ordered_pass_on_parquet_batches(
    users, batch: int, text_ids: bool, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(sources, "PARQUET_BATCH_ROWS", batch)
    ids = [f"u{i}" if text_ids else str(i * 3) for i in range(len(users))]
    tsv = tmp_path / "log.tsv"
    _write(tsv, users, ids)
    df = pl.read_csv(tsv, separator="\t", quote_char=None, infer_schema=False)
    if not text_ids:
        df = df.with_columns(pl.col("AnonID").cast(pl.Int64))
    pq = tmp_path / "log.parquet"
    df.write_parquet(pq)
    log = read_log(tsv)
    for algo, params in PARAMS:
        fn = korolova_counts if algo == "korolova" else zealous_counts
        mem = fn(log, params, rng=make_rng(0))
        counts, figures, rows, _ = ordered_counts(pq, params.bounding_plan(), normalize=True)
        assert figures == mem.figures and rows == log.n_rows
        for name, table in mem.counts.items():
            assert _same_counts(table, counts[name]), (algo, params, name)


@pytest.mark.slow
def test_real_logs_in_small_chunks(aol_215_path: Path, aol_top1000_path: Path, monkeypatch):
    monkeypatch.setattr(sources, "BLOCK_BYTES", 1 << 18)  # ~60 chunks of the top-1000 log
    for path in (aol_215_path, aol_top1000_path):
        _check(path)


def test_interleaved_users_are_detected_and_fall_back(tmp_path: Path) -> None:
    path = tmp_path / "log.tsv"
    _write(path, [[("a", TIMES[0], "")], [("b", TIMES[0], "")], [("c", TIMES[1], "")]],
           ["1", "2", "1"])  # fmt: skip
    _, params = PARAMS[0]
    with pytest.raises(NotContiguous):
        ordered_counts(path, params.bounding_plan(), normalize=True)
    rel = run_release("polars", "korolova", path, params, rng=make_rng(5))
    mem = release_korolova(read_log(path), params, rng=make_rng(5))
    assert rel.report["engine_plan"].startswith("sorted")
    assert rel.tables["queries"].equals(mem.tables["queries"])
    assert rel.report["query_events_after_bounding"] == mem.report["query_events_after_bounding"]


def test_unnormalized_counts_keep_raw_text(tmp_path: Path) -> None:
    path = tmp_path / "log.tsv"
    _write(path, [[("A b", TIMES[0], ""), ("a b", TIMES[0], ""), ("a b", TIMES[1], "")]], ["1"])
    counts, figures, _, _ = ordered_counts(path, PARAMS[0][1].bounding_plan(), normalize=False)
    assert figures["query_events"] == 3  # "A b" and "a b" at the same time: two events raw
    assert sorted(counts["queries"].rows()) == [("A b", 1), ("a b", 1)]  # d = 2
    counts, figures, _, _ = ordered_counts(path, PARAMS[0][1].bounding_plan(), normalize=True)
    assert figures["query_events"] == 2 and counts["queries"].rows() == [("a b", 2)]


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "empty"),
        (b"AnonID\tQuery\n1\ta\n", "line 1: missing column"),
        (b"AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n", "no data rows"),
        (b"AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n1\ta\tx\t\t\t\t\t\n",
         "line 2: ragged row: expected 5 fields .* found 8"),
        (b"AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n1\ta\tx\t\t\n2\tb\n",
         "line 3: ragged row: expected 5 fields .* found 2"),
        (b"AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n1\ta\tx\t\t\n\tb\tx\t\t\n",
         "line 3: user id .* is missing"),
        (gzip.compress(b"AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n1\ta\t\t\t\n" * 50)[:-30],
         "truncated"),
    ],
)  # fmt: skip
def test_bad_input_is_a_typed_error(tmp_path: Path, content: bytes, problem: str) -> None:
    path = tmp_path / ("log.tsv.gz" if content[:2] == b"\x1f\x8b" else "log.tsv")
    path.write_bytes(content)
    with pytest.raises(InputFormatError, match=problem):
        ordered_counts(path, PARAMS[0][1].bounding_plan(), normalize=True)


def test_extraction_thread_keeps_order_and_raises() -> None:
    """The pass hands each marked chunk to one extraction thread: calls run in submission
    order, and an error in one surfaces in the caller (not lost in the thread)."""
    seen: list[int] = []
    with ordered._InOrder() as worker:
        for i in range(20):
            worker.submit(seen.append, i)
        worker.finish()
    assert seen == list(range(20))

    def boom(i: int) -> None:
        if i == 3:
            raise InputFormatError("x", "bad chunk")
        seen.append(i)

    seen.clear()
    with pytest.raises(InputFormatError), ordered._InOrder() as worker:
        for i in range(10):
            worker.submit(boom, i)
        worker.finish()
    assert seen == [0, 1, 2]


def test_text_blocks_start_small_and_double(tmp_path: Path, monkeypatch) -> None:
    """The .gz reader's first block is FIRST_BLOCK_BYTES (parsing starts early), then blocks
    double up to the block size; every block holds whole lines and together they are the
    file."""
    monkeypatch.setattr(sources, "FIRST_BLOCK_BYTES", 1 << 12)
    lines = [f"{i}\tquery number {i}\t2006-03-01 10:00:00\t\t\n" for i in range(20_000)]
    body = "".join(lines).encode()
    path = tmp_path / "log.tsv.gz"
    with gzip.open(path, "wb") as f:
        f.write(b"AnonID\tQuery\tQueryTime\tItemRank\tClickURL\n" + body)
    blocks = sources.TextBlocks(path, block_bytes=1 << 16)
    got = list(blocks)
    assert b"".join(got) == body
    assert all(b.endswith(b"\n") for b in got)
    sizes = [len(b) for b in got]
    assert sizes[0] < 1 << 12  # the first read (4 KiB) less the header line
    assert sizes[1] <= (1 << 13) + 64 < sizes[3]  # doubling, then capped at 64 KiB
    assert max(sizes) <= (1 << 16) + 64 and len(sizes) > 10
    assert len(blocks.sha256()) == 64


def test_counts_do_not_depend_on_batches_folds_or_cutters(tmp_path: Path, monkeypatch) -> None:
    """The pass's pipeline sizes change only speed: the AOL sample as Parquet (some times in
    another layout or with fractions of a second, some queries in capitals or with extra
    blanks), read in batches of 300 rows, cut one or three at a time, counted every 40 kept
    rows and merged two partial counts at a time (so merges of merges happen), gives the counts
    and figures of the default pass and of the in-memory release."""
    sample = (
        Path(__file__).resolve().parents[1] / "src/searchveil/data/aol-gayo-avello-215-users.tsv"
    )
    df = pl.read_csv(sample, separator="\t", quote_char=None, infer_schema=False)
    i = pl.int_range(pl.len())
    df = df.with_columns(
        AnonID=pl.col("AnonID").cast(pl.Int64),
        QueryTime=pl.when(i % 7 == 3).then(pl.col("QueryTime").str.replace(" ", "T"))
        .when(i % 11 == 5).then(pl.col("QueryTime") + ".250")
        .otherwise(pl.col("QueryTime")),
        Query=pl.when(i % 5 == 1).then(pl.col("Query").str.to_uppercase() + "  ")
        .otherwise(pl.col("Query")),
    )  # fmt: skip
    pq = tmp_path / "log.parquet"
    df.write_parquet(pq)
    log = read_log(pq)
    plans = [PARAMS[1], PARAMS[3]]  # first d distinct queries; first d events and d_c clicks
    default = {id(p): ordered_counts(pq, p.bounding_plan(), normalize=True) for _, p in plans}
    monkeypatch.setattr(sources, "PARQUET_BATCH_ROWS", 300)
    monkeypatch.setattr(ordered, "FOLD_ROWS", 40)
    monkeypatch.setattr(ordered, "MERGE_PARTIALS", 2)
    for workers in (1, 3):
        monkeypatch.setattr(ordered, "CUT_WORKERS", workers)
        for _, params in plans:
            mem = korolova_counts(log, params, rng=make_rng(0))
            counts, figures, rows, sha = ordered_counts(pq, params.bounding_plan(), normalize=True)
            d_counts, d_figures, d_rows, d_sha = default[id(params)]
            assert (figures, rows, sha) == (d_figures, d_rows, d_sha) and figures == mem.figures
            for name, table in mem.counts.items():
                assert _same_counts(table, counts[name]), (params, name, workers)
                assert _same_counts(d_counts[name], counts[name]), (params, name, workers)
