"""The k1 smallest keys of every word, ties broken by id: reservoirs of ``(key, id)`` codes.

TEM's prepared k-NN build (:func:`._tables._knn_heaps`) offers each word the float32 keys
of the pairs it is part of and keeps the ``k1`` smallest. A word's candidates are held as
uint64 *codes* ``order(key) << 32 | id`` (:func:`encode`): ``order`` maps float32 to uint32
keeping their order (``-0.0`` is made ``+0.0`` first), so one integer comparison compares
``(key, id)`` pairs, and the k1 smallest codes are the k1 smallest keys with the lower id
first among equal keys. That set does not depend on the order of the offers, so the build's
worker threads, its numba kernel (:mod:`._kernels`) and its numpy path here give the same
words, bit for bit (with a heap the words kept among equal keys at the k1-th place were
the first offered).

A word's reservoir holds up to ``capacity`` codes (``> k1``), at most its *limit*: at first
its seed's code (``key <= seed``, ids all admitted), after a compaction (the reservoir
full: its k1 smallest codes kept, :meth:`Reservoirs.offer`) the largest code kept. The limit only
decreases and is always at least the word's final k1-th code, so nothing of the answer is
ever refused. The float32 key of the limit (``thr``) is what the build's filters compare
the tile's keys with (``key <= thr``: a superset of what the code comparison admits).

May import: numpy only.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["Reservoirs", "decode", "encode", "order_bits"]

_SIGN = np.uint32(0x80000000)
_LOW = np.uint64(0xFFFFFFFF)


def order_bits(keys: np.ndarray) -> npt.NDArray[np.uint32]:
    """uint32 of float32 ``keys`` in the same order (``-0.0`` as ``+0.0``; NaN not allowed)."""
    b = (np.asarray(keys, dtype=np.float32) + np.float32(0.0)).view(np.uint32)
    return np.where(b & _SIGN, ~b, b | _SIGN)


def _key_of_bits(o: np.ndarray) -> npt.NDArray[np.float32]:
    b = np.where(o & _SIGN, o ^ _SIGN, ~o).astype(np.uint32)
    return b.view(np.float32)


def encode(keys: np.ndarray, ids: np.ndarray) -> npt.NDArray[np.uint64]:
    """The codes ``order(key) << 32 | id`` (ids in ``[0, 2**32)``)."""
    hi = order_bits(keys).astype(np.uint64) << np.uint64(32)
    return hi | np.asarray(ids).astype(np.uint64)


def decode(codes: np.ndarray) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
    """``(keys, ids)`` of ``codes`` (the inverse of :func:`encode`)."""
    codes = np.asarray(codes, dtype=np.uint64)
    keys = _key_of_bits((codes >> np.uint64(32)).astype(np.uint32))
    return keys, (codes & _LOW).astype(np.int64)


class Reservoirs:
    """The reservoirs of ``n`` words: ``codes`` ``(n, capacity)``, ``count``, ``limit`` (codes), ``thr`` (keys).

    Plain arrays, so the numba kernel (:mod:`._kernels`) updates them in place; the numpy
    path is :meth:`offer`. ``seeds`` (float32, ``inf``: none) start the limits at
    ``order(seed) << 32 | 0xFFFFFFFF`` (every id of a key at most the seed).
    """

    def __init__(self, seeds: np.ndarray, k1: int, capacity: int) -> None:
        if capacity <= k1:
            raise ValueError("a reservoir holds more than k1 codes")
        self.k1 = k1
        seeds = np.asarray(seeds, dtype=np.float32)
        self.codes = np.empty((seeds.size, capacity), dtype=np.uint64)
        self.count = np.zeros(seeds.size, dtype=np.int64)
        self.limit = encode(seeds, np.full(seeds.size, _LOW))
        self.thr = seeds.copy()

    def like(self, words: slice) -> Reservoirs:
        """Empty reservoirs for ``words`` with their current limits (a worker's own, for its row words)."""
        out = Reservoirs.__new__(Reservoirs)
        out.k1 = self.k1
        out.codes = np.empty((words.stop - words.start, self.codes.shape[1]), dtype=np.uint64)
        out.count = np.zeros(out.codes.shape[0], dtype=np.int64)
        out.limit = self.limit[words].copy()
        out.thr = self.thr[words].copy()
        return out

    def offer(self, owners: np.ndarray, keys: np.ndarray, ids: np.ndarray) -> None:
        """Offer ``keys[e]`` with id ``ids[e]`` to word ``owners[e]`` (any order; owners may repeat)."""
        if owners.size == 0:
            return
        c = encode(keys, ids)
        ok = c <= self.limit[owners]
        owners, c = np.asarray(owners, dtype=np.int64)[ok], c[ok]
        if owners.size == 0:
            return
        o = np.argsort(owners, kind="stable")
        owners, c = owners[o], c[o]
        words, first, n = np.unique(owners, return_index=True, return_counts=True)
        fill = self.count[words]
        fits = fill + n <= self.codes.shape[1]
        at = np.repeat(fill - first, n) + np.arange(owners.size)  # fill + rank within the word
        put = np.repeat(fits, n)
        self.codes[owners[put], at[put]] = c[put]
        self.count[words[fits]] += n[fits]
        for w, s, m in zip(words[~fits].tolist(), first[~fits].tolist(), n[~fits].tolist(), strict=True):
            held = np.concatenate([self.codes[w, : self.count[w]], c[s : s + m]])
            self._keep(w, held)

    def _keep(self, w: int, held: np.ndarray) -> None:
        """Reservoir ``w`` := its k1 smallest of ``held`` (all of them when they fit), the limit lowered."""
        if held.size <= self.codes.shape[1]:
            self.codes[w, : held.size] = held
            self.count[w] = held.size
            return
        part = np.partition(held, self.k1 - 1)
        self.codes[w, : self.k1] = part[: self.k1]
        self.count[w] = self.k1
        self.limit[w] = part[self.k1 - 1]
        self.thr[w] = decode(part[self.k1 - 1 : self.k1])[0][0]

    def smallest(self, words: slice, others: list[Reservoirs]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """The k1 smallest ``(key, id)`` of each word of ``words`` over its reservoir and ``others``' rows (ascending).

        ``others``: the workers' own reservoirs of these words (row ``i`` is word ``words.start + i``).
        Raises RuntimeError when a word holds fewer than k1 codes (cannot happen in the build:
        its seed admits at least k1 keys).
        """
        parts = [(self.codes[words], self.count[words])] + [(o.codes, o.count) for o in others]
        r = words.stop - words.start
        width = sum(p[0].shape[1] for p in parts)
        allc = np.full((r, width), np.iinfo(np.uint64).max, dtype=np.uint64)
        total = np.zeros(r, dtype=np.int64)
        at = 0
        for codes, count in parts:
            cap = codes.shape[1]
            allc[:, at : at + cap] = np.where(np.arange(cap) < count[:, None], codes, allc[:, at : at + cap])
            total += count
            at += cap
        if np.any(total < self.k1):
            raise RuntimeError("k-NN build: a word met fewer than k1 keys")
        if width > self.k1:
            allc = np.partition(allc, self.k1 - 1, axis=1)[:, : self.k1]
        allc.sort(axis=1)
        return decode(allc)
