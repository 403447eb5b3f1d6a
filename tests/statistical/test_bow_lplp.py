"""Statistical checks of the LPLP bag-of-words mechanism (slow).

1. The sampler matches its pmf on millions of draws from the ChaCha20 generator
   (chi-square, false-alarm rate 1e-6), over alphas from 0.05 to 0.99, and the same
   test rejects a sampler whose alpha is off by 2%.
2. The whole pipeline (vectorize -> compress -> noise) adds exactly that noise to
   every released entry, zeros included.
3. End to end: output frequencies of the released bin for two documents at l1
   distance N never exceed ``e^eps`` times each other beyond Clopper-Pearson
   error bars (Bonferroni, overall 1e-6), and a mechanism using 3x the claimed
   epsilon is caught.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _mdp_check import cp_bounds

from deniable.bow import (
    BinMap,
    BowPrivatizer,
    BowVectorizer,
    TwoSidedGeometric,
    Vocabulary,
    sample_two_sided_geometric,
)
from lplp_helpers import chacha, gof_pvalue

pytestmark = pytest.mark.slow
FALSE_ALARM = 1e-6


@pytest.mark.parametrize("alpha", [0.05, 0.5, 0.9, 0.99])
def test_sampler_matches_pmf_on_millions_of_draws(alpha: float) -> None:
    samples = sample_two_sided_geometric(2_000_000, chacha(21), alpha=alpha)
    assert gof_pvalue(samples, alpha) > FALSE_ALARM


@pytest.mark.parametrize("alpha", [0.3, 0.8])
def test_goodness_of_fit_catches_alpha_off_by_two_percent(alpha: float) -> None:
    samples = sample_two_sided_geometric(2_000_000, chacha(22), alpha=alpha * 1.02)
    assert gof_pvalue(samples, alpha) < FALSE_ALARM


def test_pipeline_adds_exactly_that_noise_to_every_entry() -> None:
    vocab = Vocabulary(("a", "b", "c", "d", "e", "f"))
    bmap = BinMap(np.array([0, 0, 1, 2, 2, -1]), 3)
    mech = TwoSidedGeometric(epsilon=1.5, precision=2.0)
    priv = BowPrivatizer(BowVectorizer(vocab), mech, bmap)
    docs = ["a b c", "", "f f f", "d e e e"] * 50_000
    noisy, _ = priv.privatize_batches([docs[i : i + 10_000] for i in range(0, len(docs), 10_000)], chacha(23))
    clean = bmap.apply(BowVectorizer(vocab).transform(docs)).toarray()
    residual = noisy.toarray().astype(np.int64) - clean
    assert gof_pvalue(residual.ravel(), mech.alpha) > FALSE_ALARM
    assert gof_pvalue(residual[clean == 0], mech.alpha) > FALSE_ALARM  # zeros are noised too


def lplp_violations(claimed_eps: float, true_eps: float, precision: float, n: int, seed: int) -> int:
    """Two documents whose count vectors differ by exactly N (in one bin), released n times each."""
    vocab = Vocabulary(("x", "y", "z"))
    bmap = BinMap(np.array([0, 0, 1]), 2)  # x and y share bin 0
    mech = TwoSidedGeometric(true_eps, precision)
    priv = BowPrivatizer(BowVectorizer(vocab), mech, bmap)
    n_words = int(precision)
    doc_a = " ".join(["x"] * n_words)  # counts (N, 0, 0): bin 0 = N
    doc_b = ""  # counts (0, 0, 0): l1 distance exactly N
    rng = chacha(seed)
    out_a, _ = priv.privatize_batches([[doc_a] * n], rng)
    out_b, _ = priv.privatize_batches([[doc_b] * n], rng)
    a = out_a.toarray()[:, 0]
    b = out_b.toarray()[:, 0]
    lo_v, hi_v = min(a.min(), b.min()), max(a.max(), b.max())
    ca = np.bincount(a - lo_v, minlength=hi_v - lo_v + 1)
    cb = np.bincount(b - lo_v, minlength=hi_v - lo_v + 1)
    cells = 2 * ca.size
    la, ha = cp_bounds(ca, n, FALSE_ALARM / cells)
    lb, hb = cp_bounds(cb, n, FALSE_ALARM / cells)
    bound = math.exp(claimed_eps)
    return int(np.sum(la > bound * hb) + np.sum(lb > bound * ha))


def test_released_bins_respect_the_lplp_bound() -> None:
    assert lplp_violations(claimed_eps=1.0, true_eps=1.0, precision=2, n=300_000, seed=31) == 0


def test_the_check_catches_a_mechanism_with_three_times_the_epsilon() -> None:
    assert lplp_violations(claimed_eps=1.0, true_eps=3.0, precision=2, n=300_000, seed=32) > 0
