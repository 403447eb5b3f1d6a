"""The calibration's TEM points share the k-NN tables of the public reference words (built once, not
once a point), and the table is the one of points that each build their own."""

from __future__ import annotations

import numpy as np
import pytest

from deniable.calibrate.table import build_table
from deniable.embedding import Embedding
from deniable.mechanisms import make_mechanism
from deniable.mechanisms.tem import TruncatedExponential


def _emb(n: int = 400, dim: int = 6, seed: int = 11) -> Embedding:
    r = np.random.default_rng(seed)
    return Embedding([f"w{i}" for i in range(n)], r.normal(size=(n, dim)).astype(np.float32), name=f"knn{seed}")


def test_shared_tables_give_the_table_of_unshared_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    emb = _emb(2000, 20)  # (the k-NN envelope is the plan of most words)
    shared = build_table(emb, "tem", tokens=512)
    calls: list[bool] = []
    real = TruncatedExponential.share_knn_tables

    def counted(self: TruncatedExponential, other: object) -> bool:
        calls.append(real(self, other))
        return calls[-1]

    monkeypatch.setattr(TruncatedExponential, "share_knn_tables", counted)
    again = build_table(emb, "tem", tokens=512)
    assert calls and all(calls)  # every point after the first shared
    monkeypatch.setattr(TruncatedExponential, "share_knn_tables", lambda self, other: False)
    alone = build_table(emb, "tem", tokens=512)
    assert shared.to_json() == again.to_json() == alone.to_json()
    assert len(shared.points) > 5


def test_sharing_is_refused_across_metric_embedding_and_history_free() -> None:
    emb = _emb()
    a = make_mechanism("tem", emb, 2.0)
    assert make_mechanism("tem", emb, 3.0).share_knn_tables(a)
    assert not make_mechanism("tem", emb, 3.0, metric="angular").share_knn_tables(a)
    assert not make_mechanism("tem", _emb(seed=12), 3.0).share_knn_tables(a)
    assert not make_mechanism("tem", emb, 3.0, history_free=True).share_knn_tables(a)
    assert not make_mechanism("tem", emb, 3.0).share_knn_tables(object())


def test_a_sharing_instance_draws_what_a_fresh_one_draws() -> None:
    """The same generator state, the same outputs, whether the k-NN tables came from another instance."""
    emb = _emb(2000, 20)  # (large enough that the k-NN envelope is the plan of most words)
    words = np.arange(0, 2000, 7, dtype=np.int64)
    first = make_mechanism("tem", emb, 5.0)
    first.privatize(words, np.random.default_rng(0))  # builds the words' tables
    built = len(first._knn)
    assert built > 0  # the words' k-NN tables (what the sharing instance finds)
    sharing = make_mechanism("tem", emb, 2.5)
    assert sharing.share_knn_tables(first)
    fresh = make_mechanism("tem", emb, 2.5)
    for seed in range(3):
        out_s = sharing.privatize(words, np.random.default_rng(seed))
        out_f = fresh.privatize(words, np.random.default_rng(seed))
        assert np.array_equal(out_s, out_f)
    assert len(sharing._knn) == len(first._knn) >= built and len(fresh._knn) > 0
