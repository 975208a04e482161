"""Korolova's Release-Data (PhD thesis, Stanford 2012, ch.4), in one package:
:mod:`~searchveil.release.korolova.params` (the parameters, their privacy map and the
contribution bounding they define), :mod:`~searchveil.release.korolova.accounting` (the
paper's formulas and the threshold solver) and :mod:`~searchveil.release.korolova.release`
(Select-Queries, the noisy counts, the URLs, the ledger).
"""

from searchveil.release.histogram import write_release  # (cli/demo.py's import line)
from searchveil.release.korolova.accounting import (
    korolova_paper_privacy,
    korolova_paper_selection,
    korolova_solve_improved,
    korolova_solve_paper,
)
from searchveil.release.korolova.params import (
    KorolovaParams,
    default_split,
    korolova_counts,
    resolve_url_selection,
    split_parts,
)
from searchveil.release.korolova.release import (
    KorolovaRelease,
    Serp,
    exposure_from_counts,
    load_serp,
    read_serp,
    release_korolova,
    release_korolova_counts,
    single_user_counts,
)

__all__ = [
    "KorolovaParams",
    "KorolovaRelease",
    "release_korolova",
    "release_korolova_counts",
    "korolova_counts",
    "single_user_counts",
    "exposure_from_counts",
    "read_serp",
    "load_serp",
    "Serp",
    "resolve_url_selection",
    "default_split",
    "split_parts",
    "write_release",
    "korolova_paper_privacy",
    "korolova_paper_selection",
    "korolova_solve_improved",
    "korolova_solve_paper",
]
