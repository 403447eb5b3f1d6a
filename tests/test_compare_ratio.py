"""privacy_ratio: P_d estimates, the ratio, its standard error and the epsilon conversion."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import make_tiny_embedding
from deniable import BinaryRandomizedResponse, Embedding, InvalidParameterError, MultivariateLaplace
from deniable.calibrate import privacy_ratio
from deniable.calibrate.compare import PrivacyRatio, mean_pairwise_distance, pair_distances
from fake_mechanisms import FakeMechanism


def line_embedding(n: int, scale: float = 1.0) -> Embedding:
    """n words at 0, scale, 2 scale, ... on a line: all pairwise distances known."""
    vec = np.zeros((n, 2), dtype=np.float32)
    vec[:, 0] = np.arange(n) * scale
    return Embedding([f"w{i}" for i in range(n)], vec)


def test_ratio_arithmetic_on_a_known_geometry() -> None:
    emb = line_embedding(30)
    a = MultivariateLaplace(emb, 1.0)
    b = MultivariateLaplace(line_embedding(30, 4.0), 1.0)  # distances x4, another vocabulary object
    r = privacy_ratio(a, b, pairs=20000, rng=0)
    assert isinstance(r, PrivacyRatio)
    true_mean = (30 + 1) / 3  # E|i - j| over distinct pairs of 0..n-1 is (n + 1) / 3
    assert r.a.mean == pytest.approx(true_mean, abs=5 * r.a.std_error)
    assert r.ratio == pytest.approx(0.25, rel=1e-9)  # same pairs (same words): exact
    assert r.paired and r.std_error == pytest.approx(0.0, abs=1e-9)
    assert r.epsilon_b(10.0) == pytest.approx(2.5) and r.convert(10.0) == pytest.approx(2.5)
    assert r.epsilon_a(2.5) == pytest.approx(10.0)
    # the two bounds agree: eps_a * P_dA == eps_b * P_dB
    assert 10.0 * r.a.mean == pytest.approx(r.epsilon_b(10.0) * r.b.mean)
    assert "R = 0.25" in str(r)


def test_unpaired_when_vocabularies_differ_and_standard_error() -> None:
    a = MultivariateLaplace(line_embedding(40), 1.0)
    b = MultivariateLaplace(line_embedding(20), 1.0)
    r = privacy_ratio(a, b, pairs=40000, rng=np.random.default_rng(3))
    assert not r.paired
    expected = (41 / 3) / (21 / 3)
    assert abs(r.ratio - expected) < 5 * r.std_error and 0 < r.std_error < 0.05
    lo, hi = r.interval()
    assert lo < r.ratio < hi


def test_madlib_vs_brr_and_the_standard_error_shrinks() -> None:
    emb = make_tiny_embedding(60, 5, seed=3)
    madlib = MultivariateLaplace(emb, 1.0)
    brr = BinaryRandomizedResponse(emb, 1.0, bits=64, binarizer="simhash")
    small = privacy_ratio(madlib, brr, pairs=2000, rng=1)
    big = privacy_ratio(madlib, brr, pairs=50000, rng=1)
    assert small.b.metric == "hamming" and small.a.metric == "euclidean"
    assert big.a.std_error < small.a.std_error and big.std_error < small.std_error
    assert abs(big.ratio - small.ratio) < 5 * small.std_error
    # exhaustive P_d over all distinct ordered pairs agrees with the estimate
    i, j = np.nonzero(~np.eye(60, dtype=bool))
    exact_b = brr.pair_distances(i, j).mean()
    assert abs(big.b.mean - exact_b) < 5 * big.b.std_error


class _Odd(FakeMechanism):
    """A mechanism whose distance is not a metric on its vectors (exercises the scalar fallback)."""

    name = "odd"

    def _privatize(self, ids, rng):  # type: ignore[no-untyped-def]
        return np.asarray(ids)

    def distance(self, w: int, w2: int) -> float:
        return 0.0 if w == w2 else 7.0


def test_generic_mechanism_falls_back_to_its_distance() -> None:
    emb = line_embedding(10)
    d = pair_distances(_Odd(emb), [0, 1, 2], [3, 1, 9])
    assert np.array_equal(d, [7.0, 0.0, 7.0])
    md, sample = mean_pairwise_distance(_Odd(emb), pairs=100, rng=0)
    assert md.mean == 7.0 and md.std_error == 0.0 and len(sample) == 100


def test_bad_input() -> None:
    a = MultivariateLaplace(line_embedding(5), 1.0)
    with pytest.raises(InvalidParameterError, match="pairs"):
        privacy_ratio(a, a, pairs=1)
    with pytest.raises(InvalidParameterError, match="mech_a"):
        privacy_ratio(MultivariateLaplace(line_embedding(1), 1.0), a)
    r = privacy_ratio(a, a, pairs=100, rng=0)
    assert r.ratio == 1.0
    with pytest.raises(InvalidParameterError, match="epsilon_a"):
        r.epsilon_b(-1)
    assert math.isfinite(r.std_error)


def test_cli_compare(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from conftest import make_toy_embedding
    from deniable.cli import run_app

    make_toy_embedding().save(tmp_path / "toy")
    args = ["compare", "-a", "madlib", "-b", "brr", "--bits", "64", "--binarizer", "simhash"]
    args += ["--embedding", str(tmp_path / "toy"), "--pairs", "2000", "--seed", "0", "--epsilon", "5,10"]
    assert run_app(args) == 0
    out = capsys.readouterr().out
    assert "R = P_dA / P_dB" in out and "madlib epsilon 10 <-> brr epsilon" in out
    capsys.readouterr()
    assert run_app(["compare", "-a", "madlib", "-b", "nope"]) == 2
    assert "--mechanism-b=" in capsys.readouterr().err  # the flag that was given, not --mechanism
    assert run_app(["compare", "-a", "madlib", "-b", "brr", "--pairs", "1"]) == 2


def _not_metric() -> list[str]:
    from deniable.mechanisms import mechanism_class
    from deniable.mechanisms.registry import mechanism_names

    return [m for m in mechanism_names() if mechanism_class(m).guarantee_form != "metric"]


def test_every_mechanism_declares_the_form_of_its_guarantee() -> None:
    from deniable.mechanisms import mechanism_class
    from deniable.mechanisms.registry import mechanism_names

    for name in mechanism_names():
        form = mechanism_class(name).guarantee_form
        assert isinstance(form, str) and form, name
    assert {"custext", "custext_plus", "santext_plus"} <= set(_not_metric())
    assert not {"madlib", "tem", "brr", "mahalanobis", "vickrey", "exponential", "santext"} & set(_not_metric())


@pytest.mark.parametrize("name", _not_metric())
def test_cli_compare_refuses_a_guarantee_that_is_not_eps_d(name: str, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from conftest import make_toy_embedding
    from deniable.cli import run_app
    from deniable.mechanisms import mechanism_class

    make_toy_embedding().save(tmp_path / "toy")
    for args in (["-a", "madlib", "-b", name], ["-a", name, "-b", "madlib"]):
        code = run_app(["compare", *args, "--embedding", str(tmp_path / "toy"), "--pairs", "100"])
        captured = capsys.readouterr()
        assert code == 2
        assert name in captured.err and "epsilon * d over the whole vocabulary" in captured.err
        assert mechanism_class(name).guarantee_form.split(";")[0] in captured.err.replace("\n", " ")
        assert "R = P_dA" not in captured.out


def test_cli_compare_help_says_which_mechanisms_it_refuses(capsys) -> None:  # type: ignore[no-untyped-def]
    from deniable.cli import run_app

    assert run_app(["compare", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "refused with exit code 2" in text and "--results" in text


def test_a_mechanism_with_an_unbounded_pair_does_not_claim_a_metric_guarantee() -> None:
    """The capability must agree with ``guarantee``: an infinite bound for some pair of words means the
    guarantee is not ``epsilon * d`` over the whole vocabulary (checked for every registered mechanism)."""
    import warnings

    from conftest import make_toy_embedding
    from deniable.mechanisms import make_mechanism, mechanism_class
    from deniable.mechanisms.registry import mechanism_names

    emb = make_toy_embedding()
    for name in mechanism_names():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            small = {"brr": {"bits": 64, "binarizer": "simhash"}, "custext": {"k": 3}, "custext_plus": {"k": 3}}
            mech = make_mechanism(name, emb, 1.0, **small.get(name, {}))
            bounds = [mech.guarantee(i, j) for i in range(emb.size) for j in range(emb.size) if i != j]
        if not all(math.isfinite(b) for b in bounds):
            assert mechanism_class(name).guarantee_form != "metric", name
