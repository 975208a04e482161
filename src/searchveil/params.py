"""The single-user figures every histogram release reports (issue 12; docs/privacy/delta.md):
the δ-vs-1/U check that goes in the ledger, the expected number of items held by one user that
a release publishes (a private figure), and δ solved for a target of it.

What remains here after issue 25 gave each paper its own home: Korolova's accounting is in
:mod:`searchveil.release.korolova.accounting`, ZEALOUS' in
:mod:`searchveil.release.zealous.accounting`, the mechanism-generic threshold map in
:mod:`searchveil.mechanisms.threshold`, and the parameter advisor (``searchveil params``) in
:mod:`searchveil.release.advice`. These figures stay on their own floor, below the families,
because every family (and the demo) uses them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from searchveil.errors import InvalidParameterError
from searchveil.validate import check_int, check_positive, check_probability

__all__ = [
    "SINGLE_USER_TARGET",
    "delta_users_warning",
    "single_user_check",
    "single_user_exposure",
    "solve_delta_single_user",
]


# ----------------------------------------------------------------------------------------------
# δ that protects everyone (issue 12; docs/privacy/delta.md)
# ----------------------------------------------------------------------------------------------

#: the default target of ``searchveil demo``: expected single-user items published ≤ 0.01
SINGLE_USER_TARGET = 0.01


def single_user_check(delta: float, users: int) -> dict[str, Any]:
    """The δ-vs-1/U check, the only part of the single-user analysis that goes in the ledger
    (it reveals nothing beyond the public bound U): ``ok`` is δ < 1/U. δ may be 0 or 1 (the
    exact δ of a release with extreme parameters)."""
    dl = check_probability("delta", delta, open_low=False, open_high=False)
    u = check_int("users", users, minimum=1)
    return {
        "rule": "delta < 1/U (U = users, or --max-users)",
        "users_bound": u,
        "delta": dl,
        "one_over_users": 1.0 / u,
        "recommended_max_delta": 1.0 / (10.0 * u),
        "ok": dl < 1.0 / u,
    }


def delta_users_warning(delta: float, users: int, *, bound: str = "") -> str | None:
    """The warning every release command prints (stderr and ``--json``) when δ ≥ 1/U — (ε,
    δ)-DP at such a δ allows publishing items only one user holds — or ``None`` when δ < 1/U.
    ``bound``: how U was obtained, when it is not the number of users (e.g. "a lower bound:
    this party's users")."""
    chk = single_user_check(delta, users)
    if chk["ok"]:
        return None
    how = f" ({bound})" if bound else ""
    return (
        f"δ = {chk['delta']:.3g} ≥ 1/U = {chk['one_over_users']:.3g}{how}: (ε, δ)-DP at this δ "
        "allows publishing items that only one user holds; use δ ≤ 1/(10·U) = "
        f"{chk['recommended_max_delta']:.3g} (docs/privacy/delta.md)"
    )


def single_user_exposure(
    keep: Any, *, delta: float, users: int, single_user_items: int | None = None
) -> dict[str, Any]:
    """Expected number of items held by exactly one user that a release publishes.

    ``keep``: the release probabilities of the items held by exactly one user (from the exact
    keep curve at each item's bounded count; an array, possibly empty). The result holds the
    count of such items, which is itself a statistic of the private data: it is for the data
    holder (command output, report), never for the released tables or the ledger (which gets
    only :func:`single_user_check`). Any (ε, δ)-DP release publishes an item only one user holds
    with probability ≤ δ (without that user it has probability 0), so the expectation is also
    bounded by ``single_user_items · δ`` whatever the mechanism; both figures are returned.
    """
    arr = np.asarray(keep, dtype=np.float64).ravel()
    n = (
        int(arr.size)
        if single_user_items is None
        else check_int("single_user_items", single_user_items, minimum=0)
    )
    chk = single_user_check(delta, users)
    expected = float(arr.sum())
    return {
        "single_user_items": n,
        "expected_single_user_published": expected,
        "bound_items_times_delta": n * chk["delta"],
        "delta_check": chk,
        "warning": delta_users_warning(chk["delta"], chk["users_bound"]),
        "note": "single_user_items is a statistic of the private data: for the data holder, "
        "never published; the ledger records only the δ < 1/U check",
    }


def solve_delta_single_user(
    *,
    target: float,
    single_user_items: int | None = None,
    users: int | None = None,
    items_per_user: int = 1,
    round_down: bool = True,
) -> dict[str, Any]:
    """The δ for which an (ε, δ)-DP release publishes at most ``target`` items held by one user
    in expectation: δ = target / N, N = ``single_user_items`` when the data holder knows it,
    else the data-independent bound N ≤ U·(items per user) from a public bound U on the users.
    Also δ ≤ 1/(10·U) when U is given. ``round_down``: to a power of ten, so that a published δ
    reveals at most the order of magnitude of N (N is a statistic of the private data)."""
    t = check_positive("target", target)
    k = check_int("items_per_user", items_per_user, minimum=1)
    if single_user_items is None and users is None:
        raise InvalidParameterError(
            "single-user-items/max-users", None, "the count of single-user items or a bound U"
        )
    if single_user_items is not None:
        n = check_int("single_user_items", single_user_items, minimum=0)
        source = "count of single-user items (data holder)"
    else:
        n = check_int("users", users, minimum=1) * k
        source = "bound U × items per user (data-independent)"
    cands = [t / n if n > 0 else 1.0]
    if users is not None:
        cands.append(1.0 / (10.0 * check_int("users", users, minimum=1)))
    raw = min(min(cands), 0.1)
    delta = 10.0 ** math.floor(math.log10(raw) + 1e-9) if round_down else raw
    return {
        "target": t,
        "single_user_items_bound": n,
        "source": source,
        "delta_unrounded": raw,
        "delta": delta,
        "expected_single_user_published_at_most": n * delta,
    }
