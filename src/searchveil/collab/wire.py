"""Transport for the CELS parties: a full mesh of mutually authenticated TLS connections.

* **Certificates.** :func:`make_certificates` creates a throw-away CA and one certificate per
  party (ECDSA P-256, SAN ``DNS:cels-party-<id>`` and ``IP:127.0.0.1``) with ``cryptography``.
  A party accepts a peer only if the TLS handshake verifies against the CA *and* the peer's
  certificate is byte-for-byte the one listed for that party id in the configuration
  (certificate pinning): an unknown peer, even one signed by the same CA, is refused.
  Both sides use ``CERT_REQUIRED``, TLS ≥ 1.2.
* **Mesh.** Party i connects to every party j < i (retrying until the timeout while j starts)
  and accepts connections from every j > i. The first frame on a connection is ``hello``
  (party id and the run's session token).
* **Frames.** ``magic "CELS" | version u8 | phase u8 | type u16 | json length u32 |
  blob length u64`` then a UTF-8 JSON object and a binary blob (ciphertexts, arrays).
  Sizes are capped; the receiver checks the type it expects and the protocol module checks
  every field (:func:`expect`). A malformed frame, an ``abort`` frame, a closed connection or
  a timeout raises :class:`ProtocolError` and the party stops; on any error a party sends
  ``abort`` to every peer, so all stop.
* **I/O thread.** An asyncio loop in a background thread does all socket I/O (reading every
  connection continuously, so large simultaneous sends cannot deadlock); the protocol runs
  synchronously in the main thread. Every received byte can be appended to a transcript file
  and is counted per phase, as is every sent byte.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import ipaddress
import json
import queue
import ssl
import struct
import threading
import time
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from searchveil.errors import InputFormatError, InvalidParameterError, SearchveilError

MAGIC = b"CELS"
VERSION = 1
HEADER = struct.Struct(">4sBBHIQ")
MAX_JSON = 64 << 20
MAX_BLOB = 8 << 30

PHASES = (
    "setup", "union", "sum", "rows", "nlp", "solve", "unpermute", "verify", "sample", "output",
    "commit",
)  # fmt: skip
TYPES = (
    "hello", "abort", "bye", "pk", "union_fwd", "union_set", "universe", "sum_fwd", "sum_result",
    "rows", "nlp_af", "nlp_sum", "nlp_perm", "nlp_p0", "x_perm", "x_unperm", "x_final",
    "repair", "split", "out_fwd", "out_pool", "out_dec", "output", "stats", "commit", "ping",
)  # fmt: skip


class ProtocolError(SearchveilError):
    """A peer failed: crashed, timed out, aborted or sent a malformed message."""


@dataclass(frozen=True)
class PartyAddress:
    id: int
    host: str
    port: int
    cert: Path
    key: Path | None


@dataclass(frozen=True)
class Config:
    parties: dict[int, PartyAddress]
    ca: Path
    session: str
    timeout: float

    @property
    def ids(self) -> list[int]:
        return sorted(self.parties)


def load_config(path: Path) -> Config:
    """Read ``parties.toml``: ``ca``, ``session``, ``timeout`` and ``[[party]]`` tables with
    ``id``, ``host``, ``port``, ``cert`` and (for the party itself) ``key``; relative paths are
    relative to the file."""
    try:
        raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputFormatError(str(path), f"cannot read the party configuration: {exc}") from exc
    base = Path(path).parent

    def p(v: Any, what: str) -> Path:
        if not isinstance(v, str) or not v:
            raise InputFormatError(str(path), f"{what} must be a path string")
        q = Path(v)
        return q if q.is_absolute() else base / q

    parties: dict[int, PartyAddress] = {}
    for t in raw.get("party", []):
        if not isinstance(t, dict) or not isinstance(t.get("id"), int):
            raise InputFormatError(str(path), "every [[party]] needs an integer id")
        if not isinstance(t.get("port"), int) or not 0 < t["port"] < 65536:
            raise InputFormatError(str(path), f"party {t['id']}: port must be in 1..65535")
        if t["id"] in parties:
            raise InputFormatError(str(path), f"party id {t['id']} is listed twice")
        parties[t["id"]] = PartyAddress(
            t["id"], str(t.get("host", "127.0.0.1")), t["port"], p(t.get("cert"), "cert"),
            p(t["key"], "key") if "key" in t else None,
        )  # fmt: skip
    ids = sorted(parties)
    if ids != list(range(len(ids))) or len(ids) < 3:
        raise InputFormatError(str(path), "parties must be numbered 0..r with r ≥ 2 (0 = solver)")
    timeout = raw.get("timeout", 600)
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise InputFormatError(str(path), "timeout must be a positive number of seconds")
    session = raw.get("session", "")
    if not isinstance(session, str):
        raise InputFormatError(str(path), "session must be a string")
    return Config(parties, p(raw.get("ca"), "ca"), session, float(timeout))


def make_certificates(directory: Path, n_parties: int, *, days: int = 2) -> dict[str, Any]:
    """A throw-away CA and party certificates in ``directory``; returns the file names."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "searchveil CELS test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    (directory / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files: dict[str, Any] = {"ca": "ca.pem", "parties": {}}
    for i in range(n_parties):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"cels-party-{i}")])
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName(f"cels-party-{i}"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    ]
                ),
                critical=False,
            )  # fmt: skip
            .sign(ca_key, hashes.SHA256())
        )
        (directory / f"p{i}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (directory / f"p{i}.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        files["parties"][i] = {"cert": f"p{i}.pem", "key": f"p{i}.key"}
    return files


def _fingerprint_pem(path: Path) -> str:
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise InputFormatError(str(path), f"not a PEM certificate: {exc}") from exc
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()


@dataclass
class Traffic:
    """Bytes and frames per phase, sent and received."""

    sent: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    received: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    heartbeat_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "sent": dict(sorted(self.sent.items())),
            "received": dict(sorted(self.received.items())),
            "sent_total": sum(self.sent.values()),
            "received_total": sum(self.received.values()),
            "heartbeat_bytes": self.heartbeat_bytes,
        }


@dataclass
class Frame:
    peer: int
    type: str
    phase: str
    body: dict[str, Any]
    blob: bytes


class _Closed:
    def __init__(self, peer: int, reason: str) -> None:
        self.peer, self.reason = peer, reason


class Mesh:
    """All TLS connections of one party. Use as a context manager."""

    def __init__(self, config: Config, me: int, *, transcript: Path | None = None) -> None:
        if me not in config.parties:
            raise InvalidParameterError("id", me, f"one of {config.ids}")
        self.config, self.me = config, me
        self.timeout = config.timeout
        self.traffic = Traffic()
        self.phase = "setup"
        self._queues: dict[int, queue.Queue[Frame | _Closed]] = {
            j: queue.Queue() for j in config.ids if j != me
        }
        self._writers: dict[int, asyncio.StreamWriter] = {}
        self._pins = {j: _fingerprint_pem(a.cert) for j, a in config.parties.items()}
        self._aborted: str | None = None
        self._transcript_path = transcript
        self._transcript = open(transcript, "wb") if transcript is not None else None  # noqa: SIM115
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._closing = False
        self._tasks: list[asyncio.Task[None]] = []
        self._last_seen: dict[int, float] = {}

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
            raise ProtocolError("a peer presented no certificate")
        fp = hashlib.sha256(der).hexdigest()
        for j in allowed:
            if self._pins[j] == fp:
                return j
        raise ProtocolError("refused a peer whose certificate is not in the configuration")

    # -- connection setup ---------------------------------------------------------------
    def __enter__(self) -> Mesh:
        self._thread.start()
        try:
            fut = asyncio.run_coroutine_threadsafe(self._connect_all(), self._loop)
            fut.result(timeout=self.timeout + 5)
        except (TimeoutError, OSError, ssl.SSLError) as exc:
            self.close()
            raise ProtocolError(f"party {self.me}: could not connect the mesh: {exc}") from exc
        except BaseException:
            self.close()
            raise
        self._loop.call_soon_threadsafe(
            lambda: self._tasks.append(self._loop.create_task(self._heartbeat()))
        )
        return self

    async def _heartbeat(self) -> None:
        """Liveness: a ``ping`` to every peer every min(5 s, timeout/4), so a long computation
        on one party does not look like a dead peer; a crashed or cut-off party stops pinging
        (and its connection closes) and its peers time out."""
        period = min(5.0, self.timeout / 4)
        head = HEADER.pack(MAGIC, VERSION, 0, TYPES.index("ping"), 2, 0) + b"{}"
        while True:
            await asyncio.sleep(period)
            for w in list(self._writers.values()):
                if w.is_closing():
                    continue
                try:
                    w.write(head)
                    self.traffic.heartbeat_bytes += len(head)
                except (ConnectionError, OSError, RuntimeError):
                    continue

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def _connect_all(self) -> None:
        me = self.config.parties[self.me]
        higher = [j for j in self.config.ids if j > self.me]
        lower = [j for j in self.config.ids if j < self.me]
        accepted: asyncio.Queue[tuple[int, asyncio.StreamReader, asyncio.StreamWriter] | str]
        accepted = asyncio.Queue()

        async def on_conn(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                j = self._peer_id(w, higher)
                hello = await asyncio.wait_for(self._read_frame(r, j), self.timeout)
                self._check_hello(hello, j)
                await accepted.put((j, r, w))
            except (ProtocolError, InputFormatError, OSError, TimeoutError) as exc:
                w.close()
                await accepted.put(f"refused a connection: {exc}")

        if higher:
            self._server = await asyncio.start_server(
                on_conn, me.host, me.port, ssl=self._ctx(True), reuse_address=True
            )
        deadline = time.monotonic() + self.timeout
        cctx = self._ctx(False)
        for j in lower:
            addr = self.config.parties[j]
            while True:
                try:
                    r, w = await asyncio.wait_for(
                        asyncio.open_connection(
                            addr.host, addr.port, ssl=cctx, server_hostname=f"cels-party-{j}"
                        ),
                        max(0.1, deadline - time.monotonic()),
                    )
                    break
                except (ConnectionRefusedError, TimeoutError, OSError) as exc:
                    if isinstance(exc, ssl.SSLError) or time.monotonic() > deadline:
                        raise ProtocolError(f"cannot connect to party {j}: {exc}") from exc
                    await asyncio.sleep(0.1)
            if self._peer_id(w, [j]) != j:  # pragma: no cover - _peer_id raises
                raise ProtocolError(f"party {j} presented another party's certificate")
            self._writers[j] = w
            await self._write(j, "hello", {"id": self.me, "session": self.config.session}, b"")
            self._tasks.append(self._loop.create_task(self._reader(j, r)))
        pending = set(higher)
        while pending:
            item = await asyncio.wait_for(accepted.get(), max(0.1, deadline - time.monotonic()))
            if isinstance(item, str):
                raise ProtocolError(item)
            j, r, w = item
            if j not in pending:
                raise ProtocolError(f"party {j} connected twice")
            pending.discard(j)
            self._writers[j] = w
            self._tasks.append(self._loop.create_task(self._reader(j, r)))

    def _check_hello(self, f: Frame, j: int) -> None:
        if f.type != "hello" or f.body != {"id": j, "session": self.config.session}:
            raise ProtocolError(f"party {j}: bad hello (wrong id or session)")

    # -- frames -------------------------------------------------------------------------
    async def _read_frame(self, r: asyncio.StreamReader, j: int) -> Frame:
        head = await r.readexactly(HEADER.size)
        magic, ver, ph, ty, jl, bl = HEADER.unpack(head)
        if magic != MAGIC or ver != VERSION or ph >= len(PHASES) or ty >= len(TYPES):
            raise InputFormatError(f"party {j}", "malformed frame header")
        if jl > MAX_JSON or bl > MAX_BLOB:
            raise InputFormatError(f"party {j}", "frame too large")
        js = await r.readexactly(jl)
        blob = await r.readexactly(bl)
        phase = PHASES[ph]
        self._last_seen[j] = time.monotonic()
        if TYPES[ty] == "ping":
            self.traffic.heartbeat_bytes += HEADER.size + jl + bl
        else:
            self.traffic.received[phase] += HEADER.size + jl + bl
        if self._transcript is not None:
            self._transcript.write(head)
            self._transcript.write(js)
            self._transcript.write(blob)
        try:
            body = json.loads(js.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputFormatError(f"party {j}", "frame body is not JSON") from exc
        if not isinstance(body, dict):
            raise InputFormatError(f"party {j}", "frame body is not a JSON object")
        return Frame(j, TYPES[ty], phase, body, blob)

    async def _reader(self, j: int, r: asyncio.StreamReader) -> None:
        q = self._queues[j]
        while True:
            try:
                f = await self._read_frame(r, j)
            except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
                if not self._closing:
                    q.put(_Closed(j, f"connection to party {j} closed ({type(exc).__name__})"))
                return
            except InputFormatError as exc:
                q.put(_Closed(j, f"malformed message from party {j}: {exc}"))
                return
            if f.type == "abort":
                reason = str(f.body.get("reason", ""))[:500]
                self._aborted = self._aborted or f"party {j} aborted: {reason}"
                q.put(_Closed(j, f"party {j} aborted: {reason}"))
                return
            if f.type == "ping":
                continue
            q.put(f)
            if f.type == "bye":
                return

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
        await asyncio.wait_for(w.drain(), self.timeout)
        self.traffic.sent[self.phase] += len(head) + len(js) + len(blob)

    def send(self, j: int, type_: str, body: dict[str, Any], blob: bytes = b"") -> None:
        if self._aborted:
            raise ProtocolError(self._aborted)
        fut = asyncio.run_coroutine_threadsafe(self._write(j, type_, body, blob), self._loop)
        try:
            fut.result(timeout=self.timeout + 5)
        except (TimeoutError, ConnectionError, OSError) as exc:
            raise ProtocolError(f"sending to party {j} failed: {exc}") from exc

    def send_raw(self, j: int, data: bytes) -> None:
        """Write bytes that are not a frame (fault-injection tests only)."""

        async def w() -> None:
            self._writers[j].write(data)
            await self._writers[j].drain()

        asyncio.run_coroutine_threadsafe(w(), self._loop).result(timeout=self.timeout)

    def recv(self, j: int, type_: str) -> Frame:
        """The next frame from party ``j``; it must be of type ``type_``. Times out when ``j``
        has sent nothing (not even a heartbeat) for ``timeout`` seconds."""
        start = time.monotonic()
        q = self._queues[j]
        while True:
            if self._aborted:
                raise ProtocolError(self._aborted)
            try:
                item = q.get(timeout=0.2)
                break
            except queue.Empty:
                seen = max(start, self._last_seen.get(j, start))
                if time.monotonic() - seen > self.timeout:
                    raise ProtocolError(
                        f"party {j} silent for {self.timeout:g} s (waiting for {type_!r})"
                    ) from None
        if isinstance(item, _Closed):
            raise ProtocolError(item.reason)
        if item.type != type_:
            raise ProtocolError(f"party {j} sent {item.type!r} where {type_!r} was expected")
        return item

    def abort(self, reason: str) -> None:
        """Tell every peer to stop (best effort)."""
        for j in list(self._writers):
            try:
                fut = asyncio.run_coroutine_threadsafe(
                    self._write(j, "abort", {"reason": reason[:500]}, b""), self._loop
                )
                fut.result(timeout=2)
            except (TimeoutError, ConnectionError, OSError, RuntimeError):
                continue

    def close(self) -> None:
        self._closing = True
        if self._thread.is_alive():

            async def shut() -> None:
                for w in self._writers.values():
                    w.close()
                if self._server is not None:
                    self._server.close()
                for t in self._tasks:
                    t.cancel()
                await asyncio.gather(*self._tasks, return_exceptions=True)

            try:
                asyncio.run_coroutine_threadsafe(shut(), self._loop).result(timeout=5)
            except (TimeoutError, RuntimeError, OSError):
                pass
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        if self._transcript is not None:
            self._transcript.close()
            self._transcript = None


def expect(body: dict[str, Any], schema: dict[str, type | tuple[type, ...]], who: str) -> None:
    """Strict schema: exactly these keys, each of these types (bool is not an int)."""
    if set(body) != set(schema):
        raise ProtocolError(f"malformed message from {who}: keys {sorted(body)}")
    for k, t in schema.items():
        v = body[k]
        if isinstance(v, bool) and t is not bool:
            raise ProtocolError(f"malformed message from {who}: {k} has the wrong type")
        if not isinstance(v, t):
            raise ProtocolError(f"malformed message from {who}: {k} has the wrong type")
