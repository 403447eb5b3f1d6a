"""Contextual decoding (issue 44, prior="ngram:PATH"): library-level joint decode of madlib's noisy vectors."""

from __future__ import annotations

import inspect
import itertools
from typing import Any

import numpy as np
import pytest

from deniable._errors import InvalidParameterError
from deniable.mechanisms._contextual import contextual_candidates, contextual_decode
from deniable.ngram import NgramModel

V, D = 6, 3


def _toy() -> tuple[NgramModel, np.ndarray]:
    rng = np.random.default_rng(7)  # test fixture only: public toy data
    vectors = rng.normal(size=(V, D))
    w_out = V + 1
    bos = V + 1
    pairs = {(bos, 0): 5, (0, 1): 7, (1, 2): 3, (2, 3): 4, (3, 0): 2, (1, 4): 1, (bos, 5): 2, (5, 2): 6, (4, 4): 3}
    keys = np.array(sorted(h * w_out + w for h, w in pairs), dtype=np.int64)
    counts = np.array([pairs[(int(k) // w_out, int(k) % w_out)] for k in keys], dtype=np.int64)
    return NgramModel(vocab_size=V, keys=keys, counts=counts, vocab_hash="toy", source="toy"), vectors


def _noisy(n: int, seed: int) -> np.ndarray:
    _, vectors = _toy()
    rng = np.random.default_rng(seed)
    return vectors[rng.integers(0, V, n)] + rng.normal(scale=0.8, size=(n, D))


def _brute(model: NgramModel, vectors: np.ndarray, noisy: np.ndarray, eps: float) -> list[int]:
    """argmax over all V^T word sequences of sum log P(w_t | w_{t-1}) - eps ||v_t - phi(w_t)||."""
    dist = np.linalg.norm(noisy[:, None, :] - vectors[None, :, :], axis=2)
    best, arg = -np.inf, None
    for seq in itertools.product(range(V), repeat=noisy.shape[0]):
        hist = [model.bos, *seq[:-1]]
        s = float(model.log_prob(np.array(hist), np.array(seq)).sum()) - eps * float(
            dist[np.arange(len(seq)), seq].sum()
        )
        if s > best:
            best, arg = s, list(seq)
    assert arg is not None
    return arg


@pytest.mark.parametrize("eps", [0.5, 2.0, 8.0])
def test_joint_decode_equals_brute_force(eps: float) -> None:
    model, vectors = _toy()
    noisy = _noisy(8, seed=int(eps * 10))
    offsets = np.array([0, 3, 3, 8])  # an empty text in the middle
    out = contextual_decode(noisy, offsets, model, vectors, eps, k=V)
    want = _brute(model, vectors, noisy[:3], eps) + _brute(model, vectors, noisy[3:], eps)
    assert out.tolist() == want


def test_candidates_are_the_unigram_posterior_top_k() -> None:
    model, vectors = _toy()
    noisy = _noisy(20, seed=3)
    cand, emis = contextual_candidates(noisy, model, vectors, 2.0, 3)
    dist = np.linalg.norm(noisy[:, None, :] - vectors[None, :, :], axis=2)
    p1 = model.unigram()[:V]
    score = np.log(p1 / p1.sum())[None, :] - 2.0 * dist
    assert np.array_equal(cand, np.argsort(-score, axis=1, kind="stable")[:, :3])
    np.testing.assert_allclose(emis, -2.0 * np.take_along_axis(dist, cand, axis=1), atol=1e-9)
    # k = 1: the joint decode is the unigram posterior mode
    one = contextual_decode(noisy, [0, 20], model, vectors, 2.0, k=1)
    assert np.array_equal(one, cand[:, 0])


def test_output_does_not_depend_on_batching_or_other_texts() -> None:
    model, vectors = _toy()
    noisy = _noisy(30, seed=11)
    offsets = np.array([0, 4, 9, 9, 17, 30])
    together = contextual_decode(noisy, offsets, model, vectors, 1.5, k=4)
    alone = np.concatenate(
        [contextual_decode(noisy[a:b], [0, b - a], model, vectors, 1.5, k=4) for a, b in itertools.pairwise(offsets)]
    )
    assert np.array_equal(together, alone)
    # reordered texts: each text's output moves with it
    perm = [3, 0, 4, 1, 2]
    spans = [(int(offsets[i]), int(offsets[i + 1])) for i in perm]
    noisy2 = np.concatenate([noisy[a:b] for a, b in spans])
    off2 = np.r_[0, np.cumsum([b - a for a, b in spans])]
    out2 = contextual_decode(noisy2, off2, model, vectors, 1.5, k=4)
    assert np.array_equal(out2, np.concatenate([together[a:b] for a, b in spans]))


def test_marginal_method_and_words_only() -> None:
    model, vectors = _toy()
    noisy = _noisy(12, seed=5)
    out = contextual_decode(noisy, [0, 5, 12], model, vectors, 1.0, k=3, method="marginal")
    assert out.shape == (12,) and out.min() >= 0 and out.max() < V


def test_decoder_reads_only_noisy_vectors_offsets_and_public_data() -> None:
    params = list(inspect.signature(contextual_decode).parameters)
    assert params == ["noisy", "offsets", "model", "embedding", "eps", "k", "method"]
    model, vectors = _toy()
    noisy = _noisy(6, seed=9)
    frozen = [noisy.copy(), vectors.copy()]
    for a in frozen:
        a.setflags(write=False)
    out = contextual_decode(frozen[0], [0, 6], model, frozen[1], 3.0, k=V)
    assert out.tolist() == _brute(model, vectors, noisy, 3.0)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"offsets": [0, 7]}, "offsets"),
        ({"offsets": [1, 6]}, "offsets"),
        ({"eps": 0.0}, "eps"),
        ({"eps": float("nan")}, "eps"),
        ({"k": 0}, "k"),
        ({"k": V + 1}, "k"),
        ({"method": "beam"}, "method"),
    ],
)
def test_bad_parameters_are_named(kwargs: dict[str, object], name: str) -> None:
    model, vectors = _toy()
    args: dict[str, Any] = {"offsets": [0, 6], "eps": 1.0, "k": 2, "method": "viterbi"}
    args.update(kwargs)
    with pytest.raises(InvalidParameterError) as err:
        contextual_decode(
            _noisy(6, seed=1), args["offsets"], model, vectors, args["eps"], args["k"], method=args["method"]
        )
    assert name in str(err.value)


def test_bad_noisy_shape_and_embedding() -> None:
    model, vectors = _toy()
    with pytest.raises(InvalidParameterError, match="noisy"):
        contextual_decode(np.zeros((4, D + 1)), [0, 4], model, vectors, 1.0, k=2)
    with pytest.raises(InvalidParameterError, match="embedding"):
        contextual_decode(np.zeros((4, D)), [0, 4], model, vectors[:-1], 1.0, k=2)
