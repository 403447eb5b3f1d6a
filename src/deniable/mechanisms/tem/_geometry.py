"""Distances and the output distribution of TEM.

:func:`tem_distributions` is THE arithmetic of TEM's distribution (weights from
distances, gamma, epsilon and the outside mass), for a block of input words: the
mechanism's ``compact_distribution`` runs it on one row, calibration's bulk statistics
on blocks of rows (:meth:`Geometry.block`). Distance formulas come from
:mod:`deniable.metrics`.

Two kinds of distance are computed here and nothing else in TEM computes any:

- :meth:`Geometry.exact` is THE distance of the mechanism: float64, by differences
  (``x - y``), row by row, with ``d(w, w) = 0``. ``compact_distribution`` and every
  sampler use it, so what is sampled is what is stated.
- :meth:`Geometry.screen` fills float32 rows for a block of query words with one BLAS
  product (euclidean, angular) or float32 differences (manhattan, chebyshev), and
  :meth:`Geometry.lower_bounds` / :meth:`Geometry.candidates` turn them into values
  that are provably ``<=`` the exact distance (the float32 rounding error is bounded
  a priori and subtracted). Screening only decides *where to look*; it never sets a
  probability.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..._errors import InvalidParameterError
from ...embedding import Embedding
from ...metrics import angular_from_cos, euclidean_from_squares, paired_distances, unit_rows

__all__ = ["BLOCK_METRICS", "TEM_METRICS", "Geometry", "TemDistributions", "tem_distributions", "truncation"]

#: Metrics TEM supports on real-valued embeddings (all true metrics).
TEM_METRICS = ("euclidean", "manhattan", "chebyshev", "angular")
#: Metrics whose distances :meth:`Geometry.block` computes with one BLAS product per block.
BLOCK_METRICS = ("euclidean", "angular")

_U32 = 2.0**-24  # unit roundoff of float32
_PRECHECK = 4096  # sample size of the strided pre-check in candidates()
_PAIRED_CHUNK = 2048  # pairs per exact_rows call in exact_indexed (temporaries in cache)


class Geometry:
    """Distance computations on one embedding for one metric."""

    def __init__(self, embedding: Embedding, metric: str) -> None:
        self.metric = metric
        # (V, n) float32, read-only; a plain ndarray view of the memory map (a memmap
        # subclass would add its __getitem__ to every indexing)
        self.x = np.asarray(embedding.vectors)
        self.size, self.dim = self.x.shape
        n = self.dim
        # a priori bound on float32 error, with a factor 2 of safety (see docs/tem.md)
        self._rel = 2.0 * (n + 6) * _U32
        norms = np.sqrt(np.einsum("ij,ij->i", self.x, self.x, dtype=np.float64))
        self._norms = norms
        self._max_norm = float(norms.max()) if norms.size else 0.0
        # float32 screening needs |x|^2 (and the products) to be finite in float32; for
        # absurdly large vectors it is skipped: every word is a candidate, every bound 0
        self.screening = self._max_norm < 1e15
        self._operands: dict[np.dtype[Any], tuple[np.ndarray, np.ndarray]] = {}
        self._lock = threading.Lock()
        if self.screening and metric in BLOCK_METRICS:
            self._block_operands(np.dtype(np.float32))
        if metric == "euclidean" and self.screening:
            self._sq = (norms * norms).astype(np.float32)

    def key_operand(self, order: npt.NDArray[np.int64]) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        """The float32 screening key as a symmetric product, for the words ``order`` in that order.

        Returns ``(lhs, partner)`` with ``key(order[i], order[j]) = lhs[i] @ partner(lhs[j])``,
        smaller = closer: euclidean ``|q|^2 + |y|^2 - 2 q.y`` as ``[q, 1, |q|^2] @ [-2 y ;
        |y|^2 ; 1]`` (the screen's n + 2 terms, so its a priori error bound holds in any
        summation order), angular ``-cos`` as ``-unit(q) @ unit(y)`` (exact negations of the
        cosines). ``partner`` is an exact scaling and permutation of rows, so a build holds
        one operand (euclidean: ``(V, n + 2)`` float32), not two.
        """
        n = self.dim
        if self.metric == "angular":
            return np.negative(unit_rows(self.x[order], np.float32)), np.negative
        if self.metric != "euclidean":
            raise ValueError(f"no product form of the {self.metric} screen")
        lhs = np.empty((order.size, n + 2), dtype=np.float32)
        lhs[:, :n] = self.x[order]
        lhs[:, n] = 1.0
        lhs[:, n + 1] = self._sq[order]

        def partner(rows: np.ndarray) -> np.ndarray:
            out = np.empty_like(rows)  # [-2 y, |y|^2, 1] from [y, 1, |y|^2]
            np.multiply(rows[:, :n], np.float32(-2.0), out=out[:, :n])
            out[:, n], out[:, n + 1] = rows[:, n + 1], rows[:, n]
            return out

        return lhs, partner

    def release_operands(self) -> None:
        """Drop the cached block operands (a copy of the vectors: 80-160 MB at 400k words), rebuilt on demand."""
        with self._lock:
            self._operands.clear()

    def _block_operands(self, dt: np.dtype[Any]) -> tuple[np.ndarray, np.ndarray]:
        """The right-hand side of the block product in ``dt`` (built once per dtype).

        euclidean: ``([-2 y ; |y|^2], |y|^2)``: ``[q, 1] @ first + |q|^2 = |q|^2 - 2 q.y + |y|^2``;
        angular: ``(unit rows, their transpose)``: ``unit[q] @ second`` are the cosines.
        """
        with self._lock:  # blocks may run in threads
            if dt in self._operands:
                return self._operands[dt]
            if self.metric == "euclidean":
                sq = self._norms * self._norms
                aug = np.empty((self.dim + 1, self.size), dtype=dt)
                np.multiply(self.x.T, -2.0, out=aug[:-1])
                aug[-1] = sq
                self._operands[dt] = (aug, sq.astype(dt))
            else:
                unit = np.ascontiguousarray(unit_rows(self.x, dt))
                self._operands[dt] = (unit, np.ascontiguousarray(unit.T))
            return self._operands[dt]

    def left_rows(self, q: npt.NDArray[np.int64], dt: np.dtype[Any]) -> np.ndarray:
        """``[x[q], 1]`` in ``dt``: the euclidean left operand of :meth:`block` and :meth:`screen`."""
        left = np.empty((q.size, self.dim + 1), dtype=dt)
        left[:, :-1] = self.x[q]
        left[:, -1] = 1.0
        return left

    def block(self, q: npt.NDArray[np.int64], out: np.ndarray) -> None:
        """Fill ``out`` (``len(q) x V``, float32 or float64) with the distances from each ``q`` word to every word.

        One BLAS product per block (euclidean: ``|q|^2 - 2 q.y + |y|^2``; angular: cosines of
        unit vectors), turned into distances by :mod:`deniable.metrics`; a word's distance to
        itself is set to exactly 0. float64 agrees with :meth:`exact` to rounding, float32 to
        about 1e-5 relative. Only for :data:`BLOCK_METRICS`.
        """
        if self.metric not in BLOCK_METRICS:
            raise InvalidParameterError("metric", self.metric, " or ".join(BLOCK_METRICS) + " for blocked distances")
        dt = out.dtype
        first, second = self._block_operands(dt)
        if self.metric == "euclidean":
            np.matmul(self.left_rows(q, dt), first, out=out)
            out += second[q][:, None]
            euclidean_from_squares(out, out=out)
        else:
            np.matmul(first[q], second, out=out)
            angular_from_cos(out, out=out)
        out[np.arange(q.size), q] = 0.0

    # -- the exact distance ------------------------------------------------------------
    def exact(self, w: int, ys: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Exact float64 distances ``d(w, y)`` for each ``y`` in ``ys`` (``d(w, w) = 0``).

        Row by row: a distance does not depend on which other rows are computed with it
        (chunks of 8192 rows keep the float64 differences in cache: 1.5x faster than
        32768 over the 336k GloVe words, the same values).
        """
        ys = np.asarray(ys, dtype=np.int64)
        chunk = 1 << 13
        if ys.size > chunk:
            out = np.empty(ys.size, dtype=np.float64)
            for s in range(0, ys.size, chunk):
                out[s : s + chunk] = self._exact(w, ys[s : s + chunk])
            return out
        return self._exact(w, ys)

    def _exact(self, w: int, ys: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        # the paired code path (a one-element ``ws`` broadcasts), so that a distance is bit
        # for bit the same whichever of the two computes it
        return self.exact_paired(np.array([w], dtype=np.int64), ys)

    def exact_paired(self, ws: npt.NDArray[np.int64], ys: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Exact ``d(ws[i], ys[i])``: the arithmetic behind :meth:`exact` too (``ws`` may have one element).

        ``ws`` of shape ``(r, 1)`` with ``ys`` of shape ``(r, k)`` gives the ``(r, k)``
        distances of ``r`` rows at once, bit for bit those of :meth:`exact` row by row
        (the same difference and the same reduction over the last axis per pair).
        """
        if ys.ndim == 2:
            flat_ws = np.broadcast_to(ws, ys.shape).ravel()
            return self.exact_paired(flat_ws, ys.ravel()).reshape(ys.shape)
        if ws.size == 1:
            return self.exact_rows(self.x[ws], ws, ys)
        return self.exact_indexed(self.x, ws, ws, ys)

    def exact_block(self, ws: npt.NDArray[np.int64], ys: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """``d(ws[i], ys[i, j])`` for ``ys`` of shape ``(r, k)``: bit for bit :meth:`exact_paired` with ``ws[:, None]``.

        Each ``ws`` vector is read once (not once per pair) and broadcast by
        :func:`~deniable.metrics.paired_distances` against its ``k`` rows (the same values and
        reduction). The prepared build's exact distances.
        """
        r, k = ys.shape
        y_rows = np.take(self.x, ys.reshape(-1), axis=0).reshape(r, k, self.dim)
        d = paired_distances(self.x[ws][:, None, :], y_rows, self.metric)
        d[ws[:, None] == ys] = 0.0
        return d

    def exact_indexed(
        self, table: np.ndarray, idx: npt.NDArray[np.int64], ws: npt.NDArray[np.int64], ys: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """``d(ws[i], ys[i])`` where ``table[idx[i]]`` is the vector of ``ws[i]`` (bit for bit :meth:`exact_paired`).

        :meth:`exact_rows` on chunks of :data:`_PAIRED_CHUNK` pairs, gathering each chunk's
        vectors there: the float64 temporaries stay in cache (3x faster than one pass over
        32k random pairs on GloVe), and each distance is computed alone, so the values do
        not depend on the chunking. ``ys`` of shape ``(r, c)`` (``idx`` and ``ws`` of shape
        ``(r,)``): ``d(ws[i], ys[i, j])``, each row's vector gathered once and broadcast against
        its ``c`` words (the same distances).
        """
        if ys.ndim == 2:
            per = max(1, _PAIRED_CHUNK // max(ys.shape[1], 1))
            grid = np.empty(ys.shape, dtype=np.float64)
            for s in range(0, ys.shape[0], per):
                part = slice(s, s + per)
                w_rows = np.take(table, idx[part], axis=0)[:, None, :]
                grid[part] = self.exact_rows(w_rows, ws[part][:, None], ys[part])
            return grid
        out = np.empty(ys.size, dtype=np.float64)
        for s in range(0, ys.size, _PAIRED_CHUNK):
            part = slice(s, s + _PAIRED_CHUNK)
            out[part] = self.exact_rows(np.take(table, idx[part], axis=0), ws[part], ys[part])
        return out

    def exact_rows(
        self, w_rows: np.ndarray, ws: npt.NDArray[np.int64], ys: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.float64]:
        """:meth:`exact_paired` given the vectors ``w_rows`` of ``ws`` (e.g. gathered once, in float64).

        Bit for bit the same distances: the vectors are the same values, converted to
        float64 either way.
        """
        d = paired_distances(w_rows, np.take(self.x, ys, axis=0), self.metric)  # take: 2x a fancy index
        d[ws == ys] = 0.0
        return d

    # -- screening -------------------------------------------------------------------
    def screen(self, q: npt.NDArray[np.int64], out: np.ndarray) -> None:
        """Fill ``out`` (``len(q) x V`` float32) with the screening values of each query.

        euclidean: approximate squared distances; angular: approximate cosines;
        manhattan / chebyshev: approximate distances.
        """
        if not self.screening:
            out[...] = 0.0
        elif self.metric == "euclidean":
            aug, sq = self._block_operands(np.dtype(np.float32))
            np.matmul(self.left_rows(q, np.dtype(np.float32)), aug, out=out)
            out += sq[q][:, None]
        elif self.metric == "angular":
            unit, unit_t = self._block_operands(np.dtype(np.float32))
            np.matmul(unit[q], unit_t, out=out)
        else:
            tile = 16384
            for r, w in enumerate(q.tolist()):
                qv = self.x[w]
                for s in range(0, self.size, tile):
                    diff = np.abs(self.x[s : s + tile] - qv)
                    if self.metric == "manhattan":
                        diff.sum(axis=1, out=out[r, s : s + tile])
                    else:
                        diff.max(axis=1, out=out[r, s : s + tile])

    def _err(self, w: int) -> float:
        """Bound on |screen value - exact value| for the screening quantity of query ``w``."""
        if self.metric == "euclidean":
            qn = float(np.sqrt(self._sq[w]))
            return self._rel * (qn + self._max_norm) ** 2 + 1e-30
        if self.metric == "angular":
            return self._rel * 2.0 + 1e-7
        return 0.0  # manhattan / chebyshev: relative bound applied in lower_bounds

    def _errs32(self, ws: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]:
        """:meth:`_err` of each word of ``ws`` in float32, vectorized (what :meth:`bound_values` casts it to).

        ``t * t`` for Python's ``t ** 2`` may differ in the last float64 bit (0.06% of GloVe
        words), not after the cast to float32 here (equal on all 336k default words; tested
        against :meth:`bound_values`);
        ``_err`` itself keeps its formula, bit for bit, for its float64 users.
        """
        if self.metric == "euclidean":
            t = np.sqrt(self._sq[ws]).astype(np.float64) + self._max_norm
            return np.asarray(self._rel * (t * t) + 1e-30, dtype=np.float32)
        return np.full(ws.shape, self._err(0) if self.size else 0.0, dtype=np.float32)

    def candidates(
        self, w: int, row: np.ndarray, gamma: float, limit: int | None = None
    ) -> npt.NDArray[np.int64] | None:
        """Every ``y`` that may have ``d(w, y) <= gamma`` (a superset; always contains ``w``).

        None when there are more than ``limit`` of them (not listed).
        """
        if not self.screening:
            return np.arange(self.size, dtype=np.int64) if limit is None or self.size <= limit else None
        err = self._err(w)
        with np.errstate(over="ignore"):
            return self._candidates(w, row, gamma, err, limit)

    def candidate_count(self, w: int, row: np.ndarray, gamma: float, cap: int) -> int:
        """How many words the screening keeps as candidates of ``w``'s ball; ``size + 1`` when a
        strided sample of the row already says they are far more than ``cap`` (as :meth:`candidates`
        with ``limit=cap`` decides, skipping the full pass).

        A function of the word's screening row only: the lazy sampler chooses a word's
        sampler from it (:mod:`._lazy`), the same whether or not its tables are remembered.
        """
        if not self.screening:
            return self.size
        err = self._err(w)
        with np.errstate(over="ignore"):
            if self._far_over(row, gamma, err, cap):
                return self.size + 1
            return int(np.count_nonzero(self.candidates_mask(row, gamma, err)))

    @property
    def sample_stride(self) -> int:
        """The stride of a screening row's strided sample (about :data:`_PRECHECK` values of it)."""
        return max(1, self.size // _PRECHECK)

    def precheck(self, cap: int) -> int:
        """How many values of a screening row's strided sample (every :attr:`sample_stride`-th) must be
        candidates for :meth:`candidate_count` and :meth:`candidates` (limit ``cap``) to answer "far
        more than ``cap``" without the full pass; 0 where rows are too short for the pre-check (at
        most 64 times the sample)."""
        if self.size <= 64 * _PRECHECK:
            return 0
        return (4 * cap + 4 * self.size // 64) // self.sample_stride + 1

    def _far_over(self, row: np.ndarray, gamma: float, err: float, cap: int) -> bool:
        """The strided pre-check (:meth:`precheck`): the ball has far more than ``cap`` candidates."""
        n = self.precheck(cap)
        return bool(n) and int(np.count_nonzero(self.candidates_mask(row[:: self.sample_stride], gamma, err))) >= n

    def _candidates(
        self, w: int, row: np.ndarray, gamma: float, err: float, limit: int | None
    ) -> npt.NDArray[np.int64] | None:
        if limit is not None and self._far_over(row, gamma, err, limit):
            # a strided sample says the ball is far over the limit: skip the full pass (this
            # only chooses the sampler; every sampler is exact)
            return None
        cond = self.candidates_mask(row, gamma, err)
        if limit is not None and np.count_nonzero(cond) > limit:
            return None
        found = np.flatnonzero(cond)
        if not np.any(found == w):
            found = np.union1d(found, [w])
        return found.astype(np.int64)

    def candidates_mask(self, row: np.ndarray, gamma: float, err: float | np.ndarray) -> np.ndarray:
        """Which screening values ``row`` keep a word as a candidate of a ball of radius ``gamma``, with
        the error term ``err`` of the row's word (:meth:`_err`; an array: one per value, elementwise)."""
        if self.metric == "euclidean":
            cond = row <= np.float32(gamma * gamma * (1 + 4 * _U32) + err)
        elif self.metric == "angular":
            cond = row >= np.float32(math.cos(math.pi * min(gamma, 1.0)) - err)
        else:
            cond = row * np.float32(1 - self._rel) <= np.float32(gamma * (1 + 4 * _U32) + 1e-30)
        return np.asarray(cond)

    def lower_bounds(self, w: int, row: np.ndarray) -> npt.NDArray[np.float32]:
        """Values ``lb[y] <= d(w, y)`` for every ``y`` (float32, from a screening row)."""
        if not self.screening:
            return np.zeros(self.size, dtype=np.float32)
        lb = self.bound_values(w, row)
        lb[w] = 0.0
        return lb

    def bound_values(self, w: int, values: np.ndarray) -> npt.NDArray[np.float32]:
        """Lower bounds on the distance from ``w`` of words whose screening values are ``values``.

        The map is monotone (non-decreasing in the screening value for euclidean,
        manhattan and chebyshev; non-increasing in the cosine for angular), so the bound of
        a threshold value bounds every word beyond that threshold.
        """
        if not self.screening:
            return np.zeros(np.shape(values), dtype=np.float32)
        err = self._err(w)
        return self._bound_values(values, np.float32(err))

    def bound_values_rows(self, ws: npt.NDArray[np.int64], values: np.ndarray) -> npt.NDArray[np.float32]:
        """:meth:`bound_values` of each row ``values[i]`` for the query ``ws[i]`` at once (same arithmetic)."""
        if not self.screening:
            return np.zeros(np.shape(values), dtype=np.float32)
        return self._bound_values(values, self._errs32(np.asarray(ws))[:, None])

    def _bound_values(self, values: np.ndarray, err: Any) -> npt.NDArray[np.float32]:
        if self.metric == "euclidean":
            lb = values - err
            np.maximum(lb, 0, out=lb)
            np.sqrt(lb, out=lb)
            lb *= np.float32(1 - 4 * _U32)
        elif self.metric == "angular":
            lb = values + err
            np.clip(lb, -1, 1, out=lb)
            np.arccos(lb, out=lb)
            lb *= np.float32(1 / math.pi)
            lb -= np.float32(1e-6)  # float32 arccos and the division round
            np.maximum(lb, 0, out=lb)
        else:
            lb = values * np.float32(1 - self._rel)
        return np.asarray(lb, dtype=np.float32)


# -- the distribution --------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class TemDistributions:
    """TEM's output distributions for a block of input words: ``Pr[M(q_i) = y] = weights[i, y] / z[i]``.

    Attributes
    ----------
    t
        ``(b, V)`` truncated distances ``min(d(q_i, y), gamma)`` (the distance rows, clipped
        in place); ``t[i, q_i] = 0``.
    weights
        ``(b, V)`` ``exp(-a t)`` in the dtype of the distances; the input word has weight 1.
    inside
        ``(b, V)`` bool: ``y`` is in the ball ``L_w = {y : d(w, y) <= gamma}``.
    z
        ``(b,)`` float64 normalisers, ``>= 1``.
    ball
        ``(b,)`` ``|L_w|``; the other ``V - ball`` words each have weight :attr:`w_gamma`.
    t_gamma, w_gamma
        The truncation distance as stored in :attr:`t` (gamma rounded to its dtype) and its
        weight ``exp(-a t_gamma)``, computed with the same arithmetic as :attr:`weights`, so
        every word outside the ball has exactly this weight.
    """

    t: np.ndarray
    weights: np.ndarray
    inside: npt.NDArray[np.bool_]
    z: npt.NDArray[np.float64]
    ball: npt.NDArray[np.int64]
    t_gamma: float
    w_gamma: float

    @property
    def p_outside(self) -> npt.NDArray[np.float64]:
        """Probability of each word outside the ball, per row."""
        return np.asarray(self.w_gamma / self.z, dtype=np.float64)


def tem_distributions(
    d: np.ndarray, q: npt.NDArray[np.int64], a: float, gamma: float, *, weights: np.ndarray | None = None
) -> TemDistributions:
    """THE arithmetic of TEM's output distribution, for a block of input words ``q`` at once.

    ``d`` holds the distances (``b x V``, float32 or float64) from each ``q[i]`` to every
    word; it is overwritten with ``t = min(d, gamma)`` (and ``d[i, q[i]] = 0``). With
    ``a = epsilon / 2`` the weight of ``y`` is ``exp(-a t_y)``: ``exp(-a d)`` inside the
    ball and the constant ``exp(-a gamma)`` outside it (the bottom element, shared by the
    outside words). The input word has weight ``exp(0) = 1``, the largest, so ``z >= 1``
    and nothing overflows: no log-space normalisation is needed, and a weight that
    underflows is a probability below the smallest float anyway. ``weights`` is optional
    scratch of ``d``'s shape and dtype. :meth:`TruncatedExponential.compact_distribution`
    calls this with a block of one row; calibration's bulk statistics with many.
    """
    dt = d.dtype
    d[np.arange(q.size), q] = 0.0
    g, w_gamma = truncation(dt, a, gamma)
    inside = d <= g
    ball = np.count_nonzero(inside, axis=1).astype(np.int64)
    np.minimum(d, g, out=d)
    w = np.empty_like(d) if weights is None else weights
    with np.errstate(over="ignore"):
        np.multiply(d, dt.type(-a), out=w)
    np.exp(w, out=w)
    z = w.sum(axis=1, dtype=np.float64)
    return TemDistributions(d, w, inside, z, ball, float(g), w_gamma)


def truncation(dt: npt.DTypeLike, a: float, gamma: float) -> tuple[Any, float]:
    """``(t_gamma, w_gamma)``: gamma in ``dt`` and the weight ``exp(-a t_gamma)`` of a word outside the ball.

    Computed with the arithmetic of :func:`tem_distributions` (``dt`` multiply, then exp).
    An enormous gamma is inf in float32: no truncation then, and an outside weight of 0.
    """
    dtype: np.dtype[Any] = np.dtype(dt)
    with np.errstate(over="ignore"):
        g = np.asarray([gamma], dtype=dtype)
        prod = np.multiply(g, np.asarray(-a, dtype=dtype))
    return g[0], float(np.exp(prod)[0])
