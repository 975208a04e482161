"""The ordered single pass: contribution bounding of a log whose users' rows are contiguous.

A search log is usually written user by user (the AOL release is sorted by ``AnonID``, each
user's rows in time order). Then Limit-User-Activity needs no grouping of the log at all: a
user's first d query events are found by comparing each row with the one before it (a new
user? a new event?) and a running count that restarts at every user — a few vectorised passes
over each chunk, with a small *carry* (the last row, the last user's event and click counts, its
distinct items so far) handed from chunk to chunk. Only the kept items (≤ d per user) are ever
normalised, hashed or grouped, so the cost is one scan plus work proportional to users × d.

Inputs stream in chunks: a ``.gz`` file is inflated by ISA-L in a reader thread (it releases
the GIL, and hashes the compressed bytes for the provenance record as it reads them) while
Polars parses and bounds the previous chunk; Parquet arrives as Polars batches. Memory is
bounded by a few chunks plus the kept items, which are folded into counts every few million
rows.

Exactly the in-memory definitions (``searchveil.model``, ``searchveil.bounding``):

* an *event* starts where the user, the time or the normalised query differ from the previous
  row (a null time always starts one). Raw query text is compared first; only rows whose raw
  text differs from the previous row's at the same user and time are normalised to decide, so
  normalisation never runs on the whole log.
* Korolova keeps each user's first ``d`` events (or first ``d`` distinct normalised queries with
  ``distinct``) and first ``d_c`` click rows; ZEALOUS keeps the first occurrence of each user's
  first ``m`` distinct queries or (query, url) pairs.
* Users must be contiguous. The pass checks it (a user id that starts a second run raises
  :class:`NotGrouped`) and the caller then falls back to the hash-based plan, so an unsorted
  input is slower, never wrong.

Users are compared as they are written (after stripping blanks); numeric ids are read as
64-bit integers when every id parses, as the in-memory reader does.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from searchveil.engines.contract import Bounding, BoundingPlan, Item, Source
from searchveil.errors import InputFormatError, InternalError, InvalidParameterError
from searchveil.io.files import PARQUET_DAMAGED, decompress_problem, start_fingerprint
from searchveil.io.formats import Container, check_parquet, container
from searchveil.io.readers import AOL_COLUMNS, ragged_problem
from searchveil.model import PAIR_SEP, normalize_query

__all__ = ["NotGrouped", "ordered_counts", "validate_aol_text", "BLOCK_BYTES"]

BLOCK_BYTES = 1 << 25  # 32 MiB of text per chunk
FIRST_BLOCK_BYTES = 1 << 21  # the first chunk: 2 MiB, doubling up to BLOCK_BYTES
PARQUET_BATCH_ROWS = 1 << 20
# above this many rows (from the footer), Parquet batches are half as long: the Polars reader
# holds several decoded batches ahead, and with the partial counts of a long input that is what
# sets the peak (36M rows: 1.8 GB with 1M-row batches, 1.6 GB with 512k; 10M rows: 1M-row
# batches are 3-5% quicker and peak at 1 GB either way)
PARQUET_LONG_ROWS = 16_000_000
FOLD_ROWS = 2_000_000  # kept items held before counting them into a partial count
MERGE_PARTIALS = 8  # partial counts held before merging them
# a string that is not equal to its normalisation contains one of these (A-Z, any character
# outside printable ASCII — Unicode upper case and white space, tabs, controls — two spaces in a
# row, or a space at either end); strings without them are left as they are
_NEEDS_NORMALIZING = r"[^ !-@\[-~]|  |^ | $"


def _pool_frame(rows: list[pl.DataFrame], keys: list[str], user_numeric: bool) -> pl.DataFrame:
    """The kept rows (users contiguous, each user's in order) as ``user, <keys>, rank``."""
    if rows:
        df = pl.concat(rows, how="vertical_relaxed", rechunk=True)
        rows.clear()  # the chunks' memory goes back as soon as the pool is one frame
    else:
        df = pl.DataFrame(schema={"u": pl.Int64 if user_numeric else pl.String}
                          | {k: pl.String for k in keys})  # fmt: skip
    df = df.rename({"u": "user"})
    if keys == ["query"]:
        df = df.rename({"query": "item"})
    rid = df.get_column("user").rle_id().to_numpy()  # users are contiguous
    starts = np.flatnonzero(np.r_[True, rid[1:] != rid[:-1]]) if rid.size else rid
    rank = np.arange(rid.size, dtype=np.int64) - np.repeat(starts, np.diff(np.r_[starts, rid.size]))
    return df.with_columns(rank=pl.Series(rank, dtype=pl.Int64))


class NotGrouped(Exception):
    """The input's user rows are not contiguous; use the hash-based plan."""


# ----------------------------------------------------------------------------------- reading


def _stop_thread(stop: threading.Event, q: queue.Queue[Any], t: threading.Thread) -> None:
    """Ask a producer thread to stop and drain its queue until it has (it may be blocked on
    a full queue)."""
    stop.set()
    while t.is_alive():
        try:
            q.get_nowait()
        except queue.Empty:
            t.join(0.05)


class _HashingReader:
    """A binary file that feeds every byte it reads into a SHA-256."""

    def __init__(self, fh: Any, h: Any) -> None:
        self.fh, self.h = fh, h

    def read(self, n: int = -1) -> bytes:
        b = self.fh.read(n)
        self.h.update(b)
        return b

    def readinto(self, buf: Any) -> int:
        n = self.fh.readinto(buf)
        self.h.update(memoryview(buf)[:n])
        return int(n)

    def drain(self) -> None:
        for b in iter(lambda: self.fh.read(1 << 22), b""):
            self.h.update(b)

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        pass

    @property
    def closed(self) -> bool:
        return False


class TextBlocks:
    """Blocks of whole lines of a (gzipped) text file, produced by a reader thread; the
    header line separately; the file's SHA-256 once iteration has ended."""

    def __init__(self, path: Path, block_bytes: int | None = None) -> None:
        self.path = path
        self.block_bytes = block_bytes or BLOCK_BYTES
        self.hasher = hashlib.sha256()
        self._q: queue.Queue[Any] = queue.Queue(maxsize=2)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._produce, daemon=True)
        self._t.start()
        first = self._get()
        if first is None:
            raise InputFormatError(str(path), "empty input")
        nl = first.find(b"\n")
        if nl < 0:
            self.header, self._first = first, b""
        else:
            self.header, self._first = first[:nl], first[nl + 1 :]
        self.header = self.header.rstrip(b"\r")

    def _produce(self) -> None:
        try:
            with self.path.open("rb") as raw:
                hr = _HashingReader(raw, self.hasher)
                if container(self.path) == Container.GZIP:
                    from isal import igzip

                    f: Any = igzip.GzipFile(fileobj=hr, mode="rb")
                else:
                    f = hr
                rest = b""
                # the first blocks are small, so that parsing and bounding start after a few
                # milliseconds of inflating instead of a whole block's; then they double
                size = min(self.block_bytes, FIRST_BLOCK_BYTES)
                while not self._stop.is_set():
                    buf = f.read(size)
                    size = min(self.block_bytes, 2 * size)
                    if not buf:
                        break
                    if rest:
                        buf = rest + buf
                    cut = buf.rfind(b"\n") + 1
                    if cut == 0:
                        rest = buf
                        continue
                    rest = buf[cut:]
                    self._q.put(buf[:cut] if cut < len(buf) else buf)
                if rest:
                    self._q.put(rest)
                hr.drain()
            self._q.put(None)
        except Exception as exc:  # noqa: BLE001 - handed to the consumer
            self._q.put(exc)

    def _get(self) -> bytes | None:
        item = self._q.get()
        if isinstance(item, Exception):
            self._stop.set()
            raise InputFormatError(str(self.path), decompress_problem(item)) from item
        return item  # type: ignore[no-any-return,unused-ignore]

    def __iter__(self) -> Iterator[bytes]:
        if self._first:
            yield self._first
        while True:
            b = self._get()
            if b is None:
                return
            yield b

    def close(self) -> None:
        _stop_thread(self._stop, self._q, self._t)

    def sha256(self) -> str:
        self._t.join()
        return self.hasher.hexdigest()


class _Prefetch:
    """Run an iterator one step ahead in a thread: Polars parses the next block (releasing
    the GIL) while the caller bounds the current one, and ISA-L inflates the one after."""

    _END = object()

    def __init__(self, it: Iterator[Any], depth: int = 1) -> None:
        self._it = it
        self._q: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        try:
            for x in self._it:
                if self._stop.is_set():
                    return
                self._q.put((None, x))
            self._q.put((None, self._END))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
            self._q.put((exc, None))

    def __iter__(self) -> Iterator[Any]:
        while True:
            exc, x = self._q.get()
            if exc is not None:
                raise exc
            if x is self._END:
                return
            yield x

    def close(self) -> None:
        _stop_thread(self._stop, self._q, self._t)


@dataclass
class _Source:
    """Chunks with columns ``u, q, t`` (+ ``url``) in file order, and the file's SHA-256."""

    chunks: Iterator[pl.DataFrame]
    sha256: Any  # () -> str
    close: Any  # () -> None


def _canonical(df: Any, user_numeric: bool, with_url: bool) -> Any:
    """The pass's columns ``u, q, t`` (+ ``url``) of a DataFrame or LazyFrame of AOL columns."""
    u = pl.col("AnonID")
    cols = [
        (u if user_numeric else u.cast(pl.String).str.strip_chars()).alias("u"),
        pl.col("Query").cast(pl.String).fill_null("").alias("q"),
        pl.col("QueryTime").cast(pl.String).alias("t"),
    ]
    if with_url:
        url = pl.col("ClickURL").cast(pl.String).str.strip_chars()
        cols.append(pl.when(url == "").then(None).otherwise(url).alias("url"))
    return df.select(cols)


ENGINE_LAYOUT = (
    "--engine polars and --engine spark read the AOL layout only (tab-separated, header "
    "AnonID Query QueryTime ItemRank ClickURL); for another layout use --engine memory with "
    "--user-col/--query-col/... or --profile"
)
_BAD_ROWS_HINT = "--on-bad-rows skip drops such rows"


def _tab_count(b: bytes) -> int:
    return int(np.count_nonzero(np.frombuffer(b, np.uint8) == 9))


def _block_lines(b: bytes) -> list[bytes]:
    """The physical lines of a block (whole lines; the last may lack its newline)."""
    lines = b.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def check_block(path: Path, b: bytes, n: int, first_line: int) -> list[int]:
    """Find the first line of block ``b`` (``first_line`` = the file's line number of its first
    line) that is not ``n`` tab-separated UTF-8 fields without NUL bytes, and raise
    :class:`InputFormatError` naming it; with none, return the indexes of the block's blank
    lines (which the in-memory reader skips too). The slow path of :func:`_tsv_source`: it
    runs only when a block's totals show a problem."""
    blank = []
    for i, raw in enumerate(_block_lines(b)):
        line = raw.rstrip(b"\r")
        if not line.strip():
            blank.append(i)
            continue
        where = first_line + i
        if b"\0" in line:
            raise InputFormatError(str(path), "NUL byte in a text file (is it binary?)", where)
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputFormatError(
                str(path),
                f"bytes {line[exc.start : exc.start + 4]!r} are not valid utf-8 (try --encoding, "
                "e.g. gb18030 or latin-1)",
                where,
            ) from None
        found = line.count(b"\t") + 1
        if found != n:
            raise InputFormatError(
                str(path), f"{ragged_problem(n, found, chr(9))} ({_BAD_ROWS_HINT})", where
            )
    return blank


def _tsv_source(path: Path, with_url: bool, user_numeric: bool) -> _Source:
    blocks = TextBlocks(path)
    try:
        names = [h.strip() for h in blocks.header.decode("utf-8").split("\t")]
    except UnicodeDecodeError:
        blocks.close()
        raise InputFormatError(
            str(path), "the header is not valid utf-8 (try --encoding)", 1
        ) from None
    missing = [c for c in AOL_COLUMNS if c not in names]
    if missing:
        blocks.close()
        raise InputFormatError(
            str(path), f"missing column(s) {', '.join(map(repr, missing))}; {ENGINE_LAYOUT}", 1
        )
    seen: set[str] = set()
    unique = []
    for i, n in enumerate(names):  # positional names for duplicates / blanks
        unique.append(n if n and n not in seen else f"_col{i}")
        seen.add(n)
    n_fields = len(unique)
    schema: dict[str, Any] = {n: pl.String for n in unique}
    if user_numeric:
        schema["AnonID"] = pl.Int64

    def read(b: bytes, sch: dict[str, Any]) -> pl.DataFrame:
        # every column, not a projection: Polars then refuses a row with too many fields (and
        # parses no slower), so the tab count below proves every row has exactly n_fields
        return pl.read_csv(b, has_header=False, separator="\t", quote_char=None, schema=sch)

    def chunks() -> Iterator[pl.DataFrame]:
        line = 2  # the file's line number of the block's first line (line 1: the header)
        for b in blocks:
            try:
                df = read(b, schema)
            except pl.exceptions.PolarsError as exc:
                if user_numeric:  # text ids? (then the whole pass restarts reading text)
                    try:
                        read(b, schema | {"AnonID": pl.String})
                    except pl.exceptions.PolarsError:
                        pass
                    else:
                        raise _NotNumeric from None
                check_block(path, b, n_fields, line)  # names the line
                last = line + b.count(b"\n")
                raise InputFormatError(
                    str(path),
                    f"lines {line}-{last} cannot be read as the AOL layout ({n_fields} "
                    "tab-separated fields as in the header)",
                    line,
                ) from exc
            rows = df.height  # one per physical line, blank ones included (as null rows)
            kept: np.ndarray | None = None
            if b"\0" in b or _tab_count(b) != (n_fields - 1) * rows:
                # raises on a bad line; else the totals differ only by blank lines
                blank = check_block(path, b, n_fields, line)
                if not blank or rows != len(_block_lines(b)):
                    raise InternalError("a block's field count and its lines disagree")
                mask = np.ones(rows, dtype=bool)
                mask[blank] = False
                kept = np.flatnonzero(mask)
                df = df.filter(pl.Series(mask))
            u = df.get_column("AnonID")
            if user_numeric:
                no_user = u.is_null() if u.null_count() else None
            else:
                no_user = u.str.strip_chars().fill_null("") == ""
            if no_user is not None and no_user.any():
                i = int(no_user.arg_true()[0])
                at = line + (int(kept[i]) if kept is not None else i)
                raise InputFormatError(
                    str(path), f"user id in column 'AnonID' is missing ({_BAD_ROWS_HINT})", at
                )
            line += rows
            yield _canonical(df, user_numeric, with_url)

    ahead = _Prefetch(chunks())

    def close() -> None:
        ahead.close()
        blocks.close()

    return _Source(iter(ahead), blocks.sha256, close)


def validate_aol_text(path: Path) -> None:
    """Read an AOL-layout text file (``.gz`` or plain) through the same checks as the ordered
    pass — header, field count of every line, UTF-8, NUL bytes, user ids — and raise
    :class:`InputFormatError` naming the first bad line. For the plans that scan the file with
    a lazy reader, which checks none of this (one extra read of the file)."""
    for user_numeric in (True, False):
        src = _tsv_source(path, False, user_numeric)
        try:
            for _ in src.chunks:
                pass
            return
        except _NotNumeric:
            continue
        finally:
            src.close()


def _parquet_source(path: Path, with_url: bool, fingerprint: str) -> _Source:
    check_parquet(path)
    lf = pl.scan_parquet(path)
    try:
        schema = lf.collect_schema()
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise InputFormatError(str(path), PARQUET_DAMAGED) from exc
    missing = [c for c in AOL_COLUMNS if c not in schema.names()]
    if missing:
        raise InputFormatError(
            str(path), f"missing column(s) {', '.join(map(repr, missing))}; {ENGINE_LAYOUT}"
        )
    numeric = schema["AnonID"].is_integer()
    want = ["AnonID", "Query", "QueryTime"] + (["ClickURL"] if with_url else [])
    sha = start_fingerprint(path, fingerprint)  # a full hash overlaps the scan

    def chunks() -> Iterator[pl.DataFrame]:
        try:
            n_rows = lf.select(pl.len()).collect().item()  # from the footer
            batch = PARQUET_BATCH_ROWS if n_rows <= PARQUET_LONG_ROWS else PARQUET_BATCH_ROWS // 2
            plan = _canonical(lf.select(want), numeric, with_url)  # in the scan
            yield from plan.collect_batches(chunk_size=max(1, batch))
        except pl.exceptions.PolarsError as exc:
            raise InputFormatError(str(path), PARQUET_DAMAGED) from exc

    return _Source(chunks(), sha.result, lambda: None)


class _NotNumeric(Exception):
    """A user id that is not an integer: read the ids as text instead."""


# ----------------------------------------------------------------------------------- bounding


def _normalize(s: pl.Series, normalize: bool) -> pl.Series:
    """``normalize_query`` applied only to the strings it would change."""
    if not normalize or s.len() == 0:
        return s
    mask = s.str.contains(_NEEDS_NORMALIZING)
    if not mask.any():
        return s
    idx = mask.arg_true()
    fixed = pl.select(normalize_query(pl.lit(s.gather(idx)))).to_series()
    return s.scatter(idx, fixed)


def _rank(start: pl.Expr, counted: pl.Expr, carried: int) -> pl.Expr:
    """1-based running count of ``counted`` rows within each user run (``start`` marks a user's
    first row); the run open at the chunk's start continues from ``carried``."""
    cs = counted.cast(pl.Int64).cum_sum()
    base = (
        pl.when(start)
        .then(cs - counted.cast(pl.Int64))
        .otherwise(None)
        .forward_fill()
        .fill_null(-carried)
    )
    return cs - base


@dataclass
class _Fold:
    """Kept items, counted every ``FOLD_ROWS`` rows into a partial count; partials are merged
    when ``MERGE_PARTIALS`` have gathered and at the end (so each kept item is grouped about
    twice, instead of the whole running count being regrouped at every fold)."""

    keys: list[str]
    pending: list[pl.DataFrame] = field(default_factory=list)
    pending_rows: int = 0
    partials: list[pl.DataFrame] = field(default_factory=list)

    def add(self, df: pl.DataFrame) -> None:
        if df.height:
            self.pending.append(df.select(self.keys))
            self.pending_rows += df.height
            if self.pending_rows >= FOLD_ROWS:
                self.fold()

    def fold(self) -> None:
        if self.pending:
            part = (  # Polars' streaming group-by is ~1.7x its in-memory one on strings here
                pl.concat(self.pending).lazy().group_by(self.keys).len("count")
            ).collect(engine="streaming")
            self.partials.append(part.cast({"count": pl.Int64}))
            self.pending, self.pending_rows = [], 0
        if len(self.partials) >= MERGE_PARTIALS:
            self.partials = [self._merge()]

    def _merge(self) -> pl.DataFrame:
        if len(self.partials) == 1:
            return self.partials[0]
        merged = pl.concat(self.partials).lazy().group_by(self.keys).agg(pl.col("count").sum())
        return merged.collect(engine="streaming")

    def result(self) -> pl.DataFrame:
        self.fold()
        if not self.partials:
            return pl.DataFrame(schema={k: pl.String for k in self.keys} | {"count": pl.Int64})
        return self._merge()


@dataclass
class _Distinct:
    """First occurrences of each user's first ``m`` distinct keys, across chunks."""

    m: int
    keys: list[str]
    carry_user: Any = None
    carry_keys: pl.DataFrame | None = None  # the open user's kept keys so far

    def keep(self, rows: pl.DataFrame) -> pl.DataFrame:
        """``rows``: candidate rows (``u`` + keys) in order; returns the kept ones."""
        if rows.height == 0:
            return rows
        n_carry = 0
        if (
            self.carry_keys is not None
            and self.carry_keys.height
            and (rows.item(0, "u") == self.carry_user)
        ):
            pre = self.carry_keys.select(
                pl.lit(self.carry_user, rows.schema["u"]).alias("u"), *self.keys
            )
            rows = pl.concat([pre, rows.select("u", *self.keys)])
            n_carry = pre.height
        start = (pl.col("u") != pl.col("u").shift(1)).fill_null(True)
        key = pl.col(self.keys[0]) if len(self.keys) == 1 else pl.struct(*self.keys)
        marked = rows.with_columns(_f=key.is_first_distinct().over("u"))
        marked = marked.with_columns(_k=pl.col("_f") & (_rank(start, pl.col("_f"), 0) <= self.m))
        kept_all = marked.filter(pl.col("_k")).drop("_k", "_f")
        last_user = rows.item(rows.height - 1, "u")
        self.carry_user = last_user
        self.carry_keys = kept_all.filter(pl.col("u") == last_user).select(self.keys)
        return kept_all.slice(n_carry) if n_carry else kept_all


class _InOrder:
    """One worker thread that runs submitted calls in order, at most ``depth`` waiting: the
        extraction of chunk i (filter, normalise, fold — Polars work that releases the GIL) runs
        while the caller marks chunk i+1 (``depth`` 0: one chunk in extraction, one being marked — a
    chunk more in memory than a serial pass). Errors surface at the next :meth:`submit` or at
        :meth:`finish`; leaving the ``with`` block cancels what has not started."""

    def __init__(self, depth: int = 0) -> None:
        self._ex = ThreadPoolExecutor(max_workers=1, thread_name_prefix="searchveil-extract")
        self._pending: deque[Future[None]] = deque()
        self._depth = depth

    def submit(self, fn: Any, *args: Any) -> None:
        while len(self._pending) > self._depth:
            self._pending.popleft().result()
        while self._pending and self._pending[0].done():
            self._pending.popleft().result()
        self._pending.append(self._ex.submit(fn, *args))

    def finish(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def __enter__(self) -> _InOrder:
        return self

    def __exit__(self, *exc: object) -> None:
        self._ex.shutdown(wait=True, cancel_futures=True)


@dataclass
class _State:
    """What one chunk hands to the next."""

    u: Any = None
    q: str | None = None
    t: str | None = None
    events: int = 0  # events of the open user so far
    clicks: int = 0  # click rows of the open user so far
    seen_users: set[Any] = field(default_factory=set)
    rows: int = 0
    users: int = 0
    query_events: int = 0
    click_rows: int = 0


def _flags(df: pl.DataFrame, prev: tuple[Any, Any, Any], normalize: bool) -> pl.DataFrame:
    """Add ``_us`` (first row of a user) and ``_es`` (first row of a query event): one lazy
    query per chunk; rows whose raw query differs from the previous row's at the same user and
    time (``_amb``) are settled by comparing normalised text afterwards. ``prev``: the raw
    (user, query, time) of the row before the chunk — all a chunk needs from the one before, so
    flags can be computed a chunk ahead (:func:`_flagged`)."""
    dt = df.schema
    pu0, pq0, pt0 = prev
    u, q, t = pl.col("u"), pl.col("q"), pl.col("t")
    pu = u.shift(1, fill_value=pl.lit(pu0, dt["u"]))
    pq = q.shift(1, fill_value=pl.lit(pq0, pl.String))
    pt = t.shift(1, fill_value=pl.lit(pt0, pl.String))
    same_ut = ((u == pu) & (t == pt)).fill_null(False)
    same_q = (q == pq).fill_null(False)
    out = (
        df.lazy()
        .with_columns(
            _us=(u != pu).fill_null(True),
            _es=~(same_ut & same_q),
            _amb=same_ut & ~same_q,
        )
        .collect()
    )
    amb = out.get_column("_amb")
    if normalize and amb.any():
        # the ambiguous rows' query and the one before, by a filter (a gather across the
        # batch's many small chunks cost 10x more)
        pair = (
            out.lazy()
            .select(
                a=q.filter(pl.col("_amb")),
                b=q.shift(1, fill_value=pl.lit(pq0, pl.String)).filter(pl.col("_amb")),
            )
            .collect()
        )
        same = _normalize(pair.get_column("a"), True) == _normalize(pair.get_column("b"), True)
        idx = amb.arg_true()
        out = out.with_columns(out.get_column("_es").scatter(idx, ~same).alias("_es"))
    return out


def _ranks(out: pl.DataFrame, st: _State, with_url: bool) -> pl.DataFrame:
    """Add ``_er`` (the user's event number of the row) and, with URLs, ``_cr`` (the user's
    click number), continuing the counts of the user open at the chunk's start."""
    ranks = [_rank(pl.col("_us"), pl.col("_es"), st.events).alias("_er")]
    if with_url:
        ranks.append(_rank(pl.col("_us"), pl.col("url").is_not_null(), st.clicks).alias("_cr"))
    return out.with_columns(ranks)


def _mark(df: pl.DataFrame, st: _State, normalize: bool, with_url: bool) -> pl.DataFrame:
    """:func:`_flags` then :func:`_ranks` of one chunk (the previous row from ``st``)."""
    return _ranks(_flags(df, (st.u, st.q, st.t), normalize), st, with_url)


def _flagged(chunks: Iterator[pl.DataFrame], normalize: bool) -> Iterator[pl.DataFrame]:
    """The non-empty chunks with their :func:`_flags`, each chunk's previous row taken from
    the raw chunk before it."""
    prev: tuple[Any, Any, Any] = (None, None, None)
    for df in chunks:
        if df.height == 0:
            continue
        out = _flags(df, prev, normalize)
        last = df.row(df.height - 1, named=True)
        prev = (last["u"], last["q"], last["t"])
        yield out


def ordered_counts(
    source: Source | Path,
    plan: BoundingPlan,
    *,
    normalize: bool,
    fingerprint: str = "full",
) -> tuple[dict[str, pl.DataFrame], dict[str, int], int, str]:
    """Bounded counts of ``plan`` (events, distinct queries or clicks; or the pools) in one
    ordered pass. Returns (counts, figures, rows, sha256); raises
    :class:`NotGrouped` when the users' rows are not contiguous. ``fingerprint``: ``full``
    (whole-file SHA-256) or ``fast`` (Parquet footer + size, :func:`start_fingerprint`)."""
    for user_numeric in (True, False):
        try:
            return _ordered_counts(
                Source.of(source), plan, normalize=normalize, user_numeric=user_numeric,
                fingerprint=fingerprint,
            )  # fmt: skip
        except _NotNumeric:
            continue
    raise InternalError("user ids were neither numeric nor text")


def _ordered_counts(
    source: Source,
    bp: BoundingPlan,
    *,
    normalize: bool,
    user_numeric: bool,
    fingerprint: str,
) -> tuple[dict[str, pl.DataFrame], dict[str, int], int, str]:
    path = source.path
    if bp.keep not in (Bounding.EVENTS, Bounding.DISTINCT, Bounding.POOLS):
        raise InvalidParameterError("bounding plan", bp.keep, "events | distinct | pools")
    by_events = bp.keep == Bounding.EVENTS
    # selection strategies (issue 24): each user's first per_user distinct queries (and first
    # clicks_per_user distinct (query, url) clicks) as rows, not counts
    pools = bp.keep == Bounding.POOLS
    item = bp.item
    with_url = bp.with_url
    if source.parquet:
        src = _parquet_source(path, with_url, fingerprint)
    else:
        if fingerprint != "full":
            raise InvalidParameterError(
                "fingerprint", fingerprint, "full, or fast with a Parquet file input"
            )
        src = _tsv_source(path, with_url, user_numeric)
    st = _State()
    flagged: _Prefetch | None = None
    counts: dict[str, pl.DataFrame] = {}
    figures: dict[str, int] = {}
    try:
        if by_events and not bp.distinct:
            q_fold = _Fold(["query"])
            q_dist = None
        else:
            q_fold = _Fold(["query"] if item == Item.QUERIES else ["query", "url"])
            q_dist = _Distinct(bp.per_user, q_fold.keys)
        c_fold = _Fold(["query", "url"]) if (by_events and with_url) else None
        tally = {"events": 0, "clicks": 0}  # kept rows; updated by the extraction thread only
        q_rows: list[pl.DataFrame] = []  # pools: the kept rows themselves
        c_rows: list[pl.DataFrame] = []
        c_dist = (
            _Distinct(bp.clicks_per_user or 0, ["query", "url"]) if pools and with_url else None
        )

        def extract(df: pl.DataFrame) -> None:
            """Chunk i's kept items into the folds (in the extraction thread, in order)."""
            if pools:
                assert q_dist is not None
                ev = (
                    df.lazy().filter(pl.col("_es")).select("u", pl.col("q").alias("query"))
                ).collect()
                ev = ev.with_columns(query=_normalize(ev.get_column("query"), normalize))
                kept = q_dist.keep(ev)
                q_rows.append(kept)
                tally["events"] += kept.height
                if c_dist is not None:
                    cl = (
                        df.lazy()
                        .filter(pl.col("url").is_not_null())
                        .select("u", pl.col("q").alias("query"), "url")
                        .collect()
                    )
                    cl = cl.with_columns(query=_normalize(cl.get_column("query"), normalize))
                    kept_c = c_dist.keep(cl)
                    c_rows.append(kept_c)
                    tally["clicks"] += kept_c.height
                return
            if q_dist is None:  # events: first d events
                kept = (  # lazy: only the query column is filtered (projection first)
                    df.lazy()
                    .filter(pl.col("_es") & (pl.col("_er") <= bp.per_user))
                    .select(pl.col("q").alias("query"))
                    .collect()
                )
                kept = kept.with_columns(query=_normalize(kept.get_column("query"), normalize))
                q_fold.add(kept)
                tally["events"] += kept.height
            elif item == "queries":  # first m distinct queries (first occurrence)
                ev = (
                    df.lazy().filter(pl.col("_es")).select("u", pl.col("q").alias("query"))
                ).collect()
                ev = ev.with_columns(query=_normalize(ev.get_column("query"), normalize))
                kept = q_dist.keep(ev)
                q_fold.add(kept)
                tally["events"] += kept.height
            else:  # ZEALOUS clicks: first m distinct (query, url)
                cl = (
                    df.lazy()
                    .filter(pl.col("url").is_not_null())
                    .select("u", pl.col("q").alias("query"), "url")
                    .collect()
                )
                cl = cl.with_columns(query=_normalize(cl.get_column("query"), normalize))
                kept = q_dist.keep(cl)
                q_fold.add(kept)
                tally["events"] += kept.height
            if c_fold is not None:
                kc = (
                    df.lazy()
                    .filter(
                        pl.col("url").is_not_null() & (pl.col("_cr") <= (bp.clicks_per_user or 0))
                    )
                    .select(pl.col("q").alias("query"), "url")
                    .collect()
                )
                kc = kc.with_columns(query=_normalize(kc.get_column("query"), normalize))
                c_fold.add(kc)
                tally["clicks"] += kc.height

        # three threads: flags of chunk i+1 (a chunk ahead: they need only the raw row before
        # it) | ranks and bookkeeping of chunk i | extraction of chunk i-1
        flagged = _Prefetch(_flagged(src.chunks, normalize))
        with _InOrder() as worker:
            for df in flagged:
                df = _ranks(df, st, with_url)
                new_users = df.get_column("u").filter(df.get_column("_us")).to_list()
                if any(x in st.seen_users for x in new_users) or len(set(new_users)) < len(
                    new_users
                ):
                    raise NotGrouped
                st.seen_users.update(new_users)
                last = df.row(df.height - 1, named=True)
                st.u, st.q, st.t = last["u"], last["q"], last["t"]
                st.events = int(last["_er"])
                st.rows += df.height
                st.users += len(new_users)
                n_events = int(df.get_column("_es").sum())
                st.query_events += n_events
                if with_url:
                    st.clicks = int(last["_cr"])
                    st.click_rows += int(df.get_column("url").is_not_null().sum())
                worker.submit(extract, df)
            worker.finish()
        kept_events, kept_clicks = tally["events"], tally["clicks"]
        if st.rows == 0:
            raise InputFormatError(str(path), "no data rows left (empty input)")
        sha = src.sha256()
    finally:
        if flagged is not None:
            flagged.close()
        src.close()
    if pools:
        counts["query_pool"] = _pool_frame(q_rows, ["query"], user_numeric)
        figures = {
            "users": st.users,
            "query_events": st.query_events,
            "pool_queries": kept_events,
        }
        if c_dist is not None:
            counts["click_pool"] = _pool_frame(c_rows, ["query", "url"], user_numeric)
            figures |= {"clicks": st.click_rows, "pool_clicks": kept_clicks}
    elif by_events:
        counts["queries"] = q_fold.result()
        figures = {
            "users": st.users,
            "query_events": st.query_events,
            "query_events_after_bounding": kept_events,
        }
        if c_fold is not None:
            counts["clicks"] = c_fold.result()
            figures |= {"clicks": st.click_rows, "clicks_after_bounding": kept_clicks}
    else:
        res = q_fold.result()
        if item == "queries":
            res = res.with_columns(item=pl.col("query"))
        else:
            res = res.with_columns(item=pl.col("query") + PAIR_SEP + pl.col("url"))
        counts["items"] = res
        figures = {
            "users": st.users,
            "items": st.query_events if item == "queries" else st.click_rows,
            "items_after_bounding": kept_events,
        }
    return counts, figures, st.rows, sha
