"""The selection strategies' registry (issue 34): each strategy states its own facts
(``FACTS``), the ``--selection`` names, the calibration, the default d, the d-curves, the demo's
and reports' labels are read from :data:`searchveil.mechanisms.selection.REGISTRY`; the former
names ``mad`` and ``mad2r`` are deprecated aliases of ``probe-reweight`` and
``probe-reweight-2r`` (the same mechanism; ledgers show the new name)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from searchveil.errors import InvalidParameterError
from searchveil.evaluate.compare import parse_setting
from searchveil.evaluate.dcurve import ALL_MECHANISMS, SIMULATED, dcurve_from_events
from searchveil.mechanisms.rounds import POOL_FACTOR, RoundsSelection
from searchveil.mechanisms.selection import (
    ALIASES,
    REGISTRY,
    SelectionStrategy,
    default_d,
    make_strategy,
    strategy_facts,
)
from searchveil.mechanisms.selection_facts import Accounting, Units
from searchveil.model import SearchLog
from searchveil.release.selection import SelectionParams, release_selection
from searchveil.release.ump.e2e import PairStep
from searchveil.report.demo import DCURVE_LABELS
from searchveil.rng import make_rng
from searchveil.validate import parse_choice

NAMES = [c.FACTS.name for c in REGISTRY]


def test_the_names_are_the_registry_in_order() -> None:
    assert [s.value for s in SelectionStrategy] == NAMES
    assert NAMES == ["laplace", "gaussian", "policy-gaussian", "probe-reweight",
                     "probe-reweight-2r", "dp-sips"]  # fmt: skip
    assert len(set(NAMES)) == len(NAMES)
    assert ALIASES == {"mad": "probe-reweight", "mad2r": "probe-reweight-2r"}
    assert not set(ALIASES) & set(NAMES)


@pytest.mark.parametrize(
    ("old", "new"), [("mad", "probe-reweight"), ("mad2r", "probe-reweight-2r")]
)
def test_a_deprecated_name_parses_to_the_new_one(old: str, new: str) -> None:
    assert parse_choice("selection", old, SelectionStrategy) == new
    assert strategy_facts(old) is strategy_facts(new)
    assert make_strategy(old, epsilon=1.0, delta=1e-6, d=3) == make_strategy(
        new, epsilon=1.0, delta=1e-6, d=3
    )
    d, rule = default_d(old, epsilon=1.0, delta=1e-7)
    assert (d, rule) == default_d(new, epsilon=1.0, delta=1e-7) and rule.startswith(new + ":")


def test_an_unknown_name_lists_only_the_current_names() -> None:
    with pytest.raises(InvalidParameterError) as e:
        parse_choice("selection", "madd", SelectionStrategy)
    msg = str(e.value)
    assert "'probe-reweight-2r'" in msg and "'mad2r'" not in msg and "madd" in msg


@pytest.mark.parametrize("name", NAMES)
def test_the_facts_are_what_the_strategy_does(name: str) -> None:
    facts = strategy_facts(name)
    st = make_strategy(name, epsilon=1.0, delta=1e-6, d=3)
    assert type(st).FACTS is facts and st.describe()["strategy"] == name
    # accounting: a zCDP strategy's privacy carries ρ (the ledger part keeps it)
    assert ("rho" in st.privacy()) == (facts.accounting is Accounting.ZCDP)
    cost = SelectionParams(strategy=name, epsilon=2.0, delta=1e-6, d=3).cost()
    assert (cost.parts[0].rho is not None) == (facts.accounting is Accounting.ZCDP)
    # rounds: the calibrated rounds, and the pool a multi-round strategy may use
    n_rounds = len(st.rounds) if isinstance(st, RoundsSelection) else 1
    assert n_rounds == facts.rounds
    pool = SelectionParams(strategy=name, epsilon=2.0, delta=1e-6, d=3).pool
    assert pool == (POOL_FACTOR * 3 if facts.rounds > 1 else 3)
    # units: the simulated d-curves are the ℓ2-weighted strategies
    assert (name in SIMULATED) == (facts.units is Units.L2_WEIGHT) and name in ALL_MECHANISMS
    assert DCURVE_LABELS[name] == facts.label


def _log(n_users: int) -> SearchLog:
    g = np.random.default_rng(5)
    rows = [(f"u{u}", f"q{int(x) % 60}", i) for u in range(n_users)
            for i, x in enumerate(g.zipf(1.4, size=int(g.integers(1, 6))))]  # fmt: skip
    df = pl.DataFrame(rows, schema={"user": pl.String, "query": pl.String, "pos": pl.Int64},
                      orient="row")  # fmt: skip
    return SearchLog.from_frame(df)


def test_a_release_under_the_old_name_is_the_release_under_the_new_one() -> None:
    log = _log(2000)
    old = SelectionParams(strategy="mad", epsilon=4.0, delta=1e-5, d=3)
    new = SelectionParams(strategy="probe-reweight", epsilon=4.0, delta=1e-5, d=3)
    a = release_selection(log, old, rng=make_rng(9))
    b = release_selection(log, new, rng=make_rng(9))
    assert a.tables["queries"].height > 0 and a.tables["queries"].equals(b.tables["queries"])
    assert a.ledger["parameters"]["selection"] == "probe-reweight"
    assert a.ledger["parameters"] == b.ledger["parameters"]
    assert a.ledger["events"] == b.ledger["events"]


def test_the_other_spellings_of_the_old_names() -> None:
    assert PairStep("mad2r") is PairStep.PROBE_REWEIGHT_2R
    s = parse_setting("select:strategy=mad2r")
    assert s.mechanism == "selection" and s.options == {"strategy": "mad2r"}
    ev = pl.DataFrame({"user": [u // 3 for u in range(300)], "query": [u % 7 for u in range(300)],
                       "pos": [u % 3 for u in range(300)]})  # fmt: skip
    curve = dcurve_from_events(ev, epsilon=2.0, delta=1e-4, ds=(1, 2), mechanisms=["mad"],
                               simulation=np.random.default_rng(1))  # fmt: skip
    assert {r["mechanism"] for r in curve["table"]} == {"probe-reweight"}
