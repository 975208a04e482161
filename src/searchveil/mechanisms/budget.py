"""What a release costs, under which neighbouring relation, and how costs compose (issue 31).

Every family states its cost as a :class:`PrivacyCost`: the neighbouring relation it protects
(:class:`Relation`), named parts (the split: one :class:`Part` per privacy-spending step, with
its ε, δ and — where the step's own map is zCDP — its ρ), and the (ε, δ) it reports. A release
that protects no relation states a :class:`NoGuarantee` instead. The public ledger's
``neighbouring``, ``relation``, ``epsilon``, ``delta`` and ``split`` are derived from this one
object (:meth:`PrivacyCost.ledger_fields`, used by :func:`searchveil.io.ledger.build_ledger`).

Costs compose sequentially (basic composition: ε and δ add). A cost charged to a budget with
another relation is converted where a conversion is documented (:func:`in_relation`,
docs/privacy/budget.md) and refused otherwise. :class:`BudgetState` is the one admission rule
of a budget that many releases draw from — in memory (:class:`Accountant`) or in a per-dataset
file (:mod:`searchveil.mechanisms.budget_file`): the charge is refused, naming what was
requested, what remains and the difference, when it would exceed what is left.

Learned from Tumult Analytics (immutable budgets; ``ProtectedChange`` as a type) and OpenDP's
``Context`` (a total, queries charged against it, ``remaining_privacy_loss``); written anew.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from searchveil.errors import (
    BudgetFileError,
    InputFormatError,
    InternalError,
    InvalidParameterError,
    SearchveilError,
)
from searchveil.io.ledger import LEDGER_NAME
from searchveil.mechanisms.accounting import (
    Budget,
    check_budget,
    within_budget,
)
from searchveil.rng import secure_token
from searchveil.validate import check_nonnegative, check_probability, parse_choice

__all__ = [
    "Accountant",
    "BudgetBook",
    "BudgetState",
    "Charge",
    "ChargeState",
    "NoGuarantee",
    "Part",
    "PrivacyCost",
    "Relation",
    "in_relation",
    "zcdp_epsilon",
]


class Relation(StrEnum):
    """The neighbouring relation a guarantee protects (docs/privacy/budget.md).

    ``user``: add/remove one user's whole history of a log. ``user-replace``: replace one
    user's whole history (bounded DP, the number of users fixed: ZEALOUS' probabilistic
    guarantee). ``user-parties``: add, remove or replace one user's whole log in the union of
    several parties' logs (the CELS party model, docs/privacy/cels.md). ``record``: add/remove
    one record (row) of a table. ``edge-outside-targets``: add/remove one edge of a graph
    incident to none of the release's targets (private recommendations)."""

    USER = "user"
    USER_REPLACE = "user-replace"
    USER_PARTIES = "user-parties"
    RECORD = "record"
    EDGE_OUTSIDE_TARGETS = "edge-outside-targets"

    @property
    def neighbouring(self) -> str:
        """The ledger's description of the relation (its ``neighbouring`` field)."""
        return _NEIGHBOURING[self]


_NEIGHBOURING = {
    Relation.USER: "add/remove one user's entire history",
    Relation.USER_REPLACE: "replace one user's entire history (Götz Theorem 3)",
    Relation.USER_PARTIES: "add, remove or replace one user's whole log (CELS §2.3 Cases 1-3); "
    "the users of the parties are disjoint",
    Relation.RECORD: "add or remove one record (row) of the input table",
    Relation.EDGE_OUTSIDE_TARGETS: "add/remove one edge incident to none of the release's "
    "targets, on the public node universe",
}


def _sum(values: Iterator[float] | list[float]) -> float:
    """The total of a release's parts: summed in order, as every family reports it (the same
    float as the family's own sum); comparisons go through :func:`within_budget`."""
    total = 0.0
    for v in values:
        total += v
    return total


@dataclass(frozen=True)
class Part:
    """One privacy-spending step of a release: ``epsilon``, ``delta`` (what basic composition
    adds) and, when the step's own privacy map is zCDP, ``rho`` with ``rho_delta``, the
    probability outside the ρ-zCDP guarantee (a threshold's single-user items). A part with
    δ = 0 is ε-DP and so ε²/2-zCDP (:attr:`zcdp_rho`)."""

    name: str
    epsilon: float
    delta: float = 0.0
    rho: float | None = None
    rho_delta: float = 0.0

    def __post_init__(self) -> None:
        check_nonnegative(f"{self.name} epsilon", self.epsilon)
        check_probability(f"{self.name} delta", self.delta, open_low=False, open_high=False)
        if self.rho is not None:
            check_nonnegative(f"{self.name} rho", self.rho)
        check_probability(f"{self.name} rho_delta", self.rho_delta, open_low=False)

    @property
    def zcdp_rho(self) -> float | None:
        """ρ of the part as zCDP: its own ρ, ε²/2 for a pure ε-DP part, else None."""
        if self.rho is not None:
            return self.rho
        return self.epsilon**2 / 2 if self.delta == 0 else None

    def to_dict(self) -> dict[str, float]:
        out = {"epsilon": self.epsilon, "delta": self.delta}
        if self.rho is not None:
            out |= {"rho": self.rho, "rho_delta": self.rho_delta}
        return out

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any]) -> Part:
        """A part as a ledger or a budget file states it: its values numbers, as given (a
        string or a boolean is refused by the checks of :meth:`__post_init__`, never
        converted)."""
        if not isinstance(d, Mapping):
            raise InvalidParameterError(f"{name}", d, "a part: {epsilon, delta[, rho]}")
        return cls(name, d["epsilon"], d.get("delta", 0.0), d.get("rho"),
                   d.get("rho_delta", 0.0))  # fmt: skip


@dataclass(frozen=True)
class PrivacyCost:
    """What one release spends: its relation, its parts and its (ε, δ).

    ``epsilon``/``delta`` default to the sum of the parts; a family may state a larger total
    (e.g. the budget it was given when its parts spend a little less, or the same sum taken in
    another order) — never a smaller one (refused, beyond :data:`BUDGET_TOLERANCE`).
    ``conditional``: why the guarantee is conditional (e.g. counts from the exact histogram, of
    which only the sampling is private); such a cost is recorded in its ledger but can never be
    charged to a budget (:func:`in_relation` refuses it)."""

    relation: Relation
    parts: tuple[Part, ...]
    epsilon: float = math.nan
    delta: float = math.nan
    conditional: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "relation", parse_choice("relation", self.relation, Relation))
        object.__setattr__(self, "parts", tuple(self.parts))
        if not self.parts:
            raise InternalError("a privacy cost has at least one part")
        names = [p.name for p in self.parts]
        if len(set(names)) != len(names):
            raise InternalError(f"the parts of a privacy cost have distinct names: {names}")
        for key in ("epsilon", "delta"):
            parts_sum = _sum([getattr(p, key) for p in self.parts])
            stated = getattr(self, key)
            if isinstance(stated, float) and math.isnan(stated):  # not stated: the sum
                object.__setattr__(self, key, parts_sum)
                continue
            # a stated total is checked like its parts: a number, finite, ≥ 0 (δ ≤ 1)
            if key == "epsilon":
                check_nonnegative("stated epsilon", stated)
            else:
                check_probability("stated delta", stated, open_low=False, open_high=False)
            if not within_budget(parts_sum, float(stated)):
                raise InternalError(
                    f"a release states {key} = {stated!r}, below the sum of its parts "
                    f"{parts_sum!r}: its accounting is wrong"
                )
            else:
                object.__setattr__(self, key, float(stated))

    @classmethod
    def of(
        cls,
        relation: Relation | str,
        epsilon: float,
        delta: float = 0.0,
        *,
        name: str = "release",
        conditional: str | None = None,
    ) -> PrivacyCost:
        """A cost of one part."""
        return cls(Relation(relation), (Part(name, float(epsilon), float(delta)),),
                   conditional=conditional)  # fmt: skip

    @classmethod
    def from_events(
        cls,
        relation: Relation | str,
        events: list[dict[str, Any]],
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        conditional: str | None = None,
    ) -> PrivacyCost:
        """The cost whose parts are a ledger's ``events`` (named by their ``step`` or ``event``;
        an event without ε or δ spends none). ``epsilon``/``delta``: the stated total."""
        parts = []
        for i, e in enumerate(events):
            name = str(e.get("step") or e.get("event") or f"event {i + 1}")
            parts.append(Part(name, float(e.get("epsilon") or 0.0), float(e.get("delta") or 0.0)))
        return cls(Relation(relation), tuple(parts),
                   math.nan if epsilon is None else float(epsilon),
                   math.nan if delta is None else float(delta), conditional)  # fmt: skip

    @property
    def split(self) -> dict[str, dict[str, float]]:
        """The parts by name (the ledger's ``split``)."""
        return {p.name: p.to_dict() for p in self.parts}

    @property
    def rho(self) -> float | None:
        """Σρ when every part is zCDP (:attr:`Part.zcdp_rho`), else None."""
        rhos = [p.zcdp_rho for p in self.parts]
        return None if any(r is None for r in rhos) else math.fsum(r for r in rhos if r)

    @property
    def rho_delta(self) -> float:
        return math.fsum(p.rho_delta for p in self.parts)

    def as_part(self, name: str) -> Part:
        """The whole cost as one part of a larger release (its ρ kept when every part is
        zCDP)."""
        rho = self.rho
        return Part(name, self.epsilon, self.delta, rho, self.rho_delta if rho is not None else 0)

    def ledger_fields(self) -> dict[str, Any]:
        """``neighbouring``, ``relation``, ``epsilon``, ``delta``, ``split`` of the ledger; a
        conditional cost's say "not DP" (issue 39; its (ε, δ): ``guarantee.conditional``)."""
        if self.conditional is not None:
            return {"neighbouring": f"none: {self.conditional}", "relation": "none",
                    "epsilon": None, "delta": None, "split": {}}  # fmt: skip
        return {"neighbouring": self.relation.neighbouring, "relation": str(self.relation),
                "epsilon": self.epsilon, "delta": self.delta, "split": self.split}  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"relation": str(self.relation), "epsilon": self.epsilon,
                               "delta": self.delta, "split": self.split}  # fmt: skip
        if self.conditional is not None:
            out["conditional"] = self.conditional
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PrivacyCost:
        """The inverse of :meth:`to_dict` (and of a public ledger's fields)."""
        split = d.get("split") or {}
        if not isinstance(split, Mapping) or not split:
            raise InputFormatError("budget", f"a cost without parts: {dict(d)!r}")
        stated = {k: d[k] for k in ("epsilon", "delta")}
        for k, v in stated.items():  # NaN would read as "not stated"
            if isinstance(v, float) and math.isnan(v):
                raise InvalidParameterError(f"stated {k}", v, "a number (not NaN)")
        cond = d.get("conditional")
        if cond is not None and not isinstance(cond, str):
            raise InvalidParameterError("conditional", cond, "a text or null")
        return cls(parse_choice("relation", d["relation"], Relation),
                   tuple(Part.from_dict(str(k), v) for k, v in split.items()),
                   stated["epsilon"], stated["delta"], cond)  # fmt: skip


@dataclass(frozen=True)
class NoGuarantee:
    """A release that protects no neighbouring relation (k-anonymity, attack simulations):
    its ledger says ``neighbouring: "none: <why>"``, ε and δ null. It is never charged to a
    budget: it has no cost in any of them, and it is outside every guarantee."""

    why: str

    def ledger_fields(self) -> dict[str, Any]:
        return {"neighbouring": f"none: {self.why}", "relation": "none", "epsilon": None,
                "delta": None, "split": {}}  # fmt: skip


def _group_of_two(p: Part) -> Part:
    """(ε, δ) for add/remove ⇒ (2ε, (1 + e^ε)δ) for replace (a removal then an addition);
    a ρ-zCDP part is 4ρ-zCDP (group privacy of zCDP, k²ρ) when it has no ρ-outside δ."""
    rho = None if p.rho is None or p.rho_delta > 0 else 4 * p.rho
    return Part(p.name, 2 * p.epsilon, min(1.0, (1 + math.exp(p.epsilon)) * p.delta), rho)


def in_relation(
    cost: PrivacyCost | NoGuarantee,
    relation: Relation | str,
    *,
    one_record_per_user: bool = False,
    what: str,
) -> tuple[PrivacyCost, str]:
    """``cost`` as charged to a budget whose relation is ``relation``, and how it was
    converted — or :class:`InvalidParameterError` when they do not compose
    (docs/privacy/budget.md), when the guarantee is conditional, or when the release protects
    nothing (:class:`NoGuarantee`). ``one_record_per_user``: the budget declares that every
    table of the dataset holds one record per user (record-level composes with user-level)."""
    to = Relation(relation)
    if isinstance(cost, NoGuarantee):
        raise InvalidParameterError(
            "budget", what, f"a differentially private release: {cost.why}, so it spends "
            "nothing a budget could count and publishing it is outside every guarantee",
        )  # fmt: skip
    if cost.conditional is not None:
        raise InvalidParameterError(
            "budget", what, "a release that is differentially private end to end: "
            f"{cost.conditional}; it cannot be charged to a budget",
        )  # fmt: skip
    frm = cost.relation
    if frm == to:
        return cost, "same relation"
    if frm == Relation.USER_PARTIES and to in (Relation.USER, Relation.USER_REPLACE):
        return (PrivacyCost(to, cost.parts, cost.epsilon, cost.delta),
                "the CELS party model protects add, remove and replace")  # fmt: skip
    if frm == Relation.USER and to == Relation.USER_REPLACE:
        parts = tuple(_group_of_two(p) for p in cost.parts)
        return (PrivacyCost(to, parts),
                "replace = remove + add: each part (2ε, (1 + e^ε)δ)")  # fmt: skip
    if frm == Relation.RECORD and to == Relation.USER and one_record_per_user:
        return (PrivacyCost(to, cost.parts, cost.epsilon, cost.delta),
                "one record per user (declared by the budget)")  # fmt: skip
    hint = {
        (Relation.RECORD, Relation.USER): "; record-level composes with a user-level budget "
        "only when every user is one record: declare it with budget init "
        "--one-record-per-user",
        (Relation.USER_REPLACE, Relation.USER): "; a replace-one-user guarantee does not bound "
        "adding or removing a user: use ZEALOUS --guarantee indistinguishability, or a budget "
        "with --relation user-replace",
    }.get((frm, to), "")
    raise InvalidParameterError(
        "budget", what,
        f"a release whose relation composes with the budget's {to.value!r} (this release "
        f"protects {frm.value!r}: {frm.neighbouring}){hint}; docs/privacy/budget.md",
    )  # fmt: skip


def zcdp_epsilon(rho: float, delta: float) -> float:
    """The smallest ε with which a ρ-zCDP mechanism is (ε, δ)-DP by Canonne, Kamath & Steinke
    2020, Corollary 13: min over α > 1 of αρ + (α·ln(1 − 1/α) − ln(α − 1) − ln δ)/(α − 1)."""
    if rho <= 0:
        return 0.0
    if not 0 < delta < 1:
        return math.inf

    def eps(a: float) -> float:
        return a * rho + (a * math.log1p(-1 / a) - math.log(a - 1) - math.log(delta)) / (a - 1)

    grid = [math.exp(math.log(1.000001) + i * (math.log(1e6) - math.log(1.000001)) / 2000)
            for i in range(2001)]  # fmt: skip
    i = min(range(len(grid)), key=lambda k: eps(grid[k]))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    fine = min(eps(lo + (hi - lo) * k / 400) for k in range(401))
    return min(eps(grid[i]), fine)


# -- a budget many releases draw from ------------------------------------------------------------
class ChargeState(StrEnum):
    """``pending`` (admitted: the run is reading, releasing or writing — counted as spent),
    ``committed`` (the release was written), ``failed`` (the run failed after it was admitted:
    it may have read its input and drawn noise, so its cost stands — counted as spent),
    ``refunded`` (an operator released the pending charge of a killed run after checking that
    nothing was published)."""

    PENDING = "pending"
    COMMITTED = "committed"
    FAILED = "failed"
    REFUNDED = "refunded"


#: the states counted as spent for good (a pending charge counts too, until it is settled)
SPENT_STATES = (ChargeState.COMMITTED, ChargeState.FAILED)


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _number(name: str, v: Any) -> float:
    """A stored figure: a number (never a string or a boolean), finite."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise InvalidParameterError(name, v, "a finite number")
    return float(v)


@dataclass
class BudgetState:
    """A total (ε, δ) for one dataset under one relation, and the charges made against it.
    ``charges``: JSON-ready records (id, what, state, cost, charged, times, ledger_sha256; a
    pending charge also the ``release`` it writes)."""

    total: Budget
    relation: Relation
    one_record_per_user: bool = False
    charges: list[dict[str, Any]] = field(default_factory=list)
    #: what a refusal calls the budget
    label: str = "dataset budget"

    def _sum(self, states: tuple[str, ...], key: str) -> float:
        return math.fsum(float(c["charged"][key]) for c in self.charges if c["state"] in states)

    def spent(self, *, pending: bool = True) -> tuple[float, float]:
        """(ε, δ) committed or failed — and pending, with ``pending=True`` (basic
        composition)."""
        states = (*SPENT_STATES, ChargeState.PENDING) if pending else SPENT_STATES
        return self._sum(states, "epsilon"), self._sum(states, "delta")

    def remaining(self) -> tuple[float, float]:
        """What a new charge may spend: the total minus committed, failed and pending
        charges."""
        e, d = self.spent()
        return self.total.epsilon - e, self.total.delta - d

    def admit(
        self,
        cost: PrivacyCost | NoGuarantee,
        *,
        what: str,
        release: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Check ``cost`` against what is left (the one check of a charge) and append it as a
        pending charge; returns the record. Refuses with :class:`BudgetExceededError`
        (requested, remaining, difference) or, for a relation that does not compose,
        :class:`InvalidParameterError`, changing nothing. ``release``: where the run writes
        (a budget file keeps it while the charge is pending, for its refund check)."""
        charged, how = in_relation(
            cost, self.relation, one_record_per_user=self.one_record_per_user, what=what
        )
        check_budget(charged, self.remaining(), what=f"{what} ({self.label})")
        assert isinstance(cost, PrivacyCost)  # (in_relation refused a NoGuarantee)
        rec: dict[str, Any] = {
            "id": secure_token()[:16], "what": what, "state": ChargeState.PENDING.value,
            "pid": os.getpid(), "started_utc": _utc(), "cost": cost.to_dict(),
            "charged": charged.to_dict() | {"conversion": how},
        }  # fmt: skip
        if release is not None:
            rec["release"] = dict(release)
        self.charges.append(rec)
        return rec

    def find(self, charge_id: str) -> dict[str, Any]:
        for c in self.charges:
            if c["id"] == charge_id:
                return c
        raise InvalidParameterError("charge", charge_id, "the id of a charge in the budget")

    def _settle(self, charge_id: str, state: ChargeState) -> dict[str, Any]:
        """Move a pending charge to ``state`` (its ``release`` path dropped: a settled charge
        holds no path)."""
        rec = self.find(charge_id)
        if rec["state"] != ChargeState.PENDING:
            raise InvalidParameterError("charge", charge_id, f"a pending charge (it is "
                                        f"{rec['state']})")  # fmt: skip
        rec.pop("release", None)
        rec |= {"state": state.value, f"{state.value}_utc": _utc()}
        return rec

    def commit(self, charge_id: str, *, ledger_sha256: str | None,
               ledger: Mapping[str, Any] | None) -> str | None:  # fmt: skip
        """Mark a pending charge committed; with the written ledger, its cost is the ledger's
        (which may be below the charge admitted, e.g. a declared (ε, δ) the release did not
        spend in full). A ledger above the charge would be a bug: it is recorded all the same
        (what was published is what counts) and returned, for the caller to raise once the
        budget is saved."""
        rec = self.find(charge_id)
        if rec["state"] != ChargeState.PENDING:
            raise InternalError(f"charge {charge_id} is {rec['state']}, not pending")
        over = None
        if ledger is not None:
            cost = PrivacyCost.from_dict(ledger)
            charged, how = in_relation(cost, self.relation,
                                       one_record_per_user=self.one_record_per_user,
                                       what=rec["what"])  # fmt: skip
            before = rec["charged"]
            if not (within_budget(charged.epsilon, before["epsilon"])
                    and within_budget(charged.delta, before["delta"])):  # fmt: skip
                over = f"the written ledger spends {charged.to_dict()} > charged {before}"
            rec["cost"], rec["charged"] = cost.to_dict(), charged.to_dict() | {"conversion": how}
        self._settle(charge_id, ChargeState.COMMITTED)["ledger_sha256"] = ledger_sha256
        return over

    def fail(self, charge_id: str) -> None:
        """The run failed after it was admitted: the admitted cost stands (``failed``)."""
        self._settle(charge_id, ChargeState.FAILED)

    def refund(self, charge_id: str) -> None:
        """An operator's release of a pending charge (:meth:`DatasetBudget.refund` checks
        first that its run ended and published nothing)."""
        self._settle(charge_id, ChargeState.REFUNDED)

    def zcdp(self) -> dict[str, Any] | None:
        """The tighter composition when every committed, failed or pending part is zCDP: ρ
        summed, then (ε, δ) at the budget's total δ (the ρ-outside δ of thresholds added)."""
        live = [PrivacyCost.from_dict(c["charged"]) for c in self.charges
                if c["state"] in (*SPENT_STATES, ChargeState.PENDING)]  # fmt: skip
        if not live or any(c.rho is None for c in live):
            return None
        rho = math.fsum(c.rho or 0.0 for c in live)
        outside = math.fsum(c.rho_delta for c in live)
        dl = self.total.delta - outside
        return {"rho": rho, "rho_delta": outside, "delta": self.total.delta,
                "epsilon": zcdp_epsilon(rho, dl) if dl > 0 else math.inf}  # fmt: skip

    def summary(self) -> dict[str, Any]:
        """Total, spent (committed and failed), pending, left, and the charges (public facts
        only; a pending charge also names where its run writes)."""
        ce, cd = self.spent(pending=False)
        ae, ad = self.spent()
        le, ld = self.remaining()
        return {
            "relation": str(self.relation), "neighbouring": self.relation.neighbouring,
            "one_record_per_user": self.one_record_per_user,
            "total": self.total.to_dict(), "spent": {"epsilon": ce, "delta": cd},
            "pending": {"epsilon": ae - ce, "delta": ad - cd},
            "left": {"epsilon": le, "delta": ld},
            "composition": "basic: ε and δ of every committed, failed and pending charge add",
            "zcdp": self.zcdp(),
            "charges": [dict(c) for c in self.charges],
        }  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total.to_dict(), "relation": str(self.relation),
                "one_record_per_user": self.one_record_per_user,
                "charges": self.charges}  # fmt: skip

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BudgetState:
        """The state a budget file holds, every value checked as a charge would check it:
        totals and costs numbers (never strings or booleans), finite, ≥ 0; every charge in the
        budget's relation. A malformed file raises KeyError, TypeError or ValueError, which
        the file's reader reports as a format error."""
        tot, rel = d["total"], parse_choice("relation", d["relation"], Relation)
        if not isinstance(tot, Mapping):
            raise TypeError(f"total is {tot!r:.60}, not {{epsilon, delta}}")
        total = Budget(_number("total epsilon", tot["epsilon"]),
                       _number("total delta", tot["delta"]))  # fmt: skip
        per_user = d.get("one_record_per_user", False)
        charges = d.get("charges", [])
        if not isinstance(per_user, bool) or not isinstance(charges, list):
            raise TypeError("one_record_per_user is true or false, charges a list")
        for c in charges:
            if not (isinstance(c, dict) and isinstance(c.get("id"), str)
                    and isinstance(c.get("what"), str)):  # fmt: skip
                raise ValueError(f"a charge is an object with an id and a name, not {c!r:.60}")
            ChargeState(c["state"])
            charged = PrivacyCost.from_dict(c["charged"])
            if charged.relation != rel:
                raise ValueError(f"charge {c['id']} is charged in {charged.relation.value!r}, "
                                 f"not in the budget's relation {rel.value!r}")  # fmt: skip
            for key in ("epsilon", "delta"):
                _number(f"charge {c['id']} {key}", c["charged"][key])
            PrivacyCost.from_dict(c["cost"])
        return cls(total, rel, per_user, [dict(c) for c in charges])


class Charge:
    """A charge in progress (:meth:`BudgetBook.charge`): the release records its written
    ledger with :meth:`record_written` (or :meth:`record`); once committed, :attr:`summary`
    is the budget's state."""

    def __init__(self, charge_id: str | None, what: str, book: BudgetBook | None = None) -> None:
        self.id = charge_id
        self.what = what
        self.ledger: dict[str, Any] | None = None
        self.ledger_sha256: str | None = None
        self.written: str | None = None
        self.committed = False
        self._book = book

    @property
    def summary(self) -> dict[str, Any] | None:
        """The budget's state (read when asked), once the charge is committed."""
        return self._book.summary() if self._book is not None and self.committed else None

    def record(self, ledger: Mapping[str, Any], sha256: str | None = None) -> None:
        """The release's public ledger (and the SHA-256 of its written bytes)."""
        self.ledger = dict(ledger)
        self.ledger_sha256 = sha256

    def record_written(self, release_dir: str | os.PathLike[str]) -> None:
        """The ledger written in ``release_dir`` and the SHA-256 of its bytes."""
        raw = (Path(release_dir) / LEDGER_NAME).read_bytes()
        self.record(json.loads(raw), hashlib.sha256(raw).hexdigest())
        self.written = str(release_dir)


class BudgetBook:
    """A budget that releases are charged to — in memory (:class:`Accountant`) or in a
    dataset's file (:class:`~searchveil.mechanisms.budget_file.DatasetBudget`): the one
    charging road (:meth:`charge`) over a transaction on the :class:`BudgetState`, which each
    kind provides (a lock around read, change, write)."""

    def _transaction(self) -> AbstractContextManager[BudgetState]:
        raise NotImplementedError

    def summary(self) -> dict[str, Any]:
        raise NotImplementedError

    def _release(self, out: str | os.PathLike[str]) -> dict[str, Any] | None:
        """What a pending charge keeps of where its run writes (nothing, in memory)."""
        return None

    @contextmanager
    def charge(
        self,
        cost: PrivacyCost | NoGuarantee,
        *,
        what: str,
        out: str | os.PathLike[str] | None = None,
    ) -> Iterator[Charge]:
        """Admit ``cost`` as a pending charge — or refuse it, changing nothing — then run the
        block, which reads the private input, releases and writes (``out``: where; kept
        while the charge is pending, for :meth:`DatasetBudget.refund`).

        **Admission is the last public step: the charge stands whatever happens in the
        block.** It is committed with the ledger the block records
        (:meth:`Charge.record_written`); if the block raises an :class:`Exception` — a
        data-dependent refusal, a write error, a bug — it is kept at the admitted cost
        (``failed``), because the block may have read the input and drawn noise, and a
        refund would let a caller repeat the run for free. So every check that needs no
        private data belongs *before* the block. A ``KeyboardInterrupt`` or a killed process
        leaves it pending (counted as spent, until an operator refunds it)."""
        release = None if out is None else self._release(out)
        try:
            with self._transaction() as st:
                rec = st.admit(cost, what=what, release=release)
        except BudgetFileError as err:
            raise BudgetFileError(
                f"{err}; nothing was read or released: fix the budget file "
                "(free space, lift the file-size limit) and run again"
            ) from err
        ch = Charge(rec["id"], what, self)
        try:
            yield ch
        except Exception as exc:
            self._settle_failed(ch, exc)
            raise
        try:
            with self._transaction() as st:
                over = st.commit(ch.id or "", ledger_sha256=ch.ledger_sha256, ledger=ch.ledger)
        except SearchveilError as err:  # the file could not be written, or was replaced
            where = f"the release was written to {ch.written!r}" if ch.written else "the run ended"
            raise BudgetFileError(
                f"{where}, but its charge {ch.id} could not be committed: {err}. The charge "
                "stays pending, counted as spent (nothing to undo: `searchveil budget refund` "
                "refuses it while the release is in place)"
            ) from err
        ch.committed = True
        if over is not None:
            raise InternalError(over)

    def _settle_failed(self, ch: Charge, exc: Exception) -> None:
        try:
            with self._transaction() as st:
                st.fail(ch.id or "")
        except SearchveilError as err:
            raise BudgetFileError(
                f"the run failed ({type(exc).__name__}: {exc}), and its charge {ch.id} could "
                f"not be marked failed: {err}. The charge stays pending, counted as spent"
            ) from exc


class Accountant(BudgetBook):
    """A budget in memory (``searchveil.Session(total=...)``): the same admission, commit and
    failure as the per-dataset file, without the file; a lock serialises the threads that
    charge it."""

    def __init__(self, total: Budget, relation: Relation | str, *,
                 one_record_per_user: bool = False) -> None:  # fmt: skip
        self.state = BudgetState(total, Relation(relation), one_record_per_user)
        self._lock = threading.Lock()

    @contextmanager
    def _transaction(self) -> Iterator[BudgetState]:
        with self._lock:
            yield self.state

    def summary(self) -> dict[str, Any]:
        with self._lock:
            return self.state.summary()
