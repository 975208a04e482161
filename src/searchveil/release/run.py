"""One call from a log file to a written release: :func:`release_file` (what ``searchveil
release korolova|zealous|kanon`` wraps), and the one place that decides which algorithm runs
(:data:`FAMILIES`: the parameters' class names the family).

:func:`release_file` chooses where the release runs
(:func:`choose_engine`: the Polars engine whenever the input and options allow it, else in
memory — both give the same tables and public ledger under a seed), detects the input's
layout once (:class:`~searchveil.engines.contract.Source`, by content), runs the release and,
when ``out`` is given, writes it with its provenance record once.

On an engine (:func:`release_on_engine`) the engine bounds contributions
(``params.bounding_plan()``) and the family's release runs on what it returns. Which engine and
plan ran is private — the plan depends on the input's layout (whether each user's rows are
contiguous) — so it goes to the report and the provenance figures, never the public ledger:
every engine writes the same ledger.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from searchveil.engines import Engine, EngineName, Source, TableSource, make_engine
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.files import Fingerprint, check_fingerprint
from searchveil.io.formats import Layout, header_columns
from searchveil.io.ledger import check_release_dir
from searchveil.io.paths import InputPaths
from searchveil.io.readers import AOL_COLUMNS, ColumnMapping, ReaderOptions, read_log
from searchveil.model import SearchLog
from searchveil.release.histogram import HistogramRelease, write_release
from searchveil.release.kanonymity import KAnonParams, release_kanon
from searchveil.release.korolova import KorolovaParams, release_korolova, release_korolova_counts
from searchveil.release.selection import SelectionParams, release_selection, release_selection_pools
from searchveil.release.zealous import ZealousParams, release_zealous, release_zealous_counts
from searchveil.rng import RandomSource
from searchveil.validate import check_int, parse_choice

__all__ = [
    "EngineChoice",
    "FAMILIES",
    "Family",
    "ReleaseParams",
    "check_release",
    "choose_engine",
    "release_file",
    "release_on_engine",
    "release_table",
    "run_release",
]

ReleaseParams = KorolovaParams | ZealousParams | KAnonParams | SelectionParams


class EngineChoice(StrEnum):
    """``--engine``: ``auto`` (polars whenever the input and options allow it), or one."""

    AUTO = "auto"
    MEMORY = "memory"
    POLARS = "polars"
    SPARK = "spark"


# -- the families: which release runs for which parameters ------------------------------------
def _counts_on(
    counts_release: Callable[..., HistogramRelease],
) -> Callable[..., HistogramRelease]:
    def on_engine(
        engine: Engine, source: Source, params: Any, *, rng: RandomSource, **kw: Any
    ) -> HistogramRelease:
        bounded = engine.bounded_counts(source, params.bounding_plan())
        rel = counts_release(bounded, params, rng=rng, **kw)
        rel.report["engine_plan"] = bounded.plan
        if "rows_after_engine_bounding" in bounded.figures:
            rel.report["rows_after_engine_bounding"] = bounded.figures["rows_after_engine_bounding"]
        return rel

    return on_engine


def _kanon_on(
    engine: Engine, source: Source, params: KAnonParams, *, rng: RandomSource
) -> HistogramRelease:
    reduced = engine.rows(source, params.bounding_plan())
    rel: HistogramRelease = release_kanon(reduced.log, params, rng=rng)
    rel.report["rows_after_engine_bounding"] = reduced.log.df.height
    rel.report["users"] = reduced.users
    # the private input record is the whole file's (the release saw only the reduced rows)
    rel.inputs = [reduced.input]
    return rel


def _selection_on(
    engine: Engine,
    source: Source,
    params: SelectionParams,
    *,
    rng: RandomSource,
    max_users: int | None = None,
) -> HistogramRelease:
    pools = engine.item_pools(source, params.bounding_plan())
    rel = release_selection_pools(pools, params, rng=rng, max_users=max_users)
    rel.report["engine_plan"] = pools.plan
    return rel


@dataclass(frozen=True)
class Family:
    """A release family: its name, the release of an in-memory log, the release on an engine,
    and the keyword arguments it takes beyond ``rng``."""

    name: str
    in_memory: Callable[..., HistogramRelease]
    on_engine: Callable[..., HistogramRelease]
    options: tuple[str, ...] = ()


#: the one table that says which release runs for which parameters
FAMILIES: dict[type, Family] = {
    KorolovaParams: Family(
        "korolova", release_korolova, _counts_on(release_korolova_counts), ("serp", "max_users")
    ),
    ZealousParams: Family("zealous", release_zealous, _counts_on(release_zealous_counts)),
    KAnonParams: Family("kanon", release_kanon, _kanon_on),
    SelectionParams: Family("selection", release_selection, _selection_on, ("max_users",)),
}  # fmt: skip


def family_of(params: object) -> Family:
    fam = FAMILIES.get(type(params))
    if fam is None:
        allowed = " | ".join(t.__name__ for t in FAMILIES)
        raise InvalidParameterError("params", params, f"a {allowed}")
    return fam


# -- where a release runs -----------------------------------------------------------------------
_ENGINE_FLAGS = {
    "columns": "--user-col/--query-col/... (column mapping)",
    "has_header": "--no-header",
    "session_gap_minutes": "--session-gap",
}


def check_engine_reader(engine: str, reader: ReaderOptions) -> None:
    """The engines read the AOL layout (TSV, gzip) or Parquet with the default reader options:
    any other reader option (a profile, positional columns, another encoding or time format)
    is refused, naming the option, rather than silently read differently."""
    kw = reader.kwargs()
    for key, default in ReaderOptions().kwargs().items():
        if key in ("fmt", "profile", "normalize"):  # the engines normalise (or not) alike
            continue
        if kw.get(key, default) != default:
            flag = _ENGINE_FLAGS.get(key, "--" + key.replace("_", "-"))
            raise InvalidParameterError(
                flag, kw.get(key), f"the default with --engine {engine} (or --engine memory)"
            )
    if kw.get("profile") not in (None, "aol"):
        raise InvalidParameterError(
            "profile", kw.get("profile"), f"aol (or none) with --engine {engine}"
        )
    if kw.get("fmt") not in (Layout.AUTO, Layout.AOL, Layout.PARQUET):
        raise InvalidParameterError(
            "format", kw.get("fmt"), f"aol | parquet with --engine {engine}"
        )


def has_aol_columns(path: Path) -> bool:
    """Whether ``path`` is a Parquet file or a (gzipped) TSV whose header has the AOL columns:
    the layout the engines read (:func:`~searchveil.io.formats.header_columns`, by content)."""
    cols = header_columns(path)
    return cols is not None and all(c in cols for c in AOL_COLUMNS)


def choose_engine(path: Path, params: ReleaseParams, reader: ReaderOptions) -> EngineName:
    """``--engine auto``: the polars engine when the parameters have an engine plan (bounding
    ``first``, item types the engines count), every reader option is the default and the
    input is in the AOL layout (TSV, gzip, Parquet); memory otherwise. Both give the same
    tables under a seed (tested)."""
    if not path.is_file():
        return EngineName.MEMORY
    try:
        params.bounding_plan()
    except InvalidParameterError:
        return EngineName.MEMORY
    defaults = {k: v for k, v in ReaderOptions().kwargs().items() if k != "fmt"}
    given = {k: v for k, v in reader.kwargs().items() if k != "fmt"}
    if given != defaults or reader.fmt != "auto":
        return EngineName.MEMORY  # (an explicit --format is honoured by the memory reader)
    return EngineName.POLARS if has_aol_columns(path) else EngineName.MEMORY


# -- the releases ---------------------------------------------------------------------------------
def release_on_engine(
    engine: Engine,
    source: Source | TableSource | Path,
    params: ReleaseParams,
    *,
    rng: RandomSource,
    **kw: Any,
) -> HistogramRelease:
    """Bound on ``engine``, release in memory (the family's own release function); the report
    and the provenance figures name the engine (the public ledger does not)."""
    src = source if isinstance(source, TableSource) else Source.of(source)
    try:
        rel = family_of(params).on_engine(engine, src, params, rng=rng, **kw)
    finally:
        engine.finish()
    rel.report["engine"] = engine.describe()
    rel.figures["engine"] = engine.describe()
    rows = engine.driver_rows()
    if rows is not None:  # private: how much came back to the driver, against what it writes
        written = sum(t.height for t in rel.tables.values())
        got = rows.get("bounding", 0) + rows.get("release", 0)
        rel.report["driver_rows"] = {"received": got, **rows, "written": written}
    return rel


def _release_kwargs(
    fam: Family, params: ReleaseParams, serp: Any, max_users: int | None
) -> dict[str, Any]:
    """The family's keyword arguments of :func:`release_file` / :func:`release_table`: each one
    given must be one the family takes."""
    if max_users is not None:
        check_int("max-users", max_users, minimum=1)
    given = {"serp": serp, "max_users": max_users}
    for name, value in given.items():
        if value is not None and name not in fam.options:
            raise InvalidParameterError(name, value, f"unset for a {fam.name} release")
    return {k: v for k, v in given.items() if k in fam.options}


@dataclass(frozen=True)
class _Destination:
    """Where :func:`release_file` / :func:`release_table` write (``out=None``: nowhere):
    refused before anything is read, written once the release is made."""

    out: str | os.PathLike[str] | None
    fmt: str
    overwrite: bool
    provenance: str | os.PathLike[str] | None

    def check(self, inputs: InputPaths = ()) -> None:
        if self.out is not None:
            check_release_dir(self.out, fmt=self.fmt, overwrite=self.overwrite,
                              provenance=self.provenance, inputs=inputs)  # fmt: skip

    def write(self, rel: HistogramRelease) -> HistogramRelease:
        if self.out is not None:
            write_release(rel, self.out, fmt=self.fmt, overwrite=self.overwrite,
                          provenance=self.provenance)  # fmt: skip
        return rel


def check_release(
    params: ReleaseParams,
    path: str | os.PathLike[str] | None,
    *,
    engine: str = "auto",
    reader: ReaderOptions | None = None,
    out: str | os.PathLike[str] | None = None,
    out_format: str = "tsv",
    overwrite: bool = False,
    provenance: str | os.PathLike[str] | None = None,
    max_users: int | None = None,
    serp: Any = None,
    fingerprint: str = "full",
) -> dict[str, Any]:
    """Every check of :func:`release_file` (``path``) or :func:`release_table` (``path=None``)
    that reads no byte of the input — the options, the destination, that the input exists —
    so that a charged run can make them before its charge is admitted (a charge stands once
    the input is read). Returns the family's keyword arguments."""
    fam = family_of(params)
    choice = parse_choice("engine", engine, EngineChoice)
    parse_choice("fingerprint", fingerprint, Fingerprint)
    kw = _release_kwargs(fam, params, serp, max_users)
    inputs: InputPaths = []
    if path is None:
        if isinstance(params, KAnonParams):
            raise InvalidParameterError("params", "kanon", "korolova | zealous | select for a "
                                        "table")  # fmt: skip
        params.bounding_plan()  # what the engines cannot do: a typed error before any reading
    else:
        p = Path(path)
        if not os.path.exists(p) or p.is_dir():
            raise InputFormatError(str(p), "no such file (nothing was read or charged)")
        inputs = [("input", p)]
        if choice == EngineChoice.MEMORY and fingerprint != "full":
            raise InvalidParameterError("fingerprint", fingerprint, "full with --engine memory")
        if choice not in (EngineChoice.AUTO, EngineChoice.MEMORY):
            check_engine_reader(choice, reader if reader is not None else ReaderOptions())
            params.bounding_plan()
    _Destination(out, out_format, overwrite, provenance).check(inputs=inputs)
    return kw


def release_file(
    path: str | os.PathLike[str],
    params: ReleaseParams,
    *,
    rng: RandomSource,
    engine: str = "auto",
    reader: ReaderOptions | None = None,
    out: str | os.PathLike[str] | None = None,
    out_format: str = "tsv",
    overwrite: bool = False,
    provenance: str | os.PathLike[str] | None = None,
    max_users: int | None = None,
    serp: Any = None,
    spark_master: str = "local[*]",
    fingerprint: str = "full",
    spark_remote: str | None = None,
    spark_conf: tuple[tuple[str, str], ...] = (),
) -> HistogramRelease:
    """Release the log at ``path`` with ``params`` (a Korolova, ZEALOUS, k-anonymity or
    selection parameter set) and, with ``out``, write the tables, the public ledger and the
    private provenance record (``<out>.private.json`` or ``provenance``) atomically.

    ``engine``: ``auto`` (:func:`choose_engine`) | ``memory`` | ``polars`` | ``spark``;
    ``reader``: how the in-memory reader reads the file (the engines need the defaults);
    ``max_users``: the declared public bound U (Korolova, selection); ``serp``: Korolova's
    public SERP (:func:`~searchveil.release.korolova.load_serp`); ``fingerprint``: the
    provenance record's input hash on an engine, ``full`` | ``fast`` (Parquet only);
    ``spark_master`` | ``spark_remote`` (Spark Connect), ``spark_conf``: where Spark runs.
    The release's own budget is the one the parameters carry (``params.budget``,
    ``SelectionParams``' ε and δ), checked once by the family's release before any noise is drawn;
    a dataset's budget across releases is charged by ``searchveil.Session``.
    """
    p = Path(path)
    opts = reader if reader is not None else ReaderOptions()
    fam = family_of(params)
    kw = check_release(params, p, engine=engine, reader=opts, out=out, out_format=out_format,
                       overwrite=overwrite, provenance=provenance, max_users=max_users,
                       serp=serp, fingerprint=fingerprint)  # fmt: skip
    choice = EngineChoice(engine)
    dest = _Destination(out, out_format, overwrite, provenance)
    # from here the input is read (its layout first)
    where = choose_engine(p, params, opts) if choice == EngineChoice.AUTO else EngineName(choice)
    check_fingerprint(fingerprint, p if where != EngineName.MEMORY else None)
    if where == EngineName.MEMORY:
        if fingerprint != "full":
            raise InvalidParameterError("fingerprint", fingerprint, "full with --engine memory")
        log: SearchLog = read_log(p, opts)
        rel = fam.in_memory(log, params, rng=rng, **kw)
    else:
        check_engine_reader(where, opts)
        params.bounding_plan()  # what the engines cannot do: a typed error before any reading
        eng = make_engine(where, spark_master=spark_master, normalize=opts.normalize,
                          fingerprint=fingerprint, spark_remote=spark_remote,
                          spark_conf=spark_conf)  # fmt: skip
        rel = release_on_engine(eng, Source.of(p), params, rng=rng, **kw)
        if choice == EngineChoice.AUTO:  # the same bytes as memory (tested): the report says so
            rel.report["engine"] = rel.report["engine"] | {"selected_by": "--engine auto"}
    return dest.write(rel)


# release_file's options on purpose (a table in Spark releases as a file does): the two
# signatures alike, each entry point kept whole for its readers
def release_table(
    table: Any,
    params: ReleaseParams,
    *,
    rng: RandomSource,
    columns: ColumnMapping | None = None,
    normalize: bool = True,
    out: str | os.PathLike[str] | None = None,
    out_format: str = "tsv",
    overwrite: bool = False,
    provenance: str | os.PathLike[str] | None = None,
    max_users: int | None = None,
    serp: Any = None,
    spark_master: str = "local[*]",
    spark_remote: str | None = None,
    spark_conf: tuple[tuple[str, str], ...] = (),
) -> HistogramRelease:
    """:func:`release_file` for a log that lives in Spark: ``table`` is the name of a table of
    the session's catalog (``spark.table(name)``: Hive, Delta, Iceberg, a temporary view) or a
    Spark DataFrame. ``columns``: which of its columns hold the user, query, time and URL (the
    names of a :class:`~searchveil.io.readers.ColumnMapping`; default the AOL names). Bounded
    with the same kernel as a file, on Spark (``spark_master``, or Spark Connect at
    ``spark_remote``); "first" follows the order in which Spark reads the table. The private
    provenance record names the table and the snapshot read (:func:`~searchveil.engines.spark.
    table_snapshot`); k-anonymity reads files only."""
    kw = check_release(params, None, engine="spark", out=out, out_format=out_format,
                       overwrite=overwrite, provenance=provenance, max_users=max_users,
                       serp=serp)  # fmt: skip
    dest = _Destination(out, out_format, overwrite, provenance)
    m = columns or ColumnMapping()
    names = {"AnonID": m.user, "Query": m.query, "QueryTime": m.time, "ClickURL": m.url,
             "ItemRank": m.rank}  # fmt: skip
    mapped = tuple((k, v) for k, v in names.items() if v is not None and v != k)
    if isinstance(table, str):
        src = TableSource(name=table, columns=mapped)
    else:
        src = TableSource(frame=table, columns=mapped)
    eng = make_engine(EngineName.SPARK, spark_master=spark_master, normalize=normalize,
                      spark_remote=spark_remote, spark_conf=spark_conf)  # fmt: skip
    return dest.write(release_on_engine(eng, src, params, rng=rng, **kw))


# -- engine releases by name (the form the engine tests use) ----------------------------------
def run_release(
    engine_name: str,
    algorithm: str,
    path: Path,
    params: ReleaseParams,
    *,
    rng: RandomSource,
    spark_master: str = "local[*]",
    normalize: bool = True,
    release_kwargs: dict[str, Any] | None = None,
    fingerprint: str = "full",
) -> HistogramRelease:
    """Bound on the named engine, release in memory (:func:`release_on_engine`); ``algorithm``
    must name the family of ``params`` (``korolova`` | ``zealous`` | ``kanon`` | ``selection``,
    which is ``release korolova --selection``)."""
    fam = family_of(params)
    if algorithm != fam.name:
        raise InvalidParameterError("algorithm", algorithm, f"{fam.name} for these parameters")
    params.bounding_plan()
    check_fingerprint(fingerprint, Path(path))
    engine = make_engine(
        engine_name, spark_master=spark_master, normalize=normalize, fingerprint=fingerprint
    )
    return release_on_engine(engine, Path(path), params, rng=rng, **(release_kwargs or {}))
