"""TEM's tables: an in-memory LRU for tables built during a run, and the prepared k-NN tables.

Two kinds of table exist (both ``(ids, dist)``):

- ball tables ``L_w = {y : d(w, y) <= gamma}`` (sorted int32 ids, exact float64
  distances), built for the words met in a run;
- k-NN envelope tables (see :func:`._lazy.build_knn`): the k nearest words
  with exact distances, a proven lower bound ``d_env`` on the distance of every other
  word, and a sketch of the far distances.

**Nothing built from the words of a run is written to disk** (it would record which words
were privatized): such tables live in :class:`TableStore`, a per-process LRU bounded in
bytes. What is on disk is the *prepared* k-NN artefact for the WHOLE vocabulary
(:func:`build_knn_artefact`, registered with :mod:`deniable.artefacts` as ``"tem-knn"`` when
this module is imported; its key is :func:`knn_artefact_params`): a function of the
embedding and the metric only, two ``(V, k + 1 + sketch)`` arrays memory-mapped by
:class:`PreparedKnn`.

May import: :mod:`._geometry`, :mod:`._shared`, :mod:`._topk`, :mod:`._kernels` (lazily, when
numba imports), and the library below the mechanisms
(:mod:`deniable.artefacts`, :mod:`deniable.embedding`, :mod:`deniable.metrics`, ``_progress``).
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._progress import progress
from ...artefacts import register_kind
from ...embedding import Embedding, Vocabulary
from ...metrics import unit_rows
from ._geometry import Geometry
from ._shared import Table, build_workers, cluster_labels, single_threaded_blas, touch_pages
from ._topk import Reservoirs

__all__ = [
    "KNN_KIND",
    "KNN_SKETCH",
    "PreparedKnn",
    "TableStore",
    "build_knn_artefact",
    "knn_artefact_params",
    "knn_entry",
    "knn_k",
]

#: The artefact kind of the prepared k-NN tables (deniable.artefacts).
KNN_KIND = "tem-knn"
#: Neighbours kept per word by the k-NN envelope sampler (its tables do not depend on
#: epsilon or gamma, only on the embedding and the metric).
_KNN_K = 256
#: A k-NN table also keeps this many quantiles of the distances to the words outside E
#: (lower bounds, from a strided sample of the scan): a sketch of the far mass, for the
#: sampler's cost estimate (:mod:`._envelope`). Without it, the bound (envelope mass / E
#: mass) is far too pessimistic at small eps (median 960 against 8 proposals really needed
#: at eps = 2 on GloVe).
KNN_SKETCH = 32
#: Rows and columns of one tile of the prepared build's symmetric k-NN search.
_TILE = 1024
#: Rows of a tile computed and offered at once (the kernel path): a slab of ``_SUB x _TILE``
#: float32 keys (1 MB) that BLAS writes and the kernel reads in this core's L2 cache, where the
#: whole 4 MB tile went through L3 (the k-NN search at 200k words 0.90-0.95x, docs/performance.md)
_SUB = 256
#: Size of the strided sample of the screening row behind the sketch and the threshold.
_SAMPLE = 4096
#: rows of exact neighbour distances computed at once in the build (k x dim float64 each)
_EXACT_CHUNK = 16
#: rows of a tile behind one minimum in the column filter of the prepared build (numpy path)
_CHUNK = 16
#: a word's reservoir in the prepared build holds this many times k1 codes (:mod:`._topk`): 8 bytes
#: a code, so the memory of faiss's heaps before (12 bytes an entry); 2x measured no faster
_RESERVOIR = 1.5


def knn_artefact_params(embedding: Vocabulary, metric: str) -> dict[str, object]:
    """Parameters of the prepared k-NN artefact TEM reads for ``embedding`` and ``metric``
    (``k``: the neighbours of every table, in memory too)."""
    return {"metric": metric, "k": knn_k(embedding.size), "sketch": KNN_SKETCH, "format": 1}


def knn_k(size: int) -> int:
    """The neighbours of every k-NN table over a vocabulary of ``size`` words (prepared or in memory)."""
    return min(_KNN_K, size)


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
                touch_pages(arr)

    def get_many(self, words: npt.NDArray[np.int64]) -> list[Table | None]:
        return [(self.ids[w], self.dist[w]) for w in words.tolist()]

    def rows(self, words: npt.NDArray[np.int64]) -> Table:
        """The tables of ``words`` stacked: ``(len(words), width)`` ids and distances (copies)."""
        return np.take(self.ids, words, axis=0), np.take(self.dist, words, axis=0)


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


class _RowWriter:
    """A C-order ``.npy`` array of ``shape`` written row by row at given row numbers (``os.pwrite``).

    The file has its full size from the start; rows arrive in any order (the build's
    cluster order) and are never all held in memory.
    """

    def __init__(self, path: Path, dtype: np.dtype[Any], shape: tuple[int, int]) -> None:
        self.dtype = dtype
        header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
        with open(path, "wb") as fh:
            np.lib.format.write_array_header_2_0(fh, header)
            self.offset = fh.tell()
        self.row_bytes = dtype.itemsize * shape[1]
        self.fd = os.open(path, os.O_RDWR)
        os.ftruncate(self.fd, self.offset + self.row_bytes * shape[0])

    def rows(self, at: npt.NDArray[np.int64], arr: np.ndarray) -> None:
        """Write ``arr[r]`` as row ``at[r]``: one write per run of consecutive row numbers."""
        arr = np.ascontiguousarray(arr, dtype=self.dtype)
        order = np.argsort(at, kind="stable")
        at, arr = at[order], arr[order]
        cut = np.flatnonzero(np.diff(at) != 1) + 1
        for lo, hi in zip(np.r_[0, cut].tolist(), np.r_[cut, at.size].tolist(), strict=True):
            data = arr[lo:hi].tobytes()
            off = self.offset + int(at[lo]) * self.row_bytes
            while data:
                done = os.pwrite(self.fd, data, off)
                data, off = data[done:], off + done

    def close(self) -> None:
        os.close(self.fd)


def build_knn_artefact(
    embedding: Vocabulary, params: dict[str, Any], folder: Path, show_progress: bool | None
) -> dict[str, str]:
    """Write ``ids.npy`` and ``dist.npy``: the k-NN table of every word of ``embedding``.

    Euclidean and angular: a symmetric tiled exact k-NN search (:func:`_knn_heaps`: each
    pair's float32 key computed once by BLAS, every word's k+1 smallest ``(key, id)`` kept
    in a reservoir, :mod:`._topk`), in bounded memory; the exact float64 distances of E come from
    :meth:`Geometry.exact_block`. Manhattan and chebyshev: screening rows block by block.
    Rows are written where they belong as their blocks complete (``os.pwrite``); the
    store hashes the files.
    """
    embedding = Embedding.check(embedding)
    metric, k, n_sketch = str(params["metric"]), int(params["k"]), int(params["sketch"])
    geo = Geometry(embedding, metric)
    v = geo.size
    width = k + 1 + n_sketch
    ids_w = _RowWriter(folder / "ids.npy", np.dtype(np.int32), (v, width))
    dist_w = _RowWriter(folder / "dist.npy", np.dtype(np.float64), (v, width))
    what = f"TEM: k-NN tables of {v:,} words (k={k}, {metric})"
    try:
        with progress(v, what, enabled=show_progress) as advance:
            if k < v and geo.screening and metric in ("euclidean", "angular"):
                blocks = _knn_blocks_symmetric(geo, k, n_sketch)
            else:
                blocks = _knn_blocks_rows(geo, k, n_sketch)
            for at, ids, dist in blocks:
                ids_w.rows(at, ids)
                dist_w.rows(at, dist)
                advance(at.size)
    finally:
        ids_w.close()
        dist_w.close()
    return {}  # the store hashes the files


def _knn_blocks_rows(geo: Geometry, k: int, n_sketch: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    v = geo.size
    block = max(1, min(128, (64 << 20) // (4 * v)))
    buf = np.empty((block, v), dtype=np.float32)
    for s in range(0, v, block):
        q = np.arange(s, min(v, s + block), dtype=np.int64)
        rows = buf[: q.size]
        geo.screen(q, rows)
        entries = [knn_entry(geo, int(w), rows[r], k, n_sketch) for r, w in enumerate(q.tolist())]
        yield q, np.stack([e[0] for e in entries]), np.stack([e[1] for e in entries])


def _knn_blocks_symmetric(geo: Geometry, k: int, n_sketch: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Blocks ``(words, ids, dist)`` of k-NN tables from the symmetric blocked search (euclidean and angular).

    The keys are float32 ``|q|^2 + |y|^2 - 2 q.y`` (euclidean) or ``-q.y`` of unit
    vectors (angular), the quantities of :meth:`Geometry.screen` (smaller = closer); the
    pair ``(i, j)`` is computed once and feeds the reservoirs of both words, in an order of
    summation that may differ from the row's own, which the a priori error bound of
    :meth:`Geometry.bound_values` allows, so ``d_env`` from the (k+1)-th key is a proven
    lower bound. The search's operand is :meth:`Geometry.key_operand` (``|q|^2`` a term of
    the product: the same n + 2 terms, so the same bound). The search runs on the words
    in k-means cluster order (a function of the public vectors), the order of the seeds'
    groups (see :func:`_near_groups`); blocks come out in that order.
    """
    v, n = geo.size, geo.dim
    angular = geo.metric == "angular"
    # the search holds its own operand, in cluster order (the screen's values, rebuilt here
    # from the vectors; Geometry's copy would be a second one: dropped)
    geo.release_operands()
    # the tile kernel compiles (about 2 s, numba's compiler holding the GIL), then the k-means runs
    # on both cores: beside the compile, the k-means got the GIL too seldom to gain (5.5-5.7 s for
    # both against 2 + 2.5 s one after the other at 400k words, docs/performance.md)
    _warm_kernel()
    groups, perm = _near_groups(geo.x, k + 1, angular)
    stride = max(1, v // _SAMPLE)
    lhs_p, partner = geo.key_operand(perm)  # the search's operand, in cluster order
    # the sketch: the screen's own arithmetic (knn_entry's keys), on a strided sample
    add_rows: np.ndarray | None
    if angular:  # left rows: -unit rows (keys -cos, exact negations of the cosines)
        add_rows = None

        def left(sel: np.ndarray) -> np.ndarray:
            return np.negative(unit_rows(geo.x[sel], np.float32))

        sample_t = np.ascontiguousarray(unit_rows(geo.x[::stride], np.float32).T)
    else:  # left rows [q, 1] and right [-2 y ; |y|^2], plus |q|^2
        add_rows = geo._sq

        def left(sel: np.ndarray) -> np.ndarray:
            return geo.left_rows(sel, np.dtype(np.float32))

        sample_t = np.empty((n + 1, -(-v // stride)), dtype=np.float32)
        np.multiply(geo.x[::stride].T, np.float32(-2.0), out=sample_t[:n])
        sample_t[n] = add_rows[::stride]
    # two float32 evaluations of one key differ by at most twice the a priori error bound
    slack = 2.0 * geo._err(int(np.argmax(geo._norms)))
    # (ids: the words themselves, so equal keys at the (k+1)-th place are taken by the lower word id)

    def finish(s: int, keys: np.ndarray, nn: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Block ``s``'s rows of the artefact (on the search's workers, beside its next row of tiles)."""
        q = perm[s : s + keys.shape[0]]
        kth32 = keys[:, -1]  # the (k+1)-th key, and the k nearest
        e_ids = np.sort(nn[:, :-1], axis=1)
        # the sketch: the same order statistics of the sampled far keys as knn_entry takes
        sample = left(q) @ sample_t
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
        # rows at once (each word's vector read once, Geometry.exact_block): bit for bit the
        # distances of Geometry.exact row by row, in chunks of bounded memory
        exact = np.empty((q.size, k))
        for c in range(0, q.size, _EXACT_CHUNK):
            exact[c : c + _EXACT_CHUNK] = geo.exact_block(q[c : c + _EXACT_CHUNK], e_ids[c : c + _EXACT_CHUNK])
        ids = np.concatenate([e_ids, np.full((q.size, 1 + n_sketch), -1)], axis=1)
        return q, ids, np.concatenate([exact, env], axis=1)

    yield from _knn_heaps(lhs_p, partner, k + 1, slack, groups=groups, names=perm, finish=finish)


def _knn_heaps(
    lhs: np.ndarray,
    partner: Callable[[np.ndarray], np.ndarray],
    k1: int,
    slack: float,
    *,
    tile: int | None = None,
    groups: list[tuple[np.ndarray, np.ndarray]] | None = None,
    names: np.ndarray | None = None,
    kernel: bool | None = None,
    finish: Callable[[int, np.ndarray, np.ndarray], Any] | None = None,
) -> Iterator[Any]:
    """The ``k1`` smallest keys of every row, ``key(i, j) = lhs[i] @ partner(lhs[j])``, ties by id.

    The id of row ``j`` is ``names[j]`` (distinct, in ``[0, 2**32)``; default ``j``).

    ``partner`` maps rows of ``lhs`` to the rows of the right operand (a column scaling
    and permutation), built once.

    The key must be symmetric in exact arithmetic (``key(i, j) = key(j, i)`` up to float32
    rounding): each tile ``(I, J)``, ``I <= J``, is computed once (float32 BLAS products,
    ``tile x tile`` keys) and feeds the reservoirs (:mod:`._topk`) of its rows and of its
    columns: a value is offered to a word when it is at most the word's threshold (its
    seed, then the k1-th smallest code its reservoir kept when it last filled), and a word
    ends with its k1 smallest ``(key, id)`` whatever was offered besides and in whatever
    order. A word's seed is the k1-th smallest key over some columns (the ``groups``: the
    members of the nearest k-means clusters, see :func:`_near_groups`; else a strided
    sample of all columns) plus ``slack``, a bound on the difference of two float32
    evaluations of one key; so at least k1 keys of every word pass and none of its k1
    smallest is dropped.

    One tile's filters and offers are compiled passes (:func:`._kernels.offer_tile`, numba,
    the ``fast`` extra), one per slab of ``_SUB`` rows right after BLAS wrote it, or numpy's
    filters and :meth:`._topk.Reservoirs.offer` on the whole tile
    (``kernel=False``, or numba missing, or ``DENIABLE_TEM_KERNEL=numpy``): the same words,
    bit for bit. The :func:`build_workers` threads with single-threaded BLAS share the
    tiles, one row of tiles at a time, without a lock: a tile's column words are its own
    among the running tiles (it offers to the shared reservoirs), and each worker offers
    the row words' values to its own reservoirs of them, merged when the row ends. Yields
    ``(start, keys, ids)`` per block of ``tile`` rows, in row order, once the block is
    final (``(key, id)`` ascending, ``(rows, k1)`` float32 and int64), or
    ``finish(start, keys, ids)`` where ``finish`` is given. A block's merge and its
    ``finish`` are one task of the same workers, queued behind the next row of tiles (no
    later tile has its words): the rows of tiles wait neither for the caller nor for a
    block's finish, so the cores stay busy where the rows get short.
    Memory: the reservoirs of all rows, ``8 * int(_RESERVOIR * k1)`` bytes per row, and the right
    operand ``partner(lhs)``, transposed.
    """
    tile = tile or _TILE
    v = lhs.shape[0]
    # the right operand, once and transposed ((n + 2) x V float32: 83 MB at 400k 50-d words): a
    # tile's columns are a slice BLAS reads in place (a transposed view with out= was copied)
    rhs_t = np.ascontiguousarray(partner(lhs).T)
    names = np.arange(v, dtype=np.int64) if names is None else np.asarray(names, dtype=np.int64)
    offer_tile = _tile_kernel() if kernel is not False else None
    starts = list(range(0, v, tile))
    local = threading.local()
    privates: dict[int, list[Reservoirs]] = {}
    register = threading.Lock()
    shared: Reservoirs

    def private(i0: int, r: int) -> Reservoirs:
        """This worker's own reservoirs of the row words of block ``i0`` (merged when the block ends)."""
        mine = getattr(local, "res", None)
        if mine is None or mine[0] != i0:
            # the shared limits as they are (no one changes these words' limits while the row runs)
            mine = local.res = (i0, shared.like(slice(i0, i0 + r)))
            with register:
                privates.setdefault(i0, []).append(mine[1])
        return mine[1]

    def one_tile(i0: int, j0: int) -> None:
        i1, j1 = min(v, i0 + tile), min(v, j0 + tile)
        r, c = i1 - i0, j1 - j0
        buf = getattr(local, "buf", None)
        # this worker's product, reused (a new one a tile: page faults each time): a slab's on the kernel path
        if buf is None:
            buf = local.buf = np.empty((tile if offer_tile is None else min(_SUB, tile)) * tile, dtype=np.float32)
        rows = private(i0, r)
        if offer_tile is not None:
            # slabs of _SUB rows, each offered as its own tile (rows i0 + a0..): its product stays in L2
            for a0 in range(0, r, _SUB):
                a1 = min(r, a0 + _SUB)
                g = np.matmul(lhs[i0 + a0 : i0 + a1], rhs_t[:, j0:j1], out=buf[: (a1 - a0) * c].reshape(a1 - a0, c))
                offer_tile(g, i0 + a0, j0, i0 == j0, names, rows.codes[a0:a1], rows.count[a0:a1], rows.limit[a0:a1],
                           rows.thr[a0:a1], shared.codes, shared.count, shared.limit, shared.thr, k1)  # fmt: skip
            return
        g = np.matmul(lhs[i0:i1], rhs_t[:, j0:j1], out=buf[: r * c].reshape(r, c))
        # numpy: what can enter a reservoir is at most its threshold (which only decreases).
        # The row words (this worker's own): one comparison over the tile; on the diagonal
        # tile its columns are its rows (row offers only).
        tr = rows.thr
        if i0 == j0:
            _offer_rows(rows, g, np.flatnonzero(g <= tr[:, None]), names[j0:j1])
            return
        # One reduction over the tile: the minimum of each chunk of _CHUNK rows of a column.
        h = _CHUNK if r % _CHUNK == 0 else r
        cm = g.reshape(r // h, h, c).min(axis=1)
        # the row words: the slabs of h rows whose minimum can pass
        slabs = np.flatnonzero(cm.min(axis=1) <= tr.reshape(r // h, h).max(axis=1))
        if slabs.size == r // h:
            _offer_rows(rows, g, np.flatnonzero(g <= tr[:, None]), names[j0:j1])
        elif slabs.size:
            sel = (slabs[:, None] * h + np.arange(h)).reshape(-1)
            f = np.flatnonzero(g[sel] <= tr[sel, None])
            _offer_rows(rows, g, sel[f // c] * c + f % c, names[j0:j1])
        # The column words (shared: no other running tile has these columns): among the
        # chunks whose minimum passes, the values that pass. (flat indices: np.nonzero of a
        # 2-d mask is 4x slower here)
        tc = shared.thr[j0:j1]
        s, j = np.divmod(np.flatnonzero(cm <= tc), c)
        if s.size:
            at = (s[:, None] * h + np.arange(h)).reshape(-1)  # the rows of the chunks, chunk by chunk
            blk = np.take(g.reshape(-1), at * c + np.repeat(j, h))
            e = np.flatnonzero(blk <= np.repeat(tc[j], h))
            shared.offer(j[e // h] + j0, blk[e], names[at[e] + i0])

    def final(i0: int, mine: list[Reservoirs]) -> Any:
        """Block ``i0``'s k1 smallest (final: no later tile has these words), finished."""
        keys, ids = shared.smallest(slice(i0, min(v, i0 + tile)), mine)
        return (i0, keys, ids) if finish is None else finish(i0, keys, ids)

    pending: list[Future[None]] = []
    blocks: deque[Future[Any]] = deque()
    with single_threaded_blas(), ThreadPoolExecutor(build_workers()) as pool:
        try:
            seed = _seeds(pool, lhs, rhs_t, k1, slack, groups, tile)
            shared = Reservoirs(seed, k1, int(_RESERVOIR * k1))
            # One row of tiles at a time: its tiles share the row words (each worker keeps
            # its own reservoirs of them) and have distinct column words (the shared ones).
            pending = [pool.submit(one_tile, starts[0], j0) for j0 in starts]
            for b, i0 in enumerate(starts):
                for f in pending:
                    f.result()
                mine = privates.pop(i0, [])
                nxt = starts[b + 1] if b + 1 < len(starts) else None
                pending = [] if nxt is None else [pool.submit(one_tile, nxt, j0) for j0 in starts if j0 >= nxt]
                blocks.append(pool.submit(final, i0, mine))  # behind the next row's tiles
                while blocks and blocks[0].done():
                    yield blocks.popleft().result()
            while blocks:
                yield blocks.popleft().result()
        finally:
            for f in [*pending, *blocks]:
                f.cancel()


def _warm_kernel() -> None:
    """Compile the tile kernel now, if the build will use it (a failure here is raised by the build's own call)."""
    if _tile_kernel() is not None:
        try:
            from ._kernels import warm

            warm()
        except Exception:  # noqa: BLE001,S110 - the build's first call compiles again and raises
            pass


def _tile_kernel() -> Callable[..., None] | None:
    """:func:`._kernels.offer_tile` when numba imports and ``DENIABLE_TEM_KERNEL`` is not ``numpy``, else None."""
    if os.environ.get("DENIABLE_TEM_KERNEL", "").strip().lower() == "numpy":
        return None
    try:
        from ._kernels import offer_tile
    except ImportError:
        return None
    return offer_tile


def _seeds(
    pool: ThreadPoolExecutor,
    lhs: np.ndarray,
    rhs_t: np.ndarray,
    k1: int,
    slack: float,
    groups: list[tuple[np.ndarray, np.ndarray]] | None,
    tile: int,
) -> npt.NDArray[np.float32]:
    """The first phase of :func:`_knn_heaps`: every word's seed (``inf``: none), on ``pool``'s workers.

    A seed is the k1-th smallest key over some columns (the ``groups``' near columns; else a
    strided sample of all columns) plus ``slack``, rounded up to float32: at least the
    word's k1-th smallest key over all columns, whatever the order of summation.
    """
    v = lhs.shape[0]
    seed = np.full(v, np.inf, dtype=np.float32)
    sample = rhs_t[:, :: max(1, v // _SAMPLE)]

    def seeds(members: slice | np.ndarray, cols: np.ndarray | None) -> None:
        g = lhs[members] @ (sample if cols is None else rhs_t[:, cols])
        kth = np.partition(g, k1 - 1, axis=1)[:, k1 - 1].astype(np.float64) + slack
        up = np.nextafter(kth.astype(np.float32), np.float32(np.inf))  # rounded up
        seed[members] = np.minimum(seed[members], up)  # (the members of two calls are disjoint)

    jobs = []
    if groups:  # tight seeds from each group's near columns
        jobs = [pool.submit(seeds, m, c) for m, c in groups if c.size >= k1]
    elif sample.shape[1] >= k1:  # loose ones from a strided sample of the columns
        jobs = [pool.submit(seeds, slice(i0, min(v, i0 + tile)), None) for i0 in range(0, v, tile)]
    for f in jobs:
        f.result()
    return seed


def _near_groups(x: np.ndarray, k1: int, angular: bool) -> tuple[list[tuple[np.ndarray, np.ndarray]], np.ndarray]:
    """The words in k-means cluster order, and the groups behind the seeds, in that order.

    Returns ``(groups, perm)``: ``perm`` lists the words cluster by cluster (about 384
    words a cluster; :func:`._shared.cluster_labels`, a function of the public vectors);
    ``groups`` holds, per cluster, its positions in ``perm`` and the positions of the
    members of the clusters with the nearest centroids, at least ``8 k1`` words: the
    columns of its seeds. Any column set gives a valid seed (the k1-th smallest key over a
    subset is at least the k1-th smallest over all); these give tight ones. A small
    vocabulary keeps its order and has no groups.
    """
    v = x.shape[0]
    want = 8 * k1
    if v < 4 * want:
        return [], np.arange(v, dtype=np.int64)
    labels = cluster_labels(x, max(2, v // 384), angular)
    perm = np.argsort(labels, kind="stable")
    counts = np.bincount(labels)
    keep = np.flatnonzero(counts)
    starts = np.r_[0, np.cumsum(counts)]
    sums = np.add.reduceat(np.asarray(x[perm], dtype=np.float64), starts[keep], axis=0)
    cent = sums / counts[keep, None]
    if angular:
        cent /= np.maximum(np.linalg.norm(cent, axis=1, keepdims=True), 1e-30)
        key = -(cent @ cent.T)
    else:
        sq = (cent * cent).sum(axis=1)
        key = sq[:, None] + sq[None, :] - 2.0 * (cent @ cent.T)
    groups = []
    for a, c in enumerate(keep):
        near = keep[np.argsort(key[a], kind="stable")]
        near = near[: int(np.searchsorted(np.cumsum(counts[near]), want)) + 1]
        cols = np.concatenate([np.arange(starts[b], starts[b + 1]) for b in near])
        groups.append((np.arange(starts[c], starts[c + 1]), cols))
    return groups, perm.astype(np.int64)


def _offer_rows(res: Reservoirs, g: np.ndarray, flat: np.ndarray, ids: np.ndarray) -> None:
    """Offer the values of tile ``g`` at the flat indices ``flat`` to their rows' reservoirs (ids: ``ids[column]``)."""
    if flat.size:
        c = g.shape[1]
        res.offer(flat // c, g.reshape(-1)[flat], ids[flat % c])


# the store's kind, declared where its builder is
register_kind(
    KNN_KIND,
    build_knn_artefact,
    about="the k-NN tables TEM samples from",
)
