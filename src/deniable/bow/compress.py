"""Compression before noise: horizontal bin maps (features -> bins) and vertical grouping.

Both are *summing* maps, and a summing map never increases l1 distance:

    ||C(y) - C(y')||_1 = sum_b |sum_{i in b} (y_i - y'_i)| <= sum_i |y_i - y'_i| = ||y - y'||_1

so noise calibrated to ``(N, eps)`` on the compressed vector protects every pair of
*original* vectors within l1 distance ``N`` (and dropping a feature, ``bin = -1``, is a
summing map too). Vertical grouping sums the rows of ``g`` documents: changing one
document by ``N`` changes its group's row by at most ``N``.

A bin map must not depend on the private documents, otherwise it leaks them and
the release is private only *conditionally on the map*:

- :func:`random_bin_map` depends only on a seed (saved with the release);
- :func:`frequency_bin_map` depends on a frequency prior — by default the public one
  carried by the :class:`~deniable.bow.vectorize.Vocabulary` (GloVe corpus rank), or
  counts from a separate public corpus; counts from the private data are allowed only
  with ``source="private data"`` recorded in the release;
- :func:`semantic_bin_map` depends on the (public) embedding vectors of the words.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from .._errors import DataError, InvalidParameterError
from .._validation import check_int

if TYPE_CHECKING:
    from ..embedding import Embedding
    from .vectorize import Vocabulary

__all__ = [
    "STRATEGIES",
    "BinMap",
    "frequency_bin_map",
    "group_rows",
    "identity_bin_map",
    "make_bin_map",
    "random_bin_map",
    "semantic_bin_map",
]

STRATEGIES = ("none", "random", "frequency", "semantic")


@dataclass(frozen=True, eq=False)
class BinMap:
    """A horizontal compression: feature ``i`` goes to bin ``bins[i]`` (``-1``: dropped).

    Attributes
    ----------
    bins
        int64 array of length ``n_features`` with values in ``[-1, n_bins)``.
    n_bins
        Number of output columns ``k``.
    strategy
        ``none``, ``random``, ``frequency``, ``semantic`` or ``user``.
    info
        What the map was computed from (seed, frequency source, embedding), saved with
        a release so analysts can interpret and reproduce it.
    """

    bins: npt.NDArray[np.int64]
    n_bins: int
    strategy: str = "user"
    info: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        b = np.asarray(self.bins)
        if b.ndim != 1 or b.size == 0 or b.dtype.kind not in "iu":
            raise InvalidParameterError("bins", f"array of shape {b.shape}", "a non-empty 1-d integer array")
        k = check_int("n_bins", self.n_bins, minimum=1)
        b = b.astype(np.int64)
        if b.min() < -1 or b.max() >= k:
            raise InvalidParameterError("bins", int(b.min() if b.min() < -1 else b.max()), f"values in [-1, {k - 1}]")
        b.setflags(write=False)
        object.__setattr__(self, "bins", b)
        object.__setattr__(self, "n_bins", k)

    @property
    def n_features(self) -> int:
        """Number of input columns ``m``."""
        return int(self.bins.size)

    def matrix(self) -> sp.csr_matrix:
        """The ``(m, k)`` 0/1 summing matrix ``M``; compression is ``X @ M``."""
        keep = np.flatnonzero(self.bins >= 0)
        return sp.csr_matrix(
            (np.ones(keep.size, dtype=np.int32), (keep, self.bins[keep])),
            shape=(self.n_features, self.n_bins),
            dtype=np.int32,
        )

    def apply(self, counts: sp.spmatrix | npt.ArrayLike) -> sp.csr_matrix:
        """Sum the counts of each bin: ``(n, m)`` -> sparse ``(n, k)`` (same integer values)."""
        x = sp.csr_matrix(counts)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise InvalidParameterError(
                "counts", f"shape {x.shape}", f"{self.n_features} columns (the bin map's features)"
            )
        out = sp.csr_matrix(x @ self.matrix())
        out.sort_indices()
        return out

    def bin_sizes(self) -> npt.NDArray[np.int64]:
        """Number of features in each bin."""
        keep = self.bins[self.bins >= 0]
        return np.bincount(keep, minlength=self.n_bins).astype(np.int64)

    def bin_mass(self, weights: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Total weight (e.g. frequency) of each bin."""
        w = np.asarray(weights, dtype=np.float64)
        keep = self.bins >= 0
        return np.bincount(self.bins[keep], weights=w[keep], minlength=self.n_bins).astype(np.float64)

    def expand(self, bin_values: npt.ArrayLike, weights: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Spread per-bin values back over features in proportion to ``weights`` within each bin.

        ``bin_values`` has shape ``(..., k)``; the result has shape ``(..., m)`` and the
        same totals per bin (dropped features get 0). With a public frequency prior as
        ``weights`` this reads a topic over bins as a topic over words.
        """
        v = np.asarray(bin_values, dtype=np.float64)
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (self.n_features,):
            raise InvalidParameterError("weights", f"shape {w.shape}", f"shape ({self.n_features},)")
        mass = self.bin_mass(w)
        keep = self.bins >= 0
        share = np.zeros(self.n_features)
        denom = mass[self.bins[keep]]
        share[keep] = np.divide(w[keep], denom, out=np.zeros(keep.sum()), where=denom > 0)
        out = np.zeros((*v.shape[:-1], self.n_features))
        out[..., keep] = v[..., self.bins[keep]] * share[keep]
        return out


def identity_bin_map(n_features: int) -> BinMap:
    """No compression: feature ``i`` is bin ``i``."""
    m = check_int("n_features", n_features, minimum=1)
    return BinMap(np.arange(m, dtype=np.int64), m, "none", {})


def _check_k(n_bins: int, n_features: int) -> int:
    k = check_int("n_bins", n_bins, minimum=1)
    if k > n_features:
        raise InvalidParameterError("n_bins", k, f"at most the number of features ({n_features})")
    return k


def random_bin_map(n_features: int, n_bins: int, seed: int) -> BinMap:
    """Random combination: a seeded random permutation dealt round-robin into ``k`` bins.

    Every bin gets ``m // k`` or ``m // k + 1`` features. The map depends only on
    ``seed`` (not secret, saved with the release: it is not the noise generator).
    """
    m = check_int("n_features", n_features, minimum=1)
    k = _check_k(n_bins, m)
    s = check_int("seed", seed, minimum=0)
    perm = np.random.default_rng(s).permutation(m)
    bins = np.empty(m, dtype=np.int64)
    bins[perm] = np.arange(m, dtype=np.int64) % k
    return BinMap(bins, k, "random", {"seed": s})


def frequency_bin_map(frequencies: npt.ArrayLike, n_bins: int, *, source: str = "public prior") -> BinMap:
    """Frequency-balanced combination: spread high-frequency features so bins carry similar mass.

    Greedy longest-processing-time scheduling: features in decreasing frequency, each
    into the bin with the smallest mass so far (ties: the lowest bin). The ``k`` most
    frequent features therefore land in ``k`` different bins, and the heaviest bin's
    mass is at most ``4/3`` of the optimum. Deterministic given ``frequencies``.
    ``source`` says where the frequencies come from (``"private data"`` means the map
    leaks and the release is private only conditionally on it).
    """
    f = np.asarray(frequencies, dtype=np.float64).ravel()
    if f.size == 0 or not np.all(np.isfinite(f)) or np.any(f < 0):
        raise InvalidParameterError("frequencies", f"array of shape {f.shape}", "finite non-negative numbers")
    m = int(f.size)
    k = _check_k(n_bins, m)
    order = np.argsort(-f, kind="stable")
    bins = np.empty(m, dtype=np.int64)
    bins[order[:k]] = np.arange(k)
    heap = [(float(f[order[j]]), j) for j in range(k)]
    heapq.heapify(heap)
    fo = f[order].tolist()
    rest = order[k:].tolist()
    for pos, feat in enumerate(rest):  # one heap operation per feature (m log k), not per token
        mass, b = heap[0]
        bins[feat] = b
        heapq.heapreplace(heap, (mass + fo[k + pos], b))
    return BinMap(bins, k, "frequency", {"frequency_source": source})


def semantic_bin_map(
    vocabulary: Vocabulary,
    n_bins: int,
    embedding: Embedding | None = None,
    *,
    seed: int = 0,
    n_iter: int = 20,
) -> BinMap:
    """Semantic combination: k-means (faiss) on the embedding vectors of the vocabulary words.

    Words missing from the embedding go to seeded random bins. Vectors are
    L2-normalised first (cosine geometry). Depends only on the public embedding,
    the vocabulary and ``seed``.
    """
    import faiss

    from ..embedding import load_embedding

    m = vocabulary.size
    k = _check_k(n_bins, m)
    s = check_int("seed", seed, minimum=0)
    check_int("n_iter", n_iter, minimum=1)
    emb = load_embedding() if embedding is None else embedding
    ids = emb.ids(vocabulary.words)
    found = ids >= 0
    if found.sum() < k:
        raise DataError(f"only {int(found.sum())} vocabulary words are in the embedding; need at least n_bins={k}")
    vecs = np.ascontiguousarray(emb.vectors[ids[found]], dtype=np.float32)
    norms = np.linalg.norm(vecs, axis=1, keepdims=True)
    vecs /= np.where(norms > 0, norms, 1.0)
    km = faiss.Kmeans(
        vecs.shape[1],
        k,
        niter=n_iter,
        seed=s,
        verbose=False,
        spherical=True,
        max_points_per_centroid=256,
        min_points_per_centroid=1,  # only silences faiss's "provide at least 39 points per centroid" warning
    )
    km.train(vecs)
    _, assign = km.index.search(vecs, 1)
    bins = np.empty(m, dtype=np.int64)
    bins[found] = assign[:, 0].astype(np.int64)
    n_missing = int((~found).sum())
    if n_missing:
        bins[~found] = np.random.default_rng(s).integers(0, k, size=n_missing)
    return BinMap(
        bins, k, "semantic", {"seed": s, "embedding": emb.name, "n_iter": n_iter, "words_not_in_embedding": n_missing}
    )


def make_bin_map(
    strategy: str,
    vocabulary: Vocabulary,
    n_bins: int | None,
    *,
    seed: int = 0,
    frequencies: npt.ArrayLike | None = None,
    frequency_source: str | None = None,
    embedding: Embedding | None = None,
) -> BinMap:
    """Build a bin map by name (``none``, ``random``, ``frequency``, ``semantic``).

    ``frequency`` uses ``frequencies`` when given (say where they come from in
    ``frequency_source``), else the vocabulary's public prior.
    """
    if strategy not in STRATEGIES:
        raise InvalidParameterError("strategy", strategy, "one of " + ", ".join(STRATEGIES))
    if strategy == "none":
        return identity_bin_map(vocabulary.size)
    if n_bins is None:
        raise InvalidParameterError("n_bins", None, f"an integer >= 1 for strategy {strategy!r}")
    if strategy == "random":
        return random_bin_map(vocabulary.size, n_bins, seed)
    if strategy == "frequency":
        if frequencies is None:
            return frequency_bin_map(vocabulary.frequencies, n_bins, source=f"vocabulary prior ({vocabulary.source})")
        return frequency_bin_map(frequencies, n_bins, source=frequency_source or "user-supplied frequencies")
    return semantic_bin_map(vocabulary, n_bins, embedding, seed=seed)


def group_rows(counts: sp.spmatrix | npt.ArrayLike, group: int) -> sp.csr_matrix:
    """Vertical compression: sum consecutive groups of ``group`` rows.

    Row ``j`` of the result is the sum of rows ``j*g .. j*g+g-1``; the last group may be
    smaller when ``n`` is not a multiple of ``g``.
    """
    g = check_int("group", group, minimum=1)
    x = sp.csr_matrix(counts)
    n = x.shape[0]
    if g == 1:
        return x
    n_groups = -(-n // g)
    summing = sp.csr_matrix((np.ones(n, dtype=x.dtype), (np.arange(n) // g, np.arange(n))), shape=(n_groups, n))
    out = sp.csr_matrix(summing @ x)
    out.sort_indices()
    return out
