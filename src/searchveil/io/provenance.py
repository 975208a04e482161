"""The private provenance record of a release (docs/privacy/published.md): what it holds
(:func:`build_provenance`), where it lives (:func:`provenance_path`), how it is read back
(:func:`read_provenance`: only the record of *this* release — its ``release.ledger_sha256`` is
the SHA-256 of the release's ledger) and the write rule that protects it (issue 39):

* an existing record is replaced only with ``--overwrite`` and only when it belongs to the
  release being replaced (:func:`provenance_rule`): ``--provenance A.private.json --overwrite``
  on a release B refuses, and release A keeps its record;
* a release directory is put in place first, then its record: a ``kill -9`` between the two
  swaps leaves the new release, the old record and the new record staged beside it. The next
  reader or writer of that record repairs it (:func:`repair_provenance`: the staged record of a
  dead run whose ``ledger_sha256`` names the ledger now in place is renamed into place); when
  there is nothing to repair from, :func:`read_provenance` refuses the old record (its digest
  names another ledger) rather than let ``evaluate`` use it.

A command whose release is a ledger file (``social reproduce``, ``attack ads``) writes the two
with :func:`write_ledger_file` under the same rule. :mod:`searchveil.io.ledger` re-exports
everything here.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from searchveil.errors import InputFormatError
from searchveil.io import paths
from searchveil.version import __version__

__all__ = [
    "PROVENANCE_MARK",
    "PROVENANCE_SUFFIX",
    "build_provenance",
    "check_ledger_file",
    "is_provenance_record",
    "jsonable",
    "provenance_path",
    "provenance_rule",
    "read_provenance",
    "release_ledger_sha",
    "repair_provenance",
    "write_ledger_file",
]

LEDGER_NAME = paths.LEDGER_FILE
PROVENANCE_SUFFIX = ".private.json"
PROVENANCE_MARK = (
    "PRIVATE: provenance of a searchveil release - it describes the private input (path, "
    "SHA-256, exact counts, diagnostics). Keep it with the data holder; never publish it with "
    "the release."
)


def jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [jsonable(v) for v in x]
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return str(x)
    if hasattr(x, "item") and callable(x.item):  # numpy scalars
        return jsonable(x.item())
    if isinstance(x, Path):
        return str(x)
    return x


def build_provenance(
    *,
    inputs: list[dict[str, Any]],
    report: dict[str, Any] | None = None,
    figures: dict[str, Any] | None = None,
    diagnostics: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The private provenance record of one release. Its first field, ``PRIVATE``, says what it
    is. ``inputs``: the private input records (path, SHA-256, exact rows/users, reader options
    and diagnostics); ``report``: the release's private report (kept/dropped counts, expected
    single-user items, ...); ``figures``/``diagnostics``: anything else computed from the exact
    input. ``release`` and ``ledger_sha256`` are filled in by :class:`ReleaseWriter`."""
    rec: dict[str, Any] = {
        "PRIVATE": PROVENANCE_MARK,
        "kind": "searchveil-provenance",
        "tool_version": __version__,
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "release": None,
        "inputs": inputs,
        "report": report or {},
        "figures": figures or {},
        "diagnostics": diagnostics or {},
    }
    rec.update(extra or {})
    out: dict[str, Any] = jsonable(rec)
    return out


def provenance_path(
    release_dir: str | os.PathLike[str],
    explicit: str | os.PathLike[str] | None = None,
    *,
    option: str = "out",
) -> Path:
    """Where the provenance record of ``release_dir`` lives: ``explicit`` when given, else
    ``<release_dir>.private.json`` beside the release directory (never inside it). A
    ``release_dir`` written ``.`` or ``..`` is taken as the directory it names; ``/`` (no
    name) is refused naming ``option``."""
    if explicit is not None:
        return Path(explicit)
    d = Path(release_dir)
    if d.name in ("", ".", ".."):
        d = paths.check_named(d.resolve(), option)
    return d.with_name(d.name + PROVENANCE_SUFFIX)


def read_provenance(
    release_dir: str | os.PathLike[str], explicit: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """The provenance record of a release (see :func:`provenance_path`) — only if it belongs to
    it: its ``release.ledger_sha256`` must be the SHA-256 of the release's ledger (a record of
    another release is refused). A record a killed run staged but did not put in place is put
    in place first (:func:`repair_provenance`)."""
    path = provenance_path(release_dir, explicit)
    repair_provenance(release_dir, path)
    if not path.is_file():
        raise InputFormatError(
            str(path),
            "no provenance record: the private record of this release is written beside the "
            "release directory as <release>.private.json (or where --provenance said); pass "
            "--provenance FILE if it was moved",
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InputFormatError(str(path), f"provenance record is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != "searchveil-provenance":
        raise InputFormatError(str(path), "not a searchveil provenance record")
    why = _not_its_record(data, release_ledger_sha(release_dir), release_dir)
    if why is not None:
        raise InputFormatError(
            str(path), f"not this release's provenance record: {why}; give the record of this "
            "release with --provenance (evaluate never uses another release's record)",
        )  # fmt: skip
    return data


def release_ledger_sha(release: str | os.PathLike[str]) -> str | None:
    """The SHA-256 of the ledger of ``release`` — its ``ledger.json`` (a release directory) or
    the file itself (a command that writes a ledger file) — or ``None`` when there is none."""
    p = Path(release)
    led = p / LEDGER_NAME if p.is_dir() else p
    try:
        return hashlib.sha256(led.read_bytes()).hexdigest() if led.is_file() else None
    except OSError:
        return None


def _record_sha(data: Any) -> str | None:
    rel = data.get("release") if isinstance(data, dict) else None
    sha = rel.get("ledger_sha256") if isinstance(rel, dict) else None
    return sha if isinstance(sha, str) else None


def _not_its_record(data: Any, sha: str | None, release: Any) -> str | None:
    """Why the provenance record ``data`` is not the one of the release whose ledger has the
    SHA-256 ``sha`` (``None``: it is)."""
    rec = _record_sha(data)
    if rec is not None and rec == sha:
        return None
    rel = data.get("release") if isinstance(data, dict) else None
    named = rel.get("directory") if isinstance(rel, dict) else None
    if sha is None:
        return (
            f"there is no release at {str(release)!r} for it to belong to: it is the record of "
            f"another (or a removed) release, whose ledger had SHA-256 {str(rec)[:16]}…"
        )
    return (
        f"it belongs to another release: its ledger_sha256 {str(rec)[:16]}… is not the "
        f"SHA-256 of the ledger of {str(release)!r}" + (f" (it names {named!r})" if named else "")
    )


def provenance_rule(
    release: str | os.PathLike[str], *, overwrite: bool, option: str = "provenance"
) -> paths.Replace:
    """The write rule of the provenance record of ``release`` (issue 39): an existing record is
    replaced only with ``overwrite`` and only when it belongs to the release being replaced —
    its ``ledger_sha256`` is the SHA-256 of the ledger at ``release`` *now* (so make the rule
    before the release's own swap). A record of another release (``--provenance A.private.json``
    on a release B) or a file that is no record is never replaced."""
    sha = release_ledger_sha(release)

    def problem(p: Path) -> str | None:
        data = paths.read_json(p)
        if not isinstance(data, dict) or data.get("kind") != "searchveil-provenance":
            return "it is not a searchveil provenance record"
        return _not_its_record(data, sha, release)

    owned = paths.Owned(
        f"the provenance record of the release it replaces (at {str(release)!r})", problem
    )
    return paths.Replace(option, overwrite, owned)


def repair_provenance(release: str | os.PathLike[str], record: str | os.PathLike[str]) -> bool:
    """Complete a write a ``kill -9`` interrupted between its two swaps (issue 39): the release
    directory is put in place first, then its provenance record; a kill between the two leaves
    the new release beside the old record, and the new record staged beside it
    (:class:`~searchveil.io.paths.Staging`). When the record at ``record`` is missing or is not
    the current release's, a staged record of a dead run that is (its ``ledger_sha256`` the
    SHA-256 of the ledger at ``release``) is put in place (:func:`paths.recover_staged`).
    Anything else at ``record`` — a file that is no provenance record — is left alone.
    Returns whether a record was put in place."""
    sha = release_ledger_sha(release)
    target = Path(record)
    if sha is None or target.is_symlink():
        return False
    current = paths.read_json(target) if target.exists() else None
    if target.exists() and (not is_provenance_record(target) or _record_sha(current) == sha):
        return False

    def ours(staged: Path) -> bool:
        data = paths.read_json(staged)
        return (
            isinstance(data, dict)
            and data.get("kind") == "searchveil-provenance"
            and (_record_sha(data) == sha)
        )

    return paths.recover_staged(target, ours)


def is_provenance_record(path: str | os.PathLike[str]) -> bool:
    """``path`` holds a searchveil provenance record (what ``--overwrite`` may replace)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and data.get("kind") == "searchveil-provenance"


def check_ledger_file(
    ledger: str | os.PathLike[str],
    record: str | os.PathLike[str],
    *,
    overwrite: bool,
    inputs: paths.InputPaths = (),
) -> None:
    """Fail — before any work — when :func:`write_ledger_file` would refuse ``ledger`` (a
    public ledger file: replaced only with ``overwrite`` and only if it is a searchveil ledger)
    or its provenance ``record`` (replaced only when it is the record of that ledger)."""
    paths.check_private_path(ledger, option="ledger", inputs=inputs, overwrite=overwrite,
                             owned=paths.LEDGER_JSON)  # fmt: skip
    repair_provenance(ledger, record)
    paths.check_private_path(record, option="provenance", inputs=inputs, overwrite=overwrite,
                             owned=provenance_rule(ledger, overwrite=overwrite).owned)  # fmt: skip


def write_ledger_file(
    ledger_path: str | os.PathLike[str],
    ledger: Any,
    record_path: str | os.PathLike[str],
    record: dict[str, Any],
    *,
    overwrite: bool,
    inputs: paths.InputPaths = (),
) -> None:
    """Write the public ``ledger`` of a command whose release is a ledger file (an experiment:
    ``social reproduce``, ``attack ads``) and its private provenance ``record`` beside it, under
    the write rule (:func:`check_ledger_file`): the ledger first, then the record, which names
    the ledger's SHA-256 as a release directory's record does."""
    rule = provenance_rule(ledger_path, overwrite=overwrite)  # before the ledger's swap
    data = (json.dumps(jsonable(ledger), indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    paths.write_private_bytes(
        ledger_path, data, option="ledger", inputs=inputs, overwrite=overwrite,
        owned=paths.LEDGER_JSON, private=False,
    )  # fmt: skip
    rec = dict(record)
    rec["release"] = {"ledger": str(Path(ledger_path).resolve()),
                      "ledger_sha256": hashlib.sha256(data).hexdigest()}  # fmt: skip
    text = json.dumps(jsonable(rec), indent=2, ensure_ascii=False) + "\n"
    paths.write_private_bytes(record_path, text.encode("utf-8"), option="provenance",
                              inputs=inputs, overwrite=overwrite, owned=rule.owned)  # fmt: skip
