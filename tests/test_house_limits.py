"""House limits (issue 25, docs/CONTRIBUTING.md): no function in ``src/`` over 120 lines, no
module over 700 lines — rooms that hold one thing. Counted from the AST (a function's lines
include its docstring and decorators' own lines are not counted)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "searchveil"
MAX_FUNCTION_LINES = 120
MAX_MODULE_LINES = 700


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def test_there_is_something_to_measure() -> None:
    assert len(_modules()) > 100


def test_no_module_over_700_lines() -> None:
    long = {
        str(p.relative_to(SRC)): n
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_function_over_120_lines() -> None:
    long: dict[str, int] = {}
    for p in _modules():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{p.relative_to(SRC)}:{node.name}"] = n
    assert long == {}
