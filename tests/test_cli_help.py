"""``searchveil --help`` and every group's ``--help`` show one line per command (issue 25).

A command's short help is the first paragraph of its docstring (or its ``short_help``): it must
be one complete line of at most 80 characters, so the help table never shows a sentence broken
over continuation rows."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from searchveil.cli import COMMANDS as REGISTRY
from searchveil.cli import build_app, listing_app

MAX_SHORT_HELP = 80
WIDTH = 120  # wide enough for the longest command name plus an 80-character help line


def _groups() -> dict[tuple[str, ...], Any]:
    """Every command group of the CLI by its path (() = the top-level app). (typer vendors
    its own click: groups are told by their ``commands``.)"""
    root: Any = typer.main.get_command(build_app())
    found: dict[tuple[str, ...], Any] = {}

    def walk(path: tuple[str, ...], group: Any) -> None:
        found[path] = group
        for name, cmd in group.commands.items():
            if hasattr(cmd, "commands"):
                walk((*path, name), cmd)

    walk((), root)
    return found


GROUPS = _groups()
COMMANDS = {
    (*path, name): cmd
    for path, group in GROUPS.items()
    for name, cmd in group.commands.items()
    if not cmd.hidden
}


def _short_help(cmd: Any) -> str:
    """What typer's help table shows for ``cmd``: the first paragraph of its help."""
    text = cmd.short_help or cmd.help or ""
    return inspect.cleandoc(text).split("\n\n")[0].strip()


@pytest.mark.parametrize("path", sorted(COMMANDS), ids=" ".join)
def test_short_help_is_one_line(path: tuple[str, ...]) -> None:
    shown = _short_help(COMMANDS[path])
    assert shown, f"searchveil {' '.join(path)} has no help"
    assert "\n" not in shown, f"searchveil {' '.join(path)}: help wraps: {shown!r}"
    assert len(shown) <= MAX_SHORT_HELP, (
        f"searchveil {' '.join(path)}: short help is {len(shown)} characters (> "
        f"{MAX_SHORT_HELP}); put the first sentence on its own line: {shown!r}"
    )


def _command_rows(output: str) -> list[str]:
    """The rows of the "Commands" panel of a rich help screen."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if "Commands" in line and "╭" in line)
    rows = []
    for line in lines[start + 1 :]:
        if line.startswith("╰"):
            break
        rows.append(line.strip("│").rstrip())
    return rows


@pytest.mark.parametrize("path", sorted(GROUPS), ids=lambda p: " ".join(("searchveil", *p)))
def test_help_screen_has_one_row_per_command(path: tuple[str, ...]) -> None:
    res = CliRunner().invoke(
        build_app(), [*path, "--help"], env={"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH)}
    )
    assert res.exit_code == 0, res.output
    rows = _command_rows(res.output)
    visible = sorted(n for n, c in GROUPS[path].commands.items() if not c.hidden)
    continuation = [r for r in rows if r.startswith("  ") or not r.strip()]
    assert not continuation, (
        f"searchveil {' '.join(path)} --help: wrapped rows {continuation} in\n" + res.output
    )
    assert sorted(r.split()[0] for r in rows) == visible


def test_app_help_is_one_line() -> None:
    """The app's own description (shown above the options) is one line too."""
    app = typer.main.get_command(build_app())
    assert app.help is not None
    first = inspect.cleandoc(app.help).split("\n\n")[0]
    assert "\n" not in first and len(first) <= MAX_SHORT_HELP


def test_the_registry_lists_what_the_modules_register() -> None:
    """``searchveil --help`` is answered from ``cli.COMMANDS`` without importing a command
    module: the table must name every top-level command, its module, its help line and its
    kind as the modules register them (edit the table with the command)."""
    root = GROUPS[()]
    assert list(REGISTRY) == list(root.commands)
    for name, entry in REGISTRY.items():
        alone: Any = typer.main.get_command(build_app([entry.module]))
        cmd = alone.commands[name]
        assert entry.help == _short_help(cmd), name
        assert entry.group == hasattr(cmd, "commands") and entry.hidden == cmd.hidden, name


@pytest.mark.parametrize("argv", [["--help"], [], ["no-such-command"], ["relase"]])
def test_the_registry_help_screen_is_the_full_one(argv: list[str]) -> None:
    env = {"COLUMNS": str(WIDTH), "TERMINAL_WIDTH": str(WIDTH)}
    full = CliRunner().invoke(build_app(), argv, env=env)
    listed = CliRunner().invoke(listing_app(), argv, env=env)
    assert (listed.exit_code, listed.output) == (full.exit_code, full.output)


def _helps(app: Any, path: tuple[str, ...] = ()) -> Any:
    for cmd in app.registered_commands:
        yield (*path, cmd.name or cmd.callback.__name__), cmd.help
    for grp in app.registered_groups:
        yield from _helps(grp.typer_instance, (*path, grp.name))


def test_help_paragraphs_are_not_wrapped_by_the_source() -> None:
    """typer keeps a docstring's single line breaks after its first paragraph, which showed
    the source's 100-column wrapping as ragged lines in a terminal: every paragraph of every
    command's help is one line (list items apart), and the screen rewraps it."""
    for path, text in _helps(build_app()):
        for para in (text or "").split("\n\n"):
            assert "\n" not in para, f"searchveil {' '.join(path)}: {para!r}"
    res = CliRunner().invoke(build_app(), ["evaluate", "--help"], env={"COLUMNS": "80"})
    lines = [line.rstrip() for line in res.output.splitlines()]
    top = lines[: next(i for i, line in enumerate(lines) if "╭" in line)]
    # a rewrapped paragraph fills its lines: only a paragraph's last line may be short
    for line, nxt in zip(top, top[1:], strict=False):
        if line.strip() and nxt.strip():
            assert len(line) > 60, f"ragged help line: {line!r}"


def test_unwrap_help_keeps_list_items_and_paragraphs() -> None:
    from searchveil.cli import unwrap_help

    text = "First line.\n\nA paragraph\nwrapped here.\n- one\n- two\n  continued\n\n\bkept\nas is"
    assert unwrap_help(text) == (
        "First line.\n\nA paragraph wrapped here.\n- one\n- two continued\n\n\bkept\nas is"
    )
