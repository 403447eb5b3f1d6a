"""The exact decode's blocking (issue 43): equal blocks of rows and words, the same words whatever the shape.

The nearest decode (``ExactIndex``, k=1) and the posterior decode's pass 1 run the same product on
blocks of the same shape; the blocking is a speed choice only: the words do not depend on it (but
at float32 near-ties), nor on how a batch is split across decode workers.
"""

from __future__ import annotations

import numpy as np
import pytest

from deniable import _threads
from deniable.index.exact import _MIN_SPLIT, ExactIndex, row_block
from deniable.mechanisms._posterior import PosteriorDecoder
from deniable.priors import Prior


@pytest.mark.parametrize("m", [1, 7, 255, 256, 511, 1000, 1024, 1025, 3000, 16384])
@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("query_block", [64, 1024])
def test_row_blocks_are_equal_bounded_and_cover_the_batch(m: int, workers: int, query_block: int) -> None:
    size = row_block(m, query_block, workers)
    blocks = len(range(0, m, size))
    assert 1 <= size <= max(query_block, 1)
    assert blocks * size >= m > (blocks - 1) * size  # every row, once
    assert size - (m - (blocks - 1) * size) < blocks  # equal blocks (the last at most blocks-1 shorter)
    if workers > 1 and m >= workers * _MIN_SPLIT:
        assert blocks >= workers  # every worker has a block
        assert blocks % workers == 0 or blocks <= workers or blocks * _MIN_SPLIT > m


def test_three_thousand_rows_make_equal_blocks() -> None:
    assert row_block(3000, 1024, 1) == 1000  # 3 x 1,000, not 1,024 + 1,024 + 952
    assert row_block(3000, 1024, 2) == 750  # 4 blocks: 2 per worker
    assert row_block(100, 1024, 2) == 100  # too few rows to split


def test_nearest_words_do_not_depend_on_the_blocking() -> None:
    # BLAS may round a distance differently in the last bit at another position of a block (its
    # kernel's edges), so only float32 near-ties could differ between shapes; there are none here
    rng = np.random.default_rng(43)
    x = rng.normal(size=(5000, 12)).astype(np.float32)
    q = rng.normal(size=(1500, 12)).astype(np.float32)
    d0, i0 = ExactIndex(x, vocab_block=8192, query_block=256).search(q, 1)  # the previous default
    np.testing.assert_array_equal(i0[:, 0], ((q[:, None, :] - x[None]) ** 2).sum(-1).argmin(axis=1))
    for vb, qb in [(2048, 1024), (1024, 1024), (700, 333), (5000, 1504)]:
        d, i = ExactIndex(x, vocab_block=vb, query_block=qb).search(q, 1)
        np.testing.assert_array_equal(i, i0)
        np.testing.assert_allclose(d, d0, rtol=1e-5, atol=1e-5)


def test_a_split_across_workers_gives_the_same_words() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(3000, 10)).astype(np.float32)
    q = rng.normal(size=(2100, 10)).astype(np.float32)
    idx = ExactIndex(x)
    try:
        _threads.set_decode_workers(1)
        one = idx.search(q, 1)
        _threads.set_decode_workers(2)
        two = idx.search(q, 1)
    finally:
        _threads.set_decode_workers(None)
    np.testing.assert_array_equal(one[1], two[1])
    np.testing.assert_allclose(one[0], two[0], rtol=1e-5, atol=1e-5)


def _brute_posterior(noisy: np.ndarray, x: np.ndarray, logp: np.ndarray, eps: float) -> np.ndarray:
    dist = np.sqrt(((noisy[:, None, :].astype(np.float64) - x[None, :, :].astype(np.float64)) ** 2).sum(-1))
    score = logp[None, :] - eps * dist
    return np.argsort(-score, axis=1, kind="stable")[:, 0]


@pytest.mark.parametrize("eps", [0.5, 5.0, 40.0])
def test_posterior_pass_two_prefixes_and_groups_are_exact(eps: float) -> None:
    """Pass 2 scores only the columns whose penalty leaves room, in groups of rows by the columns they
    need: brute force's words for any group count, blocking and a prior in no particular order."""
    rng = np.random.default_rng(int(eps * 10))
    v = 3000
    x = rng.normal(size=(v, 6)).astype(np.float32)
    prior = Prior("random", rng.pareto(1.1, v) + 1e-3)
    noisy = (x[rng.integers(0, v, 600)] + rng.normal(size=(600, 6)) * 3 / eps).astype(np.float32)
    want = _brute_posterior(noisy, x, prior.log(), eps)
    for groups, vb, qb in [(1, 2048, 1024), (4, 2048, 1024), (16, 500, 97), (4, 64, 600)]:
        post = PosteriorDecoder(x, prior, eps, vocab_block=vb, query_block=qb)
        post._PASS2_GROUPS = groups  # type: ignore[misc]
        np.testing.assert_array_equal(post.decode(noisy), want)


def test_posterior_segments_are_equal_after_the_head() -> None:
    post = PosteriorDecoder(np.zeros((5000, 2), np.float32), Prior("flat", np.ones(5000)), 1.0)
    assert post._segments.tolist() == [0, 256, 512, 1024, 3012, 5000]
    widths = np.diff(PosteriorDecoder(np.zeros((50_000, 2), np.float32), Prior("f", np.ones(50_000)), 1.0)._segments)
    assert widths.max() <= 2048 and widths[3:].max() - widths[3:].min() <= 1
