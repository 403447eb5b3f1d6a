"""What several TEM modules share: the table type, faulting a memory map in, the build's worker
threads (one BLAS thread each), and the k-means clusters of the public vectors.

May import: numpy (faiss and threadpoolctl inside the functions that use them) and
:mod:`deniable._threads` (the thread policy); no other module of deniable, so every TEM module
can import it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._threads import usable_cores

__all__ = [
    "Table",
    "build_workers",
    "cluster_labels",
    "one_faiss_thread",
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


@contextmanager
def one_faiss_thread() -> Iterator[None]:
    """faiss on one OpenMP thread (the calling thread's count) while inside; the count before restored."""
    import faiss

    omp = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(omp)


def cluster_labels(x: np.ndarray, c: int, angular: bool) -> npt.NDArray[np.int64]:
    """k-means labels of the rows of ``x`` (faiss, a fixed seed: a function of the public vectors)."""
    import faiss

    v, dim = x.shape
    data = np.ascontiguousarray(x, dtype=np.float32)
    if c <= 1:
        return np.zeros(v, dtype=np.int64)
    sample = data
    if v > 64 * c:
        sample = data[np.random.default_rng(0).choice(v, 64 * c, replace=False)]
    # one OpenMP thread: the same labels as with more (checked on GloVe 100k and 400k, both
    # metrics), in less wall time on 2 cores (4.4 s against 7.0 s at 400k words, loaded)
    with one_faiss_thread():
        km = faiss.Kmeans(dim, c, niter=20, seed=1234, spherical=angular, verbose=False)
        km.train(sample)
        _, lab = km.index.search(data, 1)
    return np.asarray(lab[:, 0], dtype=np.int64)
