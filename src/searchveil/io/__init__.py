"""Input and output: log readers, release writers and the privacy ledger."""

from searchveil.io.ledger import ReleaseWriter, build_ledger
from searchveil.io.readers import ColumnMapping, ReaderOptions, read_log, scan_log

__all__ = [
    "ColumnMapping",
    "ReaderOptions",
    "ReleaseWriter",
    "build_ledger",
    "read_log",
    "scan_log",
]
