"""Utility and risk of a tabular release (the measures SafePub and ARX report, plus the
paper's ``u`` and ``r``):

* granularity loss — per input record the mean over quasi-identifiers of
  ``(n(x)−1)/(n(⊥)−1)``; records not in the output (not sampled or suppressed) count 1;
* non-uniform entropy loss — ``Σ −log2 P(original | released)`` with frequencies of the
  input, divided by its value when everything is suppressed;
* discernibility — ``Σ_C |C|² + (unreleased)·n``, divided by ``n²``;
* average equivalence-class size (classes = identical output rows);
* the paper's ``u(x)`` and ``r(x) = Φ(x)/|ρ(x, D)|`` averaged over released rows;
* prosecutor re-identification risk ``1/|C|`` (max and mean over released rows);
* accuracy of a naive Bayes classifier and of a multinomial logistic regression trained on the
  output and tested on original held-out records (:func:`naive_bayes_accuracy`,
  :func:`logistic_accuracy`); a generalized value spreads uniformly over the leaves under it.

Every figure here is computed from the exact input: they go to the private provenance record
and to reports, never into the public ledger.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
from scipy.optimize import minimize

from searchveil.tabular.baselines import granularity_table
from searchveil.tabular.hierarchy import EncodedTable
from searchveil.tabular.lattice import class_sizes_at, distinct_records
from searchveil.tabular.measures import Measures
from searchveil.tabular.release import TabularRelease

__all__ = ["release_metrics", "naive_bayes_accuracy", "logistic_accuracy", "leaf_features"]


def release_metrics(rel: TabularRelease, measures: Measures | None = None) -> dict[str, Any]:
    t = rel.table
    n = t.n
    k = len(t.hierarchies)
    rows, lv = rel.rows, rel.levels
    out: dict[str, Any] = {
        "records": n,
        "released": int(rows.size),
        "released_fraction": rows.size / n if n else 0.0,
    }
    gran = np.zeros(rows.size)
    nue = np.zeros(rows.size)
    nue_max = np.zeros(n)
    for i, h in enumerate(t.hierarchies):
        G = granularity_table(h)
        gran += G[t.leaves[rows, i], lv[:, i]]
        leaf_cnt = np.bincount(t.leaves[:, i], minlength=h.n_leaves).astype(np.float64)
        node_cnt = np.zeros(h.codes.shape)
        for level in range(h.height + 1):
            per_node = np.bincount(h.codes[:, level], weights=leaf_cnt)
            node_cnt[:, level] = per_node[h.codes[:, level]]
        lf = t.leaves[:, i]
        nue_max += -np.log2(leaf_cnt[lf] / n)
        lr = t.leaves[rows, i]
        nue += -np.log2(leaf_cnt[lr] / node_cnt[lr, lv[:, i]])
    gran_total = float(gran.sum() / max(k, 1)) + (n - rows.size)
    out["granularity_loss"] = gran_total / n if n else 0.0
    released_set = np.zeros(n, bool)
    released_set[rows] = True
    nue_total = float(nue.sum() + nue_max[~released_set].sum())
    out["non_uniform_entropy_loss"] = nue_total / float(nue_max.sum()) if nue_max.sum() else 0.0
    if rows.size:
        sizes = (
            rel.frame.with_columns(pl.len().over(rel.frame.columns).alias("__n"))
            .get_column("__n")
            .to_numpy()
            .astype(np.float64)
        )
        n_classes = int(rel.frame.n_unique())
        out["discernibility"] = (float((sizes).sum()) + (n - rows.size) * n) / (n * n)
        out["classes"] = n_classes
        out["avg_class_size"] = rows.size / n_classes
        out["prosecutor_risk_max"] = float((1.0 / sizes).max())
        out["prosecutor_risk_mean"] = float((1.0 / sizes).mean())
    else:
        out.update(
            discernibility=1.0,
            classes=0,
            avg_class_size=0.0,
            prosecutor_risk_max=0.0,
            prosecutor_risk_mean=0.0,
        )
    if measures is not None and rows.size:
        u = np.zeros(rows.size)
        phi = np.zeros(rows.size)
        for i in range(k):
            u += measures.d[i][t.leaves[rows, i], lv[:, i]]
            phi += measures.w[i][t.leaves[rows, i], lv[:, i]]
        d = distinct_records(t.leaves)
        rho = np.zeros(rows.size)
        tup = d.inverse[rows]
        uniq_lv, lv_inv = np.unique(lv, axis=0, return_inverse=True)
        lv_inv = lv_inv.reshape(-1)
        for j, level in enumerate(uniq_lv):
            sel = np.flatnonzero(lv_inv == j)
            sizes_in = class_sizes_at(d.leaves, d.count, t.hierarchies, level)
            rho[sel] = sizes_in[tup[sel]]
        out["mean_u"] = float(u.mean())
        out["mean_risk"] = float((phi / np.maximum(rho, 1)).mean())
        out["min_generalized_input_records"] = int(rho.min())
    return out


def naive_bayes_accuracy(
    rel: TabularRelease, test: EncodedTable, target: str, *, alpha: float = 1.0
) -> float | None:
    """Train a categorical naive Bayes on the released rows — a generalized value spreads its
    count uniformly over the leaves under it — and return its accuracy on the original
    ``test`` records. None when nothing was released."""
    t = rel.table
    if rel.rows.size == 0:
        return None
    y_train = rel.frame.get_column(target).to_numpy().astype(str)
    y_test = test.frame.get_column(target).to_numpy().astype(str)
    classes = np.unique(np.concatenate([y_train, y_test]))
    yi = np.searchsorted(classes, y_train)
    yt = np.searchsorted(classes, y_test)
    C = classes.size
    prior = np.bincount(yi, minlength=C).astype(np.float64) + alpha
    logp = np.tile(np.log(prior / prior.sum()), (test.n, 1))
    for i, h in enumerate(t.hierarchies):
        counts = np.zeros((C, h.n_leaves))
        leaf_n = h.leaf_counts().astype(np.float64)
        lr = t.leaves[rel.rows, i]
        lv = rel.levels[:, i]
        for level in range(h.height + 1):
            sel = lv == level
            if not sel.any():
                continue
            node = h.codes[lr[sel], level]
            nn = len(h.labels[level])
            per = np.bincount(yi[sel] * nn + node, minlength=C * nn).reshape(C, nn)
            counts += per[:, h.codes[:, level]] / leaf_n[:, level][None, :]
        probs = (counts + alpha) / (counts.sum(axis=1, keepdims=True) + alpha * h.n_leaves)
        logp += np.log(probs[:, test.leaves[:, i]]).T
    return float((np.argmax(logp, axis=1) == yt).mean())


def leaf_features(
    table: EncodedTable, rows: npt.NDArray[np.int64], levels: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """One block per quasi-identifier with one column per leaf: a record generalized to node
    ``x`` puts ``1/n(x)`` on each leaf under ``x`` (the uniform spread), a leaf value puts 1 on
    itself."""
    blocks = []
    for i, h in enumerate(table.hierarchies):
        leaf_n = h.leaf_counts().astype(np.float64)
        lf = table.leaves[rows, i]
        lv = levels[:, i]
        node = h.codes[lf, lv]
        # member[j, leaf] = 1 if leaf lies under record j's node at its level
        member = h.codes[:, lv].T == node[:, None]
        blocks.append(member / leaf_n[lf, lv][:, None])
    return np.concatenate(blocks, axis=1) if blocks else np.zeros((rows.size, 0))


def logistic_accuracy(
    rel: TabularRelease, test: EncodedTable, target: str, *, l2: float = 1.0, max_iter: int = 200
) -> float | None:
    """Train a multinomial logistic regression (L2 penalty ``l2``, L-BFGS) on the released rows
    (features: :func:`leaf_features`) and return its accuracy on the original ``test`` records.
    None when nothing was released."""
    if rel.rows.size == 0:
        return None
    t = rel.table
    y_train = rel.frame.get_column(target).to_numpy().astype(str)
    y_test = test.frame.get_column(target).to_numpy().astype(str)
    classes = np.unique(np.concatenate([y_train, y_test]))
    yi = np.searchsorted(classes, y_train)
    yt = np.searchsorted(classes, y_test)
    X = leaf_features(t, rel.rows, rel.levels)
    Xt = leaf_features(test, np.arange(test.n), np.zeros((test.n, len(t.hierarchies)), np.int64))
    X = np.concatenate([X, np.ones((X.shape[0], 1))], axis=1)
    Xt = np.concatenate([Xt, np.ones((Xt.shape[0], 1))], axis=1)
    n, f = X.shape
    C = classes.size
    Y = np.zeros((n, C))
    Y[np.arange(n), yi] = 1.0

    def loss(wflat: npt.NDArray[np.float64]) -> tuple[float, npt.NDArray[np.float64]]:
        W = wflat.reshape(f, C)
        Z = X @ W
        Z -= Z.max(axis=1, keepdims=True)
        lse = np.log(np.exp(Z).sum(axis=1))
        P = np.exp(Z - lse[:, None])
        val = float(-(Z[np.arange(n), yi] - lse).sum()) + 0.5 * l2 * float((W[:-1] ** 2).sum())
        G = X.T @ (P - Y)
        G[:-1] += l2 * W[:-1]
        return val / n, (G / n).ravel()

    res = minimize(loss, np.zeros(f * C), jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter})  # fmt: skip
    W = res.x.reshape(f, C)
    return float((np.argmax(Xt @ W, axis=1) == yt).mean())
