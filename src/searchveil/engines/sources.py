"""Reading an AOL-layout log in chunks for the ordered pass (:mod:`searchveil.engines.ordered`):
a text file (plain or gzip, detected by content) as blocks of whole lines inflated and hashed by
a reader thread (:class:`TextBlocks`), every line checked as the in-memory reader checks it
(header, field count, UTF-8, NUL bytes, user ids: :func:`check_block`, :func:`validate_aol_text`);
a Parquet file as Polars batches. Either way: :class:`Chunks` of columns ``u, q, t`` (+ ``url``)
in file order, and the file's fingerprint once the chunks are read.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from searchveil.errors import InputFormatError, InternalError
from searchveil.io.files import PARQUET_DAMAGED, decompress_problem, start_fingerprint
from searchveil.io.formats import Container, check_parquet, container
from searchveil.io.readers import AOL_COLUMNS
from searchveil.io.text import ragged_problem
from searchveil.io.times import time_expr

__all__ = [
    "BLOCK_BYTES",
    "ENGINE_LAYOUT",
    "Chunks",
    "NotNumeric",
    "Prefetch",
    "TextBlocks",
    "canonical_rows",
    "canonical_times",
    "check_block",
    "parquet_source",
    "tsv_source",
    "validate_aol_text",
]

BLOCK_BYTES = 1 << 25  # 32 MiB of text per chunk
FIRST_BLOCK_BYTES = 1 << 21  # the first chunk: 2 MiB, doubling up to BLOCK_BYTES
PARQUET_BATCH_ROWS = 1 << 20
# above this many rows (from the footer), Parquet batches are half as long: the Polars reader
# holds several decoded batches ahead, and with the partial counts of a long input that is what
# sets the peak (36M rows: 1.8 GB with 1M-row batches, 1.6 GB with 512k; 10M rows: 1M-row
# batches are 3-5% quicker and peak at 1 GB either way)
PARQUET_LONG_ROWS = 16_000_000


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


class Prefetch:
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
class Chunks:
    """Chunks with columns ``u, q, t`` (+ ``url``) in file order, and the file's SHA-256."""

    chunks: Iterator[pl.DataFrame]
    sha256: Any  # () -> str
    close: Any  # () -> None


def _canonical(df: Any, user_numeric: bool, with_url: bool) -> Any:
    """The pass's columns ``u, q, t`` (+ ``url``) of a DataFrame or LazyFrame of AOL columns
    (``t`` still as written: :func:`canonical_rows` finishes it)."""
    u = pl.col("AnonID")
    cols = [
        (u if user_numeric else u.cast(pl.String).str.strip_chars()).alias("u"),
        pl.col("Query").cast(pl.String).fill_null("").alias("q"),
        pl.col("QueryTime").cast(pl.String).alias("t"),
    ]
    if not with_url:
        return df.select(cols)
    # a blank URL is no click: stripped in one step, tested in the next (a when / then naming
    # the strip twice ran it twice)
    out = df.select(*cols, pl.col("ClickURL").cast(pl.String).str.strip_chars().alias("url"))
    url = pl.col("url")
    return out.with_columns(url=pl.when(url == "").then(None).otherwise(url))


def canonical_rows(df: pl.DataFrame, *, user_numeric: bool, with_url: bool,
                   parquet: bool) -> pl.DataFrame:  # fmt: skip
    """The bounding kernel's rows ``u, q, t`` (+ ``url``) of a frame of AOL columns, as every
    engine reads them (the Polars pass here, Spark's partitions on the executors): user ids
    as integers or stripped text, a missing query as empty text, a blank URL as no click, and
    the time as :func:`canonical_times` gives it."""
    out = _canonical(df, user_numeric, with_url)
    return out.with_columns(t=canonical_times(out.get_column("t"), parquet=parquet))


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
    lines (which the in-memory reader skips too). The slow path of :func:`tsv_source`: it
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


def _header_schema(path: Path, header: bytes, user_numeric: bool) -> tuple[dict[str, Any], int]:
    """Every column of the AOL header as text (``AnonID`` as Int64 when ``user_numeric``),
    duplicate or blank names replaced by positional ones; and the number of fields."""
    try:
        names = [h.strip() for h in header.decode("utf-8").split("\t")]
    except UnicodeDecodeError:
        raise InputFormatError(
            str(path), "the header is not valid utf-8 (try --encoding)", 1
        ) from None
    missing = [c for c in AOL_COLUMNS if c not in names]
    if missing:
        raise InputFormatError(
            str(path), f"missing column(s) {', '.join(map(repr, missing))}; {ENGINE_LAYOUT}", 1
        )
    seen: set[str] = set()
    unique = []
    for i, n in enumerate(names):  # positional names for duplicates / blanks
        unique.append(n if n and n not in seen else f"_col{i}")
        seen.add(n)
    schema: dict[str, Any] = {n: pl.String for n in unique}
    if user_numeric:
        schema["AnonID"] = pl.Int64
    return schema, len(unique)


def tsv_source(path: Path, with_url: bool, user_numeric: bool) -> Chunks:
    blocks = TextBlocks(path)
    try:
        schema, n_fields = _header_schema(path, blocks.header, user_numeric)
    except InputFormatError:
        blocks.close()
        raise

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
                        raise NotNumeric from None
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
            yield canonical_rows(df, user_numeric=user_numeric, with_url=with_url,
                                 parquet=False)  # fmt: skip

    ahead = Prefetch(chunks())

    def close() -> None:
        ahead.close()
        blocks.close()

    return Chunks(iter(ahead), blocks.sha256, close)


def validate_aol_text(path: Path) -> None:
    """Read an AOL-layout text file (``.gz`` or plain) through the same checks as the ordered
    pass — header, field count of every line, UTF-8, NUL bytes, user ids — and raise
    :class:`InputFormatError` naming the first bad line. For the plans that scan the file with
    a lazy reader, which checks none of this (one extra read of the file)."""
    for user_numeric in (True, False):
        src = tsv_source(path, False, user_numeric)
        try:
            for _ in src.chunks:
                pass
            return
        except NotNumeric:
            continue
        finally:
            src.close()


def _parquet_plan(lf: pl.LazyFrame, with_url: bool, numeric: bool) -> Any:
    """The pass's columns of a Parquet scan, with the layout test of :func:`canonical_times`
    done in the scan itself (by Polars' streaming engine, on every core, while the kernel
    bounds the batch before): ``t_ok``, whether the time is in the canonical layout."""
    want = ["AnonID", "Query", "QueryTime"] + (["ClickURL"] if with_url else [])
    plan = _canonical(lf.select(want), numeric, with_url)
    return plan.with_columns(t_ok=pl.col("t").str.contains(_CANONICAL))


def _parquet_times(df: pl.DataFrame) -> pl.DataFrame:
    """A batch of :func:`_parquet_plan` with the times of :func:`canonical_times`: as they are
    when all are in the canonical layout (19 bytes each: none to cut), else settled by it; in
    one chunk per column (the scan's batches come in several, which the kernel's cut would
    copy into one: here the copy runs in the reading thread, beside the cutters)."""
    t = df.get_column("t")
    if not df.get_column("t_ok").fill_null(True).all():
        t = canonical_times(t, parquet=True)
    return df.drop("t_ok").with_columns(t=t).rechunk()


def parquet_source(path: Path, with_url: bool, fingerprint: str) -> Chunks:
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
    sha = start_fingerprint(path, fingerprint)  # a full hash overlaps the scan

    def chunks() -> Iterator[pl.DataFrame]:
        try:
            n_rows = lf.select(pl.len()).collect().item()  # from the footer
            batch = PARQUET_BATCH_ROWS if n_rows <= PARQUET_LONG_ROWS else PARQUET_BATCH_ROWS // 2
            plan = _parquet_plan(lf, with_url, numeric)
            for df in plan.collect_batches(chunk_size=max(1, batch)):
                yield _parquet_times(df)
        except pl.exceptions.PolarsError as exc:
            raise InputFormatError(str(path), PARQUET_DAMAGED) from exc

    return Chunks(chunks(), sha.result, lambda: None)


class NotNumeric(Exception):
    """A user id that is not an integer: read the ids as text instead."""


# ------------------------------------------------------------------------------ time text

# the canonical layout "YYYY-MM-DD HH:MM:SS" in ASCII digits (``\d`` would admit any Unicode
# digit); Polars' regex engine checks 6M values in about 0.25 s, without Arrow buffers
_CANONICAL = r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}$"


def canonical_times(t: pl.Series, *, parquet: bool) -> pl.Series:
    """The time column as the in-memory reader compares it: texts already in the canonical
    layout ``YYYY-MM-DD HH:MM:SS`` (AOL's) name their instant uniquely and are kept as they
    are; any other text is parsed as the reader parses it (:func:`~searchveil.io.times.time_expr`
    after cutting a Parquet value to 19 characters, as :func:`~searchveil.io.readers.read_log`
    does) and written back in that layout (null where it names no time: blank). Two rows then
    have equal times exactly when the reader gives them equal instants."""
    if t.dtype != pl.String:
        t = t.cast(pl.String)
    if parquet and t.len() and int(t.str.len_bytes().max() or 0) > 19:  # type: ignore[arg-type]
        t = t.str.slice(0, 19)
    good = t.str.contains(_CANONICAL).fill_null(True)
    if good.all():
        return t
    idx = (~good).arg_true()
    fixed = pl.select(
        time_expr(pl.lit(t.gather(idx)), None).dt.strftime("%Y-%m-%d %H:%M:%S")
    ).to_series()
    return t.scatter(idx, fixed)
