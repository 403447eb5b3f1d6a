"""End-to-end metric-DP check of the multivariate Laplace mechanism (slow).

Output frequencies of M(w) and M(w') are estimated with many draws; the test
asserts, with Clopper-Pearson intervals (Bonferroni over all cells, overall
false-alarm rate 1e-6), that no output y has
``lower(P(y|w)) > exp(eps * d(w, w')) * upper(P(y|w'))``. On a 1-d vocabulary the
true ratio comes close enough to the bound that a mechanism running at 3x the
claimed epsilon is caught.
"""

from __future__ import annotations

import numpy as np
import pytest
from _mdp_check import violations as check_violations

from deniable import Embedding, MultivariateLaplace

pytestmark = pytest.mark.slow


def violations(emb: Embedding, claimed_eps: float, true_eps: float, n: int, seed: int) -> int:
    """Bound violations of madlib built at ``true_eps`` against the claim ``claimed_eps`` (shared check)."""
    return check_violations(lambda e, eps: MultivariateLaplace(e, epsilon=eps), emb, claimed_eps, true_eps, n, seed)


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
