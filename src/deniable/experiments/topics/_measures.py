"""The measures of the topic evaluation: LDA fits, topic matching and the scores of matched topics.

Owns the numbers one fit is judged by (Jaccard of top words, exclusivity, NPMI
coherence, LSA + random-forest accuracy) and their chance levels (majority class,
Jaccard of random top sets). Imports numpy/scipy and, inside the functions that need
it, scikit-learn; of deniable only the errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from ..._errors import DeniableError, InvalidParameterError

__all__ = [
    "chance_jaccard",
    "exclusivity",
    "fit_lda",
    "jaccard_top_words",
    "lsa_accuracy",
    "majority_accuracy",
    "match_topics",
    "npmi_coherence",
    "require_sklearn",
    "top_words",
    "word_metrics",
]


def require_sklearn() -> Any:
    """Import scikit-learn or raise a clear error."""
    try:
        import sklearn
    except ImportError:  # pragma: no cover - depends on the install
        raise DeniableError("the bag-of-words evaluation needs scikit-learn: pip install 'deniable[eval]'") from None
    return sklearn


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


def word_metrics(
    ref: npt.NDArray[np.float64], phi: npt.NDArray[np.float64], x: sp.spmatrix, n: int
) -> dict[str, float]:
    """The word-level scores of topics ``phi`` (over words): Jaccard against the reference ``ref``,
    exclusivity and NPMI coherence on the clean counts ``x``, each over the top ``n`` words."""
    return {
        "jaccard": jaccard_top_words(ref, phi, n),
        "exclusivity": exclusivity(phi, n),
        "npmi": npmi_coherence(phi, x, n),
    }


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
