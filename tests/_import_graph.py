"""scripts/import_graph.py loaded once as the module ``import_graph`` (the architecture and
house-rule tests read the package's import graph through it)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "import_graph.py"


def load() -> ModuleType:
    if "import_graph" in sys.modules:
        return sys.modules["import_graph"]
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["import_graph"] = mod
    spec.loader.exec_module(mod)
    return mod
