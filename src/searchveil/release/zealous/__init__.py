"""ZEALOUS (Götz et al., TKDE 2012, §4), in one package:
:mod:`~searchveil.release.zealous.params` (the parameters, their privacy map and the
contribution bounding they define), :mod:`~searchveil.release.zealous.accounting` (Theorems 2–3,
Proposition 4) and :mod:`~searchveil.release.zealous.release` (the two thresholds, the noisy
counts, the ledger).
"""

from searchveil.release.zealous.params import ZealousParams, zealous_counts
from searchveil.release.zealous.release import PART_COLUMNS, release_zealous, release_zealous_counts

__all__ = [
    "ZealousParams",
    "release_zealous",
    "release_zealous_counts",
    "zealous_counts",
    "PART_COLUMNS",
]
