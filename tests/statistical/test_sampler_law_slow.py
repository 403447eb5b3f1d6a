"""Every registered mechanism's sampler against its own ``distribution()``: more draws, a larger
vocabulary and the extremes (issue 40; the fast version and the check are tests/test_sampler_law.py).

On a 60-word embedding, 20,000 draws of every word per setting: every mechanism with
``has_distribution`` (from the registry) at epsilon from 1e-4 to 500, its history-free path,
the keyed runs' path (``privatize_records``), and each mechanism's edges (1-Diffractor:
``eps * n`` from 0.006 to 1.2, 16 lists, windows of 0 and wider than the list; TEM: each of
its samplers forced, gamma 0 and beyond every distance; the exponential mechanism's smallest
chunks and blocks; SanText+ and CusText at their option bounds). Then 1-Diffractor in issue
40's own setting (the 2,000 most frequent words of the default embedding, eps 0.0005 and
0.002): the sampler fits the law at the list's ends, its log ratio there is ``eps * d``, and
the pre-issue-40 sampler is rejected (log ratio 7.4 against 1.0). Bonferroni over the file:
:data:`FAMILY_ALPHA`.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from conftest import make_tiny_embedding
from deniable import Embedding
from deniable._random import seeded_generator
from deniable.mechanisms.diffractor import Diffractor
from test_sampler_law import (
    EXACT,
    KEYED,
    SMALL_OPTIONS,
    Case,
    capped_before_difference,
    check,
    law_matrix,
    law_pvalue,
    sample_counts,
)
from test_tem_support import force_path

pytestmark = pytest.mark.slow

FAMILY_ALPHA = 1e-4
V = 60
DRAWS = 20_000
EPSILONS = (1e-4, 0.1, 1.0, 5.0, 30.0, 500.0)


def embedding() -> Embedding:
    return make_tiny_embedding(V, 4, seed=3)


def generic(name: str) -> list[Case]:
    base = SMALL_OPTIONS.get(name, {})
    out = [Case(name, eps, dict(base), DRAWS) for eps in EPSILONS]
    if any(o.name == "history_free" for o in _options(name)):
        out += [Case(name, eps, {**base, "history_free": True}, 2_000) for eps in (0.1, 30.0)]
    if KEYED:
        out += [Case(name, eps, dict(base), 2_000, "records", records=True) for eps in (0.1, 30.0)]
    return out


def _options(name: str) -> tuple[Any, ...]:
    from deniable.mechanisms.registry import options_of

    return options_of(name)


SPECIFIC: dict[str, list[Case]] = {
    "diffractor": [
        Case("diffractor", 1e-9, {}, DRAWS),
        Case("diffractor", 1e-4, {}, DRAWS),  # eps * n = 0.006
        Case("diffractor", 0.02, {}, DRAWS),  # eps * n = 1.2
        Case("diffractor", 0.02, {"lists": 3}, DRAWS),
        Case("diffractor", 0.02, {"lists": 16}, DRAWS),
        Case("diffractor", 800.0, {}, DRAWS),
        Case("diffractor", 0.02, {"noise": "tem", "gamma": 5}, DRAWS),
        Case("diffractor", 3.0, {"noise": "tem", "gamma": 0}, DRAWS),
        Case("diffractor", 3.0, {"noise": "tem", "gamma": 0.999}, DRAWS),
        Case("diffractor", 0.2, {"noise": "tem", "gamma": 58.5}, DRAWS),
        Case("diffractor", 0.2, {"noise": "tem", "gamma": 59}, DRAWS),
        Case("diffractor", 0.2, {"noise": "tem", "gamma": 100_000, "lists": 4}, DRAWS),
        Case("diffractor", 500.0, {"noise": "tem", "gamma": 3}, DRAWS),
    ],
    "tem": [
        Case("tem", 3.0, {"gamma": 0.0}, DRAWS),
        Case("tem", 0.5, {"gamma": 1e6}, DRAWS),
        Case("tem", 3.0, {"beta": 1e-12}, DRAWS),
        Case("tem", 3.0, {"beta": 0.999}, DRAWS),
        Case("tem", 1e-4, {"metric": "angular"}, DRAWS),
        Case("tem", 500.0, {"metric": "angular"}, 5_000),
        Case("tem", 30.0, {"metric": "angular", "history_free": True}, 2_000),
    ],
    "exponential": [
        Case("exponential", 2.0, {"chunk": 1}, DRAWS),
        Case("exponential", 2.0, {"chunk": 7, "block_bytes": 1}, DRAWS),
        Case("exponential", 500.0, {"metric": "angular"}, DRAWS),
        Case("exponential", 1e-4, {"metric": "angular", "history_free": True}, 2_000),
    ],
    "santext_plus": [
        Case("santext_plus", 2.0, {"p": 0.0}, DRAWS),
        Case("santext_plus", 0.1, {"p": 1.0}, DRAWS),
        Case("santext_plus", 500.0, {"sensitive_fraction": 0.01}, DRAWS),
        Case("santext_plus", 2.0, {"sensitive_fraction": 1.0, "p": 0.5}, DRAWS),
    ],
    "custext": [
        Case("custext", 2.0, {"k": 1}, DRAWS),
        Case("custext", 2.0, {"k": 2}, DRAWS),
        Case("custext", 1e-4, {"k": 60}, DRAWS),
        Case("custext", 500.0, {"k": 60}, DRAWS),
    ],
    "custext_plus": [Case("custext_plus", 2.0, {"k": 60}, DRAWS)],
    "truncated_gumbel": [
        Case("truncated_gumbel", 1.0, {"batch_size": 1}, 500),
        Case("truncated_gumbel", 1.0, {"batch_size": 7}, 500, "records", records=True),
        Case("truncated_gumbel", 1e6, {}, DRAWS),
    ],
}

CASES = [c for name in EXACT for c in generic(name) + SPECIFIC.get(name, [])]
TEM_PATHS = [("uniform", 1e-4), ("uniform", 2.0), ("table", 500.0), ("table", 1e-4), ("shells", 30.0)]
TEM_PATHS += [("shells", 1e-4), ("knn", 5.0), ("knn", 500.0)]
ISSUE_EPS = (0.0005, 0.002)
ALPHA = FAMILY_ALPHA / (len(CASES) + len(EXACT) + len(TEM_PATHS) + 4 * len(ISSUE_EPS))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_sampler_draws_its_stated_law(case: Case) -> None:
    p = check(case, embedding())
    assert p > ALPHA, f"{case.id}: p = {p:.3g} <= {ALPHA:.3g}"


@pytest.mark.parametrize("name", EXACT)
def test_a_wrong_law_twin_is_rejected(name: str) -> None:
    """Draws at epsilon 1 against the same mechanism's law at 1.25 (truncated_gumbel: at 1e6)."""
    case = Case(name, 1.0, dict(SMALL_OPTIONS.get(name, {})), DRAWS)
    p = check(case, embedding(), law_epsilon=1e6 if name == "truncated_gumbel" else 1.25)
    assert p <= ALPHA, f"{name}: the law at another epsilon was not rejected (p = {p:.3g})"


@pytest.mark.parametrize(("path", "eps"), TEM_PATHS)
def test_every_tem_sampler_draws_its_stated_law(monkeypatch: pytest.MonkeyPatch, path: str, eps: float) -> None:
    opts = force_path(monkeypatch, path)
    p = check(Case("tem", eps, opts, 5_000, path), embedding())
    assert p > ALPHA, f"tem {path} at eps {eps}: p = {p:.3g}"


# -- 1-Diffractor in issue 40's setting ----------------------------------------------------------
@pytest.fixture(scope="module")
def vocab_2000() -> Embedding:
    from deniable import load_embedding

    return load_embedding(vocab_size=2000)


def _ends(mech: Diffractor) -> npt.NDArray[np.int64]:
    order = mech.tables.order[0]
    n = order.size
    return np.asarray([order[0], order[1], order[n // 2], order[n - 2], order[n - 1]], dtype=np.int64)


def _log_ratio_bounds(mech: Diffractor, draws: int, seed: int) -> tuple[float, float, float]:
    """Clopper-Pearson bounds (two-sided, ALPHA) on ``log Pr[M(w)=w] - log Pr[M(w')=w]`` (``w`` at
    position 0, ``w'`` at position n - 1) from the sampler alone, and ``eps * d(w, w')``."""
    order = mech.tables.order[0]
    w, w2 = int(order[0]), int(order[-1])
    rng = seeded_generator(seed, warn=False)
    k1 = int(np.sum(mech.privatize(np.full(draws, w), rng) == w))
    k2 = int(np.sum(mech.privatize(np.full(draws, w2), rng) == w))
    a = ALPHA / 2  # two binomial intervals
    lo1, hi1 = stats.beta.ppf(a / 2, k1, draws - k1 + 1), stats.beta.ppf(1 - a / 2, k1 + 1, draws - k1)
    lo2, hi2 = stats.beta.ppf(a / 2, k2, draws - k2 + 1), stats.beta.ppf(1 - a / 2, k2 + 1, draws - k2)
    return math.log(lo1 / hi2), math.log(hi1 / lo2), mech.guarantee(w, w2)


def _old_sampler(monkeypatch: pytest.MonkeyPatch) -> None:
    def old(self: Diffractor, x: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        return capped_before_difference(self, x, rng)

    monkeypatch.setattr(Diffractor, "_sample_positions", old)


@pytest.mark.parametrize("eps", ISSUE_EPS)
def test_issue_40_the_list_ends_follow_the_law(vocab_2000: Embedding, eps: float) -> None:
    mech = Diffractor(vocab_2000, eps)
    words = _ends(mech)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        law = law_matrix(mech, words)
    p = law_pvalue(sample_counts(mech, 100_000, seeded_generator(40, warn=False), words), law)
    assert p > ALPHA, f"eps {eps}: p = {p:.3g}"
    lo, hi, bound = _log_ratio_bounds(mech, 400_000, 41)
    assert lo <= bound <= hi, (lo, hi, bound)


@pytest.mark.parametrize("eps", ISSUE_EPS)
def test_issue_40_the_old_sampler_is_rejected(
    vocab_2000: Embedding, eps: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twin: the sampler that capped each geometric at n exceeds eps * d at the ends (7.4 vs 1.0)."""
    mech = Diffractor(vocab_2000, eps)
    words = _ends(mech)
    law = law_matrix(mech, words)
    _old_sampler(monkeypatch)
    assert law_pvalue(sample_counts(mech, 100_000, seeded_generator(40, warn=False), words), law) <= ALPHA
    lo, _, bound = _log_ratio_bounds(mech, 400_000, 41)
    assert lo > bound + 1.0, (lo, bound)
