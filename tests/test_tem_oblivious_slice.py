"""History-free TEM's plain envelope with the E slice (issue 43): exact, and the same work for every word.

With the plain envelope at small epsilon the history-free sampler proposes E uniformly (its
``k`` entries each with envelope ``1 - env``, accepted with ``max(w - env, 0) / (1 - env)``)
beside the whole vocabulary with envelope ``env`` (accepted with ``min(w, env) / env``): no
weights of E per token and no membership test. These tests G-test its draws (false alarm 1e-6)
against TEM's law with a wrong-epsilon twin that must fail, through the budget and through the
fallback, check that every word makes the same proposals, and that the plan chooses it only
where it pays (small epsilon), as a function of the configuration.
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import make_tiny_embedding
from deniable.mechanisms.tem import TruncatedExponential
from deniable.mechanisms.tem import _oblivious as oblivious
from deniable.preparation import prepare
from test_tem_oblivious import proposal_sizes
from test_tem_support import ALPHA, force_path, g_test_pvalue

WORDS = (3, 40, 150)


def _mech(monkeypatch: pytest.MonkeyPatch, eps: float, rounds: int | None) -> TruncatedExponential:
    opts = force_path(monkeypatch, "knn")  # k = 8 of 400 words: the outside part is exercised
    emb = make_tiny_embedding(400, 3, seed=61)
    prepare(emb, ["tem"], options={"epsilon": eps}, show_progress=False)
    mech = TruncatedExponential(emb, eps, history_free=True, **opts)  # type: ignore[arg-type]
    mech.cache_info()  # opens the tables and chooses the plan (public)
    if rounds is not None:  # the E slice, whatever the plan chose
        mech._prepared.rounds = (rounds, False)  # type: ignore[attr-defined]
        mech._prepared.uniform_e = True  # type: ignore[attr-defined]
    return mech


def _assert_exact_and_twin_fails(mech: TruncatedExponential, seed: int) -> None:
    batch = np.tile(np.array(WORDS), 20000)
    y = mech.privatize(batch, np.random.default_rng(seed))
    for w in WORDS:
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA
    other = TruncatedExponential(mech.embedding, mech.epsilon + 1.0, table_max=1)  # type: ignore[arg-type]
    assert all(g_test_pvalue(y[batch == w], other.distribution(w)[1]) < ALPHA for w in WORDS)


@pytest.mark.parametrize("eps", [1.0, 3.0])
def test_e_slice_draws_are_exact(monkeypatch: pytest.MonkeyPatch, eps: float) -> None:
    # eps 1: the plan's own choice on this vocabulary; eps 3: forced (E holds more of the mass)
    mech = _mech(monkeypatch, eps, 60)
    _assert_exact_and_twin_fails(mech, seed=21)


def test_e_slice_draws_past_the_budget_are_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    # one proposal a token, then one slot of one: nearly every token goes on in the fallback
    mech = _mech(monkeypatch, 3.0, 4)
    monkeypatch.setattr(oblivious, "stages", lambda n, rounds: ((n, 1), (min(n, 1), 1)))
    _assert_exact_and_twin_fails(mech, seed=22)


def test_e_slice_does_the_same_work_for_every_word(monkeypatch: pytest.MonkeyPatch) -> None:
    mech = _mech(monkeypatch, 1.0, 40)
    rng = np.random.default_rng(2)
    v = mech.embedding.size
    inputs = (np.repeat(7, 300), rng.choice(v, 300, replace=False), np.repeat(123, 300), np.arange(300))
    seen = proposal_sizes(monkeypatch, mech, "_propose_uniform", inputs, rng)
    assert seen[0] == seen[1] == seen[2] == seen[3]
    assert sum(seen[0]) == sum(slots * r for slots, r in oblivious.stages(300, 40))


def test_the_plan_takes_the_e_slice_at_small_epsilon_only(monkeypatch: pytest.MonkeyPatch) -> None:
    small = _mech(monkeypatch, 1.0, None)
    assert small._prepared.uniform_e  # type: ignore[attr-defined]
    assert oblivious.oblivious_plan(small)[1] is False
    # at eps 3 E holds too much of this vocabulary's mass (the slice would grow it ~1.9x)
    assert not _mech(monkeypatch, 3.0, None)._prepared.uniform_e  # type: ignore[attr-defined]
    # a function of the configuration: another mechanism, the same choice and plan
    again = TruncatedExponential(small.embedding, 1.0, history_free=True, table_max=1)  # type: ignore[arg-type]
    again.privatize(np.array([77]), np.random.default_rng(4))
    assert again._prepared.uniform_e and oblivious.oblivious_plan(again) == oblivious.oblivious_plan(small)  # type: ignore[attr-defined]
