"""Random generators.

By default every mechanism draws from a cryptographically secure generator: numpy's
``Generator`` over randomgen's ChaCha20 bit generator, keyed with 256 bits read
from the operating system (``os.urandom``). A seed is an explicit opt-in for
reproducible experiments; it emits :class:`NotPrivateWarning` because anyone who
knows the seed can undo the noise.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
from randomgen import ChaCha

from ._errors import InvalidParameterError, NotPrivateWarning

__all__ = ["RandomState", "check_random_state", "secure_generator", "seeded_generator"]

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
