"""Tables moved through Spark as Arrow blobs: rows ``bucket, blob``, each blob one Arrow IPC
stream of many table rows (issue 40's speed round).

Spark's JVM converts every row that a Python task hands it — to its row format, into a cache,
through a shuffle, back to Arrow for the next Python task —, and on a 2-core machine that
per-row work, not Python's, was most of a Spark release's cost above Polars
(docs/spark-perf.md). A table that only Python reads (partial counts, the run users, the
users' pools) therefore travels as a few large binary values: Spark schedules the tasks, keeps
the blobs on the executors (cache, shuffle files) and moves them by ``bucket``; the rows inside
are read and written by Polars in the tasks.

A table's ``bucket`` is a shard of its key (:func:`shard_bits`; a fixed function of the key's
bytes whose top bits are the noise bucket, :func:`~searchveil.mechanisms.noisy_counts.
noise_buckets`): moving the blobs by shard puts every partial row of a key in one task — what
the sum by key needs —, and by noise bucket every key of a bucket too — what a seeded
release's bucket streams need.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

from searchveil.mechanisms.noisy_counts import NOISE_BUCKETS, key_hash

__all__ = [
    "BLOB_DDL",
    "BLOB_SCHEMA",
    "NOISE_BITS",
    "blob_frame",
    "blob_rows",
    "bucketed",
    "cores",
    "noise_bucket_column",
    "noise_bucket_of",
    "pack",
    "rows_to_blobs",
    "shard_bits",
    "shards",
    "unpack",
    "unpack_all",
    "write_ipc",
]

assert NOISE_BUCKETS == 1 << 5  # NOISE_BITS

BLOB_SCHEMA = pa.schema([("bucket", pa.int64()), ("blob", pa.binary())])
BLOB_DDL = "bucket long, blob binary"


_LZ4 = pa.Codec("lz4")
_ZSTD = pa.Codec("zstd", compression_level=1)


def pack(df: pl.DataFrame, *, compress: bool = False) -> bytes:
    """``df`` as one Arrow IPC stream (Arrow's offset strings: 8 bytes a row where Polars'
    views take 16), its buffers LZ4-compressed — what a shuffle moves: fast both ways, 40% of
    the bytes the JVM copies —, or ``compress``: zstd level 1 — what the cluster keeps and
    reads on every round (a pool blob): a fifth of the bytes, at half the time of Polars' own
    zstd writer (docs/spark-perf.md)."""
    return write_ipc(df.to_arrow(), compress=compress)


def write_ipc(table: pa.Table, *, compress: bool = False) -> bytes:
    """An Arrow table as :func:`pack` writes a frame (LZ4, or ``compress``: zstd level 1)."""
    sink = pa.BufferOutputStream()
    opts = pa.ipc.IpcWriteOptions(compression=_ZSTD if compress else _LZ4)
    with pa.ipc.new_stream(sink, table.schema, options=opts) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def unpack(blob: bytes) -> pl.DataFrame:
    """The frame :func:`pack` wrote."""
    return pl.read_ipc_stream(io.BytesIO(blob))


#: a blob's ``bucket`` is a *shard*: the top ``bits`` bits of the key's 64-bit word
#: (:func:`~searchveil.mechanisms.noisy_counts.key_hash`), of which the top 5 are its noise
#: bucket (:func:`noise_bucket_of`). A secure stage moves blobs by shard, a seeded one by noise
#: bucket (each of the 32 buckets' seeded streams drawn whole in one task). ``bits`` is
#: :func:`shard_bits` of the session: at least 4 shards per shuffle partition — 5 bits (the
#: noise buckets) for searchveil's 8 partitions, 10 for 200 — so a cluster that raises
#: ``spark.sql.shuffle.partitions`` gets as many reduce tasks; finer shards cost a small
#: machine ≈ 1 s of packing a release (8 bits against 5, 20M rows)
NOISE_BITS = 5
MAX_BITS = 16


def shard_bits(spark: Any) -> int:
    """The session's shard bits (:data:`NOISE_BITS` … :data:`MAX_BITS`): at least 4 shards
    per shuffle partition."""
    try:
        parts = int(spark.conf.get("spark.sql.shuffle.partitions"))
    except (TypeError, ValueError):  # "auto" on some platforms
        parts = 200
    return min(MAX_BITS, max(NOISE_BITS, math.ceil(math.log2(max(1, 4 * parts)))))


def cores(spark: Any) -> int:
    """The session's task slots (``defaultParallelism``: executor cores; a Spark Connect
    client, which cannot ask, the shuffle partitions): how many tasks a small table needs."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        try:
            return max(1, int(spark.conf.get("spark.sql.shuffle.partitions")))
        except (TypeError, ValueError):
            return 8


def shards(df: pl.DataFrame, keys: list[str], bits: int = NOISE_BITS) -> npt.NDArray[np.int64]:
    """The shard (0 … 2^bits − 1) of each row's ``keys``."""
    return (key_hash(df, keys) >> np.uint64(64 - bits)).astype(np.int64)


def noise_bucket_of(shard: int, bits: int = NOISE_BITS) -> int:
    """A shard's noise bucket."""
    return shard >> (bits - NOISE_BITS)


def noise_bucket_column(shard: Any, bits: int = NOISE_BITS) -> Any:
    """A Spark column's shards as their noise buckets."""
    from pyspark.sql import functions as F

    return F.shiftright(shard, bits - NOISE_BITS)


def bucketed(
    df: pl.DataFrame,
    keys: list[str],
    bits: int = NOISE_BITS,
    shard: npt.NDArray[np.int64] | None = None,
) -> Iterator[tuple[int, bytes]]:
    """``df``'s rows by the shard of their ``keys`` (or each row's ``shard``, known already):
    (shard, blob) per shard met."""
    if df.height == 0:
        return
    b = pl.Series("_bucket", shards(df, keys, bits) if shard is None else shard, dtype=pl.Int64)
    for (bucket,), part in df.with_columns(b).partition_by("_bucket", as_dict=True).items():
        yield int(bucket), pack(part.drop("_bucket"))


def blob_frame(pairs: list[tuple[int, bytes]]) -> pa.Table:
    """(bucket, blob) pairs as an Arrow table of :data:`BLOB_SCHEMA`."""
    return pa.table(
        [pa.array([b for b, _ in pairs], pa.int64()), pa.array([x for _, x in pairs], pa.binary())],
        schema=BLOB_SCHEMA,
    )


def unpack_all(batches: Iterator[pa.RecordBatch], column: str = "blob") -> Iterator[pl.DataFrame]:
    """Every blob of a task's batches, unpacked, in order."""
    for b in batches:
        for blob in b.column(column).to_pylist():
            if blob is not None:
                yield unpack(blob)


def _bucket_rows(
    keys: list[str], bits: int, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    frames = [
        pl.DataFrame(pl.from_arrow(pa.Table.from_batches([b]))) for b in batches if b.num_rows
    ]
    if frames:
        pairs = list(bucketed(pl.concat(frames, how="vertical_relaxed"), keys, bits))
        yield from blob_frame(pairs).to_batches()


def rows_to_blobs(df: Any, keys: list[str], bits: int = NOISE_BITS) -> Any:
    """A Spark frame of table rows as blob rows (``bucket, blob``): each task's rows packed by
    the shard of their ``keys`` (a table that arrives as rows: a test's, a DataFrame)."""
    return df.mapInArrow(partial(_bucket_rows, keys, bits), BLOB_DDL)


def blob_rows(spark: Any, df: pl.DataFrame, keys: list[str], bits: int = NOISE_BITS) -> Any:
    """A table held by the driver (a few rows: the join's) as a Spark frame of blob rows."""
    return spark.createDataFrame(blob_frame(list(bucketed(df, keys, bits))))
