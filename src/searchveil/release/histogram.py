"""Shared steps of the histogram releases: noise → threshold, the release value and writing it.

A release carries two records (docs/privacy/published.md): the public ``ledger`` (written into
the release directory) and the private figures — ``report``, ``inputs`` (the private input
records: path, SHA-256, exact rows/users, reader options) and ``figures`` (engine, plan, ...) —
which :func:`write_release` puts into the provenance record *beside* the release directory.

Every step is a Polars expression on a frame of (bounded) counts (:mod:`searchveil.release.counts`),
so a Spark engine can express the same steps; the noise is the exact discrete Laplace of
:mod:`searchveil.mechanisms.noise` drawn from the injected ``rng``, one fresh draw per row.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from searchveil.errors import InvalidParameterError
from searchveil.io.ledger import ReleaseWriter, build_provenance
from searchveil.mechanisms.noise import DiscreteLaplace
from searchveil.params import delta_users_warning, single_user_check
from searchveil.rng import RandomSource

__all__ = [
    "noisy_counts",
    "noisy_threshold",
    "HistogramRelease",
    "write_release",
    "delta_users_check",
    "check_declared_users",
    "users_bound_source",
]


def noisy_counts(counts: pl.Series | np.ndarray, *, scale: float, rng: RandomSource) -> np.ndarray:
    """``counts`` plus fresh independent discrete Laplace noise of scale ``scale``."""
    arr = counts.to_numpy() if isinstance(counts, pl.Series) else np.asarray(counts)
    return DiscreteLaplace(scale=scale).release(arr.astype(np.int64), rng)


def noisy_threshold(
    counts: pl.DataFrame, *, threshold: float, scale: float, rng: RandomSource
) -> pl.DataFrame:
    """Rows whose ``count`` + fresh discrete Laplace(scale) noise exceeds ``threshold``.

    The noisy value used for the decision is discarded (it is not published).
    """
    noisy = noisy_counts(counts.get_column("count"), scale=scale, rng=rng)
    return counts.filter(pl.Series(noisy > threshold))


def delta_users_check(delta: float, max_users: int | None) -> dict[str, Any]:
    """The public ledger's δ < 1/U check: against the bound U the user *declares*
    (``--max-users``), never against the exact number of users (a statistic of the private
    input). Without a declared bound the ledger says the check was not made publicly."""
    if max_users is None:
        return {
            "checked": False,
            "why": "no declared bound U on the number of users (--max-users); the check "
            "against the exact count is in the private provenance record only",
        }
    return single_user_check(delta, max_users) | {
        "checked": True,
        "users_bound_source": "declared (--max-users)",
    }


def users_bound_source(max_users: int | None) -> str:
    """How the *private* report's δ < 1/U check got U (the public ledger's uses only a declared
    bound, :func:`delta_users_check`)."""
    if max_users is not None:
        return "declared (--max-users)"
    return "exact number of users (private: not in the ledger, whose check needs --max-users)"


def release_delta_check(delta: float, max_users: int | None, exact_users: int) -> dict[str, Any]:
    """The private report's δ < 1/U check of a whole release (its total δ) and the warning
    its command prints when δ ≥ 1/U (issue 39): U the declared bound, else the exact number of
    users (a private figure: the report, never the ledger)."""
    u = max_users if max_users is not None else max(1, exact_users)
    check = single_user_check(delta, u) | {"users_bound_source": users_bound_source(max_users)}
    return {"delta_check": check, "warning": delta_users_warning(delta, u)}


def check_declared_users(max_users: int | None, exact_users: int) -> None:
    """A declared bound the input violates is an error (the public δ < 1/U check, or the
    guarantee that uses U, would not hold); nothing is written."""
    if max_users is not None and exact_users > max_users:
        raise InvalidParameterError(
            "max-users",
            max_users,
            "a declared upper bound >= the number of users in the input (the input has more)",
        )


@dataclass
class HistogramRelease:
    """A computed release: output tables, the private report (parameters, thresholds, noise
    scales, counts kept/dropped), the public ledger dict, and the private input records
    (``inputs``) and figures (``figures``: engine, plan, ...) for the provenance record. Write it
    with :func:`write_release`."""

    tables: dict[str, pl.DataFrame]
    report: dict[str, Any]
    ledger: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    inputs: list[dict[str, Any]] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)

    def provenance(self) -> dict[str, Any]:
        """The private provenance record of this release (:func:`build_provenance`)."""
        return build_provenance(inputs=self.inputs, report=self.report, figures=self.figures)

    @property
    def epsilon(self) -> float | None:
        eps = self.ledger.get("epsilon")
        return None if eps is None else float(eps)

    @property
    def delta(self) -> float | None:
        dl = self.ledger.get("delta")
        return None if dl is None else float(dl)


def write_release(
    release: HistogramRelease,
    out_dir: str | os.PathLike[str],
    *,
    fmt: str = "tsv",
    overwrite: bool = False,
    provenance: str | os.PathLike[str] | None = None,
    moves_to: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Write every table and the public ``ledger.json`` atomically into ``out_dir``, and the
    private provenance record beside it (``<out_dir>.private.json``, or ``provenance``);
    returns the written ledger. ``moves_to``: the directory's final place when ``out_dir`` is
    inside a staging directory (:class:`~searchveil.io.ledger.ReleaseWriter`)."""
    with ReleaseWriter(out_dir, fmt=fmt, overwrite=overwrite, provenance=provenance,
                       moves_to=moves_to) as w:  # fmt: skip
        for name, df in release.tables.items():
            w.write_table(name, df)
        led = w.write_ledger(release.ledger)
        w.write_provenance(release.provenance())
        return led
