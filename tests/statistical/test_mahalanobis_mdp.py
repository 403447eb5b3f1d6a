"""End-to-end metric-DP check of the Mahalanobis mechanism in its own metric (slow).

Three words on a line in 2-d (so the regularized covariance is anisotropic): output
frequencies from many draws must satisfy ``P(y|w) <= exp(eps d_M(w, w')) P(y|w')`` up to
Clopper-Pearson intervals; a mechanism running at twice the claimed epsilon is caught.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from deniable import Embedding
from deniable.mechanisms.mahalanobis import Mahalanobis

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mdp_check import violations  # noqa: E402

pytestmark = pytest.mark.slow


def line() -> Embedding:
    return Embedding(["a", "b", "c"], np.array([[0, 0], [1, 0], [2, 0]], dtype=np.float32))


def make(emb: Embedding, eps: float) -> Mahalanobis:
    return Mahalanobis(emb, eps, lam=0.5)


def test_mahalanobis_respects_the_bound_in_its_metric() -> None:
    assert violations(make, line(), 2.0, 2.0, 200_000, seed=1) == 0
    r = np.random.default_rng(3)
    emb = Embedding([f"w{i}" for i in range(5)], (r.normal(size=(5, 2)) * [3.0, 0.5]).astype(np.float32))
    assert violations(make, emb, 1.5, 1.5, 100_000, seed=2) == 0


def test_the_check_catches_a_mahalanobis_mechanism_with_the_wrong_epsilon() -> None:
    assert violations(make, line(), 2.0, 4.0, 200_000, seed=4) > 0
