"""Work a CELS party hands to worker processes: Paillier obfuscators computed ahead (they do not
depend on the message), P0's decryptions and solve.

:class:`Precomputer` wraps a :class:`concurrent.futures.ProcessPoolExecutor`. Its workers are
forked when it is created — before the party starts its network thread, so no lock can be
held across the fork — and die with the party (``PR_SET_PDEATHSIG`` on Linux, and a watchdog
thread that exits when the parent changes). With ``workers=0`` everything runs inline.

Obfuscators are produced in batches (:meth:`Precomputer.produce`) while the party does other
work (the union, the secure sum) and collected with :meth:`Precomputer.take`, which computes
any shortfall inline. Unused ones are discarded at the end of the run, never reused.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from searchveil.cels.paillier import PrivateKey, PublicKey

BATCH = 16


def _die_with_parent(parent: int) -> None:
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover - non-glibc systems
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(3)

    threading.Thread(target=watch, daemon=True).start()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the party handles ^C


def _noop() -> int:
    return os.getpid()


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """Run ``fn`` in a worker; return its result and the CPU seconds it took there."""
    t = time.process_time()
    out = fn(*args)
    return out, time.process_time() - t


def obfuscator_batch(pk: PublicKey, count: int) -> list[Any]:
    """``count`` obfuscators under ``pk`` (worker side; gmpy2 integers pickle as such)."""
    return pk.obfuscators(count)


def decrypt_batch(sk: PrivateKey, cts: list[int]) -> list[int]:
    return sk.decrypt_many(cts)


class Precomputer:
    """Obfuscators and other CPU work in ``workers`` forked processes (0 = inline)."""

    def __init__(self, workers: int, *, check: Callable[[], None] | None = None) -> None:
        self.workers = max(0, int(workers))
        self.check = check or (lambda: None)
        self._ex: cf.ProcessPoolExecutor | None = None
        self._queues: dict[str, deque[cf.Future[Any]]] = {}
        self._ready: dict[str, list[Any]] = {}
        self._accounted: dict[str, int] = {}
        self.produced_inline = 0
        self.worker_cpu: dict[str, float] = {}  # CPU seconds spent in the workers, by kind
        if self.workers:
            ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
            self._ex = cf.ProcessPoolExecutor(
                self.workers, mp_context=ctx, initializer=_die_with_parent,
                initargs=(os.getpid(),),
            )  # fmt: skip
            # start every worker now, while this process has a single thread
            for f in [self._ex.submit(_noop) for _ in range(self.workers)]:
                f.result()

    # -- obfuscators ------------------------------------------------------------------------
    def produce(self, tag: str, pk: PublicKey, total: int) -> None:
        """Make sure ``total`` obfuscators of ``tag`` are produced over the run (counting those
        already taken); the missing ones are queued for the workers."""
        todo = total - self._accounted.get(tag, 0)
        if todo <= 0 or self._ex is None:
            return
        q = self._queues.setdefault(tag, deque())
        self._accounted[tag] = total
        while todo > 0:
            b = min(BATCH, todo)
            q.append(self._ex.submit(_timed, obfuscator_batch, pk, b))
            todo -= b

    def take(self, tag: str, pk: PublicKey, count: int) -> list[Any]:
        """``count`` obfuscators: produced ones first (waiting for queued batches), the rest
        computed here."""
        ready = self._ready.setdefault(tag, [])
        q = self._queues.get(tag, deque())
        while q and len(ready) < count:
            ready.extend(self._wait(q.popleft(), "obfuscators"))
        out, self._ready[tag] = ready[:count], ready[count:]
        short = count - len(out)
        if short > 0:
            self.produced_inline += short
            self._accounted[tag] = self._accounted.get(tag, 0) + short
            for i in range(0, short, BATCH):
                self.check()
                out.extend(pk.obfuscators(min(BATCH, short - i)))
        return out

    # -- generic work ---------------------------------------------------------------------
    def map(self, fn: Callable[..., list[Any]], first: Any, chunks: Iterable[Any]) -> list[Any]:
        """``fn(first, chunk)`` for every chunk, in the workers; results concatenated in order."""
        chunks = list(chunks)
        if self._ex is None:
            out: list[Any] = []
            for c in chunks:
                self.check()
                out.extend(fn(first, c))
            return out
        futs = [self._ex.submit(_timed, fn, first, c) for c in chunks]
        out = []
        for f in futs:
            out.extend(self._wait(f, fn.__name__))
        return out

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a worker (keeps this process free for its network thread)."""
        if self._ex is None:
            return fn(*args)
        return self._wait(self._ex.submit(_timed, fn, *args), getattr(fn, "__name__", "call"))

    def _wait(self, f: cf.Future[Any], kind: str) -> Any:
        while True:
            self.check()
            try:
                out, cpu = f.result(timeout=0.2)
            except cf.TimeoutError:
                continue
            self.worker_cpu[kind] = self.worker_cpu.get(kind, 0.0) + cpu
            return out

    def close(self) -> None:
        if self._ex is not None:
            procs = list(getattr(self._ex, "_processes", {}).values())
            # the executor's manager thread also reaps the workers: when it wins that race, our
            # own join() cannot see the exit status (waitpid fails) and the process still looks
            # alive, so wait for that thread, which sets every worker's exit code
            manager = getattr(self._ex, "_executor_manager_thread", None)
            self._ex.shutdown(wait=False, cancel_futures=True)
            for p in procs:  # a batch in progress is not worth waiting for
                if p.is_alive():
                    p.kill()
            if manager is not None:
                manager.join(15)
            for p in procs:  # SIGKILLed: reaping is quick, but a loaded machine can take seconds
                p.join(15)
            self._ex = None

    def __enter__(self) -> Precomputer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
