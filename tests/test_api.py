"""The public surface: exports import, every CLI command has --help, docs exist."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from typer.testing import CliRunner

import searchveil
from searchveil.cli import app

runner = CliRunner()


def test_all_exports_import() -> None:
    for name in searchveil.__all__:
        assert hasattr(searchveil, name), name


def test_every_module_imports() -> None:
    for mod in pkgutil.walk_packages(searchveil.__path__, "searchveil."):
        if ".engines.spark" in mod.name:
            continue  # needs pyspark at import time; covered by the spark-marked tests
        importlib.import_module(mod.name)


def _commands(group, prefix=()):
    """Yield (path, is_leaf) for every command."""
    import typer.main

    click_group = typer.main.get_command(group) if not hasattr(group, "commands") else group
    for name, cmd in getattr(click_group, "commands", {}).items():
        sub = getattr(cmd, "commands", None)
        yield (*prefix, name), not sub
        if sub:
            yield from _commands(cmd, (*prefix, name))


def test_every_command_has_help_and_json() -> None:
    cmds = dict(_commands(app))
    assert ("stats",) in cmds
    for path, leaf in cmds.items():
        r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0, (path, r.output)
        if leaf:
            assert "--json" in r.output, f"{' '.join(path)} has no --json"


def test_version() -> None:
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and searchveil.__version__ in r.output


@pytest.mark.parametrize("args", [["stats"], ["no-such-command"]])
def test_usage_errors_exit_2(args) -> None:
    r = runner.invoke(app, args)
    assert r.exit_code == 2
