"""CELS, the joint end-to-end mode (docs/privacy/cels.md §5): what the parties compute and
agree on besides the wire — P1's ZEALOUS step on the joint holder counts, the release's tables
as they travel from P1 to the others (encoding and checks), and the public ledger.

The noise, thresholds and accounting are ``release ump``'s, not a copy: P1 hands the secure-sum
totals to :func:`~searchveil.release.zealous.release.release_zealous_counts` (ZEALOUS steps
3–6) with the pair-count parameters of :meth:`~searchveil.release.ump.e2e.E2EParams.zealous`,
and the profile noise and the generated log come from
:func:`~searchveil.release.ump.e2e.synthetic_tables`. The ledger is
:func:`~searchveil.release.ump.e2e.e2e_ledger`'s with a ``protocol`` key.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.cels import commutative as cm
from searchveil.cels.params import CelsParams
from searchveil.cels.wire import VERSION as WIRE_VERSION
from searchveil.cels.wire import ProtocolError
from searchveil.engines.contract import BoundedCounts
from searchveil.release.ump.e2e import E2EParams, e2e_ledger
from searchveil.release.zealous.params import ZealousItem
from searchveil.release.zealous.release import release_zealous_counts
from searchveil.rng import RandomSource

__all__ = [
    "TABLE_SCHEMAS",
    "check_tables",
    "decode_tables",
    "e2e_public_ledger",
    "encode_tables",
    "joint_pair_counts",
    "tables_size_bound",
]

#: the e2e release's tables, in the order they are written (as ``release ump`` writes them)
TABLE_SCHEMAS: dict[str, dict[str, Any]] = {
    "log": {"AnonID": pl.Int64, "Query": pl.String, "ClickURL": pl.String, "Count": pl.Int64},
    "counts": {"query": pl.String, "url": pl.String, "x_ij": pl.Int64},
    "profile": {"pairs_per_user": pl.Int64, "users": pl.Int64},
}


def joint_pair_counts(
    holders: npt.NDArray[np.int64], params: E2EParams, *, users: int, rng: RandomSource
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], dict[str, Any]]:
    """Step 2 of the e2e pipeline on the joint counts (P1): ``holders[p]`` = the distinct
    users of all parties holding universe position p among their first m distinct pairs.
    Returns the published positions (ascending), their noisy counts and P1's private report.

    The items are the universe positions (P1 knows no string), so the call uses the pair-count
    parameters with the item type of an item without parts; ZEALOUS's noise, thresholds and
    accounting do not depend on the item type."""
    n = int(holders.size)
    width = len(str(max(n - 1, 0)))
    keys = [f"{i:0{width}d}" for i in range(n)]  # string order = position order (seeded draws)
    total = int(holders.sum())
    bc = BoundedCounts(
        counts={"items": pl.DataFrame({"item": keys, "count": holders.astype(np.int64)},
                                      schema={"item": pl.String, "count": pl.Int64})},
        figures={"users": users, "items": total, "items_after_bounding": total},
        input={},
    )  # fmt: skip
    zp = dataclasses.replace(params.zealous(), item_type=ZealousItem.QUERIES)
    rel = release_zealous_counts(bc, zp, rng=rng)
    table = rel.tables["items"]
    pos = table.get_column("item").cast(pl.Int64).to_numpy()
    noisy = table.get_column("noisy_count").to_numpy().astype(np.int64)
    order = np.argsort(pos, kind="stable")
    report = {
        "universe": n,
        "pairs_count_at_least_tau": rel.report["items_count_at_least_tau"],
        "pairs_published": int(pos.size),
        "single_user": rel.report["single_user"],
    }
    return pos[order].astype(np.int64), noisy[order], report


def e2e_public_ledger(params: CelsParams, r: int) -> dict[str, Any]:
    """The e2e mode's public ledger (before the commit round's creation time and randomness):
    ``release ump``'s end-to-end ledger with the protocol's public facts — a function of the
    public parameters only."""
    return e2e_ledger(
        params.e2e(),
        rng=None,
        extra={
            "protocol": {
                "mode": "e2e",
                "parties": r,
                "commutative_group": cm.GROUP_NAME,
                "wire_version": WIRE_VERSION,
                "secure_sums": "masked ring sums mod 2^64 (Algorithm 1): the joint bounded "
                "holder counts, then the joint activity profile; both totals known to P1 only",
                "noise": "drawn by P1 on the secure-sum totals (docs/privacy/cels.md §5)",
                "paillier": "none: the e2e mode runs no optimisation (no Algorithm 2)",
            }
        },
    )


def encode_tables(tables: dict[str, pl.DataFrame]) -> bytes:
    """The release's tables as canonical JSON (columns in :data:`TABLE_SCHEMAS` order): what
    P1 sends and what every party's commit digest covers."""
    doc = {
        name: {c: tables[name].get_column(c).to_list() for c in cols}
        for name, cols in TABLE_SCHEMAS.items()
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def decode_tables(blob: bytes, peer: int) -> dict[str, pl.DataFrame]:
    """The tables P1 sent; anything but exactly :data:`TABLE_SCHEMAS` is ``peer``'s fault."""
    bad = ProtocolError(f"P{peer} sent malformed release tables", peer=peer)
    try:
        doc = json.loads(blob.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad from exc
    if not isinstance(doc, dict) or set(doc) != set(TABLE_SCHEMAS):
        raise bad
    out: dict[str, pl.DataFrame] = {}
    for name, schema in TABLE_SCHEMAS.items():
        cols = doc[name]
        if not isinstance(cols, dict) or set(cols) != set(schema):
            raise bad
        lengths = {len(v) if isinstance(v, list) else -1 for v in cols.values()}
        if len(lengths) != 1 or -1 in lengths:
            raise bad
        for c, dtype in schema.items():
            want = str if dtype == pl.String else int
            if not all(type(v) is want for v in cols[c]):  # bool is not an int here
                raise bad
        try:
            out[name] = pl.DataFrame({c: cols[c] for c in schema}, schema=schema)
        except (OverflowError, ValueError, TypeError, pl.exceptions.PolarsError) as exc:
            raise bad from exc  # e.g. an integer beyond 64 bits
    return out


def tables_size_bound(published: pl.DataFrame, m: int) -> int:
    """An upper bound on ``len(encode_tables(tables))`` for the tables of these published
    pairs (``query, url, noisy_count``) and m bins, from public values only: the log has at
    most Σ x_p rows, pair p's strings in at most x_p of them (a frame cap, issue 30)."""
    x = published.get_column("noisy_count").clip(lower_bound=0).to_numpy()
    strings = [
        len(json.dumps(q, ensure_ascii=False).encode("utf-8"))
        + len(json.dumps(u, ensure_ascii=False).encode("utf-8"))
        for q, u in published.select("query", "url").iter_rows()
    ]
    per_pair = np.asarray(strings, dtype=np.int64) + 2  # two commas
    ints = 21  # an int64 in decimal and a comma
    log = int((x * per_pair).sum()) + 2 * ints * int(x.sum())
    counts = int(per_pair.sum()) + ints * len(strings)
    return log + counts + 2 * ints * m + 512  # + names and brackets


def check_tables(
    tables: dict[str, pl.DataFrame], published: pl.DataFrame, m: int, peer: int
) -> None:
    """What every receiver checks of P1's tables against the published pairs it saw revealed
    (``query, url, noisy_count``): ``counts`` is exactly them (the positive ones), ``profile``
    has the bins 1…m, and the ``log``'s rows are unique, sorted, and add up to the counts per
    pair. A mismatch is ``peer``'s fault."""

    def fail(what: str) -> ProtocolError:
        return ProtocolError(f"P{peer} sent release tables that {what}", peer=peer)

    want = (
        published.filter(pl.col("noisy_count") > 0)
        .select("query", "url", pl.col("noisy_count").cast(pl.Int64).alias("x_ij"))
        .sort("query", "url")
    )
    if not tables["counts"].equals(want):
        raise fail("do not match the published pair counts")
    prof = tables["profile"]
    if (
        prof.get_column("pairs_per_user").to_list() != list(range(1, m + 1))
        or (prof.get_column("users") < 0).any()
    ):
        raise fail(f"hold a malformed activity profile (bins 1..{m})")
    log = tables["log"]
    keys = ["AnonID", "Query", "ClickURL"]
    if (log.get_column("AnonID") < 1).any() or (log.get_column("Count") < 1).any():
        raise fail("hold a malformed log (ids and counts start at 1)")
    if not log.equals(log.sort(keys)) or log.select(keys).is_duplicated().any():
        raise fail("hold a log that is not sorted by (AnonID, Query, ClickURL) with unique rows")
    per_pair = log.group_by(pl.col("Query").alias("query"), pl.col("ClickURL").alias("url")).agg(
        pl.col("Count").sum().alias("x_ij")
    )
    if not per_pair.sort("query", "url").equals(want):
        raise fail("hold a log whose per-pair totals are not the published counts")
