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


@pytest.mark.parametrize("metric", ["euclidean", "angular"])
def test_prepared_tables_on_glove(glove: Embedding, metric: str) -> None:
    # the blocked (faiss) build on real vectors: E and d_env are right, sampling is exact
    from deniable.artefacts import remove_artefacts
    from deniable.mechanisms.tem._geometry import Geometry
    from deniable.mechanisms.tem._tables import knn_entry
    from deniable.preparation import prepare

    emb = glove.subset(20000)
    (info,) = prepare(emb, metric=metric, show_progress=False)
    try:
        ids_all = np.load(info.file("ids.npy"), mmap_mode="r")
        dist_all = np.load(info.file("dist.npy"), mmap_mode="r")
        geo = Geometry(emb, metric)
        row = np.empty((1, emb.size), dtype=np.float32)
        k = 256
        words = emb.ids(WORDS)
        words = words[words >= 0]  # in the 20k subset
        for w in [*words.tolist(), 19999]:
            geo.screen(np.array([w]), row)
            lazy = knn_entry(geo, w, row[0], k, 32)
            assert np.array_equal(ids_all[w], lazy[0]) and np.array_equal(dist_all[w, :k], lazy[1][:k])
            d = geo.exact(w, np.arange(emb.size))
            outside = np.setdiff1d(np.arange(emb.size), ids_all[w, :k])
            assert dist_all[w, k] <= d[outside].min()
        e = 40.0 if metric == "angular" else 5.0
        mech = TruncatedExponential(emb, e, metric=metric, history_free=True)
        assert mech.cache_info()["disk_bytes"] > 0
        rng = np.random.default_rng(31)
        ids = words
        batch = np.repeat(ids, 40000)
        y = mech.privatize(batch, rng)
        for w in ids.tolist():
            assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA
    finally:
        remove_artefacts(emb)


@pytest.mark.parametrize(("eps", "heavy"), [(3.0, True), (3.0, False), (10.0, True)])
def test_self_first_and_frequent_word_tables_on_glove(
    glove: Embedding, monkeypatch: pytest.MonkeyPatch, eps: float, heavy: bool
) -> None:
    # after `prepare -m tem -e EPS` (totals and far bounds prepared) and with the totals
    # memoized: self first, the continued envelope attempt through the far bounds and, at
    # eps 3, the ball tables of frequent words drawn given the failed self test (or, with
    # heavy=False, every token through the far envelope) -- all against distribution()
    from deniable.artefacts import remove_artefacts
    from deniable.mechanisms.tem import _self_first
    from deniable.preparation import prepare

    if not heavy:
        monkeypatch.setattr(_self_first, "_HEAVY_PROPOSALS", float("inf"))

    emb = glove.subset(20000)
    prepare(emb, ["tem"], options={"epsilon": eps}, show_progress=False)
    try:
        ids = emb.ids(WORDS)
        ids = ids[ids >= 0]
        batch = np.repeat(ids, 40000)
        for k, mech in enumerate([TruncatedExponential(emb, eps), TruncatedExponential(emb, eps + 0.5)]):
            rng = np.random.default_rng(40 + k)
            shuffled = rng.permutation(batch)
            y = mech.privatize(shuffled, rng)
            prepared = mech._prepared  # type: ignore[attr-defined]
            assert (prepared.totals is not None) == (k == 0) and (prepared.memo is not None) == (k == 1)
            assert prepared.far is not None
            if eps < 5 and heavy:
                assert len(mech._store) > 0  # type: ignore[attr-defined]  # frequent words got their tables
            for w in ids.tolist():
                assert g_test_pvalue(y[shuffled == w], mech.distribution(w)[1]) > ALPHA
    finally:
        remove_artefacts(emb)
