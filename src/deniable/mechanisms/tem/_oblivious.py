"""TEM's data-oblivious sampler: the history-free mode, whose time depends on public quantities only.

The fast samplers (:mod:`._self_first`, :mod:`._lazy`) stop a token as soon as it is decided (the self test
returns most tokens at large epsilon after one multiplication), work once per *distinct*
word, read prepared far layouts for frequent words and compute them for rare ones, and
pick a sampler per word from its cost. Each of these makes the time of a call a function
of the input: whether a word was kept, how many distinct words a text has, which words
(measured: AUC 0.98 for kept vs changed from one call's latency; 13 vs 53 ms for 2,000
tokens of one word vs 2,000 distinct words; issue 27).

Here a call's work is the same whatever its words:

- every token's k-NN table row, its envelope (E's cumulative weights, ``d_env``) and, with
  prepared far bounds, its far layout (1,024 cluster masses) are computed per TOKEN (no
  dedup by distinct word; no prepared layout for some words and a computed one for others),
  up to 4,096 tokens at a time (a *chunk*, :func:`_chunk_tokens`);
- every proposal of the k-NN envelope sampler (docs/tem.md, samplers 4 and 7) takes every
  branch: the inverse CDF into E, a uniform proposal AND a far-cluster proposal, one exact
  distance, the membership test in E; the outcome is chosen by masks afterwards (no early
  exit, no word-dependent branch);
- the proposals of a chunk are a fixed budget (:func:`stages`, a function of the chunk's
  token count and ``R`` only): stage 1 gives every token ``r_1`` proposals, each later
  stage ``r_i`` more to a fixed number of slots, filled by the tokens not accepted yet
  and, for the rest, by dummy work whose results are dropped. ``R`` (a function of the
  configuration, :func:`oblivious_plan`) is what one token alone would need: a token of
  the costliest planned word has all ``R`` rejected with probability ``delta``
  (:data:`OBLIVIOUS_DELTA`); the slots of each stage cover the tokens left by the one
  before (Bernstein) and the last stage gives each slot enough proposals that a chunk has
  a token left with probability at most ``delta`` in all, so that a chunk of 2,048 tokens
  makes about a quarter of ``2,048 R`` proposals (issue 32: ``R`` for every token was 3x
  the work at eps 3);
- a token's output is its first accepted proposal: the same law as trying them one after
  another, i.e. the k-NN envelope sampler's, which is exactly TEM's distribution; how many
  proposals a token gets depends only on whether its earlier ones were all rejected.

What is not oblivious (documented in docs/threat-model.md): tokens left when a chunk's
budget is spent (probability at most ``delta`` a chunk, whatever its size, for words up to
the planned cost, by the sampler's cost estimate) get ``R`` more each until accepted, for
those tokens only: an exact fallback whose rare use takes longer.
Tokens whose envelope cannot be formed at all (no screening: vector norms over 1e15; an E
of zero mass) go to the general samplers. Cache effects of reading different rows remain.

May import: :mod:`._envelope`, :mod:`._lazy` (its general samplers, the fallback),
:mod:`._sampler` (its searches), :mod:`._shared`, :mod:`._tables`; the mechanism only for
type checking.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ._lazy import privatize_general, rows
from ._sampler import count_at_most, in_rows, segments
from ._shared import Table
from ._tables import KNN_SKETCH, PreparedKnn, knn_entry

if TYPE_CHECKING:
    from ._mechanism import TruncatedExponential

__all__ = [
    "OBLIVIOUS_DELTA",
    "OBLIVIOUS_MAX_ROUNDS",
    "oblivious_plan",
    "oblivious_rounds",
    "privatize_oblivious",
    "stages",
]

#: ``R`` is chosen so that the sampled word with the most expected proposals per token has
#: all ``R`` proposals rejected (the fallback) with probability at most this.
OBLIVIOUS_DELTA = 1e-3
#: At most this many proposals per token (bounds the cost at small epsilon without far bounds).
OBLIVIOUS_MAX_ROUNDS = 96
#: What the far bounds add, in proposals of the plain envelope: a token's far layout (1,024
#: cluster masses, ~6 us) and the far part of its E (~1.5 us) cost about this many, and a far
#: proposal (a uniform one AND a far-cluster one) this many plain ones. Measured history-free
#: on GloVe 336k, IMDb tokens, one thread (docs/tem.md, "The plan's cost model"): with the far
#: bounds ~10.1 us + 0.34 us a proposal of the budget a token; the plain envelope at eps 1
#: (R = 48, 14.6 proposals a token with the budgets of 1,024-token chunks) 6.0 us.
_LAYOUT_COST = 26.0
_FAR_PROPOSAL_COST = 1.3
#: What a proposal of the plain envelope with E proposed uniformly (the *E slice*,
#: :meth:`_Chunk._propose_uniform`: no search, no membership test) costs, in proposals of the
#: plain envelope with E's cumulative weights (which also need 256 weights a token). Measured
#: history-free on GloVe 50k, IMDb tokens, eps 1, one thread: 2.2x the calls' speed at the same R.
_UNIFORM_PROPOSAL_COST = 0.5
#: The E slice is used only where E holds a small share of the envelope: its total
#: ``k (1 - env) + n env`` at most this many times ``m_E + n env`` for every planned word
#: (1.42 at most at eps 1 on GloVe 50k, 1.9 at eps 3 on a 3-d toy vocabulary of 400 words
#: with k = 8): a guard for the words off the plan's sample, whose ``R`` grows by that factor.
_UNIFORM_MAX_GROWTH = 1.5
#: Words sampled (evenly spaced ids: public) to choose ``R`` with prepared tables / without.
_SAMPLE_PREPARED = 2048
_SAMPLE_SCANNED = 64
#: Proposals evaluated at once (slots x r, :meth:`_Chunk.first_accepted`): the temporaries stay small.
_PROPOSALS = 1 << 14
#: Tokens whose envelopes are formed at once (a *chunk*), at most: the budget of proposals
#: (:func:`stages`) is shared within a chunk, so a larger chunk needs fewer proposals a token
#: (12.3 instead of 14.4 at R = 49 for 2,048 instead of 1,024), and a smaller one keeps the
#: chunk's arrays in cache. With the plain envelope (k-NN rows and E's weights, ~5 KB a
#: token) chunks of 4,096 (:func:`_chunk_tokens`: 12.5 proposals a token at eps 1 on GloVe
#: 50k instead of 13.5, ~6% less CPU time with the rows in :class:`Buffers`, none without;
#: 8,192 no better); with the far bounds 2,048 (their layouts are 8 KB a token more: 4,096
#: took 9-27% more CPU time at eps 3 and 5).
_TOKENS = 1 << 12
_FAR_TOKENS = 1 << 11
#: At most this many stages in a chunk's budget (:func:`stages`).
_MAX_STAGES = 8
#: What a stage costs besides its proposals, in proposals: its numpy calls on small arrays
#: (~100 us at eps 1, ~170 us with the far bounds, against ~0.2 / ~0.4 us a proposal).
_STAGE_COST = 400.0


def oblivious_rounds(mech: TruncatedExponential) -> int:
    """``R``, the proposals every token makes (:func:`oblivious_plan`)."""
    return oblivious_plan(mech)[0]


def oblivious_plan(mech: TruncatedExponential) -> tuple[int, bool]:
    """``(R, far)``: the proposals every token makes, and whether the far bounds are used.

    A function of the embedding, metric, epsilon, gamma and the prepared artefacts only:
    from the k-NN envelopes of evenly spaced words (no input is involved), the largest
    estimated expected proposals per token ``c`` (docs/tem.md, sampler 4's estimate);
    ``R = ceil(ln(delta) / ln(1 - 1/c))``, between 1 and :data:`OBLIVIOUS_MAX_ROUNDS`.
    With prepared far bounds, both envelopes are costed by the work a token of a full chunk
    does (:func:`_work`: its budget of proposals, and the far one's layout) and the cheaper
    is kept; a plain envelope that needs more than :data:`OBLIVIOUS_MAX_ROUNDS` is never
    kept over the far one. Computed once per mechanism (kept with its prepared tables).
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
        # the plain envelope's E: uniformly (the E slice) or by its cumulative weights, chosen
        # first (the plain envelope's estimates below are then those of the one chosen)
        uniform = _uniform_pays(mech, entries)
        holder.uniform_e = uniform
        # compared before the cap: a capped R for the plain envelope hides words that would
        # need far more (at eps 5 on GloVe, 96 against ~3,900: those words' tokens fell back)
        needed = (_rounds(_envelopes(mech, entries, words, use_far=False).est), False)
        if mech._prepared.far is not None and mech._env.n_rest:
            far = (_rounds(_envelopes(mech, entries, words, use_far=True).est), True)
            if needed[0] > OBLIVIOUS_MAX_ROUNDS or _work(*far) < _work(*needed, uniform):
                needed = far
        plan = (min(needed[0], OBLIVIOUS_MAX_ROUNDS), needed[1])
    _schedules(plan[0])  # the budgets of every chunk size (20-50 ms), here at open rather than in a first call
    with holder.lock:
        holder.rounds = plan
    return plan


def _work(rounds: int, far: bool, uniform: bool = False) -> float:
    """A token's work in a full chunk, in plain proposals: its share of the budget (and the far layout).

    ``uniform``: the plain envelope proposes E uniformly (:data:`_UNIFORM_PROPOSAL_COST`).
    """
    size = _chunk_tokens(far)
    per_token = sum(slots * r for slots, r in stages(size, min(rounds, OBLIVIOUS_MAX_ROUNDS))) / size
    if far:
        return _LAYOUT_COST + _FAR_PROPOSAL_COST * per_token
    return _UNIFORM_PROPOSAL_COST * per_token if uniform else per_token


def _chunk_tokens(far: bool) -> int:
    """The tokens of a full chunk: :data:`_FAR_TOKENS` with the far bounds, else :data:`_TOKENS` (the plan's)."""
    return _FAR_TOKENS if far else _TOKENS


def _uniform_pays(mech: TruncatedExponential, entries: Table) -> bool:
    """Whether the plain envelope proposes E uniformly (the E slice), from the planned words' tables.

    The E slice (:meth:`_Chunk._propose_uniform`) replaces E's weights ``w`` by ``k`` entries
    of envelope ``1 - env`` each, so a word's envelope total grows from ``m_E + n env`` to
    ``k (1 - env) + n env``. Kept when that growth is at most :data:`_UNIFORM_MAX_GROWTH`
    for every planned word, its ``R`` is within the cap, and its work
    (:data:`_UNIFORM_PROPOSAL_COST` a proposal, no weights of E to form) is less. A
    function of the configuration only, like the rest of the plan.
    """
    env, k = mech._env, mech._k
    if not env.n_rest:
        return False
    tail = np.asarray(entries[1], dtype=np.float64)
    m_e = env.cumulative_weights_columns(tail[:, :k])[:, -1]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        g = np.exp(env.weights_exponent(tail[:, k]))
        far_est = (mech.embedding.size - k) * np.exp(env.weights_exponent(tail[:, k + 1 :])).mean(axis=1)
        plain = m_e + env.n_rest * g
        uniform = k * (1.0 - g) + env.n_rest * g
        z_est = np.maximum(np.minimum(m_e + far_est, plain), m_e)
        ok = (m_e > 0) & np.isfinite(plain) & np.isfinite(uniform)
        if not ok.any():
            return False
        growth = float((uniform[ok] / plain[ok]).max())
        r_plain, r_uniform = _rounds(plain[ok] / z_est[ok]), _rounds(uniform[ok] / z_est[ok])
    return (
        growth <= _UNIFORM_MAX_GROWTH
        and r_uniform <= OBLIVIOUS_MAX_ROUNDS
        and _work(r_uniform, False, True) < _work(r_plain, False)
    )


def _rounds(est: npt.NDArray[np.float64]) -> int:
    """``R`` for the largest finite estimate of ``est`` (:func:`oblivious_plan`), not capped."""
    est = est[np.isfinite(est)]
    c = float(est.max()) if est.size else 1.0
    if c <= 1.0 + 1e-12:
        return 1
    return max(math.ceil(math.log(OBLIVIOUS_DELTA) / math.log1p(-1.0 / c)), 1)  # (capped by the caller)


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
    #: the E slice (:meth:`_Chunk._propose_uniform`): ``m_e`` is then the slice's envelope mass
    #: ``k (1 - env)``, ``cum`` E's distances, and ``scale`` the rows' ``(1 / (1 - env), 1 / env)``
    #: (0.0 for an empty part), which map ``u`` onto the index of either part
    uniform: bool = False
    scale: tuple[np.ndarray, np.ndarray] | None = None
    #: the E slice: the rows' envelope outside E, ``env = exp(log_env)`` (formed once a row, not a proposal)
    weight: np.ndarray | None = None


def _envelopes(
    mech: TruncatedExponential,
    entries: Table,
    words: npt.NDArray[np.int64],
    use_far: bool = True,
    estimate: bool = True,
    bufs: Buffers | None = None,
) -> _Envelopes:
    """E ids, cumulative weights, E mass, total, log envelope, far use and far layout of every row.

    The far layout is computed for EVERY row (used only where the word's envelope uses the
    far bounds, :meth:`._envelope.Envelope.far_words`): the same work for every word.
    ``estimate``: the estimated proposals per token from the sketch (the plan needs them;
    the sampler only whether they are finite, i.e. the envelope usable: ``est`` is then 1.0
    or inf). The plain envelope (``use_far`` False or no far bounds) proposes E uniformly
    when the plan chose so (``Prepared.uniform_e``, :func:`_uniform_pays`): no weights of E
    are formed then. ``bufs``: the call's arrays to reuse (:class:`Buffers`: E's ids and weights, the far layouts).
    """
    k, env = mech._k, mech._env
    tail = np.asarray(entries[1], dtype=np.float64)
    n_rest = env.n_rest
    if mech._prepared.uniform_e and n_rest and not (use_far and mech._prepared.far is not None):
        # E's ids read where they are (the E slice gathers one entry a proposal: no contiguous copy)
        return _uniform_envelopes(mech, np.asarray(entries[0])[:, :k], tail, estimate)
    ids = _ids(entries[0], k, bufs)
    dist, d_env, sketch = tail[:, :k], tail[:, k], tail[:, k + 1 :]
    cum = env.cumulative_weights_columns(dist, _buffer(bufs, "cum", (k, ids.shape[0])))  # (cumsum's bits, faster)
    m_e = cum[:, -1]
    log_env = env.weights_exponent(d_env)
    far = mech._prepared.far if n_rest and use_far else None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        plain = n_rest * np.exp(log_env) if n_rest else np.zeros_like(m_e)
        layout = None
        far_word = np.zeros(words.size, dtype=bool)
        if far is not None:
            layout = env.far_layout_columns(words, log_env, _buffer(bufs, "layout", (far.clusters, words.size)))
            far_word = env.far_words(m_e, log_env)
            outside = np.where(far_word, layout[:, -1] if words.size else plain, plain)
        else:
            outside = plain
        total = m_e + outside
        ok = (m_e > 0) & np.isfinite(total)
        if estimate:
            far_est = (mech.embedding.size - k) * np.exp(env.weights_exponent(sketch)).mean(axis=1)
            z_est = np.minimum(m_e + far_est, total)
            est = np.where(ok, total / np.maximum(z_est, m_e), np.inf)
        else:
            est = np.where(ok, 1.0, np.inf)
    return _Envelopes(
        ids=ids, cum=cum, m_e=m_e, total=total, log_env=log_env, far_word=far_word, layout=layout, est=est
    )


def _buffer(bufs: Buffers | None, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """The call's float64 buffer ``name`` of ``shape`` (:class:`Buffers`), or None (a fresh array) without buffers."""
    return None if bufs is None else bufs.get(name, shape, np.float64)


def _ids(ids: np.ndarray, k: int, bufs: Buffers | None) -> np.ndarray:
    """E's ids of each row: the first ``k`` columns of the table's ids, contiguous (their dtype kept)."""
    if bufs is None:
        return np.ascontiguousarray(ids[:, :k])
    out = bufs.get("ids", (ids.shape[0], k), ids.dtype)
    np.copyto(out, ids[:, :k])
    return out


def _uniform_envelopes(mech: TruncatedExponential, ids: np.ndarray, tail: np.ndarray, estimate: bool) -> _Envelopes:
    """:func:`_envelopes` of the plain envelope with the E slice: ``k (1 - env) + n env`` a row, nothing per entry."""
    k, env = mech._k, mech._env
    dist, d_env = tail[:, :k], tail[:, k]
    log_env = env.weights_exponent(d_env)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        g = np.exp(log_env)
        m_slice = k * (1.0 - g)
        total = m_slice + env.n_rest * g
        ok = np.isfinite(total) & (total > 0)
        if estimate:  # the same estimate as the other envelopes' (E's mass from its weights, for the plan only)
            m_e = env.cumulative_weights_columns(dist)[:, -1]
            far_est = (mech.embedding.size - k) * np.exp(env.weights_exponent(tail[:, k + 1 :])).mean(axis=1)
            z_est = np.minimum(m_e + far_est, total)
            est = np.where(ok & (m_e > 0), total / np.maximum(z_est, m_e), np.inf)
        else:
            est = np.where(ok, 1.0, np.inf)
    return _Envelopes(
        ids=ids,
        cum=dist,
        m_e=m_slice,
        total=total,
        log_env=log_env,
        far_word=np.zeros(ids.shape[0], dtype=bool),
        layout=None,
        est=est,
        uniform=True,
        scale=(_inverse(1.0 - g), _inverse(g)),
        weight=g,
    )


def _inverse(a: np.ndarray) -> np.ndarray:
    """``1 / a``, 0.0 where ``a`` is 0 (or not finite)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = 1.0 / a
    out[~np.isfinite(out)] = 0.0
    return out


@functools.lru_cache(maxsize=16)
def _schedules(rounds: int) -> tuple[tuple[tuple[int, int], ...], ...]:
    """The budget of a chunk of ``n`` tokens, for every ``n`` up to :data:`_TOKENS`: :func:`stages`.

    One dynamic programme over the slots a stage starts with serves every ``n``:
    ``cost[m]``, the least cost of finishing from ``m`` slots with at most ``s`` stages, is
    the last stage or a stage of ``r < R`` proposals a slot followed by the best finish from
    the Bernstein bound on the tokens it leaves (``s`` from 2 to :data:`_MAX_STAGES`); a
    stage costs its proposals plus :data:`_STAGE_COST`. A chunk of ``n`` tokens starts from
    ``n`` slots, or is a single stage when that is as cheap. A function of ``R`` (and the
    module's constants) only, computed once per ``R`` (20-50 ms on this machine, up to 4,096 tokens).
    """
    n = np.arange(_TOKENS + 1, dtype=np.float64)
    if rounds <= 1:
        return tuple(((int(m), rounds),) for m in n)
    # the smallest acceptance per proposal R is planned for: (1 - p)^R = delta, so that r
    # proposals all fail with probability q1^r = delta^(r / R)
    log_q1 = math.log(OBLIVIOUS_DELTA) / rounds
    # the last stage: enough proposals a slot that any of its m slots' tokens is left with
    # probability at most delta (a single stage) or delta / 2 (after others: the slot bounds
    # of the stages before it are exceeded with probability delta / 2 in all, Bernstein)
    with np.errstate(divide="ignore"):
        single = np.maximum(np.ceil(np.log(OBLIVIOUS_DELTA / n) / log_q1), rounds)
        last = np.maximum(np.ceil(np.log(OBLIVIOUS_DELTA / (2 * n)) / log_q1), rounds)
    single[0] = last[0] = rounds
    r = np.arange(1, rounds, dtype=np.float64)
    log_inv = math.log(2 * (_MAX_STAGES - 1)) - math.log(OBLIVIOUS_DELTA)
    left = _bound(n[:, None], np.exp(r * log_q1)[None, :], log_inv).astype(np.int64)  # slots after a stage of r
    cost = n * last + _STAGE_COST  # one stage left (after others)
    pick = []  # per stage count s = 2, 3, ...: the first stage's r of the best with at most s (0: fewer do as well)
    for _ in range(_MAX_STAGES - 1):
        cand = n[:, None] * r[None, :] + _STAGE_COST + cost[left]
        j = np.argmin(cand, axis=1)
        best = cand[np.arange(n.size), j]
        go = best < cost
        pick.append(np.where(go, j + 1, 0))
        cost = np.where(go, best, cost)
    out: list[tuple[tuple[int, int], ...]] = []
    for m0 in range(n.size):
        plan: list[tuple[int, int]] = []
        m = m0
        for choice in reversed(pick):  # at most _MAX_STAGES stages left first
            step = int(choice[m])
            if step:
                plan.append((m, step))
                m = int(left[m, step - 1])
        if n[m0] * single[m0] + _STAGE_COST <= cost[m0]:  # (always so with no earlier stage: single <= last)
            out.append(((m0, int(single[m0])),))
        else:
            out.append((*plan, (m, int(last[m]))))
    return tuple(out)


def _bound(m: np.ndarray, q: np.ndarray, log_inv: float) -> np.ndarray:
    """A count ``b <= m`` with ``P(Binomial(m, q) > b) <= exp(-log_inv)`` (Bernstein's inequality)."""
    mu = m * q
    t = log_inv / 3.0 + np.sqrt((log_inv / 3.0) ** 2 + 2.0 * mu * (1.0 - q) * log_inv)
    return np.minimum(m, np.ceil(mu + t))


def stages(n: int, rounds: int) -> tuple[tuple[int, int], ...]:
    """``((slots, proposals a slot), ...)``: the fixed work of a chunk of ``n`` tokens when every token may need ``R``.

    Stage 1 gives every token ``r_1`` proposals; each later stage gives ``r_i`` more to a
    fixed number of *slots*, filled by the tokens none of whose proposals was accepted yet,
    the rest by dummy work. Planned for tokens whose proposals are each accepted with the
    smallest probability ``R`` is planned for (``(1 - p)^R = delta``): the slots of a stage
    are a Bernstein bound on the tokens the one before leaves, exceeded with probability
    ``delta / (2 (_MAX_STAGES - 1))``, and the last stage gives each of its ``m`` slots
    enough proposals (at least ``R``) that any token is left with probability at most
    ``delta / 2`` (union bound; ``delta`` for a single stage, where ``n = 1`` gets exactly
    ``R``): a chunk goes past its budget with probability at most ``delta``. Among these
    budgets (up to :data:`_MAX_STAGES` stages) the cheapest, counting
    :data:`_STAGE_COST` a stage (:func:`_schedules`). A function of ``n`` and ``R`` only.
    """
    if n > _TOKENS:
        raise ValueError(f"a chunk has at most {_TOKENS} tokens, not {n}")
    return _schedules(rounds)[n]


def privatize_oblivious(
    mech: TruncatedExponential, flat: npt.NDArray[np.int64], rng: np.random.Generator
) -> npt.NDArray[np.int64]:
    """History-free TEM: the same work whatever the words (module docstring); exact law."""
    out = np.empty(flat.size, dtype=np.int64)
    if not flat.size:
        return out
    rounds, use_far = oblivious_plan(mech)
    prepared = mech._prepared_knn()
    entries = None
    if prepared is None:
        entries = _entries(mech, flat)  # one scan per token
        if entries is None:  # no screening (norms over 1e15): the general samplers
            return privatize_general(mech, flat, rng)
    bad: list[np.ndarray] = []
    bufs = Buffers()  # a chunk's arrays, allocated once a call (sizes: the first chunk's)
    size = _chunk_tokens(use_far and mech._prepared.far is not None and bool(mech._env.n_rest))
    for s in range(0, flat.size, size):  # chunks of `size` tokens (the plan's): the last one is n mod size
        words = flat[s : s + size]
        if prepared is not None:  # the chunk's rows, gathered where they are used (in cache)
            rows = _gather_rows(prepared, words, bufs)
        else:
            assert entries is not None
            rows = (entries[0][s : s + size], entries[1][s : s + size])
        env = _envelopes(mech, rows, words, use_far, estimate=False, bufs=bufs)
        ok = np.isfinite(env.est)
        pos = np.arange(s, s + words.size)
        bad.append(pos[~ok])
        draw = _Chunk(mech, env, words, use_far, rng)
        todo = np.flatnonzero(ok)
        pend = todo
        for slots, r in stages(todo.size, rounds):
            real = pend[:slots]
            tok = np.concatenate([real, todo[: slots - real.size]])  # the free slots: dummy work, discarded
            got, res = draw.first_accepted(tok, r)
            got, res = got[: real.size], res[: real.size]
            out[pos[real[got]]] = res[got]
            pend = np.concatenate([pend[slots:], real[~got]])  # (tokens past the budget first)
        while pend.size:  # past the budget (probability <= delta a chunk): R more each, until accepted
            got, res = draw.first_accepted(pend, rounds)
            out[pos[pend[got]]] = res[got]
            pend = pend[~got]
    rest = np.concatenate(bad) if bad else np.empty(0, dtype=np.int64)
    if rest.size:  # no envelope can be formed (an E of zero mass): the general samplers
        out[rest] = privatize_general(mech, flat[rest], rng)
    return out


class Buffers:
    """Arrays that the chunks of one call reuse, by name: allocated (and their pages faulted) once a call.

    A chunk's k-NN rows are megabytes (3.4 KB a token on GloVe: 14 MB for 4,096 tokens),
    allocated afresh per chunk and every page faulted at its first write; reused, the
    chunks of 4,096 tokens pay (at eps 1 on GloVe 50k, one thread, 7% less CPU time a call
    than chunks of 2,048 without buffers; the same without them). With the far bounds, E's
    weights and the far layouts too (4 MB and 13 MB a chunk of 2,048 tokens on GloVe 50k's
    781 clusters, 8 bytes an entry). The sizes are the call's first (largest) chunk's: a
    function of the token count only.
    """

    def __init__(self) -> None:
        self._bufs: dict[str, np.ndarray] = {}

    def get(self, name: str, shape: tuple[int, ...], dtype: npt.DTypeLike) -> np.ndarray:
        """A C-contiguous array of ``shape`` (contents undefined), in the buffer ``name``."""
        size = math.prod(shape)
        buf = self._bufs.get(name)
        if buf is None or buf.size < size or buf.dtype != np.dtype(dtype):
            buf = np.empty(size, dtype=dtype)
            self._bufs[name] = buf
        return buf[:size].reshape(shape)


def _gather_rows(prepared: PreparedKnn, words: npt.NDArray[np.int64], bufs: Buffers) -> Table:
    """``prepared.rows(words)`` (the same values), into the call's buffers."""
    ids = bufs.get("rows_ids", (words.size, prepared.ids.shape[1]), prepared.ids.dtype)
    dist = bufs.get("rows_dist", (words.size, prepared.dist.shape[1]), prepared.dist.dtype)
    np.take(prepared.ids, words, axis=0, out=ids, mode="clip")  # (valid ids: "clip" is not buffered)
    np.take(prepared.dist, words, axis=0, out=dist, mode="clip")
    return ids, dist


class _Chunk:
    """The proposals of the tokens of one chunk (their envelopes formed), every proposal through every branch."""

    def __init__(
        self,
        mech: TruncatedExponential,
        env: _Envelopes,
        words: npt.NDArray[np.int64],
        use_far: bool,
        rng: np.random.Generator,
    ) -> None:
        self.mech, self.env, self.words, self.rng = mech, env, words, rng
        self.far = mech._prepared.far if mech._env.n_rest and use_far else None
        self.w_rows = np.asarray(mech._geo.x[words], dtype=np.float64)  # gathered once, not per proposal

    def first_accepted(self, tok: npt.NDArray[np.int64], r: int) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
        """``(got, res)``: ``r`` proposals for each token ``tok[i]``; whether one was accepted, and the first accepted.

        The same work whatever the tokens: ``len(tok) * r`` proposals, :data:`_PROPOSALS` at a time.
        """
        got = np.zeros(tok.size, dtype=bool)
        res = np.zeros(tok.size, dtype=np.int64)
        per = max(1, _PROPOSALS // r)  # a function of r only
        for s in range(0, tok.size, per):
            part = tok[s : s + per]
            m = part.size
            accepted, drawn = self._propose(np.repeat(part, r).reshape(m, r))  # row i: token part[i]'s r proposals
            grid = accepted.reshape(m, r)
            first = np.argmax(grid, axis=1)
            got[s : s + m] = grid[np.arange(m), first]
            res[s : s + m] = drawn.reshape(m, r)[np.arange(m), first]
        return got, res

    def _propose(self, j: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
        """One proposal of the k-NN envelope sampler for each token ``j[i]``: ``(accepted, word)``.

        ``j``: a ``(tokens, r)`` grid whose row ``i`` is one token repeated (:meth:`first_accepted`), or
        any array of tokens; the results have ``j``'s shape with the E slice, else are flat.
        """
        if self.env.uniform:
            return self._propose_uniform(j)
        grid, j = j, j.reshape(-1)
        mech, env, words, rng, far = self.mech, self.env, self.words, self.rng, self.far
        v, k = mech.embedding.size, mech._k
        u = rng.random(j.size) * env.total[j]
        m_e = env.m_e[j]
        in_e = u < m_e
        # inverse CDF into E, for every proposal
        col = count_at_most(env.cum, j, u)
        res = env.ids[j, np.minimum(col, k - 1)]
        accepted = in_e.copy()
        if mech._env.n_rest:
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
                lg_far = mech._env.far_log_envelope(far.level_at(words[j], c), log_g)
                use = env.far_word[j]
                y = np.where(use, y_far, y)
                log_g = np.where(use, lg_far, log_g)
            d = self._exact_grid(grid, y).reshape(-1)
            with np.errstate(over="ignore", invalid="ignore"):
                p_acc = np.exp(mech._env.weights_exponent(d) - log_g)
            p_acc[~(log_g > -np.inf)] = 0.0
            acc = rng.random(j.size) < p_acc
            acc &= ~in_rows(env.ids, j, y)
            accepted |= acc
            res = np.where(in_e, res, y)
        return accepted, res

    def _exact_grid(self, j: npt.NDArray[np.int64], y: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """``d(words[j], y)`` for a grid ``j`` whose rows each repeat one token (:meth:`first_accepted`):
        :meth:`._geometry.Geometry.exact_indexed` on the grid, each token's vector read once for its row."""
        grid = j if j.ndim == 2 else j.reshape(-1, 1)
        tok = grid[:, 0]
        d = self.mech._geo.exact_indexed(self.w_rows, tok, self.words[tok], y.reshape(grid.shape))
        return d.reshape(j.shape)

    def _propose_uniform(self, j: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
        """One proposal of the plain envelope with the E slice for each token ``j[i]``: ``(accepted, word)``.

        The envelope has two parts, each taking the weight ``w(y) = exp(-a min(d, gamma))`` of
        a word in slices: the *outside* part, ``n`` words (the whole vocabulary) of envelope
        ``env = exp(-a min(d_env, gamma))`` each, accepts ``y`` with probability
        ``min(w(y), env) / env``; the *E slice*, E's ``k`` entries of envelope ``1 - env`` each,
        accepts entry ``y`` with probability ``max(w(y) - env, 0) / (1 - env)``. A word outside
        E has ``w <= env`` (``d >= d_env``): it comes out with probability ``w / total``; a
        word of E gets ``min(w, env) + max(w - env, 0) = w`` from the two parts: so does it.
        So no weights of E (no cumulative sums, no inverse CDF) and no membership test in E;
        every proposal computes both parts' draws (one uniform index of E, one word of the
        vocabulary, one exact distance), the part its ``u`` falls in is chosen by masks.
        """
        mech, env, rng = self.mech, self.env, self.rng
        assert env.scale is not None and env.weight is not None
        v, k = mech.embedding.size, mech._k
        u = rng.random(j.shape)  # (the same draws as rng.random(j.size), in j's shape)
        u *= env.total[j]
        m_slice = env.m_e[j]
        in_e = u < m_slice
        to_e, to_rest = env.scale[0][j], env.scale[1][j]  # (each row's array gathered once a proposal)
        # the part's index from u's place in it (uniform within the part it falls in)
        i = u * to_e
        np.minimum(i, k - 1, out=i)
        e_at = i.astype(np.int64)
        y = u - m_slice
        y *= to_rest
        np.clip(y, 0, v - 1, out=y)
        y_at = y.astype(np.int64)
        d = self._exact_grid(j, y_at)
        np.copyto(d, env.cum[j, e_at], where=in_e)  # E's exact distances (its table's)
        w = np.exp(mech._env.weights_exponent(d))
        g = env.weight[j]
        # accepted with min(w, env) / env outside, max(w - env, 0) / (1 - env) in E's slice
        p_acc = np.where(in_e, np.maximum(w - g, 0.0) * to_e, np.minimum(w, g) * to_rest)
        accepted = rng.random(j.shape) < p_acc
        return accepted, np.where(in_e, env.ids[j, e_at], y_at)
