"""The ``searchveil`` command line. Each command group lives in its own module here and is
registered below; every command accepts ``--json``. Exit codes: 0 ok, 2 user error (message on
stderr, nothing written), 1 internal bug."""

from __future__ import annotations

import importlib

import typer

from searchveil import __version__

app = typer.Typer(
    name="searchveil",
    help="Publish web search logs with differential-privacy guarantees.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Modules that add commands: each defines ``register(app: typer.Typer) -> None``.
COMMAND_MODULES = [
    "searchveil.cli.stats",
    "searchveil.cli.synth",
    "searchveil.cli.release",
    "searchveil.cli.params",
    "searchveil.cli.sanitize",
    "searchveil.cli.evaluate",
    "searchveil.cli.demo",
    "searchveil.cli.cels",
]


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"searchveil {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="print the version"
    ),
) -> None:
    """searchveil: private releases of search logs (Korolova, ZEALOUS, Hong et al.)."""


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    app()


__all__ = ["app", "main"]
