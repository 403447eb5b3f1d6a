"""The public n-gram model (deniable.ngram): Kneser-Ney probabilities sum to one per history, the npz round
trip, and the decoders (Viterbi, posterior marginals) against brute-force enumeration on tiny inputs."""

from __future__ import annotations

import gzip
import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_toy_embedding
from deniable._errors import DataError, InvalidParameterError
from deniable.ngram import (
    NgramModel,
    decode,
    load_ngram,
    posterior_marginals,
    train_ngram,
    viterbi,
)

CORPUS = (
    "the puck was a great goal\n"
    "the rocket was a good launch, nasa is great\n"
    "The game is good. the match was great zzzunknown\n"
    "nasa nasa esa orbit orbit\n"
    "the puck the puck\n"
)


@pytest.fixture
def model(tmp_path: Path) -> NgramModel:
    path = tmp_path / "public.txt"
    path.write_text(CORPUS, encoding="utf-8")
    return train_ngram(make_toy_embedding(), path)


def test_probabilities_sum_to_one_for_every_history(model: NgramModel) -> None:
    v = model.vocab_size
    words = np.arange(v + 1)
    for h in range(v + 2):  # every word, <unk> and <s>
        p = np.exp(model.log_prob(h, words))
        assert np.all(p > 0)
        assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.exp(model.unigram()).size == v + 1 and model.unigram().sum() == pytest.approx(1.0)


def test_counts_follow_the_one_tokenizer(model: NgramModel) -> None:
    emb = make_toy_embedding()
    ix = emb.index_of
    # "The" folds to "the"; "zzzunknown" is <unk>; every line starts with <s>
    assert model._pair_counts(np.array(model.bos), np.array(ix["the"])) == 4  # lines 1, 2, 3 ("The") and 5
    assert model._pair_counts(np.array(model.bos), np.array(ix["nasa"])) == 1
    assert model._pair_counts(np.array(ix["great"]), np.array(model.unk)) == 1
    assert model._pair_counts(np.array(ix["nasa"]), np.array(ix["nasa"])) == 1
    assert model.tokens == sum(len(line.replace(",", " ").replace(".", " ").split()) for line in CORPUS.splitlines())
    # a seen bigram is more probable than an unseen one after the same history
    assert model.log_prob(ix["the"], ix["puck"]) > model.log_prob(ix["the"], ix["orbit"])


def test_save_load_round_trip_and_vocabulary_check(model: NgramModel, tmp_path: Path) -> None:
    path = model.save(tmp_path / "m.npz")
    back = load_ngram(path, make_toy_embedding())
    h = np.arange(model.bos + 1)[:, None]
    w = np.arange(model.unk + 1)[None, :]
    assert np.array_equal(back.log_prob(h, w), model.log_prob(h, w))
    assert np.array_equal(back.lines, model.lines) and back.source == "public.txt"
    other = make_toy_embedding().subset(10)
    with pytest.raises(InvalidParameterError, match="ngram"):
        load_ngram(path, other)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(DataError, match="n-gram"):
        load_ngram(bad)


def test_gzip_and_bad_files(tmp_path: Path) -> None:
    emb = make_toy_embedding()
    gz = tmp_path / "c.txt.gz"
    gz.write_bytes(gzip.compress(CORPUS.encode()))
    plain = tmp_path / "c.txt"
    plain.write_text(CORPUS, encoding="utf-8")
    assert np.array_equal(train_ngram(emb, gz).keys, train_ngram(emb, plain).keys)
    with pytest.raises(InvalidParameterError, match="ngram"):
        train_ngram(emb, tmp_path / "missing.txt")
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(DataError, match="UTF-8"):
        train_ngram(emb, binary)


def test_sparse_lookup_equals_dense(model: NgramModel) -> None:
    sparse = NgramModel(model.vocab_size, model.keys, model.counts, model.vocab_hash)
    object.__setattr__(sparse, "_dense", None)
    h = np.arange(model.bos + 1)[:, None]
    w = np.arange(model.unk + 1)[None, :]
    assert np.allclose(sparse.log_prob(h, w), model.log_prob(h, w))


# ----------------------------------------------------------------------------- decoders
def _brute(model: NgramModel, cand: np.ndarray, emis: np.ndarray, offsets: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Enumerate every path of every text: the best path and the posterior marginals."""
    best = np.empty(cand.shape[0], dtype=np.int64)
    marg = np.zeros(cand.shape)
    for a, b in itertools.pairwise(offsets):
        if a == b:
            continue
        scores = {}
        for path in itertools.product(range(cand.shape[1]), repeat=b - a):
            s, prev = 0.0, model.bos
            for t, j in zip(range(a, b), path, strict=True):
                s += float(model.log_prob(prev, cand[t, j])) + emis[t, j]
                prev = int(cand[t, j])
            scores[path] = s
        top = max(scores, key=lambda p: scores[p])
        best[a:b] = [cand[t, j] for t, j in zip(range(a, b), top, strict=True)]
        vals = np.array(list(scores.values()))
        w = np.exp(vals - vals.max())
        w /= w.sum()
        for (path, _), p in zip(scores.items(), w, strict=True):
            for t, j in zip(range(a, b), path, strict=True):
                marg[t, j] += p
    return best, marg


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 4), min_size=1, max_size=3),
    k=st.integers(1, 3),
    seed=st.integers(0, 2**31 - 1),
)
def test_decoders_equal_brute_force(
    lengths: list[int], k: int, seed: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("ng") / "c.txt"
    path.write_text(CORPUS, encoding="utf-8")
    model = train_ngram(make_toy_embedding(), path)
    r = np.random.default_rng(seed)
    t = sum(lengths)
    cand = r.integers(0, model.unk + 1, size=(t, k))
    emis = r.normal(scale=2.0, size=(t, k))
    offsets = [0, *itertools.accumulate(lengths)]
    best, marg = _brute(model, cand, emis, offsets)
    got = viterbi(model, cand, emis, offsets)
    # ties between equal-scoring paths are measure-zero with continuous emissions
    assert np.array_equal(got, best)
    if t:
        assert np.allclose(posterior_marginals(model, cand, emis, offsets), marg, atol=1e-9)
        assert np.array_equal(decode(model, cand, emis, offsets, method="marginal"), cand[np.arange(t), marg.argmax(1)])


def test_decoders_span_blocks_and_padding(model: NgramModel, monkeypatch: pytest.MonkeyPatch) -> None:
    import deniable.ngram as ng

    r = np.random.default_rng(3)
    cand = r.integers(0, model.unk + 1, size=(9, 3))
    emis = r.normal(size=(9, 3))
    emis[2, 1:] = -np.inf  # padding: only the first candidate possible
    offsets = [0, 4, 9]
    whole = viterbi(model, cand, emis, offsets)
    marg = posterior_marginals(model, cand, emis, offsets)
    monkeypatch.setattr(ng, "_POSITIONS_PER_BLOCK", 2)
    assert np.array_equal(viterbi(model, cand, emis, offsets), whole)
    assert np.allclose(posterior_marginals(model, cand, emis, offsets), marg)
    assert whole[2] == cand[2, 0] and marg[2, 0] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("cand", "emis", "offsets", "name"),
    [
        (np.zeros((2,), dtype=int), np.zeros(2), None, "candidates"),
        (np.full((2, 2), 99), np.zeros((2, 2)), None, "candidates"),
        (np.zeros((2, 2), dtype=int), np.full((2, 2), -np.inf), None, "emission"),
        (np.zeros((2, 2), dtype=int), np.zeros((2, 2)), [0, 3], "offsets"),
    ],
)
def test_decoder_input_errors_name_the_parameter(
    model: NgramModel, cand: np.ndarray, emis: np.ndarray, offsets: list[int] | None, name: str
) -> None:
    with pytest.raises(InvalidParameterError, match=name):
        viterbi(model, cand, emis, offsets)
    with pytest.raises(InvalidParameterError, match="method"):
        decode(model, np.zeros((1, 1), dtype=int), np.zeros((1, 1)), method="beam")


@pytest.mark.parametrize("method", ["viterbi", "marginal"])
def test_words_only_never_returns_unk(model: NgramModel, method: str) -> None:
    r = np.random.default_rng(4)
    cand = np.concatenate([r.integers(0, model.unk, size=(30, 3)), np.full((30, 1), model.unk)], axis=1)
    emis = r.normal(size=(30, 4))
    emis[:, 3] += 5.0  # <unk> the most likely value everywhere
    assert np.all(decode(model, cand, emis, [0, 10, 30], method=method) == model.unk)
    words = decode(model, cand, emis, [0, 10, 30], method=method, words_only=True)
    assert not np.any(words == model.unk) and np.all((words[:, None] == cand[:, :3]).any(axis=1))
    with pytest.raises(InvalidParameterError, match="candidates"):
        decode(model, cand[:, ::-1], emis, method="viterbi", words_only=True)
