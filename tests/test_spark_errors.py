"""A failed Spark job names its cause (issue 40, ``searchveil.engines.spark_errors``): the
driver's result cap, a JVM out of memory and a lost executor name the setting that helps; a
task's own reading error keeps its message; only Spark's parse and decode failures say the
file could not be read. The texts are Spark's own (4.x), as its exceptions carry them."""

from __future__ import annotations

import pytest

from searchveil.engines.spark_errors import SPARK_UNREADABLE, spark_errors, spark_failure
from searchveil.errors import InputFormatError, InvalidParameterError, ResourceError

RESULT = ("An error occurred while calling o123.collectAsArrowToPython.\n: "
          "org.apache.spark.SparkException: Job aborted due to stage failure: Total size of "
          "serialized results of 12 tasks (1030.5 MiB) is bigger than spark.driver."
          "maxResultSize (1024.0 MiB)")  # fmt: skip
OOM = (
    "An error occurred while calling o88.collectAsArrowToPython.\n: "
    "java.lang.OutOfMemoryError: Java heap space\n\tat java.base/java.util.Arrays.copyOf"
)
LOST = ("Job aborted due to stage failure: Task 3 in stage 7.0 failed 4 times, most recent "
        "failure: Lost task 3.3 in stage 7.0 (TID 41) (10.0.0.5 executor 2): "
        "ExecutorLostFailure (executor 2 exited caused by one of the running tasks) Reason: "
        "Container killed by YARN for exceeding memory limits")  # fmt: skip
TASK_INPUT = (
    "org.apache.spark.api.python.PythonException: Traceback (most recent call last):"
    '\n  File "sources.py", line 300, in canonical_rows\n'
    "searchveil.errors.InputFormatError: log.tsv, line 12: expected 5 fields, got 3"
)
PARQUET = ("org.apache.spark.SparkException: [FAILED_READ_FILE.NO_HINT] Error while reading "
           "file file:/data/x.parquet. SQLSTATE: KD001\nCaused by: org.apache.parquet.io."
           "ParquetDecodingException: Can not read value at 0 in block -1")  # fmt: skip
GONE = (
    "py4j.protocol.Py4JNetworkError: Error while sending or receiving\n"
    "ConnectionRefusedError: [Errno 111] Connection refused"
)
OTHER = (
    "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
    '  File "x.py", line 3, in f\nZeroDivisionError: division by zero'
)


@pytest.mark.parametrize(
    ("text", "kind", "names"),
    [
        (RESULT, ResourceError, ["spark.driver.maxResultSize", "SEARCHVEIL_SPARK_MAX_RESULT_SIZE"]),
        (
            OOM,
            ResourceError,
            ["out of memory", "Java heap space", "SEARCHVEIL_SPARK_DRIVER_MEMORY"],
        ),
        (
            LOST,
            ResourceError,
            ["executor", "lost", "spark.executor.memory", "SEARCHVEIL_SPARK_ALLOCATORS=0"],
        ),
        (GONE, ResourceError, ["JVM stopped answering", "SEARCHVEIL_SPARK_DRIVER_MEMORY"]),
        (TASK_INPUT, InputFormatError, ["line 12: expected 5 fields"]),
        (PARQUET, InputFormatError, [SPARK_UNREADABLE]),
        (OTHER, ResourceError, ["ZeroDivisionError: division by zero"]),
    ],
)
def test_a_failed_job_names_its_cause(text: str, kind: type, names: list[str]) -> None:
    err = spark_failure(RuntimeError(text), "log.parquet")
    assert isinstance(err, kind), err
    for name in names:
        assert name in str(err), (name, str(err))
    if kind is ResourceError:  # only a parse failure says the file could not be read
        assert SPARK_UNREADABLE not in str(err) and "could not read" not in str(err)


def test_searchveil_errors_pass_unchanged() -> None:
    with pytest.raises(InvalidParameterError):
        with spark_errors("x"):
            raise InvalidParameterError("p", 1, "2")
    with pytest.raises(ResourceError, match="maxResultSize"):
        with spark_errors("x"):
            raise RuntimeError(RESULT)
