"""Distances for TEM: exact float64 distances, and fast float32 screening with proven lower bounds.

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

import numpy as np
import numpy.typing as npt

from ..embedding import Embedding

__all__ = ["TEM_METRICS", "Geometry"]

#: Metrics TEM supports on real-valued embeddings (all true metrics).
TEM_METRICS = ("euclidean", "manhattan", "chebyshev", "angular")

_U32 = 2.0**-24  # unit roundoff of float32
_PRECHECK = 4096  # sample size of the strided pre-check in candidates()


class Geometry:
    """Distance computations on one embedding for one metric."""

    def __init__(self, embedding: Embedding, metric: str) -> None:
        self.metric = metric
        self.x = embedding.vectors  # (V, n) float32, read-only
        self.size, self.dim = self.x.shape
        n = self.dim
        # a priori bound on float32 error, with a factor 2 of safety (see docs/tem.md)
        self._rel = 2.0 * (n + 6) * _U32
        norms = np.sqrt(np.einsum("ij,ij->i", self.x, self.x, dtype=np.float64))
        self._max_norm = float(norms.max()) if norms.size else 0.0
        # float32 screening needs |x|^2 (and the products) to be finite in float32; for
        # absurdly large vectors it is skipped: every word is a candidate, every bound 0
        self.screening = self._max_norm < 1e15
        self._aug: np.ndarray | None = None
        self._unit32: np.ndarray | None = None
        if not self.screening:
            pass
        elif metric == "euclidean":
            aug = np.empty((n + 1, self.size), dtype=np.float32)
            np.multiply(self.x.T, -2.0, out=aug[:-1])
            aug[-1] = (norms * norms).astype(np.float32)
            self._aug = aug  # [-2 y ; |y|^2]: one product gives |y|^2 - 2 q.y
            self._sq = (norms * norms).astype(np.float32)
        elif metric == "angular":
            unit = self.x / np.where(norms == 0, 1.0, norms)[:, None]
            self._unit32 = np.ascontiguousarray(unit.astype(np.float32))
            self._unit32_t = np.ascontiguousarray(self._unit32.T)

    # -- the exact distance ------------------------------------------------------------
    def exact(self, w: int, ys: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Exact float64 distances ``d(w, y)`` for each ``y`` in ``ys`` (``d(w, w) = 0``).

        Row by row: a distance does not depend on which other rows are computed with it
        (chunks of 32768 rows bound the memory).
        """
        ys = np.asarray(ys, dtype=np.int64)
        chunk = 1 << 15
        if ys.size > chunk:
            return np.concatenate([self._exact(w, ys[s : s + chunk]) for s in range(0, ys.size, chunk)])
        return self._exact(w, ys)

    def _exact(self, w: int, ys: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        # the paired code path (a one-element ``ws`` broadcasts), so that a distance is bit
        # for bit the same whichever of the two computes it
        return self.exact_paired(np.array([w], dtype=np.int64), ys)

    def exact_paired(self, ws: npt.NDArray[np.int64], ys: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Exact ``d(ws[i], ys[i])``: the arithmetic behind :meth:`exact` too (``ws`` may have one element)."""
        a = self.x[ws].astype(np.float64)
        b = self.x[ys].astype(np.float64)
        if self.metric == "angular":
            an = np.sqrt(np.einsum("ij,ij->i", a, a))
            a /= np.where(an == 0, 1.0, an)[:, None]
            bn = np.sqrt(np.einsum("ij,ij->i", b, b))
            b /= np.where(bn == 0, 1.0, bn)[:, None]
            b *= a
            d = np.arccos(np.clip(b.sum(axis=1), -1.0, 1.0)) / np.pi
        else:
            b -= a
            if self.metric == "euclidean":
                d = np.sqrt(np.einsum("ij,ij->i", b, b))
            elif self.metric == "manhattan":
                d = np.abs(b).sum(axis=1)
            else:
                d = np.abs(b).max(axis=1)
        d[ws == ys] = 0.0
        return np.asarray(d, dtype=np.float64)

    # -- screening -------------------------------------------------------------------
    def screen(self, q: npt.NDArray[np.int64], out: np.ndarray) -> None:
        """Fill ``out`` (``len(q) x V`` float32) with the screening values of each query.

        euclidean: approximate squared distances; angular: approximate cosines;
        manhattan / chebyshev: approximate distances.
        """
        if not self.screening:
            out[...] = 0.0
        elif self.metric == "euclidean":
            assert self._aug is not None
            left = np.empty((q.size, self.dim + 1), dtype=np.float32)
            left[:, :-1] = self.x[q]
            left[:, -1] = 1.0
            np.matmul(left, self._aug, out=out)
            out += self._sq[q][:, None]
        elif self.metric == "angular":
            np.matmul(self._unit32[q], self._unit32_t, out=out)  # type: ignore[index]
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

    def _candidates(
        self, w: int, row: np.ndarray, gamma: float, err: float, limit: int | None
    ) -> npt.NDArray[np.int64] | None:
        if limit is not None and row.size > 64 * _PRECHECK:
            # a strided sample says the ball is far over the limit: skip the full pass (this
            # only chooses the sampler; every sampler is exact)
            stride = row.size // _PRECHECK
            part = self._candidates_mask(row[::stride], gamma, err)
            if np.count_nonzero(part) * stride > 4 * limit + 4 * row.size // 64:
                return None
        cond = self._candidates_mask(row, gamma, err)
        if limit is not None and np.count_nonzero(cond) > limit:
            return None
        found = np.flatnonzero(cond)
        if not np.any(found == w):
            found = np.union1d(found, [w])
        return found.astype(np.int64)

    def _candidates_mask(self, row: np.ndarray, gamma: float, err: float) -> np.ndarray:
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
        if self.metric == "euclidean":
            lb = values - np.float32(err)
            np.maximum(lb, 0, out=lb)
            np.sqrt(lb, out=lb)
            lb *= np.float32(1 - 4 * _U32)
        elif self.metric == "angular":
            lb = values + np.float32(err)
            np.clip(lb, -1, 1, out=lb)
            np.arccos(lb, out=lb)
            lb *= np.float32(1 / math.pi)
            lb -= np.float32(1e-6)  # float32 arccos and the division round
            np.maximum(lb, 0, out=lb)
        else:
            lb = values * np.float32(1 - self._rel)
        return np.asarray(lb, dtype=np.float32)
