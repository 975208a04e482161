"""What a failed Spark job says to the user: its cause, named, with the setting that helps.

Spark wraps every failure of a job (a task's Python exception, a JVM error, a lost executor,
a cap on the driver) in a Py4J or Spark Connect exception whose text carries the cause. The
engine classifies that text once (:func:`spark_failure`):

* a task's own :class:`~searchveil.errors.InputFormatError` (a line the reader refuses) keeps
  its message; Spark's parse and decode failures say the file could not be read — and only
  they do;
* the driver's result-size cap (``spark.driver.maxResultSize``), a JVM out of memory (or a
  driver JVM that stopped answering), a lost executor or a Python worker that died become a
  :class:`~searchveil.errors.ResourceError` naming the cause and the setting
  (``SEARCHVEIL_SPARK_MAX_RESULT_SIZE``, ``SEARCHVEIL_SPARK_DRIVER_MEMORY``, ``--spark-conf
  spark.executor.memory=…``, ``SEARCHVEIL_SPARK_ALLOCATORS=0``);
* anything else is reported as a failed Spark job with Spark's first line (exit 2).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

from searchveil.errors import (
    InputFormatError,
    InvalidParameterError,
    ResourceError,
    SearchveilError,
)

__all__ = ["SPARK_UNREADABLE", "spark_errors", "spark_failure"]

SPARK_UNREADABLE = (
    "Spark could not read it as the AOL layout (a row with the wrong number of fields, or a "
    "damaged .gz or Parquet file?); `searchveil stats` on it names the first bad line "
    "(SEARCHVEIL_DEBUG=1 shows Spark's own message)"
)

#: Spark's own words for a file it could not parse or decode
_PARSE = re.compile(
    r"Malformed|FAILFAST|MALFORMED_RECORD|ParquetDecodingException|not a Parquet file|"
    r"CANNOT_READ_FILE|FAILED_READ_FILE|Could not read footer|magic number|"
    r"EOFException|Unexpected end of input|incorrect header check|ZipException|"
    r"ArrowInvalid: (?:Parquet|Could not open Parquet)|Corrupt",
)
_RESULT_SIZE = re.compile(r"maxResultSize|Total size of serialized results")
_OOM = re.compile(r"OutOfMemoryError|Java heap space|GC overhead limit|"
                  r"Not enough memory to build and broadcast")  # fmt: skip
_LOST = re.compile(
    r"ExecutorLostFailure|Lost executor|executor lost|worker lost|"
    r"Python worker exited unexpectedly|crashed|exit code 137|killed by|Container killed|"
    r"MemoryError",
)
#: the driver's JVM is gone (killed or dead of an OutOfMemoryError: Python only sees the socket)
_JVM_GONE = re.compile(r"Connection refused|Py4JNetworkError|Answer from Java side is empty|"
                       r"Error while (?:sending|receiving)|SparkContext was shut down")  # fmt: skip
_TASK_INPUT_ERROR = re.compile(r"searchveil\.errors\.InputFormatError: (.+)")


def _text(exc: BaseException) -> str:
    parts = [f"{type(exc).__name__}: {exc}"]
    for attr in ("desc", "stackTrace", "java_exception"):
        v = getattr(exc, attr, None)
        if v is not None:
            parts.append(str(v))
    return "\n".join(parts)


def spark_failure(exc: BaseException, where: str) -> SearchveilError:
    """The user-facing error of a failed Spark job reading ``where`` (see the module
    docstring)."""
    text = _text(exc)
    m = _TASK_INPUT_ERROR.search(text)
    if m:
        line = m.group(1).strip().splitlines()[0]
        return InputFormatError(where, f"a Spark task could not read it: {line}")
    if _RESULT_SIZE.search(text):
        now = os.environ.get("SEARCHVEIL_SPARK_MAX_RESULT_SIZE", "Spark's default, 1g")
        return ResourceError(
            "the rows a Spark job returns to the driver exceed spark.driver.maxResultSize "
            f"(now {now}): raise it with SEARCHVEIL_SPARK_MAX_RESULT_SIZE=2g (or --spark-conf "
            "spark.driver.maxResultSize=2g), or release fewer rows"
        )
    if _OOM.search(text):
        now = os.environ.get("SEARCHVEIL_SPARK_DRIVER_MEMORY", "4g")
        return ResourceError(
            f"a Spark JVM ran out of memory ({_first_line(text, _OOM)}): with a local master "
            f"the driver's JVM also runs the tasks — raise SEARCHVEIL_SPARK_DRIVER_MEMORY (now "
            f"{now}); on a cluster raise the executors' memory (--spark-conf "
            "spark.executor.memory=4g) or use more partitions (spark.sql.shuffle.partitions)"
        )
    if _JVM_GONE.search(text):
        now = os.environ.get("SEARCHVEIL_SPARK_DRIVER_MEMORY", "4g")
        return ResourceError(
            f"the Spark driver's JVM stopped answering ({_first_line(text, _JVM_GONE)}) — "
            "usually it ran out of memory (java.lang.OutOfMemoryError in its log): raise "
            f"SEARCHVEIL_SPARK_DRIVER_MEMORY (now {now}; with a local master it also runs the "
            "tasks)"
        )
    if _LOST.search(text):
        return ResourceError(
            f"a Spark executor or its Python worker was lost ({_first_line(text, _LOST)}), "
            "usually out of memory: raise --spark-conf spark.executor.memory and "
            "spark.executor.memoryOverhead (or spark.executor.pyspark.memory), or use more "
            "partitions (spark.sql.shuffle.partitions); with a local master, "
            "SEARCHVEIL_SPARK_ALLOCATORS=0 lets its Python workers return the memory they free"
        )
    if _PARSE.search(text):
        return InputFormatError(where, SPARK_UNREADABLE)
    return ResourceError(f"the Spark job reading {where} failed: {_first_line(text, None)} "
                         "(SEARCHVEIL_DEBUG=1 shows Spark's whole message)")  # fmt: skip


_PY_ERROR = re.compile(r"^[\w.]+(?:Error|Exception): \S")


def _first_line(text: str, pattern: re.Pattern[str] | None) -> str:
    """The line of ``text`` that ``pattern`` matched (else a task's Python error, else the
    first line), shortened."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if pattern is not None:
        lines = [ln for ln in lines if pattern.search(ln)] or lines
    else:  # a task's Python traceback ends with its exception: the most telling line
        py = [ln for ln in lines if _PY_ERROR.search(ln) and "PythonException" not in ln]
        lines = py[-1:] or lines
    line = lines[0] if lines else "no message"
    return line if len(line) <= 240 else line[:237] + "..."


@contextmanager
def spark_errors(where: str) -> Iterator[None]:
    """Run Spark actions, turning their failures into :func:`spark_failure`'s errors (a
    searchveil error raised inside passes unchanged)."""
    try:
        yield
    except (InputFormatError, InvalidParameterError, ResourceError):
        raise
    except SearchveilError:
        raise
    except Exception as exc:  # noqa: BLE001 - Spark wraps every failure in Py4J/JVM types
        raise spark_failure(exc, where) from exc
