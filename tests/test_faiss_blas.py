"""faiss >= 1.15 uses BLAS only from 128,000 query floats; deniable sets it back to small batches
(issue 32). Timing lives in bench/bench_faiss_blas.py; here: the setting and that both paths agree."""

from __future__ import annotations

import numpy as np

from deniable.index import ExactIndex, FlatIndex
from deniable.index.faiss_index import BLAS_THRESHOLD, load_faiss


def test_the_threshold_is_set_once_flat_search_uses_it() -> None:
    faiss = load_faiss()
    x = np.random.default_rng(1).normal(size=(2000, 16)).astype(np.float32)
    FlatIndex(x)
    # faiss >= 1.15 (queries x dim, default 128,000): lowered; older faiss (queries, default 20): kept
    assert faiss.cvar.distance_compute_blas_threshold <= BLAS_THRESHOLD < 128_000


def test_blas_and_direct_paths_find_the_same_neighbours() -> None:
    faiss = load_faiss()
    rng = np.random.default_rng(2)
    x = rng.normal(size=(5000, 16)).astype(np.float32)
    q = rng.normal(size=(300, 16)).astype(np.float32)  # 4,800 floats: BLAS with ours, not with faiss's
    index = FlatIndex(x)
    got = {}
    for threshold in (BLAS_THRESHOLD, 128_000):
        faiss.cvar.distance_compute_blas_threshold = threshold
        got[threshold] = index.search(q, 3)[1]
    faiss.cvar.distance_compute_blas_threshold = BLAS_THRESHOLD
    exact = ExactIndex(x).search(q, 3)[1]
    assert np.array_equal(got[BLAS_THRESHOLD][:, 0], exact[:, 0])
    assert np.array_equal(got[128_000][:, 0], exact[:, 0])
