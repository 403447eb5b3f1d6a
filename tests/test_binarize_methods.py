"""Binarizers: shapes, determinism given the seed, the cache round trip (mmap), validation, quality sanity."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import make_tiny_embedding, make_toy_embedding
from deniable import InvalidParameterError
from deniable.binarize import BITS, binarize, codes_cache_path, itq_codes, simhash_codes, train_autoencoder
from deniable.metrics import hamming

FAST = {"autoencoder": {"epochs": 2}, "itq": {"iterations": 5}, "simhash": {}}


@pytest.mark.parametrize(
    ("method", "bits"),
    [("autoencoder", 64), ("autoencoder", 512), ("itq", 64), ("simhash", 64), ("simhash", 512)],
)
def test_shape_and_determinism(method: str, bits: int) -> None:
    emb = make_tiny_embedding(40, 6, seed=1)
    a = binarize(emb, bits, method, seed=3, cache=False, **FAST[method])
    b = binarize(emb, bits, method, seed=3, cache=False, **FAST[method])
    c = binarize(emb, bits, method, seed=4, cache=False, **FAST[method])
    assert a.shape == (40, bits // 8) and a.dtype == np.uint8
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert not a.flags.writeable


@pytest.mark.parametrize("method", ["autoencoder", "itq", "simhash"])
def test_cache_round_trip_is_memory_mapped(method: str) -> None:
    emb = make_tiny_embedding(30, 5, seed=2)
    first = binarize(emb, 64, method, seed=1, **FAST[method])
    path = codes_cache_path(emb, method, 64, 1, {**_defaults(method), **FAST[method]})
    assert path.is_file()
    again = binarize(emb, 64, method, seed=1, **FAST[method])
    assert isinstance(again, np.memmap) and np.array_equal(first, again)
    fresh = binarize(emb, 64, method, seed=1, cache=False, **FAST[method])
    assert np.array_equal(fresh, again)


def _defaults(method: str) -> dict:
    from deniable.binarize import _OPTIONS

    return dict(_OPTIONS[method])


def test_alias_random_is_simhash() -> None:
    emb = make_tiny_embedding(10, 4)
    assert np.array_equal(binarize(emb, 64, "random", cache=False), binarize(emb, 64, "simhash", cache=False))


@pytest.mark.parametrize("method", ["autoencoder", "itq", "simhash"])
def test_codes_keep_the_clusters(method: str) -> None:
    """On three well-separated clusters, codes are closer within a cluster than across."""
    emb = make_toy_embedding()
    codes = binarize(emb, 128, method, seed=0, cache=False, **FAST[method])
    groups = np.repeat([0, 1, 2], [6, 5, 7])
    d = hamming(codes[:, None, :], codes[None, :, :])
    same = groups[:, None] == groups[None, :]
    off = ~np.eye(len(groups), dtype=bool)
    assert d[same & off].mean() < d[~same].mean()


def test_autoencoder_reconstruction_improves() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4000, 10)).astype(np.float32)
    x[:, :3] *= 4

    def recon_error(epochs: int) -> float:
        w, s, mean, scale = train_autoencoder(
            x, 64, seed=0, epochs=epochs, batch_size=32, learning_rate=3e-3, show_progress=False
        )
        xs = (x - mean) / scale
        b = (xs @ w.T > 0).astype(np.float32)
        return float(((np.tanh(b @ w + s) - xs) ** 2).sum(axis=1).mean())

    assert recon_error(10) < 0.7 * recon_error(1)


def test_itq_bits_above_dim_and_simhash_balance() -> None:
    x = np.random.default_rng(0).normal(size=(500, 8)).astype(np.float32) + 5
    assert itq_codes(x, 64, 0, iterations=5).shape == (500, 8)
    bits = np.unpackbits(simhash_codes(x, 128, 0), axis=1)
    assert 0.3 < bits.mean() < 0.7  # centring keeps the bits balanced despite the +5 offset


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"bits": 32}, "bits"),
        ({"bits": 256.0}, "bits"),
        ({"method": "lsh"}, "binarizer"),
        ({"seed": -2}, "seed"),
        ({"method": "itq", "iterations": 0}, "iterations"),
        ({"method": "autoencoder", "learning_rate": -1.0}, "learning_rate"),
        ({"method": "autoencoder", "max_train_rows": 1}, "max_train_rows"),
        ({"method": "simhash", "epochs": 3}, "epochs"),
    ],
)
def test_bad_parameters(kwargs: dict, name: str) -> None:
    emb = make_tiny_embedding(10, 4)
    args = {"bits": 64, "method": "autoencoder", **kwargs}
    with pytest.raises(InvalidParameterError, match=name):
        binarize(emb, cache=False, **args)


def test_bits_constant() -> None:
    assert BITS == (64, 128, 256, 512)
