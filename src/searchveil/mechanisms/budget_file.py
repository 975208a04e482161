"""The budget of one dataset across releases, in a file (``searchveil budget init|show|refund``,
``--budget FILE`` on every release command, ``searchveil.Session.open``; docs/privacy/budget.md).

The file holds only public facts — the total (ε, δ), the neighbouring relation it is kept in,
and for each release charged: what it was (``release korolova``), its cost and split, its state,
its times, the SHA-256 of its public ledger — never a path, hash or size of a private input; it
may be published with the releases.

**Charging** (:meth:`DatasetBudget.charge`) is three short transactions, each under an
exclusive ``fcntl.flock`` on a sidecar lock file (``FILE.lock``, created by ``budget init`` and
never deleted) and each written to a temporary file that is fsynced and renamed over the budget
(so a reader sees the old file or the new one, never half of one):

1. *admit*: the cost (converted to the budget's relation where that is documented) is compared
   with what is left — total minus committed and pending charges — and refused (nothing
   written) or appended as ``pending``. Two releases started at once are serialised by the
   lock: the second sees the first's pending charge.
2. the release runs (outside the lock);
3. *commit* (the release was written: its ledger's SHA-256, its cost as written, the time) or,
   when the run raised an error, *refund* (the entry is kept, marked ``refunded``).

A process killed between 1 and 3 leaves its charge ``pending``: it stays counted as spent
(the release may have been published), ``budget show`` lists it, and ``searchveil budget refund
FILE --charge ID`` releases it once the operator has checked that nothing was published.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from searchveil.errors import (
    InputFormatError,
    InternalError,
    InvalidParameterError,
    OutputExistsError,
)
from searchveil.io.ledger import LEDGER_NAME
from searchveil.mechanisms.accounting import Budget
from searchveil.mechanisms.budget import (
    BudgetState,
    Charge,
    ChargeState,
    NoGuarantee,
    PrivacyCost,
    Relation,
)
from searchveil.rng import secure_token
from searchveil.validate import check_positive, check_probability, parse_choice

__all__ = ["BUDGET_KIND", "DatasetBudget", "init_budget", "lock_path"]

BUDGET_KIND = "searchveil-budget"
FORMAT_VERSION = 1
PUBLIC_NOTE = (
    "PUBLIC: the privacy budget of one dataset across its releases - the total, the "
    "neighbouring relation, and each release's cost, state, times and public ledger's SHA-256; "
    "no path, hash or size of a private input. It may be published with the releases."
)


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The sidecar lock file of a budget file (``FILE.lock``, beside it)."""
    p = Path(path)
    return p.with_name(p.name + ".lock")


def _write(path: Path, doc: dict[str, Any], *, exclusive: bool = False) -> None:
    """Write ``doc`` to a temporary file beside ``path``, fsync it, rename it into place (with
    ``exclusive``: link it, so an existing file is never replaced), fsync the directory."""
    tmp = path.with_name(f".{path.name}.tmp-{secure_token()}")
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            fh.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                raise OutputExistsError(
                    f"the budget file {str(path)!r} already exists; a dataset has one budget "
                    "(searchveil budget show FILE)"
                ) from None
        else:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def init_budget(
    path: str | os.PathLike[str],
    *,
    epsilon: float,
    delta: float,
    relation: Relation | str,
    one_record_per_user: bool = False,
) -> DatasetBudget:
    """Declare the total (ε, δ) of one dataset under ``relation`` in a new budget file (and
    its lock file). ``one_record_per_user``: every table charged to it holds one record per
    user (record-level releases then compose with a user-level budget)."""
    eps = check_positive("epsilon", epsilon)
    dl = check_probability("delta", delta, open_low=False)
    rel = parse_choice("relation", relation, Relation)
    p = Path(path)
    if not p.parent.is_dir():
        raise InvalidParameterError("budget", str(p), "a path whose directory exists")
    state = BudgetState(Budget(eps, dl), rel, bool(one_record_per_user))
    _write(p, _document(state), exclusive=True)
    lock_path(p).touch(exist_ok=True)
    return DatasetBudget(p)


def _document(state: BudgetState) -> dict[str, Any]:
    return {"kind": BUDGET_KIND, "format_version": FORMAT_VERSION, "PUBLIC": PUBLIC_NOTE,
            **state.to_dict()}  # fmt: skip


def _running_here(pid: Any) -> bool:
    """Whether a process with this id runs on this machine (a pending charge's owner)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DatasetBudget:
    """A budget file (module docstring). Every method reads the file afresh."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.read()  # a missing or malformed file fails here, before any release work

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> DatasetBudget:
        return cls(path)

    def read(self) -> BudgetState:
        """The budget as the file holds it now (no lock: a consistent snapshot, by rename)."""
        p = self.path
        if not p.is_file():
            raise InputFormatError(
                str(p), "no budget file (create one: searchveil budget init FILE --epsilon E "
                "--delta D --relation R)",
            )  # fmt: skip
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputFormatError(str(p), f"not a budget file (invalid JSON: {exc})") from None
        if not isinstance(doc, dict) or doc.get("kind") != BUDGET_KIND:
            raise InputFormatError(str(p), "not a searchveil budget file")
        if doc.get("format_version") != FORMAT_VERSION:
            raise InputFormatError(str(p), f"budget format {doc.get('format_version')!r}; this "
                                   f"searchveil reads {FORMAT_VERSION}")  # fmt: skip
        try:
            return BudgetState.from_dict(doc)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputFormatError(str(p), f"malformed budget file: {exc!r}") from None

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[BudgetState]:
        """Read, change and write the file under the exclusive lock; an error inside the block
        writes nothing."""
        fd = os.open(lock_path(self.path), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            state = self.read()
            yield state
            _write(self.path, _document(state))
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    def summary(self) -> dict[str, Any]:
        """:meth:`BudgetState.summary`, each pending charge marked with whether its process
        still runs on this machine."""
        out = self.read().summary()
        for c in out["charges"]:
            if c["state"] == ChargeState.PENDING:
                c["process_running_here"] = _running_here(c.get("pid"))
        return out

    @contextlib.contextmanager
    def charge(self, cost: PrivacyCost | NoGuarantee, *, what: str) -> Iterator[Charge]:
        """Admit ``cost`` as a pending charge (or refuse it, writing nothing), run the block,
        then commit it with the ledger the block recorded (:meth:`Charge.record_written`) — or
        refund it when the block raises an :class:`Exception`. A ``KeyboardInterrupt`` or a
        killed process leaves it pending (counted as spent)."""
        with self._transaction() as st:
            rec = st.admit(cost, what=what)
        ch = Charge(rec["id"], what)
        try:
            yield ch
        except Exception:
            with self._transaction() as st:
                st.refund(rec["id"])
            raise
        with self._transaction() as st:
            over = st.commit(rec["id"], ledger_sha256=ch.ledger_sha256, ledger=ch.ledger)
        ch.summary = self.summary()
        if over is not None:
            raise InternalError(over)

    def release_budget(self, release_dir: str | os.PathLike[str]) -> dict[str, Any]:
        """What a written release was charged (the charge whose ledger SHA-256 is the SHA-256 of
        ``release_dir``'s ledger) and the budget's state now: for its report."""
        raw = (Path(release_dir) / LEDGER_NAME).read_bytes()
        sha = hashlib.sha256(raw).hexdigest()
        s = self.summary()
        hit = [c for c in s["charges"] if c.get("ledger_sha256") == sha]
        if not hit:
            raise InvalidParameterError(
                "budget", str(self.path), f"the budget file that charged {str(release_dir)!r} "
                "(none of its charges holds the SHA-256 of that release's ledger)",
            )  # fmt: skip
        c = hit[0]
        return {"file": str(self.path), "relation": s["relation"],
                "charge": {"id": c["id"], "what": c["what"], "state": c["state"],
                           "epsilon": c["charged"]["epsilon"], "delta": c["charged"]["delta"],
                           "committed_utc": c.get("committed_utc")},
                "total": s["total"], "spent": s["spent"], "pending": s["pending"],
                "left": s["left"], "charges": len(s["charges"])}  # fmt: skip

    def refund(self, charge_id: str) -> dict[str, Any]:
        """Release a pending charge left by a run that was killed — only after checking that
        nothing was published (its release directory does not exist). Refused while the
        charge's process still runs on this machine."""
        with self._transaction() as st:
            rec = st.find(charge_id)
            if rec["state"] == ChargeState.PENDING and _running_here(rec.get("pid")):
                raise InvalidParameterError(
                    "charge", charge_id, f"a pending charge whose process has ended (process "
                    f"{rec.get('pid')} still runs on this machine: its release may still be "
                    "written)",
                )  # fmt: skip
            st.refund(charge_id)
            return dict(rec)
