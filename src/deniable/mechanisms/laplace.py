"""The multivariate Laplace mechanism with nearest-neighbour decode ("Madlib", SPEC section 2)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._validation import check_choice, check_epsilon, check_int
from ..embedding import Embedding
from ..index import INDEXES, Index, make_index
from ..metrics import paired_distances
from .base import Mechanism
from .registry import Option

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
    index_options
        Keyword arguments of the index (e.g. HNSW's ``m``).

    The constructor only validates and records; the index is built (or loaded from the
    cache) on first use, once, under a lock.
    """

    name: ClassVar[str] = "madlib"
    metric: ClassVar[str] = "euclidean"  # type: ignore[misc]

    embedding: Embedding
    epsilon: float
    index: str | Index = "exact"
    batch_size: int = 8192
    index_options: dict[str, Any] = field(default_factory=dict, repr=False)

    options: ClassVar[tuple[Option, ...]] = (
        Option(
            "index",
            str,
            "exact",
            choices=INDEXES,
            client=True,
            objects=True,
            help="nearest-neighbour decode: exact (numpy), flat (faiss exact) or hnsw (faiss approximate: "
            "same privacy, slightly lower fidelity)",
        ),
        Option("batch_size", int, 8192, low=1, cli=False, help="tokens decoded per block (bounds memory)"),
        Option("index_options", dict, None, cli=False, help="keyword arguments of the index"),
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "batch_size", check_int("batch_size", self.batch_size, minimum=1))
        if not isinstance(self.embedding, Embedding):
            raise Embedding.type_error(self.embedding)
        _ = self.embedding.vectors  # cheap; a code-only device artefact has none and says so here
        if isinstance(self.index, str):
            check_choice("index", self.index, INDEXES)
        elif not isinstance(self.index, Index):
            raise InvalidParameterError("index", type(self.index).__name__, "'exact', 'flat', 'hnsw' or an Index")
        opts = {} if self.index_options is None else self.index_options
        if not isinstance(opts, dict):
            raise InvalidParameterError("index_options", type(opts).__name__, "a dict of index keyword arguments")
        object.__setattr__(self, "index_options", dict(opts))
        # a ready index is only checked against the embedding (cheap); a named one is built on first use
        ready = make_index(self.embedding, self.index) if isinstance(self.index, Index) else None
        object.__setattr__(self, "_index", ready)
        object.__setattr__(self, "_index_lock", threading.Lock())

    @property
    def search_index(self) -> Index:
        """The nearest-neighbour index used for decoding (built on first use, thread-safe)."""
        found: Index | None = self._index  # type: ignore[attr-defined]
        if found is None:
            with self._index_lock:  # type: ignore[attr-defined]
                found = self._index  # type: ignore[attr-defined]
                if found is None:
                    found = make_index(self.embedding, self.index, **self.index_options)
                    object.__setattr__(self, "_index", found)
        return found

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
