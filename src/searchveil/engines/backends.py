"""The engines by name: :func:`make_engine` (``polars`` | ``spark``).

PySpark is optional: :func:`make_engine` is the one place that imports
:mod:`searchveil.engines.spark` (and with it pyspark), when ``spark`` is asked for. Which
release runs on an engine, and how, is decided in the release layer
(:mod:`searchveil.release.run`); the engines only receive a
:class:`~searchveil.engines.contract.BoundingPlan`.
"""

from __future__ import annotations

from enum import StrEnum

from searchveil.engines.base import Engine
from searchveil.engines.polars import PolarsEngine
from searchveil.errors import InvalidParameterError
from searchveil.io.files import check_fingerprint

__all__ = ["EngineName", "make_engine"]


class EngineName(StrEnum):
    """Where a release runs: in memory (every line validated) or on a dataframe engine."""

    MEMORY = "memory"
    POLARS = "polars"
    SPARK = "spark"


def make_engine(
    name: str,
    *,
    spark_master: str = "local[*]",
    normalize: bool = True,
    fingerprint: str = "full",
    spark_remote: str | None = None,
    spark_conf: tuple[tuple[str, str], ...] = (),
) -> Engine:
    """The engine ``name``; for Spark, on ``spark_master`` (or the Spark Connect server
    ``spark_remote``) with the ``spark_conf`` settings."""
    check_fingerprint(fingerprint)
    if name == EngineName.POLARS:
        return PolarsEngine(normalize=normalize, fingerprint=fingerprint)
    if name == EngineName.SPARK:
        try:
            # the one import of the optional engine (pyspark is imported by that module)
            from searchveil.engines.spark import SparkEngine
        except ImportError as exc:
            raise InvalidParameterError(
                "engine", name, f"polars | memory (PySpark is not installed: {exc})"
            ) from None
        return SparkEngine(master=spark_master, normalize=normalize, fingerprint=fingerprint,
                           remote=spark_remote, conf=spark_conf)  # fmt: skip
    raise InvalidParameterError("engine", name, "polars | spark (memory runs without an engine)")
