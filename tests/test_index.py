from __future__ import annotations

import logging

import numpy as np
import pytest

from conftest import make_tiny_embedding
from deniable import Embedding, EmbeddingError, InvalidParameterError
from deniable.index import ExactIndex, FlatIndex, HNSWIndex, make_index


@pytest.fixture
def data() -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(0)
    return r.normal(size=(3000, 16)).astype(np.float32), r.normal(size=(200, 16)).astype(np.float32)


def _brute(x: np.ndarray, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact squared distances in float64, a few queries at a time (the full query x vocabulary x
    dimension difference array of the larger cases would take gigabytes)."""
    x64 = x.astype(np.float64)
    ds, ids = [], []
    for start in range(0, len(q), 16):
        d = ((q[start : start + 16, None, :].astype(np.float64) - x64[None, :, :]) ** 2).sum(-1)
        i = np.argsort(d, axis=1, kind="stable")[:, :k]
        ds.append(np.take_along_axis(d, i, 1))
        ids.append(i)
    return np.concatenate(ds), np.concatenate(ids)


@pytest.mark.parametrize("k", [1, 5])
def test_exact_matches_brute_force_across_blocks(data: tuple[np.ndarray, np.ndarray], k: int) -> None:
    x, q = data
    idx = ExactIndex(x, vocab_block=700, query_block=64)  # many blocks of both kinds
    d, i = idx.search(q, k)
    bd, bi = _brute(x, q, k)
    np.testing.assert_array_equal(i, bi)
    np.testing.assert_allclose(d, bd, rtol=1e-4, atol=1e-4)


def test_exact_default_blocks_give_the_words_of_other_shapes() -> None:
    # the default block shape is a speed choice only: every shape returns the same words
    r = np.random.default_rng(1)
    x, q = r.normal(size=(40_000, 50)).astype(np.float32), r.normal(size=(600, 50)).astype(np.float32)
    d, i = ExactIndex(x).search(q, 1)
    assert (ExactIndex(x).vocab_block, ExactIndex(x).query_block) == (2048, 1024)
    for vb, qb in [(8192, 256), (2048, 256), (16384, 256), (1000, 512), (40_000, 600)]:  # older defaults, one block
        d2, i2 = ExactIndex(x, vocab_block=vb, query_block=qb).search(q, 1)
        np.testing.assert_array_equal(i2, i)
        np.testing.assert_allclose(d2, d, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(i, _brute(x, q, 1)[1])


def test_faiss_flat_and_hnsw_agree_with_exact(data: tuple[np.ndarray, np.ndarray]) -> None:
    x, q = data
    _, exact = ExactIndex(x).search(q, 1)
    _, flat = FlatIndex(x).search(q, 1)
    np.testing.assert_array_equal(flat, exact)
    _, hnsw = HNSWIndex.build(x, ef_search=256).search(q, 1)
    assert (hnsw == exact).mean() >= 0.97


def test_hnsw_is_cached_on_disk(tiny_embedding: Embedding) -> None:
    a = make_index(tiny_embedding, "hnsw")
    from deniable.artefacts import open_artefact
    from deniable.index.faiss_index import HNSW_KIND, hnsw_artefact_params

    info = open_artefact(tiny_embedding, HNSW_KIND, hnsw_artefact_params())  # a prepared artefact
    assert info is not None and info.file("index.faiss").is_file()
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


# -- binary codes: the same contract, Hamming distance ----------------------------------------


@pytest.fixture
def codes() -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(1)
    return r.integers(0, 256, (2000, 8), dtype=np.uint8), r.integers(0, 256, (150, 8), dtype=np.uint8)


def _brute_hamming(x: np.ndarray, q: np.ndarray) -> np.ndarray:
    from deniable.metrics import hamming

    return hamming(q[:, None, :], x[None, :, :])


@pytest.mark.parametrize("kind", ["exact", "flat"])
def test_binary_exact_kinds_match_brute_force(codes: tuple[np.ndarray, np.ndarray], kind: str) -> None:
    from deniable.index import CodeIndex, make_code_index

    x, q = codes
    idx = make_code_index(x, kind, **({"block_bytes": 4096} if kind == "exact" else {}))  # many query blocks
    assert isinstance(idx, CodeIndex) and idx.ntotal == 2000 and idx.d == 64
    full = _brute_hamming(x, q)
    d, i = idx.search(q, 7)
    assert d.dtype == np.int32 and i.dtype == np.int64 and d.shape == i.shape == (150, 7)
    np.testing.assert_array_equal(d, np.sort(full, axis=1)[:, :7])
    np.testing.assert_array_equal(np.take_along_axis(full, i, 1), d)
    lims, rd, ri = idx.range_search(q, 26)  # type: ignore[attr-defined]
    for r in range(len(q)):
        got = ri[lims[r] : lims[r + 1]]
        assert sorted(got.tolist()) == np.nonzero(full[r] < 26)[0].tolist()
        np.testing.assert_array_equal(rd[lims[r] : lims[r + 1]], full[r, got])


def test_binary_hnsw_is_kept_in_the_store_of_its_vocabulary(codes: tuple[np.ndarray, np.ndarray]) -> None:
    from deniable.artefacts import list_artefacts
    from deniable.index import BinaryHNSWIndex, make_code_index
    from deniable.index.binary import codes_digest

    x, q = codes
    owner = make_tiny_embedding(9, 2, seed=77)
    a = make_code_index(x, "hnsw", owner=owner, notice=False)
    (info,) = list_artefacts(owner)
    assert isinstance(a, BinaryHNSWIndex) and info.kind == "binary-hnsw"
    assert info.params["codes"] == {"sha256": codes_digest(x)}  # given codes: keyed by their content
    b = make_code_index(x, "hnsw", owner=owner)  # read back from the store
    assert make_code_index(x, "hnsw", owner=owner, ef_search=256).ef_search == 256  # type: ignore[attr-defined]
    np.testing.assert_array_equal(a.search(q, 1)[1], b.search(q, 1)[1])
    best = _brute_hamming(x, q).min(axis=1)
    assert (b.search(q, 1)[0][:, 0] == best).mean() >= 0.9
    make_code_index(x[:-1], "hnsw", owner=owner, notice=False)  # other codes: another artefact
    make_code_index(x, "hnsw")  # no owner: built in memory, not kept
    assert len(list_artefacts(owner)) == 2


def test_binary_index_validation(codes: tuple[np.ndarray, np.ndarray]) -> None:
    from deniable.index import BinaryFlatIndex, make_code_index

    x, _ = codes
    idx = make_code_index(x, "flat")
    with pytest.raises(InvalidParameterError, match="queries"):
        idx.search(np.zeros((2, 4), np.uint8), 1)  # 32-bit queries for 64-bit codes
    with pytest.raises(InvalidParameterError, match="queries"):
        idx.search(np.zeros((2, 8), np.float32), 1)
    with pytest.raises(InvalidParameterError, match="k="):
        idx.search(np.zeros((2, 8), np.uint8), 2001)
    with pytest.raises(EmbeddingError, match="do not match"):
        make_code_index(x, BinaryFlatIndex(x[:10]))
    assert make_code_index(x, idx) is idx
    with pytest.raises(InvalidParameterError, match="index"):
        make_code_index(x, "ivf")


def test_hnsw_build_is_logged_once(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    # the library logs (never prints); the CLI shows a build that takes over a second
    caplog.set_level(logging.INFO, logger="deniable")
    emb = Embedding([f"n{i}" for i in range(50)], np.random.default_rng(9).normal(size=(50, 4)), name="notice")
    make_index(emb, "hnsw")
    (start,) = [r.getMessage() for r in caplog.records if getattr(r, "deniable_build", None) == "start"]
    assert "building the HNSW index" in start
    caplog.clear()
    make_index(emb, "hnsw")  # from the cache: nothing
    assert caplog.records == []
    HNSWIndex.cached(emb, m=16, notice=False)  # a new graph: logged with the generic description
    assert all("HNSW index of this embedding" not in r.getMessage() for r in caplog.records)
    assert capsys.readouterr().err == ""


def test_exact_nearest_ties_go_to_the_lowest_id_across_and_within_blocks() -> None:
    # the nearest pass keeps each block's argmin and compares the blocks at the end: a tie
    # (the same vector twice) goes to the lowest id, whether the copies share a block or not
    r = np.random.default_rng(4)
    x = r.normal(size=(3000, 8)).astype(np.float32)
    x[2500] = x[7]  # another block (vocab_block 1000)
    x[600] = x[500]  # the same block
    idx = ExactIndex(x, vocab_block=1000, query_block=50)
    q = np.stack([x[7], x[500], x[2500], x[600]])
    _, i = idx.search(q, 1)
    assert i[:, 0].tolist() == [7, 500, 7, 500]
    assert ExactIndex(x).search(q, 1)[1][:, 0].tolist() == [7, 500, 7, 500]  # the default blocks
