"""Exact privacy checks of the mechanisms with an exact output distribution (issue 17).

On small synthetic embeddings, for every pair of words w, w' and every output y:
``log p(y|w) - log p(y|w') <= mechanism.guarantee(w, w') + 1e-9`` (an output w' can never
produce while w can needs an infinite bound). The sampler is checked against the same
distribution (chi-square), so the numbers tested are the numbers drawn from.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import stats

from deniable import Embedding, NotPrivateWarning
from deniable.mechanisms import make_mechanism
from deniable.mechanisms.exponential import ExponentialMechanism, OutputSet

CASES = [
    ("exponential", {"metric": "euclidean"}),
    ("exponential", {"metric": "angular"}),
    ("santext", {}),
    ("santext_plus", {"sensitive_fraction": 0.5, "p": 0.3}),
    ("santext_plus", {"sensitive_fraction": 1.0, "p": 0.0}),
    ("custext", {"k": 3}),
    ("custext_plus", {"k": 4}),
]


def small_embedding(seed: int = 0, n: int = 9, dim: int = 3) -> Embedding:
    r = np.random.default_rng(seed)
    words = ["the", "a", "is"] + [f"w{i}" for i in range(n - 3)]  # three stopwords for custext_plus
    return Embedding(words, r.normal(size=(n, dim)).astype(np.float32), name="small")


def full_distribution(mech: object, w: int, v: int) -> np.ndarray:
    ids, probs = mech.distribution(w)  # type: ignore[attr-defined]
    out = np.zeros(v)
    np.add.at(out, ids, probs)
    return out


def worst_excess(mech: object, v: int) -> float:
    """max over w, w', y of log p(y|w) - log p(y|w') - guarantee(w, w') (must be <= 1e-9)."""
    dists = [full_distribution(mech, w, v) for w in range(v)]
    worst = -math.inf
    for w, w2 in itertools.permutations(range(v), 2):
        bound = mech.guarantee(w, w2)  # type: ignore[attr-defined]
        p, q = dists[w], dists[w2]
        pos = p > 0
        if np.any(pos & (q == 0)):
            assert bound == math.inf, (w, w2)
            continue
        if bound == math.inf:
            continue
        worst = max(worst, float(np.max(np.log(p[pos]) - np.log(q[pos]))) - bound)
    return worst


@pytest.mark.parametrize(("name", "opts"), CASES)
@pytest.mark.parametrize("eps", [0.5, 3.0])
def test_exact_distribution_respects_the_bound(name: str, opts: dict, eps: float) -> None:
    emb = small_embedding()
    mech = make_mechanism(name, emb, eps, **opts)
    for w in range(emb.size):
        _, probs = mech.distribution(w)
        assert probs.sum() == pytest.approx(1.0, abs=1e-12)
        assert np.all(probs >= 0)
    assert worst_excess(mech, emb.size) <= 1e-9


def test_exponential_bound_is_tight_somewhere() -> None:
    """Sanity of the check itself: a twin claiming half the epsilon fails it."""
    emb = small_embedding(1)
    real = ExponentialMechanism(emb, 4.0)
    claimed = ExponentialMechanism(emb, 2.0)

    class Liar:
        def distribution(self, w: int) -> tuple[np.ndarray, np.ndarray]:
            return real.distribution(w)

        def guarantee(self, w: int, w2: int) -> float:
            return claimed.guarantee(w, w2)

    assert worst_excess(Liar(), emb.size) > 1e-3


def test_santext_plus_mixed_pairs_need_the_log_one_over_p_term() -> None:
    """The exact bound for a sensitive x against a non-sensitive x' is eps d + ln(1/p), not eps d."""
    emb = small_embedding(2)
    mech = make_mechanism("santext_plus", emb, 1.0, sensitive_fraction=0.5, p=0.3)
    sens = [w for w in range(emb.size) if mech.is_sensitive(w)]
    non = [w for w in range(emb.size) if not mech.is_sensitive(w)]
    excess = []
    for x, x2 in itertools.product(sens, non):
        p, q = full_distribution(mech, x, emb.size), full_distribution(mech, x2, emb.size)
        ys = np.array(sens)
        ratio = np.max(np.log(p[ys]) - np.log(q[ys]))
        assert ratio <= 1.0 * mech.distance(x, x2) + math.log(1 / 0.3) + 1e-9
        excess.append(ratio - 1.0 * mech.distance(x, x2))
    assert max(excess) > 0  # plain eps*d would be violated: the docs state the extra term


@pytest.mark.parametrize(("name", "opts"), CASES)
def test_sampler_draws_from_the_exact_distribution(name: str, opts: dict) -> None:
    emb = small_embedding(3)
    mech = make_mechanism(name, emb, 2.0, **opts)
    gen = np.random.default_rng(11)
    n = 60_000
    for w in (0, 4, 8):
        expected = full_distribution(mech, w, emb.size) * n
        counts = np.bincount(mech.privatize(np.full(n, w), gen), minlength=emb.size)
        assert np.all(counts[expected == 0] == 0)
        keep = expected > 0
        if keep.sum() > 1:
            chi = float(np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep]))
            assert stats.chi2.sf(chi, keep.sum() - 1) > 1e-6, (name, w)


@pytest.mark.parametrize("name", ["exponential", "santext_plus"])
@pytest.mark.parametrize("history_free", [False, True])
def test_every_token_of_a_mixed_call_gets_its_own_words_law(name: str, history_free: bool) -> None:
    """Words repeated and shuffled in one call: each token's output follows its own word's law.

    The default path computes one distance row per distinct word and hands its draws back to
    that word's positions; a mix-up of positions (or of rows) would give a token another word's
    law. The twin: the same draws against the law at the wrong epsilon must fail.
    """
    emb = small_embedding(8, n=12)
    opts = {"sensitive_fraction": 0.5, "p": 0.4} if name == "santext_plus" else {}
    mech = make_mechanism(name, emb, 2.0, history_free=history_free, block_bytes=16 * 12 * 2, **opts)
    wrong = make_mechanism(name, emb, 3.0, **opts)
    gen = np.random.default_rng(21)
    words = np.array([0, 5, 5, 9, 11, 5, 0, 3])
    ids = gen.permutation(np.repeat(words, 6_000))
    out = mech.privatize(ids, gen)
    for w in np.unique(words):
        got = np.bincount(out[ids == w], minlength=emb.size)
        n = int(got.sum())
        for law, must_pass in ((mech, True), (wrong, False)):
            expected = full_distribution(law, int(w), emb.size) * n
            keep = expected > 0
            assert np.all(got[~keep] == 0)
            chi = float(np.sum((got[keep] - expected[keep]) ** 2 / expected[keep]))
            assert bool(stats.chi2.sf(chi, keep.sum() - 1) > 1e-6) is must_pass, (name, w, law.epsilon)


def test_default_path_computes_one_row_per_distinct_word() -> None:
    """history_free=False: one distance row per distinct word; history_free=True: one per token."""
    emb = small_embedding(4, n=40)
    ids = np.array([3, 3, 3, 7, 3, 11, 7] * 50)
    rows: list[int] = []
    original = OutputSet.distance_block

    def counting(self: OutputSet, q: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        rows.append(int(q.shape[0]))
        return original(self, q, out)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(OutputSet, "distance_block", counting)
        ExponentialMechanism(emb, 1.0).privatize(ids, np.random.default_rng(0))
        assert sum(rows) == 3
        rows.clear()
        ExponentialMechanism(emb, 1.0, history_free=True).privatize(ids, np.random.default_rng(0))
        assert sum(rows) == ids.size


@pytest.mark.parametrize("chunk", [1, 7, 40])
def test_two_level_sampler_matches_the_distribution(chunk: int) -> None:
    """Chunks of the inverse CDF (a last chunk shorter than the others included) change nothing."""
    emb = small_embedding(6, n=40)
    mech = ExponentialMechanism(emb, 3.0, chunk=chunk)
    n = 80_000
    expected = full_distribution(mech, 5, emb.size) * n
    counts = np.bincount(mech.privatize(np.full(n, 5), np.random.default_rng(chunk)), minlength=emb.size)
    keep = expected > 5
    chi = float(np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep]))
    assert stats.chi2.sf(chi, keep.sum() - 1) > 1e-6
    assert counts[~keep].sum() <= 5 * max(1.0, expected[~keep].sum())


def test_sampler_blocks_do_not_change_the_draws() -> None:
    """The block size only bounds memory: same generator state, same output."""
    emb = small_embedding(4, n=40)
    ids = np.arange(200) % 40
    for free in (False, True):
        a = ExponentialMechanism(emb, 1.0, block_bytes=16 * 40 * 3, history_free=free)
        b = ExponentialMechanism(emb, 1.0, history_free=free)
        rng_a, rng_b = np.random.default_rng(5), np.random.default_rng(5)
        np.testing.assert_array_equal(a.privatize(ids, rng_a), b.privatize(ids, rng_b))


def test_options_are_declared_and_validated() -> None:
    emb = small_embedding()
    from deniable import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="metric"):
        make_mechanism("exponential", emb, 1.0, metric="cosine")
    with pytest.raises(InvalidParameterError, match="metric"):
        make_mechanism("santext", emb, 1.0, metric="angular")
    with pytest.raises(InvalidParameterError, match="sensitive_fraction"):
        make_mechanism("santext_plus", emb, 1.0, sensitive_fraction=0.0)
    with pytest.raises(InvalidParameterError, match="k"):
        make_mechanism("custext", emb, 1.0, k=0)


def test_santext_plus_defaults_to_public_frequency_and_warns_on_counts() -> None:
    emb = small_embedding(n=10)
    mech = make_mechanism("santext_plus", emb, 1.0, sensitive_fraction=0.3)
    # the rarest 30% by the embedding's (frequency) row order: the last three rows
    assert [w for w in range(10) if mech.is_sensitive(w)] == [7, 8, 9]
    assert mech.describe()["frequency"] == "embedding order"
    counts = np.arange(10)[::-1].copy()
    counts[0] = 0  # the first row is the rarest by these counts
    with pytest.warns(NotPrivateWarning, match="NOT covered by epsilon"):
        priv = make_mechanism("santext_plus", emb, 1.0, sensitive_fraction=0.3, frequency=counts)
    assert [w for w in range(10) if priv.is_sensitive(w)] == [0, 8, 9]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_mechanism("santext_plus", emb, 1.0)  # the public default never warns
    # outputs are always sensitive words or the kept input
    out = mech.privatize(np.arange(10).repeat(200), np.random.default_rng(0))
    src = np.arange(10).repeat(200)
    assert np.all((out == src) | np.isin(out, [7, 8, 9]))
    assert np.all(np.isin(out[np.isin(src, [7, 8, 9])], [7, 8, 9]))


def test_santext_is_the_euclidean_exponential_mechanism() -> None:
    emb = small_embedding(5)
    a = make_mechanism("santext", emb, 1.5)
    b = make_mechanism("exponential", emb, 1.5)
    for w in range(emb.size):
        np.testing.assert_allclose(a.distribution(w)[1], b.distribution(w)[1])
    # SanText's rule exp(-eps d / 2) (the original code's softmax(-eps * d / 2))
    d = np.linalg.norm(emb.vectors.astype(np.float64) - emb.vectors[2], axis=1)
    ref = np.exp(-1.5 * d / 2) / np.exp(-1.5 * d / 2).sum()
    np.testing.assert_allclose(a.distribution(2)[1], ref, rtol=1e-6)
