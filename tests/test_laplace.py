from __future__ import annotations

import math

import numpy as np
import pytest

from deniable import Embedding, InvalidParameterError, MultivariateLaplace


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, "10", None, True])
def test_epsilon_is_validated(tiny_embedding: Embedding, bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="epsilon"):
        MultivariateLaplace(tiny_embedding, epsilon=bad)  # type: ignore[arg-type]


def test_frozen(tiny_embedding: Embedding) -> None:
    m = MultivariateLaplace(tiny_embedding, epsilon=1.0)
    with pytest.raises(AttributeError):
        m.epsilon = 2.0  # type: ignore[misc]


@pytest.mark.parametrize("index", ["exact", "flat", "hnsw"])
def test_huge_epsilon_is_identity_and_shape_is_kept(
    tiny_embedding: Embedding, rng: np.random.Generator, index: str
) -> None:
    m = MultivariateLaplace(tiny_embedding, epsilon=1e9, index=index)
    ids = np.arange(8).reshape(2, 4)
    out = m.privatize(ids, rng)
    assert out.shape == (2, 4) and out.dtype == np.int64
    np.testing.assert_array_equal(out, ids)


def test_small_epsilon_changes_words(tiny_embedding: Embedding, rng: np.random.Generator) -> None:
    m = MultivariateLaplace(tiny_embedding, epsilon=0.1, batch_size=7)
    out = m.privatize(np.zeros(500, dtype=np.int64), rng)
    assert len(np.unique(out)) == 8


def test_bad_ids(tiny_embedding: Embedding, rng: np.random.Generator) -> None:
    m = MultivariateLaplace(tiny_embedding, epsilon=1.0)
    with pytest.raises(InvalidParameterError, match="ids"):
        m.privatize(np.array([8]), rng)
    with pytest.raises(InvalidParameterError, match="ids"):
        m.privatize(np.array([0.5]), rng)


def test_guarantee_is_eps_times_euclidean(tiny_embedding: Embedding) -> None:
    m = MultivariateLaplace(tiny_embedding, epsilon=3.0)
    v = tiny_embedding.vectors.astype(np.float64)
    assert m.guarantee("w1", 2) == pytest.approx(3.0 * np.linalg.norm(v[1] - v[2]))
    assert m.guarantee(4, 4) == 0
    assert m.describe()["mechanism"] == "madlib"
