"""madlib at extreme epsilon (issue 27): the decode stays exact however large the noise, so at
epsilon -> 0 the output follows the limit law (the word farthest along a uniform random
direction) instead of collapsing on word 0; below a documented floor epsilon is refused."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from deniable import Embedding, InvalidParameterError
from deniable.mechanisms import make_mechanism
from deniable.mechanisms.laplace import MIN_EPSILON, MultivariateLaplace, decode_far

# a convex pentagon and one point inside it (never the farthest along any direction)
POINTS = np.array([[1.0, 0.0], [0.0, 2.0], [-1.0, 0.5], [-0.5, -1.0], [1.0, -1.0], [0.1, 0.1]], dtype=np.float32)
EMB = Embedding([f"w{i}" for i in range(len(POINTS))], POINTS, name="pentagon")


def _limit_law() -> np.ndarray:
    """Pr[argmax_v v.u = i] for u uniform on the circle (a grid of 2^20 angles: error < 1e-5)."""
    theta = (np.arange(2**20) + 0.5) * (2 * np.pi / 2**20)
    u = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    winners = np.argmax(u @ POINTS.astype(np.float64).T, axis=1)
    return np.bincount(winners, minlength=len(POINTS)) / theta.size


def _chi2_pvalue(counts: np.ndarray, p: np.ndarray) -> float:
    keep = p > 0
    assert counts[~keep].sum() == 0  # an impossible word never comes out
    return float(stats.chisquare(counts[keep], p[keep] * counts.sum()).pvalue)


@pytest.mark.parametrize("magnitude", [1e4, 1e12, 1e100, 1e300])
def test_decode_far_is_the_exact_nearest_word(magnitude: float) -> None:
    rng = np.random.default_rng(3)
    vectors = rng.normal(size=(100, 4)).astype(np.float32)
    q = rng.normal(size=(30, 4)) * magnitude + vectors[rng.integers(0, 100, 30)]
    # the reference in exact rational arithmetic: argmin_v ||q - v||^2
    fq = [[Fraction(x) for x in row] for row in q.tolist()]
    fv = [[Fraction(x) for x in row] for row in vectors.astype(np.float64).tolist()]
    exact = [min(range(100), key=lambda j: sum((a - b) ** 2 for a, b in zip(row, fv[j], strict=True))) for row in fq]
    assert decode_far(q, vectors).tolist() == exact


@pytest.mark.parametrize("word", [0, 1, 5])
def test_tiny_epsilon_follows_the_limit_law_for_every_input(word: int) -> None:
    p = _limit_law()
    mech = MultivariateLaplace(EMB, 1e-300, index="exact")
    out = mech.privatize(np.full(20000, word), np.random.default_rng(100 + word))
    counts = np.bincount(out, minlength=len(POINTS))
    assert counts[0] < 20000 * 0.5  # not collapsed on word 0
    assert _chi2_pvalue(counts, p) > 1e-4
    # the twin: the same test rejects a wrong law (uniform over the pentagon's corners)
    wrong = np.r_[np.full(5, 0.2), 0.0]
    assert _chi2_pvalue(counts, wrong) < 1e-4


def test_small_epsilon_is_decoded_like_the_plain_path_where_both_apply() -> None:
    # at eps 1e-4 the noise is far (float64 decode) for most tokens; nearest word either way
    mech = MultivariateLaplace(EMB, 1e-4, index="exact")
    rng = np.random.default_rng(7)
    noisy = mech.noisy_vectors(np.arange(6).repeat(50), rng).astype(np.float64)
    assert np.array_equal(decode_far(noisy, POINTS), mech.decode(noisy.astype(np.float32)))


@pytest.mark.parametrize("eps", [MIN_EPSILON / 10, 5e-324])
def test_below_the_floor_epsilon_is_refused(eps: float) -> None:
    with pytest.raises(InvalidParameterError, match="1e-300"):
        MultivariateLaplace(EMB, eps)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        make_mechanism("madlib", EMB, epsilon=eps)
    MultivariateLaplace(EMB, MIN_EPSILON)  # the floor itself is allowed
