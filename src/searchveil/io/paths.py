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
* **Every path the tool writes follows the same rule** (issue 39; :class:`Replace`): an
  existing file or directory is replaced only with ``--overwrite`` and only when it is one the
  tool wrote, recognised by a marker it can check (:class:`Owned`: a report's footer, a JSON
  record's ``tool``/``kind``, a transcript's magic, the synthetic log's extended attribute, a
  complete release); a symbolic link is refused (the tool never writes through one); a path
  with no name (``.``, ``''``, ``/``) is refused naming its option. The rule is checked before
  any work and again at the swap (:meth:`Staging.commit`), after which what was replaced is
  checked once more and swapped back if it is no longer the tool's: a file added to a target
  while a run works is never deleted.
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searchveil.errors import InvalidParameterError, OutputExistsError, OutputWriteError
from searchveil.io.marks import (
    LEDGER_JSON,
    MODEL,
    REPORT,
    REPORT_MARK,
    RUN_RECORD,
    SYNTHETIC_LOG,
    TRANSCRIPT,
    TRANSCRIPT_MAGIC,
    Owned,
    read_json,
    set_mark,
)
from searchveil.rng import secure_token

__all__ = [
    "STAGE_MARK",
    "LEDGER_FILE",
    "InputPaths",
    "LEDGER_JSON",
    "MODEL",
    "Owned",
    "RELEASE",
    "REPORT",
    "REPORT_MARK",
    "RUN_RECORD",
    "Replace",
    "SYNTHETIC_LOG",
    "TRANSCRIPT",
    "TRANSCRIPT_MAGIC",
    "Staging",
    "check_named",
    "recover_staged",
    "release_rule",
    "stage_file",
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
    data = read_json(path)
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
    if d.is_symlink() or not d.is_dir():
        return "it is not a directory"
    try:
        entries = list(os.scandir(d))
    except OSError as exc:
        return f"it cannot be read ({exc.strerror})"
    if not entries:
        return None
    led = d / LEDGER_FILE
    if not led.is_file() or led.is_symlink():
        return "it holds no ledger.json"
    data = read_json(led)
    if data is None:
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


# -- the rule for replacing what is there (issue 39) -------------------------------------------
RELEASE = Owned(
    "a complete searchveil release (a ledger.json listing every other file)", release_problems
)


def _empty_dir(p: Path) -> bool:
    try:
        return p.is_dir() and not p.is_symlink() and not any(True for _ in os.scandir(p))
    except OSError:
        return False


def check_named(path: str | os.PathLike[str], option: str) -> Path:
    """``path`` names a file or directory: not ``''``, ``.``, ``..`` nor ``/`` (whose name
    is empty, or which is no place to write into)."""
    p = Path(path)
    if p.name in ("", ".", ".."):
        raise InvalidParameterError(
            option, os.fspath(path),
            "a path that names a new file or directory (not '', '.', '..' or '/'): e.g. "
            f"--{option} ./out-name",
        )  # fmt: skip
    return p


@dataclass(frozen=True)
class Replace:
    """The write rule of one target, named by its ``option`` (issue 39; the module
    docstring): absent — or, for a ``directory``, empty — it may be written; a symbolic link
    never; present, only with ``overwrite`` and when ``owned`` (what the tool writes there)
    recognises it (``owned=None``: nothing present is ever replaced)."""

    option: str
    overwrite: bool = False
    owned: Owned | None = None
    directory: bool = False

    def refusal(self, path: Path, shown: Path | None = None) -> Exception | None:
        """Why the target may not receive new content at ``path`` now (named as ``shown``,
        default ``path``), or ``None``."""
        p, name, opt = Path(path), str(shown or path), self.option
        if p.is_symlink():
            return InvalidParameterError(
                opt, name, "a path that is not a symbolic link (the tool never writes through "
                "a link: give the place it points to)",
            )  # fmt: skip
        if not os.path.lexists(p):
            return None
        if self.directory and _empty_dir(p):
            return None  # an empty directory holds nothing to lose
        if not self.overwrite or self.owned is None:
            hint = (
                ""
                if self.owned is None
                else (f", or pass --overwrite, which replaces only {self.owned.what}")
            )
            return OutputExistsError(f"--{opt} {name!r} already exists; choose a new --{opt}{hint}")
        why = self.owned.problem(p)
        if why is None:
            return None
        return OutputExistsError(
            f"--overwrite replaces only {self.owned.what}, and --{opt} {name!r} is not one: "
            f"{why}. Nothing was changed; choose a new --{opt} or move it away"
        )

    def check(self, path: str | os.PathLike[str]) -> None:
        """Raise the :meth:`refusal` for ``path`` (an :class:`OutputExistsError` or
        :class:`InvalidParameterError`), if any."""
        err = self.refusal(check_named(path, self.option))
        if err is not None:
            raise err


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
    o = check_named(out, "out")
    if not o.parent.is_dir():
        raise InvalidParameterError("out", str(o), "a path whose parent directory exists")
    _check_inputs_outside(o, inputs)
    release_rule("out", overwrite).check(o)


def release_rule(option: str, overwrite: bool) -> Replace:
    """The rule of a release directory: ``--overwrite`` replaces only a complete release."""
    return Replace(option, overwrite, RELEASE, directory=True)


def check_private_path(
    path: str | os.PathLike[str],
    *,
    option: str,
    releases: Iterable[str | os.PathLike[str]] = (),
    inputs: InputPaths = (),
    directory: bool = False,
    overwrite: bool = False,
    owned: Owned | None = None,
) -> Path:
    """Fail — before any work — when a private file (``directory``: a private directory) at
    ``path`` would land inside a release (``releases``: the ``--out`` of this run; or any
    directory holding a searchveil ledger.json), on one of the run's ``inputs``, where it
    cannot be written (no parent directory; a directory in the way of a file), or where the
    write rule refuses it (:class:`Replace` with ``overwrite`` and ``owned``: an existing file
    is replaced only with ``--overwrite`` and when ``owned`` recognises it). Returns ``path``.
    Writes nothing."""
    p = check_named(path, option)
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
    if not directory and p.is_dir() and not p.is_symlink():
        raise InvalidParameterError(option, str(p), "a file path, not a directory")
    Replace(option, overwrite, owned, directory=directory).check(p)
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


_RENAMEAT2 = _renameat2()
_RENAME_NOREPLACE = 1


def _renameat2_call(a: Path, b: Path, flags: int) -> bool | int:
    """``renameat2(a, b, flags)``: ``True`` done, ``False`` not supported here, else the
    ``errno`` of its failure."""
    if _RENAMEAT2 is None:
        return False
    rc = _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), flags)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    return int(err)


def _exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` atomically (Linux ``renameat2(RENAME_EXCHANGE)``); ``False`` when
    this system or file system cannot."""
    r = _renameat2_call(a, b, _RENAME_EXCHANGE)
    if isinstance(r, bool):
        return r
    raise OSError(r, os.strerror(r), str(b))


def _move_noreplace(src: Path, dst: Path) -> bool:
    """Rename ``src`` to ``dst`` only if nothing is at ``dst`` (atomically where the system
    can: ``renameat2(RENAME_NOREPLACE)``, else ``link`` for a file); ``False`` when something
    is there."""
    r = _renameat2_call(src, dst, _RENAME_NOREPLACE)
    if r is True:
        return True
    if r == errno.EEXIST:
        return False
    if not isinstance(r, bool):
        raise OSError(r, os.strerror(r), str(dst))
    if os.path.lexists(dst):
        return False
    if src.is_dir():
        try:
            os.rename(src, dst)  # onto an empty directory at most: nothing to lose
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                return False
            raise
        return True
    try:
        os.link(src, dst)
    except FileExistsError:
        return False
    except OSError:  # no hard links on this file system
        os.rename(src, dst)
        return True
    os.unlink(src)
    return True


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


def _staging_dirs(target: Path) -> list[Path]:
    """The ``.<name>.tmp-<token>`` directories beside ``target`` (not links)."""
    pattern = re.compile(rf"\.{re.escape(target.name)}\.tmp-[0-9a-f]{{{_TOKEN_CHARS}}}")
    try:
        entries = [e for e in os.scandir(target.parent) if pattern.fullmatch(e.name)]
    except OSError:
        return []
    return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]


@contextlib.contextmanager
def _dead(root: Path) -> Iterator[bool]:
    """Whether the staging directory ``root`` is a dead run's (marked, its lock free), holding
    its lock for the block."""
    try:
        fd = os.open(root / STAGE_MARK, os.O_RDONLY)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False  # a live run is using it
            return
        yield True
    finally:
        os.close(fd)


def clean_stale(target: str | os.PathLike[str]) -> list[Path]:
    """Remove the staging directories a crashed or killed run left beside ``target`` — only
    ``.<name>.tmp-<token>`` directories that hold :data:`STAGE_MARK` with no live process
    holding its lock, or that are empty (a kill between creating the directory and its
    marker, or after removing the marker; an empty directory holds nothing to lose) — after
    putting an old directory back in place if the crash fell between the two renames of the
    fallback swap. Returns the directories removed."""
    t = Path(target)
    removed: list[Path] = []
    for root in _staging_dirs(t):
        if not (root / STAGE_MARK).is_file():
            with contextlib.suppress(OSError):
                os.rmdir(root)  # only if empty: anything else is not ours to remove
                removed.append(root)
            continue
        with _dead(root) as dead:
            if not dead:
                continue
            old = root / _OLD
            if old.is_dir() and not os.path.lexists(t):
                os.rename(old, t)
            _remove_staging(root)
            removed.append(root)
    return removed


def recover_staged(target: str | os.PathLike[str], accept: Callable[[Path], bool]) -> bool:
    """Complete a write that a killed run staged but did not put in place: the staged file of
    a dead run beside ``target`` that ``accept`` takes (e.g. the provenance record of the
    release now in place, :func:`searchveil.io.ledger.repair_provenance`) is renamed to
    ``target`` and its staging directory removed. Returns whether one was."""
    t = Path(target)
    for root in _staging_dirs(t):
        with _dead(root) as dead:
            new = root / _NEW
            if dead and new.is_file() and not new.is_symlink() and accept(new):
                os.replace(new, t)
                _remove_staging(root)
                return True
    return False


class Staging:
    """Build new content for ``target`` beside it and put it in place (see the module
    docstring). ``path`` is where to build: a directory created for ``directory=True`` (mode
    0700 when ``private``), else a file path to create. ``replace``: the target's write rule
    (:class:`Replace`), checked when the staging starts, again just before the swap, and on
    what the swap replaced (swapped back, with an error, if that is no longer the tool's). Use
    as a context manager; call :meth:`commit` when the content is complete — leaving the block
    without it discards the staging directory."""

    def __init__(
        self,
        target: str | os.PathLike[str],
        *,
        directory: bool,
        replace: Replace,
        private: bool = False,
    ) -> None:
        self.target = Path(target)
        self.directory, self.private, self.replace = directory, private, replace
        self.root = self.target.parent / f".{self.target.name}.tmp-{secure_token()}"
        self.path = self.root / _NEW
        self._fd: int | None = None
        self.committed = False
        replace.check(self.target)
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

    def recheck(self) -> None:
        """Check the write rule of the target again (a run that puts several targets in place
        checks every one before the first swap, so none is written when another is refused)."""
        self.replace.check(self.target)

    def commit(self) -> None:
        """Put the staged content in place (atomically), then remove the staging directory
        with whatever it replaced — after checking the write rule again, on the target and on
        what the swap took out of it."""
        try:
            if self.private:
                os.chmod(self.path, 0o700 if self.directory else 0o600)
            owned = self.replace.owned
            if owned is not None and owned.mark is not None and not self.directory:
                set_mark(self.path, owned.mark)
            _fsync_tree(self.path)
            self.replace.check(self.target)
            if not _move_noreplace(self.path, self.target):
                self._swap()
            _fsync(self.target.parent)
        except OSError as exc:
            self.discard()
            raise OutputWriteError(str(self.target), exc) from exc
        except BaseException:
            self.discard()
            raise
        self.committed = True
        self.discard()

    def _swap(self) -> None:
        """Replace what is at the target (the rule allowed it a moment ago) and check what was
        replaced once more: added to or changed since, it is swapped back, unharmed."""
        if _exchange(self.path, self.target):
            err = self.replace.refusal(self.path, self.target)
            if err is not None:
                self._swap_back(self.target, self.path)
                raise err
        elif self.directory:
            old = self.root / _OLD
            os.rename(self.target, old)
            err = self.replace.refusal(old, self.target)
            if err is not None:
                self._swap_back(old, self.target, rename=True)
                raise err
            os.rename(self.path, self.target)
        else:
            os.replace(self.path, self.target)

    def _swap_back(self, a: Path, b: Path, *, rename: bool = False) -> None:
        try:
            if rename:
                os.rename(a, b)
            else:
                _exchange(a, b)
        except OSError as exc:  # keep what was replaced: unmarked, the staging is never removed
            with contextlib.suppress(OSError):
                os.unlink(self.root / STAGE_MARK)
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            raise OutputWriteError(
                str(self.target),
                OSError(exc.errno, f"{exc.strerror}; what it held is kept in {str(self.root)!r}"),
            ) from exc

    def discard(self) -> None:
        """Remove the staging directory (and anything in it)."""
        if self.root.is_dir() and (self.root / STAGE_MARK).exists():
            _remove_staging(self.root)
        elif self.root.is_dir():
            with contextlib.suppress(OSError):
                os.rmdir(self.root)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


# -- writing one file --------------------------------------------------------------------------
def stage_file(
    path: str | os.PathLike[str], data: bytes, *, replace: Replace, private: bool = True
) -> Staging:
    """A staged file holding ``data`` (owner-only when ``private``), put in place at ``path``
    by the caller's :meth:`Staging.commit` under ``replace`` (discarded, with an
    :class:`OutputWriteError`, if writing fails)."""
    st = Staging(path, directory=False, private=private, replace=replace)
    try:
        fd = os.open(st.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        st.discard()
        raise OutputWriteError(str(path), exc) from exc
    return st


def stage_private_file(path: str | os.PathLike[str], data: bytes, *, replace: Replace) -> Staging:
    """:func:`stage_file`, owner-only."""
    return stage_file(path, data, replace=replace)


def write_private_bytes(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    option: str = "path",
    releases: Iterable[str | os.PathLike[str]] = (),
    inputs: InputPaths = (),
    overwrite: bool = False,
    owned: Owned | None = None,
    private: bool = True,
) -> Path:
    """Write a file the user named with ``--option``: checked (:func:`check_private_path`:
    never inside a release nor on an input; an existing file replaced only with ``overwrite``
    and only if ``owned`` recognises it), staged, owner-only (unless ``private=False``: a
    public ledger) and put in place under the same rule, checked again at the swap."""
    rule = Replace(option, overwrite, owned)
    p = check_private_path(path, option=option, releases=releases, inputs=inputs,
                           overwrite=overwrite, owned=owned)  # fmt: skip
    stage_file(p, data, replace=rule, private=private).commit()
    return p


def write_private_text(path: str | os.PathLike[str], text: str, **kw: Any) -> Path:
    """:func:`write_private_bytes` of UTF-8 text."""
    return write_private_bytes(path, text.encode("utf-8"), **kw)


def write_private_json(path: str | os.PathLike[str], obj: Any, **kw: Any) -> Path:
    """:func:`write_private_bytes` of ``obj`` as indented JSON (already JSON-serialisable)."""
    text = json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
    return write_private_text(path, text, **kw)
