"""The calibration's TEM points share what is epsilon-free about their public reference words beyond the
k-NN tables: the ball summaries (a word's closest screening values, from which its candidate count at any
gamma is read without a pass over the vocabulary), the k-NN tables stacked, and the geometry. Each piece
gives exactly what the per-point computation gave (the same counts, candidates and costs, bit for bit), so
the table is the one of points that share nothing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from deniable.calibrate.table import build_table, reference_ids
from deniable.embedding import Embedding
from deniable.mechanisms import make_mechanism
from deniable.mechanisms.tem import TruncatedExponential, _lazy
from deniable.mechanisms.tem._geometry import _PRECHECK, TEM_METRICS, Geometry
from deniable.mechanisms.tem._lazy import WordSummaries
from deniable.mechanisms.tem._tables import KNN_SKETCH, knn_entry


def _emb(n: int, dim: int, seed: int = 3) -> Embedding:
    r = np.random.default_rng(seed)
    return Embedding([f"w{i}" for i in range(n)], r.normal(size=(n, dim)).astype(np.float32), name=f"balls{n}")


def _rows(geo: Geometry, words: np.ndarray) -> np.ndarray:
    rows = np.empty((words.size, geo.size), dtype=np.float32)
    geo.screen(words, rows)
    return rows


def _cost_one(env, tail: np.ndarray) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """The per-word arithmetic the plans used before they were batched (the oracle)."""
    k = env.k
    m_e = float(np.exp(env.weights_exponent(tail[:k])).sum())
    with np.errstate(over="ignore", invalid="ignore"):
        total = m_e + (env.n_rest * math.exp(float(env.weights_exponent(tail[k : k + 1])[0])) if env.n_rest else 0.0)
        far = (env.v - k) * float(np.exp(env.weights_exponent(tail[k + 1 :])).mean())
    if not (m_e > 0 and math.isfinite(total)):
        return math.inf, math.inf
    return total / m_e, total / max(min(m_e + far, total), m_e)


@pytest.mark.parametrize("n", [200, 3000])  # (200 < k: E is the vocabulary, no outside part)
def test_envelope_costs_are_the_per_word_costs_bit_for_bit(n: int) -> None:
    emb = _emb(n, 12)
    words = np.arange(0, n, max(1, n // 150), dtype=np.int64)
    for eps, gamma in [(0.2, None), (1.0, None), (3.0, None), (9.0, None), (30.0, None), (2.0, 0.5), (2.0, 1e300)]:
        mech = TruncatedExponential(emb, eps, gamma=gamma)
        rows = _rows(mech._geo, words)
        entries = [knn_entry(mech._geo, int(w), rows[i], mech._k, KNN_SKETCH) for i, w in enumerate(words.tolist())]
        tails = np.stack([e[1] for e in entries])
        bound, est = mech._env.costs(tails)
        one = np.array([_cost_one(mech._env, np.asarray(e[1], dtype=np.float64)) for e in entries])
        np.testing.assert_array_equal(bound, one[:, 0])  # (equal bits: equal floats, inf included)
        np.testing.assert_array_equal(est, one[:, 1])
        single = np.array([np.concatenate(mech._env.costs(tails[i : i + 1])) for i in range(len(entries))])
        np.testing.assert_array_equal(single, one)  # one row at a time: the same


def _check_counts(geo: Geometry, summaries: WordSummaries, words: np.ndarray, rows: np.ndarray, cap: int) -> int:
    """Compare the summaries with the screening rows at gammas across the distances; the exact answers."""
    exact_seen = 0
    d = np.stack([geo.exact(int(w), np.arange(geo.size)) for w in words.tolist()])
    for gamma in [*np.quantile(d, [0.0, 0.001, 0.01, 0.05, 0.2, 0.5, 0.9, 1.0]).tolist(), 1e300]:
        count, exact = summaries.counts(geo, words, gamma)
        for i, w in enumerate(words.tolist()):
            true = geo.candidate_count(w, rows[i].copy(), gamma, cap)
            listed = summaries.length(w)
            if exact[i]:
                exact_seen += 1
                assert count[i] == true, (w, gamma)
                cand = summaries.candidates(geo, w, int(count[i]), gamma)
                if true <= geo.size and (true < listed or listed == geo.size):
                    assert cand is not None
                    np.testing.assert_array_equal(cand, geo.candidates(w, rows[i].copy(), gamma))
            else:
                assert count[i] == listed and true >= listed, (w, gamma)
                assert summaries.candidates(geo, w, int(count[i]), gamma) is None
    return exact_seen


@pytest.mark.parametrize("metric", TEM_METRICS)
def test_summaries_count_what_the_screening_rows_count(metric: str) -> None:
    emb = _emb(3000, 8)
    geo = Geometry(emb, metric)
    words = np.arange(0, 3000, 97, dtype=np.int64)
    rows = _rows(geo, words)
    for m in (50, 700, 3000):
        summaries = WordSummaries(geo.size, 2000, 1 << 30)
        for i, w in enumerate(words.tolist()):
            summaries.add(geo, w, rows[i], m)
            assert summaries.length(w) == m
        assert _check_counts(geo, summaries, words, rows, 2000) > 0


def test_summaries_reproduce_the_strided_precheck_of_a_large_vocabulary() -> None:
    v = 64 * _PRECHECK + 5000  # the pre-check of Geometry.candidate_count applies
    emb = _emb(v, 3, seed=5)
    geo = Geometry(emb, "euclidean")
    words = np.array([0, 17, 40000, v - 1], dtype=np.int64)
    rows = _rows(geo, words)
    cap = 300  # (the pre-check answers "far more than cap" for moderate gammas)
    summaries = WordSummaries(v, cap, 1 << 30)
    for i, w in enumerate(words.tolist()):
        summaries.add(geo, w, rows[i], 2000)
    fired = 0
    for gamma in np.linspace(0.05, 2.0, 25).tolist():
        count, exact = summaries.counts(geo, words, gamma)
        for i, w in enumerate(words.tolist()):
            true = geo.candidate_count(w, rows[i].copy(), gamma, cap)
            fired += true == v + 1
            if exact[i]:
                assert count[i] == true, (w, gamma)
            else:
                assert true >= count[i] == 2000
    assert fired > 0


def test_a_summary_beyond_its_budget_is_not_kept() -> None:
    emb = _emb(3000, 8)
    geo = Geometry(emb, "euclidean")
    words = np.arange(5, dtype=np.int64)
    rows = _rows(geo, words)
    summaries = WordSummaries(geo.size, 2000, 12 * 1000)  # room for 1,000 listed words
    for i, w in enumerate(words.tolist()):
        summaries.add(geo, w, rows[i], 400)
    assert [summaries.length(w) for w in words.tolist()] == [400, 400, 0, 0, 0]
    count, _ = summaries.counts(geo, words, 1.0)
    assert list(count[2:]) == [-1, -1, -1]  # not summarized: scanned when needed


def _screened(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the screening rows computed from now on."""
    seen: list[int] = []
    real = _lazy._blocks

    def counting(mech, words, show=None):  # type: ignore[no-untyped-def]
        seen.append(int(np.asarray(words).size))
        return real(mech, words, show)

    monkeypatch.setattr(_lazy, "_blocks", counting)
    return seen


#: a calibration grid of a few points (the whole grid is the same code, point after point)
_GRID = [1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0]


@pytest.mark.parametrize("dim", [3, 8])  # (3: most words listed as ball tables at the larger epsilons)
def test_shared_points_screen_each_reference_word_once(monkeypatch: pytest.MonkeyPatch, dim: int) -> None:
    """Every word's plan asks for its candidate count (the k-NN envelope is never preferred outright):
    shared points read it (and the candidates of a ball table) off the summaries, each word screened
    once in the whole grid; points alone screen those words at every point. The same table."""
    monkeypatch.setattr(_lazy, "_KNN_PREFER_RATIO", 0.0)
    emb = _emb(4200, dim)  # (above the exact attacker's 4,096 words: the held-out attacker, fast)
    distinct = np.unique(reference_ids(emb.size, 512)).size
    seen = _screened(monkeypatch)
    shared = build_table(emb, "tem", tokens=512, epsilons=_GRID)
    shared_rows = sum(seen)
    seen.clear()
    monkeypatch.setattr(TruncatedExponential, "share_knn_tables", lambda self, other: False)
    alone = build_table(emb, "tem", tokens=512, epsilons=_GRID)
    assert shared.to_json() == alone.to_json()
    assert shared_rows == distinct and sum(seen) > 5 * distinct


def test_a_small_memory_budget_gives_the_same_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_lazy, "_KNN_PREFER_RATIO", 0.0)
    emb = _emb(4200, 3)
    small = build_table(emb, "tem", {"memory_bytes": 1 << 16}, tokens=512, epsilons=_GRID)  # (little is kept)
    assert small.to_json() == build_table(emb, "tem", tokens=512, epsilons=_GRID).to_json()


def test_the_geometry_is_built_on_first_use_and_shared() -> None:
    emb = _emb(400, 6)
    a = make_mechanism("tem", emb, 2.0)
    b = make_mechanism("tem", emb, 3.0)
    assert a._geometry is None and b._geometry is None  # (construction makes no pass over the vectors)
    assert b.share_knn_tables(a)
    assert b._geo is a._geo and b._summaries is a._summaries is not None
    c = make_mechanism("tem", emb, 3.0, table_max=7)
    assert c.share_knn_tables(a)  # the k-NN tables and the geometry, not the summaries (another pre-check cap)
    assert c._geo is a._geo and c._summaries is None
