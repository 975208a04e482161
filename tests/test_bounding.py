"""Property tests: after bounding no user exceeds its limit; bounding never invents an item."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searchveil.bounding import Sensitivities, bound_contributions
from searchveil.errors import InvalidParameterError
from searchveil.model import items
from searchveil.rng import SeededRandom

rows = st.lists(
    st.tuples(st.integers(0, 6), st.sampled_from(["a", "b", "c", "d", "e"])),
    min_size=0,
    max_size=80,
)


def frame(rs: list[tuple[int, str]]) -> pl.DataFrame:
    df = pl.DataFrame(
        {"user": [u for u, _ in rs], "item": [i for _, i in rs]},
        schema={"user": pl.Int64, "item": pl.String},
    )
    return df.with_columns(pos=pl.int_range(pl.len()).over("user").cast(pl.Int64))


@settings(max_examples=150, deadline=None)
@given(
    rs=rows,
    d=st.integers(1, 6),
    distinct=st.booleans(),
    strategy=st.sampled_from(["first", "random"]),
    seed=st.integers(0, 2**32),
)
def test_bounding_properties(rs, d, distinct, strategy, seed) -> None:
    df = frame(rs)
    out = bound_contributions(
        df, max_per_user=d, strategy=strategy, rng=SeededRandom(seed), distinct=distinct
    )
    per_user = out.group_by("user").len()
    assert per_user.height == 0 or per_user.get_column("len").max() <= d
    # never invents: every kept (user, item, pos) row is an input row
    assert out.join(df, on=["user", "item", "pos"], how="anti").height == 0
    assert out.height <= df.height
    if distinct:
        assert out.select(pl.struct("user", "item").n_unique()).item() == out.height
    # every user with at least one item keeps min(d, its (distinct) items)
    src = df.unique(["user", "item"]) if distinct else df
    expected = src.group_by("user").len().with_columns(pl.col("len").clip(upper_bound=d))
    got = per_user.join(expected, on="user", suffix="_exp")
    assert (got.get_column("len") == got.get_column("len_exp")).all()


def test_first_d_keeps_the_first() -> None:
    df = frame([(1, "a"), (1, "b"), (1, "a"), (1, "c"), (2, "e")])
    out = bound_contributions(df, max_per_user=2)
    assert out.filter(pl.col("user") == 1).get_column("item").to_list() == ["a", "b"]
    out = bound_contributions(df, max_per_user=3, distinct=True)
    assert out.filter(pl.col("user") == 1).get_column("item").to_list() == ["a", "b", "c"]


def test_random_d_is_uniform() -> None:
    """Each of 4 items of one user is kept by random-2 bounding with probability 1/2."""
    df = frame([(1, x) for x in "abcd"])
    rng = SeededRandom(3)
    kept = {x: 0 for x in "abcd"}
    n = 4000
    for _ in range(n):
        for x in bound_contributions(df, max_per_user=2, strategy="random", rng=rng).get_column(
            "item"
        ):
            kept[x] += 1
    for x in "abcd":
        assert abs(kept[x] / n - 0.5) < 0.04


def test_bounding_real_items(aol_215) -> None:
    q = items(aol_215, "queries")
    out = bound_contributions(q, max_per_user=5)
    assert out.group_by("user").len().get_column("len").max() == 5
    assert out.get_column("user").n_unique() == aol_215.n_users


@pytest.mark.parametrize("bad", [0, -1, 2.5, "3", None])
def test_invalid_bound(bad) -> None:
    with pytest.raises(InvalidParameterError):
        bound_contributions(frame([(1, "a")]), max_per_user=bad)


def test_random_needs_rng() -> None:
    with pytest.raises(InvalidParameterError):
        bound_contributions(frame([(1, "a")]), max_per_user=1, strategy="random")


def test_sensitivities() -> None:
    s = Sensitivities.from_bounds(max_per_user=20, distinct=True)
    assert (s.l0, s.linf, s.l1) == (20, 1, 20) and s.l2 == pytest.approx(20**0.5)
    o = Sensitivities.from_bounds(max_per_user=20, distinct=False)
    assert (o.l0, o.linf, o.l1, o.l2) == (20, 20, 20, 20.0)
