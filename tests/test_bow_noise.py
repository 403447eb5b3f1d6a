"""Two-sided geometric noise: pmf, exact integer sampler, and the (N, eps)-LPLP inequality."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp

from deniable import InvalidParameterError
from deniable.bow import (
    TwoSidedGeometric,
    lplp_alpha,
    lplp_max_log_ratio,
    lplp_privacy_loss,
    sample_two_sided_geometric,
    two_sided_geometric_logpmf,
    two_sided_geometric_pmf,
)
from deniable.bow.noise import MIN_RATE
from lplp_helpers import chacha, gof_pvalue

FALSE_ALARM = 1e-6


# ------------------------------------------------------------------------- pmf
@pytest.mark.parametrize("alpha", [0.01, 0.3, 0.5, 0.9, 0.999])
def test_pmf_is_normalised_and_symmetric(alpha: float) -> None:
    k = np.arange(-20000, 20001)
    p = two_sided_geometric_pmf(k, alpha)
    tail = 2 * alpha**20001 / (1 + alpha)  # Pr[|K| > 20000]
    assert abs(p.sum() + tail - 1.0) < 1e-9
    np.testing.assert_allclose(p, p[::-1])
    np.testing.assert_allclose(p[20000], (1 - alpha) / (1 + alpha))
    np.testing.assert_allclose(p[20003] / p[20002], alpha)


def test_logpmf_matches_pmf_and_closed_form() -> None:
    k = np.array([-3, 0, 2, 50])
    a = 0.7
    np.testing.assert_allclose(two_sided_geometric_logpmf(k, a), np.log((1 - a) / (1 + a)) + np.abs(k) * np.log(a))


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, 1.5, float("nan")])
def test_alpha_is_validated(bad: float) -> None:
    with pytest.raises(InvalidParameterError, match="alpha"):
        two_sided_geometric_pmf(0, bad)


def test_lplp_alpha() -> None:
    assert lplp_alpha(2.0, 4.0) == pytest.approx(math.exp(-0.5))
    with pytest.raises(InvalidParameterError, match="epsilon"):
        lplp_alpha(0.0, 1.0)
    with pytest.raises(InvalidParameterError, match="precision"):
        lplp_alpha(1.0, 0.0)


# --------------------------------------------------------------------- sampler
def test_sampler_is_integer_and_shaped(rng: np.random.Generator) -> None:
    s = sample_two_sided_geometric((3, 4), rng, alpha=0.5)
    assert s.shape == (3, 4) and s.dtype == np.int64


def test_sampler_alpha_and_rate_agree() -> None:
    a = sample_two_sided_geometric(1000, np.random.default_rng(5), alpha=math.exp(-0.7))
    b = sample_two_sided_geometric(1000, np.random.default_rng(5), rate=0.7)
    np.testing.assert_array_equal(a, b)


def test_sampler_needs_exactly_one_parameter(rng: np.random.Generator) -> None:
    with pytest.raises(InvalidParameterError):
        sample_two_sided_geometric(3, rng)
    with pytest.raises(InvalidParameterError):
        sample_two_sided_geometric(3, rng, alpha=0.5, rate=1.0)


def test_huge_rate_gives_exactly_zero_noise(rng: np.random.Generator) -> None:
    assert not sample_two_sided_geometric(1000, rng, rate=1000.0).any()


@pytest.mark.parametrize("alpha", [0.2, 0.6, 0.95])
def test_sampler_matches_its_pmf(alpha: float) -> None:
    samples = sample_two_sided_geometric(100_000, chacha(11), alpha=alpha)
    assert gof_pvalue(samples, alpha) > FALSE_ALARM


def test_goodness_of_fit_rejects_a_sampler_with_the_wrong_alpha() -> None:
    # samples drawn with alpha = 0.6, tested against the pmf of alpha = 0.55
    samples = sample_two_sided_geometric(100_000, chacha(12), alpha=0.6)
    assert gof_pvalue(samples, 0.55) < FALSE_ALARM
    # and a rounded continuous Laplace of the same scale is a different distribution
    laplace = np.rint(chacha(13).laplace(scale=1 / -math.log(0.6), size=100_000)).astype(np.int64)
    assert gof_pvalue(laplace, 0.6) < FALSE_ALARM


# ------------------------------------------------------------------------ LPLP
def brute_force_max_log_ratio(y: np.ndarray, y2: np.ndarray, alpha: float, margin: int = 3) -> float:
    """max over a full product grid of outputs z of log P(z|y) - log P(z|y2)."""
    lo = np.minimum(y, y2) - margin
    hi = np.maximum(y, y2) + margin
    best = -math.inf
    for z in itertools.product(*[range(a, b + 1) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]):
        zz = np.array(z)
        r = float(two_sided_geometric_logpmf(zz - y, alpha).sum() - two_sided_geometric_logpmf(zz - y2, alpha).sum())
        best = max(best, r)
    return best


def small_pairs(dim: int, top: int) -> list[tuple[np.ndarray, np.ndarray]]:
    vecs = [np.array(v) for v in itertools.product(range(top + 1), repeat=dim)]
    return [(a, b) for a in vecs for b in vecs]


@pytest.mark.parametrize(("epsilon", "precision"), [(1.0, 1.0), (0.5, 3.0), (2.0, 4.0)])
def test_lplp_inequality_holds_exactly_within_distance_n(epsilon: float, precision: float) -> None:
    alpha = lplp_alpha(epsilon, precision)
    checked = 0
    for y, y2 in small_pairs(dim=2, top=3):
        d = int(np.abs(y - y2).sum())
        loss = lplp_max_log_ratio(y, y2, epsilon, precision)
        # the enumerated maximum equals the closed form eps * d / N ...
        assert loss == pytest.approx(lplp_privacy_loss(y, y2, epsilon, precision), abs=1e-9)
        assert loss == pytest.approx(epsilon * d / precision, abs=1e-9)
        if d <= precision:
            assert loss <= epsilon + 1e-9
            checked += 1
    assert checked > 0
    # ... and so does a brute-force product grid on a few 3-d examples
    for y, y2 in [(np.array([0, 1, 2]), np.array([1, 1, 0])), (np.array([3, 0, 0]), np.array([2, 1, 0]))]:
        assert brute_force_max_log_ratio(y, y2, alpha) == pytest.approx(
            epsilon * np.abs(y - y2).sum() / precision, abs=1e-9
        )


def test_lplp_inequality_is_violated_beyond_distance_n() -> None:
    epsilon, precision = 1.0, 2.0
    violated = 0
    for y, y2 in small_pairs(dim=2, top=3):
        d = int(np.abs(y - y2).sum())
        if d > precision:
            assert lplp_max_log_ratio(y, y2, epsilon, precision) > epsilon + 1e-9
            violated += 1
    assert violated > 0


def test_mechanism_validation_and_properties() -> None:
    m = TwoSidedGeometric(2.0, 4.0, clamp=True)
    assert m.rate == 0.5 and m.alpha == pytest.approx(math.exp(-0.5))
    a = m.alpha
    assert m.noise_std == pytest.approx(math.sqrt(2 * a) / (1 - a))
    assert m.expected_abs_noise == pytest.approx(2 * a / (1 - a * a))
    assert m.guarantee([1, 2], [2, 0]) == pytest.approx(2.0 * 3 / 4.0)
    assert "LPLP" in m.describe()
    for kwargs in ({"epsilon": 0}, {"epsilon": 1, "precision": -1}, {"epsilon": 1e-9, "precision": 10}):
        with pytest.raises(InvalidParameterError):
            TwoSidedGeometric(**kwargs)  # type: ignore[arg-type]
    assert MIN_RATE > 0


def test_privatize_noises_every_coordinate_and_clamps(rng: np.random.Generator) -> None:
    counts = sp.csr_matrix(np.zeros((200, 50), dtype=np.int32))
    noisy = TwoSidedGeometric(0.5, 1.0).privatize(counts, rng)
    assert noisy.shape == (200, 50) and noisy.dtype == np.int64
    assert (noisy != 0).mean() > 0.5  # zeros get noise too
    assert (noisy < 0).any()
    clamped = TwoSidedGeometric(0.5, 1.0, clamp=True).privatize(counts, rng)
    assert clamped.min() == 0
    with pytest.raises(InvalidParameterError, match="integer"):
        TwoSidedGeometric(1.0).privatize(np.ones((2, 2)), rng)


def test_default_noise_comes_from_the_secure_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """rng=None means a fresh ChaCha20 generator keyed from the OS (the word mechanisms' default)."""
    import deniable._random as dr
    from deniable.bow import BowPrivatizer, BowVectorizer, Vocabulary

    calls: list[np.random.Generator] = []
    real = dr.secure_generator

    def spy() -> np.random.Generator:
        g = real()
        calls.append(g)
        return g

    monkeypatch.setattr(dr, "secure_generator", spy)
    mech = TwoSidedGeometric(1.0, 2.0)
    assert mech.noise((3, 4)).shape == (3, 4)
    assert mech.privatize(np.zeros((2, 3), dtype=np.int64)).shape == (2, 3)
    priv = BowPrivatizer(BowVectorizer(Vocabulary(("a", "b"))), mech)
    noisy, _ = priv.privatize_batches([["a b", "b"]])
    assert noisy.shape == (2, 2)
    assert len(calls) == 3
    assert all(type(g.bit_generator).__name__ == "ChaCha" for g in calls)
