"""Goodness of fit of the multivariate Laplace noise sampler (fast; default suite).

Each test uses a fixed seed and a false-alarm rate of 1e-6, and each has a twin
showing that the same test rejects a wrong sampler (wrong epsilon, or the classic
per-coordinate Laplace bug).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from deniable.mechanisms.laplace import sample_laplace_noise

ALPHA = 1e-6
N = 20_000


def radius_pvalue(z: np.ndarray, dim: int, epsilon: float) -> float:
    r = np.linalg.norm(z, axis=1)
    return float(stats.kstest(r, stats.gamma(a=dim, scale=1 / epsilon).cdf).pvalue)


def direction_pvalue(z: np.ndarray, axis: np.ndarray) -> float:
    """Projection of the unit direction on an axis: (t+1)/2 ~ Beta((n-1)/2, (n-1)/2)."""
    dim = z.shape[1]
    u = z / np.linalg.norm(z, axis=1, keepdims=True)
    axis = axis / np.linalg.norm(axis)
    t = (u @ axis + 1) / 2
    a = (dim - 1) / 2
    return float(stats.kstest(t, stats.beta(a, a).cdf).pvalue)


@pytest.mark.parametrize(("dim", "epsilon"), [(2, 1.0), (50, 10.0), (300, 5.0)])
def test_radius_and_direction_fit(dim: int, epsilon: float) -> None:
    rng = np.random.default_rng(2024 + dim)
    z = sample_laplace_noise(N, dim, epsilon, rng)
    assert radius_pvalue(z, dim, epsilon) > ALPHA
    for axis in (rng.normal(size=dim), np.eye(dim)[0]):
        assert direction_pvalue(z, axis) > ALPHA


@pytest.mark.parametrize("wrong", [0.9, 1.1])
def test_radius_test_rejects_a_wrong_epsilon(wrong: float) -> None:
    rng = np.random.default_rng(7)
    z = sample_laplace_noise(N, 50, 10.0 * wrong, rng)
    assert radius_pvalue(z, 50, 10.0) < ALPHA


def test_tests_reject_per_coordinate_laplace() -> None:
    """The classic bug: i.i.d. Laplace per coordinate (an L1 mechanism)."""
    rng = np.random.default_rng(8)
    dim, eps = 50, 10.0
    z = rng.laplace(scale=1 / eps, size=(N, dim))
    assert radius_pvalue(z, dim, eps) < ALPHA
    # even rescaled to the right mean radius, its directions are not uniform
    z *= (dim / eps) / np.linalg.norm(z, axis=1).mean()
    assert radius_pvalue(z, dim, eps) < ALPHA


def test_direction_test_rejects_non_uniform_directions() -> None:
    rng = np.random.default_rng(9)
    z = sample_laplace_noise(N, 10, 1.0, rng)
    z[:, 0] = np.abs(z[:, 0])  # directions folded into a half-space
    assert direction_pvalue(z, np.eye(10)[0]) < ALPHA
