"""Plausible-deniability statistics of a word mechanism (SPEC section 5, seeds 000 and 003).

For a word ``w`` and a mechanism ``M`` at privacy parameter ``eps``:

- ``N_w = Pr[M(w) = w]``, the probability that the word comes back unchanged;
- ``S_w``, the number of distinct outputs in ``samples`` draws of ``M(w)`` (the papers'
  estimator of the effective support, Figs. 5-6 of seed 000);
- the ``eta``-support: the size of the smallest set of words carrying probability
  ``>= 1 - eta`` of ``M(w)``;
- the Shannon entropy and the min-entropy ``-log2 max_y Pr[M(w) = y]`` of ``M(w)``, in bits.

Two ways to get them:

- **exact** for mechanisms that expose their output distribution
  (``compact_distribution`` or ``distribution``, e.g. TEM). ``S_w`` is then the exact
  *expected* number of distinct outputs in ``samples`` draws,
  ``sum_y 1 - (1 - p_y)^samples``. For TEM with a BLAS-friendly metric (euclidean,
  angular) the whole vocabulary is processed in blocks straight from the TEM formula
  (:func:`tem_statistics`), never one word at a time.
- **sampled** for every other mechanism: ``samples`` draws per word, obtained by calling
  ``privatize`` once per chunk on ``np.repeat(word_ids, samples)``. ``N_w`` gets a
  Clopper-Pearson interval; ``S_w`` (the observed distinct count) gets a distribution-free
  interval for its expectation ``E[S_w]`` from the concentration of self-bounding
  functions (see :func:`distinct_count_interval`). The ``eta``-support and the entropies
  are plug-in estimates from the draws (biased low: unseen outputs count as 0).
"""

from __future__ import annotations

import csv
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._progress import progress
from .._validation import check_choice, check_int, check_probability

if TYPE_CHECKING:
    from ..embedding import Embedding
    from ..mechanisms.base import Mechanism

__all__ = [
    "DEFAULT_ETA",
    "METHODS",
    "DeniabilityStats",
    "clopper_pearson",
    "compact_statistics",
    "distinct_count_interval",
    "distribution_statistics",
    "is_exact",
    "plausible_deniability",
    "resolve_words",
    "sampled_statistics",
    "statistics_from_draws",
    "tem_statistics",
]

#: Default eta of the eta-support: the smallest set of outputs carrying >= 95% of the mass.
DEFAULT_ETA = 0.05

_LN2 = math.log(2.0)
# Relative slack when comparing a cumulative probability with 1 - eta (rounding of sums).
_CUM_RTOL = 1e-12

WordsArg = None | int | Sequence[str] | Sequence[int] | npt.NDArray[np.integer]


@dataclass(frozen=True, eq=False)
class DeniabilityStats:
    """Per-word plausible-deniability statistics of one mechanism at one epsilon.

    Arrays are aligned with :attr:`ids`. Probabilities are in [0, 1], entropies in bits.
    For exact results the ``*_low``/``*_high`` bounds equal the values.

    Attributes
    ----------
    ids, words
        The words analysed.
    n_w, n_w_low, n_w_high
        ``Pr[M(w) = w]`` and its confidence interval (Clopper-Pearson when sampled).
    s_w, s_w_low, s_w_high
        Number of distinct outputs in :attr:`samples` draws: the observed count when
        sampled (interval: for its expectation), the exact expectation when exact.
    support
        The ``eta``-support (exact, or plug-in from the draws when sampled).
    shannon, min_entropy
        Shannon entropy and min-entropy of ``M(w)`` in bits (plug-in when sampled).
    ball_size
        TEM only: ``|L_w|``, the number of words within ``gamma`` of ``w`` (else None).
    """

    mechanism: str
    epsilon: float
    ids: npt.NDArray[np.int64]
    words: list[str]
    exact: bool
    method: str
    samples: int
    eta: float
    confidence: float
    n_w: npt.NDArray[np.float64]
    n_w_low: npt.NDArray[np.float64]
    n_w_high: npt.NDArray[np.float64]
    s_w: npt.NDArray[np.float64]
    s_w_low: npt.NDArray[np.float64]
    s_w_high: npt.NDArray[np.float64]
    support: npt.NDArray[np.int64]
    shannon: npt.NDArray[np.float64]
    min_entropy: npt.NDArray[np.float64]
    ball_size: npt.NDArray[np.int64] | None = None
    seconds: float = 0.0
    vocab_size: int = 0
    note: str = ""
    params: dict[str, object] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.ids.size)

    COLUMNS = (
        "N_w",
        "N_w_low",
        "N_w_high",
        "S_w",
        "S_w_low",
        "S_w_high",
        "eta_support",
        "shannon_bits",
        "min_entropy_bits",
    )

    def columns(self) -> dict[str, np.ndarray]:
        """The statistics as named columns (``N_w``, ``S_w``, ``eta_support``, ...)."""
        cols: dict[str, np.ndarray] = {
            "N_w": self.n_w,
            "N_w_low": self.n_w_low,
            "N_w_high": self.n_w_high,
            "S_w": self.s_w,
            "S_w_low": self.s_w_low,
            "S_w_high": self.s_w_high,
            "eta_support": self.support,
            "shannon_bits": self.shannon,
            "min_entropy_bits": self.min_entropy,
        }
        if self.ball_size is not None:
            cols["ball_size"] = self.ball_size
        return cols

    def summary(self, percentiles: Sequence[float] = (0, 5, 50, 95, 100)) -> dict[str, dict[str, float]]:
        """For each column: its mean and the given percentiles over the words (0 = min, 100 = max)."""
        out: dict[str, dict[str, float]] = {}
        for name, col in self.columns().items():
            vals = np.asarray(col, dtype=np.float64)
            row = {"mean": float(vals.mean())}
            for p, v in zip(percentiles, np.percentile(vals, list(percentiles)), strict=True):
                row[f"p{p:g}"] = float(v)
            out[name] = row
        return out

    def worst_unchanged(self, percentile: float = 100.0, *, conservative: bool = False) -> float:
        """The ``percentile``-th percentile of ``N_w`` over the words (100 = the worst case, the max).

        ``conservative`` uses the upper confidence bounds instead of the estimates.
        """
        vals = self.n_w_high if conservative else self.n_w
        return float(np.percentile(vals, percentile))

    def worst_support(self, percentile: float = 100.0, *, kind: str = "distinct", conservative: bool = False) -> float:
        """The ``(100 - percentile)``-th percentile of the support (100 = the worst case, the min).

        ``kind`` is ``"distinct"`` (``S_w``, distinct outputs in :attr:`samples` draws) or
        ``"eta"`` (the eta-support). ``conservative`` uses the lower bounds of ``S_w``.
        """
        check_choice("kind", kind, ("distinct", "eta"))
        if kind == "eta":
            vals = self.support.astype(np.float64)
        else:
            vals = self.s_w_low if conservative else self.s_w
        return float(np.percentile(vals, 100.0 - percentile))

    def to_csv(self, path: str | Path) -> Path:
        """Write one row per word (word, id and every column) as CSV."""
        out = Path(path)
        cols = self.columns()
        with open(out, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["epsilon", "word", "id", *cols])
            arrays = [np.asarray(c) for c in cols.values()]
            for i, (wid, word) in enumerate(zip(self.ids.tolist(), self.words, strict=True)):
                writer.writerow([f"{self.epsilon:g}", word, wid, *(_cell(a[i]) for a in arrays)])
        return out

    def describe(self) -> dict[str, object]:
        """Metadata for reports (never any user text)."""
        return {
            "mechanism": self.mechanism,
            "epsilon": self.epsilon,
            "words": len(self),
            "vocab_size": self.vocab_size,
            "exact": self.exact,
            "method": self.method,
            "samples": self.samples,
            "eta": self.eta,
            "confidence": self.confidence,
            "seconds": round(self.seconds, 3),
            "note": self.note,
            **self.params,
        }


def _cell(v: Any) -> str:
    if isinstance(v, np.floating | float):
        return f"{float(v):.6g}"
    return str(v)


# --------------------------------------------------------------------------------------
# Confidence intervals
# --------------------------------------------------------------------------------------


def clopper_pearson(
    successes: npt.ArrayLike, trials: npt.ArrayLike, confidence: float = 0.95
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Exact (Clopper-Pearson) two-sided interval for a binomial proportion, vectorized.

    Coverage is at least ``confidence`` for every true proportion (it is conservative).
    """
    from scipy.special import betaincinv

    confidence = check_probability("confidence", confidence)
    x = np.asarray(successes, dtype=np.float64)
    n = np.broadcast_to(np.asarray(trials, dtype=np.float64), x.shape)
    alpha = 1.0 - confidence
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(x > 0, betaincinv(np.maximum(x, 1e-300), n - x + 1, alpha / 2), 0.0)
        hi = np.where(x < n, betaincinv(x + 1, np.maximum(n - x, 1e-300), 1 - alpha / 2), 1.0)
    return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)


def distinct_count_interval(
    observed: npt.ArrayLike, samples: int, confidence: float = 0.95, *, vocab_size: int | None = None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """A confidence interval for ``E[D]`` from one observed distinct count ``D`` in ``samples`` draws.

    ``D`` (the number of distinct values among independent draws) is a *self-bounding*
    function of the draws: removing one draw lowers it by 0 or 1, and the total decrease
    over all draws is at most ``D``. Hence (Boucheron, Lugosi, Massart, *Concentration
    Inequalities*, Thm. 6.12), with ``m = E[D]``::

        Pr[D >= m + t] <= exp(-t^2 / (2m + 2t/3)),    Pr[D <= m - t] <= exp(-t^2 / (2m)).

    Inverting both tails at ``alpha/2`` (``L = ln(2/alpha)``) gives the interval
    ``[d - (sqrt(4L^2/9 + 2dL) - 2L/3), d + L + sqrt(2dL + L^2)]`` clipped to
    ``[1, min(samples, vocab_size)]``. It holds for every output distribution (no
    asymptotics, no extra draws) and is conservative: its coverage is at least
    ``confidence`` and usually much higher. (A bootstrap of a distinct count is biased
    low, since a resample repeats draws, so it is not used.)
    """
    confidence = check_probability("confidence", confidence)
    d = np.asarray(observed, dtype=np.float64)
    big_l = math.log(2.0 / (1.0 - confidence))
    lo = d - (np.sqrt(4.0 * big_l * big_l / 9.0 + 2.0 * d * big_l) - 2.0 * big_l / 3.0)
    hi = d + big_l + np.sqrt(2.0 * d * big_l + big_l * big_l)
    top = float(samples if vocab_size is None else min(samples, vocab_size))
    return np.clip(lo, 1.0, top), np.clip(hi, 1.0, top)


# --------------------------------------------------------------------------------------
# Exact statistics of one distribution
# --------------------------------------------------------------------------------------


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
    """Whether the mechanism exposes its exact output distribution (TEM does)."""
    return bool(getattr(mechanism, "has_distribution", False))


# --------------------------------------------------------------------------------------
# Word selection
# --------------------------------------------------------------------------------------


def resolve_words(
    embedding: Embedding, words: WordsArg = None, rng: np.random.Generator | None = None
) -> npt.NDArray[np.int64]:
    """Turn ``words`` into sorted-as-given word ids.

    ``None``: the whole vocabulary. An ``int`` ``n``: a uniform random sample of ``n``
    distinct words drawn with ``rng`` (sorted by id). Strings: looked up (an unknown
    word is an error that does not show the word). Integers: validated ids.
    """
    if words is None:
        return np.arange(embedding.size, dtype=np.int64)
    if isinstance(words, int | np.integer) and not isinstance(words, bool):
        n = check_int("words", words, minimum=1)
        if n >= embedding.size:
            return np.arange(embedding.size, dtype=np.int64)
        if rng is None:
            from .._random import secure_generator

            rng = secure_generator()
        return np.sort(rng.choice(embedding.size, size=n, replace=False)).astype(np.int64)
    if isinstance(words, str):
        words = [words]
    seq: Any = words if isinstance(words, np.ndarray) else list(words)  # type: ignore[arg-type]
    if len(seq) == 0:
        raise InvalidParameterError("words", "[]", "at least one word")
    if isinstance(seq, np.ndarray) or not isinstance(seq[0], str):
        return embedding.check_ids(np.asarray(seq), "words")
    ids = embedding.ids([str(w) for w in seq])
    if (ids < 0).any():
        raise InvalidParameterError(
            "words", f"<{int((ids < 0).sum())} word(s) not shown>", "words in the embedding's vocabulary"
        )
    return ids


# --------------------------------------------------------------------------------------
# Exact: from distribution() / compact_distribution()
# --------------------------------------------------------------------------------------


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
    cols = {
        "n_w": np.empty(m),
        "s_w": np.empty(m),
        "support": np.empty(m, dtype=np.int64),
        "shannon": np.empty(m),
        "min_entropy": np.empty(m),
    }
    ball = np.empty(m, dtype=np.int64)
    compact = hasattr(mechanism, "compact_distribution")
    with progress(m, "exact statistics", enabled=show_progress) as advance:
        for j, w in enumerate(ids.tolist()):
            if compact:
                cd = mechanism.compact_distribution(w)  # type: ignore[attr-defined]
                out_ids, probs = np.asarray(cd.ids), np.asarray(cd.probs, dtype=np.float64)
                n_out, p_out = int(cd.n_outside), float(cd.p_outside)
            else:
                out_ids, probs = mechanism.distribution(w)
                out_ids, probs = np.asarray(out_ids), np.asarray(probs, dtype=np.float64)
                n_out, p_out = 0, 0.0
            hit = out_ids == w
            self_prob = float(probs[hit].sum()) if hit.any() else 0.0
            if not hit.any() and n_out > 0:
                self_prob = p_out
            vals = compact_statistics(probs, self_prob, n_outside=n_out, p_outside=p_out, eta=eta, samples=samples)
            for key, v in zip(("n_w", "s_w", "support", "shannon", "min_entropy"), vals, strict=True):
                cols[key][j] = v
            ball[j] = out_ids.size
            advance(1)
    if compact:
        cols["ball_size"] = ball
    return cols


# --------------------------------------------------------------------------------------
# Exact, in bulk: TEM from its formula, in BLAS blocks
# --------------------------------------------------------------------------------------

_BULK_METRICS = ("euclidean", "angular")
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

    Distances come from ``|q|^2 - 2 q.y + |y|^2`` in ``dtype``: float32 (default, fast)
    agrees with the float64 formula to about 1e-5 relative; float64 matches
    ``TruncatedExponential.compact_distribution`` to rounding. The input word's own
    distance is set to exactly 0. Memory: about 4 arrays of ``block_elements`` numbers
    per worker (a block holds ``block_elements // V`` query words); ``workers`` threads
    process blocks in parallel.
    """
    from ..metrics import check_metric

    metric = check_metric(metric)
    if metric not in _BULK_METRICS:
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
    geo = _BlockGeometry(embedding, metric, float(gamma), dt)
    # outside words (and words at exactly gamma) all get t == g_eff and weight w_g
    g_eff = geo.g_eff
    w_g = float(np.exp(dt.type(-half) * dt.type(g_eff)))
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
        out["ball_size"][sl] = geo.fill_t(q, t)
        np.multiply(t, dt.type(-half), out=w)
        np.exp(w, out=w)
        z = w.sum(axis=1, dtype=np.float64)
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


class _BlockGeometry:
    """Distances ``t = min(d, gamma)`` from a block of query words to the whole vocabulary."""

    def __init__(self, embedding: Embedding, metric: str, gamma: float, dt: np.dtype[Any]) -> None:
        x = np.asarray(embedding.vectors, dtype=dt)
        self.metric = metric
        self.dt = dt
        self.gamma = gamma
        if metric == "angular":
            norms = np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
            x = (x / np.where(norms == 0, 1.0, norms)).astype(dt)
            self.right_t = np.ascontiguousarray(x.T)
            self.g_eff = float(dt.type(gamma))
        else:
            sq = np.einsum("ij,ij->i", x, x, dtype=np.float64).astype(dt)
            right = np.empty((x.shape[0], x.shape[1] + 2), dtype=dt)
            right[:, :-2] = x
            right[:, -2] = sq
            right[:, -1] = 1.0
            self.right_t = np.ascontiguousarray(right.T)
            self.sq = sq
            self.g2 = dt.type(gamma * gamma)
            # what sqrt(clip(d2, 0, gamma^2)) gives for words beyond the ball
            self.g_eff = float(min(np.sqrt(self.g2), dt.type(gamma)))
        self.x = x

    def fill_t(self, q: np.ndarray, t: np.ndarray) -> npt.NDArray[np.int64]:
        """Fill ``t`` (b x V); return the ball sizes ``|{y : d(q_i, y) <= gamma}|``."""
        dt = self.dt
        rows = np.arange(q.size)
        if self.metric == "euclidean":
            left = np.empty((q.size, self.x.shape[1] + 2), dtype=dt)
            left[:, :-2] = self.x[q] * dt.type(-2.0)
            left[:, -2] = 1.0
            left[:, -1] = self.sq[q]
            np.matmul(left, self.right_t, out=t)
            t[rows, q] = 0.0
            ball = np.count_nonzero(t <= self.g2, axis=1)
            np.clip(t, dt.type(0.0), self.g2, out=t)
            np.sqrt(t, out=t)
        else:  # angular distance arccos(cos) / pi
            np.matmul(self.x[q], self.right_t, out=t)
            np.clip(t, dt.type(-1.0), dt.type(1.0), out=t)
            np.arccos(t, out=t)
            np.multiply(t, dt.type(1.0 / math.pi), out=t)
            t[rows, q] = 0.0
            ball = np.count_nonzero(t <= dt.type(self.gamma), axis=1)
        np.minimum(t, dt.type(self.g_eff), out=t)
        return ball.astype(np.int64)


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


# --------------------------------------------------------------------------------------
# Sampled
# --------------------------------------------------------------------------------------


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
    rng: np.random.Generator,
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


# --------------------------------------------------------------------------------------
# The public entry point
# --------------------------------------------------------------------------------------

METHODS = ("auto", "bulk", "distribution", "sample")


def _tem_params(mechanism: object) -> tuple[float, str] | None:
    """(gamma, metric) when the bulk TEM formula applies to this mechanism, else None."""
    if getattr(mechanism, "name", "") != "tem" or not hasattr(mechanism, "compact_distribution"):
        return None
    gamma = getattr(mechanism, "gamma", None)
    metric = getattr(mechanism, "metric", None)
    if not isinstance(gamma, int | float | np.floating) or metric not in _BULK_METRICS:
        return None
    if getattr(mechanism, "embedding", None) is None:
        return None
    return float(gamma), str(metric)


def plausible_deniability(
    mechanism: Mechanism,
    words: WordsArg = None,
    *,
    samples: int = 1000,
    eta: float = DEFAULT_ETA,
    confidence: float = 0.95,
    rng: np.random.Generator | None = None,
    method: str = "auto",
    chunk_tokens: int = 1 << 18,
    dtype: npt.DTypeLike = np.float32,
    workers: int = 1,
    show_progress: bool | None = None,
) -> DeniabilityStats:
    """Per-word plausible-deniability statistics of ``mechanism`` (SPEC section 5).

    Parameters
    ----------
    mechanism
        Any word mechanism. With ``compact_distribution``/``distribution`` (TEM) the
        statistics are exact; otherwise they are estimated from ``samples`` draws per word.
    words
        ``None`` for the whole vocabulary, an ``int`` n for a uniform random sample of n
        words (drawn with ``rng``), or words / word ids.
    samples
        Draws per word: the ``S_w`` of the papers is the number of distinct outputs in
        this many draws (exact expectation for exact mechanisms).
    eta
        The eta-support is the smallest set of outputs with probability >= 1 - eta.
    confidence
        Level of the intervals of sampled estimates (N_w: Clopper-Pearson; S_w: see
        :func:`distinct_count_interval`).
    rng
        Randomness for the word sample and the draws (default: the secure generator).
        Calibration releases no user data, so a seeded generator is fine here.
    method
        ``"auto"`` (exact when possible, the bulk TEM formula when it applies),
        ``"bulk"``, ``"distribution"`` (word by word from the mechanism), ``"sample"``.
    dtype
        Float type of the bulk TEM path (float32 default; float64 for agreement with
        ``compact_distribution`` to rounding).
    workers
        Threads for the bulk TEM path (blocks of words in parallel).
    """
    from .._random import check_random_state

    samples = check_int("samples", samples, minimum=1)
    eta = check_probability("eta", eta)
    confidence = check_probability("confidence", confidence)
    method = check_choice("method", method, METHODS)
    rng = check_random_state(rng)
    emb = mechanism.embedding
    ids = resolve_words(emb, words, rng)
    tem = _tem_params(mechanism)
    if method == "auto":
        method = "bulk" if tem is not None else ("distribution" if is_exact(mechanism) else "sample")
    if method == "bulk" and tem is None:
        raise InvalidParameterError(
            "method", "bulk", "a TEM mechanism with a euclidean or angular metric (use 'distribution' or 'sample')"
        )
    if method == "distribution" and not is_exact(mechanism):
        raise InvalidParameterError("method", "distribution", "a mechanism with distribution() (use 'sample')")
    t0 = time.perf_counter()
    ball: np.ndarray | None = None
    note = ""
    if method == "sample":
        cols = sampled_statistics(
            mechanism,
            ids,
            samples=samples,
            rng=rng,
            eta=eta,
            confidence=confidence,
            chunk_tokens=chunk_tokens,
            show_progress=show_progress,
        )
        exact = False
        note = (
            f"{samples} draws per word; N_w: Clopper-Pearson {confidence:.0%} interval; S_w: observed distinct "
            f"count with a {confidence:.0%} interval for its expectation (self-bounding concentration); "
            "eta-support and entropies: plug-in estimates from the draws (biased low)"
        )
    else:
        if method == "bulk":
            assert tem is not None
            cols = tem_statistics(
                emb,
                mechanism.epsilon,
                tem[0],
                ids,
                metric=tem[1],
                samples=samples,
                eta=eta,
                dtype=dtype,
                workers=workers,
                show_progress=show_progress,
            )
            note = f"exact, from the TEM formula in blocks ({np.dtype(dtype).name} distances)"
        else:
            cols = distribution_statistics(mechanism, ids, samples=samples, eta=eta, show_progress=show_progress)
            note = "exact, from the mechanism's distribution()"
        exact = True
        for key in ("n_w", "s_w"):
            cols[f"{key}_low"] = cols[key]
            cols[f"{key}_high"] = cols[key]
        note += f"; S_w is the expected number of distinct outputs in {samples} draws"
    ball = cols.get("ball_size")
    return DeniabilityStats(
        mechanism=str(getattr(mechanism, "name", type(mechanism).__name__)),
        epsilon=float(mechanism.epsilon),
        ids=ids,
        words=emb.words(ids),
        exact=exact,
        method=method,
        samples=samples,
        eta=eta,
        confidence=confidence,
        n_w=np.asarray(cols["n_w"], dtype=np.float64),
        n_w_low=np.asarray(cols["n_w_low"], dtype=np.float64),
        n_w_high=np.asarray(cols["n_w_high"], dtype=np.float64),
        s_w=np.asarray(cols["s_w"], dtype=np.float64),
        s_w_low=np.asarray(cols["s_w_low"], dtype=np.float64),
        s_w_high=np.asarray(cols["s_w_high"], dtype=np.float64),
        support=np.asarray(cols["support"], dtype=np.int64),
        shannon=np.asarray(cols["shannon"], dtype=np.float64),
        min_entropy=np.asarray(cols["min_entropy"], dtype=np.float64),
        ball_size=None if ball is None else np.asarray(ball, dtype=np.int64),
        seconds=time.perf_counter() - t0,
        vocab_size=emb.size,
        note=note,
        params=_mechanism_params(mechanism),
    )


def _mechanism_params(mechanism: object) -> dict[str, object]:
    describe = getattr(mechanism, "describe", None)
    if callable(describe):
        try:
            d = dict(describe())
        except Exception:  # a describe() that fails must not break calibration
            d = {}
        return {f"mech_{k}": v for k, v in d.items() if k not in ("mechanism", "epsilon")}
    return {}
