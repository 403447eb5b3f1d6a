"""TEM's prepared k-NN build: the symmetric tiled search (several tiles, ragged edges, both workers)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conftest import make_tiny_embedding
from deniable.embedding import Embedding
from deniable.mechanisms.tem import _tables, _topk
from deniable.mechanisms.tem._geometry import Geometry
from deniable.mechanisms.tem._tables import _knn_heaps, _near_groups

#: whether numba's kernel path can be checked here (the fast extra; .ci/run installs it)
_HAS_NUMBA = importlib.util.find_spec("numba") is not None


def _screen_rows(geo: Geometry) -> np.ndarray:
    rows = np.empty((geo.size, geo.size), dtype=np.float32)
    geo.screen(np.arange(geo.size), rows)
    return -rows if geo.metric == "angular" else rows


#: the numpy path, the kernel on whole tiles, and the kernel on slabs of 5 rows (ragged: 5 + 2 of a
#: 7-row tile, 13 of 64 rows: 12 x 5 + 4), as the build offers its 1,024-row tiles in slabs of _tables._SUB
_PATHS = [(False, None), (True, None), (True, 5)]


def _use_path(monkeypatch: pytest.MonkeyPatch, path: tuple[bool, int | None]) -> bool:
    kernel, sub = path
    if kernel and not _HAS_NUMBA:
        pytest.skip("numba is not installed (the fast extra): the kernel path is checked by .ci/run")
    monkeypatch.setattr(_tables, "_SUB", sub or 1 << 30)
    return kernel


@pytest.mark.parametrize("path", _PATHS, ids=["numpy", "kernel", "kernel-slabs"])
@pytest.mark.parametrize("metric", ["euclidean", "angular"])
@pytest.mark.parametrize("tile", [7, 64])
@pytest.mark.parametrize("sample", [32, 4096])  # the seeds from a strided sample, or from every column
@pytest.mark.parametrize("v", [250, 1200])  # 1200: in k-means cluster order, with the clusters' seeds
def test_heaps_hold_the_smallest_keys_of_every_row(
    monkeypatch: pytest.MonkeyPatch, metric: str, tile: int, sample: int, v: int, path: tuple[bool, int | None]
) -> None:
    kernel = _use_path(monkeypatch, path)
    monkeypatch.setattr(_tables, "_SAMPLE", sample)
    k1 = 17
    geo = Geometry(make_tiny_embedding(v, 5, seed=3), metric)
    slack = 2.0 * geo._err(int(np.argmax(geo._norms)))
    groups, perm = _near_groups(geo.x, k1, metric == "angular")
    assert bool(groups) == (v == 1200) and np.array_equal(np.sort(perm), np.arange(v))
    lhs, partner = geo.key_operand(perm)  # checked below against the screen's own rows
    blocks = list(_knn_heaps(lhs, partner, k1, slack, tile=tile, groups=groups, kernel=kernel))
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


def test_finish_runs_on_the_workers_and_its_blocks_come_in_row_order() -> None:
    # the prepared build's finish (sketch, exact distances) is a task of the search's workers,
    # queued behind the next row of tiles; the caller gets finish's results in row order, and a
    # failing finish raises there after the blocks before it
    import threading

    geo = Geometry(make_tiny_embedding(1200, 5, seed=3), "euclidean")
    k1, tile = 17, 64
    slack = 2.0 * geo._err(int(np.argmax(geo._norms)))
    groups, perm = _near_groups(geo.x, k1, False)
    lhs, partner = geo.key_operand(perm)
    plain = list(_knn_heaps(lhs, partner, k1, slack, tile=tile, groups=groups))
    on: set[int] = set()

    def finish(s: int, keys: np.ndarray, ids: np.ndarray) -> tuple[str, int, np.ndarray, np.ndarray]:
        on.add(threading.get_ident())
        return "finished", s, keys, ids

    done = list(_knn_heaps(lhs, partner, k1, slack, tile=tile, groups=groups, finish=finish))
    assert [d[1] for d in done] == list(range(0, 1200, tile)) and all(d[0] == "finished" for d in done)
    for (s, keys, ids), (_, s2, keys2, ids2) in zip(plain, done, strict=True):
        assert s == s2 and np.array_equal(keys, keys2) and np.array_equal(ids, ids2)
    assert on and threading.get_ident() not in on

    def failing(s: int, keys: np.ndarray, ids: np.ndarray) -> int:
        if s == 5 * tile:
            raise ValueError("finish failed")
        return s

    got: list[int] = []
    with pytest.raises(ValueError, match="finish failed"):
        for s in _knn_heaps(lhs, partner, k1, slack, tile=tile, groups=groups, finish=failing):
            got.append(s)
    assert got == [0, tile, 2 * tile, 3 * tile, 4 * tile]


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


@pytest.mark.parametrize("path", _PATHS, ids=["numpy", "kernel", "kernel-slabs"])
@pytest.mark.parametrize("metric", ["euclidean", "angular"])
@pytest.mark.parametrize("tile", [7, 64])
def test_both_paths_keep_the_smallest_key_id_pairs_ties_by_id(
    monkeypatch: pytest.MonkeyPatch, metric: str, tile: int, path: tuple[bool, int | None]
) -> None:
    # integer coordinates: every float32 key is exact (euclidean), so equal keys are equal pairs'
    # distances, and duplicated words tie with everything; the build keeps the k1 smallest
    # (key, id), the lower id first among equal keys, whatever the order of the offers (and
    # whether a tile is offered whole or in slabs of rows)
    kernel = _use_path(monkeypatch, path)
    rng = np.random.default_rng(11)
    x = rng.integers(-2, 3, (900, 4)).astype(np.float32)
    x[100:140] = x[0]  # 41 copies of one word: more equal keys than k1 for its neighbours
    vectors = x if metric == "euclidean" else x + np.float32(0.5)  # angular: no zero vector
    geo = Geometry(Embedding([f"w{i}" for i in range(900)], vectors, name="ties"), metric)
    k1 = 17
    slack = 2.0 * geo._err(int(np.argmax(geo._norms)))
    groups, perm = _near_groups(geo.x, k1, metric == "angular")
    lhs, partner = geo.key_operand(perm)
    blocks = list(_knn_heaps(lhs, partner, k1, slack, tile=tile, groups=groups, kernel=kernel))
    keys, ids = np.concatenate([b[1] for b in blocks]), np.concatenate([b[2] for b in blocks])
    # the brute force over the build's own values: key(i, j) as the tile computes it (row i for
    # i <= j's tile, else row j)
    full = lhs @ partner(lhs).T
    blk = np.arange(900) // tile
    build = np.where(blk[:, None] <= blk[None, :], full, full.T)
    build = np.where(blk[:, None] == blk[None, :], full, build)  # the diagonal tile: row offers only
    codes = _topk.encode(build, np.broadcast_to(np.arange(900), build.shape))
    expect = np.sort(codes, axis=1)[:, :k1]
    assert np.array_equal(_topk.encode(keys, ids), expect)
    if metric == "euclidean":
        assert np.count_nonzero(keys[:, -1:] == keys[:, -2:-1]) > 100  # ties at the k1-th place were met


def test_reservoirs_keep_the_smallest_codes_in_any_order() -> None:
    # offers in random batches and orders, compactions included: the k1 smallest codes at most the seed
    rng = np.random.default_rng(12)
    n, k1, per = 40, 9, 300
    keys = rng.integers(-20, 20, (n, per)).astype(np.float32) / np.float32(4.0)
    keys[0] = np.abs(keys[0]) + np.float32(1.0)
    keys[0, :5] = -0.0  # -0.0 is +0.0: word 0's five smallest
    ids = np.tile(np.arange(per), (n, 1))
    seeds = np.sort(keys, axis=1)[:, k1 + 30].copy()
    res = _topk.Reservoirs(seeds, k1, 2 * k1)
    owners = np.repeat(np.arange(n), per)
    order = rng.permutation(owners.size)
    for part in np.array_split(order, 37):
        res.offer(owners[part], keys.reshape(-1)[part], ids.reshape(-1)[part])
    got_keys, got_ids = res.smallest(slice(0, n), [])
    codes = _topk.encode(keys + np.float32(0.0), ids)
    expect = np.sort(codes, axis=1)[:, :k1]
    assert np.array_equal(_topk.encode(got_keys, got_ids), expect)
    assert np.all(got_keys[0, :5] == 0.0) and not np.any(np.signbit(got_keys[0, :5]))
    assert np.all(res.limit >= expect[:, -1])  # a limit is never below the final k1-th code


def test_codes_order_keys_then_ids() -> None:
    k = np.array([-np.inf, -3.5, -1e-30, -0.0, 0.0, 1e-30, 2.0, 2.0, np.inf], dtype=np.float32)
    i = np.array([5, 1, 2, 9, 3, 0, 4, 7, 8])
    c = _topk.encode(k, i)
    assert np.all(np.diff(c.astype(np.float64)) >= 0) and c[3] > c[4]  # -0.0 as +0.0, then by id
    back_k, back_i = _topk.decode(c)
    assert np.array_equal(back_k, k + np.float32(0.0)) and np.array_equal(back_i, i)


@pytest.mark.skipif(not _HAS_NUMBA, reason="numba (the fast extra) not installed")
def test_kernel_select_is_a_partition() -> None:
    from deniable.mechanisms.tem._kernels import _select

    rng = np.random.default_rng(13)
    for size, k in [(2, 0), (2, 1), (3, 1), (50, 0), (50, 49), (514, 256), (385, 256)]:
        a = rng.permutation(np.arange(size, dtype=np.uint64) * np.uint64(7919))
        b = a.copy()
        _select(b, k)
        assert np.array_equal(np.sort(b), np.sort(a))
        assert b[k] == np.sort(a)[k] and np.all(b[:k] < b[k]) and np.all(b[k + 1 :] > b[k])


def test_numpy_is_forced_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DENIABLE_TEM_KERNEL", "numpy")
    assert _tables._tile_kernel() is None
