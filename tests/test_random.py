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
