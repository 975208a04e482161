"""The fitted model of the synthetic-log generator (:class:`SynthModel`, JSON) and the modes
shared by fit, generate and the files (see :mod:`searchveil.synth`)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

#: the ``kind`` of a saved model's JSON (searchveil.io.marks.MODEL recognises it)
MODEL_KIND = "searchveil-synth-model"


class StringMode(StrEnum):
    """How the synthetic log spells queries and URLs: the calibration log's own words
    (``real``) or opaque tokens (``opaque``)."""

    REAL = "real"
    OPAQUE = "opaque"


class OutputFormat(StrEnum):
    """The file a synthetic log is written as (``auto``: from the file name)."""

    AUTO = "auto"
    TSV = "tsv"
    TSV_GZ = "tsv.gz"
    PARQUET = "parquet"


MAX_URL_RANK = 10
HEAD_MASS_MAX = 0.5


@dataclass(frozen=True)
class SynthModel:
    """The fitted statistics (see the module docstring). ``to_json``/``from_json`` round-trip."""

    source: dict[str, Any]
    sample_users: int
    events_per_user: list[int]
    repeat_rate: float
    tail_rate: float
    head_zipf_s: float
    head_vocab: int
    heaps_beta: float
    clicks_per_event: list[float]
    url_rank_probs: list[float]
    gap_quantiles: list[float]
    time_start: int | None
    time_end: int | None
    has_rank: bool
    words: list[str]
    word_probs: list[float]
    query_len_probs: list[float]
    head_queries: list[str] = field(default_factory=list)
    head_probs: list[float] = field(default_factory=list)
    head_alpha: float = 1.0
    head_gamma: float = 1.0
    head_join: float = 0.0
    head_join_exposure: float = 1.0
    head_mass_max: float = 0.9
    #: the exact shape histograms of the calibration log (:mod:`searchveil.synth.shape`):
    #: ``hours``, ``days`` with ``first_day`` (days since 1970-01-01), ``gaps``, ``sessions``;
    #: empty in models saved before the layout (then derived from ``gap_quantiles``)
    shape: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The model as JSON, marked ``"kind": "searchveil-synth-model"`` (what lets
        ``synth --save-model --overwrite`` replace a model it saved, and nothing else)."""
        return json.dumps({"kind": MODEL_KIND, **asdict(self)}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> SynthModel:
        data = json.loads(text)
        if isinstance(data, dict):
            data.pop("kind", None)
        return cls(**data)

    def summary(self) -> dict[str, Any]:
        """The fitted scalars (no strings) for reports and ``--json``."""
        epu = np.asarray(self.events_per_user, dtype=float)
        cpe = np.asarray(self.clicks_per_event)
        return {
            "sample_users": self.sample_users,
            "events_per_user_mean": float(epu.mean()) if epu.size else 0.0,
            "events_per_user_median": float(np.median(epu)) if epu.size else 0.0,
            "repeat_rate": self.repeat_rate,
            "tail_rate": self.tail_rate,
            "head_zipf_s": self.head_zipf_s,
            "head_vocab": self.head_vocab,
            "heaps_beta": self.heaps_beta,
            "pinned_head_queries": len(self.head_probs),
            "pinned_head_mass": float(sum(self.head_probs)),
            "head_alpha": self.head_alpha,
            "head_gamma": self.head_gamma,
            "clicks_per_event_mean": float((np.arange(cpe.size) * cpe).sum()),
            "no_click_share": float(cpe[0]) if cpe.size else 0.0,
            "url_rank_probs": [round(p, 4) for p in self.url_rank_probs],
            "median_gap_seconds": float(self.gap_quantiles[len(self.gap_quantiles) // 2])
            if self.gap_quantiles
            else None,
            "has_rank": self.has_rank,
            "vocabulary_words": len(self.words),
            "period_days": len(self.shape.get("days", [])),
            "mean_session_events": _mean_session(self.shape.get("sessions", [])),
        }


def _mean_session(counts: list[int]) -> float | None:
    c = np.asarray(counts, dtype=float)
    return float((np.arange(1, c.size + 1) * c).sum() / c.sum()) if c.sum() > 0 else None


def expected_rows(model: SynthModel, users: int) -> int:
    """The expected number of rows for ``users`` users without ``rows`` rescaling."""
    epu = np.asarray(model.events_per_user, dtype=float)
    cpe = np.asarray(model.clicks_per_event, dtype=float)
    rpe = float(cpe[0] + (np.arange(cpe.size) * cpe)[1:].sum())
    return int(math.ceil(users * epu.mean() * rpe))
