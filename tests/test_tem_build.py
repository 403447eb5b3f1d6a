"""TEM's prepared k-NN build: the symmetric tiled search (several tiles, ragged edges, both workers)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import make_tiny_embedding
from deniable.mechanisms import _tem_store
from deniable.mechanisms._tem_geometry import Geometry
from deniable.mechanisms._tem_store import _knn_heaps


def _screen_rows(geo: Geometry) -> np.ndarray:
    rows = np.empty((geo.size, geo.size), dtype=np.float32)
    geo.screen(np.arange(geo.size), rows)
    return -rows if geo.metric == "angular" else rows


@pytest.mark.parametrize("metric", ["euclidean", "angular"])
@pytest.mark.parametrize("tile", [7, 64])
@pytest.mark.parametrize("sample", [32, 4096])  # the seeds from a strided sample, or from every column
def test_heaps_hold_the_smallest_keys_of_every_row(
    monkeypatch: pytest.MonkeyPatch, metric: str, tile: int, sample: int
) -> None:
    monkeypatch.setattr(_tem_store, "_SAMPLE", sample)
    v, k1 = 250, 17
    geo = Geometry(make_tiny_embedding(v, 5, seed=3), metric)
    first, second = geo._block_operands(np.dtype(np.float32))
    if metric == "angular":
        rows, right, add = -first, second, None
    else:
        rows = np.hstack([geo.x, np.ones((v, 1), dtype=np.float32)])
        right, add = first, geo._sq

    def left(i0: int, i1: int) -> np.ndarray:
        return rows[i0:i1]

    slack = 2.0 * geo._err(int(np.argmax(geo._norms)))
    blocks = list(_knn_heaps(left, right, add, k1, slack, tile=tile))
    assert [b[0] for b in blocks] == list(range(0, v, tile))  # every block, in row order
    keys = np.concatenate([b[1] for b in blocks])
    ids = np.concatenate([b[2] for b in blocks])
    full = _screen_rows(geo)
    expect = np.sort(full, axis=1)[:, :k1]
    # the same float32 quantity, possibly summed in the other orientation (i, j) / (j, i)
    assert np.allclose(keys, expect, rtol=1e-5, atol=1e-5)
    assert np.all(np.diff(keys, axis=1) >= 0)
    for w in range(v):
        assert np.unique(ids[w]).size == k1  # k1 distinct words
        outside = np.setdiff1d(np.arange(v), ids[w])
        assert full[w, outside].min() >= keys[w, -1] - 1e-5  # nothing closer was left out
