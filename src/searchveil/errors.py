"""The exception hierarchy of searchveil.

Every error a user can cause is a :class:`SearchveilError`; its message names what was wrong
(the parameter, its value and the allowed range; or the file, line and problem). The CLI turns
these into exit code 2 with the message and writes nothing. Anything else is a bug in searchveil
(:class:`InternalError` or an unexpected exception) and exits 1.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "SearchveilError",
    "InvalidParameterError",
    "InputFormatError",
    "BudgetExceededError",
    "BudgetFileError",
    "OutputExistsError",
    "OutputWriteError",
    "ResourceError",
    "InternalError",
]


class SearchveilError(Exception):
    """Base class of every error a user of searchveil can cause."""


class InvalidParameterError(SearchveilError, ValueError):
    """A parameter is missing or outside its allowed range."""

    def __init__(self, parameter: str, value: Any, allowed: str) -> None:
        self.parameter = parameter
        self.value = value
        self.allowed = allowed
        super().__init__(f"invalid {parameter}={value!r}: allowed is {allowed}")


class InputFormatError(SearchveilError):
    """An input file cannot be read as the format it was declared to be."""

    def __init__(self, file: str, problem: str, line: int | None = None) -> None:
        self.file = file
        self.line = line
        self.problem = problem
        where = f"{file}, line {line}" if line is not None else file
        super().__init__(f"{where}: {problem}")


class BudgetExceededError(SearchveilError):
    """A release would spend more privacy than the budget allows."""

    def __init__(self, what: str, requested: float, remaining: float) -> None:
        self.requested = requested
        self.remaining = remaining
        super().__init__(
            f"{what}: requested {requested!r} but only {remaining!r} remains "
            f"(over by {requested - remaining!r})"
        )


class BudgetFileError(SearchveilError):
    """A dataset's budget file cannot be read, locked or written (a full disk, a file-size
    limit, permissions, a malformed or tampered file): the message names the file, what was
    done (refused before anything was read; or what was published and what stays pending)
    and what to do."""


class OutputExistsError(SearchveilError):
    """The output location already exists and overwriting was not asked for."""


class OutputWriteError(SearchveilError):
    """An output could not be written (disk full, read-only destination, permissions); nothing
    partial was left behind."""

    def __init__(self, path: str, cause: BaseException | str) -> None:
        self.path = path
        why = cause if isinstance(cause, str) else (getattr(cause, "strerror", None) or cause)
        super().__init__(f"cannot write {path!r}: {why}; nothing was written")


class ResourceError(SearchveilError):
    """An engine ran out of a resource (memory, a cap on what a job returns, an executor): the
    message names the cause and the setting that helps; nothing was written."""


class InternalError(SearchveilError):
    """An invariant of searchveil itself failed: this is probably a bug, please report it."""

    def __init__(self, message: str) -> None:
        super().__init__(f"internal error (this is probably a bug in searchveil): {message}")
