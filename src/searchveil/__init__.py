"""searchveil: publish web search logs with rigorous privacy guarantees.

The public API (this module's ``__all__`` is the one declared surface; tests/test_api.py holds
it): read a log (:func:`read_log`), derive items and histograms (:mod:`searchveil.model`), bound
contributions (:mod:`searchveil.bounding`), and release with a mechanism from
:mod:`searchveil.release` — or do all of it from a file in one call (:func:`release_file`, what
the ``release`` commands wrap); randomness comes from :func:`make_rng`. Every release states its
cost (:class:`PrivacyCost`: ε, δ, their split, the :class:`Relation` it protects); a
:class:`Session` draws many releases from one :class:`Budget` — in memory or a dataset's budget
file (``searchveil budget init``).
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
from searchveil.mechanisms.accounting import Budget
from searchveil.mechanisms.budget import PrivacyCost, Relation
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
from searchveil.release.selection import SelectionParams
from searchveil.rng import SecureRandom, SeededRandom, make_rng
from searchveil.session import Session
from searchveil.version import __version__

__all__ = [
    "__version__",
    "Budget",
    "BudgetExceededError",
    "ColumnMapping",
    "InputFormatError",
    "InternalError",
    "InvalidParameterError",
    "KAnonParams",
    "KorolovaParams",
    "OutputExistsError",
    "PrivacyCost",
    "Relation",
    "SearchLog",
    "SearchveilError",
    "SecureRandom",
    "SeededRandom",
    "SelectionParams",
    "Session",
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
