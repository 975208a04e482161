"""The README's main job as one library call: :func:`demo` (``searchveil demo`` wraps it).

1. A query-click release with the best selection strategy measured (``selection``, default
   probe-reweight-2r: docs/selection-strategies.md; e^ε = 10, d from public information only —
   on the bundled sample a declared d = 21 (the thesis' d; the default rule's reference is that very
   sample, docs/privacy/selection.md), on your own log the strategy's data-independent default,
   d_c = 1 click, queries and (query, url) pairs selected privately) on the bundled real sample
   (215 AOL users), with the utility report of ``searchveil evaluate``. ``selection="korolova"``
   runs the thesis' Release-Data instead (d = d_c = 1, privately selected URLs).
2. A synthetic log of ``synthetic_users`` users calibrated on that sample
   (:func:`searchveil.synth.synthetic_events`, integer query keys), on which the demo shows the
   thesis' central result (Korolova, PhD thesis 2012, §4.6.1.1, Fig. 4.2): the percent of
   distinct queries and of query volume released as a function of d, for Release-Data and every
   selection strategy (:mod:`searchveil.evaluate.dcurve`: exact expectations, or one simulated
   run for the ℓ2-weighted strategies), as a plot in ``report.html`` and a table on the
   terminal; and runs one real release with the same strategy on it. The curve is a data-holder
   diagnostic computed on the synthetic log only: the releases never choose d from it (choosing
   d on the private log costs privacy).

δ that protects everyone (issue 12, ``docs/privacy/delta.md``). Each run's δ is solved so that
the expected number of queries held by a single user that get published is ≤
``max_single_user_items`` (default 0.01), from a *declared* population rule, never from the
private log (issue 21): an (ε, δ)-DP release publishes a query only one user holds with
probability ≤ δ, and only a query the user kept among their first d can be published at all,
so at most N ≤ U·d such queries are candidates; δ = target / (U·d) with d = 1, rounded down to
a power of ten and never above 1/(10·U). The selection strategies keep more queries per user
(their default d), but their δ bounds the chance that *any* of one user's single-user queries is
published (1 − (1 − p)^k over the user's k items), so U users, not U·d items, is the count that
matters there; the report shows the expected number each release publishes, computed exactly.
U is a public bound: ``max_users`` (required with a log of your own), the bundled sample's
published size (215 users), or the synthetic population's size (``synthetic_users``, a
parameter). The count of the log's single-user queries is still computed — for the data
holder's report (private), not for choosing δ. A fixed δ such as the thesis' 10⁻⁵ or 10⁻⁴
(≈ 3.5 single-user queries published per run on 50,000 synthetic users) does not protect
everyone.

Why few queries pass on the real sample: a query is published only if about K users posed it
(K ≈ 20 at δ = 10⁻⁶, d = 1), and with 215 users almost no query is that common.

On two cores the demo keeps both busy (issue 33): the real run (its release and utility report)
runs in a thread beside the synthetic run, drawing from ``rng`` itself (so it is the release
``searchveil release korolova --seed`` makes), while the synthetic run draws from a child stream
(:func:`synthetic_stream`); the simulated points of the d-curve run in a spawned process
(:func:`~searchveil.evaluate.dcurve.start_dcurve`) while this process computes the exact points
and the synthetic release, after dropping the encoded events. The curve is the one-process
curve, point for point.

Parameters come from the families' own classes (``KorolovaParams.from_budget``,
``SelectionParams.from_budget``: the default-d rule and the δ < 1/U refusal), contributions are
bounded by the families' code (the bounding kernel), and every release is written by the
release writer (:class:`~searchveil.io.ledger.ReleaseWriter`). Everything goes into ``out``
(default ``searchveil-demo``), built in a staging directory (:class:`~searchveil.io.paths.
Staging`) and put in place at the end, so a failed or interrupted demo leaves nothing. Each
release directory (``real/``, ``synthetic/``) holds only what is published; its private
provenance record (``real.private.json``, ...) sits beside it, names the release's final place,
and the utility report reads the release's private figures from there.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import polars as pl

from searchveil.bounding import first_per_user
from searchveil.engines.contract import BoundingPlan
from searchveil.errors import InvalidParameterError
from searchveil.evaluate import evaluate_loaded, load_release
from searchveil.evaluate.dcurve import ALL_MECHANISMS, SIMULATED, encode_events, start_dcurve
from searchveil.io.ledger import is_provenance_record, read_provenance
from searchveil.io.paths import (
    REPORT,
    Owned,
    Replace,
    Staging,
    check_private_path,
    input_list,
    is_within,
    release_problems,
)
from searchveil.io.readers import ReaderOptions, read_log
from searchveil.mechanisms.budget import Charge, PrivacyCost
from searchveil.mechanisms.selection import ALIASES, REGISTRY, SelectionStrategy
from searchveil.model import SearchLog, items
from searchveil.params import SINGLE_USER_TARGET, solve_delta_single_user
from searchveil.release.counts import BoundedCounts, count_by
from searchveil.release.histogram import write_release
from searchveil.release.korolova import KorolovaParams, release_korolova, release_korolova_counts
from searchveil.release.selection import (
    SelectionParams,
    UserItemPools,
    release_selection,
    release_selection_pools,
)
from searchveil.report.demo import demo_report
from searchveil.report.evaluation import evaluation_report
from searchveil.report.html import write_report
from searchveil.rng import RandomSource, SecureRandom, SeededRandom
from searchveil.synth import fit, synthetic_events
from searchveil.validate import check_choice, check_int, check_positive

__all__ = ["DEMO_PRIVATE_FIGURES", "DEMO_SELECTIONS", "DEMO_SYNTHETIC_USERS", "SAMPLE_USERS",
           "check_out", "curve_rows", "demo", "summary_rows"]  # fmt: skip

#: ``step(description) -> done()``: the progress callback (the CLI's spinner; a no-op default)
Step = Callable[[str], Callable[[], None]]


class Budgeted(Protocol):
    """What :func:`demo` charges its release to: a :class:`~searchveil.Session` (or a
    :class:`~searchveil.mechanisms.budget.BudgetBook`)."""

    def charge(
        self, cost: PrivacyCost, *, what: str, out: str | os.PathLike[str] | None = None
    ) -> AbstractContextManager[Charge]: ...


DEMO_EPSILON = math.log(10.0)
#: the demo's strategy: the best measured at its default d (docs/selection-strategies.md)
DEMO_SELECTION = "probe-reweight-2r"
DEMO_SELECTIONS = ("korolova", *(s.value for s in SelectionStrategy))
DEMO_D = 1
DEMO_DC = 1
DEMO_SPLIT = (1.0, 1.0, 1.0, 1.0)
DEMO_DS = (1, 2, 3, 5, 10, 20, 40)
#: the simulated curves (one run of the ℓ2-weighted strategies per point on 11M events) at
#: fewer d: ~0.4 s a point for the rounds, ~2 s for policy Gaussian's sequential pass
DEMO_SIM_DS = (1, 3, 10, 20, 40)
DEMO_POLICY_DS = (1, 10, 40)
#: the synthetic population: AOL-sized in order of magnitude (the thesis' log: 500k+ users),
#: sized to what the d-curve needs — every curve's best d keeps 15-30 % of the query volume —
#: within 25 s and 1.5 GB on 2 cores (docs/performance.md; 500,000 until issue 33)
DEMO_SYNTHETIC_USERS = 300_000
#: the key of the synthetic run's child stream of a seeded demo (:func:`synthetic_stream`)
SYNTHETIC_STREAM = 1
#: the synthetic events are bounded in this many stretches of whole users (peak memory)
BOUND_STRETCHES = 8
SAMPLE = "aol-gayo-avello-215-users.tsv"
#: the bundled sample's published size: the public bound U the demo declares for it
SAMPLE_USERS = 215
#: d of the selection strategies on the bundled sample, declared: the thesis' d for a week of
#: another engine's log (Korolova 2012, §4.6.1.2; Fig. 4.2 peaks near d = 20) — public, and not
#: computed from the sample, whose own distinct-queries histogram is the default-d reference
DEMO_SAMPLE_D = 21
DEMO_SAMPLE_D_RULE = (
    "declared by the demo: d = 21, the thesis' d (Korolova 2012 §4.6.1.2), because the default "
    "rule's reference sample is the very sample released"
)
#: the exact figures of the logs in each run of the demo's result (labelled private)
DEMO_PRIVATE_FIGURES = ("users", "distinct_queries", "released_query_volume",
                        "released_volume_pct", "single_user", "single_user_published")  # fmt: skip
#: what a demo directory may hold, so ``overwrite`` replaces only a directory the demo wrote
DEMO_ENTRIES = {"real": "release", "synthetic": "release", "real.private.json": "record",
                "synthetic.private.json": "record", "real-report.html": "report",
                "report.html": "report"}  # fmt: skip


def _no_step(_desc: str) -> Callable[[], None]:
    return lambda: None


def _delta_for(users: int, target: float) -> dict[str, Any]:
    """δ from the declared population rule N ≤ U·d (never from the private log's own count of
    single-user queries): see the module docstring."""
    sol = solve_delta_single_user(target=target, users=users, items_per_user=DEMO_D)
    sol["users_bound"] = users
    return sol


def _select_params(
    selection: str, delta: float, d_c: int | None, max_users: int, *, sample: bool = False
) -> SelectionParams:
    """The demo's selection release: the whole budget split equally between the steps, d from
    public information only (never tuned on the log; U the declared bound): the strategy's
    default rule (:meth:`SelectionParams.from_budget`) reads the public reference sample — the
    bundled sample itself — so releasing that sample (``sample``) takes :data:`DEMO_SAMPLE_D`
    instead: d chosen on the data released would make the release's parameters a function of
    its input (issue 30); Laplace's rule (d = 1) reads nothing."""
    declared = sample and selection != "laplace"
    return SelectionParams.from_budget(
        strategy=selection, epsilon=DEMO_EPSILON, delta=delta, d_c=d_c, max_users=max_users,
        d=DEMO_SAMPLE_D if declared else None, d_rule=DEMO_SAMPLE_D_RULE if declared else None,
    )  # fmt: skip


def _run_figures(rel: Any, sol: dict[str, Any], selection: str, d: int) -> dict[str, Any]:
    """What both runs report of their release: its budget, δ's solution, strategy, d,
    threshold and single-user figures."""
    return {"epsilon": rel.ledger["epsilon"], "delta": rel.ledger["delta"], "delta_solved": sol,
            "selection": selection, "d": d, "threshold": _threshold(rel, selection),
            "single_user": rel.report["single_user"]}  # fmt: skip


def _threshold(rel: Any, selection: str) -> tuple[float, float]:
    """(threshold, noise) of a release's selection step, for the summary table."""
    r = rel.report
    if selection == "korolova":
        return float(r["parameters"]["K"]), float(r["parameters"]["b"])
    sel = r["selection"]
    if "rounds" in sel:
        last = sel["rounds"][-1]
        return float(last["threshold_units"]), float(last["sigma"])
    return float(sel.get("K", sel.get("tau", sel.get("rho", math.nan)))), float(
        sel.get("b", sel.get("sigma", math.nan))
    )


def real_params(
    *, target: float, max_users: int, selection: str, sample: bool
) -> tuple[KorolovaParams | SelectionParams, dict[str, Any]]:
    """The parameters of the demo's release of the real log and δ's solution: public (the
    declared U, the target, the strategy), so its cost is known before the log is read."""
    sol = _delta_for(max_users, target)
    if selection == "korolova":
        return KorolovaParams.from_budget(
            epsilon=DEMO_EPSILON, delta=sol["delta"], d=DEMO_D, url_selection="private",
            d_c=DEMO_DC, split=DEMO_SPLIT, threshold_rule="exact",
        ), sol  # fmt: skip
    return _select_params(selection, sol["delta"], DEMO_DC, max_users, sample=sample), sol


def real_release(
    log: SearchLog, *, target: float, rng: RandomSource, max_users: int, selection: str,
    sample: bool, step: Step = _no_step,
) -> tuple[Any, dict[str, Any], int]:  # fmt: skip
    """The demo's release step on the real log: (release, δ solution, d). ``sample``: the log
    is the bundled sample (d then comes from :data:`DEMO_SAMPLE_D`, see
    :func:`_select_params`)."""
    params, sol = real_params(target=target, max_users=max_users, selection=selection,
                              sample=sample)  # fmt: skip
    if isinstance(params, KorolovaParams):
        done = step("Release-Data on the real sample")
        rel = release_korolova(log, params, rng=rng, max_users=max_users)
        done()
        return rel, sol, DEMO_D
    sp = params
    done = step(f"{selection} selection (d = {sp.d}, d_c = {DEMO_DC}) on the real sample")
    rel = release_selection(log, sp, rng=rng, max_users=max_users)
    done()
    return rel, sol, sp.d


def _real_run(
    log: SearchLog, tmp: Path, *, target: float, rng: RandomSource, step: Step, final: Path,
    max_users: int, selection: str, sample: bool,
) -> dict[str, Any]:  # fmt: skip
    """The query-click release on the real sample, its utility report."""
    q = items(log, "queries")
    rel, sol, sel_d = real_release(log, target=target, rng=rng, max_users=max_users,
                                   selection=selection, sample=sample, step=step)  # fmt: skip
    write_release(rel, tmp / "real", moves_to=final / "real")
    done = step("evaluating the real release")
    result = evaluate_loaded(log, load_release(tmp / "real"), substitution_queries=300)
    # the release's private figures come from its provenance record, as for `evaluate`
    prov = read_provenance(tmp / "real")
    result["release"]["single_user"] = prov["report"]["single_user"]
    # the report names the release where it will live, not the staging directory
    result = json.loads(json.dumps(result, default=str).replace(str(tmp), str(final)))
    write_report(tmp / "real-report.html", evaluation_report(result))
    done()
    r = rel.report
    top = rel.tables["queries"].sort("noisy_count", descending=True).head(8).to_dicts()
    published = rel.tables["queries"].get_column("query")
    holders = q.group_by("item").agg(pl.col("user").n_unique().alias("h"))
    return {
        "release": str(final / "real"),
        "report": str(final / "real-report.html"),
        "users": r["users"],
        "distinct_queries": int(q.get_column("item").n_unique()),
        "queries_released": r["queries_released"],
        "released_query_volume": int(
            q.join(published.to_frame("item"), on="item", how="semi").height
        ),
        "pairs_released": r.get("pairs_released", 0),
        **_run_figures(rel, sol, selection, sel_d),
        "single_user_published": int(
            holders.filter(pl.col("item").is_in(published.implode()) & (pl.col("h") == 1)).height
        ),
        "top_queries": top,
    }


def _bounded(ev: pl.DataFrame, plan: BoundingPlan) -> pl.DataFrame:
    """The synthetic events a family's bounding plan keeps (``user, query, pos`` + ``rank``),
    by the bounding kernel (:func:`~searchveil.bounding.first_per_user`) on the events as
    :func:`~searchveil.synth.synthetic_events` yields them: each user's together, in order."""
    rule = plan.kernel_spec().events
    assert rule is not None
    if not ev.get_column("user").is_sorted():
        ev = ev.sort(["user", "pos"])
    # in stretches of whole users (the rule is per user): the kernel's transients stay small
    starts = ev.select(pl.arg_where(pl.col("user") != pl.col("user").shift(1))).to_series()
    cuts = [0, *starts.gather_every(max(1, starts.len() // BOUND_STRETCHES)).to_list()[1:],
            ev.height]  # fmt: skip
    distinct = ["query"] if rule.distinct else None
    parts = [first_per_user(ev.slice(a, b - a), rule.n, distinct_on=distinct, rank="rank")
             for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]  # fmt: skip
    return pl.concat(parts) if parts else first_per_user(ev, rule.n, distinct_on=distinct,
                                                         rank="rank")  # fmt: skip


def _synthetic_release(
    ev: pl.DataFrame, single: pl.DataFrame, *, users: int, delta: float, rng: RandomSource,
    step: Step, selection: str,
) -> tuple[Any, int]:  # fmt: skip
    """One release with ``selection`` on the synthetic events (query keys; the strategy's
    default d; no URLs), bounded by the family's own rules: (release, d)."""
    synthetic_input = {"file": f"synthetic-{users}-users (in memory, query keys)",
                       "sha256": None, "rows": ev.height, "users": users,
                       "synthetic": True}  # fmt: skip
    if selection == "korolova":
        params = KorolovaParams.from_budget(
            epsilon=DEMO_EPSILON, delta=delta, d=DEMO_D, url_selection="none",
            split=(1.0, 1.0), threshold_rule="exact",
        )  # fmt: skip
        done = step(f"Release-Data (d = {params.d}) on the synthetic log")
        kept = _bounded(ev, params.bounding_plan())  # Limit-User-Activity: first d events
        counts = count_by(kept, ["query"], distinct_users=params.distinct)
        bounded = BoundedCounts(
            counts={"queries": counts},
            figures={"users": users, "query_events": ev.height,
                     "query_events_after_bounding": kept.height},
            input=synthetic_input,
        )  # fmt: skip
        rel = release_korolova_counts(
            bounded, params, rng=rng, max_users=users,
            single_user=(counts.join(single, on="query", how="semi"), single.height),
        )  # fmt: skip
        done()
        return rel, params.d
    sp = _select_params(selection, delta, None, users)
    done = step(f"{selection} selection (d = {sp.d}) on the synthetic log")
    pools = UserItemPools(
        # each user's first `pool` distinct queries, ranked
        queries=_bounded(ev, sp.bounding_plan()).select("user", item="query", rank="rank"),
        clicks=None,
        figures={"users": users, "query_events": ev.height},
        input=synthetic_input,
        events=ev.select("user", pl.col("query").alias("item")),
        single_items=single.rename({"query": "item"}),
    )
    rel = release_selection_pools(pools, sp, rng=rng, max_users=users)
    done()
    return rel, sp.d


def _synthetic_run(
    log: SearchLog, tmp: Path, *, users: int, target: float, rng: RandomSource, step: Step,
    final: Path, selection: str,
) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """The d-curve of a synthetic log of ``users`` users (every strategy), and one release with
    ``selection`` on it."""
    workers = max(1, min(os.cpu_count() or 1, 2))  # the generator's, then the curves'
    done = step(f"generating a synthetic log of {users:,} users (query keys)")
    ev = synthetic_events(fit(log, rng=rng), users=users, rng=rng, spell=False,
                          workers=workers)  # fmt: skip
    # user numbers and positions fit 32 bits: a third less memory for the events
    ev = ev.with_columns(pl.col("user").cast(pl.Int32), pl.col("pos").cast(pl.Int32))
    done()
    done = step("counting the synthetic log's queries")
    # one pass over the events: the curves, the holders and the volumes all read this encoding
    enc = encode_events(ev)
    single = pl.DataFrame({"query": enc.keys[enc.single]}).cast({"query": ev.schema["query"]})
    sol = _delta_for(users, target)  # U = the synthetic population's size (a parameter)
    done()
    # the simulated curve points run in a second process (on 2 cores) while this one computes
    # the exact points and then the release; the simulations draw from their own generator,
    # taken from ``rng`` first, as before
    done = step(f"d-curves (d = {', '.join(map(str, DEMO_DS))}; Release-Data and every strategy)")
    with start_dcurve(enc, epsilon=DEMO_EPSILON, delta=sol["delta"], ds=DEMO_DS,
                      mechanisms=ALL_MECHANISMS, simulation=rng.numpy_generator(),
                      ds_for={m: DEMO_SIM_DS for m in SIMULATED}
                      | {"policy-gaussian": DEMO_POLICY_DS},
                      workers=workers) as pending:  # fmt: skip
        occ, keys, distinct = enc.occ, enc.keys, enc.nq
        del enc  # its per-event arrays: the release below bounds the events afresh
        rel, sel_d = _synthetic_release(ev, single, users=users, delta=sol["delta"], rng=rng,
                                        step=step, selection=selection)  # fmt: skip
        curve = pending.result()
    done()
    n_events = ev.height
    del ev
    write_release(rel, tmp / "synthetic", moves_to=final / "synthetic")
    published = rel.tables["queries"].select("query")
    r = rel.report
    ids = np.searchsorted(keys, published.get_column("query").cast(pl.Int64).to_numpy())
    vol = int(occ[ids].sum())
    run_ = {
        "release": str(final / "synthetic"),
        "users": users,
        "distinct_queries": distinct,
        "queries_released": r["queries_released"],
        "released_query_volume": vol,
        "released_volume_pct": 100.0 * vol / max(1, n_events),
        **_run_figures(rel, sol, selection, sel_d),
        "single_user_published": int(published.join(single, on="query", how="semi").height),
        "top_queries": [],
    }
    return run_, curve


def synthetic_stream(rng: RandomSource) -> RandomSource:
    """The randomness of the demo's synthetic run: a seeded source's child stream
    (:meth:`~searchveil.rng.SeededRandom.spawn`, so a seeded demo is reproducible whatever the
    order the two runs draw in), else fresh secure randomness."""
    return rng.spawn(SYNTHETIC_STREAM) if isinstance(rng, SeededRandom) else SecureRandom()


def _demo_problem(out: Path) -> str | None:
    """Why ``out`` is not a directory the demo wrote (so ``overwrite`` may not replace it)."""
    if out.is_symlink() or not out.is_dir():
        return "it is not a directory"
    try:
        entries = sorted(os.scandir(out), key=lambda e: e.name)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    for e in entries:
        kind = DEMO_ENTRIES.get(e.name)
        p = Path(e.path)
        if kind is None or e.is_symlink():
            return f"{e.name!r} is not something the demo writes"
        if kind == "release" and (not p.is_dir() or release_problems(p) is not None):
            return f"{e.name!r} is not a complete searchveil release"
        if kind == "record" and not is_provenance_record(p):
            return f"{e.name!r} is not a searchveil provenance record"
        if kind == "report" and REPORT.problem(p) is not None:
            return f"{e.name!r} is not a searchveil report"
    return None


#: what ``demo --overwrite`` may replace: a directory holding only what the demo writes
DEMO_DIR = Owned("a directory the demo wrote (its releases, records and reports)", _demo_problem)


def out_rule(overwrite: bool) -> Replace:
    """The write rule of the demo's ``--out`` (checked before any work and again at the swap,
    so a file added to it while the demo runs is never deleted)."""
    return Replace("out", overwrite, DEMO_DIR, directory=True)


def check_out(out: Path, *, overwrite: bool, log: Path | None) -> None:
    """Before any work (issue 30): ``out`` may hold private files, so it is refused inside a
    release directory; ``overwrite`` replaces only a directory the demo wrote, and never one
    that holds ``log``; a symbolic link never."""
    if log is not None and os.path.lexists(out) and is_within(log, out):
        raise InvalidParameterError("log", str(log), f"a path outside --out {str(out)!r}")
    check_private_path(out, option="out", inputs=input_list(log=log), directory=True,
                       overwrite=overwrite, owned=DEMO_DIR)  # fmt: skip


def _check_args(*, synthetic_users: int, selection: str, max_single_user_items: float,
                max_users: int | None, log: Path | None) -> tuple[float, int]:  # fmt: skip
    """The options checked before anything is read or written: (target, U)."""
    if synthetic_users < 0:
        raise InvalidParameterError("--synthetic-users", synthetic_users, "an integer ≥ 0")
    check_choice("selection", selection, DEMO_SELECTIONS)
    target = check_positive("max-single-user-items", max_single_user_items)
    if max_users is None and log is not None:
        raise InvalidParameterError(
            "--max-users",
            None,
            "a public upper bound U on the users of LOG (δ is solved from it: "
            "the demo never chooses δ from the private log)",
        )
    u_bound = check_int("--max-users", SAMPLE_USERS if max_users is None else max_users,
                        minimum=1)  # fmt: skip
    return target, u_bound


def demo(
    *,
    out: str | os.PathLike[str],
    rng: RandomSource,
    log: str | os.PathLike[str] | None = None,
    reader: ReaderOptions | None = None,
    synthetic_users: int = DEMO_SYNTHETIC_USERS,
    max_single_user_items: float = SINGLE_USER_TARGET,
    max_users: int | None = None,
    selection: str = DEMO_SELECTION,
    overwrite: bool = False,
    budget: Budgeted | None = None,
    step: Step = _no_step,
) -> dict[str, Any]:
    """Run the demo into the directory ``out`` (see the module docstring) and return its
    result: the runs (``real``, ``synthetic``; their exact figures are private, for the data
    holder), the parameters, the δ choice, the d-curve and a note.

    ``budget``: a budget to charge the demo's one differentially private release of the log,
    ``real/`` (a :class:`~searchveil.Session`, or anything with its ``charge``): its cost is
    admitted before the log is read, and stands from then on. Nothing else the demo writes is
    covered: the synthetic log is calibrated on the log's exact figures and the reports show
    them (for the data holder; never publish them).

    ``log``: a search log of your own, read with ``reader`` (default: the bundled 215-user
    AOL sample); then ``max_users``, a public bound U on its users you declare, is required.
    ``synthetic_users``: users of the synthetic log (0: skip it). ``overwrite``: replace a
    directory the demo wrote. ``step``: a progress callback. Nothing is written unless the
    whole demo succeeds. On two or more cores it starts worker processes (``spawn``: they
    import the calling script), so call it from a script under ``if __name__ == "__main__":``."""
    reader = reader if reader is not None else ReaderOptions()
    path = None if log is None else Path(log)
    selection = ALIASES.get(selection, selection)  # mad, mad2r: deprecated spellings
    target, u_bound = _check_args(synthetic_users=synthetic_users, selection=selection,
                                  max_single_user_items=max_single_user_items,
                                  max_users=max_users, log=path)  # fmt: skip
    out = Path(out)
    check_out(out, overwrite=overwrite, log=path)
    final = out.resolve()
    curve: dict[str, Any] | None = None
    cost = real_params(target=target, max_users=u_bound, selection=selection,
                       sample=path is None)[0].cost()  # fmt: skip
    charge = (nullcontext(Charge(None, "demo")) if budget is None
              else budget.charge(cost, what="demo", out=final / "real"))  # fmt: skip
    with Staging(final, directory=True, replace=out_rule(overwrite)) as stage, charge as ch:
        tmp = stage.path
        runs: dict[str, Any] = {}
        name = SAMPLE if path is None else str(path)
        with resources.as_file(resources.files("searchveil") / "data" / SAMPLE) as bundled:
            done = step(f"reading {name}")
            real = read_log(bundled if path is None else path, reader)
            done()
        # the real run (its release and utility report) in a thread beside the synthetic run:
        # its plots and the curves' loops each hold one core of two; it draws from ``rng``
        # itself (so it is the release `searchveil release korolova --seed` makes), the
        # synthetic run from an independent stream (:func:`synthetic_stream`)
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="searchveil-demo") as ex:
            real_run = ex.submit(_real_run, real, tmp, target=target, rng=rng, step=step,
                                 final=final, max_users=u_bound, selection=selection,
                                 sample=path is None)  # fmt: skip
            if synthetic_users:
                syn, curve = _synthetic_run(
                    real, tmp, users=synthetic_users, target=target,
                    rng=synthetic_stream(rng), step=step, final=final, selection=selection,
                )  # fmt: skip
            runs["real"] = real_run.result()
        if synthetic_users:
            runs["synthetic"] = syn
        res = _result(runs, curve, target=target, seeded=rng.seeded, final=final,
                      sample=name, reader=reader, selection=selection)  # fmt: skip
        write_report(tmp / "report.html", demo_report(res))
        stage.commit()  # the old demo directory is removed only once this one is in place
        ch.record_written(final / "real")
    return res


def _result(
    runs: dict[str, Any], curve: dict[str, Any] | None, *, target: float, seeded: bool,
    final: Path, sample: str, reader: ReaderOptions, selection: str,
) -> dict[str, Any]:  # fmt: skip
    real = runs["real"]
    explanation = (
        f"δ is solved per log so that the expected number of queries held by a single user that "
        f"get published is ≤ {target:g}: any (ε, δ)-DP release publishes such a query with "
        f"probability ≤ δ, and only a query among a user's first d = {DEMO_D} can be published, "
        "so at most U·d are candidates: δ = target / (U·d), rounded down to a power of ten and "
        "never above 1/(10·U), with U a declared public bound (the bundled sample's published "
        "size, --max-users for your own log, the synthetic population's size) — never the "
        "private log's own count, which would make δ a function of the data outside the "
        "accounting. The number of single-user queries in the log is a private figure (shown "
        "here to the data holder; not in the releases or ledgers). A fixed δ does not protect "
        "everyone: at δ = 1e-4 on 50,000 synthetic users, about 3.5 single-user queries would "
        "be published per run."
    )
    thr = real["threshold"][0]
    unit = "users" if selection in ("korolova", "laplace", "gaussian") else "users' full weight"
    note = (
        f"A query is published only if about {thr:.3g} {unit} posed it (after each user keeps "
        f"d = {real['d']}); with {real['users']} real users few or no queries pass — that is "
        "the price of protecting every user of a small log, not a fault. "
    )
    if curve is not None:
        note += (
            "The synthetic log (calibrated on the sample; test data, not a release) shows what "
            "a population of thesis-like size releases: a tiny share of distinct queries that "
            "covers a large share of the query volume. The d-curve gives the whole ε to the "
            "selection step (as the thesis' Fig. 4.2); the synthetic release splits ε between "
            "selection and counts, so it keeps a little less. The curves read the whole "
            "(synthetic) log: a data-holder diagnostic; choosing d from the curve of a private "
            "log costs privacy, so the releases take d from public information only."
        )
    return {
        "out": str(final),
        "report": str(final / "report.html"),
        "sample": sample,
        "reader": reader.to_dict(),
        "seeded": seeded,
        "parameters": {
            "epsilon": DEMO_EPSILON,
            "selection": selection,
            "d": real["d"],
            "d_c": DEMO_DC,
            "urls": "private (real sample); none (synthetic)",
            "split": list(DEMO_SPLIT),
            "max_single_user_items": target,
            "delta": {k: v["delta"] for k, v in runs.items()},
        },
        "delta_choice": {"target": target, "explanation": explanation},
        "runs": runs,
        "dcurve": curve,
        "note": note,
    }


CURVE_SHORT = {"korolova": "RD"} | {c.FACTS.name: c.FACTS.short_label for c in REGISTRY}


def curve_rows(curve: dict[str, Any]) -> tuple[str, list[int], list[tuple[str, list[str]]]]:
    """The d-curve as a text table: (title, the d's, one row of "% of the query volume" cells
    per strategy). RD = Release-Data, then each strategy's short label (``FACTS.short_label``;
    the ℓ2-weighted ones are one simulated run each, the others expected values)."""
    mechs = [m for m in CURVE_SHORT if any(r["mechanism"] == m for r in curve["table"])]
    ds = sorted({r["d"] for r in curve["table"]})
    title = (
        f"% of the query volume released vs d (thesis Fig. 4.2): {curve['users']:,} "
        f"synthetic users, e^ε = 10, δ = {curve['delta']:.3g}; "
        + ", ".join(f"{CURVE_SHORT[m]} = {m}" for m in mechs)
        + ". A data-holder diagnostic on the synthetic log: releases never choose d from it"
    )
    by = {(r["mechanism"], r["d"]): r for r in curve["table"]}
    rows = [(f"{CURVE_SHORT[m]} %vol",
             [f"{by[(m, d)]['volume_pct']:.1f}" if (m, d) in by else "–" for d in ds])
            for m in mechs]  # fmt: skip
    return title, ds, rows


def summary_rows(result: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """The runs side by side, as text: (label, one cell per run)."""
    runs = list(result["runs"].values())
    keyed = [
        ("users (private)", "users", "{:,}"),
        ("distinct queries in the log (private)", "distinct_queries", "{:,}"),
        ("queries released", "queries_released", "{:,}"),
        ("released query volume (private)", "released_query_volume", "{:,}"),
    ]
    rows = [(label, [f.format(x[k]) for x in runs]) for label, k, f in keyed]
    rows += [
        ("threshold / noise (last round; user units)",
         [f"{x['threshold'][0]:.4g} / {x['threshold'][1]:.3g}" for x in runs]),
        ("ε (exact accounting)", [f"{x['epsilon']:.4f}" for x in runs]),
        ("δ (solved; exact accounting)", [f"{x['delta']:.3g}" for x in runs]),
        ("single-user queries in the log (private)",
         [f"{x['single_user']['single_user_items']:,}" for x in runs]),
        ("… expected published (private)",
         [f"{x['single_user']['expected_single_user_published']:.2g}" for x in runs]),
        ("… actually published (private)", [f"{x['single_user_published']:,}" for x in runs]),
    ]  # fmt: skip
    return rows
