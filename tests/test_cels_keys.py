"""Issue 30, item 4 (CELS keys): the certificate helper writes private keys owner-only, and a
data party neither accepts a Paillier base that would make every ciphertext decryptable nor
randomises with P0's base at all.

P0 sends n and a fixed base h_s; a data party's obfuscators were h_s^α. With h_s = −1 (or any
square root of 1 mod n², which P0 gets from the CRT) every obfuscator is ±1 and anyone can
decrypt: such bases are now refused. A base of larger but still small order, or one that is not
an n-th residue, cannot be told apart by any public check (that is the DCR problem), so each
data party now draws its own base h = x^n mod n² (x secret, uniform in Z*_n)."""

from __future__ import annotations

from pathlib import Path

import gmpy2
import pytest

from searchveil.cels.config import make_certificates
from searchveil.cels.paillier import generate_keypair
from searchveil.cels.party import pk_body, pk_from
from searchveil.cels.wire import ProtocolError

BITS = 512  # TEST KEY (insecure, fast)


def test_certificate_keys_are_owner_only(tmp_path: Path) -> None:
    files = make_certificates(tmp_path / "tls", 3)
    for i in range(3):
        key = tmp_path / "tls" / files["parties"][i]["key"]
        assert key.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "tls").stat().st_mode & 0o077 == 0


def _roots_of_one(p: int, q: int) -> list[int]:
    """The square roots of 1 mod n² other than 1: −1 and the two mixed ones (CRT)."""
    p2, q2 = p * p, q * q
    n2 = p2 * q2
    mixed = int((1 + p2 * ((-2) * gmpy2.invert(p2, q2) % q2)) % n2)  # 1 mod p², −1 mod q²
    return [n2 - 1, mixed, n2 - mixed]


def test_a_base_of_order_two_is_refused() -> None:
    sk = generate_keypair(BITS)
    n = sk.public.n
    for h in _roots_of_one(sk.p, sk.q):
        assert h * h % (n * n) == 1 and h != 1
        body = {"n": format(n, "x"), "hs": format(h, "x")}
        with pytest.raises(ProtocolError, match="fixed base"):
            pk_from(body, BITS, 0)


def test_a_data_party_randomises_with_its_own_base() -> None:
    sk = generate_keypair(BITS)
    pub = sk.public
    mine = pk_from(pk_body(pub), BITS, 0)
    assert mine.n == pub.n and mine.hs != pub.hs
    # its base is an n-th residue (order dividing λ(n)) and P0 decrypts what it encrypts
    lam = (sk.p - 1) * (sk.q - 1)
    assert pow(mine.hs, lam, pub.n * pub.n) == 1
    assert [sk.decrypt(mine.encrypt(m)) for m in (0, 1, 12345, pub.n - 1)] == [
        0, 1, 12345, pub.n - 1
    ]  # fmt: skip
    assert len({mine.obfuscator() for _ in range(20)}) == 20
