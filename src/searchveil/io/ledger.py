"""Release directories, the public privacy ledger and the private provenance record.

A release is a directory holding its output tables and ``ledger.json``. :class:`ReleaseWriter`
builds it in a staging directory beside it and swaps it into place only when every table and
the ledger are written (:class:`searchveil.io.paths.Staging`), so a failed or killed run leaves
nothing behind and a reader never sees a half-written release. An existing output directory is
an error unless ``overwrite=True``, and then only a complete searchveil release holding none of
the run's inputs is replaced, after the new release is complete (:mod:`searchveil.io.paths`).

**Two records per run** (docs/privacy/published.md):

* ``ledger.json`` is *published with the release*. It may hold only what the guarantee covers:
  mechanism, privacy notion, neighbouring relation (its text and, as ``relation``, its name), ε,
  δ and their ``split`` (all from the release's cost), public parameters,
  public inputs (hierarchies, SERP, node universe: file name and SHA-256), bounds the user
  *declares* (``declared``), counts released under the budget (``noisy``), the outputs, the tool
  version and whether the randomness was seeded. :func:`build_ledger` is the one function that
  builds it for every family; it refuses unknown top-level keys and, anywhere outside
  ``public_inputs``/``declared``/``noisy``/``outputs``, keys that describe the private input
  (``path``, ``sha256``, ``rows``, ``users``, ``records``, ``edges``, ...), so a new family
  cannot leak the input's size or fingerprint by accident.
* The **provenance record** (:func:`build_provenance`) holds everything about the private input
  — path, SHA-256, exact counts, reader diagnostics, utility figures, expected single-user items.
  It is written *outside* the release directory (``<out>.private.json`` beside it, or a path the
  user gives), its first field says it is private, and :class:`ReleaseWriter` refuses to put it
  inside the release. ``evaluate``, ``compare``, reports and ``demo`` read it with
  :func:`read_provenance`.

:class:`ReleaseWriter` also checks, before anything is renamed into place, that no input path or
SHA-256 named in the provenance record occurs anywhere in the ledger or in a text table.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import polars as pl

from searchveil.errors import (
    InputFormatError,
    InternalError,
    OutputWriteError,
)
from searchveil.io import paths
from searchveil.io.files import file_sha256
from searchveil.io.provenance import (
    PROVENANCE_MARK,
    PROVENANCE_SUFFIX,
    build_provenance,
    check_ledger_file,
    is_provenance_record,
    provenance_path,
    provenance_rule,
    read_provenance,
    release_ledger_sha,
    repair_provenance,
    write_ledger_file,
)
from searchveil.io.provenance import jsonable as _jsonable
from searchveil.rng import RandomSource, secure_token
from searchveil.validate import check_choice
from searchveil.version import __version__

__all__ = [
    "ReleaseWriter",
    "build_ledger",
    "build_provenance",
    "read_ledger",
    "read_provenance",
    "provenance_path",
    "public_file_record",
    "write_json_atomic",
    "write_private_json",
    "write_text_atomic",
    "check_release_dir",
    "check_ledger_file",
    "differentially_private",
    "says_not_dp",
    "is_provenance_record",
    "provenance_rule",
    "release_ledger_sha",
    "repair_provenance",
    "write_ledger_file",
    "LEDGER_NAME",
    "LEDGER_KEYS",
    "LedgerCost",
    "PRIVATE_KEYS",
    "PROVENANCE_SUFFIX",
    "PROVENANCE_MARK",
]

LEDGER_NAME = "ledger.json"
# The top-level keys a public ledger may hold. Anything else is refused by build_ledger: a new
# key is added here deliberately, after asking whether it is covered by the guarantee.
LEDGER_KEYS = frozenset(
    {
        "tool",
        "tool_version",
        "created_utc",
        "mechanism",
        "notion",
        "neighbouring",
        "relation",
        "epsilon",
        "delta",
        "split",
        "parameters",
        "public_inputs",
        "declared",
        "noisy",
        "seeded",
        "randomness",
        "for_release",
        "events",
        "outputs",
        "release_format",
        "accounting",
        "paper_accounting",
        "reference",
        "engine",
        "guarantee",
        "protocol",
        "notes",
    }
)

# Keys that describe the private input. They may not occur anywhere in a public ledger except
# inside the subtrees listed in _PUBLIC_SUBTREES (public files, bounds the user declares,
# counts released under the budget, the released tables).
PRIVATE_KEYS = frozenset(
    {
        "path",
        "sha256",
        "input",
        "inputs",
        "input_sha256",
        "rows",
        "users",
        "n_users",
        "records",
        "n_records",
        "edges",
        "n_edges",
        "nodes",
        "max_degree",
        "bad_rows",
        "bad_rows_skipped",
        "bad_row_examples",
        "single_user",
        "single_user_check",
        "metrics",
        "summary",
        "figures",
        "diagnostics",
        "report",
    }
)
_PUBLIC_SUBTREES = frozenset({"public_inputs", "declared", "noisy", "outputs"})
# in a public input record (a public file), these describe that public file, not the private one
_PUBLIC_INPUT_KEYS = frozenset(
    {
        "role",
        "file",
        "sha256",
        "rows",
        "nodes",
        "kind",
        "format",
        "note",
        "attribute",
        "height",
        "source",
        "declared_by",
    }
)


def _refuse_private_keys(obj: Any, where: str) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if str(k) in PRIVATE_KEYS:
                raise InternalError(
                    f"the public ledger may not hold {where}.{k}: it describes the private "
                    "input; put it in the provenance record (build_provenance), or declare it "
                    "as a public bound (declared=) or a DP count charged to the budget (noisy=)"
                )
            _refuse_private_keys(v, f"{where}.{k}")
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            _refuse_private_keys(v, f"{where}[{i}]")


def _check_public_input(rec: Any, i: int) -> None:
    if not isinstance(rec, dict) or "role" not in rec:
        raise InternalError(f"public_inputs[{i}] must be a dict with a 'role' (got {rec!r})")
    extra = set(map(str, rec)) - _PUBLIC_INPUT_KEYS
    if extra:
        raise InternalError(
            f"public_inputs[{i}] ({rec.get('role')}) has keys {sorted(extra)}; a public input "
            f"record holds only {sorted(_PUBLIC_INPUT_KEYS)}"
        )


class LedgerCost(Protocol):
    """What a ledger needs of a release's cost: a
    :class:`~searchveil.mechanisms.budget.PrivacyCost` (or a ``NoGuarantee``) gives its
    ``neighbouring`` text, ``relation``, ``epsilon``, ``delta`` and ``split``."""

    def ledger_fields(self) -> dict[str, Any]: ...


_COST_FIELDS = ("neighbouring", "relation", "epsilon", "delta", "split")


def build_ledger(
    *,
    mechanism: str,
    notion: str,
    cost: LedgerCost,
    parameters: dict[str, Any],
    rng: RandomSource | None,
    public_inputs: list[dict[str, Any]] | None = None,
    declared: dict[str, Any] | None = None,
    noisy: dict[str, Any] | None = None,
    events: list[dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The public ledger of one release (``outputs`` is filled in by :class:`ReleaseWriter`).

    ``cost``: what the release spends (a ``PrivacyCost``, or a ``NoGuarantee`` for a release
    that protects nothing): the one source of the ledger's ``neighbouring``, ``relation``,
    ``epsilon``, ``delta`` and ``split``. ``public_inputs``: records of public files the release
    used (``role``, ``file``, ``sha256``, ...). ``declared``: public bounds the user states
    (e.g. ``max_users``), named as such. ``noisy``: counts released under the budget (their
    events are in ``events``).
    ``extra``: further top-level keys, each of which must be in :data:`LEDGER_KEYS`.
    Nothing here may describe the private input: see the module docstring; a violation is an
    :class:`InternalError` (a bug in the family that built it), raised before anything is
    written.
    """
    randomness = rng.describe() if rng is not None else {"source": None, "seeded": False}
    fields = cost.ledger_fields()
    if set(fields) != set(_COST_FIELDS):
        raise InternalError(f"a cost gives the ledger {_COST_FIELDS}, not {sorted(fields)}")
    extra = _conditional(cost, extra)
    ledger: dict[str, Any] = {
        "tool": "searchveil",
        "tool_version": __version__,
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mechanism": mechanism,
        "notion": notion,
        "neighbouring": fields["neighbouring"],
        "relation": fields["relation"],
        "epsilon": fields["epsilon"],
        "delta": fields["delta"],
        "split": fields["split"],
        "parameters": parameters,
        "public_inputs": list(public_inputs or []),
        "declared": dict(declared or {}),
        "noisy": dict(noisy or {}),
        "seeded": bool(randomness.get("seeded")),
        "randomness": randomness,
        "for_release": not bool(randomness.get("seeded")),
        "events": events or [],
        "outputs": {},
    }
    for k in extra or {}:
        if k not in LEDGER_KEYS or k in ledger:
            raise InternalError(
                f"unknown or duplicate ledger key {k!r}: a public ledger holds only "
                f"{sorted(LEDGER_KEYS)} (add a key to LEDGER_KEYS only if the guarantee covers it)"
            )
    ledger.update(extra or {})
    result: dict[str, Any] = _jsonable(ledger)
    check_public_ledger(result)
    return result


def _conditional(cost: Any, extra: dict[str, Any] | None) -> dict[str, Any] | None:
    """A release whose guarantee is *conditional* (``cost.conditional``: Hong et al.'s and the
    CELS paper's counts from the exact data, only the sampling given them private) is not
    differentially private, and its ledger says so at the top level (issue 39; the cost's
    ``ledger_fields``: no relation, ε and δ null, like a release that protects nothing). The
    (ε, δ) of the sampling given the counts, with its relation and split, is kept under
    ``guarantee.conditional`` — never where a reader (or a budget) takes a guarantee from."""
    why = getattr(cost, "conditional", None)
    if not why:
        return extra
    sampling = {"relation": str(cost.relation), "neighbouring": cost.relation.neighbouring,
                "epsilon": cost.epsilon, "delta": cost.delta, "split": cost.split,
                "covers": "only the sampling given the counts", "why": why}  # fmt: skip
    extra = dict(extra or {})
    guarantee = dict(extra.get("guarantee") or {})
    guarantee.update(differentially_private=False, conditional=sampling)
    extra["guarantee"] = guarantee
    return extra


def differentially_private(release: dict[str, Any]) -> bool:
    """Whether a release (its ledger, or evaluate's summary of it) states a differential-privacy
    guarantee: an ε, a relation other than ``none``, and no ``guarantee`` saying it is not
    (a conditional release's ledger: issue 39)."""
    g = release.get("guarantee")
    if release.get("differentially_private") is False or (
        isinstance(g, dict) and g.get("differentially_private") is False
    ):
        return False
    return release.get("epsilon") is not None and release.get("relation") != "none"


def says_not_dp(notion: str) -> bool:
    """The notion already says the release is not differentially private."""
    n = notion.lower()
    return "not differential" in n or "no differential" in n


def check_public_ledger(ledger: dict[str, Any]) -> None:
    """Raise :class:`InternalError` when ``ledger`` holds an unknown top-level key or a key that
    describes the private input outside the public subtrees (see the module docstring)."""
    unknown = set(ledger) - LEDGER_KEYS
    if unknown:
        raise InternalError(f"unknown ledger keys {sorted(unknown)}")
    for k, v in ledger.items():
        if k in _PUBLIC_SUBTREES:
            continue
        _refuse_private_keys(v, k)
    for i, rec in enumerate(ledger.get("public_inputs") or []):
        _check_public_input(rec, i)
    for k, v in (ledger.get("declared") or {}).items():
        if not isinstance(v, int | float | str | bool | None):
            raise InternalError(f"declared.{k} must be a scalar (a bound the user states)")


def public_file_record(path: str | os.PathLike[str], *, role: str, **fields: Any) -> dict[str, Any]:
    """The ledger's record of a *public* input file (a SERP, a hierarchy, a node list): its
    ``role``, its file name (not the path: where the data holder keeps it is not published) and
    the SHA-256 of its bytes, plus ``fields`` (keys allowed in a public input record)."""
    p = Path(path)
    return {"role": role, "file": p.name, "sha256": file_sha256(p), **fields}


def read_ledger(release_dir: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(release_dir) / LEDGER_NAME
    if not path.is_file():
        raise InputFormatError(str(path), "no ledger.json: not a searchveil release directory")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputFormatError(str(path), f"ledger is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or "outputs" not in data:
        raise InputFormatError(str(path), "ledger has no 'outputs' map")
    return data


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> None:
    """Write JSON to ``path`` via a temp file + rename."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp-{secure_token()}")
    try:
        tmp.write_text(
            json.dumps(_jsonable(obj), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_private_json(path: str | os.PathLike[str], obj: Any, **kw: Any) -> Path:
    """Write a private record (e.g. a :func:`build_provenance` record of a command that writes
    a ledger file rather than a release directory): refused inside a release directory, staged
    and owner-only (0600) from the first byte (:func:`searchveil.io.paths.write_private_json`;
    ``kw``: its ``option``, ``releases``, ``inputs``)."""
    return paths.write_private_json(path, _jsonable(obj), **kw)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp-{secure_token()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
    finally:
        if tmp.exists():
            tmp.unlink()


# ReleaseWriter's arguments on purpose: it answers, before any work, what the writer would refuse
def check_release_dir(
    out_dir: str | os.PathLike[str],
    *,
    fmt: str = "tsv",
    overwrite: bool = False,
    provenance: str | os.PathLike[str] | None = None,
    inputs: paths.InputPaths = (),
) -> None:
    """Fail early — before reading or computing anything — when :class:`ReleaseWriter` would
    refuse ``out_dir`` (it exists and ``overwrite`` is off or it is not a complete release; an
    input lies inside it), its provenance path or ``fmt``. Writes nothing."""
    ReleaseWriter(out_dir, fmt=fmt, overwrite=overwrite, provenance=provenance, inputs=inputs)


def _private_strings(provenance: dict[str, Any]) -> list[str]:
    """Input paths and SHA-256 digests named in a provenance record (long enough to be
    unmistakable when found in a published file)."""
    found: list[str] = []

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("path", "sha256", "input_sha256") and isinstance(v, str) and len(v) >= 8:
                    found.append(v)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(provenance.get("inputs"))
    return found


class ReleaseWriter:
    """Write a release directory atomically (see module docstring), and its private provenance
    record beside it.

    >>> with ReleaseWriter(out, fmt="tsv") as w:          # doctest: +SKIP
    ...     w.write_table("queries", df)
    ...     w.write_ledger(ledger)
    ...     w.write_provenance(build_provenance(inputs=[...], report=report))

    ``provenance``: where the provenance record goes (default ``<out>.private.json`` beside
    the directory; a path inside this or any release directory is refused). ``inputs``: the
    run's input paths, as ``(option, path)`` pairs — refused inside ``out`` (so is any input
    path the provenance record names). The rules of :mod:`searchveil.io.paths` apply:
    ``overwrite`` replaces only a complete searchveil release, the new directory is staged and
    swapped in atomically, then the provenance record is put in place; before either, the
    ledger and every text table are checked to contain no input path or SHA-256 from the
    provenance record. ``moves_to``: where the directory will live once an enclosing staging
    directory (:class:`~searchveil.io.paths.Staging`) is put in place — a run that writes
    several releases at once, such as the demo — so the provenance record names that place.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        *,
        fmt: str = "tsv",
        overwrite: bool = False,
        provenance: str | os.PathLike[str] | None = None,
        inputs: paths.InputPaths = (),
        moves_to: str | os.PathLike[str] | None = None,
    ) -> None:
        self.out_dir = paths.check_named(out_dir, "out")
        self.moves_to = Path(out_dir if moves_to is None else moves_to)
        self.fmt = check_choice("format", fmt, ("tsv", "parquet"))
        self.overwrite = overwrite
        self.inputs = list(inputs)
        self.provenance_path = provenance_path(self.out_dir, provenance)
        self._stage: paths.Staging | None = None
        self._provenance: dict[str, Any] | None = None
        self._outputs: dict[str, dict[str, Any]] = {}
        self._ledger_written = False
        # a record a killed run staged for the release now in place is put in place first
        repair_provenance(self.out_dir, self.provenance_path)
        paths.check_private_path(
            self.provenance_path, option="provenance", releases=[self.out_dir],
            inputs=self.inputs, overwrite=overwrite,
            owned=provenance_rule(self.out_dir, overwrite=overwrite).owned,
        )  # fmt: skip
        paths.check_release_out(self.out_dir, overwrite=overwrite, inputs=self.inputs)

    def __enter__(self) -> ReleaseWriter:
        rule = paths.release_rule("out", self.overwrite)
        self._stage = paths.Staging(self.out_dir, directory=True, replace=rule)
        return self

    @property
    def tmp_dir(self) -> Path:
        if self._stage is None:
            raise InternalError("ReleaseWriter used outside its 'with' block")
        return self._stage.path

    def _written(self, fname: str, write: Any) -> None:
        try:
            write(self.tmp_dir / fname)
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise OutputWriteError(str(self.out_dir / fname), exc) from exc

    def write_table(self, name: str, df: pl.DataFrame) -> str:
        """Write one output table; returns its file name (relative to the release dir)."""
        fname = f"{name}.{'tsv' if self.fmt == 'tsv' else 'parquet'}"
        if self.fmt == "tsv":
            self._written(fname, lambda p: df.write_csv(p, separator="\t", quote_style="never"))
        else:
            self._written(fname, df.write_parquet)
        self._outputs[name] = {
            "file": fname,
            "columns": df.columns,
            "rows": df.height,
            "format": self.fmt,
        }
        return fname

    def write_file(self, name: str, fname: str, content: str | bytes) -> str:
        data = content.encode("utf-8") if isinstance(content, str) else content
        self._written(fname, lambda p: p.write_bytes(data))
        self._outputs[name] = {"file": fname}
        return fname

    def write_ledger(self, ledger: dict[str, Any]) -> dict[str, Any]:
        ledger = dict(ledger)
        ledger["outputs"] = dict(self._outputs)
        ledger["release_format"] = self.fmt
        check_public_ledger(_jsonable(ledger))  # every written ledger, whoever built it
        text = json.dumps(_jsonable(ledger), indent=2, ensure_ascii=False) + "\n"
        self._written(LEDGER_NAME, lambda p: p.write_text(text, encoding="utf-8"))
        self._ledger_written = True
        return ledger

    def write_provenance(self, record: dict[str, Any]) -> Path:
        """Stage the private provenance record (put in place right after the release)."""
        if record.get("kind") != "searchveil-provenance":
            raise InternalError("write_provenance takes a record from build_provenance")
        self._provenance = dict(record)
        return self.provenance_path

    def _check_no_private_strings(self) -> None:
        if self._provenance is None:
            return
        secrets_ = _private_strings(self._provenance)
        if not secrets_:
            return
        for f in sorted(self.tmp_dir.iterdir()):
            if f.suffix not in (".json", ".tsv", ".txt", ".csv", ".html", ".md"):
                continue
            text = f.read_text(encoding="utf-8", errors="replace")
            for s in secrets_:
                if s in text:
                    raise InternalError(
                        f"the release file {f.name} contains an input path or SHA-256 from the "
                        "private provenance record; nothing was written"
                    )

    def _stage_provenance(self, rule: paths.Replace) -> paths.Staging | None:
        if self._provenance is None:
            return None
        ledger_bytes = (self.tmp_dir / LEDGER_NAME).read_bytes()
        rec = dict(self._provenance)
        rec["release"] = {
            "directory": str(self.moves_to.resolve()),
            "ledger_sha256": hashlib.sha256(ledger_bytes).hexdigest(),
        }
        # an input the record names may not lie inside the directory this release replaces
        named = [("input", i.get("path")) for i in rec.get("inputs") or [] if isinstance(i, dict)]
        paths.check_release_out(self.out_dir, overwrite=self.overwrite, inputs=named)
        text = json.dumps(_jsonable(rec), indent=2, ensure_ascii=False) + "\n"
        return paths.stage_private_file(self.provenance_path, text.encode("utf-8"), replace=rule)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stage = self._stage
        if stage is None:
            return
        if exc_type is not None or not self._ledger_written:
            stage.discard()
            if exc_type is None:
                raise InternalError("release finished without a ledger; nothing was written")
            if isinstance(exc, OSError):
                raise OutputWriteError(str(self.out_dir), exc) from exc
            return
        prov: paths.Staging | None = None
        try:
            self._check_no_private_strings()
            # the record may replace only the record of the release this one replaces: the
            # rule reads that release's ledger now, before the swap (issue 39)
            prov = self._stage_provenance(provenance_rule(self.out_dir, overwrite=self.overwrite))
            for st in (stage, prov):  # every target checked again before the first swap
                if st is not None:
                    st.recheck()
            # the release first, then its record: a kill between the two leaves the new
            # release and its staged record, which repair_provenance puts in place
            stage.commit()  # the release is in place (the old one, if any, is removed)
            if prov is not None:
                prov.commit()
        except BaseException:
            stage.discard()
            if prov is not None:
                prov.discard()
            raise
