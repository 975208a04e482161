"""Reading a release directory into item histograms, and the original log into the same shape.

A release is described by its ``ledger.json`` (``mechanism`` and ``outputs``: name → {file,
columns, rows, format}). Mechanisms write different tables; this module maps each table to the
item kinds of Götz et al. §2.1 by its *columns*, not by the mechanism name, so a new mechanism
that writes the usual columns is evaluated without changes here:

* a count column is the first of ``noisy_count``, ``count``, ``Count``, ``released_count``,
  ``n`` (a table without one counts each row once: a k-anonymous or otherwise row-level log);
* ``query`` + ``url`` (or ``Query`` + ``ClickURL``) → ``clicks`` (and, if no separate query
  table exists, ``queries`` by summing the click counts per query — a lower bound of query
  volume, marked ``derived`` in the result);
* ``query`` + ``next_query`` → ``query_pairs``;
* ``query`` alone → ``queries``;
* when two tables provide the same kind, the first in ledger order is used (no double counting);
* a row-level released log (user, query and time columns, no count column: k-anonymity) →
  all four kinds, computed exactly as for the original log (``searchveil.model.items``);
* ``keyword`` → ``keywords``;
* ``item`` → the kind named in the ledger parameters (``item_type``/``kind``/``item_kind``) or
  in the table name (``items_keywords`` …), else ``queries``; for clicks and query pairs the
  two part columns (``query``+``url``, ``query``+``next_query``) are used when present (ZEALOUS
  joins them in ``item`` with an arrow for display).

``keywords`` are derived from released queries (each word of a query gets the query's count)
when the release has no keyword table: post-processing of the release, so no privacy cost.

Negative noisy counts are kept in the tables; frequency metrics clip them at 0 (a negative
count says "rare", never "−3 searches").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from searchveil.errors import InputFormatError
from searchveil.io.ledger import read_ledger
from searchveil.model import PAIR_SEP, ItemKind, SearchLog, items

__all__ = [
    "ReleaseData",
    "load_release",
    "log_as_release",
    "original_histograms",
    "keyword_histogram",
]

COUNT_COLUMNS = ("noisy_count", "count", "Count", "released_count", "x_ij", "n")
QUERY_COLUMNS = ("query", "Query")
URL_COLUMNS = ("url", "ClickURL", "clickurl")
NEXT_COLUMNS = ("next_query", "NextQuery")
KEYWORD_COLUMNS = ("keyword",)
USER_COLUMNS = ("AnonID", "user", "anon_id")
TIME_COLUMNS = ("QueryTime", "time")


@dataclass
class ReleaseData:
    """A release read through its ledger: the ledger, the raw tables, the item histograms
    (kind → DataFrame[item, count]) and which histograms were derived by post-processing."""

    path: Path
    ledger: dict[str, Any]
    tables: dict[str, pl.DataFrame]
    histograms: dict[str, pl.DataFrame]
    derived: dict[str, str] = field(default_factory=dict)
    clicks_table: pl.DataFrame | None = None  # DataFrame[query, url, count] if released

    @property
    def mechanism(self) -> str:
        return str(self.ledger.get("mechanism", "unknown"))

    @property
    def same_schema_log(self) -> pl.DataFrame | None:
        """A released row-level log with a user column (UMP, k-anonymity), or None."""
        for df in self.tables.values():
            if _first(df.columns, USER_COLUMNS) and _first(df.columns, QUERY_COLUMNS):
                return df
        return None


def _first(columns: list[str], candidates: tuple[str, ...]) -> str | None:
    for c in candidates:
        if c in columns:
            return c
    return None


def _read_table(release_dir: Path, name: str, spec: dict[str, Any]) -> pl.DataFrame:
    fname = spec.get("file")
    if not isinstance(fname, str):
        raise InputFormatError(str(release_dir / "ledger.json"), f"output {name!r} has no file")
    path = release_dir / fname
    if not path.is_file():
        raise InputFormatError(str(path), f"output {name!r} listed in the ledger is missing")
    fmt = spec.get("format") or ("parquet" if fname.endswith(".parquet") else "tsv")
    try:
        if fmt == "parquet":
            return pl.read_parquet(path)
        return pl.read_csv(
            path,
            separator="\t",
            quote_char=None,
            infer_schema_length=0,  # everything as String first; counts cast below
            truncate_ragged_lines=False,
        )
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:
        raise InputFormatError(
            str(path),
            f"cannot read the release table {name!r} as {fmt} (written by searchveil: was the "
            "release directory changed or copied incompletely?)",
        ) from exc


def _counts(df: pl.DataFrame, path: str) -> pl.Expr:
    col = _first(df.columns, COUNT_COLUMNS)
    if col is None:
        return pl.lit(1, pl.Int64)
    try:
        df.select(pl.col(col).cast(pl.Float64, strict=True))
    except pl.exceptions.PolarsError:
        raise InputFormatError(path, f"column {col!r} holds non-numeric counts") from None
    return pl.col(col).cast(pl.Float64).round(0).cast(pl.Int64)


def _kind_of_items(name: str, ledger: dict[str, Any]) -> str:
    params = ledger.get("parameters") or {}
    for key in ("kind", "item_kind", "items", "item_type"):
        v = params.get(key) if isinstance(params, dict) else None
        if isinstance(v, str) and v in [k.value for k in ItemKind]:
            return v
    for k in ItemKind:
        if k.value in name or k.value.rstrip("s") in name:
            return k.value
    return "queries"


def _hist(df: pl.DataFrame) -> pl.DataFrame:
    return (
        df.group_by("item")
        .agg(pl.col("count").sum())
        .sort(["count", "item"], descending=[True, False])
    )


def keyword_histogram(queries: pl.DataFrame) -> pl.DataFrame:
    """Keyword histogram from a query histogram: each word occurrence gets the query's count."""
    kw = (
        queries.select(pl.col("item").str.split(" ").alias("item"), "count")
        .explode("item")
        .filter(pl.col("item").is_not_null() & (pl.col("item") != ""))
    )
    return _hist(kw)


def _as_log(df: pl.DataFrame, usr: str, q: str, tcol: str, u: str | None, name: str) -> SearchLog:
    time = pl.col(tcol)
    if df.schema[tcol] == pl.String:
        time = time.str.to_datetime(strict=False)
    frame = df.select(
        pl.col(usr).cast(pl.String).alias("user"),
        pl.col(q).cast(pl.String).alias("query"),
        time.cast(pl.Datetime("us")).alias("time"),
        *(
            [pl.when(pl.col(u) == "").then(None).otherwise(pl.col(u)).alias("url")]
            if u is not None
            else []
        ),
    )
    return SearchLog.from_frame(frame, name=name)


def _put(hists: dict[str, list[pl.DataFrame]], kind: str, df: pl.DataFrame) -> None:
    # The first table (in ledger order) that provides a kind wins: a release may write the
    # same counts twice (a row-level log and its count table) and must not be double counted.
    if kind not in hists:
        hists[kind] = [df]


def _put_by_columns(
    hists: dict[str, list[pl.DataFrame]], base: pl.DataFrame, q: str, u: str | None, nq: str | None
) -> pl.DataFrame | None:
    """Add a counted table's histograms by its columns: query-url (clicks, and queries summed
    from them), query pairs, or queries. Returns the query-url table if it holds the first
    clicks seen (the release's click graph), else None."""
    if u is not None:
        clk = base.filter(pl.col(u).is_not_null() & (pl.col(u) != "")).select(
            pl.col(q).alias("query"), pl.col(u).alias("url"), "count"
        )
        clk = clk.group_by(["query", "url"]).agg(pl.col("count").sum())
        first = None if "clicks" in hists else clk
        _put(
            hists,
            "clicks",
            clk.select((pl.col("query") + PAIR_SEP + pl.col("url")).alias("item"), "count"),
        )
        _put(hists, "_queries_from_clicks", base.select(pl.col(q).alias("item"), "count"))
        return first
    if nq is not None:
        _put(
            hists,
            "query_pairs",
            base.select((pl.col(q) + PAIR_SEP + pl.col(nq)).alias("item"), "count"),
        )
    else:
        _put(hists, "queries", base.select(pl.col(q).alias("item"), "count"))
    return None


def load_release(release_dir: str | Path) -> ReleaseData:
    """Read a release directory through its ledger (see the module docstring)."""
    rdir = Path(release_dir)
    ledger = read_ledger(rdir)
    outputs = ledger.get("outputs") or {}
    if not isinstance(outputs, dict) or not outputs:
        raise InputFormatError(str(rdir / "ledger.json"), "ledger lists no outputs")
    tables: dict[str, pl.DataFrame] = {}
    hists: dict[str, list[pl.DataFrame]] = {}
    clicks_table: pl.DataFrame | None = None
    for name, spec in outputs.items():
        if not isinstance(spec, dict):
            continue
        fname = str(spec.get("file", ""))
        if not (fname.endswith(".tsv") or fname.endswith(".parquet")):
            continue  # a side file (notes, plots): not a table
        df = _read_table(rdir, name, spec)
        tables[name] = df
        cols = df.columns
        cnt = _counts(df, str(rdir / fname))
        q = _first(cols, QUERY_COLUMNS)
        u = _first(cols, URL_COLUMNS)
        nq = _first(cols, NEXT_COLUMNS)
        usr = _first(cols, USER_COLUMNS)
        tcol = _first(cols, TIME_COLUMNS)
        if usr and q and tcol and _first(cols, COUNT_COLUMNS) is None:
            # a row-level released log (k-anonymity): all four item kinds, as for the original
            rlog = _as_log(df, usr, q, tcol, u, name)
            for kind, h in original_histograms(rlog).items():
                _put(hists, kind, h)
            if u is not None and "clicks" in hists and clicks_table is None:
                clicks_table = (
                    rlog.df.filter(pl.col("url").is_not_null())
                    .group_by(["query", "url"])
                    .agg(pl.len().cast(pl.Int64).alias("count"))
                )
            continue
        kw_col = _first(cols, KEYWORD_COLUMNS)
        if "item" in cols or kw_col is not None:
            kind = "keywords" if kw_col is not None else _kind_of_items(name, ledger)
            has_parts = q is not None and (
                (kind == "clicks" and u is not None) or (kind == "query_pairs" and nq is not None)
            )
            if not has_parts:
                key = kw_col if kw_col is not None else "item"
                h = df.select(pl.col(key).cast(pl.String).alias("item"), cnt.alias("count"))
                _put(hists, kind, h)
                if kind == "clicks" and clicks_table is None:
                    sp = h.with_columns(pl.col("item").str.split_exact(PAIR_SEP, 1))
                    clicks_table = sp.unnest("item").rename({"field_0": "query", "field_1": "url"})
                continue
            # ZEALOUS clicks / query pairs: the item's two parts are columns of their own
            # (its ``item`` joins them for display); fall through to the column rules.
        if q is None:
            continue
        first_clicks = _put_by_columns(hists, df.with_columns(cnt.alias("count")), q, u, nq)
        if first_clicks is not None:
            clicks_table = first_clicks
    derived: dict[str, str] = {}
    if "_queries_from_clicks" in hists:
        qfc = hists.pop("_queries_from_clicks")
        if "queries" not in hists:
            hists["queries"] = qfc
            derived["queries"] = "summed from the released query-url table"
    out = {k: _hist(pl.concat(v)) for k, v in hists.items()}
    if "keywords" not in out and "queries" in out:
        out["keywords"] = keyword_histogram(out["queries"])
        derived["keywords"] = "split from the released queries (post-processing)"
    return ReleaseData(
        path=rdir,
        ledger=ledger,
        tables=tables,
        histograms=out,
        derived=derived,
        clicks_table=clicks_table,
    )


#: the mechanism a log file evaluated as a release is shown with (it has no ledger)
LOG_FILE_MECHANISM = "log file (no ledger, no guarantee)"


def log_as_release(log: SearchLog) -> ReleaseData:
    """A log file (``synth`` output, another log) as a row-level same-schema release without a
    ledger: one table ``log`` in the AOL columns, all four item kinds computed exactly as for
    the original; the ledger only names it (no ε, δ: no guarantee is claimed)."""
    session = log.info.columns.get("session") is not None
    df = log.df.select(
        pl.col("user").alias("AnonID"),
        pl.col("query").alias("Query"),
        pl.col("time").alias("QueryTime"),
        pl.col("rank").alias("ItemRank"),
        pl.col("url").alias("ClickURL"),
        *([pl.col("session").alias("SessionID")] if session else []),
    )
    clicks = (
        log.df.filter(pl.col("url").is_not_null())
        .group_by(["query", "url"])
        .agg(pl.len().cast(pl.Int64).alias("count"))
    )
    ledger = {
        "mechanism": LOG_FILE_MECHANISM,
        "notion": "none (a log file, not a release)",
        "outputs": {"log": {"file": log.info.path.rsplit("/", 1)[-1], "columns": df.columns,
                            "rows": df.height}},
    }  # fmt: skip
    return ReleaseData(
        path=Path(log.info.path),
        ledger=ledger,
        tables={"log": df},
        histograms=original_histograms(log),
        clicks_table=clicks,
    )


def original_histograms(
    log: SearchLog, kinds: tuple[str, ...] = tuple(map(str, ItemKind))
) -> dict[str, Any]:
    """Item histograms of the original log: kind → DataFrame[item, count] (sorted by count
    descending, then item)."""
    out: dict[str, pl.DataFrame] = {}
    for kind in kinds:
        it = items(log, kind)
        out[kind] = _hist(it.select("item", pl.lit(1, pl.Int64).alias("count")))
    return out


_DOMAIN_RE = re.compile(r"^(?:[a-z][a-z0-9+.-]*://)?([^/:?#]+)", re.IGNORECASE)


def url_host(url: str) -> str:
    """Host part of a URL, lower-cased, without a leading ``www.``."""
    m = _DOMAIN_RE.match(url.strip())
    host = (m.group(1) if m else url).lower()
    return host[4:] if host.startswith("www.") else host
