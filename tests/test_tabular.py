"""Inputs, lattice, measures and the §II models of searchveil.tabular (Fouad et al. 2014)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.rng import make_rng
from searchveil.tabular.dp import modular_grid
from searchveil.tabular.hierarchy import (
    encode_table,
    hierarchy_from_rows,
    load_hierarchies,
    read_hierarchy,
    read_table,
)
from searchveil.tabular.lattice import (
    Lattice,
    class_sizes_at,
    distinct_records,
    iter_class_sizes,
    join,
    meet,
)
from searchveil.tabular.measures import make_measures, sensitivity_table, utility_table
from searchveil.tabular.models import (
    aggregate_enumerate_record,
    aggregate_exact,
    aggregate_polynomial,
    approx_threshold,
    make_problem,
    record_rho,
    threshold_exact,
)

DATA = Path(__file__).parent / "data" / "tabular"
QI = [
    "sex",
    "age",
    "race",
    "marital-status",
    "education",
    "native-country",
    "workclass",
    "occupation",
]


@pytest.fixture(scope="module")
def slice_table():
    frame = read_table(DATA / "adult.csv")
    return encode_table(frame, load_hierarchies(DATA, QI), source=str(DATA / "adult.csv"))


def random_instance(seed: int, k: int = 3, n: int = 40):
    """Random tree hierarchies (heights 1-3, branching 2-3) and a random table."""
    g = np.random.default_rng(seed)
    hs = []
    for a in range(k):
        height = int(g.integers(1, 4))
        nodes = [["r"]]
        for _lv in range(height):
            nxt = []
            for parent in nodes[-1]:
                nxt += [f"{parent}.{j}" for j in range(int(g.integers(1, 4)))]
            nodes.append(nxt)
        rows = []
        for leaf in nodes[-1]:
            chain = [leaf]
            for _ in range(height):
                chain.append(chain[-1].rsplit(".", 1)[0])
            rows.append(chain)
        hs.append(hierarchy_from_rows(f"a{a}", rows))
    frame = pl.DataFrame(
        {
            h.attribute: [list(h.leaf_index)[int(g.integers(h.n_leaves))] for _ in range(n)]
            for h in hs
        }
    )
    return encode_table(frame, hs)


# -- inputs ------------------------------------------------------------------------------------
def test_reads_arx_table_and_hierarchies(slice_table) -> None:
    assert slice_table.n == 300
    assert slice_table.frame.columns[-1] == "salary-class"
    assert [h.height for h in slice_table.hierarchies] == [1, 4, 1, 2, 3, 2, 2, 2]
    assert b"\r\n" in (DATA / "adult.csv").read_bytes()  # the CRLF file is what was read
    age = slice_table.hierarchies[1]
    assert age.labels[-1] == ("*",)
    leaf = age.leaf_index["39"]
    assert [age.labels[lv][age.codes[leaf, lv]] for lv in range(5)] == [
        "39",
        "35-39",
        "30-39",
        "20-39",
        "*",
    ]


def test_hierarchy_errors_name_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "h.csv"
    bad.write_text("a;x;*\r\nb;*\r\n")
    with pytest.raises(InputFormatError, match=r"line 2.*2 levels"):
        read_hierarchy(bad)
    bad.write_text("a;x;*\nb;x;*\nb2;y;*\nc;y;+\n")
    with pytest.raises(InputFormatError, match="2 roots"):
        read_hierarchy(bad)
    bad.write_text("a;x;p;*\nb;x;q;*\n")
    with pytest.raises(InputFormatError, match=r"two parents.*line 2|line 2.*two parents"):
        read_hierarchy(bad)
    bad.write_text("a;*\na;*\n")
    with pytest.raises(InputFormatError, match="twice"):
        read_hierarchy(bad)


def test_table_value_missing_from_hierarchy(tmp_path: Path) -> None:
    h = hierarchy_from_rows("c", [["a", "*"], ["b", "*"]])
    t = tmp_path / "t.csv"
    t.write_text("c;d\r\na;1\r\nzz;2\r\n")
    with pytest.raises(InputFormatError, match=r"'zz'.*line 3|line 3.*'zz'"):
        encode_table(read_table(t), [h], source=str(t))
    with pytest.raises(InputFormatError, match="no column"):
        encode_table(read_table(t), [hierarchy_from_rows("x", [["a", "*"]])])


def test_parquet_and_tsv_tables(tmp_path: Path, slice_table) -> None:
    pq = tmp_path / "t.parquet"
    slice_table.frame.write_parquet(pq)
    assert read_table(pq).equals(slice_table.frame)
    tsv = tmp_path / "t.tsv"
    slice_table.frame.write_csv(tsv, separator="\t")
    assert read_table(tsv).equals(slice_table.frame)


# -- lattice -----------------------------------------------------------------------------------
def test_class_sizes_match_brute_force() -> None:
    t = random_instance(1, k=3, n=60)
    d = distinct_records(t.leaves)
    lat = Lattice(tuple(h.height for h in t.hierarchies))
    levels = lat.levels()
    seen = 0
    for idx, sizes in iter_class_sizes(d.leaves, d.count, t.hierarchies):
        lv = levels[idx]
        gen = np.stack([h.codes[d.leaves[:, i], lv[i]] for i, h in enumerate(t.hierarchies)], 1)
        for j in range(d.m):
            same = (gen == gen[j]).all(axis=1)
            assert sizes[j] == d.count[same].sum()
        assert (class_sizes_at(d.leaves, d.count, t.hierarchies, lv) == sizes).all()
        seen += 1
    assert seen == lat.size
    assert lat.index(levels).tolist() == list(range(lat.size))


def test_record_rho_equals_sweep() -> None:
    t = random_instance(2, k=3, n=50)
    meas = make_measures(t.hierarchies)
    p = make_problem(t, meas)
    grid = np.stack([record_rho(p, j).ravel() for j in range(p.m)], axis=1)
    for idx, sizes in iter_class_sizes(p.theta_leaves, p.theta_weights, t.hierarchies):
        assert (grid[idx] == sizes[: p.m]).all()


def test_join_meet() -> None:
    assert join([0, 2, 1], [1, 0, 1]).tolist() == [1, 2, 1]
    assert meet([0, 2, 1], [1, 0, 1]).tolist() == [0, 0, 1]


# -- measures ----------------------------------------------------------------------------------
def test_modified_harmonic_mean_weights() -> None:
    h = hierarchy_from_rows("x", [["a", "A", "*"], ["b", "A", "*"], ["c", "B", "*"]])
    w = sensitivity_table(h, leaf_weight=2.0)
    # leaves 2; A = 1/(1/2 + 1/2) = 1; B = 1/(1/2) = 2; root 0 (§IV-A)
    assert w[:, 0].tolist() == [2.0, 2.0, 2.0]
    assert w[:, 1].tolist() == [1.0, 1.0, 2.0]
    assert w[:, 2].tolist() == [0.0, 0.0, 0.0]
    assert utility_table(h, "depth")[0].tolist() == [2.0, 1.0, 0.0]
    assert utility_table(h, "inverse")[0].tolist() == [1.0, 0.5, 1 / 3]
    assert utility_table(h, "log")[2].tolist() == pytest.approx([np.log(3), np.log(3), 0.0])
    with pytest.raises(InvalidParameterError, match="utility"):
        make_measures([h], utility="nope")


# -- Prop. 1 / Prop. 2 / Cor. 1: supermodularity of the implemented f ----------------------------
@pytest.mark.parametrize("seed", range(6))
def test_f_and_rho_are_supermodular_on_chain_products(seed: int) -> None:
    t = random_instance(10 + seed, k=3, n=30)
    g = np.random.default_rng(seed)
    meas = make_measures(
        t.hierarchies,
        utility=["depth", "inverse", "log"][seed % 3],
        lam=float(g.uniform(0.1, 5)),
        kappa=1 + seed % 3,
    )
    p = make_problem(t, meas)
    shape = tuple(h + 1 for h in p.lattice.heights)
    pts = list(itertools.product(*[range(s) for s in shape]))
    for j in range(min(p.m, 4)):
        rho = record_rho(p, j)
        u, phi = (a.reshape(shape) for a in modular_grid(meas, p.leaves[j : j + 1]))
        f = meas.f(rho.astype(float), float(p.theta_size), u, phi)
        assert supermodular_violations(f) == 0
        assert supermodular_violations(rho.astype(float)) == 0
    assert pts


def supermodular_violations(f: np.ndarray) -> int:
    pts = list(itertools.product(*[range(n) for n in f.shape]))
    return sum(
        1
        for x, y in itertools.combinations(pts, 2)
        if f[tuple(meet(x, y))] + f[tuple(join(x, y))] < f[x] + f[y] - 1e-9
    )


def test_a_non_supermodular_function_is_detected() -> None:
    """The check can fail: ``−min(x1, x2)`` (submodular, not modular) violates (1)."""
    grid = -np.minimum.outer(np.arange(3.0), np.arange(3.0))
    assert supermodular_violations(grid) > 0
    assert supermodular_violations(np.minimum.outer(np.arange(3.0), np.arange(3.0))) == 0


# -- models ------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(8))
def test_polynomial_aggregate_agrees_with_enumeration(seed: int) -> None:
    t = random_instance(100 + seed, k=3, n=40)
    meas = make_measures(
        t.hierarchies,
        lam=[0.3, 1.0, 3.0, 10.0][seed % 4],
        kappa=1 + seed % 2,
        phi0=[0.05, 0.5][seed % 2],
    )
    p = make_problem(t, meas)
    exact = aggregate_exact(p)
    for j in range(p.m):
        lv, fv = aggregate_enumerate_record(p, j)
        lv2, fv2 = aggregate_polynomial(p, j)
        assert fv2 == pytest.approx(fv, rel=1e-9)
        assert exact.objective[j] == pytest.approx(fv, rel=1e-9)


def test_threshold_exact_and_algorithm1(slice_table) -> None:
    meas = make_measures(slice_table.hierarchies[:4])
    t4 = encode_table(slice_table.frame, list(slice_table.hierarchies[:4]))
    p = make_problem(t4, meas)
    c = 0.05
    sol = threshold_exact(p, c)
    shape = tuple(h + 1 for h in p.lattice.heights)
    for j in range(0, p.m, 17):
        rho = record_rho(p, j).astype(float)
        u, phi = (a.reshape(shape) for a in modular_grid(meas, p.leaves[j : j + 1]))
        r = phi / rho
        assert sol.u[j] == pytest.approx(u[r <= c].max())
        assert sol.risk[j] <= c
        lv, info = approx_threshold(p, j, c, eps=0.5, sigma1=0.5, sigma2=2.0, rng=make_rng(j))
        assert info["risk"] <= 2.0 * 1.5 / 0.5 * c + 1e-12  # Theorem 2: σ2(1+ε)/σ1 · c
        assert all(0 <= a <= h for a, h in zip(lv, p.lattice.heights, strict=True))
    with pytest.raises(InvalidParameterError, match="sigma2"):
        approx_threshold(p, 0, c, sigma2=0.5, rng=make_rng(0))


def test_side_table_changes_rho(slice_table) -> None:
    meas = make_measures(slice_table.hierarchies)
    side = slice_table.subset(np.arange(100))
    p = make_problem(slice_table, meas, side)
    assert p.theta_size == 100 and p.side_table
    top = p.lattice.size - 1
    sizes = dict(iter_class_sizes(p.theta_leaves, p.theta_weights, slice_table.hierarchies))
    assert (sizes[top][: p.m] == 100).all()
