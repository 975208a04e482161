"""The search-log model: the log, its query events and sessions, the four item types of
Götz et al. §2.1 (keywords, queries, clicks, query pairs) and the user × (query, url)
histogram c_ijk of Hong et al. (EDBT 2012 §3).

Decisions (documented in ``docs/model.md``):

* **Normalisation** of queries: Unicode case-fold (``to_lowercase``), runs of whitespace
  collapsed to one space, leading/trailing whitespace stripped. On by default; readers take
  ``normalize=False``. The ledger records which was used.
* **Query event**: AOL writes one row per click, repeating user, query and time; a query event
  is a maximal run of consecutive rows with the same (user, query, time). A row with a null
  time never continues an event (MSNBC visits: each visit is its own event; see
  :func:`same_event`).
* **Session**: the input's SessionID column when present (the Gayo-Avello sample), else a new
  session starts when the gap to the user's previous row exceeds ``gap_minutes`` (30 by
  default, the usual AOL choice) or the time is unknown.
* **Keywords**: the query split on whitespace; a keyword item is one occurrence of a word.
* **Query pairs**: consecutive query events (q, q') of one user within one session, q ≠ q'
  not required (Götz counts consecutive queries as they were posed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.validate import parse_choice

if TYPE_CHECKING:  # scipy.sparse is imported where a click histogram is built (start-up cost)
    import scipy.sparse as sp

__all__ = [
    "InputInfo",
    "SearchLog",
    "ClickHistogram",
    "ItemKind",
    "normalize_query",
    "add_sessions",
    "query_events",
    "same_event",
    "items",
    "click_histogram",
    "log_stats",
]


class ItemKind(StrEnum):
    """The four item types of Götz et al. §2.1 (see :func:`items`)."""

    KEYWORDS = "keywords"
    QUERIES = "queries"
    CLICKS = "clicks"
    QUERY_PAIRS = "query_pairs"


PAIR_SEP = "\t"  # separates the two parts of a click / query-pair item key


@dataclass(frozen=True)
class InputInfo:
    """Provenance of an input file, recorded in the ledger."""

    path: str
    sha256: str
    rows: int
    bad_rows: int = 0
    format: str = "aol"
    encoding: str | None = "utf-8"
    bad_row_examples: tuple[dict[str, Any], ...] = ()
    columns: dict[str, str | None] = field(default_factory=dict)
    normalized: bool = True
    # the reader options used (ReaderOptions.to_dict()): lets `evaluate` re-read the original
    reader: dict[str, Any] | None = None
    # how ``sha256`` was computed: ``full`` (every byte) | ``fast`` (Parquet footer + size)
    fingerprint: str = "full"

    def to_dict(self, users: int | None = None) -> dict[str, Any]:
        d: dict[str, Any] = {
            "file": self.path.rsplit("/", 1)[-1],
            "path": self.path,
            "sha256": self.sha256,
            "rows": self.rows,
            "bad_rows_skipped": self.bad_rows,
            "format": self.format,
            "encoding": self.encoding,
            "queries_normalized": self.normalized,
            "fingerprint": self.fingerprint,
        }
        if users is not None:
            d["users"] = users
        if self.bad_row_examples:
            d["bad_row_examples"] = list(self.bad_row_examples)
        if self.reader is not None:
            d["reader"] = self.reader
        return d


@dataclass
class SearchLog:
    """A raw search log in canonical columns (see ``docs/architecture.md``)."""

    df: pl.DataFrame
    info: InputInfo

    @property
    def n_users(self) -> int:
        return int(self.df.get_column("user").n_unique())

    @property
    def n_rows(self) -> int:
        return self.df.height

    def ledger_input(self) -> dict[str, Any]:
        return self.info.to_dict(users=self.n_users)

    @classmethod
    def from_frame(
        cls, df: pl.DataFrame, *, name: str = "<memory>", gap_minutes: float = 30.0
    ) -> SearchLog:
        """Build a log from an in-memory frame with at least ``user`` and ``query`` columns
        (``time``, ``url``, ``rank`` optional). For tests and the Python API."""
        import hashlib

        cols = df.columns
        out = df.with_columns(
            [
                *([] if "time" in cols else [pl.lit(None, pl.Datetime("us")).alias("time")]),
                *([] if "url" in cols else [pl.lit(None, pl.String).alias("url")]),
                *([] if "rank" in cols else [pl.lit(None, pl.Int64).alias("rank")]),
            ]
        )
        if "row" in out.columns:
            out = out.drop("row")
        out = out.with_row_index("row").with_columns(pl.col("row").cast(pl.UInt64))
        out = add_sessions(out, gap_minutes=gap_minutes)
        digest = hashlib.sha256(out.drop("time").write_csv().encode()).hexdigest()
        return cls(
            df=out, info=InputInfo(path=name, sha256=digest, rows=out.height, format="memory")
        )


def normalize_query(expr: pl.Expr) -> pl.Expr:
    """Case-fold, collapse internal whitespace, strip."""
    return expr.str.to_lowercase().str.replace_all(r"\s+", " ").str.strip_chars()


def add_sessions(df: pl.DataFrame, *, gap_minutes: float = 30.0) -> pl.DataFrame:
    """Add ``session`` (Int64, 0-based within each user) and sort by (user, row).

    After the sort each user's rows are one run, so "the user's previous row" is the previous
    row unless the run starts there, and a count within the user is a running count minus its
    value where the run starts: the same result as windows ``over("user")``, without their
    per-user cost (a log of 10^5 single-row users took seconds)."""
    df = df.sort(["user", "row"], maintain_order=True)
    user = pl.col("user")
    first = user.ne_missing(user.shift(1)) | (pl.int_range(pl.len()) == 0)  # a user's first row
    if "_session_raw" in df.columns:
        raw = pl.col("_session_raw")
        new = first | (raw != raw.shift(1)).fill_null(True)
        return df.with_columns(session=_within_user(new, first)).drop("_session_raw")
    gap = pl.duration(seconds=int(gap_minutes * 60))
    t = pl.col("time")
    prev = pl.when(~first).then(t.shift(1))
    new = prev.is_null() | t.is_null() | ((t - prev) > gap)
    if df.get_column("time").null_count() == df.height:
        new = first  # no times at all: one session per user
    return df.with_columns(session=_within_user(new, first))


def _within_user(new: pl.Expr, first: pl.Expr) -> pl.Expr:
    """0-based running count of ``new`` within each user's run of rows (``first`` marks where
    a run starts, and ``new`` holds there)."""
    total = new.cast(pl.Int64).cum_sum()
    before = pl.when(first).then(total - new.cast(pl.Int64)).forward_fill()
    return total - before - 1


def same_event(
    user: pl.Expr, query: pl.Expr, time: pl.Expr, prev_user: pl.Expr, prev_query: pl.Expr,
    prev_time: pl.Expr,
) -> pl.Expr:  # fmt: skip
    """Whether a row continues the previous row's query event: the same user, query and time
    (a null time never continues one). The one definition of a query event, used by
    :func:`query_events` and by the bounding kernel (:mod:`searchveil.bounding`)."""
    return ((user == prev_user) & (time == prev_time) & (query == prev_query)).fill_null(False)


def query_events(log: SearchLog, *, rank: bool = False) -> pl.DataFrame:
    """One row per query event: ``user, query, time, session, pos, clicks`` (``pos`` 0-based
    order within the user, ``clicks`` the number of non-null URLs of the event) and, with
    ``rank``, ``rank`` (the rank of the event's first click; null without a click or a rank)."""
    df = log.df
    u, q, t = pl.col("user"), pl.col("query"), pl.col("time")
    same = same_event(u, q, t, u.shift(1), q.shift(1), t.shift(1))
    ev = df.with_columns(_ev=(~same).cast(pl.Int64).cum_sum())
    aggs = [pl.col(c).first() for c in ("user", "query", "time", "session")]
    aggs.append(pl.col("url").count().alias("clicks"))
    if rank:
        aggs.append(pl.col("rank").filter(pl.col("url").is_not_null()).first().alias("rank"))
    out = ev.group_by("_ev", maintain_order=True).agg(*aggs)
    return out.drop("_ev").with_columns(pos=pl.int_range(pl.len()).over("user").cast(pl.Int64))


def items(log: SearchLog, kind: ItemKind | str) -> pl.DataFrame:
    """The items of one kind (Götz §2.1), one row per occurrence: ``user, item, pos`` (+ parts).

    * ``queries``: one item per query event, ``item`` = the query.
    * ``keywords``: one item per word occurrence of each query event.
    * ``clicks``: one item per click row, ``item`` = query + TAB + url; also ``query``, ``url``.
    * ``query_pairs``: consecutive query events in one session, ``item`` = q + TAB + q';
      also ``query``, ``next_query``.
    """
    kind = parse_choice("kind", kind, ItemKind)
    if kind == "clicks":
        return _pair_items(log.df.filter(pl.col("url").is_not_null()), "url")
    ev = query_events(log)
    if kind == "queries":
        return ev.select("user", pl.col("query").alias("item"), "pos")
    if kind == "keywords":
        kw = ev.select("user", "pos", pl.col("query").str.split(" ").alias("item")).explode("item")
        kw = kw.filter(pl.col("item").is_not_null() & (pl.col("item") != ""))
        return kw.select(
            "user", "item", pl.int_range(pl.len()).over("user").cast(pl.Int64).alias("pos")
        )
    nxt = pl.col("query").shift(-1).over("user")
    same_session = pl.col("session") == pl.col("session").shift(-1).over("user")
    pairs = ev.with_columns(next_query=nxt, _same=same_session).filter(
        pl.col("_same").fill_null(False) & pl.col("next_query").is_not_null()
    )
    return _pair_items(pairs, "next_query")


def _pair_items(rows: pl.DataFrame, second: str) -> pl.DataFrame:
    """Items made of two columns, ``query`` + TAB + ``second``, numbered within each user."""
    return rows.select(
        "user",
        (pl.col("query") + PAIR_SEP + pl.col(second)).alias("item"),
        pl.int_range(pl.len()).over("user").cast(pl.Int64).alias("pos"),
        "query",
        second,
    )


@dataclass
class ClickHistogram:
    """c_ijk: ``matrix[p, k]`` = clicks of user ``users[k]`` on pair ``pairs[p]`` (query, url).

    ``matrix`` is CSR with rows = (query, url) pairs and columns = users; ``pairs`` has
    ``pair_id, query, url, count`` (count = c_ij = row sums) and ``holders`` (distinct users).
    """

    matrix: sp.csr_matrix
    pairs: pl.DataFrame
    users: npt.NDArray[Any]

    @property
    def n_pairs(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def n_users(self) -> int:
        return int(self.matrix.shape[1])

    def user_blocks(self, n_blocks: int) -> list[sp.csc_matrix]:
        """Column blocks of users (e.g. per party), for stacking constraint blocks."""
        csc = self.matrix.tocsc()
        bounds = np.linspace(0, self.n_users, n_blocks + 1).astype(int)
        return [csc[:, bounds[i] : bounds[i + 1]] for i in range(n_blocks)]


def click_histogram(log: SearchLog | pl.DataFrame) -> ClickHistogram:
    """Build c_ijk from the click rows (rows with a URL) of ``log``."""
    df = log.df if isinstance(log, SearchLog) else log
    clicks = df.filter(pl.col("url").is_not_null()).group_by(["query", "url", "user"]).len("c")
    pairs = (
        clicks.group_by(["query", "url"])
        .agg(pl.col("c").sum().alias("count"), pl.len().alias("holders"))
        .sort(["query", "url"])
        .with_row_index("pair_id")
    )
    users = clicks.get_column("user").unique().sort()
    user_idx = pl.DataFrame({"user": users}).with_row_index("uidx")
    joined = clicks.join(pairs.select("query", "url", "pair_id"), on=["query", "url"]).join(
        user_idx, on="user"
    )
    rows = joined.get_column("pair_id").to_numpy()
    cols = joined.get_column("uidx").to_numpy()
    vals = joined.get_column("c").to_numpy().astype(np.int64)
    import scipy.sparse as sp  # heavy (≈0.1 s): only the click-histogram users need it

    mat = sp.csr_matrix((vals, (rows, cols)), shape=(pairs.height, users.len()))
    mat.sum_duplicates()
    return ClickHistogram(matrix=mat, pairs=pairs, users=users.to_numpy())


def _quantiles(s: pl.Series) -> dict[str, float]:
    qs = (0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0)
    return {f"p{int(q * 100)}": float(s.quantile(q, "nearest") or 0) for q in qs} | {
        "mean": float(s.mean() or 0.0)  # type: ignore[arg-type]
    }


def log_stats(log: SearchLog) -> dict[str, Any]:
    """Descriptive statistics of a log (the ``searchveil stats`` command). Computed one figure
    at a time so that large intermediate frames are freed early (distinct keywords come from
    the distinct queries, not from every query event; query pairs are counted as structs)."""
    df = log.df
    ev = query_events(log)
    distinct_q = ev.get_column("query").unique()
    kw_n = (
        pl.DataFrame({"q": distinct_q})
        .select(pl.col("q").str.split(" ").explode().alias("w"))
        .filter(pl.col("w").is_not_null() & (pl.col("w") != ""))
        .get_column("w")
        .n_unique()
    )
    del distinct_q
    nxt = pl.col("query").shift(-1).over("user")
    same_session = (pl.col("session") == pl.col("session").shift(-1).over("user")).fill_null(False)
    qp_n = (
        ev.lazy()
        .select(pl.col("query"), nxt.alias("next_query"), same_session.alias("same"))
        .filter(pl.col("same") & pl.col("next_query").is_not_null())
        .select(pl.struct("query", "next_query").n_unique())
        .collect()
        .item()
    )
    clicks = df.lazy().filter(pl.col("url").is_not_null())
    n_clicks, distinct_clicks = (
        clicks.select(pl.len(), pl.struct("query", "url").n_unique()).collect().row(0)
    )
    per_user = ev.group_by("user").agg(
        pl.len().alias("queries"),
        pl.col("query").n_unique().alias("distinct_queries"),
        pl.col("session").n_unique().alias("sessions"),
    )
    clicks_per_user = clicks.group_by("user").len("clicks").collect()
    per_user = per_user.join(clicks_per_user, on="user", how="left").with_columns(
        pl.col("clicks").fill_null(0)
    )
    sessions = df.select(pl.struct("user", "session").n_unique()).item()
    return {
        "input": log.ledger_input(),
        "rows": df.height,
        "users": log.n_users,
        "query_events": ev.height,
        "clicks": int(n_clicks),
        "distinct_queries": int(ev.get_column("query").n_unique()),
        "distinct_keywords": int(kw_n),
        "distinct_clicks": int(distinct_clicks),
        "distinct_query_pairs": int(qp_n),
        "sessions": int(sessions),
        "per_user": {
            "queries": _quantiles(per_user.get_column("queries")),
            "distinct_queries": _quantiles(per_user.get_column("distinct_queries")),
            "clicks": _quantiles(per_user.get_column("clicks")),
            "sessions": _quantiles(per_user.get_column("sessions")),
        },
    }
