"""The embedded engine: Polars lazy frames collected with the streaming engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from searchveil.bounding import NotContiguous
from searchveil.engines.base import Engine, ReducedRows
from searchveil.engines.contract import BoundedCounts, BoundingPlan, Source, UserItemPools
from searchveil.engines.ordered import ordered_counts
from searchveil.engines.rows import input_record, rows_plan_log
from searchveil.engines.sources import ENGINE_LAYOUT, validate_aol_text
from searchveil.errors import InputFormatError
from searchveil.io.files import PARQUET_DAMAGED
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
        return lf.with_row_index("row").select(
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

    def semi_join(self, table: pl.LazyFrame, keys: pl.LazyFrame, on: list[str]) -> pl.LazyFrame:
        return table.join(keys.select(on), on=on, how="semi")

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

    def _kernel(self, source: Source | Path, plan: BoundingPlan) -> tuple[
            dict[str, pl.DataFrame], dict[str, int], dict[str, Any]]:  # fmt: skip
        """The bounding kernel in one ordered pass when users' rows are contiguous (it
        checks), else on the rows sorted by user: (counts, figures, input record)."""
        src = Source.of(source)
        kw: dict[str, Any] = {"normalize": self.normalize, "fingerprint": self.fingerprint}
        try:
            counts, figures, rows, sha = ordered_counts(src, plan, **kw)
            self.plan = "ordered single pass"
        except NotContiguous:
            counts, figures, rows, sha = ordered_counts(src, plan, sort=True, **kw)
            self.plan = "sorted (users not contiguous)"
        rec = input_record(src, sha, rows, figures["users"], self.normalize, self.fingerprint)
        return counts, figures, rec

    def bounded_counts(self, source: Source | Path, plan: BoundingPlan) -> BoundedCounts:
        """Histogram releases: :meth:`_kernel`, counted."""
        counts, figures, rec = self._kernel(source, plan)
        return BoundedCounts(counts=counts, figures=figures, input=rec, plan=self.plan)

    def item_pools(self, source: Source | Path, plan: BoundingPlan) -> UserItemPools:
        """Selection strategies: :meth:`_kernel`, each user's first distinct items as rows."""
        counts, figures, rec = self._kernel(source, plan)
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
