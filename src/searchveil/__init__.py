"""searchveil: publish web search logs with rigorous privacy guarantees.

The public API: read a log (:func:`read_log`), derive items and histograms
(:mod:`searchveil.model`), bound contributions (:mod:`searchveil.bounding`), and release with a
mechanism from :mod:`searchveil.release` — or do all of it from a file in one call
(:func:`release_file`, what the ``release`` commands wrap); randomness comes from :func:`make_rng`.
"""

from searchveil.errors import (
    BudgetExceededError,
    InputFormatError,
    InternalError,
    InvalidParameterError,
    OutputExistsError,
    SearchveilError,
)
from searchveil.io.readers import ColumnMapping, read_log
from searchveil.model import SearchLog
from searchveil.release import (
    KAnonParams,
    KorolovaParams,
    ZealousParams,
    release_kanon,
    release_korolova,
    release_zealous,
    write_release,
)
from searchveil.release.run import release_file, release_table
from searchveil.rng import SecureRandom, SeededRandom, make_rng
from searchveil.version import __version__

__all__ = [
    "__version__",
    "BudgetExceededError",
    "ColumnMapping",
    "InputFormatError",
    "InternalError",
    "InvalidParameterError",
    "KAnonParams",
    "KorolovaParams",
    "OutputExistsError",
    "SearchLog",
    "SearchveilError",
    "SecureRandom",
    "SeededRandom",
    "ZealousParams",
    "make_rng",
    "read_log",
    "release_file",
    "release_kanon",
    "release_korolova",
    "release_table",
    "release_zealous",
    "write_release",
]
