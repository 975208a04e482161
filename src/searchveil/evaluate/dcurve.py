"""What a release keeps as a function of d: the thesis' Fig. 4.2 computed exactly.

Korolova (PhD thesis 2012, §4.6.1.1, Fig. 4.2) plots, for e^ε = 10 and δ = 10⁻⁵, the percent of
distinct queries and the percent of query impressions released by Release-Data (Algorithm 3) as
a function of d, the number of queries kept per user. This module computes the *expected*
values of those figures on a given log, with no sampling, for Release-Data and for Gaussian
selection (:class:`searchveil.mechanisms.selection.GaussianThreshold`):

* Release-Data (Limit-User-Activity + Select-Queries): each user's first ``d`` query events are
  kept; query q with bounded occurrence count c_q is released with probability
  P[c_q + DLap(b) > K] (:func:`searchveil.params.keep_probability` at the scale the exact
  sampler uses), K and b the smallest integer threshold and noise solved by
  :func:`searchveil.params.korolova_solve_exact` for the selection step's (ε, δ, d) — the
  thesis' Table 4.1 choice (§4.5 solves K, b from (ε, δ, d) for Select-Queries; the count step's
  own budget decides the noise on the published counts, not what is published).
* Gaussian selection: each user's first ``d`` distinct queries; q with c_q distinct users is
  kept with P[c_q + N_Z(0, σ²) ≥ τ], (σ, τ) from ``GaussianThreshold.for_budget(ε, δ, d)``.

Queries absent from the bounded data are not candidates (probability 0). Everything is a sum
over queries of a function of the bounded count, computed by grouping queries by their count
(``np.bincount``), so the cost is one pass over the events per d.

Figures (all expectations):

``distinct_pct``      100 · E[#released] / #distinct queries of the log (thesis' right axis);
``volume_pct``        100 · Σ_q P(release_q) · occurrences_q / #query events: the share of the
                      log's query volume whose query is published (comparable across mechanisms);
``impressions_pct``   Release-Data only: 100 · Σ_q P(release_q) · E[noisy count_q] / #query
                      events, the thesis' "% of impressions released" (each released query counted
                      as its noisy count, whose mean is the bounded count c_q);
``single_user_released``  Σ over queries held by exactly one user of their release probability
                      (issue 12: the expected number of queries only one person typed that get
                      published). It uses the count of such queries, which is itself sensitive:
                      a figure for the data holder, never for the release.

Every figure reads the whole log it is computed on: a *data-holder diagnostic*. Choosing d
from the curve of a private log is a use of that log no ledger accounts for (it costs privacy);
``searchveil demo`` computes it on a synthetic log only, and releases use a data-independent
default d (:func:`searchveil.mechanisms.selection.default_d`).
"""

from __future__ import annotations

import math
import multiprocessing as mp
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.rounds import ItemPool, RoundsSelection
from searchveil.mechanisms.selection import ALIASES, REGISTRY, PolicyGaussian, make_strategy
from searchveil.mechanisms.threshold import effective_scale, keep_probability, korolova_solve_exact
from searchveil.model import SearchLog, query_events
from searchveil.rng import SeededRandom
from searchveil.validate import check_int, check_positive, check_probability

__all__ = [
    "ALL_MECHANISMS",
    "DEFAULT_DS",
    "DIAGNOSTIC_NOTE",
    "dcurve",
    "dcurve_from_events",
    "start_dcurve",
    "PendingCurve",
    "encode_events",
    "EncodedEvents",
    "format_dcurve",
]

DEFAULT_DS = (1, 2, 3, 5, 8, 10, 20, 40)
MECHANISMS = ("korolova", "gaussian")
#: every curve the module can draw: exact expectations (korolova, and the strategies on counts,
#: whose keep probability is a function of an item's count) and one simulated run on the log
#: (the ℓ2-weighted strategies: their weights depend on the other users, no closed form)
COUNTED = tuple(c.FACTS.name for c in REGISTRY if not c.FACTS.simulated_curve)
EXACT = ("korolova", *COUNTED)
SIMULATED = tuple(c.FACTS.name for c in REGISTRY if c.FACTS.simulated_curve)
ALL_MECHANISMS = EXACT + SIMULATED
#: a curve's table fields beyond the figures: the threshold and noise of its strategy
CURVE_FIELDS = ("K", "b", "sigma", "tau")
ALL_MECHANISMS = EXACT + SIMULATED
DIAGNOSTIC_NOTE = (
    "a data-holder diagnostic: every point reads the whole log it is computed on; choosing d "
    "from the curve of a private log is a use of the data that no ledger accounts for (it "
    "costs privacy), so searchveil computes it on synthetic logs only and releases use a "
    "data-independent default d (docs/privacy/selection.md)"
)


def encode_events(events: pl.DataFrame) -> EncodedEvents:
    """The events as integer arrays (:class:`EncodedEvents`): query id, rank of the event within
    its user (by ``pos``), and the distinct rank of the user's first occurrence of each query
    (−1 for repeats). Hash-based ids (categorical codes), runs and cumulative sums in numpy: no
    string sort, no window. Encode once to draw several curves, or to read the log's figures
    (holders, occurrences) beside a curve without a second pass."""
    for col in ("user", "query", "pos"):
        if col not in events.columns:
            raise InvalidParameterError(
                "events", events.columns, "a frame with columns user, query, pos"
            )
    ev = events.select("user", "query", "pos")
    ok = ev.get_column("user").is_sorted()
    if ok and ev.height > 1:
        u = ev.get_column("user").rle_id().to_numpy()
        pos = ev.get_column("pos").to_numpy()
        ok = bool(np.all((u[1:] != u[:-1]) | (pos[1:] > pos[:-1])))
    if not ok:
        ev = ev.sort(["user", "pos"])
    qcol = pl.col("query")
    if not ev.schema["query"].is_integer():  # strings: hash-based categorical codes
        qcol = qcol.cast(pl.String).cast(pl.Categorical).to_physical()
    uid = ev.get_column("user").rle_id().to_numpy().astype(np.int32)
    raw = ev.select(qcol.cast(pl.Int64)).to_series().to_numpy()
    del ev
    # dense ids 0..nq-1 in key order (categorical codes may be global and sparse)
    present = pl.Series(raw).unique().sort().to_numpy()
    nq = int(present.size)
    n = uid.size
    starts = np.flatnonzero(np.r_[True, uid[1:] != uid[:-1]]).astype(np.int32)
    qid = np.empty(n, dtype=np.int32)
    first = np.empty(n, dtype=bool)
    # in stretches of whole users (first occurrences are per user): small transients
    cuts = [*starts[:: max(1, starts.size // 16)].tolist(), n]
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        qid[a:b] = np.searchsorted(present, raw[a:b])
        key = pl.Series(uid[a:b].astype(np.int64) * nq + qid[a:b])
        first[a:b] = key.is_first_distinct().to_numpy()
    del raw
    start_of = np.repeat(starts, np.diff(np.r_[starts, n]))
    rank = np.arange(n, dtype=np.int32) - start_of
    cs = np.cumsum(first, dtype=np.int32)
    before = np.where(start_of > 0, cs[start_of - 1], 0).astype(np.int32)
    del start_of
    drank = np.where(first, cs - before - 1, -1).astype(np.int32)
    del cs, before, first
    holders = np.bincount(qid[drank >= 0], minlength=nq)
    return EncodedEvents(qid=qid, rank=rank, drank=drank,
                         occ=np.bincount(qid, minlength=nq).astype(np.float64),
                         single=holders == 1, nq=nq, total=float(n), users=int(starts.size),
                         uid=uid, keys=present)  # fmt: skip


def _expected(
    grouped: tuple[npt.NDArray[np.float64], ...], keep: npt.NDArray[np.float64]
) -> dict[str, float]:
    """Σ over queries of keep[c_q] (· weights), from the sums grouped by bounded count c_q
    (:meth:`EncodedEvents.grouped`)."""
    by_count, occ_by_count, single_by_count = grouped
    k = keep[: by_count.size].copy()
    k[0] = 0.0  # not in the bounded data: not a candidate
    return {
        "released": float(by_count @ k),
        "occurrences": float(occ_by_count @ k),
        "bounded": float((np.arange(by_count.size, dtype=np.float64) * by_count) @ k),
        "single": float(single_by_count @ k),
    }


@dataclass(frozen=True)
class EncodedEvents:
    """The encoded events a d-curve is computed on (:func:`encode_events`), and the per-query
    figures every point uses: ``occ`` (occurrences), ``single`` (held by one user); ``keys``:
    each query id's integer key (integer queries) or categorical code; ``uid``: each event's
    user number."""

    qid: npt.NDArray[np.int32]
    rank: npt.NDArray[np.int32]
    drank: npt.NDArray[np.int32]
    occ: npt.NDArray[np.float64]
    single: npt.NDArray[np.bool_]
    nq: int
    total: float
    users: int
    uid: npt.NDArray[np.int32]
    keys: npt.NDArray[np.int64]
    _counts: dict[str, tuple[int, npt.NDArray[np.int64]]] = field(default_factory=dict, repr=False)
    _grouped: dict[str, tuple[npt.NDArray[np.float64], ...]] = field(
        default_factory=dict, repr=False
    )

    def first_distinct_counts(self, d: int) -> npt.NDArray[np.int64]:
        """Per query: the users holding it among their first ``d`` distinct queries (repeats
        have rank −1: never counted)."""
        return self._prefix_counts("distinct", self.drank, d)

    def first_event_counts(self, d: int) -> npt.NDArray[np.int64]:
        """Per query: its occurrences among the users' first ``d`` query events."""
        return self._prefix_counts("events", self.rank, d)

    def _prefix_counts(
        self, kind: str, rank: npt.NDArray[np.int32], d: int
    ) -> npt.NDArray[np.int64]:
        """Per query: the events with 0 ≤ ``rank`` < d. The last d asked of each kind is kept,
        and a larger d adds only the events of ranks between the two (the curves ask for d in
        increasing order: each event is counted once over the whole curve)."""
        last = self._counts.get(kind)
        if last is not None and last[0] == d:
            return last[1]
        if last is not None and last[0] < d:
            lo, base = last[0], last[1]
        else:
            lo, base = 0, np.zeros(self.nq, dtype=np.int64)
        add = np.bincount(self.qid[(rank >= lo) & (rank < d)], minlength=self.nq)
        self._counts[kind] = (d, base + add)
        self._grouped.pop(kind, None)
        return self._counts[kind][1]

    def grouped(self, kind: str, d: int) -> tuple[npt.NDArray[np.float64], ...]:
        """The queries grouped by their count of ``kind`` (``events`` or ``distinct``) at ``d``:
        per count c, how many queries have it, their occurrences, how many of them only one
        user holds — every figure of a curve point is one of these times the keep curve."""
        counts = self.first_event_counts(d) if kind == "events" else self.first_distinct_counts(d)
        if kind not in self._grouped:
            m = int(counts.max()) + 1 if counts.size else 1
            self._grouped[kind] = (
                np.bincount(counts, minlength=m).astype(np.float64),
                np.asarray(np.bincount(counts, weights=self.occ, minlength=m), np.float64),
                np.bincount(counts[self.single], minlength=m).astype(np.float64),
            )
        return self._grouped[kind]

    def row(self, e: dict[str, float], **fields: Any) -> dict[str, Any]:
        """A table row: ``fields`` then the expected figures of :func:`_expected`."""
        return {**fields, "expected_released": e["released"],
                "distinct_pct": 100.0 * e["released"] / self.nq,
                "volume_pct": 100.0 * e["occurrences"] / self.total}  # fmt: skip


def _check_curve_args(
    mechanisms: Sequence[str], simulation: np.random.Generator | None, n_events: int
) -> None:
    for m in mechanisms:
        if m not in ALL_MECHANISMS:
            raise InvalidParameterError(
                "mechanisms", list(mechanisms), f"a subset of {ALL_MECHANISMS}"
            )
    if any(m in SIMULATED for m in mechanisms) and simulation is None:
        raise InvalidParameterError(
            "simulation", None, "a numpy Generator for the simulated curves " + str(SIMULATED)
        )
    if n_events == 0:
        raise InvalidParameterError("events", 0, "a log with at least one query event")


def _counted_row(ev: EncodedEvents, m: str, d: int, eps: float, dl: float) -> dict[str, Any]:
    """The exact curve of a strategy on counts: its keep probability of each item's count
    among the users' first ``d`` distinct queries."""
    st = make_strategy(m, epsilon=eps, delta=dl, d=d)
    grouped = ev.grouped("distinct", d)
    keep = np.asarray(st.keep_probability(np.arange(grouped[0].size)), dtype=np.float64)
    e = _expected(grouped, keep)
    detail = st.describe()
    row = ev.row(e, d=d, mechanism=m, **{k: detail[k] for k in CURVE_FIELDS if k in detail})
    return row | {"single_user_released": e["single"]}


def _simulate(
    pool: ItemPool, tasks: Sequence[tuple[str, int]], eps: float, dl: float,
    simulation: np.random.Generator,
) -> list[tuple[npt.NDArray[np.int64], float]]:  # fmt: skip
    """One simulated run per ``(strategy, d)`` of ``tasks``, in order (their draws from
    ``simulation`` in this order): the released item ids and the threshold in units."""
    out = []
    for m, d in tasks:
        st = make_strategy(m, epsilon=eps, delta=dl, d=d)
        assert isinstance(st, PolicyGaussian | RoundsSelection)
        # the rounds read the users' first `pool` items only: the same rows, in order, without
        # scanning the rest
        p = pool.first(st.pool) if isinstance(st, RoundsSelection) else pool
        ids = st.select_pool(p, SeededRandom(int(simulation.integers(2**62))), simulation)
        out.append((ids, _threshold_units(st)))
    return out


POOL_ARRAYS = ("users", "items", "rank")


def _simulate_from_files(
    folder: str, nq: int, tasks: Sequence[tuple[str, int]], eps: float, dl: float,
    simulation: np.random.Generator,
) -> tuple[list[tuple[npt.NDArray[np.int64], float]], Mapping[str, Any]]:  # fmt: skip
    """:func:`_simulate` in a worker process, on the pool arrays the parent saved in
    ``folder`` (mapped, not copied); also the generator's state after the runs."""
    arr = {k: np.load(os.path.join(folder, f"{k}.npy"), mmap_mode="r") for k in POOL_ARRAYS}
    runs = _simulate(_item_pool(arr, nq), tasks, eps, dl, simulation)
    return runs, simulation.bit_generator.state


def _item_pool(arrays: Mapping[str, npt.NDArray[np.int32]], nq: int) -> ItemPool:
    """The simulations' pool from its arrays (:func:`_pool`); the item names are the ids
    (the simulations read only how many there are)."""
    return ItemPool(users=arrays["users"], items=arrays["items"], rank=arrays["rank"],
                    names=pl.Series("item", np.arange(nq, dtype=np.int32)))  # fmt: skip


def _simulated_row(
    m: str, d: int, run: tuple[npt.NDArray[np.int64], float], nq: int,
    occ: npt.NDArray[np.float64], single: npt.NDArray[np.bool_], total: float,
) -> dict[str, Any]:  # fmt: skip
    ids, units = run
    return {"d": d, "mechanism": m, "simulated": True,
            "threshold_units": units,
            "expected_released": float(ids.size),
            "distinct_pct": 100.0 * ids.size / nq,
            "volume_pct": 100.0 * float(occ[ids].sum()) / total,
            "single_user_released": float(single[ids].sum())}  # fmt: skip


def _pool(ev: EncodedEvents) -> dict[str, npt.NDArray[np.int32]]:
    """The users' distinct queries in order (the simulated strategies' pool), as arrays."""
    first = ev.drank >= 0
    return {"users": ev.uid[first], "items": ev.qid[first],
            "rank": ev.drank[first].astype(np.int32)}  # fmt: skip


def _korolova_row(ev: EncodedEvents, d: int, eps: float, dl: float) -> dict[str, Any]:
    sol = korolova_solve_exact(epsilon=eps, delta=dl, d=d, distinct=False)
    K, b = int(sol["K"]), float(sol["b"])
    grouped = ev.grouped("events", d)
    grid = np.arange(grouped[0].size)
    keep = keep_probability(grid, threshold=K, scale=effective_scale(b), noise="discrete")
    e = _expected(grouped, keep)
    row = ev.row(e, d=d, mechanism="korolova", K=K, b=b)
    return row | {"impressions_pct": 100.0 * e["bounded"] / ev.total,
                  "single_user_released": e["single"]}  # fmt: skip


def _best_d(table: list[dict[str, Any]], mechanisms: Sequence[str]) -> dict[str, Any]:
    """The best d of each curve: for reference, never to choose d."""
    best = {}
    for m in mechanisms:
        rows = [r for r in table if r["mechanism"] == m]
        top = max(rows, key=lambda r: r["volume_pct"])
        best[m] = {"d": top["d"], "volume_pct": top["volume_pct"],
                   "distinct_pct": top["distinct_pct"]}  # fmt: skip
    return best


def dcurve_from_events(events: pl.DataFrame | EncodedEvents, **options: Any) -> dict[str, Any]:
    """The d-curve of a frame of query events (columns ``user, query, pos``, as
    :func:`searchveil.model.query_events` returns; ``query`` may be strings or integer ids,
    e.g. ``searchveil.synth.synthetic_events(..., spell=False)``), or those events encoded once
    (:func:`encode_events`). See the module docstring; ``options``: those of
    :func:`start_dcurve` (``epsilon`` and ``delta`` required)."""
    with start_dcurve(events, **options) as pending:
        return pending.result()


def start_dcurve(
    events: pl.DataFrame | EncodedEvents,
    *,
    epsilon: float,
    delta: float,
    ds: Sequence[int] = DEFAULT_DS,
    mechanisms: Sequence[str] = MECHANISMS,
    simulation: np.random.Generator | None = None,
    ds_for: Mapping[str, Sequence[int]] | None = None,
    workers: int = 1,
) -> PendingCurve:
    """The d-curve (:func:`dcurve_from_events`) in two steps, for a caller with other work
    to do meanwhile: this call computes the exact rows; :meth:`PendingCurve.result` gives the
    curve.

    ``mechanisms`` may name any of :data:`ALL_MECHANISMS`; the ℓ2-weighted ones are one
    simulated run each (``simulation``: a numpy generator, e.g. from
    :meth:`searchveil.rng.RandomSource.numpy_generator` — rounded continuous Gaussian noise in
    place of the exact sampler, for speed; a diagnostic, never a release). ``ds_for``: fewer d
    for a costly mechanism (e.g. policy Gaussian's sequential pass), a subset of ``ds``.
    ``workers=2``: the simulated runs start in a spawned process (on the pool arrays, saved to
    a private temporary folder and mapped there) before this call computes the exact rows, and
    :meth:`PendingCurve.result` waits for them; the table is the same. The returned object
    keeps per-query arrays only, not the encoded events (drop those to free their memory). Use
    it as a context manager: leaving the block stops the worker and removes the folder."""
    eps = check_positive("epsilon", epsilon)
    dl = check_probability("delta", delta)
    d_list = [check_int("d", d, minimum=1) for d in ds]
    if not d_list:
        raise InvalidParameterError("ds", list(ds), "a non-empty list of integers >= 1")
    n_workers = check_int("workers", workers, minimum=1, maximum=2)
    # deprecated strategy spellings (mad, mad2r) draw their new names' curves
    mechanisms = [ALIASES.get(str(m), str(m)) for m in mechanisms]
    ds_for = {ALIASES.get(str(m), str(m)): v for m, v in (ds_for or {}).items()}
    n_events = int(events.total) if isinstance(events, EncodedEvents) else events.height
    _check_curve_args(mechanisms, simulation, n_events)
    ev = events if isinstance(events, EncodedEvents) else encode_events(events)
    tasks = _tasks(mechanisms, d_list, ds_for)
    pending = PendingCurve(ev, eps, dl, mechanisms, tasks, simulation)
    try:
        sim = [t for t in tasks if t[0] in SIMULATED]
        if sim and n_workers > 1:
            pending.submit(_pool(ev), sim)
        pending.exact = {t: _exact_row(ev, *t, eps, dl) for t in tasks if t[0] not in SIMULATED}
        if sim and n_workers == 1:
            assert simulation is not None
            pending.runs = _simulate(_item_pool(_pool(ev), ev.nq), sim, eps, dl, simulation)
    except BaseException:
        pending.close()
        raise
    return pending


def _tasks(
    mechanisms: Sequence[str], d_list: Sequence[int], ds_for: Mapping[str, Sequence[int]]
) -> list[tuple[str, int]]:
    """The table's rows: per d, in the tables' order since issue 24 — the first strategy on
    counts, the simulated ones (their draws from the simulation generator in this order),
    korolova, the other ones."""
    return [(m, d) for d in d_list for m in (*COUNTED[:1], *SIMULATED, "korolova", *COUNTED[1:])
            if m in mechanisms and (m not in SIMULATED or d in ds_for.get(m, d_list))]  # fmt: skip


def _exact_row(ev: EncodedEvents, m: str, d: int, eps: float, dl: float) -> dict[str, Any]:
    return _korolova_row(ev, d, eps, dl) if m == "korolova" else _counted_row(ev, m, d, eps, dl)


class PendingCurve:
    """A d-curve under way (:func:`start_dcurve`): the exact rows computed, the simulated runs
    done or running in a worker process."""

    def __init__(
        self, ev: EncodedEvents, eps: float, dl: float, mechanisms: Sequence[str],
        tasks: list[tuple[str, int]], simulation: np.random.Generator | None,
    ) -> None:  # fmt: skip
        self.head = {"epsilon": eps, "delta": dl, "users": ev.users,
                     "query_events": int(ev.total), "distinct_queries": ev.nq,
                     "single_user_queries": int(ev.single.sum())}  # fmt: skip
        self.occ, self.single, self.total = ev.occ, ev.single, ev.total
        self.eps, self.dl, self.mechanisms, self.tasks = eps, dl, mechanisms, tasks
        self.simulation = simulation
        self.exact: dict[tuple[str, int], dict[str, Any]] = {}
        self.runs: list[tuple[npt.NDArray[np.int64], float]] | None = None
        self._folder: str | None = None
        self._pool: ProcessPoolExecutor | None = None
        self._future: Future[Any] | None = None

    def submit(self, arrays: dict[str, npt.NDArray[np.int32]], sim: list[tuple[str, int]]) -> None:
        """Save the pool arrays to a private folder and start the simulated runs on them in a
        spawned process (its generator: a copy of ``simulation``, whose state is set to the
        copy's when the runs end, as if they had run here)."""
        self._folder = tempfile.mkdtemp(prefix="searchveil-dcurve-")
        for k in POOL_ARRAYS:
            np.save(os.path.join(self._folder, f"{k}.npy"), arrays[k])
        del arrays
        assert self.simulation is not None
        self._pool = ProcessPoolExecutor(max_workers=1, mp_context=mp.get_context("spawn"))
        self._future = self._pool.submit(_simulate_from_files, self._folder,
                                         int(self.head["distinct_queries"]), sim, self.eps,
                                         self.dl, self.simulation)  # fmt: skip

    def result(self) -> dict[str, Any]:
        """The curve (waits for the simulated runs)."""
        if self._future is not None:
            self.runs, state = self._future.result()
            assert self.simulation is not None
            self.simulation.bit_generator.state = state
            self.close()
        runs = iter(self.runs or [])
        nq = int(self.head["distinct_queries"])
        table = [self.exact[t] if t in self.exact
                 else _simulated_row(*t, next(runs), nq, self.occ, self.single, self.total)
                 for t in self.tasks]  # fmt: skip
        users = int(self.head["users"])
        return {
            **self.head,
            "delta_protects_everyone": self.dl < 1.0 / users,
            "delta_max_recommended": 1.0 / (10.0 * users),
            "table": table,
            "best": _best_d(table, self.mechanisms),
            "note": f"{', '.join(EXACT)}: expectations over the mechanisms' noise, computed "
            f"exactly from the keep curves; {', '.join(SIMULATED)}: one simulated run each; "
            + DIAGNOSTIC_NOTE,
            "diagnostic": True,
        }

    def close(self) -> None:
        """Stop the worker (if any) and remove the folder of pool arrays. A worker still
        running (the caller failed or was interrupted) is terminated, not waited for."""
        if self._pool is not None:
            if self._future is not None and not self._future.done():
                # ProcessPoolExecutor has no public terminate before Python 3.14
                for proc in list(getattr(self._pool, "_processes", {}).values()):
                    proc.terminate()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def __enter__(self) -> PendingCurve:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _threshold_units(st: Any) -> float:
    """The (last round's) release threshold in units of one user's ℓ2 budget."""
    if isinstance(st, RoundsSelection):
        return float(st.rounds[-1].threshold / st.rounds[-1].scale)
    return float(st.rho)


def dcurve(
    log: SearchLog,
    *,
    epsilon: float,
    delta: float,
    ds: Sequence[int] = DEFAULT_DS,
    mechanisms: Sequence[str] = MECHANISMS,
) -> dict[str, Any]:
    """The d-curve of ``log`` (its query events; see :func:`dcurve_from_events`)."""
    return dcurve_from_events(
        query_events(log), epsilon=epsilon, delta=delta, ds=ds, mechanisms=mechanisms
    )


def format_dcurve(result: dict[str, Any]) -> str:
    """A Markdown table of a :func:`dcurve` result (one row per d)."""
    by_d: dict[int, dict[str, dict[str, Any]]] = {}
    for r in result["table"]:
        by_d.setdefault(r["d"], {})[r["mechanism"]] = r
    lines = [
        "| d | K | Release-Data % distinct | % volume | % impressions | single-user "
        "| τ | Gaussian % distinct | % volume | single-user |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(r: dict[str, Any] | None, key: str, digits: int = 3) -> str:
        if r is None:
            return "–"
        v = r[key]
        return f"{v:.{digits}g}" if isinstance(v, float) and not math.isnan(v) else str(v)

    for d in sorted(by_d):
        k, g = by_d[d].get("korolova"), by_d[d].get("gaussian")
        lines.append(
            f"| {d} | {f(k, 'K')} | {f(k, 'distinct_pct')} | {f(k, 'volume_pct')} "
            f"| {f(k, 'impressions_pct')} | {f(k, 'single_user_released', 2)} | {f(g, 'tau')} "
            f"| {f(g, 'distinct_pct')} | {f(g, 'volume_pct')} "
            f"| {f(g, 'single_user_released', 2)} |"
        )
    return "\n".join(lines)
