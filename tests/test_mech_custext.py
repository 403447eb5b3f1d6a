"""CusText: the customized mapping takes the MOST similar words; sets partition the vocabulary (issue 17)."""

from __future__ import annotations

import numpy as np
import pytest

from deniable import Embedding
from deniable.mechanisms import make_mechanism
from deniable.mechanisms.custext import customized_mapping


def random_embedding(n: int = 60, dim: int = 5, seed: int = 0) -> Embedding:
    r = np.random.default_rng(seed)
    return Embedding([f"w{i}" for i in range(n)], r.normal(size=(n, dim)).astype(np.float32))


def sequential_greedy(vectors: np.ndarray, k: int) -> list[list[int]]:
    """The paper's mapping, one word at a time (reference)."""
    u = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    mapped = np.zeros(len(u), dtype=bool)
    groups = []
    for w in range(len(u)):
        if mapped[w]:
            continue
        free = np.flatnonzero(~mapped)
        sims = u[free] @ u[w]
        sims[free == w] = np.inf
        g = free[np.argsort(-sims, kind="stable")][:k]
        mapped[g] = True
        groups.append(g.tolist())
    return groups


@pytest.mark.parametrize("block", [1, 3, 64])
def test_mapping_is_the_sequential_greedy(block: int) -> None:
    emb = random_embedding()
    got = customized_mapping(emb.vectors, 7, leaders_per_block=block)
    want = sequential_greedy(emb.vectors.astype(np.float64), 7)
    assert [row[row >= 0].tolist() for row in got] == want
    flat = got[got >= 0]
    assert sorted(flat.tolist()) == list(range(emb.size))  # a partition


def test_output_set_holds_the_most_similar_words_not_the_least() -> None:
    """Regression: a peer sorts cosine similarity ascending and keeps the K LEAST similar words."""
    emb = random_embedding(40, 4, seed=3)
    mech = make_mechanism("custext", emb, 2.0, k=5)
    u = emb.vectors / np.linalg.norm(emb.vectors, axis=1, keepdims=True)
    cos = u @ u[0]
    out = mech.output_set(0)  # word 0 leads the first set: all words were free
    assert out[0] == 0
    assert sorted(out.tolist()) == sorted(np.argsort(-cos)[:5].tolist())
    assert not set(out.tolist()) & set(np.argsort(cos)[:5].tolist())


def test_probabilities_grow_with_similarity_and_the_bound_is_within_the_set() -> None:
    emb = random_embedding(30, 4, seed=4)
    mech = make_mechanism("custext", emb, 3.0, k=6)
    ids, probs = mech.distribution(7)
    u = emb.vectors / np.linalg.norm(emb.vectors, axis=1, keepdims=True)
    cos = u[ids] @ u[7]
    order = np.argsort(cos)
    assert np.all(np.diff(probs[order]) >= -1e-12)
    assert probs.max() / probs.min() == pytest.approx(np.exp(3.0 / 2))  # normalised score spans [0, 1]
    others = [w for w in range(30) if w not in set(ids.tolist())]
    assert mech.guarantee(7, ids[1]) == pytest.approx(3.0)
    assert mech.guarantee(7, others[0]) == np.inf


def test_custext_plus_keeps_stopwords_only() -> None:
    words = ["the", "and", "hockey", "puck", "rocket", "orbit", "nasa", "goal"]
    r = np.random.default_rng(1)
    emb = Embedding(words, r.normal(size=(8, 3)).astype(np.float32))
    plus = make_mechanism("custext_plus", emb, 0.1, k=4)
    plain = make_mechanism("custext", emb, 0.1, k=4)
    ids = np.repeat(np.arange(8), 400)
    out = plus.privatize(ids, np.random.default_rng(0))
    assert np.all(out[ids <= 1] == ids[ids <= 1])
    assert np.any(out[ids >= 2] != ids[ids >= 2])
    assert np.any(plain.privatize(ids, np.random.default_rng(0))[ids <= 1] != ids[ids <= 1])
    assert "stopwords" in plus.describe()["not_protected"]


def test_mapping_is_cached_on_disk_and_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    import deniable.mechanisms.custext as mod

    emb = random_embedding(50, 4, seed=9)
    first = make_mechanism("custext", emb, 1.0, k=5)
    want = first.output_set(3)
    assert emb.cache_path("custext", "mapping-k5-v1.npy").is_file()

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("recomputed")

    monkeypatch.setattr(mod, "customized_mapping", boom)
    again = make_mechanism("custext_plus", emb, 2.0, k=5)  # same public mapping, other epsilon
    np.testing.assert_array_equal(again.output_set(3), want)
    with pytest.raises(AssertionError, match="recomputed"):
        make_mechanism("custext", emb, 1.0, k=5, cache=False).output_set(3)
