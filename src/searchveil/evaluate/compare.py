"""Side-by-side comparison of mechanisms and settings at one (ε, δ) on one input
(``searchveil compare``).

Each *setting* is ``MECHANISM[:key=value,...]``:

* ``korolova`` — Release-Data (thesis ch.4): ``d`` (queries per user, default 5), ``urls``
  (``private`` | ``none``, default ``private``: query-URL pairs selected by their own noisy
  threshold), ``d_c`` (clicks per user, default 1), ``split`` (ε weights separated by ``/``,
  default equal shares), ``rule`` (``exact`` | ``paper`` | ``improved``, default ``exact``);
* ``zealous`` — ZEALOUS (Götz §4): ``m`` (items per user, default 1), ``items`` (``keywords`` |
  ``queries`` | ``clicks`` | ``query_pairs``, default ``queries``), ``tau`` (default
  Proposition 4), ``guarantee`` (``probabilistic`` | ``indistinguishability``, default
  probabilistic, which needs the public user bound ``--max-users``);
* ``kanon`` — k-query anonymity (Adar), ``k`` (default 10): the baseline of Götz §7; it does
  *not* use ε, δ and gives no differential privacy (marked so);
* ``selection`` (formerly ``select``, still accepted) — queries chosen by a selection strategy
  (:mod:`searchveil.release.selection`): ``strategy`` (any ``--selection`` name,
  :class:`searchveil.mechanisms.selection.SelectionStrategy`; default ``probe-reweight-2r``),
  ``d`` (distinct queries per user; default: the strategy's data-independent rule,
  :func:`searchveil.mechanisms.selection.default_d` — never tuned on the compared log).

Comparing settings on a private log and keeping the best is itself a use of that log (a
data-holder diagnostic that no ledger accounts for): run comparisons on a synthetic or public
log (``searchveil synth``) to choose a mechanism or d, then release the private log once.

Every DP setting is solved for the *same* total (ε, δ) by the release modules' own
``from_budget`` solvers, so the comparison is at equal privacy. The releases are alternatives:
each spends the whole budget; publishing several of them would compose. A setting that cannot
meet the budget (or has a bad option) is listed with its reason instead of stopping the run.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from searchveil.errors import InvalidParameterError, SearchveilError
from searchveil.evaluate import evaluate_loaded, load_release
from searchveil.evaluate._release import original_histograms
from searchveil.mechanisms.selection import SelectionStrategy, default_d
from searchveil.model import SearchLog
from searchveil.release.histogram import write_release
from searchveil.release.kanonymity import KAnonParams, release_kanon
from searchveil.release.korolova import KorolovaParams, release_korolova
from searchveil.release.korolova.params import UrlSelection
from searchveil.release.selection import SelectionParams, release_selection
from searchveil.release.zealous import ZealousParams, release_zealous
from searchveil.rng import RandomSource
from searchveil.validate import parse_choice

__all__ = ["Setting", "parse_setting", "default_settings", "run_setting", "compare_settings"]

MECHANISMS = ("korolova", "zealous", "kanon", "selection")
#: the strategy of a ``selection`` setting without ``strategy=`` (the best measured,
#: docs/selection-strategies.md)
DEFAULT_STRATEGY = "probe-reweight-2r"
_KEYS = {
    "selection": {"strategy", "d"},
    "korolova": {"d", "urls", "d_c", "split", "rule"},
    "zealous": {"m", "items", "tau", "guarantee"},
    "kanon": {"k"},
}


@dataclass(frozen=True)
class Setting:
    mechanism: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options.items())
        return f"{self.mechanism}:{opts}" if opts else self.mechanism


def parse_setting(spec: str) -> Setting:
    """``korolova:d=5,urls=none`` → Setting; unknown mechanisms/keys are errors."""
    name, _, rest = spec.strip().partition(":")
    name = name.strip().lower()
    name = "selection" if name == "select" else name  # the deprecated spelling
    if name not in MECHANISMS:
        raise InvalidParameterError("mechanisms", spec, "one of " + ", ".join(MECHANISMS))
    opts: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        k, eq, v = part.partition("=")
        k = k.strip()
        if not eq or not v.strip() or k not in _KEYS[name]:
            allowed = ", ".join(sorted(_KEYS[name]))
            raise InvalidParameterError("mechanisms", spec, f"{name}:key=value with keys {allowed}")
        opts[k] = v.strip()
    return Setting(name, opts)


def default_settings(*, max_users: int | None) -> list[Setting]:
    """Korolova at d = 1, 5, 20; ZEALOUS (if a user bound is given) for queries at m = 1, 4 and
    for clicks and query pairs at m = 1; 10-query anonymity as the non-DP baseline."""
    out = [Setting("korolova", {"d": str(d)}) for d in (1, 5, 20)]
    if max_users is not None:
        out += [
            Setting("zealous", {"m": "1", "items": "queries"}),
            Setting("zealous", {"m": "4", "items": "queries"}),
            Setting("zealous", {"m": "1", "items": "clicks"}),
            Setting("zealous", {"m": "1", "items": "query_pairs"}),
        ]
    out.append(Setting("selection", {"strategy": "gaussian", "d": "20"}))
    out.append(Setting("selection", {"strategy": DEFAULT_STRATEGY}))
    out.append(Setting("kanon", {"k": "10"}))
    return out


def _int(s: Setting, key: str, default: int) -> int:
    v = s.options.get(key)
    if v is None:
        return default
    try:
        return int(v)
    except ValueError:
        raise InvalidParameterError(key, v, f"an integer (in setting {s.label})") from None


def run_setting(
    log: SearchLog,
    setting: Setting,
    *,
    epsilon: float,
    delta: float,
    rng: RandomSource,
    max_users: int | None,
) -> Any:
    """Run one setting on ``log`` at the total (ε, δ); returns the release object
    (:class:`searchveil.release.histogram.HistogramRelease`)."""
    o = setting.options
    if setting.mechanism == "selection":
        strategy = o.get("strategy", DEFAULT_STRATEGY)
        strategy = parse_choice("strategy", strategy, SelectionStrategy)
        if "d" in o:
            d, rule = _int(setting, "d", 20), "given (compare setting)"
        else:
            d, rule = default_d(strategy, epsilon=epsilon / 2, delta=delta, max_users=max_users)
        sp = SelectionParams(strategy=strategy, epsilon=epsilon, delta=delta, d=d, d_rule=rule)
        return release_selection(log, sp, rng=rng, max_users=max_users)
    if setting.mechanism == "korolova":
        urls = parse_choice("urls", o.get("urls", "private"), UrlSelection)
        parts = 4 if urls == "private" else 2
        split = tuple(float(x) for x in o["split"].split("/")) if "split" in o else (1.0,) * parts
        p = KorolovaParams.from_budget(
            epsilon=epsilon,
            delta=delta,
            d=_int(setting, "d", 5),
            url_selection=urls,
            d_c=_int(setting, "d_c", 1) if urls == "private" else None,
            split=split,
            threshold_rule=o.get("rule", "exact"),
        )
        return release_korolova(log, p, rng=rng, max_users=max_users)
    if setting.mechanism == "zealous":
        guarantee = o.get("guarantee", "probabilistic")
        if guarantee == "probabilistic" and max_users is None:
            raise InvalidParameterError(
                "max-users", None, "a public upper bound on the number of users (ZEALOUS Thm 3)"
            )
        zp = ZealousParams.from_budget(
            epsilon=epsilon,
            delta=delta,
            m=_int(setting, "m", 1),
            item_type=o.get("items", "queries"),
            guarantee=guarantee,
            tau=_int(setting, "tau", 0) or None,
            users=max_users,
        )
        return release_zealous(log, zp, rng=rng)

    return release_kanon(log, KAnonParams(k=_int(setting, "k", 10)), rng=rng)


def compare_settings(
    log: SearchLog,
    settings: list[Setting],
    *,
    epsilon: float,
    delta: float,
    rng: RandomSource,
    max_users: int | None = None,
    on_step: Callable[[str], Callable[[], None]] | None = None,
    **eval_options: Any,
) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, str]]]:
    """Run and evaluate every setting; returns ([(label, evaluation)], [(label, why failed)]).

    Each release is written to a private temporary directory (deleted afterwards, with its
    provenance record) and read back through its ledger, so it is evaluated exactly as
    ``searchveil evaluate`` would; the private report is taken from the release object."""

    original = original_histograms(log)
    runs: list[tuple[str, dict[str, Any]]] = []
    failures: list[tuple[str, str]] = []
    for s in settings:
        done = on_step(s.label) if on_step else None
        try:
            rel = run_setting(log, s, epsilon=epsilon, delta=delta, rng=rng, max_users=max_users)
        except SearchveilError as exc:
            failures.append((s.label, str(exc)))
            if done:
                done()
            continue
        with tempfile.TemporaryDirectory(prefix="searchveil-compare-") as tmp:
            out = Path(tmp) / "release"
            write_release(rel, out)
            loaded = load_release(out)
            res = evaluate_loaded(log, loaded, original=original, **eval_options)
        res["release"]["dir"] = None  # temporary; not kept
        res["release"]["report"] = getattr(rel, "report", None)
        if s.mechanism == "kanon":
            res["release"]["notion"] = "k-anonymity baseline — NOT differential privacy"
        runs.append((s.label, res))
        if done:
            done()
    return runs, failures
