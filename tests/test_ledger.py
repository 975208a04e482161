"""Release directories are atomic and carry a complete ledger."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import polars as pl
import pytest

from searchveil.errors import (
    InputFormatError,
    InternalError,
    InvalidParameterError,
    OutputExistsError,
)
from searchveil.io.ledger import (
    ReleaseWriter,
    build_ledger,
    build_provenance,
    provenance_path,
    read_ledger,
    read_provenance,
    write_json_atomic,
)
from searchveil.mechanisms.budget import PrivacyCost, Relation
from searchveil.rng import SecureRandom, SeededRandom


def ledger(rng) -> dict:
    return build_ledger(
        mechanism="test",
        notion="(ε,δ)-DP",
        cost=PrivacyCost.of(Relation.USER, 1.0, 1e-6),
        parameters={"d": 3, "K": float("inf")},
        public_inputs=[{"role": "serp", "file": "serp.tsv", "sha256": "0" * 64}],
        rng=rng,
    )


@pytest.mark.parametrize("fmt", ["tsv", "parquet"])
def test_release_dir_written_atomically(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "rel"
    df = pl.DataFrame({"query": ["a", "b"], "noisy_count": [3, 4]})
    with ReleaseWriter(out, fmt=fmt) as w:
        w.write_table("queries", df)
        assert not out.exists()  # nothing visible before the end
        w.write_ledger(ledger(SecureRandom()))
    led = read_ledger(out)
    assert led["outputs"]["queries"]["file"] == f"queries.{fmt}"
    assert led["outputs"]["queries"]["columns"] == ["query", "noisy_count"]
    assert led["seeded"] is False and led["for_release"] is True
    assert led["parameters"]["K"] == "inf"
    assert [p.name for p in tmp_path.iterdir()] == ["rel"]


def test_failure_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "rel"
    with pytest.raises(RuntimeError), ReleaseWriter(out) as w:
        w.write_table("queries", pl.DataFrame({"a": [1]}))
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InternalError), ReleaseWriter(out) as w:
        w.write_table("queries", pl.DataFrame({"a": [1]}))  # no ledger: refused
    assert list(tmp_path.iterdir()) == []


def test_existing_output(tmp_path: Path) -> None:
    out = tmp_path / "rel"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    with pytest.raises(OutputExistsError):
        ReleaseWriter(out)
    # issue 30: --overwrite replaces only a complete searchveil release, never a directory
    # holding something else
    with pytest.raises(OutputExistsError, match="complete searchveil release"):
        ReleaseWriter(out, overwrite=True)
    assert (out / "keep.txt").read_text() == "x"
    (out / "keep.txt").unlink()
    with ReleaseWriter(out, overwrite=True) as w:
        w.write_ledger(ledger(SecureRandom()))
    with ReleaseWriter(out, overwrite=True) as w:
        w.write_ledger(ledger(SecureRandom()))
    assert sorted(p.name for p in out.iterdir()) == ["ledger.json"]


def test_seeded_is_marked_not_for_release(tmp_path: Path) -> None:
    led = ledger(SeededRandom(42))
    assert led["seeded"] is True and led["for_release"] is False
    assert led["randomness"]["seed"] == 42
    assert "NOT FOR RELEASE" in led["randomness"]["note"]
    p = tmp_path / "l.json"
    write_json_atomic(p, led)
    assert json.loads(p.read_text())["mechanism"] == "test"


# --- the public ledger refuses what describes the private input (issue 21) -------------------


def _led(**kw):
    base = dict(
        mechanism="t",
        notion="n",
        cost=PrivacyCost.of(Relation.USER, 1.0, 1e-9),
        parameters={"d": 1},
        rng=SeededRandom(1),
    )
    return build_ledger(**(base | kw))


@pytest.mark.parametrize(
    "kw",
    [
        {"parameters": {"d": 1, "users": 128}},
        {"parameters": {"d": 1, "input": {"sha256": "ab" * 32}}},
        {"parameters": {"nested": [{"rows": 20000}]}},
        {"events": [{"name": "x", "records": 300}]},
        {"extra": {"inputs": [{"file": "x.tsv"}]}},
        {"extra": {"whatever": 1}},
        {"extra": {"accounting": {"path": "/data/private.tsv"}}},
        {"public_inputs": [{"file": "serp.tsv"}]},
        {"public_inputs": [{"role": "serp", "file": "serp.tsv", "users": 4}]},
        {"declared": {"max_users": [1, 2]}},
    ],
)
def test_public_ledger_refuses_private_keys(kw) -> None:
    with pytest.raises(InternalError, match="probably a bug"):
        _led(**kw)


def test_public_ledger_accepts_public_subtrees() -> None:
    led = _led(
        declared={"max_users": 700000},
        noisy={"users": {"value": 131, "event": "noisy user count"}},
        public_inputs=[{"role": "hierarchy", "file": "age.csv", "sha256": "0" * 64, "rows": 9}],
        extra={"accounting": "exact"},
    )
    assert led["declared"] == {"max_users": 700000}
    assert led["neighbouring"] == "add/remove one user's entire history"
    assert led["relation"] == "user"
    assert led["split"] == {"release": {"epsilon": 1.0, "delta": 1e-9}}
    assert "inputs" not in led


def _prov(path="/data/secret/log.tsv", sha="f" * 64):
    return build_provenance(
        inputs=[{"path": path, "sha256": sha, "rows": 20000, "users": 128}],
        report={"queries_released": 3},
    )


def test_provenance_written_beside_release(tmp_path: Path) -> None:
    out = tmp_path / "rel"
    with ReleaseWriter(out) as w:
        w.write_table("queries", pl.DataFrame({"query": ["a"], "noisy_count": [3]}))
        w.write_ledger(_led())
        w.write_provenance(_prov())
        assert not provenance_path(out).exists()  # renamed into place with the release
    prov = read_provenance(out)
    assert list(prov)[0] == "PRIVATE" and "never publish" in prov["PRIVATE"]
    assert prov["inputs"][0]["users"] == 128
    assert (
        prov["release"]["ledger_sha256"]
        == hashlib.sha256((out / "ledger.json").read_bytes()).hexdigest()
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rel", "rel.private.json"]
    assert sorted(p.name for p in out.iterdir()) == ["ledger.json", "queries.tsv"]
    assert (provenance_path(out).stat().st_mode & 0o777) == 0o600


def test_provenance_inside_release_refused(tmp_path: Path) -> None:
    out = tmp_path / "rel"
    with pytest.raises(InvalidParameterError, match="provenance"):
        ReleaseWriter(out, provenance=out / "p.json")
    with pytest.raises(InvalidParameterError, match="provenance"):
        ReleaseWriter(out, provenance=out)
    assert list(tmp_path.iterdir()) == []


def test_existing_provenance_refused(tmp_path: Path) -> None:
    out = tmp_path / "rel"
    provenance_path(out).write_text("{}")
    with pytest.raises(OutputExistsError, match="provenance"):
        ReleaseWriter(out)


def test_private_string_in_release_refused(tmp_path: Path) -> None:
    out = tmp_path / "rel"
    sha = "ab" * 32
    with pytest.raises(InternalError, match="SHA-256"), ReleaseWriter(out) as w:
        w.write_table("queries", pl.DataFrame({"query": [sha], "noisy_count": [3]}))
        w.write_ledger(_led())
        w.write_provenance(_prov(sha=sha))
    assert list(tmp_path.iterdir()) == []


def test_read_provenance_missing(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError, match="provenance"):
        read_provenance(tmp_path / "rel")


def test_public_file_record_names_the_file_not_its_path(tmp_path: Path) -> None:
    from searchveil.io.ledger import public_file_record

    f = tmp_path / "secret-dir" / "serp.tsv"
    f.parent.mkdir()
    f.write_text("q\t1\thttp://a/\n")
    rec = public_file_record(f, role="serp", rows=1)
    assert rec == {
        "role": "serp",
        "file": "serp.tsv",
        "sha256": hashlib.sha256(f.read_bytes()).hexdigest(),
        "rows": 1,
    }
    led = _led(public_inputs=[rec])
    assert "secret-dir" not in json.dumps(led)


def test_write_private_json_is_owner_only(tmp_path: Path) -> None:
    import os

    from searchveil.io.ledger import write_private_json

    p = write_private_json(tmp_path / "x.private.json", _prov())
    assert (os.stat(p).st_mode & 0o777) == 0o600
    assert next(iter(json.loads(p.read_text()))) == "PRIVATE"
    assert [q.name for q in tmp_path.iterdir()] == ["x.private.json"]


def test_every_written_ledger_is_checked(tmp_path: Path) -> None:
    """ReleaseWriter checks the ledger it writes, whoever built it: a hand-made ledger that
    carries the input's size is refused and nothing is written."""
    led = _led()
    led["parameters"] = {"d": 1, "rows": 20000}
    with pytest.raises(InternalError, match="rows"), ReleaseWriter(tmp_path / "rel") as w:
        w.write_table("queries", pl.DataFrame({"query": ["a"], "noisy_count": [3]}))
        w.write_ledger(led)
    assert list(tmp_path.iterdir()) == []


def test_one_ledger_builder() -> None:
    """build_ledger is the only ledger builder: no module of the package defines another."""
    import re

    src = Path(__file__).resolve().parents[1] / "src" / "searchveil"
    found = [
        str(p.relative_to(src))
        for p in src.rglob("*.py")
        if re.search(r"^def build_ledger\w*\(", p.read_text(encoding="utf-8"), re.M)
    ]
    assert found == ["io/ledger.py"]
    text = (src / "io" / "ledger.py").read_text(encoding="utf-8")
    assert re.findall(r"^def (build_ledger\w*)\(", text, re.M) == ["build_ledger"]
