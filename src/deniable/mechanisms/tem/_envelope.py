"""TEM's k-NN envelope at one epsilon and gamma: the arithmetic every envelope sampler shares.

A k-NN table (:mod:`._tables`) holds E = the k words with the smallest screening values
(ids sorted, exact float64 distances), then (id -1) a distance ``d_env`` with
``d(w, y) >= d_env`` for every ``y`` outside E (a proven lower bound from the float32
screening), then (ids -1) a sketch of the far distances. The envelope ``g`` is the true
weight ``exp(-a min(d, gamma))`` on E and ``exp(-a min(d_env, gamma))`` >= the true weight on
each word outside E; with prepared far bounds (:mod:`._far`), a word whose envelope puts
enough mass outside E uses the tighter bound of each cluster instead (its *far layout*). A
proposal from ``g`` accepted with probability ``weight / g`` follows the exact distribution.

:class:`Envelope` computes, for the words of a block: E's cumulative weights, E's mass, the
total envelope mass, the cost of sampling under it (bound and estimate), which words use
the far bounds and their layouts. The batched sampler (:mod:`._sampler`), the lazy path
(:mod:`._lazy`), the history-free sampler (:mod:`._oblivious`) and the totals artefact
(:mod:`._totals`) all call it, so the totals prepared on disk are bit for bit the sampler's.
:class:`Prepared` holds the prepared artefacts a mechanism opened (the envelope reads the
far bounds and the far layouts there).

May import: :mod:`._far` (the type of the far bounds), :mod:`._shared`, :mod:`._tables`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from ._far import PreparedFar
from ._shared import Table
from ._tables import PreparedKnn

__all__ = ["KNN_WORDS", "Envelope", "Prepared", "usable"]

#: The k-NN envelope sampler is used for a word only when its envelope mass is at most
#: this many times the explicit mass (a bound on the expected proposals per token) ...
KNN_MAX_RATIO = 1024.0
#: ... or when the estimated expected proposals per token (envelope mass over an estimate
#: of the true mass, from the sketch of the far distances) are at most this. Only the
#: choice of sampler depends on the estimate; the draws are exact either way.
KNN_MAX_EST = 256.0
#: Words whose envelopes are formed at once (their tables, weights and far layouts: 9 bytes
#: x 1,024 clusters a word): a block's arrays stay in cache, where all of a large batch's
#: words at once did not.
KNN_WORDS = 1 << 10
#: rows of far layouts computed together (64 x 1,024 clusters x 8 bytes: in L2 cache)
_LAYOUT_ROWS = 64
#: Rows of a column-major cumulative array (E's weights, far layouts: :meth:`Envelope.far_layout_columns`)
#: formed at once: 64 x 2,048 tokens x 8 bytes stay in the L2 cache between a block's passes
_COLUMN_BLOCK = 64
#: A word's envelope uses the far bounds when its k-NN envelope puts at least this share
#: of its mass outside E (at eps >= 10 most words put far less: the bounds would change
#: their totals little and cost a 1,024-cluster layout each).
FAR_MIN_SHARE = 1.0 / 64


def usable(bound: npt.ArrayLike, est: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """Which envelopes the k-NN envelope sampler uses (cheap enough, by ``bound`` or ``estimate``)."""
    return np.asarray((np.asarray(bound) <= KNN_MAX_RATIO) | (np.asarray(est) <= KNN_MAX_EST))


class Prepared:
    """The prepared k-NN tables (and envelope totals), looked up once per mechanism (thread-safe).

    ``memo``: envelope totals of the words met so far in this process, when no totals are
    prepared (not history-free: it is per-word state); NaN where not computed yet.
    ``far``: the prepared far bounds, when there are (they tighten the envelope of far words).
    ``layout_rows`` / ``layouts``: the far layouts prepared with the totals (:func:`._totals.write_layouts`).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loaded = False
        self.knn: PreparedKnn | None = None
        self.totals: npt.NDArray[np.float64] | None = None
        self.memo: npt.NDArray[np.float64] | None = None
        self.far: PreparedFar | None = None
        self.layout_rows: npt.NDArray[np.int32] | None = None
        self.layouts: npt.NDArray[np.float64] | None = None
        #: the history-free (data-oblivious) sampler's plan: (proposals per token, far bounds used)
        self.rounds: tuple[int, bool] | None = None
        #: ... and, with the plain envelope, whether E is proposed uniformly (the "E slice",
        #: :func:`._oblivious.oblivious_plan`) instead of by its cumulative weights
        self.uniform_e = False
        #: the content ids of the opened artefacts that choose the samplers (k-NN tables, far bounds)
        self.sources: dict[str, str] = {}


class Envelope:
    """The k-NN envelope of TEM with ``a = epsilon / 2`` and ``gamma``, over ``v`` words and k-NN tables of ``k``.

    ``prepared``: the mechanism's prepared artefacts (the far bounds, when there are, are
    read from it at each call).
    """

    def __init__(self, v: int, a: float, gamma: float, k: int, prepared: Prepared) -> None:
        self.v, self.a, self.gamma, self.k = v, a, gamma, k
        self.prepared = prepared
        #: words proposed by the outside part of the envelope: all ``V`` (members of E drawn
        #: there are rejected, see :mod:`._sampler`), or none when E is the vocabulary
        self.n_rest = v if k < v else 0
        self._lut: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None = None  # far_tables

    def weights_exponent(self, d: np.ndarray) -> np.ndarray:
        """``-a * min(d, gamma)`` (overflow to -inf is fine: the weight is then 0)."""
        with np.errstate(over="ignore"):
            return -self.a * np.minimum(d, self.gamma)

    def costs(self, tails: np.ndarray) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """``(bound, estimate)`` of the expected proposals per token for many k-NN tables at once
        (``tails``: their distance rows, stacked; each row's result does not depend on the others:
        the exponentials of contiguous rows, each row's sum and mean, the outside weight by
        ``math.exp``; tests/test_calibrate_shared_balls.py). ``inf`` where the envelope is unusable."""
        k = self.k
        with np.errstate(over="ignore", invalid="ignore"):
            m_e = np.exp(self.weights_exponent(tails[:, :k])).sum(axis=1)
            if self.n_rest:
                outside = np.array([math.exp(x) for x in self.weights_exponent(tails[:, k]).tolist()])
                total = m_e + self.n_rest * outside
            else:
                total = m_e + 0.0
            far = (self.v - k) * np.exp(self.weights_exponent(tails[:, k + 1 :])).mean(axis=1)
            ok = (m_e > 0) & np.isfinite(total)
            bound = np.where(ok, total / m_e, math.inf)
            est = np.where(ok, total / np.maximum(np.minimum(m_e + far, total), m_e), math.inf)
        return bound, est

    def arrays(
        self,
        entries: list[Table] | Table,
        words: npt.NDArray[np.int64],
        totals: npt.NDArray[np.float64] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(E ids, cumulative E weights, E mass, total envelope mass, log envelope, bound, estimate)``.

        ``words``: whose tables ``entries`` are; ``totals``: their envelope totals when
        known (computed by this method before: prepared or memoized, bit for bit the same),
        which skips recomputing the far part. ``bound = total / E mass`` bounds the
        expected proposals per token (the true mass is at least the E mass);
        ``estimate = total / (E mass + the sketched far mass)`` estimates them. Both are
        ``inf`` when the envelope is unusable. With prepared far bounds, the outside part's
        mass is that of :meth:`far_layout` (``log envelope`` is then the bound at d_env alone).
        """
        k = self.k
        if isinstance(entries, tuple):  # already stacked: (V', width) ids and distances
            ids = np.asarray(entries[0][:, :k], dtype=np.int64)
            tail = np.asarray(entries[1], dtype=np.float64)
        else:
            ids = np.stack([np.asarray(e[0][:k], dtype=np.int64) for e in entries])
            tail = np.stack([np.asarray(e[1], dtype=np.float64) for e in entries])
        dist, d_env, sketch = tail[:, :k], tail[:, k], tail[:, k + 1 :]
        cum = np.cumsum(np.exp(self.weights_exponent(dist)), axis=1)
        m_e = cum[:, -1]
        log_env = self.weights_exponent(d_env)
        n_rest = self.n_rest
        far = self.prepared.far
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if totals is not None:
                outside = totals - m_e
            elif not n_rest:
                outside = np.zeros_like(m_e)
            elif far is not None:
                outside = n_rest * np.exp(log_env)
                with_far = np.flatnonzero(self.far_words(m_e, log_env))
                for s in range(0, with_far.size, KNN_WORDS):
                    part = with_far[s : s + KNN_WORDS]
                    outside[part] = self.far_layout(words[part], log_env[part])[0][:, -1]
            else:
                outside = n_rest * np.exp(log_env)
            total = m_e + outside if totals is None else np.asarray(totals, dtype=np.float64)
            far_est = (self.v - k) * np.exp(self.weights_exponent(sketch)).mean(axis=1)
            z_est = np.minimum(m_e + far_est, total)
            ok = (m_e > 0) & np.isfinite(total)
            bound = np.where(ok, total / m_e, np.inf)
            est = np.where(ok, total / np.maximum(z_est, m_e), np.inf)
        return ids, cum, m_e, total, log_env, bound, est

    def totals(self, words: npt.NDArray[np.int64], entries: Table) -> npt.NDArray[np.float64]:
        """The k-NN envelope's total mass of each word, 0.0 where the self-first sampler does not apply.

        It applies when the word's envelope is usable (the same test as the sampler's,
        :func:`usable`) and the word is in its own E (weight exactly 1: ``d(w, w) = 0``).
        """
        ids, _, _, total, _, bound, est = self.arrays(entries, words)
        ok = usable(bound, est)
        ok &= (ids == words[:, None]).any(axis=1)
        return np.where(ok, total, 0.0)

    def far_words(self, m_e: npt.NDArray[np.float64], log_env: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
        """Which words' envelopes use the far bounds: those whose k-NN envelope puts at least
        :data:`FAR_MIN_SHARE` of its mass outside E (elsewhere the bounds change little and
        cost a layout of every cluster). A function of the word's table and epsilon only, the
        same wherever the totals are computed and wherever the sampler draws."""
        n_rest = self.n_rest
        if self.prepared.far is None or not n_rest:
            return np.zeros(m_e.shape, dtype=bool)
        with np.errstate(over="ignore", invalid="ignore"):
            outside = n_rest * np.exp(log_env)
            return np.asarray(outside >= FAR_MIN_SHARE * (m_e + outside))

    def far_layout(
        self, words: npt.NDArray[np.int64], log_env: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.uint8]]:
        """``(cumulative cluster masses, bound levels)`` of the outside part, one row a word.

        Cluster ``c`` of the prepared far bounds gets the envelope
        ``exp(-a min(max(lb(w, c), d_env), gamma))`` on each of its ``n_c`` words: at least
        the true weight of every word of ``c`` outside E (``d >= lb`` for every member,
        ``d >= d_env`` outside E), so the outside part keeps its exactness argument with a
        smaller mass. ``lb = level * step`` takes 256 values, so the envelope is
        ``min(G[level], exp(log_env))`` with ``G`` a per-epsilon table (:meth:`far_tables`;
        exp is monotone, so this is the formula's value exactly); the sampler's acceptance
        uses :meth:`far_log_envelope`, its logarithm. The arithmetic is per row (the
        totals computed in any chunking agree bit for bit with the sampler's).
        """
        far = self.prepared.far
        assert far is not None
        q = far.levels(words)
        g, env = self.far_tables()[1], np.exp(log_env)
        cum = np.empty(q.shape, dtype=np.float64)
        for s in range(0, words.size, _LAYOUT_ROWS):  # rows a few at a time: the passes stay in cache
            mass = g[q[s : s + _LAYOUT_ROWS]]
            np.minimum(mass, env[s : s + _LAYOUT_ROWS, None], out=mass)
            mass *= far.counts
            np.cumsum(mass, axis=1, out=cum[s : s + _LAYOUT_ROWS])
        return cum, q

    def cumulative_weights_columns(self, dist: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``cumsum(exp(weights_exponent(dist)), axis=1)``, bit for bit, stored column-major.

        The same sequential sums (``cumsum`` adds left to right) as one vector addition per
        column over every row at once instead of ``cumsum`` along each row (numpy's is a
        scalar loop: ~25x slower on 2,048 rows of 256): the history-free sampler's E weights
        (:mod:`._oblivious`). The result is the transpose of a C array (``.flags.f_contiguous``),
        which :func:`._sampler.count_at_most` and :func:`._sampler.segments` search in place.
        ``out``: a C array of shape ``dist.shape[::-1]`` to write into (a caller's reused
        buffer: no pages to fault a call). Formed :data:`_COLUMN_BLOCK` columns at a time
        (:func:`_accumulate_blocks`).
        """
        if out is None:
            out = np.empty(dist.shape[::-1], dtype=np.float64)
        gamma, a = self.gamma, -self.a

        def fill(block: np.ndarray, s: int) -> None:
            np.minimum(dist[:, s : s + block.shape[0]].T, gamma, out=block)
            with np.errstate(over="ignore"):
                np.multiply(a, block, out=block)
            np.exp(block, out=block)

        _accumulate_blocks(out, fill)
        return out.T

    def far_layout_columns(
        self, words: npt.NDArray[np.int64], log_env: npt.NDArray[np.float64], out: np.ndarray | None = None
    ) -> npt.NDArray[np.float64]:
        """:meth:`far_layout`'s cumulative masses, bit for bit, stored column-major (as
        :meth:`cumulative_weights_columns`: one vector addition per cluster instead of ``cumsum``
        along each row, which was a third of the history-free sampler's time). ``out``: a C
        array of shape ``(C, len(words))`` to write into (a caller's reused buffer)."""
        far = self.prepared.far
        assert far is not None
        g, env = self.far_tables()[1], np.exp(log_env)
        q = far.levels(words)  # (len(words), C) uint8
        if out is None:
            out = np.empty(q.shape[::-1], dtype=np.float64)

        def fill(block: np.ndarray, s: int) -> None:
            # every level indexes the 256-entry table: "clip" is not buffered (a buffered take
            # casting the uint8 levels was ~3x slower, the pass that dominated the layout)
            np.take(g, q[:, s : s + block.shape[0]].T, out=block, mode="clip")
            np.minimum(block, env[None, :], out=block)
            block *= far.counts[s : s + block.shape[0], None]

        _accumulate_blocks(out, fill)
        return out.T

    def block_layouts(
        self, words: npt.NDArray[np.int64], log_env: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int8], tuple[np.ndarray, np.ndarray]]:
        """The far layouts of ``words`` (:meth:`far_layout`'s values): ``(row, src, (computed, prepared))``.

        The rows prepared with the totals are read where they are (memory-mapped, not
        copied: a draw reads a few entries of its word's row), the others computed here;
        word ``i``'s layout is row ``row[i]`` of table ``src[i]`` (0 computed, 1 prepared).
        """
        holder = self.prepared
        stored, prepared = holder.layout_rows, holder.layouts
        row = np.full(words.size, -1, dtype=np.int64)
        if stored is not None and prepared is not None:
            known = np.flatnonzero(words < stored.size)
            row[known] = stored[words[known]]
        else:
            prepared = np.empty((0, 0))
        src = (row >= 0).astype(np.int8)
        rest = np.flatnonzero(row < 0)
        row[rest] = np.arange(rest.size)
        return row, src, (self.far_layout(words[rest], log_env[rest])[0], prepared)

    def far_log_envelope(self, q: npt.NDArray[np.uint8], log_env: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """``log`` of the far envelope of clusters at levels ``q`` for words with k-NN ``log_env`` (elementwise)."""
        return np.minimum(self.far_tables()[0][q], log_env)

    def far_tables(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """``(L, G)``: ``L[q] = -a min(q * step, gamma)`` and ``G = exp(L)``, for the 256 bound levels."""
        tables = self._lut
        if tables is None:
            far = self.prepared.far
            assert far is not None
            log_g = self.weights_exponent(np.arange(256, dtype=np.float64) * far.step)
            tables = (log_g, np.exp(log_g))
            self._lut = tables
        return tables


def _accumulate_rows(a: np.ndarray) -> None:
    """``a[c] += a[c - 1]`` for c = 1, 2, ...: ``cumsum(a, axis=0)`` in place, the same sequential sums."""
    for c in range(1, a.shape[0]):
        np.add(a[c - 1], a[c], out=a[c])


def _accumulate_blocks(out: np.ndarray, fill: Callable[[np.ndarray, int], None]) -> None:
    """``out[c] = f(c) + out[c - 1]`` (``cumsum`` along axis 0 of the values ``f``, the same sequential sums).

    ``fill(block, s)`` writes the values of rows ``s, s + 1, ...`` into ``block`` (a view of
    ``out``), :data:`_COLUMN_BLOCK` rows at a time: each block's passes (its values, then its
    sums) stay in cache instead of going over the whole array (megabytes a chunk) once each.
    """
    for s in range(0, out.shape[0], _COLUMN_BLOCK):
        block = out[s : s + _COLUMN_BLOCK]
        fill(block, s)
        if s:
            np.add(out[s - 1], block[0], out=block[0])
        _accumulate_rows(block)
