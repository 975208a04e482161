"""CELS crypto primitives: Paillier on gmpy2 (round trips, additive homomorphism, scalar
multiplication, signed fixed point, packing) checked against textbook formulas computed here
with plain Python integers; Pohlig–Hellman/SRA over RFC 3526 group 14 (the constant re-derived
from its defining formula, commutativity, collisions exactly for equal inputs).
Keys of 512/1024 bits here are TEST KEYS (fast), never a default."""

from __future__ import annotations

import math
import secrets

import numpy as np
import pytest

from searchveil.collab import commutative as cm
from searchveil.collab.paillier import (
    DEFAULT_KEY_BITS,
    FixedPoint,
    Packer,
    PrivateKey,
    generate_keypair,
    key_strength,
)
from searchveil.errors import InputFormatError, InvalidParameterError

TEST_KEY_BITS = 1024  # test key, marked as such; the default is 3072


@pytest.fixture(scope="module")
def key() -> PrivateKey:
    return generate_keypair(TEST_KEY_BITS)


def _textbook_decrypt(key: PrivateKey, c: int) -> int:
    """L(c^λ mod n²)·μ mod n with λ = lcm(p−1, q−1), μ = L(g^λ mod n²)^{-1}, g = n + 1."""
    n = key.public.n
    lam = math.lcm(key.p - 1, key.q - 1)
    ell = lambda u: (u - 1) // n  # noqa: E731
    mu = pow(ell(pow(n + 1, lam, n * n)), -1, n)
    return ell(pow(c, lam, n * n)) * mu % n


def test_key_generation(key: PrivateKey) -> None:
    assert key.public.n == key.p * key.q and key.public.bits == TEST_KEY_BITS
    assert math.gcd(key.public.n, (key.p - 1) * (key.q - 1)) == 1
    assert DEFAULT_KEY_BITS == 3072 and "NOT secure" in key_strength(1024)
    assert key_strength(3072) == "standard"
    with pytest.raises(InvalidParameterError):
        generate_keypair(1000)


def test_round_trip_and_textbook(key: PrivateKey) -> None:
    pk = key.public
    for m in (0, 1, 2, 12345678901234567890, pk.n - 1, secrets.randbelow(pk.n)):
        c = pk.encrypt(m)
        assert key.decrypt(c) == m % pk.n
        assert _textbook_decrypt(key, c) == m % pk.n
    # the ciphertext is (1 + m n) ρ^n: with a known ρ, computed independently
    rho = 987654321
    m = 42
    c = (1 + m * pk.n) * pow(rho, pk.n, pk.n2) % pk.n2
    assert key.decrypt(c) == m
    assert pk.encrypt(7) != pk.encrypt(7)  # randomised


def test_homomorphism(key: PrivateKey) -> None:
    pk = key.public
    a, b = secrets.randbelow(pk.n), secrets.randbelow(pk.n)
    assert key.decrypt(pk.add(pk.encrypt(a), pk.encrypt(b))) == (a + b) % pk.n
    assert key.decrypt(pk.add_plain(pk.encrypt(a), b)) == (a + b) % pk.n
    assert key.decrypt(pk.mul_const(pk.encrypt(a), 37)) == 37 * a % pk.n
    assert key.decrypt(pk.mul_const(pk.encrypt(5), -3)) == (-15) % pk.n
    c = pk.encrypt(99)
    assert pk.rerandomize(c) != c and key.decrypt(pk.rerandomize(c)) == 99


def test_signed_fixed_point(key: PrivateKey) -> None:
    pk = key.public
    fp = FixedPoint(pk.n, frac_bits=40)
    vals = [-3.25, 0.0, 1e-9, -123456.789, 2.5e6]
    cs = [pk.encrypt(fp.encode(v)) for v in vals]
    total = cs[0]
    for c in cs[1:]:
        total = pk.add(total, c)
    assert fp.decode(key.decrypt(total)) == pytest.approx(sum(vals), abs=len(vals) * 2**-41)
    for v, c in zip(vals, cs, strict=True):
        assert abs(fp.decode(key.decrypt(c)) - v) <= 2**-41  # stated precision 2^-(f+1)
    neg = pk.mul_const(cs[0], -2)  # (−3.25)·(−2) = 6.5
    assert fp.decode(key.decrypt(neg)) == pytest.approx(6.5, abs=2**-40)
    with pytest.raises(InvalidParameterError):
        fp.encode(float("nan"))


def test_packing_sums(key: PrivateKey) -> None:
    pk = key.public
    pa = Packer(pk.n)
    assert pa.slots == (pk.n.bit_length() - 2) // 80
    gen = np.random.Generator(np.random.PCG64(5))
    parts = [gen.uniform(-1e4, 1e4, size=29) for _ in range(3)]
    acc = None
    for part in parts:
        cs = [pk.encrypt(m) for m in pa.pack(part)]
        acc = cs if acc is None else [pk.add(a, c) for a, c in zip(acc, cs, strict=True)]
    assert acc is not None and len(acc) == pa.n_plaintexts(29)
    got = pa.unpack([key.decrypt(c) for c in acc], 29, 3)
    # 3 roundings of 2^-41 each, plus float64 resolution of values ~1e4
    assert np.abs(got - sum(parts)).max() <= 3 * 2**-41 + 4e4 * 2**-52
    with pytest.raises(InvalidParameterError):
        pa.pack(np.array([pa.max_abs * 2]))


def test_ciphertext_bytes_strict(key: PrivateKey) -> None:
    pk = key.public
    cs = [pk.encrypt(i) for i in range(3)]
    data = pk.to_bytes(cs)
    assert pk.from_bytes(data, 3) == cs
    with pytest.raises(InputFormatError):
        pk.from_bytes(data[:-1])
    with pytest.raises(InputFormatError):
        pk.from_bytes(b"\x00" * pk.ciphertext_bytes)  # 0 is not a ciphertext


def _pi_times_2(bits: int) -> int:
    """⌊π·2^bits⌋ by Machin's formula in integer arithmetic (guard bits)."""
    g = bits + 64
    one = 1 << g

    def arctan_inv(x: int) -> int:
        total, term, k, sign = 0, one // x, 1, 1
        while term:
            total += sign * (term // k)
            term //= x * x
            k += 2
            sign = -sign
        return total

    return (4 * (4 * arctan_inv(5) - arctan_inv(239))) >> 64


def test_rfc3526_group_constant() -> None:
    p = 2**2048 - 2**1984 - 1 + 2**64 * (_pi_times_2(1918) + 124476)
    assert cm.P == p and cm.Q == (p - 1) // 2 and p % 4 == 3
    assert pow(2, cm.Q, p) in (1, p - 1)  # Euler criterion sanity (2 is a QR or not)
    assert pow(3, p - 1, p) == 1 and pow(3, cm.Q - 1, cm.Q) == 1  # Fermat for p and q


def test_commutative_encryption() -> None:
    a, b, c = (cm.CommutativeKey.generate(k) for k in ("full", "short", "full"))
    for key in (a, b, c):
        assert key.e * key.d % cm.Q == 1
    h = cm.hash_to_group(b"car price\tkbb.com")
    cm.check_element(h)
    assert a.encrypt(b.encrypt(h)) == b.encrypt(a.encrypt(h))
    assert c.encrypt(a.encrypt(b.encrypt(h))) == b.encrypt(c.encrypt(a.encrypt(h)))
    assert a.decrypt(a.encrypt(h)) == h
    # equal pairs collide, different ones do not
    items = [f"q{i}\thttp://u{i % 7}".encode() for i in range(40)]
    enc1 = [b.encrypt(a.encrypt(cm.hash_to_group(x))) for x in items]
    enc2 = [a.encrypt(b.encrypt(cm.hash_to_group(x))) for x in items]
    assert enc1 == enc2 and len(set(enc1)) == len(items)
    # invertible encoding through two layers, decrypted in the other order
    rec = "user\tquery with ünïcode\thttp://x\t3".encode()
    y = c.encrypt(a.encrypt(cm.encode_bytes(rec)))
    assert cm.decode_bytes(a.decrypt(c.decrypt(y))) == rec
    with pytest.raises(InvalidParameterError):
        cm.encode_bytes(b"x" * 201)
    with pytest.raises(InputFormatError):
        cm.check_element(cm.P - 1)
    non_qr = next(x for x in range(2, 100) if pow(x, cm.Q, cm.P) == cm.P - 1)
    with pytest.raises(InputFormatError):
        cm.elements_from_bytes(non_qr.to_bytes(cm.ELEMENT_BYTES, "big"))
