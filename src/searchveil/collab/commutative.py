"""Commutative encryption (Pohlig–Hellman / SRA exponentiation cipher; Pohlig & Hellman,
IEEE Trans. IT 24, 1978) for CELS Algorithm 3 (secure union, Hong et al. TKDE 2015 §4.2.2).

Group: the quadratic residues modulo the 2048-bit MODP safe prime of RFC 3526 §3 ("group 14",
p = 2^2048 − 2^1984 − 1 + 2^64·(⌊2^1918·π⌋ + 124476), q = (p − 1)/2 prime); the subgroup of
quadratic residues has prime order q, so every exponent e in [1, q) is invertible mod q.

* ``E_e(x) = x^e mod p``, ``D_d(y) = y^d`` with ``d = e^{−1} mod q``; E_a(E_b(x)) = E_b(E_a(x)).
* hash-to-group (for deterministic set union): ``H(s) = (SHA-256 expansion of s to 2304 bits
  mod p)^2 mod p`` — squaring lands in the QR subgroup.
* invertible encoding (for records that must be decrypted): a byte string b of ≤ 200 bytes is
  m = int(0x01 ‖ b) ≤ q and maps to m² mod p; decoding takes the square root y^((p+1)/4)
  (p ≡ 3 mod 4) and keeps the root ≤ q.

Exponents: ``short`` keys (256-bit e, for hash-only unions that are never decrypted: the
discrete log of a 256-bit exponent costs ~2^128 by Pollard's kangaroo, as RFC 7919 §5.2
recommends ≥ 2× the security level) or ``full`` keys (e uniform in [2, q), needed when
ciphertexts are decrypted, Algorithm 3 lines 8–13).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import gmpy2

from searchveil.errors import InputFormatError, InvalidParameterError

# RFC 3526 §3, 2048-bit MODP Group (id 14)
RFC3526_P = int(
    "FFFFFFFFFFFFFFFFC90FDAA22168C234C4C6628B80DC1CD1"
    "29024E088A67CC74020BBEA63B139B22514A08798E3404DD"
    "EF9519B3CD3A431B302B0A6DF25F14374FE1356D6D51C245"
    "E485B576625E7EC6F44C42E9A637ED6B0BFF5CB6F406B7ED"
    "EE386BFB5A899FA5AE9F24117C4B1FE649286651ECE45B3D"
    "C2007CB8A163BF0598DA48361C55D39A69163FA8FD24CF5F"
    "83655D23DCA3AD961C62F356208552BB9ED529077096966D"
    "670C354E4ABC9804F1746C08CA18217C32905E462E36CE3B"
    "E39E772C180E86039B2783A2EC07A28FB5C55DF06F4C52C9"
    "DE2BCBF6955817183995497CEA956AE515D2261898FA0510"
    "15728E5A8AACAA68FFFFFFFFFFFFFFFF",
    16,
)
P = RFC3526_P
Q = (P - 1) // 2
ELEMENT_BYTES = 256
MAX_RECORD_BYTES = 200
_DOMAIN = b"searchveil/cels/hash-to-group/v1"


def hash_to_group(data: bytes) -> int:
    """H(data) in the QR subgroup of Z*_p."""
    stream = b"".join(
        hashlib.sha256(_DOMAIN + i.to_bytes(4, "big") + data).digest() for i in range(9)
    )
    h = int.from_bytes(stream, "big") % P
    return int(gmpy2.powmod(h, 2, P))


def encode_bytes(data: bytes) -> int:
    """Invertible map of ≤ 200 bytes into the QR subgroup."""
    if len(data) > MAX_RECORD_BYTES:
        raise InvalidParameterError("record", len(data), f"at most {MAX_RECORD_BYTES} bytes")
    m = int.from_bytes(b"\x01" + data, "big")
    return int(gmpy2.powmod(m, 2, P))


def decode_bytes(y: int) -> bytes:
    s = int(gmpy2.powmod(y, (P + 1) // 4, P))
    s = min(s, P - s)
    if (s * s) % P != y % P:
        raise InputFormatError("message", "a decrypted element is not a quadratic residue")
    raw = s.to_bytes((s.bit_length() + 7) // 8, "big")
    if not raw or raw[0] != 1:
        raise InputFormatError("message", "a decrypted element is not an encoded record")
    return raw[1:]


def check_element(y: int) -> None:
    """Reject anything that is not in the QR subgroup (a malformed or hostile message)."""
    if not 1 < y < P - 1 or gmpy2.legendre(y, P) != 1:
        raise InputFormatError("message", "a group element is not a quadratic residue mod p")


@dataclass(frozen=True)
class CommutativeKey:
    e: int
    d: int

    @classmethod
    def generate(cls, kind: str = "full") -> CommutativeKey:
        if kind == "short":
            e = secrets.randbits(256) | (1 << 255) | 1
        elif kind == "full":
            e = secrets.randbelow(Q - 2) + 2
        else:
            raise InvalidParameterError("kind", kind, "short | full")
        return cls(e, int(gmpy2.invert(e, Q)))

    def encrypt(self, x: int) -> int:
        return int(gmpy2.powmod(x, self.e, P))

    def decrypt(self, y: int) -> int:
        return int(gmpy2.powmod(y, self.d, P))


def elements_to_bytes(xs: list[int]) -> bytes:
    return b"".join(int(x).to_bytes(ELEMENT_BYTES, "big") for x in xs)


def elements_from_bytes(data: bytes) -> list[int]:
    if len(data) % ELEMENT_BYTES:
        raise InputFormatError("message", "group element block has the wrong length")
    out = [
        int.from_bytes(data[i : i + ELEMENT_BYTES], "big")
        for i in range(0, len(data), ELEMENT_BYTES)
    ]
    for y in out:
        check_element(y)
    return out
