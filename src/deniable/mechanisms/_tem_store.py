"""TEM's tables: an in-memory LRU for tables built during a run, and the prepared k-NN tables.

Two kinds of table exist (both ``(ids, dist)``):

- ball tables ``L_w = {y : d(w, y) <= gamma}`` (sorted int32 ids, exact float64
  distances), built for the words met in a run;
- k-NN envelope tables (see ``TruncatedExponential._build_knn``): the k nearest words
  with exact distances, a proven lower bound ``d_env`` on the distance of every other
  word, and a sketch of the far distances.

**Nothing built from the words of a run is written to disk** (it would record which words
were privatized): such tables live in :class:`TableStore`, a per-process LRU bounded in
bytes. What is on disk is the *prepared* k-NN artefact for the WHOLE vocabulary
(:func:`build_knn_artefact`, registered with :mod:`deniable.artefacts` as ``"tem-knn"``): a
function of the embedding and the metric only, two ``(V, k + 1 + sketch)`` arrays
memory-mapped by :class:`PreparedKnn`.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._progress import progress
from ..embedding import Embedding, Vocabulary
from ._tem_geometry import Geometry

__all__ = ["KNN_KIND", "PreparedKnn", "TableStore", "build_knn_artefact", "knn_entry"]

Table = tuple[npt.NDArray[np.int32], npt.NDArray[np.float64]]

#: The artefact kind of the prepared k-NN tables (deniable.artefacts).
KNN_KIND = "tem-knn"
#: Rows and columns of one tile of the prepared build's symmetric k-NN search.
_TILE = 1024
#: Worker threads of the prepared build (one BLAS thread each).
_WORKERS = 2
#: Size of the strided sample of the screening row behind the sketch and the threshold.
_SAMPLE = 4096
#: rows of exact neighbour distances computed at once in the build (k x dim float64 each)
_EXACT_CHUNK = 16


class TableStore:
    """Tables by word id, in memory only: an LRU bounded in bytes, safe across threads."""

    def __init__(self, *, memory_bytes: int) -> None:
        self.memory_bytes = memory_bytes
        self._lock = threading.Lock()
        self._lru: OrderedDict[int, Table] = OrderedDict()
        self._lru_bytes = 0

    def get_many(self, words: npt.NDArray[np.int64]) -> list[Table | None]:
        """The table of each word, or None where none is held."""
        with self._lock:
            out: list[Table | None] = []
            for w in words.tolist():
                t = self._lru.get(w)
                if t is not None:
                    self._lru.move_to_end(w)
                out.append(t)
            return out

    def put(self, w: int, table: Table) -> None:
        """Remember a freshly built table (evicting the least recently used)."""
        size = table[0].nbytes + table[1].nbytes
        with self._lock:
            if w in self._lru:
                return
            self._lru[w] = table
            self._lru_bytes += size
            while self._lru_bytes > self.memory_bytes and len(self._lru) > 1:
                _, old = self._lru.popitem(last=False)
                self._lru_bytes -= old[0].nbytes + old[1].nbytes

    @property
    def memory_used(self) -> int:
        """Bytes of tables held."""
        return self._lru_bytes

    def __len__(self) -> int:
        return len(self._lru)


class PreparedKnn:
    """The prepared k-NN tables of the whole vocabulary, read-only, memory-mapped.

    Every process maps the same files (one copy in the page cache, however many workers).
    ``prefault=True`` (history-free mode) touches every page once when the tables are
    opened, so that later calls never take a page fault whose cost would depend on which
    rows earlier calls read; what stays is only what the kernel does under memory pressure
    (eviction), which docs/threat-model.md names.
    """

    def __init__(self, folder: Path, k: int, *, prefault: bool = False) -> None:
        self.k = k
        # plain ndarray views of the memory maps: indexing them skips np.memmap's Python layer
        self.ids = np.asarray(np.load(folder / "ids.npy", mmap_mode="r", allow_pickle=False))
        self.dist = np.asarray(np.load(folder / "dist.npy", mmap_mode="r", allow_pickle=False))
        self.disk_bytes = self.ids.nbytes + self.dist.nbytes
        self.prefaulted = prefault
        if prefault:
            for arr in (self.ids, self.dist):
                _touch_pages(arr)

    def get_many(self, words: npt.NDArray[np.int64]) -> list[Table | None]:
        return [(self.ids[w], self.dist[w]) for w in words.tolist()]

    def rows(self, words: npt.NDArray[np.int64]) -> Table:
        """The tables of ``words`` stacked: ``(len(words), width)`` ids and distances (copies)."""
        return self.ids[words], self.dist[words]


def _touch_pages(a: np.ndarray, page: int = 4096) -> None:
    """Read one byte of every page of ``a`` (C-contiguous), faulting the whole mapping in now."""
    raw = a.reshape(-1).view(np.uint8)
    int(raw[::page].sum(dtype=np.uint64))


# -- one k-NN table from a screening row (the lazy path and the fallback of the build) ------------


def knn_entry(geo: Geometry, w: int, row: np.ndarray, k: int, n_sketch: int) -> Table:
    """The k-NN table of ``w`` from its float32 screening row.

    ``ids``: E = the k words with the smallest screening key (sorted), then ``1 + n_sketch``
    times -1; ``dist``: their exact distances, then ``d_env`` (a proven lower bound on the
    distance of every word outside E), then ``n_sketch`` quantiles of lower bounds on the
    far distances (from a strided sample of the row).
    """
    v = geo.size
    sketch = np.full(n_sketch, math.inf)
    angular = geo.metric == "angular"
    if k >= v:
        ids = np.arange(v, dtype=np.int64)
        d_env = math.inf
    else:
        key = -row if angular else row  # smaller = closer
        # a threshold keeping ~4k candidates, from a strided sample; widened until > k pass
        stride = max(1, v // _SAMPLE)
        sample = np.sort(key[::stride])
        q = 4.0 * (k + 1) / v
        while True:
            thr = sample[min(sample.size - 1, int(q * sample.size))]
            cand = np.flatnonzero(key <= thr)
            if cand.size > k or q >= 1.0:
                break
            q *= 4.0
        if cand.size <= k:
            cand = np.arange(v)
        kc = key[cand]
        part = np.argpartition(kc, k)
        ids = np.sort(cand[part[:k]]).astype(np.int64)
        kth = kc[part[k]]  # every word outside E has key >= kth
        d_env, sketch = _bounds(geo, w, float(kth), sample, n_sketch)
    dist = geo.exact(w, ids)
    return (
        np.concatenate([ids, np.full(1 + n_sketch, -1)]).astype(np.int32),
        np.concatenate([dist, [d_env], sketch]).astype(np.float64),
    )


def _bounds(geo: Geometry, w: int, kth: float, sample: np.ndarray, n_sketch: int) -> tuple[float, np.ndarray]:
    """``d_env`` from the (k+1)-th key and the sketch from the sorted sampled keys."""
    angular = geo.metric == "angular"
    far = sample[np.searchsorted(sample, np.float32(kth), side="left") :]  # sampled words outside E
    raw = np.empty(1 + n_sketch, dtype=np.float32)
    raw[0] = kth
    if far.size:
        at = ((np.arange(n_sketch) + 0.5) * (far.size / n_sketch)).astype(np.int64)
        raw[1:] = far[at]
    else:
        raw[1:] = kth
    b = geo.bound_values(w, -raw if angular else raw).astype(np.float64)
    return float(b[0]), b[1:]


# -- the prepared build --------------------------------------------------------------------------


class _NpyWriter:
    """Write a C-order ``.npy`` array block by block, hashing the bytes as they go."""

    def __init__(self, path: Path, dtype: np.dtype[Any], shape: tuple[int, ...]) -> None:
        self.fh = open(path, "wb")  # noqa: SIM115 - closed by close()
        self.hash = hashlib.sha256()
        self.dtype = dtype
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_2_0(self, header)

    def write(self, data: bytes | memoryview) -> int:
        self.hash.update(data)
        return self.fh.write(data)

    def block(self, arr: np.ndarray) -> None:
        self.write(np.ascontiguousarray(arr, dtype=self.dtype).tobytes())

    def close(self) -> str:
        self.fh.close()
        return self.hash.hexdigest()


def build_knn_artefact(
    embedding: Vocabulary, params: dict[str, Any], folder: Path, show_progress: bool | None
) -> dict[str, str]:
    """Write ``ids.npy`` and ``dist.npy``: the k-NN table of every word of ``embedding``.

    Euclidean and angular: blocked exact k-NN search (faiss ``IndexFlatL2`` /
    ``IndexFlatIP``: one BLAS product per block of queries and a partial top-(k+1) per
    row), in bounded memory; the exact float64 distances of E come from
    :meth:`Geometry.exact_paired`. Manhattan and chebyshev: screening rows block by block.
    """
    if not isinstance(embedding, Embedding):
        raise Embedding.type_error(embedding)
    metric, k, n_sketch = str(params["metric"]), int(params["k"]), int(params["sketch"])
    geo = Geometry(embedding, metric)
    v = geo.size
    width = k + 1 + n_sketch
    ids_w = _NpyWriter(folder / "ids.npy", np.dtype(np.int32), (v, width))
    dist_w = _NpyWriter(folder / "dist.npy", np.dtype(np.float64), (v, width))
    what = f"TEM: k-NN tables of {v:,} words (k={k}, {metric})"
    try:
        with progress(v, what, enabled=show_progress) as advance:
            if k < v and geo.screening and metric in ("euclidean", "angular"):
                blocks = _knn_blocks_symmetric(geo, k, n_sketch)
            else:
                blocks = _knn_blocks_rows(geo, k, n_sketch)
            for ids, dist in blocks:
                ids_w.block(ids)
                dist_w.block(dist)
                advance(ids.shape[0])
    finally:
        sums = {"ids.npy": ids_w.close(), "dist.npy": dist_w.close()}
    return sums


def _knn_blocks_rows(geo: Geometry, k: int, n_sketch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    v = geo.size
    block = max(1, min(128, (64 << 20) // (4 * v)))
    buf = np.empty((block, v), dtype=np.float32)
    for s in range(0, v, block):
        q = np.arange(s, min(v, s + block), dtype=np.int64)
        rows = buf[: q.size]
        geo.screen(q, rows)
        entries = [knn_entry(geo, int(w), rows[r], k, n_sketch) for r, w in enumerate(q.tolist())]
        yield np.stack([e[0] for e in entries]), np.stack([e[1] for e in entries])


def _knn_blocks_symmetric(geo: Geometry, k: int, n_sketch: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Blocks of k-NN tables from the symmetric blocked search (euclidean and angular).

    The keys are float32 ``|q|^2 + |y|^2 - 2 q.y`` (euclidean) or ``-q.y`` of unit
    vectors (angular), the quantities of :meth:`Geometry.screen` (smaller = closer); the
    pair ``(i, j)`` is computed once and feeds the heaps of both words, in an order of
    summation that may differ from the row's own, which the a priori error bound of
    :meth:`Geometry.bound_values` allows, so ``d_env`` from the (k+1)-th key is a proven
    lower bound.
    """
    v, n = geo.size, geo.dim
    angular = geo.metric == "angular"
    first, second = geo._block_operands(np.dtype(np.float32))  # the operands of Geometry.screen
    add_rows: np.ndarray | None

    def left(i0: int, i1: int) -> np.ndarray:
        if angular:
            return np.negative(first[i0:i1])  # -unit rows: keys -cos, exact negations of the cosines
        rows = np.empty((i1 - i0, n + 1), dtype=np.float32)
        rows[:, :-1] = geo.x[i0:i1]
        rows[:, -1] = 1.0
        return rows

    if angular:
        right, add_rows = second, None
    else:
        right, add_rows = first, geo._sq  # [-2 y ; |y|^2], |q|^2
    sample_t = np.ascontiguousarray(right[:, :: max(1, v // _SAMPLE)])
    # two float32 evaluations of one key differ by at most twice the a priori error bound
    slack = 2.0 * geo._err(int(np.argmax(geo._norms)))
    for s, keys, nn in _knn_heaps(left, right, add_rows, k + 1, slack):
        q = np.arange(s, s + keys.shape[0], dtype=np.int64)
        e_ids = np.sort(nn[:, :k], axis=1)
        kth32 = keys[:, k]
        # the sketch: the same order statistics of the sampled far keys as knn_entry takes
        sample = left(s, s + q.size) @ sample_t
        if add_rows is not None:
            sample += add_rows[q][:, None]
        sample.sort(axis=1)
        inside = np.count_nonzero(sample < kth32[:, None], axis=1)  # sampled keys < kth
        n_s = sample.shape[1]
        far_n = n_s - inside
        at = inside[:, None] + ((np.arange(n_sketch) + 0.5)[None, :] * (far_n[:, None] / n_sketch)).astype(np.int64)
        raw = np.empty((q.size, 1 + n_sketch), dtype=np.float32)
        raw[:, 0] = kth32
        picked = np.take_along_axis(sample, np.minimum(at, n_s - 1), axis=1)
        raw[:, 1:] = np.where(far_n[:, None] > 0, picked, kth32[:, None])
        env = geo.bound_values_rows(q, -raw if angular else raw).astype(np.float64)
        # rows at once (``q[:, None]`` broadcasts against the k neighbours in exact_paired):
        # bit for bit the distances of Geometry.exact row by row, in chunks of bounded memory
        exact = np.empty((q.size, k))
        for c in range(0, q.size, _EXACT_CHUNK):
            exact[c : c + _EXACT_CHUNK] = geo.exact_paired(q[c : c + _EXACT_CHUNK, None], e_ids[c : c + _EXACT_CHUNK])
        ids = np.concatenate([e_ids, np.full((q.size, 1 + n_sketch), -1)], axis=1)
        yield ids, np.concatenate([exact, env], axis=1)


def _knn_heaps(
    left: Callable[[int, int], np.ndarray],
    right: np.ndarray,
    add_rows: np.ndarray | None,
    k1: int,
    slack: float,
    *,
    tile: int | None = None,
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """The ``k1`` smallest keys of every row, ``key(i, j) = left(i, i + 1) @ right[:, j] (+ add_rows[i])``.

    ``left(i0, i1)`` gives the left operand's rows ``i0:i1`` (built per tile, not held).
    The key must be symmetric in exact arithmetic (``key(i, j) = key(j, i)`` up to float32
    rounding): each tile ``(I, J)``, ``I <= J``, is computed once (one float32 BLAS product
    of ``tile x tile``) and feeds the faiss max-heaps of its rows (every value) and of its
    columns (only values at most the column's current heap top, which only decreases, and
    at most its seed: the k1-th smallest key over a strided sample of columns plus
    ``slack``, a bound on the difference of two float32 evaluations of one key; so at least
    k1 keys of every column pass and none of its k1 smallest is dropped).
    Two worker threads with single-threaded BLAS and faiss share the tiles; heap updates
    and the reads of heap tops hold a lock. Yields ``(start, keys, ids)`` per block of
    ``tile`` rows, in row order, as soon as the block is final (keys ascending,
    ``(rows, k1)`` float32 and int64); the next row of tiles is already running meanwhile.
    Memory: the heaps of all rows, ``12 k1`` bytes per row.
    """
    import faiss

    tile = tile or _TILE
    v = right.shape[1]
    vals = np.empty((v, k1), dtype=np.float32)
    nn = np.empty((v, k1), dtype=np.int64)
    heaps: Any = faiss.float_maxheap_array_t()  # (the stubs miss addn's offsets)
    heaps.k, heaps.nh = k1, v
    heaps.val, heaps.ids = faiss.swig_ptr(vals), faiss.swig_ptr(nn)
    heaps.heapify()
    top = vals[:, 0]  # the largest kept key of each heap
    lock = threading.Lock()
    starts = list(range(0, v, tile))
    seed = np.full(v, np.inf, dtype=np.float32)
    sample = right[:, :: max(1, v // _SAMPLE)]

    def seed_rows(i0: int) -> None:
        i1 = min(v, i0 + tile)
        g = left(i0, i1) @ sample
        if add_rows is not None:
            g += add_rows[i0:i1, None]
        kth = np.partition(g, k1 - 1, axis=1)[:, k1 - 1].astype(np.float64) + slack
        seed[i0:i1] = np.nextafter(kth.astype(np.float32), np.float32(np.inf))  # rounded up

    def one_tile(i0: int, j0: int) -> None:
        i1, j1 = min(v, i0 + tile), min(v, j0 + tile)
        c = j1 - j0
        g = left(i0, i1) @ right[:, j0:j1]
        if add_rows is not None:
            g += add_rows[i0:i1, None]
        if i0 != j0:  # the column words' heaps: keep only what can enter them (cheap filter)
            with lock:
                tc = np.minimum(top[j0:j1], seed[j0:j1])
            hit = np.flatnonzero(g <= tc[None, :])
            col = (hit % c).astype(np.int16 if c <= 1 << 15 else np.int64)  # int16: a radix sort
            order = np.argsort(col, kind="stable")
            col, src, key = col[order], (hit // c)[order], g.reshape(-1)[hit[order]]
        with lock:  # the row words' heaps: every value (faiss compares with the heap tops)
            heaps.addn(c, faiss.swig_ptr(g), j0, i0, i1 - i0)
        if i0 == j0 or col.size == 0:
            return
        head = np.flatnonzero(np.r_[True, col[1:] != col[:-1]])
        counts = np.diff(np.r_[head, col.size])
        grp = np.repeat(np.arange(head.size), counts)
        pos = np.arange(col.size) - head[grp]
        # padded rows of values per column (+inf never enters a heap): a first slab about
        # twice the mean count wide, then the few longer columns' rest
        w = max(1, 2 * -(-col.size // head.size))
        for lo, hi in ((0, w), (w, int(counts.max()))):
            if hi <= lo:
                continue
            take = (pos >= lo) & (pos < hi) if lo else pos < hi
            cols = np.flatnonzero(counts > lo)  # groups with entries in this slab
            row = np.searchsorted(cols, grp[take])
            pv = np.full((cols.size, hi - lo), np.inf, dtype=np.float32)
            pv[row, pos[take] - lo] = key[take]
            pi = np.full((cols.size, hi - lo), -1, dtype=np.int64)
            pi[row, pos[take] - lo] = src[take] + i0
            subset = col[head[cols]].astype(np.int64) + j0
            with lock:
                heaps.addn_query_subset_with_ids(
                    cols.size, faiss.swig_ptr(subset), hi - lo, faiss.swig_ptr(pv), faiss.swig_ptr(pi), hi - lo
                )

    omp = faiss.omp_get_max_threads()
    with _single_threaded_blas(), ThreadPoolExecutor(_WORKERS) as pool:
        faiss.omp_set_num_threads(1)
        try:
            if sample.shape[1] >= k1:
                for f in [pool.submit(seed_rows, i0) for i0 in starts]:
                    f.result()
            pending = [pool.submit(one_tile, starts[0], j0) for j0 in starts]
            for b, i0 in enumerate(starts):
                for f in pending:
                    f.result()
                nxt = starts[b + 1] if b + 1 < len(starts) else None
                pending = [] if nxt is None else [pool.submit(one_tile, nxt, j0) for j0 in starts if j0 >= nxt]
                i1 = min(v, i0 + tile)
                order = np.argsort(vals[i0:i1], axis=1, kind="stable")
                keys = np.take_along_axis(vals[i0:i1], order, axis=1)
                ids = np.take_along_axis(nn[i0:i1], order, axis=1)
                if np.any(ids < 0):  # cannot happen: every row meets all v >= k1 columns
                    raise RuntimeError("k-NN build: a heap was not filled")
                yield i0, keys, ids
        finally:
            for f in pending:
                f.cancel()
            faiss.omp_set_num_threads(omp)


def _single_threaded_blas() -> AbstractContextManager[Any]:
    """One BLAS thread per worker while the build's two workers run (when threadpoolctl is there)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional: only slower without it
        return nullcontext()
    return threadpool_limits(1, user_api="blas")
