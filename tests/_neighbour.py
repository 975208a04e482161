"""Helpers of the neighbour audit (issue 21): run a release path on D and a neighbour D′ with the
same seeded randomness and compare everything it publishes.

A release directory is what a data holder hands out. For an (ε, δ)-DP release, whatever it holds
that is *not* drawn from the mechanism's noise must be a function of public inputs only, so on D
and D′ under the same seed:

* the public ledgers are identical apart from the creation time and the fields the mechanism
  declares noisy (``noisy``, and ``outputs.*.rows`` when the released tables' sizes are noisy);
* the directory holds exactly the files the family declares public;
* no file in it holds the input's path, SHA-256 or exact size.

Used by tests/test_neighbour_audit.py and by each family's own neighbour tests.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "public_ledger_diff",
    "assert_same_public_ledger",
    "assert_only_public_files",
    "assert_no_private_traces",
    "assert_provenance_beside",
    "file_sha256",
]

# always allowed to differ between two runs
ALWAYS_VARIES = ("created_utc",)


def file_sha256(path: str | os.PathLike[str]) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _flatten(x: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(x, dict):
        for k, v in x.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        if not x:
            out[prefix] = []
    else:
        out[prefix] = x
    return out


def _matches(path: str, patterns: Iterable[str]) -> bool:
    """``path`` is covered by a pattern: equal, or below it (``a.b`` covers ``a.b.c`` and
    ``a.b[0]``); ``*`` in a pattern matches one key (``outputs.*.rows``)."""
    parts = path.replace("[", ".[").split(".")
    for pat in patterns:
        pp = pat.replace("[", ".[").split(".")
        if len(pp) > len(parts):
            continue
        if all(a == "*" or a == b for a, b in zip(pp, parts, strict=False)):
            return True
    return False


def public_ledger_diff(
    dir_a: str | os.PathLike[str], dir_b: str | os.PathLike[str], *, noisy: Iterable[str] = ()
) -> list[str]:
    """The ledger fields (dotted paths) that differ between two releases, leaving out the
    creation time and the declared-noisy fields."""
    la = json.loads((Path(dir_a) / "ledger.json").read_text(encoding="utf-8"))
    lb = json.loads((Path(dir_b) / "ledger.json").read_text(encoding="utf-8"))
    fa, fb = _flatten(la), _flatten(lb)
    allowed = (*ALWAYS_VARIES, "noisy", *noisy)
    return sorted(
        k
        for k in set(fa) | set(fb)
        if fa.get(k, "<absent>") != fb.get(k, "<absent>") and not _matches(k, allowed)
    )


def assert_same_public_ledger(
    dir_a: str | os.PathLike[str], dir_b: str | os.PathLike[str], *, noisy: Iterable[str] = ()
) -> None:
    diff = public_ledger_diff(dir_a, dir_b, noisy=noisy)
    assert not diff, f"the public ledgers of D and D' differ in {diff}"


def assert_only_public_files(release_dir: str | os.PathLike[str], public: Iterable[str]) -> None:
    """The release directory holds exactly ``ledger.json`` and the declared public files."""
    names = sorted(p.name for p in Path(release_dir).iterdir())
    expected = sorted({"ledger.json", *public})
    assert names == expected, f"release holds {names}, the family declares {expected}"


def assert_no_private_traces(
    release_dir: str | os.PathLike[str],
    input_paths: Iterable[str | os.PathLike[str]],
    *,
    exact: dict[str, int] | None = None,
) -> None:
    """No file of the release holds an input's SHA-256 or path (absolute or as given), and the
    ledger has no key named like an exact count of the input outside the public subtrees
    (``exact``: e.g. {"rows": 20000, "users": 128} are looked for as ``"rows": 20000``)."""
    needles: list[str] = []
    for p in input_paths:
        p = Path(p)
        needles += [file_sha256(p), str(p.resolve()), str(p)]
    for f in sorted(Path(release_dir).rglob("*")):
        if not f.is_file():
            continue
        data = f.read_bytes()
        for n in needles:
            assert n.encode() not in data, f"{f.name} holds {n!r} (the private input's)"
    ledger = (Path(release_dir) / "ledger.json").read_text(encoding="utf-8")
    for key, value in (exact or {}).items():
        assert f'"{key}": {value}' not in ledger, f"the ledger states the exact {key}={value}"


def assert_provenance_beside(
    release_dir: str | os.PathLike[str], path: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """The private provenance record exists outside the release directory (``path``, default
    ``<release>.private.json`` beside it), is owner-only, says it is private in its first field
    and names the release; returns it."""
    d = Path(release_dir)
    p = Path(path) if path is not None else d.with_name(d.name + ".private.json")
    assert p.is_file(), f"no provenance record at {p}"
    assert d.resolve() not in p.resolve().parents, "the provenance record is inside the release"
    assert (os.stat(p).st_mode & 0o777) == 0o600, f"{p} is not owner-only"
    rec = json.loads(p.read_text(encoding="utf-8"))
    assert next(iter(rec)) == "PRIVATE" and rec["kind"] == "searchveil-provenance"
    ledger = (d / "ledger.json").read_bytes()
    assert rec["release"]["ledger_sha256"] == hashlib.sha256(ledger).hexdigest()
    return dict(rec)
