"""The bounding kernel (``searchveil.bounding``): one definition of "a user's first d events /
first d distinct items", run whole, chunk by chunk with a carry, and as detached segments
joined afterwards (Spark's partitions) — always the same rows; and the rule for ambiguous rows
(times written differently, blank times, raw text equal only after normalisation), on which
the in-memory reader and the engines now agree."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searchveil import KorolovaParams, ZealousParams, make_rng, read_log
from searchveil.bounding import Bounder, KernelSpec, Rule, first_per_user
from searchveil.engines.ordered import ordered_counts
from searchveil.engines.sources import canonical_times
from searchveil.io.times import time_expr
from searchveil.release.korolova import korolova_counts
from searchveil.release.zealous import zealous_counts

QUERIES = ["a b", "A b", "a  b", " a b", "b", "B", "c", ""]
TIMES = ["t0", "t1", None]
URLS = [None, None, "x", "y"]
SPECS = [
    KernelSpec(Rule(2), Rule(1), normalize=True),
    KernelSpec(Rule(3, distinct=True), Rule(2), normalize=True),
    KernelSpec(None, Rule(2, distinct=True), normalize=True),
    KernelSpec(Rule(1, distinct=True), Rule(3, distinct=True), normalize=True),
    KernelSpec(Rule(3), None, normalize=False),
]

row = st.tuples(st.sampled_from(QUERIES), st.sampled_from(TIMES), st.sampled_from(URLS))
logs = st.lists(st.lists(row, min_size=1, max_size=8), min_size=1, max_size=6)


def _frame(users: list[list[tuple]]) -> pl.DataFrame:
    rows = [(10 * i + 3, q, t, u) for i, rs in enumerate(users) for q, t, u in rs]
    schema = {"u": pl.Int64, "q": pl.String, "t": pl.String, "url": pl.String}
    return pl.DataFrame(rows, schema=schema, orient="row")


def _rows(kept: dict) -> dict:
    return {s: sorted(map(str, k.rows())) for s, k in kept.items()}


def _concat(parts: list[dict]) -> dict:
    return {s: pl.concat([p[s] for p in parts]) for s in parts[0]}


def _chunks_and_segments_keep_what_the_whole_keeps(users, data) -> None:
    df = _frame(users)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, df.height - 1)), max_size=4))))
    cuts = [c for c in cuts if 0 < c < df.height]
    bounds = [0, *cuts, df.height]
    for spec in SPECS:
        whole = Bounder(spec)
        ref = _rows(whole.feed(df))
        chunked = Bounder(spec, check=True)
        got = _concat([chunked.feed(df.slice(a, b - a)) for a, b in itertools.pairwise(bounds)])
        assert _rows(got) == ref and chunked.figures == whole.figures, spec
        # Spark: each stretch bounded on its own (detached), then joined in order
        driver, parts = Bounder(spec), []
        for a, b in itertools.pairwise(bounds):
            part = Bounder(spec, detached=True)
            parts.append(part.feed(df.slice(a, b - a)))
            parts.append(driver.add(part.summary()))
        assert _rows(_concat(parts)) == ref and driver.figures == whole.figures, spec


@settings(max_examples=20, deadline=None)
@given(users=logs, data=st.data())
def test_chunks_and_segments_keep_what_the_whole_keeps(users, data) -> None:
    """Any cut of any small log: chunked and Spark-style detached bounding keep what one pass
    keeps (20 examples here; 200 in the full tier)."""
    _chunks_and_segments_keep_what_the_whole_keeps(users, data)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(users=logs, data=st.data())
def test_chunks_and_segments_keep_what_the_whole_keeps_full(users, data) -> None:
    _chunks_and_segments_keep_what_the_whole_keeps(users, data)


def test_first_per_user_is_the_rule() -> None:
    df = pl.DataFrame({"user": [1, 1, 1, 1, 2, 2], "item": ["a", "b", "a", "c", "a", "a"]})
    assert first_per_user(df, 2).get_column("item").to_list() == ["a", "b", "a", "a"]
    out = first_per_user(df, 2, distinct_on=["item"], rank="r")
    assert out.rows() == [(1, "a", 0), (1, "b", 1), (2, "a", 0)]


def test_ranks_and_flip_across_a_cut() -> None:
    """A chunk whose first row continues the previous chunk's last query event (same user,
    time and normalised query) is not a new event: later events move down by one."""
    df = pl.DataFrame(
        {
            "u": [1, 1, 1, 1],
            "q": ["A", "a", "b", "c"],
            "t": ["t0", "t0", "t1", "t2"],
            "url": [None, "x", None, None],
        }
    )
    spec = KernelSpec(Rule(3), Rule(5), normalize=True)
    b = Bounder(spec)
    first, second = b.feed(df.slice(0, 1)), b.feed(df.slice(1, 3))
    events = pl.concat([first[k] for k in first if k == "events"] + [second["events"]])
    assert events.get_column("query").to_list() == ["a", "b", "c"]
    assert events.get_column("_rank").to_list() == [0, 1, 2]
    assert b.figures == {"rows": 4, "users": 1, "events": 3, "clicks": 1}


# the same instants written in different layouts (the reader parses them alike), a blank time
# (no time at all), and raw text equal only after normalisation
AMBIGUOUS = """AnonID\tQuery\tQueryTime\tItemRank\tClickURL
7\tfoo\t2006-03-01 10:00:00\t1\thttp://a
7\tfoo\t2006-03-01 10:00\t2\thttp://b
7\tfoo\t2006-03-01T10:00:00\t\t
7\tFoo \t 2006-03-01 10:00:00\t1\thttp://c
7\tbar\t   \t\t
7\tbar\t   \t1\thttp://d
7\tbaz\t2006-03-01 10:05:00\t\t
8\tfoo\t2006-03-01 10:00:00\t\t
8\tfoo\t2006-3-01  10:00:00\t1\thttp://a
8\tqux\t2006-03-01 11:00:00\t\t
"""


@pytest.mark.parametrize("fmt", ["tsv", "parquet"])
def test_times_compare_as_the_reader_parses_them(tmp_path: Path, fmt: str) -> None:
    """The rule for ambiguous rows: a row continues the previous row's query event when the
    user, the normalised query and the time are equal, the time compared as the instant the
    in-memory reader parses (a blank one never continues an event). Before the kernel the
    engines compared the time's text, and on this log counted 9 query events to memory's 6
    (and a blank time continued an event)."""
    path = tmp_path / "log.tsv"
    path.write_text(AMBIGUOUS)
    if fmt == "parquet":
        pq = tmp_path / "log.parquet"
        pl.read_csv(path, separator="\t", quote_char=None, infer_schema=False).write_parquet(pq)
        path = pq
    log = read_log(path)
    params = [
        KorolovaParams(
            d=2, K=2, b=1.0, b_q=1.0, url_selection="private", d_c=2, b_c=1.0, url_K=2, url_b=1.0
        ),
        ZealousParams(
            m=2, tau=1, lam=1.0, tau_prime=3, item_type="queries", guarantee="indistinguishability"
        ),
    ]
    for p in params:
        fn = korolova_counts if isinstance(p, KorolovaParams) else zealous_counts
        mem = fn(log, p, rng=make_rng(0))
        counts, figures, _, _ = ordered_counts(path, p.bounding_plan(), normalize=True)
        assert figures == mem.figures, (p, figures, mem.figures)
        for name, table in mem.counts.items():
            keys = [c for c in table.columns if c != "count"]
            assert counts[name].select(*keys, "count").sort(keys).equals(table.sort(keys)), name
    # user 7: foo (four layouts of one instant), bar, bar (blank times), baz; 8: foo, qux
    assert mem.figures["items"] == 6


def test_canonical_times_checks_every_byte() -> None:
    """The vectorised layout check agrees with a regular expression on random near-misses."""
    rng = random.Random(3)
    base = "2006-03-01 10:00:00"
    values = [base, None, "", "2006-03-01 10:00", " " * 19, "2006-03-01T10:00:00"]
    for _ in range(3000):
        s = list(base)
        for _ in range(rng.randint(0, 2)):
            s[rng.randrange(19)] = rng.choice("0123456789 -:T/a\u00e9")
        values.append("".join(s)[:19])
    t = pl.Series(values, dtype=pl.String)
    got = canonical_times(t, parquet=False)
    layout = t.str.contains(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$").fill_null(False)
    parsed = pl.select(time_expr(pl.lit(t), None).dt.strftime("%Y-%m-%d %H:%M:%S")).to_series()
    # texts in the canonical layout are kept as they are; every other one is the reader's parse
    assert layout.sum() > 100 and (~layout).sum() > 100
    assert got.filter(layout).equals(t.filter(layout))
    assert got.filter(~layout).equals(parsed.filter(~layout))
