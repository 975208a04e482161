"""Synthetic social-network profiles for the ad-targeting attacks of Korolova's thesis, §2.2.

A :class:`Population` is columnar: every profile attribute is one small-integer numpy column
(code 0 = "not listed", real values from 1) plus one visibility column per attribute
(``EVERYONE`` / ``FRIENDS`` / ``ONLY_ME``, §2.2.3.1: information a user restricted to "Only me" or
"Friends Only"). Interests are three ``uint16`` slots (a user likes "any of" up to three
interests). Activity is a per-user daily log-in probability; ``topic`` is a latent boolean that
is *not* on the profile — what Attack 2 (Inference from Clicks, §2.2.3.2) tries to learn.

Marginals and correlations (:class:`PopulationConfig`). These are configuration chosen to
*resemble* published 2010-2012 figures; they are not measurements and the report says so:

* age 13-64 in six bands shaped like the 2010 US Facebook audience (young-skewed: 13-17 11 %,
  18-24 26 %, 25-34 24 %, 35-44 17 %, 45-54 13 %, 55-64 9 %), uniform within a band;
* gender 56 % female (Facebook's audience was majority female in 2010);
* location: 200 areas, Zipf(1.0) sizes; workplaces (n/40 employers, Zipf(1.1) sizes, 45 % of
  adults list one) each sit in one area and 85 % of their employees live there (correlation);
  colleges (n/300, Zipf(0.9), 50 % of adults); interests (n/200 topics, Zipf(1.05) popularity,
  0-3 per user, popularity ranks partly permuted between genders — gender-interest correlation);
* relationship status conditional on age band (married share rising with age, US census
  shape); "interested in" (the thesis's §2.2.3.1.2 sexual-orientation example) listed by 60 %,
  same-sex 3.5 % of those (Gallup 2012: 3.4 % of US adults identify as LGBT); religion listed by
  45 %, "none" 30 % of under-30s and 14 % of older users (Pew 2012, "Nones on the rise");
  politics listed by 35 %, more liberal among the young;
* visibility: 35 % of users keep the Dec-2009 defaults (everything "everyone" except the
  birthday/age, "friends"), 65 % are "cautious" (the thesis cites >65 % of users changing
  their settings, §2.2.2.1) and draw each attribute's visibility from per-attribute
  probabilities (sensitive attributes mostly friends / only-me);
* activity: half of the users log in almost daily (p = 0.95; thesis §2.2.4.3: "half of
  Facebook's users log in every day"), the others with p uniform on [0.05, 0.6];
  ``topic`` prevalence 5 %.

Generation is vectorised (numpy Generator derived from the caller's RandomSource: synthetic
data, not privacy noise). An inverted index per attribute (stable argsort + offsets) lets a
campaign's audience be found from its most selective criterion instead of a full scan.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from searchveil.errors import InvalidParameterError
from searchveil.rng import RandomSource
from searchveil.validate import check_int, check_probability

__all__ = [
    "EVERYONE",
    "FRIENDS",
    "ONLY_ME",
    "VISIBILITY_NAMES",
    "ATTRIBUTES",
    "SENSITIVE",
    "VALUE_NAMES",
    "PopulationConfig",
    "Population",
    "generate_population",
    "age_code",
    "code_age",
]

EVERYONE, FRIENDS, ONLY_ME = 0, 1, 2
VISIBILITY_NAMES = ("everyone", "friends", "only-me")

#: every targetable attribute (``interests`` has three slots)
ATTRIBUTES = (
    "gender",
    "age",
    "location",
    "workplace",
    "college",
    "interests",
    "relationship",
    "interested_in",
    "religion",
    "politics",
)
#: the attributes the thesis's Attack 1 examples infer (kept private by many users)
SENSITIVE = ("age", "relationship", "interested_in", "religion", "politics")

VALUE_NAMES: dict[str, tuple[str, ...]] = {
    "gender": ("not listed", "female", "male"),
    "relationship": (
        "not listed",
        "single",
        "in a relationship",
        "engaged",
        "married",
        "it's complicated",
    ),
    "interested_in": ("not listed", "men", "women"),
    "religion": ("not listed", "christian", "jewish", "muslim", "other", "none"),
    "politics": ("not listed", "liberal", "moderate", "conservative", "other"),
}

AGE_MIN, AGE_MAX = 13, 64
AGE_BANDS = ((13, 17), (18, 24), (25, 34), (35, 44), (45, 54), (55, 64))


def age_code(age: int) -> int:
    """Column code of an age in years (13 → 1, ..., 64 → 52)."""
    return int(age) - AGE_MIN + 1


def code_age(code: int) -> int:
    return int(code) + AGE_MIN - 1


def _vis(e: float, f: float, o: float) -> tuple[float, float, float]:
    return (e, f, o)


#: attribute, its visibility (everyone, friends, only-me) for users who kept the defaults, and
#: for the "cautious" users who changed their settings
_VISIBILITY = (
    ("gender", _vis(1, 0, 0), _vis(0.9, 0.1, 0)),
    ("age", _vis(0, 1, 0), _vis(0.2, 0.5, 0.3)),
    ("location", _vis(1, 0, 0), _vis(0.5, 0.45, 0.05)),
    ("workplace", _vis(1, 0, 0), _vis(0.3, 0.6, 0.1)),
    ("college", _vis(1, 0, 0), _vis(0.3, 0.6, 0.1)),
    ("interests", _vis(1, 0, 0), _vis(0.5, 0.45, 0.05)),
    ("relationship", _vis(1, 0, 0), _vis(0.3, 0.55, 0.15)),
    ("interested_in", _vis(1, 0, 0), _vis(0.2, 0.55, 0.25)),
    ("religion", _vis(1, 0, 0), _vis(0.2, 0.5, 0.3)),
    ("politics", _vis(1, 0, 0), _vis(0.2, 0.5, 0.3)),
)


@dataclass(frozen=True)
class PopulationConfig:
    """Marginals, correlations and visibility of the synthetic population (module docstring)."""

    age_band_probs: tuple[float, ...] = (0.11, 0.26, 0.24, 0.17, 0.13, 0.09)
    female_share: float = 0.56
    n_locations: int = 200
    location_zipf: float = 1.0
    people_per_employer: int = 40
    employer_zipf: float = 1.1
    workplace_listed_adult: float = 0.45
    workplace_listed_minor: float = 0.05
    employees_local: float = 0.85
    people_per_college: int = 300
    college_zipf: float = 0.9
    college_listed_adult: float = 0.5
    people_per_interest: int = 200
    interest_zipf: float = 1.05
    interests_count_probs: tuple[float, float, float, float] = (0.1, 0.2, 0.3, 0.4)
    interest_gender_shuffle: float = 0.3
    relationship_listed: float = 0.75
    #: rows: age bands; columns: single, in a relationship, engaged, married, complicated
    relationship_by_band: tuple[tuple[float, ...], ...] = (
        (0.70, 0.25, 0.01, 0.00, 0.04),
        (0.50, 0.35, 0.05, 0.07, 0.03),
        (0.30, 0.25, 0.07, 0.35, 0.03),
        (0.18, 0.12, 0.03, 0.65, 0.02),
        (0.17, 0.10, 0.02, 0.69, 0.02),
        (0.18, 0.08, 0.02, 0.70, 0.02),
    )
    interested_in_listed: float = 0.6
    same_sex_share: float = 0.035
    religion_listed: float = 0.45
    #: christian, jewish, muslim, other, none — under 30 / 30 and over
    religion_young: tuple[float, ...] = (0.62, 0.02, 0.01, 0.05, 0.30)
    religion_old: tuple[float, ...] = (0.78, 0.02, 0.01, 0.05, 0.14)
    politics_listed: float = 0.35
    #: liberal, moderate, conservative, other — under 30 / 30 and over
    politics_young: tuple[float, ...] = (0.40, 0.30, 0.22, 0.08)
    politics_old: tuple[float, ...] = (0.25, 0.35, 0.35, 0.05)
    default_settings_share: float = 0.35
    #: visibility of each attribute for users who kept the defaults, and for the "cautious"
    #: users who changed their settings (rows of _VISIBILITY)
    default_visibility: tuple[tuple[str, tuple[float, float, float]], ...] = tuple(
        (a, d) for a, d, _ in _VISIBILITY
    )
    cautious_visibility: tuple[tuple[str, tuple[float, float, float]], ...] = tuple(
        (a, c) for a, _, c in _VISIBILITY
    )
    daily_user_share: float = 0.5
    daily_login_p: float = 0.95
    occasional_login_range: tuple[float, float] = (0.05, 0.6)
    topic_prevalence: float = 0.05

    def __post_init__(self) -> None:
        for name in (
            "female_share",
            "workplace_listed_adult",
            "workplace_listed_minor",
            "employees_local",
            "college_listed_adult",
            "interest_gender_shuffle",
            "relationship_listed",
            "interested_in_listed",
            "same_sex_share",
            "religion_listed",
            "politics_listed",
            "default_settings_share",
            "daily_user_share",
            "daily_login_p",
            "topic_prevalence",
        ):
            check_probability(name, getattr(self, name), open_low=False, open_high=False)
        check_int("n_locations", self.n_locations, minimum=1, maximum=65535)
        for name in ("people_per_employer", "people_per_college", "people_per_interest"):
            check_int(name, getattr(self, name), minimum=1)
        for name in (
            "age_band_probs",
            "interests_count_probs",
            "religion_young",
            "religion_old",
            "politics_young",
            "politics_old",
        ):
            _check_dist(name, getattr(self, name))
        if len(self.age_band_probs) != len(AGE_BANDS):
            raise InvalidParameterError("age_band_probs", self.age_band_probs, "6 probabilities")
        for row in self.relationship_by_band:
            _check_dist("relationship_by_band", row)
        for name in ("default_visibility", "cautious_visibility"):
            table = dict(getattr(self, name))
            if set(table) != set(ATTRIBUTES):
                raise InvalidParameterError(name, sorted(table), f"one entry per {ATTRIBUTES}")
            for probs in table.values():
                _check_dist(name, probs)
        lo, hi = self.occasional_login_range
        if not 0 <= lo <= hi <= 1:
            raise InvalidParameterError(
                "occasional_login_range", self.occasional_login_range, "0 <= lo <= hi <= 1"
            )

    def visibility_probs(self, attribute: str) -> tuple[float, float, float]:
        """Population share of (everyone, friends, only-me) for an attribute."""
        d, c = dict(self.default_visibility)[attribute], dict(self.cautious_visibility)[attribute]
        s = self.default_settings_share
        return tuple(s * a + (1 - s) * b for a, b in zip(d, c, strict=True))  # type: ignore[return-value]

    def describe(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _check_dist(name: str, probs: Any) -> None:
    arr = np.asarray(probs, dtype=float)
    if arr.ndim != 1 or arr.size == 0 or (arr < 0).any() or abs(arr.sum() - 1) > 1e-9:
        raise InvalidParameterError(name, probs, "probabilities >= 0 summing to 1")


def _zipf(n: int, s: float) -> npt.NDArray[np.float64]:
    w = 1.0 / np.arange(1, n + 1, dtype=float) ** s
    return w / w.sum()


@dataclass
class Population:
    """Columnar profiles (see the module docstring). ``values[a]`` / ``visibility[a]`` are
    per-user integer columns; ``values['interests']`` has shape (n, 3)."""

    values: dict[str, npt.NDArray[Any]]
    visibility: dict[str, npt.NDArray[np.uint8]]
    login_p: npt.NDArray[np.float64]
    topic: npt.NDArray[np.bool_]
    n_values: dict[str, int]
    config: PopulationConfig | None = None
    _index: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = field(
        default_factory=dict, repr=False
    )
    _dirty: dict[str, set[int]] = field(default_factory=dict, repr=False)

    @property
    def size(self) -> int:
        return int(self.login_p.size)

    # -- inverted index --------------------------------------------------------------------
    def _posting(self, attribute: str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        if attribute not in self._index:
            col = self.values[attribute]
            if col.ndim == 2:
                flat = col.ravel()
                order = np.argsort(flat, kind="stable")
                users = (order // col.shape[1]).astype(np.int64)
                counts = np.bincount(flat, minlength=self.n_values[attribute])
            else:
                users = np.argsort(col, kind="stable").astype(np.int64)
                counts = np.bincount(col, minlength=self.n_values[attribute])
            starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            self._index[attribute] = (users, starts)
        return self._index[attribute]

    def candidate_count(self, attribute: str, codes: npt.NDArray[np.int64]) -> int:
        _, starts = self._posting(attribute)
        return int((starts[codes + 1] - starts[codes]).sum()) + len(self._dirty.get(attribute, ()))

    def candidates(self, attribute: str, codes: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """A superset of the users whose ``attribute`` takes one of ``codes`` (sorted, unique)."""
        users, starts = self._posting(attribute)
        parts = [users[starts[c] : starts[c + 1]] for c in codes]
        dirty = self._dirty.get(attribute)
        if dirty:
            parts.append(np.fromiter(dirty, dtype=np.int64))
        if not parts:
            return np.empty(0, dtype=np.int64)
        cat = np.concatenate(parts)
        if cat.size > 4096:  # a marker array beats hashing/sorting for large audiences
            mark = np.zeros(self.size, dtype=np.bool_)
            mark[cat] = True
            return np.flatnonzero(mark).astype(np.int64)
        return np.unique(np.sort(cat))

    def set_value(
        self, user: int, attribute: str, code: int, visibility: int | None = None
    ) -> None:
        """Change one user's attribute (used to build neighbouring populations)."""
        if attribute == "interests":
            raise InvalidParameterError("attribute", attribute, "a single-valued attribute")
        check_int("code", code, minimum=0, maximum=self.n_values[attribute] - 1)
        self.values[attribute][user] = code
        self._dirty.setdefault(attribute, set()).add(int(user))
        if visibility is not None:
            self.visibility[attribute][user] = check_int(
                "visibility", visibility, minimum=0, maximum=2
            )

    def fingerprint(self) -> str:
        """SHA-256 over every column (the ledger's input fingerprint)."""
        h = hashlib.sha256()
        for a in ATTRIBUTES:
            h.update(a.encode())
            h.update(np.ascontiguousarray(self.values[a]).tobytes())
            h.update(np.ascontiguousarray(self.visibility[a]).tobytes())
        h.update(self.login_p.tobytes())
        h.update(self.topic.tobytes())
        return h.hexdigest()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"profiles": self.size, "attributes": {}}
        for a in ATTRIBUTES:
            col = self.values[a]
            listed = (col > 0).any(axis=1) if col.ndim == 2 else col > 0
            vis = np.bincount(self.visibility[a][listed], minlength=3) / max(1, int(listed.sum()))
            out["attributes"][a] = {
                "values": self.n_values[a] - 1,
                "listed_share": float(listed.mean()) if self.size else 0.0,
                "visibility_of_listed": dict(zip(VISIBILITY_NAMES, vis.tolist(), strict=True)),
            }
        out["daily_login_mean"] = float(self.login_p.mean()) if self.size else 0.0
        out["topic_prevalence"] = float(self.topic.mean()) if self.size else 0.0
        return out


def _cat(gen: np.random.Generator, probs: npt.ArrayLike, size: int) -> npt.NDArray[np.int64]:
    """Categorical draws 0..k-1 by inverse CDF (vectorised)."""
    cdf = np.cumsum(np.asarray(probs, dtype=float))
    cdf[-1] = 1.0
    return np.searchsorted(cdf, gen.random(size), side="right").astype(np.int64)


def _cat_rows(
    gen: np.random.Generator, table: npt.NDArray[np.float64], rows: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """One categorical draw per element, from row ``rows[i]`` of ``table``."""
    cdf = np.cumsum(table, axis=1)
    cdf[:, -1] = 1.0
    u = gen.random(rows.size)
    return (u[:, None] >= cdf[rows]).sum(axis=1).astype(np.int64)


def _interests(
    g: np.random.Generator, cfg: PopulationConfig, n_int: int, gender: npt.NDArray[np.uint8]
) -> npt.NDArray[np.int64]:
    """Up to three interests per profile (0 = none), Zipf-popular, with a male popularity
    that permutes a random share of the ranks."""
    n = gender.size
    pop = _zipf(n_int, cfg.interest_zipf)
    # male popularity: a random share of ranks permuted among themselves
    perm = np.arange(n_int)
    moved = np.flatnonzero(g.random(n_int) < cfg.interest_gender_shuffle)
    perm[moved] = g.permutation(moved)
    pop_m = pop[perm]
    k = _cat(g, cfg.interests_count_probs, n)
    slots = np.zeros((n, 3), dtype=np.int64)
    male = gender == 2
    for j in range(3):
        has = k > j
        draw_f = _cat(g, pop, n) + 1
        draw_m = _cat(g, pop_m, n) + 1
        slots[:, j] = np.where(has, np.where(male, draw_m, draw_f), 0)
    return slots


def _visibility(
    g: np.random.Generator, cfg: PopulationConfig, n: int
) -> dict[str, npt.NDArray[np.uint8]]:
    """Per attribute, who may see it: the default settings or a cautious user's."""
    cautious = g.random(n) >= cfg.default_settings_share
    d_vis, c_vis = dict(cfg.default_visibility), dict(cfg.cautious_visibility)
    visibility: dict[str, npt.NDArray[np.uint8]] = {}
    for a in ATTRIBUTES:
        vd = _cat(g, d_vis[a], n)
        vc = _cat(g, c_vis[a], n)
        visibility[a] = np.where(cautious, vc, vd).astype(np.uint8)
    return visibility


def generate_population(
    n: int, *, rng: RandomSource, config: PopulationConfig | None = None
) -> Population:
    """``n`` synthetic profiles drawn from ``config`` (module docstring), vectorised."""
    n = check_int("population", n, minimum=1, maximum=50_000_000)
    if not isinstance(rng, RandomSource):
        raise InvalidParameterError("rng", rng, "a searchveil.rng.RandomSource")
    cfg = config or PopulationConfig()
    g = rng.numpy_generator()
    values: dict[str, npt.NDArray[Any]] = {}
    n_values: dict[str, int] = {}

    gender = np.where(g.random(n) < cfg.female_share, 1, 2).astype(np.uint8)
    values["gender"], n_values["gender"] = gender, 3

    band = _cat(g, cfg.age_band_probs, n)
    lo = np.array([b[0] for b in AGE_BANDS])
    width = np.array([b[1] - b[0] + 1 for b in AGE_BANDS])
    age = lo[band] + (g.random(n) * width[band]).astype(np.int64)
    values["age"], n_values["age"] = (age - AGE_MIN + 1).astype(np.uint8), AGE_MAX - AGE_MIN + 2
    adult = age >= 18
    young = age < 30

    n_loc = cfg.n_locations
    p_loc = _zipf(n_loc, cfg.location_zipf)
    location = _cat(g, p_loc, n) + 1

    n_emp = max(10, n // cfg.people_per_employer)
    emp_loc = _cat(g, p_loc, n_emp) + 1
    listed_w = g.random(n) < np.where(adult, cfg.workplace_listed_adult, cfg.workplace_listed_minor)
    workplace = np.where(listed_w, _cat(g, _zipf(n_emp, cfg.employer_zipf), n) + 1, 0)
    local = listed_w & (g.random(n) < cfg.employees_local)
    location = np.where(local, emp_loc[np.maximum(workplace, 1) - 1], location)
    values["location"], n_values["location"] = location.astype(np.uint16), n_loc + 1
    values["workplace"], n_values["workplace"] = _small(workplace), n_emp + 1

    n_col = max(10, n // cfg.people_per_college)
    listed_c = adult & (g.random(n) < cfg.college_listed_adult)
    college = np.where(listed_c, _cat(g, _zipf(n_col, cfg.college_zipf), n) + 1, 0)
    values["college"], n_values["college"] = _small(college), n_col + 1

    n_int = max(20, n // cfg.people_per_interest)
    slots = _interests(g, cfg, n_int, gender)
    values["interests"], n_values["interests"] = _small(slots), n_int + 1

    rel = _cat_rows(g, np.asarray(cfg.relationship_by_band, dtype=float), band) + 1
    rel = np.where(g.random(n) < cfg.relationship_listed, rel, 0)
    values["relationship"], n_values["relationship"] = rel.astype(np.uint8), 6

    same = g.random(n) < cfg.same_sex_share
    # 1 = interested in men, 2 = in women: a woman (1) attracted to men is opposite-sex
    opposite = np.where(gender == 1, 1, 2)
    interested = np.where(same, 3 - opposite, opposite)
    interested = np.where(g.random(n) < cfg.interested_in_listed, interested, 0)
    values["interested_in"], n_values["interested_in"] = interested.astype(np.uint8), 3

    table = np.asarray([cfg.religion_old, cfg.religion_young], dtype=float)
    rel_g = _cat_rows(g, table, young.astype(np.int64)) + 1
    rel_g = np.where(g.random(n) < cfg.religion_listed, rel_g, 0)
    values["religion"], n_values["religion"] = rel_g.astype(np.uint8), 6

    table = np.asarray([cfg.politics_old, cfg.politics_young], dtype=float)
    pol = _cat_rows(g, table, young.astype(np.int64)) + 1
    pol = np.where(g.random(n) < cfg.politics_listed, pol, 0)
    values["politics"], n_values["politics"] = pol.astype(np.uint8), 5

    visibility = _visibility(g, cfg, n)

    lo_p, hi_p = cfg.occasional_login_range
    daily = g.random(n) < cfg.daily_user_share
    login_p = np.where(daily, cfg.daily_login_p, lo_p + (hi_p - lo_p) * g.random(n))
    topic = g.random(n) < cfg.topic_prevalence
    return Population(values, visibility, login_p.astype(np.float64), topic, n_values, cfg)


def _small(x: npt.NDArray[np.int64]) -> npt.NDArray[Any]:
    if int(x.max(initial=0)) < 2**16:
        return x.astype(np.uint16)
    return x.astype(np.uint32)
