"""The version of searchveil, written once: ``pyproject.toml`` reads it from here
(``[tool.setuptools.dynamic]``), the package exports it as ``searchveil.__version__`` and every
ledger records it. A module of its own, on the lowest floor, so that the ledger writer does not
import the package's ``__init__`` (which imports the releases)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
