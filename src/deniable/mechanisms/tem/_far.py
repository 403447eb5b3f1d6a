"""TEM's far-word bounds: a proven lower bound on the distance from every word to every cluster.

At small epsilon most of a word's probability mass lies outside its k nearest neighbours
(E), and the k-NN envelope proposes those far words uniformly under one bound, the distance
``d_env`` of the (k+1)-th neighbour: tens of proposals per token. This artefact splits the
vocabulary into ``C`` clusters (k-means on the public vectors) and stores, for every word
``w`` and cluster ``c``, a lower bound ``lb(w, c) <= d(w, y)`` for every ``y`` in ``c``
(the float32 screening minimum over the cluster, made a proven bound by
:meth:`Geometry.bound_values_rows`, rounded down to a multiple of ``step``, one byte). The
envelope then weighs cluster ``c`` by ``n_c exp(-a min(max(lb, d_env), gamma))`` instead of
``n_c exp(-a min(d_env, gamma))``: on GloVe and IMDb tokens at eps 3, about 9 proposals per
token that moves instead of about 70 (docs/tem.md, sampler 7). It depends on the embedding
and the metric only, like the k-NN tables, and is built by ``deniable prepare -m tem -e
EPS`` (one V x V pass, one thread a core).

Files: ``order.npy`` (int32, the word ids sorted by cluster), ``rank.npy`` (int32, its
inverse: the place of each word in ``order``), ``starts.npy`` (int64, C + 1 offsets of the
clusters in ``order``), ``bounds.npy`` (uint8, ``V x C``, rows in the order of ``order``:
row ``rank[w]`` is word ``w``), ``step.npy`` (float64, one value). The kind ``tem-far``
registers itself with the store when this module is imported.

May import: :mod:`._geometry`, :mod:`._shared`, and the library below the mechanisms
(:mod:`deniable.artefacts`, :mod:`deniable.embedding`, ``_progress``).
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._progress import progress
from ...artefacts import register_kind
from ...embedding import Embedding, Vocabulary
from ._geometry import Geometry
from ._shared import build_workers, cluster_labels, single_threaded_blas, touch_pages

#: The artefact kind (deniable.artefacts).
FAR_KIND = "tem-far"
#: Metrics the far bounds are built for (one BLAS product per tile).
FAR_METRICS = ("euclidean", "angular")
_CLUSTERS = 1024
_LEVELS = 255  # one byte a bound; 255 * step is also a bound of everything beyond it
_TILE = 1024  # about this many words a tile side (whole clusters)


def far_artefact_params(embedding: Vocabulary, metric: str) -> dict[str, object]:
    """Parameters of the prepared far bounds of ``embedding`` under ``metric``."""
    return {"metric": metric, "clusters": int(min(_CLUSTERS, max(1, embedding.size // 64))), "format": 2}


class PreparedFar:
    """The prepared far bounds, read-only, memory-mapped (``prefault`` as for :class:`PreparedKnn`)."""

    def __init__(self, folder: Path, *, prefault: bool = False) -> None:
        def load(name: str) -> np.ndarray:  # plain ndarray views of the memory maps (nothing read yet)
            return np.asarray(np.load(folder / name, mmap_mode="r", allow_pickle=False))

        self.order, self.rank, self.bounds = load("order.npy"), load("rank.npy"), load("bounds.npy")
        self.starts = np.load(folder / "starts.npy", allow_pickle=False).astype(np.int64)
        self.counts = np.diff(self.starts).astype(np.float64)
        self.step = float(np.load(folder / "step.npy", allow_pickle=False))
        self.clusters = self.counts.size
        self.prefaulted = prefault
        if prefault:
            for arr in (self.order, self.rank, self.bounds):
                touch_pages(arr)

    def levels(self, words: npt.NDArray[np.int64]) -> npt.NDArray[np.uint8]:
        """``(len(words), C)`` uint8 ``q``: ``q[i, c] * step <= d(words[i], y)`` for every ``y`` of cluster ``c``."""
        return np.asarray(self.bounds[self.rank[words]])

    def level_at(self, words: npt.NDArray[np.int64], c: npt.NDArray[np.int64]) -> npt.NDArray[np.uint8]:
        """``levels(words)[i, c[i]]`` for each i, without reading the whole rows."""
        return np.take(self.bounds.reshape(-1), self.rank[words].astype(np.int64) * self.clusters + c)

    def lower(self, words: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """``(len(words), C)``: ``lb[i, c] <= d(words[i], y)`` for every word ``y`` of cluster ``c``."""
        return np.asarray(self.levels(words) * self.step, dtype=np.float64)

    def members(self, c: npt.NDArray[np.int64], r: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
        """The word at fraction ``r`` in ``[0, 1)`` of cluster ``c`` (uniform member for uniform ``r``)."""
        at = np.minimum((r * self.counts[c]).astype(np.int64), self.counts[c].astype(np.int64) - 1)
        return self.order[self.starts[c] + at]


def build_far_artefact(embedding: Vocabulary, params: dict[str, Any], folder: Path, show_progress: bool | None) -> None:
    """Write the far bounds of every word to every cluster (see the module docstring).

    Symmetric tiles in cluster order: the tile of word groups ``I <= J`` (each a run of
    whole clusters) is one float32 BLAS product, reduced once along its rows (the bounds of
    I's words to J's clusters) and once along its columns (J's words to I's clusters), so
    every (word, cluster) bound is written exactly once; :func:`build_workers` threads.
    """
    embedding = Embedding.check(embedding)
    metric = str(params["metric"])
    geo = Geometry(embedding, metric)
    if metric not in FAR_METRICS or not geo.screening:
        raise ValueError(f"far bounds are built for {', '.join(FAR_METRICS)} on finite vectors, not {metric}")
    v = geo.size
    labels = cluster_labels(np.asarray(geo.x), int(params["clusters"]), metric == "angular")
    labels = np.unique(labels, return_inverse=True)[1].ravel()  # no empty cluster
    c_count = int(labels.max()) + 1
    order = np.argsort(labels, kind="stable").astype(np.int64)
    counts = np.bincount(labels, minlength=c_count)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    # groups of whole clusters, about _TILE words each (a larger cluster is a group alone)
    groups = [0]
    for c in range(1, c_count):
        if starts[c] - starts[groups[-1]] >= _TILE:
            groups.append(c)
    groups.append(c_count)
    # the screening key in cluster order, smaller = closer (euclidean: |q|^2 a term of the
    # product; angular: -cos, so a cluster's minimum key is its maximum cosine, negated back
    # for bound_values_rows below)
    lhs, partner = geo.key_operand(order)
    sign = -1.0 if metric == "angular" else 1.0
    # the step: bounds up to the 99.9th percentile of a strided sample's bounds are
    # resolved in 255 levels; larger ones are clipped down (still bounds)
    probe = order[:: max(1, v // 64)][:64]
    row = np.empty((probe.size, v), dtype=np.float32)
    geo.screen(probe, row)
    step = float(np.quantile(geo.bound_values_rows(probe, row), 0.999)) / _LEVELS
    step = step if step > 0 else 1.0
    del row
    geo.release_operands()  # the operand above, in cluster order, is what the tiles read
    bounds = np.empty((v, c_count), dtype=np.uint8)
    ws = order  # word of each position

    def quantize(lb: np.ndarray) -> np.ndarray:
        q = np.floor(lb.astype(np.float64) / step)
        np.clip(q, 0, _LEVELS, out=q)
        q -= q * step > lb  # rounding never lifts a level above its bound
        return q.astype(np.uint8)

    def one_row(gi: int) -> int:
        c0, c1 = groups[gi], groups[gi + 1]
        p0, p1 = int(starts[c0]), int(starts[c1])
        edges_i = (starts[c0 : c1 + 1] - p0).tolist()
        with single_threaded_blas():
            for gj in range(gi, len(groups) - 1):
                d0, d1 = groups[gj], groups[gj + 1]
                q0, q1 = int(starts[d0]), int(starts[d1])
                tile = lhs[p0:p1] @ partner(lhs[q0:q1]).T
                local_j = starts[d0:d1] - q0
                rows = np.minimum.reduceat(tile, local_j, axis=1)  # I's words x J's clusters
                bounds[p0:p1, d0:d1] = quantize(geo.bound_values_rows(ws[p0:p1], sign * rows))
                if gj != gi:
                    # J's words x I's clusters (one reduction per cluster: reduceat along axis 0
                    # is about 30x slower than this on a 1024 x 1024 tile)
                    cols = np.empty((q1 - q0, c1 - c0), dtype=np.float32)
                    for c, (a, b) in enumerate(itertools.pairwise(edges_i)):
                        np.minimum.reduce(tile[a:b], axis=0, out=cols[:, c])
                    bounds[q0:q1, c0:c1] = quantize(geo.bound_values_rows(ws[q0:q1], sign * cols))
        return p1 - p0

    what = f"TEM: far bounds of {v:,} words to {c_count:,} clusters ({metric})"
    lock = threading.Lock()
    with progress(v, what, enabled=show_progress) as advance, ThreadPoolExecutor(max_workers=build_workers()) as pool:
        # the first groups have the most tiles: they go first, so the two threads finish together
        for n in pool.map(one_row, range(len(groups) - 1)):
            with lock:
                advance(n)
    rank = np.empty(v, dtype=np.int32)
    rank[order] = np.arange(v, dtype=np.int32)
    np.save(folder / "order.npy", order.astype(np.int32), allow_pickle=False)
    np.save(folder / "rank.npy", rank, allow_pickle=False)
    np.save(folder / "starts.npy", starts, allow_pickle=False)
    np.save(folder / "step.npy", np.float64(step), allow_pickle=False)
    np.save(folder / "bounds.npy", bounds, allow_pickle=False)


# the store's kind, declared where its builder is
register_kind(
    FAR_KIND,
    build_far_artefact,
    about="the far bounds TEM uses for fewer proposals at small epsilon",
)
