"""Fake (NOT private) mechanisms for the tests of the plumbing around a mechanism.

One base, :class:`FakeMechanism` (an embedding, ``epsilon`` = 1 by default, the euclidean
metric, distance 0), and the fakes built on it; tests subclass them for what they exercise.
Also :func:`run_cli`, the one way the CLI tests call ``deniable`` in-process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt
import pytest

from deniable import Embedding
from deniable.mechanisms.base import Mechanism


@dataclass(frozen=True, eq=False)
class FakeMechanism(Mechanism):
    """Base of the fakes: subclasses implement ``_privatize`` (and ``distance`` when it matters)."""

    name: ClassVar[str] = "fake"
    metric: ClassVar[str] = "euclidean"  # type: ignore[misc]
    embedding: Embedding
    epsilon: float = 1.0

    def distance(self, w: int, w2: int) -> float:
        return 0.0


@dataclass(frozen=True, eq=False)
class Shift(FakeMechanism):
    """Deterministic: word id -> id + shift (mod V), to check the text plumbing."""

    name: ClassVar[str] = "shift"
    shift: int = 1

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        return (ids + self.shift) % self.embedding.size


class RandomWords(FakeMechanism):
    """Every token becomes a uniformly random vocabulary word (destroys all signal)."""

    name: ClassVar[str] = "random"

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        return rng.integers(0, self.embedding.size, size=ids.shape)


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``deniable ARGS`` in-process: (exit code, stdout, stderr)."""
    from deniable.cli import run_app

    code = run_app(args)
    out = capsys.readouterr()
    return code, out.out, out.err
