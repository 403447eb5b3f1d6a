"""End-to-end metric-DP check of the Vickrey mechanism (slow).

The Vickrey choice is post-processing of the noisy vector, so the noise mechanism's bound
must hold: Euclidean with Madlib noise, Mahalanobis with Mahalanobis noise. A mechanism
running at twice the claimed epsilon is caught.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from deniable import Embedding
from deniable.mechanisms.vickrey import Vickrey

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _mdp_check import violations  # noqa: E402

pytestmark = pytest.mark.slow

LINE_1D = Embedding(["a", "b", "c"], np.array([[0], [1], [2]], dtype=np.float32))
LINE_2D = Embedding(["a", "b", "c"], np.array([[0, 0], [1, 0], [2, 0]], dtype=np.float32))


@pytest.mark.parametrize(("emb", "t", "lam"), [(LINE_1D, 0.5, None), (LINE_1D, 0.9, None), (LINE_2D, 0.3, 0.5)])
def test_vickrey_respects_the_bound(emb: Embedding, t: float, lam: float | None) -> None:
    def make(e: Embedding, eps: float) -> Vickrey:
        return Vickrey(e, eps, t=t, lam=lam)

    assert violations(make, emb, 2.0, 2.0, 200_000, seed=1) == 0


@pytest.mark.parametrize(("emb", "lam"), [(LINE_1D, None), (LINE_2D, 0.5)])
def test_the_check_catches_a_vickrey_mechanism_with_the_wrong_epsilon(emb: Embedding, lam: float | None) -> None:
    def make(e: Embedding, eps: float) -> Vickrey:
        return Vickrey(e, eps, t=0.5, lam=lam)

    assert violations(make, emb, 2.0, 4.0, 200_000, seed=3) > 0
