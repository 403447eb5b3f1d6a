"""Statistics estimated from draws of the mechanism (every mechanism without an exact distribution)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._progress import progress
from .._random import RandomState
from .._validation import check_int
from ..mechanisms.base import Mechanism
from ._common import _CUM_RTOL, DEFAULT_ETA, statistics_generator
from ._intervals import clopper_pearson, distinct_count_interval

__all__ = ["sampled_statistics", "statistics_from_draws"]


def statistics_from_draws(
    ids: npt.ArrayLike,
    draws: npt.ArrayLike,
    *,
    eta: float = DEFAULT_ETA,
    confidence: float = 0.95,
    vocab_size: int | None = None,
) -> dict[str, np.ndarray]:
    """Statistics of ``draws[i]`` (``samples`` outputs of the mechanism on ``ids[i]``), vectorized.

    Returns ``n_w`` (frequency of ``ids[i]``) with its Clopper-Pearson interval, ``s_w``
    (distinct outputs) with :func:`distinct_count_interval`, the plug-in ``eta``-support
    (fewest distinct outputs covering ``>= (1 - eta)`` of the draws), and the plug-in
    Shannon entropy and min-entropy in bits. Also ``self_count`` and ``top_count``.
    """
    q = np.asarray(ids, dtype=np.int64).ravel()
    d = np.asarray(draws, dtype=np.int64)
    if d.ndim != 2 or d.shape[0] != q.size or d.shape[1] < 1:
        raise InvalidParameterError("draws", f"shape {d.shape}", f"a ({q.size}, samples) array")
    m, s = d.shape
    self_count = np.count_nonzero(d == q[:, None], axis=1)
    srt = np.sort(d, axis=1)
    starts = np.ones((m, s), dtype=bool)
    starts[:, 1:] = srt[:, 1:] != srt[:, :-1]
    distinct = np.count_nonzero(starts, axis=1)
    pos = np.flatnonzero(starts.ravel())
    run_len = np.diff(np.append(pos, m * s))
    run_row = pos // s
    p = run_len / s
    shannon = -np.bincount(run_row, weights=p * np.log2(p), minlength=m)
    first_run = np.concatenate([[0], np.cumsum(distinct)[:-1]])
    top = np.maximum.reduceat(run_len, first_run)
    # plug-in eta-support: runs by decreasing count within each row
    order = np.lexsort((-run_len, run_row))
    rl = run_len[order].astype(np.float64)
    cum = np.cumsum(rl)
    base = np.where(first_run > 0, cum[np.maximum(first_run - 1, 0)], 0.0)
    within = cum - base[run_row]  # run_row is sorted, and lexsort kept rows in place
    need = (1.0 - eta) * s * (1.0 - _CUM_RTOL)
    support = np.bincount(run_row, weights=within < need, minlength=m).astype(np.int64) + 1
    support = np.minimum(support, distinct)
    n_lo, n_hi = clopper_pearson(self_count, s, confidence)
    s_lo, s_hi = distinct_count_interval(distinct, s, confidence, vocab_size=vocab_size)
    return {
        "n_w": self_count / s,
        "n_w_low": n_lo,
        "n_w_high": n_hi,
        "s_w": distinct.astype(np.float64),
        "s_w_low": s_lo,
        "s_w_high": s_hi,
        "support": support,
        "shannon": np.maximum(shannon, 0.0),
        "min_entropy": -np.log2(top / s) + 0.0,
        "self_count": self_count,
        "top_count": top,
    }


def sampled_statistics(
    mechanism: Mechanism,
    ids: npt.ArrayLike,
    *,
    samples: int = 1000,
    random_state: RandomState = None,
    eta: float = DEFAULT_ETA,
    confidence: float = 0.95,
    chunk_tokens: int = 1 << 18,
    show_progress: bool | None = None,
    on_draws: Callable[[np.ndarray, np.ndarray], None] | None = None,
) -> dict[str, np.ndarray]:
    """Draw ``samples`` outputs per word and compute :func:`statistics_from_draws`.

    The draws for many words go through ONE ``privatize`` call per chunk of about
    ``chunk_tokens`` tokens (``np.repeat(chunk_ids, samples)``); nothing is drawn token by
    token. ``on_draws(chunk_ids, draws)`` (optional) sees every chunk's raw draws.
    """
    q = np.asarray(ids, dtype=np.int64).ravel()
    samples = check_int("samples", samples, minimum=1)
    rng = statistics_generator(random_state)
    per_chunk = max(1, int(chunk_tokens) // samples)
    parts: list[dict[str, np.ndarray]] = []
    vocab = mechanism.embedding.size
    with progress(q.size * samples, "sampling", enabled=show_progress) as advance:
        for s in range(0, q.size, per_chunk):
            chunk = q[s : s + per_chunk]
            draws = mechanism.privatize(np.repeat(chunk, samples), rng).reshape(chunk.size, samples)
            if on_draws is not None:
                on_draws(chunk, draws)
            parts.append(statistics_from_draws(chunk, draws, eta=eta, confidence=confidence, vocab_size=vocab))
            advance(chunk.size * samples)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
