"""The ``searchveil`` command line. Each command group lives in its own module here and is
registered below; every command accepts ``--json``. Exit codes: 0 ok, 2 user error (message on
stderr, nothing written), 1 internal bug."""

from __future__ import annotations

import importlib
import sys

import typer

from searchveil.version import __version__

# Modules that add commands: each defines ``register(app: typer.Typer) -> None``.
COMMAND_MODULES = [
    "searchveil.cli.stats",
    "searchveil.cli.synth",
    "searchveil.cli.release",
    "searchveil.cli.params",
    "searchveil.cli.sanitize",
    "searchveil.cli.evaluate",
    "searchveil.cli.demo",
    "searchveil.cli.social",
    "searchveil.cli.attack",
    "searchveil.cli.tabular",
    "searchveil.cli.cels",
    "searchveil.cli.budget",
]
# top-level command -> its module, where the name is not the module's last part (start-up:
# ``main`` imports only the module of the command it runs, so ``searchveil release ...`` does
# not load matplotlib, scipy.stats or Spark; help and unknown commands load every module)
_OWNER = {
    "compare": "searchveil.cli.evaluate",
    "reproduce": "searchveil.cli.evaluate",
    "synth-check": "searchveil.cli.synth",
}


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"searchveil {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="print the version"
    ),
) -> None:
    """Private releases of search logs, tables and social recommendations.

    Search logs (Korolova, ZEALOUS, Hong et al., CELS), tables (Fouad et al.), social
    recommendations and the attacks they answer."""


def build_app(modules: list[str] | None = None) -> typer.Typer:
    """The CLI with the commands of ``modules`` (default: every module)."""
    a = typer.Typer(
        name="searchveil",
        help="Publish search logs, tables and social graphs with differential privacy.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    a.callback()(_root)
    for name in COMMAND_MODULES if modules is None else modules:
        importlib.import_module(name).register(a)
    return a


# commands of a group defined outside the group's own module: (group, command) -> module
_SUB_OWNER = {("release", "ump"): "searchveil.cli.sanitize"}


def _modules_for(argv: list[str]) -> list[str] | None:
    """The modules that define the command in ``argv``: its group's module, and the module of
    a subcommand defined elsewhere (``release ump``; every such module for the group's own
    help). None: all of them."""
    words = [x for x in argv if not x.startswith("-")]
    if not words:
        return None
    first = words[0]
    owner = _OWNER.get(first, f"searchveil.cli.{first}")
    if owner not in COMMAND_MODULES:
        return None
    if len(words) > 1 and (first, words[1]) in _SUB_OWNER:
        return [owner, _SUB_OWNER[(first, words[1])]]
    if len(words) > 1:
        return [owner]
    return [owner, *sorted({m for (g, _), m in _SUB_OWNER.items() if g == first})]


def __getattr__(name: str) -> typer.Typer:
    """``app``: the whole CLI, built on first use (``from searchveil.cli import app``)."""
    if name == "app":
        full = build_app()
        globals()["app"] = full
        return full
    raise AttributeError(name)


def main() -> None:
    argv = sys.argv[1:]
    if argv == ["--version"]:
        typer.echo(f"searchveil {__version__}")  # what the eager --version option prints
        return
    build_app(_modules_for(argv))()


__all__ = ["app", "build_app", "main"]
