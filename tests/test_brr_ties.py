"""BRR decode: nearest code in Hamming distance, ties uniform (both backends, fallback path), sharers uniform."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from deniable.mechanisms.brr import HammingDecoder
from deniable.metrics import hamming


def chi2_uniform_p(counts: np.ndarray) -> float:
    expected = counts.sum() / len(counts)
    return float(stats.chi2.sf(((counts - expected) ** 2 / expected).sum(), len(counts) - 1))


CODES = np.array([[0b00000000], [0b00000011], [0b00001111], [0b11110000], [0b11110000], [0b11111111]], np.uint8)
QUERY = np.uint8(0b00111100)  # at distance 4 from codes 0, 2, 3(=4), 5 and 6 from code 1


@pytest.mark.parametrize(("backend", "tie_k"), [("numpy", 16), ("faiss", 16), ("faiss", 1), ("faiss", 2)])
def test_ties_between_codes_are_uniform(backend: str, tie_k: int) -> None:
    """tie_k < number of tied codes exercises the range-search fallback of the faiss path."""
    dec = HammingDecoder(CODES, backend=backend, tie_k=tie_k)
    assert dec.backend == backend and dec.n_codes == 5
    rng = np.random.default_rng(11)
    q = np.full((40000, 1), QUERY, dtype=np.uint8)
    got = dec.nearest_codes(q, rng)
    d = hamming(dec.unique_codes[got], q)
    assert np.all(d == 4)
    counts = np.bincount(got, minlength=5)
    assert counts[1] == 0  # the code 0b00000011 is at distance 6: never chosen
    assert chi2_uniform_p(counts[[0, 2, 3, 4]]) > 1e-6
    # words: codes 0, 2, 4 (unique order) each 1/4; the shared code's 2 words 1/8 each
    words = np.bincount(dec.decode(q, rng), minlength=6)
    expected = np.array([1 / 4, 0, 1 / 4, 1 / 8, 1 / 8, 1 / 4]) * len(q)
    keep = expected > 0
    chi2 = ((words[keep] - expected[keep]) ** 2 / expected[keep]).sum()
    assert words[1] == 0 and stats.chi2.sf(chi2, keep.sum() - 1) > 1e-6


def test_backends_agree_on_distance_of_the_answer() -> None:
    rng = np.random.default_rng(2)
    codes = rng.integers(0, 256, (300, 8), dtype=np.uint8)
    codes[10] = codes[20]  # a shared code
    q = rng.integers(0, 256, (2000, 8), dtype=np.uint8)
    a = HammingDecoder(codes, backend="numpy")
    b = HammingDecoder(codes, backend="faiss", tie_k=2)
    best = hamming(q[:, None, :], a.unique_codes[None, :, :]).min(axis=1)
    for dec in (a, b):
        got = dec.nearest_codes(q, rng)
        assert np.array_equal(hamming(dec.unique_codes[got], q), best)
    assert a.shared_codes == 1 and a.words_sharing == 2 and a.n_codes == 299


def test_unique_minimum_and_many_ties_faiss_fallback() -> None:
    rng = np.random.default_rng(4)
    codes = np.zeros((256, 8), dtype=np.uint8)
    codes[:, 0] = np.arange(256)  # all 256 leading bytes
    dec = HammingDecoder(codes, backend="faiss", tie_k=4)
    q = np.zeros((24000, 8), dtype=np.uint8)
    q[:, 0] = 0b00000001
    q[:, 1] = 0xFF  # 8 bits away from every code: code 1 is still the unique minimum
    got = dec.nearest_codes(q, rng)
    assert np.all(dec.unique_codes[got, 0] == 1)
    # 8 codes with one bit set each: the zero query is at distance 1 from all 8 (tie_k = 3 < 8)
    codes2 = np.zeros((8, 8), dtype=np.uint8)
    codes2[:, 0] = 1 << np.arange(8)
    dec2 = HammingDecoder(codes2, backend="faiss", tie_k=3)
    q2 = np.zeros((24000, 8), dtype=np.uint8)  # distance 1 to each of the 8 codes
    counts = np.bincount(dec2.nearest_codes(q2, rng), minlength=8)
    assert chi2_uniform_p(counts) > 1e-6


def test_bad_queries() -> None:
    from deniable import InvalidParameterError

    dec = HammingDecoder(CODES)
    with pytest.raises(InvalidParameterError, match="noisy codes"):
        dec.nearest_codes(np.zeros((2, 2), dtype=np.uint8), np.random.default_rng(0))
    with pytest.raises(InvalidParameterError, match="noisy codes"):
        dec.nearest_codes(np.zeros((2, 1), dtype=np.int32), np.random.default_rng(0))
    with pytest.raises(InvalidParameterError, match="backend"):
        HammingDecoder(CODES, backend="gpu")


def _lose_rows(dec: HammingDecoder, lost: slice, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the decoder's HNSW search return only -1 ids for the rows ``lost`` of every query batch."""
    real = dec._index.search
    calls: list[int] = []

    def search(q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        dist, ids = real(q, k)
        ids[lost] = -1
        dist[lost] = np.iinfo(dist.dtype).max
        calls.append(len(q))
        return dist, ids

    monkeypatch.setattr(dec._index, "search", search)
    return calls


def test_hnsw_rows_without_any_result_fall_back_to_exact_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """All -1 ids for a query row (HNSW found nothing) used to crash rng.integers(0, 0)."""
    rng = np.random.default_rng(8)
    codes = rng.integers(0, 256, (300, 8), dtype=np.uint8)
    q = rng.integers(0, 256, (50, 8), dtype=np.uint8)
    dec = HammingDecoder(codes, index="hnsw")
    calls = _lose_rows(dec, slice(3, 5), monkeypatch)
    got = dec.nearest_codes(q, rng)
    assert calls == [50]  # the HNSW index was searched (and lost rows 3 and 4)
    best = hamming(q[:, None, :], dec.unique_codes[None, :, :]).min(axis=1)
    assert got.dtype == np.int64 and np.all((got >= 0) & (got < dec.n_codes))
    assert np.array_equal(hamming(dec.unique_codes[got[3:5]], q[3:5]), best[3:5])  # exact for the lost rows
    words = dec.decode(q, rng)
    assert np.all((words >= 0) & (words < len(codes)))


def test_hnsw_fallback_keeps_ties_uniform(monkeypatch: pytest.MonkeyPatch) -> None:
    dec = HammingDecoder(CODES, index="hnsw", tie_k=2)  # tie_k < 4 tied codes: the range-search path too
    _lose_rows(dec, slice(None), monkeypatch)  # every row lost: the whole decode is the exact fallback
    q = np.full((20000, 1), QUERY, dtype=np.uint8)
    got = dec.nearest_codes(q, np.random.default_rng(5))
    assert np.all(hamming(dec.unique_codes[got], q) == 4)
    counts = np.bincount(got, minlength=5)
    assert counts[1] == 0 and chi2_uniform_p(counts[[0, 2, 3, 4]]) > 1e-6
