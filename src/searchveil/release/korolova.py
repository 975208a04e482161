"""Korolova's Release-Data: the private query-click graph (Korolova, PhD thesis, Stanford 2012,
ch.4: Algorithm 3, Theorem 3, §4.5, §4.8).

Steps (Algorithm 3), each a fresh, independent noise draw per query / (query, url):

1. Limit-User-Activity — keep each user's first ``d`` query events and first ``d_c`` clicks
   (or a uniformly random ``d`` / ``d_c`` with ``strategy="random"``), via
   :func:`searchveil.bounding.bound_contributions`. With ``distinct=True`` the first ``d``
   *distinct* queries are kept and a query's count is its number of distinct users.
2. Select-Queries — ``Q = {q : M(q, D) + X > K}``, X discrete Laplace(b).
3. Get-Query-Counts — ``M(q, D) + X_q``, X_q discrete Laplace(b_q), fresh.
4. Get-Click-Counts — for the URLs of each released query, the bounded click count + discrete
   Laplace(b_c). Which URLs:

   * ``url_selection="serp"``: a public SERP file (query → ranked URLs, what the engine shows
     anyone who types the query). Every listed URL of a released query gets a noisy count,
     including URLs nobody clicked (true count 0) — publishing only clicked ones would leak.
   * ``url_selection="private"``: no public SERP; (query, url) pairs of released queries are
     selected by the same thresholding on their bounded click counts (each user ≤ d_c clicks;
     threshold ``url_K`` ≥ d_c, noise ``url_b``), spending their own (ε, δ).
   * ``url_selection="none"``: queries only.

Negative noisy counts can be clamped to 0 (post-processing, §4.5; recorded in the ledger).

Decisions (see ``docs/privacy/korolova.md``):

* Noise is the *discrete* Laplace; thresholds are applied to integer noisy counts. The
  reported (ε, δ) is the ``exact`` accounting of :mod:`searchveil.params` for the mechanism
  run (effective noise scales, integer counts); Theorem 3's values are recorded beside it as
  ``paper_accounting``. Parameters solved from a budget use an integer threshold, for which
  the exact values never exceed Theorem 3's.
* ``K >= d`` is enforced (``K >= 1`` for distinct-user counts); likewise ``url_K >= d_c``.
* Neighbouring logs differ by adding or removing one user's whole history.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import polars as pl

from searchveil.bounding import bound_contributions
from searchveil.engines.contract import NO_RNG, Bounding, BoundingPlan, Item
from searchveil.errors import InputFormatError, InvalidParameterError
from searchveil.io.ledger import build_ledger, public_file_record
from searchveil.mechanisms.accounting import Budget, as_budget, check_budget, within_budget
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.model import SearchLog, items, normalize_query
from searchveil.params import (
    exact_threshold_privacy,
    keep_probability,
    korolova_paper_privacy,
    korolova_paper_selection,
    korolova_solve_exact,
    korolova_solve_improved,
    korolova_solve_paper,
    single_user_exposure,
)
from searchveil.release.counts import BoundedCounts, count_by
from searchveil.release.histogram import (
    USER_NEIGHBOURS,
    HistogramRelease,
    check_declared_users,
    delta_users_check,
    noisy_counts,
    noisy_threshold,
    users_bound_source,
    write_release,
)
from searchveil.rng import RandomSource
from searchveil.validate import check_choice, check_int, check_positive, check_probability

__all__ = [
    "KorolovaParams",
    "KorolovaRelease",
    "release_korolova",
    "release_korolova_counts",
    "korolova_counts",
    "single_user_counts",
    "exposure_from_counts",
    "read_serp",
    "load_serp",
    "Serp",
    "resolve_url_selection",
    "default_split",
    "split_parts",
    "write_release",
    "URL_SELECTIONS",
    "THRESHOLD_RULES",
]

URL_SELECTIONS = ("none", "serp", "private")
THRESHOLD_RULES = ("exact", "paper", "improved")
MECHANISM = "korolova-release-data"

KorolovaRelease = HistogramRelease

#: ε shares of the steps present, in this order: selection, query counts [, URL selection
#: (private URLs only)] [, click counts]
_SPLIT_PARTS = {"none": 2, "serp": 3, "private": 4}


def split_parts(url_selection: str) -> int:
    """How many ε weights ``from_budget``'s ``split`` takes for ``url_selection``."""
    check_choice("url_selection", url_selection, URL_SELECTIONS)
    return _SPLIT_PARTS[url_selection]


def default_split(url_selection: str) -> tuple[float, ...]:
    """Equal ε weights over the steps present (what the CLI uses without ``--split``)."""
    return tuple([1.0] * split_parts(url_selection))


def resolve_url_selection(urls: str, *, d_c: int | None, serp_given: bool) -> str:
    """``urls="auto"`` → ``none`` without ``d_c``, ``serp`` with a SERP, else ``private``; the
    combination of URL selection, ``d_c`` and a SERP is checked (typed errors)."""
    check_choice("urls", urls, ("auto", *URL_SELECTIONS))
    if urls == "auto":
        urls = "none" if d_c is None else ("serp" if serp_given else "private")
    if urls != "none" and d_c is None:
        raise InvalidParameterError("max-clicks", None, f"an integer d_c >= 1 with --urls {urls}")
    if urls == "serp" and not serp_given:
        raise InvalidParameterError("serp", None, "a SERP file with --urls serp")
    if urls != "serp" and serp_given:
        raise InvalidParameterError("serp", "given", "only with --urls serp")
    if urls == "none" and d_c is not None:
        raise InvalidParameterError("max-clicks", d_c, "unset with --urls none")
    return urls


def _solve_threshold(
    rule: str, *, epsilon: float, delta: float, d: int, distinct: bool
) -> tuple[int, float]:
    """An integer threshold K and noise b for one thresholding step within (ε, δ)."""
    if rule == "exact":
        s = korolova_solve_exact(epsilon=epsilon, delta=delta, d=d, distinct=distinct)
        return int(s["K"]), float(s["b"])
    b = d / epsilon
    if distinct:  # δ = (d/2)e^{(1-K)/b} (union bound with counts <= 1)
        k = 1.0 - b * math.log(2.0 * delta / d)
    elif rule == "paper":
        k = korolova_solve_paper(epsilon=epsilon, delta=delta, d=d)["K"]
    else:
        k = korolova_solve_improved(epsilon=epsilon, delta=delta, d=d)["K"]
    return max(math.ceil(k - 1e-9), 1 if distinct else d), b


@dataclass(frozen=True)
class KorolovaParams:
    """Parameters of Release-Data plus its privacy map (:meth:`privacy`).

    ``K, b``: Select-Queries threshold and noise; ``b_q``: query-count noise; ``d_c, b_c``:
    clicks kept per user and click-count noise (needed unless ``url_selection="none"``);
    ``url_K, url_b``: private URL selection (``url_selection="private"`` only).
    """

    d: int
    K: float
    b: float
    b_q: float
    url_selection: str = "none"
    d_c: int | None = None
    b_c: float | None = None
    url_K: float | None = None
    url_b: float | None = None
    distinct: bool = False
    strategy: str = "first"
    clamp_negative: bool = False
    #: how the parameters were solved (set by :meth:`from_budget`; recorded in the ledger)
    epsilon_split_weights: tuple[float, ...] | None = None
    threshold_rule: str | None = None
    #: the (ε, δ) these parameters must meet: set by :meth:`from_budget`, or given with the
    #: direct form to be checked (by :func:`searchveil.release.run.release_file`, before any
    #: noise); not a parameter of the mechanism (not in :meth:`to_dict`)
    budget: Budget | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_int("d", self.d, minimum=1)
        if self.threshold_rule is not None:
            check_choice("threshold_rule", self.threshold_rule, THRESHOLD_RULES)
        check_positive("b", self.b)
        check_positive("b_q", self.b_q)
        check_choice("url_selection", self.url_selection, URL_SELECTIONS)
        check_choice("strategy", self.strategy, ("first", "random"))
        need = 1 if self.distinct else self.d
        if not isinstance(self.K, int | float) or isinstance(self.K, bool) or self.K < need:
            raise InvalidParameterError(
                "K",
                self.K,
                f"a number >= {need} (Theorem 3 needs K >= "
                + ("1 for distinct-user counts)" if self.distinct else "d)"),
            )
        if self.url_selection == "none":
            for name in ("d_c", "b_c", "url_K", "url_b"):
                if getattr(self, name) is not None:
                    raise InvalidParameterError(
                        name, getattr(self, name), "unset when url_selection='none'"
                    )
            return
        check_int("d_c", self.d_c, minimum=1)
        check_positive("b_c", self.b_c)
        if self.url_selection == "private":
            check_positive("url_b", self.url_b)
            assert self.d_c is not None
            if (
                not isinstance(self.url_K, int | float)
                or isinstance(self.url_K, bool)
                or self.url_K < self.d_c
            ):
                raise InvalidParameterError("url_K", self.url_K, f"a number >= d_c = {self.d_c}")
        else:
            for name in ("url_K", "url_b"):
                if getattr(self, name) is not None:
                    raise InvalidParameterError(
                        name, getattr(self, name), "unset unless url_selection='private'"
                    )

    # -- construction from a budget --------------------------------------------------------
    @classmethod
    def from_budget(
        cls,
        *,
        epsilon: float,
        delta: float,
        d: int,
        url_selection: str = "none",
        d_c: int | None = None,
        split: tuple[float, ...] | None = None,
        threshold_rule: str = "exact",
        distinct: bool = False,
        strategy: str = "first",
        clamp_negative: bool = False,
    ) -> KorolovaParams:
        """Solve K, b, b_q (, b_c, url_K, url_b) from a total (ε, δ).

        ``split``: relative weights of ε for (selection, query counts) with
        ``url_selection="none"``, (selection, query counts, click counts) with ``"serp"``, and
        (selection, query counts, URL selection, click counts) with ``"private"`` — required,
        there is no default split here (the CLI documents and prints its default). With private
        URL selection δ is split equally between the two thresholding steps.
        ``threshold_rule``: ``exact`` (smallest integer K whose exact discrete (ε, δ) fits),
        ``paper`` (⌈K⌉ of Lemma 1 / Table 4.1) or ``improved`` (⌈K⌉ of §4.8).
        """
        eps = check_positive("epsilon", epsilon)
        dl = check_probability("delta", delta)
        d = check_int("d", d, minimum=1)
        check_choice("url_selection", url_selection, URL_SELECTIONS)
        check_choice("threshold_rule", threshold_rule, THRESHOLD_RULES)
        parts = split_parts(url_selection)
        if split is None or len(split) != parts:
            raise InvalidParameterError(
                "split", split, f"{parts} positive weights for url_selection={url_selection!r}"
            )
        w = [check_positive("split", float(x)) for x in split]
        shares = [eps * x / sum(w) for x in w]
        n_thr = 2 if url_selection == "private" else 1
        K, b = _solve_threshold(
            threshold_rule, epsilon=shares[0], delta=dl / n_thr, d=d, distinct=distinct
        )
        b_q = d / shares[1]
        kw: dict[str, Any] = {}
        if url_selection != "none":
            d_c = check_int("d_c", d_c, minimum=1)
            kw["d_c"] = d_c
            kw["b_c"] = d_c / shares[-1]
        if url_selection == "private":
            assert d_c is not None
            uK, ub = _solve_threshold(
                threshold_rule, epsilon=shares[2], delta=dl / 2, d=d_c, distinct=False
            )
            kw["url_K"], kw["url_b"] = uK, ub
        params = cls(
            d=d,
            K=K,
            b=b,
            b_q=b_q,
            url_selection=url_selection,
            distinct=distinct,
            strategy=strategy,
            clamp_negative=clamp_negative,
            epsilon_split_weights=tuple(w),
            threshold_rule=threshold_rule,
            budget=Budget(epsilon, delta),
            **kw,
        )
        acc = "exact" if threshold_rule == "exact" else "paper"
        pr = params.privacy(acc)
        if threshold_rule == "improved":  # §4.8's δ is the one this rule solves for
            pr["delta"] = pr["delta_improved_4_8"]
        if not (within_budget(pr["epsilon"], eps) and within_budget(pr["delta"], dl)):
            raise InvalidParameterError(
                "epsilon",
                epsilon,
                f"a budget the {threshold_rule!r} rule can meet (it gives ε={pr['epsilon']:.6g}, "
                f"δ={pr['delta']:.3g}); use threshold_rule='exact' or larger ε",
            )
        return params

    # -- privacy map ------------------------------------------------------------------------
    def privacy(self, accounting: str = "exact") -> dict[str, Any]:
        """Total (ε, δ) and one event per privacy-spending step.

        ``exact``: tight values for the discrete mechanism run (effective noise scales);
        ``paper``: Theorem 3 (and §4.8's δ) for continuous Laplace noise.
        """
        check_choice("accounting", accounting, ("exact", "paper"))
        events: list[dict[str, Any]] = []
        q_noise = DiscreteLaplace(scale=self.b_q)
        if accounting == "exact":
            sel = exact_threshold_privacy(d=self.d, K=self.K, b=self.b, distinct=self.distinct)
            sel_eps, sel_delta = sel.epsilon, sel.delta
            qc_eps = self.d / q_noise.effective_scale
        else:
            ps = korolova_paper_selection(d=self.d, K=self.K, b=self.b, distinct=self.distinct)
            sel_eps, sel_delta = ps["epsilon"], ps["delta"]
            qc_eps = self.d / self.b_q
        events.append(
            {
                "step": "select_queries",
                "mechanism": "laplace_threshold",
                "noise": DiscreteLaplace(scale=self.b).describe(),
                "threshold": self.K,
                "max_per_user": self.d,
                "counts": "distinct users" if self.distinct else "occurrences",
                "epsilon": sel_eps,
                "delta": sel_delta,
            }
        )
        events.append(
            {
                "step": "query_counts",
                "mechanism": "laplace",
                "noise": q_noise.describe(),
                "l1_sensitivity": self.d,
                "epsilon": qc_eps,
                "delta": 0.0,
            }
        )
        if self.url_selection == "private":
            assert self.d_c is not None and self.url_K is not None and self.url_b is not None
            if accounting == "exact":
                us = exact_threshold_privacy(d=self.d_c, K=self.url_K, b=self.url_b)
                us_eps, us_delta = us.epsilon, us.delta
            else:
                pu = korolova_paper_selection(d=self.d_c, K=self.url_K, b=self.url_b)
                us_eps, us_delta = pu["epsilon"], pu["delta"]
            events.append(
                {
                    "step": "select_urls",
                    "mechanism": "laplace_threshold",
                    "noise": DiscreteLaplace(scale=self.url_b).describe(),
                    "threshold": self.url_K,
                    "max_per_user": self.d_c,
                    "counts": "occurrences",
                    "epsilon": us_eps,
                    "delta": us_delta,
                }
            )
        if self.url_selection != "none":
            assert self.d_c is not None and self.b_c is not None
            c_noise = DiscreteLaplace(scale=self.b_c)
            scale = c_noise.effective_scale if accounting == "exact" else self.b_c
            events.append(
                {
                    "step": "click_counts",
                    "mechanism": "laplace",
                    "noise": c_noise.describe(),
                    "l1_sensitivity": self.d_c,
                    "urls": "public SERP" if self.url_selection == "serp" else "selected privately",
                    "epsilon": self.d_c / scale,
                    "delta": 0.0,
                }
            )
        out: dict[str, Any] = {
            "accounting": accounting,
            "epsilon": sum(e["epsilon"] for e in events),
            "delta": sum(e["delta"] for e in events),
            "composition": "basic (ε and δ add; Lemma 4 of the thesis)",
            "events": events,
        }
        if accounting == "paper":
            full = korolova_paper_privacy(
                d=self.d, K=self.K, b=self.b, b_q=self.b_q, distinct=self.distinct
            )
            url_improved = 0.0
            if self.url_selection == "private":
                assert self.d_c is not None and self.url_K is not None and self.url_b is not None
                url_improved = korolova_paper_selection(d=self.d_c, K=self.url_K, b=self.url_b)[
                    "delta_improved"
                ]
            out["delta_improved_4_8"] = full["delta_improved"] + url_improved
        return out

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "budget"}

    def bounding_plan(self) -> BoundingPlan:
        """What an engine keeps for Release-Data: each user's first d query events (first d
        distinct queries with ``distinct``) and, with click counts, first d_c click rows;
        counted by :func:`korolova_counts` on the row plan. Only ``strategy="first"`` runs on
        an engine."""
        if self.strategy != "first":
            raise InvalidParameterError(
                "bounding", self.strategy, "first with --engine polars|spark (random: memory)"
            )
        clicks = self.d_c if self.url_selection != "none" else None
        count = partial(korolova_counts, params=self, rng=NO_RNG)
        return BoundingPlan(
            Bounding.EVENTS, Item.QUERIES, self.d, self.distinct, clicks, count_rows=count
        )


def read_serp(
    path: str | Path, *, normalize: bool = True, depth: int | None = None
) -> pl.DataFrame:
    """A public SERP file: tab-separated ``query<TAB>rank<TAB>url`` lines (rank: integer >= 1,
    1 = top); an optional first line ``query<TAB>rank<TAB>url`` is a header. ``depth`` keeps the
    top ``depth`` ranks of each query. Returns distinct ``query, rank, url``."""
    p = Path(path)
    if not p.is_file():
        raise InputFormatError(str(p), "SERP file not found")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputFormatError(str(p), f"not UTF-8: {exc}") from None
    rows: list[tuple[str, int, str]] = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if i == 1 and [x.strip().lower() for x in parts] == ["query", "rank", "url"]:
            continue
        if len(parts) != 3:
            raise InputFormatError(str(p), "expected 3 tab-separated fields query, rank, url", i)
        q, r, u = parts
        try:
            rank = int(r)
        except ValueError:
            raise InputFormatError(str(p), f"rank {r!r} is not an integer", i) from None
        if rank < 1 or not u.strip() or not q.strip():
            raise InputFormatError(str(p), "rank must be >= 1 and query/url non-empty", i)
        rows.append((q, rank, u.strip()))
    df = pl.DataFrame(
        rows, schema={"query": pl.String, "rank": pl.Int64, "url": pl.String}, orient="row"
    )
    if normalize:
        df = df.with_columns(normalize_query(pl.col("query")))
    if depth is not None:
        df = df.filter(pl.col("rank") <= check_int("serp_depth", depth, minimum=1))
    return df.unique(subset=["query", "url"], keep="first").sort(["query", "rank", "url"])


@dataclass(frozen=True)
class Serp:
    """A public SERP table (``query, rank, url``) with the public ledger's record of its file
    (:func:`load_serp`: role, file name, SHA-256, rows) and the depth used."""

    table: pl.DataFrame
    source: dict[str, Any] = field(default_factory=dict)
    depth: int | None = None


def load_serp(path: str | Path, *, normalize: bool = True, depth: int | None = None) -> Serp:
    """:func:`read_serp` plus the public ledger's record of the file: its name (not its path:
    where the data holder keeps it is not published), the SHA-256 of its bytes, and its rows
    used (after ``depth``)."""
    table = read_serp(path, normalize=normalize, depth=depth)
    return Serp(
        table=table,
        source=public_file_record(path, role="serp", rows=table.height),
        depth=depth,
    )


def _serp_table(serp: Serp | pl.DataFrame | None) -> pl.DataFrame | None:
    return serp.table if isinstance(serp, Serp) else serp


def _serp_record(serp: Serp | pl.DataFrame | None) -> dict[str, Any] | None:
    """The public ledger's record of the SERP: the file's for a :class:`Serp`; for a bare
    table, the SHA-256 of its rows (``query<TAB>rank<TAB>url`` lines in the table's order)."""
    if serp is None:
        return None
    if isinstance(serp, Serp):
        return dict(serp.source)
    text = serp.select("query", "rank", "url").write_csv(separator="\t", include_header=False)
    return {
        "role": "serp",
        "source": "a table given in memory; sha256 of its query<TAB>rank<TAB>url rows",
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "rows": serp.height,
    }


def single_user_counts(
    events: pl.DataFrame, counts: pl.DataFrame, key: str
) -> tuple[pl.DataFrame, int]:
    """The rows of ``counts`` (bounded counts keyed by ``key``) whose item is held by exactly one
    user of ``events`` (columns ``user, item``), and the number of such items in ``events``:
    what the single-user exposure needs (issue 12, ``docs/privacy/delta.md``). Private figures
    for the data holder, never published. Kept out of :class:`BoundedCounts` (which every engine
    produces identically) and passed to the release as ``single_user``."""
    single = (
        events.group_by("item")
        .agg(pl.col("user").n_unique().alias("holders"))
        .filter(pl.col("holders") == 1)
        .select(pl.col("item").alias(key))
    )
    return counts.join(single, on=key, how="semi"), single.height


def exposure_from_counts(
    bounded: BoundedCounts,
    name: str,
    *,
    key: str,
    keep: Any,
    max_single_count: int,
    delta: float,
    users: int,
    single_user: tuple[pl.DataFrame, int] | None = None,
) -> dict[str, Any]:
    """The single-user exposure of a threshold release: Σ over items held by one user of their
    exact release probability ``keep(count)``. Exact when ``single_user`` (from
    :func:`single_user_counts`; the in-memory path) is given; otherwise (counts from an engine,
    which does not count holders) an upper bound: the sum over every item whose bounded count is
    ≤ ``max_single_count`` (a single-user item cannot have more), marked ``"exact": False``."""
    if single_user is not None:
        c = single_user[0].get_column("count").to_numpy()
        n = int(single_user[1])
        exact = True
    else:
        allc = bounded.table(name, [key], ordered=False).get_column("count").to_numpy()
        c = allc[allc <= max_single_count]
        n = int(c.size)
        exact = False
    out = single_user_exposure(
        keep(c) if c.size else [], delta=delta, users=users, single_user_items=n
    )
    out["exact"] = exact
    if not exact:
        out["note"] += (
            "; upper bound: the engine did not count holders, so every item with a bounded "
            f"count ≤ {max_single_count} is counted as single-user (single_user_items too)"
        )
    return out


def korolova_counts(log: SearchLog, params: KorolovaParams, *, rng: RandomSource) -> BoundedCounts:
    """Limit-User-Activity (step 1) on an in-memory log: the bounded query counts and, with
    URLs, the bounded (query, url) click counts (``rng`` only for ``strategy="random"``)."""
    ev = items(log, "queries")
    bounded = bound_contributions(
        ev, max_per_user=params.d, strategy=params.strategy, rng=rng, distinct=params.distinct
    )
    counts = {
        "queries": count_by(
            bounded.rename({"item": "query"}), ["query"], distinct_users=params.distinct
        )
    }
    figures = {
        "users": log.n_users,
        "query_events": ev.height,
        "query_events_after_bounding": bounded.height,
    }
    if params.url_selection != "none":
        assert params.d_c is not None
        cl = items(log, "clicks")
        bounded_c = bound_contributions(
            cl, max_per_user=params.d_c, strategy=params.strategy, rng=rng
        )
        counts["clicks"] = count_by(bounded_c, ["query", "url"])
        figures |= {"clicks": cl.height, "clicks_after_bounding": bounded_c.height}
    return BoundedCounts(counts=counts, figures=figures, input=log.ledger_input())


def release_korolova(
    log: SearchLog,
    params: KorolovaParams,
    *,
    rng: RandomSource,
    serp: Serp | pl.DataFrame | None = None,
    budget: Budget | tuple[float, float] | None = None,
    max_users: int | None = None,
) -> KorolovaRelease:
    """Run Release-Data on ``log``. Returns tables ``queries`` (query, noisy_count) and, with
    URLs, ``clicks`` (query, url, noisy_count); the report; the ledger.

    ``serp``: the public SERP when ``url_selection="serp"`` — from :func:`load_serp` (the
    ledger records the file's name and SHA-256) or a table from :func:`read_serp` (the ledger
    records the SHA-256 of its rows).
    ``budget``: optional (ε, δ) the release must not exceed (checked before any noise is drawn,
    :func:`searchveil.mechanisms.accounting.check_budget`).
    ``max_users``: a public upper bound U on the number of users the data holder *declares*
    (recorded as ``declared.max_users``; the ledger's δ < 1/U check uses it, never the exact
    count); an input with more users is refused.
    """
    _check_call(params, serp, budget)
    check_declared_users(max_users, log.n_users)
    bounded = korolova_counts(log, params, rng=rng)
    single = single_user_counts(
        items(log, "queries"), bounded.table("queries", ["query"], ordered=False), "query"
    )
    return release_korolova_counts(
        bounded, params, rng=rng, serp=serp, budget=budget, single_user=single,
        max_users=max_users,
    )  # fmt: skip


def _check_call(
    params: object, serp: Serp | pl.DataFrame | None, budget: Budget | tuple[float, float] | None
) -> dict[str, Any]:
    if not isinstance(params, KorolovaParams):
        raise InvalidParameterError("params", params, "a KorolovaParams")
    if (serp is None) == (params.url_selection == "serp"):
        raise InvalidParameterError(
            "serp",
            "given" if serp is not None else None,
            "a SERP table exactly when url_selection='serp'",
        )
    exact = params.privacy("exact")
    check_budget(exact, budget)
    return exact


def release_korolova_counts(
    bounded: BoundedCounts,
    params: KorolovaParams,
    *,
    rng: RandomSource,
    serp: Serp | pl.DataFrame | None = None,
    budget: Budget | tuple[float, float] | None = None,
    single_user: tuple[pl.DataFrame, int] | None = None,
    max_users: int | None = None,
) -> KorolovaRelease:
    """Steps 2–4 of Release-Data on counts already bounded by step 1 (from
    :func:`korolova_counts` or an engine): the one definition of the noise, thresholds,
    accounting and ledger. ``single_user``: :func:`single_user_counts` of the log, for the exact
    single-user exposure in the report (without it, an upper bound). ``max_users``: the
    declared public bound U (see :func:`release_korolova`)."""
    exact = _check_call(params, serp, budget)
    check_declared_users(max_users, bounded.users)
    budget = as_budget(budget)
    serp_table = _serp_table(serp)
    paper = params.privacy("paper")
    counts = bounded.table("queries", ["query"], ordered=getattr(rng, "seeded", True))
    # 2. Select-Queries
    selected = noisy_threshold(counts, threshold=params.K, scale=params.b, rng=rng)
    # 3. Get-Query-Counts (fresh noise)
    qn = noisy_counts(selected.get_column("count"), scale=params.b_q, rng=rng)
    queries = selected.with_columns(noisy_count=pl.Series(qn, dtype=pl.Int64))
    if params.clamp_negative:
        queries = queries.with_columns(pl.col("noisy_count").clip(lower_bound=0))
    fig = bounded.figures
    report: dict[str, Any] = {
        "mechanism": MECHANISM,
        "users": bounded.users,
        "query_events": fig["query_events"],
        "query_events_after_bounding": fig["query_events_after_bounding"],
        "distinct_queries": counts.height,
        "queries_released": queries.height,
        "queries_dropped": counts.height - queries.height,
        "released_query_volume": int(queries.get_column("count").sum() or 0),
        "bounded_query_volume": int(counts.get_column("count").sum() or 0),
    }

    # 4. URLs and click counts
    clicks_out: pl.DataFrame | None = None
    if params.url_selection != "none":
        assert params.d_c is not None and params.b_c is not None
        pair_counts = bounded.table(
            "clicks", ["query", "url"], ordered=getattr(rng, "seeded", True)
        )
        released = queries.select("query")
        pair_counts = pair_counts.join(released, on="query", how="semi")
        if params.url_selection == "serp":
            assert serp_table is not None
            cand = serp_table.join(released, on="query", how="semi").select("query", "url")
            cand = (
                cand.join(pair_counts, on=["query", "url"], how="left")
                .with_columns(pl.col("count").fill_null(0))
                .sort(["query", "url"])
            )
        else:
            assert params.url_K is not None and params.url_b is not None
            cand = noisy_threshold(pair_counts, threshold=params.url_K, scale=params.url_b, rng=rng)
        cn = noisy_counts(cand.get_column("count"), scale=params.b_c, rng=rng)
        clicks_out = cand.with_columns(noisy_count=pl.Series(cn, dtype=pl.Int64))
        if params.clamp_negative:
            clicks_out = clicks_out.with_columns(pl.col("noisy_count").clip(lower_bound=0))
        report.update(
            {
                "clicks": fig["clicks"],
                "clicks_after_bounding": fig["clicks_after_bounding"],
                "candidate_pairs": pair_counts.height
                if params.url_selection == "private"
                else cand.height,
                "pairs_released": clicks_out.height,
            }
        )
    report["parameters"] = params.to_dict()
    report["epsilon"] = exact["epsilon"]
    report["delta"] = exact["delta"]
    b_eff = DiscreteLaplace(scale=params.b).effective_scale
    report["single_user"] = exposure_from_counts(
        bounded, "queries", key="query", delta=exact["delta"],
        users=max_users if max_users is not None else max(1, bounded.users),
        keep=lambda c: keep_probability(c, threshold=params.K, scale=b_eff, noise="discrete"),
        max_single_count=1 if params.distinct else params.d, single_user=single_user,
    )  # fmt: skip
    report["single_user"]["delta_check"]["users_bound_source"] = users_bound_source(max_users)
    report["paper_epsilon"] = paper["epsilon"]
    report["paper_delta"] = paper["delta"]

    tables = {
        "queries": queries.select("query", "noisy_count").sort(
            ["noisy_count", "query"], descending=[True, False]
        )
    }
    if clicks_out is not None:
        tables["clicks"] = clicks_out.select("query", "url", "noisy_count").sort(
            ["query", "noisy_count", "url"], descending=[False, True, False]
        )
    parameters = params.to_dict() | {
        "noise_effective_scales": {
            "b": DiscreteLaplace(scale=params.b).effective_scale,
            "b_q": DiscreteLaplace(scale=params.b_q).effective_scale,
            **(
                {"b_c": DiscreteLaplace(scale=params.b_c).effective_scale}
                if params.b_c is not None
                else {}
            ),
            **(
                {"url_b": DiscreteLaplace(scale=params.url_b).effective_scale}
                if params.url_b is not None
                else {}
            ),
        },
        "threshold_semantics": "released iff count + noise > K (integer noisy counts)",
        "budget": None if budget is None else budget.to_dict(),
        "negative_counts": "clamped to 0 (post-processing)"
        if params.clamp_negative
        else "published as drawn",
    }
    if params.url_selection == "serp":
        parameters["serp_depth"] = serp.depth if isinstance(serp, Serp) else None
    serp_rec = _serp_record(serp)
    ledger = build_ledger(
        mechanism=MECHANISM,
        notion="(epsilon, delta)-differential privacy, add/remove one user's history",
        neighbouring=USER_NEIGHBOURS,
        epsilon=exact["epsilon"],
        delta=exact["delta"],
        parameters=parameters,
        public_inputs=[serp_rec] if serp_rec is not None else [],
        declared={"max_users": max_users} if max_users is not None else {},
        rng=rng,
        events=exact["events"],
        extra={
            "accounting": "exact: tight (ε, δ) for discrete Laplace noise as run "
            "(docs/privacy/korolova.md); Theorem 3's values under paper_accounting",
            "paper_accounting": {k: v for k, v in paper.items() if k != "events"},
            "reference": "Korolova, PhD thesis 2012, ch.4, Algorithm 3, Theorem 3, §4.8",
            "guarantee": {"delta_vs_users": delta_users_check(exact["delta"], max_users)},
        },
    )
    return HistogramRelease(
        tables=tables, report=report, ledger=ledger, inputs=[bounded.input],
        figures={"plan": bounded.plan},
    )  # fmt: skip
