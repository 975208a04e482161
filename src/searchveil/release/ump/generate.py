"""A same-schema log generated from DP statistics only: the synthetic-id end-to-end mode of
``release ump`` (and of CELS); docs/privacy/ump.md, "The pipeline and its guarantee".

Inputs — both already differentially private, nothing else is read:

* ``x``: for each published (query, url) pair, its noisy number of distinct holders;
* ``profile``: ``profile[j - 1]`` is the noisy number of users holding exactly ``j`` published
  pairs (``j = 1 … m``).

Output: rows ``(AnonID, Query, ClickURL, Count)`` of synthetic users. Pure post-processing, so the
randomness here does not affect the guarantee; it still comes from the injected source (through
:meth:`~searchveil.rng.RandomSource.numpy_generator`), so a seeded run is reproducible.

The algorithm is the configuration model of a bipartite graph with given degrees:

1. **User sizes.** Draw sizes i.i.d. from the profile's distribution (size j with probability
   ``profile[j-1] / Σ profile``) until they add up to ``T = Σ x``; the last size is cut so the
   total is exactly ``T``. Every published pair then keeps exactly its noisy number of rows.
   A size above the number of published pairs is capped there (a user holds distinct pairs).
   An all-zero profile (nothing to go on) gives users of one pair each.
2. **Dealing.** A *large* pair (``x_p ≥ N/64`` with N synthetic users; at most 64·T/N of them)
   goes first, in decreasing x: ``x_p`` distinct users drawn without replacement with
   probability proportional to their free slots (Efraimidis–Spirakis keys). The tokens of the
   other pairs (pair p repeated ``x_p`` times) then meet the free slots in a uniformly random
   order. (Dealing large pairs at random would collide often: a pair held by most users cannot
   be spread by chance.)
3. **Repair.** A user holding the same pair twice is a collision; each round re-shuffles the
   slots of all colliding tokens together with as many random other tokens (a permutation of a
   subset, so every user keeps its size and every pair its count). Collisions left after
   :data:`REPAIR_ROUNDS` rounds (only when a pair has about as many holders as there are users)
   are merged into one row with ``Count`` 2 or more — reported as ``merged_rows``.

``AnonID`` values are 1 … N in random order of the users; the rows are sorted by
(AnonID, Query, ClickURL), a function of the published values only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.rng import RandomSource

__all__ = [
    "GeneratedLog", "deal_tokens", "generate_log", "generated_tables", "user_sizes", "REPAIR_ROUNDS"
]  # fmt: skip

REPAIR_ROUNDS = 40
_IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class GeneratedLog:
    """The generated ``log`` table and what the generator did (public: it is computed from the
    DP statistics only)."""

    log: pl.DataFrame
    users: int
    rows: int
    merged_rows: int
    repair_rounds: int

    def figures(self) -> dict[str, Any]:
        return {
            "synthetic_users": self.users,
            "rows": self.rows,
            "merged_rows": self.merged_rows,
            "repair_rounds": self.repair_rounds,
        }


def user_sizes(
    profile: npt.ArrayLike, total: int, *, max_size: int, gen: np.random.Generator
) -> _IntArray:
    """Sizes of the synthetic users: i.i.d. from the profile's distribution, cut to sum to
    ``total`` exactly (step 1 of the module docstring)."""
    w = np.clip(np.asarray(profile, dtype=np.float64).ravel(), 0.0, None)
    if total <= 0:
        return np.zeros(0, dtype=np.int64)
    if max_size < 1:
        raise InvalidParameterError("max_size", max_size, "an integer >= 1")
    if w.size == 0 or not np.isfinite(w).all() or w.sum() <= 0:
        w = np.ones(1)
    sizes_j = np.minimum(np.arange(1, w.size + 1, dtype=np.int64), max_size)
    p = w / w.sum()
    mean = float(np.dot(p, sizes_j))
    chunks: list[_IntArray] = []
    drawn = 0
    while drawn < total:
        n = int(np.ceil((total - drawn) / mean * 1.05)) + 16
        chunk = sizes_j[gen.choice(w.size, size=n, p=p)]
        chunks.append(chunk)
        drawn += int(chunk.sum())
    sizes = np.concatenate(chunks)
    cum = np.cumsum(sizes)
    last = int(np.searchsorted(cum, total, side="left"))
    sizes = sizes[: last + 1].copy()
    sizes[-1] -= int(cum[last]) - total
    return sizes


def _collisions(slots: _IntArray, tokens: _IntArray, n_pairs: int) -> _IntArray:
    """Indices of tokens whose (user, pair) already occurred at an earlier index."""
    key = slots * np.int64(n_pairs) + tokens
    order = np.argsort(key, kind="stable")
    ks = key[order]
    dup = np.zeros(key.size, dtype=bool)
    dup[order[1:]] = ks[1:] == ks[:-1]
    return np.flatnonzero(dup)


LARGE_PAIR_DIVISOR = 64


def _deal_large(
    x: _IntArray, free: _IntArray, gen: np.random.Generator, max_large: int | None = None
) -> tuple[_IntArray, _IntArray]:
    """Step 2 for the large pairs (the ``max_large`` largest at most): their tokens and users
    (``free`` is decremented)."""
    n = free.size
    large = np.flatnonzero(x * LARGE_PAIR_DIVISOR >= max(n, 1))
    large = large[np.argsort(-x[large], kind="stable")][:max_large]
    toks: list[_IntArray] = []
    users: list[_IntArray] = []
    for p in large:
        avail = np.flatnonzero(free > 0)
        k = int(min(x[p], avail.size))
        if k == 0:
            continue
        # Efraimidis–Spirakis: the k largest u^(1/w) are a weighted sample without replacement
        keys = np.log(gen.random(avail.size)) / free[avail]
        chosen = avail[np.argpartition(-keys, k - 1)[:k]] if k < avail.size else avail
        free[chosen] -= 1
        toks.append(np.full(chosen.size, p, dtype=np.int64))
        users.append(chosen.astype(np.int64))
        x[p] -= chosen.size  # tokens left over (more than the users with a free slot) go on
    e = np.zeros(0, dtype=np.int64)
    return (np.concatenate(toks) if toks else e), (np.concatenate(users) if users else e)


def deal_tokens(
    x: _IntArray, sizes: _IntArray, gen: np.random.Generator, *, max_large: int | None = None
) -> tuple[_IntArray, _IntArray, int]:
    """Steps 2–3 (module docstring): ``x[p]`` tokens of each item p dealt into the users' free
    slots (``sizes[u]`` of user u), large items first, then the repair rounds. Returns the item
    and the user of every dealt token and the rounds used (a collision left after them: two
    tokens of one item on one user). ``max_large``: deal at most that many large items first
    (each costs a pass over the users)."""
    n_pairs = x.size
    free = sizes.copy()
    rest = x.copy()
    big_tokens, big_users = _deal_large(rest, free, gen, max_large)
    tokens = np.concatenate([big_tokens, np.repeat(np.arange(n_pairs, dtype=np.int64), rest)])
    slots = np.repeat(np.arange(sizes.size, dtype=np.int64), free)
    gen.shuffle(slots)
    slots = np.concatenate([big_users, slots])
    fixed = big_tokens.size  # the large pairs' tokens keep their users
    rounds = 0
    for rounds in range(1, REPAIR_ROUNDS + 1):  # noqa: B007 - the count is reported
        dup = _collisions(slots, tokens, n_pairs)
        if dup.size == 0:
            rounds -= 1
            break
        movable = tokens.size - fixed
        if movable <= 0:
            break
        others = fixed + gen.integers(0, movable, size=min(movable, 2 * dup.size + 8))
        idx = np.unique(np.concatenate([dup[dup >= fixed], others]))
        slots[idx] = slots[idx][gen.permutation(idx.size)]
    return tokens, slots, rounds


def generate_log(pairs: pl.DataFrame, profile: npt.ArrayLike, *, rng: RandomSource) -> GeneratedLog:
    """The generated log of ``pairs`` (columns ``query``, ``url``, ``x``: the published pairs and
    their noisy holder counts, ``x ≥ 0``) and the noisy ``profile`` (module docstring)."""
    for col in ("query", "url", "x"):
        if col not in pairs.columns:
            raise InvalidParameterError("pairs", pairs.columns, "columns query, url, x")
    x = np.clip(pairs.get_column("x").to_numpy().astype(np.int64), 0, None)
    gen = rng.numpy_generator()
    total = int(x.sum())
    sizes = user_sizes(profile, total, max_size=max(1, int((x > 0).sum())), gen=gen)
    tokens, slots, rounds = deal_tokens(x, sizes, gen)
    key = slots * np.int64(max(1, x.size)) + tokens
    uniq, counts = np.unique(key, return_counts=True)
    user = uniq // max(1, x.size)
    pair = uniq % max(1, x.size)
    ids = gen.permutation(sizes.size).astype(np.int64) + 1  # AnonID 1..N, random order
    q = pairs.get_column("query").cast(pl.String)
    u = pairs.get_column("url").cast(pl.String)
    log = pl.DataFrame(
        {
            "AnonID": pl.Series(ids[user] if user.size else [], dtype=pl.Int64),
            "Query": q.gather(pair) if pair.size else pl.Series([], dtype=pl.String),
            "ClickURL": u.gather(pair) if pair.size else pl.Series([], dtype=pl.String),
            "Count": pl.Series(counts, dtype=pl.Int64),
        }
    ).sort(["AnonID", "Query", "ClickURL"])
    return GeneratedLog(
        log=log,
        users=int(sizes.size),
        rows=int(log.height),
        merged_rows=int((counts > 1).sum()),
        repair_rounds=rounds,
    )


def generated_tables(
    published: pl.DataFrame, noisy_profile: npt.ArrayLike, m: int, *, rng: RandomSource
) -> tuple[dict[str, pl.DataFrame], dict[str, Any]]:
    """The synthetic-id release's tables from DP values only — the published pairs (``query,
    url, noisy_count``) and the noisy activity profile (bins 1…m, already clipped at 0): the
    generated ``log``, the ``counts`` of the pairs it holds and the ``profile``; and the
    generator's figures. Shared by ``release ump`` and the CELS parties (each builds the same
    tables from the same values and randomness)."""
    noisy = np.asarray(noisy_profile, dtype=np.int64)
    pairs = published.select(
        "query", "url", pl.col("noisy_count").clip(lower_bound=0).alias("x")
    ).sort("query", "url")
    gen = generate_log(pairs, noisy, rng=rng)
    tables = {
        "log": gen.log,
        "counts": pairs.rename({"x": "x_ij"}).filter(pl.col("x_ij") > 0),
        "profile": pl.DataFrame(
            {"pairs_per_user": np.arange(1, m + 1), "users": noisy.astype(np.int64)}
        ),
    }
    return tables, gen.figures()
