"""The embedded engine: Polars lazy frames collected with the streaming engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from searchveil.engines.base import Engine, ReducedRows
from searchveil.engines.contract import BoundedCounts, BoundingPlan, Source, UserItemPools
from searchveil.engines.ordered import NotGrouped, ordered_counts
from searchveil.engines.rows import input_record, rows_plan_counts, rows_plan_log
from searchveil.engines.sources import ENGINE_LAYOUT, validate_aol_text
from searchveil.errors import InputFormatError
from searchveil.io.files import PARQUET_DAMAGED, start_fingerprint
from searchveil.io.formats import check_parquet
from searchveil.io.readers import AOL_COLUMNS
from searchveil.io.times import parse_time
from searchveil.model import normalize_query


class PolarsEngine(Engine):
    name = "polars"

    def __init__(self, *, normalize: bool = True, fingerprint: str = "full") -> None:
        self.normalize = normalize
        self.fingerprint = fingerprint

    def scan(self, source: Source | str | Path) -> pl.LazyFrame:
        src = Source.of(source)
        p = src.path
        self._path = str(p)
        if src.parquet:
            check_parquet(p)
            lf = pl.scan_parquet(p)
        else:
            # the lazy reader checks no line (a short row becomes nulls): check them first
            validate_aol_text(p)
            lf = pl.scan_csv(p, separator="\t", quote_char=None, infer_schema=False)
        try:
            cols = lf.collect_schema().names()
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise InputFormatError(str(p), PARQUET_DAMAGED) from exc
        missing = [c for c in AOL_COLUMNS if c not in cols]
        if missing:
            raise InputFormatError(
                str(p), f"missing column(s) {', '.join(map(repr, missing))}; {ENGINE_LAYOUT}"
            )
        q = pl.col("Query").cast(pl.String).fill_null("")
        extra = (
            [pl.col("SessionID").cast(pl.String).alias("_session_raw")]
            if ("SessionID" in cols)
            else []
        )
        return (
            lf.with_row_index("row")
            .select(
                pl.col("AnonID").cast(pl.String).str.strip_chars().alias("user"),
                (normalize_query(q) if self.normalize else q).alias("query"),
                pl.col("QueryTime").cast(pl.String).alias("time"),
                pl.when(pl.col("ClickURL").cast(pl.String) == "")
                .then(None)
                .otherwise(pl.col("ClickURL").cast(pl.String))
                .alias("url"),
                pl.col("ItemRank").cast(pl.String).alias("rank"),
                pl.col("row").cast(pl.Int64),
                *extra,
            )
            .with_columns(
                # 64-bit keys of an event (query, time) and of a query, so that grouping and joins
                # hash integers instead of strings; a collision would have to happen within one
                # user's events (~1e-13 for thousands of events per user)
                ev=pl.struct("query", "time").hash(seed=7),
                qh=pl.col("query").hash(seed=11),
            )
        )

    def with_sessions(self, table: pl.LazyFrame, gap_minutes: float = 30.0) -> pl.LazyFrame:
        """``session`` as in :func:`searchveil.model.add_sessions` (SessionID column if any,
        else a new session after > gap minutes), computed on the whole input."""
        t = table.sort(["user", "row"])
        if "_session_raw" in t.collect_schema().names():
            raw = pl.col("_session_raw")
            new = (raw != raw.shift(1).over("user")).fill_null(True)
        else:
            tm = parse_time(pl.col("time"))
            prev = tm.shift(1).over("user")
            new = prev.is_null() | tm.is_null() | ((tm - prev) > pl.duration(
                seconds=int(gap_minutes * 60)))  # fmt: skip
        return t.with_columns(session=new.cast(pl.Int64).cum_sum().over("user") - 1)

    def events(self, table: pl.LazyFrame) -> pl.LazyFrame:
        return table.group_by(["user", "ev"]).agg(pl.col("row").min(), pl.col("qh").first())

    def first_per_user(
        self,
        table: pl.LazyFrame,
        n: int,
        *,
        order: str = "row",
        distinct_on: list[str] | None = None,
    ) -> pl.LazyFrame:
        t = table
        if distinct_on:
            t = t.group_by(["user", *distinct_on]).agg(pl.col(order).min())
        return t.filter(pl.col(order).rank("ordinal").over("user") <= n)

    def semi_join(self, table: pl.LazyFrame, keys: pl.LazyFrame, on: list[str]) -> pl.LazyFrame:
        return table.join(keys.select(on), on=on, how="semi")

    def union_rows(self, a: pl.LazyFrame, b: pl.LazyFrame) -> pl.LazyFrame:
        return pl.concat([a, b]).unique("row")

    def filter_clicks(self, table: pl.LazyFrame) -> pl.LazyFrame:
        return table.filter(pl.col("url").is_not_null())

    def users_with_counts(self, table: pl.LazyFrame, key: str, minimum: int) -> pl.LazyFrame:
        return (
            table.select("user", key)
            .unique()
            .group_by(key)
            .len()
            .filter(pl.col("len") >= minimum)
            .select(key)
        )

    def _unreadable(self, exc: Exception) -> InputFormatError:
        """A failure while collecting a scan: the input (checked by :meth:`scan`) changed or is
        damaged past its header."""
        where = getattr(self, "_path", "the input")
        return InputFormatError(
            where,
            "cannot be read as the AOL layout (damaged, or changed while it was read?); "
            "`searchveil stats` on it names the first bad line",
        )

    def collect(self, table: pl.LazyFrame) -> pl.DataFrame:
        try:
            return table.collect(engine="streaming")
        except pl.exceptions.PolarsError as exc:
            raise self._unreadable(exc) from exc

    def collect_with_totals(
        self, plan: pl.LazyFrame, table: pl.LazyFrame
    ) -> tuple[pl.DataFrame, dict[str, int]]:
        """The reduced rows and the input totals from one scan (shared sub-plan)."""
        tot = table.select(pl.len().alias("rows"), pl.col("user").n_unique())
        try:
            red, t = pl.collect_all([plan, tot], engine="streaming")
        except pl.exceptions.PolarsError as exc:
            raise self._unreadable(exc) from exc
        return red, {"rows": int(t.item(0, "rows")), "users": int(t.item(0, "user"))}

    def totals(self, table: pl.LazyFrame) -> dict[str, int]:
        r = self.collect(table.select(pl.len().alias("rows"), pl.col("user").n_unique()))
        return {"rows": int(r.item(0, "rows")), "users": int(r.item(0, "user"))}

    def bounded_counts(self, source: Source | Path, plan: BoundingPlan) -> BoundedCounts:
        """The ordered single pass when users' rows are contiguous (it checks), else the
        hash-based row plan (:func:`searchveil.engines.rows.rows_plan_counts`)."""
        src = Source.of(source)
        try:
            counts, figures, rows, sha = ordered_counts(
                src, plan, normalize=self.normalize, fingerprint=self.fingerprint
            )
        except NotGrouped:
            self.plan = "hash (users not contiguous)"
            b = rows_plan_counts(
                self, src, plan, normalize=self.normalize, fingerprint=self.fingerprint
            )
            b.plan = self.plan
            return b
        self.plan = "ordered single pass"
        rec = input_record(src, sha, rows, figures["users"], self.normalize, self.fingerprint)
        return BoundedCounts(counts=counts, figures=figures, input=rec, plan=self.plan)

    def item_pools(self, source: Source | Path, plan: BoundingPlan) -> UserItemPools:
        """The ordered single pass when users' rows are contiguous, else one lazy query (first
        row of each (user, query) / (user, query, url), the first N per user)."""
        src = Source.of(source)
        try:
            counts, figures, rows, sha = ordered_counts(
                src, plan, normalize=self.normalize, fingerprint=self.fingerprint
            )
            self.plan = "ordered single pass"
        except NotGrouped:
            self.plan = "hash (users not contiguous)"
            sha_f = start_fingerprint(src.path, self.fingerprint)
            counts, figures, rows = _pools_lazy(self.scan(src), plan)
            sha = sha_f.result()
        rec = input_record(src, sha, rows, figures["users"], self.normalize, self.fingerprint)
        return UserItemPools(queries=counts["query_pool"], clicks=counts.get("click_pool"),
                             figures=figures, input=rec, plan=self.plan)  # fmt: skip

    def rows(self, source: Source | Path, plan: BoundingPlan) -> ReducedRows:
        """The row plan (:func:`searchveil.engines.rows.rows_plan_log`)."""
        return rows_plan_log(
            self, source, plan, normalize=self.normalize, fingerprint=self.fingerprint
        )

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {"engine": "polars", "version": pl.__version__}
        d["mode"] = getattr(self, "plan", "lazy, streaming")
        return d


def _pools_lazy(
    table: pl.LazyFrame, plan: BoundingPlan
) -> tuple[dict[str, pl.DataFrame], dict[str, int], int]:
    """Pools from the scan (any row order): a user's first distinct query is the first row
    with that query (the first row of a query always starts an event)."""

    def first(lf: pl.LazyFrame, keys: list[str], n: int) -> pl.LazyFrame:
        return (
            lf.group_by(["user", *keys]).agg(pl.col("row").min())
            .sort(["user", "row"])
            .group_by("user", maintain_order=True).head(n)
            .with_columns(rank=pl.int_range(pl.len()).over("user").cast(pl.Int64))
            .drop("row")
        )  # fmt: skip

    q = first(table.select("user", "query", "row"), ["query"], plan.per_user)
    counts = {"query_pool": q.rename({"query": "item"}).collect(engine="streaming")}
    ev = table.select("user", "time", "query", "row").sort("row")
    same = (
        (pl.col("user") == pl.col("user").shift(1))
        & (pl.col("time") == pl.col("time").shift(1))
        & (pl.col("query") == pl.col("query").shift(1))
    ).fill_null(False)
    tot = (
        table.select(
            pl.len().alias("rows"),
            pl.col("user").n_unique().alias("users"),
            pl.col("url").is_not_null().sum().alias("clicks"),
        )
        .collect()
        .row(0, named=True)
    )
    n_events = int(ev.select((~same).sum()).collect().item())
    figures = {"users": int(tot["users"]), "query_events": n_events,
               "pool_queries": counts["query_pool"].height}  # fmt: skip
    if plan.clicks_per_user is not None:
        c = first(
            table.filter(pl.col("url").is_not_null()).select("user", "query", "url", "row"),
            ["query", "url"],
            plan.clicks_per_user,
        )
        counts["click_pool"] = c.collect(engine="streaming")
        figures |= {"clicks": int(tot["clicks"]), "pool_clicks": counts["click_pool"].height}
    return counts, figures, int(tot["rows"])
