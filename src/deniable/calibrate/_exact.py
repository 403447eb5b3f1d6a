"""Exact statistics from a mechanism's output distribution, one word at a time or (TEM) in bulk."""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._progress import progress
from .._validation import check_int, check_probability
from ..mechanisms.tem._geometry import BLOCK_METRICS, Geometry, tem_distributions, truncation
from ._common import _CUM_RTOL, DEFAULT_ETA

if TYPE_CHECKING:
    from ..embedding import Embedding
    from ..mechanisms.base import Mechanism

__all__ = [
    "BULK_METRICS",
    "CompactArrays",
    "compact_statistics",
    "distribution_statistics",
    "distribution_statistics_of",
    "exact_distribution",
    "has_bulk",
    "is_exact",
    "tem_statistics",
]

_LN2 = math.log(2.0)


def _expected_distinct(p: np.ndarray, samples: int) -> float:
    """``sum_y 1 - (1 - p_y)^samples`` computed stably."""
    p = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    with np.errstate(divide="ignore"):
        return float(-np.expm1(samples * np.log1p(-p)).sum())


def _one_minus_pow(p: float, samples: int, count: int = 1) -> float:
    if count <= 0 or p <= 0:
        return 0.0
    if p >= 1:
        return float(count)
    return float(count * -math.expm1(samples * math.log1p(-p)))


def compact_statistics(
    probs: npt.ArrayLike,
    self_prob: float,
    *,
    n_outside: int = 0,
    p_outside: float = 0.0,
    eta: float = DEFAULT_ETA,
    samples: int = 1000,
) -> tuple[float, float, int, float, float]:
    """Exact ``(N_w, E[S_w], eta-support, Shannon bits, min-entropy bits)`` of one distribution.

    The distribution is given compactly: the explicit probabilities ``probs`` (they
    include ``self_prob``, the probability of the input word) plus ``n_outside`` further
    outputs that each have probability ``p_outside`` (TEM's words outside the gamma-ball).
    """
    p = np.asarray(probs, dtype=np.float64).ravel()
    p = p[p > 0]
    n_out = int(n_outside)
    p_out = float(p_outside) if n_out > 0 else 0.0
    target = (1.0 - eta) * (1.0 - _CUM_RTOL)
    # eta-support: take the most likely outputs first; the n_out outputs of equal
    # probability p_out form one run in that order.
    desc = np.sort(p)[::-1]
    high = desc[desc >= p_out] if n_out > 0 else desc
    low = desc[desc < p_out] if n_out > 0 else desc[:0]
    cum_high = np.cumsum(high)
    mass_high = float(cum_high[-1]) if high.size else 0.0
    if high.size and mass_high >= target:
        support = int(np.searchsorted(cum_high, target, side="left")) + 1
    elif n_out > 0 and mass_high + n_out * p_out >= target:
        need = max(target - mass_high, 0.0)
        support = high.size + min(n_out, max(1, math.ceil(need / p_out - 1e-9)))
    else:
        rest = target - mass_high - n_out * p_out
        cum_low = np.cumsum(low)
        k = int(np.searchsorted(cum_low, rest, side="left")) + 1 if low.size else 0
        support = high.size + n_out + min(k, low.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        shannon = float(-(p * np.log2(p)).sum())
    if n_out > 0 and p_out > 0:
        shannon -= n_out * p_out * math.log2(p_out)
    pmax = max(float(desc[0]) if desc.size else 0.0, p_out)
    min_entropy = -math.log2(pmax) if pmax > 0 else 0.0
    e_distinct = _expected_distinct(p, samples) + _one_minus_pow(p_out, samples, n_out)
    return float(self_prob), e_distinct, support, max(shannon, 0.0), max(min_entropy, 0.0)


def is_exact(mechanism: object) -> bool:
    """Whether the mechanism exposes its exact output distribution (capability ``has_distribution``)."""
    return bool(getattr(mechanism, "has_distribution", False))


def has_bulk(mechanism: object) -> bool:
    """Whether :func:`tem_statistics` computes the mechanism's statistics in bulk.

    Capability ``truncated_exponential`` (a distribution ``∝ exp(-epsilon min(d, gamma) / 2)``
    over ``embedding`` in ``metric``, with a finite ``gamma > 0``) and a metric of
    :data:`BULK_METRICS`.
    """
    if not getattr(type(mechanism), "truncated_exponential", False):
        return False
    gamma = getattr(mechanism, "gamma", None)
    return bool(
        isinstance(gamma, int | float | np.floating)
        and math.isfinite(gamma)
        and gamma > 0
        and getattr(mechanism, "metric", None) in BULK_METRICS
    )


#: ``(ids, probs, n_outside, p_outside)``: an output distribution, compactly (TEM's shape).
CompactArrays = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], int, float]


def exact_distribution(mechanism: Mechanism, w: int) -> CompactArrays:
    """The exact output distribution of ``w``: from ``compact_distribution`` (capability
    ``has_compact_distribution``) or ``distribution`` (no outside words)."""
    if getattr(type(mechanism), "has_compact_distribution", False):
        cd = mechanism.compact_distribution(w)  # type: ignore[attr-defined]
        return (
            np.asarray(cd.ids, dtype=np.int64),
            np.asarray(cd.probs, dtype=np.float64),
            int(cd.n_outside),
            float(cd.p_outside),
        )
    ids, probs = mechanism.distribution(w)
    return np.asarray(ids, dtype=np.int64), np.asarray(probs, dtype=np.float64), 0, 0.0


def distribution_statistics_of(
    mechanism: Mechanism, w: int, *, samples: int = 1000, eta: float = DEFAULT_ETA
) -> tuple[CompactArrays, tuple[float, float, int, float, float]]:
    """The exact distribution of ``w`` and its :func:`compact_statistics` (N_w is the mass on ``w``)."""
    dist = exact_distribution(mechanism, w)
    ids, probs, n_out, p_out = dist
    hit = ids == w
    self_prob = float(probs[hit].sum()) if hit.any() else (p_out if n_out > 0 else 0.0)
    stats = compact_statistics(probs, self_prob, n_outside=n_out, p_outside=p_out, eta=eta, samples=samples)
    return dist, stats


def distribution_statistics(
    mechanism: Mechanism,
    ids: npt.NDArray[np.int64],
    *,
    samples: int = 1000,
    eta: float = DEFAULT_ETA,
    show_progress: bool | None = None,
) -> dict[str, np.ndarray]:
    """Exact statistics word by word from ``compact_distribution`` (or ``distribution``)."""
    m = ids.size
    keys = ("n_w", "s_w", "support", "shannon", "min_entropy")
    cols = {key: np.empty(m, dtype=np.int64 if key == "support" else np.float64) for key in keys}
    ball = np.empty(m, dtype=np.int64)
    with progress(m, "exact statistics", enabled=show_progress) as advance:
        for j, w in enumerate(ids.tolist()):
            (out_ids, *_), vals = distribution_statistics_of(mechanism, w, samples=samples, eta=eta)
            for key, v in zip(keys, vals, strict=True):
                cols[key][j] = v
            ball[j] = out_ids.size
            advance(1)
    if getattr(type(mechanism), "has_compact_distribution", False):
        cols["ball_size"] = ball
    return cols


#: Metrics of the bulk TEM statistics (one BLAS product per block of words).
BULK_METRICS = BLOCK_METRICS
# Probabilities at or above this get 1 - (1 - p)^s in float64; below it the series
# log(1 - p) = -p - p^2/2 is used (error <= s p^3 / 3 <= 3.4e-10 relative for s = 1000).
_BIG_P = 1e-4
# Slack on the per-bin weight bounds, covering float rounding of t and exp(t).
_BOUND_SLACK = 1e-4


def tem_statistics(
    embedding: Embedding,
    epsilon: float,
    gamma: float,
    ids: npt.ArrayLike | None = None,
    *,
    metric: str = "euclidean",
    samples: int = 1000,
    eta: float = DEFAULT_ETA,
    dtype: npt.DTypeLike = np.float32,
    block_elements: int = 1 << 24,
    workers: int = 1,
    show_progress: bool | None = None,
) -> dict[str, np.ndarray]:
    """Exact TEM statistics for many words at once, straight from the TEM formula (SPEC section 3).

    ``Pr[M(w) = y] ∝ exp(-eps * min(d(w, y), gamma) / 2)``: inside the ball
    ``L_w = {y : d(w, y) <= gamma}`` the weight is ``exp(-eps d / 2)``, outside it is
    ``exp(-eps gamma / 2)``; both are ``exp(-eps t / 2)`` with ``t = min(d, gamma)``. So
    for a block of query words one matrix product gives every distance, and per word:

    - ``Z = sum_y exp(-eps t_y / 2)``; ``N_w = 1 / Z`` (``t = 0`` for y = w); the
      min-entropy is ``log2 Z`` (w is a most likely output);
    - Shannon entropy ``ln Z + (eps / 2) E[t]`` nats (from ``ln p = -eps t / 2 - ln Z``);
    - ``E[S_w] = sum_y 1 - (1 - p_y)^samples``;
    - the eta-support: outputs are taken by increasing ``t``. A per-row histogram of ``t``
      (bins 0.05% wide, read off the float bit patterns; the outside words and the words
      at distance exactly gamma share one probability and one extra bin, so they are
      counted in bulk), with per-bin weight bounds, narrows the crossing point to a few
      bins whose elements are then sorted exactly.

    Distances come from :meth:`Geometry.block` (one BLAS product per block) in ``dtype``:
    float32 (default, fast) agrees with the float64 formula to about 1e-5 relative;
    float64 matches ``TruncatedExponential.compact_distribution`` to rounding. The
    weights, normalisers and ball sizes come from
    :func:`~deniable.mechanisms.tem._geometry.tem_distributions`, the arithmetic
    ``compact_distribution`` runs on one word. Memory: about 4 arrays of ``block_elements`` numbers
    per worker (a block holds ``block_elements // V`` query words); ``workers`` threads
    process blocks in parallel.
    """
    from ..metrics import check_metric

    metric = check_metric(metric)
    if metric not in BULK_METRICS:
        raise InvalidParameterError("metric", metric, "euclidean or angular for the bulk TEM path")
    dt: np.dtype[Any] = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise InvalidParameterError("dtype", str(dt), "float32 or float64")
    if not (isinstance(gamma, int | float | np.floating) and math.isfinite(gamma) and gamma > 0):
        raise InvalidParameterError("gamma", gamma, "a finite number > 0")
    samples = check_int("samples", samples, minimum=1)
    eta = check_probability("eta", eta)
    workers = check_int("workers", workers, minimum=1)
    half = float(epsilon) / 2.0
    vocab = embedding.size
    q_ids = np.arange(vocab, dtype=np.int64) if ids is None else embedding.check_ids(ids).ravel()
    geo = Geometry(embedding, metric)
    # outside words (and words at exactly gamma) all get t == g_eff and weight w_g
    g_eff, w_g = (float(v) for v in truncation(dt, half, float(gamma)))
    hist = _Bins(dt, g_eff, half, w_g)

    m = q_ids.size
    out = {
        "n_w": np.empty(m),
        "s_w": np.empty(m),
        "support": np.empty(m, dtype=np.int64),
        "shannon": np.empty(m),
        "min_entropy": np.empty(m),
        "ball_size": np.empty(m, dtype=np.int64),
    }
    block = max(1, min(m, block_elements // vocab))
    local = threading.local()

    def run(s: int) -> int:
        if not hasattr(local, "bufs"):  # per-thread scratch, reused across blocks
            local.bufs = (
                np.empty((block, vocab), dtype=dt),
                np.empty((block, vocab), dtype=dt),
                np.empty((block, vocab), dtype=dt),
                np.empty((block, vocab), dtype=hist.ity),
            )
        q = q_ids[s : s + block]
        b = q.size
        t, w, tmp, idx = (buf[:b] for buf in local.bufs)
        sl = slice(s, s + b)
        geo.block(q, t)
        dist = tem_distributions(t, q, half, float(gamma), weights=w)
        z = dist.z
        out["ball_size"][sl] = dist.ball
        mean_t = np.einsum("ij,ij->i", w, t, dtype=np.float64) / z
        out["n_w"][sl] = 1.0 / z
        out["min_entropy"][sl] = np.log2(z)
        out["shannon"][sl] = np.maximum((np.log(z) + half * mean_t) / _LN2, 0.0)
        out["support"][sl] = _eta_support_rows(t, w, idx, tmp, z, eta, hist, w_g)
        out["s_w"][sl] = _expected_distinct_rows(w, z, samples, tmp, t)  # t is scratch now
        return b

    starts = range(0, m, block)
    with progress(m, "exact TEM statistics", enabled=show_progress) as advance:
        if workers == 1:
            for s in starts:
                advance(run(s))
        else:  # numpy releases the GIL in BLAS and ufuncs: blocks run in parallel threads
            with ThreadPoolExecutor(max_workers=workers) as pool:
                for b in pool.map(run, starts):
                    advance(b)
    return out


def _expected_distinct_rows(w: np.ndarray, z: np.ndarray, samples: int, qs: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """``sum_y 1 - (1 - w_y / z)^samples`` per row (``qs``, ``acc``: scratch of w's shape).

    ``(1 - p)^s = exp(s log(1 - p))`` with ``log(1 - p) ~ -p - p^2/2`` for ``p < _BIG_P``
    (relative error of the term at most ``s p^3 / 3``); larger probabilities, at most
    ``1 / _BIG_P`` per row, are redone exactly in float64. The terms are summed as
    ``-expm1(.)``: ``V - sum(exp(.))`` in float32 cancels catastrophically when E[S_w] << V.
    """
    dt = w.dtype
    np.multiply(w, (samples / z).astype(dt)[:, None], out=qs)  # q = s * p
    big = np.flatnonzero(qs >= dt.type(samples * _BIG_P))
    np.multiply(qs, dt.type(-0.5 / samples), out=acc)  # -q/(2s)
    acc -= dt.type(1.0)
    acc *= qs  # -q - q^2/(2s)  =  s * (-p - p^2/2)
    np.expm1(acc, out=acc)  # (1 - p)^s - 1
    res = -acc.sum(axis=1, dtype=np.float64)
    if big.size:
        big_r = big // w.shape[1]
        pe = w.ravel()[big].astype(np.float64) / z[big_r]
        approx = acc.ravel()[big].astype(np.float64)
        exact = np.expm1(samples * np.log1p(-np.minimum(pe, 1.0)))
        res += np.bincount(big_r, weights=approx - exact, minlength=w.shape[0])
    return np.asarray(res, dtype=np.float64)


class _Bins:
    """Per-row histogram bins of ``t`` read off the float's bit pattern (no float->int conversion).

    For non-negative floats the bit pattern, read as an integer, grows with the value. With
    ``base = bits(g_eff) - (low << shift)``, ``(max(bits(t), base) - base) >> shift`` puts
    every ``t`` in ``[0, g_eff)`` into one of ``low`` bins (2048 per binade, i.e. 0.05%
    wide; everything below ``g_eff / 2^12`` in bin 0) and ``t == g_eff`` (the words at
    the truncation distance) alone into bin ``low``.
    """

    BINADES = 12
    PER_BINADE_LOG2 = 11

    def __init__(self, dt: np.dtype[Any], g_eff: float, half: float, w_g: float) -> None:
        mant = 23 if dt == np.dtype(np.float32) else 52
        self.ity = np.dtype(np.int32) if dt == np.dtype(np.float32) else np.dtype(np.int64)
        self.shift = mant - self.PER_BINADE_LOG2
        self.low = self.BINADES << self.PER_BINADE_LOG2
        gbits = int(np.asarray(g_eff, dtype=dt).view(self.ity))
        self.base = self.ity.type(gbits - (self.low << self.shift))
        j = np.arange(self.low + 1, dtype=np.int64)
        lo_bits = np.maximum(int(self.base) + (j << self.shift), 0).astype(self.ity)
        hi_bits = (int(self.base) + ((j + 1) << self.shift)).astype(self.ity)
        lo_t = lo_bits.view(dt).astype(np.float64)
        lo_t[0] = 0.0
        hi_t = np.minimum(hi_bits.view(dt).astype(np.float64), g_eff)
        self.w_upper = np.exp(-half * lo_t) * (1 + _BOUND_SLACK)
        self.w_lower = np.exp(-half * hi_t) * (1 - _BOUND_SLACK)
        self.w_upper[self.low] = self.w_lower[self.low] = w_g
        self.nb = self.low + 1

    def fill(self, t: np.ndarray, idx: np.ndarray) -> npt.NDArray[np.int64]:
        """Set ``idx[i, k] = bin(t[i, k])``; return the per-row bin counts ``(b, nb)``.

        (One ``bincount`` per row: its counts stay in cache, unlike one call over the block.)
        """
        np.maximum(t.view(self.ity), self.base, out=idx)
        idx -= self.base
        idx >>= self.shift
        return np.stack([np.bincount(row, minlength=self.nb) for row in idx])


def _eta_support_rows(
    t: np.ndarray,
    w: np.ndarray,
    idx: np.ndarray,
    tmp: np.ndarray,
    z: np.ndarray,
    eta: float,
    bins: _Bins,
    w_g: float,
) -> np.ndarray:
    """Smallest number of outputs, taken by increasing t, whose weight reaches ``(1 - eta) Z``.

    The words at the truncation distance (outside the ball or at exactly gamma) all have
    weight ``w_g`` and fill the last bin. ``idx`` (``bins.ity``) and ``tmp`` are scratch.
    """
    b, vocab = t.shape
    last = bins.low
    target = (1.0 - eta) * (1.0 - _CUM_RTOL) * z
    counts = bins.fill(t, idx)
    # the crossing lies in bins [c_lo, c_hi]: the first bin whose upper-bound cumulative
    # weight reaches the target, and the first whose lower-bound cumulative weight does
    reach_up = np.cumsum(counts * bins.w_upper, axis=1) >= target[:, None]
    reach_lo = np.cumsum(counts * bins.w_lower, axis=1) >= target[:, None]
    c_lo = np.where(reach_up.any(axis=1), np.argmax(reach_up, axis=1), last)
    c_hi = np.where(reach_lo.any(axis=1), np.argmax(reach_lo, axis=1), last)
    c_hi = np.minimum(c_hi, last - 1)  # candidates never include the shared last bin
    # exact weight of everything before the candidate bins
    before = idx < c_lo.astype(idx.dtype)[:, None]
    np.multiply(w, before, out=tmp)
    mass_before = tmp.sum(axis=1, dtype=np.float64)
    count_before = np.cumsum(counts, axis=1)[np.arange(b), np.maximum(c_lo - 1, 0)] * (c_lo > 0)
    # candidates: bins c_lo..c_hi (none when c_hi < c_lo); `before` is a subset of idx <= hi
    cand = idx <= c_hi.astype(idx.dtype)[:, None]
    np.logical_xor(cand, before, out=cand)
    flat = np.flatnonzero(cand)  # 1-d: far faster than a 2-d nonzero
    r = flat // vocab
    vals = w.ravel()[flat].astype(np.float64)
    order = np.lexsort((-vals, r))
    r, vals = r[order], vals[order]
    cum = np.cumsum(vals)
    if r.size:
        starts = np.searchsorted(r, np.arange(b), side="left")
        base = np.where(starts > 0, cum[np.maximum(starts - 1, 0)], 0.0)
        within = cum - base[r]
    else:
        within = cum
    need = target - mass_before
    n_cand = np.bincount(r, minlength=b)
    mass_cand = np.bincount(r, weights=vals, minlength=b)
    took = np.bincount(r, weights=(within < need[r]), minlength=b).astype(np.int64)
    reached = mass_cand >= need
    res = count_before + np.where(reached, took + 1, n_cand)
    # not reached within the candidates: the rest comes from the last bin (weight w_g each)
    tail = ~reached
    if tail.any():
        rest = np.maximum(need[tail] - mass_cand[tail], 0.0)
        k = np.ceil(rest / w_g - 1e-9).astype(np.int64)
        res[tail] += np.minimum(np.maximum(k, 1), counts[tail, last])
        # the bounds promised the crossing within the candidates: rounding defeated them
        for row in np.flatnonzero(tail)[c_hi[tail] < last - 1]:
            res[row] = _support_by_sort(w[row], target[row])
    return np.minimum(res, vocab)


def _support_by_sort(weights: np.ndarray, target: float) -> int:
    cum = np.cumsum(np.sort(weights.astype(np.float64))[::-1])
    return int(np.searchsorted(cum, target, side="left")) + 1
