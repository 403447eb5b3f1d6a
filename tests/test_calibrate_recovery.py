"""Attacker recovery in the calibration table (issue 41 item 2): the exact and held-out estimators,
``recovered<=X`` targets, and the human-terms statement."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from deniable import Embedding
from deniable._errors import InvalidParameterError
from deniable.calibrate.recovery import CONTENT_RANK, _held_out_hits, exact_affordable, reference_recovery
from deniable.calibrate.table import (
    CalibrationPoint,
    CalibrationTable,
    Strength,
    Target,
    build_table,
    parse_target,
    reference_ids,
)
from deniable.calibrate.terms import TARGET_HELP
from deniable.mechanisms.base import Mechanism
from deniable.mechanisms.registry import mechanism_class
from deniable.priors import zipf_prior


def _embedding(n: int = 40, seed: int = 3) -> Embedding:
    vec = np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)
    return Embedding([f"w{i}" for i in range(n)], vec, name=f"recovery-{n}")


def _mech(name: str, emb: Embedding, eps: float) -> Mechanism:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mechanism_class(name)(emb, epsilon=eps)  # type: ignore[call-arg]


# -- exact: against brute force ----------------------------------------------------------------


@pytest.mark.parametrize("name", ["tem", "exponential"])
def test_exact_recovery_is_the_brute_force_bayes_attacker(name: str) -> None:
    emb = _embedding()
    mech = _mech(name, emb, 2.0)
    assert exact_affordable(mech)
    ids = reference_ids(emb.size, 300)
    prior = zipf_prior(emb).probs
    p = np.zeros((emb.size, emb.size))
    for w in range(emb.size):
        out, probs = mech.distribution(w)
        p[w, np.asarray(out)] = probs
    guess = (prior[:, None] * p).argmax(axis=0)  # ties: the lower rank = the more probable word
    per_word = np.array([p[w, guess == w].sum() for w in range(emb.size)])
    want = per_word[ids].mean()
    want_content = per_word[ids[ids >= CONTENT_RANK]].mean() if (ids >= CONTENT_RANK).any() else None
    r = reference_recovery(mech, ids, ids)  # exact: the draws do not enter
    assert r.method == "exact"
    assert r.recovered == pytest.approx(want, abs=1e-12)
    assert r.low <= r.recovered <= r.high
    assert r.content == want_content  # 40 words: no content word (outside the 200 most frequent)


def test_exact_recovery_wrong_epsilon_twin() -> None:
    """The recorded exact value agrees with a Monte-Carlo attack at its epsilon, not at a wrong one."""
    emb = _embedding()
    ids = reference_ids(emb.size, 400)
    mech = _mech("exponential", emb, 2.0)
    recorded = reference_recovery(mech, ids, ids)

    def simulated(eps: float) -> tuple[float, float, float]:
        m = _mech("exponential", emb, eps)
        from deniable.calibrate.recovery import exact_guess_table

        guess = exact_guess_table(mech, zipf_prior(emb))  # the attacker believes epsilon 2
        rng = np.random.default_rng(7)
        reps = 200
        out = np.asarray(m.privatize(np.tile(ids, reps), rng)).reshape(reps, ids.size)
        hits = (guess[out] == ids[None, :]).mean(axis=1)
        mean, se = float(hits.mean()), float(hits.std(ddof=1) / math.sqrt(reps))
        return mean, mean - 4 * se, mean + 4 * se

    _, lo, hi = simulated(2.0)
    assert lo <= recorded.recovered <= hi
    _, lo_w, hi_w = simulated(4.0)  # the twin: a different epsilon must be told apart
    assert not lo_w <= recorded.recovered <= hi_w


# -- held out: never scored on its own fitting draws -----------------------------------------------


def test_held_out_table_never_scores_its_own_fitting_draws() -> None:
    """A mechanism whose outputs are random labels: memorising the draws would recover them all,
    an honest held-out table recovers only what the fallback guesses."""
    v = 5000
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50, size=2000)
    out = rng.permutation(v)[:2000]  # every output distinct: each (x, y) pair seen once
    hits = _held_out_hits(ids, out, v)
    assert hits.mean() <= (ids == 0).mean() + 1e-12  # the rank-0 fallback at most
    same = np.r_[out[:1000], out[:1000]]  # the second half repeats the first's outputs
    twin = np.r_[ids[:1000], ids[:1000]]
    assert _held_out_hits(twin, same, v).mean() < 0.2  # seen once in the other half: not trusted


def test_held_out_recovers_a_deterministic_code() -> None:
    """A fixed relabelling of words is fully recovered once seen twice in the fitting half."""
    v = 30
    ids = reference_ids(v, 4000)
    code = np.random.default_rng(1).permutation(v)
    hits = _held_out_hits(ids, code[ids], v)
    assert hits.mean() > 0.99


def test_sampled_mechanisms_record_a_held_out_recovery_at_least_the_unchanged_share() -> None:
    emb = _embedding(60)
    t = build_table(emb, "madlib", tokens=1024, epsilons=[2.0, 8.0, 30.0], show_progress=False)
    for p in t.points:
        assert p.recovery_method == "held-out"
        assert p.recovered is not None and p.recovered_low is not None and p.recovered_high is not None
        assert p.recovered_low <= p.recovered <= p.recovered_high
        assert p.recovered_high >= p.unchanged - 0.05  # "guess the word you see" is an attacker too


# -- targets -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("recovered<=0.2", Target(0.2, "recovered")),
        ("recovered <= 20%", Target(0.2, "recovered")),
        ("recovered_content<=0.1", Target(0.1, "recovered_content")),
        ("unchanged<0.5", Target(0.5, "unchanged")),
    ],
)
def test_target_forms(text: str, want: Target) -> None:
    got = parse_target(text)
    assert got == want
    assert parse_target(str(got)) == got


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=60), st.integers(), st.none(), st.floats()))
def test_bad_targets_name_the_option(value: object) -> None:
    try:
        t = parse_target(value, "--target")
    except InvalidParameterError as e:
        assert "--target" in str(e)
        return
    assert isinstance(value, str) and 0 < t.bound < 1 and t.metric in str(value)


@pytest.mark.parametrize("bad", ["recovered<=1.5", "recovered<=0", "recovered>=0.2", "recover<=0.2", "content<=0.1"])
def test_bad_recovered_targets(bad: str) -> None:
    with pytest.raises(InvalidParameterError, match="--target"):
        parse_target(bad, "--target")
    assert "recovered<=0.2" in TARGET_HELP and "recovered_content" in TARGET_HELP


def _point(eps: float, unchanged: float, rec: float, con: float) -> CalibrationPoint:
    return CalibrationPoint(
        eps, 1000, unchanged, unchanged - 0.01, unchanged + 0.01, None, None, None,
        rec, rec - 0.02, rec + 0.02, con, con - 0.03, con + 0.03, "exact",
    )  # fmt: skip


def _table() -> CalibrationTable:
    pts = (_point(1, 0.05, 0.12, 0.05), _point(2, 0.15, 0.18, 0.12), _point(3, 0.3, 0.33, 0.35))
    return CalibrationTable("tem", {}, "f", 1000, 1, pts, None)


def test_recovered_targets_use_the_upper_bound_of_their_measure() -> None:
    t = _table()
    assert t.resolve("recovered<=0.2").epsilon == 2  # 0.18 + 0.02 <= 0.2
    assert t.resolve("recovered<=0.19").epsilon == 1  # 0.20 > 0.19: conservative
    assert t.resolve("recovered_content<=0.15").epsilon == 2
    assert t.resolve("unchanged<=0.2").epsilon == 2
    with pytest.raises(InvalidParameterError, match="attacker who knows the mechanism"):
        t.resolve("recovered<=0.1")
    est, hi, how = t.at(1.5, "recovered")
    assert 0.12 < est < 0.18 and hi == pytest.approx(0.2) and how == "interpolated"


def test_strength_states_attacker_recovery_beside_the_unchanged_share() -> None:
    s = Strength("tem", 2.0, 0.15, 0.16, "calibration table", recovered=0.18, recovered_upper=0.2,
                 recovered_content=0.12, recovered_content_upper=0.15, recovery_method="exact")  # fmt: skip
    sentence = s.sentence()
    assert "about 15% of the word tokens" in sentence
    assert "an attacker who knows the mechanism recovers about 18% of the words (12% of the less common ones)" in (
        sentence
    )
    d = s.describe()
    assert d["recovered"] == 0.18 and d["recovered_content"] == 0.12 and d["recovery_method"] == "exact"
    bare = Strength("tem", 2.0, 0.15, 0.16, "calibration table")
    assert "attacker" not in bare.sentence() and "recovered" not in bare.describe()


# -- the target is met on held-out text ----------------------------------------------------------


@pytest.mark.slow
def test_recovered_target_is_met_on_held_out_text() -> None:
    """Issue 41's "done when": a ``recovered<=X`` target picked from the curve (exact TEM on GloVe's 2,000 most
    frequent words) is met on other text (Zipf with another seed) within +/- 3 points of X, and at most X + 3.

    The choice reads the upper 95% bound (about 1.5 points above the estimate at 0.4, 4,096 tokens), so it
    lands that far below X plus at most one grid step: the grid is bisected until neighbours differ by at most
    1.5 points (table.FINE_WHEN). A content target is checked where its half-width (about 1,150 content tokens
    among the reference) leaves room: 0.1 (half-width 1.6 points; at 0.3 it is 2.7 points by itself)."""
    from deniable import load_embedding

    emb = load_embedding(vocab_size=2000)
    table = build_table(emb, "tem", show_progress=False)
    held_out = reference_ids(emb.size, 20000, seed=12345)

    def held(eps: float, metric: str) -> float:
        r = reference_recovery(_mech("tem", emb, eps), held_out, held_out)
        assert r.method == "exact"
        got = r.recovered if metric == "recovered" else r.content
        assert got is not None
        return got

    for target in ("recovered<=0.2", "recovered<=0.4", "recovered_content<=0.1"):
        res = table.resolve(target)
        metric, bound = res.target.metric, res.target.bound
        got = held(res.epsilon, metric)
        assert abs(got - bound) <= 0.03, (target, res.epsilon, got)  # the property, as written
        assert got <= bound + 0.03
        curve = res.point.recovered if metric == "recovered" else res.point.recovered_content
        assert curve is not None and abs(got - curve) <= 0.03  # the curve describes other text too

    # the twin: the same curve on the 2^(1/8) grid alone (table version 2) misses recovered<=0.4 by more than
    # 3 points (36.9% held out): the bisection is what meets it
    def on_eighths(e: float) -> bool:
        return abs(8 * math.log2(e) - round(8 * math.log2(e))) < 1e-6

    eighths = dataclasses.replace(table, points=tuple(p for p in table.points if on_eighths(p.epsilon)))
    assert len(eighths.points) < len(table.points)
    coarse = eighths.resolve("recovered<=0.4")
    assert abs(held(coarse.epsilon, "recovered") - 0.4) > 0.03
