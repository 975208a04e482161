"""CELS KL objective (§2.2 eq. 2, Appendix B): PWL LP vs the exact concave solve, the λ-form
equivalence, b = min(ε/2, ln 1/(1−δ)) and the `sanitize ump --objective kl` hook."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from typer.testing import CliRunner

from searchveil.cli import app
from searchveil.errors import InvalidParameterError
from searchveil.io.readers import read_log
from searchveil.model import click_histogram
from searchveil.release.ump import constraint_matrix, preprocess
from searchveil.release.ump.kl import (
    breakpoints,
    cels_bound,
    kl_gap_table,
    kl_loss,
    kl_objective,
    max_output_size,
    solve_kl,
    solve_kl_exact,
    solve_kl_pwl,
)


def _toy(seed: int = 0, users: int = 12, pairs: int = 8) -> tuple[sp.csr_matrix, np.ndarray]:
    gen = np.random.Generator(np.random.PCG64(seed))
    c = gen.integers(0, 4, size=(pairs, users)) * (gen.random((pairs, users)) < 0.5)
    c[:, 0] += 1
    c[:, 1] += 1  # every pair has ≥ 2 holders (Condition 1)
    csr = sp.csr_matrix(c.astype(np.int64))
    c_ij = np.asarray(csr.sum(axis=1)).ravel()
    from searchveil.release.ump import constraint_block

    return constraint_block(csr, c_ij), c_ij


def test_cels_bound_is_theorem_2() -> None:
    assert cels_bound(1.0, 0.5) == pytest.approx(0.5)  # ε/2 smaller
    assert cels_bound(1.0, 1e-4) == pytest.approx(-math.log1p(-1e-4))
    assert cels_bound(0.01, 0.1) == pytest.approx(0.005)
    with pytest.raises(InvalidParameterError):
        cels_bound(0.0, 0.1)
    with pytest.raises(InvalidParameterError):
        cels_bound(1.0, 1.0)


def test_breakpoints() -> None:
    a = breakpoints(100, 5, "uniform")
    assert a.tolist() == [0, 25, 50, 75, 100]
    g = breakpoints(100, 5, "geometric")
    assert g[0] == 0 and g[-1] == 100 and np.all(np.diff(np.log1p(g)) > 0)
    assert np.allclose(np.diff(np.log1p(g)), math.log(101) / 4)


def test_pwl_matches_lambda_form_and_converges_to_exact() -> None:
    m, c = _toy()
    b = 2.0
    lam = max_output_size(m, b)
    o = lam / 2
    for spacing in ("uniform", "geometric"):
        x1, v1 = solve_kl_pwl(m, b, c, o, k=9, spacing=spacing)
        x2, v2 = solve_kl_pwl(m, b, c, o, k=9, spacing=spacing, form="lambda")
        assert v1 == pytest.approx(v2, rel=1e-7)
        assert x1.sum() == pytest.approx(o) and (m @ x1 <= b + 1e-7).all()
    _, exact = solve_kl_exact(m, b, c, o)
    tab = kl_gap_table(m, b, c, o, ks=(3, 9, 33, 129))
    gaps = [r["relative_gap"] for r in tab["rows"]]
    assert gaps[-1] < 1e-3 and gaps[-1] <= gaps[0]
    assert all(g >= -1e-6 for g in gaps)  # the exact optimum is an upper bound
    assert tab["exact_objective"] >= exact - 1e-6


def test_solve_kl_integer_feasible_and_exact_size() -> None:
    m, c = _toy(3, users=20, pairs=10)
    b = 3.0
    sol = solve_kl(m, b, c, output_share=0.6)
    x = sol.x
    assert x.dtype == np.int64 and (x >= 0).all()
    assert (m @ x.astype(float) <= b).all()  # exact, no tolerance
    assert x.sum() == sol.info["requested_output_size"]
    assert sol.objective == pytest.approx(kl_objective(c, x))
    # KL loss of eq. (2) is smaller than a naive proportional-but-infeasible-free baseline
    naive = np.zeros_like(x)
    naive[np.argmax(c)] = x.sum()
    assert kl_loss(c, x) < kl_loss(c, naive)
    with pytest.raises(InvalidParameterError):
        solve_kl(m, b, c, output_size=10**9)
    with pytest.raises(InvalidParameterError):
        solve_kl(m, b, c, output_size=3, output_share=0.5)


def test_sanitize_ump_objective_kl_cli(tmp_path) -> None:
    path = tmp_path / "log.tsv"
    df = pl.DataFrame(
        {
            "AnonID": [str(u) for u in range(40) for p in range(4)],
            "Query": [f"q{p}" for u in range(40) for p in range(4)],
            "QueryTime": ["2006-03-01 10:00:00"] * 160,
            "ItemRank": ["1"] * 160,
            "ClickURL": [f"http://u{p}" for u in range(40) for p in range(4)],
        }
    )
    df.write_csv(path, separator="\t")
    out = tmp_path / "rel"
    res = CliRunner().invoke(
        app,
        ["sanitize", "ump", "--mode", "conditional",
         str(path), "--out", str(out), "--objective", "kl",
         "--epsilon", "2", "--delta", "0.3", "--output-size", "10", "--seed", "3", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    r = json.loads(res.output)
    assert r["b"] == pytest.approx(min(1.0, -math.log1p(-0.3)))
    assert r["private"]["metrics"]["output_size"] == 10
    led = json.loads((out / "ledger.json").read_text())
    assert led["parameters"]["objective"] == "kl"
    inp = preprocess(click_histogram(read_log(path)))
    m = constraint_matrix(inp)
    x = np.zeros(inp.n_pairs)
    counts = pl.read_csv(out / "counts.tsv", separator="\t")
    idx = {(q, u): i for i, q, u in inp.pairs.select("pair_id", "query", "url").iter_rows()}
    for q, u, n in counts.iter_rows():
        x[idx[(q, u)]] = n
    assert (m @ x <= r["b"]).all()
    bad = CliRunner().invoke(
        app,
        ["sanitize", "ump", "--mode", "conditional",
         str(path), "--out", str(tmp_path / "r2"), "--objective", "kl",
         "--epsilon", "2", "--delta", "0.01", "--json"],
    )  # fmt: skip
    assert bad.exit_code == 2 and not (tmp_path / "r2").exists()
