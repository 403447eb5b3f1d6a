"""The guarantee checker: it passes correct mechanisms and flags ones that sample with 3x the claimed epsilon."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt
import pytest

from _brr_helpers import code_embedding, nibble_vocabulary
from deniable import Embedding
from deniable.experiments.audit import audit_mechanism, clopper_pearson, sample_pairs
from deniable.mechanisms.base import Mechanism
from deniable.mechanisms.brr import BinaryRandomizedResponse
from deniable.mechanisms.laplace import MultivariateLaplace
from deniable.mechanisms.tem import TruncatedExponential


@dataclass(frozen=True, eq=False)
class FiniteExponential(Mechanism):
    """A toy finite mechanism: Pr[y | w] ∝ exp(-noise_factor * epsilon * d(w, y) / 2) over the vocabulary.

    With ``noise_factor=1`` it is the exponential mechanism (eps-metric DP); with 3 it
    reports ``epsilon`` but samples with 3 * epsilon.
    """

    name: ClassVar[str] = "finite-toy"
    metric: ClassVar[str] = "euclidean"  # type: ignore[misc]
    has_distribution: ClassVar[bool] = True

    embedding: Embedding
    epsilon: float
    noise_factor: float = 1.0

    def _probs(self, w: int) -> npt.NDArray[np.float64]:
        vec = self.embedding.vectors.astype(np.float64)
        d = np.linalg.norm(vec - vec[w], axis=1)
        p = np.exp(-self.noise_factor * self.epsilon * d / 2)
        return np.asarray(p / p.sum())

    def distribution(self, w: int | str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        return np.arange(self.embedding.size, dtype=np.int64), self._probs(self._id(w))

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        out = np.empty_like(ids)
        for w in np.unique(ids):
            at = ids == w
            out[at] = rng.choice(self.embedding.size, size=int(at.sum()), p=self._probs(int(w)))
        return out

    def distance(self, w: int, w2: int) -> float:
        vec = self.embedding.vectors.astype(np.float64)
        return float(np.linalg.norm(vec[w] - vec[w2]))


class LoudTEM(TruncatedExponential):
    """TEM that reports epsilon but computes its distribution with 3 * epsilon."""

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "_a", 3 * self.epsilon / 2)


class LoudLaplace(MultivariateLaplace):
    """Madlib that reports epsilon but adds the noise of 3 * epsilon."""

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        out = np.empty(ids.size, dtype=np.int64)
        from deniable.mechanisms.laplace import sample_laplace_noise

        noisy = sample_laplace_noise(ids.size, self.embedding.dim, 3 * self.epsilon, rng) + self.embedding.vectors[ids]
        _, nn = self.search_index.search(noisy.astype(np.float32), 1)
        out[:] = nn[:, 0]
        return out


class LoudBRR(BinaryRandomizedResponse):
    """BRR that reports epsilon but flips bits with the probability of 3 * epsilon."""

    @property
    def flip_probability(self) -> float:
        return float(1 / (1 + np.exp(3 * self.epsilon)))


def line() -> Embedding:
    return Embedding(["a", "b", "c"], np.array([[0.0], [1.0], [2.0]], dtype=np.float32), name="line")


# -- exact path ---------------------------------------------------------------------------
def test_exact_path_passes_the_toy_mechanism_and_flags_it_at_3x(tiny_embedding: Embedding) -> None:
    good = audit_mechanism(FiniteExponential(tiny_embedding, 1.0), pairs=8, random_state=0)
    assert good.method == "exact" and good.passed
    assert 0 < good.worst_ratio <= 1 + 1e-9
    bad = audit_mechanism(FiniteExponential(tiny_embedding, 1.0, noise_factor=3.0), pairs=8, random_state=0)
    assert not bad.passed and bad.violations > 0
    assert bad.worst_ratio > 1.5


def test_exact_path_on_tem(toy_embedding: Embedding) -> None:
    good = audit_mechanism(TruncatedExponential(toy_embedding, 2.0, cache=False), pairs=10, random_state=1)
    assert good.method == "exact" and good.passed
    assert good.worst_ratio <= 1 + 1e-9
    bad = audit_mechanism(LoudTEM(toy_embedding, 2.0, cache=False), pairs=10, random_state=1)
    assert not bad.passed
    assert bad.worst_ratio > 1.2


def test_exact_path_flags_an_output_only_one_word_can_produce(tiny_embedding: Embedding) -> None:
    @dataclass(frozen=True, eq=False)
    class Identity(FiniteExponential):
        def distribution(self, w: int | str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
            return np.array([self._id(w)]), np.array([1.0])

    res = audit_mechanism(Identity(tiny_embedding, 1.0), pairs=[("w0", "w1")])
    assert not res.passed and res.worst_ratio == np.inf


# -- black-box path -----------------------------------------------------------------------
def test_black_box_passes_madlib_and_flags_it_at_3x() -> None:
    pairs = [("a", "b"), ("b", "c"), ("a", "c")]
    good = audit_mechanism(MultivariateLaplace(line(), 1.0), pairs=pairs, draws=20_000, random_state=2)
    assert good.method == "black-box" and good.passed
    assert good.worst_ratio > 0.3  # the check has some power here: the certified ratio is not trivially low
    bad = audit_mechanism(LoudLaplace(line(), 1.0), pairs=pairs, draws=20_000, random_state=2)
    assert not bad.passed
    assert bad.worst_ratio > 1.2


def test_black_box_passes_brr_and_flags_it_at_3x() -> None:
    emb = code_embedding(nibble_vocabulary())
    pairs = [("w0", "w1"), ("w3", "w7"), ("w5", "w12")]
    good = audit_mechanism(
        BinaryRandomizedResponse(emb, 1.0, binarizer=nibble_vocabulary()), pairs=pairs, draws=20_000, random_state=3
    )
    assert good.passed and good.worst_ratio > 0.5
    bad = audit_mechanism(LoudBRR(emb, 1.0, binarizer=nibble_vocabulary()), pairs=pairs, draws=20_000, random_state=3)
    assert not bad.passed and bad.worst_ratio > 1.5


def test_black_box_on_a_mechanism_with_a_distribution_when_asked(tiny_embedding: Embedding) -> None:
    res = audit_mechanism(
        FiniteExponential(tiny_embedding, 1.0, noise_factor=3.0),
        pairs=4,
        draws=5000,
        method="black-box",
        random_state=4,
    )
    assert res.method == "black-box"


def test_false_alarm_rate_is_bounded_by_alpha() -> None:
    # many audits of a correct, tight mechanism (4-bit randomized response): the flag rate stays below alpha
    emb = code_embedding(nibble_vocabulary())
    mech = BinaryRandomizedResponse(emb, 2.0, binarizer=nibble_vocabulary())
    flagged = sum(
        not audit_mechanism(mech, pairs=[("w0", "w1")], draws=2000, alpha=0.2, outputs=2, random_state=s).passed
        for s in range(20)
    )
    assert flagged <= 8  # expected <= 4 at alpha = 0.2


# -- pieces -------------------------------------------------------------------------------
def test_clopper_pearson_bounds() -> None:
    lo = clopper_pearson(np.array([0, 5, 10]), 10, 0.05, "lower")
    hi = clopper_pearson(np.array([0, 5, 10]), 10, 0.05, "upper")
    assert lo[0] == 0 and hi[2] == 1
    assert 0 < lo[1] < 0.5 < hi[1] < 1
    assert hi[0] == pytest.approx(1 - 0.05 ** (1 / 10))


def test_sample_pairs_mixes_neighbours_and_random(tiny_embedding: Embedding) -> None:
    mech = FiniteExponential(tiny_embedding, 1.0)
    pairs = sample_pairs(mech, 6, np.random.default_rng(0))
    assert [k for _, _, k in pairs].count("neighbour") == 3
    assert all(w != w2 for w, w2, _ in pairs)


def test_bad_arguments_name_the_parameter(tiny_embedding: Embedding) -> None:
    from deniable._errors import InvalidParameterError

    mech = MultivariateLaplace(tiny_embedding, 1.0)
    with pytest.raises(InvalidParameterError, match="method"):
        audit_mechanism(mech, method="exact")
    with pytest.raises(InvalidParameterError, match="draws"):
        audit_mechanism(mech, draws=1)
    with pytest.raises(InvalidParameterError, match="word"):
        audit_mechanism(mech, pairs=[("secret text", "w1")])


def test_report_and_files(tmp_path, tiny_embedding: Embedding) -> None:  # type: ignore[no-untyped-def]
    res = audit_mechanism(FiniteExponential(tiny_embedding, 1.0, noise_factor=3.0), pairs=4, random_state=0)
    assert "FAIL" in res.render()
    paths = res.write(tmp_path)
    assert set(paths) == {"audit.csv", "audit.md", "settings.json"}
    assert paths["audit.csv"].read_text().count("\n") == 9


def test_claimed_epsilon_measures_power(tiny_embedding: Embedding) -> None:
    # a correct mechanism at 3 * eps, audited against the claim eps, is the 3x mechanism
    res = audit_mechanism(FiniteExponential(tiny_embedding, 3.0), pairs=8, claimed_epsilon=1.0, random_state=0)
    assert not res.passed and res.mechanism["epsilon"] == 1.0 and res.mechanism["sampling_epsilon"] == 3.0
