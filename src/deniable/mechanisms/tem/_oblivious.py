"""TEM's data-oblivious sampler: the history-free mode, whose time depends on public quantities only.

The fast samplers (:mod:`._self_first`, :mod:`._lazy`) stop a token as soon as it is decided (the self test
returns most tokens at large epsilon after one multiplication), work once per *distinct*
word, read prepared far layouts for frequent words and compute them for rare ones, and
pick a sampler per word from its cost. Each of these makes the time of a call a function
of the input: whether a word was kept, how many distinct words a text has, which words
(measured: AUC 0.98 for kept vs changed from one call's latency; 13 vs 53 ms for 2,000
tokens of one word vs 2,000 distinct words; issue 27).

Here every token does the same work, whatever its word:

- its k-NN table row, its envelope (E's cumulative weights, ``d_env``) and, with prepared
  far bounds, its far layout (1,024 cluster masses) are computed per TOKEN (no dedup by
  distinct word; no prepared layout for some words and a computed one for others);
- it makes exactly ``R`` proposals of the k-NN envelope sampler (docs/tem.md, samplers 4
  and 7), ``R`` a function of the configuration only (:func:`oblivious_plan`), and every
  proposal takes every branch: the inverse CDF into E, a uniform proposal AND a far-cluster
  proposal, one exact distance, the membership test in E; the outcome is chosen by masks
  afterwards (no early exit, no word-dependent branch);
- the output is the first accepted proposal of the ``R``: the same law as trying them one
  after another, i.e. the k-NN envelope sampler's, which is exactly TEM's distribution.

What is not oblivious (documented in docs/threat-model.md): a token none of whose ``R``
proposals is accepted (probability ``(1 - 1/c_w)^R``, ``c_w`` the word's expected proposals;
``R`` is chosen so that this is at most :data:`OBLIVIOUS_DELTA` for the costliest of 2,048
evenly spaced words, by the sampler's cost estimate) gets ``R`` more, for the pending
tokens only: an exact fallback whose rare use takes longer.
Tokens whose envelope cannot be formed at all (no screening: vector norms over 1e15; an E
of zero mass) go to the general samplers. Cache effects of reading different rows remain.

May import: :mod:`._envelope`, :mod:`._lazy` (its general samplers, the fallback),
:mod:`._sampler` (its searches), :mod:`._shared`, :mod:`._tables`; the mechanism only for
type checking.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ._lazy import privatize_general, rows
from ._sampler import count_at_most, segments
from ._shared import Table
from ._tables import KNN_SKETCH, knn_entry

if TYPE_CHECKING:
    from ._mechanism import TruncatedExponential

__all__ = ["OBLIVIOUS_DELTA", "OBLIVIOUS_MAX_ROUNDS", "oblivious_plan", "oblivious_rounds", "privatize_oblivious"]

#: ``R`` is chosen so that the sampled word with the most expected proposals per token has
#: all ``R`` proposals rejected (the fallback) with probability at most this.
OBLIVIOUS_DELTA = 1e-3
#: At most this many proposals per token (bounds the cost at small epsilon without far bounds).
OBLIVIOUS_MAX_ROUNDS = 96
#: The far layout of a token (1,024 cluster masses) costs about as much as this many
#: proposals: the far bounds are used when they save more proposals than that.
_LAYOUT_COST = 8
#: Words sampled (evenly spaced ids: public) to choose ``R`` with prepared tables / without.
_SAMPLE_PREPARED = 2048
_SAMPLE_SCANNED = 64
#: Proposals evaluated at once (tokens x R), and at most this many tokens at once (their far
#: layouts: 8 KB each); functions of R only, never of the words.
_PROPOSALS = 1 << 14
_TOKENS = 512


def oblivious_rounds(mech: TruncatedExponential) -> int:
    """``R``, the proposals every token makes (:func:`oblivious_plan`)."""
    return oblivious_plan(mech)[0]


def oblivious_plan(mech: TruncatedExponential) -> tuple[int, bool]:
    """``(R, far)``: the proposals every token makes, and whether the far bounds are used.

    A function of the embedding, metric, epsilon, gamma and the prepared artefacts only:
    from the k-NN envelopes of evenly spaced words (no input is involved), the largest
    estimated expected proposals per token ``c`` (docs/tem.md, sampler 4's estimate);
    ``R = ceil(ln(delta) / ln(1 - 1/c))``, between 1 and :data:`OBLIVIOUS_MAX_ROUNDS`.
    With prepared far bounds, both envelopes are costed (the far one adds a layout per
    token) and the cheaper is kept. Computed once per mechanism (kept with its prepared tables).
    """
    holder = mech._prepared
    found = holder.rounds
    if found is not None:
        return found
    v = mech.embedding.size
    prepared = mech._prepared_knn()
    n = min(v, _SAMPLE_PREPARED if prepared is not None else _SAMPLE_SCANNED)
    words = np.unique(np.linspace(0, v - 1, n).astype(np.int64))
    entries = _entries(mech, words)
    plan = (1, False)
    if entries is not None:
        plan = (_rounds(_envelopes(mech, entries, words, use_far=False).est), False)
        if mech._prepared.far is not None and mech._env.n_rest:
            far = _rounds(_envelopes(mech, entries, words, use_far=True).est)
            if far + _LAYOUT_COST < plan[0]:
                plan = (far, True)
    with holder.lock:
        holder.rounds = plan
    return plan


def _rounds(est: npt.NDArray[np.float64]) -> int:
    """``R`` for the largest finite estimate of ``est`` (:func:`oblivious_plan`)."""
    est = est[np.isfinite(est)]
    c = float(est.max()) if est.size else 1.0
    if c <= 1.0 + 1e-12:
        return 1
    rounds = math.ceil(math.log(OBLIVIOUS_DELTA) / math.log1p(-1.0 / c))
    return int(min(max(rounds, 1), OBLIVIOUS_MAX_ROUNDS))


def _entries(mech: TruncatedExponential, words: npt.NDArray[np.int64]) -> Table | None:
    """The k-NN rows of ``words``, one per entry (repeats kept): prepared, else scanned now (None: no screening)."""
    prepared = mech._prepared_knn()
    if prepared is not None:
        return prepared.rows(words)
    if not mech._geo.screening:
        return None
    ids: list[np.ndarray] = []
    dist: list[np.ndarray] = []
    for s in range(0, words.size, 64):  # one scan per TOKEN (a padded dedup): the work counts tokens
        for w, row in rows(mech, words[s : s + 64], show=False):
            entry = knn_entry(mech._geo, w, row, mech._k, KNN_SKETCH)
            ids.append(entry[0])
            dist.append(entry[1])
    return np.stack(ids), np.stack(dist)


@dataclass(frozen=True)
class _Envelopes:
    """Per-row envelope arrays of the k-NN sampler (every row computed the same way)."""

    ids: np.ndarray
    cum: np.ndarray
    m_e: np.ndarray
    total: np.ndarray
    log_env: np.ndarray
    far_word: np.ndarray
    layout: np.ndarray | None
    est: np.ndarray


def _envelopes(
    mech: TruncatedExponential, entries: Table, words: npt.NDArray[np.int64], use_far: bool = True
) -> _Envelopes:
    """E ids, cumulative weights, E mass, total, log envelope, far use and far layout of every row.

    The far layout is computed for EVERY row (used only where the word's envelope uses the
    far bounds, :meth:`._envelope.Envelope.far_words`): the same work for every word.
    """
    k, env = mech._k, mech._env
    ids = np.asarray(entries[0][:, :k], dtype=np.int64)
    tail = np.asarray(entries[1], dtype=np.float64)
    dist, d_env, sketch = tail[:, :k], tail[:, k], tail[:, k + 1 :]
    cum = np.cumsum(np.exp(env.weights_exponent(dist)), axis=1)
    m_e = cum[:, -1]
    log_env = env.weights_exponent(d_env)
    n_rest = env.n_rest
    far = mech._prepared.far if n_rest and use_far else None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        plain = n_rest * np.exp(log_env) if n_rest else np.zeros_like(m_e)
        layout = None
        far_word = np.zeros(words.size, dtype=bool)
        if far is not None:
            layout = env.far_layout(words, log_env)[0]
            far_word = env.far_words(m_e, log_env)
            outside = np.where(far_word, layout[:, -1] if words.size else plain, plain)
        else:
            outside = plain
        total = m_e + outside
        far_est = (mech.embedding.size - k) * np.exp(env.weights_exponent(sketch)).mean(axis=1)
        z_est = np.minimum(m_e + far_est, total)
        ok = (m_e > 0) & np.isfinite(total)
        est = np.where(ok, total / np.maximum(z_est, m_e), np.inf)
    return _Envelopes(
        ids=ids, cum=cum, m_e=m_e, total=total, log_env=log_env, far_word=far_word, layout=layout, est=est
    )


def privatize_oblivious(
    mech: TruncatedExponential, flat: npt.NDArray[np.int64], rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """History-free TEM: every token makes the same ``R`` proposals (module docstring); exact law."""
    out = np.empty(flat.size, dtype=np.int64)
    if not flat.size:
        return out
    rounds, use_far = oblivious_plan(mech)
    entries = _entries(mech, flat)
    if entries is None:  # no screening (norms over 1e15): the general samplers
        return privatize_general(mech, flat, rng)
    v, k = mech.embedding.size, mech._k
    n_rest = mech._env.n_rest
    far = mech._prepared.far if n_rest and use_far else None
    geo = mech._geo
    per = max(1, min(_TOKENS, _PROPOSALS // rounds))  # tokens per chunk: a function of R only
    bad: list[np.ndarray] = []
    for s in range(0, flat.size, per):
        words = flat[s : s + per]
        env = _envelopes(mech, (entries[0][s : s + per], entries[1][s : s + per]), words, use_far)
        ok_env = np.isfinite(env.est)
        pos = np.arange(s, s + words.size)
        bad.append(pos[~ok_env])
        w_rows = np.asarray(geo.x[words], dtype=np.float64)
        keys = (np.arange(words.size, dtype=np.int64)[:, None] * v + env.ids).ravel()  # sorted (ids sorted per row)
        pend = np.flatnonzero(ok_env)
        while pend.size:  # one pass in all but rare cases (the exact fallback, module docstring)
            m = pend.size
            j = np.repeat(pend, rounds)
            u = rng.random(j.size) * env.total[j]
            m_e = env.m_e[j]
            in_e = u < m_e
            # inverse CDF into E, for every proposal
            col = count_at_most(env.cum, j, u)
            res = env.ids[j, np.minimum(col, k - 1)]
            accepted = in_e.copy()
            if n_rest:
                # the outside part, for every proposal: a uniform word AND (with far bounds) a
                # far-cluster member, one exact distance, the acceptance and the membership test
                y = rng.integers(0, v, size=j.size)
                log_g = env.log_env[j]
                if far is not None and env.layout is not None:
                    uf = np.maximum(u - m_e, 0.0)
                    c, lo, hi = segments(env.layout, j, uf)
                    with np.errstate(invalid="ignore", divide="ignore"):
                        frac = np.clip((uf - lo) / (hi - lo), 0.0, 1.0)
                    y_far = far.members(c, np.nan_to_num(frac))
                    lg_far = mech._env.far_log_envelope(far.level_at(words[j], c), env.log_env[j])
                    use = env.far_word[j]
                    y = np.where(use, y_far, y)
                    log_g = np.where(use, lg_far, log_g)
                d = geo.exact_indexed(w_rows, j, words[j], y)
                with np.errstate(over="ignore", invalid="ignore"):
                    p_acc = np.exp(mech._env.weights_exponent(d) - log_g)
                p_acc[~(log_g > -np.inf)] = 0.0
                acc = rng.random(j.size) < p_acc
                probe = j * v + y
                hit = keys[np.minimum(np.searchsorted(keys, probe), keys.size - 1)] == probe
                acc &= ~hit
                accepted |= acc
                res = np.where(in_e, res, y)
            grid = accepted.reshape(m, rounds)
            first = np.argmax(grid, axis=1)
            got = grid[np.arange(m), first]
            out[pos[pend[got]]] = res.reshape(m, rounds)[np.arange(m), first][got]
            pend = pend[~got]
    rest = np.concatenate(bad) if bad else np.empty(0, dtype=np.int64)
    if rest.size:  # no envelope can be formed (an E of zero mass): the general samplers
        out[rest] = privatize_general(mech, flat[rest], rng)
    return out
