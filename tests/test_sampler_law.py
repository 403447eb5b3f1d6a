"""Every registered mechanism's sampler against its own ``distribution()`` (issue 40).

The mDP checks (tests/test_mech_*.py, ``deniable audit``) read ``distribution()``; they prove
nothing about the releases unless ``privatize`` draws from that law. Issue 40: 1-Diffractor's
geometric sampler capped each geometric draw at ``n`` before the difference, a different law
that violated the bound by a factor e^6 at ``eps * n`` near 1, and nothing caught it because
every check read the stated law. Here every mechanism with ``has_distribution`` (iterated from
the registry: a new one is picked up as it is registered) is sampled, at an ordinary setting
and at extreme ones, and tested against its own ``distribution()``:

- a G-test over every input word of a small embedding at once (each word's row of counts
  against its law, one mixed call per half, so warm and cold caches both count), cells with an
  expected count under :data:`MIN_EXPECTED` pooled per word;
- where a word's pooled rare cells still expect fewer than :data:`MIN_EXPECTED` draws, the
  G-test is conditional on their count, and that count (over all words) gets a one-sided
  Poisson test: too many "almost impossible" outputs (issue 40's failure) are caught;
- an output with probability 0 that occurs is a failure outright.

Every check is a p-value against a Bonferroni share of :data:`FAMILY_ALPHA` (the chance that
the whole file fails with correct samplers); every mechanism has a wrong-law twin (its draws
against its own law at another epsilon) that must be rejected at the same threshold, and
1-Diffractor's pre-issue-40 sampler is rejected by name. Draws come from the project's seeded
(ChaCha20) generators, one stream per case. Larger vocabularies, more draws and more extreme
settings: tests/statistical/test_sampler_law_slow.py.
"""

from __future__ import annotations

import math
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from conftest import make_toy_embedding
from deniable import Embedding
from deniable._random import seeded_generator
from deniable.mechanisms import Mechanism, make_mechanism, mechanism_names
from deniable.mechanisms.registry import mechanism_class

#: chance that this file fails although every sampler draws its stated law (split by Bonferroni)
FAMILY_ALPHA = 1e-4
#: cells expecting fewer draws than this are pooled (the chi-square approximation of G holds above)
MIN_EXPECTED = 10.0

#: tokens per record on the keyed path (``Mechanism.privatize_records``: one generator per record)
RECORD_TOKENS = 40
KEYED = hasattr(Mechanism, "privatize_records")

#: every registered mechanism that states its exact law
EXACT = [n for n in mechanism_names() if getattr(mechanism_class(n), "has_distribution", False)]

#: options that make a mechanism fit a small embedding (any other mechanism runs at its defaults)
SMALL_OPTIONS: dict[str, dict[str, Any]] = {"custext": {"k": 5}, "custext_plus": {"k": 5}}
#: the twin's epsilon (twice the ordinary one unless its law needs a larger change: truncated_gumbel's
#: law hardly moves with epsilon, whose only role is its noise scale; total variation 0.03 from 1.5
#: to 1,000, 0.18 to 1e6 on the toy embedding)
TWIN_EPSILON: dict[str, float] = {"truncated_gumbel": 1e6}


@dataclass(frozen=True)
class Case:
    """One sampler setting: mechanism, epsilon, options, draws per input word."""

    name: str
    epsilon: float
    options: dict[str, Any] = field(default_factory=dict)
    draws: int = 4000
    label: str = ""
    #: draw through ``privatize_records`` (records of :data:`RECORD_TOKENS` tokens, one stream each)
    records: bool = False

    @property
    def id(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in self.options.items())
        return (
            f"{self.name}-eps{self.epsilon:g}"
            + (f"-{extra}" if extra else "")
            + (f"-{self.label}" if self.label else "")
        )

    @property
    def seed(self) -> int:
        return zlib.crc32(self.id.encode())


def _declares(name: str, option: str) -> bool:
    return option in {o.name for o in getattr(mechanism_class(name), "options", ())}


def ordinary(name: str, draws: int = 20_000) -> Case:
    return Case(name, 1.5, dict(SMALL_OPTIONS.get(name, {})), draws, "ordinary")


def generic_cases(name: str, *, small: float, huge: float, draws: int) -> list[Case]:
    """Cases every exact mechanism gets: ordinary, epsilon small and huge, the history-free path, and
    the keyed runs' path (``privatize_records``, where the mechanism base class has one)."""
    base = SMALL_OPTIONS.get(name, {})
    out = [ordinary(name, draws * 5), Case(name, small, dict(base), draws), Case(name, huge, dict(base), draws)]
    if _declares(name, "history_free"):
        out.append(Case(name, 1.5, {**base, "history_free": True}, max(draws // 4, 1000)))
    if KEYED:
        out.append(Case(name, 1.5, dict(base), max(draws // 2, 1000), "records", records=True))
    return out


#: the extreme settings of each built-in (on the 18-word toy embedding): eps * n small, windows
#: of 0 and wider than the vocabulary, output sets of one word and of all, p at 0 and 1
SPECIFIC: dict[str, list[Case]] = {
    "diffractor": [
        Case("diffractor", 0.05),  # eps * n = 0.9: issue 40's regime
        Case("diffractor", 0.005),
        Case("diffractor", 0.05, {"lists": 3}),
        Case("diffractor", 0.8, {"lists": 2}),
        Case("diffractor", 0.05, {"noise": "tem", "gamma": 3}),
        Case("diffractor", 2.0, {"noise": "tem", "gamma": 0}),
        Case("diffractor", 2.0, {"noise": "tem", "gamma": 0.5}),
        Case("diffractor", 1.0, {"noise": "tem", "gamma": 2.5, "lists": 3}),
        Case("diffractor", 0.5, {"noise": "tem", "gamma": 40}),  # wider than the list
        Case("diffractor", 0.5, {"noise": "tem", "gamma": 100_000}),  # the declared maximum
        Case("diffractor", 60.0, {"noise": "tem", "gamma": 5}),
    ],
    "tem": [
        Case("tem", 2.0, {"gamma": 0.0}),
        Case("tem", 2.0, {"gamma": 0.3}),
        Case("tem", 1.0, {"gamma": 1e6}),  # beyond every distance: the exponential mechanism
        Case("tem", 1.5, {"metric": "angular"}),
        Case("tem", 1.5, {"table_max": 1}),
    ],
    "exponential": [Case("exponential", 1.5, {"metric": "angular"}), Case("exponential", 2.0, {"chunk": 1})],
    "santext_plus": [
        Case("santext_plus", 1.5, {"p": 0.0}),
        Case("santext_plus", 1.5, {"p": 1.0}),
        Case("santext_plus", 1.5, {"sensitive_fraction": 0.05}),  # one sensitive word
        Case("santext_plus", 1.5, {"sensitive_fraction": 1.0}),
    ],
    "custext": [Case("custext", 1.5, {"k": 1}), Case("custext", 1.5, {"k": 18}), Case("custext", 60.0, {"k": 18})],
    "custext_plus": [Case("custext_plus", 1.5, {"k": 1}), Case("custext_plus", 0.01, {"k": 18})],
}

CASES = [c for name in EXACT for c in generic_cases(name, small=0.01, huge=60.0, draws=4000) + SPECIFIC.get(name, [])]
#: each test of this file (laws, twins, the pre-issue-40 sampler) gets this share of FAMILY_ALPHA
ALPHA = FAMILY_ALPHA / (len(CASES) + len(EXACT) + 2)


# -- the check ---------------------------------------------------------------------------------
def build(case: Case, emb: Embedding, epsilon: float | None = None) -> Mechanism:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # truncated_gumbel's NotPrivateWarning, santext+'s notes
        return make_mechanism(case.name, emb, case.epsilon if epsilon is None else epsilon, **case.options)


def law_matrix(mech: Mechanism, words: npt.NDArray[np.int64] | None = None) -> npt.NDArray[np.float64]:
    """``(len(words), V)``: row ``i`` is ``distribution(words[i])`` over every output id (repeated ids
    summed); ``words`` defaults to the whole vocabulary."""
    v = mech.embedding.size
    words = np.arange(v) if words is None else words
    out = np.zeros((words.size, v))
    for i, w in enumerate(words.tolist()):
        ids, probs = mech.distribution(w)
        ids, probs = np.asarray(ids), np.asarray(probs, dtype=np.float64)
        assert ids.shape == probs.shape and np.all((ids >= 0) & (ids < v)), (mech.name, w)
        assert np.all(probs >= 0) and math.isclose(float(probs.sum()), 1.0, abs_tol=1e-6), (mech.name, w)
        np.add.at(out[i], ids, probs)
    return out / out.sum(axis=1, keepdims=True)


def sample_counts(
    mech: Mechanism,
    draws: int,
    rng: np.random.Generator,
    words: npt.NDArray[np.int64] | None = None,
    records: bool = False,
) -> npt.NDArray[np.int64]:
    """``(len(words), V)`` counts: ``draws`` tokens of each word (default: every word), shuffled,
    in two calls of the same instance (``records``: two calls of ``privatize_records``)."""
    v = mech.embedding.size
    words = np.arange(v, dtype=np.int64) if words is None else words
    rows = rng.permutation(np.repeat(np.arange(words.size), draws))
    ids = words[rows]
    half = ids.size // 2
    if records:  # the keyed path: each record from its own stream, several records per call
        parts = [ids[s : s + RECORD_TOKENS] for s in range(0, ids.size, RECORD_TOKENS)]
        gens = [seeded_generator(int(s), warn=False) for s in rng.integers(0, 2**62, len(parts))]
        cut = len(parts) // 2
        first = mech.privatize_records(parts[:cut], gens[:cut])
        out = np.concatenate(first + mech.privatize_records(parts[cut:], gens[cut:]))
    else:
        out = np.concatenate([mech.privatize(ids[:half], rng), mech.privatize(ids[half:], rng)])
    counts = np.zeros((words.size, v), dtype=np.int64)
    np.add.at(counts, (rows, out), 1)
    return counts


def law_pvalue(
    counts: npt.NDArray[np.int64], law: npt.NDArray[np.float64], min_expected: float = MIN_EXPECTED
) -> float:
    """p-value of "row ``w`` of ``counts`` is a multinomial sample of row ``w`` of ``law``, for every ``w``".

    Per row, cells expecting fewer than ``min_expected`` draws are pooled; a pooled cell expecting
    at least that many is one more cell of the G-test. Otherwise the G-test is conditional on the
    pooled count, and the pooled counts of all such rows together get a one-sided Poisson test
    (more rare outputs than the law allows; a sum of binomials is less spread than the Poisson of
    the same mean, so the test is conservative). The smaller of the two p-values, doubled.
    An output of probability 0 that occurs gives 0.
    """
    if np.any(counts[law <= 0] > 0):
        return 0.0
    g, df = 0.0, 0
    rare_seen, rare_expected = 0, 0.0
    for obs_row, p_row in zip(counts.astype(np.float64), law, strict=True):
        n = obs_row.sum()
        if n == 0:
            continue
        big = p_row * n >= min_expected
        obs, prob = list(obs_row[big]), list(p_row[big])
        rest_p, rest_o = float(p_row[~big].sum()), float(obs_row[~big].sum())
        if rest_p * n >= min_expected:
            obs.append(rest_o)
            prob.append(rest_p)
        elif rest_p > 0 or rest_o > 0:
            rare_seen += int(rest_o)
            rare_expected += rest_p * n
        o, p = np.asarray(obs), np.asarray(prob)
        if o.size < 2:
            continue
        e = p / p.sum() * o.sum()  # conditional on the rare count (no-op when there is none)
        nz = o > 0
        g += 2.0 * float(np.sum(o[nz] * np.log(o[nz] / e[nz])))
        df += o.size - 1
    p_g = float(stats.chi2.sf(g, df)) if df else 1.0
    p_rare = float(stats.poisson.sf(rare_seen - 1, rare_expected)) if rare_seen else 1.0
    return min(1.0, 2.0 * min(p_g, p_rare))


def check(
    case: Case, emb: Embedding, law_epsilon: float | None = None, words: npt.NDArray[np.int64] | None = None
) -> float:
    """p-value of ``case``'s draws on ``emb`` (of ``words``: default every word) against the law of the
    same mechanism at ``law_epsilon`` (default: its own)."""
    mech = build(case, emb)
    law = law_matrix(mech if law_epsilon is None else build(case, emb, law_epsilon), words)
    counts = sample_counts(mech, case.draws, seeded_generator(case.seed, warn=False), words, case.records)
    return law_pvalue(counts, law)


# -- the tests ---------------------------------------------------------------------------------
def test_the_registry_gives_the_cases() -> None:
    """Every mechanism that states its law has its cases here (a new one is picked up by name)."""
    assert set(EXACT) >= {"tem", "exponential", "santext", "santext_plus", "custext", "custext_plus", "diffractor"}
    assert {c.name for c in CASES} == set(EXACT)
    assert all(any(c.label == "ordinary" for c in CASES if c.name == n) for n in EXACT)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_sampler_draws_its_stated_law(case: Case) -> None:
    p = check(case, make_toy_embedding())
    assert p > ALPHA, f"{case.id}: p = {p:.3g} <= {ALPHA:.3g}"


@pytest.mark.parametrize("name", EXACT)
def test_a_wrong_law_twin_is_rejected(name: str) -> None:
    """The same draws against the mechanism's law at another epsilon: the check can fail."""
    case = ordinary(name)
    p = check(case, make_toy_embedding(), law_epsilon=TWIN_EPSILON.get(name, 2.0 * case.epsilon))
    assert p <= ALPHA, f"{name}: the law at another epsilon was not rejected (p = {p:.3g})"


def capped_before_difference(mech: Any, x: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """1-Diffractor's geometric sampler before issue 40: each geometric capped at n, then the difference."""
    n = mech.embedding.size
    e = rng.standard_exponential((2, x.size))
    geo = np.floor(np.minimum(e / mech.epsilon, float(n)))
    return np.asarray(np.clip(x + (geo[0] - geo[1]).astype(np.int64), 0, n - 1))


@pytest.mark.parametrize("lists", [1, 3])
def test_the_pre_issue_40_diffractor_sampler_is_rejected(monkeypatch: pytest.MonkeyPatch, lists: int) -> None:
    """Twin of the eps * n = 0.9 cases: the capped sampler is caught, on the 18-word list already."""
    from deniable.mechanisms.diffractor import Diffractor

    original: Callable[..., Any] = Diffractor._sample_positions

    def old(self: Diffractor, x: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        return capped_before_difference(self, x, rng) if self.noise == "geometric" else original(self, x, rng)

    monkeypatch.setattr(Diffractor, "_sample_positions", old)
    p = check(Case("diffractor", 0.05, {"lists": lists} if lists > 1 else {}), make_toy_embedding())
    assert p <= ALPHA, f"the capped sampler passed (p = {p:.3g})"


def test_the_check_rejects_rare_outputs_drawn_too_often() -> None:
    """The rare-cell test alone: a law with a 1e-9 cell sampled 3 times in 1,000 draws is rejected,
    and the same counts against a law that allows them pass."""
    law = np.array([[1 - 1e-9, 1e-9], [0.5, 0.5]])
    counts = np.array([[997, 3], [500, 500]])
    assert law_pvalue(counts, law) < 1e-12
    assert law_pvalue(counts, np.array([[0.997, 0.003], [0.5, 0.5]])) > 0.1
    assert law_pvalue(np.array([[1000, 0], [0, 1000]]), np.array([[1.0, 0.0], [1.0, 0.0]])) == 0.0
