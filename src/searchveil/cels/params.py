"""CELS: the parameters every party agrees on, one data party's input (a share), a
party's result and the constants of the protocol (Hong et al., TKDE 2015)."""

from __future__ import annotations

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
from searchveil.release.ump.kl import cels_bound
from searchveil.validate import check_int, check_positive, check_probability, parse_choice

T = TypeVar("T")


class Objective(StrEnum):
    """What P0 optimises: CELS's KL loss at a fixed |O| (§2.2) or the output size (O-UMP)."""

    KL = "kl"
    SIZE = "size"


OBJECTIVES = tuple(o.value for o in Objective)
NOTION = "(ε,δ)-DP of the multinomial sampling given the counts (CELS Thm 2, Thm 7)"
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
    """Parameters every party must agree on (checked in the setup phase)."""

    epsilon: float
    delta: float
    objective: Objective | str
    key_bits: int = 3072
    output_share: float = 0.5
    breakpoints: int = 33
    min_count: int = 1

    def __post_init__(self) -> None:
        check_positive("epsilon", self.epsilon)
        check_probability("delta", self.delta)
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

    def cost(self) -> PrivacyCost:
        """The ledger's (ε, δ) under the CELS party model: the sampling given the counts —
        conditional (the counts come from the private logs), so never charged to a budget."""
        return PrivacyCost.of(Relation.USER_PARTIES, self.epsilon, self.delta,
                              name="sampling_given_counts", conditional=CONDITIONAL)  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"b": self.b, "key_strength": key_strength(self.key_bits)}


@dataclass
class Share:
    """One data party's input: its click histogram and file fingerprint."""

    hist: ClickHistogram
    info: dict[str, Any]

    @classmethod
    def read(cls, path: Path) -> Share:
        log = read_log(path)
        return cls(click_histogram(log), log.ledger_input())


@dataclass
class PartyResult:
    output: pl.DataFrame
    ledger: dict[str, Any]
    digest: str
    stats: dict[str, Any] = field(default_factory=dict)


#: why a CELS release's (ε, δ) can never be charged to a budget
CONDITIONAL = (
    "the CELS counts x are computed from the parties' private logs and are not differentially "
    "private; only the sampling given them is covered by (ε, δ) (docs/privacy/cels.md)"
)
# fields of the public ledger that are functions of the sampled output, so they differ between
# neighbouring inputs under the same seed (the neighbour audit allows exactly these)
NOISY_FIELDS = ("noisy", "outputs.log.rows")
