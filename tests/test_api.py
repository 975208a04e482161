"""The public surface: exports import, every CLI command has --help, docs exist."""

from __future__ import annotations

import importlib
import pkgutil
import types

import pytest
from typer.testing import CliRunner

import searchveil
from searchveil.cli import app

runner = CliRunner()


def test_all_exports_import() -> None:
    for name in searchveil.__all__:
        assert hasattr(searchveil, name), name


# the one declared public surface (searchveil/__init__): a name is added here deliberately
PUBLIC_SURFACE = {
    "__version__", "Budget", "BudgetExceededError", "ColumnMapping", "InputFormatError",
    "InternalError", "InvalidParameterError", "KAnonParams", "KorolovaParams",
    "OutputExistsError", "PrivacyCost", "Relation", "SearchLog", "SearchveilError",
    "SecureRandom", "SeededRandom", "SelectionParams", "Session", "ZealousParams", "make_rng",
    "read_log", "release_file", "release_kanon", "release_korolova", "release_table",
    "release_zealous",
    "write_release",
}  # fmt: skip


def test_the_public_surface_is_declared() -> None:
    assert set(searchveil.__all__) == PUBLIC_SURFACE
    # nothing else is bound at the top level but the package's own submodules
    public = {n for n, v in vars(searchveil).items()
              if not n.startswith("_") and not isinstance(v, types.ModuleType)}  # fmt: skip
    assert public == PUBLIC_SURFACE - {"__version__"}, public ^ PUBLIC_SURFACE


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


# the public paths other packages code against (docs/architecture.md); moving one breaks them
PUBLIC_PATHS = {
    "searchveil.errors": ["SearchveilError", "InvalidParameterError", "InputFormatError",
                          "BudgetExceededError", "BudgetFileError", "OutputExistsError",
                          "InternalError"],
    "searchveil.validate": ["check_positive", "check_nonnegative", "check_probability",
                            "check_int", "check_choice"],
    "searchveil.rng": ["RandomSource", "make_rng", "SeededRandom", "SecureRandom"],
    "searchveil.io.ledger": ["build_ledger", "ReleaseWriter", "write_json_atomic",
                             "write_text_atomic", "read_ledger", "LEDGER_NAME",
                             "check_release_dir"],
    "searchveil.mechanisms.noise": ["DiscreteLaplace", "DiscreteGaussian", "discrete_laplace",
                                    "discrete_gaussian"],
    "searchveil.mechanisms.accounting": ["Budget", "check_budget", "BUDGET_TOLERANCE"],
    "searchveil.mechanisms.budget": ["PrivacyCost", "Part", "Relation", "NoGuarantee",
                                     "Accountant", "in_relation", "zcdp_epsilon"],
    "searchveil.mechanisms.budget_file": ["DatasetBudget", "init_budget"],
    "searchveil.session": ["Session"],
    "searchveil.report.html": ["page", "table", "img", "fig_to_data_uri", "write_report", "esc",
                               "fmt", "pct"],
    "searchveil.audit": ["clopper_pearson", "epsilon_lower_bound", "audit_event"],
    "searchveil.cli._common": ["emit", "run", "progress", "JsonOpt", "SeedOpt", "OutDirOpt",
                               "OverwriteOpt", "InputArg", "reader_kwargs", "BudgetOpt",
                               "charged"],
    "searchveil.release.ump": ["UmpParams", "release_ump", "constraint_matrix", "solve_oump",
                               "solve_fump", "solve_dump", "sample_users", "ump_metrics",
                               "reproduce_tables", "lp_relaxation"],
    "searchveil.release.counts": ["BoundedCounts", "count_by"],
    "searchveil.release.histogram": ["HistogramRelease", "write_release", "noisy_counts",
                                     "noisy_threshold"],
    "searchveil.mechanisms.threshold": ["exact_threshold_privacy", "keep_probability",
                                        "korolova_solve_exact"],
    "searchveil.release.advice": ["korolova_advice", "zealous_advice"],
    "searchveil.cli.params": ["korolova_advice", "zealous_advice"],
    "searchveil.engines": ["Engine", "make_engine"],
    "searchveil.release.run": ["release_file", "run_release"],
    "searchveil.evaluate.reproduce": ["default_log_path", "run_experiments"],
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(PUBLIC_PATHS))
def test_public_paths_stay_importable(module: str) -> None:
    mod = importlib.import_module(module)
    missing = [n for n in PUBLIC_PATHS[module] if not hasattr(mod, n)]
    assert not missing, (module, missing)


def test_the_version_is_written_once() -> None:
    import tomllib
    from pathlib import Path

    from searchveil.version import __version__

    root = Path(__file__).resolve().parents[1]
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "searchveil.version.__version__"
    assert searchveil.__version__ == __version__
    assert __version__.count(".") == 2
