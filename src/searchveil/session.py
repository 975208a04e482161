"""``searchveil.Session``: one privacy budget that hands out releases of every family
(issue 31; docs/privacy/budget.md).

A session draws every release from one total: in memory (``Session(total=Budget(3, 1e-6),
relation="user")``) or from a dataset's budget file (``Session.open("aol.budget.json")``, the
file ``searchveil budget init`` writes and every release command's ``--budget`` charges). Each
release is refused — before its input is read, nothing written — when its cost exceeds what is
left; otherwise it is charged (pending), run, and committed with its public ledger, or refunded
if it fails. :meth:`Session.charge` is the one road; the release methods are conveniences over
it for the families' one-call entry points.

>>> s = Session(total=Budget(3.0, 1e-6), relation="user")           # doctest: +SKIP
>>> s.release_file("log.tsv", korolova_params, rng=make_rng(None), out="rel1")  # doctest: +SKIP
>>> s.remaining()                                                    # doctest: +SKIP
(0.697..., 9.9e-07)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from searchveil.io.graphs import NodeUniverse
from searchveil.io.ledger import check_release_dir
from searchveil.io.readers import ReaderOptions, read_log
from searchveil.mechanisms.accounting import Budget
from searchveil.mechanisms.budget import Accountant, Charge, NoGuarantee, PrivacyCost, Relation
from searchveil.mechanisms.budget_file import DatasetBudget, init_budget
from searchveil.release.histogram import HistogramRelease, write_release
from searchveil.release.run import ReleaseParams, family_of, release_file
from searchveil.release.ump.e2e import E2EParams, release_ump_e2e
from searchveil.rng import RandomSource
from searchveil.social.recommend import recommendation_cost, release_recommendations
from searchveil.social.utility import UtilityFunction
from searchveil.tabular.api import Model, ModelParams, load, model_cost, run_model
from searchveil.tabular.api import write_release as write_tabular

__all__ = ["Session"]


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
    def charge(self, cost: PrivacyCost | NoGuarantee, *, what: str) -> Iterator[Charge]:
        """Charge ``cost`` around the block that runs and writes one release: refused (nothing
        changed) when it exceeds what is left or its relation does not compose; committed
        with the ledger the block records (``ch.record_written(out)`` or ``ch.record(ledger)``);
        refunded when the block raises."""
        with self._book.charge(cost, what=what) as ch:
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
        ``params.cost()`` is refused or charged before the log is read."""
        if out is not None:
            check_release_dir(out, fmt=kw.get("out_format", "tsv"),
                              overwrite=kw.get("overwrite", False),
                              provenance=kw.get("provenance"))  # fmt: skip
        with self.charge(params.cost(), what=f"release {family_of(params).name}") as ch:
            rel = release_file(path, params, rng=rng, out=out, **kw)
            _record(ch, rel.ledger, out)
        return rel

    def release_ump(
        self,
        path: str | os.PathLike[str],
        params: E2EParams,
        *,
        rng: RandomSource,
        out: str | os.PathLike[str] | None = None,
        reader: ReaderOptions | None = None,
        out_format: str = "tsv",
        overwrite: bool = False,
        provenance: str | os.PathLike[str] | None = None,
    ) -> HistogramRelease:
        """``release ump`` (the end-to-end DP mode), charged before the log is read."""
        if out is not None:
            check_release_dir(out, fmt=out_format, overwrite=overwrite, provenance=provenance)
        with self.charge(params.cost(), what="release ump") as ch:
            log = read_log(path, **(reader or ReaderOptions()).kwargs())
            rel = release_ump_e2e(log, params, rng=rng)
            if out is not None:
                write_release(rel, out, fmt=out_format, overwrite=overwrite,
                              provenance=provenance)  # fmt: skip
            _record(ch, rel.ledger, out)
        return rel

    def tabular_anonymize(
        self,
        table: str | os.PathLike[str],
        hierarchies: str | os.PathLike[str],
        *,
        model: Model | str,
        params: ModelParams,
        rng: RandomSource,
        out: str | os.PathLike[str],
        qi: list[str] | None = None,
        overwrite: bool = False,
        provenance: str | os.PathLike[str] | None = None,
    ) -> dict[str, Any]:
        """``tabular anonymize`` with a DP model (record-level: it composes with a user-level
        budget only when the budget declares one record per user); returns the ledger."""
        with self.charge(
            model_cost(model, params), what=f"tabular anonymize --model {model}"
        ) as ch:
            t = load(Path(table), Path(hierarchies), qi)
            rel, meas = run_model(t, model, params, rng=rng)
            prov = None if provenance is None else Path(provenance)
            led, _ = write_tabular(Path(out), rel, meas, rng=rng, overwrite=overwrite,
                                   provenance=prov)  # fmt: skip
            ch.record_written(out)
        return led

    def recommend(
        self,
        graph: str | os.PathLike[str],
        *,
        universe: NodeUniverse,
        utility: UtilityFunction,
        mechanism_name: str,
        epsilon: float,
        targets: Sequence[int] | None,
        rng: RandomSource,
        out: str | os.PathLike[str],
        overwrite: bool = False,
        provenance: str | os.PathLike[str] | None = None,
    ) -> dict[str, Any]:
        """``social recommend`` (edge-level, for the edges incident to no target: it needs a
        budget kept in ``edge-outside-targets``), charged before the graph is read."""
        cost = recommendation_cost(universe=universe, utility=utility,
                                   mechanism_name=mechanism_name, epsilon=epsilon,
                                   targets=targets)  # fmt: skip
        with self.charge(cost, what="social recommend") as ch:
            res = release_recommendations(
                graph, out, universe=universe, utility=utility, mechanism_name=mechanism_name,
                epsilon=epsilon, targets=targets, rng=rng, overwrite=overwrite,
                provenance=provenance,
            )  # fmt: skip
            ch.record_written(out)
        return res


def _record(ch: Charge, ledger: dict[str, Any], out: str | os.PathLike[str] | None) -> None:
    """The written ledger (with its SHA-256), or the in-memory one when nothing was written."""
    if out is not None:
        ch.record_written(out)
    else:
        ch.record(ledger)
