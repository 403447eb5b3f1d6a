"""k-th nearest-neighbour distances of an embedding."""

from __future__ import annotations

import numpy as np
import pytest

from calibrate_fakes import line_embedding
from conftest import make_tiny_embedding
from deniable import InvalidParameterError
from deniable.calibrate import neighbour_distances
from deniable.metrics import pairwise_distances


def test_line_by_hand() -> None:
    # words at 0, 1, 3, 7: neighbour distances of w0 are 1, 3, 7; of w2 (at 3): 2, 3, 4
    emb = line_embedding([0, 1, 3, 7])
    res = neighbour_distances(emb, ks=(1, 2, 3))
    assert res.ks == (1, 2, 3) and not res.sampled
    np.testing.assert_allclose(res.distances[0], [1, 3, 7])
    np.testing.assert_allclose(res.distances[2], [2, 3, 4])
    np.testing.assert_allclose(res.at(1), [1, 1, 2, 4])
    with pytest.raises(InvalidParameterError):
        res.at(5)


@pytest.mark.parametrize("index", ["exact", "flat"])
def test_matches_brute_force(index: str) -> None:
    emb = make_tiny_embedding(300, 5, seed=4)
    res = neighbour_distances(emb, ks=(1, 2, 5, 10, 50), index=index, batch_size=64)
    d = pairwise_distances(emb.vectors, emb.vectors)
    np.fill_diagonal(d, np.inf)
    srt = np.sort(d, axis=1)
    np.testing.assert_allclose(res.distances, srt[:, [0, 1, 4, 9, 49]], rtol=1e-4, atol=1e-4)


def test_angular() -> None:
    emb = make_tiny_embedding(100, 4, seed=6)
    res = neighbour_distances(emb, ks=(1, 3), metric="angular")
    d = pairwise_distances(emb.vectors, emb.vectors, "angular")
    np.fill_diagonal(d, np.inf)
    np.testing.assert_allclose(res.distances, np.sort(d, axis=1)[:, [0, 2]], atol=1e-4)


def test_sample_percentiles_histogram_table() -> None:
    emb = make_tiny_embedding(400, 3, seed=8)
    res = neighbour_distances(emb, 50, ks=(1, 10, 100), rng=np.random.default_rng(0))
    assert len(res) == 50 and res.sampled and "sample of 50" in res.describe()
    pct = res.percentiles((5, 50, 95))
    assert pct.shape == (3, 3)
    assert np.all(np.diff(pct, axis=0) >= 0) and np.all(np.diff(pct, axis=1) >= 0)
    counts, edges = res.histogram(10, bins=7)
    assert counts.sum() == 50 and edges.size == 8
    table = res.table()
    assert [r["k"] for r in table] == [1, 10, 100] and "p50" in table[0]


def test_validation(tiny_embedding) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidParameterError, match="ks"):
        neighbour_distances(tiny_embedding, ks=(1, 8))  # only 7 other words
    with pytest.raises(InvalidParameterError, match="metric"):
        neighbour_distances(tiny_embedding, metric="cosine")
    with pytest.raises(InvalidParameterError, match="index"):
        neighbour_distances(tiny_embedding, index="ivf")
