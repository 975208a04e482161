"""CELS: the parameters every party agrees on, one data party's input (a share), a
party's result and the constants of the protocol (Hong et al., TKDE 2015).

Two modes (``--mode``, :class:`~searchveil.release.ump.e2e.UmpMode`): ``e2e`` (the default) is
the joint version of ``release ump``'s end-to-end mode — ZEALOUS pair counts on the joint
bounded holder counts, a noisy activity profile and a log of synthetic users, (ε, δ)-DP end to
end (docs/privacy/cels.md §5); ``conditional`` is the paper's protocol, NOT differentially
private (counts computed from the exact histogram), kept for reproducing its figures."""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from searchveil.cels import commutative as cm
from searchveil.cels.paillier import (
    ALLOWED_KEY_BITS,
    key_strength,
)
from searchveil.errors import InvalidParameterError
from searchveil.io.readers import read_log
from searchveil.mechanisms.budget import PrivacyCost, Relation
from searchveil.model import ClickHistogram, click_histogram
from searchveil.release.ump.e2e import E2EParams, UmpMode, bounded_pairs
from searchveil.release.ump.kl import cels_bound
from searchveil.release.ump.release import NOT_DP
from searchveil.validate import check_int, check_positive, check_probability, parse_choice

T = TypeVar("T")


class Objective(StrEnum):
    """What P0 optimises: CELS's KL loss at a fixed |O| (§2.2) or the output size (O-UMP)."""

    KL = "kl"
    SIZE = "size"


OBJECTIVES = tuple(o.value for o in Objective)
NOTION = f"{NOT_DP}; only the multinomial sampling given the counts is (ε,δ)-DP (CELS Thm 2, Thm 7)"
#: options of one mode only (an error in the other): the paper's protocol / the e2e release
CONDITIONAL_ONLY = ("objective", "key_bits", "output_share", "breakpoints", "min_count")
E2E_ONLY = ("max_pairs", "max_users", "split")
CONDITIONAL_DEFAULTS: dict[str, Any] = {
    "key_bits": 3072, "output_share": 0.5, "breakpoints": 33, "min_count": 1,
}  # fmt: skip
ETA = 1e-6  # P0 tightens every constraint to (1 − η)·b against the LP tolerance
HOLDER_BITS = 24  # Algorithm 1 word: count·2^24 + holders, summed mod 2^64
RECORD_ID_BYTES = 8
RECORD_CHUNK = cm.PAYLOAD_BYTES - RECORD_ID_BYTES - 3  # record bytes per group element
# obfuscators under P0's key each data party computes ahead, while the union runs, before it
# knows how many it needs (P1, which also encrypts the first term of the ring sum: twice as
# many); the rest are computed once the sizes are known, any surplus is discarded
PRECOMPUTE = 384


@dataclass(frozen=True)
class CelsParams:
    """Parameters every party must agree on (checked in the setup phase).

    ``mode="e2e"`` (default): ε, δ and the end-to-end release's own options ``max_pairs`` (m;
    default: the public rule of :func:`~searchveil.release.ump.e2e.default_max_pairs`),
    ``max_users`` (a declared bound U) and ``split``; the pair step is ZEALOUS
    (:meth:`e2e`). ``mode="conditional"``: the paper's protocol, with ``objective`` (no
    default), ``key_bits``, ``output_share``, ``breakpoints``, ``min_count``. An option of the
    other mode is an error."""

    epsilon: float
    delta: float
    objective: Objective | str | None = None
    key_bits: int = 3072
    output_share: float = 0.5
    breakpoints: int = 33
    min_count: int = 1
    mode: UmpMode | str = UmpMode.E2E
    max_pairs: int | None = None
    max_users: int | None = None
    split: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        check_probability("delta", self.delta)
        object.__setattr__(self, "mode", parse_choice("mode", self.mode, UmpMode))
        if self.split is not None:
            if not isinstance(self.split, tuple | list):
                raise InvalidParameterError("split", self.split, "2 positive weights")
            object.__setattr__(self, "split", tuple(self.split))
        if self.mode == UmpMode.E2E:
            if self.objective is not None:
                raise InvalidParameterError(
                    "objective", self.objective, "not set: it is an option of --mode conditional "
                    "(the e2e mode runs no optimisation)",
                )  # fmt: skip
            for k, v in CONDITIONAL_DEFAULTS.items():
                if getattr(self, k) != v:
                    raise InvalidParameterError(
                        k.replace("_", "-"), getattr(self, k),
                        "not set: it is an option of --mode conditional",
                    )  # fmt: skip
            self.e2e()  # every e2e parameter checked here (typed errors)
            return
        for k in E2E_ONLY:
            if getattr(self, k) is not None:
                raise InvalidParameterError(
                    k.replace("_", "-"), getattr(self, k), "not set: it is an option of --mode e2e"
                )
        if self.objective is None:
            raise InvalidParameterError("objective", None, "kl | size (no default)")
        object.__setattr__(self, "objective", parse_choice("objective", self.objective, Objective))
        if self.key_bits not in ALLOWED_KEY_BITS:
            raise InvalidParameterError("key_bits", self.key_bits, f"one of {ALLOWED_KEY_BITS}")
        if not 0 < self.output_share <= 1:
            raise InvalidParameterError("output_share", self.output_share, "a share in (0, 1]")
        check_int("breakpoints", self.breakpoints, minimum=2)
        check_int("min_count", self.min_count, minimum=1)

    @property
    def b(self) -> float:
        return cels_bound(self.epsilon, self.delta)

    def e2e(self) -> E2EParams:
        """The end-to-end release the joint mode runs: ``release ump``'s synthetic-id mode with
        ZEALOUS pair counts (the one noisy histogram a secure sum supports; MAD2R needs several
        adaptive rounds and is not offered jointly)."""
        if self.mode != UmpMode.E2E:
            raise InvalidParameterError("mode", str(self.mode), "e2e for the e2e parameters")
        return _e2e_params(self.epsilon, self.delta, self.max_pairs, self.max_users, self.split)

    def cost(self) -> PrivacyCost:
        """What the release spends. The e2e mode: the joint release's cost, that of ``release
        ump``'s e2e mode on the union of the logs (user-level add/remove: the joint log is the
        same function of the union, docs/privacy/cels.md §5) — charged like any release. The
        conditional mode: the sampling given the counts under the CELS party model —
        conditional (the counts come from the private logs), so never charged to a budget."""
        if self.mode == UmpMode.E2E:
            return self.e2e().cost()
        return PrivacyCost.of(Relation.USER_PARTIES, self.epsilon, self.delta,
                              name="sampling_given_counts", conditional=CONDITIONAL)  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        if self.mode == UmpMode.E2E:
            return {"mode": "e2e", "max_users": self.max_users} | self.e2e().to_dict()
        d = {k: v for k, v in asdict(self).items() if k not in E2E_ONLY}
        return d | {"b": self.b, "key_strength": key_strength(self.key_bits)}


@functools.lru_cache(maxsize=64)
def _e2e_params(
    epsilon: float, delta: float, max_pairs: int | None, max_users: int | None,
    split: tuple[float, float] | None,
) -> E2EParams:  # fmt: skip
    return E2EParams.from_budget(
        epsilon=epsilon, delta=delta, max_pairs=max_pairs, ids="synthetic", split=split,
        max_users=max_users, pairs="zealous", schema="counts",
    )  # fmt: skip


@dataclass
class Share:
    """One data party's input: its click histogram and file fingerprint. In the e2e mode
    (:meth:`read` with ``max_pairs``) the histogram is that of the *bounded* log — each user's
    first m distinct clicked pairs (:func:`~searchveil.release.ump.e2e.bounded_pairs`), so
    every count is a number of holders — and ``bounded`` holds those rows (user, item, query,
    url)."""

    hist: ClickHistogram
    info: dict[str, Any]
    bounded: pl.DataFrame | None = None

    @classmethod
    def read(cls, path: Path, *, max_pairs: int | None = None) -> Share:
        log = read_log(path)
        if max_pairs is None:
            return cls(click_histogram(log), log.ledger_input())
        bounded = bounded_pairs(log, max_pairs)
        return cls(click_histogram(bounded), log.ledger_input(), bounded)


@dataclass
class PartyResult:
    output: pl.DataFrame
    ledger: dict[str, Any]
    digest: str
    stats: dict[str, Any] = field(default_factory=dict)
    #: the e2e mode's tables (log, counts, profile); empty in the conditional mode (log only)
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)


#: why a CELS release's (ε, δ) can never be charged to a budget
CONDITIONAL = (
    "the CELS counts x are computed from the parties' private logs and are not differentially "
    "private; only the sampling given them is covered by (ε, δ) (docs/privacy/cels.md)"
)
# fields of the public ledger that are functions of the sampled output, so they differ between
# neighbouring inputs under the same seed (the neighbour audit allows exactly these)
NOISY_FIELDS = ("noisy", "outputs.log.rows")
#: the same for the e2e mode: the sizes of its tables are the DP release's (log and counts)
E2E_NOISY_FIELDS = ("outputs.*.rows",)
