"""Paillier's additively homomorphic cryptosystem (Paillier, EUROCRYPT 1999), the encryption
CELS Algorithms 1–2 use (Hong et al., TKDE 2015, §4.2.1).

A small implementation on gmpy2 (LGPL-3.0-or-later). We do not use python-paillier (``phe``):
it is GPLv3, incompatible with searchveil's Apache-2.0. The primes come from a vetted
generator — an RSA key from ``cryptography`` (``rsa.generate_private_key(65537, bits)``; its
``private_numbers()`` give p, q of equal size, so gcd(pq, (p−1)(q−1)) = 1); ``cryptography``
refuses RSA below 1024 bits, so the insecure 512-bit comparison keys use gmpy2's
``next_prime`` from a CSPRNG start instead — and g = n + 1, so
g^m = 1 + m·n (mod n²) needs no exponentiation. Decryption uses the CRT (mod p² and q²).

* ``Enc(m) = (1 + m n) · r mod n²`` with an *obfuscator* r, an n-th residue that does not
  depend on m and is computed ahead (:mod:`searchveil.cels.precompute`, in worker processes):
  - without a fixed base, r = ρ^n with ρ uniform in Z*_n from the OS CSPRNG (``secrets``);
  - keys made by :func:`generate_keypair` carry the fixed base h_s = x^n mod n² (x uniform in
    Z*_n, published with n, as in Damgård–Jurik–Nielsen, IJIS 2010, §4; whoever encrypts under
    someone else's key draws its own, :meth:`PublicKey.with_own_base`), and r = h_s^α with α
    uniform below 2^(2|n|+128), by a fixed-base method (:class:`FixedBase`, ≈ 3.5× fewer
    multiplications than ρ^n). *Why it is as secure as ρ^n (DCR only, no short-exponent
    assumption):* replace h_s by a uniform y = (1+n)^t z^n of Z*_{n²} — indistinguishable by
    the decisional composite residuosity assumption; then y^α = (1+n)^{tα} z^{nα} and, since
    gcd(n, ord z) = 1 and α is uniform on a range 2^128 times n·ord z, (α mod n, α mod ord z)
    is within 2^−128 of uniform, so the plaintext is masked by tα mod n, uniform and
    independent of the rest. Every ciphertext's randomness is within 2^−128 of uniform in
    ⟨h_s⟩ whatever it was before, so a re-randomised ciphertext is distributed as a fresh
    encryption of the same plaintext (what a permutation hop needs);
  - the key holder itself draws ρ^n's exact distribution by the CRT
    (:meth:`PrivateKey.crt_obfuscator`, ~5× cheaper).
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

import functools
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


OBF_EXTRA_BITS = 128  # α mod (n·ord h) is within 2^-128 of uniform


def exponent_bits(n_bits: int) -> int:
    """Bits of the fixed-base exponent α: 2·|n| + 128 (see the module docstring)."""
    return 2 * n_bits + OBF_EXTRA_BITS


class FixedBase:
    """``g^e mod m`` for many exponents e < 2^``exp_bits`` and one base g — the fixed-base
    method of Brickell, Gordon, McCurley and Wilson (EUROCRYPT '92, "Yao's method"): with the
    table g_i = g^(2^(w·i)), g^e = Π_j (Π_{digit_i = j} g_i)^j costs d + 2^w − 1 modular
    multiplications (d = ⌈exp_bits / w⌉ digits) and no squarings; w = 7 gives ≈ 1,020
    multiplications for a 6,272-bit exponent, against ≈ 3,600 for ρ^n by sliding windows."""

    def __init__(self, g: int, modulus: int, exp_bits: int, w: int = 7) -> None:
        self.modulus = gmpy2.mpz(modulus)
        self.w = w
        self.digits = -(-exp_bits // w)
        self.exp_bits = exp_bits
        t = gmpy2.mpz(g) % self.modulus
        table = []
        for _ in range(self.digits):
            table.append(t)
            for _ in range(w):
                t = t * t % self.modulus
        self.table = table

    def pow(self, e: int) -> Any:
        if not 0 <= e < (1 << (self.w * self.digits)):
            raise InvalidParameterError("exponent", e.bit_length(), f"< {self.exp_bits} bits")
        w, mask, m = self.w, (1 << self.w) - 1, self.modulus
        buckets: list[list[Any]] = [[] for _ in range(1 << w)]
        for i, g in enumerate(self.table):
            d = (e >> (w * i)) & mask
            if d:
                buckets[d].append(g)
        a = b = None
        for j in range(mask, 0, -1):
            for g in buckets[j]:
                a = g if a is None else a * g % m
            if a is not None:
                b = a if b is None else b * a % m
        return gmpy2.mpz(1) if b is None else b


_FIXED_BASES: dict[tuple[int, int], FixedBase] = {}


@dataclass(frozen=True)
class PublicKey:
    """n, and (Damgård–Jurik–Nielsen) the fixed base h_s = x^n mod n² of the obfuscators."""

    n: int
    hs: int = 0  # 0: no fixed base (obfuscators ρ^n, ρ uniform in Z*_n)

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

    def fixed_base(self) -> FixedBase:
        fb = _FIXED_BASES.get((self.n, self.hs))
        if fb is None:
            fb = FixedBase(self.hs, self.n2, exponent_bits(self.bits))
            _FIXED_BASES.clear()  # one key per run: keep at most one table
            _FIXED_BASES[(self.n, self.hs)] = fb
        return fb

    def obfuscator(self) -> Any:
        """A fresh randomiser: h_s^α with α uniform below 2^(2|n|+128) when the key has a fixed
        base, else ρ^n. It does not depend on the message, so it can be computed ahead."""
        if self.hs:
            fb = self.fixed_base()
            return fb.pow(secrets.randbits(fb.exp_bits))
        return self._rho_n()

    def obfuscators(self, count: int) -> list[Any]:
        return [self.obfuscator() for _ in range(count)]

    def check_fixed_base(self) -> None:
        """Reject a fixed base that cannot be an honest h_s = x^n mod n²: out of range, not a
        unit of Z*_{n²}, or of order ≤ 2 — 1, −1 and the two other square roots of 1 mod n²
        (from the CRT; the key holder knows them): with such a base every obfuscator h_s^α
        takes at most two values, so anyone could strip it and decrypt. That is all a public
        check can establish. A base of larger but still small order (the key holder, knowing
        p and q, can build one whose powers are few enough to enumerate) passes any feasible
        test, and whether a base is an n-th residue at all is the DCR problem itself; so a
        data party never randomises with the key holder's base: it uses its own
        (:meth:`with_own_base`)."""
        hs = gmpy2.mpz(self.hs)
        n2 = gmpy2.mpz(self.n2)
        if not 1 < hs < n2 or gmpy2.gcd(hs, self.n) != 1 or hs * hs % n2 == 1:
            raise InputFormatError("message", "the public key's fixed base is malformed")

    def with_own_base(self) -> PublicKey:
        """This key with a fixed base of the caller's own: h = x^n mod n² for x uniform in
        Z*_n from the OS CSPRNG, which nobody else knows — the exact setting of the argument in
        the module docstring (an n-th residue, indistinguishable from a uniform element of
        Z*_{n²} under DCR). A CELS data party encrypts and re-randomises under P0's n with its
        own base, so nothing in P0's key can make its ciphertexts decryptable by others."""
        n = gmpy2.mpz(self.n)
        while True:
            x = gmpy2.mpz(secrets.randbelow(self.n - 2) + 2)
            if gmpy2.gcd(x, n) == 1:
                return PublicKey(self.n, int(gmpy2.powmod(x, n, n * n)))

    def encrypt(self, m: int, obf: Any = None) -> int:
        """Enc(m mod n) with fresh randomness (``obf``: a precomputed obfuscator)."""
        n = gmpy2.mpz(self.n)
        n2 = n * n
        gm = (1 + (gmpy2.mpz(m) % n) * n) % n2
        return int(gm * (self.obfuscator() if obf is None else obf) % n2)

    def encrypt_many(self, plains: list[int], obfs: list[Any]) -> list[Any]:
        """Batch encryption with precomputed obfuscators (mpz results)."""
        n = gmpy2.mpz(self.n)
        n2 = n * n
        return [(1 + (gmpy2.mpz(m) % n) * n) * o % n2 for m, o in zip(plains, obfs, strict=True)]

    def add(self, c1: int, c2: int) -> int:
        return int(gmpy2.mpz(c1) * gmpy2.mpz(c2) % self.n2)

    def add_plain(self, c: int, m: int) -> int:
        """Enc(a) → Enc(a + m) (no fresh randomness; re-randomise if the result is sent on)."""
        n = gmpy2.mpz(self.n)
        return int(gmpy2.mpz(c) * (1 + (gmpy2.mpz(m) % n) * n) % (n * n))

    def add_plain_many(self, cs: list[Any], plains: list[int]) -> list[Any]:
        n = gmpy2.mpz(self.n)
        n2 = n * n
        return [
            gmpy2.mpz(c) * (1 + (gmpy2.mpz(m) % n) * n) % n2
            for c, m in zip(cs, plains, strict=True)
        ]

    def mul_const(self, c: int, k: int) -> int:
        """Enc(a) → Enc(k·a mod n); k may be negative."""
        n = gmpy2.mpz(self.n)
        return int(gmpy2.powmod(gmpy2.mpz(c), gmpy2.mpz(k) % n, n * n))

    def rerandomize(self, c: int, obf: Any = None) -> int:
        return int(gmpy2.mpz(c) * (self.obfuscator() if obf is None else obf) % self.n2)

    def rerandomize_many(self, cs: list[Any], obfs: list[Any]) -> list[Any]:
        n2 = gmpy2.mpz(self.n2)
        return [gmpy2.mpz(c) * o % n2 for c, o in zip(cs, obfs, strict=True)]

    def check_ciphertext(self, c: int) -> None:
        if not 0 < c < self.n2:
            raise InputFormatError("message", "a Paillier ciphertext is out of range")

    def to_bytes(self, cs: list[Any]) -> bytes:
        w = self.ciphertext_bytes
        return b"".join(gmpy2.mpz(c).to_bytes(w, "big") for c in cs)

    def from_bytes(self, data: bytes, count: int | None = None) -> list[Any]:
        w = self.ciphertext_bytes
        if len(data) % w or (count is not None and len(data) != count * w):
            want = f"{count} × {w}" if count is not None else f"a multiple of {w}"
            raise InputFormatError(
                "message", f"a ciphertext block of {len(data)} bytes; expected {want}"
            )
        n2 = gmpy2.mpz(self.n2)
        out = [gmpy2.mpz.from_bytes(data[i : i + w], "big") for i in range(0, len(data), w)]
        for c in out:
            if not 0 < c < n2:
                raise InputFormatError("message", "a Paillier ciphertext is out of range")
        return out


@dataclass(frozen=True)
class PrivateKey:
    public: PublicKey
    p: int
    q: int

    @functools.cached_property
    def _crt(self) -> tuple[Any, ...]:
        p, q = gmpy2.mpz(self.p), gmpy2.mpz(self.q)
        p2, q2 = p * p, q * q
        # with g = n + 1: L_p(g^(p−1) mod p²) = (p−1)·q mod p
        hp = gmpy2.invert(((p - 1) * q) % p, p)
        hq = gmpy2.invert(((q - 1) * p) % q, q)
        return p, q, p2, q2, hp, hq, gmpy2.invert(p, q), gmpy2.invert(p2, q2)

    def decrypt(self, c: int) -> int:
        """m in [0, n) (CRT decryption)."""
        p, q, p2, q2, hp, hq, pinv, _ = self._crt
        c = gmpy2.mpz(c)
        mp = ((gmpy2.powmod(c % p2, p - 1, p2) - 1) // p) * hp % p
        mq = ((gmpy2.powmod(c % q2, q - 1, q2) - 1) // q) * hq % q
        u = (mq - mp) * pinv % q
        return int((mp + u * p) % (p * q))

    def decrypt_many(self, cs: list[Any]) -> list[int]:
        return [self.decrypt(c) for c in cs]

    def crt_obfuscator(self) -> Any:
        """A uniformly random n-th residue mod n² — the distribution of ρ^n — at ~1/5 of its
        cost, for the key holder only: the CRT of a^p mod p² and b^q mod q² with a, b uniform in
        Z*_p, Z*_q. (ρ^n mod p² depends only on ρ mod p, and a ↦ a^p mod p² maps Z*_p one-to-one
        onto the order-(p−1) subgroup, which is the n-th residues mod p²; likewise mod q².)"""
        p, q, p2, q2, _, _, _, p2inv = self._crt
        a = gmpy2.powmod(gmpy2.mpz(secrets.randbelow(self.p - 1) + 1), p, p2)
        b = gmpy2.powmod(gmpy2.mpz(secrets.randbelow(self.q - 1) + 1), q, q2)
        return a + p2 * ((b - a) * p2inv % q2)


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
    plain = PrivateKey(PublicKey(n), p, q)
    # the fixed base h_s = x^n mod n² for x uniform in Z*_n: a uniformly random n-th residue
    return PrivateKey(PublicKey(n, int(plain.crt_obfuscator())), p, q)


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
