"""Option groups (cli/options.py): a group's options are declared once, in its type; a command
that takes the type shows them (under the group's panel) and receives the built object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from searchveil.cli import build_app
from searchveil.cli._common import JsonOpt
from searchveil.cli.options import GROUPS, Output, command, option_group, register_group
from searchveil.errors import InvalidParameterError

WIDE = {"COLUMNS": "200", "TERMINAL_WIDTH": "200"}


@option_group(panel="Inner things")
@dataclass(frozen=True)
class Inner:
    depth: Annotated[int, typer.Option("--depth", help="how deep")] = 1


@option_group()
@dataclass(frozen=True)
class Outer:
    name: Annotated[str, typer.Option("--name", help="a name")]
    inner: Inner
    loud: Annotated[bool, typer.Option("--loud", help="shout")] = False


class Checked:
    def __init__(self, level: int) -> None:
        self.level = level


def checked(*, level: Annotated[int, typer.Option("--level", help="0 to 3")] = 0) -> Checked:
    if not 0 <= level <= 3:
        raise InvalidParameterError("level", level, "0 to 3")
    return Checked(level)


register_group(Checked, build=checked)
SEEN: list[object] = []


@command(omit=("loud",), replace={"depth": Annotated[int, typer.Option("--depth", help="ours")]})
def demo(
    word: Annotated[str, typer.Argument(help="a word")],
    *,
    outer: Outer,
    check: Checked,
    json_out: JsonOpt = False,
) -> None:
    """A command with groups."""
    SEEN.append((word, outer, check.level, json_out))


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("demo")(demo)
    app.command("other")(lambda: None)  # a group of two commands: `demo` is a subcommand
    return app


def test_the_groups_options_are_the_commands_and_it_receives_the_built_objects() -> None:
    SEEN.clear()
    r = CliRunner().invoke(_app(), ["demo", "hi", "--name", "n", "--depth", "3", "--level", "2"])
    assert r.exit_code == 0, r.output
    assert SEEN == [("hi", Outer(name="n", inner=Inner(depth=3), loud=False), 2, False)]


def test_help_shows_each_groups_options_once_omit_and_replace_applied() -> None:
    text = CliRunner().invoke(_app(), ["demo", "--help"], env=WIDE).output
    assert "--name" in text and "a name" in text and "--level" in text
    assert "--loud" not in text  # omitted: the built Outer gets its default
    assert "ours" in text and "how deep" not in text  # replaced for this command only
    panels = [line for line in text.splitlines() if line.startswith("╭")]
    assert any("Inner things" in p for p in panels)  # the inner group's panel


def test_a_builders_user_error_exits_2_with_its_message_and_runs_nothing() -> None:
    SEEN.clear()
    r = CliRunner().invoke(_app(), ["demo", "hi", "--name", "n", "--level", "9"])
    assert r.exit_code == 2 and "level" in r.output and SEEN == []


def test_omitting_or_replacing_an_unknown_option_is_refused() -> None:
    with pytest.raises(TypeError, match="nope"):

        @command(omit=("nope",))
        def bad(outer: Outer) -> None: ...


def test_the_release_commands_share_the_output_group() -> None:
    """One declaration of --out, --overwrite, ...: every command taking Output shows the same
    help for them (cels and tabular replace --provenance, and say so; release kanon replaces
    --budget, which it takes only to refuse)."""
    assert Output in GROUPS
    root = typer.main.get_command(build_app())
    seen: dict[str, set[str | None]] = {}
    for group in ("release", "tabular", "social", "cels"):
        for name, cmd in root.commands[group].commands.items():  # type: ignore[attr-defined]
            for p in cmd.params:
                if (group, name, p.opts[:1]) == ("release", "kanon", ["--budget"]):
                    assert p.help.startswith("refused: k-anonymity is not differentially")
                    continue
                if p.opts and p.opts[0] in ("--out", "--overwrite", "--budget", "--seed"):
                    seen.setdefault(p.opts[0], set()).add(p.help)
    assert set(seen) == {"--out", "--overwrite", "--budget", "--seed"}
    assert all(len(helps) == 1 for helps in seen.values()), seen
