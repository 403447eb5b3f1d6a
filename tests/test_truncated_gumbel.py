"""The Truncated Gumbel mechanism (issue 17): options, exact distribution, sampler, guarantee, MLDP's bugs."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.spatial.distance import pdist

from deniable import Embedding, InvalidParameterError, NotPrivateWarning
from deniable.cli import run_app
from deniable.experiments.audit import audit_mechanism
from deniable.mechanisms import make_mechanism, options_of
from deniable.mechanisms.truncated_gumbel import (
    TruncatedGumbel,
    gumbel_scale,
    inter_word_distances,
    truncated_gumbel_noise,
    truncated_poisson_law,
)


def normal_embedding(n: int = 12, dim: int = 3, seed: int = 0) -> Embedding:
    vec = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return Embedding([f"w{i}" for i in range(n)], vec, name=f"normal{n}")


def build(emb: Embedding, eps: float, **opts: object) -> TruncatedGumbel:
    with pytest.warns(NotPrivateWarning, match="NOT metric DP"):
        mech = make_mechanism("truncated_gumbel", emb, eps, **opts)
    assert isinstance(mech, TruncatedGumbel)
    return mech


def full(mech: TruncatedGumbel, w: int) -> np.ndarray:
    ids, probs = mech.distribution(w)
    out = np.zeros(mech.embedding.size)
    np.add.at(out, ids, probs)
    return out


# -- options and validation ------------------------------------------------------------------------
def test_history_free_searches_every_token_and_draws_the_same() -> None:
    # history_free: no dedup by distinct word (time counts tokens, not distinct words); the
    # draws are the same as the deduplicated path's, given the same random stream
    emb = normal_embedding(n=40)
    batch = np.array([3, 3, 3, 7, 3, 11, 7] * 50)
    fast, free = build(emb, 2.0), build(emb, 2.0, history_free=True)
    searched: list[int] = []
    original = TruncatedGumbel.neighbours

    def counting(self: TruncatedGumbel, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        searched.append(int(ids.size))
        return original(self, ids, k)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(TruncatedGumbel, "neighbours", counting)
        y_fast = fast.privatize(batch, np.random.default_rng(4))
        assert searched == [3]
        searched.clear()
        y_free = free.privatize(batch, np.random.default_rng(4))
        assert searched == [batch.size]
    assert np.array_equal(y_fast, y_free)


def test_options_are_declared_and_validated() -> None:
    assert [o.name for o in options_of("truncated_gumbel")] == ["batch_size", "history_free"]
    emb = normal_embedding()
    with pytest.raises(InvalidParameterError, match="history_free"), warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        TruncatedGumbel(emb, 1.0, history_free="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="batch_size"):
        make_mechanism("truncated_gumbel", emb, 1.0, batch_size=0)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        make_mechanism("truncated_gumbel", emb, -1.0)
    with pytest.raises(InvalidParameterError, match="not an option"):
        make_mechanism("truncated_gumbel", emb, 1.0, gamma=2.0)
    with pytest.raises(InvalidParameterError, match="two words"), warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        TruncatedGumbel(normal_embedding(n=1), 1.0)


def test_construction_is_cheap_and_says_it_is_not_metric_dp() -> None:
    mech = build(normal_embedding(), 1.0)
    assert "_inter_word" not in mech.__dict__ and "_flat" not in mech.__dict__  # built lazily
    d = mech.describe()
    assert d["metric_dp"] is False and "NOT metric DP" in str(d["guarantee"])
    assert "noise_scale" not in d  # nothing heavy computed for describe()
    mech.privatize([0, 1], np.random.default_rng(0))
    assert mech.describe()["noise_scale"] == pytest.approx(mech.scale)
    assert mech.guarantee(0, 1) == math.inf and mech.guarantee(2, 2) == 0.0


def test_epsilon_where_the_reference_scale_is_not_positive_is_an_error() -> None:
    emb = normal_embedding(30)
    mech = build(emb, 1.0)
    dist = mech.inter_word
    centre = 2 * (1 + math.log(emb.size)) / dist.min
    for eps in (centre - 1.0 / dist.max, centre + 1.0 / dist.min):  # Re W(2 a M) < 0; ln(a Delta_min) < 0
        with pytest.raises(InvalidParameterError, match="epsilon"):
            gumbel_scale(eps, emb.size, dist)
        bad = build(emb, eps)
        with pytest.raises(InvalidParameterError, match="epsilon"):
            bad.privatize([0], np.random.default_rng(0))
    assert gumbel_scale(1.0, emb.size, dist) > 0


# -- the exact distribution ----------------------------------------------------------------------------
def reference_probabilities(d: np.ndarray, logk: np.ndarray, b: float, m: float) -> np.ndarray:
    """The definition summed over k with scipy quad, no recursion and no log space (independent check)."""
    g = stats.gumbel_r(scale=b)
    z = g.cdf(m) - g.cdf(-m)
    f = lambda x: np.where(np.abs(x) <= m, g.pdf(x) / z, 0.0)  # noqa: E731
    s = lambda x: np.clip((g.cdf(m) - g.cdf(np.clip(x, -m, m))) / z, 0.0, 1.0)  # noqa: E731
    pk = np.exp(logk)
    out = np.zeros(d.size)
    out[0] += pk[0]
    for k in range(1, pk.size):
        for j in range(k):
            others = [i for i in range(k) if i != j]

            def integrand(t: float, j: int = j, others: list[int] = others) -> float:
                return float(f(t - d[j]) * np.prod([s(t - d[i]) for i in others]))

            pts = sorted({float(d[i] + e) for i in range(k) for e in (-m, m)})
            val, _ = integrate.quad(integrand, d[j] - m, d[j] + m, points=pts, limit=200, epsabs=1e-13)
            out[j] += pk[k] * val
    return out


@pytest.mark.parametrize("eps", [1.0, 60.0])
def test_distribution_matches_direct_integration(eps: float) -> None:
    emb = normal_embedding(6, seed=4)
    mech = build(emb, eps)
    ids, probs = mech.distribution(2)
    assert ids[0] == 2 and ids.size == emb.size - 1  # the word first; the farthest word never
    _, dist = mech.neighbours(np.array([2]), emb.size - 1)
    ref = reference_probabilities(dist[0], mech.k_law, mech.scale, mech.inter_word.max)
    assert probs.sum() == pytest.approx(1.0, abs=1e-10)
    np.testing.assert_allclose(probs, ref, rtol=1e-6, atol=1e-10)


def chi_square_pvalue(counts: np.ndarray, p: np.ndarray, n: int) -> float:
    expected = p * n
    assert np.all(counts[expected == 0] == 0)
    keep = expected > 5
    chi = float(np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep]))
    return float(stats.chi2.sf(chi, keep.sum() - 1))


def test_batched_sampler_draws_the_exact_distribution_and_a_wrong_epsilon_twin_fails() -> None:
    emb = normal_embedding(30, seed=1)
    mech = build(emb, 1.0)
    # the wrong-parameter twin: the noise scale b / 5. (Another epsilon is no twin: b barely
    # moves with epsilon and the truncation at Delta_max dominates; see the docs page.)
    twin = build(emb, 1.0)
    object.__setattr__(twin, "_scale", mech.scale / 5)
    gen = np.random.default_rng(7)
    n = 60_000
    ids = np.repeat([0, 5, 17], n)
    draws = mech.privatize(ids, gen).reshape(3, n)  # one batch: three words, one k-NN search
    for row, w in enumerate((0, 5, 17)):
        counts = np.bincount(draws[row], minlength=emb.size)
        assert chi_square_pvalue(counts, full(mech, w), n) > 1e-6, w
        assert chi_square_pvalue(counts, full(twin, w), n) < 1e-6, w


def test_small_batches_change_nothing() -> None:
    emb = normal_embedding(20, seed=2)
    small = build(emb, 2.0, batch_size=7)
    n = 40_000
    counts = np.bincount(small.privatize(np.full(n, 3), np.random.default_rng(3)), minlength=emb.size)
    assert chi_square_pvalue(counts, full(small, 3), n) > 1e-6


def test_truncated_parts() -> None:
    law = np.exp(truncated_poisson_law(30))
    pois = stats.poisson(math.log(29)).pmf(np.arange(30))
    np.testing.assert_allclose(law, pois / pois.sum(), rtol=1e-12)
    big = truncated_poisson_law(400_000)  # cut where the tail is below 1e-300
    assert 250 < big.size < 400 and np.exp(big).sum() == pytest.approx(1.0)
    g = truncated_gumbel_noise(np.random.default_rng(0), 2.0, 1.5, 200_000)
    assert np.all(np.abs(g) <= 1.5)

    def cdf(x: np.ndarray) -> np.ndarray:  # scipy has no truncated Gumbel: its CDF by hand
        lo, hi = np.exp(-np.exp(1.5 / 2.0)), np.exp(-np.exp(-1.5 / 2.0))
        return np.asarray((np.exp(-np.exp(-x / 2.0)) - lo) / (hi - lo))

    assert stats.kstest(g, cdf).pvalue > 1e-4


# -- the guarantee -------------------------------------------------------------------------------------
def test_exact_check_pins_the_violation_for_every_epsilon() -> None:
    """The claimed eps*d bound fails: each word's farthest word has probability 0 for it, > 0 for itself."""
    emb = normal_embedding(15, seed=5)
    x = np.asarray(emb.vectors, dtype=np.float64)
    d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))
    for eps in (0.5, 5.0, 200.0):
        mech = build(emb, eps)
        p = np.array([full(mech, w) for w in range(emb.size)])
        for w in range(emb.size):
            far = int(np.argmax(d[w]))
            assert p[w, far] == 0.0 and p[far, far] > 0
        res = audit_mechanism(mech, pairs=[(0, int(np.argmax(d[0])))], method="exact", random_state=0)
        assert not res.passed and res.worst_ratio == math.inf
        # even where both outputs are possible the log-ratio exceeds eps*d on some pair
        with np.errstate(divide="ignore", invalid="ignore"):
            lr = np.log(p[:, None, :]) - np.log(p[None, :, :])
        finite = np.where(np.isfinite(lr), lr, -np.inf).max(axis=2)
        np.fill_diagonal(finite, -np.inf)
        effective = float(np.max(finite / np.where(d > 0, d, 1.0)))
        assert effective > 5.0  # whatever eps is: eps barely changes the law


def test_audit_cli_reports_the_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    emb = normal_embedding(20, seed=6)
    emb.save(tmp_path / "emb")
    code = run_app(
        ["audit", "-m", "truncated_gumbel", "-e", "2", "--embedding", str(tmp_path / "emb"), "--pairs", "4",
         "--seed", "1", "--out", str(tmp_path / "out")]
    )  # fmt: skip
    out = capsys.readouterr()
    assert code == 1 and "FAIL" in out.out and "NOT metric DP" in out.err


# -- MLDP's bugs and the randomness policy -------------------------------------------------------------
def test_inter_word_distances_are_exact_not_from_one_random_word() -> None:
    r = np.random.default_rng(8)
    vec = r.normal(size=(300, 5))
    vec[41] = vec[40] + 1e-3  # the one close pair; a random word's row sees it with probability 2/300
    vec[7] = vec[3]  # a duplicate (distance 0) is skipped, as in MLDP
    d = pdist(vec)
    exact = (float(d[d > 0].min()), float(d.max()))
    for pdist_max in (10_000, 0):  # the pdist path and the sweep/pruned path for large vocabularies
        got = inter_word_distances(vec, pdist_max=pdist_max)
        assert (got.min, got.max) == pytest.approx(exact, rel=1e-12)
    emb = Embedding([f"w{i}" for i in range(300)], vec.astype(np.float32))
    mech = build(emb, 1.0)
    v32 = np.asarray(emb.vectors, dtype=np.float64)
    d32 = pdist(v32)
    assert mech.inter_word.min == pytest.approx(float(d32[d32 > 0].min()), rel=1e-12)
    assert mech.inter_word.max == pytest.approx(float(d32.max()), rel=1e-12)
    # MLDP's estimate (one random word's distances) misses the close pair for most words
    rows = [np.linalg.norm(v32 - v32[w], axis=1) for w in range(300)]
    one_word_min = np.array([row[row > 0].min() for row in rows])
    assert np.mean(one_word_min > 10 * mech.inter_word.min) > 0.95


def test_randomness_only_through_rng() -> None:
    emb = normal_embedding(25, seed=9)
    mech = build(emb, 3.0)
    ids = np.arange(25).repeat(40)
    state = np.random.get_state()  # noqa: NPY002  (the legacy global state must not be used)
    a = mech.privatize(ids, np.random.default_rng(5))
    np.random.seed(0)  # noqa: NPY002  (the legacy global state must not be used)
    b = mech.privatize(ids, np.random.default_rng(5))
    np.testing.assert_array_equal(a, b)
    np.random.set_state(state)  # noqa: NPY002  (the legacy global state must not be used)
    c = mech.privatize(ids, np.random.default_rng(5))
    assert np.array_equal(a, c)
    assert np.random.get_state()[1].tolist() == state[1].tolist()  # noqa: NPY002
    assert not np.array_equal(a, mech.privatize(ids, np.random.default_rng(6)))


# -- the command line --------------------------------------------------------------------------------
def test_explain_and_calibrate_run(emb_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["explain", "hockey", "-e", "3", "--mechanism", "truncated_gumbel", "--embedding", str(emb_dir)]
    assert run_app(args) == 0
    out = capsys.readouterr().out
    assert "truncated_gumbel" in out and "N_w" in out and "inf" in out  # the bound against alternatives
    code = run_app(["calibrate", "-e", "1,4", "--mechanism", "truncated_gumbel", "--embedding", str(emb_dir),
                    "--words", "all", "--samples", "50"])  # fmt: skip
    assert code == 0
    assert "epsilon" in capsys.readouterr().out
