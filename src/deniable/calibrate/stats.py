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
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._validation import check_choice, check_int, check_probability
from ..embedding import Embedding
from ._common import DEFAULT_ETA, WordsArg, resolve_words, statistics_generator
from ._exact import (
    BULK_METRICS,
    compact_statistics,
    distribution_statistics,
    has_bulk,
    is_exact,
    tem_statistics,
)
from ._intervals import clopper_pearson, distinct_count_interval
from ._sampled import sampled_statistics, statistics_from_draws

if TYPE_CHECKING:
    from .._random import RandomState
    from ..mechanisms.base import Mechanism

__all__ = [
    "DEFAULT_ETA",
    "METHODS",
    "DeniabilityStats",
    "WordsArg",
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


METHODS = ("auto", "bulk", "distribution", "sample")


def plausible_deniability(
    mechanism: Mechanism,
    words: WordsArg = None,
    *,
    samples: int = 1000,
    eta: float = DEFAULT_ETA,
    confidence: float = 0.95,
    random_state: RandomState = None,
    method: str = "auto",
    chunk_tokens: int = 1 << 18,
    dtype: npt.DTypeLike = np.float32,
    workers: int = 1,
    show_progress: bool | None = None,
    rng: RandomState = None,
) -> DeniabilityStats:
    """Per-word plausible-deniability statistics of ``mechanism`` (SPEC section 5).

    Parameters
    ----------
    mechanism
        Any word mechanism. With ``compact_distribution``/``distribution`` (TEM) the
        statistics are exact; otherwise they are estimated from ``samples`` draws per word.
    words
        ``None`` for the whole vocabulary, an ``int`` n for a uniform random sample of n
        words (drawn with ``random_state``), or words / word ids.
    samples
        Draws per word: the ``S_w`` of the papers is the number of distinct outputs in
        this many draws (exact expectation for exact mechanisms).
    eta
        The eta-support is the smallest set of outputs with probability >= 1 - eta.
    confidence
        Level of the intervals of sampled estimates (N_w: Clopper-Pearson; S_w: see
        :func:`distinct_count_interval`).
    random_state
        Randomness for the word sample and the draws: None (default) = fresh OS
        randomness, an int = reproducible (no NotPrivateWarning: statistics are not a
        release of user text), or a Generator. ``rng`` is its old name, still accepted.
    method
        ``"auto"`` (exact when possible, the bulk TEM formula when it applies),
        ``"bulk"``, ``"distribution"`` (word by word from the mechanism), ``"sample"``.
    dtype
        Float type of the bulk TEM path (float32 default; float64 for agreement with
        ``compact_distribution`` to rounding).
    workers
        Threads for the bulk TEM path (blocks of words in parallel).
    """
    samples = check_int("samples", samples, minimum=1)
    eta = check_probability("eta", eta)
    confidence = check_probability("confidence", confidence)
    method = check_choice("method", method, METHODS)
    gen = statistics_generator(random_state, rng)
    emb = mechanism.embedding
    ids = resolve_words(emb, words, gen)
    bulk = has_bulk(mechanism)
    if method == "auto":
        method = "bulk" if bulk else ("distribution" if is_exact(mechanism) else "sample")
    if method == "bulk" and not bulk:
        raise InvalidParameterError(
            "method",
            "bulk",
            f"a TEM mechanism with a {' or '.join(BULK_METRICS)} metric (use 'distribution' or 'sample')",
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
            random_state=gen,
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
            emb = Embedding.check(emb)  # has_bulk: a TEM, whose vocabulary has float vectors
            cols = tem_statistics(
                emb,
                mechanism.epsilon,
                float(mechanism.gamma),  # type: ignore[attr-defined]
                ids,
                metric=str(mechanism.metric),
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
