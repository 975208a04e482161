"""DP synthetic-data comparators for the tabular report: MST (McKenna, Miklau & Sheldon,
"Winning the NIST Contest: A scalable and general approach to differentially private synthetic
data", JPC 2021) and AIM (McKenna, Mullins, Sheldon & Miklau, "AIM: An Adaptive and Iterative
Mechanism for Differentially Private Synthetic Data", VLDB 2022).

Both are implemented here on top of **private-pgm** (PyPI ``mbi``, Apache-2.0, the authors'
maintained library: graphical-model estimation and synthetic-data generation). Why not
smartnoise-synth (MIT), which packages both: its 1.0.8 pins ``opendp<0.15`` (our dev extra pins
0.16) and pulls ``opacus``/``torch`` with the CUDA wheels (several GB); ``mbi`` 2.0 resolves with
our numpy/scipy pins and installs jax (~390 MB, ≈13 s here). It ships the estimator, not the
mechanisms, so the mechanisms' measurement/selection logic is written here from the papers,
with this project's exact samplers:

* measurements: exact discrete Gaussian noise (:class:`searchveil.mechanisms.noise.
  DiscreteGaussian`, the injected rng) on marginal counts — ``ρ = 1/(2σ²)`` zCDP per marginal
  (L2 sensitivity 1 for adding/removing one record);
* selections: the exponential mechanism sampled exactly from integer weights
  (:func:`searchveil.tabular.dp.exact_choice`) — ``ε²/8`` zCDP (bounded range), plus its
  total-variation slack charged to δ;
* ``(ε, δ)`` → ρ by the conversion of Canonne, Kamath & Steinke (2020), Prop. 12:
  :func:`cdp_delta`, :func:`cdp_rho`.

Attribute domains are public: the leaves of each quasi-identifier's hierarchy, and for the other
columns their hierarchy file when one exists (Adult's ``salary-class``) — otherwise the values
present in the data, which the report states. Output: synthetic records (leaf values), labelled
synthetic everywhere.

Optional extra ``[synth-baselines]``; :func:`available` says whether it is installed and why not.
"""

from __future__ import annotations

import itertools
import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.noise import DiscreteGaussian
from searchveil.rng import RandomSource
from searchveil.tabular.dp import exact_choice
from searchveil.tabular.hierarchy import EncodedTable, Hierarchy, encode_table
from searchveil.tabular.release import TabularRelease
from searchveil.validate import check_positive, check_probability

__all__ = ["available", "cdp_delta", "cdp_rho", "SynthResult", "run_mst", "run_aim"]

METHODS = ("mst", "aim")


def available() -> tuple[bool, str]:
    """(installed?, reason when not)."""
    try:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        import jax

        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_enable_compilation_cache", False)
        import logging
        import warnings

        logging.getLogger("root").setLevel(logging.ERROR)  # mbi's JIT-timing warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import mbi  # noqa: F401
    except ImportError as exc:
        return False, (
            f"optional extra [synth-baselines] not installed ({exc.name} missing): "
            'pip install -e ".[synth-baselines]"'
        )
    return True, ""


def cdp_delta(rho: float, eps: float) -> float:
    """δ of a ρ-zCDP mechanism at ε (Canonne, Kamath & Steinke 2020, Prop. 12: the infimum
    over Rényi orders α > 1 of ``exp((α−1)(αρ−ε) + α·ln(1−1/α)) / (α−1)``)."""
    if rho <= 0:
        return 0.0
    lo, hi = 1.01, (eps + 1.0) / (2.0 * rho) + 2.0
    for _ in range(200):  # the exponent is convex in α: bisect on its derivative
        a = 0.5 * (lo + hi)
        if (2 * a - 1) * rho - eps + math.log1p(-1.0 / a) < 0:
            lo = a
        else:
            hi = a
    a = 0.5 * (lo + hi)
    val = (a - 1) * (a * rho - eps) + a * math.log1p(-1.0 / a) - math.log(a - 1.0)
    return min(1.0, math.exp(val))


def cdp_rho(eps: float, delta: float) -> float:
    """The largest ρ (to 1e-12 relative, rounded down) with ``cdp_delta(ρ, ε) ≤ δ``."""
    eps = check_positive("epsilon", eps)
    delta = check_probability("delta", delta)
    lo, hi = 0.0, eps + 1.0
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        if cdp_delta(mid, eps) <= delta:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass
class SynthResult:
    """Synthetic records (leaf values of every column) and what was spent."""

    method: str
    frame: pl.DataFrame
    table: EncodedTable
    release: TabularRelease
    epsilon: float
    delta: float
    rho: float
    seconds: float
    details: dict[str, Any]


def _domains(
    table: EncodedTable, extra: dict[str, Hierarchy]
) -> tuple[list[str], list[tuple[str, ...]], list[npt.NDArray[np.int64]], list[str]]:
    cols = list(table.frame.columns)
    labels: list[tuple[str, ...]] = []
    codes: list[npt.NDArray[np.int64]] = []
    notes: list[str] = []
    for c in cols:
        if c in table.qi:
            i = table.qi.index(c)
            labels.append(table.hierarchies[i].labels[0])
            codes.append(table.leaves[:, i].astype(np.int64))
            continue
        s = table.frame.get_column(c).fill_null("").to_numpy().astype(str)
        if c in extra:
            h = extra[c]
            lab = h.labels[0]
            idx = np.array([h.leaf_index.get(v, -1) for v in s])
            if (idx < 0).any():
                raise InvalidParameterError(c, s[idx < 0][0], f"a value of {h.source}")
            labels.append(lab)
            codes.append(idx.astype(np.int64))
        else:
            lab_arr, inv = np.unique(s, return_inverse=True)
            labels.append(tuple(str(v) for v in lab_arr))
            codes.append(inv.astype(np.int64))
            notes.append(f"domain of {c!r} taken from the data (no hierarchy file)")
    return cols, labels, codes, notes


class _Ctx:
    """Shared state of one run: the data as mbi objects, the noise and selection primitives."""

    def __init__(self, table: EncodedTable, extra: dict[str, Hierarchy], rng: RandomSource):
        import mbi

        self.mbi = mbi
        self.rng = rng
        self.cols, self.labels, codes, self.notes = _domains(table, extra)
        self.domain = mbi.Domain(self.cols, [len(v) for v in self.labels])
        self.data = mbi.Dataset({c: codes[i] for i, c in enumerate(self.cols)}, self.domain)
        self.em_picks = 0
        self.em_candidates = 0

    @classmethod
    def start(
        cls, method: str, table: EncodedTable, extra: dict[str, Hierarchy] | None, rng: RandomSource
    ) -> _Ctx:
        """A run's state, once the optional extra it needs is known to be installed."""
        ok, why = available()
        if not ok:
            raise InvalidParameterError("synth", method, why)
        return cls(table, extra or {}, rng)

    def answer(self, clique: tuple[str, ...]) -> npt.NDArray[np.float64]:
        return np.asarray(self.data.project(clique).datavector(), dtype=np.float64)

    def measure(self, clique: tuple[str, ...], sigma: float) -> Any:
        x = self.answer(clique)
        noise = DiscreteGaussian(sigma=sigma).sample(x.size, self.rng)
        y = x + noise.astype(np.float64)
        return self.mbi.LinearMeasurement(y, clique, stddev=sigma)

    def choose(self, scores: npt.NDArray[np.float64], eps: float, sensitivity: float) -> int:
        """Exponential mechanism (non-monotone: ε·s/(2Δ)), exact integer-weight sampler."""
        logits = (scores - scores.max()) * (eps / (2.0 * sensitivity))
        np.maximum(logits, -700.0, out=logits)
        _, col = exact_choice(logits[None, :], np.array([1]), self.rng)
        self.em_picks += 1
        self.em_candidates = max(self.em_candidates, scores.size)
        return int(col[0])

    def estimate(self, measurements: list[Any], iters: int, warm: Any = None) -> Any:
        est = self.mbi.estimation.MirrorDescent()
        return est.estimate(self.domain, measurements, iters=iters, warm_start=warm)

    def synthesize(self, model: Any, rows: int, source: str) -> tuple[pl.DataFrame, int]:
        from mbi.extensions.synthetic_data import synthetic_data

        seed = int(self.rng.words(1)[0] >> np.uint64(33))
        ds = synthetic_data(model, rows, seed=seed)
        out = {}
        for i, c in enumerate(self.cols):
            lab = np.array(self.labels[i], dtype=object)
            out[c] = pl.Series(c, list(lab[np.asarray(ds.data[c], dtype=np.int64)]), pl.Utf8)
        return pl.DataFrame(out), seed

    def slack(self) -> float:
        return self.em_picks * (self.em_candidates + 1) * 2.0**-50


def _result(
    ctx: _Ctx,
    method: str,
    table: EncodedTable,
    frame: pl.DataFrame,
    eps: float,
    delta: float,
    rho: float,
    t0: float,
    details: dict[str, Any],
) -> SynthResult:
    enc = encode_table(frame, list(table.hierarchies), source=f"{method} synthetic")
    rel = TabularRelease(
        enc,
        np.arange(enc.n, dtype=np.int64),
        np.zeros((enc.n, len(enc.hierarchies)), np.int64),
        frame,
        f"{method.upper()} DP synthetic data (private-pgm estimation)",
        "(ε, δ)-differential privacy via ρ-zCDP (add/remove one record); SYNTHETIC records",
        eps,
        delta,
    )
    details = {**details, "domain_notes": ctx.notes, "em_slack_tv": ctx.slack()}
    return SynthResult(method, frame, enc, rel, eps, delta, rho, time.perf_counter() - t0, details)


def _budget(epsilon: float, delta: float, picks_bound: int, candidates_bound: int) -> float:
    """ρ for (ε, δ − slack): the exact exponential-mechanism sampler's TV error (≤ picks ×
    (candidates+1)·2^-50) is charged to δ as (1 + e^ε)·slack."""
    slack = (1 + math.exp(epsilon)) * picks_bound * (candidates_bound + 1) * 2.0**-50
    if delta <= slack:
        raise InvalidParameterError("delta", delta, f"> the samplers' slack {slack:.3g}")
    return cdp_rho(epsilon, delta - slack)


def run_mst(
    table: EncodedTable,
    *,
    epsilon: float,
    delta: float,
    rng: RandomSource,
    extra_hierarchies: dict[str, Hierarchy] | None = None,
    rows: int | None = None,
    iters: int = 300,
) -> SynthResult:
    """MST: ρ/3 on all one-way marginals, ρ/3 on a maximum spanning tree of attribute pairs
    chosen by r−1 exponential mechanisms (score: L1 error of the pair's marginal under the
    one-way model, sensitivity 1; each pick ``ε_i = sqrt(8(ρ/3)/(r−1))``), ρ/3 on the tree's
    two-way marginals; private-pgm estimation; ``rows`` synthetic records (default: a noisy
    total from the measurements, i.e. the model's)."""
    t0 = time.perf_counter()
    ctx = _Ctx.start("mst", table, extra_hierarchies, rng)
    d = len(ctx.cols)
    n_pairs = d * (d - 1) // 2
    rho = _budget(epsilon, delta, max(d - 1, 1), n_pairs)
    sigma = math.sqrt(3.0 / (2.0 * rho))
    one = [ctx.measure((c,), sigma) for c in ctx.cols]
    model = ctx.estimate(one, iters=min(iters, 500))
    # selection: Kruskal-style, one exponential mechanism per tree edge
    comp = {c: c for c in ctx.cols}

    def find(a: str) -> str:
        while comp[a] != a:
            a = comp[a]
        return a

    pairs = list(itertools.combinations(ctx.cols, 2))
    err = {pr: float(np.abs(ctx.answer(pr) - np.asarray(model.project(pr).datavector())).sum())
           for pr in pairs}  # fmt: skip
    eps_pick = math.sqrt(8.0 * (rho / 3.0) / max(d - 1, 1))
    tree: list[tuple[str, str]] = []
    for _ in range(d - 1):
        cands = [pr for pr in pairs if find(pr[0]) != find(pr[1])]
        if not cands:
            break
        j = ctx.choose(np.array([err[pr] for pr in cands]), eps_pick, 1.0)
        a, b = cands[j]
        tree.append((a, b))
        comp[find(a)] = find(b)
    two = [ctx.measure(pr, sigma) for pr in tree]
    model = ctx.estimate(one + two, iters=iters, warm=model)
    n_rows = rows or max(1, int(round(float(model.total))))
    frame, seed = ctx.synthesize(model, n_rows, "mst")
    return _result(ctx, "mst", table, frame, epsilon, delta, rho, t0,
                   {"tree": [list(e) for e in tree], "sigma": sigma, "rows": n_rows})  # fmt: skip


# run_mst's keyword arguments on purpose: compare_methods calls every baseline the same way
def run_aim(
    table: EncodedTable,
    *,
    epsilon: float,
    delta: float,
    rng: RandomSource,
    extra_hierarchies: dict[str, Hierarchy] | None = None,
    rows: int | None = None,
    iters: int = 300,
    round_iters: int = 30,
    max_rounds: int | None = 10,
    max_cells: int = 10_000,
) -> SynthResult:
    """AIM with the workload of all two-way marginals (and their one-way closures), weights as
    in the paper (a candidate's weight = Σ over workload marginals of the attributes it shares);
    ``T = 16·d`` rounds budgeted (``max_rounds`` caps it, the budget is still spread over T):
    ρ/(T) per round split 0.9 measurement / 0.1 selection, one-way marginals first; each round
    the exponential mechanism picks the candidate whose noisy-bias-corrected L1 error under the
    current model is largest (sensitivity = its weight), measures it, re-estimates (warm start,
    ``round_iters`` mirror-descent steps); σ halves when a measurement barely moves the model;
    the last round uses whatever budget remains. Candidates larger than ``max_cells`` cells are
    left out (public: domain sizes only)."""
    t0 = time.perf_counter()
    ctx = _Ctx.start("aim", table, extra_hierarchies, rng)
    d = len(ctx.cols)
    size = {c: len(ctx.labels[i]) for i, c in enumerate(ctx.cols)}
    work = [
        pr for pr in itertools.combinations(ctx.cols, 2) if size[pr[0]] * size[pr[1]] <= max_cells
    ]
    cands: dict[tuple[str, ...], float] = {}
    for cl in [*((c,) for c in ctx.cols), *work]:
        cands[cl] = float(sum(len(set(cl) & set(w)) for w in work))
    T = 16 * d
    budget_rounds = T if max_rounds is None else min(T, max_rounds)
    rho = _budget(epsilon, delta, budget_rounds + 1, len(cands))
    sigma = math.sqrt(T / (2 * 0.9 * rho))
    eps_sel = math.sqrt(8 * 0.1 * rho / T)
    meas = [ctx.measure((c,), sigma) for c in ctx.cols]
    used = d * 0.5 / sigma**2
    model = ctx.estimate(meas, iters=round_iters)
    answers = {cl: ctx.answer(cl) for cl in cands}
    picked: list[list[str]] = []
    last = False
    t = 0
    while not last:
        t += 1
        remaining = rho - used
        if remaining < 2 * (0.5 / sigma**2 + eps_sel**2 / 8) or t >= budget_rounds:
            sigma = math.sqrt(1.0 / (2 * 0.9 * remaining))
            eps_sel = math.sqrt(8 * 0.1 * remaining)
            last = True
        used += 0.5 / sigma**2 + eps_sel**2 / 8
        keys = list(cands)
        scores = []
        for cl in keys:
            est = np.asarray(model.project(cl).datavector())
            bias = math.sqrt(2 / math.pi) * sigma * est.size
            scores.append(cands[cl] * (float(np.abs(answers[cl] - est).sum()) - bias))
        j = ctx.choose(np.array(scores), eps_sel, max(cands.values()))
        cl = keys[j]
        picked.append(list(cl))
        before = np.asarray(model.project(cl).datavector())
        meas.append(ctx.measure(cl, sigma))
        model = ctx.estimate(meas, iters=round_iters, warm=model)
        after = np.asarray(model.project(cl).datavector())
        if np.abs(after - before).sum() <= sigma * math.sqrt(2 / math.pi) * after.size:
            sigma /= 2
            eps_sel *= 2
    model = ctx.estimate(meas, iters=iters, warm=model)
    n_rows = rows or max(1, int(round(float(model.total))))
    frame, seed = ctx.synthesize(model, n_rows, "aim")
    return _result(ctx, "aim", table, frame, epsilon, delta, rho, t0,
                   {"rounds": t, "selected": picked, "rho_used": used, "rows": n_rows})  # fmt: skip
