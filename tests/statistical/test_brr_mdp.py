"""End-to-end metric-DP check of BRR at the word level (slow).

Output frequencies of M(w) for every word of a tiny vocabulary are estimated from many
draws; the test asserts, with Clopper-Pearson intervals (Bonferroni over all cells,
overall false-alarm rate 1e-6), that no output y has
``lower(P(y|w)) > exp(eps * d_H(w, w')) * upper(P(y|w'))``. On the "nibble" vocabulary
(all 16 codes of 4 bits) the decode is the identity, the bound is tight, and a mechanism
whose flip probability comes from a 1.3x larger epsilon is caught.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _brr_helpers import bound_violations, mixed_vocabulary, nibble_vocabulary  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_nibble_vocabulary_respects_the_bound(eps: float) -> None:
    assert bound_violations(nibble_vocabulary(), eps, eps, n=200000, seed=1) == 0


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0])
def test_wrong_epsilon_is_caught(eps: float) -> None:
    assert bound_violations(nibble_vocabulary(), eps, 1.3 * eps, n=200000, seed=2) > 0


@pytest.mark.parametrize("eps", [0.3, 1.0])
def test_ties_and_shared_codes_respect_the_bound(eps: float) -> None:
    assert bound_violations(mixed_vocabulary(), eps, eps, n=200000, seed=3) == 0
