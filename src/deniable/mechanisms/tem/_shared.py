"""What several TEM modules share: the table type, faulting a memory map in, the build's worker
threads (one BLAS thread each), and the k-means clusters of the public vectors.

May import: numpy (threadpoolctl and :mod:`deniable.index.exact` inside the functions that use
them) and :mod:`deniable._threads` (the thread policy); no other module of deniable, so every TEM
module can import it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._threads import local_decode_workers, usable_cores

__all__ = [
    "Table",
    "build_workers",
    "cluster_labels",
    "set_build_workers",
    "single_threaded_blas",
    "touch_pages",
]

#: A table of one word: ``(ids, distances)`` (ball tables and k-NN tables, :mod:`._tables`).
Table = tuple[npt.NDArray[np.int32], npt.NDArray[np.float64]]


def touch_pages(a: np.ndarray, page: int = 4096) -> None:
    """Read one byte of every page of ``a`` (C-contiguous), faulting the whole mapping in now."""
    raw = a.reshape(-1).view(np.uint8)
    int(raw[::page].sum(dtype=np.uint64))


_build_workers: int | None = None


def set_build_workers(n: int | None) -> None:
    """Fix the prepared builds' worker threads to ``n`` (``None``: :func:`build_workers`'s default).

    The outputs do not depend on it (byte for byte: tests/test_tem_build_workers.py); only the
    time does (``bench/bench_prepare.py --workers``).
    """
    global _build_workers
    if n is not None and n < 1:
        raise ValueError(f"build workers must be at least 1, not {n}")
    _build_workers = n


def build_workers() -> int:
    """Worker threads of the prepared builds (k-NN tables, far bounds, totals), one BLAS thread each.

    The usable cores (the thread policy, :mod:`deniable._threads`: never more threads than
    cores), unless fixed by :func:`set_build_workers`.
    """
    return _build_workers if _build_workers is not None else usable_cores()


def single_threaded_blas() -> AbstractContextManager[Any]:
    """One BLAS thread per worker while the build's workers run (when threadpoolctl is there)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional: only slower without it
        return nullcontext()
    return threadpool_limits(1, user_api="blas")


def cluster_labels(x: np.ndarray, c: int, angular: bool) -> npt.NDArray[np.int64]:
    """k-means labels of the rows of ``x``: a function of the public vectors (fixed seeds, one BLAS thread).

    Lloyd's algorithm as faiss's ``Kmeans`` runs it (20 iterations on a sample of 64 points a
    cluster, the first centroids drawn from the sample, an empty cluster split off the
    largest; ``angular``: unit centroids and the largest inner product, faiss's
    ``spherical``), each assignment the project's exact nearest-neighbour search
    (:class:`~deniable.index.exact.ExactIndex`, numpy's BLAS) of the centroids, its rows split
    across :func:`build_workers` threads of one BLAS thread each (the same labels on any
    number: each row's search is its own; angular: the centroids are unit vectors, so the
    nearest in L2 has the largest inner product). The caller runs nothing beside it.
    faiss's own search runs on the OpenBLAS its wheel bundles, which ran the project's
    machine with its generic ``Prescott`` kernel: 0.42-0.47 s an iteration at 400k words
    against 0.21-0.23 s here, the whole k-means 12.5-15 s against about 4 s, the same inertia
    within 0.1% (docs/performance.md).
    """
    v = x.shape[0]
    data = np.ascontiguousarray(x, dtype=np.float32)
    if c <= 1:
        return np.zeros(v, dtype=np.int64)
    c = min(c, v)
    sample = data
    if v > 64 * c:
        sample = data[np.random.default_rng(0).choice(v, 64 * c, replace=False)]
    n = sample.shape[0]
    cent = sample[np.random.default_rng(1234).choice(n, c, replace=False)].astype(np.float64)
    if angular:
        cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), 1e-30)
    with single_threaded_blas(), local_decode_workers(build_workers()):
        for _ in range(_KMEANS_ITER):
            assign = _nearest_centroid(sample, cent)
            counts = np.bincount(assign, minlength=c)
            order = np.argsort(assign, kind="stable")
            full = np.flatnonzero(counts)
            starts = np.concatenate([[0], np.cumsum(counts)])[:-1]
            cent[full] = np.add.reduceat(sample[order], starts[full], axis=0, dtype=np.float64)
            cent[full] /= counts[full, None]
            _split_empty(cent, counts)
            if angular:
                cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), 1e-30)
        return _nearest_centroid(data, cent)


_KMEANS_ITER = 20


def _nearest_centroid(rows: np.ndarray, cent: np.ndarray) -> npt.NDArray[np.int64]:
    """The nearest centroid of each row (float32 ``|c|^2 - 2 x.c``, the lowest id on ties)."""
    from ...index.exact import ExactIndex

    return ExactIndex(cent).search(rows, 1)[1][:, 0]


def _split_empty(cent: np.ndarray, counts: npt.NDArray[np.int64]) -> None:
    """Give each empty cluster half of the largest one (faiss's split: the centroid, nudged both ways)."""
    eps = 1.0 / 1024.0
    sign = np.where(np.arange(cent.shape[1]) % 2 == 0, 1.0, -1.0)
    for ci in np.flatnonzero(counts == 0):
        cj = int(np.argmax(counts))
        cent[ci] = cent[cj] * (1.0 + eps * sign)
        cent[cj] = cent[cj] * (1.0 - eps * sign)
        counts[ci] = counts[cj] // 2
        counts[cj] -= counts[ci]
