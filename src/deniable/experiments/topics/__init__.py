"""Utility of LPLP bag-of-words releases: LDA topics and LSA + random forest (seed 002's protocol).

For each setting (bin strategy, number of bins ``k``, ``eps``, ``N``) the same sample
of documents is vectorized over the public vocabulary, compressed, noised (clamped at
zero, which LDA needs) and analysed. Three kinds of rows:

- ``reference``: LDA / LSA on the clean, *uncompressed* counts (the non-private
  baseline), plus a second LDA seed on the same data (how much LDA itself varies);
- ``clean``: the clean *compressed* counts (the cost of compression alone);
- ``private``: the noisy compressed counts.

Topics over bins are read back as topics over words by spreading each bin's weight
over its words in proportion to the public frequency prior
(:meth:`BinMap.expand`), then matched one-to-one to the reference topics (Hungarian
assignment on cosine similarity). Metrics: Jaccard similarity of the matched
topics' top words, exclusivity of the top words (share of a word's weight that
falls in the topic, averaged), per-word coherence (mean pairwise NPMI of the top
words, document co-occurrence on the clean documents), and LSA + random-forest
category accuracy on a stratified train/test split (train and test both private).
Each private row also records the signal-to-noise ratio of its release (true counts
l1 / noise l1, from :class:`~deniable.bow.release.NoiseReport`). A private condition
whose clamped release would hold more than ``max_nonzero`` non-zero entries (no or
little compression at small ``eps / N``) is recorded as skipped, not fitted.

scikit-learn (``pip install deniable[eval]``) and, for plots, matplotlib
(``deniable[report]``) are imported only here, on use.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from .._errors import DataError, DeniableError, InvalidParameterError
from .._validation import check_choice, check_epsilon, check_int
from ..bow.compress import BinMap, frequency_bin_map, make_bin_map
from ..bow.noise import TwoSidedGeometric
from ..bow.pipeline import BowPrivatizer
from ..bow.syntf import SynTF, neighbour_similarity
from ..bow.vectorize import BowVectorizer, Vocabulary, count_words
from .results import ExperimentConfig, ExperimentProgress, ExperimentRandomness, Results, write_files

__all__ = [
    "DATASETS",
    "EVAL_STRATEGIES",
    "KEYS",
    "EvalConfig",
    "chance_jaccard",
    "exclusivity",
    "fit_lda",
    "jaccard_top_words",
    "load_dataset",
    "load_heldout",
    "lsa_accuracy",
    "majority_accuracy",
    "markdown_table",
    "match_topics",
    "npmi_coherence",
    "plot_results",
    "read_results",
    "require_sklearn",
    "run_evaluation",
    "summary_tables",
    "top_words",
    "write_results",
]

DATASETS = ("cfpb", "20newsgroups")
#: ``frequency`` uses the public GloVe-rank prior; ``frequency-heldout`` uses word counts of
#: a disjoint sample of the same data set standing in for a public corpus of the same
#: domain (CFPB: the test split; 20 Newsgroups: messages outside the sample), which is
#: also its within-bin prior for reading topics; ``frequency-data`` uses the evaluated
#: documents' own counts: NOT private (the map leaks), evaluated only for comparison.
EVAL_STRATEGIES = ("random", "frequency", "frequency-heldout", "frequency-data", "semantic", "none")


def require_sklearn() -> Any:
    """Import scikit-learn or raise a clear error."""
    try:
        import sklearn
    except ImportError:  # pragma: no cover - depends on the install
        raise DeniableError("the bag-of-words evaluation needs scikit-learn: pip install 'deniable[eval]'") from None
    return sklearn


# --------------------------------------------------------------------------- data
def load_dataset(name: str, data_dir: str | Path, n_docs: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """A random sample of ``n_docs`` (text, label) pairs from a shared data set.

    The documents are those of :func:`deniable.experiments.data.load_corpus` (the recipe
    that knows each file's columns): ``cfpb``, the training split (complaint narrative,
    product); ``20newsgroups``, every message with its headers removed (headers name
    senders and groups).
    """
    from .data import load_corpus

    if name not in DATASETS:
        raise InvalidParameterError("dataset", name, "one of " + ", ".join(DATASETS))
    n = check_int("n_docs", n_docs, minimum=2)
    corpus = load_corpus(name, data_dir)
    texts = corpus.texts
    labels = [corpus.classes[i] for i in corpus.labels.tolist()]
    idx = np.random.default_rng(seed).permutation(len(texts))[: min(n, len(texts))]
    idx.sort()
    return [texts[i] for i in idx], [labels[i] for i in idx]


def load_heldout(name: str, data_dir: str | Path, n_docs: int, seed: int = 0, size: int = 3000) -> list[str]:
    """Documents disjoint from :func:`load_dataset`'s sample, standing in for a same-domain public corpus.

    ``cfpb``: the test split; ``20newsgroups``: up to ``size`` messages outside the sample.
    """
    from .data import load_corpus

    if name == "cfpb":
        return load_corpus(name, data_dir, "test").texts[:size]
    if name != "20newsgroups":
        raise InvalidParameterError("dataset", name, "one of " + ", ".join(DATASETS))
    all_texts, _ = load_dataset(name, data_dir, 10**9, seed=0)  # every message, file order
    idx = np.random.default_rng(seed).permutation(len(all_texts))[n_docs : n_docs + size]
    return [all_texts[i] for i in np.sort(idx)]


# ------------------------------------------------------------------------ metrics
def fit_lda(
    counts: sp.spmatrix | npt.ArrayLike, n_topics: int, *, max_iter: int, seed: int, doc_iter: int = 20
) -> npt.NDArray[np.float64]:
    """scikit-learn batch variational LDA; returns the normalised topic-feature matrix.

    ``doc_iter`` is scikit-learn's ``max_doc_update_iter`` (per-document E-step
    iterations, default 100 there): its E-step loops over documents in Python, so 20
    makes a fit on noisy (dense) rows ~3x faster at no measurable cost in stability
    (between-seed top-word Jaccard of the clean reference 0.23 vs 0.20 on 1,500 CFPB
    complaints).
    """
    require_sklearn()
    from sklearn.decomposition import LatentDirichletAllocation

    x = sp.csr_matrix(counts, dtype=np.float64)
    if x.nnz and x.data.min() < 0:
        raise InvalidParameterError("counts", "negative entries", "non-negative counts (clamp the noise)")
    lda = LatentDirichletAllocation(
        n_components=n_topics,
        max_iter=max_iter,
        learning_method="batch",
        random_state=seed,
        max_doc_update_iter=doc_iter,
    )
    lda.fit(x)
    comp = np.asarray(lda.components_, dtype=np.float64)
    return comp / comp.sum(axis=1, keepdims=True)


def top_words(phi: npt.NDArray[np.float64], n: int = 10) -> npt.NDArray[np.int64]:
    """Indices of each topic's ``n`` highest-weight features, best first (ties: lower index)."""
    order = np.argsort(-phi, axis=1, kind="stable")
    return order[:, :n].astype(np.int64)


def match_topics(ref: npt.NDArray[np.float64], other: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """``perm[t]``: the topic of ``other`` matched to reference topic ``t`` (max total cosine)."""
    from scipy.optimize import linear_sum_assignment

    a = ref / np.maximum(np.linalg.norm(ref, axis=1, keepdims=True), 1e-300)
    b = other / np.maximum(np.linalg.norm(other, axis=1, keepdims=True), 1e-300)
    rows, cols = linear_sum_assignment(-(a @ b.T))
    perm = np.empty(ref.shape[0], dtype=np.int64)
    perm[rows] = cols
    return perm


def jaccard_top_words(ref: npt.NDArray[np.float64], other: npt.NDArray[np.float64], n: int = 10) -> float:
    """Mean Jaccard similarity of the top-``n`` word sets of matched topics."""
    perm = match_topics(ref, other)
    ta, tb = top_words(ref, n), top_words(other[perm], n)
    scores = [len(set(x) & set(y)) / len(set(x) | set(y)) for x, y in zip(ta.tolist(), tb.tolist(), strict=True)]
    return float(np.mean(scores))


def exclusivity(phi: npt.NDArray[np.float64], n: int = 10) -> float:
    """Mean over topics and their top-``n`` words of ``phi[t, w] / sum_t' phi[t', w]``."""
    tw = top_words(phi, n)
    total = phi.sum(axis=0)
    rows = np.arange(phi.shape[0])[:, None]
    share = phi[rows, tw] / np.maximum(total[tw], 1e-300)
    return float(share.mean())


def npmi_coherence(phi: npt.NDArray[np.float64], clean_counts: sp.spmatrix, n: int = 10) -> float:
    """Mean pairwise NPMI of each topic's top-``n`` words, by document co-occurrence.

    ``NPMI(a, b) = log(P(a,b) / (P(a) P(b))) / -log P(a,b)``; pairs that never co-occur
    score -1. Averaged over pairs (per word pair), then over topics.
    """
    occ = sp.csr_matrix(clean_counts).astype(bool).astype(np.float64).tocsc()
    n_docs = occ.shape[0]
    tw = top_words(phi, n)
    scores = []
    for words in tw.tolist():  # one small (n x n) co-occurrence block per topic
        sub = occ[:, words]
        co = np.asarray((sub.T @ sub).todense(), dtype=np.float64) / n_docs
        p = np.diag(co).copy()
        iu = np.triu_indices(len(words), 1)
        pij = co[iu]
        pi, pj = p[iu[0]], p[iu[1]]
        with np.errstate(divide="ignore", invalid="ignore"):
            val = np.where(
                pij > 0,
                np.log(pij / np.maximum(pi * pj, 1e-300)) / np.maximum(-np.log(pij), 1e-12),
                -1.0,
            )
        scores.append(float(val.mean()))
    return float(np.mean(scores))


def lsa_accuracy(
    x: sp.spmatrix | npt.ArrayLike,
    labels: Sequence[str],
    train: npt.NDArray[np.bool_],
    *,
    n_components: int = 100,
    n_trees: int = 100,
    seed: int = 0,
) -> float:
    """LSA (sublinear TF-IDF + truncated SVD) + random forest; accuracy on the rows not in ``train``."""
    require_sklearn()
    from sklearn.decomposition import TruncatedSVD
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.feature_extraction.text import TfidfTransformer

    m = sp.csr_matrix(x, dtype=np.float64)
    y = np.asarray(labels)
    tfidf = TfidfTransformer(sublinear_tf=True).fit(m[train])
    dim = max(1, min(n_components, m.shape[1] - 1))
    svd = TruncatedSVD(n_components=dim, random_state=seed).fit(tfidf.transform(m[train]))
    z_train = svd.transform(tfidf.transform(m[train]))
    z_test = svd.transform(tfidf.transform(m[~train]))
    rf = RandomForestClassifier(n_estimators=n_trees, random_state=seed, n_jobs=1)
    rf.fit(z_train, y[train])
    return float(np.mean(rf.predict(z_test) == y[~train]))


# --------------------------------------------------------------------- the sweep
@dataclass(frozen=True, kw_only=True)
class EvalConfig(ExperimentConfig):
    """What to evaluate. Kept small by default: the machine may be shared.

    ``epsilons``, ``repeats`` and ``random_state`` are :class:`ExperimentConfig`'s. Repeat
    ``r`` uses the seed ``random_state + r`` for the noise, the maps, LDA and the split
    (``random_state=None``: seeds drawn from fresh, recorded entropy).
    """

    dataset: str = "cfpb"
    data_dir: str = "../shared/data"
    n_docs: int = 1500
    epsilons: Sequence[float] = (1.0, 3.0, 10.0)
    random_state: int | np.random.Generator | None = 0
    precisions: Sequence[float] = (1.0, 3.0)
    bins: Sequence[int] = (50, 200, 1000)
    strategies: Sequence[str] = ("random", "frequency", "frequency-heldout", "frequency-data", "semantic")
    n_topics: int | None = None
    lda_iter: int = 10
    lda_doc_iter: int = 20
    top_n: int = 10
    vocab_size: int = 20000
    test_fraction: float = 0.25
    skip_duplicate_ratios: bool = True
    max_nonzero: int = 3_000_000
    #: SynTF rows beside LPLP: one per (epsilon, output length n) (``precision`` column = n); empty: none
    syntf_lengths: Sequence[int] = ()
    #: SynTF's public similarity: ``k`` nearest embedding neighbours (0: the identity)
    syntf_neighbours: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Check every field; raise InvalidParameterError naming the bad one."""
        super().__post_init__()
        if self.dataset not in DATASETS:
            raise InvalidParameterError("dataset", self.dataset, "one of " + ", ".join(DATASETS))
        check_int("n_docs", self.n_docs, minimum=20)
        object.__setattr__(self, "precisions", tuple(check_epsilon(p, "precisions") for p in self.precisions))
        object.__setattr__(self, "bins", tuple(check_int("bins", k, minimum=2) for k in self.bins))
        object.__setattr__(
            self, "strategies", tuple(check_choice("strategies", s, EVAL_STRATEGIES) for s in self.strategies)
        )
        if self.n_topics is not None:
            check_int("n_topics", self.n_topics, minimum=2)
        check_int("lda_iter", self.lda_iter, minimum=1)
        check_int("lda_doc_iter", self.lda_doc_iter, minimum=1)
        check_int("max_nonzero", self.max_nonzero, minimum=1)
        object.__setattr__(
            self, "syntf_lengths", tuple(check_int("syntf_lengths", n, minimum=1) for n in self.syntf_lengths)
        )
        check_int("syntf_neighbours", self.syntf_neighbours, minimum=0)
        check_int("top_n", self.top_n, minimum=2)
        if not 0.05 <= self.test_fraction <= 0.5:
            raise InvalidParameterError("test_fraction", self.test_fraction, "a number in [0.05, 0.5]")

    def repeat_seeds(self, randomness: ExperimentRandomness) -> list[int]:
        """The seed of each repeat: ``random_state + r``, or drawn from ``randomness`` without an int seed."""
        if isinstance(self.random_state, int | np.integer):
            return [int(self.random_state) + r for r in range(self.repeats)]
        return [randomness.seed(r) for r in range(self.repeats)]

    def noise_settings(self) -> list[tuple[float, float]]:
        """(eps, N) pairs; only eps/N matters, so duplicate ratios are skipped by default."""
        out: list[tuple[float, float]] = []
        seen: set[float] = set()
        for n in self.precisions:
            for e in self.epsilons:
                r = round(e / n, 12)
                if self.skip_duplicate_ratios and r in seen:
                    continue
                seen.add(r)
                out.append((e, n))
        return out

    def settings(self, entropy: int) -> dict[str, Any]:
        """The fields as JSON-able settings (``random_state``: the seed or the fresh entropy used)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["random_state"] = self.describe_random_state(entropy)
        return out


def _split(labels: Sequence[str], fraction: float, seed: int) -> npt.NDArray[np.bool_]:
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


#: the setting of a bag-of-words run; the per-run columns besides the metrics
KEYS = ("dataset", "kind", "strategy", "bins", "epsilon", "precision")
_RUN_COLUMNS = ("documents", "topics", "eps_over_n", "seed", "seconds", "note")
_METRICS = ("jaccard", "jaccard_bins", "jaccard_noise", "chance_bins", "exclusivity", "npmi", "accuracy", "snr")
_ALL_METRICS = (*_METRICS, "majority")


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
    labels = [lab for lab, k in zip(labels, keep_docs.tolist(), strict=True) if k]
    n_topics = config.n_topics or len(set(labels))
    data_freq = np.asarray(x.sum(axis=0), dtype=np.float64).ravel()
    # the public GloVe-rank prior (sums to ~10) breaks ties between held-out words never seen
    heldout_freq = count_words([list(heldout)], vocab) + vocab.frequencies if heldout is not None else None
    settings = config.noise_settings()
    bins = [k for k in config.bins if k <= vocab.size]
    seeds = config.repeat_seeds(randomness)
    n_conditions = len(seeds) * (
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
        f"{config.dataset}: {x.shape[0]:,} documents with counted words, vocabulary {vocab.size:,} "
        f"(coverage {n_counted / max(n_tok, 1):.1%} of word tokens incl. stop words), {n_topics} topics, "
        f"{n_conditions} fits"
    )
    results = Results(
        config.dataset, KEYS, settings={**config.settings(randomness.entropy), "entropy": randomness.entropy}
    )
    nan = math.nan

    def add(
        kind: str,
        strategy: str,
        k: int,
        t0: float,
        metrics: Mapping[str, float] | None = None,
        *,
        eps: float = math.inf,
        prec: float = nan,
        acc: float = nan,
        note: str = "",
    ) -> None:
        run = {
            "dataset": config.dataset,
            "kind": kind,
            "strategy": strategy,
            "bins": k,
            "epsilon": eps,
            "precision": prec,
            "repeat": repeat,
            "documents": int(x.shape[0]),
            "topics": n_topics,
            "eps_over_n": eps / prec if kind == "private" else math.inf,
            "seed": seed,
            "seconds": time.perf_counter() - t0,
            "note": note,
        }
        values = {m: (metrics or {}).get(m, nan) for m in _METRICS} | {"accuracy": acc, "majority": majority}
        for metric, value in values.items():
            results.add(**run, metric=metric, value=value)
        report.say(_row_line(run | values))
        advance(1)

    def lda(counts: sp.spmatrix, seed: int) -> npt.NDArray[np.float64]:
        return fit_lda(counts, n_topics, max_iter=config.lda_iter, seed=seed, doc_iter=config.lda_doc_iter)

    with report.bar(n_conditions, "evaluating") as advance:
        for repeat, seed in enumerate(seeds):  # noqa: B007 - read by add()
            train = _split(labels, config.test_fraction, seed)
            majority = majority_accuracy(labels, train)
            t0 = time.perf_counter()
            ref = lda(x, seed)
            acc = lsa_accuracy(x, labels, train, seed=seed)
            m_ref = {**_word_metrics(ref, ref, x, config.top_n), "jaccard_bins": 1.0, "snr": math.inf}
            add("reference", "none", vocab.size, t0, m_ref, acc=acc)
            t0 = time.perf_counter()
            ref2 = lda(x, seed + 1000)
            m_ref2 = {**_word_metrics(ref, ref2, x, config.top_n), "snr": math.inf}
            add("reference-reseeded", "none", vocab.size, t0, m_ref2)
            for strategy in config.strategies:
                for k in [vocab.size] if strategy == "none" else bins:
                    bmap = _bin_map(strategy, vocab, k, seed, data_freq, heldout_freq)
                    weights = heldout_freq if strategy == "frequency-heldout" else vocab.frequencies
                    assert weights is not None  # noqa: S101 - checked above
                    c = bmap.apply(x)
                    ref_bins = np.asarray(bmap.matrix().T @ ref.T).T  # reference topics seen through the bins
                    chance = chance_jaccard(k, config.top_n)
                    t0 = time.perf_counter()
                    # without compression the clean data are the reference's: reuse its fit
                    clean_bins = ref if strategy == "none" else lda(c, seed)
                    add(
                        "clean",
                        strategy,
                        k,
                        t0,
                        {
                            **_word_metrics(ref, bmap.expand(clean_bins, weights), x, config.top_n),
                            "jaccard_bins": jaccard_top_words(ref_bins, clean_bins, config.top_n),
                            "chance_bins": chance,
                            "snr": math.inf,
                        },
                        acc=lsa_accuracy(c, labels, train, seed=seed),
                    )
                    for eps, prec in settings:
                        t0 = time.perf_counter()
                        mech = TwoSidedGeometric(eps, prec, clamp=True)
                        # non-zero entries after clamping: the counts plus P(K >= 1) = alpha / (1 + alpha) of all
                        expected_nnz = c.nnz + c.shape[0] * k * mech.alpha / (1.0 + mech.alpha)
                        if expected_nnz > config.max_nonzero:
                            report.say(
                                f"  skipped private {strategy} k={k} eps={eps:g} N={prec:g}: about "
                                f"{expected_nnz:,.0f} non-zero noisy entries > max_nonzero={config.max_nonzero:,}"
                            )
                            add("private", strategy, k, t0, eps=eps, prec=prec, note="skipped: too dense")
                            continue
                        noise_rng = np.random.default_rng([seed, round(eps * 1000), round(prec * 1000), k])
                        priv = BowPrivatizer(BowVectorizer(vocab), mech, bmap)
                        m, noise = priv.privatize_counts(x, noise_rng)
                        phi_bins = lda(m, seed)
                        add(
                            "private",
                            strategy,
                            k,
                            t0,
                            {
                                **_word_metrics(ref, bmap.expand(phi_bins, weights), x, config.top_n),
                                "jaccard_bins": jaccard_top_words(ref_bins, phi_bins, config.top_n),
                                "jaccard_noise": jaccard_top_words(clean_bins, phi_bins, config.top_n),
                                "chance_bins": chance,
                                "snr": noise.snr,
                            },
                            eps=eps,
                            prec=prec,
                            acc=lsa_accuracy(m, labels, train, seed=seed),
                        )
            # SynTF beside LPLP: synthetic vectors over the whole vocabulary (precision column = length n)
            for eps in config.epsilons:
                for n_terms in config.syntf_lengths:
                    t0 = time.perf_counter()
                    syn = SynTF(eps, n_terms, similarity=similarity)
                    m = syn.privatize(x, np.random.default_rng([seed, round(eps * 1000), n_terms, 7]))
                    phi = lda(m, seed)
                    add(
                        "private",
                        "syntf" if similarity is None else f"syntf-nn{config.syntf_neighbours}",
                        vocab.size,
                        t0,
                        {
                            **_word_metrics(ref, phi, x, config.top_n),
                            "jaccard_bins": jaccard_top_words(ref, phi, config.top_n),
                            "chance_bins": chance_jaccard(vocab.size, config.top_n),
                            "snr": math.nan,
                        },
                        eps=eps,
                        prec=float(n_terms),
                        acc=lsa_accuracy(m, labels, train, seed=seed),
                    )
    return results


def majority_accuracy(labels: Sequence[str], train: npt.NDArray[np.bool_]) -> float:
    """Accuracy on the test rows of always predicting the most frequent training label."""
    y = np.asarray(labels)
    values, counts = np.unique(y[train], return_counts=True)
    return float(np.mean(y[~train] == values[np.argmax(counts)]))


def chance_jaccard(k: int, n: int) -> float:
    """Expected Jaccard similarity of two independent uniformly random ``n``-subsets of ``k`` items."""
    from scipy.stats import hypergeom

    n = min(n, k)
    i = np.arange(0, n + 1)
    p = hypergeom(k, n, n).pmf(i)
    return float(np.sum(p * i / (2 * n - i)))


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


def _word_metrics(
    ref: npt.NDArray[np.float64], phi: npt.NDArray[np.float64], x: sp.spmatrix, n: int
) -> dict[str, float]:
    return {
        "jaccard": jaccard_top_words(ref, phi, n),
        "exclusivity": exclusivity(phi, n),
        "npmi": npmi_coherence(phi, x, n),
    }


def _row_line(r: dict[str, Any]) -> str:
    return (
        f"{r['kind']:>9} {r['strategy']:>14} k={r['bins']:<6} eps={r['epsilon']:<5g} N={r['precision']:<4g} "
        f"J_words={r['jaccard']:.3f} J_bins={r['jaccard_bins']:.3f} J_noise={r['jaccard_noise']:.3f} "
        f"excl={r['exclusivity']:.3f} npmi={r['npmi']:.3f} acc={r['accuracy']:.3f} snr={r['snr']:.3g} "
        f"({r['seconds']:.1f}s)"
    )


# ------------------------------------------------------------------------ output
#: the columns of results.csv: one row per (condition, seed), a column per metric
_COLUMNS = [
    "dataset",
    "documents",
    "topics",
    "kind",
    "strategy",
    "bins",
    "epsilon",
    "precision",
    "eps_over_n",
    "seed",
    *_METRICS[:-2],
    "accuracy",
    "majority",
    "snr",
    "seconds",
    "note",
]


def write_results(
    results: Results,
    folder: str | Path,
    config: EvalConfig | Sequence[EvalConfig] | None = None,
) -> list[Path]:
    """``results.csv`` (one row per fit), ``results.md`` (mean over seeds), ``summary.md`` and ``config.json``
    (the settings of ``results``, or of ``config`` when given)."""
    json_files: dict[str, Any] = {}
    if config is not None:
        configs = [config] if isinstance(config, EvalConfig) else list(config)
        payload: Any = [asdict(c) for c in configs]
        json_files["config.json"] = payload[0] if len(payload) == 1 else payload
    elif results.settings:
        json_files["config.json"] = results.settings
    written = write_files(
        folder,
        tables={"results.csv": (results.wide(extra=_RUN_COLUMNS), _COLUMNS)},
        texts={"results.md": markdown_table(results), "summary.md": summary_tables(results)},
        json_files=json_files,
    )
    return list(written.values())


_INT_COLUMNS = ("documents", "topics", "bins", "seed")
_TEXT_COLUMNS = ("dataset", "kind", "strategy", "note")


def read_results(path: str | Path) -> Results:
    """Read a ``results.csv`` written by :func:`write_results` back into results (to re-render tables and plots)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"results file {p} does not exist")
    rows: list[dict[str, Any]] = []
    with open(p, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = {"dataset", "kind", "strategy", "bins", "epsilon", "precision"} - set(reader.fieldnames or ())
        if missing:
            raise DataError(f"{p} is not a results.csv of `deniable bow evaluate` (missing {sorted(missing)})")
        for lineno, raw in enumerate(reader, start=2):
            row: dict[str, Any] = {}
            try:
                for key, value in raw.items():
                    if key in _TEXT_COLUMNS:
                        row[key] = value or ""
                    elif key in _INT_COLUMNS:
                        row[key] = int(value)
                    else:
                        row[key] = float(value) if value not in ("", None) else math.nan
            except ValueError:
                raise DataError(f"{p} line {lineno}: column {key!r} is not a number") from None
            row.setdefault("note", "")
            row["repeat"] = row.get("seed", 0)
            rows.append(row)
    name = rows[0]["dataset"] if rows else p.stem
    return Results.from_wide(name, KEYS, rows, _ALL_METRICS)


_SUMMARY_METRICS = (
    ("accuracy", "LSA + random forest accuracy"),
    ("jaccard_bins", "Jaccard of top-10 bins vs the reference topics seen through the same bins"),
    ("jaccard", "Jaccard of top-10 words vs the reference topics"),
    ("npmi", "NPMI coherence of the top-10 words"),
)


def summary_tables(results: Results, metrics: Sequence[str] | None = None) -> str:
    """Compact pivot tables: one per (dataset, metric), rows strategy x bins, columns clean then eps/N.

    Cells are means over seeds. The reference (clean, uncompressed) and the reseeded
    reference (how much LDA itself varies) are the first rows.
    """
    agg = _aggregate(results)
    wanted = [(m, t) for m, t in _SUMMARY_METRICS if metrics is None or m in metrics]
    out: list[str] = []

    def cell(v: float, note: str = "") -> str:
        if note:
            return "skipped"
        return "–" if math.isnan(v) else f"{v:.3f}"

    for dataset in sorted({a["dataset"] for a in agg}):
        ds = [a for a in agg if a["dataset"] == dataset]
        settings = sorted(
            {(a["epsilon"], a["precision"]) for a in ds if a["kind"] == "private"},
            key=lambda ep: (-ep[0] / ep[1], ep),
        )
        lines_ref = [a for a in ds if a["kind"] in ("reference", "reference-reseeded")]
        conditions: list[tuple[str, int]] = []
        for a in ds:
            if a["kind"] in ("clean", "private") and (a["strategy"], a["bins"]) not in conditions:
                conditions.append((a["strategy"], a["bins"]))
        index = {(a["kind"], a["strategy"], a["bins"], a["epsilon"], a["precision"]): a for a in ds}
        for metric, title in wanted:
            out.append(f"**{dataset}: {title}**\n")
            head = ["strategy", "bins", "clean"] + [f"eps/N={e / n:.3g} (eps={e:g}, N={n:g})" for e, n in settings]
            out.append("| " + " | ".join(head) + " |")
            out.append("|" + "---|" * len(head))
            for a in lines_ref:
                label = "reference (uncompressed)" if a["kind"] == "reference" else "reference, LDA reseeded"
                out.append(f"| {label} | {a['bins']} | {cell(a[metric])} |" + " |" * len(settings))
            for strategy, k in conditions:
                # (clean rows have N = NaN, which never compares equal: no dict lookup for them)
                clean = next(
                    (c for c in ds if c["kind"] == "clean" and (c["strategy"], c["bins"]) == (strategy, k)), None
                )
                cells = [cell(clean[metric]) if clean else "–"]
                for e, n in settings:
                    priv = index.get(("private", strategy, k, e, n))
                    cells.append(cell(priv[metric], priv["note"]) if priv else "–")
                out.append(f"| {strategy} | {k} | " + " | ".join(cells) + " |")
            if metric == "accuracy":
                out.append(f"\nmajority-class accuracy: {_majority(agg, dataset):.3f}")
            out.append("")
    return "\n".join(out).rstrip()


def _aggregate(results: Results) -> list[dict[str, Any]]:
    """One dict per setting: each metric's mean over seeds and ``<metric>_sd`` (from :meth:`Results.summary`)."""
    notes: dict[tuple[Any, ...], set[str]] = {}
    for r in results.rows:
        notes.setdefault(tuple(str(r[k]) for k in KEYS), set()).add(r.get("note", ""))
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for s in results.summary():
        key = tuple(str(s[k]) for k in KEYS)
        agg = out.get(key)
        if agg is None:
            agg = {k: s[k] for k in KEYS}
            agg["eps_over_n"] = s["epsilon"] / s["precision"] if s["kind"] == "private" else math.inf
            agg["note"] = "; ".join(sorted(notes.get(key, set()) - {""}))
            agg["seeds"] = 0
            out[key] = agg
        agg[s["metric"]] = s["mean"]
        agg[s["metric"] + "_sd"] = s["sd"]
        agg["seeds"] = max(agg["seeds"], s["n"])
    for agg in out.values():
        for m in _ALL_METRICS:
            agg.setdefault(m, math.nan)
            agg.setdefault(m + "_sd", math.nan)
    return list(out.values())


def _majority(agg: Sequence[Mapping[str, Any]], dataset: str) -> float:
    return next((float(a["majority"]) for a in agg if a["dataset"] == dataset), math.nan)


def markdown_table(results: Results) -> str:
    """Mean over seeds (± standard deviation when there are several) as a markdown table."""
    agg = _aggregate(results)
    head = (
        "| dataset | kind | strategy | bins | eps | N | eps/N | Jaccard words | Jaccard bins | "
        "Jaccard vs clean bins | chance (bins) | exclusivity | NPMI | accuracy | signal/noise |"
    )
    lines = [head, "|" + "---|" * 15]

    def f(v: float, sd: float = math.nan) -> str:
        if isinstance(v, float) and math.isnan(v):
            return "–"
        return f"{v:.3f}" + (f" ± {sd:.3f}" if not math.isnan(sd) else "")

    def g(v: float) -> str:
        return "–" if (isinstance(v, float) and (math.isnan(v) or math.isinf(v))) else f"{v:g}"

    def snr(v: float, note: str) -> str:
        if note:
            return note
        return "–" if math.isnan(v) or math.isinf(v) else f"{v:.3g}"

    for a in agg:
        lines.append(
            f"| {a['dataset']} | {a['kind']} | {a['strategy']} | {a['bins']} | {g(a['epsilon'])} | "
            f"{g(a['precision'])} | {g(a['eps_over_n'])} | {f(a['jaccard'], a['jaccard_sd'])} | "
            f"{f(a['jaccard_bins'], a['jaccard_bins_sd'])} | {f(a['jaccard_noise'], a['jaccard_noise_sd'])} | "
            f"{f(a['chance_bins'])} | "
            f"{f(a['exclusivity'], a['exclusivity_sd'])} | {f(a['npmi'], a['npmi_sd'])} | "
            f"{f(a['accuracy'], a['accuracy_sd'])} | {snr(a['snr'], a['note'])} |"
        )
    datasets = dict.fromkeys(a["dataset"] for a in agg)
    notes = [f"{d}: majority-class accuracy {m:.3f}" for d in datasets if not math.isnan(m := _majority(agg, d))]
    return "\n".join(lines + (["", *notes] if notes else []))


_PLOT_LABELS = {
    "jaccard": "Jaccard, top words",
    "jaccard_bins": "Jaccard, top bins",
    "jaccard_noise": "Jaccard vs clean bins",
    "exclusivity": "exclusivity",
    "npmi": "NPMI coherence",
    "accuracy": "LSA + RF accuracy",
}


def plot_results(results: Results, folder: str | Path) -> list[Path]:
    """One PNG per dataset: each metric against eps/N, one panel per k, a line per strategy.

    Dashed lines: the clean compressed baseline of each strategy. Dotted black: the
    clean uncompressed reference — for the Jaccard of top words, the reference refitted
    with another LDA seed (1.0 against itself says nothing); dash-dot grey: chance
    (Jaccard of top bins) or the majority class (accuracy).
    """
    from matplotlib import rcParams
    from matplotlib.ticker import NullFormatter

    from ..report import new_figure, save_figure

    out = Path(folder)
    agg = _aggregate(results)
    paths = []
    metrics = tuple(_PLOT_LABELS)
    colors = rcParams["axes.prop_cycle"].by_key()["color"]
    for dataset in sorted({a["dataset"] for a in agg}):
        ds = [a for a in agg if a["dataset"] == dataset]
        ks = sorted({a["bins"] for a in ds if a["kind"] in ("private", "clean") and a["strategy"] != "none"})
        if not ks:
            continue
        strategies = sorted({a["strategy"] for a in ds if a["kind"] == "private" and a["strategy"] != "none"})
        ref = next((a for a in ds if a["kind"] == "reference"), None)
        reseeded = next((a for a in ds if a["kind"] == "reference-reseeded"), None)
        majority = _majority(agg, dataset)
        ratios = sorted({a["eps_over_n"] for a in ds if a["kind"] == "private"})
        fig = new_figure(3.6 * len(ks), 2.5 * len(metrics))
        axes = fig.subplots(len(metrics), len(ks), squeeze=False)
        for j, k in enumerate(ks):
            for i, metric in enumerate(metrics):
                ax = axes[i][j]
                for si, st in enumerate(strategies):
                    color = colors[si % len(colors)]
                    pts = sorted(
                        (a["eps_over_n"], a[metric])
                        for a in ds
                        if a["kind"] == "private" and a["strategy"] == st and a["bins"] == k
                    )
                    if pts:
                        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color, label=st, ms=4)
                    clean = [a[metric] for a in ds if a["kind"] == "clean" and a["strategy"] == st and a["bins"] == k]
                    if clean and not math.isnan(clean[0]):
                        ax.axhline(clean[0], ls="--", lw=1, color=color)
                base = reseeded if metric == "jaccard" else ref
                if (
                    base is not None
                    and metric not in ("jaccard_bins", "jaccard_noise")
                    and not math.isnan(base[metric])
                ):
                    label = "clean, uncompressed" + (" (LDA reseeded)" if metric == "jaccard" else "")
                    ax.axhline(base[metric], ls=":", color="black", lw=1.2, label=label)
                if metric == "jaccard_bins":
                    ax.axhline(chance_jaccard(k, 10), ls="-.", color="grey", lw=1, label="chance")
                if metric == "accuracy" and not math.isnan(majority):
                    ax.axhline(majority, ls="-.", color="grey", lw=1, label="majority class")
                ax.set_xscale("log")
                ax.set_xticks(ratios)
                ax.set_xticklabels([f"{r:.2g}" for r in ratios])
                ax.xaxis.set_minor_formatter(NullFormatter())
                ax.set_title(f"k={k}", fontsize=9)
                ax.set_ylabel(_PLOT_LABELS[metric], fontsize=8)
                ax.tick_params(labelsize=7)
                if i == len(metrics) - 1:
                    ax.set_xlabel("eps / N")
                if j == 0 and i in (0, 1, len(metrics) - 1):
                    ax.legend(fontsize=6)
        fig.suptitle(f"{dataset}: LPLP bag-of-words utility against eps/N (dashed: clean compressed)", fontsize=10)
        paths.append(save_figure(fig, out / f"{dataset}.png", dpi=72))
    return paths
