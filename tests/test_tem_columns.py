"""The history-free sampler's column-major arrays (issue 43): the same bits and the same searches as row-major."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import make_tiny_embedding
from deniable.mechanisms.tem import TruncatedExponential
from deniable.mechanisms.tem._sampler import count_at_most, in_rows, segments
from deniable.preparation import prepare
from test_tem_support import force_path


@pytest.mark.parametrize("width", [1, 2, 7, 8, 9, 256, 1000, 1024])
def test_searches_in_column_major_rows_are_the_row_major_ones(width: int) -> None:
    rng = np.random.default_rng(width)
    cum = np.cumsum(rng.integers(0, 3, size=(20, width)).astype(np.float64), axis=1)  # ties and flat runs
    cols = np.asfortranarray(cum)
    assert width == 1 or (cols.flags.f_contiguous and not cols.flags.c_contiguous)
    rows = rng.integers(0, 20, size=5000)
    u = np.concatenate([rng.uniform(-1, cum.max() + 2, 4000), cum[rows[4000:], rng.integers(0, width, 1000)]])
    expect = (cum[rows] <= u[:, None]).sum(axis=1)
    assert np.array_equal(count_at_most(cols, rows, u), expect)
    for got, want in zip(segments(cols, rows, u), segments(cum, rows, u), strict=True):
        assert np.array_equal(got, want)
    ids = np.stack([np.sort(rng.choice(4 * width + 8, width, replace=False)) for _ in range(20)])
    y = rng.integers(0, 4 * width + 8, size=5000)
    y[::3] = ids[rows[::3], rng.integers(0, width, y[::3].size)]  # members too
    want = (ids[rows] == y[:, None]).any(axis=1)
    assert np.array_equal(in_rows(np.asfortranarray(ids), rows, y), want)
    assert np.array_equal(in_rows(ids, rows, y), want)


@pytest.mark.parametrize("eps", [0.5, 3.0])
def test_column_weights_and_layouts_are_the_same_bits(monkeypatch: pytest.MonkeyPatch, eps: float) -> None:
    force_path(monkeypatch, "knn")
    emb = make_tiny_embedding(400, 3, seed=61)
    prepare(emb, ["tem"], options={"epsilon": eps}, show_progress=False)
    mech = TruncatedExponential(emb, eps)
    knn = mech._prepared_knn()
    assert knn is not None
    env = mech._env
    words = np.random.default_rng(3).permutation(emb.size)[:333]
    dist = np.asarray(knn.rows(words)[1], dtype=np.float64)[:, : mech._k]
    cum = env.cumulative_weights_columns(dist)
    assert cum.flags.f_contiguous and np.array_equal(cum, np.cumsum(np.exp(env.weights_exponent(dist)), axis=1))
    log_env = np.random.default_rng(4).uniform(-30.0, 0.0, words.size)
    layout = env.far_layout_columns(words, log_env)
    assert layout.flags.f_contiguous and np.array_equal(layout, env.far_layout(words, log_env)[0])
