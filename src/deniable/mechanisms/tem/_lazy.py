"""TEM's lazy per-word path: tables built for the words of a run, and the samplers that need no
prepared artefact (docs/tem.md, samplers 1-3 and 5).

For the tokens of words without a usable prepared envelope: a pilot of uniform rejection
over all of them, kept when its acceptance is high; then, per distinct word, the sampler
:func:`_plan` names from public facts about the word (its k-NN table, how many candidates
its ball has) and its count in the call: its ball table ``L_w`` (inverse CDF,
:func:`sample_rest`), its k-NN envelope (the batched sampler, :mod:`._sampler`) or the
shell sampler's lower bounds. The tables (ball and k-NN) and candidate counts built from a
word's float32 screening pass over the vocabulary (:func:`rows`) live in this process's
memory only (never on disk) and not at all when history-free; they save the next scan and
change no draw (keyed: tests/test_tem_keyed.py).

May import: :mod:`._envelope`, :mod:`._sampler`, :mod:`._shared`, :mod:`._tables`; the
mechanism (:mod:`._mechanism`, whose state these functions read) only for type checking.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..._progress import progress
from ._envelope import usable
from ._sampler import KnnDraws, sample_knn
from ._shared import Table
from ._tables import KNN_SKETCH, knn_entry

if TYPE_CHECKING:
    from ._mechanism import TruncatedExponential

__all__ = ["build_knn", "build_table", "knn_lookup", "privatize_general", "rows", "sample_rest", "table_rest", "total"]

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
    the prepared artefacts) only. The tables this process remembers (:func:`_plan`) only save
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


def _cost(mech: TruncatedExponential, w: int, entry: Table | None) -> tuple[float, float]:
    """:meth:`Envelope.cost` of ``w``'s k-NN table ``entry`` (``inf`` without one), remembered per word
    unless history-free (a function of the table: the same remembered or not)."""
    if entry is None:
        return math.inf, math.inf
    if mech.history_free:
        return mech._env.cost(entry)
    found = mech._costs.get(w)
    if found is None:
        found = mech._costs[w] = mech._env.cost(entry)
    return found


def _plan(mech: TruncatedExponential, cost: tuple[float, float], ncand: int | None, count: int) -> str | None:
    """``"knn"``, ``"table"`` or ``"shells"``: the sampler of a word whose k-NN envelope costs
    ``cost`` (:func:`_cost`; ``inf``: no k-NN table can be built), with ``ncand`` candidates of
    its ball (:meth:`Geometry.candidate_count`) and ``count`` tokens in the call; None when
    ``ncand`` is needed and not known.

    A k-NN envelope that costs little samples the word; else its ball table when the ball is
    small, or the word frequent enough in the call to amortise it; else the envelope when
    usable; else shells. Nothing here depends on what the process remembers.
    """
    bound, est = cost
    cheap = bool(usable(bound, est))  # the envelope sampler would take it
    if est > _KNN_PREFER_RATIO:
        # a ball table costs one exact distance per member (once; then cached), the
        # k-NN envelope about `est` per token: list the ball only when it is small
        # or the word is frequent enough in this call to amortise it
        if ncand is None:
            return None
        limit = mech.table_max
        if cheap:
            limit = min(limit, max(_TABLE_MIN, int(_TABLE_AMORTISE * count * est)))
        if ncand <= limit:
            return "table"
    if math.isfinite(bound) and cheap:
        return "knn"
    return "shells"


def _row_stage(
    mech: TruncatedExponential, flat: np.ndarray, positions: np.ndarray, out: np.ndarray, rng: np.random.Generator
) -> None:
    """Tables, the k-NN envelope or the shell sampler for the tokens at ``positions``, word by word.

    Each word's sampler is :func:`_plan`'s, from its k-NN table (prepared, remembered, or
    built from a scan), its candidate count and its count here. A word is scanned when
    something its sampler needs is not remembered: its k-NN table or candidate count, its
    ball table (rebuilt, the same), or its screening row (shells). What a scan builds is kept
    in memory unless history-free (later calls at any epsilon skip the scan), and changes no
    draw: the words are drawn in id order, each with the sampler its plan names.
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
        entries, known = prepared.get_many(uniq), np.ones(n, dtype=bool)
    elif not mech._geo.screening:  # no k-NN table can be built
        entries, known = [None] * n, np.ones(n, dtype=bool)
    else:
        entries = mech._knn.get_many(uniq) if keep else [None] * n
        known = np.fromiter((e is not None for e in entries), dtype=bool, count=n)
    tables: list[Table | None] = mech._store.get_many(uniq) if keep else [None] * n
    ncands: list[int | None] = [mech._ncand.get(w) for w in uniq.tolist()] if keep else [None] * n
    plans: list[str | None] = [None] * n
    scan = np.zeros(n, dtype=bool)
    for j in range(n):
        if known[j]:
            plans[j] = _plan(mech, _cost(mech, int(uniq[j]), entries[j]), ncands[j], int(counts[j]))
        p = plans[j]
        scan[j] = p is None or p == "shells" or (p == "table" and tables[j] is None)
    scanned = rows(mech, uniq[scan]) if scan.any() else iter(())
    knn_words: list[int] = []
    knn_entries: list[Table] = []
    knn_pos: list[np.ndarray] = []
    for j, w in enumerate(uniq.tolist()):
        pos = positions[starts[j] : starts[j + 1]]
        row = None
        if scan[j]:
            w_row, row = next(scanned)
            assert w_row == w
            if not known[j]:
                entries[j] = build_knn(mech, w, row)
            cost = _cost(mech, w, entries[j])
            if ncands[j] is None and cost[1] > _KNN_PREFER_RATIO:  # (not needed otherwise)
                ncand = mech._geo.candidate_count(w, row, mech._gamma, mech.table_max)
                ncands[j] = ncand
                if keep:
                    mech._ncand[w] = ncand
            plans[j] = _plan(mech, cost, ncands[j], int(counts[j]))
        plan, entry = plans[j], entries[j]
        if plan == "table":
            table = tables[j]
            if table is None:
                assert row is not None
                table = build_table(mech, w, mech._geo.candidates(w, row, mech._gamma))  # type: ignore[arg-type]
            out[pos] = _sample_table(mech, w, table, pos.size, rng)
        elif plan == "knn":
            assert entry is not None
            knn_words.append(w)
            knn_entries.append(entry)
            knn_pos.append(pos)
        else:
            assert row is not None
            out[pos] = _sample_shells(mech, w, mech._geo.lower_bounds(w, row), pos.size, rng)
    if knn_words:
        sizes = np.array([p.size for p in knn_pos])
        token_word = np.repeat(np.arange(len(knn_words)), sizes)
        kw = np.array(knn_words, dtype=np.int64)
        sample_knn(mech._env, mech._geo, KnnDraws(kw, knn_entries, token_word, np.concatenate(knn_pos)), out, rng)


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
