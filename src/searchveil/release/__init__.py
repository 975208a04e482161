"""The release algorithms, one module per paper: Korolova's Release-Data (``korolova``),
ZEALOUS (``zealous``) and k-query anonymity (``kanonymity``). Each returns a
:class:`HistogramRelease` (tables, report, ledger); :func:`write_release` writes it atomically."""

from __future__ import annotations

from searchveil.release.histogram import HistogramRelease, write_release
from searchveil.release.kanonymity import KAnonParams, release_kanon
from searchveil.release.korolova import KorolovaParams, KorolovaRelease, read_serp, release_korolova
from searchveil.release.zealous import ZealousParams, release_zealous

__all__ = [
    "HistogramRelease",
    "write_release",
    "KorolovaParams",
    "KorolovaRelease",
    "release_korolova",
    "read_serp",
    "ZealousParams",
    "release_zealous",
    "KAnonParams",
    "release_kanon",
]
