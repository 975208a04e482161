"""The private input record of a Spark catalog table: which version of it a release read."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from searchveil.engines.contract import TableSource

__all__ = ["table_snapshot"]


def table_snapshot(spark: Any, table: TableSource, df: Any) -> dict[str, Any]:
    """The private input record of a table: its name and, where the catalog keeps one, the
    version read — a Delta table's version (``DESCRIBE HISTORY``), an Iceberg table's snapshot
    id; else, for a table of files, a SHA-256 of its files' paths, sizes and modification
    times (local files; the paths alone elsewhere)."""
    rec: dict[str, Any] = {
        "table": table.name,
        "format": "spark table",
        "columns": dict(table.columns) or None,
    }
    if table.name is not None:
        for query, key in (
            (f"DESCRIBE HISTORY {table.name} LIMIT 1", "version"),
            (
                f"SELECT snapshot_id FROM {table.name}.snapshots "
                "ORDER BY committed_at DESC LIMIT 1",
                "snapshot_id",
            ),
        ):
            try:
                row = spark.sql(query).collect()
            except Exception:  # noqa: BLE001, S112 - not a Delta / Iceberg table
                continue
            if row:
                return rec | {
                    "snapshot": {
                        "kind": "delta" if key == "version" else "iceberg",
                        key: row[0][key],
                    }
                }
    try:
        files = sorted(df.inputFiles())
    except Exception:  # noqa: BLE001 - not a table of files
        return rec | {"snapshot": None}
    h = hashlib.sha256()
    for f in files:
        local = f.removeprefix("file:")
        st = os.stat(local) if os.path.exists(local) else None
        h.update(f"{f}\t{st.st_size if st else ''}\t{st.st_mtime_ns if st else ''}\n".encode())
    return rec | {"snapshot": {"kind": "files", "files": len(files), "sha256": h.hexdigest()}}
