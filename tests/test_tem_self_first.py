"""TEM's self-first sampler: the envelope totals (prepared per epsilon, or memoized per process).

With the k-NN tables prepared, a token first draws ``u ~ U[0, total)`` against its word's
envelope total and returns the word itself when ``u < 1``; the other tokens continue the
same attempt in the k-NN envelope sampler. These tests check the draws against the exact
distribution (G-test, false alarm 1e-6) through the prepared totals and through the memo,
that a broken continuation and a wrong epsilon are caught by the same test, and what is
stored where.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import make_tiny_embedding, make_toy_embedding
from deniable.artefacts import artefact_path, list_artefacts, open_artefact
from deniable.mechanisms.tem import TruncatedExponential, _envelope, _self_first
from deniable.mechanisms.tem._far import FAR_KIND
from deniable.mechanisms.tem._geometry import Geometry
from deniable.mechanisms.tem._totals import TOTALS_KIND
from deniable.preparation import planned_artefacts, prepare
from test_tem_support import ALPHA, force_path, g_test_pvalue

WORDS = (3, 40, 150)


def _batch() -> np.ndarray:
    return np.tile(np.array(WORDS), 30000)


def _no_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """No pass over the vocabulary (and no ball table for frequent words: tested below)."""

    def no_scan(*args: Any) -> None:
        raise AssertionError("scanned the vocabulary although the tables are prepared")

    monkeypatch.setattr(Geometry, "screen", no_scan)
    monkeypatch.setattr(_self_first, "_HEAVY_PROPOSALS", float("inf"))


def _unconditional_heavy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken heavy-word path from now on: tokens past the self test get the word itself
    with its unconditional probability 1/Z (they already had their chance of it)."""
    monkeypatch.setattr(_self_first, "self_after_failed_test", lambda z, t: 1.0 / z)


def _fresh_continuation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken self-first sampler from now on: a token past its own unit starts a fresh
    attempt instead of continuing the one it drew (its word then comes out too often)."""
    right = _self_first.sample_knn

    def fresh(env: Any, geo: Any, draws: Any, out: Any, rng: Any) -> Any:
        return right(env, geo, replace(draws, u_first=None), out, rng)

    monkeypatch.setattr(_self_first, "sample_knn", fresh)


@pytest.mark.parametrize("metric", ["euclidean", "angular"])
@pytest.mark.parametrize("eps", [3.0, 12.0])
def test_prepared_totals_sample_exactly_without_scanning(
    monkeypatch: pytest.MonkeyPatch, metric: str, eps: float
) -> None:
    opts = force_path(monkeypatch, "knn")  # k = 8 of 400 words: the outside part is exercised
    emb = make_tiny_embedding(400, 3, seed=61)
    infos = prepare(emb, ["tem"], metric=metric, options={"epsilon": eps}, show_progress=False)
    assert [i.kind for i in infos] == ["tem-knn", FAR_KIND, TOTALS_KIND]
    _no_scan(monkeypatch)
    mech = TruncatedExponential(emb, eps, metric=metric, **opts)  # type: ignore[arg-type]
    batch = _batch()
    y = mech.privatize(batch, np.random.default_rng(1))
    assert mech._prepared.totals is not None and mech._prepared.memo is None  # type: ignore[attr-defined]
    assert mech._prepared.far is not None  # type: ignore[attr-defined]  # the far bounds' envelope
    for w in WORDS:
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA
    # another epsilon has no prepared totals: the memo serves it, and samples exactly too
    other = TruncatedExponential(emb, eps + 1.0, metric=metric, **opts)  # type: ignore[arg-type]
    y = other.privatize(batch, np.random.default_rng(2))
    assert other._prepared.totals is None  # type: ignore[attr-defined]
    for w in WORDS:
        assert g_test_pvalue(y[batch == w], other.distribution(w)[1]) > ALPHA


def test_memo_holds_the_words_met_and_samples_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = force_path(monkeypatch, "knn")
    monkeypatch.setattr(_self_first, "_HEAVY_PROPOSALS", float("inf"))  # every token through the envelope
    emb = make_tiny_embedding(400, 3, seed=62)
    prepare(emb, ["tem"], show_progress=False)
    before = {i.path for i in list_artefacts(emb)}
    mech = TruncatedExponential(emb, 6.0, **opts)  # type: ignore[arg-type]
    rng = np.random.default_rng(3)
    mech.privatize(np.array([3, 40]), rng)
    memo = mech._prepared.memo  # type: ignore[attr-defined]
    assert memo is not None
    assert set(np.flatnonzero(~np.isnan(memo)).tolist()) == {3, 40}  # in memory, for the words met
    batch = _batch()  # 150 is new in this call
    y = mech.privatize(batch, rng)
    for w in WORDS:
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA
    assert {i.path for i in list_artefacts(emb)} == before  # nothing written while privatizing


def test_the_test_rejects_a_broken_continuation_and_a_wrong_epsilon(monkeypatch: pytest.MonkeyPatch) -> None:
    # k = 32 of 400: the envelope total is within ~3x of the true mass, so a restart that
    # forgets the first attempt visibly inflates the word's own probability
    opts = force_path(monkeypatch, "knn", knn_k=32)
    monkeypatch.setattr(_self_first, "_HEAVY_PROPOSALS", float("inf"))  # every token through the envelope
    emb = make_tiny_embedding(400, 3, seed=61)
    eps = 6.0
    right = TruncatedExponential(emb, eps, cache=False)
    p_self = [float(right.distribution(w)[1][w]) for w in WORDS]
    assert all(0.2 < p < 0.8 for p in p_self)  # where a fresh restart changes the word's own mass
    prepare(emb, ["tem"], options={"epsilon": [eps, 7.0]}, show_progress=False)
    batch = _batch()
    with monkeypatch.context() as broken_path:
        _fresh_continuation(broken_path)
        broken = TruncatedExponential(emb, eps, **opts)  # type: ignore[arg-type]
        y = broken.privatize(batch, np.random.default_rng(4))
    assert broken._prepared.totals is not None  # type: ignore[attr-defined]
    assert all(g_test_pvalue(y[batch == w], right.distribution(w)[1]) < ALPHA for w in WORDS)
    wrong = TruncatedExponential(emb, 7.0, gamma=right.gamma, **opts)  # type: ignore[arg-type]
    y = wrong.privatize(batch, np.random.default_rng(5))
    assert all(g_test_pvalue(y[batch == w], right.distribution(w)[1]) < ALPHA for w in WORDS)


def test_totals_are_the_samplers_totals_and_zero_where_it_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    force_path(monkeypatch, "knn")
    emb = make_tiny_embedding(300, 3, seed=63)
    _, _, info = prepare(emb, ["tem"], options={"epsilon": 4.0}, show_progress=False)
    totals = np.load(info.file("totals.npy"))
    mech = TruncatedExponential(emb, 4.0)
    knn = mech._prepared_knn()  # type: ignore[attr-defined]
    assert knn is not None
    words = np.arange(emb.size)
    _, _, m_e, total, _, _, _ = mech._env.arrays(knn.rows(words), words)  # type: ignore[attr-defined]
    assert np.array_equal(totals, total) and np.all(totals >= m_e) and np.all(m_e >= 1.0)
    # envelopes too expensive to use: total 0, those words take the other samplers (exactly)
    monkeypatch.setattr(_envelope, "KNN_MAX_RATIO", 0.0)
    monkeypatch.setattr(_envelope, "KNN_MAX_EST", 0.0)
    _, _, info = prepare(emb, ["tem"], options={"epsilon": 4.0}, show_progress=False)  # another artefact
    assert not np.load(info.file("totals.npy")).any()
    mech = TruncatedExponential(emb, 4.0, table_max=1)
    batch = np.tile(np.array([7, 8]), 20000)
    y = mech.privatize(batch, np.random.default_rng(6))
    for w in (7, 8):
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA


def test_history_free_reads_prepared_totals_and_keeps_no_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    opts = force_path(monkeypatch, "knn")
    emb = make_tiny_embedding(300, 3, seed=64)
    prepare(emb, ["tem"], options={"epsilon": 8.0}, show_progress=False)
    rng = np.random.default_rng(7)
    mech = TruncatedExponential(emb, 8.0, history_free=True, **opts)  # type: ignore[arg-type]
    batch = np.tile(np.array([5, 6]), 20000)
    y = mech.privatize(batch, rng)
    assert mech._prepared.totals is not None and mech._prepared.memo is None  # type: ignore[attr-defined]
    for w in (5, 6):
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA
    other = TruncatedExponential(emb, 9.0, history_free=True, **opts)  # no totals at 9: no memo either
    other.privatize(batch, rng)
    assert other._prepared.totals is None and other._prepared.memo is None  # type: ignore[attr-defined]


def test_planned_and_cli_prepare_tem_epsilons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from deniable.cli import run_app

    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    emb = make_toy_embedding()
    planned = planned_artefacts(emb, ["tem"], options={"epsilon": [2, 10.0]})
    assert [k for k, _ in planned] == ["tem-knn", FAR_KIND, TOTALS_KIND, TOTALS_KIND]
    assert [p["epsilon"] for _, p in planned[2:]] == [2.0, 10.0]
    # gamma follows the mechanism's own (from beta, or given)
    ((_, p),) = planned_artefacts(emb, ["tem"], options={"epsilon": 5, "gamma": 1.5})[2:]
    assert p["gamma"] == 1.5
    emb_dir = tmp_path / "toy"
    emb.save(emb_dir)
    assert run_app(["prepare", "-m", "tem", "-e", "2,10", "--embedding", str(emb_dir), "-q"]) == 0
    assert run_app(["prepare", "--list", "-q"]) == 0
    kinds = sorted(line.split("\t")[0] for line in capsys.readouterr().out.splitlines())
    assert kinds == sorted(["tem-knn", FAR_KIND, TOTALS_KIND, TOTALS_KIND])
    assert open_artefact(emb, *planned[3]) is not None
    assert run_app(["prepare", "--remove", "-m", "tem", "-e", "10", "--embedding", str(emb_dir), "-q"]) == 0
    assert open_artefact(emb, *planned[3]) is None and artefact_path(emb, *planned[2]).is_dir()  # eps 2 kept
    # the plan of `-m tem -e 10` includes the k-NN tables and the far bounds
    assert open_artefact(emb, *planned[0]) is None and open_artefact(emb, *planned[1]) is None
    assert open_artefact(emb, *planned[2]) is None  # (so eps 2's totals fit no tables now: not used)
    assert run_app(["prepare", "-m", "tem", "-e", "x", "--embedding", str(emb_dir), "-q"]) == 2


def test_frequent_words_use_their_table_given_the_failed_self_test(monkeypatch: pytest.MonkeyPatch) -> None:
    # every moved word is "heavy": its tokens past the self test come from its exact ball
    # table, conditioned on that failed test
    opts = force_path(monkeypatch, "knn", knn_k=32)
    monkeypatch.setattr(_self_first, "_HEAVY_PROPOSALS", 1)
    emb = make_tiny_embedding(400, 3, seed=61)
    prepare(emb, ["tem"], options={"epsilon": 6.0}, show_progress=False)
    batch = _batch()
    mech = TruncatedExponential(emb, 6.0, **opts)  # type: ignore[arg-type]
    y = mech.privatize(batch, np.random.default_rng(8))
    assert len(mech._store) == len(WORDS)  # type: ignore[attr-defined]  # tables in memory, for those words
    for w in WORDS:
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA
    with monkeypatch.context() as broken_path:
        _unconditional_heavy(broken_path)
        broken = TruncatedExponential(emb, 6.0, **opts)  # type: ignore[arg-type]
        y = broken.privatize(batch, np.random.default_rng(9))
    assert all(g_test_pvalue(y[batch == w], mech.distribution(w)[1]) < ALPHA for w in WORDS)
    # history-free: no tables kept, the envelope samples every word
    free = TruncatedExponential(emb, 6.0, history_free=True, **opts)  # type: ignore[arg-type]
    y = free.privatize(batch, np.random.default_rng(10))
    assert len(free._store) == 0  # type: ignore[attr-defined]
    for w in WORDS:
        assert g_test_pvalue(y[batch == w], mech.distribution(w)[1]) > ALPHA


@pytest.mark.parametrize("changed", ["tem-knn", FAR_KIND])
def test_totals_from_other_tables_are_not_used_and_are_rebuilt(monkeypatch: pytest.MonkeyPatch, changed: str) -> None:
    # totals are the envelope's mass for THESE tables and bounds: after the k-NN tables or
    # the far bounds were rebuilt with another content (here: one sketch value moved, a
    # change that keeps them valid), the old totals are stale: not opened, and rebuilt by prepare
    from deniable.artefacts import build_artefact

    opts = force_path(monkeypatch, "knn")
    emb = make_tiny_embedding(400, 3, seed=62)
    (knn, far, totals) = prepare(emb, ["tem"], options={"epsilon": 3.0}, show_progress=False)
    before = np.load(totals.file("sources.npy")).tolist()
    source = knn if changed == "tem-knn" else far
    kept = {f: np.load(source.file(f)) for f in source.files}

    def other(folder: Path, show_progress: bool | None) -> None:
        for name, arr in kept.items():
            arr = arr.copy()
            if name == "dist.npy":
                arr[0, -1] += 1e-9  # the sketch: an estimate only
            elif name == "bounds.npy":
                arr.flat[np.flatnonzero(arr)[0]] -= 1  # a lower level: still a bound
            np.save(folder / name, arr, allow_pickle=False)

    build_artefact(emb, changed, source.params, rebuild=True, builder=other)
    assert open_artefact(emb, TOTALS_KIND, totals.params) is None  # stale: as if not prepared
    mech = TruncatedExponential(emb, 3.0, **opts)  # type: ignore[arg-type]
    mech.privatize(_batch()[:300], np.random.default_rng(2))
    assert mech._prepared.totals is None and mech._prepared.memo is not None  # type: ignore[attr-defined]
    again = prepare(emb, ["tem"], options={"epsilon": 3.0}, show_progress=False)[-1]
    after = np.load(again.file("sources.npy")).tolist()
    assert after != before and open_artefact(emb, TOTALS_KIND, totals.params) is not None
