"""House rules of issue 25, read from the code (the import graph of ``scripts/import_graph.py``
and a scan of the sources):

* the engines are backends: no import from ``searchveil.engines.*`` of a release family or of
  the parameter advisor (``release.*``, ``tabular``, ``cels``, ``social``, ``attacks``,
  ``synth``, ``params``) — a family gives an engine a ``BoundingPlan``, never its parameters;
* the CLI does not drive the engines: no import from ``searchveil.cli.*`` of ``engines`` at all
  (the release commands go through :func:`searchveil.release.run.release_file`);
* a file's format is detected in one place, :mod:`searchveil.io.formats`: no magic bytes
  (``b"PAR1"``, ``b"\\x1f\\x8b"``) and no ``.parquet`` / ``.gz`` / ``.tsv`` name tests elsewhere.
"""

from __future__ import annotations

import re
from pathlib import Path

from _import_graph import load

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "import_graph.py"
PKG = ROOT / "src" / "searchveil"


g = load()

FAMILIES = ("release", "tabular", "cels", "social", "attacks", "synth", "params")


def _under(module: str, package: str) -> bool:
    full = f"searchveil.{package}"
    return module == full or module.startswith(full + ".")


def test_the_engines_never_import_a_family() -> None:
    bad = sorted(
        f"{i.importer}:{i.line} imports {i.imported}"
        for i in g.imports()
        if _under(i.importer, "engines") and any(_under(i.imported, f) for f in FAMILIES)
    )
    assert bad == []


def test_the_cli_does_not_drive_the_engines() -> None:
    bad = sorted(
        f"{i.importer}:{i.line} imports {i.imported}"
        for i in g.imports()
        if _under(i.importer, "cli") and _under(i.imported, "engines")
    )
    assert bad == []


# magic bytes, and name tests for the container formats (``.suffix`` comparisons and
# ``endswith``) with .parquet / .gz / .tsv
_DETECTION = [
    re.compile(r"""b["']PAR1["']"""),
    re.compile(r"""b["']\\x1f\\x8b["']"""),
    re.compile(r"""\.suffix\b[^\n]*["']\.(parquet|gz|tsv)["']"""),
    re.compile(r"""endswith\([^\n]*["']\.(parquet|gz|tsv)["']"""),
]
FORMATS = "io/formats.py"
#: name tests that do not detect an input log's format: an OUTPUT format from a name the user
#: chose, the files of a release directory searchveil wrote itself, a non-log input
NOT_INPUT_DETECTION = {
    "io/ledger.py": "which files the release writer staged are text (its leak check)",
    "synth/files.py": "the synthetic log's output format from the --out name",
    "evaluate/_release.py": "the table files of a release directory searchveil wrote",
    "tabular/hierarchy.py": "ARX hierarchy files (not search logs)",
}


def detection_sites(root: Path = PKG) -> list[str]:
    hits = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == FORMATS or rel in NOT_INPUT_DETECTION:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(p.search(line) for p in _DETECTION):
                hits.append(f"{rel}:{n}: {line.strip()}")
    return hits


def test_formats_are_detected_only_in_io_formats() -> None:
    assert detection_sites() == []


def test_the_scan_sees_each_kind_of_detection(tmp_path: Path) -> None:
    (tmp_path / "io").mkdir()
    (tmp_path / "io" / "formats.py").write_text('MAGIC = b"PAR1"\n')  # the one allowed place
    (tmp_path / "a.py").write_text(
        'x = f.read(4) == b"PAR1"\n'
        'y = head == b"\\x1f\\x8b"\n'
        'z = path.suffix.lower() in (".parquet", ".pq")\n'
        'w = name.endswith(".gz")\n'
        'ok = name.endswith(".seq")\n'
    )
    hits = detection_sites(tmp_path)
    assert [h.split(":")[:2] for h in hits] == [["a.py", str(i)] for i in (1, 2, 3, 4)]
