"""Query substitution (Götz et al. TKDE 2012 §7.3, after Jones, Rey, Madani, Greiner,
"Generating query substitutions", WWW 2006).

The algorithm learns how users rephrase queries from query pairs (q, q') — consecutive queries
of one user in one session — and is run once on the original log (the ground truth) and once on
the release; the top-j substitutions of each query are compared.

1. **Phrases by mutual information** (Jones §3.2): two adjacent words are joined into one phrase
   when their pointwise mutual information, from the word and adjacent-word-pair frequencies of
   the query histogram, is at least ``pmi_threshold`` (natural log) and the word pair occurs at
   least ``min_bigram`` times; segmentation is greedy left to right, so phrases can be longer
   than two words.
2. **Candidates from query-pair statistics** (Jones §3.3–3.4): whole-query substitutions (q, q')
   and phrase substitutions (p, p') — taken from query pairs whose segmentations have the same
   number of phrases and differ in exactly one position — are each scored by Dunning's
   log-likelihood ratio (G²) of the pair against independence; only positively associated pairs
   (observed count above expectation) are kept. A query's candidates are its whole-query
   substitutions plus the query with one phrase replaced by a phrase substitution; a candidate
   generated twice keeps its best score; ranking is by score, ties by the string.

Jones et al. rank the candidates with a learned model on hand-labelled data that we do not
have; the LLR score is their first-stage score and is the documented substitute here.

**Metrics** for one query q, ground truth T = top-j from the original, R = top-j from the release
(Götz §7.3): precision |T∩R|/|R|, recall |T∩R|/|T|; MAP and NDCG as follows.

* The MAP formula printed in Götz §7.3 (Σ_i (i+1)/(rank of q_i in R + 1), rank 0 when absent) is
  not a bounded precision measure: a missing item contributes (i+1)/1, more than a found one.
  We use standard average precision: AP = (1/min(j, |T|)) Σ_{k: R_k ∈ T} |T ∩ R[:k+1]| / (k+1);
  MAP is its mean over queries.
* NDCG (the paper defers to Chakrabarti et al.): graded relevance rel(x) = j − (rank of x in T)
  for x ∈ T, else 0; DCG(R) = Σ_k rel(R_k)/log2(k+2), normalised by DCG(T).

Averages (Götz §7.3): *coverage* = share of the evaluated queries with ground-truth
substitutions for which the release yields at least one substitution; precision, MAP and NDCG
are averaged over the evaluated queries for which the release yields substitutions; recall over
those for which both yield substitutions (recall is undefined for an empty ground truth).
Evaluated queries: the ``n_queries`` most frequent queries of the original log (Götz used the
100,000 most frequent of a far larger log).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import polars as pl

from searchveil.model import PAIR_SEP
from searchveil.validate import check_int, check_nonnegative

__all__ = [
    "COOCCURRENCE_MAX_QUERIES",
    "user_query_pairs",
    "SubstitutionModel",
    "fit_substitutions",
    "llr",
    "precision_recall",
    "average_precision",
    "ndcg",
    "evaluate_substitution",
]


#: distinct queries per user whose ordered pairs :func:`user_query_pairs` forms
COOCCURRENCE_MAX_QUERIES = 8


def user_query_pairs(
    df: pl.DataFrame, *, user: str = "user", query: str = "query",
    max_queries: int = COOCCURRENCE_MAX_QUERIES,
) -> pl.DataFrame:  # fmt: skip
    """Query pairs of a log without session order (a same-schema release: AnonID, Query,
    ClickURL, Count): every ordered pair of two distinct queries of one user, among the user's
    first ``max_queries`` distinct queries in string order, as an ``item, count`` histogram
    (``item`` = q + TAB + q'), keeping pairs seen for at least two users (a pair one user forms
    says nothing about rephrasing, and the ones kept bound the cost on large logs). Applied to
    the original log and to the release alike, so the substitutions learned from the two are
    comparable (Götz §7.3 uses consecutive queries of a session, which a log without times does
    not have)."""
    check_int("max_queries", max_queries, minimum=2)
    uq = (
        df.select(pl.col(user).cast(pl.String).alias("u"), pl.col(query).alias("q"))
        .unique()
        .sort("u", "q")
        .filter(pl.int_range(pl.len()).over("u") < max_queries)
    )
    pairs = uq.join(uq, on="u", suffix="2").filter(pl.col("q") != pl.col("q2"))
    return (
        pairs.group_by((pl.col("q") + PAIR_SEP + pl.col("q2")).alias("item"))
        .agg(pl.len().cast(pl.Int64).alias("count"))
        .filter(pl.col("count") >= 2)
        .sort(["count", "item"], descending=[True, False])
    )


def llr(k11: float, k12: float, k21: float, k22: float) -> float:
    """Dunning's G² log-likelihood ratio of a 2×2 contingency table."""

    def term(k: float, row: float, col: float, n: float) -> float:
        return k * math.log(k * n / (row * col)) if k > 0 else 0.0

    n = k11 + k12 + k21 + k22
    r1, r2 = k11 + k12, k21 + k22
    c1, c2 = k11 + k21, k12 + k22
    return 2.0 * (
        term(k11, r1, c1, n) + term(k12, r1, c2, n) + term(k21, r2, c1, n) + term(k22, r2, c2, n)
    )


def _scored_pairs(
    counts: dict[tuple[str, str], float], keep: set[str] | None = None
) -> dict[str, list[tuple[str, float]]]:
    """a → [(b, G²)] for positively associated pairs (a ≠ b), best first; only for the
    sources a in ``keep`` when given (the marginals still count every pair)."""
    left: dict[str, float] = defaultdict(float)
    right: dict[str, float] = defaultdict(float)
    n = 0.0
    for (a, b), c in counts.items():
        left[a] += c
        right[b] += c
        n += c
    out: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for (a, b), c in counts.items():
        if a == b or c <= 0 or (keep is not None and a not in keep):
            continue
        if c * n <= left[a] * right[b]:
            continue  # not positively associated
        k12 = left[a] - c
        k21 = right[b] - c
        k22 = n - c - k12 - k21
        out[a].append((b, llr(c, k12, k21, max(k22, 0.0))))
    for a in out:
        out[a].sort(key=lambda t: (-t[1], t[0]))
    return dict(out)


@dataclass
class SubstitutionModel:
    """Word statistics for segmentation and the scored substitution tables."""

    unigrams: dict[str, float]
    bigrams: dict[tuple[str, str], float]
    n_uni: float
    n_bi: float
    pmi_threshold: float
    min_bigram: float
    query_subs: dict[str, list[tuple[str, float]]]
    phrase_subs: dict[str, list[tuple[str, float]]]

    def pmi(self, w1: str, w2: str) -> float:
        b = self.bigrams.get((w1, w2), 0.0)
        if b <= 0 or self.n_bi <= 0:
            return -math.inf
        u1, u2 = self.unigrams.get(w1, 0.0), self.unigrams.get(w2, 0.0)
        return math.log((b / self.n_bi) / ((u1 / self.n_uni) * (u2 / self.n_uni)))

    def segment(self, query: str) -> list[str]:
        words = [w for w in query.split(" ") if w]
        if not words:
            return []
        phrases = [words[0]]
        for prev, w in zip(words, words[1:], strict=False):
            joined = (
                self.bigrams.get((prev, w), 0.0) >= self.min_bigram
                and self.pmi(prev, w) >= self.pmi_threshold
            )
            if joined:
                phrases[-1] = phrases[-1] + " " + w
            else:
                phrases.append(w)
        return phrases

    def substitutions(self, query: str, j: int) -> list[str]:
        """The top-j substitutions of ``query`` (never the query itself)."""
        best: dict[str, float] = {}
        for q2, s in self.query_subs.get(query, []):
            if q2 != query and s > best.get(q2, -math.inf):
                best[q2] = s
        phrases = self.segment(query)
        for i, p in enumerate(phrases):
            for p2, s in self.phrase_subs.get(p, []):
                cand = " ".join([*phrases[:i], p2, *phrases[i + 1 :]])
                if cand != query and s > best.get(cand, -math.inf):
                    best[cand] = s
        ranked = sorted(best.items(), key=lambda t: (-t[1], t[0]))
        return [q for q, _ in ranked[:j]]


def _pos(hist: pl.DataFrame) -> list[tuple[str, float]]:
    h = hist.filter(pl.col("count") > 0)
    return [(str(a), float(b)) for a, b in h.select("item", "count").iter_rows()]


def fit_substitutions(
    queries: pl.DataFrame,
    query_pairs: pl.DataFrame,
    *,
    pmi_threshold: float = 2.0,
    min_bigram: int = 2,
    sources: Collection[str] | None = None,
) -> SubstitutionModel:
    """Fit the model from a query histogram and a query-pair histogram (items ``q<TAB>q'``);
    non-positive (noisy) counts are ignored. With ``sources``, only the substitutions
    :meth:`SubstitutionModel.substitutions` needs for those queries are scored (theirs and
    their phrases'); the scores are the same as without, which scores every query's."""
    check_nonnegative("pmi_threshold", pmi_threshold)
    check_int("min_bigram", min_bigram, minimum=1)
    uni: dict[str, float] = defaultdict(float)
    bi: dict[tuple[str, str], float] = defaultdict(float)
    for q, c in _pos(queries):
        words = [w for w in q.split(" ") if w]
        for w in words:
            uni[w] += c
        for a, b in zip(words, words[1:], strict=False):
            bi[(a, b)] += c
    model = SubstitutionModel(
        unigrams=dict(uni),
        bigrams=dict(bi),
        n_uni=sum(uni.values()),
        n_bi=sum(bi.values()),
        pmi_threshold=pmi_threshold,
        min_bigram=float(min_bigram),
        query_subs={},
        phrase_subs={},
    )
    qpairs: dict[tuple[str, str], float] = defaultdict(float)
    ppairs: dict[tuple[str, str], float] = defaultdict(float)
    seg_cache: dict[str, list[str]] = {}

    def seg(q: str) -> list[str]:
        s = seg_cache.get(q)
        if s is None:
            s = model.segment(q)
            seg_cache[q] = s
        return s

    for item, c in _pos(query_pairs):
        a, sep, b = item.partition(PAIR_SEP)
        if not sep or a == b:
            continue
        qpairs[(a, b)] += c
        sa, sb = seg(a), seg(b)
        if len(sa) == len(sb):
            diff = [i for i in range(len(sa)) if sa[i] != sb[i]]
            if len(diff) == 1:
                ppairs[(sa[diff[0]], sb[diff[0]])] += c
    keep_q = keep_p = None
    if sources is not None:
        keep_q = set(sources)
        keep_p = {p for q in keep_q for p in seg(q)}
    model.query_subs = _scored_pairs(qpairs, keep_q)
    model.phrase_subs = _scored_pairs(ppairs, keep_p)
    return model


def precision_recall(truth: list[str], ranked: list[str]) -> tuple[float, float]:
    common = len(set(truth) & set(ranked))
    p = common / len(ranked) if ranked else math.nan
    r = common / len(truth) if truth else math.nan
    return p, r


def average_precision(truth: list[str], ranked: list[str], j: int) -> float:
    """AP@j of ``ranked`` against the ground-truth set ``truth`` (see module docstring)."""
    if not truth:
        return math.nan
    t = set(truth)
    hits = 0
    total = 0.0
    for k, x in enumerate(ranked[:j]):
        if x in t:
            hits += 1
            total += hits / (k + 1)
    return total / min(j, len(truth))


def ndcg(truth: list[str], ranked: list[str], j: int) -> float:
    """NDCG@j with graded relevance j − (rank in truth) (see module docstring)."""
    if not truth:
        return math.nan
    rel = {x: j - i for i, x in enumerate(truth[:j])}

    def dcg(lst: list[str]) -> float:
        return sum(rel.get(x, 0) / math.log2(k + 2) for k, x in enumerate(lst[:j]))

    ideal = dcg(truth)
    return dcg(ranked) / ideal if ideal > 0 else math.nan


def _mean(xs: list[float]) -> float:
    v = [x for x in xs if not math.isnan(x)]
    return sum(v) / len(v) if v else math.nan


def evaluate_substitution(
    original_queries: pl.DataFrame,
    original_pairs: pl.DataFrame,
    released_queries: pl.DataFrame,
    released_pairs: pl.DataFrame,
    *,
    js: tuple[int, ...] = (2, 5),
    n_queries: int = 1000,
    pmi_threshold: float = 2.0,
    min_bigram: int = 2,
) -> dict[str, Any]:
    """Precision, recall, MAP, NDCG and coverage of the release's top-j substitutions.

    Only the evaluated queries' substitutions are scored (and their phrases'), so the
    ``*_substitution_sources`` figures count evaluated queries and their phrases that have
    any."""
    check_int("n_queries", n_queries, minimum=1)
    for j in js:
        check_int("j", j, minimum=1)
    top = (
        original_queries.sort(["count", "item"], descending=[True, False])
        .head(n_queries)
        .get_column("item")
        .to_list()
    )
    # only the evaluated queries' substitutions are scored (the same scores, far less work)
    truth_model, rel_model = (
        fit_substitutions(q, p, pmi_threshold=pmi_threshold, min_bigram=min_bigram, sources=top)
        for q, p in ((original_queries, original_pairs), (released_queries, released_pairs))
    )
    rows = []
    examples: list[dict[str, Any]] = []
    for j in js:
        prec, rec, maps, ndcgs = [], [], [], []
        with_truth = covered = with_release = 0
        for q in top:
            t = truth_model.substitutions(q, j)
            r = rel_model.substitutions(q, j)
            if t:
                with_truth += 1
                covered += bool(r)
            if r:
                with_release += 1
                p, rc = precision_recall(t, r)
                prec.append(p)
                maps.append(average_precision(t, r, j) if t else 0.0)
                ndcgs.append(ndcg(t, r, j) if t else 0.0)
                if t:
                    rec.append(rc)
            if j == max(js) and (t or r) and len(examples) < 10:
                examples.append({"query": q, "original": t, "release": r})
        rows.append(
            {
                "j": j,
                "queries_evaluated": len(top),
                "queries_with_original_substitutions": with_truth,
                "queries_with_release_substitutions": with_release,
                "coverage": covered / with_truth if with_truth else math.nan,
                "precision": _mean(prec),
                "recall": _mean(rec),
                "map": _mean(maps),
                "ndcg": _mean(ndcgs),
            }
        )
    return {
        "applicable": True,
        "pmi_threshold": pmi_threshold,
        "min_bigram": min_bigram,
        "original_query_substitution_sources": len(truth_model.query_subs),
        "release_query_substitution_sources": len(rel_model.query_subs),
        "original_phrase_substitution_sources": len(truth_model.phrase_subs),
        "release_phrase_substitution_sources": len(rel_model.phrase_subs),
        "by_j": rows,
        "examples": examples,
    }
