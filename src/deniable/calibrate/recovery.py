"""Attacker recovery on public reference text: the unigram Bayes attacker the calibration reports.

The attacker (docs/attacker.md) knows the mechanism, its epsilon, the embedding and the public
Zipf prior over the embedding's frequency ranks (:func:`deniable.priors.zipf_prior`); it reads one
privatized token ``y`` at a time and guesses ``argmax_w prior(w) * P(M(w) = y)``. The calibration
table (:mod:`deniable.calibrate.table`) records the share of its reference tokens this attacker
recovers, for all tokens and for content words (outside the :data:`CONTENT_RANK` most frequent),
computed by an instance that never saw input, from public data only:

- **exact** where the mechanism has an exact ``distribution()`` and the vocabulary is at most
  :data:`EXACT_MAX_WORDS` words (the guess table needs every word's row): the share is the exact
  expectation over the noise, ``sum_t P(guess(M(x_t)) = x_t) / N``; its 95% interval is Wilson's
  over the ``N`` reference tokens (what a text like the reference would see).
- **held out** otherwise: the point's own draws (one privatization of the reference tokens) are
  split into two halves; a guess table fitted on one half (``guess[y]`` = the input seen most often
  with output ``y``; ``y`` itself for an output the half never showed) is scored on the other, and
  the other way round (two-fold cross-fitting). Every token is scored by a table that never saw its
  draw: the success of an attacker that exists, a lower bound on the Bayes attacker's (fitted on
  half of the reference its table is rough; docs/calibration.md gives the measured gap). Its
  interval is Clopper-Pearson over the ``N`` tokens.

The exact guess table also serves :mod:`deniable.experiments.reconstruction` (moved here from it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._validation import check_int

if TYPE_CHECKING:
    from ..mechanisms.base import Mechanism
    from ..priors import Prior

__all__ = [
    "CONTENT_RANK",
    "EXACT_MAX_WORDS",
    "Recovery",
    "exact_guess_table",
    "exact_rates",
    "reference_recovery",
]

#: Content words lie outside the 200 most frequent words (embedding row order: frequency order)
CONTENT_RANK = 200
#: The calibration's attacker is exact up to this vocabulary size (a guess table of V rows of V; about a
#: second per epsilon point at 2,000 words for TEM, growing as V^2)
EXACT_MAX_WORDS = 4096
#: Mechanisms whose ``distribution()`` is exact but slow (truncated Gumbel integrates numerically, about a
#: second per word on 2,000 words): sampled by default
SAMPLED_BY_DEFAULT = frozenset({"truncated_gumbel"})
#: Float64 cells per block of distribution rows (the exact attacker's memory)
_BLOCK_CELLS = 1 << 23
_Z = 1.959963984540054


def _candidates(prior: Prior, candidates: int | None) -> npt.NDArray[np.int64]:
    """The ``candidates`` most probable words under the prior (all of them for None), most probable first."""
    order = prior.order()
    if candidates is None:
        return order
    n = check_int("candidates", candidates, minimum=1)
    return order[:n]


def _dense_rows(mech: Mechanism, words: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """``P(M(w) = y)`` for each ``w`` of ``words`` (rows) and every output ``y`` (columns)."""
    v = mech.embedding.size
    out = np.zeros((len(words), v), dtype=np.float64)
    for i, w in enumerate(words.tolist()):
        ids, probs = mech.distribution(int(w))
        out[i, np.asarray(ids, dtype=np.int64)] = probs
    return out


def _block(v: int) -> int:
    return max(1, _BLOCK_CELLS // max(v, 1))


def exact_guess_table(
    mech: Mechanism,
    prior: Prior,
    candidates: int | None = None,
    keep: dict[int, npt.NDArray[np.float64]] | None = None,
) -> npt.NDArray[np.int64]:
    """``guess[y] = argmax_{w in C} prior(w) P(M(w) = y)`` for every output ``y`` (ties: the more probable
    word under the prior), from the mechanism's exact ``distribution()`` rows.

    ``keep``: a dict whose keys are words; their rows are stored in it on the way (saves a second pass)."""
    if not getattr(mech, "has_distribution", False):
        raise InvalidParameterError("mechanism", mech.name, "a mechanism with an exact output distribution")
    v = mech.embedding.size
    cand = _candidates(prior, candidates)
    log_prior = prior.log()
    best = np.full(v, -np.inf)
    guess = np.full(v, cand[0], dtype=np.int64)
    step = _block(v)
    with np.errstate(divide="ignore"):
        for a in range(0, len(cand), step):
            words = cand[a : a + step]
            rows = _dense_rows(mech, words)
            if keep is not None:
                for i, w in enumerate(words.tolist()):
                    if w in keep:
                        keep[w] = rows[i].copy()
            score = np.log(rows) + log_prior[words][:, None]
            top = score.argmax(axis=0)  # first = the more probable word of the block
            val = score[top, np.arange(v)]
            better = val > best
            best[better] = val[better]
            guess[better] = words[top[better]]
    return guess


def exact_rates(
    mech: Mechanism, guess: npt.NDArray[np.int64], types: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per word of ``types``: ``P(guess(M(x)) = x)`` and ``P(M(x) = x)``."""
    rec = np.empty(len(types))
    unch = np.empty(len(types))
    step = _block(mech.embedding.size)
    for a in range(0, len(types), step):
        xs = types[a : a + step]
        rows = _dense_rows(mech, xs)
        rec[a : a + step] = np.where(guess[None, :] == xs[:, None], rows, 0.0).sum(axis=1)
        unch[a : a + step] = rows[np.arange(len(xs)), xs]
    return rec, unch


def wilson(value: float, n: int) -> tuple[float, float]:
    """The Wilson 95% interval of a share ``value`` over ``n`` tokens, clipped to [0, 1]."""
    if n == 0 or math.isnan(value):
        return math.nan, math.nan
    z2 = _Z * _Z
    centre = (value + z2 / (2 * n)) / (1 + z2 / n)
    half = _Z * math.sqrt(value * (1 - value) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Recovery:
    """Share of reference tokens the attacker recovers: all tokens and content words, 95% intervals."""

    method: str  # "exact" or "held-out"
    recovered: float
    low: float
    high: float
    content: float | None  # None: no content word among the reference tokens
    content_low: float | None
    content_high: float | None


def exact_affordable(mech: Mechanism) -> bool:
    """Whether the calibration computes ``mech``'s attacker exactly (see the module docstring)."""
    return (
        bool(getattr(mech, "has_distribution", False))
        and mech.name not in SAMPLED_BY_DEFAULT
        and mech.embedding.size <= EXACT_MAX_WORDS
    )


def _held_out_hits(ids: npt.NDArray[np.int64], out: npt.NDArray[np.int64], v: int) -> npt.NDArray[np.bool_]:
    """Per token: whether a guess table fitted on the *other* half of ``(ids, out)`` recovers it.

    The table fitted on a half: for an output seen there at least twice with one input more often than
    any other (the word itself wins ties), that input; elsewhere a fallback, the word itself or the most
    frequent word (rank 0), whichever recovers more of the fitting half (chosen on that half only, apart for
    outputs among the :data:`CONTENT_RANK` most frequent words and for the others).
    """
    n = ids.size
    half = np.zeros(n, dtype=bool)
    half[: n // 2] = True
    hits = np.zeros(n, dtype=bool)
    for fit in (half, ~half):
        x_f, y_f = ids[fit], out[fit]
        keys, counts = np.unique(y_f * v + x_f, return_counts=True)
        y, x = keys // v, keys % v
        score = counts + 0.5 * (x == y)  # the word itself wins a tie
        order = np.lexsort((x, -score, y))  # per output: best input first, then the lower rank
        ys = y[order]
        first = order[np.r_[True, ys[1:] != ys[:-1]]]
        strong = counts[first] >= 2
        guess = np.arange(v, dtype=np.int64)
        for bucket in (slice(0, CONTENT_RANK), slice(CONTENT_RANK, v)):
            seen = (y_f >= (bucket.start or 0)) & (y_f < bucket.stop)
            if int((x_f[seen] == 0).sum()) > int((y_f[seen] == x_f[seen]).sum()):
                guess[bucket] = 0
        guess[y[first][strong]] = x[first][strong]
        test = ~fit
        hits[test] = guess[out[test]] == ids[test]
    return hits


def reference_recovery(
    mech: Mechanism, ids: npt.NDArray[np.int64], out: npt.NDArray[np.int64], content_rank: int = CONTENT_RANK
) -> Recovery:
    """The attacker's recovery on the reference ``ids``, privatized once as ``out`` by ``mech`` (a fresh
    instance): exact where :func:`exact_affordable`, else held out (module docstring)."""
    from ..priors import zipf_prior
    from ._intervals import clopper_pearson

    content = ids >= content_rank
    groups = {"all": np.ones(ids.size, dtype=bool), "content": content}
    shares: dict[str, tuple[float, float, float] | None] = {}
    if exact_affordable(mech):
        method = "exact"
        types, inverse = np.unique(ids, return_inverse=True)
        kept: dict[int, npt.NDArray[np.float64]] = dict.fromkeys(types.tolist(), np.zeros(0))
        guess = exact_guess_table(mech, zipf_prior(mech.embedding), keep=kept)
        rows = np.stack([kept[w] for w in types.tolist()])  # every word is a candidate: every row was kept
        rate = np.where(guess[None, :] == types[:, None], rows, 0.0).sum(axis=1)
        per_token = rate[inverse]
        for g, mask in groups.items():
            n = int(mask.sum())
            if n == 0:
                shares[g] = None
                continue
            value = float(per_token[mask].mean())
            lo, hi = wilson(value, n)
            shares[g] = (value, lo, hi)
    else:
        method = "held-out"
        hits = _held_out_hits(ids, out, mech.embedding.size)
        for g, mask in groups.items():
            n = int(mask.sum())
            if n == 0:
                shares[g] = None
                continue
            k = int(hits[mask].sum())
            lo_a, hi_a = clopper_pearson(np.array([k]), np.array([n]))
            shares[g] = (k / n, float(lo_a[0]), float(hi_a[0]))
    a = shares["all"]
    assert a is not None
    c = shares["content"]
    return Recovery(method, a[0], a[1], a[2], *(c if c is not None else (None, None, None)))
