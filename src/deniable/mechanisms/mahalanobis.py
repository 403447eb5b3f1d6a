"""The regularized Mahalanobis mechanism (Xu, Aggarwal, Feyisetan, Teissier, PrivateNLP 2020).

Docs: docs/mechanisms/mahalanobis.md.

For each token: ``v_hat = phi(w) + r * S u`` with ``u`` uniform on the unit sphere,
``r ~ Gamma(n, 1/epsilon)`` and ``S = Sigma_lambda^{1/2}``,
``Sigma_lambda = lambda * Sigma / (tr(Sigma) / n) + (1 - lambda) * I``, where ``Sigma`` is the
covariance of the (public) embedding's vectors; output the nearest word to ``v_hat``
(Euclidean, the same index as Madlib).

The noise density is ``∝ exp(-epsilon ||Sigma_lambda^{-1/2} z||_2)``, so the guarantee is
``epsilon * d_M(w, w')`` with the Mahalanobis-type metric
``d_M(x, y) = ||Sigma_lambda^{-1/2} (phi(x) - phi(y))||_2`` -- not the Euclidean metric of
Madlib: at the same epsilon the two are different promises (compare them by the privacy ratio).
"""

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
from .base import Mechanism
from .laplace import sample_laplace_noise
from .registry import Option

__all__ = ["Mahalanobis", "regularized_covariance"]


def regularized_covariance(vectors: npt.ArrayLike, lam: float) -> npt.NDArray[np.float64]:
    """``lam * Sigma / (tr(Sigma) / n) + (1 - lam) * I`` (float64), Sigma the covariance of the rows.

    The normalisation makes the mean variance of Sigma 1, so lambda trades shape, not scale.
    """
    x = np.asarray(vectors)
    n = x.shape[1]
    mean = x.mean(axis=0, dtype=np.float64)
    cov = np.zeros((n, n), dtype=np.float64)
    for s in range(0, x.shape[0], 65536):  # blocked: never a float64 copy of the whole matrix
        b = np.asarray(x[s : s + 65536], dtype=np.float64) - mean
        cov += b.T @ b
    cov /= max(x.shape[0] - 1, 1)
    trace = float(np.trace(cov))
    scaled = cov / (trace / n) if trace > 0 else np.eye(n)
    return np.asarray(lam * scaled + (1.0 - lam) * np.eye(n), dtype=np.float64)


@dataclass(frozen=True)
class _Shape:
    sqrt: npt.NDArray[np.float64]  # Sigma_lambda^{1/2}
    inv_sqrt: npt.NDArray[np.float64]  # Sigma_lambda^{-1/2}


@dataclass(frozen=True, eq=False)
class Mahalanobis(Mechanism):
    """Elliptical multivariate Laplace noise from the embedding's regularized covariance, nearest word.

    ``Pr[M(w)=y] <= exp(epsilon * ||Sigma_lambda^{-1/2}(phi(w) - phi(w'))||) Pr[M(w')=y]``.

    Parameters
    ----------
    embedding, epsilon
        As for ``madlib``.
    lam
        lambda in [0, 1]: 0 is Madlib (spherical noise), 1 the full (normalised) covariance.
    index, batch_size, index_options
        Nearest-neighbour decode, as for ``madlib``.

    The covariance (one pass over the vectors) and its square roots are computed on first use,
    once, under a lock.
    """

    name: ClassVar[str] = "mahalanobis"
    metric: ClassVar[str] = "mahalanobis"  # type: ignore[misc]

    embedding: Embedding
    epsilon: float
    lam: float = 0.2
    index: str | Index = "exact"
    batch_size: int = 8192
    index_options: dict[str, Any] = field(default_factory=dict, repr=False)

    options: ClassVar[tuple[Option, ...]] = (
        Option(
            "lam",
            float,
            0.2,
            low=0.0,
            high=1.0,
            client=True,
            flag="--lambda",
            help="covariance weight lambda in [0, 1] (0 = spherical noise, as madlib)",
        ),
        Option(
            "index",
            str,
            "exact",
            choices=INDEXES,
            client=True,
            objects=True,
            help="nearest-neighbour decode: exact, flat or hnsw (approximate: same privacy)",
        ),
        Option("batch_size", int, 8192, low=1, cli=False, help="tokens decoded per block (bounds memory)"),
        Option("index_options", dict, None, cli=False, help="keyword arguments of the index"),
    )

    def __post_init__(self) -> None:
        if not isinstance(self.embedding, Embedding):
            raise InvalidParameterError("embedding", type(self.embedding).__name__, "a deniable.Embedding")
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        lam = self.lam
        if isinstance(lam, bool) or not isinstance(lam, int | float | np.integer | np.floating) or not 0 <= lam <= 1:
            raise InvalidParameterError("lam", lam if isinstance(lam, int | float) else "<value>", "a number in [0, 1]")
        object.__setattr__(self, "lam", float(lam))
        object.__setattr__(self, "batch_size", check_int("batch_size", self.batch_size, minimum=1))
        _ = self.embedding.vectors
        if isinstance(self.index, str):
            check_choice("index", self.index, INDEXES)
        elif not isinstance(self.index, Index):
            raise InvalidParameterError("index", type(self.index).__name__, "'exact', 'flat', 'hnsw' or an Index")
        opts = {} if self.index_options is None else self.index_options
        if not isinstance(opts, dict):
            raise InvalidParameterError("index_options", type(opts).__name__, "a dict of index keyword arguments")
        object.__setattr__(self, "index_options", dict(opts))
        ready = make_index(self.embedding, self.index) if isinstance(self.index, Index) else None
        object.__setattr__(self, "_index", ready)
        object.__setattr__(self, "_shape", None)
        object.__setattr__(self, "_lock", threading.Lock())

    # -- lazily built, input-independent artefacts ------------------------------------------------
    @property
    def search_index(self) -> Index:
        """The nearest-neighbour index used for decoding (built on first use, thread-safe)."""
        found: Index | None = self._index  # type: ignore[attr-defined]
        if found is None:
            with self._lock:  # type: ignore[attr-defined]
                found = self._index  # type: ignore[attr-defined]
                if found is None:
                    found = make_index(self.embedding, self.index, **self.index_options)
                    object.__setattr__(self, "_index", found)
        return found

    @property
    def shape(self) -> _Shape:
        """``Sigma_lambda^{1/2}`` and ``Sigma_lambda^{-1/2}`` (symmetric, from one eigendecomposition)."""
        found: _Shape | None = self._shape  # type: ignore[attr-defined]
        if found is None:
            with self._lock:  # type: ignore[attr-defined]
                found = self._shape  # type: ignore[attr-defined]
                if found is None:
                    sigma = regularized_covariance(self.embedding.vectors, self.lam)
                    vals, vecs = np.linalg.eigh(sigma)
                    vals = np.maximum(vals, 1e-12)
                    found = _Shape(
                        sqrt=(vecs * np.sqrt(vals)) @ vecs.T,
                        inv_sqrt=(vecs / np.sqrt(vals)) @ vecs.T,
                    )
                    object.__setattr__(self, "_shape", found)
        return found

    # -- the mechanism ---------------------------------------------------------------------------
    def noise(self, count: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
        """``count`` draws of ``r * Sigma_lambda^{1/2} u`` (density ∝ exp(-epsilon ||Sigma_lambda^{-1/2} z||))."""
        z = sample_laplace_noise(count, self.embedding.dim, self.epsilon, rng)
        return np.asarray(z @ self.shape.sqrt.T, dtype=np.float64)

    def noisy_vectors(self, ids: npt.ArrayLike, rng: np.random.Generator) -> np.ndarray:
        """``phi(w) + z`` for each id (float32), before decoding."""
        flat = self.embedding.check_ids(ids).ravel()
        z = self.noise(flat.size, rng)
        z += self.embedding.vectors[flat]
        return z.astype(np.float32)

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        out = np.empty(ids.size, dtype=np.int64)
        for s in range(0, ids.size, self.batch_size):
            block = ids[s : s + self.batch_size]
            _, nn = self.search_index.search(self.noisy_vectors(block, rng), 1)
            out[s : s + block.size] = nn[:, 0]
        return out

    def distance(self, w: int, w2: int) -> float:
        """``||Sigma_lambda^{-1/2} (phi(w) - phi(w2))||_2``."""
        vec = self.embedding.vectors
        diff = np.asarray(vec[w], dtype=np.float64) - np.asarray(vec[w2], dtype=np.float64)
        return float(np.linalg.norm(self.shape.inv_sqrt @ diff))

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d["lambda"] = float(self.lam)
        d["index"] = self.index if isinstance(self.index, str) else type(self.index).__name__
        return d
