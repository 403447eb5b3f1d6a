from __future__ import annotations

import warnings

import numpy as np
import pytest
from randomgen import ChaCha

from deniable import InvalidParameterError, NotPrivateWarning
from deniable._random import check_random_state, secure_generator, seeded_generator


def test_secure_generator_is_chacha20_and_unpredictable() -> None:
    g1, g2 = secure_generator(), secure_generator()
    assert isinstance(g1.bit_generator, ChaCha)
    assert not np.array_equal(g1.integers(0, 2**62, 8), g2.integers(0, 2**62, 8))


def test_seeded_generator_is_reproducible_and_warns() -> None:
    with pytest.warns(NotPrivateWarning, match="NOT private"):
        a = seeded_generator(7).random(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = seeded_generator(7).random(5)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True])
def test_bad_random_state(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match=r"random_state|seed"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            check_random_state(bad)  # type: ignore[arg-type]


def test_check_random_state_passes_generators_through() -> None:
    g = np.random.default_rng(1)
    assert check_random_state(g) is g
    assert isinstance(check_random_state(None).bit_generator, ChaCha)


def test_not_private_warning_points_at_the_callers_line() -> None:
    from deniable import NotPrivateWarning

    with pytest.warns(NotPrivateWarning) as direct:
        seeded_generator(3)
    with pytest.warns(NotPrivateWarning) as checked:
        check_random_state(3)
    assert [w.filename for w in direct] == [__file__] and [w.filename for w in checked] == [__file__]


# --------------------------------------------------------------------------- keyed runs
def test_run_key_streams_are_keyed_by_unit_and_run() -> None:
    import pickle

    from deniable._random import RunKey

    key = RunKey.new()
    a = key.generator(0, 10, 5).integers(0, 2**62, 8)
    assert isinstance(key.generator(1).bit_generator, ChaCha)
    assert np.array_equal(a, key.generator(0, 10, 5).integers(0, 2**62, 8))  # a recomputation
    assert np.array_equal(a, pickle.loads(pickle.dumps(key)).generator(0, 10, 5).integers(0, 2**62, 8))
    for other in [(0, 10, 6), (1, 10, 5), (0, 11, 5), (0, 10)]:
        assert not np.array_equal(a, key.generator(*other).integers(0, 2**62, 8))
    assert not np.array_equal(a, RunKey.new().generator(0, 10, 5).integers(0, 2**62, 8))  # a new run
    same = RunKey.from_hex(key.hex())
    assert same == key and same.id == key.id and np.array_equal(a, same.generator(0, 10, 5).integers(0, 2**62, 8))
    assert key.hex() not in repr(key) and key.id in repr(key) and len(key.id) == 16
    assert key.id not in key.hex()


@pytest.mark.parametrize("bad", ["zz", "ab" * 31, 5])
def test_run_key_rejects_bad_values(bad: object) -> None:
    from deniable._random import RunKey

    with pytest.raises(InvalidParameterError, match="run_key"):
        RunKey.check(bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="unit"):
        RunKey.new().generator(-1)


def test_run_key_from_seed_is_reproducible() -> None:
    from deniable._random import RunKey

    assert RunKey.from_seed(3) == RunKey.from_seed(3) != RunKey.from_seed(4)
    assert RunKey.from_seed(3).seeded and not RunKey.new().seeded


def _tem_counts(make_gen, eps: float, units: int, per_unit: int):  # type: ignore[no-untyped-def]
    from conftest import make_toy_embedding
    from deniable.mechanisms import make_mechanism

    mech = make_mechanism("tem", make_toy_embedding(), eps)
    w = 0  # "hockey"
    draws = [mech.privatize(np.full(per_unit, w), make_gen(u)) for u in range(units)]
    return mech, w, np.bincount(np.concatenate(draws), minlength=mech.embedding.size)


@pytest.mark.parametrize("eps_law", [2.0, 4.0])
def test_keyed_draws_follow_the_mechanisms_law(eps_law: float) -> None:
    """TEM's output over many keyed units (a fixed test key: reproducible) against its exact law.

    A chi-square goodness-of-fit test at alpha 1e-6; the twin compares the same draws with
    the law at twice the epsilon and must reject it.
    """
    from scipy import stats

    from deniable._random import RunKey

    key = RunKey(bytes(range(32)))
    mech, w, counts = _tem_counts(lambda u: key.generator(0, u * 50, 50), 2.0, 400, 50)
    law_mech = mech if eps_law == 2.0 else type(mech)(mech.embedding, eps_law)
    _, probs = law_mech.distribution(w)
    expected = probs * counts.sum()
    keep = expected >= 5  # chi-square needs expected counts >= 5: pool the rest
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    obs, exp = obs[exp > 0], exp[exp > 0]
    p = stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue
    if eps_law == 2.0:
        assert p > 1e-6, p
    else:
        assert p < 1e-6, p
