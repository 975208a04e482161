"""CLI commands (being written in this session; registered so that the command list is stable)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Adds this module's commands to the app."""
    return None
