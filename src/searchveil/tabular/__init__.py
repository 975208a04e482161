"""Tabular release over generalization hierarchies (Fouad, Elbassioni & Bertino, TKDE 2014):
ARX-format inputs, the threshold and aggregate risk–utility models, the differentially private
sampler with an explicit δ, and the k-anonymity and SafePub baselines. See docs/tabular.md and
docs/privacy/tabular.md."""

from __future__ import annotations

from searchveil.tabular.api import Model, ModelParams, load, run_model, table_stats, write_release

__all__ = ["Model", "ModelParams", "load", "run_model", "table_stats", "write_release"]
