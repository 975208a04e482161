"""searchveil: publish web search logs with rigorous privacy guarantees.

The public API: read a log (:func:`read_log`), derive items and histograms
(:mod:`searchveil.model`), bound contributions (:mod:`searchveil.bounding`), and release with a
mechanism from :mod:`searchveil.release`; randomness comes from :func:`make_rng`.
"""

__version__ = "0.1.0"

from searchveil.errors import (  # noqa: E402
    BudgetExceededError,
    InputFormatError,
    InternalError,
    InvalidParameterError,
    OutputExistsError,
    SearchveilError,
)
from searchveil.io.readers import ColumnMapping, read_log  # noqa: E402
from searchveil.model import SearchLog  # noqa: E402
from searchveil.release import (  # noqa: E402
    KAnonParams,
    KorolovaParams,
    ZealousParams,
    release_kanon,
    release_korolova,
    release_zealous,
    write_release,
)
from searchveil.rng import SecureRandom, SeededRandom, make_rng  # noqa: E402

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
    "release_kanon",
    "release_korolova",
    "release_zealous",
    "write_release",
]
