"""A fused distance + argmin decode in numba (issue 32's candidate), for ``bench_madlib.py --gemm --fused``.

The exact decode writes every ``query_block x vocab_block`` block of ``|y|^2 - 2 q.y`` to
memory (one BLAS product), then reads it again for the argmin. A fused kernel keeps each
tile of distances in L1 and never writes the block: the vocabulary is stored transposed
(``d x V``), each tile of ``T`` words is streamed once per group of ``QB`` queries, and the
argmin of a tile is a vectorizable min followed by a scan only when it beats the best so far.
numba is not a dependency of deniable (this measures whether it would pay): run it from a
venv with ``pip install -e . numba threadpoolctl``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def fused_decoder(vectors: np.ndarray, tile: int = 256, queries: int = 4) -> Any:
    """``decode(q) -> ids``: the exact nearest word of each row of ``q``, fused (needs numba)."""
    from numba import njit

    @njit(fastmath=True, cache=False)
    def kernel(q: Any, yt: Any, ysq: Any, t_max: int, qb_max: int) -> Any:  # pragma: no cover - numba
        m, d = q.shape
        v_total = yt.shape[1]
        best = np.full(m, np.inf, dtype=np.float32)
        arg = np.zeros(m, dtype=np.int64)
        acc = np.empty((qb_max, t_max), dtype=np.float32)
        for v0 in range(0, v_total, t_max):
            t = min(t_max, v_total - v0)
            for i0 in range(0, m, qb_max):
                qb = min(qb_max, m - i0)
                for a in range(qb):
                    for v in range(t):
                        acc[a, v] = ysq[v0 + v]
                for j in range(d):
                    row = yt[j, v0 : v0 + t]
                    for a in range(qb):
                        qa = np.float32(-2.0) * q[i0 + a, j]
                        for v in range(t):
                            acc[a, v] += qa * row[v]
                for a in range(qb):
                    low = np.float32(np.inf)
                    for v in range(t):
                        low = min(low, acc[a, v])
                    if low < best[i0 + a]:
                        best[i0 + a] = low
                        for v in range(t):
                            if acc[a, v] == low:
                                arg[i0 + a] = v0 + v
                                break
        return arg

    y = np.asarray(vectors, dtype=np.float32)
    yt = np.ascontiguousarray(y.T)
    ysq = np.einsum("ij,ij->i", y, y)

    def decode(q: np.ndarray) -> np.ndarray:
        return kernel(np.ascontiguousarray(q, dtype=np.float32), yt, ysq, tile, queries)  # type: ignore[no-any-return]

    decode(y[:2])  # compile once, outside the timing
    return decode
