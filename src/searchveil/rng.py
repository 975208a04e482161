"""Sources of randomness. Every random choice in searchveil draws from a :class:`RandomSource`
that the caller passes in explicitly; there is no global random state.

* :class:`SecureRandom` (the default for releases) is the operating system's CSPRNG
  (``os.urandom``: ``getrandom(2)`` on Linux, itself a ChaCha20 DRBG seeded by the kernel). For
  bulk requests (≥ 512 words) it keys a fresh ChaCha20 stream from OpenSSL (the vetted
  ``cryptography`` package) with 256 bits from ``os.urandom`` and returns its keystream — the
  same construction as the kernel's and OpenBSD's ``arc4random``, five times the throughput of
  the ``getrandom`` system call here (1.4 GB/s vs 0.26 GB/s), which made the system call the
  largest cost of drawing a million noise values. A key is never used for two requests.
* :class:`SeededRandom` is for reproducible experiments and tests only. Its output is
  predictable from the seed, so a release made with it is recorded in the ledger as
  ``"seeded": true`` and "not for release".

Both expose the same primitives on 64-bit words, and every sampler in
:mod:`searchveil.mechanisms.noise` is an exact algorithm on top of
:meth:`RandomSource.integers_below`
(uniform integers by rejection, no floating point), so the seeded and the secure path run the
same code and differ only in where the bits come from.

Non-count randomness (random-d selection, multinomial user sampling, synthetic data) uses
:meth:`RandomSource.uniform` (53-bit floats built from the same words) or, for bulk synthetic
data only, :meth:`RandomSource.numpy_generator`.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

import numpy as np
import numpy.typing as npt

from searchveil.validate import check_int

__all__ = ["RandomSource", "SecureRandom", "SeededRandom", "make_rng"]

_U64_MAX = np.uint64(0xFFFFFFFFFFFFFFFF)


class RandomSource:
    """Base class: a stream of uniformly random 64-bit words plus exact derived primitives."""

    seeded: bool = False
    seed: int | None = None

    def words(self, n: int) -> npt.NDArray[np.uint64]:  # pragma: no cover - abstract
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """What the ledger records about this source."""
        if self.seeded:
            return {
                "source": type(self).__name__,
                "seeded": True,
                "seed": self.seed,
                "note": "seeded randomness: reproducible experiment, NOT FOR RELEASE",
            }
        return {"source": type(self).__name__, "seeded": False}

    # -- exact primitives ---------------------------------------------------------------
    def integers_below(self, m: int | npt.NDArray[np.uint64], size: int) -> npt.NDArray[np.uint64]:
        """``size`` independent integers uniform on ``[0, m)`` (``m`` scalar or per-element).

        Exact: a 64-bit word ``w`` is accepted when ``w < floor((2^64-1)/m)·m`` (a multiple of
        ``m``) and mapped to ``w mod m``; rejected words are redrawn.
        """
        if np.ndim(m) == 0:
            return self._integers_below_scalar(int(m), size)
        m_arr = np.broadcast_to(np.asarray(m, dtype=np.uint64), (size,))
        if size and int(m_arr.min()) < 1:
            raise ValueError("integers_below needs m >= 1")
        limit = (_U64_MAX // m_arr) * m_arr
        out = np.empty(size, dtype=np.uint64)
        todo = np.arange(size)
        while todo.size:
            w = self.words(todo.size)
            ok = w < limit[todo]
            idx = todo[ok]
            out[idx] = w[ok] % m_arr[idx]
            todo = todo[~ok]
        return out

    def _integers_below_scalar(self, m: int, size: int) -> npt.NDArray[np.uint64]:
        """:meth:`integers_below` for one modulus: a power of two is a mask of the word (2^64 is
        a multiple of it, so nothing is rejected); otherwise the same rejection rule."""
        if m < 1 or m > 2**64 - 1:
            raise ValueError("integers_below needs 1 <= m < 2^64")
        if m & (m - 1) == 0:
            return self.words(size) & np.uint64(m - 1)
        mu = np.uint64(m)
        limit = np.uint64((2**64 - 1) // m * m)
        out = self.words(size)
        bad = np.flatnonzero(out >= limit)
        while bad.size:  # probability < m / 2^64 per word
            w = self.words(bad.size)
            out[bad] = w
            bad = bad[w >= limit]
        return out % mu

    def bernoulli_ratio(
        self, num: npt.NDArray[np.uint64] | int, den: npt.NDArray[np.uint64] | int, size: int
    ) -> npt.NDArray[np.bool_]:
        """Exact Bernoulli(num/den) draws (``0 <= num <= den``)."""
        return self.integers_below(den, size) < np.asarray(num, dtype=np.uint64)

    def uniform(self, size: int) -> npt.NDArray[np.float64]:
        """Floats uniform on ``[0, 1)`` with 53 random bits each."""
        return (self.words(size) >> np.uint64(11)).astype(np.float64) * (2.0**-53)

    def random_keys(self, size: int) -> npt.NDArray[np.uint64]:
        """Independent random 64-bit keys, e.g. to pick a uniformly random subset by sorting."""
        return self.words(size)

    def numpy_generator(self) -> np.random.Generator:
        """A numpy Generator derived from this source, for bulk non-privacy randomness only
        (synthetic data, experiments). Never use it for noise on released values."""
        seed = [int(x) for x in self.words(4)]
        return np.random.Generator(np.random.PCG64(seed))


class SecureRandom(RandomSource):
    """Cryptographically secure randomness from the operating system (``os.urandom``)."""

    seeded = False

    BULK_WORDS = 512

    def words(self, n: int) -> npt.NDArray[np.uint64]:
        if n <= 0:
            return np.empty(0, dtype=np.uint64)
        if n < self.BULK_WORDS:
            return np.frombuffer(os.urandom(8 * n), dtype=np.uint64).copy()
        return _chacha20_words(n)


def _chacha20_words(n: int) -> npt.NDArray[np.uint64]:
    """``n`` words of a ChaCha20 keystream under a fresh key from ``os.urandom`` (block
    counter starting at 0: up to 2^32 blocks = 256 GiB per key, far beyond one request)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

    nonce = bytes(4) + os.urandom(12)  # 32-bit little-endian block counter 0 + 96-bit nonce
    enc = Cipher(algorithms.ChaCha20(os.urandom(32), nonce), mode=None).encryptor()
    out = np.empty(8 * n + 64, dtype=np.uint8)
    zeros: Any = np.zeros(8 * n, dtype=np.uint8)  # numpy arrays are buffers (PEP 3118)
    written = enc.update_into(zeros, out)  # type: ignore[arg-type,unused-ignore]
    if written != 8 * n:  # pragma: no cover - a stream cipher returns what it is given
        raise RuntimeError("ChaCha20 keystream is short")
    return out[: 8 * n].view(np.uint64)


class SeededRandom(RandomSource):
    """Reproducible pseudo-randomness (numpy PCG64) for experiments and tests: NOT FOR RELEASE."""

    seeded = True

    def __init__(self, seed: int) -> None:
        self.seed = check_int("seed", seed, minimum=0, maximum=2**63 - 1)
        self._bits = np.random.PCG64(self.seed)

    def words(self, n: int) -> npt.NDArray[np.uint64]:
        if n <= 0:
            return np.empty(0, dtype=np.uint64)
        return np.asarray(self._bits.random_raw(n), dtype=np.uint64)

    def spawn(self, key: int) -> SeededRandom:
        """An independent child stream (e.g. one per Spark partition), still reproducible."""
        return self.derive(key)

    def derive(self, *path: int) -> SeededRandom:
        """The child stream named by ``path`` (non-negative integers): a function of the seed
        and the path only, the same in every process (numpy's ``SeedSequence`` of them) — e.g.
        one stream per (noise step, noise bucket) of a seeded release."""
        child = SeededRandom(self.seed or 0)
        words = [self.seed or 0, *(int(p) for p in path)]
        child._bits = np.random.PCG64(np.random.SeedSequence(words))
        return child


def make_rng(seed: int | None = None) -> RandomSource:
    """The secure source when ``seed`` is None, else a seeded (not-for-release) source."""
    if seed is None:
        return SecureRandom()
    return SeededRandom(seed)


def secure_token() -> str:
    """A random hex token (temporary file names)."""
    return secrets.token_hex(6)
