"""TEM's fastest exact sampler (not history-free): the self test first, one envelope per distinct word.

With prepared k-NN tables, every token whose word has an envelope total ``T``
(:mod:`._totals`) first draws ``u ~ U[0, T)``: the envelope's layout puts the input word's
own mass (exactly 1) first, so ``u < 1`` returns the word itself from its total alone (at
eps >= 10 nearly every token). The other tokens continue that same attempt under the k-NN
envelope (:mod:`._sampler`, ``u_first``), except those of words frequent enough in the batch
that an exact ball table is cheaper (:func:`_sample_heavy`: the law given the failed self
test). Tokens of words without a total take the lazy path (:mod:`._lazy`). The time of a
call depends on the input (docs/threat-model.md, "Timing"); :mod:`._oblivious` is the
history-free alternative.

May import: :mod:`._envelope`, :mod:`._lazy`, :mod:`._sampler`, :mod:`._shared`,
:mod:`._totals`; the mechanism only for type checking.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ._envelope import KNN_MAX_EST
from ._lazy import build_table, privatize_general, rows, sample_rest, total
from ._sampler import KnnDraws, sample_knn
from ._shared import Table
from ._totals import token_totals

if TYPE_CHECKING:
    from ._mechanism import TruncatedExponential

__all__ = ["privatize_fast", "self_after_failed_test"]

#: A word's moved tokens times its estimated proposals per token beyond which its exact
#: ball table is built (one pass over the vocabulary, ~20 ms at V = 336k, costs about as
#: much as this many proposals) instead of sampling it under its k-NN envelope.
_HEAVY_PROPOSALS = 1 << 16


def privatize_fast(
    mech: TruncatedExponential, flat: npt.NDArray[np.int64], rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """The fastest exact samplers (not history-free): the self test first, one table per distinct word.

    Their time depends on the input (whether a word was kept, how many distinct words,
    which words): docs/threat-model.md, "Timing".
    """
    totals = token_totals(mech, flat)
    if totals is None:
        return privatize_general(mech, flat, rng)
    # Self first (k-NN envelope words): the envelope's layout puts the input word's mass
    # (exactly 1) first, so u ~ U[0, total) below 1 returns the word itself from its
    # total alone -- at eps >= 10 nearly every token. The others continue the SAME
    # attempt with u mapped onto the rest of the layout (KnnDraws.u_first).
    out = np.empty(flat.size, dtype=np.int64)
    fast = np.flatnonzero(totals > 0.0)
    u = rng.random(fast.size) * totals[fast]
    stay = u < 1.0
    out[fast[stay]] = flat[fast[stay]]
    move, u_move = fast[~stay], u[~stay]
    if move.size:
        words, inv = np.unique(flat[move], return_inverse=True)
        inv = inv.ravel()
        prepared = mech._prepared_knn()
        assert prepared is not None
        word_totals = np.empty(words.size, dtype=np.float64)
        word_totals[inv] = totals[move]  # every token of a word has the word's total
        if not mech.history_free:
            done = _sample_heavy(mech, words, inv, move, word_totals, out, rng)
            if done.any():  # drop those words' tokens, renumbering the rest (no second unique)
                keep = ~done[inv]
                renumber = np.cumsum(~done) - 1
                move, u_move, inv = move[keep], u_move[keep], renumber[inv[keep]]
                words, word_totals = words[~done], word_totals[~done]
        if move.size:
            draws = KnnDraws(words, prepared, inv, move, u_first=u_move, totals=word_totals)
            if not sample_knn(mech._env, mech._geo, draws, out, rng).all():  # the totals come from the same test: never
                raise RuntimeError("internal error: a word with an envelope total has no usable envelope")
    other = np.flatnonzero(~(totals > 0.0))
    if other.size:
        out[other] = privatize_general(mech, flat[other], rng)
    return out


def _sample_heavy(
    mech: TruncatedExponential,
    words: npt.NDArray[np.int64],
    inv: npt.NDArray[np.int64],
    positions: npt.NDArray[np.int64],
    env_totals: npt.NDArray[np.float64],
    out: np.ndarray,
    rng: np.random.Generator,
) -> npt.NDArray[np.bool_]:
    """Tokens past the self test of words whose envelope is costly for how often they occur.

    At small epsilon most of a word's mass is far from it and its k-NN envelope costs
    tens of proposals per token (each an exact distance to a random word); for a word
    with many such tokens in the batch, one exact pass over the vocabulary (its ball
    table, kept in this process's LRU) is cheaper. The tokens here already failed the
    self test of the envelope (probability ``1 - 1/T``, T its envelope total), so they
    are drawn from the exact law GIVEN that: the word itself with probability
    ``(1/Z - 1/T) / (1 - 1/T)`` (Z the true total; T >= Z), else a word of the table
    other than itself (:func:`._lazy.sample_rest`), which is ``p(y) / (1 - 1/T)`` for every other
    ``y``, as the envelope sampler would give. ``env_totals``: each word's T. Returns
    which of ``words`` were done.
    """
    counts = np.bincount(inv, minlength=words.size)
    handled = np.zeros(words.size, dtype=bool)
    v = mech.embedding.size
    if 12 * v * 4 > mech.memory_bytes or not mech._geo.screening:  # room for a few full tables
        return handled
    maybe = np.flatnonzero(counts * KNN_MAX_EST >= _HEAVY_PROPOSALS)
    if not maybe.size:
        return handled
    prepared = mech._prepared_knn()
    assert prepared is not None
    est = mech._env.arrays(prepared.rows(words[maybe]), words[maybe], env_totals[maybe])[6]
    work = counts[maybe] * est
    heavy = maybe[work >= _HEAVY_PROPOSALS]
    # at most as many as the LRU holds (the costliest first): more would evict one
    # another between batches and be rebuilt every time
    room = max(1, mech.memory_bytes // (12 * v) - 1)
    heavy = heavy[np.argsort(-work[work >= _HEAVY_PROPOSALS], kind="stable")[:room]]
    if not heavy.size:
        return handled
    tables = mech._store.get_many(words[heavy])
    missing = [j for j, t in zip(heavy.tolist(), tables, strict=True) if t is None]
    built: dict[int, Table] = {}
    if missing:
        for w, row in rows(mech, words[np.array(missing, dtype=np.int64)], show=False):  # ~20 ms a word
            cand = mech._geo.candidates(w, row, mech._gamma)
            assert cand is not None
            built[w] = build_table(mech, w, cand)
    order = np.argsort(inv, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)])
    for j, table in zip(heavy.tolist(), tables, strict=True):
        w = int(words[j])
        table = table if table is not None else built[w]
        at = order[starts[j] : starts[j + 1]]
        z = mech._totals.get(w)
        if z is None:
            z = total(mech, w, table)
            mech._totals[w] = z
        p_self = self_after_failed_test(z, float(env_totals[j]))
        res = np.full(at.size, w, dtype=np.int64)
        rest = rng.random(at.size) >= p_self
        if rest.any():
            res[rest] = sample_rest(mech, w, table, rng.random(int(rest.sum())) * (z - 1.0), rng)
        out[positions[at]] = res
        handled[j] = True
    return handled


def self_after_failed_test(z: float, t: float) -> float:
    """``P(M(w) = w | the envelope's self test failed) = (1/Z - 1/T) / (1 - 1/T)``."""
    return max(0.0, (1.0 / z - 1.0 / t) / (1.0 - 1.0 / t))
