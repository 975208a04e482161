"""Issue 30, item 2: crash safety, by fault injection.

A release process is killed with SIGKILL at random points — at a random time of its run, or
0-150 ms after its staging directory appears (the write and the swap, where a kill does harm)
— for ``release korolova``, ``tabular anonymize`` and ``cels local``, each replacing a previous
release (``--overwrite``). After every kill the previous release is intact or the new one is
complete (never a partial or a missing directory), the provenance record is the old or the new
one, and the next run leaves no staging directory behind. A full disk (``RLIMIT_FSIZE`` in the
child) and a destination that cannot be written (root ignores a 0555 directory, so as root a
directory of sysfs, where even root cannot create anything) give exit 2, a message naming the
path, and nothing partial.

The default tier kills each command a few times; the 50-kill loop is a slow test (measured: 13
of 50 kills landed after the swap, 37 before; none left anything partial).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "src" / "searchveil" / "data" / "aol-gayo-avello-215-users.tsv"
TAB = ROOT / "tests" / "data" / "tabular"
ENV = dict(os.environ, PYTHONPATH=str(ROOT / "src"))


def _shares(d: Path) -> list[Path]:
    head = "AnonID\tQuery\tQueryTime\tItemRank\tClickURL"
    out = []
    for k in range(2):
        lines = [
            f"{1000 * k + u}\tquery {q}\t2006-03-01 10:00:00\t1\thttp://s{q}.com"
            for u in range(40)
            for q in range(u % 6 + 1)
        ]
        p = d / f"share{k}.tsv"
        p.write_text("\n".join([head, *lines]) + "\n")
        out.append(p)
    return out


def _commands(d: Path) -> dict[str, Callable[[int], list[str]]]:
    """Each command as a function of a seed (a new seed: a new release to swap in)."""
    shares = _shares(d)
    return {
        "korolova": lambda s: ["release", "korolova", str(SAMPLE), "--epsilon", "2", "--delta",
                               "1e-5", "--max-queries", "3", "--seed", str(s)],
        # k-anonymity: every run releases rows (the 300-row slice is too small for a DP
        # model to release any); the seed sets the rows' random order
        "tabular": lambda s: ["tabular", "anonymize", str(TAB / "adult.csv"), "--hierarchies",
                              str(TAB), "--model", "kanon", "--k", "5", "--seed", str(s)],
        "cels": lambda s: ["cels", "local", "--share", str(shares[0]), "--share", str(shares[1]),
                           "--epsilon", "2", "--delta", "0.3", "--mode", "conditional",
                           "--objective", "kl",
                           "--seed", str(s)],
    }  # fmt: skip


def _cli(args: list[str], out: Path, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "searchveil", *args, "--out", str(out), "--overwrite"],
        env=ENV, cwd=out.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw,
    )  # fmt: skip


def _snapshot(d: Path) -> dict[str, bytes] | None:
    if not d.exists():
        return None
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def _complete(d: Path) -> bool:
    """A complete release: nothing but its listed outputs and a ledger, every output present
    with the number of rows its ledger says."""
    if not (d / "ledger.json").is_file():
        return False
    led = json.loads((d / "ledger.json").read_text())
    listed = {o["file"] for o in led["outputs"].values()}
    if {p.name for p in d.iterdir()} != listed | {"ledger.json"}:
        return False
    for o in led["outputs"].values():
        f = d / o["file"]
        if not f.is_file():
            return False
        if "rows" in o and f.read_text().count("\n") != o["rows"] + 1:
            return False
    return True


def _strays(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".tmp-" in p.name)


def _kill_run(
    args: list[str], out: Path, gen: np.random.Generator, typical: float, anywhere: bool
) -> None:
    """Start the command and SIGKILL it: (``anywhere``) half of the time at a uniform point of
    a typical run, else 0-150 ms after its staging directory appears."""
    parent = out.parent
    proc = _cli(args, out)
    if anywhere and gen.uniform() < 0.5:
        time.sleep(gen.uniform(0.0, typical))
    else:
        deadline = time.monotonic() + 3 * typical
        while proc.poll() is None and time.monotonic() < deadline:
            if any(n.startswith((f".{out.name}.tmp-", f".{out.name}.private.json.tmp-"))
                   for n in os.listdir(parent)):  # fmt: skip
                break
            time.sleep(0.0005)
        # the staging directory lives ~20-130 ms here (writes, fsync, swap): kill anywhere in it
        time.sleep(gen.uniform(0.0, 0.15))
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _kill_loop(tmp_path: Path, name: str, kills: int, seed: int, anywhere: bool = True) -> int:
    """Kill ``name`` ``kills`` times, checking the invariants after each; returns how many
    kills found the new release complete."""
    gen = np.random.Generator(np.random.PCG64(seed))
    cmd = _commands(tmp_path)[name]
    work = tmp_path / name
    work.mkdir()
    out = work / "rel"
    t0 = time.monotonic()
    first = _cli(cmd(1), out)
    assert first.wait() == 0, first.stderr.read().decode() if first.stderr else ""
    typical = time.monotonic() - t0
    prov = work / "rel.private.json"
    new_complete = 0
    for i in range(kills):
        before, prov_before = _snapshot(out), prov.read_bytes()
        _kill_run(cmd(100 + i), out, gen, typical, anywhere)
        after = _snapshot(out)
        assert after is not None, f"kill {i}: the release directory is gone"
        assert after == before or _complete(out), f"kill {i}: a partial release"
        new_complete += after != before
        rec = json.loads(prov.read_text())  # the old or the new record, never half of one
        assert rec["kind"] == "searchveil-provenance"
        if after == before:
            assert prov.read_bytes() == prov_before or rec["release"]["ledger_sha256"]
    last = _cli(cmd(7), out)
    assert last.wait() == 0
    assert _complete(out) and _strays(work) == [], _strays(work)
    assert sorted(p.name for p in work.iterdir()) == ["rel", "rel.private.json"]
    return new_complete


@pytest.mark.parametrize(
    ("name", "kills"),
    [
        ("korolova", 2),
        pytest.param("cels", 1, marks=pytest.mark.slow),
        pytest.param("tabular", 2, marks=pytest.mark.slow),
    ],
)
def test_a_few_kills(tmp_path: Path, name: str, kills: int) -> None:
    """Kills while the release is being written or swapped in."""
    _kill_loop(tmp_path, name, kills=kills, seed=30, anywhere=False)


@pytest.mark.slow
def test_fifty_kills(tmp_path: Path) -> None:
    done = {name: _kill_loop(tmp_path, name, kills=k, seed=3000 + k)
            for name, k in (("korolova", 20), ("tabular", 15), ("cels", 15))}  # fmt: skip
    # the kills land on both sides of the swap: some before it, some after
    assert 0 < sum(done.values()) < 50, done


def _limit_file_size() -> None:  # runs in the child, before exec
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))


@pytest.mark.parametrize(
    "name",
    ["korolova", pytest.param("tabular", marks=pytest.mark.slow),
     pytest.param("cels", marks=pytest.mark.slow)],
)  # fmt: skip
def test_full_disk_is_a_clean_error(tmp_path: Path, name: str) -> None:
    cmd = _commands(tmp_path)[name]
    work = tmp_path / name
    work.mkdir()
    out = work / "rel"
    first = _cli(cmd(1), out)
    assert first.wait() == 0
    before, prov = _snapshot(out), (work / "rel.private.json").read_bytes()
    proc = _cli(cmd(2), out, preexec_fn=_limit_file_size)
    assert proc.wait() == 2
    err = proc.stderr.read().decode() if proc.stderr else ""
    assert "cannot write" in err and str(work) in err.replace("\n", ""), err
    assert "Traceback" not in err
    assert _snapshot(out) == before and (work / "rel.private.json").read_bytes() == prov
    assert _strays(work) == []


def _unwritable_dir(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        d = tmp_path / "ro"
        d.mkdir()
        d.chmod(0o555)
        return d
    # sysfs and procfs: no one, not even root, creates a directory there
    for d in (Path("/sys/fs"), Path("/proc")):
        try:
            (d / "searchveil-probe").mkdir()
        except OSError:
            return d
        (d / "searchveil-probe").rmdir()
    pytest.skip("running as root with writable /sys/fs and /proc: no unwritable directory")


@pytest.mark.parametrize("which", ["out", "provenance"])
def test_unwritable_destination_is_a_clean_error(tmp_path: Path, which: str) -> None:
    ro = _unwritable_dir(tmp_path)
    out = tmp_path / "rel" if which == "provenance" else ro / "searchveil-rel"
    extra = ["--provenance", str(ro / "p.json")] if which == "provenance" else []
    proc = subprocess.run(  # noqa: S603
        [sys.executable, "-m", "searchveil", *_commands(tmp_path)["korolova"](1), "--out",
         str(out), *extra],
        env=ENV, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "cannot write" in proc.stderr and str(ro) in proc.stderr.replace("\n", "")
    assert not out.exists() and not any(p.name.startswith("rel") for p in tmp_path.iterdir())
    assert not (ro / "p.json").exists()
