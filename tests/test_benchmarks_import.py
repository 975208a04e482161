"""Every benchmark imports (issue 34): docs/performance.md tells users to run them, so a rename in
the package must not leave one pointing at a module or a name that no longer exists.

Each ``benchmarks/*.py`` is loaded as a module (its ``main`` guarded by ``__name__``, so nothing
runs), and every ``from searchveil... import name`` it holds — at module top *or* inside a
function, where the optional Spark ones live — is resolved statically: the module's file exists
and defines (or imports, or is the package of) the name. No PySpark is imported."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
SRC = ROOT / "src"
BENCHMARKS = sorted(BENCH.glob("*.py"))


def _module_file(module: str) -> Path | None:
    """The source file of ``searchveil.a.b`` in this checkout (a module or a package)."""
    base = SRC.joinpath(*module.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.exists():
            return cand
    return None


def _defined_names(path: Path) -> set[str]:
    """Names bound at the top level of a module: functions, classes, assignments, imports."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                names |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _unresolved(path: Path) -> list[str]:
    bad = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names if a.name.split(".")[0] == "searchveil"]
            missing = [m for m in mods if _module_file(m) is None]
            bad += [f"{path.name}:{node.lineno}: no module {m}" for m in missing]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "searchveil":
            assert node.module is not None
            target = _module_file(node.module)
            if target is None:
                bad.append(f"{path.name}:{node.lineno}: no module {node.module}")
                continue
            defined = _defined_names(target)
            for a in node.names:
                if a.name not in defined and _module_file(f"{node.module}.{a.name}") is None:
                    bad.append(f"{path.name}:{node.lineno}: {node.module} has no {a.name}")
    return bad


def test_there_are_benchmarks() -> None:
    assert len(BENCHMARKS) >= 10


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_searchveil_import_of_a_benchmark_resolves(path: Path) -> None:
    assert _unresolved(path) == []


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_every_benchmark_imports(path: Path) -> None:
    name = f"_bench_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    assert callable(getattr(module, "main", None)), f"{path.name} has no main()"


def test_the_static_check_catches_a_missing_name(tmp_path: Path) -> None:
    bad = tmp_path / "bench.py"
    bad.write_text(
        "def main():\n"
        "    from searchveil.params import no_such_name\n"
        "    from searchveil.no_such_module import x\n",
        encoding="utf-8",
    )
    assert _unresolved(bad) == [
        "bench.py:2: searchveil.params has no no_such_name",
        "bench.py:3: no module searchveil.no_such_module",
    ]
