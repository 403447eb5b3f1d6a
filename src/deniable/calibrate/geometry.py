"""Embedding geometry: distances from words to their k-th nearest neighbours (SPEC section 5).

Seed 000 (Fig. 2) and seed 003 (Fig. 1) summarise an embedding by the distance from each
word to its k-th nearest neighbour, for k on a log grid from 1 to 1000: the 5th, 20th,
50th, 80th and 95th percentiles over the vocabulary as curves against k, and the
histogram of the distances at k = 10. Those distances are what ``eps * d(w, w')`` is
measured in, so they tell which epsilon makes neighbours indistinguishable.

The distances must be in the metric of the mechanism being calibrated: Euclidean for
madlib, TEM's metric, and for BRR the Hamming distance (in bits) between the words'
binary codes (``metric="hamming"``, searched exactly with faiss ``IndexBinaryFlat`` from
the codes alone, so a device artefact without float vectors is enough).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._progress import progress
from .._validation import check_choice, check_int
from ..embedding import Embedding, Vocabulary
from ..metrics import unit_rows
from ._common import WordsArg, resolve_words, statistics_generator

if TYPE_CHECKING:
    from .._random import RandomState

__all__ = ["DEFAULT_KS", "DEFAULT_PERCENTILES", "METRICS", "NeighbourDistances", "neighbour_distances"]

#: k on a log grid from 1 to 1000 (1, 2, 5 per decade).
DEFAULT_KS: tuple[int, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
#: The metrics :func:`neighbour_distances` measures in.
METRICS: tuple[str, ...] = ("euclidean", "angular", "hamming")
#: The percentiles the papers plot.
DEFAULT_PERCENTILES: tuple[float, ...] = (5, 20, 50, 80, 95)


@dataclass(frozen=True, eq=False)
class NeighbourDistances:
    """Distances ``distances[i, j]`` from word ``ids[i]`` to its ``ks[j]``-th nearest neighbour.

    The word itself is not its own neighbour (k = 1 is the nearest *other* word).
    """

    ids: npt.NDArray[np.int64]
    ks: tuple[int, ...]
    distances: npt.NDArray[np.float32]
    metric: str
    vocab_size: int
    index: str
    seconds: float = 0.0

    def __len__(self) -> int:
        return int(self.ids.size)

    @property
    def sampled(self) -> bool:
        """True when the words are a sample of the vocabulary, not all of it."""
        return self.ids.size < self.vocab_size

    def percentiles(self, percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> npt.NDArray[np.float64]:
        """``(len(percentiles), len(ks))``: each percentile over the words, for each k."""
        return np.percentile(self.distances.astype(np.float64), list(percentiles), axis=0)

    def at(self, k: int) -> npt.NDArray[np.float32]:
        """The distances to the k-th neighbour (k must be in :attr:`ks`)."""
        if k not in self.ks:
            raise InvalidParameterError("k", k, "one of " + ", ".join(map(str, self.ks)))
        return self.distances[:, self.ks.index(k)]

    def histogram(self, k: int = 10, bins: int = 50) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """``(counts, edges)`` of the distances to the k-th neighbour.

        Hamming distances are whole numbers of bits: one bin per value (edges at
        half-integers), whatever ``bins`` says, so no bin straddles two values or none.
        """
        values = self.at(k)
        if self.metric == "hamming":
            lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
            counts, edges = np.histogram(values, bins=np.arange(lo - 0.5, hi + 1.0))
        else:
            counts, edges = np.histogram(values, bins=bins)
        return counts.astype(np.int64), edges

    def table(self, percentiles: Sequence[float] = DEFAULT_PERCENTILES) -> list[dict[str, float]]:
        """One row per k: ``{"k": k, "p5": ..., "p20": ..., ...}``."""
        pct = self.percentiles(percentiles)
        rows = []
        for j, k in enumerate(self.ks):
            row: dict[str, float] = {"k": k}
            for i, p in enumerate(percentiles):
                row[f"p{p:g}"] = float(pct[i, j])
            rows.append(row)
        return rows

    @property
    def label(self) -> str:
        """The distance's name for axes and captions, e.g. ``"Hamming distance (bits)"``."""
        return "Hamming distance (bits)" if self.metric == "hamming" else f"{self.metric} distance"

    def describe(self) -> str:
        """One line saying which words the summary covers."""
        what = (
            f"a uniform random sample of {self.ids.size:,} of the {self.vocab_size:,} words"
            if self.sampled
            else f"all {self.vocab_size:,} words"
        )
        return f"{self.label} to the k-th nearest other word, over {what} ({self.index} search)"


def neighbour_distances(
    embedding: Vocabulary,
    words: WordsArg = None,
    *,
    ks: Sequence[int] | None = None,
    metric: str = "euclidean",
    index: str = "exact",
    random_state: RandomState = None,
    batch_size: int = 1024,
    show_progress: bool | None = None,
    codes: npt.ArrayLike | None = None,
    rng: RandomState = None,
) -> NeighbourDistances:
    """Distances from each word to its k-th nearest neighbours, for every k in ``ks``.

    Parameters
    ----------
    embedding
        The embedding: an :class:`~deniable.Embedding`, or for ``metric="hamming"`` any
        :class:`~deniable.embedding.Vocabulary` (e.g. a
        :class:`~deniable.binarize.device.CodeVocabulary`, a loaded BRR device artefact).
    words
        ``None`` (every word: a V x V computation, about an hour for 400k words on two
        cores), an ``int`` n (a uniform random sample of n words, drawn with
        ``random_state``: None = OS randomness, an int = reproducible, or a Generator;
        ``rng`` is its old name), or words / ids. Neighbours are always searched in the
        whole vocabulary.
    ks
        Neighbour ranks (1 = nearest other word), at most V - 1. Default: :data:`DEFAULT_KS`
        (1 to 1000 on a log grid), cut at V - 1 for small vocabularies.
    metric
        ``"euclidean"`` (the papers'), ``"angular"`` (``arccos(cos)/pi``, from the
        Euclidean distance between unit vectors, a monotone function of it) or
        ``"hamming"`` (bits that differ between the words' packed binary codes: BRR's
        metric; needs ``codes`` or a :class:`~deniable.binarize.device.CodeVocabulary`).
    index
        ``"exact"`` (default), ``"flat"`` (faiss exact) or ``"hnsw"`` (approximate: can
        miss neighbours, so distances may come out slightly too large). Hamming
        distances are always searched exactly (faiss ``IndexBinaryFlat``): ``"flat"``.
    codes
        ``metric="hamming"`` only: the ``(V, bits // 8)`` uint8 packed codes of the words
        (e.g. ``BinaryRandomizedResponse.codes``). Default: the codes of a
        :class:`~deniable.binarize.device.CodeVocabulary`.
    """
    from ..index import make_index

    metric = check_choice("metric", metric, METRICS)
    index = check_choice("index", index, ("exact", "flat", "hnsw"))
    if codes is not None and metric != "hamming":
        raise InvalidParameterError("codes", "an array", 'None unless metric="hamming"')
    if ks is None:
        ks = [k for k in DEFAULT_KS if k < embedding.size] or [embedding.size - 1]
    if embedding.size < 2:
        raise InvalidParameterError("embedding", embedding.size, "at least 2 words")
    k_list = sorted({check_int("ks", k, minimum=1, maximum=embedding.size - 1) for k in ks})
    if not k_list:
        raise InvalidParameterError("ks", list(ks), "at least one k >= 1")
    batch_size = check_int("batch_size", batch_size, minimum=1)
    ids = resolve_words(embedding, words, statistics_generator(random_state, rng))
    t0 = time.perf_counter()
    if metric == "hamming":
        return _hamming_neighbour_distances(
            embedding, ids, k_list, codes, batch_size=batch_size, show_progress=show_progress, t0=t0
        )
    embedding = Embedding.check(embedding)  # Euclidean/angular need float vectors
    emb = embedding
    if metric == "angular":
        emb = Embedding(embedding.vocabulary, unit_rows(embedding.vectors), name=embedding.name + "/unit")
    search = make_index(emb, index)
    kmax = k_list[-1]
    cols = np.asarray(k_list) - 1
    out = np.empty((ids.size, len(k_list)), dtype=np.float32)
    vectors = emb.vectors
    with progress(ids.size, "nearest neighbours", enabled=show_progress) as advance:
        for s in range(0, ids.size, batch_size):
            q = ids[s : s + batch_size]
            d2, nn = search.search(vectors[q], kmax + 1)
            d2 = d2.astype(np.float64)
            d2[nn == q[:, None]] = np.inf  # the word itself is not a neighbour
            d2 = np.sort(d2, axis=1)[:, :kmax]
            dist = np.sqrt(np.maximum(d2[:, cols], 0.0))
            if metric == "angular":  # chord length e between unit vectors -> angle / pi
                dist = 2.0 * np.arcsin(np.minimum(dist / 2.0, 1.0)) / np.pi
            out[s : s + q.size] = dist
            advance(q.size)
    return NeighbourDistances(
        ids=ids,
        ks=tuple(k_list),
        distances=out,
        metric=metric,
        vocab_size=embedding.size,
        index=index,
        seconds=time.perf_counter() - t0,
    )


def _hamming_neighbour_distances(
    embedding: Vocabulary,
    ids: npt.NDArray[np.int64],
    k_list: list[int],
    codes: npt.ArrayLike | None,
    *,
    batch_size: int,
    show_progress: bool | None,
    t0: float,
) -> NeighbourDistances:
    """k-th neighbour Hamming distances between packed codes (exact, faiss ``IndexBinaryFlat``)."""
    from ..binarize import check_codes
    from ..binarize.device import CodeVocabulary
    from ..index import make_code_index

    if codes is None:
        if not isinstance(embedding, CodeVocabulary):
            raise InvalidParameterError(
                "codes", None, 'the packed binary codes of the words (needed for metric="hamming")'
            )
        codes = embedding.codes
    arr = np.ascontiguousarray(check_codes(codes, rows=embedding.size, name="codes"))
    index = make_code_index(arr, "flat")
    kmax = k_list[-1]
    cols = np.asarray(k_list) - 1
    out = np.empty((ids.size, len(k_list)), dtype=np.float32)
    with progress(ids.size, "nearest codes (Hamming)", enabled=show_progress) as advance:
        for s in range(0, ids.size, batch_size):
            q = ids[s : s + batch_size]
            dist, nn = index.search(arr[q], kmax + 1)
            d = dist.astype(np.float64)
            # The word itself is not a neighbour. Words sharing its code are (at distance 0);
            # if the word is not among the results, the first kmax are all other words.
            d[(nn == q[:, None]) | (nn < 0)] = np.inf
            out[s : s + q.size] = np.sort(d, axis=1)[:, cols]
            advance(q.size)
    return NeighbourDistances(
        ids=ids,
        ks=tuple(k_list),
        distances=out,
        metric="hamming",
        vocab_size=embedding.size,
        index="flat",
        seconds=time.perf_counter() - t0,
    )
