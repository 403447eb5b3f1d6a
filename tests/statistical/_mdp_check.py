"""Clopper-Pearson check of the metric-DP bound from sampled output frequencies (shared by the mdp tests)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
from scipy import stats

from deniable import Embedding
from deniable.mechanisms import Mechanism

ALPHA = 1e-6


def cp_bounds(k: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    lo = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
    hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return lo, hi


def violations(
    make: Callable[[Embedding, float], Mechanism],
    emb: Embedding,
    claimed_eps: float,
    true_eps: float,
    n: int,
    seed: int,
) -> int:
    """Cells (w, w', y) with ``lower(P(y|w)) > exp(claimed_eps d(w, w')) upper(P(y|w'))``.

    Frequencies from ``n`` draws per word of the mechanism built at ``true_eps``; the metric
    ``d`` is the claimed mechanism's own ``distance``; Bonferroni over all cells gives an
    overall false-alarm rate of ``ALPHA``.
    """
    mech, claimed = make(emb, true_eps), make(emb, claimed_eps)
    rng = np.random.default_rng(seed)
    v = emb.size
    counts = np.stack([np.bincount(mech.privatize(np.full(n, w), rng), minlength=v) for w in range(v)])
    lo, hi = cp_bounds(counts.astype(float), n, ALPHA / (v * v * (v - 1)))
    bad = 0
    for w, w2 in itertools.permutations(range(v), 2):
        bad += int(np.sum(lo[w] > np.exp(claimed_eps * claimed.distance(w, w2)) * hi[w2]))
    return bad
