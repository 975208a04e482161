"""The ``searchveil`` command line. Each command group lives in its own module here and is
registered below; every command accepts ``--json``. Exit codes: 0 ok, 2 user error (message on
stderr, nothing written), 1 internal bug."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from typing import NamedTuple

import typer

from searchveil.version import __version__


# The command registry: each top-level command or group, the module that defines it, its
# one-line help and whether it is a group (hidden: a group kept under an old name). ``main``
# imports the module of the command it runs and nothing else, so ``searchveil release
# korolova`` loads neither matplotlib, scipy nor Spark; ``searchveil --help`` (and an unknown
# command) is answered from this table alone, importing no command module. Loading a command
# module by its name on first use is the package's one lazy import (docs/architecture.md);
# tests/test_cli_help.py checks this table against what the modules register.
class Entry(NamedTuple):
    module: str
    help: str
    group: bool = False
    hidden: bool = False


COMMANDS: dict[str, Entry] = {
    "stats": Entry(
        "searchveil.cli.stats",
        "Rows, users, query events, clicks, distinct items, sessions, per-user figures.",
    ),
    "synth": Entry(
        "searchveil.cli.synth",
        "Generate a synthetic AOL-layout log calibrated on a real sample (test data).",
    ),
    "synth-check": Entry(
        "searchveil.cli.synth",
        "Held-out check of the synthetic head against real logs (docs/synth.md).",
    ),
    "evaluate": Entry(
        "searchveil.cli.evaluate",
        "Utility of a release against its original log (for the data holder).",
    ),
    "compare": Entry(
        "searchveil.cli.evaluate",
        "Several mechanisms/settings at the same (ε, δ) on one input, side by side.",
    ),
    "reproduce": Entry(
        "searchveil.cli.evaluate",
        "Regenerate the papers' tables and trends, each beside the printed values.",
    ),
    "demo": Entry(
        "searchveil.cli.demo",
        "The main job: a private release of the AOL sample, and a synthetic d-curve.",
    ),
    "release": Entry(
        "searchveil.cli.release",
        "Private releases: korolova (query-click graph), zealous, kanon (baseline), ump.",
        group=True,
    ),
    "params": Entry(
        "searchveil.cli.params", "Parameter advisor (solve parameters or report ε, δ).", group=True
    ),
    "sanitize": Entry(
        "searchveil.cli.sanitize",
        "Old name of `release ump` (hidden; kept for one release).",
        group=True,
        hidden=True,
    ),
    "social": Entry(
        "searchveil.cli.social",
        "Private social recommendations (Korolova thesis ch. 5).",
        group=True,
    ),
    "attack": Entry(
        "searchveil.cli.attack",
        "Attack simulations (ch. 6 link stealing, ch. 2 ad targeting); not DP releases.",
        group=True,
    ),
    "tabular": Entry(
        "searchveil.cli.tabular", "Tabular releases over generalization hierarchies.", group=True
    ),
    "cels": Entry(
        "searchveil.cli.cels",
        "CELS: parties jointly publish one same-schema log (DP end to end by default).",
        group=True,
    ),
    "budget": Entry(
        "searchveil.cli.budget",
        "A dataset's privacy budget across releases: init, show, refund a pending charge.",
        group=True,
    ),
    "spark": Entry(
        "searchveil.cli.spark",
        "Spark engine setup: a class-data archive that halves a local JVM's start.",
        group=True,
    ),
}
# commands of a group defined outside the group's own module: (group, command) -> module
_SUB_OWNER = {("release", "ump"): "searchveil.cli.sanitize"}
# every module that adds commands (each defines ``register(app: typer.Typer) -> None``), in
# the order the full CLI registers them
COMMAND_MODULES = list(
    dict.fromkeys([*(e.module for e in COMMANDS.values()), *_SUB_OWNER.values()])
)


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


def _base_app() -> typer.Typer:
    a = typer.Typer(
        name="searchveil",
        help="Publish search logs, tables and social graphs with differential privacy.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    a.callback()(_root)
    return a


# a line that starts a list item keeps its own line in a help text
_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s")


def unwrap_help(text: str | None) -> str | None:
    """A help text as typer should show it: each paragraph (blank-line separated) one line,
    except list items (``- ``, ``* ``, ``1. ``), which keep their own lines. typer's
    rich help keeps a docstring's single line breaks after the first paragraph, so the source's
    wrapping at 100 columns showed as ragged lines in an 80-column terminal."""
    if not text:
        return text
    paragraphs = []
    for para in inspect.cleandoc(text).split("\n\n"):
        if para.startswith("\b"):  # click's "do not rewrap" marker
            paragraphs.append(para)
            continue
        lines: list[str] = []
        for line in para.splitlines():
            if lines and not _ITEM.match(line):
                lines[-1] = f"{lines[-1]} {line.strip()}"
            else:
                lines.append(line.rstrip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def _unwrap_helps(app: typer.Typer) -> None:
    """:func:`unwrap_help` on every command and group of ``app`` (their docstrings included)."""
    for cmd in app.registered_commands:
        cmd.help = unwrap_help(cmd.help or inspect.getdoc(cmd.callback))
    for grp in app.registered_groups:
        if isinstance(grp.help, str):
            grp.help = unwrap_help(grp.help)
        sub = grp.typer_instance
        if sub is not None:
            info = sub.info
            if isinstance(info.help, str):
                info.help = unwrap_help(info.help)
            _unwrap_helps(sub)


def build_app(modules: list[str] | None = None) -> typer.Typer:
    """The CLI with the commands of ``modules`` (default: every module)."""
    a = _base_app()
    for name in COMMAND_MODULES if modules is None else modules:
        importlib.import_module(name).register(a)
    _unwrap_helps(a)
    return a


def _modules_for(argv: list[str]) -> list[str] | None:
    """The modules that define the command in ``argv``: its group's module, and the module of
    a subcommand defined elsewhere (``release ump``; every such module for the group's own
    help). None: no command, or an unknown one (the registry answers)."""
    words = [x for x in argv if not x.startswith("-")]
    if not words or words[0] not in COMMANDS:
        return None
    first = words[0]
    owner = COMMANDS[first].module
    if len(words) > 1 and (first, words[1]) in _SUB_OWNER:
        return [owner, _SUB_OWNER[(first, words[1])]]
    if len(words) > 1:
        return [owner]
    return [owner, *sorted({m for (g, _), m in _SUB_OWNER.items() if g == first})]


def _unloaded(_: typer.Context) -> None:
    """Stands in for a command whose module is not loaded (never run: ``main`` loads the
    module of the command it runs)."""


def listing_app() -> typer.Typer:
    """The CLI as ``searchveil --help`` shows it, from the registry alone: every command and
    group with its one-line help, no command module imported."""
    a = _base_app()
    for name, e in COMMANDS.items():
        if e.group:
            a.add_typer(typer.Typer(help=e.help), name=name, hidden=e.hidden)
        else:
            a.command(name, help=e.help, hidden=e.hidden)(_unloaded)
    return a


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
    modules = _modules_for(argv)
    (listing_app() if modules is None else build_app(modules))()


__all__ = [
    "COMMANDS", "COMMAND_MODULES", "Entry", "app", "build_app", "listing_app", "main", "unwrap_help"
]  # fmt: skip
