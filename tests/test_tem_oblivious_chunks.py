"""History-free TEM's chunks (issue 43): their size is the plan's, their arrays are reused, the law is TEM's.

A call's chunks gather their k-NN rows (and E's ids) into arrays the call reuses
(:class:`_oblivious.Buffers`), chunks of 4,096 tokens with the plain envelope and 2,048 with
the far bounds. These tests check that the rows and ids are the same values as the tables',
also in a buffer reused for a smaller chunk; that draws through many chunks (each chunk's
arrays written over the last one's) follow TEM's law (G-test, false alarm 1e-6) and a wrong
epsilon is caught; that the chunk size is the plan's; and that one word repeated and
distinct words make the same proposals over several chunks.
"""

from __future__ import annotations

import numpy as np
import pytest

from deniable.mechanisms.tem import TruncatedExponential
from deniable.mechanisms.tem import _envelope as envelope
from deniable.mechanisms.tem import _oblivious as oblivious
from test_tem_oblivious import WORDS, _mech, proposal_sizes  # (one tiny prepared mechanism for the history-free tests)
from test_tem_support import ALPHA, g_test_pvalue


def test_rows_and_ids_in_buffers_are_the_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    mech = _mech(monkeypatch, 3.0)
    knn = mech._prepared_knn()
    assert knn is not None
    rng = np.random.default_rng(3)
    bufs = oblivious.Buffers()
    # a first chunk, then a smaller one in the same buffers (a call's last chunk), repeats included
    for words in (rng.integers(0, mech.embedding.size, 333), np.repeat(rng.integers(0, 400, 3), 41)):
        ids, dist = oblivious._gather_rows(knn, words, bufs)
        want_ids, want_dist = knn.rows(words)
        assert np.array_equal(ids, want_ids) and np.array_equal(dist, want_dist)
        for got in (oblivious._ids(ids, mech._k, bufs), oblivious._ids(ids, mech._k, None)):
            assert got.flags.c_contiguous and np.array_equal(got, want_ids[:, : mech._k])


def test_buffers_are_reused_and_contiguous() -> None:
    bufs = oblivious.Buffers()
    a = bufs.get("x", (4, 6), np.float64)
    b = bufs.get("x", (3, 5), np.float64)  # smaller: the same memory, C-contiguous
    assert b.flags.c_contiguous and np.shares_memory(a, b)
    c = bufs.get("x", (5, 6), np.float64)  # larger: a new array
    assert c.shape == (5, 6) and not np.shares_memory(a, c)
    assert bufs.get("x", (2, 2), np.uint8).dtype == np.uint8


@pytest.mark.parametrize("block", [1, 4, 64])
def test_weights_and_layouts_in_blocks_are_the_same_bits(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    # E's weights and the far layouts are formed a block of rows at a time, into the call's
    # reused buffers (holding another chunk's values): the same bits as cumsum along each row
    mech = _mech(monkeypatch, 3.0)
    knn, far, env = mech._prepared_knn(), mech._prepared.far, mech._env  # type: ignore[attr-defined]
    assert knn is not None and far is not None
    assert block == 64 or far.clusters > block  # several blocks (4: the last one partial, 6 clusters)
    monkeypatch.setattr(envelope, "_COLUMN_BLOCK", block)
    rng = np.random.default_rng(8)
    bufs = oblivious.Buffers()
    for words in (rng.integers(0, mech.embedding.size, 333), rng.integers(0, 400, 50)):  # the second smaller
        dist = np.asarray(knn.rows(words)[1], dtype=np.float64)[:, : mech._k]
        log_env = rng.uniform(-30.0, 0.0, words.size)
        cum_out = bufs.get("cum", (mech._k, words.size), np.float64)
        lay_out = bufs.get("layout", (far.clusters, words.size), np.float64)
        cum_out[...] = rng.random(cum_out.shape)
        lay_out[...] = rng.random(lay_out.shape)
        want_cum = np.cumsum(np.exp(env.weights_exponent(dist)), axis=1)
        want_layout = env.far_layout(words, log_env)[0]
        for out in (None, cum_out):
            cum = env.cumulative_weights_columns(dist, out)
            assert cum.flags.f_contiguous and np.array_equal(cum, want_cum)
        for out in (None, lay_out):
            layout = env.far_layout_columns(words, log_env, out)
            assert layout.flags.f_contiguous and np.array_equal(layout, want_layout)
        assert np.shares_memory(env.far_layout_columns(words, log_env, lay_out), lay_out)


@pytest.mark.parametrize("far", [True, False])
def test_draws_through_many_chunks_are_exact(monkeypatch: pytest.MonkeyPatch, far: bool) -> None:
    # chunks of 70 / 90 tokens: 60,000 tokens go through ~700 chunks, each writing over the
    # arrays of the one before (the last one smaller); the law is TEM's, a wrong epsilon is caught
    mech = _mech(monkeypatch, 3.0, (12, far))
    monkeypatch.setattr(oblivious, "_chunk_tokens", lambda far: 70 if far else 90)
    batch = np.random.default_rng(5).permutation(np.tile(np.array(WORDS), 20000))
    y = mech.privatize(batch, np.random.default_rng(6))
    for w in WORDS:
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA
    other = TruncatedExponential(mech.embedding, 4.0, table_max=1)  # type: ignore[arg-type]
    assert all(g_test_pvalue(y[batch == w], other.distribution(w)[1]) < ALPHA for w in WORDS)


def test_the_chunk_size_is_the_plans() -> None:
    assert oblivious._chunk_tokens(True) == oblivious._FAR_TOKENS <= oblivious._TOKENS
    assert oblivious._chunk_tokens(False) == oblivious._TOKENS
    # the plan's cost model counts each envelope's own chunk
    size = oblivious._chunk_tokens(False)
    per_token = sum(s * r for s, r in oblivious.stages(size, 49)) / size
    assert oblivious._work(49, False) == pytest.approx(per_token)


@pytest.mark.parametrize("far", [True, False])
def test_every_word_does_the_same_work_over_chunks(monkeypatch: pytest.MonkeyPatch, far: bool) -> None:
    mech = _mech(monkeypatch, 3.0, (40, far))
    monkeypatch.setattr(oblivious, "_chunk_tokens", lambda far: 128 if far else 192)
    rng = np.random.default_rng(2)
    v = mech.embedding.size
    inputs = (np.repeat(7, 1000), rng.choice(v, 1000, replace=True), np.repeat(123, 1000), np.arange(1000) % v)
    seen = proposal_sizes(monkeypatch, mech, "_propose", inputs, rng)
    assert seen[0] == seen[1] == seen[2] == seen[3]  # one word, distinct words, another word
    size = oblivious._chunk_tokens(far)
    chunks = [size] * (1000 // size) + [1000 % size]
    assert sum(seen[0]) == sum(s * r for n in chunks for s, r in oblivious.stages(n, 40))
