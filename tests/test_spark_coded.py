"""The coded pools (engines/spark_coded.py) and the selection's rounds on them
(engines/spark_pools.py), run in this process, no JVM: every round's per-item sums are checked
against a text oracle written here with Polars' window functions (each user's first d rows by
``over``, weights joined by the user's row count) — not the numpy passes under test."""

from __future__ import annotations

import hashlib

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

pytest.importorskip("pyspark")

from searchveil.engines.spark_blobs import pack, unpack  # noqa: E402
from searchveil.engines.spark_coded import CodedPool, decode, encode, sums, take  # noqa: E402
from searchveil.errors import InternalError  # noqa: E402
from searchveil.mechanisms.noisy_counts import key_hash  # noqa: E402


def _pool_frame(users: int = 300, seed: int = 3, universe: int = 60) -> pl.DataFrame:
    """A task's pool rows: users contiguous, each its first distinct items in rank order."""
    gen = np.random.default_rng(seed)
    rows: dict[str, list] = {"user": [], "item": [], "rank": []}
    for u in range(users):
        items = gen.choice(universe, size=int(gen.integers(1, 14)), replace=False)
        rows["user"] += [f"u{u}"] * items.size
        rows["item"] += [f"i{i}" for i in items]
        rows["rank"] += list(range(items.size))
    return pl.DataFrame(rows, schema={"user": pl.String, "item": pl.String, "rank": pl.Int64})


def _oracle_rows(df: pl.DataFrame, pool: int | None, d: int, gone: list[str]) -> pl.DataFrame:
    """Each user's first ``d`` rows whose rank is below ``pool`` and item not in ``gone``."""
    keep = ~pl.col("item").is_in(pl.Series(gone, dtype=pl.String).implode())
    if pool is not None:
        keep = keep & (pl.col("rank") < pool)
    return df.filter(keep).filter(pl.int_range(pl.len()).over("user") < d)


def _oracle_sums(rows: pl.DataFrame, weights: tuple[int, ...], d: int) -> pl.DataFrame:
    k = rows.group_by("user").len("k")
    w = rows.join(k, on="user").with_columns(
        w=pl.col("k").replace_strict(dict(enumerate(weights)), return_dtype=pl.Int64)
    )
    return w.group_by("item").agg(
        count=pl.col("w").sum(),
        first=(pl.col("rank") < d).sum().cast(pl.Int64),
        _rows=pl.len().cast(pl.Int64),
    )


def _oracle_figures(df: pl.DataFrame, d: int) -> pl.DataFrame:
    return df.group_by("item").agg(
        h=pl.len().cast(pl.Int64),
        f=(pl.col("rank") < d).sum().cast(pl.Int64),
        r0=pl.col("rank").min(),
    )


def _batches(
    blobs: list[bytes], own: list[bool] | None = None, eligible: list[bytes] | None = None
) -> list[pa.RecordBatch]:
    """A task's rows as a round reads them: the blobs, ``own``, ``head`` on the first row and
    the eligible items' blobs there."""
    n = len(blobs)
    return [
        pa.record_batch(
            [
                pa.array(blobs, pa.binary()),
                pa.array(own or [True] * n),
                pa.array([True] + [False] * (n - 1)),
                pa.array([eligible] + [None] * (n - 1), pa.list_(pa.binary())),
            ],
            names=["blob", "own", "head", "eligible"],
        )
    ]


def _total(out: object) -> pl.DataFrame:
    """A round's packed output summed per item (as the noise stage sums a key's partial rows),
    and every row in the shard its item's word names."""
    frames = []
    for b in out:  # type: ignore[attr-defined]
        for shard, blob in zip(
            b.column("bucket").to_pylist(), b.column("blob").to_pylist(), strict=True
        ):
            part = unpack(blob)
            words = key_hash(part, ["item"])
            assert (part.get_column("_w").to_numpy() == words).all()  # the stored words
            assert ((words >> np.uint64(64 - 5)).astype(np.int64) == shard).all()
            frames.append(part.drop("_w"))
    df = pl.concat(frames)
    aggs = [pl.col(c).min() if c == "r0" else pl.col(c).sum() for c in df.columns if c != "item"]
    return df.group_by("item").agg(aggs).select(sorted(df.columns)).sort("item")


def _sorted(df: pl.DataFrame) -> pl.DataFrame:
    return df.select(sorted(df.columns)).sort("item")


def _split(df: pl.DataFrame, cuts: list[int]) -> list[bytes]:
    """``df`` as coded blobs cut at rows ``cuts`` (users split across two blobs)."""
    edges = [0, *cuts, df.height]
    return [
        b for lo, hi in zip(edges, edges[1:], strict=False) for b in encode(df.slice(lo, hi - lo))
    ]


def test_a_coded_blob_decodes_to_its_rows_and_a_split_user_is_one_run() -> None:
    df = _pool_frame()
    assert decode(encode(df)).equals(df)
    blobs = _split(df, [701, 1500])
    assert df.get_column("user")[700] == df.get_column("user")[701]  # a user split in two
    pool = CodedPool.read([(b, True) for b in blobs])
    assert pool is not None
    assert pool.frame().equals(df)
    assert pool.users.len() == df.get_column("user").n_unique() == int(pool.run.max()) + 1
    # the same item has a code in each blob: the dictionary is the blobs', in order
    assert pool.size > df.get_column("item").n_unique()


def test_one_dictionary_across_a_frames_blobs_read_in_order_only() -> None:
    df = _pool_frame(users=200)
    blobs = encode(df, rows=128)  # many blobs, one dictionary: each adds the items it meets
    assert len(blobs) == -(-df.height // 128) > 3
    assert decode(blobs).equals(df)
    pool = CodedPool.read([(b, True) for b in blobs])
    assert pool is not None and pool.size == df.get_column("item").n_unique()
    # two frames' blobs in a row: the second dictionary starts after the first's
    two = blobs + encode(df.slice(0, 300), rows=100)
    assert decode(two).equals(pl.concat([df, df.slice(0, 300)]))
    with pytest.raises(InternalError, match="out of order"):
        decode([blobs[0], blobs[2], blobs[1]])


def test_each_blob_carries_only_its_slice_of_the_dictionary() -> None:
    """Long distinct items that do not compress, each met once: the blobs' dictionaries
    partition the items, and no blob's bytes hold more than its own."""
    n = 4000
    df = pl.DataFrame(
        {
            "user": [f"u{i // 4}" for i in range(n)],
            "item": [hashlib.sha256(str(i).encode()).hexdigest() * 4 for i in range(n)],
            "rank": [i % 4 for i in range(n)],
        }
    )
    blobs = encode(df, rows=1000)
    assert decode(blobs).equals(df)
    sizes = [len(b) for b in blobs]
    assert len(sizes) == 4 and max(sizes) < 0.4 * sum(sizes)
    pool = CodedPool.read([(b, True) for b in blobs])
    assert pool is not None and pool.items.equals(df.get_column("item"))


def test_shared_users_leave_only_the_blobs_a_task_does_not_own() -> None:
    df = _pool_frame(users=40)
    shared = ["u0", "u39"]
    mine = CodedPool.read([(b, False) for b in encode(df)], shared)
    assert mine is not None
    want = df.filter(~pl.col("user").is_in(shared))
    assert mine.frame().equals(want)
    owned = CodedPool.read([(b, True) for b in encode(df)], shared)
    assert owned is not None and owned.frame().equals(df)


@pytest.mark.parametrize("figures", [None, 6])
def test_a_round_on_coded_blobs_equals_the_text_oracle(figures: int | None) -> None:
    from searchveil.engines.spark_pools import _Round, _round_sums

    df = _pool_frame()
    weights = tuple(range(0, 70, 10))  # d = 6
    gone = ["i1", "i7", "i30"]
    r = _Round(pool=10, d=6, weights=weights, gone=gone, figures=figures)
    got = _total(_round_sums(r, [], iter(_batches(_split(df, [701, 1500])))))
    rows = _oracle_rows(df, 10, 6, gone)
    want = _oracle_sums(rows, weights, 6)
    if figures is not None:  # every pool item, with its figures
        want = _oracle_figures(df, 6).join(want, on="item", how="left")
        want = want.with_columns(pl.col("count", "first", "_rows").fill_null(0))
        assert got.height == df.get_column("item").n_unique()
    assert int(got.get_column("_rows").sum()) == rows.height > 0
    assert got.equals(_sorted(want))
    mutant = _Round(pool=10, d=5, weights=weights[:6], gone=gone, figures=figures)
    assert not _total(_round_sums(mutant, [], iter(_batches(encode(df))))).equals(got)


def test_after_bias_round_reads_the_eligible_items_from_the_tasks_first_row() -> None:
    from searchveil.engines.spark_pools import _Round, _round_sums

    df = _pool_frame(seed=5)
    bias = _Round(pool=8, d=4, weights=(0, 9, 7, 5, 4), gone=["i2"])
    r = _Round(None, 3, (0, 8, 6, 5), ["i2", "i9"], bias)
    eligible = ["i3", "i4", "i5", "i11", "i40"]
    blobs = _split(df, [700])
    # packed by two tasks, the blobs gathered into one row
    elig = [pack(pl.DataFrame({"item": x}), compress=True) for x in (eligible[:2], eligible[2:])]
    got = _total(_round_sums(r, [], iter(_batches(blobs, eligible=elig))))
    assert got.equals(_total(_round_sums(r, [], iter(_batches(blobs, eligible=elig[::-1])))))
    rows = _oracle_rows(df, bias.pool, bias.d, bias.gone)
    rows = _oracle_rows(rows.filter(pl.col("item").is_in(eligible)), None, r.d, r.gone)
    assert rows.height > 0
    assert got.equals(_sorted(_oracle_sums(rows, r.weights, r.d)))
    # no eligible item (no task packed a blob) and no row at all: nothing to sum
    assert list(_round_sums(r, [], iter(_batches(blobs, eligible=[])))) == []
    assert list(_round_sums(r, [], iter(_batches(blobs)))) == []


def test_weighted_sums_beyond_float_exactness_stay_exact() -> None:
    df = _pool_frame(users=50)
    pool = CodedPool.read([(b, True) for b in encode(df)])
    assert pool is not None
    rows = take(pool.run, np.ones(pool.rank.size, dtype=np.bool_), 20)
    big = tuple([0] + [2**50 + k for k in range(1, 21)])  # sums above 2^53: float64 rounds
    got = sums(pool, rows, big, 5)["count"]
    k = np.bincount(pool.run)[pool.run]
    want = [0] * pool.size
    for c, kk in zip(pool.code.tolist(), k.tolist(), strict=True):
        want[c] += big[kk]
    assert max(want) > 2**53
    assert got.tolist() == want
    small = sums(pool, rows, tuple(range(21)), 5)["count"]
    assert small.sum() == sum(int(kk) for kk in k)


def test_first_counts_and_figure_sums_on_coded_blobs() -> None:
    from searchveil.engines.spark_pools import _figure_sums, _first_counts

    df = _pool_frame(seed=9)
    blobs = _split(df, [333, 999])
    items = ["i3", "i8", "i21", "nowhere"]
    got = pl.concat([pl.from_arrow(b) for b in _first_counts(4, items, [], iter(_batches(blobs)))])
    want = df.filter((pl.col("rank") < 4) & pl.col("item").is_in(items)).group_by("item").len()
    want = want.rename({"len": "count"}).cast({"count": pl.Int64})
    assert _sorted(pl.DataFrame(got)).equals(_sorted(want))
    figs = _total(_figure_sums(4, [], 5, iter(_batches(blobs))))
    assert figs.equals(_sorted(_oracle_figures(df, 4)))


@pytest.mark.parametrize("key", [None, 777])
def test_the_noise_stage_on_two_tasks_round_sums_equals_it_on_the_oracles(key: int | None) -> None:
    """Two tasks' round sums (their dictionaries their own: an item in both tasks, and in
    two blobs of one, leaves in several partial rows) through the noise stage: the same
    figures as the stage on the oracle's per-item sums of the whole pool; seeded, the same
    released rows and noise."""
    from searchveil.engines.spark_blobs import blob_frame, bucketed
    from searchveil.engines.spark_pools import _Round, _round_sums
    from searchveil.engines.spark_release import BlobStage, blob_partition, read_stage
    from searchveil.mechanisms.noise import DiscreteLaplace
    from searchveil.mechanisms.noisy_counts import NoisePlan, NoisyStep

    df = _pool_frame(users=900, universe=400)
    r = _Round(pool=10, d=6, weights=tuple(range(0, 70, 10)), gone=["i3"], figures=6)
    users = df.get_column("user")
    cut = int(np.flatnonzero((users != users.shift(1)).fill_null(True).to_numpy())[300])
    tasks = [_split(df.slice(0, cut), [cut // 2]), _split(df.slice(cut), [])]  # whole users
    packed = [b for t in tasks for b in _round_sums(r, [], iter(_batches(t)))]
    want = _oracle_figures(df, 6).join(
        _oracle_sums(_oracle_rows(df, 10, 6, ["i3"]), r.weights, 6), on="item", how="left"
    )
    want = want.with_columns(pl.col("count", "first", "_rows").fill_null(0))
    plan = NoisePlan((NoisyStep(DiscreteLaplace(3.0), threshold=40, publish="_noisy"),))
    st = BlobStage(["item"], plan, key, carry=("first",), figures=6)

    def stage(batches: list[pa.RecordBatch]) -> object:
        out = pl.DataFrame(
            pl.from_arrow(pa.Table.from_batches(list(blob_partition(st, iter(batches)))))
        )
        return read_stage(out, ["item"], ["_noisy", "first"])

    a = stage(packed)
    b = stage(blob_frame(list(bucketed(want, ["item"]))).to_batches())
    assert sum(x.num_rows for x in packed) > 0
    assert a.extra == b.extra and a.extra["items"] == df.get_column("item").n_unique()
    assert a.summary == b.summary and a.rows_in == b.rows_in
    assert a.rows.height > 0 and b.rows.height > 0
    if key is not None:  # seeded: the same noise on the same keys
        assert _sorted(a.rows).equals(_sorted(b.rows))


@pytest.mark.parametrize("stored", [True, False])
def test_sum_by_key_groups_only_repeated_words_and_never_merges_two_keys(stored: bool) -> None:
    """With the words stored (a round's rows) and without (a count table's: a group-by)."""
    from searchveil.engines.spark_release import sum_by_key

    gen = np.random.default_rng(11)
    # a word is the text's length, first and last 8 bytes: these three share one word
    twins = [f"prefix00{m}suffix00" for m in "XYZ"]
    names = twins[:2] + [f"q{i}" for i in range(3000)] + twins[2:]
    pick = np.r_[0, 1, len(names) - 1, gen.integers(0, len(names), 2000)]  # each twin once
    raw = pl.DataFrame(
        {
            "item": [names[i] for i in pick],
            "count": gen.integers(-50, 1000, pick.size),
            "first": gen.integers(0, 9, pick.size),
            "r0": gen.integers(0, 40, pick.size),
        }
    )
    words = key_hash(raw, ["item"])
    assert len({int(words[i]) for i in range(3)}) == 1
    if stored:
        raw = raw.with_columns(_w=pl.Series(words, dtype=pl.UInt64))
    got = sum_by_key(raw, ["item"], ["count", "first"], ["r0"])
    want = raw.group_by("item").agg(pl.col("count", "first").sum(), pl.col("r0").min())
    assert got.height == len({names[i] for i in pick}) < raw.height
    assert set(twins) <= set(got.get_column("item").to_list())
    assert _sorted(got).equals(_sorted(want))
    assert sum_by_key(raw.clear(), ["item"], ["count", "first"], ["r0"]).height == 0
