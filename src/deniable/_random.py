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

A *record* (one text of one column) draws from :meth:`RunKey.record_generator`: the stream of
``BLAKE2b(key=run key, (its position in the input, its column, its text))``. So the same key
over the same input gives the same output whatever the batch size, the number of processes or
the partitioning; and a record that moved (a line inserted above it) or changed draws fresh,
independent noise, never the stream another text was released with.

A key supplied by a user (a file, a hex string) must look random: :func:`check_key_strength`
refuses all-zero keys, repeated bytes and short patterns, and counting sequences; a key file
must be readable by its owner only (:meth:`RunKey.from_file`).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import stat
import struct
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from randomgen import ChaCha

from ._errors import InvalidParameterError, NotPrivateWarning

__all__ = [
    "KEY_ORIGINS",
    "RandomState",
    "RunKey",
    "check_key_strength",
    "check_random_state",
    "secure_generator",
    "seeded_generator",
]

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
#: where a run key came from: fresh from the OS, a user's key file, a user's hex string, a seed
KEY_ORIGINS = ("os", "file", "given", "seed")
#: the fewest distinct byte values a user-supplied key (and the differences of its consecutive
#: bytes) must have. 32 uniformly random bytes have ~30; fewer than 16 happens with probability
#: below 1e-15 (a true random key is never refused), while an all-zero key, a repeated byte or
#: short pattern (period < 16), ASCII text repeated, or a counting sequence (00 01 02 ...) is.
MIN_DISTINCT_BYTES = 16
_RECORD_UNIT = b"deniable-record\x00"


def check_key_strength(secret: bytes, name: str = "run_key") -> None:
    """Refuse a key that is evidently not random (:data:`MIN_DISTINCT_BYTES`); never shows the key.

    A screen for mistakes (``00...0``, ``abab...``, ``0001...1f``, a word typed as hex), not
    an entropy estimate: a key must come from a secure random source (``RunKey.new()``,
    ``deniable privatize --run-key-file NEW_PATH``, ``python -c "import secrets;
    print(secrets.token_hex(32))"``).
    """
    diffs = bytes((b - a) & 0xFF for a, b in itertools.pairwise(secret))
    if len(set(secret)) < MIN_DISTINCT_BYTES or len(set(diffs)) < MIN_DISTINCT_BYTES:
        raise InvalidParameterError(
            name,
            "the key given",
            "a random key: this one has too few distinct bytes (all zero, a repeated byte or short pattern, or "
            "a counting sequence), so its noise can be guessed. Make one with RunKey.new() or "
            "`deniable privatize --run-key-file NEW_PATH`",
        )


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

    __slots__ = ("_secret", "origin", "seeded")

    def __init__(self, secret: bytes, *, seeded: bool = False, origin: str | None = None) -> None:
        if not isinstance(secret, bytes) or len(secret) != _KEY_BYTES:
            raise InvalidParameterError("run_key", "a value", f"{_KEY_BYTES} bytes (64 hex digits)")
        self._secret = secret
        self.seeded = seeded
        #: where the key came from (:data:`KEY_ORIGINS`), stated in manifests
        self.origin = origin if origin is not None else ("seed" if seeded else "os")
        if self.origin not in KEY_ORIGINS:
            raise InvalidParameterError("origin", self.origin, ", ".join(KEY_ORIGINS))

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
    def from_hex(cls, text: str, *, origin: str = "given", name: str = "run_key") -> RunKey:
        """A key exported with :meth:`hex` (to reproduce a run's noise exactly).

        A key that is evidently not random is refused (:func:`check_key_strength`), here as
        on the command line: a reproducible run for experiments is what a seed is for.
        """
        try:
            secret = bytes.fromhex(str(text).strip())
        except ValueError:
            raise InvalidParameterError(name, "the value given", "64 hexadecimal digits") from None
        if len(secret) != _KEY_BYTES:
            raise InvalidParameterError(name, "the value given", f"{_KEY_BYTES} bytes (64 hex digits)")
        check_key_strength(secret, name)
        return cls(secret, origin=origin)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, name: str = "run_key_file") -> RunKey:
        """The key stored in ``path`` (64 hex digits), which only its owner may read or write.

        A file group- or world-accessible (any of mode ``0o077``) is refused: whoever reads
        the key can recompute the noise (``chmod 600 PATH`` fixes it). Not checked on Windows,
        which has no such mode bits.
        """
        from ._errors import DataError

        p = os.fspath(path)
        try:
            with open(p, "rb") as f:
                mode = os.fstat(f.fileno()).st_mode
                raw = f.read(4096)
        except OSError:
            raise DataError(f"{name} {p}: unreadable") from None
        if os.name != "nt" and stat.S_IMODE(mode) & 0o077:
            raise InvalidParameterError(
                name,
                p,
                f"a key file only its owner can read (mode {stat.S_IMODE(mode):04o} lets others read or write "
                f"it; run `chmod 600 {p}`, and make a new key if others may have read it)",
            )
        try:
            secret = bytes.fromhex(raw.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            secret = b""
        if len(secret) != _KEY_BYTES:
            raise InvalidParameterError(name, p, "a file holding a run key (64 hex digits)")
        try:
            check_key_strength(secret, name)
        except InvalidParameterError as exc:  # name the file, never the key
            raise InvalidParameterError(name, p, exc.allowed) from None
        return cls(secret, origin="file")

    @classmethod
    def check(cls, run_key: RunKey | str | None) -> RunKey:
        """``None`` -> a fresh key; a :class:`RunKey` as is; a hex string -> that key (refused if weak)."""
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

    def record_generator(self, position: int | Sequence[int], column: str, text: str) -> np.random.Generator:
        """The stream of one record: its ``position`` in the input, its ``column``, its ``text``.

        ``position``: the record's index in its input (an int), or a tuple of ints where an
        engine names records otherwise (Spark: partition and row; an id column's value): a
        tuple never names the same record as an int.

        ``BLAKE2b(key=secret, (position, column, text))`` keys ChaCha20: the same record of
        the same input always gets the same stream, whatever batch or process it is in; a
        different text at that position, or the same text at another one, an independent
        stream (noise is never shared between two different releases of different texts).
        """
        return np.random.Generator(
            ChaCha(key=int.from_bytes(self._record_digest(position, column, text), "little"), counter=0, rounds=20)
        )

    def _record_digest(self, position: int | Sequence[int], column: str, text: str) -> bytes:
        head = _pack_position(position)
        name = column.encode("utf-8", "surrogatepass")
        h = hashlib.blake2b(key=self._secret, digest_size=32, person=b"deniable-record")
        h.update(_RECORD_UNIT + head + struct.pack("<Q", len(name)) + name)
        h.update(text.encode("utf-8", "surrogatepass"))
        return h.digest()

    def input_digest(self) -> InputDigest:
        """A running keyed digest of an input's records (:class:`InputDigest`), for the ledger."""
        return InputDigest(self._secret)

    def __repr__(self) -> str:
        return f"RunKey(id={self.id}{', seeded' if self.seeded else ''})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunKey) and other._secret == self._secret

    def __hash__(self) -> int:
        return hash(self.id)

    def __reduce__(self) -> tuple[Any, ...]:  # travels to engine workers with the batch function
        return (_run_key, (self._secret, self.seeded, self.origin))


def _run_key(secret: bytes, seeded: bool, origin: str | None = None) -> RunKey:
    return RunKey(secret, seeded=seeded, origin=origin)


def _pack_position(position: int | Sequence[int]) -> bytes:
    """An int as 8 bytes; a tuple as its length (as a count above 2**63) then its ints: never equal."""
    try:
        if isinstance(position, int | np.integer) and not isinstance(position, bool):
            if not 0 <= int(position) < 1 << 63:
                raise ValueError
            return struct.pack("<Q", int(position))
        items = [int(u) for u in position]  # type: ignore[union-attr]
        return struct.pack(f"<Q{len(items)}Q", (1 << 63) | len(items), *items)
    except (struct.error, TypeError, ValueError):
        raise InvalidParameterError("position", "a value", "an integer in [0, 2**63) or a tuple of them") from None


class InputDigest:
    """A keyed digest of an input, per column: ``BLAKE2b(key=run secret)`` over its records.

    Each record ``(position, column, text)`` adds its keyed 256-bit hash to its column's sum
    (mod 2**256): the sum does not depend on the order records are seen in (batches,
    processes), and two inputs have the same digest only when they hold the same texts at
    the same positions (which is when the same key gives the same output). Without the key
    a digest is pseudo-random: it reveals nothing about the input (docs/threat-model.md,
    "Run keys and the ledger").
    """

    __slots__ = ("_secret", "_sums")

    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._sums: dict[str, int] = {}

    def add(self, position: int | Sequence[int], column: str, text: str) -> None:
        head = _pack_position(position)
        name = column.encode("utf-8", "surrogatepass")
        h = hashlib.blake2b(key=self._secret, digest_size=32, person=b"deniable-input")
        h.update(head + struct.pack("<Q", len(name)) + name)
        h.update(text.encode("utf-8", "surrogatepass"))
        bucket = column.split("\x00", 1)[0]  # "key\x00N": the N-th repeat of a key in a record
        self._sums[bucket] = (self._sums.get(bucket, 0) + int.from_bytes(h.digest(), "little")) % (1 << 256)

    def hexdigests(self) -> dict[str, str]:
        """``{column: 64 hex digits}`` (the digest of each column seen)."""
        return {c: v.to_bytes(32, "little").hex() for c, v in sorted(self._sums.items())}
