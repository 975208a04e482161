"""Commutative encryption for CELS Algorithm 3 (secure union, Hong et al. TKDE 2015 §4.2.2) on
the prime-order subgroup G of Curve25519 — the group ristretto255 is built on — through PyNaCl's
bundled libsodium (Apache-2.0). Order of G: L = 2^252 + 27742317777372353535851937790883648493.

It replaces the Pohlig–Hellman/SRA cipher over the RFC 3526 2048-bit MODP group (≈ 112-bit
security, 256-byte elements, ~0.34 ms per 256-bit exponentiation) with scalar multiplication in
G (≈ 126-bit security: Pollard rho on a 252-bit prime-order group; 32-byte elements; ~30–80 µs).
Security of both unions rests on the decisional Diffie–Hellman assumption in a prime-order group
(plus a random-oracle hash). PyNaCl 1.6 exposes no ``crypto_core_ristretto255_*`` bindings (the
ristretto pull request pyca/pynacl#646 is unmerged), so we use the two libsodium interfaces it
does expose for the same group:

* **Union of hashed pairs** (never decrypted): X25519 (RFC 7748) on u-coordinates,
  ``E_s(u) = X25519(s, u)`` with a fresh 32-byte secret ``s`` per party and run. X25519 clamps
  ``s`` to a multiple of 8 in [2^254, 2^255) (so the cofactor is cleared); for P ∈ G,
  ``E_a(E_b(u(P))) = u(clamp(a)·clamp(b)·P) = E_b(E_a(u(P)))`` — scalars commute. u-coordinates
  identify P with −P, which is harmless for a union (H(x) = ±H(y) has probability ~2^−251).
* **Hash to G**: ``h = SHA-512(DST ‖ data)`` (64 bytes, domain-separated), each 32-byte half
  mapped by Elligator 2 (``crypto_core_ed25519_from_uniform``, which clears the cofactor) and
  the two points added — the random-oracle construction of RFC 9380 and of ristretto255's
  ``from_hash`` — then converted to its Montgomery u-coordinate u = (1 + y)/(1 − y).
* **Records that must be decrypted** (the output union, Algorithm 3 lines 8–13): edwards25519
  scalar multiplication without clamping (``crypto_scalarmult_ed25519_noclamp``), key ``k``
  uniform in [1, L), decryption with ``k⁻¹ mod L``; libsodium refuses any input that is not the
  canonical encoding of a point of G. A record chunk of ≤ 29 bytes is embedded invertibly by
  try-and-increment: bytes 0–28 payload, bytes 29–30 a counter, byte 31 zero; the first counter
  whose encoding is a point of G (probability ≈ 1/16 per try) is used, and the decrypted point's
  encoding *is* those bytes.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import nacl.bindings as nb
import nacl.exceptions

from searchveil.errors import InputFormatError, InvalidParameterError

ELEMENT_BYTES = 32  # an encoded element of G (u-coordinate or edwards25519 point)
DIGEST_BYTES = 16  # a fully encrypted union element, hashed: only ever compared for equality
PAYLOAD_BYTES = 29  # record bytes per embedded point
L = 2**252 + 27742317777372353535851937790883648493
_P25519 = 2**255 - 19
_DOMAIN = b"searchveil/cels/hash-to-group/curve25519/v2\x00"
_DIGEST_DOMAIN = b"searchveil/cels/union-digest/v2\x00"
GROUP_NAME = "prime-order subgroup of Curve25519 (X25519 / edwards25519 via libsodium)"


class _Malformed(InputFormatError):
    def __init__(self, problem: str) -> None:
        super().__init__("message", problem)


def hash_to_group(data: bytes) -> bytes:
    """H(data): the u-coordinate (32 bytes, little-endian) of a point of G."""
    h = hashlib.sha512(_DOMAIN + data).digest()
    pt = nb.crypto_core_ed25519_add(
        nb.crypto_core_ed25519_from_uniform(h[:32]), nb.crypto_core_ed25519_from_uniform(h[32:])
    )
    y = int.from_bytes(pt, "little") & ((1 << 255) - 1)
    u = (1 + y) * pow(1 - y, -1, _P25519) % _P25519
    return u.to_bytes(32, "little")


def digest(element: bytes) -> bytes:
    """A 16-byte stand-in for a fully encrypted union element (collisions ~n²/2^129)."""
    return hashlib.sha256(_DIGEST_DOMAIN + element).digest()[:DIGEST_BYTES]


@dataclass(frozen=True, repr=False)
class UnionKey:
    """X25519 secret of one party for the hashed union (never decrypted)."""

    s: bytes

    @classmethod
    def generate(cls) -> UnionKey:
        return cls(secrets.token_bytes(32))

    def encrypt(self, u: bytes) -> bytes:
        try:
            return bytes(nb.crypto_scalarmult(self.s, u))
        except nacl.exceptions.CryptoError as exc:
            raise _Malformed("a union element is a low-order point") from exc

    def encrypt_many(self, us: list[bytes]) -> list[bytes]:
        return [self.encrypt(u) for u in us]


@dataclass(frozen=True, repr=False)
class RecordKey:
    """Invertible scalar of one party for the output union (decrypted along the ring)."""

    k: bytes
    k_inv: bytes

    @classmethod
    def generate(cls) -> RecordKey:
        while True:
            k = nb.crypto_core_ed25519_scalar_reduce(secrets.token_bytes(64))
            if any(k):
                return cls(k, nb.crypto_core_ed25519_scalar_invert(k))

    @staticmethod
    def _mul(k: bytes, p: bytes) -> bytes:
        try:
            return bytes(nb.crypto_scalarmult_ed25519_noclamp(k, p))
        except nacl.exceptions.CryptoError as exc:
            raise _Malformed("a record element is not a point of the prime-order group") from exc

    def encrypt(self, p: bytes) -> bytes:
        return self._mul(self.k, p)

    def decrypt(self, p: bytes) -> bytes:
        return self._mul(self.k_inv, p)


def encode_chunk(payload: bytes) -> bytes:
    """Invertible embedding of ≤ 29 bytes as a point of G (try-and-increment)."""
    if len(payload) > PAYLOAD_BYTES:
        raise InvalidParameterError("record chunk", len(payload), f"at most {PAYLOAD_BYTES} bytes")
    base = payload.ljust(PAYLOAD_BYTES, b"\x00")
    for ctr in range(1 << 16):
        cand = base + ctr.to_bytes(2, "little") + b"\x00"
        if nb.crypto_core_ed25519_is_valid_point(cand):
            return cand
    raise InvalidParameterError("record chunk", payload.hex(), "a chunk that embeds in G")


def decode_chunk(point: bytes) -> bytes:
    """Inverse of :func:`encode_chunk` (the 29 payload bytes, zero-padded)."""
    if len(point) != ELEMENT_BYTES or point[31] != 0:
        raise _Malformed("a decrypted element is not an encoded record chunk")
    return point[:PAYLOAD_BYTES]


def elements_to_bytes(xs: list[bytes], width: int = ELEMENT_BYTES) -> bytes:
    if any(len(x) != width for x in xs):
        raise InvalidParameterError("element", width, f"{width}-byte elements")
    return b"".join(xs)


def elements_from_bytes(data: bytes, width: int = ELEMENT_BYTES) -> list[bytes]:
    if len(data) % width:
        raise _Malformed(f"an element block of {len(data)} bytes is not a multiple of {width}")
    return [data[i : i + width] for i in range(0, len(data), width)]
