from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from .._threads import decode_workers, one_blas_thread
from ._base import check_queries

#: Up to this many neighbours a block is searched by repeated argmin instead of argpartition.
_SMALL_K = 4
#: The fewest rows a block of queries gets when a batch is split across decode workers.
_MIN_SPLIT = 256
#: Rows transposed at a time into the augmented matrix (the source and target blocks stay in
#: cache: 21 ms instead of 78 ms for GloVe's 336k x 50 in one pass, part of every start-up).
_TRANSPOSE_ROWS = 512


def row_block(m: int, query_block: int, workers: int) -> int:
    """The rows of each block of a batch of ``m`` queries: equal blocks of at most ``query_block``
    rows, as many as ``workers`` (a multiple of them) where each keeps >= :data:`_MIN_SPLIT` rows."""
    blocks = -(-m // max(1, query_block))
    if workers > 1:
        blocks = max(blocks, min(workers, m // _MIN_SPLIT))
        if blocks > workers and blocks % workers and -(-blocks // workers) * workers * _MIN_SPLIT <= m:
            blocks = -(-blocks // workers) * workers
    return max(1, -(-m // max(1, blocks)))


class ExactIndex:
    """Exact L2 search by blocked matrix products in numpy.

    Distances are ``|y|^2 - 2 q.y + |q|^2``, computed for a block of up to ``query_block``
    queries against ``vocab_block`` rows at a time, so memory stays at ``query_block * vocab_block``
    floats whatever V is (1,024 x 2,048: an 8 MB block, as 256 x 8,192 before). The vocabulary is
    stored once more as the augmented matrix ``[-2 y, |y|^2]`` (transposed), so one matrix product
    of ``[q, 1]`` with it gives ``|y|^2 - 2 q.y`` with no extra pass over the block (about 1.6x
    faster than multiply-then-add; memory ``V * (d + 1)`` floats). The nearest word (``k=1``) keeps
    no running best: each block's argmin and its distance are stored (a few calls per block) and
    the blocks are compared once at the end (the first block on ties: the lowest id).

    Why 1,024 queries a block: BLAS packs the vocabulary block afresh in every product, and that
    packing is paid once per block of queries; with 51-long rows it costs about 1/nq of the
    product (a 256-query product ran at 0.72x of the CPU's square sgemm, a 1,024-query one at
    0.9x, ``bench/bench_exact_peak.py``). A batch is cut into equal blocks (3,000 rows: 3 blocks of
    1,000, not 1,024 + 1,024 + 952), into at least as many blocks as decode workers (a multiple
    of them) where each keeps >= ``_MIN_SPLIT`` rows; the vocabulary into equal blocks of at most
    ``vocab_block`` rows (5,000 words: 3 x 1,667, not 2,048 + 2,048 + 904). The words do not depend
    on the blocking but at float32 near-ties: BLAS may round a distance differently in its last bit
    at another position of a block (its kernel's edges), as between any two shapes before.
    """

    def __init__(self, vectors: npt.ArrayLike, *, vocab_block: int = 2048, query_block: int = 1024) -> None:
        self._x = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
        sq = np.einsum("ij,ij->i", self._x, self._x, dtype=np.float32)
        self._aug = np.empty((self._x.shape[1] + 1, self._x.shape[0]), dtype=np.float32)
        for s in range(0, self._x.shape[0], _TRANSPOSE_ROWS):  # the transpose a block of rows at a time
            np.multiply(self._x[s : s + _TRANSPOSE_ROWS].T, -2.0, out=self._aug[:-1, s : s + _TRANSPOSE_ROWS])
        self._aug[-1] = sq
        self.vocab_block = int(vocab_block)
        self.query_block = int(query_block)

    @property
    def ntotal(self) -> int:
        return int(self._x.shape[0])

    @property
    def d(self) -> int:
        return int(self._x.shape[1])

    def search(self, queries: npt.ArrayLike, k: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        q = check_queries(queries, self.d, k, self.ntotal)
        m = q.shape[0]
        out_d = np.empty((m, k), dtype=np.float32)
        out_i = np.empty((m, k), dtype=np.int64)

        workers = decode_workers()
        size = row_block(m, self.query_block, workers)

        def one(s: int) -> None:
            qb = q[s : s + size]
            out_d[s : s + len(qb)], out_i[s : s + len(qb)] = self._search_block(qb, k)

        starts = range(0, m, size)
        workers = min(workers, len(starts))
        if workers <= 1:
            for s in starts:
                one(s)
            return out_d, out_i
        # the thread policy (deniable._threads): blocks of queries shared by `workers` threads of one
        # BLAS thread each (a queue: a thread slowed by a shared core takes fewer); the same words
        with one_blas_thread() as single:
            if not single:  # BLAS kept its own threads (set from another thread): no threads on top
                for s in starts:
                    one(s)
                return out_d, out_i
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(one, starts))
        return out_d, out_i

    def _search_block(self, qb: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        nq = qb.shape[0]
        qsq = np.einsum("ij,ij->i", qb, qb, dtype=np.float32)[:, None]
        qa = np.empty((nq, qb.shape[1] + 1), dtype=np.float32)
        qa[:, :-1] = qb
        qa[:, -1] = 1.0
        if k == 1:
            d1, i1 = self._nearest_block(qa)
            return np.maximum(d1 + qsq[:, 0], 0.0)[:, None], i1[:, None]
        best_d = np.full((nq, k), np.inf, dtype=np.float32)
        best_i = np.zeros((nq, k), dtype=np.int64)
        rows = np.arange(nq)[:, None]
        flat = np.arange(nq)
        buf = np.empty((nq, min(self.vocab_block, self.ntotal)), dtype=np.float32)
        for v0 in range(0, self.ntotal, self.vocab_block):
            blk = self._aug[:, v0 : v0 + self.vocab_block]
            dist = np.matmul(qa, blk, out=buf[:, : blk.shape[1]])  # |y|^2 - 2 q.y
            kk = min(k, dist.shape[1])
            if kk <= _SMALL_K:
                # a few argmin passes (each masks its winner) beat argpartition of the block
                part = np.empty((nq, kk), dtype=np.int64)
                block_d = np.empty((nq, kk), dtype=np.float32)
                for c in range(kk):
                    j = np.argmin(dist, axis=1)
                    part[:, c] = j
                    block_d[:, c] = dist[flat, j]
                    dist[flat, j] = np.inf
                cand_d = np.concatenate([best_d, block_d], axis=1)
                cand_i = np.concatenate([best_i, part + v0], axis=1)
                sel = np.argpartition(cand_d, k - 1, axis=1)[:, :k]
                best_d = cand_d[rows, sel]
                best_i = cand_i[rows, sel]
                continue
            part = np.argpartition(dist, kk - 1, axis=1)[:, :kk]
            cand_d = np.concatenate([best_d, dist[rows, part]], axis=1)
            cand_i = np.concatenate([best_i, part + v0], axis=1)
            sel = np.argpartition(cand_d, k - 1, axis=1)[:, :k]
            best_d = cand_d[rows, sel]
            best_i = cand_i[rows, sel]
        order = np.argsort(best_d, axis=1, kind="stable")
        best_d = np.maximum(best_d[rows, order] + qsq, 0.0)
        return best_d, best_i[rows, order]

    def _nearest_block(self, qa: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The nearest row of each augmented query ``[q, 1]``: ``(|y|^2 - 2 q.y, id)``.

        Per vocabulary block: one product into a contiguous buffer, its argmin (``out=``) and the
        distance there (``take`` of the flat buffer); the blocks' winners are compared once at
        the end (argmin over blocks: the first, i.e. the lowest id, on ties)."""
        nq = qa.shape[0]
        nb = -(-self.ntotal // self.vocab_block)
        vb = -(-self.ntotal // nb)  # equal blocks (5,000 words: 3 x 1,667, not 2,048 + 2,048 + 904)
        block_d = np.empty((nb, nq), dtype=np.float32)
        block_j = np.empty((nb, nq), dtype=np.intp)
        width = min(vb, self.ntotal)
        buf = np.empty(nq * width, dtype=np.float32)
        rows = np.arange(nq, dtype=np.intp)
        flat = np.empty(nq, dtype=np.intp)
        off = rows * width
        for b in range(nb):
            blk = self._aug[:, b * vb : (b + 1) * vb]
            w = blk.shape[1]
            if w != width:  # the last, narrower block: its own row stride
                off = rows * w
            dist = buf[: nq * w].reshape(nq, w)
            np.matmul(qa, blk, out=dist)
            np.argmin(dist, axis=1, out=block_j[b])
            np.add(block_j[b], off, out=flat)
            np.take(buf, flat, out=block_d[b])
        win = np.argmin(block_d, axis=0)
        return block_d[win, rows], (block_j[win, rows] + win * vb).astype(np.int64)
