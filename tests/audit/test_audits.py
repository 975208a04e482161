"""Statistical privacy audits (marked ``audit``; CI runs them). Each runs the real code path
many times on neighbouring inputs — an item held by n users vs n − 1 — via R independent
replicate items in one run (items are independent given their counts; every user holds one
item), bounds the keep probabilities with Clopper–Pearson at α = 1e-6, and checks the
empirical ε lower bound against the claim. Mutation tests prove the auditor catches broken
mechanisms (halved noise; skipped contribution bounding)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import polars as pl
import pytest

from searchveil.audit import AuditResult, audit_event, epsilon_lower_bound
from searchveil.bounding import KernelSpec, Rule, Stream
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.rounds import ItemPool, RoundsSelection
from searchveil.mechanisms.selection import LaplaceThreshold, make_strategy
from searchveil.model import SearchLog
from searchveil.release.korolova import KorolovaParams, release_korolova
from searchveil.release.zealous import ZealousParams, release_zealous
from searchveil.rng import make_rng

pytestmark = pytest.mark.audit

EPS, DELTA = math.log(10), 1e-5


def tiers(fast: int, full: int) -> list:
    """Trial counts of one audit: ``fast`` in the default tier, ``full`` (the full power,
    marked ``slow``) in the full tier. Each fast count is large enough for every assertion of
    its test, and for a mutant test at that count to catch its broken mechanism."""
    return [
        pytest.param(fast, id=f"{fast}"),
        pytest.param(full, id=f"{full}", marks=pytest.mark.slow),
    ]


def _sets(replicates: int, n: int) -> pl.DataFrame:
    """R items, each held by n distinct users (user ids unique across items)."""
    item = np.repeat(np.arange(replicates), n)
    return pl.DataFrame({"user": np.arange(replicates * n), "item": item.astype(str)})


def _best_n(keep: Callable[[np.ndarray], np.ndarray], delta: float, trials: int) -> int:
    """The count n whose event 'item kept' gives the strongest expected audit."""
    n = np.arange(1, 200)
    p1, p0 = keep(n), np.where(n > 1, keep(n - 1), 0.0)
    ok = p0 * trials >= 30
    score = np.where(ok, np.log(np.maximum(p1 - delta, 1e-300) / np.maximum(p0, 1e-300)), -np.inf)
    return int(n[int(np.argmax(score))])


@pytest.mark.parametrize("name", ["laplace", "gaussian", "policy-gaussian"])
def test_selection_strategies_pass_the_audit(name: str) -> None:
    st = make_strategy(name, epsilon=EPS, delta=DELTA, d=1)
    trials = 60_000 if name == "policy-gaussian" else 200_000
    n = _best_n(st.keep_probability, st.privacy()["delta"], trials)
    rng = make_rng(20260101)

    def run(count: int) -> Callable[[int], int]:
        return lambda r: st.select(_sets(r, count), rng=rng).height if count else 0

    res = audit_event(run(n), run(n - 1), trials=trials, epsilon=st.privacy()["epsilon"],
                      delta=st.privacy()["delta"])  # fmt: skip
    assert res.passed, res
    # the audit is not vacuous: it certifies a substantial part of the claimed ε
    assert res.epsilon_lower_bound > 0.3 * res.epsilon_claimed, res


def _query_log(replicates: int, n: int, repeats: int = 1) -> SearchLog:
    users = np.arange(replicates * n)
    q = np.repeat(np.arange(replicates), n).astype(str)
    df = pl.DataFrame({"user": np.repeat(users, repeats), "query": np.repeat(q, repeats)})
    return SearchLog.from_frame(df.with_columns(pl.col("user").cast(pl.Int64)))


@pytest.mark.parametrize("trials", tiers(5_000, 40_000))
def test_korolova_release_passes_the_audit(trials: int) -> None:
    params = KorolovaParams.from_budget(epsilon=EPS, delta=DELTA, d=1, url_selection="none",
                                        split=(1.0, 1.0))  # fmt: skip
    pr = params.privacy("exact")
    from searchveil.mechanisms.threshold import keep_probability

    def keep(n: np.ndarray) -> np.ndarray:
        return np.asarray(keep_probability(n, threshold=params.K, scale=params.b, noise="discrete"))

    n = _best_n(keep, pr["delta"], trials)
    rng = make_rng(7)

    def run(count: int) -> Callable[[int], int]:
        return lambda r: (
            release_korolova(_query_log(r, count), params, rng=rng).tables["queries"].height
        )

    res = audit_event(run(n), run(n - 1), trials=trials, epsilon=pr["epsilon"], delta=pr["delta"])
    assert res.passed, res
    assert res.epsilon_lower_bound > 0.1 * res.epsilon_claimed, res


@pytest.mark.parametrize("trials", tiers(5_000, 40_000))
def test_zealous_release_passes_the_audit(trials: int) -> None:
    params = ZealousParams.from_budget(epsilon=1.0, delta=1e-5, m=1, item_type="queries",
                                       guarantee="indistinguishability")  # fmt: skip
    pr = params.privacy("exact")
    rng = make_rng(9)
    tp = math.floor(params.tau_prime) + 1

    def keep(n: np.ndarray) -> np.ndarray:
        return np.where(n >= params.tau, DiscreteLaplace(params.lam).sf(tp - n), 0.0)

    n = max(_best_n(keep, pr["delta"], trials), int(params.tau) + 1)

    def run(count: int) -> Callable[[int], int]:
        return lambda r: (
            release_zealous(_query_log(r, count), params, rng=rng).tables["items"].height
        )

    res = audit_event(run(n), run(n - 1), trials=trials, epsilon=pr["epsilon"], delta=pr["delta"])
    assert res.passed, res
    # not vacuous: the audited event happened on both inputs, at the rates the exact map
    # predicts, and the audit certifies a real part of the claimed ε
    assert res.p_d * trials >= 30 and res.p_dprime * trials >= 30, res
    assert abs(res.p_d - float(keep(np.array([n]))[0])) < 0.02, res
    assert abs(res.p_dprime - float(keep(np.array([n - 1]))[0])) < 0.02, res
    assert res.epsilon_lower_bound > 0.1 * res.epsilon_claimed, res


@pytest.mark.parametrize("trials", tiers(50_000, 200_000))
def test_mutation_halved_noise_is_caught(trials: int) -> None:
    good = LaplaceThreshold.for_budget(epsilon=EPS, delta=DELTA, d=1)
    broken = LaplaceThreshold(d=1, K=good.K, b=good.b / 2)  # claims good's ε
    rng = make_rng(3)
    n = good.K  # keep(K)/keep(K−1) = e^{1/b}: the tightest event

    def run(st: LaplaceThreshold, count: int) -> Callable[[int], int]:
        return lambda r: st.select(_sets(r, count), rng=rng).height

    ok = audit_event(run(good, n), run(good, n - 1), trials=trials, epsilon=EPS, delta=DELTA)
    bad = audit_event(run(broken, n), run(broken, n - 1), trials=trials, epsilon=EPS,
                      delta=DELTA)  # fmt: skip
    assert ok.passed and not bad.passed, (ok, bad)


def _repeat_log(replicates: int, n: int, repeats: int) -> SearchLog:
    """R items (queries), each posed ``repeats`` times — as distinct query events, one minute
    apart — by each of n users."""
    users = np.repeat(np.arange(replicates * n), repeats)
    q = np.repeat(np.arange(replicates), n * repeats).astype(str)
    minute = np.tile(np.arange(repeats), replicates * n)
    df = pl.DataFrame({"user": users, "query": q, "minute": minute}).with_columns(
        pl.col("user").cast(pl.Int64),
        time=pl.datetime(2006, 3, 1) + pl.duration(minutes=pl.col("minute")),
    )
    return SearchLog.from_frame(df.drop("minute"))


@pytest.mark.parametrize("trials", tiers(20_000, 60_000))
def test_mutation_skipped_bounding_is_caught(trials: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Korolova's real release path with its bounding step (Limit-User-Activity) replaced by
    the identity: each user posed the query 3 times, so neighbouring counts differ by 3 instead
    of ≤ d = 1 — the audit must fail; with the real bounding it passes."""
    import searchveil.release.korolova.params as korolova

    params = KorolovaParams.from_budget(epsilon=EPS, delta=DELTA, d=1, url_selection="none",
                                        split=(1.0, 1.0))  # fmt: skip
    pr = params.privacy("exact")
    rng = make_rng(5)
    repeats = 3

    def keep(c: np.ndarray) -> np.ndarray:
        return DiscreteLaplace(params.b).sf(math.floor(params.K) + 1 - c)

    # the strongest event against the skipped bounding: counts 3n vs 3(n-1)
    n = _best_n(lambda x: keep(repeats * x), 0.0, trials)

    def run(count: int) -> Callable[[int], int]:
        return lambda r: (
            release_korolova(_repeat_log(r, count, repeats), params, rng=rng)
            .tables["queries"]
            .height
        )

    # the real path: bounding (the kernel) keeps one event per user, counts differ by 1
    seen: list[int] = []
    real_bound = korolova.bound_log

    def spy(df: pl.DataFrame, spec: KernelSpec) -> object:
        kept, figures = real_bound(df, spec)
        seen.append(kept[Stream.EVENTS].height)
        return kept, figures

    monkeypatch.setattr(korolova, "bound_log", spy)
    ok = audit_event(run(n), run(n - 1), trials=trials, epsilon=pr["epsilon"], delta=pr["delta"])
    assert seen == [trials * n, trials * (n - 1)]  # the patched name is the one the path calls
    assert ok.passed, ok

    # the mutant: the same path without bounding (every event kept)
    def unbounded(df: pl.DataFrame, spec: KernelSpec) -> object:
        return real_bound(df, KernelSpec(Rule(10**9), spec.clicks, spec.normalize))

    monkeypatch.setattr(korolova, "bound_log", unbounded)
    bad = audit_event(run(n), run(n - 1), trials=trials, epsilon=pr["epsilon"],
                      delta=pr["delta"])  # fmt: skip
    assert bad.p_d * trials >= 30 and bad.p_dprime * trials >= 30, bad
    assert not bad.passed, bad


def test_auditor_bound_is_conservative() -> None:
    # equal hit counts can never certify a positive ε
    assert epsilon_lower_bound(5000, 5000, 100_000, delta=0.0) <= 0.0
    assert epsilon_lower_bound(0, 0, 100, delta=0.0) <= 0.0


# -- the ℓ2-weighted rounds (issue 24): probe-reweight, probe-reweight-2r, DP-SIPS ------------


def _pool(replicates: int, n: int) -> ItemPool:
    """R items, each held by n users who hold nothing else (integer arrays: the mechanism's
    own input, without the string encoding)."""
    users = np.arange(replicates * n, dtype=np.int32)
    items = np.repeat(np.arange(replicates, dtype=np.int32), n)
    return ItemPool(users=users, items=items, rank=np.zeros(users.size, np.int32),
                    names=pl.Series("item", np.arange(replicates).astype(str)))  # fmt: skip


def _rounds_audit(st: RoundsSelection, n: int, trials: int, seed: int) -> AuditResult:
    pr = st.privacy()
    rng = make_rng(seed)

    def run(count: int) -> Callable[[int], int]:
        return lambda r: st.select_pool(_pool(r, count), rng).size if count else 0

    return audit_event(run(n), run(n - 1), trials=trials, epsilon=pr["epsilon"],
                       delta=pr["delta"])  # fmt: skip


def _strongest_n(keep: Callable[[np.ndarray], np.ndarray], delta: float, trials: int) -> int:
    """The n whose n vs n−1 audit is expected to certify the most ε (all four events)."""
    n = np.arange(2, 80)
    p1, p0 = keep(n), keep(n - 1)
    lbs = [
        epsilon_lower_bound(int(a * trials), int(b * trials), trials, delta=delta)
        for a, b in zip(p1, p0, strict=True)
    ]
    return int(n[int(np.argmax(lbs))])


@pytest.mark.parametrize("name", ["probe-reweight", "probe-reweight-2r", "dp-sips"])
def test_rounds_strategies_pass_the_audit(name: str) -> None:
    """The real rounds (probe, reroute, bias, composition) on R items held by n vs n − 1 users:
    the audit passes and is not vacuous."""
    st = make_strategy(name, epsilon=EPS, delta=DELTA, d=1)
    assert isinstance(st, RoundsSelection)
    trials = 200_000
    n = _strongest_n(st.keep_probability, st.privacy()["delta"], trials)
    res = _rounds_audit(st, n, trials, seed=24)
    assert res.passed, res
    # the run matches the exact keep probability of the model (users holding one item)
    assert abs(res.p_d - float(st.keep_probability(np.array([n]))[0])) < 0.01, res
    assert res.epsilon_lower_bound > 0.3 * res.epsilon_claimed, res


@pytest.mark.parametrize(("name", "trials"), [("probe-reweight", 400_000), ("probe-reweight-2r",
600_000),
    pytest.param("dp-sips", 1_200_000, marks=pytest.mark.slow)])  # fmt: skip
def test_mutation_sensitivity_off_by_one_is_caught(
    name: str, trials: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each user's weight doubled (ℓ2 sensitivity 2 where the calibration assumes 1): the audit
    of the same rounds, with the same claimed (ε, δ), must fail. The counts stay as they were:
    the margin by which a mutant is caught shrinks fast with fewer trials (probe-reweight-2r is no
    longer caught at 200,000, DP-SIPS only barely at 400,000). DP-SIPS at 1.2M (about 20 s) is the
    full tier's; probe-reweight and probe-reweight-2r run the same rounds code in the default
    tier."""
    import searchveil.mechanisms.rounds as sel

    st = make_strategy(name, epsilon=EPS, delta=DELTA, d=1)
    assert isinstance(st, RoundsSelection)
    pr = st.privacy()  # the claim, computed before the mutation
    real = sel.unit_weights
    monkeypatch.setattr(sel, "unit_weights", lambda scale, d: 2 * real(scale, d))
    n = _strongest_n(lambda x: st.keep_probability(2 * x), pr["delta"], trials)
    rng = make_rng(25)

    def run(count: int) -> Callable[[int], int]:
        return lambda r: st.select_pool(_pool(r, count), rng).size

    bad = audit_event(run(n), run(n - 1), trials=trials, epsilon=pr["epsilon"],
                      delta=pr["delta"])  # fmt: skip
    assert not bad.passed, bad


# -- CELS' distributed noise (issue 41): shares, what a party sees and what a reader sees --------
def _cels_views(shares: object, r: int, trials: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(the view of P1 once it has subtracted its own share, the total a reader sees) of a
    count 0, as the protocol forms them (:meth:`searchveil.cels.e2e.E2EPhases.noisy_sum`:
    every party — P0 too — adds one share drawn by ``shares.sample``)."""
    rng = make_rng(seed)
    draws = [shares.sample(trials, rng) for _ in range(r + 1)]  # type: ignore[attr-defined]
    total = np.sum(draws, axis=0)
    return total - draws[1], total


@pytest.mark.parametrize("trials", tiers(50_000, 400_000))
def test_cels_distributed_noise_passes_the_audit_for_each_party(trials: int) -> None:
    """A count n vs n − 1 under the e2e mode's Skellam shares, seen by P1 once it has removed
    its own share (any r of the r + 1 shares are the full noise). The privacy map is exact (the
    hockey-stick divergence of the privacy loss), so its curve can be audited where events are
    frequent: at ε' = 0.3 and the δ' the map gives there, the event "view >= n" certifies
    nearly ε' and no more; shares sized 1/(r + 1) (the mutant: a party then faces 3/4 of the
    variance) fail the same audit."""
    from searchveil.cels.distributed import DistributedE2E
    from searchveil.mechanisms.shares import SkellamShares, skellam_delta

    r, n, e = 3, 50, 0.3
    d = DistributedE2E(m=1, eps_counts=2.0, delta_counts=1e-5, eps_profile=1.0, parties=r)
    claim = skellam_delta(d.counts.full_variance, e, m=1)
    mutant = SkellamShares(d.counts.variance, r + 1)
    for shares, should_pass in ((d.counts, True), (mutant, False)):
        view_d, _ = _cels_views(shares, r, trials, seed=41)
        view_dp, _ = _cels_views(shares, r, trials, seed=42)
        res = audit_event(lambda t, v=view_d: int(np.sum(v + n >= n)),
                          lambda t, v=view_dp: int(np.sum(v + n - 1 >= n)),
                          trials=trials, epsilon=e, delta=claim)  # fmt: skip
        assert res.passed == should_pass, (shares, res)
        if should_pass:
            assert res.epsilon_lower_bound > 0.6 * e, res


@pytest.mark.parametrize("trials", tiers(20_000, 80_000))
def test_cels_published_pairs_pass_the_audit(trials: int) -> None:
    """The release path's threshold (:func:`searchveil.cels.e2e_release.published_slots`) on
    R replicate slots holding n vs n − 1 users, with the r + 1 shares a reader sees: the audit
    of "published" passes against the distributed privacy map (ε, δ) and is not vacuous."""
    from searchveil.cels.distributed import DistributedE2E
    from searchveil.cels.e2e_release import published_slots

    d = DistributedE2E(m=1, eps_counts=1.0, delta_counts=1e-5, eps_profile=1.0, parties=3)
    eps, dl = d.counts_privacy()
    total_law = d.counts.total(d.contributors)

    def keep(c: np.ndarray) -> np.ndarray:
        return np.array([total_law.sf(d.tau_prime + 1 - int(x)) for x in np.ravel(c)])

    n = _strongest_n(keep, dl, trials)

    def run(count: int, seed: int) -> Callable[[int], int]:
        def go(t: int) -> int:
            _, total = _cels_views(d.counts, 3, t, seed)
            return int(published_slots(total + count, d.tau_prime, t, rng=make_rng(seed))[0].size)

        return go

    res = audit_event(run(n, 43), run(n - 1, 44), trials=trials, epsilon=eps, delta=dl)
    assert res.passed, res
    assert res.p_d * trials >= 30 and res.p_dprime * trials >= 30, res
    assert res.epsilon_lower_bound > 0.1 * res.epsilon_claimed, res


@pytest.mark.parametrize("trials", tiers(50_000, 400_000))
def test_cels_union_view_passes_the_audit_against_p0(trials: int) -> None:
    """P0's view of the union (issue 41): c_S + z_S for every set S of ≥ 2 data parties, the
    dummies z_S drawn by :meth:`searchveil.cels.distributed.UnionDummies.sample`. One user's m
    pairs move from S₁ = {P1, P2, P3} to S₂ = {P1, P3} (the neighbour moving the ℓ1 budget 2m);
    the event "y_{S₁} − c_{S₁} ≥ s and y_{S₂} − c_{S₂} ≤ s" has the full ratio e^{ε_u} in the
    interior: the audit passes against (ε_u, δ_u) and certifies most of ε_u; a scale halved (the
    mutant) fails it."""
    from searchveil.cels.distributed import UnionDummies

    u = UnionDummies(parties=3, m=3, epsilon=1.0, delta=1e-6)
    eps, dl = u.privacy()
    i1, i2 = u.sets.index(0b111), u.sets.index(0b101)
    half = UnionDummies(parties=3, m=3, epsilon=2.0, delta=1e-6)  # the scale halved

    def run(sampler: UnionDummies, move: int, seed: int) -> Callable[[int], int]:
        def go(t: int) -> int:
            z = sampler.sample(make_rng(seed), rows=t)  # y − c under D: z; under D′: z ∓ m
            s = sampler.shift
            return int(np.sum((z[:, i1] - move >= s) & (z[:, i2] + move <= s)))

        return go

    for sampler, should_pass in ((u, True), (half, False)):
        res = audit_event(run(sampler, 0, 61), run(sampler, u.m, 62), trials=trials,
                          epsilon=eps, delta=dl)  # fmt: skip
        assert res.passed == should_pass, (sampler, res)
        if should_pass:
            assert res.epsilon_lower_bound > 0.7 * eps, res
