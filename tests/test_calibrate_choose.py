"""choose_epsilon: the largest epsilon meeting the constraints, and a slightly larger one that does not."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest

from calibrate_fakes import FiniteMechanism, RefTEM, line_embedding
from conftest import make_tiny_embedding
from deniable import InvalidParameterError, MultivariateLaplace
from deniable.calibrate import Constraints, check_constraints, choose_epsilon, plausible_deniability


@pytest.fixture(scope="module")
def emb():  # type: ignore[no-untyped-def]
    return make_tiny_embedding(80, 3, seed=11)


@pytest.mark.parametrize(
    "cons",
    [
        Constraints(0.5, 10, 100, "distinct"),
        Constraints(0.3, None, 100, "distinct"),
        Constraints(None, 20, 90, "eta"),
        Constraints(0.6, 5, 95, "distinct"),
    ],
)
def test_choice_meets_constraints_and_slightly_larger_does_not(emb, cons: Constraints) -> None:  # type: ignore[no-untyped-def]
    rtol = 0.02
    res = choose_epsilon(lambda e: RefTEM(emb, e), low=0.5, high=200.0, rtol=rtol, samples=1000, **asdict(cons))
    assert res.epsilon is not None and res.next_epsilon is not None
    assert res.next_epsilon <= res.epsilon * (1 + rtol) * (1 + 1e-9)
    assert res.monotone, res.violations
    assert res.constraints == cons
    # re-evaluate both independently
    ok = check_constraints(plausible_deniability(RefTEM(emb, res.epsilon), samples=1000), cons)
    bad = check_constraints(plausible_deniability(RefTEM(emb, res.next_epsilon), samples=1000), cons)
    assert ok.feasible and not bad.feasible
    if cons.max_unchanged is not None and cons.percentile == 100:
        assert ok.unchanged <= cons.max_unchanged
    # every evaluation is reported, sorted, with its statistics
    eps = [e.epsilon for e in res.evaluations]
    assert eps == sorted(eps) and len(eps) >= 8
    assert set(res.stats) == set(eps)
    assert "largest epsilon" in res.summary()


def test_given_grid_no_bisection(emb) -> None:  # type: ignore[no-untyped-def]
    res = choose_epsilon(lambda e: RefTEM(emb, e), [1, 2, 4, 8, 16, 32, 64], max_unchanged=0.5, min_support=10)
    assert [e.epsilon for e in res.evaluations] == [1, 2, 4, 8, 16, 32, 64]
    feas = [e.feasible for e in res.evaluations]
    k = feas.index(False)
    assert all(feas[:k]) and res.epsilon == [1, 2, 4, 8, 16, 32, 64][k - 1]
    assert res.next_epsilon == [1, 2, 4, 8, 16, 32, 64][k]


def test_nothing_or_everything_feasible(emb) -> None:  # type: ignore[no-untyped-def]
    none = choose_epsilon(lambda e: RefTEM(emb, e), [500, 1000], max_unchanged=0.1, min_support=10)
    assert none.epsilon is None and none.next_epsilon == 500
    assert "no evaluated epsilon" in none.summary()
    every = choose_epsilon(lambda e: RefTEM(emb, e), low=0.01, high=0.02, max_unchanged=0.9, min_support=1)
    assert every.epsilon == pytest.approx(0.02) and every.next_epsilon is None
    assert "widen" in every.summary()


def test_monotonicity_violations_are_reported() -> None:
    """A mechanism whose N_w dips at eps = 3 breaks the assumption: it must be reported."""
    emb = line_embedding([0, 1, 2])
    n_by_eps = {1.0: 0.2, 2.0: 0.6, 3.0: 0.3, 4.0: 0.9}

    def factory(e: float) -> FiniteMechanism:
        n = n_by_eps[e]
        off = (1 - n) / 2
        mat = np.full((3, 3), off)
        np.fill_diagonal(mat, n)
        return FiniteMechanism(emb, e, matrix=mat)

    res = choose_epsilon(factory, [1, 2, 3, 4], max_unchanged=0.5, min_support=None, samples=4000)
    assert not res.monotone
    assert any("N_w statistic fell" in v for v in res.violations)
    assert any("passes although" in v for v in res.violations)
    # the choice stays below the first failure
    assert res.epsilon == 1.0 and res.next_epsilon == 2.0


def test_common_random_numbers_make_madlib_unchanged_counts_monotone() -> None:
    """Same draws at every eps: the noise is z0/eps, so each word's unchanged count can only grow."""
    emb = make_tiny_embedding(60, 3, seed=2)
    res = choose_epsilon(
        lambda e: MultivariateLaplace(emb, e),
        [1, 2, 4, 8],
        max_unchanged=0.99,
        min_support=None,
        words=20,
        samples=200,
        rng=np.random.default_rng(3),
    )
    counts = np.array([e.stats.n_w for e in res.evaluations])
    assert np.all(np.diff(counts, axis=0) >= 0)
    ids = [e.stats.ids.tolist() for e in res.evaluations]
    assert all(i == ids[0] for i in ids)  # the same word sample at every epsilon


def test_conservative_uses_bounds() -> None:
    emb = line_embedding([0, 1, 2, 3])
    mat = np.full((4, 4), 0.5 / 3)
    np.fill_diagonal(mat, 0.5)
    st = plausible_deniability(FiniteMechanism(emb, 1.0, matrix=mat), samples=200, rng=np.random.default_rng(0))
    loose = check_constraints(st, Constraints(max_unchanged=0.6, min_support=None))
    strict = check_constraints(st, Constraints(max_unchanged=0.6, min_support=None, conservative=True))
    assert strict.unchanged >= loose.unchanged


def test_validation(emb) -> None:  # type: ignore[no-untyped-def]
    f = lambda e: RefTEM(emb, e)  # noqa: E731
    with pytest.raises(InvalidParameterError, match="epsilons"):
        choose_epsilon(f)
    with pytest.raises(InvalidParameterError, match="high"):
        choose_epsilon(f, low=5, high=1)
    with pytest.raises(InvalidParameterError, match="max_unchanged"):
        choose_epsilon(f, [1], max_unchanged=1.5)
    with pytest.raises(InvalidParameterError, match="percentile"):
        choose_epsilon(f, [1], percentile=0)
    with pytest.raises(InvalidParameterError, match="constraints"):
        choose_epsilon(f, [1], max_unchanged=None, min_support=None)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        choose_epsilon(f, [-1])
