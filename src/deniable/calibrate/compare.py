"""Comparing mechanisms that use different metrics: the privacy ratio (seed 001, SPEC section 4).

A mechanism M with parameter eps guarantees ``L(y) <= eps * d(w, w')`` for every pair.
Its *privacy-loss bound* over the vocabulary is summarised by ``eps * P_d``, where ``P_d``
aggregates the pairwise distances (here: their mean over uniformly random pairs of
distinct words, estimated from a large sample, with a standard error). Two mechanisms
A and B get the same bound when

    eps_B = R * eps_A,   R = P_dA / P_dB.

Example (measured, 200,000 pairs): multivariate Laplace on GloVe 6B 50-d (Euclidean,
``P_d = 6.018``) and BRR with 256-bit autoencoder codes (Hamming, ``P_d = 127.8``):
``R = 0.0471``, so madlib at eps = 10 has the bound of BRR at eps = 0.47 per bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._validation import check_epsilon, check_int
from ..embedding import Embedding
from ..metrics import METRICS, paired_distances
from ._common import statistics_generator

if TYPE_CHECKING:
    from .._random import RandomState
    from ..mechanisms.base import Mechanism

__all__ = ["MeanDistance", "PrivacyRatio", "mean_pairwise_distance", "pair_distances", "privacy_ratio"]

_FLOAT_METRICS = tuple(m for m in METRICS if m != "hamming")


@dataclass(frozen=True)
class MeanDistance:
    """``P_d``: the mean distance over ``pairs`` random pairs of distinct words, and its standard error."""

    metric: str
    mean: float
    std_error: float
    pairs: int


@dataclass(frozen=True)
class PrivacyRatio:
    """``R = P_dA / P_dB`` with its standard error, and the conversion of epsilons.

    ``epsilon_b(eps_a)`` is the epsilon that gives mechanism B the privacy-loss bound
    ``eps_a * P_dA`` of mechanism A; ``epsilon_a`` is the inverse.
    """

    a: MeanDistance
    b: MeanDistance
    ratio: float
    std_error: float
    paired: bool

    def epsilon_b(self, epsilon_a: float) -> float:
        """``R * eps_a``."""
        return self.ratio * check_epsilon(epsilon_a, "epsilon_a")

    def epsilon_a(self, epsilon_b: float) -> float:
        """``eps_b / R``."""
        return check_epsilon(epsilon_b, "epsilon_b") / self.ratio

    def convert(self, epsilon_a: float) -> float:
        """Alias of :meth:`epsilon_b`."""
        return self.epsilon_b(epsilon_a)

    def interval(self, z: float = 1.96) -> tuple[float, float]:
        """Normal-approximation interval ``R +- z * se`` (delta method)."""
        return self.ratio - z * self.std_error, self.ratio + z * self.std_error

    def __str__(self) -> str:
        return (
            f"P_d({self.a.metric}) = {self.a.mean:.6g} +- {self.a.std_error:.2g}, "
            f"P_d({self.b.metric}) = {self.b.mean:.6g} +- {self.b.std_error:.2g}; "
            f"R = {self.ratio:.6g} +- {self.std_error:.2g} ({self.a.pairs:,} pairs)"
        )


def pair_distances(mechanism: Mechanism, a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """``mechanism.distance(a[i], b[i])`` for every i, vectorized where possible.

    Uses the mechanism's own ``pair_distances`` when it has one; otherwise the metric on
    the embedding's vectors, checked against ``mechanism.distance`` on a few pairs (so a
    mechanism whose distance is not that metric falls back to calling ``distance``).
    """
    ia = np.asarray(a, dtype=np.int64).ravel()
    ib = np.asarray(b, dtype=np.int64).ravel()
    own = getattr(mechanism, "pair_distances", None)
    if callable(own):
        return np.asarray(own(ia, ib), dtype=np.float64)
    metric = getattr(mechanism, "metric", None)
    if metric in _FLOAT_METRICS and isinstance(mechanism.embedding, Embedding):
        vec = mechanism.embedding.vectors
        out = np.empty(ia.size, dtype=np.float64)
        for s in range(0, ia.size, 65536):
            out[s : s + 65536] = paired_distances(vec[ia[s : s + 65536]], vec[ib[s : s + 65536]], str(metric))
        probe = slice(0, min(16, ia.size))
        ref = np.array([mechanism.distance(int(x), int(y)) for x, y in zip(ia[probe], ib[probe], strict=True)])
        if np.allclose(ref, out[probe], rtol=1e-5, atol=1e-6):
            return out
    return np.array([mechanism.distance(int(x), int(y)) for x, y in zip(ia, ib, strict=True)], dtype=np.float64)


def _random_pairs(size: int, pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Uniform random ordered pairs of distinct ids in [0, size)."""
    i = rng.integers(0, size, pairs)
    j = rng.integers(0, size - 1, pairs)
    j = j + (j >= i)  # uniform over the size - 1 other words
    return i, j


def mean_pairwise_distance(
    mechanism: Mechanism, pairs: int = 100000, random_state: RandomState = None, *, rng: RandomState = None
) -> tuple[MeanDistance, npt.NDArray[np.float64]]:
    """``P_d`` of one mechanism's metric (and the sampled distances); ``random_state`` as in :func:`privacy_ratio`."""
    pairs = check_int("pairs", pairs, minimum=2)
    gen = statistics_generator(random_state, rng)
    size = mechanism.embedding.size
    if size < 2:
        raise InvalidParameterError("mechanism", f"vocabulary of {size} word", "a vocabulary of at least 2 words")
    i, j = _random_pairs(size, pairs, gen)
    d = pair_distances(mechanism, i, j)
    return _summary(str(mechanism.metric), d), d


def _summary(metric: str, d: np.ndarray) -> MeanDistance:
    return MeanDistance(metric, float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size)), int(d.size))


def privacy_ratio(
    mech_a: Mechanism,
    mech_b: Mechanism,
    pairs: int = 100000,
    random_state: RandomState = None,
    *,
    rng: RandomState = None,
) -> PrivacyRatio:
    """Estimate ``R = P_dA / P_dB`` so that ``eps_B = R * eps_A`` gives both mechanisms the same bound.

    Parameters
    ----------
    mech_a, mech_b
        Any two mechanisms (their metrics may differ: Euclidean vs Hamming, ...).
    pairs
        Number of random pairs of distinct words (default 100,000). When both mechanisms
        have the same vocabulary the *same* pairs are used for both (a paired estimate,
        lower variance); otherwise each vocabulary is sampled on its own.
    random_state
        None (fresh OS randomness), an int seed (reproducible, no NotPrivateWarning:
        nothing private is released) or a Generator. ``rng`` is its old name.

    Returns
    -------
    PrivacyRatio
        ``P_dA``, ``P_dB`` (means with standard errors), ``R`` and its delta-method
        standard error; ``.epsilon_b(eps_a)`` converts.
    """
    pairs = check_int("pairs", pairs, minimum=2)
    gen = statistics_generator(random_state, rng)
    emb_a, emb_b = mech_a.embedding, mech_b.embedding
    same_vocab = emb_a is emb_b or (emb_a.size == emb_b.size and emb_a._words == emb_b._words)
    for name, mech in (("mech_a", mech_a), ("mech_b", mech_b)):
        if mech.embedding.size < 2:
            raise InvalidParameterError(name, f"vocabulary of {mech.embedding.size} word", "at least 2 words")
    if same_vocab:
        i, j = _random_pairs(emb_a.size, pairs, gen)
        da, db = pair_distances(mech_a, i, j), pair_distances(mech_b, i, j)
        cov = float(np.cov(da, db)[0, 1]) / pairs
    else:
        _, da = mean_pairwise_distance(mech_a, pairs, gen)
        _, db = mean_pairwise_distance(mech_b, pairs, gen)
        cov = 0.0
    a, b = _summary(str(mech_a.metric), da), _summary(str(mech_b.metric), db)
    if not b.mean > 0:
        raise InvalidParameterError("mech_b", "mean pairwise distance 0", "a metric with distinct words apart")
    r = a.mean / b.mean
    var = (a.std_error**2) / b.mean**2 + (a.mean**2) * (b.std_error**2) / b.mean**4 - 2 * a.mean * cov / b.mean**3
    return PrivacyRatio(a, b, r, math.sqrt(max(var, 0.0)), same_vocab)
