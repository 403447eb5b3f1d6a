"""The sweep of the topic evaluation: :func:`run_evaluation` and the fits of one repeat.

Owns the order of the fits (the references, then per strategy and ``k`` the clean
compressed counts and each noise setting, then SynTF), the seeds each fit draws from
and the rows it adds. Imports the config and the measures of this package, the
bag-of-words library (vocabulary, bin maps, noise, SynTF) and the experiments' results
and progress display.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from ..._errors import InvalidParameterError
from ...bow.compress import BinMap, frequency_bin_map, make_bin_map
from ...bow.noise import TwoSidedGeometric
from ...bow.pipeline import BowPrivatizer
from ...bow.syntf import SynTF, neighbour_similarity
from ...bow.vectorize import BowVectorizer, Vocabulary, count_words
from ..results import ExperimentProgress, Results
from ._config import KEYS, METRICS, EvalConfig, load_dataset, load_heldout
from ._measures import (
    chance_jaccard,
    fit_lda,
    jaccard_top_words,
    lsa_accuracy,
    majority_accuracy,
    require_sklearn,
    word_metrics,
)

__all__ = ["run_evaluation"]


def run_evaluation(
    config: EvalConfig,
    *,
    texts: Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
    vocabulary: Vocabulary | None = None,
    heldout: Sequence[str] | None = None,
    show_progress: bool | None = None,
    log: Callable[[str], None] | None = None,
) -> Results:
    """Run the sweep: one long row per (condition, repeat, metric), the setting in :data:`KEYS`.

    ``texts``/``labels`` override loading ``config.dataset`` from ``config.data_dir``;
    ``heldout`` (documents disjoint from them) is needed for ``frequency-heldout``.
    """
    require_sklearn()
    report = ExperimentProgress(show_progress, log)
    randomness = config.randomness()
    docs = _documents(config, texts, labels, vocabulary, heldout)
    vocab = docs.vocab
    settings = config.noise_settings()
    bins = [k for k in config.bins if k <= vocab.size]
    seeds = config.repeat_seeds(randomness)
    n_fits = len(seeds) * (
        2
        + sum((1 + len(settings)) * (1 if s == "none" else len(bins)) for s in config.strategies)
        + len(config.epsilons) * len(config.syntf_lengths)
    )
    similarity = (
        neighbour_similarity(vocab, config.syntf_neighbours)
        if config.syntf_lengths and config.syntf_neighbours
        else None
    )
    report.say(
        f"{config.dataset}: {docs.x.shape[0]:,} documents with counted words, vocabulary {vocab.size:,} "
        f"(coverage {docs.coverage:.1%} of word tokens incl. stop words), {docs.n_topics} topics, "
        f"{n_fits} fits"
    )
    results = Results(
        config.dataset, KEYS, settings={**config.settings(randomness.entropy), "entropy": randomness.entropy}
    )
    with report.bar(n_fits, "evaluating") as advance:
        for repeat, seed in enumerate(seeds):
            fits = _Repeat(config, docs, results, report, advance, repeat, seed)
            fits.references()
            for strategy in config.strategies:
                for k in [vocab.size] if strategy == "none" else bins:
                    binned = fits.clean(strategy, k)
                    for eps, prec in settings:
                        fits.private(binned, eps, prec)
            # SynTF beside LPLP: synthetic vectors over the whole vocabulary (precision column = length n)
            for eps in config.epsilons:
                for n_terms in config.syntf_lengths:
                    fits.syntf(eps, n_terms, similarity)
    return results


@dataclass(frozen=True)
class _Documents:
    """The evaluated documents as counts over the vocabulary, and the frequencies bin maps are built from."""

    x: sp.csr_matrix  # documents without a counted word are dropped
    labels: list[str]
    vocab: Vocabulary
    n_topics: int
    data_freq: npt.NDArray[np.float64]  # the documents' own counts (frequency-data: NOT private)
    heldout_freq: npt.NDArray[np.float64] | None
    coverage: float  # share of word tokens counted


def _documents(
    config: EvalConfig,
    texts: Sequence[str] | None,
    labels: Sequence[str] | None,
    vocabulary: Vocabulary | None,
    heldout: Sequence[str] | None,
) -> _Documents:
    """Load the documents (unless given), check them and count their words over the vocabulary."""
    if texts is None or labels is None:
        texts, labels = load_dataset(config.dataset, config.data_dir, config.n_docs, seed=0)
        if heldout is None and "frequency-heldout" in config.strategies:
            heldout = load_heldout(config.dataset, config.data_dir, config.n_docs, seed=0)
    if heldout is None and "frequency-heldout" in config.strategies:
        raise InvalidParameterError("heldout", None, "documents disjoint from texts, for frequency-heldout")
    if len(texts) != len(labels):
        raise InvalidParameterError("labels", f"{len(labels)} labels", f"one per document ({len(texts)})")
    vocab = vocabulary or Vocabulary.from_embedding(size=config.vocab_size)
    x, n_tok, n_counted = BowVectorizer(vocab).transform_with_stats(list(texts))
    keep_docs = np.asarray(x.sum(axis=1)).ravel() > 0
    x = x[keep_docs]
    kept = [lab for lab, k in zip(labels, keep_docs.tolist(), strict=True) if k]
    # the public GloVe-rank prior (sums to ~10) breaks ties between held-out words never seen
    heldout_freq = count_words([list(heldout)], vocab) + vocab.frequencies if heldout is not None else None
    return _Documents(
        x=x,
        labels=kept,
        vocab=vocab,
        n_topics=config.n_topics or len(set(kept)),
        data_freq=np.asarray(x.sum(axis=0), dtype=np.float64).ravel(),
        heldout_freq=heldout_freq,
        coverage=n_counted / max(n_tok, 1),
    )


class _Binned(NamedTuple):
    """One compressed condition (strategy, ``k``): its map, its clean counts and clean fit."""

    strategy: str
    k: int
    bmap: BinMap
    weights: npt.NDArray[np.float64]  # the within-bin prior that reads bin topics as word topics
    counts: sp.csr_matrix
    ref_bins: npt.NDArray[np.float64]  # the reference topics seen through the bins
    clean_bins: npt.NDArray[np.float64]
    chance: float


@dataclass
class _Repeat:
    """One repeat of the sweep (its seed and train/test split): each method fits one condition and adds its rows."""

    config: EvalConfig
    docs: _Documents
    results: Results
    report: ExperimentProgress
    advance: Callable[[float], None]
    repeat: int
    seed: int
    train: npt.NDArray[np.bool_] = field(init=False)
    majority: float = field(init=False)
    ref: npt.NDArray[np.float64] = field(init=False)  # the reference fit (set by references())

    def __post_init__(self) -> None:
        self.train = _split(self.docs.labels, self.config.test_fraction, self.seed)
        self.majority = majority_accuracy(self.docs.labels, self.train)

    def references(self) -> None:
        """LDA / LSA on the clean uncompressed counts, and LDA again with another seed (how much LDA varies)."""
        x, top_n = self.docs.x, self.config.top_n
        t0 = time.perf_counter()
        self.ref = self._lda(x, self.seed)
        acc = self._accuracy(x)
        m_ref = {**word_metrics(self.ref, self.ref, x, top_n), "jaccard_bins": 1.0, "snr": math.inf}
        self._add("reference", "none", self.docs.vocab.size, t0, m_ref, acc=acc)
        t0 = time.perf_counter()
        ref2 = self._lda(x, self.seed + 1000)
        m_ref2 = {**word_metrics(self.ref, ref2, x, top_n), "snr": math.inf}
        self._add("reference-reseeded", "none", self.docs.vocab.size, t0, m_ref2)

    def clean(self, strategy: str, k: int) -> _Binned:
        """The clean counts compressed into ``k`` bins by ``strategy`` (the cost of compression alone)."""
        docs, top_n = self.docs, self.config.top_n
        bmap = _bin_map(strategy, docs.vocab, k, self.seed, docs.data_freq, docs.heldout_freq)
        weights = docs.heldout_freq if strategy == "frequency-heldout" else docs.vocab.frequencies
        assert weights is not None  # noqa: S101 - checked when the documents were read
        c = bmap.apply(docs.x)
        ref_bins = np.asarray(bmap.matrix().T @ self.ref.T).T
        chance = chance_jaccard(k, top_n)
        t0 = time.perf_counter()
        # without compression the clean data are the reference's: reuse its fit
        clean_bins = self.ref if strategy == "none" else self._lda(c, self.seed)
        metrics = {
            **word_metrics(self.ref, bmap.expand(clean_bins, weights), docs.x, top_n),
            "jaccard_bins": jaccard_top_words(ref_bins, clean_bins, top_n),
            "chance_bins": chance,
            "snr": math.inf,
        }
        self._add("clean", strategy, k, t0, metrics, acc=self._accuracy(c))
        return _Binned(strategy, k, bmap, weights, c, ref_bins, clean_bins, chance)

    def private(self, b: _Binned, eps: float, prec: float) -> None:
        """The noisy compressed counts at (``eps``, ``N``), or a skipped row when the release would be too dense."""
        docs, top_n = self.docs, self.config.top_n
        t0 = time.perf_counter()
        mech = TwoSidedGeometric(eps, prec, clamp=True)
        # non-zero entries after clamping: the counts plus P(K >= 1) = alpha / (1 + alpha) of all
        expected_nnz = b.counts.nnz + b.counts.shape[0] * b.k * mech.alpha / (1.0 + mech.alpha)
        if expected_nnz > self.config.max_nonzero:
            self.report.say(
                f"  skipped private {b.strategy} k={b.k} eps={eps:g} N={prec:g}: about "
                f"{expected_nnz:,.0f} non-zero noisy entries > max_nonzero={self.config.max_nonzero:,}"
            )
            self._add("private", b.strategy, b.k, t0, eps=eps, prec=prec, note="skipped: too dense")
            return
        noise_rng = np.random.default_rng([self.seed, round(eps * 1000), round(prec * 1000), b.k])
        priv = BowPrivatizer(BowVectorizer(docs.vocab), mech, b.bmap)
        m, noise = priv.privatize_counts(docs.x, noise_rng)
        phi_bins = self._lda(m, self.seed)
        metrics = {
            **word_metrics(self.ref, b.bmap.expand(phi_bins, b.weights), docs.x, top_n),
            "jaccard_bins": jaccard_top_words(b.ref_bins, phi_bins, top_n),
            "jaccard_noise": jaccard_top_words(b.clean_bins, phi_bins, top_n),
            "chance_bins": b.chance,
            "snr": noise.snr,
        }
        self._add("private", b.strategy, b.k, t0, metrics, eps=eps, prec=prec, acc=self._accuracy(m))

    def syntf(self, eps: float, n_terms: int, similarity: sp.spmatrix | None) -> None:
        """SynTF's synthetic term-frequency vectors of length ``n_terms`` over the whole vocabulary."""
        docs, top_n = self.docs, self.config.top_n
        t0 = time.perf_counter()
        syn = SynTF(eps, n_terms, similarity=similarity)
        m = syn.privatize(docs.x, np.random.default_rng([self.seed, round(eps * 1000), n_terms, 7]))
        phi = self._lda(m, self.seed)
        metrics = {
            **word_metrics(self.ref, phi, docs.x, top_n),
            "jaccard_bins": jaccard_top_words(self.ref, phi, top_n),
            "chance_bins": chance_jaccard(docs.vocab.size, top_n),
            "snr": math.nan,
        }
        strategy = "syntf" if similarity is None else f"syntf-nn{self.config.syntf_neighbours}"
        self._add(
            "private", strategy, docs.vocab.size, t0, metrics, eps=eps, prec=float(n_terms), acc=self._accuracy(m)
        )

    def _lda(self, counts: sp.spmatrix, seed: int) -> npt.NDArray[np.float64]:
        cfg = self.config
        return fit_lda(counts, self.docs.n_topics, max_iter=cfg.lda_iter, seed=seed, doc_iter=cfg.lda_doc_iter)

    def _accuracy(self, counts: sp.spmatrix) -> float:
        return lsa_accuracy(counts, self.docs.labels, self.train, seed=self.seed)

    def _add(
        self,
        kind: str,
        strategy: str,
        k: int,
        t0: float,
        metrics: Mapping[str, float] | None = None,
        *,
        eps: float = math.inf,
        prec: float = math.nan,
        acc: float = math.nan,
        note: str = "",
    ) -> None:
        """One row per metric of the fit started at ``t0``, a progress line and a step of the bar."""
        run = {
            "dataset": self.config.dataset,
            "kind": kind,
            "strategy": strategy,
            "bins": k,
            "epsilon": eps,
            "precision": prec,
            "repeat": self.repeat,
            "documents": int(self.docs.x.shape[0]),
            "topics": self.docs.n_topics,
            "eps_over_n": eps / prec if kind == "private" else math.inf,
            "seed": self.seed,
            "seconds": time.perf_counter() - t0,
            "note": note,
        }
        values = {m: (metrics or {}).get(m, math.nan) for m in METRICS} | {"accuracy": acc, "majority": self.majority}
        for metric, value in values.items():
            self.results.add(**run, metric=metric, value=value)
        self.report.say(_row_line(run | values))
        self.advance(1)


def _split(labels: Sequence[str], fraction: float, seed: int) -> npt.NDArray[np.bool_]:
    """The train rows of a train/test split, stratified by label when every label has two documents."""
    require_sklearn()
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(labels))
    y = np.asarray(labels)
    counts = {c: int((y == c).sum()) for c in set(labels)}
    strat = y if min(counts.values()) >= 2 else None
    tr, _ = train_test_split(idx, test_size=fraction, random_state=seed, stratify=strat)
    mask = np.zeros(len(labels), dtype=bool)
    mask[tr] = True
    return mask


def _bin_map(
    strategy: str,
    vocab: Vocabulary,
    k: int,
    seed: int,
    data_freq: npt.NDArray[np.float64],
    heldout_freq: npt.NDArray[np.float64] | None,
) -> BinMap:
    if strategy == "frequency-data":
        return frequency_bin_map(data_freq, k, source="private data (evaluation only: NOT private)")
    if strategy == "frequency-heldout":
        assert heldout_freq is not None  # noqa: S101
        return frequency_bin_map(heldout_freq, k, source="held-out documents of the same data set")
    return make_bin_map(strategy, vocab, k, seed=seed)


def _row_line(r: dict[str, Any]) -> str:
    return (
        f"{r['kind']:>9} {r['strategy']:>14} k={r['bins']:<6} eps={r['epsilon']:<5g} N={r['precision']:<4g} "
        f"J_words={r['jaccard']:.3f} J_bins={r['jaccard_bins']:.3f} J_noise={r['jaccard_noise']:.3f} "
        f"excl={r['exclusivity']:.3f} npmi={r['npmi']:.3f} acc={r['accuracy']:.3f} snr={r['snr']:.3g} "
        f"({r['seconds']:.1f}s)"
    )
