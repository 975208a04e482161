"""The users' item pools as integer codes where Spark keeps them (issue 40's codes round).

A pool blob of text rows (``user, item, rank``, :mod:`~searchveil.engines.spark_pools`) is
read on every round of the selection, and every round grouped its rows by the item's text:
most of a round's CPU (decoding the strings, hashing them, a group-by of strings) went to the
text, where the Polars engine's pass counts integer ids
(:class:`~searchveil.mechanisms.rounds.ItemPool`). **Coded** blobs (:func:`encode`) hold a
chunk's pool as integers — per row its item's code and its rank, per user a run length —
with the chunk's dictionary of items and each item's 64-bit word (its shard,
:func:`~searchveil.mechanisms.noisy_counts.key_hash`), a few MB a blob: each carries the part
of the dictionary its rows meet first, and is read back with the blobs before it, in order
(:meth:`CodedPool.read` checks each blob's offset). A round is then a few numpy passes
(:func:`take`, :func:`sums`): per-user positions from the runs, per-item sums by ``bincount``
of the codes; only the items a task sums leave with their text and word, packed by shard.

A chunk's dictionary is its own: the same item may have a code in two tasks, or in two chunks
of one task. Every figure a round leaves (weighted counts, rows, holders, rows of rank below
d, lowest rank) is a sum or a minimum, and the noise stage sums a key's partial rows from
every task (:func:`~searchveil.engines.spark_release.blob_partition`), so a key's total is
the same however its rows were coded. The 64-bit word is not a name (it is not
collision-free): it picks the shard, and tells the noise stage which rows may share a key
(:func:`~searchveil.engines.spark_release.sum_by_key`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from searchveil.engines.spark_blobs import write_ipc
from searchveil.errors import InternalError
from searchveil.mechanisms.noisy_counts import key_hash
from searchveil.mechanisms.rounds import user_rows_first

__all__ = ["CodedPool", "decode", "encode", "figures", "sums", "take"]

_LEN = 8  # bytes of each table's length in a coded blob
_EXACT = 1 << 53  # below: float64 sums of integers are exact


def _tables(blob: bytes) -> tuple[int, list[pa.Table]]:
    """A coded blob's dictionary offset and its Arrow tables (each one IPC stream after its
    length)."""
    out: list[pa.Table] = []
    view = memoryview(blob)
    base = int.from_bytes(view[:_LEN], "little")
    at = _LEN
    while at < len(view):
        n = int.from_bytes(view[at : at + _LEN], "little")
        at += _LEN
        out.append(pa.ipc.open_stream(pa.BufferReader(view[at : at + n])).read_all())
        at += n
    return base, out


def encode(df: pl.DataFrame, rows: int = 1 << 17) -> list[bytes]:
    """A pool's text rows (``user, item, rank``; each user's rows together, in rank order) as
    coded blobs of at most ``rows`` rows each (a few MB: a small JVM copies each blob whole):
    each holds its rows (``c`` the item's code, ``rank``), its users (``user``, ``n`` its rows)
    and the part of the dictionary (``item``, ``h`` the item's word) its rows use first — one
    dictionary for ``df``, codes in the order the items first appear, so a blob adds the codes
    after those of the blobs before it (its ``base``, checked when they are read back: the
    blobs of one ``df`` are read together, in order). zstd."""
    # Polars' strings as Arrow views (no copy), coded; the dictionary as offsets, the type the
    # blobs have always had
    arr = df.get_column("item").cast(pl.String).to_arrow(compat_level=pl.CompatLevel.newest())
    enc = pc.dictionary_encode(arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr)
    codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    top = np.maximum.accumulate(codes) if codes.size else codes
    if codes.size and (codes[0] != 0 or (np.diff(top) > 1).any()):
        raise InternalError("dictionary codes not in the order the items first appear")
    items = enc.dictionary.cast(pa.large_string())
    words = np.asarray(key_hash(pl.Series("item", items).to_frame(), ["item"]), dtype=np.uint64)
    users = df.get_column("user").cast(pl.String)
    ranks = df.get_column("rank").cast(pl.Int32).to_numpy()
    out: list[bytes] = []
    lo = 0
    for start in range(0, max(df.height, 1), rows):
        c = codes[start : start + rows]
        hi = max(lo, int(c.max(initial=-1)) + 1)
        runs = users.slice(start, rows).rle().struct.unnest()
        tables = [
            pa.table({"c": pa.array(c.astype(np.uint32)), "rank": ranks[start : start + rows]}),
            pa.table(
                {
                    "user": runs.get_column("value").to_arrow(),
                    "n": runs.get_column("len").cast(pl.Int64).to_arrow(),
                }
            ),
            pa.table({"item": items.slice(lo, hi - lo), "h": pa.array(words[lo:hi])}),
        ]
        blob = io.BytesIO()
        blob.write(lo.to_bytes(_LEN, "little"))
        for t in tables:
            b = write_ipc(t, compress=True)
            blob.write(len(b).to_bytes(_LEN, "little"))
            blob.write(b)
        out.append(blob.getvalue())
        lo = hi
    return out


@dataclass(frozen=True)
class CodedPool:
    """A task's pool as integers: per row its user's run (``run``: 0, 1, … in order, a user's
    rows together), its item's ``code`` and its ``rank``; the runs' ``users``; the dictionary
    (``items``, their words ``h``)."""

    run: npt.NDArray[np.int32]
    code: npt.NDArray[np.int64]
    rank: npt.NDArray[np.int64]
    users: pl.Series
    items: pl.Series
    h: npt.NDArray[np.uint64]

    @staticmethod
    def read(blobs: list[tuple[bytes, bool]], shared: list[str] | None = None) -> CodedPool | None:
        """The pool of a task's coded blobs, in order (each dictionary's codes offset by those
        before it; a user whose rows end one blob and begin the next is one run), or None for
        none. A blob not marked ``own`` (a bounding task's) loses the ``shared`` users' rows:
        their whole pools are another blob's (the driver's join)."""
        codes, ranks, lens, users, items, words = [], [], [], [], [], []
        total = start = 0  # codes read so far; where the current dictionary began
        drop = pl.Series(shared or [], dtype=pl.String).implode()
        for blob, own in blobs:
            base, (rows, runs, dic) = _tables(blob)
            if base == 0:  # a new dictionary
                start = total
            elif base != total - start:
                raise InternalError("a coded pool's blobs were read out of order")
            c = rows.column("c").to_numpy().astype(np.int64) + start
            r = rows.column("rank").to_numpy().astype(np.int64)
            n = runs.column("n").to_numpy()
            who = pl.Series("user", runs.column("user"), dtype=pl.String)
            if n.sum() != c.size:
                raise InternalError("a coded pool's runs do not cover its rows")
            if shared and not own:
                out = who.is_in(drop).to_numpy()
                if out.any():
                    mine = np.repeat(~out, n)
                    c, r, n, who = c[mine], r[mine], n[~out], who.filter(pl.Series(~out))
            codes.append(c)
            ranks.append(r)
            lens.append(n)
            users.append(who)
            items.append(pl.Series("item", dic.column("item"), dtype=pl.String))
            words.append(dic.column("h").to_numpy())
            total += dic.num_rows
        if not codes:
            return None
        names = pl.concat(users)
        same = names.rle_id().to_numpy().astype(np.int32)  # a user split by a blob: one run
        keep = np.r_[True, same[1:] != same[:-1]] if same.size else np.zeros(0, np.bool_)
        return CodedPool(
            np.repeat(same, np.concatenate(lens)),
            np.concatenate(codes),
            np.concatenate(ranks),
            names.filter(pl.Series(keep)),
            pl.concat(items),
            np.concatenate(words),
        )

    @property
    def size(self) -> int:
        """The dictionary's size."""
        return self.items.len()

    def marks(self, names: list[str] | pl.Series | None) -> npt.NDArray[np.bool_]:
        """Per code: whether its item is one of ``names``."""
        if names is None or len(names) == 0:
            return np.zeros(self.size, dtype=np.bool_)
        wanted = pl.Series(names, dtype=pl.String)
        return self.items.is_in(wanted.implode()).fill_null(False).to_numpy()

    def frame(self) -> pl.DataFrame:
        """The pool's text rows (``user, item, rank``)."""
        return pl.DataFrame(
            {
                "user": self.users.gather(self.run),
                "item": self.items.gather(self.code),
                "rank": pl.Series(self.rank, dtype=pl.Int64),
            }
        )

    def count(self, mask: npt.NDArray[np.bool_] | None = None) -> npt.NDArray[np.int64]:
        """Per code: its rows (of ``mask``)."""
        c = self.code if mask is None else self.code[mask]
        return np.bincount(c, minlength=self.size).astype(np.int64)


def decode(blobs: list[bytes]) -> pl.DataFrame:
    """Coded blobs' text rows (``user, item, rank``), the blobs in the order written."""
    pool = CodedPool.read([(b, True) for b in blobs])
    return (
        pool.frame()
        if pool is not None
        else pl.DataFrame(schema={"user": pl.String, "item": pl.String, "rank": pl.Int64})
    )


def take(run: npt.NDArray[np.int32], keep: npt.NDArray[np.bool_], d: int) -> npt.NDArray[np.bool_]:
    """Of the rows ``keep`` marks, each user's first ``d`` (its rows in order): the central
    rounds' rule (:func:`~searchveil.mechanisms.rounds.user_rows_first`), as a mask."""
    out = np.zeros(run.size, dtype=np.bool_)
    out[user_rows_first(run, keep, d)] = True
    return out


def sums(
    pool: CodedPool, rows: npt.NDArray[np.bool_], weights: tuple[int, ...], d: int
) -> dict[str, npt.NDArray[np.int64]]:
    """Per code, over the round's ``rows``: ``count`` (``weights[k]`` on each row of a user with
    k rows), ``first`` (its rows of rank below ``d``) and ``_rows``."""
    k = np.bincount(pool.run, weights=rows, minlength=pool.users.len()).astype(np.int64)
    w = np.where(rows, np.asarray(weights, dtype=np.int64)[k[pool.run]], 0)
    if int(np.abs(w).max(initial=0)) * max(1, int(rows.sum())) < _EXACT:
        count = np.rint(np.bincount(pool.code, weights=w, minlength=pool.size)).astype(np.int64)
    else:  # too large for float64's exact integers
        count = np.zeros(pool.size, dtype=np.int64)
        np.add.at(count, pool.code, w)
    return {
        "count": count,
        "first": pool.count(rows & (pool.rank < d)),
        "_rows": pool.count(rows),
    }


def figures(pool: CodedPool, d: int) -> dict[str, npt.NDArray[np.int64]]:
    """Per code, over every pool row: holders (``h``), rows of rank below ``d`` (``f``) and the
    lowest rank (``r0``; a code without rows: the largest int64)."""
    r0 = np.full(pool.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(r0, pool.code, pool.rank)
    return {"h": pool.count(), "f": pool.count(pool.rank < d), "r0": r0}
