"""Paillier's additively homomorphic cryptosystem (Paillier, EUROCRYPT 1999), the encryption
CELS Algorithms 1–2 use (Hong et al., TKDE 2015, §4.2.1).

A small implementation on gmpy2 (LGPL-3.0-or-later). We do not use python-paillier (``phe``):
it is GPLv3, incompatible with searchveil's Apache-2.0. The primes come from a vetted
generator — an RSA key from ``cryptography`` (``rsa.generate_private_key(65537, bits)``; its
``private_numbers()`` give p, q of equal size, so gcd(pq, (p−1)(q−1)) = 1); ``cryptography``
refuses RSA below 1024 bits, so the insecure 512-bit comparison keys use gmpy2's
``next_prime`` from a CSPRNG start instead — and g = n + 1, so
g^m = 1 + m·n (mod n²) needs no exponentiation. Decryption uses the CRT (mod p² and q²).

* ``Enc(m) = (1 + m n) · ρ^n mod n²`` with ρ uniform in Z*_n from the OS CSPRNG (``secrets``);
* ``Enc(a) · Enc(b) = Enc(a + b)``, ``Enc(a)^k = Enc(k·a)`` (mod n);
* **signed fixed point** (:class:`FixedPoint`): a real v is ``round(v · 2^f) mod n``; residues
  above n/2 decode as negative. Precision 2^−(f+1) per encoded value (f = 40 by default:
  ≈ 4.5·10⁻¹³), range |v| < n / 2^(f+1).
* **packing** (:class:`Packer`): many fixed-point values in one plaintext, ``w``-bit slots, each
  value stored with a bias 2^(w−1−h) so every slot is non-negative and slot sums of up to 2^h
  contributions never carry into the next slot; the decoder subtracts (#contributions)·bias.

Key sizes: 3072 bits by default (≈ 128-bit security, NIST SP 800-57); 512 and 1024 only on
explicit request, for comparisons with the paper's Table 5 — the CELS ledger marks them.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any

import gmpy2
import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.asymmetric import rsa

from searchveil.errors import InputFormatError, InvalidParameterError

DEFAULT_KEY_BITS = 3072
PAPER_KEY_BITS = (512, 1024)
ALLOWED_KEY_BITS = (512, 1024, 2048, 3072, 4096)


def key_strength(bits: int) -> str:
    """How the ledger labels a key size."""
    if bits in PAPER_KEY_BITS:
        return "paper-comparison key (NOT secure: for reproducing Table 5 / tests only)"
    return "standard"


@dataclass(frozen=True)
class PublicKey:
    n: int

    @property
    def n2(self) -> int:
        return self.n * self.n

    @property
    def bits(self) -> int:
        return self.n.bit_length()

    @property
    def ciphertext_bytes(self) -> int:
        return (self.n2.bit_length() + 7) // 8

    def _rho_n(self) -> Any:
        n = gmpy2.mpz(self.n)
        while True:
            rho = gmpy2.mpz(secrets.randbelow(self.n - 1) + 1)
            if gmpy2.gcd(rho, n) == 1:
                return gmpy2.powmod(rho, n, n * n)

    def encrypt(self, m: int) -> int:
        """Enc(m mod n) with fresh randomness."""
        n = gmpy2.mpz(self.n)
        n2 = n * n
        gm = (1 + (gmpy2.mpz(m) % n) * n) % n2
        return int(gm * self._rho_n() % n2)

    def add(self, c1: int, c2: int) -> int:
        return int(gmpy2.mpz(c1) * gmpy2.mpz(c2) % self.n2)

    def add_plain(self, c: int, m: int) -> int:
        """Enc(a) → Enc(a + m) (no fresh randomness; re-randomise if the result is sent on)."""
        n = gmpy2.mpz(self.n)
        return int(gmpy2.mpz(c) * (1 + (gmpy2.mpz(m) % n) * n) % (n * n))

    def mul_const(self, c: int, k: int) -> int:
        """Enc(a) → Enc(k·a mod n); k may be negative."""
        n = gmpy2.mpz(self.n)
        return int(gmpy2.powmod(gmpy2.mpz(c), gmpy2.mpz(k) % n, n * n))

    def rerandomize(self, c: int) -> int:
        return int(gmpy2.mpz(c) * self._rho_n() % self.n2)

    def check_ciphertext(self, c: int) -> None:
        if not 0 < c < self.n2:
            raise InputFormatError("message", "a Paillier ciphertext is out of range")

    def to_bytes(self, cs: list[int]) -> bytes:
        w = self.ciphertext_bytes
        return b"".join(int(c).to_bytes(w, "big") for c in cs)

    def from_bytes(self, data: bytes, count: int | None = None) -> list[int]:
        w = self.ciphertext_bytes
        if len(data) % w or (count is not None and len(data) != count * w):
            raise InputFormatError("message", "ciphertext block has the wrong length")
        out = [int.from_bytes(data[i : i + w], "big") for i in range(0, len(data), w)]
        for c in out:
            self.check_ciphertext(c)
        return out


@dataclass(frozen=True)
class PrivateKey:
    public: PublicKey
    p: int
    q: int

    def decrypt(self, c: int) -> int:
        """m in [0, n) (CRT decryption)."""
        p, q = gmpy2.mpz(self.p), gmpy2.mpz(self.q)
        c = gmpy2.mpz(c)
        p2, q2 = p * p, q * q
        n = p * q
        # with g = n + 1: L_p(g^(p−1) mod p²) = (p−1)·q mod p
        hp = gmpy2.invert(((p - 1) * q) % p, p)
        hq = gmpy2.invert(((q - 1) * p) % q, q)
        mp = ((gmpy2.powmod(c % p2, p - 1, p2) - 1) // p) * hp % p
        mq = ((gmpy2.powmod(c % q2, q - 1, q2) - 1) // q) * hq % q
        # CRT
        u = (mq - mp) * gmpy2.invert(p, q) % q
        return int((mp + u * p) % n)


def generate_keypair(bits: int = DEFAULT_KEY_BITS) -> PrivateKey:
    """A Paillier key pair with n = pq from an RSA key of ``bits`` bits (``cryptography``)."""
    if bits not in ALLOWED_KEY_BITS:
        raise InvalidParameterError("key_bits", bits, f"one of {ALLOWED_KEY_BITS}")
    if bits >= 1024:
        key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
        nums = key.private_numbers()
        p, q = nums.p, nums.q
    else:  # 512-bit paper-comparison keys: cryptography refuses RSA < 1024 bits
        p, q = _prime(bits // 2), _prime(bits // 2)
        while p == q or (p * q).bit_length() != bits:
            p, q = _prime(bits // 2), _prime(bits // 2)
    n = p * q
    if math.gcd(n, (p - 1) * (q - 1)) != 1:  # pragma: no cover - equal-size primes guarantee it
        raise InvalidParameterError("key_bits", bits, "a key with gcd(n, φ(n)) = 1")
    return PrivateKey(PublicKey(n), p, q)


def _prime(bits: int) -> int:
    """A random ``bits``-bit prime (top two bits set) — only for the 512-bit comparison keys:
    gmpy2.next_prime from a CSPRNG start, confirmed by 50 Miller–Rabin rounds."""
    while True:
        start = secrets.randbits(bits) | (3 << (bits - 2)) | 1
        p = gmpy2.next_prime(start)
        if p.bit_length() == bits and gmpy2.is_prime(p, 50):
            return int(p)


@dataclass(frozen=True)
class FixedPoint:
    """Signed fixed point mod n: v ↦ round(v·2^f) mod n."""

    n: int
    frac_bits: int = 40

    def encode(self, v: float) -> int:
        if not math.isfinite(v):
            raise InvalidParameterError("value", v, "a finite number")
        m = round(v * (1 << self.frac_bits))
        if abs(m) >= self.n // 2:
            raise InvalidParameterError("value", v, "|v| < n / 2^(f+1)")
        return m % self.n

    def decode(self, m: int) -> float:
        if m > self.n // 2:
            m -= self.n
        return m / float(1 << self.frac_bits)


@dataclass(frozen=True)
class Packer:
    """Pack fixed-point values into plaintexts of a key with modulus ``n``: ``slot_bits``-bit
    slots, ``frac_bits`` fractional bits, sums of up to 2^``headroom`` contributions."""

    n: int
    slot_bits: int = 80
    frac_bits: int = 40
    headroom: int = 7

    @property
    def slots(self) -> int:
        return max(1, (self.n.bit_length() - 2) // self.slot_bits)

    @property
    def bias(self) -> int:
        return 1 << (self.slot_bits - 1 - self.headroom)

    @property
    def max_abs(self) -> float:
        return self.bias / float(1 << self.frac_bits)

    def n_plaintexts(self, length: int) -> int:
        return -(-length // self.slots)

    def pack(self, values: npt.NDArray[np.float64]) -> list[int]:
        """Values → plaintext integers (slot j of plaintext t holds value t·slots + j)."""
        v = np.asarray(values, dtype=np.float64)
        if v.size and (not np.isfinite(v).all() or np.abs(v).max() >= self.max_abs):
            raise InvalidParameterError("value", float(np.abs(v).max()), f"|v| < {self.max_abs}")
        scaled = [round(float(x) * (1 << self.frac_bits)) + self.bias for x in v]
        out = []
        s, w = self.slots, self.slot_bits
        for t in range(0, len(scaled), s):
            acc = 0
            for j, u in enumerate(scaled[t : t + s]):
                acc |= u << (w * j)
            out.append(acc)
        return out

    def unpack(self, plains: list[int], length: int, contributions: int) -> npt.NDArray[np.float64]:
        """Inverse of :meth:`pack` for a sum of ``contributions`` packed vectors."""
        if contributions < 1 or contributions > (1 << self.headroom):
            raise InvalidParameterError("contributions", contributions, "1..2^headroom")
        mask = (1 << self.slot_bits) - 1
        out = np.empty(length, dtype=np.float64)
        s, w = self.slots, self.slot_bits
        off = contributions * self.bias
        scale = float(1 << self.frac_bits)
        for t, m in enumerate(plains):
            for j in range(min(s, length - t * s)):
                out[t * s + j] = (((m >> (w * j)) & mask) - off) / scale
        return out
