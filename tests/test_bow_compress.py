"""Compression maps: valid bin maps, l1 non-expansiveness (hypothesis), and each strategy's shape."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from deniable import InvalidParameterError
from deniable.bow import (
    BinMap,
    Vocabulary,
    frequency_bin_map,
    group_rows,
    identity_bin_map,
    make_bin_map,
    random_bin_map,
    semantic_bin_map,
)


def l1_rows(a: sp.spmatrix | np.ndarray) -> np.ndarray:
    dense = a.toarray() if sp.issparse(a) else np.asarray(a)
    return np.abs(dense).sum(axis=1)


@st.composite
def pair_and_map(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, BinMap]:
    n = draw(st.integers(1, 6))
    m = draw(st.integers(1, 12))
    k = draw(st.integers(1, m))
    counts = arrays(np.int64, (n, m), elements=st.integers(0, 9))
    x, x2 = draw(counts), draw(counts)
    bins = draw(arrays(np.int64, m, elements=st.integers(-1, k - 1)))
    return x, x2, BinMap(bins, k)


@settings(max_examples=200, deadline=None)
@given(pair_and_map())
def test_any_bin_map_is_l1_non_expansive(case: tuple[np.ndarray, np.ndarray, BinMap]) -> None:
    x, x2, bmap = case
    diff_after = l1_rows(bmap.apply(x) - bmap.apply(x2))
    assert np.all(diff_after <= l1_rows(x - x2))


@settings(max_examples=200, deadline=None)
@given(pair_and_map(), st.integers(1, 7))
def test_vertical_grouping_and_composition_are_l1_non_expansive(
    case: tuple[np.ndarray, np.ndarray, BinMap], g: int
) -> None:
    x, x2, bmap = case
    # whole-matrix l1 (a group mixes rows, so compare totals) ...
    assert abs(group_rows(x, g) - group_rows(x2, g)).sum() <= np.abs(x - x2).sum()
    composed = group_rows(bmap.apply(x), g) - group_rows(bmap.apply(x2), g)
    assert abs(composed).sum() <= np.abs(x - x2).sum()
    # ... and per document: changing one document moves only its group's row, by at most its own l1 change
    y = x.copy()
    y[0] = x2[0]
    delta = l1_rows(group_rows(bmap.apply(x), g) - group_rows(bmap.apply(y), g))
    assert delta.sum() <= np.abs(x[0] - x2[0]).sum()
    assert np.count_nonzero(delta) <= 1


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.data())
def test_builders_give_one_bin_per_feature_and_are_non_expansive(m: int, data: st.DataObject) -> None:
    k = data.draw(st.integers(1, m))
    freqs = data.draw(arrays(np.float64, m, elements=st.floats(0, 1e6)))
    for bmap in (random_bin_map(m, k, seed=data.draw(st.integers(0, 2**31))), frequency_bin_map(freqs, k)):
        assert bmap.bins.shape == (m,) and bmap.bins.min() >= 0 and bmap.bins.max() < k
        mat = bmap.matrix()
        assert mat.shape == (m, k)
        assert np.all(np.asarray(mat.sum(axis=1)).ravel() == 1)  # each feature in exactly one bin
        x = data.draw(arrays(np.int64, (2, m), elements=st.integers(0, 5)))
        out = bmap.apply(x)
        assert np.array_equal(np.asarray(out.sum(axis=1)).ravel(), x.sum(axis=1))  # mass kept
        assert abs(out[0] - out[1]).sum() <= np.abs(x[0] - x[1]).sum()


@functools.cache
def toy_vocabulary_maps(k: int, seed: int) -> tuple[BinMap, ...]:
    """Semantic (k-means on the toy embedding), frequency (prior) and random maps of a 19-word vocabulary."""
    from conftest import make_toy_embedding

    emb = make_toy_embedding()
    vocab = Vocabulary((*emb.vocabulary, "notinembedding"))
    return tuple(make_bin_map(s, vocab, k, seed=seed, embedding=emb) for s in ("semantic", "frequency", "random"))


@settings(max_examples=60, deadline=None)
@given(arrays(np.int64, (2, 19), elements=st.integers(0, 30)), st.integers(1, 6), st.integers(0, 1))
def test_semantic_and_vocabulary_maps_are_non_expansive(x: np.ndarray, k: int, seed: int) -> None:
    """The maps built from a vocabulary (semantic k-means, frequency prior, random) compress without expanding l1."""
    for bmap in toy_vocabulary_maps(k, seed):
        assert bmap.n_features == 19 and bmap.bins.min() >= 0 and bmap.bins.max() < k
        out = bmap.apply(x)
        assert np.array_equal(np.asarray(out.sum(axis=1)).ravel(), x.sum(axis=1))
        assert abs(out[0] - out[1]).sum() <= np.abs(x[0] - x[1]).sum()


def test_random_map_is_seeded_and_balanced() -> None:
    a, b, c = random_bin_map(103, 10, 1), random_bin_map(103, 10, 1), random_bin_map(103, 10, 2)
    assert np.array_equal(a.bins, b.bins) and not np.array_equal(a.bins, c.bins)
    assert set(a.bin_sizes().tolist()) == {10, 11}
    assert a.info == {"seed": 1} and a.strategy == "random"


def test_frequency_map_spreads_frequent_features_and_balances_mass() -> None:
    m, k = 2000, 20
    freqs = 1.0 / np.arange(1, m + 1)  # Zipf
    fmap = frequency_bin_map(freqs, k)
    assert len(set(fmap.bins[:k].tolist())) == k  # the k most frequent features in k different bins
    mass = fmap.bin_mass(freqs)
    rmass = random_bin_map(m, k, 0).bin_mass(freqs)
    assert mass.max() / mass.min() < rmass.max() / rmass.min()
    assert mass.max() <= freqs.sum() / k + freqs.max() + 1e-12  # greedy list-scheduling bound
    assert fmap.info["frequency_source"] == "public prior"


def test_semantic_map_clusters_embedding_neighbours(toy_embedding) -> None:  # type: ignore[no-untyped-def]
    vocab = Vocabulary((*toy_embedding.vocabulary, "notinembedding"))
    smap = semantic_bin_map(vocab, 3, toy_embedding, seed=0)
    assert smap.n_features == vocab.size and smap.info["words_not_in_embedding"] == 1
    ids = {w: i for i, w in enumerate(vocab.words)}
    same = smap.bins[ids["hockey"]] == smap.bins[ids["puck"]] == smap.bins[ids["soccer"]]
    other = smap.bins[ids["hockey"]] != smap.bins[ids["rocket"]]
    assert same and other
    assert np.array_equal(smap.bins, semantic_bin_map(vocab, 3, toy_embedding, seed=0).bins)


def test_make_bin_map_and_identity(toy_embedding) -> None:  # type: ignore[no-untyped-def]
    vocab = Vocabulary(tuple(toy_embedding.vocabulary))
    ident = make_bin_map("none", vocab, None)
    assert np.array_equal(ident.bins, np.arange(vocab.size)) and ident.n_bins == vocab.size
    assert make_bin_map("random", vocab, 4, seed=3).strategy == "random"
    assert make_bin_map("frequency", vocab, 4).strategy == "frequency"
    f = make_bin_map("frequency", vocab, 4, frequencies=np.arange(vocab.size), frequency_source="public x")
    assert f.info["frequency_source"] == "public x"
    assert make_bin_map("semantic", vocab, 3, embedding=toy_embedding).strategy == "semantic"
    with pytest.raises(InvalidParameterError, match="strategy"):
        make_bin_map("kmeans", vocab, 3)
    with pytest.raises(InvalidParameterError, match="n_bins"):
        make_bin_map("random", vocab, None)
    with pytest.raises(InvalidParameterError, match="n_bins"):
        make_bin_map("random", vocab, vocab.size + 1)
    assert identity_bin_map(3).strategy == "none"


def test_bin_map_validation() -> None:
    with pytest.raises(InvalidParameterError, match="bins"):
        BinMap(np.array([0, 3]), 3)
    with pytest.raises(InvalidParameterError, match="bins"):
        BinMap(np.array([0.5]), 3)
    with pytest.raises(InvalidParameterError, match="counts"):
        BinMap(np.array([0, 1]), 2).apply(np.ones((1, 3), dtype=np.int64))


def test_expand_keeps_bin_totals_and_follows_weights() -> None:
    bmap = BinMap(np.array([0, 0, 1, -1]), 2)
    out = bmap.expand(np.array([[0.6, 0.4]]), np.array([3.0, 1.0, 5.0, 9.0]))
    np.testing.assert_allclose(out, [[0.45, 0.15, 0.4, 0.0]])


def test_group_rows_sums_consecutive_rows_with_a_partial_last_group() -> None:
    x = np.arange(10, dtype=np.int64).reshape(5, 2)
    out = group_rows(x, 2).toarray()
    np.testing.assert_array_equal(out, [[2, 4], [10, 12], [8, 9]])
    np.testing.assert_array_equal(group_rows(x, 1).toarray(), x)
