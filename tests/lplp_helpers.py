"""Shared by the fast and the slow (statistical) tests of the bag-of-words noise."""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

from deniable import NotPrivateWarning, seeded_generator
from deniable.bow import two_sided_geometric_pmf


def chacha(seed: int) -> np.random.Generator:
    """The project's ChaCha20 generator (the one the mechanisms use), seeded for the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return seeded_generator(seed, warn=False)


def gof_pvalue(samples: np.ndarray, alpha: float, min_expected: float = 20.0) -> float:
    """Chi-square goodness of fit of integer samples to the two-sided geometric pmf.

    Cells: every k with expected count >= ``min_expected``, and the two tails merged.
    """
    n = samples.size
    kmax = 0
    while n * two_sided_geometric_pmf(kmax + 1, alpha) >= min_expected:
        kmax += 1
    ks = np.arange(-kmax, kmax + 1)
    expected = n * two_sided_geometric_pmf(ks, alpha)
    clipped = np.clip(samples, -kmax - 1, kmax + 1)
    hist = np.bincount(clipped + kmax + 1, minlength=2 * kmax + 3).astype(np.float64)
    observed = np.append(hist[1:-1], hist[0] + hist[-1])  # k = -kmax..kmax, then both tails
    exp = np.append(expected, n - expected.sum())
    return float(stats.chisquare(observed, exp).pvalue)
