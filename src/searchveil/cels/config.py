"""The CELS parties' configuration (``parties.toml``: addresses, pinned certificates, the
session token and the timeouts) and throw-away certificates for a local run
(:func:`make_certificates`); the transport that uses them is :mod:`searchveil.cels.wire`.

* **Certificates.** :func:`make_certificates` creates a throw-away CA and one certificate per
  party (ECDSA P-256, SAN ``DNS:cels-party-<id>`` and ``IP:127.0.0.1``) with ``cryptography``.
  A party accepts a peer only if the TLS handshake verifies against the CA *and* the peer's
  certificate is byte-for-byte the one listed for that party id in the configuration
  (certificate pinning): an unknown peer, even one signed by the same CA, is refused.
  Both sides use ``CERT_REQUIRED``, TLS ≥ 1.2. The parties' private keys are written
  owner-only (0600) in a 0700 directory.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import ipaddress
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from searchveil.errors import InputFormatError, OutputExistsError

DEFAULT_TIMEOUT = 600.0
DEFAULT_CONNECT_TIMEOUT = 60.0
DEFAULT_HEARTBEAT_TIMEOUT = 10.0


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
    timeout: float = DEFAULT_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT

    @property
    def ids(self) -> list[int]:
        return sorted(self.parties)


def _seconds(raw: dict[str, Any], key: str, default: float, path: Path) -> float:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise InputFormatError(str(path), f"{key} must be a positive number of seconds")
    return float(v)


def load_config(path: Path) -> Config:
    """Read ``parties.toml``: ``ca``, ``session``, ``timeout``, ``connect_timeout``,
    ``heartbeat_timeout`` and ``[[party]]`` tables with ``id``, ``host``, ``port``, ``cert`` and
    (for the party itself) ``key``; relative paths are relative to the file."""
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
    session = raw.get("session", "")
    if not isinstance(session, str):
        raise InputFormatError(str(path), "session must be a string")
    return Config(
        parties, p(raw.get("ca"), "ca"), session,
        _seconds(raw, "timeout", DEFAULT_TIMEOUT, path),
        _seconds(raw, "connect_timeout", DEFAULT_CONNECT_TIMEOUT, path),
        _seconds(raw, "heartbeat_timeout", DEFAULT_HEARTBEAT_TIMEOUT, path),
    )  # fmt: skip


def write_new(path: Path, data: bytes, mode: int = 0o644) -> None:
    """A file that did not exist (the helpers here never replace one: a name already taken
    is refused, whoever wrote it), with ``mode`` from its first byte (0600 for a key)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError as exc:
        raise OutputExistsError(
            f"{path} exists: the certificate helper writes only new files "
            "(give it an empty directory)"
        ) from exc
    os.fchmod(fd, mode)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _certificate(
    name: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    ca_key: ec.EllipticCurvePrivateKey,
    extension: x509.ExtensionType,
    *,
    critical: bool,
    days: int,
) -> x509.Certificate:
    """A certificate for ``name`` signed by the CA, valid from 5 minutes ago for ``days``."""
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(extension, critical=critical)
        .sign(ca_key, hashes.SHA256())
    )


def make_certificates(
    directory: Path, n_parties: int, *, days: int = 2, also: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A throw-away CA and party certificates in ``directory`` (created 0700); the private
    keys are written owner-only (0600). Every name (and ``also``, written by the caller next)
    must be free before anything is written. Returns the file names."""
    names = ["ca.pem", *(f"p{i}.{x}" for i in range(n_parties) for x in ("pem", "key")), *also]
    taken = [n for n in names if os.path.lexists(directory / n)]
    if taken:
        raise OutputExistsError(
            f"{directory / taken[0]} exists: the certificate helper writes "
            "only new files (give it an empty directory)"
        )
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "searchveil CELS test CA")])
    ca = _certificate(
        ca_name, ca_key.public_key(), ca_name, ca_key,
        x509.BasicConstraints(ca=True, path_length=0), critical=True, days=days,
    )  # fmt: skip
    write_new(directory / "ca.pem", ca.public_bytes(serialization.Encoding.PEM))
    files: dict[str, Any] = {"ca": "ca.pem", "parties": {}}
    for i in range(n_parties):
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"cels-party-{i}")])
        san = x509.SubjectAlternativeName(
            [x509.DNSName(f"cels-party-{i}"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        )
        cert = _certificate(name, key.public_key(), ca_name, ca_key, san, critical=False,
                            days=days)  # fmt: skip
        write_new(directory / f"p{i}.pem", cert.public_bytes(serialization.Encoding.PEM))
        write_new(
            directory / f"p{i}.key",
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
            0o600,
        )
        files["parties"][i] = {"cert": f"p{i}.pem", "key": f"p{i}.key"}
    return files


def fingerprint_pem(path: Path) -> str:
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise InputFormatError(str(path), f"not a PEM certificate: {exc}") from exc
    return hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest()
