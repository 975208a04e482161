"""CELS protocol end to end: P0…P3 as separate OS processes over loopback mutual TLS.

Keys here are 512-bit TEST KEYS (paper-comparison size, marked insecure in the ledger) so the
runs stay fast; the default is 3072. Every network wait is bounded (``timeout``).

* the joint output satisfies every user's constraint exactly with b = min(ε/2, ln 1/(1−δ));
* P0's LP optimum equals a centralized solve on the union (fixed-point precision), and the
  joint counts reach the centralized KL objective;
* transcript scan: no party received another party's query/URL strings that are not in the
  joint output, nor its plaintext count vector;
* transcripts are marked private in their first record and written owner-only;
* the cost model matches the measured bytes per phase.

Faults (crashes, stops, garbage, truncated frames, dropped connections, wrong certificates) are
in ``tests/test_cels_faults.py``.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp

from _cels_shares import write_three_shares
from searchveil.cels.local import global_counts, local_sanitize, pair_counts, utility
from searchveil.cels.params import CelsParams, Share
from searchveil.cels.runner import run_local
from searchveil.cels.union import prune_dominated
from searchveil.io.readers import read_log
from searchveil.model import click_histogram
from searchveil.release.ump import constraint_matrix, preprocess
from searchveil.release.ump.kl import cels_bound, kl_objective, max_output_size, solve_kl
from searchveil.release.ump.release import NOT_DP
from searchveil.rng import make_rng

TEST_KEY_BITS = 512  # TEST KEY (insecure, fast); never a default
EPS, DELTA = 2.0, 0.3  # δ large on purpose: with δ < 1/users the output is empty (see docs)


def _write_shares(d: Path, seed: int = 1, users: int = 90) -> list[Path]:
    gen = np.random.Generator(np.random.PCG64(seed))
    rows = []
    for u in range(users):
        for _ in range(int(gen.integers(3, 12))):
            p = int(min(gen.zipf(1.6), 30))
            rows.append(
                (str(1000 + u), f"query {p}", "2006-03-01 10:00:00", "1", f"http://s{p}.com")
            )
        rows.append(
            (str(1000 + u), f"secret of {u}", "2006-03-01 10:00:00", "1", f"http://x{u}.org")
        )
    return write_three_shares(rows, d)


@pytest.fixture(scope="module")
def shares(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return _write_shares(tmp_path_factory.mktemp("cels"))


@pytest.fixture(scope="module")
def joint(shares: list[Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("run")
    params = CelsParams(
        epsilon=EPS, delta=DELTA, objective="kl", key_bits=TEST_KEY_BITS, mode="conditional"
    )
    res = run_local(shares, params, d / "out", transcripts=d / "tr", seed=7, timeout=60)
    return {"res": res, "dir": d, "params": params}


def _x_of(inp, log: pl.DataFrame) -> np.ndarray:
    gp = inp.pairs.select("query", "url")
    return pair_counts(gp, log).astype(np.float64)


def test_joint_output_exact_constraints_and_central_equality(shares, joint) -> None:
    d = joint["dir"]
    led = json.loads((d / "out" / "ledger.json").read_text())
    assert led["mechanism"] == "cels" and led["parameters"]["parties"] == 3
    b = cels_bound(EPS, DELTA)
    b_led = led["guarantee"]["b"]
    assert b_led == pytest.approx(b) and b == pytest.approx(min(EPS / 2, -np.log1p(-DELTA)))
    assert "NOT secure" in led["protocol"]["paillier"]
    assert led["seeded"] is True and led["for_release"] is False
    # the named conditional mode is labelled in the ledger: not differentially private
    g = led["guarantee"]
    assert g["mode"] == "conditional" and g["differentially_private"] is False
    assert g["label"] == NOT_DP and led["notion"].startswith(NOT_DP)
    assert g["counts_are_private"] is False
    stats = joint["res"]["party_stats"]
    phases = {"union", "sum", "rows", "nlp", "unpermute", "verify", "sample", "output"}
    for p in stats[1:]:
        assert phases - {"sample"} <= set(p["traffic"]["sent"]) and phases <= set(p["seconds"])
    log = pl.read_csv(d / "out" / "log.tsv", separator="\t", schema_overrides={"AnonID": pl.String})
    assert log.height > 0
    inp = preprocess(click_histogram(read_log(shares[0].parent / "all.tsv")))
    m = constraint_matrix(inp)
    x = _x_of(inp, log)
    assert x.sum() == led["noisy"]["output_size"]
    assert (m @ x <= b).all()  # exact: no tolerance
    # every user in the output holds the pair in the input (the sampling picks holders)
    dense = inp.matrix.toarray()
    uidx = {str(u): i for i, u in enumerate(inp.users)}
    pidx = {(q, u): i for i, q, u in inp.pairs.select("pair_id", "query", "url").iter_rows()}
    for user, q, u, n in log.iter_rows():
        assert dense[pidx[(q, u)], uidx[user]] > 0 and n >= 1
    # P0 solved the same LP as a centralized solver on the union (fixed point ≈ 1e-12)
    solver = stats[0]["extra"]["solver"]
    lam = max_output_size(m, b * (1 - 1e-6))
    assert solver["max_output_size_lp"] == pytest.approx(lam, rel=1e-7)
    central = solve_kl(m, b * (1 - 1e-6), inp.c_ij, output_share=0.5)
    assert int(x.sum()) == int(central.x.sum())
    assert kl_objective(inp.c_ij, x) == pytest.approx(central.objective, rel=1e-9)


def test_transcripts_hold_no_foreign_plaintext(shares, joint) -> None:
    tr = joint["dir"] / "tr"
    out_text = (joint["dir"] / "out" / "log.tsv").read_text()
    hists = [click_histogram(read_log(s)) for s in shares]
    blobs = {k: (tr / f"P{k}.bin").read_bytes() for k in range(4)}
    assert all(len(b) > 0 for b in blobs.values())
    # private: said in the first record, owner-only permissions
    assert stat.S_IMODE(tr.stat().st_mode) == 0o700
    for k, blob in blobs.items():
        assert stat.S_IMODE((tr / f"P{k}.bin").stat().st_mode) == 0o600
        first = json.loads(blob.split(b"\n", 1)[0].removeprefix(b"CELS-TRANSCRIPT "))
        assert first["private"] is True and "PRIVATE" in first["warning"] and first["party"] == k
    checked = 0
    for k, h in enumerate(hists, start=1):
        for q, u in h.pairs.select("query", "url").iter_rows():
            for s in (q, u):
                if s in out_text:
                    continue
                needle = s.encode("utf-8")
                for j, blob in blobs.items():
                    if j != k:
                        assert needle not in blob, (s, k, j)
                checked += 1
        # its count vector (as the int64 blob Algorithm 1 would carry in the clear)
        cnt = h.pairs.get_column("count").to_numpy().astype(">i8").tobytes()
        for j, blob in blobs.items():
            if j != k:
                assert cnt not in blob
    assert checked > 100  # the 'secret of u' pairs are never in the output


@pytest.mark.slow
def test_size_objective_and_local_baseline(shares, tmp_path) -> None:
    params = CelsParams(
        epsilon=EPS, delta=DELTA, objective="size", key_bits=TEST_KEY_BITS, mode="conditional"
    )
    res = run_local(shares, params, tmp_path / "o", seed=3, timeout=60)
    inp = preprocess(click_histogram(read_log(shares[0].parent / "all.tsv")))
    m = constraint_matrix(inp)
    lp = res["party_stats"][0]["extra"]["solver"]["lp_optimum"]
    assert lp == pytest.approx(max_output_size(m, cels_bound(EPS, DELTA)) * (1 - 1e-6), rel=1e-7)
    log = pl.read_csv(
        tmp_path / "o" / "log.tsv", separator="\t", schema_overrides={"AnonID": pl.String}
    )
    x = _x_of(inp, log)
    assert (m @ x <= cels_bound(EPS, DELTA)).all()
    ls = local_sanitize([Share.read(s) for s in shares], params, rng=make_rng(1))
    gp = global_counts([click_histogram(read_log(s)) for s in shares])
    assert utility(gp, log)["output_size"] >= ls["utility"]["output_size"]


def test_prune_dominated() -> None:
    t = sp.csr_matrix(
        np.array(
            [
                [0.1, 0.0, 0.0],  # dominated by row 2
                [0.5, 0.5, 0.0],
                [0.2, 0.0, 0.3],
                [0.2, 0.0, 0.3],  # duplicate of row 2: one is kept
                [0.0, 0.0, 0.0],  # empty
                [0.0, 0.7, 0.0],  # not dominated (0.7 > 0.5)
            ]
        )
    )
    assert prune_dominated(t).tolist() == [1, 2, 5]
    gen = np.random.Generator(np.random.PCG64(0))
    r = sp.random(60, 15, density=0.15, random_state=np.random.RandomState(1), format="csr")
    keep = prune_dominated(r)
    x = gen.uniform(0, 1, size=(200, 15))
    # the kept rows imply every dropped row for x ≥ 0: max over kept ≥ each row's load
    full = (r @ x.T).max(axis=0)
    kept = (r[keep] @ x.T).max(axis=0)
    assert np.allclose(full, kept)


def test_cost_model_matches_measured_bytes(shares, joint) -> None:
    from searchveil.cels.costs import predict_bytes, protocol_sizes

    led = joint["res"]["ledger"]
    stats = joint["res"]["party_stats"]
    sent: dict[str, int] = {}
    for p in stats:
        for k, v in p["traffic"]["sent"].items():
            sent[k] = sent.get(k, 0) + v
    hists = [click_histogram(read_log(s)) for s in shares]
    log = (joint["dir"] / "out" / "log.tsv").read_text(encoding="utf-8").splitlines()[1:]
    pairs = {tuple(r.split("\t")[1:3]) for r in log}
    sizes = protocol_sizes(
        hists, records=led["noisy"]["output_rows"], pairs_with_draws=len(pairs),
        record_bytes=round(sum(len(r.encode()) for r in log) / max(1, len(log))),
    )  # fmt: skip
    pred = predict_bytes(sizes, TEST_KEY_BITS)
    # exact (±1 byte per hex-encoded key) where nothing depends on the records' text
    for phase in ("mesh", "union", "sum", "rows", "nlp", "unpermute", "verify"):
        assert pred[phase] == pytest.approx(sent[phase], rel=0.01, abs=4), phase
    assert sum(pred.values()) == pytest.approx(sum(sent.values()), rel=0.05)
    assert sizes.ell == stats[0]["extra"]["solver"]["transformed_rows"]


def test_cli_local_and_parameter_errors(shares, tmp_path) -> None:
    from typer.testing import CliRunner

    from searchveil.cli import app

    args = ["cels", "local", *sum((["--share", str(s)] for s in shares), [])]
    res = CliRunner().invoke(
        app, [*args, "--out", str(tmp_path / "ls"), "--epsilon", "2", "--delta", "0.3",
              "--mode", "conditional", "--objective", "kl", "--seed", "1", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    r = json.loads(res.stdout)  # stderr: the δ ≥ 1/U warning (issue 39)
    assert r["private"]["utility"]["kl_loss"] > 0
    led = json.loads((tmp_path / "ls" / "ledger.json").read_text())
    assert led["mechanism"] == "cels-local-sanitization"
    assert led["guarantee"]["b"] == pytest.approx(cels_bound(2, 0.3))
    g = led["guarantee"]  # labelled: not differentially private
    assert g["differentially_private"] is False and g["label"] == NOT_DP
    assert led["notion"].startswith(NOT_DP)
    cond = ["--mode", "conditional"]
    for bad in (
        ["--epsilon", "2", "--objective", "kl", *cond],  # no δ
        ["--epsilon", "2", "--delta", "0.3", *cond],  # no objective
        ["--epsilon", "2", "--delta", "0.3", "--objective", "kl", "--key-bits", "1000", *cond],
        ["--epsilon", "2", "--delta", "1e-5", "--objective", "kl"],  # e2e: no objective
        ["--epsilon", "2", "--delta", "1e-5", "--min-count", "20"],  # e2e: conditional option
        ["--epsilon", "2", "--delta", "0.3", "--objective", "kl", "--max-pairs", "4", *cond],
        ["--epsilon", "2", "--delta", "0.01", "--max-users", "1000", "--union-epsilon", "2"],
        ["--epsilon", "2", "--delta", "1e-5"],  # e2e: no --union-epsilon (no default ε_u)
        ["--epsilon", "2", "--delta", "0.3", "--objective", "kl", "--union-epsilon", "2", *cond],
        ["--epsilon", "2", "--delta", "1e-5", "--mode", "joint"],
    ):
        out = tmp_path / "bad"
        res = CliRunner().invoke(
            app, ["cels", "run", "--share", str(shares[0]), "--share", str(shares[1]),
                  "--out", str(out), *bad],
        )  # fmt: skip
        assert res.exit_code == 2 and not out.exists(), res.output
    res = CliRunner().invoke(
        app, ["cels", "run", "--share", str(shares[0]), "--out", str(tmp_path / "one"),
              "--epsilon", "2", "--delta", "1e-5", "--union-epsilon", "2"],
    )  # fmt: skip
    assert res.exit_code == 2 and "at least two" in res.output


def test_config_validation(tmp_path) -> None:
    from searchveil.cels.config import load_config
    from searchveil.cels.runner import write_config
    from searchveil.errors import InputFormatError

    cfg = write_config(tmp_path / "tls", 3, timeout=5)
    c = load_config(cfg)
    assert c.ids == [0, 1, 2] and c.timeout == 5 and all(p.key for p in c.parties.values())
    text = cfg.read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("id = 2", "id = 1"))  # duplicate id
    with pytest.raises(InputFormatError):
        load_config(bad)
    bad.write_text(text.split("[[party]]")[0] + "[[party]]" + text.split("[[party]]")[1])
    with pytest.raises(InputFormatError):  # fewer than 3 parties (P0 + 2)
        load_config(bad)
    bad.write_text("not = [toml")
    with pytest.raises(InputFormatError):
        load_config(bad)


@pytest.mark.slow
def test_three_shares_of_a_real_aol_block(aol_215_path, tmp_path) -> None:
    """Done-when: three shares of a real AOL block; every user's constraint holds exactly."""
    log = read_log(aol_215_path)
    raw = pl.read_csv(aol_215_path, separator="\t", quote_char=None, infer_schema=False)
    users = raw.get_column("AnonID").unique().sort()
    part = pl.DataFrame({"AnonID": users, "_k": [i % 3 for i in range(users.len())]})
    raw = raw.join(part, on="AnonID")
    paths = []
    for k in range(3):
        p = tmp_path / f"aol{k + 1}.tsv"
        sub = raw.filter(pl.col("_k") == k).drop("_k")
        sub.write_csv(p, separator="\t", quote_style="never")
        paths.append(p)
    eps, delta = 20.0, 0.3  # large δ so the output is not empty (δ < 1/215 gives |𝕆| < 1)
    params = CelsParams(
        epsilon=eps, delta=delta, objective="kl", key_bits=TEST_KEY_BITS, mode="conditional"
    )
    res = run_local(paths, params, tmp_path / "out", seed=5, timeout=120)
    out = pl.read_csv(tmp_path / "out" / "log.tsv", separator="\t", infer_schema=False)
    out = out.with_columns(pl.col("Count").cast(pl.Int64))
    inp = preprocess(click_histogram(log))
    m = constraint_matrix(inp)
    x = _x_of(inp, out)
    b = cels_bound(eps, delta)
    assert x.sum() == res["ledger"]["noisy"]["output_size"] > 0
    assert (m @ x <= b).all()
    # issue 21 on a real AOL block: nothing in the release names or sizes the inputs
    from _neighbour import assert_no_private_traces, assert_only_public_files

    assert_only_public_files(tmp_path / "out", ["log.tsv"])
    for p in paths:
        assert_no_private_traces(tmp_path / "out", [p], exact={"rows": read_log(p).n_rows})
    assert_no_private_traces(tmp_path / "out", [], exact={"users": log.n_users})


def _without_rarest_user(shares: list[Path], d: Path) -> tuple[list[Path], str]:
    """D′: the shares without the user whose pairs are rarest (largest Σ 1/global count)."""
    allp = pl.concat(
        [pl.read_csv(s, separator="\t", schema_overrides={"AnonID": pl.String}) for s in shares]
    )
    cnt = allp.group_by(["Query", "ClickURL"]).len("c")
    score = (
        allp.join(cnt, on=["Query", "ClickURL"])
        .group_by("AnonID")
        .agg((1.0 / pl.col("c")).sum().alias("rarity"))
        .sort(["rarity", "AnonID"], descending=[True, False])
    )
    victim = score.get_column("AnonID")[0]
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for s in shares:
        df = pl.read_csv(s, separator="\t", schema_overrides={"AnonID": pl.String})
        p = d / s.name
        df.filter(pl.col("AnonID") != victim).write_csv(p, separator="\t")
        out.append(p)
    return out, victim


def test_neighbour_audit_cels_run(shares, joint, tmp_path) -> None:
    """Issue 21: `cels run` on D and on D′ (the user with the rarest pairs removed), same seed:
    the public ledgers agree apart from the declared-noisy fields and the creation time; the
    release holds only log.tsv and ledger.json, nothing naming or sizing the input; the
    per-party figures are in the private provenance record beside it (0600)."""
    from _neighbour import (
        assert_no_private_traces,
        assert_only_public_files,
        assert_same_public_ledger,
    )
    from searchveil.cels.params import NOISY_FIELDS

    d_prime, victim = _without_rarest_user(shares, tmp_path / "dprime")
    run_local(d_prime, joint["params"], tmp_path / "out", seed=7, timeout=60)
    rel_d, rel_dp = joint["dir"] / "out", tmp_path / "out"
    assert_same_public_ledger(rel_d, rel_dp, noisy=NOISY_FIELDS)
    for rel, paths in ((rel_d, shares), (rel_dp, d_prime)):
        assert_only_public_files(rel, ["log.tsv"])
        rows = sum(pl.read_csv(p, separator="\t").height for p in paths)
        assert_no_private_traces(rel, paths, exact={"rows": rows})
        led = json.loads((rel / "ledger.json").read_text())
        for key in ("parties", "inputs", "kl_loss_of_counts", "constraint_rows"):
            assert key not in json.dumps(led["parameters"] | led["protocol"]) or key == "parties"
        text = json.dumps(led)
        for private in ("kl_loss_of_counts", "constraint_rows", "rows_after_pruning",
                        "max_load_over_b", "sampled_draws", "traffic", "sha256"):  # fmt: skip
            assert private not in text, private
        prov = rel.with_name(rel.name + ".private.json")
        assert stat.S_IMODE(prov.stat().st_mode) == 0o600
        rec = json.loads(prov.read_text())
        assert list(rec)[0] == "PRIVATE" and len(rec["report"]["cels_parties"]) == 4
        assert "kl_loss_of_counts" in rec["report"]["cels_parties"][1]["extra"]
        # output order is a function of the published values only (sorted), never input order
        log = pl.read_csv(rel / "log.tsv", separator="\t", schema_overrides={"AnonID": pl.String})
        assert log.equals(log.sort(["AnonID", "Query", "ClickURL"]))
    assert victim not in (rel_dp / "log.tsv").read_text().split()


def test_neighbour_audit_cels_local(shares, tmp_path) -> None:
    """`cels local` on D and D′, same seed: same public ledger apart from the noisy fields; no
    KL against the global input (or any other input figure) in the ledger."""
    from typer.testing import CliRunner

    from _neighbour import assert_only_public_files, assert_same_public_ledger
    from searchveil.cels.params import NOISY_FIELDS
    from searchveil.cli import app

    d_prime, _ = _without_rarest_user(shares, tmp_path / "dprime")
    for name, paths in (("a", shares), ("b", d_prime)):
        res = CliRunner().invoke(
            app, ["cels", "local", *sum((["--share", str(s)] for s in paths), []), "--out",
                  str(tmp_path / name), "--epsilon", "2", "--delta", "0.3", "--mode",
                  "conditional", "--objective", "kl", "--seed", "5", "--json"],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        assert_only_public_files(tmp_path / name, ["log.tsv"])
        led = (tmp_path / name / "ledger.json").read_text()
        for private in ("kl_loss", "utility", "parties_detail", "sha256", "requested_output"):
            assert private not in led, private
        prov = json.loads((tmp_path / f"{name}.private.json").read_text())
        assert "kl_loss" in prov["figures"]["utility_against_the_global_input"]
    assert_same_public_ledger(tmp_path / "a", tmp_path / "b", noisy=NOISY_FIELDS)
