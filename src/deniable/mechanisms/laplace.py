"""The multivariate Laplace mechanism with nearest-neighbour decode ("Madlib", SPEC section 2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._validation import check_epsilon, check_int
from ..embedding import Embedding
from ..index import Index, make_index
from ..metrics import paired_distances
from .base import Mechanism

__all__ = ["MultivariateLaplace", "sample_laplace_noise"]


def sample_laplace_noise(count: int, dim: int, epsilon: float, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """``count`` draws from the density ``p(z) ∝ exp(-epsilon * ||z||_2)`` on R^dim.

    Direction: a normalised standard normal vector (uniform on the sphere).
    Magnitude: Gamma(shape=dim, scale=1/epsilon), the radial law of that density.
    (Per-coordinate Laplace noise would be a different mechanism with an L1 guarantee.)
    """
    g = rng.standard_normal((count, dim))
    norms = np.linalg.norm(g, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    r = rng.gamma(shape=dim, scale=1.0 / epsilon, size=(count, 1))
    return g / norms * r


@dataclass(frozen=True, eq=False)
class MultivariateLaplace(Mechanism):
    """Add multivariate Laplace noise to the word's vector, return the nearest word.

    ``Pr[M(w)=y] <= exp(epsilon * ||phi(w) - phi(w')||_2) Pr[M(w')=y]`` for all w, w', y.

    Parameters
    ----------
    embedding
        The vocabulary and vectors.
    epsilon
        Privacy parameter (> 0). Its meaning depends on the embedding's scale: calibrate it.
    index
        Nearest-neighbour decode: ``"exact"`` (numpy, blocked), ``"flat"`` (faiss exact),
        ``"hnsw"`` (faiss approximate, cached on disk) or a ready :class:`~deniable.index.Index`.
        An approximate decode keeps the guarantee (post-processing) and costs fidelity only.
    batch_size
        Tokens decoded per block (bounds memory).
    """

    name: ClassVar[str] = "madlib"
    metric: ClassVar[str] = "euclidean"  # type: ignore[misc]

    embedding: Embedding
    epsilon: float
    index: str | Index = "exact"
    batch_size: int = 8192
    index_options: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "batch_size", check_int("batch_size", self.batch_size, minimum=1))
        if not isinstance(self.embedding, Embedding):
            from .._errors import InvalidParameterError

            raise InvalidParameterError("embedding", type(self.embedding).__name__, "a deniable.Embedding")
        object.__setattr__(self, "_index", make_index(self.embedding, self.index, **self.index_options))

    @property
    def search_index(self) -> Index:
        """The nearest-neighbour index used for decoding."""
        return self._index  # type: ignore[attr-defined]

    def noisy_vectors(self, ids: npt.ArrayLike, rng: np.random.Generator) -> np.ndarray:
        """``phi(w) + z`` for each id (float32), before decoding."""
        flat = self.embedding.check_ids(ids).ravel()
        noise = sample_laplace_noise(flat.size, self.embedding.dim, self.epsilon, rng)
        noise += self.embedding.vectors[flat]
        return noise.astype(np.float32)

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        out = np.empty(ids.size, dtype=np.int64)
        dim, vectors = self.embedding.dim, self.embedding.vectors
        for s in range(0, ids.size, self.batch_size):
            block = ids[s : s + self.batch_size]
            noisy = sample_laplace_noise(block.size, dim, self.epsilon, rng)
            noisy += vectors[block]
            _, nn = self.search_index.search(noisy.astype(np.float32), 1)
            out[s : s + block.size] = nn[:, 0]
        return out

    def distance(self, w: int, w2: int) -> float:
        vec = self.embedding.vectors
        return float(paired_distances(vec[[w]], vec[[w2]], "euclidean")[0])

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d["index"] = self.index if isinstance(self.index, str) else type(self.index).__name__
        return d
