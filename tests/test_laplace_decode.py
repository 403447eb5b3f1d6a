"""The default decode of the multivariate Laplace mechanism: HNSW where it agrees with exact search."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deniable import Embedding, InvalidParameterError, MultivariateLaplace
from deniable.artefacts import list_artefacts
from deniable.index import ExactIndex, HNSWIndex
from deniable.index import tuned as tuned_module
from deniable.index.tuned import agreement_threshold, tuned_index


def _embedding(n: int = 3000, dim: int = 16, seed: int = 3) -> Embedding:
    vec = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return Embedding([f"t{seed}w{i}" for i in range(n)], vec, name=f"decode-{seed}")


def test_threshold_has_a_margin_for_sampling_error() -> None:
    assert agreement_threshold(0.99, 2000) == pytest.approx(0.99 + 2.33 * np.sqrt(0.99 * 0.01 / 2000))
    assert agreement_threshold(0.99, 100_000) < agreement_threshold(0.99, 2000) < 1.0


def test_easy_queries_choose_the_cheapest_hnsw_and_the_choice_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    emb = _embedding()
    calls: list[int] = []

    def near(rng: np.random.Generator, n: int) -> np.ndarray:  # queries right next to vocabulary words
        calls.append(n)
        return emb.vectors[rng.integers(0, emb.size, n)] + 1e-3 * rng.normal(size=(n, emb.dim))

    choice = tuned_index(emb, near, "test near", min_size=0, ladder=(16, 64), notice=False)
    assert isinstance(choice.index, HNSWIndex) and choice.index.ef_search == 16
    assert choice.agreement is not None and choice.agreement >= agreement_threshold(0.99, 2000)
    assert "hnsw efSearch=16" in choice.description
    (saved,) = [i for i in list_artefacts(emb) if i.kind == "decode-choice"]  # a prepared artefact
    assert saved.params["key"] == "test near" and calls == [2000]

    monkeypatch.setattr(tuned_module, "ExactIndex", None)  # a recomputation would fail
    again = tuned_index(emb, near, "test near", min_size=0, ladder=(16, 64), notice=False)
    assert isinstance(again.index, HNSWIndex) and again.index.ef_search == 16 and calls == [2000]


def test_falls_back_to_exact_when_no_rung_agrees_enough() -> None:
    emb = _embedding(seed=4)

    def far(rng: np.random.Generator, n: int) -> np.ndarray:  # far-out queries, where HNSW's recall is worst
        return 50.0 * rng.normal(size=(n, emb.dim))

    choice = tuned_index(emb, far, "test far", min_size=0, ladder=(1,), target=0.9999, notice=False)
    assert isinstance(choice.index, ExactIndex)
    assert choice.description.startswith("exact") and choice.agreement is not None and choice.agreement < 1


def test_small_vocabularies_decode_exactly_without_artefacts(tiny_embedding: Embedding) -> None:
    m = MultivariateLaplace(tiny_embedding, epsilon=1.0)
    assert m.index == "auto" and "decode" not in m.describe()  # cheap constructor: nothing built yet
    assert m.decode_description == "exact"
    assert isinstance(m.search_index, ExactIndex) and m.describe()["decode"] == "exact"
    assert all(i.kind != "decode-choice" for i in list_artefacts(tiny_embedding))


def test_auto_decode_privatizes_through_the_tuned_index(rng: np.random.Generator) -> None:
    emb = _embedding(seed=5)
    m = MultivariateLaplace(emb, epsilon=1e6, index_options={"min_size": 0, "ladder": (32,), "notice": False})
    assert isinstance(m.prepare().search_index, HNSWIndex)
    ids = rng.integers(0, emb.size, 300)
    np.testing.assert_array_equal(m.privatize(ids, rng), ids)  # negligible noise: the word itself
    noisy = m.noisy_vectors(ids, rng)
    np.testing.assert_array_equal(m.decode(noisy), m.search_index.search(noisy, 1)[1][:, 0])


def test_unknown_decode_is_rejected(tiny_embedding: Embedding) -> None:
    with pytest.raises(InvalidParameterError, match="index"):
        MultivariateLaplace(tiny_embedding, epsilon=1.0, index="annoy")


def test_builtin_embedding_decodes_exactly_at_every_epsilon_without_an_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's first command (madlib, eps 10, built-in GloVe) must not build an HNSW index to choose, nor
    any epsilon on this embedding (its calibration table either: every point decodes exactly)."""
    import deniable
    from deniable.index import faiss_index

    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("an HNSW index was built")

    monkeypatch.setattr(faiss_index.HNSWIndex, "cached", no_build)
    emb = deniable.load_embedding()
    for eps in (1.0, 10.0, 15.0, 20.0, 64.0, 1e4):  # efSearch 64 reaches 99% at no epsilon here (measured)
        mech = deniable.MultivariateLaplace(emb, epsilon=eps)
        assert mech.decode_description.startswith("exact (measured for this embedding")
        assert "at any epsilon" in mech.decode_description
        # and deniable prepare has no choice to measure there either (what it builds is what is read)
        assert mech._decode_choice_params() is None
    every = deniable.load_embedding(vocabulary="all")  # its 400,000 tokens: measured too
    assert "at any epsilon" in deniable.MultivariateLaplace(every, epsilon=30.0).decode_description
    with pytest.raises(AssertionError, match="HNSW index was built"):  # other tuning parameters: tuned
        _ = deniable.MultivariateLaplace(emb, epsilon=10.0, index_options={"samples": 500}).decode_description
    with pytest.raises(AssertionError, match="HNSW index was built"):  # another ladder: tuned
        _ = deniable.MultivariateLaplace(emb, epsilon=20.0, index_options={"ladder": (128,)}).decode_description


def test_the_recorded_choices_were_measured_with_the_default_ladder_and_graph() -> None:
    """``_MEASURED_EXACT_UP_TO`` holds for efSearch 64 on the M=32 / efConstruction=100 graph: a new
    default must be re-measured (``python bench/bench_madlib.py --choice [--vocabulary all]``) first."""
    from deniable.index.tuned import DEFAULT_LADDER, decode_choice_params

    assert DEFAULT_LADDER == (64,), "re-measure _MEASURED_EXACT_UP_TO for the new ladder"
    assert decode_choice_params("any")["hnsw"] == {"m": 32, "ef_construction": 100}, "re-measure it for the graph"
