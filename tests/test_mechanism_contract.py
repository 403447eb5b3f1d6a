"""The one public ``Mechanism.privatize(ids, rng)`` contract, for every built-in mechanism.

``rng`` follows the ``random_state`` rule: None = fresh OS randomness, an int = a
reproducible stream that warns (NOT private), a Generator = used as is; anything else is
an InvalidParameterError (a DeniableError), never an AttributeError.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from deniable import DeniableError, InvalidParameterError, NotPrivateWarning
from deniable.embedding import Embedding
from deniable.mechanisms import make_mechanism, mechanism_names

#: options that make a built-in fit the 18-word toy embedding; every registered one is checked
TOY_OPTIONS = {"brr": {"bits": 64, "binarizer": "simhash"}, "custext": {"k": 5}, "custext_plus": {"k": 5}}


@pytest.fixture(params=mechanism_names())
def mech(request: pytest.FixtureRequest, toy_embedding: Embedding):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # BRR may warn that two toy words share a code
        m = make_mechanism(request.param, toy_embedding, 3.0, **TOY_OPTIONS.get(request.param, {}))
        m.privatize(np.array([0]), np.random.default_rng(0))  # build lazy artefacts once
    return m


def test_none_draws_fresh_os_randomness(mech) -> None:  # type: ignore[no-untyped-def]
    ids = np.arange(mech.embedding.size).repeat(20)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotPrivateWarning)  # no warning for the secure default
        a, b = mech.privatize(ids, None), mech.privatize(ids)
    assert a.shape == ids.shape and a.dtype == np.int64
    assert not np.array_equal(a, b)  # 360 draws at eps 3 on 18 words: equal only by a miracle


def test_an_int_is_reproducible_and_warns(mech) -> None:  # type: ignore[no-untyped-def]
    ids = np.arange(mech.embedding.size).repeat(5).reshape(5, -1)
    with pytest.warns(NotPrivateWarning):
        a = mech.privatize(ids, 42)
    with pytest.warns(NotPrivateWarning):
        b = mech.privatize(ids, 42)
    assert a.shape == ids.shape and np.array_equal(a, b)


@pytest.mark.parametrize("bad", ["42", 1.5, True, object()])
def test_anything_else_is_a_parameter_error(mech, bad: object) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidParameterError, match="random_state"):
        mech.privatize(np.array([0, 1]), bad)


@pytest.mark.parametrize("ids", [np.array([0.5]), np.array([-1]), np.array([10**6]), ["hockey"]])
def test_bad_ids_are_a_deniable_error(mech, ids: object) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DeniableError):
        mech.privatize(ids, np.random.default_rng(0))


def test_empty_input_keeps_its_shape(mech) -> None:  # type: ignore[no-untyped-def]
    out = mech.privatize(np.empty((0, 3), dtype=np.int64), None)
    assert out.shape == (0, 3) and out.dtype == np.int64
