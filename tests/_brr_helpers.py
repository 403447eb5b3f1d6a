"""Helpers shared by the BRR tests: tiny vocabularies with hand-made codes, CP bound checks."""

from __future__ import annotations

import numpy as np
from scipy import stats

from deniable import Embedding
from deniable.mechanisms.brr import BinaryRandomizedResponse
from deniable.metrics import hamming


def code_embedding(codes: np.ndarray) -> Embedding:
    """An embedding whose words w0..w{V-1} we give explicit codes (vectors unused)."""
    v = codes.shape[0]
    return Embedding([f"w{i}" for i in range(v)], np.zeros((v, 2), dtype=np.float32), name="codes")


def nibble_vocabulary() -> np.ndarray:
    """All 16 4-bit codes in the upper nibble of one byte (lower nibble 0).

    The decode then ignores the lower nibble (equal for every code), so the word-level
    channel IS 4-bit randomized response: Pr[w | w] / Pr[w | w'] = e^(eps d) exactly,
    and the bound is tight.
    """
    return (np.arange(16, dtype=np.uint8) << 4).reshape(16, 1)


def mixed_vocabulary() -> np.ndarray:
    """8-bit codes with ties and two words sharing a code."""
    rows = [0b00000000, 0b00000011, 0b00001111, 0b11110000, 0b11110000, 0b11111111, 0b10101010, 0b01010101]
    return np.array(rows, dtype=np.uint8).reshape(-1, 1)


def cp_bounds(k: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    lo = np.where(k > 0, stats.beta.ppf(alpha / 2, k, n - k + 1), 0.0)
    hi = np.where(k < n, stats.beta.ppf(1 - alpha / 2, k + 1, n - k), 1.0)
    return lo, hi


def bound_violations(
    codes: np.ndarray, claimed_eps: float, true_eps: float, n: int, seed: int, alpha: float = 1e-6
) -> int:
    """Cells (w, w', y) where lower(P(y|w)) > e^(claimed_eps d(w,w')) upper(P(y|w')).

    Frequencies come from ``n`` draws per word of BRR run at ``true_eps``; Bonferroni
    over all cells gives an overall false-alarm rate ``alpha``.
    """
    emb = code_embedding(codes)
    mech = BinaryRandomizedResponse(emb, true_eps, binarizer=codes)
    rng = np.random.default_rng(seed)
    v = emb.size
    out = mech.privatize(np.repeat(np.arange(v), n), rng).reshape(v, n)
    counts = np.stack([np.bincount(r, minlength=v) for r in out]).astype(float)
    cells = v * v * (v - 1)
    lo, hi = cp_bounds(counts, n, alpha / cells)
    d = hamming(codes[:, None, :], codes[None, :, :]).astype(float)  # (v, v)
    # lo[w, y] > exp(eps d[w, w']) * hi[w', y]
    bad = lo[:, None, :] > np.exp(claimed_eps * d)[:, :, None] * hi[None, :, :]
    return int(bad.sum())
