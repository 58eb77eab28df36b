"""Sources of uniform random integers for the noise samplers.

The samplers in :mod:`dpsql.noise.samplers` need only two operations, uniform
bits and a uniform integer below a bound, so the source of randomness is a
small protocol. Releases always use :class:`SecureRng`, backed by the operating
system's CSPRNG (``secrets``/``os.urandom``): a privacy proof assumes the noise
is unpredictable to the analyst, which a seeded PRNG is not. :class:`SeededRng`
exists so that tests are reproducible.
"""
from __future__ import annotations

import random
import secrets
from typing import Protocol, runtime_checkable

__all__ = ["Rng", "SecureRng", "SeededRng", "new_salt"]


@runtime_checkable
class Rng(Protocol):
    """Uniform random integers: all the samplers need."""

    def randbits(self, k: int) -> int:
        """A uniform integer in ``[0, 2**k)``; ``k >= 0``."""

    def randbelow(self, n: int) -> int:
        """A uniform integer in ``[0, n)``; ``n >= 1``."""


def _check_bits(k: int) -> None:
    if k < 0:
        raise ValueError("randbits needs k >= 0")


def _check_bound(n: int) -> None:
    if n < 1:
        raise ValueError("randbelow needs n >= 1")


class SecureRng:
    """The operating system's CSPRNG (``secrets``). The only Rng used for releases.

    Stateless: every call reads fresh bytes from ``os.urandom`` through
    ``random.SystemRandom``, so instances are interchangeable and safe to share
    between threads and across ``fork``.
    """

    __slots__ = ()

    def randbits(self, k: int) -> int:
        _check_bits(k)
        return secrets.randbits(k) if k else 0

    def randbelow(self, n: int) -> int:
        _check_bound(n)
        return secrets.randbelow(n)

    def __repr__(self) -> str:
        return "SecureRng()"


class SeededRng:
    """A deterministic Rng from an integer seed. FOR TESTS ONLY.

    Backed by ``random.Random`` (Mersenne Twister), which is predictable from its
    outputs: noise drawn from it protects nothing. Never use it for a release.
    """

    __slots__ = ("_random", "seed")

    def __init__(self, seed: int):
        self.seed = seed
        self._random = random.Random(seed)

    def randbits(self, k: int) -> int:
        _check_bits(k)
        return self._random.getrandbits(k) if k else 0

    def randbelow(self, n: int) -> int:
        _check_bound(n)
        return self._random.randrange(n)

    def __repr__(self) -> str:
        return f"SeededRng({self.seed!r})"


def new_salt() -> int:
    """A fresh secret in ``[0, 2**63)`` from the CSPRNG (key of the salted group-choice hash)."""
    return secrets.randbits(63)
