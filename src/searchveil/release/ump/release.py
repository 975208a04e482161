"""``release_ump``: the same-schema sanitization of Hong et al. EDBT 2012 (Algorithm 1) — the
*conditional* mode of ``release ump`` (``--mode conditional``): **not differentially private**,
the counts are computed from the exact histogram; kept by name to reproduce the papers' tables.
The end-to-end DP mode is :mod:`searchveil.release.ump.e2e`.

histogram (``click_histogram``) → Condition 1 (``preprocess``) → constraints (``M x ≤ b``) →
objective + solver (O-UMP / F-UMP / D-UMP) → counts x → multinomial sampling of user ids →
tables ``log`` (AnonID, Query, ClickURL, Count) and ``counts`` (query, url, x_ij) + ledger.

Guarantee: given the counts x, the sampling is (ε, δ)-probabilistically differentially private
for adding/removing one user's whole log (Theorem 1; Götz et al.'s notion, which implies
(ε, δ)-indistinguishability). The counts x themselves are computed from the private data and are
*not* differentially private; the ledger says so. The optional count noise of EDBT §4.2 /
CELS §3.3 (``count_epsilon``, ``sensitivity``) adds discrete Laplace(d/ε') noise to x and then
removes draws until every constraint holds again; its ε' is only valid if the optimal counts of
neighbouring inputs differ by at most d, which the paper asks the data holder to enforce by an
expensive preprocessing we do not run — the ledger records it as an *assumption*
(docs/privacy/ump.md explains why the paper's preprocessing argument is also incomplete).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
import scipy.sparse as sp

from searchveil.errors import InternalError, InvalidParameterError
from searchveil.io.ledger import build_ledger
from searchveil.mechanisms.budget import PrivacyCost, Relation
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.model import SearchLog, click_histogram
from searchveil.release.histogram import HistogramRelease
from searchveil.release.ump.constraints import (
    UmpInput,
    constraint_matrix,
    is_feasible,
    preprocess,
    privacy_bound,
)
from searchveil.release.ump.kl import KLMethod, cels_bound, solve_kl
from searchveil.release.ump.metrics import ump_metrics
from searchveil.release.ump.sampling import sample_users, sampled_log
from searchveil.release.ump.solvers import (
    DMethod,
    FMethod,
    OMethod,
    Solution,
    repair,
    solve_dump,
    solve_fump,
    solve_oump,
)
from searchveil.rng import RandomSource
from searchveil.validate import check_int, check_positive, check_probability, parse_choice


class UmpObjective(StrEnum):
    """What the UMP counts optimise: O-UMP, F-UMP, D-UMP, and CELS's KL loss."""

    SIZE = "size"
    FREQUENT = "frequent"
    DIVERSITY = "diversity"
    KL = "kl"


# the solvers of each objective; the first is the default
SOLVERS: dict[UmpObjective, type[StrEnum]] = {
    UmpObjective.SIZE: OMethod,
    UmpObjective.FREQUENT: FMethod,
    UmpObjective.DIVERSITY: DMethod,
    UmpObjective.KL: KLMethod,
}
#: the conditional mode's label (ledger, report, --help): the counts are not private
NOT_DP = "not differentially private: counts computed from the exact histogram"
NOTION = (
    f"{NOT_DP}; only the sampling given the counts is (ε,δ)-probabilistically DP "
    "(Hong et al. Thm 1)"
)
#: why the conditional mode's (ε, δ) can never be charged to a budget
CONDITIONAL = (
    "--mode conditional is not differentially private (its counts are computed from the exact "
    "histogram; only the sampling given them is covered by (ε, δ))"
)


@dataclass(frozen=True)
class UmpParams:
    """Parameters of a UMP release. ``solver`` depends on the objective: size → lp-greedy |
    lp-floor | mip; frequent → lp | mip; diversity → spe-violated | spe | mip."""

    objective: UmpObjective | str
    epsilon: float
    delta: float
    solver: StrEnum | str | None = None
    output_size: int | None = None
    min_support: float | None = None
    time_limit: float = 60.0
    search_seconds: float = 5.0
    count_epsilon: float | None = None
    sensitivity: float | None = None
    parties: int = 1

    def __post_init__(self) -> None:
        objective = parse_choice("objective", self.objective, UmpObjective)
        object.__setattr__(self, "objective", objective)
        check_positive("epsilon", self.epsilon)
        check_probability("delta", self.delta)
        if self.solver is not None:
            solver = parse_choice("solver", self.solver, SOLVERS[objective])
            object.__setattr__(self, "solver", solver)
        if self.objective == "frequent":
            if self.output_size is None:
                raise InvalidParameterError(
                    "output_size", None, "an integer |O| ≥ 1 for objective 'frequent'"
                )
            check_int("output_size", self.output_size, minimum=1)
            if self.min_support is None or not 0 < self.min_support <= 1:
                raise InvalidParameterError(
                    "min_support", self.min_support, "a support s in (0, 1] for 'frequent'"
                )
        elif self.objective == "kl":  # CELS §2.2: |O| fixed, KL loss minimised
            if self.output_size is None or self.min_support is not None:
                raise InvalidParameterError(
                    "output_size", self.output_size, "an integer |O| ≥ 1 for objective 'kl'"
                )
            check_int("output_size", self.output_size, minimum=1)
        elif self.output_size is not None or self.min_support is not None:
            raise InvalidParameterError(
                "output_size/min_support",
                (self.output_size, self.min_support),
                "only with objective 'frequent'",
            )
        check_positive("time_limit", self.time_limit)
        if self.search_seconds < 0 or not math.isfinite(self.search_seconds):
            raise InvalidParameterError("search_seconds", self.search_seconds, "a number ≥ 0")
        if (self.count_epsilon is None) != (self.sensitivity is None):
            raise InvalidParameterError(
                "count_epsilon/sensitivity",
                (self.count_epsilon, self.sensitivity),
                "both or neither (count noise Lap(d/ε'))",
            )
        if self.count_epsilon is not None:
            check_positive("count_epsilon", self.count_epsilon)
            check_positive("sensitivity", self.sensitivity)
        check_int("parties", self.parties, minimum=1)

    @property
    def method(self) -> str:
        return self.solver or next(iter(SOLVERS[UmpObjective(self.objective)]))

    @property
    def b(self) -> float:
        if self.objective == "kl":  # CELS Thm 2: min(ε/2, ln 1/(1−δ)), docs/privacy/cels.md
            return cels_bound(self.epsilon, self.delta)
        return privacy_bound(self.epsilon, self.delta)

    def cost(self) -> PrivacyCost:
        """The (ε, δ) of the sampling given the counts (user-level): *conditional* — the counts
        come from the exact histogram — so it is recorded, never charged to a budget."""
        return PrivacyCost.of(Relation.USER, self.epsilon, self.delta,
                              name="sampling_given_counts", conditional=CONDITIONAL)  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"solver": self.method, "b": self.b}


def _solve(inp: UmpInput, m: sp.csr_matrix, params: UmpParams) -> Solution:
    """The counts x of the chosen objective and solver (empty for an empty input)."""
    b = params.b
    if inp.n_pairs == 0:
        return Solution(np.zeros(0, dtype=np.int64), params.method, 0.0, "empty input", 0.0)
    if params.objective == "size":
        return solve_oump(
            m, b, method=params.method, time_limit=params.time_limit,
            search_seconds=params.search_seconds,
        )  # fmt: skip
    if params.objective == "frequent":
        assert params.output_size is not None and params.min_support is not None
        return solve_fump(
            m, b, inp.c_ij, output_size=params.output_size, min_support=params.min_support,
            method=params.method, time_limit=params.time_limit,
        )  # fmt: skip
    if params.objective == "kl":
        return solve_kl(m, b, inp.c_ij, output_size=params.output_size)
    return solve_dump(m, b, method=params.method, time_limit=params.time_limit)


def _count_noise(
    x: npt.NDArray[np.int64], m: sp.csr_matrix, b: float, params: UmpParams, rng: RandomSource
) -> tuple[npt.NDArray[np.int64], dict[str, Any] | None]:
    """EDBT §4.2's optional count noise, repaired back into the constraints: the counts and
    what the noise did (None without ``count_epsilon``)."""
    noise_info: dict[str, Any] | None = None
    if params.count_epsilon is not None and x.size:
        assert params.sensitivity is not None
        lap = DiscreteLaplace(params.sensitivity / params.count_epsilon)
        raw = x + lap.sample(x.size, rng).astype(np.int64)
        noisy = np.maximum(raw, 0)
        x_noisy = repair(m, noisy, b)
        noise_info = {
            "count_epsilon": params.count_epsilon,
            "sensitivity_assumed": params.sensitivity,
            "noise": lap.describe(),
            "clipped_at_zero": int((raw < 0).sum()),
            "draws_removed_by_repair": int(noisy.sum() - x_noisy.sum()),
            "verified": False,
        }
        x = x_noisy
    return x, noise_info


def _guarantee(params: UmpParams, noise_info: dict[str, Any] | None) -> dict[str, Any]:
    """The ledger's guarantee: what the conditional mode covers, and what it does not."""
    guarantee: dict[str, Any] = {
        "mode": "conditional",
        "differentially_private": False,
        "label": NOT_DP,
        "covers": "the sampling of user ids given the counts x_ij (Hong et al. Theorem 1)",
        "counts_are_private": False,
        "warning": "the counts x_ij (table counts, and the Count column of the log) are "
        "computed from the private log and are not differentially private unless count noise "
        "with a valid sensitivity bound is added (docs/privacy/ump.md)",
    }
    if noise_info is not None:
        guarantee["count_noise"] = {
            "count_epsilon": params.count_epsilon,
            "sensitivity_assumed": params.sensitivity,
            "noise": noise_info["noise"],
            "verified": False,
        }
        guarantee["combined_if_sensitivity_holds"] = {
            "epsilon": params.epsilon + params.count_epsilon,  # type: ignore[operator]
            "delta": params.delta,
        }
    return guarantee


def release_ump(log: SearchLog, params: UmpParams, *, rng: RandomSource) -> HistogramRelease:
    """Run the sanitization; returns tables ``log`` and ``counts``, the report and the ledger."""
    hist = click_histogram(log)
    inp = preprocess(hist)
    m = constraint_matrix(inp, parties=params.parties)
    b = params.b
    sol = _solve(inp, m, params)
    x = sol.x
    x, noise_info = _count_noise(x, m, b, params, rng)
    if x.size and not is_feasible(m, x, b, tol=0.0):
        raise InternalError("UMP counts violate a privacy constraint")
    triplets = sample_users(inp.matrix, x, rng=rng)
    out_log = sampled_log(inp.pairs, inp.users, triplets)
    counts = inp.pairs.select("query", "url").with_columns(pl.Series("x_ij", x, dtype=pl.Int64))
    counts = counts.filter(pl.col("x_ij") > 0)
    metrics = ump_metrics(
        inp.matrix, inp.c_ij, x, triplets,
        min_support=params.min_support if params.min_support is not None else 1 / 500,
    )  # fmt: skip
    report: dict[str, Any] = {
        "mechanism": "hong-ump",
        "users": log.n_users,
        "pairs": hist.n_pairs,
        "pairs_after_condition_1": inp.n_pairs,
        "pairs_removed_condition_1": inp.removed_pairs,
        "clicks_removed_condition_1": inp.removed_clicks,
        "constraint_users": inp.n_users,
        "constraint_nonzeros": int(m.nnz),
        "b": b,
        "solver": sol.summary(),
        "metrics": metrics,
        "parameters": params.to_dict(),
    }
    # public: the parameters, b and the notion; the solver's figures (optimum, status, output
    # size) and the count-noise repair figures are computed from the private log: provenance
    ledger = build_ledger(
        mechanism="hong-ump",
        notion=NOTION,
        cost=params.cost(),
        parameters=params.to_dict(),
        rng=rng,
        extra={"guarantee": _guarantee(params, noise_info),
               "reference": "Hong et al., EDBT 2012, Algorithm 1"},
    )  # fmt: skip
    if noise_info is not None:
        report["count_noise"] = noise_info
    return HistogramRelease(
        tables={"log": out_log, "counts": counts},
        report=report,
        ledger=ledger,
        extra={"x": x, "input": inp, "matrix": m, "triplets": triplets},
        inputs=[log.ledger_input()],
    )
