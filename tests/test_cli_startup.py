"""Start-up: a command loads only the modules it needs (issue 33; docs/performance.md measures
the time). ``main`` imports the CLI module of the command it runs and nothing else (the command
registry, ``searchveil.cli.COMMAND_MODULES``); each module imports at its top only what its
commands use. Each case runs in a fresh interpreter (what is imported is per process) and lists
the heavy modules it loaded: a release of a small file must not pay for the UMP solvers
(scipy.optimize), the reports (matplotlib), Spark, the AIM/MST comparators (jax), the CELS
cryptography, the other families, or pydantic (typer 0.29 imports it for every command:
the project pins typer below 0.29)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[1] / "src/searchveil/data/aol-gayo-avello-215-users.tsv"
# never loaded by `release korolova|zealous|kanon` (its help, or a release of a small text file)
HEAVY = (
    "scipy", "matplotlib", "pyspark", "pandas", "pyarrow", "jax", "mbi", "cryptography",
    "nacl", "gmpy2", "hypothesis", "isal", "pydantic",
    "searchveil.release.ump", "searchveil.cli.sanitize", "searchveil.cels",
    "searchveil.tabular", "searchveil.social", "searchveil.attacks", "searchveil.evaluate",
    "searchveil.synth", "searchveil.report.evaluation", "searchveil.report.demo",
)  # fmt: skip
# a release with --json draws nothing: rich (≈ 40 ms to import) is not loaded either
DRAWING = ("rich",)
CODE = (
    "import json, sys\n"
    "from searchveil.cli import main\n"
    "sys.argv = ['searchveil', *{argv!r}]\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
    "print('LOADED', json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))\n"
)


def _loaded(argv: list[str], heavy: tuple[str, ...] = HEAVY) -> tuple[str, list[str]]:
    """What the command printed, and the ``heavy`` modules it loaded."""
    r = subprocess.run([sys.executable, "-c", CODE.format(argv=argv, heavy=heavy)],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    out, _, tail = r.stdout.rpartition("LOADED ")
    return out, json.loads(tail)


@pytest.mark.parametrize("cmd", ["korolova", "zealous", "kanon"])
def test_release_help_loads_nothing_heavy(cmd: str) -> None:
    out, loaded = _loaded(["release", cmd, "--help"])
    assert "--out" in out and loaded == [], loaded


def test_a_small_release_loads_nothing_heavy(tmp_path: Path) -> None:
    small = tmp_path / "small.tsv"
    small.write_text("".join(SAMPLE.read_text(encoding="utf-8").splitlines(True)[:101]))
    out, loaded = _loaded(["release", "korolova", str(small), "--out", str(tmp_path / "rel"),
                           "--epsilon", "2.3", "--delta", "1e-7", "--max-queries", "5",
                           "--max-users", "700000", "--json"], HEAVY + DRAWING)  # fmt: skip
    assert json.loads(out)["mechanism"] and (tmp_path / "rel" / "ledger.json").exists()
    assert loaded == [], loaded


def test_the_guard_sees_a_heavy_import() -> None:
    """The check is not vacuous: `release ump` does load the UMP solvers."""
    out, loaded = _loaded(["release", "ump", "--help"])
    assert "--objective" in out
    assert "searchveil.release.ump" in loaded and "searchveil.cli.sanitize" in loaded
    _, drawn = _loaded(["release", "korolova", "--help"], DRAWING)  # the help screen is rich's
    assert drawn == ["rich"]


def test_release_group_help_lists_every_command() -> None:
    out, _ = _loaded(["release", "--help"])
    for cmd in ("korolova", "zealous", "kanon", "ump"):
        assert cmd in out
