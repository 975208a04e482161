"""The Python daemon of a local Spark master's executors (``spark.python.daemon.module``).

Spark starts its Python workers from one daemon, ``python -m pyspark.daemon``, with
``$SPARK_HOME/python/lib/pyspark.zip`` first on ``PYTHONPATH``. For the pyspark that pip
installs, ``$SPARK_HOME`` is the package's own directory and that zip holds the same package
as sources only: every daemon and every worker compiles pyspark's modules again (0.6 s a
process here, against 0.1 s from the installed package's compiled files). The driver names
this module only when the zip is that package's own copy
(:func:`searchveil.engines.spark_jvm.daemon_module`): it moves Spark's zips behind the
installed packages and runs pyspark's own daemon, unchanged.

It is a top-level module, not part of :mod:`searchveil`, on purpose: importing that package
would import Polars and pyarrow, which start threads, in a process that then forks (pyspark's
daemon imports nothing of that kind before it forks, and neither does this module).
"""

from __future__ import annotations

import os
import sys


def installed_first(path: list[str], spark_home: str | None) -> list[str]:
    """``path`` with the entries under ``$SPARK_HOME/python/lib`` moved to its end, in order
    (they stay importable if the installed packages lack something)."""
    if not spark_home:
        return list(path)
    lib = os.path.join(os.path.abspath(spark_home), "python", "lib") + os.sep
    spark = [p for p in path if os.path.abspath(p).startswith(lib)]
    return [p for p in path if p not in spark] + spark


def main() -> None:
    sys.path[:] = installed_first(sys.path, os.environ.get("SPARK_HOME"))
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
