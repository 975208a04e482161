"""Where searchveil writes, and how: one rule for every path the tool writes (issue 30;
docs/privacy/published.md, "Where files go").

* **Private files stay out of releases.** A private file — a provenance record, CELS
  transcripts, the reports of ``evaluate``/``compare``/``demo``, a saved synthetic model, a
  synthetic log, an attack run record — is refused (:func:`check_private_path`, before any
  work starts) when it would land inside the ``--out`` of the run, inside any directory that
  holds a searchveil ``ledger.json`` (the directory or any of its parents), or on one of the
  run's inputs. It is written owner-only (files 0600, directories 0700) through a staging
  directory and a rename (:func:`write_private_bytes`, :func:`stage_private_file`).
* **``--overwrite`` replaces only a complete searchveil release** (:func:`check_release_out`):
  a directory whose ``ledger.json`` (``"tool": "searchveil"``) lists in ``outputs`` every other
  entry of the directory, each a regular file — no subdirectory, no file the ledger does not
  name (a private file is never written inside a release, so a complete release holds only its
  outputs and its ledger). It is refused when any input of the run is ``--out`` or lies
  inside it. An empty directory holds nothing to lose and is used as if it were absent.
* **Nothing is deleted before the new content is complete, and a crash leaves no
  half-written state** (:class:`Staging`). New content is built in a staging directory beside
  its target, ``.<name>.tmp-<random>``, which holds a marker file (:data:`STAGE_MARK`, locked
  with ``flock`` while its run is alive), synced to disk, then put in place in one step: on
  Linux ``renameat2(RENAME_EXCHANGE)`` swaps the old and the new directory atomically (a file
  is replaced by ``rename``); elsewhere two renames (old aside into the staging directory, new
  in). The old content, now inside the staging directory, is removed last. A crash at any
  point leaves the target either as it was or complete and new, plus at most a marked staging
  directory; the next run writing the same target removes it (after putting an old directory
  back in place if a crash fell between the two renames of the fallback). Only directories
  that hold the marker and whose lock no live process holds are ever removed: a directory the
  tool did not create is never touched.
* **A failed write** (disk full, read-only destination, permissions) raises
  :class:`~searchveil.errors.OutputWriteError` naming the path, after removing the staging
  directory: nothing partial remains.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from searchveil.errors import InvalidParameterError, OutputExistsError, OutputWriteError
from searchveil.rng import secure_token

__all__ = [
    "STAGE_MARK",
    "LEDGER_FILE",
    "InputPaths",
    "Staging",
    "check_private_path",
    "check_release_out",
    "clean_stale",
    "enclosing_release",
    "input_list",
    "is_within",
    "stage_private_file",
    "release_problems",
    "write_private_bytes",
    "write_private_text",
    "write_private_json",
]

STAGE_MARK = ".searchveil-staging"
LEDGER_FILE = "ledger.json"
_NEW, _OLD = "new", "old"
_TOKEN_CHARS = len(secure_token())
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100

#: the inputs of a run: (option name, path) pairs; a ``None`` path is skipped
InputPaths = Iterable[tuple[str, "str | os.PathLike[str] | None"]]


def input_list(**options: str | os.PathLike[str] | Sequence[Any] | None) -> list[tuple[str, Any]]:
    """``input_list(input=p, serp=None, share=[a, b])`` → ``[("input", p), ("share", a), …]``:
    the inputs of a run, named by their options (lists expanded, ``None`` skipped)."""
    out: list[tuple[str, Any]] = []
    for name, value in options.items():
        values = value if isinstance(value, list | tuple) else [value]
        out += [(name.replace("_", "-"), v) for v in values if v is not None]
    return out


def _abs(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(os.fspath(path)))


def is_within(path: str | os.PathLike[str], directory: str | os.PathLike[str]) -> bool:
    """``path`` is ``directory`` or lies inside it (symbolic links resolved)."""
    p, d = _abs(path), _abs(directory)
    return p == d or d in p.parents


def _is_searchveil_ledger(path: Path) -> bool:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(data, dict) and data.get("tool") == "searchveil"


def enclosing_release(path: str | os.PathLike[str]) -> Path | None:
    """The nearest directory at or above ``path`` (a directory) or above it (a file) that holds
    a searchveil ``ledger.json``, or ``None``."""
    p = _abs(path)
    start = [p] if p.is_dir() else []
    for d in [*start, *p.parents]:
        if _is_searchveil_ledger(d / LEDGER_FILE):
            return d
    return None


def release_problems(directory: str | os.PathLike[str]) -> str | None:
    """Why ``directory`` is not a complete searchveil release (see the module docstring), or
    ``None`` when it is one (or is empty: nothing in it would be lost)."""
    d = Path(directory)
    entries = list(os.scandir(d))
    if not entries:
        return None
    led = d / LEDGER_FILE
    if not led.is_file() or led.is_symlink():
        return "it holds no ledger.json"
    try:
        data = json.loads(led.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return "its ledger.json is not valid JSON"
    outputs = data.get("outputs") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or data.get("tool") != "searchveil"
        or not isinstance(outputs, dict)
    ):
        return "its ledger.json is not a searchveil ledger"
    listed = {v.get("file") for v in outputs.values() if isinstance(v, dict)}
    for e in sorted(entries, key=lambda e: e.name):
        if e.name == LEDGER_FILE:
            continue
        if e.is_symlink() or not e.is_file():
            return f"{e.name!r} is not a file of the release"
        if e.name not in listed:
            return f"{e.name!r} is not one of the outputs its ledger lists"
    return None


def _check_inputs_outside(out: Path, inputs: InputPaths) -> None:
    for option, p in inputs:
        if p is not None and is_within(p, out):
            raise InvalidParameterError(
                option,
                str(p),
                f"a path outside --out {str(out)!r}: the release replaces --out, so an input "
                "inside it would be lost",
            )


def check_release_out(
    out: str | os.PathLike[str], *, overwrite: bool, inputs: InputPaths = ()
) -> None:
    """Fail — before any work — unless ``out`` may receive a release: it does not exist, is an
    empty directory, or (``overwrite``) is a complete searchveil release; and no input of the
    run is ``out`` or lies inside it. Writes nothing."""
    o = Path(out)
    if not o.parent.is_dir():
        raise InvalidParameterError("out", str(o), "a path whose parent directory exists")
    _check_inputs_outside(o, inputs)
    if not os.path.lexists(o):
        return
    if o.is_symlink() or not o.is_dir():
        raise OutputExistsError(
            f"output {str(o)!r} exists and is not a directory; choose a new --out "
            "(--overwrite replaces only a searchveil release directory)"
        )
    if not any(True for _ in os.scandir(o)):
        return
    problem = release_problems(o)
    if not overwrite:
        raise OutputExistsError(
            f"output {str(o)!r} already exists; choose a new --out or pass --overwrite"
        )
    if problem is not None:
        raise OutputExistsError(
            f"--overwrite replaces only a complete searchveil release (a ledger.json listing "
            f"every other file), and {str(o)!r} is not one: {problem}. Nothing was changed; "
            "choose a new --out or move the directory away"
        )


def check_private_path(
    path: str | os.PathLike[str],
    *,
    option: str,
    releases: Iterable[str | os.PathLike[str]] = (),
    inputs: InputPaths = (),
    directory: bool = False,
) -> Path:
    """Fail — before any work — when a private file (``directory``: a private directory) at
    ``path`` would land inside a release (``releases``: the ``--out`` of this run; or any
    directory holding a searchveil ledger.json), on one of the run's ``inputs``, or where it
    cannot be written (no parent directory; a directory in the way of a file). Returns
    ``path``. Writes nothing."""
    p = Path(path)
    why = (
        "is private and a release directory is published: write it beside the release, "
        "never inside it"
    )
    for r in releases:
        if is_within(p, r):
            raise InvalidParameterError(
                option, str(p), f"a path outside the release directory {str(r)!r} (this file {why})"
            )
    for name, q in inputs:
        if q is not None and is_within(q, p):
            raise InvalidParameterError(
                option, str(p), f"a path apart from the input --{name} {str(q)!r}"
            )
    if not p.parent.is_dir():
        raise InvalidParameterError(option, str(p), "a path whose parent directory exists")
    if not directory and p.is_dir():
        raise InvalidParameterError(option, str(p), "a file path, not a directory")
    if directory and p.exists() and (not p.is_dir() or any(True for _ in os.scandir(p))):
        raise OutputExistsError(
            f"--{option} {str(p)!r} exists and is not an empty directory; choose a new one"
        )
    rel = enclosing_release(p if directory and p.is_dir() else p.parent)
    if rel is not None:
        raise InvalidParameterError(
            option,
            str(p),
            f"a path outside {str(rel)!r}, which holds a searchveil release (this file {why})",
        )
    return p


# -- staging ----------------------------------------------------------------------------------
def _renameat2() -> Any:
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


_EXCHANGE = _renameat2()


def _exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` atomically (Linux ``renameat2(RENAME_EXCHANGE)``); ``False`` when
    this system or file system cannot."""
    if _EXCHANGE is None:
        return False
    rc = _EXCHANGE(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    """Flush ``path`` (a file, or a directory and the files in it) to disk before it is
    renamed into place, so a power cut cannot leave a renamed but empty file."""
    if path.is_dir():
        for root, _, files in os.walk(path):
            for f in files:
                _fsync(Path(root) / f)
            _fsync(Path(root))
    else:
        _fsync(path)


def _remove_staging(root: Path) -> None:
    """Remove a staging directory so that a kill at any point leaves it recognisable: its
    content first, the marker next, the (then empty) directory last."""
    for e in os.scandir(root):
        if e.name == STAGE_MARK:
            continue
        if e.is_dir(follow_symlinks=False):
            shutil.rmtree(e.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(e.path)
    with contextlib.suppress(OSError):
        os.unlink(root / STAGE_MARK)
    with contextlib.suppress(OSError):
        os.rmdir(root)


def clean_stale(target: str | os.PathLike[str]) -> list[Path]:
    """Remove the staging directories a crashed or killed run left beside ``target`` — only
    ``.<name>.tmp-<token>`` directories that hold :data:`STAGE_MARK` with no live process
    holding its lock, or that are empty (a kill between creating the directory and its
    marker, or after removing the marker; an empty directory holds nothing to lose) — after
    putting an old directory back in place if the crash fell between the two renames of the
    fallback swap. Returns the directories removed."""
    t = Path(target)
    pattern = re.compile(rf"\.{re.escape(t.name)}\.tmp-[0-9a-f]{{{_TOKEN_CHARS}}}")
    removed: list[Path] = []
    try:
        entries = [e for e in os.scandir(t.parent) if pattern.fullmatch(e.name)]
    except OSError:
        return removed
    for e in entries:
        root = Path(e.path)
        if e.is_symlink() or not e.is_dir():
            continue
        mark = root / STAGE_MARK
        if not mark.is_file():
            with contextlib.suppress(OSError):
                os.rmdir(root)  # only if empty: anything else is not ours to remove
                removed.append(root)
            continue
        try:
            fd = os.open(mark, os.O_RDONLY)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live run is using it
            old = root / _OLD
            if old.is_dir() and not os.path.lexists(t):
                os.rename(old, t)
            _remove_staging(root)
            removed.append(root)
        finally:
            os.close(fd)
    return removed


class Staging:
    """Build new content for ``target`` beside it and put it in place (see the module
    docstring). ``path`` is where to build: a directory created for ``directory=True`` (mode
    0700 when ``private``), else a file path to create. Use as a context manager; call
    :meth:`commit` when the content is complete — leaving the block without it discards the
    staging directory."""

    def __init__(
        self, target: str | os.PathLike[str], *, directory: bool, private: bool = False
    ) -> None:
        self.target = Path(target)
        self.directory, self.private = directory, private
        self.root = self.target.parent / f".{self.target.name}.tmp-{secure_token()}"
        self.path = self.root / _NEW
        self._fd: int | None = None
        self.committed = False
        clean_stale(self.target)
        try:
            os.mkdir(self.root, 0o700)
            self._fd = os.open(self.root / STAGE_MARK, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(self._fd, b"searchveil staging directory: removed by the next run\n")
            if directory:
                os.mkdir(self.path, 0o700 if private else 0o777)
        except OSError as exc:
            self.discard()
            raise OutputWriteError(str(self.target), exc) from exc

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.committed:
            self.discard()

    def commit(self) -> None:
        """Put the staged content in place (atomically), then remove the staging directory
        with whatever it replaced."""
        try:
            if self.private:
                os.chmod(self.path, 0o700 if self.directory else 0o600)
            _fsync_tree(self.path)
            if os.path.lexists(self.target) and self.directory:
                if not _exchange(self.path, self.target):
                    os.rename(self.target, self.root / _OLD)
                    os.rename(self.path, self.target)
            else:
                os.replace(self.path, self.target)
            _fsync(self.target.parent)
        except OSError as exc:
            self.discard()
            raise OutputWriteError(str(self.target), exc) from exc
        self.committed = True
        self.discard()

    def discard(self) -> None:
        """Remove the staging directory (and anything in it)."""
        if self.root.is_dir():
            _remove_staging(self.root)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# -- private files -----------------------------------------------------------------------------
def stage_private_file(path: str | os.PathLike[str], data: bytes) -> Staging:
    """A staged, owner-only file holding ``data``, put in place at ``path`` by the caller's
    :meth:`Staging.commit` (discarded, with an :class:`OutputWriteError`, if writing fails)."""
    st = Staging(path, directory=False, private=True)
    try:
        fd = os.open(st.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        st.discard()
        raise OutputWriteError(str(path), exc) from exc
    return st


def write_private_bytes(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    option: str = "path",
    releases: Iterable[str | os.PathLike[str]] = (),
    inputs: InputPaths = (),
) -> Path:
    """Write a private file: checked (:func:`check_private_path`), staged, owner-only."""
    p = check_private_path(path, option=option, releases=releases, inputs=inputs)
    stage_private_file(p, data).commit()
    return p


def write_private_text(path: str | os.PathLike[str], text: str, **kw: Any) -> Path:
    """:func:`write_private_bytes` of UTF-8 text."""
    return write_private_bytes(path, text.encode("utf-8"), **kw)


def write_private_json(path: str | os.PathLike[str], obj: Any, **kw: Any) -> Path:
    """:func:`write_private_bytes` of ``obj`` as indented JSON (already JSON-serialisable)."""
    text = json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
    return write_private_text(path, text, **kw)
