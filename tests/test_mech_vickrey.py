"""The Vickrey mechanism: the paper's rule, ordered neighbours, decode independent of the input (issue 17)."""

from __future__ import annotations

import numpy as np
import pytest

from deniable import Embedding, InvalidParameterError
from deniable.index import make_index
from deniable.mechanisms import make_mechanism
from deniable.mechanisms.vickrey import Vickrey, second_neighbour_probability, vickrey_decode


def line() -> Embedding:
    return Embedding(["a", "b", "c", "d"], np.array([[0.0], [1.0], [10.0], [11.5]], dtype=np.float32))


def test_rule_is_the_papers() -> None:
    # p(second) = t d1 / (t d1 + (1 - t) d2)
    assert second_neighbour_probability(1.0, 3.0, 0.5) == pytest.approx(0.25)
    assert second_neighbour_probability(1.0, 3.0, 0.0) == 0.0
    assert second_neighbour_probability(1.0, 3.0, 1.0) == 1.0
    assert second_neighbour_probability(2.0, 2.0, 0.75) == pytest.approx(0.75)
    assert second_neighbour_probability(0.0, 0.0, 0.3) == pytest.approx(0.3)  # a tie at distance 0


@pytest.mark.parametrize("kind", ["exact", "flat"])
@pytest.mark.parametrize("t", [0.25, 0.5, 0.9])
def test_decode_frequencies_follow_the_rule_with_ordered_neighbours(kind: str, t: float) -> None:
    """Noisy points near "a": d1 = distance to a (first), d2 to b. An unordered top-2
    (``np.argpartition(d, 2)[:, :2]``) or ``softmax(-t * d)`` with t = [1, 0] would not give these."""
    emb = line()
    index = make_index(emb, kind)
    x = np.array([[0.2], [0.45], [-0.3], [10.4]], dtype=np.float32)
    n = 40_000
    q = np.repeat(x, n, axis=0)
    out = vickrey_decode(q, index, t, np.random.default_rng(1)).reshape(len(x), n)
    first = np.array([0, 0, 0, 2])
    second = np.array([1, 1, 1, 3])
    d1 = np.abs(x[:, 0] - emb.vectors[first, 0]).astype(np.float64)
    d2 = np.abs(x[:, 0] - emb.vectors[second, 0]).astype(np.float64)
    p2 = t * d1 / (t * d1 + (1 - t) * d2)
    for i in range(len(x)):
        assert set(np.unique(out[i])) <= {first[i], second[i]}
        freq = float(np.mean(out[i] == second[i]))
        assert freq == pytest.approx(p2[i], abs=5 * np.sqrt(p2[i] * (1 - p2[i]) / n) + 1e-3)
    # the peer bug: softmax(-[1, 0] * [d1, d2]) puts weight e^{-d1}/(e^{-d1}+1) on the first neighbour
    buggy_first = np.exp(-d1[0]) / (np.exp(-d1[0]) + 1)
    assert abs(float(np.mean(out[0] == first[0])) - buggy_first) > 0.1


def test_decode_never_looks_at_the_input_word() -> None:
    """With (almost) no noise the noisy vector is phi(w): d1 = 0 so w itself is returned.

    A peer implementation skips the input word when it is the nearest neighbour, which makes
    the decode depend on the private input (no longer post-processing) and never returns w.
    """
    emb = line()
    mech = Vickrey(emb, 1e9, t=0.5)
    ids = np.repeat(np.arange(4), 500)
    np.testing.assert_array_equal(mech.privatize(ids, np.random.default_rng(0)), ids)


def test_t_zero_is_madlib_and_lambda_switches_the_noise() -> None:
    emb = line()
    ids = np.repeat(np.arange(4), 300)
    a = make_mechanism("vickrey", emb, 2.0, t=0.0).privatize(ids, np.random.default_rng(3))
    b = make_mechanism("madlib", emb, 2.0).privatize(ids, np.random.default_rng(3))
    np.testing.assert_array_equal(a, b)
    m = make_mechanism("vickrey", emb, 2.0, lam=0.5)
    assert m.metric == "mahalanobis" and m.describe()["noise"] == "mahalanobis"
    assert make_mechanism("vickrey", emb, 2.0).metric == "euclidean"
    assert m.guarantee(0, 1) == pytest.approx(2.0 * m.noise_mechanism.distance(0, 1))


def test_options_are_checked() -> None:
    emb = line()
    with pytest.raises(InvalidParameterError, match="t"):
        make_mechanism("vickrey", emb, 1.0, t=1.5)
    with pytest.raises(InvalidParameterError, match="lam"):
        make_mechanism("vickrey", emb, 1.0, lam=-0.1)
    with pytest.raises(InvalidParameterError):
        Vickrey(emb, 1.0, t=True)  # type: ignore[arg-type]
