"""Plausible-deniability statistics: exact values on hand-computable distributions, sampled estimates."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate_fakes import FiniteMechanism, RefTEM, line_embedding, tem_matrix
from deniable import InvalidParameterError
from deniable.calibrate import plausible_deniability
from deniable.calibrate.stats import (
    clopper_pearson,
    compact_statistics,
    distinct_count_interval,
    resolve_words,
    statistics_from_draws,
)

E = math.exp


def _stats_by_hand(weights: list[float], self_index: int, eta: float, samples: int) -> dict[str, float]:
    z = sum(weights)
    p = [w / z for w in weights]
    srt = sorted(p, reverse=True)
    cum, support = 0.0, 0
    for q in srt:
        cum += q
        support += 1
        if cum >= 1 - eta - 1e-12:
            break
    return {
        "n_w": p[self_index],
        "s_w": sum(1 - (1 - q) ** samples for q in p),
        "support": support,
        "shannon": -sum(q * math.log2(q) for q in p),
        "min_entropy": -math.log2(max(p)),
    }


# -- compact_statistics ------------------------------------------------------------------


def test_compact_statistics_by_hand() -> None:
    # p = (1/2, 1/4, 1/4): eta-support at eta = 0.2 is 3 (1/2 + 1/4 < 0.8), at eta = 0.25 it is 2
    n, s, sup, h, hmin = compact_statistics([0.5, 0.25, 0.25], 0.5, eta=0.2, samples=2)
    assert n == 0.5
    assert s == pytest.approx(0.75 + 2 * (1 - 0.75**2))
    assert sup == 3
    assert h == pytest.approx(1.5)
    assert hmin == pytest.approx(1.0)
    assert compact_statistics([0.5, 0.25, 0.25], 0.5, eta=0.25)[2] == 2


def test_compact_statistics_outside_block_counted_in_bulk() -> None:
    # 0.4 and 0.1 explicit, then 5 outside words of 0.1 each: 0.4 + 6 * 0.1 = 1
    _, s, sup, h, hmin = compact_statistics([0.4, 0.1], 0.4, n_outside=5, p_outside=0.1, eta=0.05, samples=3)
    assert sup == 7  # 0.4 + 0.1 * 5 = 0.9 < 0.95 <= 0.4 + 0.1 * 6
    assert h == pytest.approx(-(0.4 * math.log2(0.4) + 6 * 0.1 * math.log2(0.1)))
    assert hmin == pytest.approx(-math.log2(0.4))
    assert s == pytest.approx((1 - 0.6**3) + 6 * (1 - 0.9**3))
    # the outside block alone reaches the target: only as many of them as needed
    assert compact_statistics([0.1], 0.1, n_outside=9, p_outside=0.1, eta=0.5)[2] == 5


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.01, 1.0), min_size=1, max_size=12),
    st.integers(0, 6),
    st.floats(0.001, 0.9),
    st.floats(0.001, 0.5),
)
def test_compact_equals_expanded(weights: list[float], n_out: int, w_out_frac: float, eta: float) -> None:
    """The compact form (outside block counted in bulk) equals the fully expanded distribution."""
    w_out = w_out_frac * min(weights)
    z = sum(weights) + n_out * w_out
    probs = np.array(weights) / z
    full = np.concatenate([probs, np.full(n_out, w_out / z)])
    a = compact_statistics(probs, probs[0], n_outside=n_out, p_outside=w_out / z, eta=eta, samples=50)
    b = compact_statistics(full, full[0], eta=eta, samples=50)
    assert a[0] == pytest.approx(b[0])
    assert a[1] == pytest.approx(b[1], rel=1e-9)
    assert a[2] == b[2]
    assert a[3] == pytest.approx(b[3], rel=1e-9, abs=1e-12)
    assert a[4] == pytest.approx(b[4])


# -- exact TEM statistics on a hand-computable vocabulary ------------------------------


@pytest.mark.parametrize("method", ["bulk", "distribution"])
def test_tem_statistics_by_hand(method: str) -> None:
    """Words at 0, 1, 2, 3 on a line, eps = 2, gamma = 1.5: weights exp(-min(d, 1.5))."""
    emb = line_embedding([0, 1, 2, 3])
    mech = RefTEM(emb, 2.0, gamma=1.5)
    res = plausible_deniability(mech, method=method, eta=0.05, samples=10, dtype=np.float64)
    assert res.exact
    expected = [
        ([1, E(-1), E(-1.5), E(-1.5)], 0, 2),  # w0: d = 0, 1, 2, 3; |L_w| = 2
        ([E(-1), 1, E(-1), E(-1.5)], 1, 3),  # w1: d = 1, 0, 1, 2; |L_w| = 3
        ([E(-1.5), E(-1), 1, E(-1)], 2, 3),
        ([E(-1.5), E(-1.5), E(-1), 1], 3, 2),
    ]
    for i, (weights, self_i, ball) in enumerate(expected):
        want = _stats_by_hand(weights, self_i, 0.05, 10)
        assert res.n_w[i] == pytest.approx(want["n_w"], rel=1e-12)
        assert res.s_w[i] == pytest.approx(want["s_w"], rel=1e-9)
        assert res.support[i] == want["support"]
        assert res.shannon[i] == pytest.approx(want["shannon"], rel=1e-12)
        assert res.min_entropy[i] == pytest.approx(want["min_entropy"], rel=1e-12)
        assert res.ball_size is not None and res.ball_size[i] == ball
    # exact results have degenerate intervals
    assert np.array_equal(res.n_w_low, res.n_w) and np.array_equal(res.s_w_high, res.s_w)


def test_tem_eta_support_by_hand() -> None:
    # w0 above: p = (0.551, 0.203, 0.123, 0.123): cumulative 0.551, 0.754, 0.877, 1
    emb = line_embedding([0, 1, 2, 3])
    mech = RefTEM(emb, 2.0, gamma=1.5)
    for eta, want in [(0.5, 1), (0.3, 2), (0.2, 3), (0.05, 4)]:
        for method in ("bulk", "distribution"):
            assert plausible_deniability(mech, [0], eta=eta, method=method).support[0] == want


def test_tem_words_at_exactly_gamma_are_inside() -> None:
    """d <= gamma: a word at distance exactly gamma is in L_w, with the same probability as outside words."""
    emb = line_embedding([0, 1, 2, 3])
    mech = RefTEM(emb, 4.0, gamma=1.0)
    for method in ("bulk", "distribution"):
        res = plausible_deniability(mech, method=method, dtype=np.float32)
        assert res.ball_size is not None
        assert res.ball_size.tolist() == [2, 3, 3, 2]
        z = 1 + 3 * E(-2)
        assert res.n_w[0] == pytest.approx(1 / z, rel=1e-6)


@pytest.mark.parametrize("metric", ["euclidean", "angular"])
@pytest.mark.parametrize("epsilon", [0.5, 3.0, 20.0])
@pytest.mark.parametrize("gamma", [None, 0.2, 100.0])
def test_bulk_agrees_with_compact_distribution(metric: str, epsilon: float, gamma: float | None) -> None:
    from conftest import make_tiny_embedding

    emb = make_tiny_embedding(300, 4, seed=3)
    mech = RefTEM(emb, epsilon, metric=metric, gamma=gamma)
    ref = plausible_deniability(mech, method="distribution", samples=1000)
    b64 = plausible_deniability(mech, method="bulk", samples=1000, dtype=np.float64)
    b32 = plausible_deniability(mech, method="bulk", samples=1000, dtype=np.float32)
    for name in ("n_w", "shannon", "min_entropy"):
        np.testing.assert_allclose(getattr(b64, name), getattr(ref, name), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(getattr(b32, name), getattr(ref, name), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(b64.s_w, ref.s_w, rtol=1e-8)
    np.testing.assert_allclose(b32.s_w, ref.s_w, rtol=1e-4)
    assert np.array_equal(b64.support, ref.support)
    assert np.abs(b32.support - ref.support).max() <= 1
    assert b64.ball_size is not None and ref.ball_size is not None
    assert np.array_equal(b64.ball_size, ref.ball_size)


def test_bulk_small_blocks_and_subsets() -> None:
    from conftest import make_tiny_embedding
    from deniable.calibrate import tem_statistics

    emb = make_tiny_embedding(120, 3, seed=5)
    mech = RefTEM(emb, 4.0)
    assert mech.gamma is not None
    whole = tem_statistics(emb, 4.0, mech.gamma, dtype=np.float64)
    ids = np.array([5, 0, 119, 5])
    part = tem_statistics(emb, 4.0, mech.gamma, ids, dtype=np.float64, block_elements=1)  # one word per block
    threaded = tem_statistics(emb, 4.0, mech.gamma, dtype=np.float64, block_elements=500, workers=3)
    for k in whole:
        np.testing.assert_allclose(part[k], whole[k][ids], rtol=1e-12)
        np.testing.assert_allclose(threaded[k], whole[k], rtol=1e-12)


def test_auto_method_choice() -> None:
    emb = line_embedding([0, 1, 2])
    assert plausible_deniability(RefTEM(emb, 1.0)).method == "bulk"
    assert plausible_deniability(RefTEM(emb, 1.0, metric="manhattan")).method == "distribution"
    fin = FiniteMechanism(emb, 1.0, matrix=np.eye(3))
    res = plausible_deniability(fin, samples=20, rng=np.random.default_rng(0))
    assert res.method == "sample" and not res.exact
    with pytest.raises(InvalidParameterError, match="method"):
        plausible_deniability(fin, method="bulk")
    with pytest.raises(InvalidParameterError, match="method"):
        plausible_deniability(fin, method="distribution")
    with pytest.raises(InvalidParameterError, match="method"):
        plausible_deniability(fin, method="magic")


def test_dispatch_reads_capabilities_not_names() -> None:
    from typing import ClassVar

    emb = line_embedding([0, 1, 2, 4])

    class Renamed(RefTEM):  # the TEM distribution under another name: still bulk
        name: ClassVar[str] = "something-else"

    class NotTEM(RefTEM):  # named "tem" but without the capability: word by word
        truncated_exponential: ClassVar[bool] = False

    class Plain(RefTEM):  # only distribution(): no ball sizes
        truncated_exponential: ClassVar[bool] = False
        has_compact_distribution: ClassVar[bool] = False

    assert plausible_deniability(Renamed(emb, 1.0)).method == "bulk"
    not_tem = plausible_deniability(NotTEM(emb, 1.0))
    assert not_tem.method == "distribution" and not_tem.ball_size is not None
    plain = plausible_deniability(Plain(emb, 1.0))
    assert plain.method == "distribution" and plain.ball_size is None
    np.testing.assert_allclose(plain.n_w, not_tem.n_w, rtol=1e-12)
    with pytest.raises(InvalidParameterError, match="method"):
        plausible_deniability(NotTEM(emb, 1.0), method="bulk")


def test_random_state_int_is_reproducible_without_a_not_private_warning() -> None:
    import warnings

    from deniable.calibrate import choose_epsilon, neighbour_distances
    from deniable.calibrate.compare import privacy_ratio

    emb = line_embedding([0, 1, 2, 4, 7, 11])
    fin = FiniteMechanism(emb, 1.0, matrix=tem_matrix(emb, 1.0, 3.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a NotPrivateWarning would fail here
        a = plausible_deniability(fin, 3, samples=50, random_state=5)
        b = plausible_deniability(fin, 3, samples=50, random_state=5)
        old = plausible_deniability(fin, 3, samples=50, rng=5)  # the old keyword still works
        neighbour_distances(emb, 2, ks=(1,), random_state=1)
        choose_epsilon(lambda e: RefTEM(emb, e), [1.0, 2.0], words=3, samples=10, random_state=2)
        privacy_ratio(fin, fin, pairs=10, random_state=0)
    assert np.array_equal(a.ids, b.ids) and np.array_equal(a.s_w, b.s_w) and np.array_equal(a.n_w, b.n_w)
    assert np.array_equal(a.ids, old.ids) and np.array_equal(a.s_w, old.s_w)
    with pytest.raises(InvalidParameterError, match="rng"):
        plausible_deniability(fin, samples=5, random_state=1, rng=1)
    with pytest.raises(InvalidParameterError, match="random_state"):
        plausible_deniability(fin, samples=5, random_state="seven")  # type: ignore[arg-type]


def test_one_tem_arithmetic_for_a_block_and_a_row() -> None:
    from conftest import make_tiny_embedding
    from deniable.mechanisms.tem import TruncatedExponential
    from deniable.mechanisms.tem._geometry import Geometry, tem_distributions

    emb = make_tiny_embedding(200, 4, seed=8)
    mech = TruncatedExponential(emb, 3.0, gamma=1.0, cache=False)
    q = np.array([3, 0, 199], dtype=np.int64)
    d = np.empty((q.size, emb.size))
    Geometry(emb, "euclidean").block(q, d)
    block = tem_distributions(d, q, 1.5, 1.0)
    for i, w in enumerate(q.tolist()):
        cd = mech.compact_distribution(w)
        assert np.array_equal(cd.ids, np.flatnonzero(block.inside[i]))
        np.testing.assert_allclose(cd.probs, block.weights[i, cd.ids] / block.z[i], rtol=1e-9)
        assert cd.n_outside == emb.size - block.ball[i]
        assert cd.p_outside == pytest.approx(block.p_outside[i], rel=1e-9)
        assert cd.total == pytest.approx(1.0)
        assert block.t[i, w] == 0.0 and block.weights[i, w] == 1.0


# -- sampled statistics --------------------------------------------------------------------


def test_statistics_from_draws_by_hand() -> None:
    draws = np.array(
        [
            [0, 0, 1, 2, 0, 1, 3, 0],  # counts 0:4 1:2 2:1 3:1
            [5, 5, 5, 5, 5, 5, 5, 5],
        ]
    )
    out = statistics_from_draws([0, 1], draws, eta=0.2)
    assert out["n_w"].tolist() == [0.5, 0.0]
    assert out["s_w"].tolist() == [4.0, 1.0]
    assert out["support"].tolist() == [3, 1]  # 4 + 2 = 6 < 0.8 * 8 <= 4 + 2 + 1
    h0 = -(0.5 * math.log2(0.5) + 0.25 * math.log2(0.25) + 2 * 0.125 * math.log2(0.125))
    assert out["shannon"][0] == pytest.approx(h0)
    assert out["shannon"][1] == 0.0
    assert out["min_entropy"].tolist() == [1.0, 0.0]
    assert out["self_count"].tolist() == [4, 0]
    with pytest.raises(InvalidParameterError):
        statistics_from_draws([0], draws)


def test_sampling_is_batched_never_token_by_token() -> None:
    emb = line_embedding([0, 1, 2, 3])
    fin = FiniteMechanism(emb, 1.0, matrix=tem_matrix(emb, 1.0, 1.5))
    plausible_deniability(fin, samples=500, chunk_tokens=1000, rng=np.random.default_rng(0))
    assert fin.calls == [1000, 1000]  # 2 words x 500 draws per privatize call


def test_sampled_estimates_match_exact_values() -> None:
    emb = line_embedding([0, 1, 2, 3, 4])
    ref = RefTEM(emb, 1.5, gamma=2.0)
    fin = FiniteMechanism(emb, 1.5, matrix=ref.matrix)
    exact = plausible_deniability(ref, samples=400, method="distribution")
    est = plausible_deniability(fin, samples=400, rng=np.random.default_rng(1), confidence=0.999)
    assert np.all((est.n_w_low <= exact.n_w) & (exact.n_w <= est.n_w_high))
    assert np.all((est.s_w_low <= exact.s_w) & (exact.s_w <= est.s_w_high))
    np.testing.assert_allclose(est.shannon, exact.shannon, atol=0.15)


def test_confidence_interval_helpers() -> None:
    lo, hi = clopper_pearson([0, 5, 10], 10, 0.95)
    assert lo[0] == 0.0 and hi[2] == 1.0
    assert lo[1] == pytest.approx(0.187086, abs=1e-5) and hi[1] == pytest.approx(0.812914, abs=1e-5)
    lo, hi = distinct_count_interval([1, 10, 500], 1000, 0.95)
    assert np.all(lo <= [1, 10, 500]) and np.all(hi >= [1, 10, 500])
    assert lo[0] == 1.0 and np.all(hi <= 1000)
    lo2, hi2 = distinct_count_interval([10], 1000, 0.99)
    assert lo2[0] < lo[1] and hi2[0] > hi[1]  # more confidence, wider
    with pytest.raises(InvalidParameterError, match="confidence"):
        clopper_pearson([1], 2, 1.5)


# -- words, results ----------------------------------------------------------------------


def test_resolve_words(tiny_embedding) -> None:  # type: ignore[no-untyped-def]
    assert resolve_words(tiny_embedding).tolist() == list(range(8))
    assert resolve_words(tiny_embedding, ["w3", "w1"]).tolist() == [3, 1]
    assert resolve_words(tiny_embedding, np.array([2, 2])).tolist() == [2, 2]
    sample = resolve_words(tiny_embedding, 3, np.random.default_rng(0))
    assert len(set(sample.tolist())) == 3 and np.all(np.diff(sample) > 0)
    assert resolve_words(tiny_embedding, 100).size == 8
    with pytest.raises(InvalidParameterError) as info:
        resolve_words(tiny_embedding, ["w1", "SecretWord"])
    assert "SecretWord" not in str(info.value)
    with pytest.raises(InvalidParameterError):
        resolve_words(tiny_embedding, [99])
    with pytest.raises(InvalidParameterError):
        resolve_words(tiny_embedding, [])


def test_result_summary_worst_cases_and_csv(tmp_path) -> None:  # type: ignore[no-untyped-def]
    emb = line_embedding([0, 1, 2, 3])
    res = plausible_deniability(RefTEM(emb, 2.0, gamma=1.5), samples=10)
    assert len(res) == 4 and res.words == ["w0", "w1", "w2", "w3"]
    assert res.worst_unchanged() == pytest.approx(res.n_w.max())
    assert res.worst_support() == pytest.approx(res.s_w.min())
    assert res.worst_support(kind="eta") == res.support.min()
    assert res.worst_unchanged(50) == pytest.approx(np.median(res.n_w))
    summ = res.summary()
    assert summ["N_w"]["p100"] == pytest.approx(res.n_w.max())
    path = res.to_csv(tmp_path / "s.csv")
    lines = path.read_text().splitlines()
    assert len(lines) == 5 and lines[0].startswith("epsilon,word,id,N_w")
    assert res.describe()["exact"] is True


def test_parameter_validation() -> None:
    emb = line_embedding([0, 1])
    mech = RefTEM(emb, 1.0)
    for kwargs in ({"samples": 0}, {"eta": 0.0}, {"eta": 1.0}, {"confidence": 1.0}):
        with pytest.raises(InvalidParameterError):
            plausible_deniability(mech, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("epsilon", [9.0, 30.0])
def test_bulk_float32_support_size_on_a_large_vocabulary(epsilon: float) -> None:
    # E[S_w] = sum_y 1 - (1 - p_y)^s over 100k words, a small number when eps is large: summed
    # as V - sum(exp(.)) in float32 it loses ~1e-3 relative; the float32 default must stay at 1e-5.
    from conftest import make_tiny_embedding
    from deniable import TruncatedExponential

    emb = make_tiny_embedding(100_000, 4, seed=5)
    mech = TruncatedExponential(emb, epsilon)
    words = np.arange(0, 100_000, 12_500)
    b64 = plausible_deniability(mech, words=words, method="bulk", samples=1000, dtype=np.float64)
    b32 = plausible_deniability(mech, words=words, method="bulk", samples=1000, dtype=np.float32)
    np.testing.assert_allclose(b32.s_w, b64.s_w, rtol=1e-5)
    np.testing.assert_allclose(b32.n_w, b64.n_w, rtol=1e-4)
