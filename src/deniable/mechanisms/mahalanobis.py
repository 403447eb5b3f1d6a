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

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt

from .._validation import check_probability
from ._options import Option
from .laplace import MultivariateLaplace, sample_laplace_noise

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
class Mahalanobis(MultivariateLaplace):
    """Elliptical multivariate Laplace noise from the embedding's regularized covariance, nearest word.

    ``Pr[M(w)=y] <= exp(epsilon * ||Sigma_lambda^{-1/2}(phi(w) - phi(w'))||) Pr[M(w')=y]``.

    Parameters
    ----------
    embedding, epsilon, index, batch_size, index_options, prior
        As for ``madlib`` (:class:`~deniable.mechanisms.laplace.MultivariateLaplace`, whose
        decode this reuses; only the noise law and the metric differ). ``prior="uniform"``
        keeps the Euclidean nearest-neighbour decode; a non-uniform prior decodes to the exact
        posterior mode of this noise law, in its own norm:
        ``argmax_y log prior(y) - epsilon ||Sigma_lambda^{-1/2} (v - phi(y))||``.
    lam
        lambda in [0, 1]: 0 is Madlib (spherical noise), 1 the full (normalised) covariance.

    The covariance (one pass over the vectors) and its square roots are computed on first use,
    once, under a lock.
    """

    name: ClassVar[str] = "mahalanobis"
    metric: ClassVar[str] = "mahalanobis"  # type: ignore[misc]

    lam: float = 0.2

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
        *MultivariateLaplace.options,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "lam", check_probability("lam", self.lam, open_interval=False))

    @property
    def shape(self) -> _Shape:
        """``Sigma_lambda^{1/2}`` and ``Sigma_lambda^{-1/2}`` (symmetric, from one eigendecomposition)."""
        return self._artefact("_shape", self._build_shape)

    def _build_shape(self) -> _Shape:
        sigma = regularized_covariance(self.embedding.vectors, self.lam)
        vals, vecs = np.linalg.eigh(sigma)
        vals = np.maximum(vals, 1e-12)
        return _Shape(sqrt=(vecs * np.sqrt(vals)) @ vecs.T, inv_sqrt=(vecs / np.sqrt(vals)) @ vecs.T)

    def _decode_transform(self) -> npt.NDArray[np.float64] | None:
        """``Sigma_lambda^{-1/2}``: a non-uniform prior's decode uses the noise law's own norm."""
        return self.shape.inv_sqrt

    def _tuning_key(self) -> str:
        return f"{super()._tuning_key()} lambda={self.lam!r}"

    def noise(self, count: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
        """``count`` draws of ``r * Sigma_lambda^{1/2} u`` (density ∝ exp(-epsilon ||Sigma_lambda^{-1/2} z||))."""
        z = sample_laplace_noise(count, self.embedding.dim, self.epsilon, rng)
        return np.asarray(z @ self.shape.sqrt.T, dtype=np.float64)

    def distance(self, w: int, w2: int) -> float:
        """``||Sigma_lambda^{-1/2} (phi(w) - phi(w2))||_2``."""
        vec = self.embedding.vectors
        diff = np.asarray(vec[w], dtype=np.float64) - np.asarray(vec[w2], dtype=np.float64)
        return float(np.linalg.norm(self.shape.inv_sqrt @ diff))

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d["lambda"] = float(self.lam)
        return d
