"""TEM's lazy per-word path: tables built for the words of a run, and the samplers that need no
prepared artefact (docs/tem.md, samplers 1-3 and 5).

For the tokens of words without a usable prepared envelope: a pilot of uniform rejection
over all of them, kept when its acceptance is high; then, per distinct word, the sampler
:func:`_plans` names from public facts about the word (its k-NN table, how many candidates
its ball has) and its count in the call: its ball table ``L_w`` (inverse CDF,
:func:`sample_rest`), its k-NN envelope (the batched sampler, :mod:`._sampler`) or the
shell sampler's lower bounds. The plans of a call's words are computed together (their
envelope costs by :meth:`Envelope.costs`, many rows at once).
The tables (ball and k-NN) and candidate counts built from a word's float32 screening pass
over the vocabulary (:func:`rows`) live in this process's memory only (never on disk) and
not at all when history-free; they save the next scan and change no draw (keyed:
tests/test_tem_keyed.py). Instances at other epsilons over public words (the calibration's
points) also share :class:`WordSummaries`, what a word's screening row says at every gamma.

May import: :mod:`._envelope`, :mod:`._geometry`, :mod:`._sampler`, :mod:`._shared`,
:mod:`._tables`; the mechanism (:mod:`._mechanism`, whose state these functions read) only
for type checking.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..._progress import progress
from . import _envelope
from ._envelope import usable
from ._geometry import Geometry
from ._sampler import KnnDraws, sample_knn
from ._shared import Table
from ._tables import KNN_SKETCH, knn_entry

if TYPE_CHECKING:
    from ._mechanism import TruncatedExponential

__all__ = [
    "WordSummaries",
    "build_knn",
    "build_table",
    "knn_lookup",
    "privatize_general",
    "rows",
    "sample_rest",
    "table_rest",
    "total",
]

#: The most shells of the shell sampler (bounds its per-word bookkeeping).
_MAX_SHELLS = 2048
#: Shell width in log-weight: acceptance >= exp(-_SHELL_H) (before the screening slack).
_SHELL_H = 0.05
#: exp(-x) is 0.0 in float64 beyond this; weights beyond it are exactly zero everywhere.
_LOG_UNDERFLOW = 800.0
#: Tokens processed at once by the uniform-rejection stage (bounds memory).
_CHUNK = 1 << 16
#: The uniform-rejection stage runs only when its pilot acceptance rate is at least this.
_UNIFORM_MIN_RATE = 1.0 / 64
#: A newly scanned word whose k-NN envelope costs at most this many proposals per token
#: is sampled from its k-NN table alone (no ball table is built: that saves a pass over
#: the vocabulary and the disk space of a large ball).
_KNN_PREFER_RATIO = 2.0
#: A newly scanned word gets a ball table when its ball has at most this many words, or
#: at most _TABLE_AMORTISE x (its tokens in the batch) x (estimated k-NN proposals per
#: token) (and at most table_max); otherwise the k-NN envelope samples it.
_TABLE_MIN = 1024
_TABLE_AMORTISE = 4.0


def privatize_general(
    mech: TruncatedExponential, flat: npt.NDArray[np.int64], rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """Exact draws for ``flat``: the k-NN envelope of prepared words, uniform rejection, then per
    distinct word its ball table, its k-NN envelope or shells (module docstring).

    Keyed: which sampler draws a word's tokens, and so how ``rng`` is consumed, is a function
    of the word, its count in ``flat`` and the public configuration (the embedding, the options,
    the prepared artefacts) only. The tables this process remembers (:func:`_plans`) only save
    the scans that would rebuild them: a cold and a warm process map one generator state to
    the same output (issue 40; tests/test_tem_keyed.py).
    """
    out = np.empty(flat.size, dtype=np.int64)
    uniq, inv = np.unique(flat, return_inverse=True)
    inv = inv.ravel()
    done_word = np.zeros(uniq.size, dtype=bool)
    prepared = mech._prepared_knn()
    if prepared is not None:  # every word has its prepared k-NN table: its envelope where cheap
        draws = KnnDraws(uniq, prepared, inv, np.arange(flat.size, dtype=np.int64))
        done_word = sample_knn(mech._env, mech._geo, draws, out, rng)
    need_pos = np.flatnonzero(~done_word[inv])
    if need_pos.size:
        done = _uniform_stage(mech, flat[need_pos], out, need_pos, rng)
        rest = need_pos[~done]
        if rest.size:
            _row_stage(mech, flat, rest, out, rng)
    return out


def knn_lookup(mech: TruncatedExponential, words: npt.NDArray[np.int64]) -> list[Table | None]:
    """k-NN tables: prepared ones, else (not history-free) those built earlier in this process."""
    prepared = mech._prepared_knn()
    if prepared is not None:
        return prepared.get_many(words)
    if mech.history_free:
        return [None] * words.size
    return mech._knn.get_many(words)


# Table sampling. The unnormalised mass of a word is laid out as
#   [0, 1)                 the input word itself (weight exp(0) = 1)
#   [1, 1 + inner)         the other words of L_w, in id order (weights exp(-a d))
#   [1 + inner, total)     the bottom element: n_out * exp(-a gamma)
# and u ~ Uniform[0, total) picks the output by inverse CDF.
def table_rest(mech: TruncatedExponential, w: int, table: Table) -> tuple[np.ndarray, np.ndarray, float]:
    """Ids of ``L_w`` minus ``w``, their cumulative weights, and the bottom mass."""
    ids = np.asarray(table[0], dtype=np.int64)
    keep = ids != w
    with np.errstate(over="ignore"):
        cum = np.cumsum(np.exp(-mech._a * np.asarray(table[1])[keep]))
        log_bottom = -mech._a * mech._gamma
    n_out = mech.embedding.size - ids.size
    bottom = n_out * math.exp(max(log_bottom, -_LOG_UNDERFLOW)) if n_out else 0.0
    return ids[keep], cum, bottom


def total(mech: TruncatedExponential, w: int, table: Table) -> float:
    _, cum, bottom = table_rest(mech, w, table)
    return 1.0 + (float(cum[-1]) if cum.size else 0.0) + bottom


def sample_rest(
    mech: TruncatedExponential, w: int, table: Table, u: np.ndarray, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """Outputs for ``u`` uniform on ``[0, total - 1)``: the part of the layout after ``w``."""
    others, cum, bottom = table_rest(mech, w, table)
    inner = float(cum[-1]) if cum.size else 0.0
    res = np.empty(u.size, dtype=np.int64)
    # with no bottom mass, a u rounded up past `inner` still belongs to the last word
    inside = u < inner if bottom > 0 or not others.size else np.ones(u.size, dtype=bool)
    if others.size:
        res[inside] = others[np.minimum(np.searchsorted(cum, u[inside], side="right"), others.size - 1)]
    nb = u.size - int(inside.sum())
    if nb:
        res[~inside] = _uniform_outside(mech, np.asarray(table[0], dtype=np.int64), nb, rng)
    return res


def _sample_table(
    mech: TruncatedExponential, w: int, table: Table, count: int, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """``count`` draws from the exact distribution of ``w`` given its table ``L_w``."""
    z = mech._totals.get(w)
    if z is None:  # (the same value whether remembered or not)
        z = total(mech, w, table)
        if not mech.history_free:
            mech._totals[w] = z
    u = rng.random(count) * z
    res = np.full(count, w, dtype=np.int64)
    rest = u >= 1.0
    if rest.any():
        res[rest] = sample_rest(mech, w, table, u[rest] - 1.0, rng)
    return res


def _uniform_outside(
    mech: TruncatedExponential, members: npt.NDArray[np.int64], count: int, rng: np.random.Generator
) -> np.ndarray:
    """``count`` independent uniform draws from the vocabulary minus sorted ``members``."""
    v = mech.embedding.size
    if members.size * 4 > v * 3:  # few words outside: list them
        mask = np.ones(v, dtype=bool)
        mask[members] = False
        outside = np.flatnonzero(mask)
        return outside[rng.integers(0, outside.size, size=count)]
    res = np.empty(count, dtype=np.int64)
    filled = 0
    while filled < count:  # rejection: accept with probability >= 1/4 per draw
        cand = rng.integers(0, v, size=count - filled)
        at = np.minimum(np.searchsorted(members, cand), members.size - 1)
        ok = cand[members[at] != cand]
        res[filled : filled + ok.size] = ok
        filled += ok.size
    return res


def _uniform_stage(
    mech: TruncatedExponential, words: np.ndarray, out: np.ndarray, positions: np.ndarray, rng: np.random.Generator
) -> npt.NDArray[np.bool_]:
    """Rejection from the uniform proposal (envelope = the maximum weight, 1).

    Runs one pilot round; continues only while it is cheap (acceptance >= 1/64),
    for a bounded number of rounds. Returns which tokens got their output.
    """
    v = mech.embedding.size
    n = words.size
    done = np.zeros(n, dtype=bool)
    if _UNIFORM_MIN_RATE > 1.0:  # disabled
        return done
    max_rounds = 1
    for s in range(0, n, _CHUNK):
        pend = np.arange(s, min(n, s + _CHUNK))
        rounds = 0
        while pend.size and rounds < max_rounds:
            prop = rng.integers(0, v, size=pend.size)
            d = mech._geo.exact_paired(words[pend], prop)
            acc = rng.random(pend.size) < np.exp(mech._env.weights_exponent(d))
            out[positions[pend[acc]]] = prop[acc]
            done[pend[acc]] = True
            if s == 0 and rounds == 0:
                rate = float(acc.mean())
                if rate < _UNIFORM_MIN_RATE:
                    return done  # not worth it: the rest goes to tables / shells
                max_rounds = int(min(512, math.ceil(30.0 / rate)))
            pend = pend[~acc]
            rounds += 1
    return done


def rows(
    mech: TruncatedExponential, words: npt.NDArray[np.int64], show: bool | None = None
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(w, float32 screening row)`` for each word, computed in blocks."""
    for q, rows in _blocks(mech, words, show):
        for r, w in enumerate(q.tolist()):
            yield w, rows[r]


def _blocks(
    mech: TruncatedExponential, words: npt.NDArray[np.int64], show: bool | None = None
) -> Iterator[tuple[npt.NDArray[np.int64], np.ndarray]]:
    """Yield ``(words, float32 screening rows)`` block by block (the buffer is reused)."""
    v = mech.embedding.size
    block = max(1, min(128, mech.block_bytes // (4 * v)))
    buf = np.empty((min(block, max(words.size, 1)), v), dtype=np.float32)
    # the words of the text being privatized: a bar only when asked for explicitly (its total and
    # timing depend on the input; `deniable prepare -m tem` is the one-time build that shows progress)
    enabled = mech.show_progress is True if show is None else show
    what = f"TEM: new words x {v:,} distances ({mech.metric}, gamma={mech._gamma:.3g})"
    with progress(words.size, what, enabled=enabled) as advance:
        for s in range(0, words.size, block):
            q = words[s : s + block]
            rows = buf[: q.size]
            mech._geo.screen(q, rows)
            yield q, rows
            advance(q.size)


def build_table(mech: TruncatedExponential, w: int, cand: npt.NDArray[np.int64]) -> Table:
    d = mech._geo.exact(w, cand)
    inside = d <= mech._gamma
    table: Table = (cand[inside].astype(np.int32), d[inside])
    if not mech.history_free:
        mech._store.put(w, table)
    return table


def _costs(
    mech: TruncatedExponential, words: npt.NDArray[np.int64], tails: np.ndarray
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """:meth:`Envelope.costs` of each word's k-NN table (``tails``: their distance rows, stacked), as
    arrays, remembered per word unless history-free (a function of the table and epsilon: the same
    remembered or not). The words missing from the memo are costed together (:meth:`Envelope.costs`)."""
    n = words.size
    bound = np.empty(n)
    est = np.empty(n)
    todo = np.ones(n, dtype=bool)
    if not mech.history_free:
        for j, w in enumerate(words.tolist()):
            found = mech._costs.get(w)
            if found is not None:
                bound[j], est[j] = found
                todo[j] = False
    if todo.any():
        b, e = mech._env.costs(tails[todo])
        bound[todo], est[todo] = b, e
        if not mech.history_free:
            mech._costs.update(zip(words[todo].tolist(), zip(b.tolist(), e.tolist(), strict=True), strict=True))
    return bound, est


def _stacked(entries: list[Table | None], at: npt.NDArray[np.intp]) -> Table:
    """The k-NN tables ``entries[j]`` for ``j`` in ``at``: ``(ids, distances)`` stacked (float64 distances)."""
    if not at.size:
        return np.empty((0, 0), dtype=np.int32), np.empty((0, 0), dtype=np.float64)
    chosen = [entries[j] for j in at.tolist()]
    ids = np.stack([e[0] for e in chosen])
    return ids, np.stack([np.asarray(e[1], dtype=np.float64) for e in chosen])


#: :func:`_plans`' codes: the candidate count is needed and not known (a scan), and the three samplers
_NEED_COUNT, _TABLE, _KNN, _SHELLS = 0, 1, 2, 3


def _plans(
    mech: TruncatedExponential,
    bound: npt.NDArray[np.float64],
    est: npt.NDArray[np.float64],
    ncand: npt.NDArray[np.int64],
    exact: npt.NDArray[np.bool_],
    counts: npt.NDArray[np.int64],
) -> npt.NDArray[np.int8]:
    """The sampler of each word (:data:`_TABLE`, :data:`_KNN`, :data:`_SHELLS`; :data:`_NEED_COUNT`
    where its candidate count is needed and not known) whose k-NN envelope costs ``(bound, est)``
    (:func:`_costs`; ``inf``: no k-NN table can be built), with ``ncand`` candidates of its ball
    (:meth:`Geometry.candidate_count`; -1: not known; where not ``exact``, only at least that many)
    and ``counts`` tokens in the call.

    A k-NN envelope that costs little samples the word; else its ball table when the ball is
    small, or the word frequent enough in the call to amortise it; else the envelope when
    usable; else shells. Nothing here depends on what the process remembers.
    """
    cheap = usable(bound, est)  # the envelope sampler would take it
    # a ball table costs one exact distance per member (once; then cached), the k-NN envelope
    # about `est` per token: list the ball only when it is small or the word is frequent
    # enough in this call to amortise it
    need = est > _KNN_PREFER_RATIO
    limit = _limits(mech, cheap, est, counts)
    known = ncand >= 0
    table = need & known & exact & (ncand <= limit)
    unknown = need & (~known | (~exact & (ncand <= limit)))
    plan = np.where(table, _TABLE, np.where(np.isfinite(bound) & cheap, _KNN, _SHELLS)).astype(np.int8)
    plan[unknown] = _NEED_COUNT
    return plan


def _limits(
    mech: TruncatedExponential,
    cheap: npt.NDArray[np.bool_],
    est: npt.NDArray[np.float64],
    counts: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """The largest ball :func:`_plans` lists as a table: ``table_max``, and for a word the envelope
    would take, at most the larger of :data:`_TABLE_MIN` and ``_TABLE_AMORTISE x count x est``."""
    limit = np.full(est.size, mech.table_max, dtype=np.int64)
    at = cheap & np.isfinite(est)  # (a usable est is finite: est <= bound, one of them at most a usable bound;
    if at.any():  # an infinite one is a word without a k-NN table yet, planned after its scan)
        amortised = (_TABLE_AMORTISE * counts[at] * est[at]).astype(np.int64)
        limit[at] = np.minimum(limit[at], np.maximum(_TABLE_MIN, amortised))
    return limit


class WordSummaries:
    """What instances at other epsilons can share about the words they meet, without any screening row.

    A function of the embedding, the metric and each word only (no epsilon, no gamma): the
    instances of the calibration's points share it (``TruncatedExponential.share_knn_tables``),
    over the same public reference words; nothing else holds one. Two parts:

    - **balls**: per word, its ``m`` closest words by screening value (ids and values, and the
      values sorted closest first) and the value that decides :meth:`Geometry.candidate_count`'s
      strided pre-check at ``cap`` (the ``n``-th closest sampled value, where ``n`` sampled words
      in the ball make it answer "far more than ``cap``"; NaN when no ``n`` does). The ball's
      candidates at any gamma are the closest words up to the first that fails the screening test
      (monotone in the value), so :meth:`counts` reads the candidate count by a binary search:
      :meth:`Geometry.candidate_count`'s number where the list ends outside the ball (else: at
      least ``m``), and :meth:`candidates` lists them. 12 bytes a listed word, within
      ``memory_bytes`` (beyond it a word is not summarized, and scanned when needed).
    - **k-NN tables stacked**: each word's k-NN table once, as a row of two matrices, so that a
      point gathers its words' tables at once (:meth:`knn_rows`) instead of stacking a list.
    """

    def __init__(self, size: int, cap: int, memory_bytes: int) -> None:
        self.size, self.cap, self.memory_bytes = size, cap, memory_bytes
        self._lock = threading.Lock()
        self._start = np.zeros(size, dtype=np.int64)
        self._length = np.zeros(size, dtype=np.int64)  # 0: not summarized
        self._pivot = np.full(size, np.nan, dtype=np.float32)
        self._err = np.zeros(size, dtype=np.float64)  # Geometry._err of the word
        room = memory_bytes // 12  # (allocated, not touched: a page is faulted in when first written)
        self._ids = np.empty(room, dtype=np.int32)  # the m closest of each word (in no order) ...
        self._values = np.empty(room, dtype=np.float32)  # ... their screening values ...
        self._sorted = np.empty(room, dtype=np.float32)  # ... and those sorted, closest first
        self._used = 0
        self._knn_row = np.full(size, -1, dtype=np.int64)
        self._knn: Table = (np.empty((0, 0), dtype=np.int32), np.empty((0, 0), dtype=np.float64))
        self._knn_used = 0

    def length(self, w: int) -> int:
        """How many closest words are listed for ``w`` (0: none)."""
        return int(self._length[w])

    def add(self, geo: Geometry, w: int, row: np.ndarray, m: int) -> None:
        """Summarize ``w``'s screening ``row`` with its ``m`` closest words (replacing a shorter summary)."""
        v = self.size
        m = min(m, v)
        if m <= self._length[w] or self._used + m > self._ids.size:
            return
        angular = geo.metric == "angular"
        key = np.negative(row) if angular else row  # smaller = closer
        stride = geo.sample_stride
        sample = np.sort(key[::stride])
        if m >= v:
            cand = np.arange(v)
        else:  # a threshold keeping about 2m words, from the sample (widened until m pass), then the m closest
            q = 2.0 * m / v
            while True:
                thr = sample[min(sample.size - 1, int(q * sample.size))]
                cand = np.flatnonzero(key <= thr)
                if cand.size >= m or q >= 1.0:
                    break
                q *= 4.0
            if cand.size < m:
                cand = np.arange(v)
            if cand.size > m:
                cand = cand[np.argpartition(key[cand], m - 1)[:m]]
        values = row[cand]
        ordered = np.sort(np.negative(values)) if angular else np.sort(values)  # closest first (ties: equal)
        if angular:
            np.negative(ordered, out=ordered)
        pivot = np.float32(np.nan)
        n = geo.precheck(self.cap)  # Geometry.candidate_count's pre-check: n sampled members answer "far more"
        if 0 < n <= sample.size:
            pivot = -sample[n - 1] if angular else sample[n - 1]
        with self._lock:
            end = self._used + m
            if m <= self._length[w] or end > self._ids.size:  # (another thread's summary came first)
                return
            self._ids[self._used : end] = cand
            self._values[self._used : end] = values
            self._sorted[self._used : end] = ordered
            self._start[w], self._length[w] = self._used, m
            self._pivot[w], self._err[w] = pivot, geo._err(w)
            self._used = end

    def counts(
        self, geo: Geometry, words: npt.NDArray[np.int64], gamma: float
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """``(count, exact)``: :meth:`Geometry.candidate_count` of each word at ``gamma`` (cap: ``self.cap``)
        where ``exact``, else at least ``count`` (every listed word is in the ball); -1 where not summarized.

        The screening test is :meth:`Geometry`'s own, on one listed value per word at a time, with each
        word's error term (an array: the test is elementwise)."""
        with self._lock:
            length, start = self._length[words], self._start[words]
            err, pivot, ordered = self._err[words], self._pivot[words], self._sorted
        found = np.zeros(words.size, dtype=np.int64)
        step = 1 << max(int(length.max(initial=0)).bit_length() - 1, 0)
        with np.errstate(over="ignore"):
            while step and words.size:  # the longest run of closest words inside the ball
                longer = found + step
                ok = longer <= length
                inside = geo.candidates_mask(ordered[start[ok] + longer[ok] - 1], gamma, err[ok])
                ok[ok] = inside
                found[ok] = longer[ok]
                step >>= 1
            far = geo.candidates_mask(pivot, gamma, err)
        count = np.where(far, self.size + 1, found)
        count[length == 0] = -1
        exact = far | (found < length) | (length >= self.size)
        return count, exact

    def candidates(self, geo: Geometry, w: int, count: int, gamma: float) -> npt.NDArray[np.int64] | None:
        """:meth:`Geometry.candidates` of ``w`` at ``gamma`` (``count`` of them: :meth:`counts`, exact), or
        None when the summary does not list them all."""
        length = int(self._length[w])
        if not (0 <= count < length or count == length == self.size):
            return None
        at = slice(int(self._start[w]), int(self._start[w]) + length)
        with np.errstate(over="ignore"):
            inside = geo.candidates_mask(self._values[at], gamma, float(self._err[w]))
        found = np.sort(self._ids[at][inside]).astype(np.int64)
        if not np.any(found == w):
            found = np.union1d(found, [w])
        return found.astype(np.int64)

    def knn_rows(self, words: npt.NDArray[np.int64], entries: list[Table | None]) -> Table:
        """The k-NN tables ``entries`` of ``words`` (none None), stacked: ``(ids, distances)`` rows as
        :meth:`Envelope.arrays` stacks them (float64 distances); each word's table is stored on first use."""
        with self._lock:
            new = [j for j, w in enumerate(words.tolist()) if self._knn_row[w] < 0]
            if new:
                ids, dist = _stacked(entries, np.array(new, dtype=np.intp))
                used, width = self._knn_used, ids.shape[1]
                if used and width != self._knn[0].shape[1]:  # (one width per k: never)
                    return _stacked(entries, np.arange(words.size))
                end = used + len(new)
                if end > self._knn[0].shape[0]:
                    grow = max(end, 2 * self._knn[0].shape[0], 1024)
                    old_ids, old_dist = self._knn
                    self._knn = (np.empty((grow, width), dtype=np.int32), np.empty((grow, width), dtype=np.float64))
                    if used:
                        self._knn[0][:used], self._knn[1][:used] = old_ids[:used], old_dist[:used]
                self._knn[0][self._knn_used : end] = ids
                self._knn[1][self._knn_used : end] = dist
                self._knn_row[words[new]] = np.arange(self._knn_used, end)
                self._knn_used = end
            at = self._knn_row[words]
            return self._knn[0][at], self._knn[1][at]


def _summary_length(mech: TruncatedExponential, cheap: bool, count: int) -> int:
    """Closest words to list for a word with ``count`` tokens in the call: one more than the largest
    ball :func:`_plans` may list for it (its limit at the most costly usable envelope)."""
    worst = max(_envelope.KNN_MAX_RATIO, _envelope.KNN_MAX_EST)  # est <= bound: a usable est is at most this
    if not cheap or not math.isfinite(worst):
        return mech.table_max + 1
    return min(mech.table_max, max(_TABLE_MIN, int(_TABLE_AMORTISE * count * worst))) + 1


def _row_stage(
    mech: TruncatedExponential, flat: np.ndarray, positions: np.ndarray, out: np.ndarray, rng: np.random.Generator
) -> None:
    """Tables, the k-NN envelope or the shell sampler for the tokens at ``positions``, word by word.

    Each word's sampler is :func:`_plans`', from its k-NN table (prepared, remembered, or
    built from a scan), its candidate count and its count here. A word is scanned when
    something its sampler needs is not remembered: its k-NN table or candidate count (nor
    read off a shared ball summary, :class:`WordSummaries`), its ball table (rebuilt, the
    same), or its screening row (shells). What a scan builds is kept in memory unless
    history-free (later calls at any epsilon skip the scan), and changes no draw: the words
    are drawn in id order, each with the sampler its plan names, the k-NN envelope's words
    last, together.
    """
    words = flat[positions]
    order = np.argsort(words, kind="stable")
    positions = positions[order]
    uniq, counts = np.unique(words[order], return_counts=True)
    starts = np.concatenate([[0], np.cumsum(counts)])
    n = uniq.size
    keep = not mech.history_free
    prepared = mech._prepared_knn()
    entries: list[Table | None]
    if prepared is not None:
        entries, known = list(prepared.get_many(uniq)), np.ones(n, dtype=bool)
    elif not mech._geo.screening:  # no k-NN table can be built
        entries, known = [None] * n, np.ones(n, dtype=bool)
    else:
        entries = mech._knn.get_many(uniq) if keep else [None] * n
        known = np.fromiter((e is not None for e in entries), dtype=bool, count=n)
    tables: list[Table | None] = mech._store.get_many(uniq) if keep else [None] * n
    ncand = np.array([mech._ncand.get(w, -1) for w in uniq.tolist()] if keep else [-1] * n, dtype=np.int64)
    exact = np.ones(n, dtype=bool)
    bound, est = np.full(n, math.inf), np.full(n, math.inf)  # (no k-NN table: no envelope)
    have = np.flatnonzero(np.fromiter((e is not None for e in entries), dtype=bool, count=n))
    balls = mech._summaries if keep and mech._geo.screening else None
    if prepared is not None:
        stacked = prepared.rows(uniq[have])
    elif balls is not None:
        stacked = balls.knn_rows(uniq[have], [entries[j] for j in have.tolist()])
    else:
        stacked = _stacked(entries, have)
    bound[have], est[have] = _costs(mech, uniq[have], np.asarray(stacked[1], dtype=np.float64))
    if balls is not None:  # candidate counts read off the shared summaries
        ask = np.flatnonzero(known & (ncand < 0) & (est > _KNN_PREFER_RATIO))
        if ask.size:
            ncand[ask], exact[ask] = balls.counts(mech._geo, uniq[ask], mech._gamma)
    plan = _plans(mech, bound, est, ncand, exact, counts)
    plan[~known] = _NEED_COUNT
    listed: dict[int, npt.NDArray[np.int64]] = {}  # ball candidates read off the summaries
    if balls is not None:
        for j in np.flatnonzero((plan == _TABLE) & exact).tolist():
            if tables[j] is None:
                cand = balls.candidates(mech._geo, int(uniq[j]), int(ncand[j]), mech._gamma)
                if cand is not None:
                    listed[j] = cand
    table_rows = plan == _TABLE
    table_rows[list(listed)] = False
    table_rows &= np.fromiter((t is None for t in tables), dtype=bool, count=n)
    scan = (plan == _NEED_COUNT) | (plan == _SHELLS) | table_rows
    scanned = _scanned(mech, uniq, np.flatnonzero(scan), entries, bound, est)
    for j in np.flatnonzero(scan | (plan != _KNN)).tolist():  # id order
        w = int(uniq[j])
        pos = positions[starts[j] : starts[j + 1]]
        row = None
        if scan[j]:
            j_row, row = next(scanned)
            assert j_row == j
            have_m = 0 if balls is None else balls.length(w)
            if balls is not None and (not have_m or not exact[j]):  # none yet, or too short for this call
                m = _summary_length(mech, bool(usable(bound[j], est[j])), int(counts[j]))
                balls.add(mech._geo, w, row, max(m, 2 * have_m))
            if (ncand[j] < 0 or not exact[j]) and est[j] > _KNN_PREFER_RATIO:  # (not needed otherwise)
                ncand[j], exact[j] = mech._geo.candidate_count(w, row, mech._gamma, mech.table_max), True
                if keep:
                    mech._ncand[w] = int(ncand[j])
            one = slice(j, j + 1)
            plan[j] = _plans(mech, bound[one], est[one], ncand[one], exact[one], counts[one])[0]
        if plan[j] == _TABLE:
            table = tables[j]
            if table is None:
                cand = listed.get(j)
                if cand is None:
                    assert row is not None
                    cand = mech._geo.candidates(w, row, mech._gamma)
                    assert cand is not None  # (no limit: every candidate)
                table = build_table(mech, w, cand)
            out[pos] = _sample_table(mech, w, table, pos.size, rng)
        elif plan[j] == _SHELLS:
            assert row is not None
            out[pos] = _sample_shells(mech, w, mech._geo.lower_bounds(w, row), pos.size, rng)
    knn = np.flatnonzero(plan == _KNN)
    if knn.size:
        token_word = np.repeat(np.arange(n), counts)
        mine = np.zeros(n, dtype=bool)
        mine[knn] = True
        at = mine[token_word]
        renumber = np.cumsum(mine) - 1
        # the words' tables as stacked above (those built in this call stacked now): what
        # Envelope.arrays would stack from the list
        rows_at = np.minimum(np.searchsorted(have, knn), max(have.size - 1, 0))
        if have.size and np.array_equal(have[rows_at], knn):
            tables_knn: Table = (stacked[0][rows_at], stacked[1][rows_at])
        else:
            tables_knn = _stacked(entries, knn)
        draws = KnnDraws(uniq[knn], tables_knn, renumber[token_word[at]], positions[at])
        sample_knn(mech._env, mech._geo, draws, out, rng)


def _scanned(
    mech: TruncatedExponential,
    uniq: npt.NDArray[np.int64],
    at: npt.NDArray[np.intp],
    entries: list[Table | None],
    bound: npt.NDArray[np.float64],
    est: npt.NDArray[np.float64],
) -> Iterator[tuple[int, np.ndarray]]:
    """``(j, screening row of uniq[j])`` for each ``j`` of ``at`` in order, a block of rows at a time;
    first the block's words without a k-NN table get theirs (:func:`build_knn`), costed together
    into ``bound`` and ``est``. A row is valid until the next one of another block is read."""
    s = 0
    for q, block in _blocks(mech, uniq[at]) if at.size else iter(()):
        js = at[s : s + q.size]
        s += q.size
        new = [r for r, j in enumerate(js.tolist()) if entries[j] is None]
        for r in new:
            entries[js[r]] = build_knn(mech, int(q[r]), block[r])
        built = np.array([js[r] for r in new if entries[js[r]] is not None], dtype=np.intp)
        if built.size:
            bound[built], est[built] = _costs(mech, uniq[built], _stacked(entries, built)[1])
        for r, j in enumerate(js.tolist()):
            yield j, block[r]


def build_knn(mech: TruncatedExponential, w: int, row: np.ndarray) -> Table | None:
    """The k-NN table of ``w`` from its screening row (kept in memory unless history-free;
    None without screening)."""
    if not mech._geo.screening:
        return None
    entry = knn_entry(mech._geo, w, row, mech._k, KNN_SKETCH)
    if not mech.history_free:
        mech._knn.put(w, entry)
    return entry


def _sample_shells(
    mech: TruncatedExponential, w: int, lb: npt.NDArray[np.float32], count: int, rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """Exact draws by rejection under a shell envelope built from lower bounds ``lb <= d``."""
    a = mech._a
    g_eff = min(mech._gamma, _LOG_UNDERFLOW / a)  # beyond it every weight is 0.0 in float64
    h = max(_SHELL_H, a * g_eff / (_MAX_SHELLS - 1))
    # float32 in place; the factor (1 - 2^-20) absorbs the rounding of the two
    # operations, so h * shell <= a * min(lb, g_eff) still holds (truncation = floor here)
    with np.errstate(over="ignore"):
        g32 = np.float32(g_eff)
    s = np.minimum(lb, g32, out=lb)
    s *= np.float32(a / h * (1.0 - 2.0**-20))
    np.minimum(s, np.float32(_MAX_SHELLS - 1), out=s)
    shell = s.astype(np.int16)
    counts = np.bincount(shell, minlength=_MAX_SHELLS)
    nonempty = counts > 0
    logm = np.full(_MAX_SHELLS, -np.inf)
    logm[nonempty] = np.log(counts[nonempty]) - h * np.flatnonzero(nonempty)
    cum = np.cumsum(np.exp(logm - logm.max()))
    last = int(np.flatnonzero(nonempty)[-1])
    members: dict[int, np.ndarray] = {}
    sorted_ids: np.ndarray | None = None
    shell_starts: np.ndarray | None = None
    res = np.empty(count, dtype=np.int64)
    pend = np.arange(count)
    while pend.size:
        m = pend.size
        sh = np.minimum(np.searchsorted(cum, rng.random(m) * cum[-1], side="right"), last)
        pick = np.minimum((rng.random(m) * counts[sh]).astype(np.int64), counts[sh] - 1)
        chosen = np.unique(sh)
        if sorted_ids is None and chosen.size + len(members) > 16:
            sorted_ids = np.argsort(shell, kind="stable")
            shell_starts = np.concatenate([[0], np.cumsum(counts)])
        prop = np.empty(m, dtype=np.int64)
        if sorted_ids is not None and shell_starts is not None:
            prop[:] = sorted_ids[shell_starts[sh] + pick]
        else:
            for s in chosen.tolist():
                mem = members.get(s)
                if mem is None:
                    mem = members[s] = np.flatnonzero(shell == s)
                sel = sh == s
                prop[sel] = mem[pick[sel]]
        d = mech._geo.exact(w, prop)
        acc = rng.random(m) < np.exp(mech._env.weights_exponent(d) + h * sh)
        res[pend[acc]] = prop[acc]
        pend = pend[~acc]
    return res
