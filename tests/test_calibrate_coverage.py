"""Sampled estimates fall inside their confidence intervals at (at least) the stated rate.

A mechanism with a known output matrix (TEM's, from the formula) is sampled; its exact
N_w and E[S_w] are known. Each interval misses with probability <= 1 - confidence and the
draws are independent, so the number of misses is stochastically at most
Binomial(n, 1 - confidence): we fail only past that binomial's 1e-6 upper tail. The
same check must reject the exact values of a wrong mechanism (another epsilon).
"""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

from calibrate_fakes import FiniteMechanism, RefTEM
from conftest import make_tiny_embedding
from deniable.calibrate import plausible_deniability

FALSE_ALARM = 1e-6


def _misses(est, exact) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    miss_n = int(((exact.n_w < est.n_w_low) | (exact.n_w > est.n_w_high)).sum())
    miss_s = int(((exact.s_w < est.s_w_low) | (exact.s_w > est.s_w_high)).sum())
    return miss_n, miss_s


def test_interval_coverage_and_rejection() -> None:
    emb = make_tiny_embedding(30, 2, seed=1)
    eps, samples, reps, conf = 2.0, 50, 20, 0.95
    words = np.repeat(np.arange(emb.size), reps)
    fin = FiniteMechanism(emb, eps, matrix=RefTEM(emb, eps).matrix)
    est = plausible_deniability(fin, words, samples=samples, confidence=conf, rng=np.random.default_rng(0))
    limit = binom.isf(FALSE_ALARM, words.size, 1 - conf)

    exact = plausible_deniability(RefTEM(emb, eps), words, samples=samples, method="distribution")
    miss_n, miss_s = _misses(est, exact)
    assert miss_n <= limit and miss_s <= limit

    wrong = plausible_deniability(RefTEM(emb, 2 * eps), words, samples=samples, method="distribution")
    assert _misses(est, wrong)[0] > limit  # N_w intervals catch a mechanism at twice the epsilon
