"""The differentially private sampler of Fouad et al. TKDE 2014 §III (Algorithm 2, Theorem 3),
with an explicit δ.

Theorem 3 claims ``(ε, δ + o(1))``-DP with an unquantified ``o(1)`` (footnote 4:
``h^k/|D|²``-type terms). We keep the algorithm's structure — Bernoulli record sampling
(keep probability ``1−β``), a threshold ``t = θ·n`` with ``θ`` uniform in ``(θ₀, θ₁)``, and the
exponential mechanism over ``a^+`` with the aggregate utility ``f^a`` — but replace the
``t``-frequent sublattice ``L_t(D)`` (whose membership is a non-private function of ``D``) by the
argument of Li, Qardaji & Su ("Provably private data anonymization: or, k-anonymity meets
differential privacy", 2011/ASIACCS 2012): after sampling, every output row whose value occurs
fewer than ``k ≥ t`` times is suppressed. An output row that survives therefore generalizes at
least ``k ≥ θ₀·n`` input records, i.e. it lies in ``L_t(D)``, as the paper requires.
The derivation is in docs/privacy/tabular.md; the pieces:

1. ``n̂ = n + DLap(1/ε_n)`` (exact discrete Laplace); ``N = n̂ + m`` with ``m`` such that
   ``P[N < n] ≤ η``. ``N`` is the public normaliser of the scores and ``k = ⌈θ·N⌉``.
2. Per-record generalization by the exponential mechanism with score
   ``f^a_D(x) = λ·|ρ(x, D)|/(N·Φ̃(x)) + u(x)^κ``. Adding one record raises each ``|ρ|`` by 0 or 1
   (a monotone score), so one record's choice distribution moves by at most a factor
   ``exp(ε'λ/(N φ₀))``; over the ``n ≤ N`` records this composes to ``ε_em = ε'·λ/φ₀``.
   With a public side table Θ the scores do not depend on ``D`` and ``ε_em = 0``.
3. Conditioned on every record's choice, "sample with probability p, release the chosen
   generalizations, suppress values with < k occurrences" is a *strongly-safe* k-anonymization
   of the chosen values; :func:`sampling_delta` computes its exact ``δ(k, p, ε_anon)`` (the sup over
   the size of the affected class of the hockey-stick divergence of the two binomial output
   laws), both directions, for any ``p``.
4. Floating point: the exponential mechanism samples *exactly* from integer weights
   ``W_x = ⌊2^51·exp(s_x − max s)⌋`` with a uniform integer below ``ΣW`` from the secure source
   (no floating-point uniform). The weights differ from the ideal ones by < 1 unit plus one
   rounding of ``exp`` (relative 2^-52), so each record's law is within total variation
   ``(|L|+1)·2^-50`` of the ideal one; over at most ``N`` records the whole output is within
   ``η_fp = N(|L|+1)2^-50`` — accounted as ``(1+e^ε)·η_fp`` in δ.

Total: ``ε = ε_n + ε_anon + ε_em`` and ``δ = δ_anon + (1+e^ε)(η + η_fp)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.rng import RandomSource
from searchveil.tabular.lattice import iter_class_sizes
from searchveil.tabular.measures import Measures
from searchveil.tabular.models import Problem
from searchveil.validate import check_int, check_positive, check_probability

__all__ = [
    "sampling_delta",
    "k_for_delta",
    "min_epsilon_for",
    "bernoulli_sample",
    "exact_choice",
    "DPPlan",
    "plan_dp",
    "dp_generalize",
    "FP_BITS",
    "modular_grid",
    "round_probability",
    "record_bound_error",
]

FP_BITS = 51  # integer weights < 2^51, so |L|·2^51 < 2^64 for |L| < 8192


def _kl(a: float, b: float) -> float:
    if a <= 0:
        return -math.log1p(-b)
    if a >= 1:
        return -math.log(b)
    return a * math.log(a / b) + (1 - a) * math.log((1 - a) / (1 - b))


def _delta_for_sizes(
    ns: npt.NDArray[np.int64], k: int, p: float, eps: float
) -> npt.NDArray[np.float64]:
    """Hockey-stick divergences (max of both directions) for affected-class sizes ``ns``
    (records of the class in the smaller table)."""
    e = math.exp(eps)
    n = ns.astype(np.float64)
    B, Bp = stats.binom(n, p), stats.binom(n + 1, p)
    # upward: P'(j) > e^ε P(j)  <=>  j > γ(n+1), γ = 1 - (1-p)e^-ε  (and j >= k)
    gamma = 1.0 - (1.0 - p) * math.exp(-eps)
    j0 = np.maximum(k, np.floor(gamma * (n + 1)) + 1)
    up = Bp.sf(j0 - 1) - e * B.sf(j0 - 1)
    # downward: P(j) > e^ε P'(j)  <=>  j < (n+1)(1 - (1-p)e^ε), for j >= k
    c = 1.0 - (1.0 - p) * e
    down = np.zeros_like(n)
    if c > 0:
        j1 = np.ceil((n + 1) * c) - 1
        ok = j1 >= k
        d = (B.cdf(j1) - B.cdf(k - 1)) - e * (Bp.cdf(j1) - Bp.cdf(k - 1))
        down = np.where(ok, d, 0.0)
    # the suppressed bucket (count < k)
    s, sp = B.cdf(k - 1), Bp.cdf(k - 1)
    down = down + np.maximum(0.0, s - e * sp)
    up = up + np.maximum(0.0, sp - e * s)
    return np.maximum(np.maximum(up, down), 0.0)


def sampling_delta(
    k: int, p: float, eps: float, *, target: float = 1e-12, stop_above: float | None = None
) -> float:
    """Exact δ of "keep each record with probability ``p``, suppress output values occurring
    fewer than ``k`` times" at ``ε`` (Li, Qardaji & Su's strongly-safe k-anonymization under
    sampling; their Theorem uses ``ε ≥ −ln(1−p)``, here any ``ε > 0``). The sup over the
    affected class size is evaluated exactly up to a size beyond which a Chernoff bound on
    both tails is below ``target``·(current sup); that bound is added. With ``stop_above``
    the search returns as soon as the sup exceeds it (a lower bound then)."""
    k = check_int("k", k, minimum=1)
    p = check_probability("p", p)
    eps = check_positive("eps", eps)
    gamma_up = 1.0 - (1.0 - p) * math.exp(-eps)
    kl_up = _kl(gamma_up, p)
    c = 1.0 - (1.0 - p) * math.exp(eps)
    kl_down = _kl(c, p) if c > 0 else math.inf
    kl = min(kl_up, kl_down)
    best = 0.0
    lo = max(0, k - 2)  # classes with fewer than k-1 other records are always suppressed
    chunk = 20_000
    while True:
        ns = np.arange(lo, lo + chunk, dtype=np.int64)
        best = max(best, float(_delta_for_sizes(ns, k, p, eps).max()))
        if stop_above is not None and best > stop_above:
            return best
        lo += chunk
        chunk = max(chunk, lo)  # doubling: O(log) rounds
        n_end = float(lo)
        tail = math.exp(-n_end * kl) if kl > 0 else 1.0
        if n_end * p > 2 * k and (tail <= target * max(best, 1e-300) / n_end or lo >= 4_000_000):
            # beyond n_end every class size contributes < tail (the bucket term is below the
            # lower tail as n·p > 2k); add it as a bound (conservative when capped)
            return min(1.0, best + tail)
        if lo > 50_000_000:
            return 1.0


def k_for_delta(eps: float, delta: float, p: float) -> int:
    """Smallest ``k`` with ``sampling_delta(k, p, eps) ≤ delta``."""
    lo, hi = 1, 1
    while sampling_delta(hi, p, eps, stop_above=delta) > delta:
        lo = hi + 1
        hi *= 2
        if hi > 10_000_000:
            raise InvalidParameterError("delta", delta, "a δ reachable with k ≤ 10^7")
    while lo < hi:
        mid = (lo + hi) // 2
        if sampling_delta(mid, p, eps, stop_above=delta) <= delta:
            hi = mid
        else:
            lo = mid + 1
    return hi


def min_epsilon_for(k: int, p: float, delta: float, *, eps_max: float = 20.0) -> float | None:
    """Smallest ``ε`` (to 1e-3 relative, rounded up) with ``sampling_delta(k, p, ε) ≤ δ``;
    None if even ``eps_max`` does not suffice."""
    if sampling_delta(k, p, eps_max, stop_above=delta) > delta:
        return None
    lo, hi = 0.0, eps_max
    while hi - lo > 1e-3 * hi:
        mid = 0.5 * (lo + hi)
        if mid > 0 and sampling_delta(k, p, mid, stop_above=delta) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def round_probability(p: float) -> tuple[int, float]:
    """``(num, p̂)`` with ``p̂ = num/2^53 = round(p·2^53)/2^53``: the keep probability that
    :func:`bernoulli_sample` actually samples (account with p̂, never p)."""
    return _p53(p)


def _p53(p: float) -> tuple[int, float]:
    num = int(round(p * 2**53))
    return num, num / 2**53


def bernoulli_sample(n: int, p: float, rng: RandomSource) -> npt.NDArray[np.bool_]:
    """Exact Bernoulli(p̂) per record, ``p̂ = round(p·2^53)/2^53`` (the ledger records p̂)."""
    num, _ = _p53(p)
    return rng.integers_below(2**53, n) < np.uint64(num)


def _weights(
    scores: npt.NDArray[np.float64], top: npt.NDArray[np.float64]
) -> npt.NDArray[np.uint64]:
    w = scores - top[:, None]
    np.exp(w, out=w)
    w *= 2.0**FP_BITS  # exact scaling by a power of two
    return w.astype(np.uint64)  # truncation toward zero = floor for w >= 0


def exact_choice(
    scores: npt.NDArray[np.float64], reps: npt.NDArray[np.int64], rng: RandomSource
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Exponential mechanism draws: row ``i`` of ``scores`` (log-weights) is sampled ``reps[i]``
    times from the integer weights ``⌊2^51·exp(s − max s)⌋`` with exact uniform integers
    (``integers_below(ΣW)`` by rejection, then the first column whose cumulative weight
    exceeds it). Returns (row, column) of every draw."""
    top = scores.max(axis=1)
    cum = _weights(scores, top)
    np.cumsum(cum, axis=1, out=cum)
    rows = np.repeat(np.arange(scores.shape[0]), reps)
    r = rng.integers_below(cum[rows, -1], rows.size)
    cols = (cum[rows] <= r[:, None]).sum(axis=1).astype(np.int64)
    return rows, cols


@dataclass(frozen=True)
class DPPlan:
    """Every parameter and budget share of one run (all recorded in the ledger)."""

    epsilon: float
    delta: float
    beta: float
    keep_probability: float
    theta0: float
    theta1: float
    theta: float
    n_hat: int
    n_upper: int
    t: float
    k: int
    eps_count: float
    eps_anon: float
    eps_em: float
    eps_prime: float
    delta_anon: float
    eta_count: float
    eta_fp: float
    delta_total: float
    side_table: bool
    lattice_size: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def record_bound_error(
    delta: float, n_bound: int | None, *, option: str = ""
) -> InvalidParameterError:
    """The refusal of a δ at or above 1/n, n the table's records. ``n_bound``: a declared
    public bound (its 1/n is shown); ``None``: n was bounded by the charged DP count, and the
    message names the rule and the parameter, never that noisy figure (nor anything computed
    from it). ``option``: how to declare a bound instead (e.g. ``--max-records N``)."""
    if n_bound is not None:
        return InvalidParameterError(
            "delta", delta, f"< 1/n ≈ {1.0 / n_bound:.3g} (n bounded by the declared --max-records)"
        )
    how = f", or declare a public bound with {option}" if option else ""
    return InvalidParameterError(
        "delta", delta, "< 1/n for the table's n records (the δ < 1/n policy, checked against "
        "a DP upper bound on n: the record count this run charged); this δ is not: choose δ "
        f"well below 1/(the number of records){how}",
    )  # fmt: skip


def _count_margin(lap: DiscreteLaplace, eta: float) -> int:
    """The smallest margin ``m`` with ``P[noise ≤ −(m+1)] ≤ η`` (``P[N < n]``, N = n̂ + m)."""
    margin = 0
    while float(lap.cdf(-margin - 1)) > eta:  # P[noise <= -(margin+1)] = P[N < n]
        margin = max(1, margin * 2)
    lo, hi = 0, margin
    while lo < hi:
        mid = (lo + hi) // 2
        if float(lap.cdf(-mid - 1)) <= eta:
            hi = mid
        else:
            lo = mid + 1
    return hi


def _anon_epsilon(k: int, p: float, delta_anon: float, epsilon: float, eps_n: float) -> float:
    """The least ``ε_anon`` that sampling with ``p`` and suppression below ``k`` needs."""
    eps_anon = min_epsilon_for(k, p, delta_anon, eps_max=epsilon - eps_n)
    if eps_anon is None:
        raise InvalidParameterError(
            "epsilon",
            epsilon,
            f"enough for sampling p={p:.4g} with k={k} at δ={delta_anon:.3g} (the needed "
            "ε_anon exceeds ε; raise --beta (sample fewer records), --theta0, ε or δ)",
        )
    return eps_anon


def _em_budget(
    epsilon: float, eps_n: float, eps_anon: float, side_table: bool, lam: float, phi0: float
) -> tuple[float, float]:
    """``(ε_em, ε')``: what is left for the exponential mechanism and its sharpness."""
    data_scores = (not side_table) and lam > 0
    eps_em = epsilon - eps_n - eps_anon if data_scores else 0.0
    if data_scores and eps_em <= 1e-9:
        raise InvalidParameterError(
            "epsilon",
            epsilon,
            f"> ε_count + ε_anon = {eps_n + eps_anon:.4g} to leave a budget "
            "for the exponential mechanism",
        )
    # ε' : per-record sensitivity of f is λ/(N φ₀); with Θ public there is no privacy cost and
    # we use the same sharpness as if the whole remaining budget were spent
    sharp = eps_em if data_scores else max(epsilon - eps_n - eps_anon, 1e-9)
    return eps_em, (sharp * phi0 / lam if lam > 0 else 0.0)


def plan_dp(
    *,
    n: int,
    epsilon: float,
    delta: float,
    beta: float,
    theta0: float,
    rng: RandomSource,
    lam: float,
    phi0: float,
    lattice_size: int,
    side_table: bool,
    theta1: float = 1.0,
    count_share: float = 0.05,
    side_table_size: int | None = None,
) -> DPPlan:
    """Split ``(ε, δ)`` and draw the public quantities ``n̂`` and ``θ`` (steps 1-2)."""
    epsilon = check_positive("epsilon", epsilon)
    delta = check_probability("delta", delta)
    beta = check_probability("beta", beta)
    theta0 = check_probability("theta0", theta0)
    theta1 = check_probability("theta1", theta1, open_high=False)
    if theta1 <= theta0:
        raise InvalidParameterError("theta1", theta1, f"> theta0 = {theta0}")
    count_share = check_probability("count_share", count_share)
    if lattice_size >= 8192:
        raise InvalidParameterError("lattice", lattice_size, "< 8192 level vectors (exact sampler)")
    _, p = _p53(1.0 - beta)
    eps_n = count_share * epsilon
    lap = DiscreteLaplace.for_epsilon(eps_n, 1.0)
    # tails with the scale actually sampled (the rational rounded up), not the requested one
    lap_eff = DiscreteLaplace(scale=lap.effective_scale)
    e_total = math.exp(epsilon)
    eta = 0.005 * delta / (1.0 + e_total)
    margin = _count_margin(lap_eff, eta)
    n_hat = int(n + int(lap.sample(1, rng)[0]))
    n_up = max(1, n_hat + margin)
    # the δ < 1/n policy is checked on the charged count's upper bound N (never the exact n)
    if delta >= 1.0 / n_up:
        raise record_bound_error(delta, None)
    theta = theta0 + (theta1 - theta0) * float(rng.uniform(1)[0])
    theta = max(theta, theta0)
    t = theta * n_up
    k = max(2, math.ceil(t))
    eta_fp = n_up * (lattice_size + 1) * 2.0**-50
    delta_anon = delta - (1.0 + e_total) * (eta + eta_fp)
    if delta_anon <= 0:
        raise InvalidParameterError(
            "delta", delta, "large enough to cover the sampler's accounting"
        )
    eps_anon = _anon_epsilon(k, p, delta_anon, epsilon, eps_n)
    eps_em, eps_prime = _em_budget(epsilon, eps_n, eps_anon, side_table, lam, phi0)
    return DPPlan(
        epsilon=epsilon,
        delta=delta,
        beta=beta,
        keep_probability=p,
        theta0=theta0,
        theta1=theta1,
        theta=theta,
        n_hat=n_hat,
        n_upper=n_up,
        t=t,
        k=k,
        eps_count=eps_n,
        eps_anon=eps_anon,
        eps_em=eps_em,
        eps_prime=eps_prime,
        delta_anon=delta_anon,
        eta_count=eta,
        eta_fp=eta_fp,
        delta_total=sampling_delta(k, p, eps_anon) + (1 + e_total) * (eta + eta_fp),
        side_table=side_table,
        lattice_size=lattice_size,
    )


def dp_generalize(
    problem: Problem,
    plan: DPPlan,
    sampled_rows: npt.NDArray[np.int64],
    rng: RandomSource,
    *,
    block: int = 1024,
    utility_sharpness: float = 0.0,
) -> npt.NDArray[np.int64]:
    """Step 5-7 for the sampled rows: one exponential-mechanism draw per row over its chain
    product (level-vector index), scores ``ε'·f`` with ``|ρ|`` over Θ and the public
    normaliser (``N`` for Θ = D, ``|Θ|`` for a side table), plus ``utility_sharpness·u^κ``
    (data-independent given the public ``N``: no privacy cost; 0 = the paper's ``ε'·f``).
    Returns the lattice index per row."""
    tuples = problem.inverse[sampled_rows]
    uniq, reps = np.unique(tuples, return_counts=True)
    L = problem.lattice.size
    norm = float(problem.theta_size if problem.side_table else plan.n_upper)
    dtype = np.uint16 if problem.theta_size < 65535 else np.uint32
    rho_t = np.empty((L, uniq.size), dtype=dtype)  # row per level vector: contiguous writes
    for idx, sizes in iter_class_sizes(
        problem.theta_leaves, problem.theta_weights, problem.table.hierarchies
    ):
        rho_t[idx] = sizes[uniq]
    meas = problem.measures
    draws_row: list[npt.NDArray[np.int64]] = []
    draws_col: list[npt.NDArray[np.int64]] = []
    for r0 in range(0, uniq.size, block):  # chunks of distinct tuples bound the memory
        sel = uniq[r0 : r0 + block]
        u, phi = modular_grid(meas, problem.leaves[sel])
        rho = rho_t[:, r0 : r0 + block].T.astype(np.float64)
        logw = meas.f(rho, norm, u, phi)
        logw *= plan.eps_prime
        if utility_sharpness:
            logw += utility_sharpness * meas.u_power(u)
        rr, cc = exact_choice(logw, reps[r0 : r0 + block], rng)
        draws_row.append(rr + r0)
        draws_col.append(cc)
    del rho_t
    row_of_draw = np.concatenate(draws_row) if draws_row else np.zeros(0, np.int64)
    col = np.concatenate(draws_col) if draws_col else np.zeros(0, np.int64)
    # map draws back to the sampled rows (draws of one tuple in any order: rows are exchangeable)
    order = np.argsort(tuples, kind="stable")
    out = np.empty(sampled_rows.size, np.int64)
    out[order] = col[np.argsort(uniq[row_of_draw], kind="stable")]
    return out


def modular_grid(
    meas: Measures, leaves: npt.NDArray[np.int32]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``u`` and ``Φ`` for records × all level vectors (lexicographic order), built as
    broadcast sums of the per-attribute tables (both are modular)."""
    D, W = meas.per_record(leaves)
    m = leaves.shape[0]
    k = len(D)
    half = k // 2

    def partial(tabs: list[npt.NDArray[np.float64]], lo: int, hi: int) -> npt.NDArray[np.float64]:
        shape = [m] + [t.shape[1] for t in tabs[lo:hi]]
        out = np.zeros(shape)
        for i in range(lo, hi):
            sh = [m] + [1] * (hi - lo)
            sh[i - lo + 1] = tabs[i].shape[1]
            out += tabs[i].reshape(sh)
        return out.reshape(m, -1)

    def grid(tabs: list[npt.NDArray[np.float64]]) -> npt.NDArray[np.float64]:
        a, b = partial(tabs, 0, half), partial(tabs, half, k)  # small grids, one big add
        return (a[:, :, None] + b[:, None, :]).reshape(m, -1)

    u, phi = grid(D), grid(W)
    return u.reshape(m, -1), phi.reshape(m, -1)
