"""Input and output: log readers, release writers, the public ledger and the private
provenance record."""

from searchveil.io.ledger import ReleaseWriter, build_ledger, build_provenance
from searchveil.io.readers import ColumnMapping, ReaderOptions, read_log, scan_log

__all__ = [
    "ColumnMapping",
    "ReaderOptions",
    "ReleaseWriter",
    "build_ledger",
    "build_provenance",
    "read_log",
    "scan_log",
]
