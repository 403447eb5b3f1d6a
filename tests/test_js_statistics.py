"""Statistical equivalence of the JavaScript samplers with the Python mechanisms (slow).

BRR: for 20 words x 3 epsilons (0.5, 0.75, 1 per bit: at larger epsilons 256-bit codes decode
almost always to the word itself, so the output words no longer tell epsilons apart and
the twin could not fail), 100,000 noisy codes from each side (5,000 per word): the
Hamming distance to the word's code follows Binomial(m, 1/(1 + e^eps)) exactly (G test),
and the decoded words (one Python decoder for both samples) have the same distribution on
the (input word, output word) cells (G test of homogeneity). Laplace: for 3 epsilons,
100,000 JavaScript draws in d = 50: radius ~ Gamma(d, 1/eps) (KS) and direction uniform on
the sphere (the cosine with a fixed axis: (t + 1) / 2 ~ Beta((d-1)/2, (d-1)/2), KS). Every
test has a twin with the wrong epsilon (or dimension) that must fail.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from _device_helpers import Harness, mechanisms, unb64
from deniable.mechanisms.brr import BinaryRandomizedResponse, flip_probability
from deniable.metrics import hamming

pytestmark = pytest.mark.slow

WORDS = 20
DRAWS = 5000  # per word: 100,000 per epsilon and side
PASS, FAIL = 1e-3, 1e-6


def g_homogeneity(a: np.ndarray, b: np.ndarray, minimum: int = 10) -> float:
    """p-value of the G test that two count vectors come from one distribution (small cells pooled)."""
    total = a + b
    keep = total >= minimum
    table = np.stack([np.append(a[keep], a[~keep].sum()), np.append(b[keep], b[~keep].sum())])
    table = table[:, table.sum(axis=0) > 0]
    return float(stats.chi2_contingency(table, lambda_="log-likelihood")[1])


def g_fit(counts: np.ndarray, probs: np.ndarray, minimum: float = 10.0) -> float:
    """p-value of the G goodness-of-fit test of ``counts`` against ``probs`` (cells expected < minimum pooled)."""
    expected = probs * counts.sum()
    keep = expected >= minimum
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    obs, exp = obs[exp > 0], exp[exp > 0]
    return float(stats.power_divergence(obs, exp, lambda_="log-likelihood")[1])


#: The decoded words are counted over the first SUB words of the test vocabulary (the decode's cost is linear in it).
SUB = 300


def word_ids() -> np.ndarray:
    return np.random.default_rng(20).choice(SUB, WORDS, replace=False)


def brr_at(epsilon: float) -> BinaryRandomizedResponse:
    """BRR on the first SUB words, with their codes from the exported artefact."""
    from deniable import Embedding

    full = mechanisms()["brr"]
    emb = full.embedding
    sub = Embedding(emb.vocabulary[:SUB], np.asarray(emb.vectors[:SUB]), name="sub")
    return BinaryRandomizedResponse(sub, epsilon, binarizer=np.asarray(full.codes[:SUB]), show_progress=False)


@pytest.mark.parametrize("epsilon", [0.5, 0.75, 1.0])
def test_brr_sampler_matches_python(js: Harness, artefacts: dict[str, Path], epsilon: float) -> None:
    brr = brr_at(epsilon)
    bits = int(brr.bits)
    ids = word_ids()
    rep = np.repeat(ids, DRAWS)
    rng = np.random.default_rng(int(epsilon * 100))
    got = js("brr_noisy", artefact=str(artefacts["brr"]), ids=ids.tolist(), draws=DRAWS, epsilon=epsilon)
    noisy_js = unb64(got["codes"], np.uint8).reshape(rep.size, -1)
    noisy_py = brr.noisy_codes(rep, rng)
    twin = brr_at(epsilon * 1.25).noisy_codes(rep, rng)

    # the distance to the word's code: exactly Binomial(m, p)
    d_js = hamming(noisy_js, brr.codes[rep])
    law = stats.binom.pmf(np.arange(bits + 1), bits, flip_probability(epsilon))
    assert g_fit(np.bincount(d_js, minlength=bits + 1), law) > PASS
    wrong = stats.binom.pmf(np.arange(bits + 1), bits, flip_probability(epsilon * 1.1))
    assert g_fit(np.bincount(d_js, minlength=bits + 1), wrong) < FAIL

    # the output words: one decoder for every sample, cells (input word, output word)
    v = brr.embedding.size

    def cells(noisy: np.ndarray) -> np.ndarray:
        out = brr.decoder.decode(noisy, rng)
        return np.bincount(np.repeat(np.arange(WORDS), DRAWS) * v + out, minlength=WORDS * v)

    c_js, c_py, c_twin = cells(noisy_js), cells(noisy_py), cells(twin)
    assert g_homogeneity(c_js, c_py) > PASS
    assert g_homogeneity(c_js, c_twin) < FAIL


@pytest.mark.parametrize("epsilon", [1.0, 5.0, 20.0])
def test_laplace_noise_law(js: Harness, epsilon: float) -> None:
    dim, n = 50, 100_000
    axis = np.random.default_rng(1).normal(size=dim)
    axis /= np.linalg.norm(axis)
    got = js("laplace_stats", count=n, dim=dim, epsilon=epsilon, axis=axis.tolist())
    radius, cos = unb64(got["radius"], "<f8"), unb64(got["cos"], "<f8")
    assert stats.kstest(radius, stats.gamma(dim, scale=1 / epsilon).cdf).pvalue > PASS
    assert stats.kstest(radius, stats.gamma(dim, scale=1 / (epsilon * 1.05)).cdf).pvalue < FAIL
    half = (dim - 1) / 2
    assert stats.kstest((cos + 1) / 2, stats.beta(half, half).cdf).pvalue > PASS
    wrong = (dim - 11) / 2  # the law of a uniform direction in 40 dimensions: must be told apart
    assert stats.kstest((cos + 1) / 2, stats.beta(wrong, wrong).cdf).pvalue < FAIL
