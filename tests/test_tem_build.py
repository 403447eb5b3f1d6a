"""TEM's prepared k-NN build: the symmetric tiled search (several tiles, ragged edges, both workers)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import make_tiny_embedding
from deniable.artefacts import prepare
from deniable.mechanisms import _tem_store
from deniable.mechanisms import tem as tem_module
from deniable.mechanisms._tem_geometry import Geometry
from deniable.mechanisms._tem_store import _knn_heaps, knn_entry


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


@pytest.mark.parametrize("metric", ["euclidean", "angular"])
def test_prepared_tables_over_many_tiles(monkeypatch: pytest.MonkeyPatch, metric: str) -> None:
    # the artefact built over several tiles (ragged last one) = the row-by-row tables
    k, v = 12, 300
    monkeypatch.setattr(tem_module, "_KNN_K", k)
    monkeypatch.setattr(_tem_store, "_TILE", 64)
    emb = make_tiny_embedding(v, 4, seed=51)
    (info,) = prepare(emb, ["tem"], metric=metric, show_progress=False)
    ids, dist = np.load(info.file("ids.npy")), np.load(info.file("dist.npy"))
    geo = Geometry(emb, metric)
    row = np.empty((1, v), dtype=np.float32)
    for w in range(v):
        geo.screen(np.array([w]), row)
        lazy_ids, lazy_dist = knn_entry(geo, w, row[0], k, 32)
        assert np.array_equal(ids[w], lazy_ids)
        assert np.array_equal(dist[w, :k], geo.exact(w, ids[w, :k].astype(np.int64)))  # bit for bit
        outside = np.setdiff1d(np.arange(v), ids[w, :k])
        assert dist[w, k] <= geo.exact(w, outside).min()  # d_env: a proven lower bound
        assert np.isclose(dist[w, k], lazy_dist[k], rtol=1e-5, atol=1e-6)
