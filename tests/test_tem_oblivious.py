"""TEM's history-free sampler is data-oblivious (issue 27) and exact.

Every token makes the same ``R`` proposals through every branch; the output is the first
accepted one. These tests check the draws against the exact distribution (G-test, false
alarm 1e-6) with and without the far bounds and through the fallback (``R = 1``), that a
wrong epsilon is caught by the same test, that the work (proposals evaluated) is the same
whatever the words, and that ``R`` is a function of the configuration only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from conftest import make_tiny_embedding
from deniable.mechanisms.tem import TruncatedExponential
from deniable.mechanisms.tem import _oblivious as oblivious
from deniable.preparation import prepare
from test_tem_support import ALPHA, force_path, g_test_pvalue

WORDS = (3, 40, 150)


def _mech(monkeypatch: pytest.MonkeyPatch, eps: float, plan: tuple[int, bool] | None = None) -> TruncatedExponential:
    opts = force_path(monkeypatch, "knn")  # k = 8 of 400 words: the outside part is exercised
    emb = make_tiny_embedding(400, 3, seed=61)
    prepare(emb, ["tem"], options={"epsilon": eps}, show_progress=False)
    mech = TruncatedExponential(emb, eps, history_free=True, **opts)  # type: ignore[arg-type]
    mech.cache_info()  # opens the tables and chooses the plan (public)
    assert mech._prepared.far is not None  # type: ignore[attr-defined]
    if plan is not None:
        mech._prepared.rounds = plan  # type: ignore[attr-defined]
    return mech


@pytest.mark.parametrize("plan", [(6, True), (6, False), (1, True), (1, False), None])
def test_oblivious_draws_are_exact(monkeypatch: pytest.MonkeyPatch, plan: tuple[int, bool] | None) -> None:
    # (R, far): through the far layouts or uniform proposals; R = 1: most tokens go through
    # the fallback rounds; None: the plan the mechanism chose
    mech = _mech(monkeypatch, 3.0, plan)
    batch = np.tile(np.array(WORDS), 20000)
    y = mech.privatize(batch, np.random.default_rng(1))
    for w in WORDS:
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA
    # the same test catches a wrong epsilon
    other = TruncatedExponential(mech.embedding, 4.0, table_max=1)  # type: ignore[arg-type]
    assert all(g_test_pvalue(y[batch == w], other.distribution(w)[1]) < ALPHA for w in WORDS)


def test_every_word_does_the_same_work(monkeypatch: pytest.MonkeyPatch) -> None:
    mech = _mech(monkeypatch, 3.0, (40, True))  # R large: no fallback in practice (checked below)
    sizes: list[int] = []
    original = oblivious.count_at_most

    def counting(cum: Any, rows: Any, u: Any) -> Any:
        sizes.append(int(rows.size))
        return original(cum, rows, u)

    monkeypatch.setattr(oblivious, "count_at_most", counting)
    seen = []
    rng = np.random.default_rng(2)
    v = mech.embedding.size
    for ids in (np.repeat(7, 300), rng.choice(v, 300, replace=False), np.repeat(123, 300), np.arange(300)):
        sizes.clear()
        mech.privatize(ids, rng)
        seen.append(list(sizes))
    assert seen[0] == seen[1] == seen[2] == seen[3]  # one word, distinct words, another word
    assert sum(seen[0]) == 300 * 40  # R proposals for every token, no early exit


def test_rounds_depend_on_the_configuration_only(monkeypatch: pytest.MonkeyPatch) -> None:
    mech = _mech(monkeypatch, 3.0)
    r, far = oblivious.oblivious_plan(mech)
    assert 1 <= r <= oblivious.OBLIVIOUS_MAX_ROUNDS
    mech.privatize(np.array([5, 5, 9]), np.random.default_rng(3))
    assert oblivious.oblivious_plan(mech) == (r, far)  # unchanged by calls
    again = TruncatedExponential(mech.embedding, 3.0, history_free=True, table_max=1)  # type: ignore[arg-type]
    again.privatize(np.array([77]), np.random.default_rng(4))
    assert oblivious.oblivious_plan(again) == (r, far)  # another process, other words: the same
    # a larger epsilon needs fewer proposals (nearly every draw is the word itself)
    prepare(mech.embedding, ["tem"], options={"epsilon": 30.0}, show_progress=False)
    sharp = TruncatedExponential(mech.embedding, 30.0, history_free=True, table_max=1)  # type: ignore[arg-type]
    assert oblivious.oblivious_plan(sharp)[0] <= r


def test_without_prepared_tables_every_token_is_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = force_path(monkeypatch, "knn")
    emb = make_tiny_embedding(300, 3, seed=62)  # nothing prepared for it
    mech = TruncatedExponential(emb, 4.0, history_free=True, **opts)  # type: ignore[arg-type]
    mech.cache_info()
    assert mech._prepared.knn is None  # type: ignore[attr-defined]
    batch = np.tile(np.array([5, 6]), 5000)
    y = mech.privatize(batch, np.random.default_rng(5))
    for w in (5, 6):
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA
