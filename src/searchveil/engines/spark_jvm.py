"""The local Spark JVM's start: its compiler and, once prepared, a class-data archive.

With a ``local`` master the driver's JVM also runs the tasks. Since the tables move as Arrow
blobs (:mod:`searchveil.engines.spark_blobs`) those tasks do little per-row work, and what a
cold release pays in the JVM is its start: loading Spark's classes (≈ 4 s on 2 cores), the
first job's (≈ 3 s), and compiling them. Two settings answer it (docs/spark-perf.md, "Cold"):

* the client compiler only (``-XX:TieredStopAtLevel=1``): the optimising one cost ~10 CPU s
  of a cold release and bought nothing once the JVM only moves blobs;
* a **class-data archive** (JDK CDS, ``-XX:SharedArchiveFile``), written once by ``searchveil
  spark prepare`` (:func:`searchveil.pipelines.spark_setup.prepare_archive`): the classes a
  release loads, dumped by a JVM that ran small releases on the bundled sample; later JVMs
  map it instead of loading and
  verifying the jars' classes — the session starts in about half the time. It lives in the
  user's cache (``$SEARCHVEIL_CACHE_DIR``, else ``$XDG_CACHE_HOME/searchveil``, else
  ``~/.cache/searchveil``), named by the Java and PySpark versions and the jars, so a changed
  installation never maps a stale one (and ``-Xshare:auto`` ignores an unusable one);
  ``SEARCHVEIL_SPARK_CDS=0`` turns it off. It holds Spark's classes only — no data.

``--spark-conf spark.driver.extraJavaOptions=…`` replaces both.

The executors' Python starts from one daemon; :func:`daemon_module` names this installation's
(:mod:`_searchveil_spark_daemon`) when Spark's zip of pyspark is the installed package's own
copy, so that the daemon and its workers import pyspark's compiled files instead of compiling
the zip's sources in every process (the first Python task 0.75–1.2 s → 0.2–0.3 s to start).
``SEARCHVEIL_SPARK_DAEMON=0`` or ``--spark-conf spark.python.daemon.module=…`` keeps Spark's.

A local master's Python workers keep the memory they free (:func:`worker_allocators`): the
three allocators in a task's process — Polars' jemalloc, pyarrow's mimalloc, glibc's malloc
under numpy and Python's bytes — return freed pages to the system soon after by default
(Polars' build: within 0.5–1 s; pyarrow's: 1 s; glibc: a large block at once), and the next
task's buffers then fault them in again, a page at a time (on this 2-core VM up to ≈ 15 µs
of system time a fault). Kept, a warm probe-reweight-2r release's Python processes use 28–31
CPU s instead of 36–42 (docs/spark-perf.md, "The allocator round"). A cluster's executors
keep the allocators' defaults: their memory is a container's, sized by its settings."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

__all__ = [
    "CLIENT_COMPILER",
    "DAEMON_MODULE",
    "WORKER_ALLOCATORS",
    "archive_path",
    "daemon_module",
    "driver_java_options",
    "worker_allocators",
]

CLIENT_COMPILER = "-XX:TieredStopAtLevel=1"
DAEMON_MODULE = "_searchveil_spark_daemon"

#: a local master's Python workers' allocators keep their freed pages for the next task: each
#: worker's peak memory rises (≈ 1.2 → 1.8 GB on the 20M-row log), the pages are not faulted
#: in again (warm probe-reweight-2r −4 to −6 s of 25–27 on 2 cores)
_JEMALLOC = "_RJEM_MALLOC_CONF"
WORKER_ALLOCATORS = {
    # Polars' jemalloc: never purge dirty pages, one arena for the task's threads
    _JEMALLOC: "dirty_decay_ms:-1,narenas:1",
    # pyarrow's mimalloc: never purge
    "MIMALLOC_PURGE_DELAY": "-1",
    # glibc: blocks up to 32 MB from the heap, not from a mapping of their own; the heap's top
    # kept (up to 4 GB)
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(4 << 30),
}


def _cache_dir() -> Path:
    if os.environ.get("SEARCHVEIL_CACHE_DIR"):
        return Path(os.environ["SEARCHVEIL_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "searchveil"


def _java_version() -> str:
    """The JVM Spark will start: its installation's ``release`` file (no JVM started), else
    the first line of ``java -version``."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if java is None:
        return "unknown"
    release = Path(os.path.realpath(java)).parent.parent / "release"
    try:
        return f"{os.path.realpath(java)}\n{release.read_text()}"
    except OSError:
        pass
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (out.stderr or out.stdout).strip()


def archive_path() -> Path:
    """Where this installation's class-data archive is (or would be) kept."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    h = hashlib.sha256(f"{_java_version()}\n{pyspark.__version__}\n".encode())
    for j in sorted(jars.glob("*.jar")) if jars.is_dir() else []:
        h.update(f"{j.name}\t{j.stat().st_size}\n".encode())
    return _cache_dir() / f"spark-{pyspark.__version__}-{h.hexdigest()[:16]}.jsa"


def driver_java_options() -> str:
    """The local driver JVM's options: the client compiler, and the class-data archive when
    one was prepared (and ``SEARCHVEIL_SPARK_CDS`` is not 0)."""
    import pyspark

    opts = [CLIENT_COMPILER]
    prepared = any(_cache_dir().glob(f"spark-{pyspark.__version__}-*.jsa"))
    if prepared and os.environ.get("SEARCHVEIL_SPARK_CDS", "1") != "0":
        path = archive_path()
        if path.is_file():
            opts += [f"-XX:SharedArchiveFile={path}", "-Xshare:auto"]
    return " ".join(opts)


def _spark_home() -> str | None:
    """The ``$SPARK_HOME`` the local JVM will run with: the environment's, else the one PySpark
    finds (for a pip install, the package's own directory)."""
    if os.environ.get("SPARK_HOME"):
        return os.environ["SPARK_HOME"]
    try:
        from pyspark.find_spark_home import _find_spark_home

        return str(_find_spark_home())
    except (ImportError, SystemExit, OSError):  # it exits when it finds none
        return None


def daemon_module() -> str | None:
    """The Python daemon module for a local master's executors: :data:`DAEMON_MODULE` when
    ``$SPARK_HOME`` is the installed pyspark package (its ``python/lib/pyspark.zip`` is then a
    copy of the same files), the executors run this Python and can import the module, and
    ``SEARCHVEIL_SPARK_DAEMON`` is not 0; else None (Spark's own daemon)."""
    if os.environ.get("SEARCHVEIL_SPARK_DAEMON", "1") == "0":
        return None
    import pyspark

    home = _spark_home()
    package = os.path.dirname(os.path.realpath(pyspark.__file__))
    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    if (
        home is None
        or os.path.realpath(home) != package
        or not os.path.isfile(os.path.join(package, "python", "lib", "pyspark.zip"))
        or os.path.realpath(shutil.which(python) or python) != os.path.realpath(sys.executable)
        or find_spec(DAEMON_MODULE) is None
    ):
        return None
    return DAEMON_MODULE


def worker_allocators() -> dict[str, str]:
    """The environment of a local master's Python workers that makes their allocators keep
    freed pages (:data:`WORKER_ALLOCATORS`); nothing when ``SEARCHVEIL_SPARK_ALLOCATORS`` is 0.

    A variable the driver's environment sets already is the user's, and the workers inherit
    it — except jemalloc's: Polars sets ``_RJEM_MALLOC_CONF`` in every process that imports
    it (its own decay times, then the value it found). The workers get the driver's value with
    searchveil's options after it: jemalloc takes an option's last value, so those two are
    searchveil's and any other option the value holds (``thp``, say) stays the user's."""
    if os.environ.get("SEARCHVEIL_SPARK_ALLOCATORS", "1") == "0":
        return {}
    env = {k: v for k, v in WORKER_ALLOCATORS.items() if k not in os.environ}
    if mine := os.environ.get(_JEMALLOC):
        env[_JEMALLOC] = f"{mine},{WORKER_ALLOCATORS[_JEMALLOC]}"
    return env
