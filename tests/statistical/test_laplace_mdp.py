"""End-to-end metric-DP check of the multivariate Laplace mechanism (slow).

Output frequencies of M(w) and M(w') are estimated with many draws; the test
asserts, with Clopper-Pearson intervals (Bonferroni over all cells, overall
false-alarm rate 1e-6), that no output y has
``lower(P(y|w)) > exp(eps * d(w, w')) * upper(P(y|w'))``. On a 1-d vocabulary the
true ratio comes close enough to the bound that a mechanism running at 3x the
claimed epsilon is caught.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from deniable import Embedding, MultivariateLaplace

pytestmark = pytest.mark.slow
ALPHA = 1e-6


def cp_bounds(k: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    lo = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
    hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return lo, hi


def violations(emb: Embedding, claimed_eps: float, true_eps: float, n: int, seed: int) -> int:
    mech = MultivariateLaplace(emb, epsilon=true_eps)
    rng = np.random.default_rng(seed)
    v = emb.size
    counts = np.zeros((v, v))
    for w in range(v):
        out = mech.privatize(np.full(n, w), rng)
        counts[w] = np.bincount(out, minlength=v)
    cells = v * v * (v - 1)
    lo, hi = cp_bounds(counts, n, ALPHA / cells)
    bad = 0
    for w, w2 in itertools.permutations(range(v), 2):
        d = float(np.linalg.norm(emb.vectors[w] - emb.vectors[w2]))
        bad += int(np.sum(lo[w] > np.exp(claimed_eps * d) * hi[w2]))
    return bad


def line_embedding() -> Embedding:
    return Embedding(["a", "b", "c"], np.array([[0.0], [1.0], [2.0]], dtype=np.float32))


def test_madlib_respects_the_bound() -> None:
    assert violations(line_embedding(), 2.0, 2.0, 200_000, seed=1) == 0
    r = np.random.default_rng(3)
    emb = Embedding([f"w{i}" for i in range(5)], r.normal(size=(5, 2)).astype(np.float32))
    assert violations(emb, 1.5, 1.5, 100_000, seed=2) == 0


def test_the_check_catches_a_mechanism_with_the_wrong_epsilon() -> None:
    # claims eps = 2 but adds the noise of eps = 6
    assert violations(line_embedding(), 2.0, 6.0, 200_000, seed=4) > 0
