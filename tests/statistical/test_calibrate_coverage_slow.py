"""Coverage of the sampled-statistics intervals, at scale (slow).

For a mechanism with a known output matrix the exact N_w and E[S_w] are known. Over many
independent intervals the number of misses must not exceed the 1e-6 upper tail of
Binomial(n, 1 - confidence) (each interval's coverage is at least the stated level), and
the same check must reject the values of wrong mechanisms. Also: sampling TEM through its
sampler agrees with its exact statistics.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from calibrate_fakes import FiniteMechanism, RefTEM
from conftest import make_tiny_embedding
from deniable.calibrate import plausible_deniability

pytestmark = pytest.mark.slow
FALSE_ALARM = 1e-6


def _misses(est, exact) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    miss_n = int(((exact.n_w < est.n_w_low) | (exact.n_w > est.n_w_high)).sum())
    miss_s = int(((exact.s_w < est.s_w_low) | (exact.s_w > est.s_w_high)).sum())
    return miss_n, miss_s


@pytest.mark.parametrize("confidence", [0.9, 0.99])
@pytest.mark.parametrize("eps", [1.0, 3.0, 6.0])
def test_coverage_at_stated_rate(confidence: float, eps: float) -> None:
    emb = make_tiny_embedding(200, 3, seed=4)
    samples, reps = 200, 15
    words = np.repeat(np.arange(emb.size), reps)
    fin = FiniteMechanism(emb, eps, matrix=RefTEM(emb, eps).matrix)
    est = plausible_deniability(fin, words, samples=samples, confidence=confidence, rng=np.random.default_rng(7))
    exact = plausible_deniability(RefTEM(emb, eps), words, samples=samples, method="distribution")
    limit = binom.isf(FALSE_ALARM, words.size, 1 - confidence)
    miss_n, miss_s = _misses(est, exact)
    assert miss_n <= limit, (miss_n, limit)
    assert miss_s <= limit, (miss_s, limit)


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_wrong_epsilon_is_rejected(factor: float) -> None:
    emb = make_tiny_embedding(200, 3, seed=4)
    eps, samples, reps, confidence = 3.0, 200, 15, 0.9
    words = np.repeat(np.arange(emb.size), reps)
    fin = FiniteMechanism(emb, eps, matrix=RefTEM(emb, eps).matrix)
    est = plausible_deniability(fin, words, samples=samples, confidence=confidence, rng=np.random.default_rng(8))
    wrong = plausible_deniability(RefTEM(emb, eps * factor), words, samples=samples, method="distribution")
    limit = binom.isf(FALSE_ALARM, words.size, 1 - confidence)
    miss_n, miss_s = _misses(est, wrong)
    assert miss_n > limit
    assert miss_s > limit


def test_sampling_tem_agrees_with_exact() -> None:
    """The same TEM, once sampled through privatize and once exact: every exact value in its interval."""
    emb = make_tiny_embedding(150, 3, seed=9)
    ref = RefTEM(emb, 4.0)
    est = plausible_deniability(ref, samples=2000, method="sample", confidence=1 - 1e-6, rng=np.random.default_rng(1))
    exact = plausible_deniability(ref, samples=2000)
    assert _misses(est, exact) == (0, 0)
    np.testing.assert_allclose(est.shannon, exact.shannon, atol=0.3)
