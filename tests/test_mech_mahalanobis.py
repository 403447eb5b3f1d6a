"""The regularized Mahalanobis mechanism: the noise law, the metric, lambda = 0 is Madlib (issue 17)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from deniable import Embedding, InvalidParameterError, MultivariateLaplace
from deniable.mechanisms import make_mechanism
from deniable.mechanisms.mahalanobis import Mahalanobis, regularized_covariance


def anisotropic(n: int = 400, seed: int = 0) -> Embedding:
    r = np.random.default_rng(seed)
    vec = r.normal(size=(n, 3)) * np.array([5.0, 1.0, 0.2])
    return Embedding([f"w{i}" for i in range(n)], vec.astype(np.float32))


def test_regularized_covariance_normalisation() -> None:
    emb = anisotropic()
    sig1 = regularized_covariance(emb.vectors, 1.0)
    assert np.trace(sig1) == pytest.approx(3.0)  # mean variance 1
    np.testing.assert_allclose(regularized_covariance(emb.vectors, 0.0), np.eye(3))
    half = regularized_covariance(emb.vectors, 0.5)
    np.testing.assert_allclose(half, 0.5 * sig1 + 0.5 * np.eye(3))


def test_lambda_zero_is_madlib() -> None:
    emb = anisotropic(50)
    ids = np.arange(50).repeat(4)
    a = Mahalanobis(emb, 3.0, lam=0.0).noisy_vectors(ids, np.random.default_rng(2))
    b = MultivariateLaplace(emb, 3.0).noisy_vectors(ids, np.random.default_rng(2))
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_noise_is_elliptical_with_gamma_radius_in_the_mahalanobis_norm() -> None:
    """``||Sigma^{-1/2} z|| ~ Gamma(n, 1/eps)`` and ``Sigma^{-1/2} z / ||.||`` is uniform.

    A peer implementation renormalises ``Sigma^{1/2} u`` to unit length before scaling, which
    makes the Euclidean norm Gamma-distributed instead: this test fails for it.
    """
    emb = anisotropic()
    eps = 2.0
    mech = Mahalanobis(emb, eps, lam=1.0)
    z = mech.noise(40_000, np.random.default_rng(7))
    white = z @ mech.shape.inv_sqrt.T
    r = np.linalg.norm(white, axis=1)
    assert stats.kstest(r, stats.gamma(a=3, scale=1 / eps).cdf).pvalue > 1e-4
    # the whitened directions are isotropic: second moments equal on every axis
    u = white / r[:, None]
    np.testing.assert_allclose((u**2).mean(axis=0), np.full(3, 1 / 3), atol=0.01)
    # and the Euclidean norm is NOT Gamma(n, 1/eps) (what the renormalising bug would give)
    assert stats.kstest(np.linalg.norm(z, axis=1), stats.gamma(a=3, scale=1 / eps).cdf).pvalue < 1e-6


def test_distance_is_the_mahalanobis_metric() -> None:
    emb = anisotropic(60)
    mech = make_mechanism("mahalanobis", emb, 1.0, lam=0.7)
    sigma = regularized_covariance(emb.vectors, 0.7)
    diff = emb.vectors[3].astype(np.float64) - emb.vectors[17]
    assert mech.distance(3, 17) == pytest.approx(float(np.sqrt(diff @ np.linalg.solve(sigma, diff))))
    assert mech.guarantee(3, 17) == pytest.approx(mech.distance(3, 17))
    assert mech.describe()["metric"] == "mahalanobis"


def test_privatize_is_nearest_neighbour_of_the_noisy_vector() -> None:
    emb = anisotropic(80)
    mech = Mahalanobis(emb, 5.0, lam=0.5)
    ids = np.arange(80).repeat(3)
    noisy = mech.noisy_vectors(ids, np.random.default_rng(4))
    out = mech.privatize(ids, np.random.default_rng(4))
    d = ((noisy[:, None, :].astype(np.float64) - emb.vectors[None].astype(np.float64)) ** 2).sum(-1)
    np.testing.assert_array_equal(out, d.argmin(axis=1))


def test_options_are_checked() -> None:
    emb = anisotropic(10)
    with pytest.raises(InvalidParameterError, match="lam"):
        make_mechanism("mahalanobis", emb, 1.0, lam=2.0)
    with pytest.raises(InvalidParameterError, match="lam"):
        Mahalanobis(emb, 1.0, lam=True)  # type: ignore[arg-type]
