"""TEM's prepared k-NN build: the symmetric tiled search (several tiles, ragged edges, both workers)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import make_tiny_embedding
from deniable.mechanisms.tem import _tables
from deniable.mechanisms.tem._geometry import Geometry
from deniable.mechanisms.tem._tables import _knn_heaps, _near_groups


def _screen_rows(geo: Geometry) -> np.ndarray:
    rows = np.empty((geo.size, geo.size), dtype=np.float32)
    geo.screen(np.arange(geo.size), rows)
    return -rows if geo.metric == "angular" else rows


@pytest.mark.parametrize("metric", ["euclidean", "angular"])
@pytest.mark.parametrize("tile", [7, 64])
@pytest.mark.parametrize("sample", [32, 4096])  # the seeds from a strided sample, or from every column
@pytest.mark.parametrize("v", [250, 1200])  # 1200: in k-means cluster order, with the clusters' seeds
def test_heaps_hold_the_smallest_keys_of_every_row(
    monkeypatch: pytest.MonkeyPatch, metric: str, tile: int, sample: int, v: int
) -> None:
    monkeypatch.setattr(_tables, "_SAMPLE", sample)
    k1 = 17
    geo = Geometry(make_tiny_embedding(v, 5, seed=3), metric)
    slack = 2.0 * geo._err(int(np.argmax(geo._norms)))
    groups, perm = _near_groups(geo.x, k1, metric == "angular")
    assert bool(groups) == (v == 1200) and np.array_equal(np.sort(perm), np.arange(v))
    lhs, partner = geo.key_operand(perm)  # checked below against the screen's own rows
    blocks = list(_knn_heaps(lhs, partner, k1, slack, tile=tile, groups=groups))
    assert [b[0] for b in blocks] == list(range(0, v, tile))  # every block, in row order
    keys, ids = np.empty((v, k1), dtype=np.float32), np.empty((v, k1), dtype=np.int64)
    keys[perm] = np.concatenate([b[1] for b in blocks])
    ids[perm] = perm[np.concatenate([b[2] for b in blocks])]
    full = _screen_rows(geo)
    expect = np.sort(full, axis=1)[:, :k1]
    # the same float32 quantity, possibly summed in the other orientation (i, j) / (j, i)
    assert np.allclose(keys, expect, rtol=1e-5, atol=1e-5)
    assert np.all(np.diff(keys, axis=1) >= 0)
    for w in range(v):
        assert np.unique(ids[w]).size == k1  # k1 distinct words
        outside = np.setdiff1d(np.arange(v), ids[w])
        assert full[w, outside].min() >= keys[w, -1] - 1e-5  # nothing closer was left out


@pytest.mark.parametrize("metric", ["euclidean", "angular", "manhattan", "chebyshev"])
def test_bound_values_rows_are_the_row_by_row_bounds(metric: str) -> None:
    # the vectorized per-word error bound (the builds' path) is bit for bit the per-word one
    geo = Geometry(make_tiny_embedding(300, 6, seed=8), metric)
    ws = np.random.default_rng(1).permutation(300)[:64]
    values = np.random.default_rng(2).uniform(-1.0, 40.0, size=(64, 5)).astype(np.float32)
    rows = geo.bound_values_rows(ws, values)
    assert rows.dtype == np.float32
    for i, w in enumerate(ws.tolist()):
        assert np.array_equal(rows[i], geo.bound_values(w, values[i]))


@pytest.mark.parametrize("metric", ["euclidean", "angular", "manhattan", "chebyshev"])
def test_exact_block_is_the_exact_distance_bit_for_bit(metric: str) -> None:
    # the build's exact distances (each word's vector read once) are those of Geometry.exact
    geo = Geometry(make_tiny_embedding(400, 7, seed=5), metric)
    rng = np.random.default_rng(4)
    ws = rng.integers(0, 400, 12)
    ys = rng.integers(0, 400, (12, 33))
    ys[2, 7] = ws[2]  # a word and itself: exactly 0
    block = geo.exact_block(ws, ys)
    assert np.array_equal(block, geo.exact_paired(ws[:, None], ys))
    assert np.array_equal(block, np.stack([geo.exact(int(w), ys[i]) for i, w in enumerate(ws)]))
    assert block[2, 7] == 0.0


def test_drop_largest_is_what_a_stable_sort_leaves() -> None:
    # the (k+1)-th key and the k nearest ids without sorting, ties included: the equal largest
    # key furthest along the row is the one left out, as after a stable ascending sort
    rng = np.random.default_rng(6)
    keys = rng.integers(0, 5, (300, 9)).astype(np.float32)  # many ties
    ids = rng.permutation(300 * 9).reshape(300, 9).astype(np.int64)
    largest, rest = _tables._drop_largest(keys, ids)
    order = np.argsort(keys, axis=1, kind="stable")
    expect_keys = np.take_along_axis(keys, order, axis=1)
    expect_ids = np.take_along_axis(ids, order, axis=1)
    assert np.array_equal(largest, expect_keys[:, -1])
    assert np.array_equal(np.sort(rest, axis=1), np.sort(expect_ids[:, :-1], axis=1))


@pytest.mark.parametrize("metric", ["euclidean", "angular"])
def test_unordered_heaps_hold_what_the_ordered_ones_hold(metric: str) -> None:
    # ordered=False (the build's path) yields the same heaps, in heap order
    k1 = 17
    geo = Geometry(make_tiny_embedding(1200, 5, seed=3), metric)
    slack = 2.0 * geo._err(int(np.argmax(geo._norms)))
    groups, perm = _near_groups(geo.x, k1, metric == "angular")
    lhs, partner = geo.key_operand(perm)
    ordered = list(_knn_heaps(lhs, partner, k1, slack, tile=64, groups=groups))
    raw = [
        (s, k.copy(), i.copy())
        for s, k, i in _knn_heaps(lhs, partner, k1, slack, tile=64, groups=groups, ordered=False)
    ]
    for (s, keys, ids), (s2, hk, hi) in zip(ordered, raw, strict=True):
        assert s == s2
        assert np.array_equal(np.sort(hk, axis=1), keys)
        largest, rest = _tables._drop_largest(hk, hi)
        assert np.array_equal(largest, keys[:, -1])
        assert np.array_equal(np.sort(rest, axis=1), np.sort(ids[:, :-1], axis=1))
