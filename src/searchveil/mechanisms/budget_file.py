"""The budget of one dataset across releases, in a file (``searchveil budget init|show|refund``,
``--budget FILE`` on every release command, ``searchveil.Session.open``; docs/privacy/budget.md).

The file holds only public facts — the total (ε, δ), the neighbouring relation it is kept in,
and for each release charged: what it was (``release korolova``), its cost and split, its state,
its times, the SHA-256 of its public ledger — never a path, hash or size of a private input; it
may be published with the releases. (A *pending* charge also names the directory its run
writes, so that ``budget refund`` can look there; the path is dropped when the charge settles.)

**One budget per real file.** A budget is opened at its real path: symbolic links are resolved
first, so every name that reaches the file charges the one budget; a file with more than one
hard link, or that is not a regular file, is refused (each write replaces the file by a rename,
which would split the names into separate budgets).

**Charging** (:meth:`~searchveil.mechanisms.budget.BudgetBook.charge`) is three short
transactions, each under an exclusive ``fcntl.flock`` on the **directory** that holds the file
(re-checked after locking to be the directory its path names, and used through its descriptor
for the read and the rename, so a moved or replaced directory cannot split the lock; nothing
can delete a directory that holds the budget, unlike a lock file beside it), each written to a
temporary file that is fsynced and renamed over the budget (a reader sees the old file or the
new one, never half of one; an unlocked read whose open file was renamed over before it was
checked reads the new file):

1. *admit*: the cost (converted to the budget's relation where that is documented) is compared
   with what is left — total minus committed, failed and pending charges — and refused
   (nothing written) or appended as ``pending``. Two releases started at once are serialised
   by the lock: the second sees the first's pending charge.
2. the release runs (outside the lock): it reads the private input — from here its charge
   stands;
3. *commit* (the release was written: its ledger's SHA-256, its cost as written, the time) or,
   when the run raised an error, *failed* (the admitted cost stays spent).

A process killed between 1 and 3 leaves its charge ``pending``: it stays counted as spent
(the release may have been published), ``budget show`` lists it, and ``searchveil budget refund
FILE --charge ID`` releases it once its process has ended and no new release is in place where
it wrote (the ledger there is still the one that was there when it started).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from searchveil.errors import (
    BudgetFileError,
    InputFormatError,
    InvalidParameterError,
    OutputExistsError,
    SearchveilError,
)
from searchveil.io.ledger import LEDGER_NAME
from searchveil.mechanisms.accounting import Budget
from searchveil.mechanisms.budget import (
    BudgetBook,
    BudgetState,
    ChargeState,
    Relation,
)
from searchveil.rng import secure_token
from searchveil.validate import check_positive, check_probability, parse_choice

__all__ = ["BUDGET_KIND", "DatasetBudget", "init_budget"]

BUDGET_KIND = "searchveil-budget"
FORMAT_VERSION = 1
PUBLIC_NOTE = (
    "PUBLIC: the privacy budget of one dataset across its releases - the total, the "
    "neighbouring relation, and each release's cost, state, times and public ledger's SHA-256; "
    "no path, hash or size of a private input. It may be published with the releases."
)
UNCHANGED = "the budget file is unchanged"


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _open_dir(path: Path) -> int:
    """A descriptor of the directory that holds a budget file."""
    try:
        return os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise BudgetFileError(
            f"cannot open the directory of the budget file {str(path)!r} ({_why(exc)}); {UNCHANGED}"
        ) from exc


def _write_at(dfd: int, path: Path, doc: dict[str, Any], *, mode: int | None = None,
              exclusive: bool = False) -> None:  # fmt: skip
    """Write ``doc`` to a temporary file in the directory ``dfd``, fsync it, rename it over
    ``path``'s name (with ``exclusive``: link it, so an existing file is never replaced),
    fsync the directory. ``mode``: the permissions the file had (a new file: the umask's). A
    failure leaves the old file (or none) and says so."""
    tmp = f".{path.name}.tmp-{secure_token()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666, dir_fd=dfd)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            if mode is not None:
                os.fchmod(fd, mode)  # the file keeps the permissions it had
            fh.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if exclusive:
            try:
                os.link(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except FileExistsError:
                raise OutputExistsError(
                    f"the budget file {str(path)!r} already exists; a dataset has one budget "
                    "(searchveil budget show FILE)"
                ) from None
        else:
            os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        os.fsync(dfd)
    except OSError as exc:
        raise BudgetFileError(
            f"cannot write the budget file {str(path)!r} ({_why(exc)}); "
            + ("nothing was created" if exclusive else UNCHANGED)
        ) from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dfd)


def init_budget(
    path: str | os.PathLike[str],
    *,
    epsilon: float,
    delta: float,
    relation: Relation | str,
    one_record_per_user: bool = False,
) -> DatasetBudget:
    """Declare the total (ε, δ) of one dataset under ``relation`` in a new budget file.
    ``one_record_per_user``: every table charged to it holds one record per user
    (record-level releases then compose with a user-level budget)."""
    eps = check_positive("epsilon", epsilon)
    dl = check_probability("delta", delta, open_low=False)
    rel = parse_choice("relation", relation, Relation)
    p = Path(path)
    if not p.parent.is_dir():
        raise InvalidParameterError("budget", str(p), "a path whose directory exists")
    state = BudgetState(Budget(eps, dl), rel, bool(one_record_per_user))
    dfd = _open_dir(p)
    try:
        _write_at(dfd, p, _document(state), exclusive=True)
    finally:
        os.close(dfd)
    return DatasetBudget(p)


def _document(state: BudgetState) -> dict[str, Any]:
    return {"kind": BUDGET_KIND, "format_version": FORMAT_VERSION, "PUBLIC": PUBLIC_NOTE,
            **state.to_dict()}  # fmt: skip


def _running_here(pid: Any) -> bool:
    """Whether a process with this id runs on this machine (a pending charge's owner)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def ledger_sha256(release_dir: str | os.PathLike[str]) -> str | None:
    """The SHA-256 of the public ledger in ``release_dir`` (None when there is none)."""
    try:
        return hashlib.sha256((Path(release_dir) / LEDGER_NAME).read_bytes()).hexdigest()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _release_in_place(release: Any) -> bool:
    """Whether a pending charge's run left a release where it wrote: the ledger there is not
    the one that was there when it started (unreadable: assumed in place)."""
    if not isinstance(release, dict) or not isinstance(release.get("out"), str):
        return False
    try:
        return ledger_sha256(release["out"]) != release.get("replaces")
    except OSError:
        return True


def _real_path(path: Path) -> Path:
    """The budget's real file: every link resolved, so each name that reaches it charges one
    budget."""
    try:
        return path.resolve(strict=True)
    except FileNotFoundError:
        raise InputFormatError(
            str(path), "no budget file (create one: searchveil budget init FILE --epsilon E "
            "--delta D --relation R)",
        ) from None  # fmt: skip
    except (OSError, RuntimeError) as exc:  # a loop of links, a permission
        raise BudgetFileError(f"cannot resolve the budget file {str(path)!r}: {exc}") from exc


_REREADS = 50  # an unlocked read retries this often when a writer renames the file over it


class _Replaced(BudgetFileError):
    """The open budget file has no name left: a writer renamed a new one over it."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"the budget file {path!r} was replaced while it was being read; "
            f"{UNCHANGED}: run the command again"
        )


class DatasetBudget(BudgetBook):
    """A budget file (module docstring). Every method reads the file afresh. ``warnings``:
    what the last read found unsafe (a file others may write)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.given = Path(path)
        self.path = _real_path(self.given)
        self.warnings: list[str] = []
        self.read()  # a missing or malformed file fails here, before any release work

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> DatasetBudget:
        return cls(path)

    def _load(self, fd: int) -> tuple[BudgetState, int]:
        """The state in the open budget file ``fd`` and its permission bits: a regular file
        with one name, holding a well-formed budget."""
        p = self.path
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BudgetFileError(f"{str(p)!r} is not a regular file; a budget file is one")
        if st.st_nlink == 0:
            raise _Replaced(str(p))
        if st.st_nlink != 1:
            raise BudgetFileError(
                f"the budget file {str(p)!r} has {st.st_nlink} hard links: each write replaces "
                "the file, so its names would become separate budgets. Keep one name (find "
                f"the others with: find / -xdev -samefile {p}) and reach it from elsewhere "
                "with a symbolic link"
            )
        self.warnings = []
        if st.st_mode & 0o022:
            who = "other users" if st.st_mode & 0o002 else "its group"
            self.warnings.append(
                f"the budget file {str(p)!r} is writable by {who} (mode "
                f"{stat.filemode(st.st_mode)}): whoever can write it can erase charges; "
                f"chmod go-w {p}"
            )
        with os.fdopen(os.dup(fd), "rb") as fh:
            raw = fh.read()
        try:
            doc = json.loads(raw.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputFormatError(str(p), f"not a budget file (invalid JSON: {exc})") from None
        except RecursionError:
            raise InputFormatError(str(p), "not a budget file (JSON nested too deeply)") from None
        if not isinstance(doc, dict) or doc.get("kind") != BUDGET_KIND:
            raise InputFormatError(str(p), "not a searchveil budget file")
        if doc.get("format_version") != FORMAT_VERSION:
            raise InputFormatError(str(p), f"budget format {doc.get('format_version')!r}; this "
                                   f"searchveil reads {FORMAT_VERSION}")  # fmt: skip
        try:
            return BudgetState.from_dict(doc), stat.S_IMODE(st.st_mode)
        except (KeyError, TypeError, ValueError, SearchveilError) as exc:
            raise InputFormatError(
                str(p), f"malformed budget file ({exc!r}): restore it from a copy; a budget "
                "file is written by searchveil only",
            ) from None  # fmt: skip

    def _open_file(self, dfd: int | None = None) -> int:
        try:
            return os.open(self.path if dfd is None else self.path.name,
                           os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dfd)  # fmt: skip
        except FileNotFoundError:
            raise InputFormatError(str(self.path), "no budget file (it was removed)") from None
        except OSError as exc:
            raise BudgetFileError(
                f"cannot read the budget file {str(self.path)!r} ({_why(exc)}); if it became "
                "a link, restore the real file"
            ) from exc

    def read(self) -> BudgetState:
        """The budget as the file holds it now (no lock: a consistent snapshot, by rename).
        A file renamed over between the open and the check is read again, from its name."""
        for _ in range(_REREADS):
            fd = self._open_file()
            try:
                return self._load(fd)[0]
            except _Replaced:
                continue
            finally:
                os.close(fd)
        raise BudgetFileError(
            f"the budget file {str(self.path)!r} was replaced {_REREADS} times while it was "
            "being read (other releases are writing it): run the command again"
        )

    def _lock(self) -> int:
        """The exclusive lock on the budget's directory, re-checked after locking to be the
        directory its path names (not moved or replaced meanwhile): its descriptor."""
        dfd = _open_dir(self.path)
        try:
            fcntl.flock(dfd, fcntl.LOCK_EX)
            a, b = os.fstat(dfd), os.stat(self.path.parent)
            if (a.st_dev, a.st_ino) != (b.st_dev, b.st_ino):
                raise BudgetFileError(
                    f"the directory of the budget file {str(self.path)!r} was moved or replaced "
                    f"while it was being locked; {UNCHANGED}: run the command again"
                )
        except OSError as exc:
            os.close(dfd)
            raise BudgetFileError(
                f"cannot lock the budget file {str(self.path)!r} ({_why(exc)}); {UNCHANGED}. "
                "Keep budget files on a local disk"
            ) from exc
        except BaseException:
            os.close(dfd)
            raise
        return dfd

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[BudgetState]:
        """Read, change and write the file under the exclusive lock, through the locked
        directory's descriptor; an error inside the block writes nothing."""
        dfd = self._lock()
        try:
            fd = self._open_file(dfd)
            try:
                state, mode = self._load(fd)
            finally:
                os.close(fd)
            yield state
            _write_at(dfd, self.path, _document(state), mode=mode)
        finally:
            os.close(dfd)  # closing the descriptor releases the lock

    def _release(self, out: str | os.PathLike[str]) -> dict[str, Any]:
        """Where a charged run will put its release, and the SHA-256 of the ledger there now
        (the release it would replace, or None): :meth:`refund` compares it with what is
        there."""
        try:
            before = ledger_sha256(out)
        except OSError:  # unreadable: refund will take anything there for this run's
            before = None
        return {"out": os.path.abspath(out), "replaces": before}

    def summary(self) -> dict[str, Any]:
        """:meth:`BudgetState.summary`, each pending charge marked with whether its process
        still runs on this machine and whether a new release is in place where it wrote; and
        the file's ``warnings``."""
        out = self.read().summary()
        for c in out["charges"]:
            if c["state"] == ChargeState.PENDING:
                c["process_running_here"] = _running_here(c.get("pid"))
                c["release_in_place"] = _release_in_place(c.get("release"))
        out["warnings"] = list(self.warnings)
        return out

    def release_budget(self, release_dir: str | os.PathLike[str]) -> dict[str, Any]:
        """What a written release was charged (the charge whose ledger SHA-256 is the SHA-256 of
        ``release_dir``'s ledger) and the budget's state now: for its report."""
        sha = ledger_sha256(release_dir)
        s = self.summary()
        hit = [c for c in s["charges"] if sha is not None and c.get("ledger_sha256") == sha]
        if not hit:
            raise InvalidParameterError(
                "budget", str(self.path), f"the budget file that charged {str(release_dir)!r} "
                "(none of its charges holds the SHA-256 of that release's ledger)",
            )  # fmt: skip
        c = hit[0]
        return {"file": str(self.given), "relation": s["relation"],
                "charge": {"id": c["id"], "what": c["what"], "state": c["state"],
                           "epsilon": c["charged"]["epsilon"], "delta": c["charged"]["delta"],
                           "committed_utc": c.get("committed_utc")},
                "total": s["total"], "spent": s["spent"], "pending": s["pending"],
                "left": s["left"], "charges": len(s["charges"])}  # fmt: skip

    def refund(self, charge_id: str) -> dict[str, Any]:
        """Release a pending charge left by a run that was killed. Refused while the charge's
        process still runs on this machine, and while a release that was not there when the
        run started is in place where it wrote (it may be this run's: its charge stands).
        Check yourself that nothing of the run was published elsewhere."""
        with self._transaction() as st:
            rec = st.find(charge_id)
            if rec["state"] == ChargeState.PENDING and _running_here(rec.get("pid")):
                raise InvalidParameterError(
                    "charge", charge_id, f"a pending charge whose process has ended (process "
                    f"{rec.get('pid')} still runs on this machine: its release may still be "
                    "written)",
                )  # fmt: skip
            rel = rec.get("release") or {}
            if rec["state"] == ChargeState.PENDING and _release_in_place(rel):
                raise InvalidParameterError(
                    "charge", charge_id, "a pending charge whose run published nothing: a "
                    f"release that was not there when the run started is in place at "
                    f"{rel.get('out')!r} (it may be this run's, so its charge stands; move it "
                    "away first only if it is not, and was never published)",
                )  # fmt: skip
            st.refund(charge_id)
            return dict(rec)
