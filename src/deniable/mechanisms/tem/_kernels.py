"""The compiled kernel of TEM's prepared k-NN build (numba, the ``fast`` extra): one pass over a tile.

:func:`offer_tile` does what :func:`._tables._knn_heaps`'s numpy path does with one tile
(the filters against the words' thresholds and the offers of the keys that pass to their
reservoirs, :mod:`._topk`) in one pass over the tile: the same reservoirs' rules, so the
same k1 smallest ``(key, id)`` of every word, whatever the order (tests/test_tem_build.py
checks both paths against a brute force with ties).

Imported lazily by :mod:`._tables` (when numba imports and ``DENIABLE_TEM_KERNEL`` is not
``numpy``). Compiled once per process (``cache=False``: nothing written to disk; about 2 s
at the first build), the GIL released: the build's own worker threads call it, one per
core (no numba threading).

May import: numpy and numba only.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["offer_tile", "warm"]


@njit(nogil=True, cache=False, inline="always")
def _encode(x, j, fs, us):
    """``order(x) << 32 | j`` (:func:`._topk.encode` of one key, ``x`` already ``+ 0.0``);
    ``fs``/``us``: one float32 and its uint32 view (the bit cast)."""
    fs[0] = x
    b = us[0]
    o = ~b if b & np.uint32(0x80000000) else b | np.uint32(0x80000000)
    return (np.uint64(o) << np.uint64(32)) | np.uint64(j)


@njit(nogil=True, cache=False, inline="always")
def _key(code, fs, us):
    """The float32 key of ``code`` (through ``fs``/``us``, as :func:`_encode`)."""
    o = np.uint32(code >> np.uint64(32))
    us[0] = o ^ np.uint32(0x80000000) if o & np.uint32(0x80000000) else ~o
    return fs[0]


@njit(nogil=True, cache=False)
def _compact(codes, count, limit, thr, w, k1, fs, us):
    """Reservoir ``w`` (full): its k1 smallest codes kept, the limit lowered to the largest of them
    (:meth:`._topk.Reservoirs.offer`'s compaction)."""
    row = codes[w]
    _select(row, k1 - 1)
    limit[w] = row[k1 - 1]
    thr[w] = _key(row[k1 - 1], fs, us)
    count[w] = k1


@njit(nogil=True, cache=False)
def _select(a, k):
    """Reorder ``a`` in place so that ``a[k]`` is its (k+1)-th smallest, the smaller ones before it
    (quickselect, median-of-three pivots; the codes are distinct)."""
    lo, hi = 0, a.shape[0] - 1
    while hi > lo:
        mid = (lo + hi) >> 1
        if a[mid] < a[lo]:
            a[mid], a[lo] = a[lo], a[mid]
        if a[hi] < a[lo]:
            a[hi], a[lo] = a[lo], a[hi]
        if a[hi] < a[mid]:
            a[hi], a[mid] = a[mid], a[hi]
        p = a[mid]
        i, j = lo, hi
        while i <= j:
            while a[i] < p:
                i += 1
            while a[j] > p:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return


#: de Bruijn sequence and table: the index of a uint64's lowest set bit without a branch
_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN_INDEX = np.array(
    [0, 1, 48, 2, 57, 49, 28, 3, 61, 58, 50, 42, 38, 29, 17, 4, 62, 55, 59, 36, 53, 51, 43, 22, 45, 39, 33, 30,
     24, 18, 12, 5, 63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21, 44, 32, 23, 11, 46, 26, 40, 15, 34, 20, 31,
     10, 25, 14, 19, 9, 13, 8, 7, 6],
    dtype=np.int64,
)  # fmt: skip


@njit(nogil=True, cache=False)
def offer_tile(g, i0, j0, diag, names, rc, rn, rl, rt, cc, cn, cl, ct, k1):
    """Offer the tile ``g`` (``key(i0 + a, j0 + b)`` at ``[a, b]``) to its rows' and columns' reservoirs.

    Rows: ``(rc, rn, rl, rt)``, row ``a`` (the worker's own reservoirs of the row words), ids
    ``names[j0 + b]``; columns: ``(cc, cn, cl, ct)``, row ``j0 + b`` (shared: no other running
    tile has these words), ids ``names[i0 + a]``; none where ``diag`` (the tile's columns are its rows).
    A key is offered to a word when it is at most the word's threshold. Row by row: one
    vectorized comparison of each key with the larger of its row's and its column's threshold
    into a byte mask (a superset: the thresholds only decrease), then the set bytes, found
    eight at a time. ``diag`` is the tile's (a slab of a diagonal tile's rows is offered with
    ``diag`` set: its columns include its rows).
    """
    r, c = g.shape
    rcap, ccap = rc.shape[1], cc.shape[1]
    fs = np.empty(1, dtype=np.float32)
    us = fs.view(np.uint32)
    nw = (c + 7) >> 3
    mask = np.zeros(nw * 8, dtype=np.uint8)
    words = mask.view(np.uint64)
    ctl = ct[j0 : j0 + c]
    for a in range(r):
        row = g[a]
        tr = rt[a]
        if diag:
            for b in range(c):
                mask[b] = row[b] <= tr
        else:
            for b in range(c):  # (one comparison: the keys and thresholds are never NaN)
                mask[b] = row[b] <= max(tr, ctl[b])
        for w in range(nw):
            m = words[w]
            while m:
                low = m & (~m + np.uint64(1))
                m ^= low
                b = (w << 3) + (_DEBRUIJN_INDEX[(low * _DEBRUIJN) >> np.uint64(58)] >> 3)
                x = row[b] + np.float32(0.0)
                # the offer to a reservoir (:meth:`._topk.Reservoirs.offer`), written out twice:
                # a call per offer (the arrays passed, reference counts) cost 3x the pass
                if x <= rt[a]:
                    e = _encode(x, names[j0 + b], fs, us)
                    if e <= rl[a]:
                        n = rn[a]
                        rc[a, n] = e
                        rn[a] = n + 1
                        if n + 1 == rcap:
                            _compact(rc, rn, rl, rt, a, k1, fs, us)
                if not diag and x <= ctl[b]:
                    q = j0 + b
                    e = _encode(x, names[i0 + a], fs, us)
                    if e <= cl[q]:
                        n = cn[q]
                        cc[q, n] = e
                        cn[q] = n + 1
                        if n + 1 == ccap:
                            _compact(cc, cn, cl, ct, q, k1, fs, us)


def warm() -> None:
    """Compile :func:`offer_tile` now (a call on a 2 x 2 tile; the build calls it before the k-means
    of its search order, which then has both cores: numba's compiler holds the GIL)."""
    g = np.zeros((2, 2), dtype=np.float32)
    codes = np.zeros((2, 2), dtype=np.uint64)
    count = np.zeros(2, dtype=np.int64)
    limit = np.zeros(2, dtype=np.uint64)
    thr = np.full(2, -np.inf, dtype=np.float32)
    names = np.arange(2, dtype=np.int64)
    offer_tile(g, 0, 0, False, names, codes, count, limit, thr, codes, count, limit, thr, 1)
