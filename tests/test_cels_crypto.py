"""CELS crypto primitives: Paillier on gmpy2 (round trips, additive homomorphism, scalar
multiplication, signed fixed point, packing, fixed-base and CRT obfuscators, the worker pool)
checked against textbook formulas computed here with plain Python integers; the commutative
cipher on Curve25519's prime-order subgroup (hash to the group checked against libsodium's own
Edwards → Montgomery map, commutativity as scalar multiplication, collisions exactly for equal
inputs, the invertible record encoding).
Keys of 512/1024 bits here are TEST KEYS (fast), never a default."""

from __future__ import annotations

import math
import secrets

import numpy as np
import pytest

from searchveil.cels import commutative as cm
from searchveil.cels.paillier import (
    DEFAULT_KEY_BITS,
    FixedPoint,
    Packer,
    PrivateKey,
    PublicKey,
    exponent_bits,
    generate_keypair,
    key_strength,
)
from searchveil.cels.precompute import Precomputer, decrypt_batch
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


def test_fixed_base_obfuscators(key: PrivateKey) -> None:
    pk, sk = key.public, key
    assert pk.hs and exponent_bits(pk.bits) == 2 * pk.bits + 128
    assert sk.decrypt(pk.hs) == 0  # h_s is an n-th residue: a ciphertext of 0
    fb = pk.fixed_base()
    gen = np.random.Generator(np.random.PCG64(3))
    for e in [0, 1, 2, (1 << fb.exp_bits) - 1, *(int(v) for v in gen.integers(0, 2**62, 5))]:
        assert fb.pow(e) == pow(pk.hs, e, pk.n2)
    e = secrets.randbits(fb.exp_bits)
    assert fb.pow(e) == pow(pk.hs, e, pk.n2)
    with pytest.raises(InvalidParameterError):
        fb.pow(1 << (fb.w * fb.digits))
    obs = pk.obfuscators(4)
    assert len({int(o) for o in obs}) == 4 and all(sk.decrypt(o) == 0 for o in obs)
    crt = [sk.crt_obfuscator() for _ in range(4)]
    assert len({int(o) for o in crt}) == 4 and all(sk.decrypt(o) == 0 for o in crt)
    assert all(0 < o < pk.n2 for o in crt)
    # batch operations agree with the one-at-a-time ones
    ms = [0, 5, pk.n - 1, 123456789]
    cs = pk.encrypt_many(ms, obs)
    assert [sk.decrypt(c) for c in cs] == ms
    cs2 = pk.add_plain_many(cs, [1, 2, 3, 4])
    assert [sk.decrypt(c) for c in cs2] == [
        (m + d) % pk.n for m, d in zip(ms, [1, 2, 3, 4], strict=True)
    ]
    cs3 = pk.rerandomize_many(cs2, crt)
    assert cs3 != cs2 and [sk.decrypt(c) for c in cs3] == [sk.decrypt(c) for c in cs2]
    assert pk.from_bytes(pk.to_bytes(cs3), 4) == cs3
    with pytest.raises(InvalidParameterError):  # a key without fixed base has no table
        PublicKey(pk.n).fixed_base().pow(-1)


def test_precomputer_pool_and_inline(key: PrivateKey) -> None:
    pk, sk = key.public, key
    with Precomputer(1) as pre:
        pre.produce("t", pk, 40)
        got = pre.take("t", pk, 25) + pre.take("t", pk, 20)  # 5 more than produced: inline
        assert len(got) == 45 and len({int(o) for o in got}) == 45
        assert all(sk.decrypt(o) == 0 for o in got[::7])
        assert pre.produced_inline == 5
        cts = [int(c) for c in pk.encrypt_many(list(range(30)), got[:30])]
        chunks = [cts[i : i + 8] for i in range(0, 30, 8)]
        assert pre.map(decrypt_batch, sk, chunks) == list(range(30))
        assert pre.call(sum, [1, 2, 3]) == 6
        procs = list(pre._ex._processes.values())  # type: ignore[union-attr]
    assert all(not p.is_alive() for p in procs)
    inline = Precomputer(0)
    assert len(inline.take("t", pk, 3)) == 3 and inline.produced_inline == 3
    assert inline.map(decrypt_batch, sk, [cts[:4]]) == [0, 1, 2, 3]


def test_hash_to_group_is_the_u_coordinate_of_a_point_of_g() -> None:
    import hashlib

    import nacl.bindings as nb

    for data in (b"car price\tkbb.com", b"", "ünï\tcode".encode()):
        u = cm.hash_to_group(data)
        h = hashlib.sha512(cm._DOMAIN + data).digest()
        pt = nb.crypto_core_ed25519_add(
            nb.crypto_core_ed25519_from_uniform(h[:32]), nb.crypto_core_ed25519_from_uniform(h[32:])
        )
        assert nb.crypto_core_ed25519_is_valid_point(pt)  # in the prime-order subgroup
        # libsodium's own Edwards → Montgomery map agrees with ours
        assert u == nb.crypto_sign_ed25519_pk_to_curve25519(pt) and len(u) == 32
        assert cm.hash_to_group(data) == u
    assert cm.hash_to_group(b"a") != cm.hash_to_group(b"b")


def test_union_cipher_commutes_and_is_scalar_multiplication() -> None:
    import hashlib

    import nacl.bindings as nb

    a, b, c = (cm.UnionKey.generate() for _ in range(3))
    h = cm.hash_to_group(b"car price\tkbb.com")
    assert a.encrypt(b.encrypt(h)) == b.encrypt(a.encrypt(h))
    assert c.encrypt(a.encrypt(b.encrypt(h))) == b.encrypt(c.encrypt(a.encrypt(h)))

    # E_a(E_b(u(P))) = u(clamp(a)·clamp(b)·P), computed independently on edwards25519
    def clamp(s: bytes) -> int:
        v = bytearray(s)
        v[0] &= 248
        v[31] &= 127
        v[31] |= 64
        return int.from_bytes(v, "little")

    data = b"q\tu"
    hh = hashlib.sha512(cm._DOMAIN + data).digest()
    pt = nb.crypto_core_ed25519_add(
        nb.crypto_core_ed25519_from_uniform(hh[:32]), nb.crypto_core_ed25519_from_uniform(hh[32:])
    )
    k = clamp(a.s) * clamp(b.s) % cm.L
    q = nb.crypto_scalarmult_ed25519_noclamp(k.to_bytes(32, "little"), pt)
    assert a.encrypt(b.encrypt(cm.hash_to_group(data))) == nb.crypto_sign_ed25519_pk_to_curve25519(
        q
    )
    # equal pairs collide, different ones do not
    items = [f"q{i}\thttp://u{i % 7}".encode() for i in range(40)]
    enc1 = [b.encrypt(a.encrypt(cm.hash_to_group(x))) for x in items]
    enc2 = [a.encrypt(b.encrypt(cm.hash_to_group(x))) for x in items]
    assert enc1 == enc2 and len(set(enc1)) == len(items)
    assert len({cm.digest(x) for x in enc1}) == len(items) and len(cm.digest(h)) == 16
    with pytest.raises(InputFormatError):  # a low-order point is refused
        a.encrypt(b"\x00" * 32)


def test_record_cipher_round_trip() -> None:
    a, c = cm.RecordKey.generate(), cm.RecordKey.generate()
    rec = "user\tquery ünï".encode()[:29]
    p = cm.encode_chunk(rec)
    assert len(p) == 32 and cm.decode_chunk(p) == rec.ljust(29, b"\x00")
    y = c.encrypt(a.encrypt(p))
    assert y != p and a.decrypt(c.decrypt(y)) == p  # decrypted in the other order
    assert cm.decode_chunk(a.decrypt(c.decrypt(y)))[: len(rec)] == rec
    with pytest.raises(InvalidParameterError):
        cm.encode_chunk(b"x" * 30)
    with pytest.raises(InputFormatError):  # not a point of G (small order / not canonical)
        a.decrypt(b"\x01" + b"\x00" * 31)
    with pytest.raises(InputFormatError):
        cm.elements_from_bytes(b"\x00" * 33)
    with pytest.raises(InputFormatError):
        cm.decode_chunk(b"\x00" * 31 + b"\x01")
