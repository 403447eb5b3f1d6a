"""SynTF: the exact law against the document-level bound on a tiny vocabulary (every output
vector, every pair of documents), a twin claiming less that must fail, and the sampler."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from conftest import TOPIC_WORDS, two_topic_corpus
from deniable import InvalidParameterError
from deniable.bow import SynTF, Vocabulary, neighbour_similarity


def compositions(total: int, parts: int) -> list[tuple[int, ...]]:
    return [c for c in itertools.product(range(total + 1), repeat=parts) if sum(c) == total]


DOCS = [(1, 0, 0, 0), (0, 3, 0, 0), (2, 1, 0, 1), (1, 1, 1, 1), (0, 0, 0, 0), (5, 0, 0, 2)]
SIM = sp.csr_matrix(np.array([[1, 0.8, 0, 0], [0.8, 1, 0, 0.3], [0, 0, 1, 0.5], [0, 0.3, 0.5, 1]], dtype=np.float64))


def worst_log_ratio(mech: SynTF) -> float:
    outs = compositions(mech.length, 4)
    logp = np.array([mech.log_pmf(np.array(outs), d) for d in DOCS])
    assert np.allclose(np.exp(logp).sum(axis=1), 1.0)
    return max(float(np.max(logp[a] - logp[b])) for a, b in itertools.permutations(range(len(DOCS)), 2))


@pytest.mark.parametrize("similarity", [None, SIM])
@pytest.mark.parametrize("idf", [None, np.array([1.0, 2.0, 0.5, 1.5])])
@pytest.mark.parametrize(("eps", "length"), [(0.5, 3), (4.0, 3), (2.0, 1)])
def test_exact_law_respects_the_document_level_bound(similarity, idf, eps: float, length: int) -> None:  # type: ignore[no-untyped-def]
    mech = SynTF(eps, length, idf=idf, similarity=similarity)
    worst = worst_log_ratio(mech)
    assert worst <= mech.guarantee() + 1e-9
    assert worst > 0.2 * eps  # the documents differ enough for the check to bite


def test_a_twin_claiming_less_fails() -> None:
    """One-hot documents on different terms reach eps/2: a twin claiming 0.4 eps is caught."""
    mech = SynTF(3.0, 3)
    assert worst_log_ratio(mech) > 0.4 * 3.0 + 1e-3


def test_sampler_draws_the_multinomial() -> None:
    mech = SynTF(6.0, 4, similarity=SIM)
    doc = np.array([[2, 0, 1, 0]])
    p = mech.probabilities(doc)[0]
    n = 3_000
    out = mech.privatize(sp.csr_matrix(np.repeat(doc, n, axis=0)), np.random.default_rng(1))
    assert np.all(np.asarray(out.sum(axis=1)).ravel() == 4)
    totals = np.asarray(out.sum(axis=0)).ravel()
    chi = float(np.sum((totals - 4 * n * p) ** 2 / (4 * n * p)))
    assert stats.chi2.sf(chi, 3) > 1e-6
    twin = SynTF(1.0, 4, similarity=SIM).probabilities(doc)[0]  # the wrong law is rejected
    chi2 = float(np.sum((totals - 4 * n * twin) ** 2 / (4 * n * twin)))
    assert stats.chi2.sf(chi2, 3) < 1e-6


def test_parameters_are_checked() -> None:
    with pytest.raises(InvalidParameterError, match="epsilon"):
        SynTF(0.0)
    with pytest.raises(InvalidParameterError, match="length"):
        SynTF(1.0, 0)
    with pytest.raises(InvalidParameterError, match="similarity"):
        SynTF(1.0, similarity=sp.csr_matrix(np.array([[1.0, 2.0], [0.0, 1.0]])))
    with pytest.raises(InvalidParameterError, match="idf"):
        SynTF(1.0, idf=np.array([1.0, -1.0]))


def test_release_texts_and_neighbour_similarity(toy_embedding) -> None:  # type: ignore[no-untyped-def]
    vocab = Vocabulary.from_embedding(toy_embedding, size=18, stop_words=None)
    sim = neighbour_similarity(vocab, k=3, embedding=toy_embedding)
    assert sim.shape == (vocab.size, vocab.size) and np.allclose(sim.diagonal(), 1.0)
    assert sim.data.min() >= 0 and sim.data.max() <= 1 + 1e-12
    out = SynTF(2.0, 10, similarity=sim).release_texts(["hockey puck goal", None, ""], vocab, np.random.default_rng(0))
    assert out.shape == (3, vocab.size) and np.all(np.asarray(out.sum(axis=1)).ravel() == 10)


def test_topic_evaluation_has_syntf_rows_beside_lplp() -> None:
    pytest.importorskip("sklearn")
    from deniable.experiments.topics import EvalConfig, run_evaluation

    texts, labels = two_topic_corpus()
    cfg = EvalConfig(
        n_docs=40, epsilons=(50.0,), precisions=(1.0,), strategies=("none",), lda_iter=2, syntf_lengths=(8,)
    )
    rows = run_evaluation(cfg, texts=texts, labels=labels, vocabulary=Vocabulary(TOPIC_WORDS)).wide()
    syn = [r for r in rows if r["strategy"] == "syntf"]
    assert len(syn) == 1 and syn[0]["kind"] == "private" and syn[0]["precision"] == 8
    assert 0.0 <= syn[0]["accuracy"] <= 1.0
    assert any(r["kind"] == "private" and r["strategy"] == "none" for r in rows)  # LPLP still there
