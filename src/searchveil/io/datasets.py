"""Where the project's reference data sets are found (they are never downloaded).

The experiments that reproduce the papers' tables read the shared AOL sample. It is not part of
the package (AOL: non-commercial research use only); it lives in a ``shared/data`` directory —
``$SEARCHVEIL_SHARED_DATA`` when set, else ``../shared/data`` beside a source checkout of the
repository. Callers that have the file elsewhere pass its path explicitly.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["SHARED_DATA_ENV", "shared_data_dir", "default_log_path"]

SHARED_DATA_ENV = "SEARCHVEIL_SHARED_DATA"


def shared_data_dir() -> Path:
    """``$SEARCHVEIL_SHARED_DATA``, else ``shared/data`` beside the source checkout."""
    env = os.environ.get(SHARED_DATA_ENV)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[4] / "shared" / "data"


def default_log_path() -> Path:
    """The shared AOL sample of the 1,000 most active users (may not exist: callers check)."""
    return shared_data_dir() / "aol" / "aol-top1000-users.tsv.gz"
