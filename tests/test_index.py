from __future__ import annotations

import numpy as np
import pytest

from deniable import Embedding, EmbeddingError, InvalidParameterError
from deniable.index import ExactIndex, FlatIndex, HNSWIndex, make_index


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(0)
    return r.normal(size=(3000, 16)).astype(np.float32), r.normal(size=(200, 16)).astype(np.float32)


def _brute(x: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    d = ((q[:, None, :].astype(np.float64) - x[None, :, :]) ** 2).sum(-1)
    i = np.argsort(d, axis=1)[:, :k]
    return np.take_along_axis(d, i, 1), i


@pytest.mark.parametrize("k", [1, 5])
def test_exact_matches_brute_force_across_blocks(data: tuple[np.ndarray, np.ndarray], k: int) -> None:
    x, q = data
    idx = ExactIndex(x, vocab_block=700, query_block=64)  # many blocks of both kinds
    d, i = idx.search(q, k)
    bd, bi = _brute(x, q, k)
    np.testing.assert_array_equal(i, bi)
    np.testing.assert_allclose(d, bd, rtol=1e-4, atol=1e-4)


def test_faiss_flat_and_hnsw_agree_with_exact(data: tuple[np.ndarray, np.ndarray]) -> None:
    x, q = data
    _, exact = ExactIndex(x).search(q, 1)
    _, flat = FlatIndex(x).search(q, 1)
    np.testing.assert_array_equal(flat, exact)
    _, hnsw = HNSWIndex.build(x, ef_search=256).search(q, 1)
    assert (hnsw == exact).mean() >= 0.97


def test_hnsw_is_cached_on_disk(tiny_embedding: Embedding) -> None:
    a = make_index(tiny_embedding, "hnsw")
    path = tiny_embedding.cache_path("hnsw-m32-efc100.faiss")
    assert path.is_file()
    b = make_index(tiny_embedding, "hnsw")
    q = tiny_embedding.vectors[:4]
    np.testing.assert_array_equal(a.search(q, 1)[1], b.search(q, 1)[1])


def test_index_validation(tiny_embedding: Embedding, data: tuple[np.ndarray, np.ndarray]) -> None:
    idx = ExactIndex(tiny_embedding.vectors)
    with pytest.raises(InvalidParameterError, match="queries"):
        idx.search(np.zeros((2, 5), np.float32), 1)
    with pytest.raises(InvalidParameterError, match="k="):
        idx.search(np.zeros((2, 3), np.float32), 9)
    with pytest.raises(EmbeddingError, match="do not match"):
        make_index(tiny_embedding, FlatIndex(data[0]))
    with pytest.raises(InvalidParameterError, match="index"):
        make_index(tiny_embedding, "annoy")
