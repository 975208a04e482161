"""The parameters of Korolova's Release-Data (:class:`KorolovaParams`: solved from a budget
or given directly, with their privacy map) and the contribution bounding they define
(:func:`korolova_counts`, Limit-User-Activity, thesis Algorithm 3 step 1).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from searchveil.bounding import BoundingStrategy, Stream, bound_contributions, bound_log
from searchveil.engines.contract import BoundedCounts, Bounding, BoundingPlan, Item
from searchveil.errors import InvalidParameterError
from searchveil.mechanisms.accounting import Accounting, Budget, within_budget
from searchveil.mechanisms.budget import PrivacyCost, Relation
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.mechanisms.threshold import exact_threshold_privacy
from searchveil.model import SearchLog, items
from searchveil.release.counts import count_by
from searchveil.release.korolova.accounting import (
    korolova_paper_privacy,
    korolova_paper_selection,
    solve_threshold,
)
from searchveil.rng import RandomSource
from searchveil.validate import check_int, check_positive, check_probability, parse_choice

__all__ = [
    "KorolovaParams",
    "korolova_counts",
    "resolve_url_selection",
    "default_split",
    "split_parts",
    "ThresholdRule",
    "UrlSelection",
    "UrlsOption",
]


class UrlSelection(StrEnum):
    """Which URLs get click counts: none, a public SERP's, or privately selected ones."""

    NONE = "none"
    SERP = "serp"
    PRIVATE = "private"


class UrlsOption(StrEnum):
    """``--urls``: a :class:`UrlSelection`, or ``auto`` (resolved by
    :func:`resolve_url_selection`)."""

    AUTO = "auto"
    NONE = "none"
    SERP = "serp"
    PRIVATE = "private"


class ThresholdRule(StrEnum):
    """How :meth:`KorolovaParams.from_budget` solves K: ``exact`` (smallest integer K whose
    exact discrete (ε, δ) fits), ``paper`` (⌈K⌉ of Table 4.1) or ``improved`` (⌈K⌉ of §4.8)."""

    EXACT = "exact"
    PAPER = "paper"
    IMPROVED = "improved"


#: ε shares of the steps present, in this order: selection, query counts [, URL selection
#: (private URLs only)] [, click counts]
_SPLIT_PARTS = {"none": 2, "serp": 3, "private": 4}


def split_parts(url_selection: str) -> int:
    """How many ε weights ``from_budget``'s ``split`` takes for ``url_selection``."""
    return _SPLIT_PARTS[parse_choice("url_selection", url_selection, UrlSelection)]


def default_split(url_selection: str) -> tuple[float, ...]:
    """Equal ε weights over the steps present (what the CLI uses without ``--split``)."""
    return tuple([1.0] * split_parts(url_selection))


def resolve_url_selection(urls: str, *, d_c: int | None, serp_given: bool) -> UrlSelection:
    """``urls="auto"`` → ``none`` without ``d_c``, ``serp`` with a SERP, else ``private``; the
    combination of URL selection, ``d_c`` and a SERP is checked (typed errors)."""
    urls = parse_choice("urls", urls, UrlsOption)
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
    return UrlSelection(urls)


def _selection_event(
    step: str, accounting: Accounting, *, d: int, K: float, b: float, distinct: bool
) -> dict[str, Any]:
    """The privacy event of one thresholding step (queries or URLs) under ``accounting``:
    exact for the discrete mechanism, or the paper's continuous-noise bound."""
    if accounting == "exact":
        sel = exact_threshold_privacy(d=d, K=K, b=b, distinct=distinct)
        eps, delta = sel.epsilon, sel.delta
    else:
        ps = korolova_paper_selection(d=d, K=K, b=b, distinct=distinct)
        eps, delta = ps["epsilon"], ps["delta"]
    return {
        "step": step,
        "mechanism": "laplace_threshold",
        "noise": DiscreteLaplace(scale=b).describe(),
        "threshold": K,
        "max_per_user": d,
        "counts": "distinct users" if distinct else "occurrences",
        "epsilon": eps,
        "delta": delta,
    }


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
    url_selection: UrlSelection | str = "none"  # (a member once constructed)
    d_c: int | None = None
    b_c: float | None = None
    url_K: float | None = None
    url_b: float | None = None
    distinct: bool = False
    strategy: BoundingStrategy | str = "first"
    clamp_negative: bool = False
    #: how the parameters were solved (set by :meth:`from_budget`; recorded in the ledger)
    epsilon_split_weights: tuple[float, ...] | None = None
    threshold_rule: ThresholdRule | str | None = None
    #: the (ε, δ) these parameters must meet: set by :meth:`from_budget`, or given with the
    #: direct form to be checked (by :func:`searchveil.release.run.release_file`, before any
    #: noise); not a parameter of the mechanism (not in :meth:`to_dict`)
    budget: Budget | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_int("d", self.d, minimum=1)
        if self.threshold_rule is not None:
            rule = parse_choice("threshold_rule", self.threshold_rule, ThresholdRule)
            object.__setattr__(self, "threshold_rule", rule)
        check_positive("b", self.b)
        check_positive("b_q", self.b_q)
        urls = parse_choice("url_selection", self.url_selection, UrlSelection)
        object.__setattr__(self, "url_selection", urls)
        strategy = parse_choice("strategy", self.strategy, BoundingStrategy)
        object.__setattr__(self, "strategy", strategy)
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
        parse_choice("url_selection", url_selection, UrlSelection)
        rule = parse_choice("threshold_rule", threshold_rule, ThresholdRule)
        parts = split_parts(url_selection)
        if split is None or len(split) != parts:
            raise InvalidParameterError(
                "split", split, f"{parts} positive weights for url_selection={url_selection!r}"
            )
        w = [check_positive("split", float(x)) for x in split]
        shares = [eps * x / sum(w) for x in w]
        n_thr = 2 if url_selection == "private" else 1
        K, b = solve_threshold(rule, epsilon=shares[0], delta=dl / n_thr, d=d, distinct=distinct)
        b_q = d / shares[1]
        kw: dict[str, Any] = {}
        if url_selection != "none":
            d_c = check_int("d_c", d_c, minimum=1)
            kw["d_c"] = d_c
            kw["b_c"] = d_c / shares[-1]
        if url_selection == "private":
            assert d_c is not None
            uK, ub = solve_threshold(rule, epsilon=shares[2], delta=dl / 2, d=d_c, distinct=False)
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
            threshold_rule=rule,
            budget=Budget(epsilon, delta),
            **kw,
        )
        acc = Accounting.EXACT if rule == ThresholdRule.EXACT else Accounting.PAPER
        pr = params.privacy(acc)
        if rule == ThresholdRule.IMPROVED:  # §4.8's δ is the one this rule solves for
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
        accounting = parse_choice("accounting", accounting, Accounting)
        events: list[dict[str, Any]] = []
        q_noise = DiscreteLaplace(scale=self.b_q)
        qc_eps = self.d / (q_noise.effective_scale if accounting == "exact" else self.b_q)
        events.append(
            _selection_event(
                "select_queries", accounting, d=self.d, K=self.K, b=self.b, distinct=self.distinct
            )  # fmt: skip
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
            events.append(
                _selection_event(
                    "select_urls",
                    accounting,
                    d=self.d_c,
                    K=self.url_K,
                    b=self.url_b,
                    distinct=False,
                )  # fmt: skip
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

    def cost(self) -> PrivacyCost:
        """What the release spends (the exact accounting): user-level, one part per step."""
        exact = self.privacy("exact")
        return PrivacyCost.from_events(
            Relation.USER, exact["events"], epsilon=exact["epsilon"], delta=exact["delta"]
        )

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "budget"}

    def bounding_plan(self) -> BoundingPlan:
        """What an engine keeps for Release-Data: each user's first d query events (first d
        distinct queries with ``distinct``) and, with click counts, first d_c click rows: the
        bounding kernel's rules (``kernel_spec()``), here and on every engine. Only
        ``strategy="first"`` runs on an engine."""
        if self.strategy != "first":
            raise InvalidParameterError(
                "bounding", self.strategy, "first with --engine polars|spark (random: memory)"
            )
        clicks = self.d_c if self.url_selection != "none" else None
        return BoundingPlan(Bounding.EVENTS, Item.QUERIES, self.d, self.distinct, clicks)


def korolova_counts(log: SearchLog, params: KorolovaParams, *, rng: RandomSource) -> BoundedCounts:
    """Limit-User-Activity (step 1) on an in-memory log: the bounded query counts and, with
    URLs, the bounded (query, url) click counts. ``strategy="first"`` runs the bounding kernel
    (:func:`~searchveil.bounding.bound_log`, the engines' own); ``"random"`` draws from
    ``rng``."""
    clicks = params.url_selection != "none"
    if params.strategy == "first":
        kept, fig = bound_log(log.df, params.bounding_plan().kernel_spec())
        bounded = kept[Stream.EVENTS]
        figures = {"users": fig["users"], "query_events": fig["events"],
                   "query_events_after_bounding": bounded.height}  # fmt: skip
        bounded_c = kept.get(Stream.CLICKS)
        n_clicks = fig["clicks"]
    else:
        ev = items(log, "queries").rename({"item": "query"})
        bounded = bound_contributions(
            ev, max_per_user=params.d, strategy=params.strategy, rng=rng,
            distinct=params.distinct, item_col="query",
        )  # fmt: skip
        figures = {"users": log.n_users, "query_events": ev.height,
                   "query_events_after_bounding": bounded.height}  # fmt: skip
        bounded_c = None
        if clicks:
            assert params.d_c is not None
            cl = items(log, "clicks")
            bounded_c = bound_contributions(cl, max_per_user=params.d_c, strategy=params.strategy,
                                            rng=rng)  # fmt: skip
            n_clicks = cl.height
    counts = {"queries": count_by(bounded, ["query"], distinct_users=params.distinct)}
    if clicks:
        assert bounded_c is not None
        counts["clicks"] = count_by(bounded_c, ["query", "url"])
        figures |= {"clicks": n_clicks, "clicks_after_bounding": bounded_c.height}
    return BoundedCounts(counts=counts, figures=figures, input=log.ledger_input())
