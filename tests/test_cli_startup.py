"""Start-up: a command loads only the modules it needs (issue 25 moved ``ump`` into the
``release`` group; the UMP solvers and scipy.optimize must not come with ``release korolova``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

CODE = (
    "import sys\n"
    "from searchveil.cli import main\n"
    "sys.argv = ['searchveil', *{argv!r}]\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
    "print('LOADED', sorted(m for m in ('scipy.optimize', 'searchveil.cli.sanitize',"
    " 'searchveil.release.ump') if m in sys.modules))\n"
)


def _run(argv: list[str]) -> str:
    r = subprocess.run([sys.executable, "-c", CODE.format(argv=argv)], capture_output=True,
                       text=True, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("cmd", ["korolova", "zealous", "kanon"])
def test_histogram_releases_do_not_load_the_ump_solvers(cmd: str) -> None:
    out = _run(["release", cmd, "--help"])
    assert "--out" in out and "LOADED []" in out, out[-400:]


def test_release_ump_and_the_group_help_load_it() -> None:
    out = _run(["release", "ump", "--help"])
    assert "--objective" in out and "'searchveil.release.ump'" in out, out[-400:]
    group = _run(["release", "--help"])
    for cmd in ("korolova", "zealous", "kanon", "ump"):
        assert cmd in group
