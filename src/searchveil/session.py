"""``searchveil.Session``: one privacy budget that hands out releases of every family
(issue 31; docs/privacy/budget.md).

A session draws every release from one total: in memory (``Session(total=Budget(3, 1e-6),
relation="user")``) or from a dataset's budget file (``Session.open("aol.budget.json")``, the
file ``searchveil budget init`` writes and every release command's ``--budget`` charges). Each
release is refused — before its input is read, nothing written — when its cost exceeds what is
left; otherwise it is charged (pending), run, and committed with its public ledger. **A charge
stands once the block runs**: the block reads private data, so if it fails the admitted cost
stays spent (``failed``) — a refund would let a caller repeat a failed run, and what it
printed, for free. Check what needs no private data before the block. :meth:`Session.charge`
is the one road, for every family — each states its cost before it reads its input
(``params.cost()`` of Korolova, ZEALOUS, selection, ``release ump``'s ``E2EParams``;
``tabular.api.model_cost``; ``social.recommend.recommendation_cost``):

>>> with session.charge(params.cost(), what="release ump", out="san") as ch:  # doctest: +SKIP
...     rel = release_ump_e2e(read_log(path), params, rng=rng)
...     write_release(rel, "san")
...     ch.record_written("san")                   # the public ledger's SHA-256 is recorded

:meth:`Session.release_file` is that road for the one-call release of a log file (Korolova,
ZEALOUS, selection). The session imports no family beyond it, so ``import searchveil`` stays
light.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from searchveil.mechanisms.accounting import Budget
from searchveil.mechanisms.budget import Accountant, Charge, NoGuarantee, PrivacyCost, Relation
from searchveil.mechanisms.budget_file import DatasetBudget, init_budget
from searchveil.release.histogram import HistogramRelease
from searchveil.release.run import ReleaseParams, check_release, family_of, release_file
from searchveil.rng import RandomSource

__all__ = ["Session"]

#: the keywords of :func:`release_file` that :func:`check_release` checks too
_CHECKED = ("engine", "reader", "out_format", "overwrite", "provenance", "max_users", "serp",
            "fingerprint")  # fmt: skip


class Session:
    """A budget that releases are charged to (module docstring).

    ``total``: the dataset's (ε, δ) (a :class:`Budget` or a pair); ``relation``: the
    neighbouring relation it is kept in (``user``, ``user-replace``, ``record``,
    ``edge-outside-targets``; docs/privacy/budget.md says what composes with what);
    ``one_record_per_user``: every table of the dataset holds one record per user, so
    record-level releases compose with a user-level budget."""

    def __init__(
        self,
        total: Budget | tuple[float, float],
        relation: Relation | str,
        *,
        one_record_per_user: bool = False,
    ) -> None:
        tot = total if isinstance(total, Budget) else Budget(*total)
        self._book: Accountant | DatasetBudget = Accountant(
            tot, relation, one_record_per_user=one_record_per_user
        )

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Session:
        """The session of a dataset's budget file (``searchveil budget init``): every charge is
        written to it, under its lock, so sessions and commands share one budget."""
        s = cls.__new__(cls)
        s._book = DatasetBudget.open(path)
        return s

    # init_budget's keywords on purpose: the session makes the file `budget init` makes
    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        *,
        epsilon: float,
        delta: float,
        relation: Relation | str,
        one_record_per_user: bool = False,
    ) -> Session:
        """A new budget file (what ``searchveil budget init`` does) and its session."""
        init_budget(path, epsilon=epsilon, delta=delta, relation=relation,
                    one_record_per_user=one_record_per_user)  # fmt: skip
        return cls.open(path)

    # -- the budget ---------------------------------------------------------------------------
    def summary(self) -> dict[str, Any]:
        """Total, spent (committed), pending, left, the zCDP figure and every charge."""
        return self._book.summary()

    def remaining(self) -> tuple[float, float]:
        """(ε, δ) a new release may spend."""
        left = self.summary()["left"]
        return float(left["epsilon"]), float(left["delta"])

    @contextlib.contextmanager
    def charge(
        self,
        cost: PrivacyCost | NoGuarantee,
        *,
        what: str,
        out: str | os.PathLike[str] | None = None,
    ) -> Iterator[Charge]:
        """Charge ``cost`` around the block that reads, runs and writes one release: refused
        (nothing changed) when it exceeds what is left or its relation does not compose;
        committed with the ledger the block records (``ch.record_written(out)`` or
        ``ch.record(ledger)``); **kept at the admitted cost when the block raises** (the
        block may have read the data). ``out``: where the release will be written (a
        pending charge of a killed run names it, so ``budget refund`` can check that nothing
        new is there)."""
        with self._book.charge(cost, what=what, out=out) as ch:
            yield ch

    # -- releases -----------------------------------------------------------------------------
    def release_file(
        self,
        path: str | os.PathLike[str],
        params: ReleaseParams,
        *,
        rng: RandomSource,
        out: str | os.PathLike[str] | None = None,
        **kw: Any,
    ) -> HistogramRelease:
        """:func:`searchveil.release_file` (Korolova, ZEALOUS, selection), charged:
        everything that needs no byte of the log is checked first (:func:`check_release`),
        then ``params.cost()`` is refused or charged, then the log is read."""
        check_release(params, path, out=out,
                      **{k: v for k, v in kw.items() if k in _CHECKED})  # fmt: skip
        what = f"release {family_of(params).name}"
        with self.charge(params.cost(), what=what, out=out) as ch:
            rel = release_file(path, params, rng=rng, out=out, **kw)
            _record(ch, rel.ledger, out)
        return rel


def _record(ch: Charge, ledger: dict[str, Any], out: str | os.PathLike[str] | None) -> None:
    """The written ledger (with its SHA-256), or the in-memory one when nothing was written."""
    if out is not None:
        ch.record_written(out)
    else:
        ch.record(ledger)
