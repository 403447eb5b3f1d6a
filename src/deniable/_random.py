"""Random generators.

By default every mechanism draws from a cryptographically secure generator: numpy's
``Generator`` over randomgen's ChaCha20 bit generator, keyed with 256 bits read
from the operating system (``os.urandom``). A seed is an explicit opt-in for
reproducible experiments; it emits :class:`NotPrivateWarning` because anyone who
knows the seed can undo the noise.

A *run* that may be recomputed (an engine retrying a task, a second action on the same
Spark DataFrame, a re-run of a failed job) draws from a :class:`RunKey`: 256 secret bits
from the operating system, never derived from the data. Each unit of work (a batch,
named by its partition and the position of its first record) gets its own ChaCha20
stream, keyed by ``BLAKE2b(key=run key, unit)`` -- so recomputing the same unit of the
same run reproduces the same release instead of releasing the records again with fresh
noise, and separate runs (separate keys) are independent.
"""

from __future__ import annotations

import hashlib
import os
import struct
import warnings
from typing import Any

import numpy as np
from randomgen import ChaCha

from ._errors import InvalidParameterError, NotPrivateWarning

__all__ = ["RandomState", "RunKey", "check_random_state", "secure_generator", "seeded_generator"]

RandomState = None | int | np.random.Generator


def secure_generator() -> np.random.Generator:
    """A ChaCha20 generator keyed with 256 fresh bits from the operating system."""
    key = int.from_bytes(os.urandom(32), "little")
    return np.random.Generator(ChaCha(key=key, counter=0, rounds=20))


def seeded_generator(seed: int, *, warn: bool = True, stacklevel: int = 1) -> np.random.Generator:
    """A reproducible generator for experiments. Its output is NOT private.

    The :class:`NotPrivateWarning` points at the caller's line (``stacklevel`` frames up:
    1 = the caller, 2 = its caller, as for :func:`warnings.warn` one frame removed).
    """
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise InvalidParameterError("seed", seed, "a non-negative integer")
    if warn:
        warnings.warn(
            f"seed={int(seed)} makes the output reproducible: anyone who knows the seed can "
            "recompute the noise, so seeded output is NOT private. Use it for experiments only.",
            NotPrivateWarning,
            stacklevel=stacklevel + 1,
        )
    return np.random.Generator(ChaCha(seed=int(seed), rounds=20))


def check_random_state(random_state: RandomState = None, *, stacklevel: int = 1) -> np.random.Generator:
    """Turn ``None`` / an int seed / a Generator into a Generator (like scikit-learn).

    ``None`` gives the secure default; an int gives a seeded generator (with a
    :class:`NotPrivateWarning` pointing ``stacklevel`` frames above this call: by default
    at the line that called it); a Generator is used as it is.
    """
    if random_state is None:
        return secure_generator()
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, int | np.integer) and not isinstance(random_state, bool):
        return seeded_generator(int(random_state), stacklevel=stacklevel + 1)
    raise InvalidParameterError(
        "random_state", random_state, "None (secure, from the OS), an int seed, or a numpy Generator"
    )


_KEY_BYTES = 32


class RunKey:
    """The secret of one run: 256 bits from the OS; :meth:`generator` gives a unit's keyed stream.

    The stream of a unit (a tuple of non-negative ints, e.g. ``(partition, first record,
    records)``) is ChaCha20 with the 256-bit key ``BLAKE2b(unit, key=secret)``: a
    pseudo-random function of the run's secret, so units' streams are independent, the
    same unit of the same run always gets the same stream, and nothing about the secret
    can be learned from the output or from :attr:`id`.

    The secret is never derived from the data. It is never written anywhere by the
    library (its ``repr`` hides it; :attr:`id` is a one-way public label for manifests);
    :meth:`hex` exports it only when a user asks for it (to re-run a failed job with the
    same noise). A run key belongs to ONE input: the same key over different data would
    give different records the same stream (correlated noise), so every engine call
    makes a fresh key unless one is passed explicitly.
    """

    __slots__ = ("_secret", "seeded")

    def __init__(self, secret: bytes, *, seeded: bool = False) -> None:
        if not isinstance(secret, bytes) or len(secret) != _KEY_BYTES:
            raise InvalidParameterError("run_key", "a value", f"{_KEY_BYTES} bytes (64 hex digits)")
        self._secret = secret
        self.seeded = seeded

    @classmethod
    def new(cls) -> RunKey:
        """A fresh key: 256 bits from the operating system."""
        return cls(os.urandom(_KEY_BYTES))

    @classmethod
    def from_seed(cls, seed: int) -> RunKey:
        """A reproducible key for experiments (NOT private: the caller warns)."""
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise InvalidParameterError("seed", seed, "a non-negative integer")
        words = np.random.SeedSequence(int(seed)).generate_state(_KEY_BYTES // 4, dtype=np.uint32)
        return cls(words.tobytes(), seeded=True)

    @classmethod
    def from_hex(cls, text: str) -> RunKey:
        """A key exported with :meth:`hex` (to reproduce a run's noise exactly)."""
        try:
            secret = bytes.fromhex(str(text).strip())
        except ValueError:
            raise InvalidParameterError("run_key", "the value given", "64 hexadecimal digits") from None
        return cls(secret)

    @classmethod
    def check(cls, run_key: RunKey | str | None) -> RunKey:
        """``None`` -> a fresh key; a :class:`RunKey` as is; a hex string -> that key."""
        if run_key is None:
            return cls.new()
        if isinstance(run_key, RunKey):
            return run_key
        if isinstance(run_key, str):
            return cls.from_hex(run_key)
        raise InvalidParameterError("run_key", type(run_key).__name__, "None, a RunKey or 64 hex digits")

    def hex(self) -> str:
        """The secret as 64 hex digits. Whoever holds it can recompute the noise: keep it like a password."""
        return self._secret.hex()

    @property
    def id(self) -> str:
        """A public label of this key (one-way: reveals nothing about the secret nor the data)."""
        return hashlib.blake2b(self._secret, digest_size=8, person=b"deniable-runid").hexdigest()

    def generator(self, *unit: int) -> np.random.Generator:
        """The ChaCha20 stream of ``unit`` (non-negative ints) in this run."""
        try:
            data = struct.pack(f"<{len(unit)}Q", *(int(u) for u in unit))
        except (struct.error, TypeError, ValueError):
            raise InvalidParameterError("unit", unit, "a tuple of non-negative integers below 2**64") from None
        sub = hashlib.blake2b(data, key=self._secret, digest_size=32, person=b"deniable-stream").digest()
        return np.random.Generator(ChaCha(key=int.from_bytes(sub, "little"), counter=0, rounds=20))

    def __repr__(self) -> str:
        return f"RunKey(id={self.id}{', seeded' if self.seeded else ''})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunKey) and other._secret == self._secret

    def __hash__(self) -> int:
        return hash(self.id)

    def __reduce__(self) -> tuple[Any, ...]:  # travels to engine workers with the batch function
        return (_run_key, (self._secret, self.seeded))


def _run_key(secret: bytes, seeded: bool) -> RunKey:
    return RunKey(secret, seeded=seeded)
