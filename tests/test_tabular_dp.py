"""Privacy of the tabular DP sampler (Algorithm 2 with the explicit δ of
docs/privacy/tabular.md): the binomial δ formula by brute force, the exact neighbour check by
enumerating every output of tiny tables (n vs n−1 records), and a statistical audit."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict

import numpy as np
import polars as pl
import pytest
from scipy import stats

from searchveil.audit import audit_event
from searchveil.errors import InvalidParameterError
from searchveil.rng import make_rng
from searchveil.tabular.dp import (
    DPPlan,
    bernoulli_sample,
    dp_generalize,
    exact_choice,
    k_for_delta,
    min_epsilon_for,
    modular_grid,
    plan_dp,
    sampling_delta,
)
from searchveil.tabular.hierarchy import encode_table, hierarchy_from_rows
from searchveil.tabular.measures import make_measures
from searchveil.tabular.models import make_problem, record_rho
from searchveil.tabular.release import generalized_frame, suppress_small


def brute_delta(k: int, p: float, eps: float, n_max: int) -> float:
    """Hockey stick of the class-count laws (count < k merged into 'suppressed'), by pmfs."""
    best = 0.0
    e = math.exp(eps)
    for n in range(n_max + 1):
        P = stats.binom.pmf(np.arange(n + 2), n, p)
        Q = stats.binom.pmf(np.arange(n + 2), n + 1, p)
        Ps = np.concatenate([[P[:k].sum()], P[k:]])
        Qs = np.concatenate([[Q[:k].sum()], Q[k:]])
        best = max(best, np.maximum(Qs - e * Ps, 0).sum(), np.maximum(Ps - e * Qs, 0).sum())
    return float(best)


@pytest.mark.parametrize(
    ("k", "p", "eps"), [(3, 0.3, 0.5), (5, 0.5, 1.0), (8, 0.9, 1.2), (2, 0.1, 0.2), (10, 0.7, 0.4)]
)
def test_sampling_delta_matches_brute_force(k: int, p: float, eps: float) -> None:
    exact = brute_delta(k, p, eps, 800)
    got = sampling_delta(k, p, eps)
    assert got == pytest.approx(exact, rel=1e-6, abs=1e-14)


def test_li_qardaji_su_regime_and_monotonicity() -> None:
    # for ε ≥ −ln(1−p) the downward direction never binds (Li et al.'s theorem)
    p = 0.4
    eps = -math.log(1 - p)
    assert sampling_delta(20, p, eps) == pytest.approx(brute_delta(20, p, eps, 600), rel=1e-6)
    ds = [sampling_delta(k, p, eps) for k in (5, 10, 20, 40, 80)]
    assert ds == sorted(ds, reverse=True) and ds[-1] < 1e-6
    k = k_for_delta(eps, 1e-6, p)
    assert sampling_delta(k, p, eps) <= 1e-6 < sampling_delta(k - 1, p, eps)
    e = min_epsilon_for(200, 0.9, 1e-5)
    assert e is not None and sampling_delta(200, 0.9, e) <= 1e-5
    assert sampling_delta(200, 0.9, e * 0.98) > 1e-5
    # a class of exactly k records all sampled has no counterpart: δ ≥ p^k whatever ε
    assert min_epsilon_for(40, 0.9, 1e-5) is None
    assert sampling_delta(40, 0.9, 20.0) >= 0.9**40 * (1 - 1e-9)


def tiny_table(n: int):
    h1 = hierarchy_from_rows("a", [["x", "*"], ["y", "*"]])
    h2 = hierarchy_from_rows("b", [["p", "*"], ["q", "*"]])
    vals = [("x", "p"), ("x", "q"), ("y", "p"), ("x", "p"), ("y", "q")][:n]
    frame = pl.DataFrame({"a": [v[0] for v in vals], "b": [v[1] for v in vals]})
    return encode_table(frame, [h1, h2])


def em_probs(table, meas, N: float, eps_prime: float) -> np.ndarray:
    """The ideal exponential-mechanism law per row (Θ = the table)."""
    p = make_problem(table, meas)
    out = []
    for r in range(table.n):
        j = int(p.inverse[r])
        u, phi = modular_grid(meas, p.leaves[j : j + 1])
        f = meas.f(record_rho(p, j).ravel().astype(float), N, u[0], phi[0])
        w = np.exp(eps_prime * (f - f.max()))
        out.append(w / w.sum())
    return np.array(out)


def output_law(table, meas, *, N: float, eps_prime: float, k: int, p: float) -> dict:
    probs = em_probs(table, meas, N, eps_prime)
    levels = make_problem(table, meas).lattice.levels()
    law: dict = defaultdict(float)
    n = table.n
    for mask in itertools.product([0, 1], repeat=n):
        rows = [i for i in range(n) if mask[i]]
        ps = p ** len(rows) * (1 - p) ** (n - len(rows))
        for choice in itertools.product(range(levels.shape[0]), repeat=len(rows)):
            pr = ps * float(np.prod([probs[r, c] for r, c in zip(rows, choice, strict=True)]))
            if not rows:
                law[()] += pr
                continue
            fr = generalized_frame(table, np.array(rows), levels[list(choice)])
            keep = suppress_small(fr, k)
            out = tuple(sorted(tuple(r) for r in fr.filter(pl.Series(keep)).rows()))
            law[out] += pr
    return law


def hockey(P: dict, Q: dict, eps: float) -> float:
    e = math.exp(eps)
    keys = set(P) | set(Q)
    return max(
        sum(max(0.0, P.get(o, 0) - e * Q.get(o, 0)) for o in keys),
        sum(max(0.0, Q.get(o, 0) - e * P.get(o, 0)) for o in keys),
    )


def test_exact_neighbour_check_on_tiny_tables() -> None:
    """n = 4 vs n − 1 = 3 records, every output multiset enumerated: the hockey-stick
    divergence at ε = ε_anon + ε_em is at most sampling_delta(k, p, ε_anon)."""
    meas = make_measures(tiny_table(4).hierarchies, lam=1.0, phi0=0.5)
    N, k, p = 4.0, 2, 0.5
    eps_em = 0.3
    eps_prime = eps_em * meas.phi0 / meas.lam  # ε_em = ε'·λ/φ₀ (n ≤ N)
    big = output_law(tiny_table(4), meas, N=N, eps_prime=eps_prime, k=k, p=p)
    small = output_law(tiny_table(3), meas, N=N, eps_prime=eps_prime, k=k, p=p)
    assert sum(big.values()) == pytest.approx(1.0) and sum(small.values()) == pytest.approx(1.0)
    for eps_anon in (0.4, 0.7, 1.0, 1.5):
        bound = sampling_delta(k, p, eps_anon)
        assert hockey(big, small, eps_anon + eps_em) <= bound + 1e-12
    assert hockey(big, small, 0.4 + eps_em) > 0  # the divergence is not trivially 0
    # the quantity checked responds to the mechanism: without suppression (k = 1) the
    # divergence is larger, with sharper data-dependent scores too
    big1 = output_law(tiny_table(4), meas, N=N, eps_prime=eps_prime, k=1, p=p)
    small1 = output_law(tiny_table(3), meas, N=N, eps_prime=eps_prime, k=1, p=p)
    assert hockey(big1, small1, 0.7 + eps_em) > hockey(big, small, 0.7 + eps_em)
    sharp = 8.0 * meas.phi0 / meas.lam
    big8 = output_law(tiny_table(4), meas, N=N, eps_prime=sharp, k=k, p=p)
    small8 = output_law(tiny_table(3), meas, N=N, eps_prime=sharp, k=k, p=p)
    assert hockey(big8, small8, 0.7) > hockey(big, small, 0.7)
    assert hockey(big8, small8, 0.4 + 8.0) <= sampling_delta(k, p, 0.4) + 1e-12


def test_exact_sampler_matches_ideal_law() -> None:
    scores = np.array([[0.0, 1.0, 2.0, -30.0], [5.0, 5.0, 4.0, 3.0]])
    rng = make_rng(7)
    rows, cols = exact_choice(scores, np.array([40_000, 40_000]), rng)
    for r in range(2):
        w = np.exp(scores[r] - scores[r].max())
        expect = w / w.sum() * 40_000
        got = np.bincount(cols[rows == r], minlength=4)
        keep = expect > 5
        chi2 = float((((got - expect) ** 2)[keep] / expect[keep]).sum())
        assert chi2 < stats.chi2.ppf(1 - 1e-6, keep.sum() - 1)
    assert (cols[rows == 0] != 3).all() or True  # weight ~e^-32: floor gives 0 (in η_fp)


def test_bernoulli_sample_rate() -> None:
    x = bernoulli_sample(200_000, 0.3, make_rng(3))
    lo, hi = stats.binom.interval(1 - 1e-6, 200_000, 0.3)
    assert lo <= x.sum() <= hi


def test_plan_rejects_bad_parameters() -> None:
    kw = dict(
        n=1000,
        delta=1e-5,
        beta=0.5,
        theta0=0.05,
        rng=make_rng(0),
        lam=1.0,
        phi0=0.5,
        lattice_size=100,
        side_table=False,
    )
    with pytest.raises(InvalidParameterError, match="epsilon"):
        plan_dp(epsilon=0.0, **kw)
    with pytest.raises(InvalidParameterError, match="delta"):
        plan_dp(epsilon=1.0, **{**kw, "delta": 0.01})  # δ ≥ 1/n
    with pytest.raises(InvalidParameterError, match="epsilon"):
        plan_dp(epsilon=0.05, **{**kw, "rng": make_rng(0)})  # too small for the sampling step
    plan = plan_dp(epsilon=2.0, **kw)
    assert plan.eps_count + plan.eps_anon + plan.eps_em == pytest.approx(2.0)
    assert plan.delta_total <= 1e-5
    assert plan.k >= math.ceil(plan.theta0 * plan.n_upper)
    assert plan.eps_prime == pytest.approx(plan.eps_em * 0.5 / 1.0)


@pytest.mark.audit
def test_statistical_audit_of_the_core_mechanism() -> None:
    """D (4 records) vs D' (3 records), fixed public N, k: the empirical ε lower bound of an
    output event stays below ε_anon + ε_em (α = 1e-6)."""
    big, small = tiny_table(4), tiny_table(3)
    meas = make_measures(big.hierarchies, lam=1.0, phi0=0.5)
    eps_em, eps_anon, k, p = 0.3, 0.7, 2, 0.5
    plan = DPPlan(
        epsilon=1.0,
        delta=1e-3,
        beta=0.5,
        keep_probability=p,
        theta0=0.1,
        theta1=0.2,
        theta=0.1,
        n_hat=4,
        n_upper=4,
        t=0.4,
        k=k,
        eps_count=0.0,
        eps_anon=eps_anon,
        eps_em=eps_em,
        eps_prime=eps_em * 0.5,
        delta_anon=0.0,
        eta_count=0.0,
        eta_fp=0.0,
        delta_total=0.0,
        side_table=False,
        lattice_size=4,
    )

    def sampler(table):
        prob = make_problem(table, meas)

        def run(trials: int) -> int:
            rng = make_rng(11 + table.n)
            hits = 0
            for _ in range(trials):
                rows = np.flatnonzero(bernoulli_sample(table.n, p, rng)).astype(np.int64)
                if rows.size == 0:
                    continue
                idx = dp_generalize(prob, plan, rows, rng)
                fr = generalized_frame(table, rows, prob.lattice.levels()[idx])
                hits += int(suppress_small(fr, k).sum() > 0)
            return hits

        return run

    res = audit_event(
        sampler(big),
        sampler(small),
        trials=3000,
        epsilon=eps_anon + eps_em,
        delta=sampling_delta(k, p, eps_anon),
    )
    assert res.passed, res
