"""Transport for the CELS parties: a full mesh of mutually authenticated TLS connections, with
liveness: a dead, stopped or cut-off peer is detected in seconds and stops every party.

* **Certificates** (:mod:`searchveil.cels.config`): a party accepts a peer only if its
  certificate verifies against the CA and is the one pinned for that party id.
* **Mesh** (phase ``mesh``). Party i connects to every party j < i (retrying while j starts)
  and accepts connections from every j > i, all within ``connect_timeout`` (60 s by default);
  the first frame on a connection is ``hello`` (party id and the run's session token). A
  failure names the peer and the cause (refused, TLS, no hello, wrong session).
* **Frames.** ``magic "CELS" | version u8 | phase u8 | type u16 | json length u32 |
  blob length u64`` then a UTF-8 JSON object and a binary blob (ciphertexts, arrays).
  The receiver checks the type it expects and the protocol module checks every field
  (:func:`expect`). **Sizes are capped from public sizes** (issue 30): a JSON body by
  :data:`MAX_JSON`; a blob above :data:`BLOB_FLOOR` by the cap the protocol sets for the
  frame's phase (:meth:`Mesh.allow`) from the sizes every party agreed on before it (key size,
  announced pair counts, universe, J, ℓ, padded output length). A frame of a phase whose cap
  is not yet known is held unread (its sender counts as alive) until the protocol sets it.
* **Liveness.** Every party sends a ``ping`` to every peer every second (``heartbeat_timeout``
  / 4 if smaller). A peer from which no byte has arrived for ``heartbeat_timeout`` seconds
  (10 by default) is declared dead — stopped, hung or cut off; a closed connection, a
  malformed or truncated frame and an ``abort`` are detected at once. Any of these sets one
  failure for the whole mesh: every pending or later ``recv``/``send`` raises
  :class:`ProtocolError` naming the peer, the phase and the cause, the party sends ``abort``
  to every peer (so all stop), and — if its main thread does not react within a few seconds —
  the ``on_stuck`` callback ends the process. A live peer that sends heartbeats but not the
  expected message within ``timeout`` seconds (600 by default) is also a failure.
* **I/O thread.** An asyncio loop in a background thread does all socket I/O (reading every
  connection continuously, so large simultaneous sends cannot deadlock); the protocol runs
  synchronously in the main thread. Every received byte can be appended to a transcript file
  (private: it holds other parties' encrypted and partly aggregated data; created 0600) and is
  counted per phase, as is every sent byte.
* **Test hooks** (:meth:`Mesh.inject`, only reachable through a party's fault hook, :mod:`.faults`,
  with ``SEARCHVEIL_CELS_TEST_HOOKS=1``): send a garbage frame, a truncated frame (then close), or
  drop a connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import queue
import ssl
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from searchveil.cels.config import (
    Config,
    fingerprint_pem,
)
from searchveil.cels.frames import Frame, Traffic, open_transcript
from searchveil.errors import InputFormatError, InvalidParameterError, SearchveilError

MAGIC = b"CELS"
VERSION = 7
HEADER = struct.Struct(">4sBBHIQ")
MAX_JSON = 1 << 20  # the largest body, the public key, is ~3 KiB at 4096 bits
BLOB_FLOOR = 64 << 10  # always accepted; above it, the cap of the frame's phase
READ_CHUNK = 1 << 20
STUCK_GRACE = 4.0  # seconds the main thread has to react to a failure before on_stuck

#: both modes' phases in run order (conditional: no publish, profile; e2e: no rows … sample)
PHASES = ("mesh", "setup", "union", "sum", "publish", "rows", "nlp", "solve", "unpermute",
          "verify", "sample", "output", "profile", "query_union", "query_sum", "query_publish",
          "query_output", "shape", "head", "tables", "commit")  # fmt: skip
TYPES = (
    "hello", "abort", "bye", "pk", "union_fwd", "union_set", "universe", "sum_fwd", "sum_result",
    "rows", "nlp_af", "nlp_sum", "nlp_b", "nlp_perm", "nlp_p0", "x_perm", "x_unperm", "x_final",
    "repair", "split", "out_fwd", "out_pool", "out_dec", "output", "stats", "commit", "ping",
    "params", "e2e_pub", "e2e_profile", "union_size", "out_size", "out_len", "union_key",
    "union_slots", "e2e_stats")  # fmt: skip


class ProtocolError(SearchveilError):
    """A peer failed: crashed, stalled, timed out, aborted or sent a malformed message.

    ``peer`` is the party the failure points at (None: this party itself / unknown), ``phase``
    the protocol phase, ``cause`` the reason (never empty)."""

    def __init__(
        self,
        cause: str,
        *,
        peer: int | None = None,
        phase: str | None = None,
        at: float | None = None,
    ) -> None:
        self.cause = cause.strip() or "unknown cause"
        self.peer = peer
        self.phase = phase
        self.at = time.time() if at is None else at  # when it was detected (epoch seconds)
        where = f"in phase '{phase}'" if phase else ""
        super().__init__(f"{where}: {self.cause}" if where else self.cause)


def _left(deadline: float) -> float:
    """Seconds to a monotonic deadline (at least 0.1: one more try)."""
    return max(0.1, deadline - time.monotonic())


def why(exc: BaseException) -> str:
    """An exception as text that is never empty (``TimeoutError()`` has no message)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Truncated(Exception):
    def __init__(self, got: int, want: int) -> None:
        super().__init__(f"{got} of {want} bytes")
        self.got, self.want = got, want


FAULT_KINDS = ("garbage", "truncated", "drop")
#: a peer's connection ended without a goodbye: a consequence, to cels.runner._blamed
CLOSED_WITHOUT_GOODBYE = "closed the connection without a goodbye"


class Mesh:
    """All TLS connections of one party. Use as a context manager."""

    def __init__(
        self,
        config: Config,
        me: int,
        *,
        transcript: Path | None = None,
        on_stuck: Callable[[ProtocolError], None] | None = None,
        mesh_fault: tuple[str, int | None] | None = None,
    ) -> None:
        if me not in config.parties:
            raise InvalidParameterError("id", me, f"one of {config.ids}")
        self.config, self.me = config, me
        self.timeout = config.timeout
        self.connect_timeout = config.connect_timeout
        self.hb_timeout = config.heartbeat_timeout
        self.hb_period = min(1.0, self.hb_timeout / 4)
        self.traffic = Traffic()
        self.phase = "mesh"
        self.others = [j for j in config.ids if j != me]
        self._queues: dict[int, queue.Queue[Frame]] = {j: queue.Queue() for j in self.others}
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._pins = {j: fingerprint_pem(a.cert) for j, a in config.parties.items()}
        self._lock = threading.Lock()
        self._failure: ProtocolError | None = None
        self._failed_at = 0.0
        self._finished: set[int] = set()  # peers that said bye
        self._dropped: set[int] = set()  # connections this party cut (test hook)
        self._last_rx: dict[int, float] = {}
        self._caps: dict[str, int] = {}  # phase → largest blob its frames may carry
        self._holding: set[int] = set()  # peers whose next frame waits for its phase's cap
        self._on_stuck = on_stuck
        self._stuck_reported = False
        self._mesh_fault = mesh_fault
        self._transcript: IO[bytes] | None = None
        if transcript is not None:
            self._transcript = open_transcript(transcript, me, config.session)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._closing = False
        self._tasks: list[asyncio.Task[None]] = []

    # -- failure state ------------------------------------------------------------------
    def _fail(self, peer: int | None, cause: str) -> None:
        with self._lock:
            if self._failure is None and not self._closing:
                self._failure = ProtocolError(cause, peer=peer, phase=self.phase)
                self._failed_at = time.monotonic()

    @property
    def failure(self) -> ProtocolError | None:
        return self._failure

    def check(self) -> None:
        """Raise the mesh's failure, if any (call it inside long computations)."""
        f = self._failure
        if f is not None:
            raise ProtocolError(f.cause, peer=f.peer, phase=f.phase, at=f.at)

    # -- TLS contexts -------------------------------------------------------------------
    def _ctx(self, server: bool) -> ssl.SSLContext:
        me = self.config.parties[self.me]
        if me.key is None:
            raise InputFormatError("config", f"party {self.me} has no key file in the config")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.verify_mode = ssl.CERT_REQUIRED
        try:
            ctx.load_cert_chain(me.cert, me.key)
            ctx.load_verify_locations(self.config.ca)
        except (OSError, ssl.SSLError) as exc:
            raise InputFormatError(str(me.cert), f"cannot load TLS material: {exc}") from exc
        if not server:
            ctx.check_hostname = True
        return ctx

    def _peer_id(self, writer: asyncio.StreamWriter, allowed: list[int]) -> int:
        sslobj = writer.get_extra_info("ssl_object")
        der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
        if not der:
            raise ProtocolError("a peer presented no certificate", phase="mesh")
        fp = hashlib.sha256(der).hexdigest()
        for j in allowed:
            if self._pins[j] == fp:
                return j
        raise ProtocolError(
            "refused a peer whose certificate is not the one listed for any party "
            f"it may be ({', '.join(f'P{j}' for j in allowed)})",
            phase="mesh",
        )

    # -- connection setup ---------------------------------------------------------------
    def __enter__(self) -> Mesh:
        self._thread.start()
        try:
            fut = asyncio.run_coroutine_threadsafe(self._connect_all(), self._loop)
            fut.result(timeout=self.connect_timeout + 10)
        except ProtocolError as exc:
            self.close(ok=False)
            raise ProtocolError(exc.cause, peer=exc.peer, phase="mesh", at=exc.at) from exc
        except (TimeoutError, OSError, ssl.SSLError) as exc:
            self.close(ok=False)
            raise ProtocolError(
                f"could not connect the mesh within {self.connect_timeout:g} s: {why(exc)}",
                phase="mesh",
            ) from exc
        except BaseException:
            self.close(ok=False)
            raise
        self._loop.call_soon_threadsafe(
            lambda: self._tasks.append(self._loop.create_task(self._monitor()))
        )
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        self.close(ok=exc_type is None)

    async def _connect_all(self) -> None:
        """Listen for the higher ids, dial the lower ones (sending our hello), then wait for
        every higher id's connection and hello — all within ``connect_timeout``."""
        higher = [j for j in self.config.ids if j > self.me]
        accepted: asyncio.Queue[tuple[int | None, Any]] = asyncio.Queue()
        deadline = time.monotonic() + self.connect_timeout
        self._tasks.append(self._loop.create_task(self._heartbeat()))
        if higher:
            await self._listen(higher, accepted, deadline)
        cctx = self._ctx(False)
        for j in (j for j in self.config.ids if j < self.me):
            r, w = await self._dial(j, cctx, deadline)
            self._writers[j] = w
            self._last_rx[j] = time.monotonic()
            if self._mesh_fault is not None and self._mesh_fault[1] in (None, j):
                await self._fault(j, self._mesh_fault[0])
            else:
                await self._write(j, "hello", {"id": self.me, "session": self.config.session}, b"")
            self._tasks.append(self._loop.create_task(self._reader(j, r)))
        pending = set(higher)
        while pending:
            try:
                j_or_none, item = await asyncio.wait_for(accepted.get(), _left(deadline))
            except TimeoutError:
                miss = ", ".join(f"P{j}" for j in sorted(pending))
                raise ProtocolError(
                    f"{miss} did not connect within {self.connect_timeout:g} s (not started, "
                    "unreachable, or refused our certificate)",
                    peer=min(pending), phase="mesh",
                ) from None  # fmt: skip
            if isinstance(item, str):
                raise ProtocolError(item, peer=j_or_none, phase="mesh")
            if j_or_none is None:  # pragma: no cover - a str item always goes above
                raise ProtocolError("an unknown peer connected", phase="mesh")
            j = j_or_none
            if j not in pending:
                raise ProtocolError(f"P{j} connected twice", peer=j, phase="mesh")
            pending.discard(j)
            r, w = item
            self._writers[j] = w
            self._last_rx[j] = time.monotonic()
            self._tasks.append(self._loop.create_task(self._reader(j, r)))
            if self._mesh_fault is not None and self._mesh_fault[1] in (None, j):
                await self._fault(j, self._mesh_fault[0])

    async def _listen(
        self, higher: list[int], accepted: asyncio.Queue[tuple[int | None, Any]], deadline: float
    ) -> None:
        """Accept the higher ids: each connection's (peer, (reader, writer)) — or (peer, why
        not) — goes to ``accepted``."""
        me = self.config.parties[self.me]

        async def on_conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await accepted.put(await self._accept_hello(r, w, higher, deadline))

        try:
            self._server = await asyncio.start_server(
                on_conn, me.host, me.port, ssl=self._ctx(True), reuse_address=True,
                ssl_handshake_timeout=self.connect_timeout,
            )  # fmt: skip
        except OSError as exc:
            raise ProtocolError(
                f"cannot listen on {me.host}:{me.port}: {why(exc)}", phase="mesh"
            ) from exc

    async def _accept_hello(
        self, r: asyncio.StreamReader, w: asyncio.StreamWriter, higher: list[int], deadline: float
    ) -> tuple[int | None, Any]:
        """An incoming connection: its peer (by certificate) and (reader, writer) once its hello
        is read and checked; else the peer (None: unknown) and why not (the connection closed)."""
        try:
            j = self._peer_id(w, higher)
        except ProtocolError as exc:
            w.close()
            return None, exc.cause
        try:
            hello = await asyncio.wait_for(self._read_frame(r, j), _left(deadline))
            self._check_hello(hello, j)
        except TimeoutError:
            problem = f"P{j} connected but sent no hello"
        except _Truncated as exc:
            problem = f"P{j} sent a truncated hello ({exc}) and closed"
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            problem = f"P{j} closed the connection before its hello ({why(exc)})"
        except (InputFormatError, ProtocolError) as exc:
            problem = f"P{j} sent a malformed hello: {exc}"
        else:
            return j, (r, w)
        w.close()
        return j, problem

    async def _dial(
        self, j: int, cctx: ssl.SSLContext, deadline: float
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Connect to the lower id ``j`` (retrying until the deadline) and check its
        certificate names it."""
        addr = self.config.parties[j]
        while True:
            try:
                r, w = await asyncio.wait_for(
                    asyncio.open_connection(
                        addr.host, addr.port, ssl=cctx, server_hostname=f"cels-party-{j}",
                        ssl_handshake_timeout=self.connect_timeout,
                    ),
                    _left(deadline),
                )  # fmt: skip
                break
            except ssl.SSLError as exc:
                raise ProtocolError(
                    f"TLS handshake with P{j} at {addr.host}:{addr.port} failed: {why(exc)}",
                    peer=j, phase="mesh",
                ) from exc  # fmt: skip
            except (OSError, TimeoutError) as exc:
                if time.monotonic() >= deadline:
                    raise ProtocolError(
                        f"could not connect to P{j} at {addr.host}:{addr.port} within "
                        f"{self.connect_timeout:g} s (last attempt: {why(exc)})",
                        peer=j, phase="mesh",
                    ) from exc  # fmt: skip
                await asyncio.sleep(0.1)
        try:
            self._peer_id(w, [j])
        except ProtocolError as exc:
            raise ProtocolError(f"P{j} at {addr.host}:{addr.port}: {exc.cause}", peer=j,
                                phase="mesh") from exc  # fmt: skip
        return r, w

    def _check_hello(self, f: Frame, j: int) -> None:
        if f.type != "hello" or f.body != {"id": j, "session": self.config.session}:
            raise ProtocolError(f"P{j}: bad hello (wrong id or session)", peer=j, phase="mesh")

    # -- liveness -----------------------------------------------------------------------
    async def _heartbeat(self) -> None:
        """A ``ping`` to every connected peer every ``hb_period`` seconds, from the moment the
        first connection is up, so a long computation never looks like a dead party."""
        head = HEADER.pack(MAGIC, VERSION, 0, TYPES.index("ping"), 2, 0) + b"{}"
        while True:
            await asyncio.sleep(self.hb_period)
            for j, w in list(self._writers.items()):
                if w.is_closing() or j in self._dropped:
                    continue
                try:
                    w.write(head)
                    self.traffic.heartbeat_bytes += len(head)
                except (ConnectionError, OSError, RuntimeError):
                    continue

    async def _monitor(self) -> None:
        """Declare a peer dead after ``hb_timeout`` seconds without a byte from it; after a
        failure, call ``on_stuck`` if the main thread has not stopped within STUCK_GRACE."""
        tick = 0.25
        last = time.monotonic()
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            lag = now - last - tick
            last = now
            if lag > 1.0:  # this process was starved (CPU, GIL): not the peers' fault
                for j in self._last_rx:
                    self._last_rx[j] += lag
            if self._failure is None:
                for j, t in list(self._last_rx.items()):
                    if j in self._finished or j in self._dropped or j in self._holding:
                        continue
                    if now - t > self.hb_timeout:
                        self._fail(
                            j,
                            f"no data and no heartbeat from P{j} for {now - t:.0f} s "
                            "(limit {:g} s): it is stopped, hung or cut off".format(
                                self.hb_timeout
                            ),
                        )
            elif (
                self._on_stuck is not None
                and not self._stuck_reported
                and now - self._failed_at > STUCK_GRACE
            ):
                self._stuck_reported = True
                err = self._failure
                threading.Thread(target=self._on_stuck, args=(err,), daemon=True).start()

    # -- frames -------------------------------------------------------------------------
    async def _read_frame(self, r: asyncio.StreamReader, j: int) -> Frame:
        try:
            head = await r.readexactly(HEADER.size)
        except asyncio.IncompleteReadError as exc:
            if exc.partial:
                raise _Truncated(len(exc.partial), HEADER.size) from exc
            raise
        self._last_rx[j] = time.monotonic()
        magic, ver, ph, ty, jl, bl = HEADER.unpack(head)
        if magic != MAGIC:
            raise InputFormatError(f"P{j}", f"bad frame header (magic {magic[:4]!r})")
        if ver != VERSION:
            raise InputFormatError(f"P{j}", f"protocol version {ver} (this party speaks {VERSION})")
        if ph >= len(PHASES) or ty >= len(TYPES):
            raise InputFormatError(f"P{j}", f"unknown phase {ph} or message type {ty}")
        if jl > MAX_JSON:
            raise InputFormatError(f"P{j}", f"a {jl}-byte frame body (at most {MAX_JSON})")
        if bl > BLOB_FLOOR:
            await self._within_cap(j, PHASES[ph], bl)
        got = HEADER.size
        parts: list[bytes] = []
        try:
            js = await r.readexactly(jl)
            got += jl
            remaining = bl
            while remaining:
                chunk = await r.readexactly(min(READ_CHUNK, remaining))
                parts.append(chunk)
                got += len(chunk)
                remaining -= len(chunk)
                self._last_rx[j] = time.monotonic()
        except asyncio.IncompleteReadError as exc:
            raise _Truncated(got + len(exc.partial), HEADER.size + jl + bl) from exc
        blob = b"".join(parts)
        self._last_rx[j] = time.monotonic()
        phase = PHASES[ph]
        if TYPES[ty] == "ping":
            self.traffic.heartbeat_bytes += HEADER.size + jl + bl
        else:
            self.traffic.received[phase] += HEADER.size + jl + bl
            # a goodbye is connection control (read or not before the close: a race), not kept
            if self._transcript is not None and TYPES[ty] != "bye":
                self._transcript.write(head)
                self._transcript.write(js)
                self._transcript.write(blob)
        try:
            body = json.loads(js.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputFormatError(f"P{j}", "frame body is not JSON") from exc
        if not isinstance(body, dict):
            raise InputFormatError(f"P{j}", "frame body is not a JSON object")
        return Frame(j, TYPES[ty], phase, body, blob)

    def allow(self, phase: str, nbytes: int) -> None:
        """Frames of ``phase`` may carry blobs of up to ``nbytes`` (set from public sizes)."""
        self._caps[phase] = max(int(nbytes), BLOB_FLOOR)

    async def _within_cap(self, j: int, phase: str, size: int) -> None:
        """Hold the frame until its phase has a cap (the sender counts as alive), then refuse
        it if its blob is larger."""
        self._holding.add(j)
        while phase not in self._caps and self._failure is None and not self._closing:
            await asyncio.sleep(0.02)
        self._holding.discard(j)
        self._last_rx[j] = time.monotonic()
        cap = self._caps.get(phase, BLOB_FLOOR)
        if size > cap:
            raise InputFormatError(
                f"P{j}", f"a {size}-byte frame in phase {phase!r}, where the run's public sizes "
                f"allow at most {cap} bytes",
            )  # fmt: skip

    async def _reader(self, j: int, r: asyncio.StreamReader) -> None:
        q = self._queues[j]
        while True:
            try:
                f = await self._read_frame(r, j)
            except _Truncated as exc:
                if not (self._closing or j in self._finished or j in self._dropped):
                    self._fail(j, f"P{j} sent a truncated frame: the connection closed after {exc}")
                return
            except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
                if self._closing or j in self._finished:
                    return
                if j in self._dropped:
                    self._fail(
                        self.me, f"this party dropped its connection to P{j} (injected test fault)"
                    )
                else:
                    self._fail(
                        j,
                        f"P{j} {CLOSED_WITHOUT_GOODBYE} ({why(exc)}): "
                        "it exited, crashed or was killed, or the network dropped it",
                    )
                return
            except InputFormatError as exc:
                if not self._closing:
                    self._fail(j, f"P{j} sent a malformed frame: {exc.problem}")
                return
            if f.type == "ping":
                continue
            if f.type == "abort":
                reason = str(f.body.get("reason", "")).strip()[:600] or "no reason given"
                culprit = f.body.get("culprit")
                if not isinstance(culprit, int) or culprit not in self.config.parties:
                    culprit = j
                self._fail(culprit, f"P{j} aborted: {reason}")
                return
            if f.type == "bye":
                self._finished.add(j)
                return
            q.put(f)

    async def _write(self, j: int, type_: str, body: dict[str, Any], blob: bytes) -> None:
        js = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        head = HEADER.pack(
            MAGIC, VERSION, PHASES.index(self.phase), TYPES.index(type_), len(js), len(blob)
        )
        w = self._writers[j]
        w.write(head)
        w.write(js)
        if blob:
            w.write(blob)
        self.traffic.sent[self.phase] += len(head) + len(js) + len(blob)
        await w.drain()

    def _wait(self, fut: Any, what: str, peer: int | None) -> Any:
        start = time.monotonic()
        while True:
            try:
                return fut.result(timeout=0.2)
            except TimeoutError:
                if self._failure is not None:
                    fut.cancel()
                    self.check()
                if time.monotonic() - start > self.timeout:
                    fut.cancel()
                    raise ProtocolError(
                        f"{what} did not complete within {self.timeout:g} s", peer=peer,
                        phase=self.phase,
                    ) from None  # fmt: skip
            except (ConnectionError, OSError, RuntimeError) as exc:
                self.check()
                raise ProtocolError(f"{what} failed: {why(exc)}", peer=peer,
                                    phase=self.phase) from exc  # fmt: skip

    def send(self, j: int, type_: str, body: dict[str, Any], blob: bytes = b"") -> None:
        self.check()
        fut = asyncio.run_coroutine_threadsafe(self._write(j, type_, body, blob), self._loop)
        self._wait(fut, f"sending {type_!r} to P{j}", j)

    def recv(self, j: int, type_: str) -> Frame:
        """The next frame from party ``j``; it must be of type ``type_``. Raises at once when
        any peer has failed; times out when ``j`` is alive but sends nothing else for
        ``timeout`` seconds."""
        start = time.monotonic()
        q = self._queues[j]
        while True:
            self.check()
            try:
                item = q.get(timeout=0.2)
                break
            except queue.Empty:
                if j in self._finished:
                    raise ProtocolError(
                        f"P{j} ended the session while this party waited for {type_!r}",
                        peer=j, phase=self.phase,
                    ) from None  # fmt: skip
                if time.monotonic() - start > self.timeout:
                    raise ProtocolError(
                        f"P{j} is alive but sent no {type_!r} within {self.timeout:g} s",
                        peer=j, phase=self.phase,
                    ) from None  # fmt: skip
        if item.type != type_:
            raise ProtocolError(
                f"P{j} sent {item.type!r} where {type_!r} was expected", peer=j, phase=self.phase
            )
        return item

    # -- test hooks -----------------------------------------------------------------------
    async def _fault(self, j: int, kind: str) -> None:
        w = self._writers[j]
        if kind == "garbage":
            w.write(b"NOT A CELS FRAME" * 4)
            await w.drain()
        elif kind == "truncated":
            head = HEADER.pack(MAGIC, VERSION, PHASES.index(self.phase), TYPES.index("stats"),
                               100, 0)  # fmt: skip
            w.write(head + b'{"partial":')
            await w.drain()
            self._dropped.add(j)
            w.close()
        elif kind == "drop":
            self._dropped.add(j)
            w.close()
        else:  # pragma: no cover - validated by the caller
            raise InvalidParameterError("fault", kind, "|".join(FAULT_KINDS))

    def inject(self, kind: str, target: int | None = None) -> None:
        """Test hook: a garbage frame, a truncated frame (then close) or a dropped connection,
        to ``target`` or to every peer."""
        for j in [target] if target is not None else list(self._writers):
            if j in self._writers:
                asyncio.run_coroutine_threadsafe(self._fault(j, kind), self._loop).result(5)

    # -- shutdown -------------------------------------------------------------------------
    def abort(self, reason: str, culprit: int | None = None) -> None:
        """Tell every peer to stop (best effort, at most ~1 s)."""
        body = {"reason": reason[:600], "culprit": culprit}

        async def send_all() -> None:
            ws = []
            for j, w in list(self._writers.items()):
                if j in self._dropped or w.is_closing():
                    continue
                js = json.dumps(body, ensure_ascii=False).encode("utf-8")
                ph = PHASES.index(self.phase)
                w.write(HEADER.pack(MAGIC, VERSION, ph, TYPES.index("abort"), len(js), 0) + js)
                ws.append(w.drain())
            await asyncio.wait_for(asyncio.gather(*ws, return_exceptions=True), 1.0)

        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(send_all(), self._loop).result(timeout=2)
            except (TimeoutError, ConnectionError, OSError, RuntimeError):
                pass

    def close(self, ok: bool = False) -> None:
        if self._thread.is_alive():

            async def shut() -> None:
                if ok:  # tell the peers this end is done, so our EOF is not a failure
                    for j, w in list(self._writers.items()):
                        if j not in self._dropped and not w.is_closing():
                            w.write(HEADER.pack(MAGIC, VERSION, PHASES.index(self.phase),
                                                TYPES.index("bye"), 2, 0) + b"{}")  # fmt: skip
                    await asyncio.wait_for(
                        asyncio.gather(*(w.drain() for w in self._writers.values()),
                                       return_exceptions=True),
                        2.0,
                    )  # fmt: skip
                self._closing = True
                for t in self._tasks:
                    t.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)
                for w in self._writers.values():
                    w.close()
                if self._server is not None:
                    self._server.close()

            try:
                asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=5)
            except (TimeoutError, RuntimeError, OSError):
                pass
            self._closing = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        self._closing = True
        if self._transcript is not None:
            self._transcript.close()
            self._transcript = None


def expect(body: dict[str, Any], schema: dict[str, type | tuple[type, ...]], peer: int) -> None:
    """Strict schema: exactly these keys, each of these types (bool is not an int); a mismatch
    is ``peer``'s fault."""
    if set(body) != set(schema):
        raise ProtocolError(
            f"P{peer} sent a malformed message: keys {sorted(body)}, expected {sorted(schema)}",
            peer=peer,
        )
    for k, t in schema.items():
        v = body[k]
        if (isinstance(v, bool) and t is not bool) or not isinstance(v, t):
            raise ProtocolError(
                f"P{peer} sent a malformed message: {k} has the wrong type", peer=peer
            )
