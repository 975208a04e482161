"""ZEALOUS on real and adversarial logs, its parameter solving and its ledger."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import polars as pl
import pytest

from searchveil.errors import BudgetExceededError, InvalidParameterError
from searchveil.mechanisms.accounting import Budget
from searchveil.model import ItemKind, SearchLog, items
from searchveil.release import ZealousParams, release_zealous, write_release
from searchveil.release.zealous.accounting import (
    zealous_exact_privacy,
    zealous_exact_probabilistic,
    zealous_optimal_tau,
    zealous_tau_prime,
    zealous_theorem3_delta,
)
from searchveil.rng import make_rng


def _loose(kind: str) -> ZealousParams:
    """Weak parameters (publish items of ~4+ users) for the subset checks."""
    return ZealousParams(
        m=5, tau=1, lam=1.0, tau_prime=3, item_type=kind, guarantee="indistinguishability"
    )


@pytest.mark.parametrize("kind", [k.value for k in ItemKind])
@pytest.mark.parametrize("fixture", ["aol_215", "aol_top1000"])
def test_items_come_from_the_input(kind: str, fixture: str, request: pytest.FixtureRequest) -> None:
    log = request.getfixturevalue(fixture)
    rel = release_zealous(log, _loose(kind), rng=make_rng(2))
    t = rel.tables["items"]
    assert t.height > 0
    src = items(log, kind)
    if kind in ("clicks", "query_pairs"):
        second = "url" if kind == "clicks" else "next_query"
        assert t.columns == ["item", "query", second, "noisy_count"]
        got = set(zip(t.get_column("query").to_list(), t.get_column(second).to_list(), strict=True))
        have = set(
            zip(src.get_column("query").to_list(), src.get_column(second).to_list(), strict=True)
        )
        assert got <= have
        assert all("\t" not in x for x in t.get_column("item").to_list())
    else:
        assert t.columns == ["item", "noisy_count"]
        assert set(t.get_column("item").to_list()) <= set(src.get_column("item").to_list())
    assert t.get_column("noisy_count").min() > 3  # only noisy counts above τ' are published


def test_single_user_item_never_published() -> None:
    rows = [{"user": u, "query": "weather report"} for u in range(400)]
    rows += [{"user": 9999, "query": "secret disease"} for _ in range(10_000)]
    log = SearchLog.from_frame(pl.DataFrame(rows), name="heavy")
    for kind in ("queries", "keywords"):
        p = ZealousParams.from_budget(
            epsilon=1.0, delta=1e-5, m=3, item_type=kind, guarantee="probabilistic", users=1000
        )
        for seed in range(10):
            out = set(release_zealous(log, p, rng=make_rng(seed)).tables["items"]["item"])
            assert not ({"secret disease", "secret", "disease"} & out)
            assert ("weather report" in out) or ("weather" in out)


def test_from_budget_probabilistic_matches_theorem_3() -> None:
    p = ZealousParams.from_budget(
        epsilon=1.0, delta=0.01, m=2, item_type="queries", guarantee="probabilistic",
        users=5_000_000,
    )  # fmt: skip
    assert p.tau == zealous_optimal_tau(epsilon=1.0, m=2) == 4
    s = zealous_tau_prime(epsilon=1.0, delta=0.01, m=2, tau=4, users=5_000_000)
    assert p.lam == s["lambda"] == 4.0
    assert p.tau_prime == math.ceil(s["tau_prime"]) == 79
    ex = p.privacy("exact")
    pa = p.privacy("paper")
    assert ex["epsilon"] <= 1.0 + 1e-12 and ex["delta"] <= 0.01
    assert pa["epsilon"] == 1.0
    assert pa["delta"] == pytest.approx(
        zealous_theorem3_delta(m=2, tau=4, lam=4.0, tau_prime=79, users=5_000_000)
    )
    assert ex["delta"] <= pa["delta"]


def test_from_budget_indistinguishability() -> None:
    p = ZealousParams.from_budget(
        epsilon=1.0, delta=1e-5, m=5, item_type="keywords", guarantee="indistinguishability"
    )
    assert p.tau == 1 and p.lam == 5.0
    assert p.tau_prime == math.ceil(5 * (1 - math.log(2e-5 / 5)))
    ex = p.privacy("exact")
    assert ex["epsilon"] <= 1.0 + 1e-12 and ex["delta"] <= 1e-5
    assert ex == p.privacy("exact")  # deterministic


def test_ledger(tmp_path: Path, aol_215: SearchLog) -> None:
    p = ZealousParams(
        m=3, tau=2, lam=2.0, tau_prime=6, item_type="clicks", guarantee="probabilistic", users=300
    )
    rel = release_zealous(aol_215, p, rng=make_rng(4))
    led = write_release(rel, tmp_path / "z", fmt="parquet")
    ex = zealous_exact_probabilistic(m=3, tau=2, lam=2.0, tau_prime=6, users=300)
    assert led["epsilon"] == pytest.approx(ex.epsilon) and led["delta"] == pytest.approx(ex.delta)
    assert "probabilistic" in led["notion"]
    assert led["declared"] == {"max_users": 300} and "users" not in led["parameters"]
    assert led["outputs"]["items"]["file"] == "items.parquet"
    back = pl.read_parquet(tmp_path / "z" / "items.parquet")
    assert back.equals(rel.tables["items"])
    add_remove = zealous_exact_privacy(m=3, tau=2, lam=2.0, tau_prime=6)
    assert add_remove.epsilon == pytest.approx(ex.epsilon / 2)


def test_max_users_must_bound_the_log(aol_215: SearchLog) -> None:
    p = ZealousParams(
        m=3, tau=2, lam=2.0, tau_prime=6, item_type="queries", guarantee="probabilistic", users=100
    )
    with pytest.raises(InvalidParameterError, match="max-users"):  # the declared bound
        release_zealous(aol_215, p, rng=make_rng(1))
    with pytest.raises(InvalidParameterError, match="max_users"):
        ZealousParams.from_budget(
            epsilon=1.0, delta=1e-3, m=2, item_type="queries", guarantee="probabilistic"
        )


def test_invalid_and_budget(aol_215: SearchLog) -> None:
    with pytest.raises(InvalidParameterError):
        ZealousParams(m=0, tau=1, lam=1.0, tau_prime=3, item_type="queries",
                      guarantee="indistinguishability")  # fmt: skip
    with pytest.raises(InvalidParameterError):
        ZealousParams(m=2, tau=3, lam=1.0, tau_prime=2, item_type="queries",
                      guarantee="probabilistic", users=10)  # fmt: skip
    with pytest.raises(InvalidParameterError):
        ZealousParams(m=2, tau=1, lam=1.0, tau_prime=5, item_type="sessions",
                      guarantee="indistinguishability")  # fmt: skip
    p = dataclasses.replace(_loose("queries"), budget=Budget(1.0, 1e-6))
    with pytest.raises(BudgetExceededError):
        release_zealous(aol_215, p, rng=make_rng(1))


def test_end_to_end_thresholds_match_analysis() -> None:
    """N items each held by exactly τ users are published with probability π = P[τ + X > τ'];
    items held by τ - 1 users never are (step 3)."""
    from scipy.stats import beta as beta_dist

    from searchveil.mechanisms.noise import DiscreteLaplace

    N, tau, lam, tp = 8000, 2, 1.0, 4
    rows = [{"user": i * 10 + j, "query": f"a{i}"} for i in range(N) for j in range(tau)]
    rows += [{"user": 10**6 + i, "query": f"b{i}"} for i in range(N)]  # τ - 1 = 1 user each
    log = SearchLog.from_frame(pl.DataFrame(rows), name="thresholds")
    p = ZealousParams(
        m=1, tau=tau, lam=lam, tau_prime=tp, item_type="queries", guarantee="probabilistic",
        users=10**7,
    )  # fmt: skip
    out = release_zealous(log, p, rng=make_rng(8)).tables["items"]
    items_out = out.get_column("item").to_list()
    assert not any(x.startswith("b") for x in items_out)
    kept = len(items_out)
    pi = float(DiscreteLaplace(scale=lam).sf(tp + 1 - tau))
    assert (
        beta_dist.ppf(0.5e-6, kept, N - kept + 1)
        <= pi
        <= beta_dist.ppf(1 - 0.5e-6, kept + 1, N - kept)
    )
    assert out.get_column("noisy_count").min() > tp
