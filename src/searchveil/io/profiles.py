"""Named input profiles: the reader settings of the public logs a researcher meets.

A profile is a plain mapping of :class:`~searchveil.io.readers.ReaderOptions` field values;
options the user gives explicitly override the profile's (``--profile sogouq --encoding gbk``).
Column names of headerless layouts are 1-based positions as ``cut`` counts them.

- ``aol``: the AOL 2006 release (tab-separated with header ``AnonID Query QueryTime ItemRank
  ClickURL``; the default layout).
- ``sogouq``: the public SogouQ sample: GBK bytes (read as GB18030, a strict superset), no
  header, tab-separated ``HH:MM:SS  userid  [query]  rank click  url``; the time of day has no
  date (pass ``--date YYYY-MM-DD`` to place the file on a day; 1970-01-01 otherwise), the query
  is in square brackets and the rank and click order share one space-separated column.
- ``msnbc``: the MSNBC.com anonymous web data sequences (one line per user).
- ``trec-session``: TREC Session Track XML (2011-2014): see ``docs/model.md``.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

__all__ = ["PROFILES", "PROFILE_NAMES"]

PROFILES: MappingProxyType[str, MappingProxyType[str, Any]] = MappingProxyType(
    {
        "aol": MappingProxyType({"fmt": "aol"}),
        "sogouq": MappingProxyType(
            {
                "fmt": "csv",
                "has_header": False,
                "delimiter": "\t",
                "encoding": "gb18030",
                "user": "2",
                "query": "3",
                "time": "1",
                "url": "5",
                "rank": None,
                "rank_click": "4",
                "time_format": "%H:%M:%S",
                "strip_brackets": True,
            }
        ),
        "msnbc": MappingProxyType({"fmt": "msnbc"}),
        "trec-session": MappingProxyType({"fmt": "trec-session"}),
    }
)
PROFILE_NAMES = tuple(PROFILES)
