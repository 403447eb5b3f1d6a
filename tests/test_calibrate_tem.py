"""Calibration against the project's TruncatedExponential (skipped until deniable.mechanisms.tem exists).

The bulk path computes TEM statistics from the formula with its own distances; these
tests pin it to the mechanism's own ``compact_distribution`` (gamma, metric and the
``d <= gamma`` convention must match) and check that TEM is detected as exact.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import make_tiny_embedding
from deniable.calibrate import explain, plausible_deniability

tem = pytest.importorskip("deniable.mechanisms.tem", reason="deniable.mechanisms.tem is not written yet")


@pytest.mark.parametrize("metric", ["euclidean", "angular"])
@pytest.mark.parametrize("epsilon", [0.5, 3.0, 15.0])
def test_bulk_matches_real_tem(metric: str, epsilon: float) -> None:
    emb = make_tiny_embedding(250, 4, seed=21)
    mech = tem.TruncatedExponential(emb, epsilon, metric=metric)
    assert hasattr(mech, "compact_distribution")
    ref = plausible_deniability(mech, method="distribution", samples=1000)
    bulk = plausible_deniability(mech, method="bulk", samples=1000, dtype=np.float64)
    assert bulk.method == "bulk" and bulk.exact
    for name in ("n_w", "s_w", "shannon", "min_entropy"):
        np.testing.assert_allclose(getattr(bulk, name), getattr(ref, name), rtol=1e-7, atol=1e-12)
    assert np.array_equal(bulk.support, ref.support)
    assert bulk.ball_size is not None and ref.ball_size is not None
    assert np.array_equal(bulk.ball_size, ref.ball_size)


def test_real_tem_auto_is_exact_and_sampling_agrees() -> None:
    emb = make_tiny_embedding(120, 3, seed=22)
    mech = tem.TruncatedExponential(emb, 4.0)
    exact = plausible_deniability(mech, samples=500)
    assert exact.exact and exact.method == "bulk"
    est = plausible_deniability(mech, samples=500, method="sample", confidence=1 - 1e-6, rng=np.random.default_rng(0))
    assert np.all((est.n_w_low <= exact.n_w) & (exact.n_w <= est.n_w_high))
    assert np.all((est.s_w_low <= exact.s_w) & (exact.s_w <= est.s_w_high))


def test_real_tem_other_metric_uses_distribution() -> None:
    emb = make_tiny_embedding(60, 3, seed=23)
    mech = tem.TruncatedExponential(emb, 2.0, metric="manhattan")
    res = plausible_deniability(mech, samples=100)
    assert res.method == "distribution" and res.exact


def test_explain_real_tem() -> None:
    emb = make_tiny_embedding(60, 3, seed=24)
    ex = explain(tem.TruncatedExponential(emb, 3.0), "w0")
    assert ex.exact and ex.ball_size is not None
    assert sum(o.probability for o in ex.outputs) + ex.other_mass == pytest.approx(1.0)
