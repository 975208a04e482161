"""CELS parties are started through a library entry point (issue 34): ``run_local`` hands each
party its :class:`~searchveil.cels.party_main.PartySpec` (the params object, as JSON, 0600)
and starts ``python -m searchveil.cels.party_main SPEC`` — no module under
``src/searchveil/cels/`` builds a command line of the CLI."""

from __future__ import annotations

import ast
import os
import re
import stat
import sys
from pathlib import Path

import pytest

from searchveil.cels import party_main, runner
from searchveil.cels.faults import TEST_HOOKS_ENV
from searchveil.cels.params import CelsParams
from searchveil.cels.party_main import (
    PartySpec,
    params_from_json,
    params_to_json,
    read_spec,
    write_spec,
)
from searchveil.errors import InputFormatError, InvalidParameterError
from test_cels_protocol import _write_shares

CELS = Path(__file__).resolve().parents[1] / "src" / "searchveil" / "cels"
OPTION = re.compile(r"--[a-z][a-z0-9]*(-[a-z0-9]+)*")
# ints on purpose (the parties receive floats)
E2E = CelsParams(epsilon=2, delta=1e-5, max_users=10_000, split=(9, 1), union_epsilon=1)
COND = CelsParams(epsilon=2.0, delta=0.3, objective="kl", key_bits=512, mode="conditional",
                  output_share=0.25, breakpoints=9, min_count=2)  # fmt: skip


def _strings(tree: ast.AST) -> list[str]:
    """Every string constant that is not a docstring."""
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    return [
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
    ]


def test_no_cels_module_spells_a_cli_option() -> None:
    """An argv element such as ``"--epsilon"`` (a string that is exactly an option) or a
    ``"searchveil"`` program name appears in no module of the library's CELS package."""
    found = {}
    for p in sorted(CELS.glob("*.py")):
        bad = [s for s in _strings(ast.parse(p.read_text(encoding="utf-8")))
               if OPTION.fullmatch(s.strip()) or s.strip() == "searchveil"]  # fmt: skip
        if bad:
            found[p.name] = bad
    assert len(list(CELS.glob("*.py"))) > 15
    assert found == {}


def test_the_option_check_would_see_an_argv() -> None:
    tree = ast.parse('cmd = ["searchveil", "cels", "party", "--epsilon", repr(eps)]\n')
    assert [s for s in _strings(tree) if OPTION.fullmatch(s)] == ["--epsilon"]


@pytest.mark.parametrize("params", [E2E, COND], ids=["e2e", "conditional"])
def test_params_round_trip(params: CelsParams) -> None:
    back = params_from_json(params_to_json(params))
    assert back == params
    # floats as the parties have always received them (the ledger prints them)
    assert isinstance(back.epsilon, float) and isinstance(back.delta, float)
    assert back.union_epsilon is None or isinstance(back.union_epsilon, float)
    if params.split is not None:
        assert back.split == (9.0, 1.0) and all(isinstance(w, float) for w in back.split)
    # the e2e mode's m stays unresolved: each party applies the default rule itself, so the
    # ledger's max_pairs_rule is the default's, as in `cels local`
    assert back.max_pairs == params.max_pairs


def test_spec_round_trip_owner_only(tmp_path: Path) -> None:
    spec = PartySpec(config=tmp_path / "parties.toml", me=2, params=COND, out=tmp_path / "P2",
                     share=tmp_path / "s.tsv", transcript=tmp_path / "P2.bin", seed=9,
                     workers=0, fault="union:pause", status=tmp_path / "P2.status.json",
                     parent_pid=os.getpid())  # fmt: skip
    path = tmp_path / "P2.spec.json"
    write_spec(path, spec)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_spec(path) == spec


@pytest.mark.parametrize(
    "text", ["not json", "[]", '{"me": 1}'], ids=["not-json", "not-object", "missing-fields"]
)
def test_bad_spec_is_a_typed_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "spec.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputFormatError, match="spec"):
        read_spec(path)


def test_spec_params_are_validated_again(tmp_path: Path) -> None:
    d = params_to_json(E2E) | {"objective": "kl"}  # an option of the other mode
    with pytest.raises(InvalidParameterError, match="objective"):
        params_from_json(d)
    d = params_to_json(E2E) | {"union_epsilon": None}  # required in the e2e mode
    with pytest.raises(InvalidParameterError, match="union-epsilon"):
        params_from_json(d)


def test_run_local_starts_the_library_entry_point(tmp_path: Path, monkeypatch) -> None:
    """``run_local`` starts ``python -m searchveil.cels.party_main <spec>`` for every party:
    the spec holds the very params object, the party's seed and its status file; no
    ``searchveil`` command line; the test-hook variable only with faults."""
    shares = _write_shares(tmp_path, users=12)
    seen: list[tuple[list[str], PartySpec, str | None]] = []

    class Stop(Exception):
        pass

    def fake_popen(argv: list[str], **kw):  # noqa: ANN202
        spec_path = Path(argv[-1])
        seen.append((argv, read_spec(spec_path), kw["env"].get(TEST_HOOKS_ENV)))
        assert stat.S_IMODE(spec_path.stat().st_mode) == 0o600
        raise Stop

    monkeypatch.setattr(runner.subprocess, "Popen", fake_popen)
    with pytest.raises(Stop):
        runner.run_local(shares, COND, tmp_path / "out", seed=5, timeout=30,
                         faults={0: "union:pause"})  # fmt: skip
    argv, spec, hooks = seen[0]
    assert argv == [sys.executable, "-m", "searchveil.cels.party_main", argv[-1]]
    assert spec.params == COND and spec.me == 0 and spec.share is None and spec.seed == 5
    assert spec.fault == "union:pause" and spec.parent_pid == os.getpid()
    assert spec.status is not None and spec.status.name == "P0.status.json"
    assert hooks == "1"
    assert not (tmp_path / "out").exists()


def test_party_main_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As the CLI: exit 2 with ``error: …`` on a spec it cannot use, 2 with the usage on bad
    arguments; nothing written. (Every ``run_local`` test starts it as ``python -m``.)"""
    bad = tmp_path / "spec.json"
    bad.write_text("{}", encoding="utf-8")
    assert party_main.main([str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"error: {bad}: a CELS party spec has the fields")
    assert party_main.main([]) == 2
    assert capsys.readouterr().err.startswith("usage: python -m searchveil.cels.party_main")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.json"]
