"""The Truncated Exponential Mechanism (TEM, SPEC section 3; seed 004), exact and fast.

For an input word ``w`` with ``a = epsilon / 2``::

    Pr[M(w) = y]  ∝  exp(-a * min(d(w, y), gamma))

i.e. ``exp(-a d)`` inside the ball ``L_w = {y : d(w, y) <= gamma}`` and the constant
``exp(-a gamma)`` outside it (the bottom element of the paper, whose probability is
shared uniformly by the words outside). This is ``epsilon * d``-private for any metric
``d`` and any ``gamma``.

Sampling is exact in every regime (see docs/tem.md for the proofs); for each distinct
word of a batch one of three exact samplers is used:

1. **table** (Appendix B): ``L_w`` with exact distances is kept (in-memory LRU of this
   process only: nothing derived from the input is written to disk); a token costs one
   inverse-CDF lookup (``searchsorted`` on the cumulative weights) and, for the bottom
   element, a uniform word outside ``L_w`` drawn by rejection from the vocabulary.
2. **uniform rejection**: propose ``y`` uniformly from the vocabulary, accept with
   probability ``exp(-a min(d, gamma))`` (the envelope is the maximum weight 1). Used
   when the acceptance rate measured on the batch is high (small epsilon), it needs no
   pre-computation at all; tokens not accepted within a bounded number of rounds fall
   through to 3 or 1.
3. **shells**: one float32 pass over the vocabulary gives proven lower bounds
   ``lb(y) <= d(w, y)``; words are grouped into shells ``k = floor(a min(lb, gamma) / h)``
   with envelope weight ``exp(-h k) >= exp(-a min(d, gamma))``; a token picks a shell by
   its envelope mass, a uniform member, and is accepted with probability
   ``exp(-a min(d, gamma) + h k) >= exp(-h - slack)``. Used when ``L_w`` is too large
   to store (small epsilon or large gamma): no exponential over the whole vocabulary.

The k-NN envelope tables of the whole vocabulary can be prepared once
(:func:`deniable.prepare`, ``deniable prepare --mechanism tem``): they depend on
the embedding and the metric only, are memory-mapped, and are used automatically
(the k-NN envelope sampler). With them, every token first tries "self first": its word's
weight in the envelope is exactly 1, so ``u ~ U[0, total)`` below 1 returns the word from
the envelope total alone (prepared per epsilon with ``deniable prepare -m tem -e EPS``,
else memoized per process); the other tokens continue that same attempt.
``history_free=True`` (for long-lived services) keeps no per-word state between calls
and samples data-obliviously (:mod:`._tem_oblivious`: the same work for every token, so
the time of a call depends on its token count and the configuration only).

Every probability is computed from :meth:`Geometry.exact` (float64 distances by
differences), the same function :meth:`TruncatedExponential.compact_distribution`
uses, so the sampled distribution is the stated one (up to float64 rounding).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError, ResourceLimitError
from .._progress import progress
from .._validation import check_epsilon, check_int, check_positive, check_probability
from ..artefacts import register_kind
from ..embedding import Embedding, Vocabulary
from ..metrics import check_metric
from ._tem_far import FAR_KIND, FAR_METRICS, PreparedFar, far_artefact_params
from ._tem_geometry import TEM_METRICS, Geometry, TemDistributions, tem_distributions
from ._tem_oblivious import oblivious_rounds, privatize_oblivious
from ._tem_store import KNN_KIND, PreparedKnn, Table, TableStore, _touch_pages, knn_entry
from .base import Mechanism
from .registry import Option

__all__ = ["CompactDistribution", "TruncatedExponential", "theorem3_gamma"]

#: The most shells of the shell sampler (bounds its per-word bookkeeping).
_MAX_SHELLS = 2048
#: Shell width in log-weight: acceptance >= exp(-_SHELL_H) (before the screening slack).
_SHELL_H = 0.05
#: exp(-x) is 0.0 in float64 beyond this; weights beyond it are exactly zero everywhere.
_LOG_UNDERFLOW = 800.0
#: Largest gamma (a larger one changes nothing: every distance is below it).
_GAMMA_MAX = 1e300
#: Tokens processed at once by the uniform-rejection stage (bounds memory).
_CHUNK = 1 << 16
#: The uniform-rejection stage runs only when its pilot acceptance rate is at least this.
_UNIFORM_MIN_RATE = 1.0 / 64
#: Neighbours kept per word by the k-NN envelope sampler (its tables do not depend on
#: epsilon or gamma, only on the embedding and the metric).
_KNN_K = 256
#: The k-NN envelope sampler is used for a word only when its envelope mass is at most
#: this many times the explicit mass (a bound on the expected proposals per token).
_KNN_MAX_RATIO = 1024.0
#: A newly scanned word whose k-NN envelope costs at most this many proposals per token
#: is sampled from its k-NN table alone (no ball table is built: that saves a pass over
#: the vocabulary and the disk space of a large ball).
_KNN_PREFER_RATIO = 2.0
#: ... or when the estimated expected proposals per token (envelope mass over an estimate
#: of the true mass, from the sketch below) are at most this. Only the choice of sampler
#: depends on the estimate; the draws are exact either way.
_KNN_MAX_EST = 256.0
#: A k-NN table also keeps this many quantiles of the distances to the words outside E
#: (lower bounds, from a strided sample of the scan): a sketch of the far mass, for the
#: estimate above. Without it, the bound (envelope mass / E mass) is far too pessimistic at
#: small eps (median 960 against 8 proposals really needed at eps = 2 on GloVe).
_KNN_SKETCH = 32
#: A newly scanned word gets a ball table when its ball has at most this many words, or
#: at most _TABLE_AMORTISE x (its tokens in the batch) x (estimated k-NN proposals per
#: token) (and at most table_max); otherwise the k-NN envelope samples it.
_TABLE_MIN = 1024
_TABLE_AMORTISE = 4.0
#: Proposals per pass of the k-NN envelope sampler once few tokens are pending (below it,
#: several attempts per token; above it, one: 64k instead of 78k proposals and fewer
#: passes per 10k IMDb tokens at eps 3).
_KNN_ATTEMPTS = 1 << 12
#: Tokens the k-NN envelope sampler draws at a time (independent draws; bounds its buffers).
_KNN_TOKENS = 1 << 15
#: A word's moved tokens times its estimated proposals per token beyond which its exact
#: ball table is built (one pass over the vocabulary, ~20 ms at V = 336k, costs about as
#: much as this many proposals) instead of sampling it under its k-NN envelope.
_HEAVY_PROPOSALS = 1 << 16
#: Words whose envelope totals are computed at once (bounds scratch memory: ~2 KB a word).
_TOTALS_BLOCK = 1 << 14
#: Words the k-NN envelope sampler prepares at once (their tables, weights and far-bound
#: layouts, :meth:`TruncatedExponential._far_layout`: 9 bytes x 1,024 clusters a word): a
#: block's arrays stay in cache, where all of a large batch's words at once did not.
_KNN_WORDS = 1 << 10
#: rows of far layouts computed together (64 x 1,024 clusters x 8 bytes: in L2 cache)
_LAYOUT_ROWS = 64
#: A word's envelope uses the far bounds when its k-NN envelope puts at least this share
#: of its mass outside E (at eps >= 10 most words put far less: the bounds would change
#: their totals little and cost a 1,024-cluster layout each).
_FAR_MIN_SHARE = 1.0 / 64
#: The prepared totals at an epsilon also hold the far layouts of the words with ids below
#: this (the most frequent ones in a frequency-ordered vocabulary such as GloVe's; 80% of
#: the distinct words of a 10,000-token IMDb batch) that use the far bounds: 8 KB a word,
#: at most 128 MB, which the sampler reads instead of computing (~6 us a word).
_LAYOUT_WORDS = 1 << 14


def knn_artefact_params(embedding: Embedding, metric: str) -> dict[str, object]:
    """Parameters of the prepared k-NN artefact TEM reads for ``embedding`` and ``metric``."""
    return {"metric": metric, "k": min(_KNN_K, embedding.size), "sketch": _KNN_SKETCH, "format": 1}


#: The artefact kind of the envelope totals at one epsilon (deniable.artefacts).
TOTALS_KIND = "tem-totals"


def totals_artefact_params(
    embedding: Embedding, metric: str, epsilon: float, gamma: float, far: bool = False
) -> dict[str, object]:
    """Parameters of the prepared envelope totals of every word at ``epsilon`` and ``gamma``.

    ``far``: the envelope uses the prepared far bounds (:mod:`._tem_far`), which change
    the totals; they are then part of the key.
    """
    out: dict[str, object] = {
        "knn": knn_artefact_params(embedding, metric),
        "epsilon": float(epsilon),
        "gamma": float(gamma),
        "usable": [_KNN_MAX_RATIO, _KNN_MAX_EST],
        "format": 1,
    }
    if far:  # the far artefact's own key, which words use it, and which layouts are stored
        out["far"] = far_artefact_params(embedding, metric)
        out["far_min_share"] = _FAR_MIN_SHARE
        out["layouts"] = min(_LAYOUT_WORDS, embedding.size)
    return out


def _totals_sources(embedding: Vocabulary, params: dict[str, Any]) -> list[str]:
    """The content ids of the k-NN tables (and far bounds) the totals of ``params`` are computed from."""
    from ..artefacts import content_id

    ids = [content_id(embedding, KNN_KIND, dict(params["knn"])) or ""]
    if "far" in params:
        ids.append(content_id(embedding, FAR_KIND, dict(params["far"])) or "")
    return ids


def totals_stale(embedding: Vocabulary, params: dict[str, Any], path: Path) -> bool:
    """Whether prepared totals at ``path`` were computed from other k-NN tables or far bounds than the prepared ones.

    A total is the mass the sampler draws ``u`` against: from other tables (rebuilt after
    damage, or by another build whose ties broke otherwise) it would not be the envelope's
    mass, and the draws would not be exact. Stale totals are rebuilt by ``prepare`` and
    not used meanwhile (the sampler then computes the totals it needs).
    """
    try:
        recorded = np.load(path / "sources.npy", allow_pickle=False).tolist()
    except (OSError, ValueError):
        return True
    current = _totals_sources(embedding, params)
    return bool(recorded != current or "" in current)


def build_totals_artefact(
    embedding: Vocabulary, params: dict[str, Any], folder: Path, show_progress: bool | None
) -> None:
    """Write ``totals.npy``: every word's k-NN envelope total at one epsilon and gamma.

    ``totals[w]`` is the mass ``E's weights + V * envelope`` that the k-NN envelope sampler
    draws ``u`` against, or 0.0 where that sampler is not used for ``w`` (an expensive
    envelope). It is computed by the same code as the sampler's own arrays, from the
    prepared k-NN tables (built first if missing): a function of the embedding, the metric,
    epsilon and gamma only. With the far bounds, also the far layouts of the words below
    ``params["layouts"]`` that use them (:func:`_write_layouts`).
    """
    from ..artefacts import build_artefact

    if not isinstance(embedding, Embedding):
        raise Embedding.type_error(embedding)
    knn_params = dict(params["knn"])
    metric = str(knn_params["metric"])
    mech = TruncatedExponential(embedding, float(params["epsilon"]), metric=metric, gamma=float(params["gamma"]))
    info = build_artefact(embedding, KNN_KIND, knn_params, show_progress=show_progress)
    knn = PreparedKnn(info.path, int(knn_params["k"]))
    if "far" in params:  # the envelope the sampler will use: with the far bounds
        far_info = build_artefact(embedding, FAR_KIND, dict(params["far"]), show_progress=show_progress)
        mech._prepared.far = PreparedFar(far_info.path)
    # the totals fit these tables and bounds only: their content ids go with them (see totals_stale)
    np.save(folder / "sources.npy", np.array(_totals_sources(embedding, params)), allow_pickle=False)
    v = embedding.size
    totals = np.empty(v, dtype=np.float64)
    what = f"TEM: envelope totals of {v:,} words (eps {mech.epsilon:g})"
    with progress(v, what, enabled=show_progress) as advance:
        for s in range(0, v, _TOTALS_BLOCK):
            words = np.arange(s, min(v, s + _TOTALS_BLOCK), dtype=np.int64)
            totals[words] = mech._envelope_totals(words, knn.rows(words))
            advance(words.size)
    np.save(folder / "totals.npy", totals, allow_pickle=False)
    if "far" in params:
        _write_layouts(mech, knn, totals[: int(params["layouts"])], folder)


def _write_layouts(mech: TruncatedExponential, knn: PreparedKnn, totals: npt.NDArray[np.float64], folder: Path) -> None:
    """Write the far layouts of the words ``0 .. n-1`` that use the far bounds (``totals``: theirs).

    ``layouts.npy`` (float64, one row a word: :meth:`TruncatedExponential._far_layout`'s
    cumulative cluster masses, the same bits) and ``layout_rows.npy`` (int32, ``n``: a
    word's row there, -1 for a word whose envelope does not use the far bounds).
    """
    n = totals.size
    rows = np.full(n, -1, dtype=np.int32)
    parts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = []
    for s in range(0, n, _KNN_WORDS):
        words = np.arange(s, min(n, s + _KNN_WORDS), dtype=np.int64)
        _, _, m_e, _, log_env, _, _ = mech._knn_arrays(knn.rows(words), words, totals[words])
        sel = np.flatnonzero(mech._far_words(m_e, log_env))
        parts.append((words[sel], log_env[sel]))
    count = sum(p[0].size for p in parts)
    far = mech._prepared.far
    assert far is not None
    out = np.lib.format.open_memmap(folder / "layouts.npy", mode="w+", dtype=np.float64, shape=(count, far.clusters))
    at = 0
    for words, log_env in parts:
        rows[words] = np.arange(at, at + words.size, dtype=np.int32)
        out[at : at + words.size] = mech._far_layout(words, log_env)[0]
        at += words.size
    out.flush()
    del out
    np.save(folder / "layout_rows.npy", rows, allow_pickle=False)


class _Prepared:
    """The prepared k-NN tables (and envelope totals), looked up once per mechanism (thread-safe).

    ``memo``: envelope totals of the words met so far in this process, when no totals are
    prepared (not history-free: it is per-word state); NaN where not computed yet.
    ``far``: the prepared far bounds, when there are (they tighten the envelope of far words).
    ``layout_rows`` / ``layouts``: the far layouts prepared with the totals (:func:`_write_layouts`).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loaded = False
        self.knn: PreparedKnn | None = None
        self.totals: npt.NDArray[np.float64] | None = None
        self.memo: npt.NDArray[np.float64] | None = None
        self.far: PreparedFar | None = None
        self.layout_rows: npt.NDArray[np.int32] | None = None
        self.layouts: npt.NDArray[np.float64] | None = None
        #: the history-free (data-oblivious) sampler's plan: (proposals per token, far bounds used)
        self.rounds: tuple[int, bool] | None = None


def theorem3_gamma(epsilon: float, beta: float, vocab_size: int) -> float:
    """``gamma = (2 / epsilon) ln((1 - beta)(V - 1) / beta)`` (seed 004, Theorem 3), at least 0.

    With this gamma the output lies within distance gamma of the input with probability
    at least ``1 - beta``.
    """
    arg = (1.0 - beta) * (vocab_size - 1) / beta
    if arg <= 1.0:
        return 0.0
    return min(2.0 / epsilon * math.log(arg), _GAMMA_MAX)  # tiny epsilon: no truncation at all


@dataclass(frozen=True)
class CompactDistribution:
    """TEM's output distribution for one input word, without listing the outside words.

    ``ids`` are the words of ``L_w`` (sorted), ``probs`` their probabilities; each of the
    ``n_outside`` other words has probability ``p_outside``.
    """

    ids: npt.NDArray[np.int64]
    probs: npt.NDArray[np.float64]
    n_outside: int
    p_outside: float

    @property
    def total(self) -> float:
        """Sum of all probabilities (1 up to rounding)."""
        return float(self.probs.sum() + self.n_outside * self.p_outside)

    @classmethod
    def from_block(cls, dist: TemDistributions, row: int = 0) -> CompactDistribution:
        """Row ``row`` of a block of TEM distributions."""
        ids = np.flatnonzero(dist.inside[row]).astype(np.int64)
        z = float(dist.z[row])
        probs = np.asarray(dist.weights[row, ids], dtype=np.float64) / z
        n_out = dist.inside.shape[1] - ids.size
        return cls(ids, probs, int(n_out), dist.w_gamma / z if n_out else 0.0)


def _search(cum: np.ndarray, rows: npt.NDArray[np.int64], u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(idx, base)`` of a vectorized binary search of ``u[i]`` in the row ``cum[rows[i]]``.

    ``cum``'s rows are non-decreasing (cumulative weights). With ``base`` the flat index
    of each row's first entry, ``c = idx - base + 1`` is ``min(count_nonzero(cum[row] <=
    u), width - 1)``: the largest ``c <= width - 1`` with ``cum[row, c - 1] <= u`` (0 if
    none), so ``idx`` is the flat index of ``cum[row, c - 1]`` (``base - 1`` for 0) and
    ``idx + 1`` that of ``cum[row, c]``. ``log2(width)`` gathers per value, each step four
    numpy passes over preallocated buffers.
    """
    width = cum.shape[1]
    flat = cum.reshape(-1)
    base = rows.astype(np.int64) * width
    idx = base - 1
    tmp = np.empty(rows.size, dtype=np.int64)
    vals = np.empty(rows.size, dtype=flat.dtype)
    le = np.empty(rows.size, dtype=bool)
    # a candidate past the row's second-to-last entry is clamped to it (only for widths
    # that are not powers of two: otherwise the steps never pass it)
    last = base + (width - 2) if width & (width - 1) else None
    step = 1 << ((width - 1).bit_length() - 1) if width > 1 else 0
    while step:
        np.add(idx, step, out=tmp)
        if last is not None:
            np.minimum(tmp, last, out=tmp)
        np.take(flat, tmp, out=vals, mode="clip")  # valid indices: "clip" is not buffered
        np.less_equal(vals, u, out=le)
        np.copyto(idx, tmp, where=le)
        step >>= 1
    return idx, base


def _count_at_most(cum: np.ndarray, rows: np.ndarray, u: np.ndarray) -> npt.NDArray[np.int64]:
    """``count_nonzero(cum[rows[i]] <= u[i])`` for each i, by a vectorized binary search (:func:`_search`).

    The same integers as the linear count, found with ``log2(width)`` gathers per value
    instead of ``width`` comparisons: the search's ``c``, plus one where the whole row is
    ``<= u`` (its last entry, ``cum[row, c]`` for ``c = width - 1``).
    """
    if not cum.shape[1]:
        return np.zeros(rows.size, dtype=np.int64)
    idx, base = _search(cum, rows, u)
    return idx - base + 1 + (np.take(cum.reshape(-1), idx + 1, mode="clip") <= u)


def _segments(
    cum: np.ndarray, rows: npt.NDArray[np.int64], u: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """``(c, lo, hi)``: the segment ``[lo, hi)`` of the cumulative row ``cum[rows[i]]`` that ``u[i]`` falls in.

    ``c`` the segment's index (the last one for ``u`` at or past the row's end), ``lo``
    the row's value before it (0.0 for the first), ``hi`` its own.
    """
    idx, base = _search(cum, rows, u)
    flat = cum.reshape(-1)
    c = idx - base + 1
    hi = np.take(flat, idx + 1, mode="clip")
    lo = np.where(c > 0, np.take(flat, idx, mode="clip"), 0.0)  # idx = base - 1 for c = 0: not read
    return c, lo, hi


@dataclass(frozen=True, eq=False)
class TruncatedExponential(Mechanism):
    """The truncated exponential mechanism: ``Pr[M(w)=y] ∝ exp(-eps min(d(w,y), gamma) / 2)``.

    ``Pr[M(w)=y] <= exp(epsilon * d(w, w')) Pr[M(w')=y]`` for all w, w', y, for the chosen
    metric and any gamma.

    Parameters
    ----------
    embedding
        The vocabulary and vectors (restrict it with ``Embedding.subset`` / ``--vocab-size``).
    epsilon
        Privacy parameter (> 0).
    metric
        ``"euclidean"``, ``"manhattan"``, ``"chebyshev"`` or ``"angular"``
        (``arccos(cos) / pi``). Non-metrics such as cosine distance are rejected.
    gamma
        Truncation threshold (>= 0). ``None``: from ``beta`` by Theorem 3; the value used
        is :attr:`gamma` after construction.
    beta
        Probability of leaving the gamma-ball, in (0, 1), used when ``gamma`` is None.
    cache
        Use the prepared k-NN tables (read-only, memory-mapped) when they exist
        (``deniable prepare``). Nothing is ever written to disk while privatizing:
        tables built for the words of a run stay in this process's memory (LRU).
    table_max
        Largest candidate set kept as an explicit table; larger balls are sampled with
        the shell sampler (no table).
    memory_bytes
        Budget of the in-memory table cache (LRU).
    disk_bytes
        Largest prepared k-NN artefact :meth:`precompute` will build.
    block_bytes
        Scratch memory for a block of float32 distance rows.
    show_progress
        Progress bar while scanning the vocabulary (default: when stderr is a terminal).
    history_free
        The service's mode (``deniable serve`` sets it): keep no per-word state between
        calls, and sample **data-obliviously** (:mod:`._tem_oblivious`): every token makes
        the same number of proposals through every branch, with no early exit for a kept
        word and no dedup by distinct word, so the time of a call is a function of the
        token count and the configuration, not of which words, whether they were kept or
        how many were distinct (docs/threat-model.md, "Timing": the residue is CPU-cache
        effects). Exact law, at a cost: 25-80k tokens/s on GloVe instead of 60k-4M.
        Prepare the tables first (``deniable prepare -m tem -e EPS``), or every call scans
        the vocabulary once per token; their memory map (shared by every process) is then
        faulted in whole when opened, so no later page fault times which rows were read
        before. The default (False) is the fastest path, whose time depends on the input:
        for batch jobs where nobody times the calls.
    """

    name: ClassVar[str] = "tem"

    has_distribution: ClassVar[bool] = True
    #: capabilities read by calibration: ``compact_distribution(w)``, and a distribution
    #: ``∝ exp(-epsilon min(d, gamma) / 2)`` over ``embedding`` in ``metric`` (bulk statistics)
    has_compact_distribution: ClassVar[bool] = True
    truncated_exponential: ClassVar[bool] = True

    embedding: Embedding
    epsilon: float
    metric: str = "euclidean"
    gamma: float | None = None
    beta: float = 1e-3
    cache: bool = True
    table_max: int = 1 << 15
    memory_bytes: int = 256 << 20
    disk_bytes: int = 4 << 30
    block_bytes: int = 128 << 20
    show_progress: bool | None = None
    history_free: bool = False
    # derived state, set in __post_init__
    _a: float = field(init=False, repr=False)
    _gamma_from: str = field(init=False, repr=False)
    _geo: Geometry = field(init=False, repr=False)
    _store: TableStore = field(init=False, repr=False)
    _totals: dict[int, float] = field(init=False, repr=False)
    _knn: TableStore = field(init=False, repr=False)
    _k: int = field(init=False, repr=False)
    _prepared: _Prepared = field(init=False, repr=False)
    _far_lut: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]] | None = field(init=False, repr=False)

    options: ClassVar[tuple[Option, ...]] = (
        Option(
            "metric",
            str,
            "euclidean",
            choices=TEM_METRICS,
            client=True,
            help="the distance the guarantee is stated in",
            note="cosine distance breaks the triangle inequality the proof needs (use angular); "
            "hamming applies to binary codes: use brr",
        ),
        Option(
            "gamma",
            float,
            None,
            low=0.0,
            high=_GAMMA_MAX,
            client=True,
            help="truncation threshold (default: from beta)",
        ),
        Option(
            "beta",
            float,
            1e-3,
            low=0.0,
            high=1.0,
            low_open=True,
            high_open=True,
            client=True,
            help="probability of leaving the gamma-ball; sets gamma (Theorem 3)",
        ),
        Option("cache", bool, True, cli=False, help="use prepared whole-vocabulary tables when present"),
        Option("table_max", int, 1 << 15, low=1, help="largest ball kept as an explicit table"),
        Option("memory_bytes", int, 256 << 20, low=1, help="budget of the in-memory table cache"),
        Option("disk_bytes", int, 4 << 30, low=1, help="size limit of the prepared tables built by precompute()"),
        Option("block_bytes", int, 128 << 20, low=1, help="scratch memory for a block of distance rows"),
        Option("show_progress", bool, None, cli=False, help="progress bar while scanning the vocabulary"),
        Option(
            "history_free",
            bool,
            False,
            cli=False,
            help="keep no per-word state between calls (long-lived services: timing independent of history)",
        ),
    )

    @classmethod
    def prepared_artefacts(cls, embedding: Vocabulary, options: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """``(kind, params)`` of the input-independent artefacts TEM reads (for :mod:`deniable.artefacts`)."""
        if not isinstance(embedding, Embedding):
            raise Embedding.type_error(embedding)
        metric = options.get("metric") or "euclidean"
        out: list[tuple[str, dict[str, Any]]] = [(KNN_KIND, knn_artefact_params(embedding, metric))]
        epsilons = options.get("epsilon")
        if epsilons is not None:
            given = {name: options[name] for name in ("gamma", "beta") if options.get(name) is not None}
            eps_list = [epsilons] if isinstance(epsilons, int | float) else list(epsilons)
            far = metric in FAR_METRICS and bool(eps_list)
            if far:  # an epsilon is named: the far bounds too (they pay off below eps ~ 10)
                out.append((FAR_KIND, far_artefact_params(embedding, metric)))
            for eps in eps_list:
                mech = cls(embedding, eps, metric=metric, cache=False, **given)
                out.append((TOTALS_KIND, mech._totals_params(far)))
        return out

    def __post_init__(self) -> None:
        if not isinstance(self.embedding, Embedding):
            raise Embedding.type_error(self.embedding)
        eps = check_epsilon(self.epsilon)
        object.__setattr__(self, "epsilon", eps)
        metric = check_metric(self.metric)
        if metric not in TEM_METRICS:
            raise InvalidParameterError(
                "metric", metric, "one of " + ", ".join(TEM_METRICS) + " (hamming applies to binary codes: use brr)"
            )
        object.__setattr__(self, "metric", metric)
        beta = check_probability("beta", self.beta)
        object.__setattr__(self, "beta", beta)
        if self.gamma is None:
            gamma = theorem3_gamma(eps, beta, self.embedding.size)
            object.__setattr__(self, "_gamma_from", "beta")
        else:
            gamma = min(check_positive("gamma", self.gamma, allow_zero=True), _GAMMA_MAX)
            object.__setattr__(self, "_gamma_from", "given")
        object.__setattr__(self, "gamma", float(gamma))
        for flag in ("cache", "history_free"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidParameterError(flag, getattr(self, flag), "True or False")
        for name in ("table_max", "memory_bytes", "disk_bytes", "block_bytes"):
            object.__setattr__(self, name, check_int(name, getattr(self, name), minimum=1))
        v = self.embedding.size
        if 16 * v > self.block_bytes:
            raise ResourceLimitError(
                f"TEM needs about {16 * v / 2**20:.0f} MiB of scratch per distance row for a vocabulary "
                f"of {v:,} words, more than block_bytes={self.block_bytes:,}: restrict the vocabulary "
                "(--vocab-size) or raise block_bytes"
            )
        object.__setattr__(self, "_a", eps / 2.0)
        object.__setattr__(self, "_geo", Geometry(self.embedding, metric))
        # tables built for the words of a run: this process's memory only (never disk)
        object.__setattr__(self, "_store", TableStore(memory_bytes=self.memory_bytes))
        object.__setattr__(self, "_totals", {})  # word -> total table mass (for this epsilon)
        object.__setattr__(self, "_knn", TableStore(memory_bytes=self.memory_bytes))
        object.__setattr__(self, "_k", min(_KNN_K, v))
        object.__setattr__(self, "_prepared", _Prepared())
        object.__setattr__(self, "_far_lut", None)  # _far_tables, built on first use

    # -- public API ----------------------------------------------------------------------
    def distance(self, w: int, w2: int) -> float:
        return float(self._geo.exact(int(w), np.array([int(w2)], dtype=np.int64))[0])

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d["gamma"] = float(self.gamma)  # type: ignore[arg-type]
        d["gamma_from"] = self._gamma_from
        d["beta"] = float(self.beta)
        return d

    def compact_distribution(self, w: int | str) -> CompactDistribution:
        """The exact output distribution for input ``w`` (float64 distances from :meth:`Geometry.exact`).

        The arithmetic is :func:`~deniable.mechanisms._tem_geometry.tem_distributions` on a
        block of one row, the same that calibration's bulk statistics run on many rows.
        """
        wid = self._id(w)
        v = self.embedding.size
        q = np.array([wid], dtype=np.int64)
        dist = tem_distributions(self._geo.exact(wid, np.arange(v, dtype=np.int64))[None, :], q, self._a, self._gamma)
        return CompactDistribution.from_block(dist)

    def distribution(self, w: int | str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """``(ids, probs)`` over the whole vocabulary (from :meth:`compact_distribution`)."""
        cd = self.compact_distribution(w)
        probs = np.full(self.embedding.size, cd.p_outside, dtype=np.float64)
        probs[cd.ids] = cd.probs
        return np.arange(self.embedding.size, dtype=np.int64), probs

    def flush_cache(self) -> None:
        """Kept for compatibility: nothing built while privatizing is written to disk."""

    def cache_info(self) -> dict[str, int]:
        """Bytes of tables built in this process (memory) and of the prepared k-NN tables (disk)."""
        prepared = self._prepared_knn()
        return {
            "memory_bytes": self._store.memory_used + self._knn.memory_used,
            "disk_bytes": prepared.disk_bytes if prepared is not None else 0,
        }

    def _prepared_knn(self) -> PreparedKnn | None:
        """The prepared k-NN tables (verified and memory-mapped on first use), or None."""
        holder = self._prepared
        if holder.loaded or not self.cache:
            return holder.knn
        with holder.lock:
            if not holder.loaded:
                from ..artefacts import open_artefact

                info = open_artefact(self.embedding, KNN_KIND, knn_artefact_params(self.embedding, self.metric))
                if info is not None:
                    holder.knn = PreparedKnn(info.path, self._k, prefault=self.history_free)
                    if self.metric in FAR_METRICS:
                        far = open_artefact(self.embedding, FAR_KIND, far_artefact_params(self.embedding, self.metric))
                        if far is not None:
                            holder.far = PreparedFar(far.path, prefault=self.history_free)
                    totals = open_artefact(self.embedding, TOTALS_KIND, self._totals_params())
                    if totals is not None:
                        holder.totals = np.asarray(np.load(totals.file("totals.npy"), mmap_mode="r"))
                        if self.history_free:
                            _touch_pages(holder.totals)
                        if holder.far is not None and "layouts.npy" in totals.files:
                            holder.layout_rows = np.load(totals.file("layout_rows.npy"), allow_pickle=False)
                            layouts = np.load(totals.file("layouts.npy"), mmap_mode="r", allow_pickle=False)
                            holder.layouts = np.asarray(layouts)
                            if self.history_free:  # read now: which rows a batch reads is then not timed
                                _touch_pages(holder.layouts)
                holder.loaded = True
        if self.history_free:  # the oblivious sampler's proposals per token (public; once, at open)
            oblivious_rounds(self)
        return holder.knn

    def _totals_params(self, far: bool | None = None) -> dict[str, object]:
        """The totals' key; ``far`` (default: whether this mechanism uses prepared far bounds)."""
        if far is None:
            far = self._prepared.far is not None
        return totals_artefact_params(self.embedding, self.metric, self.epsilon, self._gamma, far)

    def _envelope_totals(self, words: npt.NDArray[np.int64], entries: Table) -> npt.NDArray[np.float64]:
        """The k-NN envelope's total mass of each word, 0.0 where the self-first sampler does not apply.

        It applies when the word's envelope is usable (the same test as :meth:`_sample_knn`)
        and the word is in its own E (weight exactly 1: ``d(w, w) = 0``).
        """
        ids, _, _, total, _, bound, est = self._knn_arrays(entries, words)
        usable = (bound <= _KNN_MAX_RATIO) | (est <= _KNN_MAX_EST)
        usable &= (ids == words[:, None]).any(axis=1)
        return np.where(usable, total, 0.0)

    def _token_totals(self, flat: npt.NDArray[np.int64]) -> npt.NDArray[np.float64] | None:
        """Each token's envelope total (0.0: not for the self-first sampler), or None without prepared tables.

        From the prepared totals at this epsilon when they exist; else, unless
        history-free, from a per-process memo filled for the words met so far.
        """
        prepared = self._prepared_knn()
        if prepared is None:
            return None
        holder = self._prepared
        if holder.totals is not None:
            return np.asarray(holder.totals[flat], dtype=np.float64)
        if self.history_free:
            return None
        memo = holder.memo
        if memo is None:
            with holder.lock:
                if holder.memo is None:
                    holder.memo = np.full(self.embedding.size, np.nan)
                memo = holder.memo
        t = memo[flat]
        unknown = np.isnan(t)
        if unknown.any():
            words = np.unique(flat[unknown])
            for s in range(0, words.size, _TOTALS_BLOCK):
                part = words[s : s + _TOTALS_BLOCK]
                memo[part] = self._envelope_totals(part, prepared.rows(part))
            t = memo[flat]
        return t

    def _knn_lookup(self, words: npt.NDArray[np.int64]) -> list[Table | None]:
        """k-NN tables: prepared ones, else (not history-free) those built earlier in this process."""
        prepared = self._prepared_knn()
        if prepared is not None:
            return prepared.get_many(words)
        if self.history_free:
            return [None] * words.size
        return self._knn.get_many(words)

    def precompute(self, words: npt.ArrayLike | None = None) -> dict[str, float]:
        """Prepare tables ahead of sampling.

        ``words=None`` (the whole vocabulary): builds the prepared k-NN tables on disk
        (:func:`deniable.prepare`; input-independent, shared by every process and
        every epsilon), refusing with :class:`ResourceLimitError` when they would exceed
        ``disk_bytes``. Given ``words``: builds their ball and k-NN tables in this
        process's memory only (nothing is written: those words may be private). Returns
        counts and sizes.
        """
        v = self.embedding.size
        if words is None:
            from ..artefacts import build_artefact

            width = self._k + 1 + _KNN_SKETCH
            size = v * width * 12
            if size > self.disk_bytes:
                raise ResourceLimitError(
                    f"the prepared TEM k-NN tables for {v:,} words would take {size / 2**30:.2f} GiB, more than "
                    f"disk_bytes={self.disk_bytes / 2**30:.2f} GiB: restrict the vocabulary (--vocab-size) "
                    "or raise disk_bytes"
                )
            info = build_artefact(
                self.embedding,
                KNN_KIND,
                knn_artefact_params(self.embedding, self.metric),
                show_progress=self.show_progress,
            )
            with self._prepared.lock:
                self._prepared.loaded = False  # pick the new tables up
                self._prepared.rounds = None
            return {"words": float(v), "built": float(v), "disk_bytes": float(info.disk_bytes)}
        if self.history_free:
            raise InvalidParameterError(
                "words", "(given)", "None: a history-free mechanism keeps no per-word tables (prepare instead)"
            )
        ids = np.unique(self.embedding.check_ids(words).ravel())
        est = self.estimate(ids)
        built = 0
        sizes = 0
        for w, row in self._rows(ids):
            self._build_knn(w, row)
            cand = self._geo.candidates(w, row, self._gamma, limit=self.table_max)
            if cand is not None:
                t = self._build_table(w, cand)
                built += 1
                sizes += t[0].size
        return {"words": float(ids.size), "built": float(built), "mean_ball": sizes / max(built, 1), **est}

    def estimate(self, words: npt.ArrayLike | None = None, sample: int = 32) -> dict[str, float]:
        """Estimated table size and scan time for ``words``, from ``sample`` random words (a dry run)."""
        import time

        v = self.embedding.size
        ids = np.arange(v, dtype=np.int64) if words is None else np.unique(self.embedding.check_ids(words).ravel())
        pick = np.random.default_rng(0).choice(ids, size=min(sample, ids.size), replace=False)
        t0 = time.perf_counter()
        balls = []
        for w, row in self._rows(np.sort(pick), show=False):
            cand = self._geo.candidates(w, row, self._gamma, limit=self.table_max)
            balls.append(self.table_max + 1 if cand is None else cand.size)
        per_word = (time.perf_counter() - t0) / max(len(pick), 1)
        tabled = [b for b in balls if b <= self.table_max]
        mean_ball = float(np.mean(tabled)) if tabled else 0.0
        share = len(tabled) / max(len(balls), 1)
        return {
            "mean_ball": mean_ball,
            "table_share": share,
            "table_bytes": ids.size * share * mean_ball * 12.0,
            "scan_seconds": ids.size * per_word,
        }

    # -- sampling ------------------------------------------------------------------------
    def _privatize(self, flat: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        if self.history_free:  # time a function of the token count and the configuration only
            return privatize_oblivious(self, flat, rng)
        return self._privatize_fast(flat, rng)

    def _privatize_fast(self, flat: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """The fastest exact samplers (not history-free): the self test first, one table per distinct word.

        Their time depends on the input (whether a word was kept, how many distinct words,
        which words): docs/threat-model.md, "Timing".
        """
        totals = self._token_totals(flat)
        if totals is None:
            return self._privatize_general(flat, rng)
        # Self first (k-NN envelope words): the envelope's layout puts the input word's mass
        # (exactly 1) first, so u ~ U[0, total) below 1 returns the word itself from its
        # total alone -- at eps >= 10 nearly every token. The others continue the SAME
        # attempt with u mapped onto the rest of the layout (_sample_knn, u_first).
        out = np.empty(flat.size, dtype=np.int64)
        fast = np.flatnonzero(totals > 0.0)
        u = rng.random(fast.size) * totals[fast]
        stay = u < 1.0
        out[fast[stay]] = flat[fast[stay]]
        move, u_move = fast[~stay], u[~stay]
        if move.size:
            words, inv = np.unique(flat[move], return_inverse=True)
            inv = inv.ravel()
            prepared = self._prepared_knn()
            assert prepared is not None
            word_totals = np.empty(words.size, dtype=np.float64)
            word_totals[inv] = totals[move]  # every token of a word has the word's total
            if not self.history_free:
                done = self._sample_heavy(words, inv, move, word_totals, out, rng)
                if done.any():  # drop those words' tokens, renumbering the rest (no second unique)
                    keep = ~done[inv]
                    renumber = np.cumsum(~done) - 1
                    move, u_move, inv = move[keep], u_move[keep], renumber[inv[keep]]
                    words, word_totals = words[~done], word_totals[~done]
            if move.size:
                usable = self._sample_knn(words, prepared, inv, move, out, rng, u_first=u_move, totals=word_totals)
                if not usable.all():  # the totals come from the same test: never
                    raise RuntimeError("internal error: a word with an envelope total has no usable envelope")
        other = np.flatnonzero(~(totals > 0.0))
        if other.size:
            out[other] = self._privatize_general(flat[other], rng)
        return out

    def _sample_heavy(
        self,
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
        other than itself (``_sample_rest``), which is ``p(y) / (1 - 1/T)`` for every other
        ``y``, as the envelope sampler would give. ``env_totals``: each word's T. Returns
        which of ``words`` were done.
        """
        counts = np.bincount(inv, minlength=words.size)
        handled = np.zeros(words.size, dtype=bool)
        v = self.embedding.size
        if 12 * v * 4 > self.memory_bytes or not self._geo.screening:  # room for a few full tables
            return handled
        maybe = np.flatnonzero(counts * _KNN_MAX_EST >= _HEAVY_PROPOSALS)
        if not maybe.size:
            return handled
        prepared = self._prepared_knn()
        assert prepared is not None
        est = self._knn_arrays(prepared.rows(words[maybe]), words[maybe], env_totals[maybe])[6]
        work = counts[maybe] * est
        heavy = maybe[work >= _HEAVY_PROPOSALS]
        # at most as many as the LRU holds (the costliest first): more would evict one
        # another between batches and be rebuilt every time
        room = max(1, self.memory_bytes // (12 * v) - 1)
        heavy = heavy[np.argsort(-work[work >= _HEAVY_PROPOSALS], kind="stable")[:room]]
        if not heavy.size:
            return handled
        tables = self._store.get_many(words[heavy])
        missing = [j for j, t in zip(heavy.tolist(), tables, strict=True) if t is None]
        built: dict[int, Table] = {}
        if missing:
            for w, row in self._rows(words[np.array(missing, dtype=np.int64)], show=False):  # ~20 ms a word
                cand = self._geo.candidates(w, row, self._gamma)
                assert cand is not None
                built[w] = self._build_table(w, cand)
        order = np.argsort(inv, kind="stable")
        starts = np.concatenate([[0], np.cumsum(counts)])
        for j, table in zip(heavy.tolist(), tables, strict=True):
            w = int(words[j])
            table = table if table is not None else built[w]
            at = order[starts[j] : starts[j + 1]]
            z = self._totals.get(w)
            if z is None:
                z = self._total(w, table)
                self._totals[w] = z
            p_self = self._self_after_failed_test(z, float(env_totals[j]))
            res = np.full(at.size, w, dtype=np.int64)
            rest = rng.random(at.size) >= p_self
            if rest.any():
                res[rest] = self._sample_rest(w, table, rng.random(int(rest.sum())) * (z - 1.0), rng)
            out[positions[at]] = res
            handled[j] = True
        return handled

    @staticmethod
    def _self_after_failed_test(z: float, t: float) -> float:
        """``P(M(w) = w | the envelope's self test failed) = (1/Z - 1/T) / (1 - 1/T)``."""
        return max(0.0, (1.0 / z - 1.0 / t) / (1.0 - 1.0 / t))

    def _privatize_general(self, flat: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        out = np.empty(flat.size, dtype=np.int64)
        uniq, inv = np.unique(flat, return_inverse=True)
        inv = inv.ravel()
        tables: list[Table | None] = [None] * uniq.size if self.history_free else self._store.get_many(uniq)
        has_table = np.fromiter((t is not None for t in tables), dtype=bool, count=uniq.size)
        if has_table.any():
            self._sample_cached(flat, inv, uniq, tables, has_table, out, rng)
        todo = np.flatnonzero(~has_table)
        if todo.size:  # words with a k-NN table (prepared or built earlier) and a cheap envelope
            prepared = self._prepared_knn()
            entries: list[Table] | PreparedKnn
            if prepared is not None:
                sel = todo
                entries = prepared  # every word: gathered a block at a time, no per-word work
            else:
                knns = self._knn_lookup(uniq[todo])
                sel = todo[[j for j, e in enumerate(knns) if e is not None]]
                entries = [e for e in knns if e is not None]
            if sel.size:
                slot = np.full(uniq.size, -1, dtype=np.int64)
                slot[sel] = np.arange(sel.size)
                tok = np.flatnonzero(slot[inv] >= 0)
                ok = self._sample_knn(uniq[sel], entries, slot[inv[tok]], tok, out, rng)
                has_table[sel[ok]] = True
        need_pos = np.flatnonzero(~has_table[inv])
        if need_pos.size:
            done = self._uniform_stage(flat[need_pos], out, need_pos, rng)
            rest = need_pos[~done]
            if rest.size:
                self._row_stage(flat, rest, out, rng)
        return out

    @property
    def _gamma(self) -> float:
        return float(self.gamma)  # type: ignore[arg-type]

    def _weights_exponent(self, d: np.ndarray) -> np.ndarray:
        """``-a * min(d, gamma)`` (overflow to -inf is fine: the weight is then 0)."""
        with np.errstate(over="ignore"):
            return -self._a * np.minimum(d, self._gamma)

    # Table sampling. The unnormalised mass of a word is laid out as
    #   [0, 1)                 the input word itself (weight exp(0) = 1)
    #   [1, 1 + inner)         the other words of L_w, in id order (weights exp(-a d))
    #   [1 + inner, total)     the bottom element: n_out * exp(-a gamma)
    # and u ~ Uniform[0, total) picks the output by inverse CDF. Most tokens land in the
    # first segment at large epsilon, so that test is done for all tokens at once.
    def _others(self, w: int, table: Table) -> tuple[np.ndarray, np.ndarray, float]:
        """Ids of ``L_w`` minus ``w``, their cumulative weights, and the bottom mass."""
        ids = np.asarray(table[0], dtype=np.int64)
        keep = ids != w
        with np.errstate(over="ignore"):
            cum = np.cumsum(np.exp(-self._a * np.asarray(table[1])[keep]))
            log_bottom = -self._a * self._gamma
        n_out = self.embedding.size - ids.size
        bottom = n_out * math.exp(max(log_bottom, -_LOG_UNDERFLOW)) if n_out else 0.0
        return ids[keep], cum, bottom

    def _total(self, w: int, table: Table) -> float:
        _, cum, bottom = self._others(w, table)
        return 1.0 + (float(cum[-1]) if cum.size else 0.0) + bottom

    def _sample_rest(self, w: int, table: Table, u: np.ndarray, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """Outputs for ``u`` uniform on ``[0, total - 1)``: the part of the layout after ``w``."""
        others, cum, bottom = self._others(w, table)
        inner = float(cum[-1]) if cum.size else 0.0
        res = np.empty(u.size, dtype=np.int64)
        # with no bottom mass, a u rounded up past `inner` still belongs to the last word
        inside = u < inner if bottom > 0 or not others.size else np.ones(u.size, dtype=bool)
        if others.size:
            res[inside] = others[np.minimum(np.searchsorted(cum, u[inside], side="right"), others.size - 1)]
        nb = u.size - int(inside.sum())
        if nb:
            res[~inside] = self._uniform_outside(np.asarray(table[0], dtype=np.int64), nb, rng)
        return res

    def _sample_table(self, w: int, table: Table, count: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """``count`` draws from the exact distribution of ``w`` given its table ``L_w``."""
        u = rng.random(count) * self._total(w, table)
        res = np.full(count, w, dtype=np.int64)
        rest = u >= 1.0
        if rest.any():
            res[rest] = self._sample_rest(w, table, u[rest] - 1.0, rng)
        return res

    def _sample_cached(
        self,
        flat: np.ndarray,
        inv: np.ndarray,
        uniq: np.ndarray,
        tables: list[Table | None],
        has_table: np.ndarray,
        out: np.ndarray,
        rng: np.random.Generator,
    ) -> None:
        """All tokens of words with a table: the self test vectorized, the rest word by word."""
        totals = np.zeros(uniq.size)
        memo = self._totals
        for j in np.flatnonzero(has_table).tolist():
            w = int(uniq[j])
            t = memo.get(w)
            if t is None:
                t = self._total(w, tables[j])  # type: ignore[arg-type]
                if not self.history_free:
                    memo[w] = t
            totals[j] = t
        tok = np.flatnonzero(has_table[inv])
        u = rng.random(tok.size) * totals[inv[tok]]
        hit = u < 1.0
        out[tok[hit]] = flat[tok[hit]]
        rest, u_rest = tok[~hit], u[~hit] - 1.0
        if rest.size:
            order = np.argsort(inv[rest], kind="stable")
            rest, u_rest = rest[order], u_rest[order]
            js, starts = np.unique(inv[rest], return_index=True)
            bounds = np.append(starts, rest.size)
            for k, j in enumerate(js.tolist()):
                sl = slice(bounds[k], bounds[k + 1])
                table = tables[j]
                assert table is not None
                out[rest[sl]] = self._sample_rest(int(uniq[j]), table, u_rest[sl], rng)

    def _uniform_outside(self, members: npt.NDArray[np.int64], count: int, rng: np.random.Generator) -> np.ndarray:
        """``count`` independent uniform draws from the vocabulary minus sorted ``members``."""
        v = self.embedding.size
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
        self, words: np.ndarray, out: np.ndarray, positions: np.ndarray, rng: np.random.Generator
    ) -> npt.NDArray[np.bool_]:
        """Rejection from the uniform proposal (envelope = the maximum weight, 1).

        Runs one pilot round; continues only while it is cheap (acceptance >= 1/64),
        for a bounded number of rounds. Returns which tokens got their output.
        """
        v = self.embedding.size
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
                d = self._geo.exact_paired(words[pend], prop)
                acc = rng.random(pend.size) < np.exp(self._weights_exponent(d))
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

    def _rows(self, words: npt.NDArray[np.int64], show: bool | None = None) -> Iterator[tuple[int, np.ndarray]]:
        """Yield ``(w, float32 screening row)`` for each word, computed in blocks."""
        for q, rows in self._blocks(words, show):
            for r, w in enumerate(q.tolist()):
                yield w, rows[r]

    def _blocks(
        self, words: npt.NDArray[np.int64], show: bool | None = None
    ) -> Iterator[tuple[npt.NDArray[np.int64], np.ndarray]]:
        """Yield ``(words, float32 screening rows)`` block by block (the buffer is reused)."""
        v = self.embedding.size
        block = max(1, min(128, self.block_bytes // (4 * v)))
        buf = np.empty((min(block, max(words.size, 1)), v), dtype=np.float32)
        enabled = self.show_progress if show is None else show
        what = f"TEM: {words.size:,} new words x {v:,} distances ({self.metric}, gamma={self._gamma:.3g})"
        with progress(words.size, what, enabled=enabled) as advance:
            for s in range(0, words.size, block):
                q = words[s : s + block]
                rows = buf[: q.size]
                self._geo.screen(q, rows)
                yield q, rows
                advance(q.size)

    def _build_table(self, w: int, cand: npt.NDArray[np.int64]) -> Table:
        d = self._geo.exact(w, cand)
        inside = d <= self._gamma
        table: Table = (cand[inside].astype(np.int32), d[inside])
        if not self.history_free:
            self._store.put(w, table)
        return table

    def _row_stage(self, flat: np.ndarray, positions: np.ndarray, out: np.ndarray, rng: np.random.Generator) -> None:
        """Tables (built now), the k-NN envelope or the shell sampler for the tokens at ``positions``.

        Every scanned word also gets its k-NN table (its prepared one when there is one;
        otherwise built, and kept in memory unless history-free: later batches at any
        epsilon skip the scan for it).
        """
        words = flat[positions]
        order = np.argsort(words, kind="stable")
        positions = positions[order]
        uniq, counts = np.unique(words[order], return_counts=True)
        starts = np.concatenate([[0], np.cumsum(counts)])
        knn_words: list[int] = []
        knn_entries: list[Table] = []
        knn_pos: list[np.ndarray] = []
        prepared = self._knn_lookup(uniq) if self._prepared_knn() is not None else None
        for j, (w, row) in enumerate(self._rows(uniq)):
            pos = positions[starts[j] : starts[j + 1]]
            entry = prepared[j] if prepared is not None else self._build_knn(w, row)
            bound, est = self._knn_cost(entry) if entry is not None else (math.inf, math.inf)
            cand = None
            if est > _KNN_PREFER_RATIO:
                # a ball table costs one exact distance per member (once; then cached), the
                # k-NN envelope about `est` per token: list the ball only when it is small
                # or the word is frequent enough in this batch to amortise it
                limit = self.table_max
                if bound <= _KNN_MAX_RATIO or est <= _KNN_MAX_EST:
                    limit = min(limit, max(_TABLE_MIN, int(_TABLE_AMORTISE * pos.size * est)))
                cand = self._geo.candidates(w, row, self._gamma, limit=limit)
            if cand is not None:
                out[pos] = self._sample_table(w, self._build_table(w, cand), pos.size, rng)
            elif entry is not None and (bound <= _KNN_MAX_RATIO or est <= _KNN_MAX_EST):
                knn_words.append(w)
                knn_entries.append(entry)
                knn_pos.append(pos)
            else:
                out[pos] = self._sample_shells(w, self._geo.lower_bounds(w, row), pos.size, rng)
        if knn_words:
            sizes = np.array([p.size for p in knn_pos])
            token_word = np.repeat(np.arange(len(knn_words)), sizes)
            kw = np.array(knn_words, dtype=np.int64)
            self._sample_knn(kw, knn_entries, token_word, np.concatenate(knn_pos), out, rng)

    # k-NN envelope sampler. A k-NN table holds E = the k words with the smallest
    # screening values (ids sorted, exact float64 distances), then (id -1) a distance
    # d_env with d(w, y) >= d_env for every y outside E (a proven lower bound from the
    # float32 screening), then (ids -1) the _KNN_SKETCH quantiles of the far distances.
    # The envelope g is the true weight on E and exp(-a min(d_env, gamma)) >= the true
    # weight on each word outside E; a proposal from g (E by inverse CDF, or a uniform
    # word of W, rejected if it is in E) is accepted with probability weight / g, so
    # accepted draws follow the exact distribution.
    def _build_knn(self, w: int, row: np.ndarray) -> Table | None:
        """The k-NN table of ``w`` from its screening row (kept in memory unless history-free;
        None without screening)."""
        if not self._geo.screening:
            return None
        entry = knn_entry(self._geo, w, row, self._k, _KNN_SKETCH)
        if not self.history_free:
            self._knn.put(w, entry)
        return entry

    def _knn_rest(self, k: int) -> int:
        """Words proposed by the outside part of the envelope: all ``V`` (members of E drawn
        there are rejected, see :meth:`_sample_knn`), or none when E is the vocabulary."""
        v = self.embedding.size
        return v if k < v else 0

    def _knn_cost(self, entry: Table) -> tuple[float, float]:
        """``(bound, estimate)`` of the expected proposals per token for one entry."""
        k = self._k
        tail = np.asarray(entry[1], dtype=np.float64)
        m_e = float(np.exp(self._weights_exponent(tail[:k])).sum())
        n_rest = self._knn_rest(k)
        with np.errstate(over="ignore", invalid="ignore"):
            total = m_e + (n_rest * math.exp(float(self._weights_exponent(tail[k : k + 1])[0])) if n_rest else 0.0)
            far = (self.embedding.size - k) * float(np.exp(self._weights_exponent(tail[k + 1 :])).mean())
        if not (m_e > 0 and math.isfinite(total)):
            return math.inf, math.inf
        return total / m_e, total / max(min(m_e + far, total), m_e)

    def _knn_arrays(
        self,
        entries: list[Table] | Table,
        words: npt.NDArray[np.int64],
        totals: npt.NDArray[np.float64] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(E ids, cumulative E weights, E mass, total envelope mass, log envelope, bound, estimate)``.

        ``words``: whose tables ``entries`` are; ``totals``: their envelope totals when
        known (computed by this method before: prepared or memoized, bit for bit the same),
        which skips recomputing the far part. ``bound = total / E mass`` bounds the
        expected proposals per token (the true mass is at least the E mass);
        ``estimate = total / (E mass + the sketched far mass)`` estimates them. Both are
        ``inf`` when the envelope is unusable. With prepared far bounds, the outside part's
        mass is that of :meth:`_far_layout` (``log envelope`` is then the bound at d_env alone).
        """
        k = self._k
        if isinstance(entries, tuple):  # already stacked: (V', width) ids and distances
            ids = np.asarray(entries[0][:, :k], dtype=np.int64)
            tail = np.asarray(entries[1], dtype=np.float64)
        else:
            ids = np.stack([np.asarray(e[0][:k], dtype=np.int64) for e in entries])
            tail = np.stack([np.asarray(e[1], dtype=np.float64) for e in entries])
        dist, d_env, sketch = tail[:, :k], tail[:, k], tail[:, k + 1 :]
        cum = np.cumsum(np.exp(self._weights_exponent(dist)), axis=1)
        m_e = cum[:, -1]
        log_env = self._weights_exponent(d_env)
        n_rest = self._knn_rest(k)
        far = self._prepared.far
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if totals is not None:
                outside = totals - m_e
            elif not n_rest:
                outside = np.zeros_like(m_e)
            elif far is not None:
                outside = n_rest * np.exp(log_env)
                with_far = np.flatnonzero(self._far_words(m_e, log_env))
                for s in range(0, with_far.size, _KNN_WORDS):
                    part = with_far[s : s + _KNN_WORDS]
                    outside[part] = self._far_layout(words[part], log_env[part])[0][:, -1]
            else:
                outside = n_rest * np.exp(log_env)
            total = m_e + outside if totals is None else np.asarray(totals, dtype=np.float64)
            far_est = (self.embedding.size - k) * np.exp(self._weights_exponent(sketch)).mean(axis=1)
            z_est = np.minimum(m_e + far_est, total)
            ok = (m_e > 0) & np.isfinite(total)
            bound = np.where(ok, total / m_e, np.inf)
            est = np.where(ok, total / np.maximum(z_est, m_e), np.inf)
        return ids, cum, m_e, total, log_env, bound, est

    def _far_words(self, m_e: npt.NDArray[np.float64], log_env: npt.NDArray[np.float64]) -> npt.NDArray[np.bool_]:
        """Which words' envelopes use the far bounds: those whose k-NN envelope puts at least
        :data:`_FAR_MIN_SHARE` of its mass outside E (elsewhere the bounds change little and
        cost a layout of every cluster). A function of the word's table and epsilon only, the
        same wherever the totals are computed and wherever the sampler draws."""
        n_rest = self._knn_rest(self._k)
        if self._prepared.far is None or not n_rest:
            return np.zeros(m_e.shape, dtype=bool)
        with np.errstate(over="ignore", invalid="ignore"):
            outside = n_rest * np.exp(log_env)
            return np.asarray(outside >= _FAR_MIN_SHARE * (m_e + outside))

    def _far_layout(
        self, words: npt.NDArray[np.int64], log_env: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.uint8]]:
        """``(cumulative cluster masses, bound levels)`` of the outside part, one row a word.

        Cluster ``c`` of the prepared far bounds gets the envelope
        ``exp(-a min(max(lb(w, c), d_env), gamma))`` on each of its ``n_c`` words: at least
        the true weight of every word of ``c`` outside E (``d >= lb`` for every member,
        ``d >= d_env`` outside E), so the outside part keeps its exactness argument with a
        smaller mass. ``lb = level * step`` takes 256 values, so the envelope is
        ``min(G[level], exp(log_env))`` with ``G`` a per-epsilon table (:meth:`_far_tables`;
        exp is monotone, so this is the formula's value exactly); the sampler's acceptance
        uses :meth:`_far_log_envelope`, its logarithm. The arithmetic is per row (the
        totals computed in any chunking agree bit for bit with the sampler's).
        """
        far = self._prepared.far
        assert far is not None
        q = far.levels(words)
        g, env = self._far_tables()[1], np.exp(log_env)
        cum = np.empty(q.shape, dtype=np.float64)
        for s in range(0, words.size, _LAYOUT_ROWS):  # rows a few at a time: the passes stay in cache
            mass = g[q[s : s + _LAYOUT_ROWS]]
            np.minimum(mass, env[s : s + _LAYOUT_ROWS, None], out=mass)
            mass *= far.counts
            np.cumsum(mass, axis=1, out=cum[s : s + _LAYOUT_ROWS])
        return cum, q

    def _block_layouts(
        self, words: npt.NDArray[np.int64], log_env: npt.NDArray[np.float64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int8], tuple[np.ndarray, np.ndarray]]:
        """The far layouts of ``words`` (:meth:`_far_layout`'s values): ``(row, src, (computed, prepared))``.

        The rows prepared with the totals are read where they are (memory-mapped, not
        copied: a draw reads a few entries of its word's row), the others computed here;
        word ``i``'s layout is row ``row[i]`` of table ``src[i]`` (0 computed, 1 prepared).
        """
        holder = self._prepared
        stored, prepared = holder.layout_rows, holder.layouts
        row = np.full(words.size, -1, dtype=np.int64)
        if stored is not None and prepared is not None:
            known = np.flatnonzero(words < stored.size)
            row[known] = stored[words[known]]
        else:
            prepared = np.empty((0, 0))
        src = (row >= 0).astype(np.int8)
        rest = np.flatnonzero(row < 0)
        row[rest] = np.arange(rest.size)
        return row, src, (self._far_layout(words[rest], log_env[rest])[0], prepared)

    def _far_log_envelope(self, q: npt.NDArray[np.uint8], log_env: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        """``log`` of the far envelope of clusters at levels ``q`` for words with k-NN ``log_env`` (elementwise)."""
        return np.minimum(self._far_tables()[0][q], log_env)

    def _far_tables(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """``(L, G)``: ``L[q] = -a min(q * step, gamma)`` and ``G = exp(L)``, for the 256 bound levels."""
        tables = self._far_lut
        if tables is None:
            far = self._prepared.far
            assert far is not None
            log_g = self._weights_exponent(np.arange(256, dtype=np.float64) * far.step)
            tables = (log_g, np.exp(log_g))
            object.__setattr__(self, "_far_lut", tables)
        return tables

    def _sample_knn(
        self,
        words: npt.NDArray[np.int64],
        entries: list[Table] | Table | PreparedKnn,
        token_word: np.ndarray,
        positions: np.ndarray,
        out: np.ndarray,
        rng: np.random.Generator,
        u_first: np.ndarray | None = None,
        totals: npt.NDArray[np.float64] | None = None,
    ) -> npt.NDArray[np.bool_]:
        """:meth:`_sample_knn_block` on blocks of :data:`_KNN_WORDS` words (the per-word arrays stay in cache).

        ``entries``: the words' tables, or the prepared tables (read a block at a time).
        """
        if words.size <= _KNN_WORDS:
            whole = entries.rows(words) if isinstance(entries, PreparedKnn) else entries
            return self._sample_knn_block(words, whole, token_word, positions, out, rng, u_first, totals)
        usable = np.zeros(words.size, dtype=bool)
        by_word = np.argsort(token_word, kind="stable")
        edges = np.searchsorted(token_word[by_word], np.arange(0, words.size + _KNN_WORDS, _KNN_WORDS))
        for i, w0 in enumerate(range(0, words.size, _KNN_WORDS)):
            part = slice(w0, w0 + _KNN_WORDS)
            sel = by_word[edges[i] : edges[i + 1]]
            if isinstance(entries, PreparedKnn):
                block: list[Table] | Table = entries.rows(words[part])
            elif isinstance(entries, tuple):
                block = (entries[0][part], entries[1][part])
            else:
                block = entries[part]
            usable[part] = self._sample_knn_block(
                words[part],
                block,
                token_word[sel] - w0,
                positions[sel],
                out,
                rng,
                None if u_first is None else u_first[sel],
                None if totals is None else totals[part],
            )
        return usable

    def _sample_knn_block(
        self,
        words: npt.NDArray[np.int64],
        entries: list[Table] | Table,
        token_word: np.ndarray,
        positions: np.ndarray,
        out: np.ndarray,
        rng: np.random.Generator,
        u_first: np.ndarray | None = None,
        totals: npt.NDArray[np.float64] | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Draw ``out[positions]`` for tokens of ``words[token_word]`` by rejection under the k-NN envelope.

        Only words whose envelope is cheap (``usable``) are sampled; returns that mask.
        ``u_first`` (one per token, in ``[1, total)``): the tokens' first attempts already
        drew ``u ~ U[0, total)`` and found it past the input word's unit of mass (the
        self-first test of :meth:`_privatize`); that attempt goes on with ``u`` mapped onto
        the layout without the word's own segment ``[c, c + 1)`` (``u - 1`` below it, ``u``
        above it: uniform on the rest, as the attempt requires), later attempts start afresh.
        ``totals``: the words' envelope totals when known (:meth:`_knn_arrays`).
        """
        ids, cum, m_e, total, log_env, bound, est = self._knn_arrays(entries, words, totals)
        usable = (bound <= _KNN_MAX_RATIO) | (est <= _KNN_MAX_EST)
        keep = usable[token_word]
        # tokens grouped by word: the word's vector and table rows are then read in runs
        order = np.flatnonzero(keep)
        order = order[np.argsort(token_word[order], kind="stable")]
        tw, pos = token_word[order], positions[order]
        v, k = self.embedding.size, ids.shape[1]
        keys = (np.arange(ids.shape[0], dtype=np.int64)[:, None] * v + ids).ravel()  # sorted
        w_rows = np.asarray(self._geo.x[words], dtype=np.float64)  # gathered once, not per proposal
        first_u = None
        if u_first is not None:
            first_u = np.asarray(u_first, dtype=np.float64)[order]
            col = np.argmax(ids == words[:, None], axis=1)  # the word's own place in E (it is there)
            below = np.where(col > 0, cum[np.arange(ids.shape[0]), col - 1], 0.0)  # mass before it
        done = np.zeros(tw.size, dtype=bool)
        far = self._prepared.far if k < v else None
        # the far layouts of the block's words that use the far bounds (at most _KNN_WORDS
        # words: :meth:`_sample_knn` blocks them), once; far_row: a word's row in its
        # layout table (far_src: which), or -1
        far_row = np.full(words.size, -1, dtype=np.int64)
        far_src = np.zeros(words.size, dtype=np.int8)
        layouts: tuple[np.ndarray, ...] = ()
        if far is not None:
            with_far = np.flatnonzero(usable & self._far_words(m_e, log_env))
            far_row[with_far], far_src[with_far], layouts = self._block_layouts(words[with_far], log_env[with_far])
        # tokens a slice at a time (independent draws): the proposal buffers stay small
        for start in range(0, tw.size, _KNN_TOKENS):
            pend = np.arange(start, min(tw.size, start + _KNN_TOKENS))
            continued = first_u is not None
            while pend.size:
                if continued:  # the continued first attempt of each token
                    assert first_u is not None
                    tok, j = pend, tw[pend]
                    fu = first_u[pend]
                    u = np.where(fu - 1.0 < below[j], fu - 1.0, fu)
                    continued = False
                else:
                    # several independent attempts per pending token; the first success is kept.
                    # Many pending tokens: one attempt each (no attempt wasted after a success);
                    # few: up to twice the estimated proposals, so that the passes (each a
                    # fixed cost) stay few
                    rep = np.clip(np.ceil(2.0 * est[tw[pend]]), 1, 32).astype(np.int64)
                    rep = np.minimum(rep, max(1, _KNN_ATTEMPTS // max(pend.size, 1)))
                    tok = np.repeat(pend, rep)
                    j = tw[tok]
                    u = rng.random(tok.size) * total[j]
                in_e = u < m_e[j]
                res = np.full(tok.size, -1, dtype=np.int64)
                e_at = np.flatnonzero(in_e)
                col = _count_at_most(cum, j[e_at], u[e_at])
                res[e_at] = ids[j[e_at], np.minimum(col, k - 1)]
                r_at = np.flatnonzero(~in_e)
                if r_at.size:
                    # the outside part has mass V * envelope and proposes uniformly over all V
                    # words; a member of E is then rejected (E has its own part), so an outside
                    # word y comes out with probability (V env / total) (1 / V) (w(y) / env) =
                    # w(y) / total, as E's words do. Membership is tested only after acceptance.
                    jr = j[r_at]
                    row = far_row[jr]
                    y = np.empty(r_at.size, dtype=np.int64)
                    log_g = np.empty(r_at.size, dtype=np.float64)
                    plain = np.flatnonzero(row < 0)  # words without far bounds: uniform proposals
                    y[plain] = rng.integers(0, v, size=plain.size)
                    log_g[plain] = log_env[jr[plain]]
                    at = np.flatnonzero(row >= 0)
                    if far is not None and at.size:
                        # the same, cluster by cluster: a cluster by its envelope mass, then
                        # a uniform member (the position of u within the cluster's segment)
                        jl, src = row[at], far_src[jr[at]]
                        uf = u[r_at[at]] - m_e[jr[at]]
                        c = np.empty(at.size, dtype=np.int64)
                        lo, hi = np.empty(at.size), np.empty(at.size)
                        for s, table in enumerate(layouts):
                            sel = np.flatnonzero(src == s)
                            if sel.size:
                                c[sel], lo[sel], hi[sel] = _segments(table, jl[sel], uf[sel])
                        with np.errstate(invalid="ignore", divide="ignore"):
                            frac = np.clip((uf - lo) / (hi - lo), 0.0, 1.0)
                        y[at] = far.members(c, np.nan_to_num(frac))
                        log_g[at] = self._far_log_envelope(far.level_at(words[jr[at]], c), log_env[jr[at]])
                    d = self._geo.exact_indexed(w_rows, jr, words[jr], y)
                    with np.errstate(over="ignore", invalid="ignore"):
                        p_acc = np.exp(self._weights_exponent(d) - log_g)
                    p_acc[~(log_g > -np.inf)] = 0.0  # an empty segment met by rounding: reject
                    acc = np.flatnonzero(rng.random(r_at.size) < p_acc)
                    if acc.size:
                        probe = j[r_at[acc]] * v + y[acc]
                        hit = keys[np.minimum(np.searchsorted(keys, probe), keys.size - 1)] == probe
                        acc = acc[~hit]
                    res[r_at[acc]] = y[acc]
                ok = res >= 0
                first_tok, first = np.unique(tok[ok], return_index=True)
                out[pos[first_tok]] = res[np.flatnonzero(ok)[first]]
                done[first_tok] = True
                pend = pend[~done[pend]]
        return usable

    def _sample_shells(
        self, w: int, lb: npt.NDArray[np.float32], count: int, rng: np.random.Generator
    ) -> npt.NDArray[np.int64]:
        """Exact draws by rejection under a shell envelope built from lower bounds ``lb <= d``."""
        a = self._a
        g_eff = min(self._gamma, _LOG_UNDERFLOW / a)  # beyond it every weight is 0.0 in float64
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
            d = self._geo.exact(w, prop)
            acc = rng.random(m) < np.exp(self._weights_exponent(d) + h * sh)
            res[pend[acc]] = prop[acc]
            pend = pend[~acc]
        return res


register_kind(TOTALS_KIND, build_totals_artefact, totals_stale)  # the store's kind, declared where its builder is
