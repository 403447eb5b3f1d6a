"""The Vickrey mechanism (Xu, Aggarwal, Feyisetan, Teissier, PrivateNLP 2021), docs/mechanisms/vickrey.md.

Perturb ``phi(w)`` as Madlib (``lam=None``) or the Mahalanobis mechanism (``lam`` in [0, 1]),
find the first and second nearest words w1, w2 of the noisy vector (Euclidean distances
d1 <= d2, ordered), and output w2 with probability

    p(t) = t * d1 / (t * d1 + (1 - t) * d2)            (w1 otherwise)

t = 0 is the plain nearest-neighbour decode; t = 1 always returns the second neighbour.
The choice depends only on the noisy vector, the public embedding and fresh randomness: it is
post-processing, so the guarantee is the noise mechanism's (``epsilon * d_euclidean`` for
Madlib noise, ``epsilon * d_M`` for Mahalanobis noise).

With a public ``prior`` (not ``"uniform"``): the mixing draws fresh randomness after the noisy
vector, so it does not change what the noisy vector says about the input: the posterior of the
input word is the noise mechanism's, ``log prior(y) - epsilon ||v - phi(y)||_noise`` (the
Mahalanobis norm under ``lam``). Its mode is w1; Vickrey's rule then mixes in the runner-up w2.
The prior decode applies the same rule to the two most probable words, with the distances
replaced by the prior-penalised distances ``s(y) = ||v - phi(y)||_noise + (max log prior -
log prior(y)) / epsilon`` (``-log posterior / epsilon`` up to a constant chosen so that
``s >= 0``; under a uniform prior exactly the distance, the rule above).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._validation import check_probability
from ..embedding import Embedding
from ..index import Index
from ..priors import Prior
from ._options import Option
from ._posterior import check_prior, second_neighbour_probability, vickrey_choice
from .base import Mechanism
from .laplace import MultivariateLaplace
from .mahalanobis import Mahalanobis

__all__ = ["Vickrey", "second_neighbour_probability", "vickrey_decode"]


def vickrey_decode(
    noisy: np.ndarray, index: Index, t: float, rng: np.random.Generator | npt.NDArray[np.float64]
) -> npt.NDArray[np.int64]:
    """The Vickrey choice between the two nearest words of each noisy vector.

    The index returns neighbours nearest first (its contract), so ``[:, 0]`` is w1 and ``[:, 1]`` w2;
    a vocabulary of one word always returns it. ``rng``: a generator, or one uniform [0, 1) draw per
    noisy vector already drawn (keyed records draw theirs from their own streams).
    """
    if index.ntotal < 2:
        return np.zeros(noisy.shape[0], dtype=np.int64)
    sq, nn = index.search(noisy, 2)
    d = np.sqrt(np.maximum(sq.astype(np.float64), 0.0))
    p2 = second_neighbour_probability(d[:, 0], d[:, 1], t)
    u = rng.random(noisy.shape[0]) if isinstance(rng, np.random.Generator) else np.asarray(rng, dtype=np.float64)
    second = u < p2
    return np.where(second, nn[:, 1], nn[:, 0]).astype(np.int64)


@dataclass(frozen=True, eq=False)
class Vickrey(Mechanism):
    """Madlib or Mahalanobis noise, then the Vickrey choice between the two nearest words.

    Parameters
    ----------
    embedding, epsilon
        As for ``madlib``.
    t
        The paper's tuning parameter in [0, 1] (probability weight of the second neighbour).
    lam
        ``None``: Madlib noise (guarantee in Euclidean distance); a number in [0, 1]: Mahalanobis
        noise with that lambda (guarantee in the Mahalanobis metric).
    index, batch_size, index_options
        Nearest-neighbour decode, as for ``madlib``.
    """

    name: ClassVar[str] = "vickrey"

    embedding: Embedding
    epsilon: float
    t: float = 0.5
    lam: float | None = None
    index: str | Index = "auto"
    batch_size: int = 8192
    index_options: dict[str, Any] = field(default_factory=dict, repr=False)
    prior: str | Prior = "uniform"

    options: ClassVar[tuple[Option, ...]] = (
        Option(
            "t", float, 0.5, low=0.0, high=1.0, client=True, flag="--vickrey-t", help="weight of the second neighbour"
        ),
        # Mahalanobis's lambda, unset by default
        dataclasses.replace(
            next(o for o in Mahalanobis.options if o.name == "lam"),
            default=None,
            help="unset: madlib noise; a number in [0, 1]: mahalanobis noise with that lambda",
        ),
        *MultivariateLaplace.options,  # the decode: index, batch_size, index_options, prior
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "t", check_probability("t", self.t, open_interval=False))
        check_prior(self.prior)  # a contextual ngram:PATH prior is madlib's and mahalanobis's only: refused here
        noise: MultivariateLaplace | Mahalanobis
        common: dict[str, Any] = {
            "index": self.index,
            "batch_size": self.batch_size,
            "index_options": self.index_options,
            "prior": self.prior,
        }
        if self.lam is None:
            noise = MultivariateLaplace(self.embedding, self.epsilon, **common)
        else:
            noise = Mahalanobis(self.embedding, self.epsilon, lam=self.lam, **common)
            object.__setattr__(self, "lam", noise.lam)
        # the noise mechanism validated the shared parameters: keep its normalised values
        object.__setattr__(self, "epsilon", noise.epsilon)
        object.__setattr__(self, "batch_size", noise.batch_size)
        object.__setattr__(self, "index_options", noise.index_options)
        object.__setattr__(self, "prior", noise.prior)
        object.__setattr__(self, "_noise", noise)

    @property
    def noise_mechanism(self) -> MultivariateLaplace | Mahalanobis:
        """The mechanism whose noisy vector is decoded (its guarantee is this one's)."""
        return self._noise  # type: ignore[attr-defined]

    @property
    def metric(self) -> str:  # type: ignore[override]
        return self.noise_mechanism.metric

    def decode(self, noisy: npt.ArrayLike, rng: np.random.Generator | npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """The Vickrey choice for each noisy vector (``rng``: a generator or one uniform per row).

        Reads only the noisy vectors, public data (the embedding, the prior) and fresh randomness.
        """
        noise = self.noise_mechanism
        if noise.uniform_prior:
            return vickrey_decode(np.asarray(noisy, dtype=np.float32), noise.search_index, self.t, rng)
        scores, ids = noise.posterior.top(noisy, 2)
        n = ids.shape[0]
        u = np.asarray(rng.random(n) if isinstance(rng, np.random.Generator) else rng, dtype=np.float64)
        return vickrey_choice(scores, ids, self.t, u)

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        noise = self.noise_mechanism
        out = np.empty(ids.size, dtype=np.int64)
        for s in range(0, ids.size, self.batch_size):
            block = ids[s : s + self.batch_size]
            out[s : s + block.size] = self.decode(noise.noisy_vectors(block, rng), rng)
        return out

    def _privatize_records(
        self, records: list[npt.NDArray[np.int64]], generators: list[np.random.Generator]
    ) -> list[npt.NDArray[np.int64]]:
        """Each record's noisy vectors and choice draws from its own stream; one decode for them all."""
        noise = self.noise_mechanism
        noisy = [noise.noisy_vectors(r, g) for r, g in zip(records, generators, strict=True)]
        uniforms = [g.random(r.size) for r, g in zip(records, generators, strict=True)]
        sizes = np.cumsum([r.size for r in records])[:-1]
        out = np.empty(int(sum(r.size for r in records)), dtype=np.int64)
        allnoisy, allu = np.concatenate(noisy), np.concatenate(uniforms)
        for s in range(0, out.size, self.batch_size):
            e = s + self.batch_size
            out[s:e] = self.decode(allnoisy[s:e], allu[s:e])
        return list(np.split(out, sizes))

    def distance(self, w: int, w2: int) -> float:
        return self.noise_mechanism.distance(w, w2)

    def describe(self) -> dict[str, object]:
        d = self.noise_mechanism.describe()
        d.update(mechanism=self.name, t=float(self.t), noise=self.noise_mechanism.name)
        return d
