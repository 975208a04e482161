"""Setting up the Spark engine on a machine: the local JVM's class-data archive
(:mod:`searchveil.engines.spark_jvm`; ``searchveil spark prepare``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from searchveil.engines.spark_jvm import CLIENT_COMPILER, archive_path
from searchveil.errors import ResourceError

__all__ = ["prepare_archive"]

_SAMPLE = Path(__file__).resolve().parent.parent / "data" / "aol-gayo-avello-215-users.tsv"

#: the child process: the releases run by the command line in one interpreter, so one JVM
#: loads every class they need and dumps them at exit
_CHILD = """
import json, sys
from searchveil.cli import main
for argv in json.loads(sys.argv[1]):
    sys.argv = ["searchveil", *argv]
    try:
        main()
        rc = 0
    except SystemExit as exc:
        rc = exc.code
    if rc not in (0, None):
        raise SystemExit(f"the release that loads Spark's classes failed ({rc})")
"""


def _releases(tmp: Path, work: Path) -> list[list[str]]:
    """A Korolova release and a selection release of the bundled sample on Spark's executors
    (their classes too), the JVM told to dump its classes to ``tmp`` at exit."""
    java = f"spark.driver.extraJavaOptions={CLIENT_COMPILER} -XX:ArchiveClassesAtExit={tmp}"
    out = []
    for i, extra in enumerate(
        (
            ["--max-queries", "5", "--max-clicks", "1"],
            ["--selection", "probe-reweight-2r", "--max-clicks", "1"],
        )
    ):
        out.append(
            [
                "release",
                "korolova",
                str(_SAMPLE),
                "--epsilon",
                "2.302585",
                "--delta",
                "1e-4",
                "--max-users",
                "1000",
                *extra,
                "--engine",
                "spark",
                "--spark-master",
                "local[2]",
                "--spark-conf",
                java,
                "--seed",
                "1",
                "--out",
                str(work / f"r{i}"),
                "--json",
            ]
        )
    return out


def prepare_archive(*, force: bool = False, timeout: float = 600.0) -> dict[str, Any]:
    """Write this installation's class-data archive (:func:`~searchveil.engines.spark_jvm.
    archive_path`) if it is missing (``force``: write it again): a child process runs two
    small releases on Spark whose JVM dumps the classes it loaded at exit, into a temporary
    file renamed into place (:class:`~searchveil.errors.ResourceError` when no archive
    came). Returns the path, its size, whether it was written, and the
    seconds it took."""
    path = archive_path()
    if path.is_file() and not force:
        return {
            "archive": str(path),
            "bytes": path.stat().st_size,
            "written": False,
            "seconds": 0.0,
        }
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    env = dict(os.environ, SEARCHVEIL_SPARK_CDS="0", SEARCHVEIL_SPARK_LOCAL_ROWS="0")
    # the dump and the two sample releases go to a temporary directory of their own beside
    # the archive (Python removes it, whatever happens); the archive is renamed into place
    with tempfile.TemporaryDirectory(prefix=".spark-prepare-", dir=path.parent) as d:
        work = Path(d)
        tmp = work / path.name
        argv = [sys.executable, "-c", _CHILD, json.dumps(_releases(tmp, work))]
        proc = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if proc.returncode != 0 or not tmp.is_file():
            tail = (proc.stderr or "").strip().splitlines()[-3:]
            raise ResourceError("the Spark JVM wrote no class-data archive: " + " | ".join(tail))
        os.replace(tmp, path)
    return {
        "archive": str(path),
        "bytes": path.stat().st_size,
        "written": True,
        "seconds": round(time.perf_counter() - t0, 1),
    }
