"""TEM: parameters, the exact distribution, the mDP inequality, each exact sampler, the cache, the CLI."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import make_tiny_embedding
from deniable import Embedding, InvalidParameterError, Privatizer, ResourceLimitError
from deniable.mechanisms import make_mechanism
from deniable.mechanisms.tem import TruncatedExponential, theorem3_gamma
from deniable.mechanisms.tem._lazy import knn_lookup
from test_tem_support import ALPHA, break_the_bottom, force_path, g_test_pvalue

METRICS = ["euclidean", "manhattan", "chebyshev", "angular"]


def tricky_embedding() -> Embedding:
    """Ties, near-ties and duplicate points (distance 0 between different words)."""
    base = np.array(
        [
            [0.0, 0.0],
            [0.0, 0.0],  # duplicate of w0
            [1.0, 0.0],
            [0.0, 1.0],  # tie with w2 around w0
            [1.0, 1e-7],  # near-tie with w2
            [2.0, 2.0],
            [2.0, 2.0 + 1e-6],
            [-3.0, 0.5],
            [0.5, -2.5],
            [4.0, -1.0],
            [1.0, 0.0],  # duplicate of w2
            [-1.0, -1.0],
        ],
        dtype=np.float32,
    )
    return Embedding([f"w{i}" for i in range(len(base))], base, name="tricky")


def full_matrix(mech: TruncatedExponential) -> np.ndarray:
    return np.stack([mech.distribution(w)[1] for w in range(mech.embedding.size)])


# -- parameters ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"epsilon": 0}, "epsilon"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"epsilon": float("nan")}, "epsilon"),
        ({"epsilon": "10"}, "epsilon"),
        ({"epsilon": 1.0, "gamma": -0.1}, "gamma"),
        ({"epsilon": 1.0, "gamma": float("inf")}, "gamma"),
        ({"epsilon": 1.0, "beta": 0.0}, "beta"),
        ({"epsilon": 1.0, "beta": 1.0}, "beta"),
        ({"epsilon": 1.0, "beta": "x"}, "beta"),
        ({"epsilon": 1.0, "metric": "cosine"}, "metric"),
        ({"epsilon": 1.0, "metric": "hamming"}, "metric"),
        ({"epsilon": 1.0, "metric": "sqeuclidean"}, "metric"),
        ({"epsilon": 1.0, "metric": 3}, "metric"),
        ({"epsilon": 1.0, "table_max": 0}, "table_max"),
        ({"epsilon": 1.0, "cache": "yes"}, "cache"),
    ],
)
def test_bad_parameters_name_the_parameter(tiny_embedding: Embedding, kwargs: dict, name: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        TruncatedExponential(tiny_embedding, **kwargs)
    assert info.value.name == name


def test_cosine_is_rejected_with_the_reason(tiny_embedding: Embedding) -> None:
    with pytest.raises(InvalidParameterError, match="triangle inequality"):
        TruncatedExponential(tiny_embedding, 1.0, metric="cosine")


def test_not_an_embedding() -> None:
    with pytest.raises(InvalidParameterError) as info:
        TruncatedExponential("glove", 1.0)  # type: ignore[arg-type]
    assert info.value.name == "embedding"


@settings(max_examples=60, deadline=None)
@given(
    eps=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 5), st.text(max_size=3)),
    beta=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.none()),
)
def test_parameters_either_work_or_fail_cleanly(eps: object, beta: object) -> None:
    emb = make_tiny_embedding(6, 2, seed=3)
    try:
        mech = TruncatedExponential(emb, eps, beta=1e-3 if beta is None else beta)  # type: ignore[arg-type]
    except InvalidParameterError as exc:
        assert exc.name in ("epsilon", "beta", "gamma")
        return
    assert mech.gamma is not None and math.isfinite(mech.gamma) and mech.gamma >= 0
    cd = mech.compact_distribution(0)
    assert cd.total == pytest.approx(1.0, abs=1e-9)
    out = mech.privatize(np.arange(6), np.random.default_rng(0))
    assert out.dtype == np.int64 and out.shape == (6,) and out.min() >= 0 and out.max() < 6


def test_gamma_from_theorem3_and_describe(tiny_embedding: Embedding) -> None:
    mech = TruncatedExponential(tiny_embedding, 2.0, beta=0.01)
    v = tiny_embedding.size
    assert mech.gamma == pytest.approx((2 / 2.0) * math.log(0.99 * (v - 1) / 0.01))
    d = mech.describe()
    assert d["mechanism"] == "tem" and d["gamma"] == mech.gamma and d["beta"] == 0.01 and d["metric"] == "euclidean"
    assert d["gamma_from"] == "beta"
    given_ = TruncatedExponential(tiny_embedding, 2.0, gamma=0.5)
    assert given_.gamma == 0.5 and given_.describe()["gamma_from"] == "given"
    assert theorem3_gamma(1.0, 0.9, 2) == 0.0  # (1-beta)(V-1)/beta <= 1: gamma clamps at 0


def test_registry_and_lazy_export(tiny_embedding: Embedding) -> None:
    import deniable

    mech = make_mechanism("tem", tiny_embedding, 3.0, metric="angular", beta=0.05)
    assert isinstance(mech, deniable.TruncatedExponential) and mech.metric == "angular"


# -- the exact distribution ------------------------------------------------------------------


@pytest.mark.parametrize("metric", METRICS)
def test_distribution_matches_formula(metric: str) -> None:
    from calibrate_fakes import RefTEM

    emb = make_tiny_embedding(40, 3, seed=5)
    for eps, gamma in [(0.7, None), (4.0, None), (6.0, 0.8), (3.0, 0.0)]:
        mech = TruncatedExponential(emb, eps, metric=metric, gamma=gamma, cache=False)
        ref = RefTEM(emb, eps, metric=metric, gamma=mech.gamma)
        np.testing.assert_allclose(full_matrix(mech), ref.matrix, rtol=1e-12, atol=1e-300)
        cd = mech.compact_distribution(3)
        assert 3 in cd.ids.tolist() and cd.total == pytest.approx(1.0, abs=1e-12)
        assert cd.ids.size + cd.n_outside == emb.size


def test_extreme_parameters_no_underflow_or_overflow() -> None:
    emb = Embedding(["a", "b", "c"], np.array([[0.0], [1e30], [-1e30]], dtype=np.float32))
    huge = TruncatedExponential(emb, 1e300, gamma=1e30, cache=False)
    cd = huge.compact_distribution(0)
    assert np.all(np.isfinite(cd.probs)) and cd.probs[cd.ids == 0][0] == 1.0
    assert huge.privatize(np.array([0, 1, 2]), np.random.default_rng(0)).tolist() == [0, 1, 2]
    tiny = TruncatedExponential(emb, 1e-300, cache=False)
    _, p = tiny.distribution(1)
    np.testing.assert_allclose(p, 1 / 3)
    # small but representable probabilities stay positive (log space)
    line = Embedding([f"w{i}" for i in range(4)], np.array([[0.0], [1.0], [2.0], [3.0]], dtype=np.float32))
    mech = TruncatedExponential(line, 400.0, gamma=10.0, cache=False)
    _, p = mech.distribution(0)
    assert np.all(p > 0) and p[3] == pytest.approx(math.exp(-600.0), rel=1e-9)


# -- the mDP inequality, exactly ----------------------------------------------------------------


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize(("eps", "gamma"), [(0.5, None), (3.0, None), (12.0, None), (5.0, 0.0), (8.0, 1.0)])
def test_mdp_inequality_every_pair_every_output(metric: str, eps: float, gamma: float | None) -> None:
    for emb in (tricky_embedding(), make_tiny_embedding(25, 3, seed=9)):
        mech = TruncatedExponential(emb, eps, metric=metric, gamma=gamma, cache=False)
        logp = np.log(full_matrix(mech))
        v = emb.size
        d = np.array([[mech.distance(i, j) for j in range(v)] for i in range(v)])
        assert np.all(np.diag(d) == 0) and np.allclose(d, d.T)
        worst = (logp[:, None, :] - logp[None, :, :]).max(axis=2)  # [w, w'] = max_y log P(y|w) - log P(y|w')
        assert np.all(worst <= eps * d + 1e-9 * (1 + eps * d))
        assert np.allclose(mech.guarantee(0, 1), eps * d[0, 1])


def test_mdp_inequality_on_real_glove_pairs(glove: Embedding) -> None:
    emb = glove.subset(50000)
    words = emb.ids(["good", "bad", "movie", "film", "great", "the", "actor", "terrible"])
    for metric, eps in [("euclidean", 5.0), ("euclidean", 12.0), ("angular", 40.0), ("manhattan", 1.0)]:
        mech = TruncatedExponential(emb, eps, metric=metric, cache=False)
        logp = {w: np.log(mech.distribution(w)[1]) for w in words.tolist()}
        for w in words.tolist():
            for w2 in words.tolist():
                bound = mech.guarantee(w, w2)
                assert float((logp[w] - logp[w2]).max()) <= bound + 1e-9 * (1 + bound)


# -- the samplers ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["uniform", "table", "knn", "shells"])
@pytest.mark.parametrize("metric", METRICS)
def test_each_sampler_matches_distribution(monkeypatch: pytest.MonkeyPatch, path: str, metric: str) -> None:
    opts = force_path(monkeypatch, path)
    emb = make_tiny_embedding(120, 3, seed=11)
    rng = np.random.default_rng(2024)
    for eps, gamma in [(2.0, None), (6.0, 1.0)]:
        mech = TruncatedExponential(emb, eps, metric=metric, gamma=gamma, cache=False, **opts)
        for w in (0, 57):
            y = mech.privatize(np.full(30000, w), rng)
            assert g_test_pvalue(y, mech.distribution(w)[1]) > ALPHA


@pytest.mark.parametrize("metric", METRICS)
def test_cached_knn_tables_sample_exactly(monkeypatch: pytest.MonkeyPatch, metric: str) -> None:
    # first call scans and stores the k-NN tables; the second samples from the cache only,
    # in a batch mixing cached words with a new one
    opts = force_path(monkeypatch, "knn")
    emb = make_tiny_embedding(150, 3, seed=31)
    rng = np.random.default_rng(77)
    mech = TruncatedExponential(emb, 3.0, metric=metric, cache=False, **opts)
    mech.privatize(np.array([3, 40]), rng)
    assert all(e is not None for e in mech._knn.get_many(np.array([3, 40])))  # type: ignore[attr-defined]
    batch = np.tile(np.array([3, 40, 99]), 25000)
    y = mech.privatize(batch, rng)
    for w in (3, 40, 99):
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA


def test_knn_bound_covers_every_word_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    # the stored d_env is a true lower bound on d(w, y) for every y outside E
    force_path(monkeypatch, "knn")
    for metric in METRICS:
        emb = make_tiny_embedding(300, 4, seed=32)
        mech = TruncatedExponential(emb, 3.0, metric=metric, cache=False, table_max=1)
        mech.privatize(np.arange(0, 300, 7), np.random.default_rng(1))
        for w in range(0, 300, 7):
            entry = mech._knn.get_many(np.array([w]))[0]  # type: ignore[attr-defined]
            assert entry is not None
            ids, dist = np.asarray(entry[0][:8]), np.asarray(entry[1][:8])
            d_all = mech._geo.exact(w, np.arange(300))  # type: ignore[attr-defined]
            outside = np.setdiff1d(np.arange(300), ids)
            assert np.all(ids >= 0) and np.all(np.asarray(entry[0][8:]) == -1)
            assert np.array_equal(dist, d_all[ids])
            assert float(entry[1][8]) <= d_all[outside].min()  # d_env
            sketch = np.asarray(entry[1][9:])  # quantiles of the far distances (lower bounds)
            assert sketch.size == 32 and np.all(sketch >= float(entry[1][8]) - 1e-9)
            assert np.all(sketch <= d_all[outside].max() + 1e-9)


def test_the_test_rejects_a_wrong_epsilon(monkeypatch: pytest.MonkeyPatch) -> None:
    emb = make_tiny_embedding(120, 3, seed=11)
    rng = np.random.default_rng(7)
    for path in ("uniform", "table", "knn", "shells"):
        opts = force_path(monkeypatch, path)
        right = TruncatedExponential(emb, 2.0, cache=False, **opts)
        wrong = TruncatedExponential(emb, 2.3, gamma=right.gamma, cache=False, **opts)
        y = wrong.privatize(np.full(30000, 5), rng)
        assert g_test_pvalue(y, right.distribution(5)[1]) < ALPHA


def test_the_test_rejects_a_wrong_bottom_score(monkeypatch: pytest.MonkeyPatch) -> None:
    force_path(monkeypatch, "table")
    emb = make_tiny_embedding(200, 3, seed=12)
    rng = np.random.default_rng(8)
    right = TruncatedExponential(emb, 4.0, gamma=1.0, cache=False)
    w = 3
    assert right.compact_distribution(w).n_outside > 100
    assert g_test_pvalue(right.privatize(np.full(30000, w), rng), right.distribution(w)[1]) > ALPHA
    break_the_bottom(monkeypatch)
    wrong = TruncatedExponential(emb, 4.0, gamma=1.0, cache=False)
    assert g_test_pvalue(wrong.privatize(np.full(30000, w), rng), right.distribution(w)[1]) < ALPHA


def test_mixed_batch_and_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    emb = make_tiny_embedding(80, 3, seed=13)
    rng = np.random.default_rng(3)
    mech = TruncatedExponential(emb, 5.0, gamma=1.5, cache=False)
    ids = rng.integers(0, 80, size=(50, 40))
    out = mech.privatize(ids, rng)
    assert out.shape == ids.shape and out.dtype == np.int64
    assert mech.privatize(np.array([], dtype=np.int64), rng).shape == (0,)
    with pytest.raises(InvalidParameterError):
        mech.privatize(np.array([80]), rng)
    # tokens of one word in a mixed batch follow that word's distribution
    batch = np.tile(np.array([4, 9, 4, 60]), 10000)
    y = mech.privatize(batch, rng)
    for w in (4, 9, 60):
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA


def test_theorem3_leaving_the_ball_has_probability_at_most_beta() -> None:
    emb = make_tiny_embedding(300, 3, seed=14)
    rng = np.random.default_rng(5)
    for beta in (0.2, 0.05):
        for eps in (2.0, 8.0):
            mech = TruncatedExponential(emb, eps, beta=beta, cache=False)
            for w in (0, 100, 200):
                cd = mech.compact_distribution(w)
                assert cd.n_outside * cd.p_outside <= beta
                n = 20000
                y = mech.privatize(np.full(n, w), rng)
                left = np.count_nonzero(~np.isin(y, cd.ids))
                assert left <= n * beta + 5 * math.sqrt(n * beta * (1 - beta))  # z = 5: false alarm < 1e-6


# -- the cache, threads, pre-computation ----------------------------------------------------------


def test_tables_are_kept_in_memory_and_prepared_tables_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    # ball tables built while privatizing stay in this process (LRU), never on disk; the
    # prepared k-NN tables (input-independent) are read by a fresh mechanism
    force_path(monkeypatch, "table")
    emb = make_tiny_embedding(150, 3, seed=15)
    rng = np.random.default_rng(6)
    mech = TruncatedExponential(emb, 6.0, gamma=1.2)
    mech.privatize(np.arange(150), rng)
    mech.flush_cache()  # a no-op kept for compatibility
    info = mech.cache_info()
    assert info["disk_bytes"] == 0 and info["memory_bytes"] > 0
    tables = mech._store.get_many(np.arange(150))  # type: ignore[attr-defined]
    assert all(t is not None for t in tables)
    fresh = TruncatedExponential(emb, 6.0, gamma=1.2, cache=False)
    for w in (0, 77):
        ids, dist = tables[w]  # type: ignore[misc]
        cd = fresh.compact_distribution(w)
        assert np.array_equal(np.asarray(ids), cd.ids) and np.array_equal(np.asarray(dist), fresh._geo.exact(w, cd.ids))  # type: ignore[attr-defined]
        y = mech.privatize(np.full(20000, w), rng)
        assert g_test_pvalue(y, fresh.distribution(w)[1]) > ALPHA
    again = TruncatedExponential(emb, 6.0, gamma=1.2)
    assert all(t is None for t in again._store.get_many(np.arange(150)))  # type: ignore[attr-defined]
    assert again.cache_info()["disk_bytes"] == 0
    again.precompute()  # the prepared k-NN tables
    later = TruncatedExponential(emb, 2.0, gamma=1.3)  # any epsilon and gamma read them
    assert later.cache_info()["disk_bytes"] > 0
    assert all(e is not None for e in knn_lookup(later, np.arange(150)))
    assert len(later._knn) == 0  # type: ignore[attr-defined]


def test_shared_across_threads() -> None:
    emb = make_tiny_embedding(100, 3, seed=16)
    mech = TruncatedExponential(emb, 8.0, memory_bytes=2000)  # a tiny LRU: constant eviction
    errors: list[BaseException] = []
    results: list[np.ndarray] = []

    def work(seed: int) -> None:
        try:
            r = np.random.default_rng(seed)
            for _ in range(20):
                results.append(mech.privatize(r.integers(0, 100, size=500), r))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 80
    assert all(r.min() >= 0 and r.max() < 100 for r in results)


def test_precompute_estimate_and_refusal() -> None:
    emb = make_tiny_embedding(200, 3, seed=17)
    mech = TruncatedExponential(emb, 6.0, gamma=1.0)
    est = mech.estimate()
    assert est["mean_ball"] >= 1 and est["table_bytes"] > 0
    stats = mech.precompute()
    assert stats["built"] == 200 and mech.cache_info()["disk_bytes"] > 0
    some = TruncatedExponential(emb, 6.0, gamma=1.0, cache=False).precompute([3, 5, 5])
    assert some["words"] == 2 and some["built"] == 2
    small = TruncatedExponential(emb, 6.0, gamma=1.0, disk_bytes=100, cache=False)
    with pytest.raises(ResourceLimitError, match="vocab-size"):
        small.precompute()


def test_privatizer_integration(toy_embedding: Embedding) -> None:
    mech = TruncatedExponential(toy_embedding, 30.0, metric="angular", cache=False)
    text = "The hockey game was great!"
    out = Privatizer(mech, random_state=np.random.default_rng(1)).privatize(text)
    assert isinstance(out, str) and out.count(" ") == text.count(" ")


# -- the command line -------------------------------------------------------------------------


def test_cli_privatize_with_tem(emb_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from deniable.cli import run_app

    src = tmp_path / "in.txt"
    src.write_text("the hockey game was great\nnasa launched a rocket\n" * 20, encoding="utf-8")
    base = ["privatize", str(src), "--mechanism", "tem", "--embedding", str(emb_dir), "--seed", "1", "-q"]
    options = (
        ["--epsilon", "10"],
        ["--epsilon", "10", "--metric", "angular", "--beta", "0.01"],
        ["-e", "3", "--gamma", "2"],
    )
    for extra in options:
        out = tmp_path / "out.txt"
        code = run_app([*base, "-o", str(out), *extra])
        capsys.readouterr()
        assert code == 0
        lines = out.read_text(encoding="utf-8").splitlines()
        assert len(lines) == 40 and [len(line.split()) for line in lines[:2]] == [5, 4]
    code = run_app([*base, "-o", str(tmp_path / "bad.txt"), "--epsilon", "10", "--metric", "cosine"])
    err = capsys.readouterr().err
    assert code == 2 and "triangle" in err and not (tmp_path / "bad.txt").exists()
    code = run_app([*base, "-o", str(tmp_path / "bad.txt"), "--epsilon", "10", "--bits", "64"])
    assert code == 2


@pytest.mark.parametrize("path", ["table", "knn", "shells"])
def test_bottom_with_few_words_outside(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    # L_0 = {w0..w8}: one word outside, drawn by listing the complement (table) or by shells
    opts = force_path(monkeypatch, path)
    line = Embedding([f"w{i}" for i in range(10)], np.arange(10, dtype=np.float32)[:, None])
    mech = TruncatedExponential(line, 0.3, gamma=8.0, cache=False, **opts)
    cd = mech.compact_distribution(0)
    assert cd.n_outside == 1 and cd.ids.tolist() == list(range(9))
    y = mech.privatize(np.zeros(40000, dtype=np.int64), np.random.default_rng(4))
    assert g_test_pvalue(y, mech.distribution(0)[1]) > ALPHA
