"""CELS e2e, the union's overlap structure (docs/privacy/cels.md §5): P0 joins the data parties'
keyed digests, so it sees, for every set S of ≥ 2 data parties, how many digests exactly the
lists of S hold. Every member of S adds the same z_S dummy digests (drawn from the data
parties' key), so what P0 sees is c_S + z_S, (ε_u, δ_u)-DP against P0
(:class:`~searchveil.cels.distributed.UnionDummies`).

* in one process, every random choice fixed: P0's view on D and on D′ = D minus one user of P2
  is, set by set, the exact structure c_S plus the dummies z_S (drawn identically by every data
  party) — nothing else; with the dummies zeroed (the mutant) P0 sees c_S exactly, and the
  user's removal moves 4 = m pairs from {P1, P2, P3} to {P1, P3};
* the privacy map, exactly: the hockey-stick divergence of P0's view summed over the whole
  support, for every way one user can move the structure (ℓ1 ≤ 2m, on r = 3's four sets), is
  within the claimed δ_u at ε_u; ε_u cannot be lowered; a halved scale or a halved shift (the
  mutants) break it;
* the public sizes: L = the declared bound + the most dummies a party adds; too many parties
  (2^r sets) are refused; what `cels run` and `cels party` charge (ε + ε_u, δ + δ_u).

The statistical audit of P0's view is in tests/audit/test_audits.py.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import Counter

import numpy as np
import pytest

from _cels_inproc import deterministic, run_inproc
from _cels_shares import write_three_shares
from searchveil.cels.distributed import UnionDummies
from searchveil.cels.params import CelsParams, Share, check_e2e_party
from searchveil.errors import InvalidParameterError

M = 4
#: the counts log: one union, the whole ε_u (the input's columns split it between the pairs' and
#: the query pairs' unions, each with the same dummies: tests/test_cels_e2e.py)
PARAMS = CelsParams(epsilon=2.0, delta=1e-5, max_users=1000, max_pairs=M, max_party_pairs=100,
                    max_published_pairs=16, union_epsilon=2.0, schema="counts")  # fmt: skip
VICTIM = "1000"  # a user of P2 (id mod 3 = 1)
ALL3, P1P3 = 0b111, 0b101  # {P1, P2, P3}, {P1, P3}


def _rows(with_victim: bool = True) -> list[tuple]:
    """300 users clicking 1–3 of 12 pairs, and three users — of P1, P2 (the victim) and P3 —
    whose first m pairs are the same m 'bridge' pairs nobody else holds."""
    gen = np.random.Generator(np.random.PCG64(5))
    rows = []
    for u in range(300):
        for j, p in enumerate(gen.choice(12, size=int(gen.integers(1, 4)), replace=False)):
            rows.append((str(100 + u), f"q{p}", f"2006-03-01 10:{j:02d}:00", "1",
                         f"http://s{p}.example/"))  # fmt: skip
    for uid in ("999", VICTIM, "1001"):
        if uid != VICTIM or with_victim:
            rows += [(uid, f"bridge {j}", f"2006-03-01 09:0{j}:00", "1", f"http://b{j}.example/")
                     for j in range(M)]  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def neighbours(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Share]]:
    out = {}
    for name, full in (("D", True), ("D'", False)):
        paths = write_three_shares(_rows(full), tmp_path_factory.mktemp(name.replace("'", "p")))
        out[name] = [Share.read(p, max_pairs=M) for p in paths]
    return out


def _structure(shares: list[Share]) -> Counter[int]:
    """c_S: distinct bounded pairs held by exactly the parties of S (|S| ≥ 2; bit k − 1: Pk)."""
    holders: dict[tuple[str, str], int] = {}
    for k, sh in enumerate(shares, start=1):
        for pair in sh.hist.pairs.select("query", "url").iter_rows():
            holders[pair] = holders.get(pair, 0) | 1 << (k - 1)
    return Counter(s for s in holders.values() if s.bit_count() >= 2)


def _p0_view(shares: list[Share], monkeypatch: pytest.MonkeyPatch, zero: bool) -> tuple:
    """(n_S as P0 sees them: digests held by exactly the lists of S; the z each data party
    drew), from a reproducible in-process run; ``zero``: the mutant without dummies."""
    drawn: dict[str, np.ndarray] = {}
    real = UnionDummies.sample

    def sample(self: UnionDummies, rng: object, rows: int = 1) -> np.ndarray:
        z = real(self, rng, rows) * (0 if zero else 1)  # type: ignore[arg-type]
        drawn[threading.current_thread().name] = z[0]
        return z

    with monkeypatch.context() as mp, deterministic(mp, seed=9):
        mp.setattr(UnionDummies, "sample", sample)
        hub, results = run_inproc(PARAMS, shares, seed=21)
    bad = [r for r in results if isinstance(r, BaseException)]
    assert not bad and len({r.digest for r in results}) == 1, bad
    lists = [b for (_, ty, _, _), b in zip(hub.received[0], hub.blobs[0], strict=True)
             if ty == "union_set"]  # fmt: skip
    big_l = PARAMS.with_parties(3).party_pairs
    assert [len(b) for b in lists] == [16 * big_l] * 3  # every list: L digests
    seen: dict[bytes, int] = {}
    for k, blob in enumerate(lists, start=1):
        for i in range(0, len(blob), 16):
            seen[blob[i : i + 16]] = seen.get(blob[i : i + 16], 0) | 1 << (k - 1)
    view = Counter(s for s in seen.values() if s.bit_count() >= 2)
    assert set(drawn) == {"P1", "P2", "P3"}  # every data party, P0 never
    return view, drawn


def test_p0_sees_the_structure_plus_the_dummies_and_nothing_else(neighbours, monkeypatch):
    """P0's view on D and on D′ (one user of P2 removed, every random choice the same) is the
    exact overlap structure plus the dummies z_S, set by set; every data party drew the same z.
    The mutant without dummies: P0 sees c_S exactly and tells D from D′ — m pairs moved from
    {P1, P2, P3} to {P1, P3}."""
    sets = PARAMS.with_parties(3).union().sets
    c = {k: _structure(v) for k, v in neighbours.items()}
    assert c["D"][ALL3] - c["D'"][ALL3] == M and c["D'"][P1P3] - c["D"][P1P3] == M
    assert {s for s in sets if c["D"][s] != c["D'"][s]} == {ALL3, P1P3}
    for zero in (False, True):
        views = {}
        for name, shares in neighbours.items():
            view, drawn = _p0_view(shares, monkeypatch, zero)
            z = drawn["P1"]
            assert all((d == z).all() for d in drawn.values())  # drawn identically
            assert [view[s] - c[name][s] for s in sets] == z.tolist()  # exactly c + z
            views[name] = (view, z)
        (vd, zd), (vdp, zdp) = views["D"], views["D'"]
        if zero:  # the mutant: the exact structure, and the neighbour's change, in plain sight
            assert vd == c["D"] and vdp == c["D'"] and vd != vdp
        else:
            assert (zd == zdp).all() and (zd > M).all()  # the same fixed randomness on D and D′
            assert all(vd[s] > c["D"][s] for s in sets)


# -- the privacy map, exactly ---------------------------------------------------------------------
def _law(scale: float, shift: int, cap: int) -> np.ndarray:
    """P[z = k], k = 0…cap: z = min(cap, max(0, shift + X)), X ~ DLap(scale)."""
    p = math.exp(-1.0 / scale)
    k = np.arange(cap + 1)
    q = (1 - p) / (1 + p) * p ** np.abs(k - shift).astype(np.float64)
    q[0] = p**shift / (1 + p)  # P[X <= −shift]
    q[cap] = p ** (cap - shift) / (1 + p)  # P[X >= cap − shift]
    return q


def _loss(q: np.ndarray, move: int) -> dict[float, float]:
    """The privacy loss of one set's coordinate moved by ``move`` (c′_S − c_S): its law under
    D, ln q(z)/q(z − move), +inf where D′ cannot give the output; losses rounded up to 1e-9."""
    out: dict[float, float] = {}
    for z, pz in enumerate(q):
        w = z - move
        loss = math.inf if not 0 <= w < q.size else math.log(pz / q[w])
        key = loss if math.isinf(loss) else math.ceil(loss * 1e9) / 1e9
        out[key] = out.get(key, 0.0) + pz
    return out


def _delta(q: np.ndarray, moves: tuple[int, ...], eps: float) -> float:
    """The hockey-stick divergence of P0's view, D against D′, whose structures differ by
    ``moves`` — E[(1 − e^{ε − L})₊], L the total privacy loss (independent sets: the sum)."""
    total = {0.0: 1.0}
    for mv in moves:
        one = _loss(q, mv)
        nxt: dict[float, float] = {}
        for a, pa in total.items():
            for b, pb in one.items():
                nxt[a + b] = nxt.get(a + b, 0.0) + pa * pb
        total = nxt
    return sum(p * (1.0 if math.isinf(x) else max(0.0, -math.expm1(eps - x)))
               for x, p in total.items())  # fmt: skip


def _moves(n_sets: int, m: int) -> list[tuple[int, ...]]:
    """Every change one user can make to the structure's sets, up to their order: each of its
    ≤ m pairs leaves one set and may enter another — at most m up, at most m down."""
    out = set()
    for v in itertools.product(range(-m, m + 1), repeat=n_sets):
        up, down = sum(x for x in v if x > 0), -sum(x for x in v if x < 0)
        if 0 < up + down and up <= m and down <= m:
            out.add(tuple(sorted(x for x in v if x)))
    return sorted(out)


def test_the_union_privacy_map_holds_exactly_and_is_tight() -> None:
    """r = 3 (four sets), m = 3, ε_u = 1, δ_u = 1e-6: for every way one user moves the
    structure, the hockey-stick divergence summed over the whole support is ≤ δ_u at ε_u, and
    the claim is not vacuous (the worst move reaches a fifth of it); at 0.9·ε_u the worst move
    is far above δ_u. Mutants, against the same claim: the scale halved, the shift halved."""
    u = UnionDummies(parties=3, m=3, epsilon=1.0, delta=1e-6)
    eps, dl = u.privacy()
    assert eps <= 1.0 and dl <= 1e-6 and u.outside(u.shift - 1) > 1e-6  # s: the least shift
    assert u.cap == 2 * u.shift and u.per_party == 3 * u.cap and len(u.sets) == 4
    b = u.noise.effective_scale
    q = _law(b, u.shift, u.cap)
    assert q.sum() == pytest.approx(1.0, abs=1e-12)
    moves = _moves(len(u.sets), u.m)
    assert (3, -3) in [tuple(sorted(mv, reverse=True)) for mv in moves] and len(moves) > 40
    exact = {mv: _delta(q, mv, eps) for mv in moves}
    assert max(exact.values()) <= dl, max(exact.items(), key=lambda kv: kv[1])
    assert max(exact.values()) >= dl / 5
    assert _delta(q, (-3, 3), 0.9 * eps) > 100 * dl  # ε_u cannot be lowered
    halved = _law(b / 2, u.shift, u.cap)
    assert _delta(halved, (-3, 3), eps) > 100 * dl
    s2 = u.m + (u.shift - u.m) // 2
    short = _law(b, s2, 2 * s2)
    assert max(_delta(short, mv, eps) for mv in moves) > 10 * dl


def test_the_sampler_draws_the_analysed_law() -> None:
    """z = min(2s, max(0, s + X)) as drawn by every data party: within [0, 2s], the same from
    the same key stream, a χ² fit to the law the map analyses (α = 1e-6)."""
    from scipy import stats

    from searchveil.cels.e2e_release import KeyedStream
    from searchveil.rng import make_rng

    u = UnionDummies(parties=3, m=1, epsilon=2.0, delta=1e-3)
    z = u.sample(make_rng(4), rows=20_000).ravel()
    assert z.min() >= 0 and z.max() <= u.cap
    key = bytes(range(32))
    assert (u.sample(KeyedStream(key)) == u.sample(KeyedStream(key))).all()
    q = _law(u.noise.effective_scale, u.shift, u.cap)
    obs = np.bincount(z, minlength=q.size)
    keep = q * z.size >= 5  # the rest pooled into one bin
    exp, got = q[keep] * z.size, obs[keep]
    if not keep.all():
        exp, got = np.r_[exp, q[~keep].sum() * z.size], np.r_[got, obs[~keep].sum()]
    assert stats.chisquare(got, exp * got.sum() / exp.sum()).pvalue > 1e-6


# -- public sizes, parameters, what is charged ----------------------------------------------------
def test_list_length_parties_and_the_charge(neighbours) -> None:
    p3 = PARAMS.with_parties(3)
    u = p3.union()
    assert (u.parties, u.m, u.epsilon, u.delta) == (3, M, 2.0, 1e-5)  # ε_u as stated, δ_u = δ
    assert p3.party_pairs == 100 + u.per_party and p3.to_dict()["union_list_length"] == 100 + (
        u.per_party)  # fmt: skip
    check_e2e_party(p3, neighbours["D"][1], 3)  # 16 pairs ≤ the bound; the dummies fit in L
    tight = CelsParams(epsilon=2.0, delta=1e-5, max_users=1000, max_pairs=M, max_party_pairs=15,
                       parties=3, union_epsilon=2.0, schema="counts")  # fmt: skip
    with pytest.raises(InvalidParameterError, match="max-party-pairs"):
        check_e2e_party(tight, neighbours["D"][1], 3)
    five = CelsParams(epsilon=2.0, delta=1e-5, max_pairs=M, union_epsilon=0.5, parties=5,
                      schema="counts")  # fmt: skip
    assert five.union().epsilon == 0.5 and len(five.union().sets) == 26
    assert five.union().per_party > PARAMS.with_parties(5).union().per_party  # smaller ε_u
    with pytest.raises(InvalidParameterError, match="parties"):
        UnionDummies(parties=30, m=M, epsilon=1.0, delta=1e-6)  # 2^30 sets
    for bad in ({"union_epsilon": 0.0}, {"union_epsilon": -1.0}, {"union_epsilon": None},
                {"union_epsilon": None, "parties": 3},  # required in the e2e mode: no default
                {"mode": "conditional", "objective": "kl", "union_epsilon": 1.0}):  # fmt: skip
        with pytest.raises(InvalidParameterError, match="union-epsilon|union_epsilon"):
            CelsParams(**({"epsilon": 2.0, "delta": 1e-5} | bad))  # type: ignore[arg-type]
    readers, p0 = p3.readers_cost(), p3.cost()
    assert p0.epsilon == pytest.approx(readers.epsilon + 2.0)
    assert p0.delta == pytest.approx(readers.delta + 1e-5)
    assert [pt.name for pt in p0.parts] == [*(pt.name for pt in readers.parts), "union_view_p0"]
