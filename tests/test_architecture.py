"""The architecture holds: the import graph of ``searchveil`` (read from the source by
``scripts/import_graph.py``) has no cycle, no module imports one above its floor, no module
imports another's ``_private`` name (or a private module from outside its package), no
function-local import but the one optional engine, no module loaded by its name but by the CLI
command registry; and the committed picture
(docs/architecture.md, docs/import-graph.dot) is the code's."""

from __future__ import annotations

from pathlib import Path

import pytest

from _import_graph import load

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "import_graph.py"


g = load()


def test_the_package_keeps_its_architecture() -> None:
    assert g.problems() == []


def test_every_module_is_on_a_floor_and_the_graph_is_real() -> None:
    mods = g.modules()
    assert len(mods) > 50
    floors = {m: g.LAYERS[g.floor_of(m)[0]][0] for m in mods}
    assert floors["searchveil.errors"] == "core"
    assert floors["searchveil.report.html"] == "io"  # style primitives, usable by families
    assert floors["searchveil.report"] == "report"
    assert floors["searchveil.release.ump.solvers"] == "families"
    assert floors["searchveil.cli.release"] == "cli"
    edges = {(i.importer, i.imported) for i in g.imports()}
    assert ("searchveil.release.korolova.release", "searchveil.params") in edges
    assert ("searchveil.engines.backends", "searchveil.engines.spark") in edges  # the guarded one


@pytest.mark.parametrize("family", ["cels", "tabular", "social", "attacks"])
def test_the_coming_families_have_a_floor(family: str) -> None:
    i, _ = g.floor_of(f"searchveil.{family}.anything")
    assert g.LAYERS[i][0] == "families"
    assert g.floor_of("searchveil.report.html")[0] < i  # they may build reports with it
    assert g.floor_of("searchveil.release.ump")[0] == i  # and use UMP's public API sideways


FAKE = {
    "__init__.py": "",
    "errors.py": "",
    "validate.py": "from searchveil import errors\n",
    "rng.py": "from searchveil.params import x\n",  # upward
    "params.py": "x = 1\n",
    "io/__init__.py": "",
    "io/readers.py": "from searchveil.io.ledger import y\n",  # cycle with ledger
    "io/ledger.py": "from searchveil.io.readers import _hidden\ny = 1\n",  # cycle + private
    "release/__init__.py": "",
    "release/_impl.py": "",
    "release/a.py": "from searchveil.release import _impl\n",  # private module, same package
    "engines/__init__.py": "",
    "engines/x.py": "from searchveil.release._impl import z\n"  # private module, outside
    "def f():\n    from searchveil.errors import E\n",  # local import
    "engines/y.py": "import importlib\nm = importlib.import_module('searchveil.errors')\n",
    "cels/__init__.py": "from searchveil.release.a import q\n",  # sideways: allowed
    "release/b.py": "from searchveil.cels import w\n",  # ... but not both ways
    "newthing.py": "",  # on no floor
}


def _fake_tree(tmp_path: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = tmp_path / "src" / "searchveil" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_the_checks_catch_each_kind_of_breach(tmp_path: Path, monkeypatch) -> None:
    _fake_tree(tmp_path, FAKE)
    monkeypatch.setattr(g, "SRC", tmp_path / "src")
    errs = g.problems()
    assert errs == ["unplaced: searchveil.newthing is on no floor: add it to LAYERS in "
                    "scripts/import_graph.py"]  # fmt: skip
    (tmp_path / "src" / "searchveil" / "newthing.py").unlink()
    errs = "\n".join(g.problems())
    assert "upward: searchveil.rng:1 (core) imports searchveil.params (params)" in errs
    assert "module cycle: searchveil.io.ledger -> searchveil.io.readers" in errs
    assert "private: searchveil.io.ledger:1 imports ['_hidden']" in errs
    assert "searchveil.release.a" not in errs  # a private module inside its own package
    assert "private: searchveil.engines.x:1 imports searchveil.release._impl from outside" in errs
    assert "local import: searchveil.engines.x:3 imports searchveil.errors" in errs
    assert "dynamic import: searchveil.engines.y:2 loads a module by its name" in errs
    assert "package cycle: cels <-> release" in errs


def test_the_committed_picture_is_the_code(capsys: pytest.CaptureFixture[str]) -> None:
    """``python scripts/import_graph.py --check`` (its ``main``, run here in-process)."""
    assert g.main(["--check"]) == 0, capsys.readouterr().out


def test_the_picture_names_every_floor() -> None:
    text = g.mermaid()
    for name, _ in g.LAYERS:
        assert f": {name}" in text
    assert "n_release --> n_params" in text
    assert "n_cli --> n_release" in text
