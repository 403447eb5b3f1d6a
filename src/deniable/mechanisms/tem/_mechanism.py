"""The TEM mechanism class: :class:`TruncatedExponential`, its options and validation, its exact
distribution, the artefacts it prepares and opens, and which sampler runs a batch.

The samplers live beside it (:mod:`._self_first` by default, :mod:`._oblivious` when
history-free, both falling back on :mod:`._lazy`); they read this class's state (the
geometry, the envelope, the tables of this process and the prepared artefacts). Importing
this module imports the modules of TEM's three artefact kinds, which register them with the
store, so the planner :meth:`TruncatedExponential.prepared_artefacts` names only registered kinds.

May import: every module of this package, :mod:`deniable.mechanisms.base` and
``.registry``, and the library below the mechanisms.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ..._errors import InvalidParameterError, ResourceLimitError
from ..._validation import check_bool, check_epsilon, check_int, check_positive, check_probability
from ...embedding import Embedding, Vocabulary
from ...metrics import check_metric
from .._options import history_free_option
from ..base import Mechanism
from ..registry import Option
from ._envelope import Envelope, Prepared
from ._far import FAR_KIND, FAR_METRICS, PreparedFar, far_artefact_params
from ._geometry import TEM_METRICS, Geometry, TemDistributions, tem_distributions
from ._lazy import WordSummaries, build_knn, build_table, rows
from ._oblivious import oblivious_rounds, privatize_oblivious
from ._self_first import privatize_fast
from ._tables import KNN_KIND, KNN_SKETCH, PreparedKnn, TableStore, knn_artefact_params, knn_k
from ._totals import TOTALS_KIND, open_totals, totals_artefact_params

__all__ = ["CompactDistribution", "TruncatedExponential", "theorem3_gamma"]

#: Largest gamma (a larger one changes nothing: every distance is below it).
_GAMMA_MAX = 1e300


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
        calls, and sample **data-obliviously** (:mod:`._oblivious`): every token makes
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
    _geometry: Geometry | None = field(init=False, repr=False)  # built on first use (:attr:`_geo`), or shared
    _state_lock: threading.Lock = field(init=False, repr=False)  # (the geometry's and the summaries' creation)
    _store: TableStore = field(init=False, repr=False)
    _totals: dict[int, float] = field(init=False, repr=False)
    _knn: TableStore = field(init=False, repr=False)
    _summaries: WordSummaries | None = field(init=False, repr=False)  # (only when shared: share_knn_tables)
    _ncand: dict[int, int] = field(init=False, repr=False)
    _costs: dict[int, tuple[float, float]] = field(init=False, repr=False)
    _k: int = field(init=False, repr=False)
    _prepared: Prepared = field(init=False, repr=False)
    _env: Envelope = field(init=False, repr=False)

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
        Option("table_max", int, 1 << 15, low=1, high=1 << 31, help="largest ball kept as an explicit table"),
        Option("memory_bytes", int, 256 << 20, low=1, high=1 << 50, help="budget of the in-memory table cache"),
        Option(
            "disk_bytes",
            int,
            4 << 30,
            low=1,
            high=1 << 50,
            help="size limit of the prepared tables built by precompute()",
        ),
        Option("block_bytes", int, 128 << 20, low=1, high=1 << 40, help="scratch memory for a block of distance rows"),
        Option("show_progress", bool, None, cli=False, help="progress bar while scanning the vocabulary"),
        history_free_option(
            "keep no per-word state between calls, every token the same work: timing independent of history"
        ),
    )

    @classmethod
    def prepared_artefacts(cls, embedding: Vocabulary, options: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """``(kind, params)`` of the input-independent artefacts TEM reads (for :mod:`deniable.artefacts`)."""
        embedding = Embedding.check(embedding)
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
        Embedding.check(self.embedding)
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
            check_bool(flag, getattr(self, flag))
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
        object.__setattr__(self, "_geometry", None)
        object.__setattr__(self, "_state_lock", threading.Lock())
        # tables built for the words of a run: this process's memory only (never disk)
        object.__setattr__(self, "_store", TableStore(memory_bytes=self.memory_bytes))
        object.__setattr__(self, "_totals", {})  # word -> total table mass (for this epsilon)
        object.__setattr__(self, "_knn", TableStore(memory_bytes=self.memory_bytes))
        object.__setattr__(self, "_summaries", None)
        object.__setattr__(self, "_ncand", {})  # word -> candidates of its ball (choice of sampler)
        object.__setattr__(self, "_costs", {})  # word -> its k-NN envelope's cost (choice of sampler)
        object.__setattr__(self, "_k", knn_k(v))
        object.__setattr__(self, "_prepared", Prepared())
        # the k-NN envelope at this epsilon (it reads the far bounds from _prepared once opened)
        object.__setattr__(self, "_env", Envelope(v, eps / 2.0, float(gamma), self._k, self._prepared))

    # -- public API ----------------------------------------------------------------------
    def distance(self, w: int, w2: int) -> float:
        return float(self._geo.exact(int(w), np.array([int(w2)], dtype=np.int64))[0])

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d["gamma"] = float(self.gamma)  # type: ignore[arg-type]
        d["gamma_from"] = self._gamma_from
        d["beta"] = float(self.beta)
        d["sampler"] = self.sampler()
        return d

    def sampler(self) -> str:
        """Which sampler maps the random stream to outputs, in public words (in :meth:`describe`, so in
        every manifest).

        One generator state gives one output whatever this process privatized before
        (tests/test_tem_keyed.py), for one sampler: ``"lazy"`` (no prepared tables),
        ``"self-first"`` (prepared k-NN tables, named by their content id, and far bounds when
        prepared) or ``"oblivious"`` (history-free). Another sampler draws the same law through
        another mapping, so two manifests whose samplers differ are two releases to the ledger
        (``deniable inspect-manifest``): a key reused after ``deniable prepare`` spends again and
        is counted.
        """
        self._prepared_knn()  # (opens the prepared artefacts, as the first call would)
        holder = self._prepared
        mode = "oblivious" if self.history_free else ("self-first" if holder.knn is not None else "lazy")
        parts = [mode] + [f"{name} {cid[:12]}" for name, cid in holder.sources.items() if holder.knn is not None]
        return ", ".join(parts)

    def compact_distribution(self, w: int | str) -> CompactDistribution:
        """The exact output distribution for input ``w`` (float64 distances from :meth:`Geometry.exact`).

        The arithmetic is :func:`~deniable.mechanisms.tem._geometry.tem_distributions` on a
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

    def share_knn_tables(self, other: object) -> bool:
        """Read and extend ``other``'s in-memory epsilon-free per-word state from now on; True where shared.

        That state is a function of the embedding, the metric and ``k`` only (not of epsilon
        or gamma): the k-NN tables, the geometry (the vectors' norms and the screening
        operands, built once instead of once an instance) and, with the same ``table_max``,
        the word summaries (:class:`._lazy.WordSummaries`: a word's closest screening values,
        from which its candidate count at any gamma is read without a pass over the
        vocabulary, and the k-NN tables stacked; created by the first sharing and held by the
        sharing instances only). So instances that differ only in epsilon or gamma find what
        one of them built for the words it met, and draw what they would draw alone (the same
        plans, the same values). Only for callers whose every word is public: the calibration's
        reference tokens
        (:func:`deniable.calibrate.table.build_table`, about 80 instances over the same words).
        Refused (False, nothing changed) across embeddings, metrics or ``k``, and in
        history-free mode, which keeps no tables between calls.
        """
        if not isinstance(other, TruncatedExponential) or other is self:
            return False
        if (
            other.embedding is not self.embedding
            or other.metric != self.metric
            or other._k != self._k
            or self.history_free
            or other.history_free
        ):
            return False
        object.__setattr__(self, "_knn", other._knn)
        object.__setattr__(self, "_geometry", other._geo)
        if other.table_max == self.table_max:  # (the summaries' pre-check is at table_max)
            with other._state_lock:
                if other._summaries is None:
                    balls = WordSummaries(other.embedding.size, other.table_max, other.memory_bytes)
                    object.__setattr__(other, "_summaries", balls)
            object.__setattr__(self, "_summaries", other._summaries)
        return True

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
                from ...artefacts import content_id, open_artefact  # (at call time: tests watch the store)

                knn_params = knn_artefact_params(self.embedding, self.metric)
                info = open_artefact(self.embedding, KNN_KIND, knn_params)
                holder.sources = {}
                if info is not None:
                    holder.knn = PreparedKnn(info.path, self._k, prefault=self.history_free)
                    holder.sources["k-NN tables"] = content_id(self.embedding, KNN_KIND, knn_params) or "?"
                    if self.metric in FAR_METRICS:
                        far_params = far_artefact_params(self.embedding, self.metric)
                        far = open_artefact(self.embedding, FAR_KIND, far_params)
                        if far is not None:
                            holder.far = PreparedFar(far.path, prefault=self.history_free)
                            holder.sources["far bounds"] = content_id(self.embedding, FAR_KIND, far_params) or "?"
                    totals = open_artefact(self.embedding, TOTALS_KIND, self._totals_params())
                    if totals is not None:  # (history-free: read now, so which rows a batch reads is not timed)
                        open_totals(holder, totals, prefault=self.history_free)
                holder.loaded = True
        if self.history_free:  # the oblivious sampler's proposals per token (public; once, at open)
            oblivious_rounds(self)
        return holder.knn

    def _totals_params(self, far: bool | None = None) -> dict[str, object]:
        """The totals' key; ``far`` (default: whether this mechanism uses prepared far bounds)."""
        if far is None:
            far = self._prepared.far is not None
        return totals_artefact_params(self.embedding, self.metric, self.epsilon, self._gamma, far)

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
            from ...artefacts import build_artefact  # (at call time: tests watch the store's functions)

            width = self._k + 1 + KNN_SKETCH
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
                self._costs.clear()  # (their envelopes' costs)
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
        for w, row in rows(self, ids):
            build_knn(self, w, row)
            self._ncand[w] = self._geo.candidate_count(w, row, self._gamma, self.table_max)
            cand = self._geo.candidates(w, row, self._gamma, limit=self.table_max)
            if cand is not None:
                t = build_table(self, w, cand)
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
        for w, row in rows(self, np.sort(pick), show=False):
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
        return privatize_fast(self, flat, rng)

    @property
    def _geo(self) -> Geometry:
        """The distance computations on this embedding and metric, built on first use (or shared:
        :meth:`share_knn_tables`): the norms and screening operands are a pass over the vectors."""
        geo = self._geometry
        if geo is None:
            with self._state_lock:
                geo = self._geometry
                if geo is None:
                    geo = Geometry(self.embedding, self.metric)
                    object.__setattr__(self, "_geometry", geo)
        return geo

    @property
    def _gamma(self) -> float:
        return float(self.gamma)  # type: ignore[arg-type]
