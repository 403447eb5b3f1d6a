"""Small mechanisms with known output distributions, for the calibration tests.

- :class:`RefTEM`: the TEM output distribution written straight from SPEC section 3, with
  ``distribution`` and ``compact_distribution`` (the interface of
  ``deniable.mechanisms.tem.TruncatedExponential``) and an exact sampler.
- :class:`FiniteMechanism`: any explicit V x V row-stochastic matrix, sampled exactly and
  vectorized; it has NO ``distribution`` method, so calibration must sample it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from deniable import Embedding
from deniable.mechanisms.base import Mechanism
from deniable.metrics import distances_to, pairwise_distances
from fake_mechanisms import FakeMechanism


@dataclass(frozen=True)
class CompactDistribution:
    ids: npt.NDArray[np.int64]
    probs: npt.NDArray[np.float64]
    n_outside: int
    p_outside: float


def line_embedding(positions: list[float]) -> Embedding:
    """Words w0, w1, ... at the given positions on a line (1-d vectors)."""
    vec = np.asarray(positions, dtype=np.float32)[:, None]
    return Embedding([f"w{i}" for i in range(len(positions))], vec, name="line")


def _sample_rows(p: np.ndarray, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    cum = np.cumsum(p, axis=1)
    cum[:, -1] = 1.0
    u = rng.random(ids.size)
    return np.minimum((u[:, None] >= cum[ids]).sum(axis=1), p.shape[1] - 1).astype(np.int64)


@dataclass(frozen=True, eq=False)
class RefTEM(Mechanism):
    """``Pr[M(w)=y] ∝ exp(-eps min(d(w,y), gamma) / 2)`` computed in float64 (SPEC section 3)."""

    name: ClassVar[str] = "tem"
    embedding: Embedding
    epsilon: float
    metric: str = "euclidean"  # type: ignore[misc]
    gamma: float | None = None
    beta: float = 1e-3
    _p: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        v = self.embedding.size
        if self.gamma is None:
            g = (2.0 / self.epsilon) * math.log((1 - self.beta) * (v - 1) / self.beta)
            object.__setattr__(self, "gamma", g)
        vec = np.asarray(self.embedding.vectors, dtype=np.float64)
        d = pairwise_distances(vec, vec, self.metric)
        np.fill_diagonal(d, 0.0)
        object.__setattr__(self, "_d", d)
        w = np.exp(-self.epsilon * np.minimum(d, self.gamma) / 2.0)
        object.__setattr__(self, "_p", w / w.sum(axis=1, keepdims=True))

    @property
    def matrix(self) -> np.ndarray:
        return self._p  # type: ignore[no-any-return]

    has_distribution: ClassVar[bool] = True
    has_compact_distribution: ClassVar[bool] = True
    truncated_exponential: ClassVar[bool] = True

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        return _sample_rows(self._p, ids, rng)

    def distance(self, w: int, w2: int) -> float:
        return float(self._d[w, w2])  # type: ignore[attr-defined]

    def distribution(self, w: int) -> tuple[np.ndarray, np.ndarray]:
        return np.arange(self.embedding.size, dtype=np.int64), self._p[w].copy()

    def compact_distribution(self, w: int) -> CompactDistribution:
        vec = self.embedding.vectors
        d = distances_to(vec[w], vec, self.metric)
        d[w] = 0.0
        assert self.gamma is not None
        inside = d <= self.gamma
        wts = np.exp(-self.epsilon * d[inside] / 2.0)
        n_out = int((~inside).sum())
        w_out = math.exp(-self.epsilon * self.gamma / 2.0)
        z = wts.sum() + n_out * w_out
        return CompactDistribution(np.flatnonzero(inside).astype(np.int64), wts / z, n_out, w_out / z)


@dataclass(frozen=True, eq=False)
class FiniteMechanism(FakeMechanism):
    """A mechanism given by an explicit row-stochastic matrix (sampled exactly, vectorized)."""

    name: ClassVar[str] = "finite"
    matrix: Any = field(default=None, repr=False)
    calls: list[int] = field(default_factory=list, repr=False)

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        self.calls.append(int(ids.size))
        return _sample_rows(np.asarray(self.matrix), ids, rng)

    def distance(self, w: int, w2: int) -> float:
        vec = self.embedding.vectors
        return float(np.linalg.norm(vec[w].astype(np.float64) - vec[w2].astype(np.float64)))


def tem_matrix(embedding: Embedding, epsilon: float, gamma: float) -> np.ndarray:
    """The TEM output matrix from the formula (for FiniteMechanism)."""
    return RefTEM(embedding, epsilon, gamma=gamma).matrix
