"""The Truncated Gumbel mechanism (Carvalho, Vasiloudis, Feyisetan, FLAIRS 2021), docs/mechanisms/truncated_gumbel.md.

**It is not metric-DP for any epsilon** (checked exactly, see the docs page): the claimed
``epsilon * d`` guarantee does not hold. It is here because issue 17 asks for every word
mechanism of the field side by side; its ``guarantee`` is infinite and it warns when built.

The definition follows the one public implementation (MLDP ``TruncatedGumbel``, mldp-text
0.1.2). For an input word w of a vocabulary of V words:

1. ``k ~ Poisson(ln(V - 1))`` truncated to ``k <= V - 1``;
2. the k nearest words of w (Euclidean; w itself first, at distance 0);
3. i.i.d. Gumbel(0, b) noise truncated to ``|g| <= Delta_max`` added to each distance;
4. output the argmin (w itself when ``k = 0``).

``b`` comes from ``a = (epsilon - 2 (1 + ln V) / Delta_min) / 3`` and
``b = 2 Delta_max / Re W(2 a Delta_max)`` when ``a Delta_min <= 0``, else
``b = 2 Delta_max / min(Re W(2 a Delta_max), ln(a Delta_min))`` (W: Lambert W, principal branch),
with ``Delta_min, Delta_max`` the smallest positive and the largest distance between two words
of the vocabulary, computed exactly here (MLDP estimates them from one random word per run).

Why no finite epsilon: ``k <= V - 1`` and w is its own first neighbour, so the farthest word y
of w is never among the candidates: ``Pr[M(w) = y] = 0`` while ``Pr[M(y) = y] >= Pr[k = 0] > 0``.

The batched fast path draws every k at once, does one k-nearest-neighbour search (faiss flat,
exact) per distinct word of the batch with the batch's largest k, masks the columns beyond each
token's k, adds truncated Gumbel noise drawn by inverse CDF, and takes the row-wise argmin.
:meth:`TruncatedGumbel.distribution` integrates the exact output law numerically (log space).
"""

from __future__ import annotations

import itertools
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError, NotPrivateWarning
from .._validation import check_bool, check_epsilon, check_int
from ..embedding import Embedding
from ._options import Option, history_free_option
from .base import Mechanism

if TYPE_CHECKING:
    from ..index import FlatIndex

__all__ = [
    "GUARANTEE",
    "InterWordDistances",
    "TruncatedGumbel",
    "gumbel_scale",
    "inter_word_distances",
    "truncated_gumbel_noise",
    "truncated_poisson_law",
]

#: What the mechanism guarantees, in words (describe(), explain, the docs).
GUARANTEE = (
    "none: NOT metric DP for any epsilon (the farthest word of w is never output for w but is "
    "output for itself; exact check in docs/mechanisms/truncated_gumbel.md)"
)

#: ln of the truncated-Poisson tail below which larger k are dropped (1e-300: below every
#: float64 probability the mechanism can produce; MLDP's rejection sampler would draw them
#: with probability < 1e-300 per token).
LOG_TAIL = math.log(1e-300)

#: Vocabularies up to this size get their inter-word distances from one float64 pdist.
PDIST_MAX = 4096

#: Gauss-Legendre nodes per piece of the integration grid, and the longest piece in units of b.
GL_NODES, PIECE = 12, 0.5


# -- public functions of the embedding ------------------------------------------------------------
@dataclass(frozen=True)
class InterWordDistances:
    """The smallest positive and the largest Euclidean distance between two words (float64)."""

    min: float
    max: float


def inter_word_distances(vectors: npt.ArrayLike, *, pdist_max: int = PDIST_MAX) -> InterWordDistances:
    """Exact ``(min positive, max)`` Euclidean distance over pairs of distinct words.

    Up to ``pdist_max`` words: every pair in float64 (``scipy.spatial.distance.pdist``).
    Larger vocabularies: the minimum from a k-d tree over a 6-d PCA projection (projections
    never lengthen distances, so every pair closer than a measured upper bound is among the
    projected pairs within it; those are measured in float64), the maximum by rows in
    decreasing distance to the mean, stopped when ``|x_i - c| + max_j |x_j - c|`` (an upper
    bound on row i's farthest distance) cannot beat the best found (rows measured in float32
    blocks, the best candidates re-measured in float64).
    Pairs at distance 0 (duplicate vectors) are skipped for the minimum, as in MLDP.
    """
    x = np.asarray(vectors, dtype=np.float64)
    n = x.shape[0]
    if n < 2:
        raise InvalidParameterError("embedding", f"{n} word(s)", "at least two words")
    if n <= pdist_max:
        from scipy.spatial.distance import pdist

        d = pdist(x)
        pos = d[d > 0]
        if pos.size == 0:
            raise InvalidParameterError("embedding", "all vectors equal", "at least two distinct vectors")
        return InterWordDistances(float(pos.min()), float(d.max()))
    low = _min_distance_kdtree(x)
    return InterWordDistances(low, _max_distance_pruned(x))


def _min_distance_kdtree(x: npt.NDArray[np.float64], dims: int = 6) -> float:
    """Smallest positive distance: pairs within an upper bound in a 6-d PCA projection, then float64.

    The projection onto orthonormal directions never lengthens a distance, so every pair closer
    than the bound ``ub`` (the best projected nearest neighbour, measured in full) is among the
    pairs within ``ub`` in the projection (``cKDTree.query_pairs``): the result is exact.
    """
    from scipy.spatial import cKDTree

    c = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(c[:: max(1, x.shape[0] // 20000)], full_matrices=False)
    proj = c @ vt[: min(dims, vt.shape[0])].T
    tree = cKDTree(proj)
    ub = math.inf
    for k in (2, 4, 8, 16):
        _, nn = tree.query(proj, k=min(k, x.shape[0]))
        diff = x[nn[:, 1:]] - x[:, None, :]
        d = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
        if np.any(d > 0):
            ub = float(d[d > 0].min())
            break
    if not math.isfinite(ub):
        raise InvalidParameterError("embedding", "all vectors equal", "at least two distinct vectors")
    pairs = tree.query_pairs(ub * (1 + 1e-9), output_type="ndarray")
    if len(pairs):
        diff = x[pairs[:, 0]] - x[pairs[:, 1]]
        d = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        d = d[d > 0]
        if d.size:
            ub = min(ub, float(d.min()))
    return ub


def _max_distance_pruned(x: npt.NDArray[np.float64], block: int = 1024, refine: int = 4) -> float:
    c = x.mean(axis=0)
    r = np.linalg.norm(x - c, axis=1)
    big_r = float(r.max())
    order = np.argsort(-r, kind="stable")
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    sq = np.einsum("ij,ij->i", x32, x32, dtype=np.float32)
    best = 0.0
    for s in range(0, order.size, block):
        rows = order[s : s + block]
        rows = rows[r[rows] + big_r > best * (1 - 1e-9)]
        if rows.size == 0:
            break
        p = x32[rows] @ x32.T
        p *= np.float32(-2.0)
        p += sq[None, :]
        p += sq[rows][:, None]
        top = min(refine, x.shape[0])
        cand = np.argpartition(-p, top - 1, axis=1)[:, :top]
        diff = x[cand] - x[rows][:, None, :]
        best = max(best, float(np.sqrt(np.einsum("ijk,ijk->ij", diff, diff)).max()))
    return best


def gumbel_scale(epsilon: float, vocab_size: int, dist: InterWordDistances) -> float:
    """The reference code's noise scale ``b`` (see the module docstring); an error where it is not > 0.

    MLDP's formula gives a negative (or infinite) scale for epsilon in a window around
    ``2 (1 + ln V) / Delta_min``; numpy's Gumbel sampler then fails. Here that is an error
    naming epsilon and the window.
    """
    from scipy import special  # here, not at import: the CLI imports every mechanism class

    lo_d, hi_d = dist.min, dist.max
    a = (epsilon - 2.0 * (1.0 + math.log(vocab_size)) / lo_d) / 3.0
    w = float(special.lambertw(2.0 * a * hi_d).real)
    denom = w if a * lo_d <= 0 else min(w, math.log(a * lo_d))
    b = 2.0 * hi_d / denom if denom != 0 else math.inf
    if not (math.isfinite(b) and b > 0):
        centre = 2.0 * (1.0 + math.log(vocab_size)) / lo_d
        lo = centre - 3.0 * math.pi / (4.0 * hi_d)
        hi = centre + 3.0 / lo_d
        raise InvalidParameterError(
            "epsilon",
            epsilon,
            f"an epsilon outside ({lo:.6g}, {hi:.6g}) on this embedding: the reference formula's noise scale "
            "is not positive there",
        )
    return b


def truncated_poisson_law(vocab_size: int) -> npt.NDArray[np.float64]:
    """``log Pr[k = j]`` for ``j = 0..K``: Poisson(ln(V - 1)) truncated to ``k <= V - 1``.

    ``K`` is ``V - 1`` or, for large V, the first j beyond which the remaining mass is below
    ``1e-300`` (:data:`LOG_TAIL`); the law is renormalised over ``0..K``.
    """
    from scipy import special, stats

    v = int(vocab_size)
    mu = math.log(v - 1) if v > 2 else 0.0
    top = min(v - 1, 4096)
    j = np.arange(top + 1)
    logp = stats.poisson.logpmf(j, mu) if mu > 0 else np.where(j == 0, 0.0, -np.inf)
    logp = logp - special.logsumexp(logp)
    tail = np.logaddexp.accumulate(logp[::-1])[::-1]  # log Pr[k >= j]
    beyond = np.nonzero(tail[1:] < LOG_TAIL)[0]
    cut = int(beyond[0]) if beyond.size else top
    logp = logp[: cut + 1]
    return np.asarray(logp - special.logsumexp(logp), dtype=np.float64)


def truncated_gumbel_noise(
    rng: np.random.Generator, scale: float, bound: float, size: int | tuple[int, ...]
) -> npt.NDArray[np.float64]:
    """Gumbel(0, ``scale``) (max convention, as numpy's) truncated to ``[-bound, bound]``, by inverse CDF."""
    lo, hi = _log_cdf(-bound, scale), _log_cdf(bound, scale)  # log F(-M), log F(M)
    u = rng.random(size)
    # F^-1(F(-M) + u (F(M) - F(-M))), with F(x) = exp(-exp(-x / b))
    p = np.exp(lo) + u * (np.exp(hi) - np.exp(lo))
    with np.errstate(divide="ignore"):
        x = -scale * np.log(-np.log(p))
    return np.asarray(np.clip(x, -bound, bound), dtype=np.float64)


def _log_cdf(x: npt.ArrayLike, b: float) -> npt.NDArray[np.float64]:
    with np.errstate(over="ignore"):
        return np.asarray(-np.exp(-np.asarray(x, dtype=np.float64) / b))


# -- the mechanism ------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class TruncatedGumbel(Mechanism):
    """Truncated-Poisson many nearest neighbours, truncated Gumbel noise on their distances, argmin.

    **Not metric DP for any epsilon**: ``guarantee`` is infinite between distinct words and
    construction warns (:class:`~deniable.NotPrivateWarning`). See docs/mechanisms/truncated_gumbel.md.

    Parameters
    ----------
    embedding
        The vocabulary and vectors (at least two words).
    epsilon
        The parameter of the reference code's noise-scale formula (> 0). It is NOT the privacy
        level: no epsilon makes the mechanism ``epsilon * d``-private.
    batch_size
        Tokens per block of the batched sampler (bounds memory).
    history_free
        Time a function of the token count only (the service's mode): every token's
        neighbours are searched, with no dedup by distinct word. The default (False) searches
        once per distinct word of a block: faster on repetitive text, but a call's time then
        tells how many distinct words it had (issue 27: 6.8 vs 1,491 ms for 2,000 tokens of
        one word vs 2,000 distinct words).

    The inter-word distances, the noise scale, the k law and the faiss index are built on first
    use. An epsilon for which the reference formula gives no positive noise scale is an error
    there (it needs the inter-word distances).
    """

    name: ClassVar[str] = "truncated_gumbel"
    has_distribution: ClassVar[bool] = True
    #: Capability: whether the mechanism satisfies the ``epsilon * d`` bound it is named for.
    guarantee_form: ClassVar[str] = "not metric DP for any epsilon: the claimed epsilon * d bound does not hold"
    metric: ClassVar[str] = "euclidean"  # type: ignore[misc]

    embedding: Embedding
    epsilon: float
    batch_size: int = 65536
    history_free: bool = False

    options: ClassVar[tuple[Option, ...]] = (
        Option(
            "batch_size", int, 65536, low=1, high=1 << 24, cli=False, help="tokens per block of the batched sampler"
        ),
        history_free_option("no dedup by distinct word: time a function of the token count only"),
    )

    def __post_init__(self) -> None:
        Embedding.check(self.embedding)  # a device vocabulary: "holds binary codes only"
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon))
        object.__setattr__(self, "batch_size", check_int("batch_size", self.batch_size, minimum=1))
        check_bool("history_free", self.history_free)
        if self.embedding.size < 2:
            raise InvalidParameterError("embedding", f"{self.embedding.size} word(s)", "at least two words")
        _ = self.embedding.vectors  # a code-only artefact has none and says so here
        warnings.warn(
            "truncated_gumbel is NOT metric DP for any epsilon (its farthest-word outputs have probability 0); "
            "epsilon only sets the noise scale. See docs/mechanisms/truncated_gumbel.md",
            NotPrivateWarning,
            stacklevel=3,
        )

    # -- artefacts (public functions of the embedding) ---------------------------------------
    @property
    def inter_word(self) -> InterWordDistances:
        """Exact smallest positive and largest inter-word distances (cached on disk for large vocabularies)."""
        return self._artefact("_inter_word", self._build_inter_word)

    def _build_inter_word(self) -> InterWordDistances:
        emb = self.embedding
        if emb.size <= PDIST_MAX:
            return inter_word_distances(emb.vectors)
        path = emb.cache_path("truncated_gumbel", "inter_word_distances.json")
        if path.exists():
            found = json.loads(path.read_text())
            return InterWordDistances(float(found["min"]), float(found["max"]))
        from .._cache import atomic_path

        dist = inter_word_distances(emb.vectors)

        def write(tmp: Path) -> None:
            tmp.write_text(json.dumps({"min": dist.min, "max": dist.max}))

        atomic_path(path, write)
        return dist

    @property
    def scale(self) -> float:
        """The Gumbel noise scale ``b`` of the reference formula."""
        return self._artefact("_scale", lambda: gumbel_scale(self.epsilon, self.embedding.size, self.inter_word))

    @property
    def k_law(self) -> npt.NDArray[np.float64]:
        """``log Pr[k = j]``, j = 0..K (:func:`truncated_poisson_law`)."""
        return self._artefact("_k_law", lambda: truncated_poisson_law(self.embedding.size))

    @property
    def _index(self) -> FlatIndex:
        from ..index import FlatIndex

        return self._artefact("_flat", lambda: FlatIndex(self.embedding.vectors))

    def neighbours(self, ids: npt.NDArray[np.int64], k: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The ``k`` nearest words of each id, the word itself first, then by (float64 distance, id).

        Candidates come from one exact faiss search (float32) with a margin of 8, re-ranked by
        float64 distances, so the sampler and :meth:`distribution` share one order.
        """
        vec = self.embedding.vectors
        v = self.embedding.size
        m = min(v, k + 8)
        _, cand = self._index.search(np.asarray(vec[ids], dtype=np.float32), m)
        cand = np.where(cand == ids[:, None], -1, cand)  # the word itself goes first, once
        cand = np.concatenate([ids[:, None], cand], axis=1)
        x = np.asarray(vec[ids], dtype=np.float64)
        safe = np.maximum(cand, 0)
        diff = np.asarray(vec[safe.ravel()], dtype=np.float64).reshape(*cand.shape, -1) - x[:, None, :]
        d = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
        d[:, 0] = 0.0
        d[cand < 0] = np.inf
        key_id = np.where(cand < 0, v, cand).astype(np.float64)
        key_id[:, 0] = -1.0
        order = np.lexsort((key_id, d), axis=1)[:, :k]
        return np.take_along_axis(cand, order, axis=1), np.take_along_axis(d, order, axis=1)

    # -- the mechanism ---------------------------------------------------------------------------
    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        law = np.exp(self.k_law)
        cdf = np.cumsum(law)
        b, bound = self.scale, self.inter_word.max
        out = np.empty(ids.size, dtype=np.int64)
        for s in range(0, ids.size, self.batch_size):
            block = ids[s : s + self.batch_size]
            n = block.size
            k = np.minimum(np.searchsorted(cdf, rng.random(n) * cdf[-1], side="right"), law.size - 1)
            kmax = int(k.max())
            if kmax == 0:
                out[s : s + n] = block
                continue
            if self.history_free:  # every token searched: no dedup whose cost counts distinct words
                uniq, inv = block, np.arange(n)
            else:
                uniq, inv = np.unique(block, return_inverse=True)
            nbr, dist = self.neighbours(uniq, kmax)
            noisy = dist[inv] + truncated_gumbel_noise(rng, b, bound, (n, kmax))
            noisy[np.arange(kmax)[None, :] >= k[:, None]] = np.inf
            j = np.argmin(noisy, axis=1)
            out[s : s + n] = np.where(k > 0, nbr[inv, j], block)
        return out

    def _privatize_records(
        self, records: list[npt.NDArray[np.int64]], generators: list[np.random.Generator]
    ) -> list[npt.NDArray[np.int64]]:
        """Each record's k and Gumbel noise from its own stream; one neighbour search per group of records."""
        law = np.exp(self.k_law)
        cdf = np.cumsum(law)
        b, bound = self.scale, self.inter_word.max
        ks: list[npt.NDArray[np.int64]] = []
        noises: list[npt.NDArray[np.float64] | None] = []
        for ids, gen in zip(records, generators, strict=True):
            k = np.minimum(np.searchsorted(cdf, gen.random(ids.size) * cdf[-1], side="right"), law.size - 1)
            km = int(k.max())
            ks.append(k)
            noises.append(truncated_gumbel_noise(gen, b, bound, (ids.size, km)) if km else None)
        out: list[npt.NDArray[np.int64]] = []
        start = 0
        while start < len(records):
            stop, held = start, 0
            while stop < len(records) and (stop == start or held + records[stop].size <= self.batch_size):
                held += records[stop].size
                stop += 1
            block = np.concatenate(records[start:stop])
            k = np.concatenate(ks[start:stop])
            kmax = int(k.max())
            result = block.copy()
            if kmax:
                n = block.size
                if self.history_free:
                    uniq, inv = block, np.arange(n)
                else:
                    uniq, inv = np.unique(block, return_inverse=True)
                nbr, dist = self.neighbours(uniq, kmax)
                noise = np.full((n, kmax), np.inf)
                row = 0
                for r in range(start, stop):
                    z = noises[r]
                    if z is not None:
                        noise[row : row + z.shape[0], : z.shape[1]] = z
                    row += records[r].size
                noisy = dist[inv] + noise
                noisy[np.arange(kmax)[None, :] >= k[:, None]] = np.inf
                j = np.argmin(noisy, axis=1)
                result = np.where(k > 0, nbr[inv, j], block)
            out.extend(np.split(result.astype(np.int64), np.cumsum([r.size for r in records[start:stop]])[:-1]))
            start = stop
        return out

    def distribution(self, w: int | str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """``(ids, probs)``: the exact output law of ``w`` by numerical integration (float64).

        ``Pr[out = j] = Pr[k=0] [j = w] + int f(t - d_j) prod_{i<j} S(t - d_i) G_j(t) dt`` with f, S
        the truncated Gumbel density and survival function, ``G_j = sum_{k>j} Pr[k] prod_{j<i<k} S``
        (a backward recursion), on a piecewise Gauss-Legendre grid whose pieces end at every
        ``d_i +- Delta_max`` and are at most ``b / 2`` long; all in log space.
        """
        wid = self._id(w)
        logk = self.k_law
        kc = logk.size - 1  # the largest k; outputs are the first kc neighbours
        if kc == 0:
            return np.array([wid], dtype=np.int64), np.array([1.0])
        nbr, dist = self.neighbours(np.array([wid], dtype=np.int64), kc)
        ids, d = nbr[0], dist[0]
        logp = _log_output_probabilities(d, logk, self.scale, self.inter_word.max)
        return ids.astype(np.int64), np.exp(logp)

    def distance(self, w: int, w2: int) -> float:
        vec = self.embedding.vectors
        diff = np.asarray(vec[w], np.float64) - np.asarray(vec[w2], np.float64)
        return float(np.sqrt(diff @ diff))

    def guarantee(self, w: int | str, w2: int | str) -> float:
        """No finite bound: ``inf`` between distinct words (0 for a word against itself)."""
        return 0.0 if self._id(w) == self._id(w2) else math.inf

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d["guarantee"] = GUARANTEE
        d["metric_dp"] = False
        d["not_protected"] = "every word: the mechanism has no finite metric-DP guarantee (truncated_gumbel)"
        found = self.__dict__.get("_inter_word")
        if found is not None:
            d["min_inter_word_distance"] = found.min
            d["max_inter_word_distance"] = found.max
        if self.__dict__.get("_scale") is not None:
            d["noise_scale"] = self.__dict__["_scale"]
        return d


def _log_output_probabilities(
    d: npt.NDArray[np.float64], logk: npt.NDArray[np.float64], b: float, bound: float
) -> npt.NDArray[np.float64]:
    """log Pr[output = the j-th neighbour], j = 0..K-1 (distances ``d`` sorted, K = len(d) = len(logk) - 1)."""
    from scipy import special

    kc = d.size
    # the grid: pieces between every d_i +- M, none longer than b * PIECE
    ends = np.unique(np.concatenate([d - bound, d + bound, d]))
    pieces = []
    for lo, hi in itertools.pairwise(ends):
        if hi > lo:
            n = max(1, math.ceil((hi - lo) / (PIECE * b)))
            pieces.append(np.linspace(lo, hi, n + 1))
    edges = np.unique(np.concatenate(pieces))
    xg, wg = np.polynomial.legendre.leggauss(GL_NODES)
    mid, half = (edges[1:] + edges[:-1]) / 2, (edges[1:] - edges[:-1]) / 2
    t = (mid[:, None] + half[:, None] * xg[None, :]).ravel()
    logw = np.log((half[:, None] * wg[None, :]).ravel())

    log_fm = -math.exp(-bound / b)  # log F(M)
    log_zg = log_fm + _log1mexp(float(np.exp(-bound / b) - np.exp(min(bound / b, 700.0))))  # log(F(M) - F(-M))
    x = t[None, :] - d[:, None]  # (K, T): the noise needed for neighbour i to reach t
    inside = np.abs(x) <= bound
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        z = x / b
        log_f = np.where(inside, -math.log(b) - z - np.exp(-z) - log_zg, -np.inf)
        # S(x) = (F(M) - F(x)) / Zg inside; 1 left of -M; 0 right of M
        log_s_in = log_fm + _log1mexp_arr(np.exp(-bound / b) - np.exp(np.minimum(-z, 700.0))) - log_zg
        log_s = np.where(x < -bound, 0.0, np.where(x > bound, -np.inf, np.minimum(log_s_in, 0.0)))
    # P_j = prod_{i<j} S_i (exclusive prefix), G_j = pi_{j+1} + S_{j+1} G_{j+1}, G_{K-1} = pi_K
    log_prefix = np.vstack([np.zeros((1, t.size)), np.cumsum(log_s[:-1], axis=0)])
    log_g = np.empty((kc, t.size))
    log_g[kc - 1] = logk[kc]
    for j in range(kc - 2, -1, -1):
        log_g[j] = np.logaddexp(logk[j + 1], log_s[j + 1] + log_g[j + 1])
    with np.errstate(invalid="ignore"):
        integrand = log_f + log_prefix + log_g + logw[None, :]
    out = special.logsumexp(np.nan_to_num(integrand, nan=-np.inf), axis=1)
    out[0] = np.logaddexp(out[0], logk[0])
    return np.asarray(out, dtype=np.float64)


def _log1mexp(x: float) -> float:
    """``log(1 - exp(x))`` for ``x <= 0``."""
    return float(_log1mexp_arr(np.array(x)))


def _log1mexp_arr(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """``log(-expm1(x))`` for ``x <= 0`` (``-inf`` at 0)."""
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(-np.expm1(np.minimum(x, 0.0))))
