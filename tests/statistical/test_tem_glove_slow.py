"""TEM on real GloVe words, in every regime (slow): sampler == distribution(), Theorem 3.

Each G-test has false-alarm rate 1e-6 (fixed seeds); the same test is shown to reject a
mechanism sampling with a wrong epsilon.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from deniable import Embedding
from deniable.mechanisms.tem import TruncatedExponential
from test_tem_support import ALPHA, force_path, g_test_pvalue

pytestmark = pytest.mark.slow

WORDS = ["the", "movie", "brilliant", "screenplay", "mediocre", "zombies"]


@pytest.fixture(scope="module")
def emb(glove: Embedding) -> Embedding:
    return glove.subset(50000)


@pytest.mark.parametrize("eps", [1.0, 5.0, 10.0, 20.0])
@pytest.mark.parametrize("metric", ["euclidean", "angular"])
def test_sampler_matches_distribution_on_glove(emb: Embedding, eps: float, metric: str) -> None:
    # angular distances are in [0, 1]: scale epsilon so the regimes are comparable
    e = eps * 8 if metric == "angular" else eps
    mech = TruncatedExponential(emb, e, metric=metric, cache=False)
    rng = np.random.default_rng(int(eps * 10) + len(metric))
    ids = emb.ids(WORDS)
    batch = np.repeat(ids, 40000)
    rng.shuffle(batch)
    y = mech.privatize(batch, rng)
    for w in ids.tolist():
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA


@pytest.mark.parametrize("path", ["table", "knn", "shells", "uniform"])
def test_forced_paths_on_glove(emb: Embedding, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    opts = force_path(monkeypatch, path, knn_k=256)
    eps = 1.0 if path == "uniform" else 6.0
    mech = TruncatedExponential(emb, eps, cache=False, **opts)
    rng = np.random.default_rng(99)
    for w in emb.ids(["movie", "zombies"]).tolist():
        y = mech.privatize(np.full(60000, w), rng)
        assert g_test_pvalue(y, mech.distribution(w)[1]) > ALPHA


def test_rejects_wrong_epsilon_on_glove(emb: Embedding) -> None:
    rng = np.random.default_rng(5)
    right = TruncatedExponential(emb, 6.0, cache=False)
    wrong = TruncatedExponential(emb, 6.6, gamma=right.gamma, cache=False)
    w = int(emb.ids(["movie"])[0])
    assert g_test_pvalue(wrong.privatize(np.full(60000, w), rng), right.distribution(w)[1]) < ALPHA


def test_theorem3_on_glove(emb: Embedding) -> None:
    rng = np.random.default_rng(6)
    beta = 0.01
    for eps in (5.0, 10.0):
        mech = TruncatedExponential(emb, eps, beta=beta, cache=False)
        for w in emb.ids(WORDS).tolist():
            cd = mech.compact_distribution(w)
            assert cd.n_outside * cd.p_outside <= beta
            n = 50000
            y = mech.privatize(np.full(n, w), rng)
            left = np.count_nonzero(~np.isin(y, cd.ids))
            assert left <= n * beta + 5 * math.sqrt(n * beta * (1 - beta))
