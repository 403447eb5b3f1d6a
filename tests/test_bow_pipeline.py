"""Vocabulary, counting, the streaming pipeline and the release folder round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from deniable import DataError, InvalidParameterError, ResourceLimitError
from deniable.bow import (
    BinMap,
    BowPrivatizer,
    BowRelease,
    BowVectorizer,
    TwoSidedGeometric,
    Vocabulary,
    count_words,
    estimate_release_bytes,
    group_rows,
    load_release,
    random_bin_map,
    zipf_weights,
)

WORDS = ("hockey", "game", "puck", "rocket", "orbit", "launch", "great", "bank", "loan")
DOCS = [
    "The hockey game was great! Hockey, HOCKEY.",
    None,
    "",
    "rocket launch into orbit; the rocket",
    "bank loan ... unknownword loan loan",
    "puck",
    "game game game orbit",
]
NOISELESS = 1000.0  # eps/N so large that the noise is exactly 0 in double precision


@pytest.fixture
def vocab() -> Vocabulary:
    return Vocabulary(WORDS, source="test")


def clean_counts(vocab: Vocabulary) -> np.ndarray:
    idx = vocab.index_of
    out = np.zeros((len(DOCS), vocab.size), dtype=np.int64)
    import re

    for i, d in enumerate(DOCS):
        for w in re.findall(r"[^\W_]+", (d or "").lower()):
            if w in idx:
                out[i, idx[w]] += 1
    return out


# ------------------------------------------------------------------- vectorize
def test_vectorizer_counts_lowercased_in_vocabulary_tokens(vocab: Vocabulary) -> None:
    x, tokens, counted = BowVectorizer(vocab).transform_with_stats(DOCS)
    assert sp.isspmatrix_csr(x) and x.dtype == np.int32 and x.shape == (len(DOCS), vocab.size)
    np.testing.assert_array_equal(x.toarray(), clean_counts(vocab))
    assert x[0, vocab.index_of["hockey"]] == 3
    assert x[1].nnz == 0 and x[2].nnz == 0  # None and "" give zero rows, row order kept
    assert counted == int(x.sum()) and tokens > counted


def test_vectorizer_rejects_non_text(vocab: Vocabulary) -> None:
    with pytest.raises(DataError, match="document 1"):
        BowVectorizer(vocab).transform(["ok", 3])  # type: ignore[list-item]


def test_vocabulary_validation_and_prior() -> None:
    v = Vocabulary(("a", "b", "c"))
    np.testing.assert_allclose(v.frequencies, zipf_weights([0, 1, 2]))
    for bad in [(), ("a", "a"), ("a", "")]:
        with pytest.raises(InvalidParameterError):
            Vocabulary(bad)
    with pytest.raises(InvalidParameterError, match="frequencies"):
        Vocabulary(("a", "b"), np.array([1.0, -1.0]))


def test_vocabulary_from_embedding_filters_and_keeps_rank_prior() -> None:
    from deniable import Embedding

    words = ["the", "Hockey", "2019", "a", "game", "x", "u.s.", "puck"]
    emb = Embedding(words, np.zeros((len(words), 2), dtype=np.float32), name="e")
    v = Vocabulary.from_embedding(emb, size=10)
    assert v.words == ("hockey", "game", "puck")
    np.testing.assert_allclose(v.frequencies, zipf_weights([1, 4, 7]))
    assert Vocabulary.from_embedding(emb, size=2, stop_words=None).words == ("the", "hockey")
    assert Vocabulary.from_embedding(emb, size=10, stop_words=["game"]).words == ("the", "hockey", "puck")


def test_vocabulary_from_file(tmp_path: Path) -> None:
    plain = tmp_path / "v.txt"
    plain.write_text("Hockey\ngame\n\nhockey\nthe\n", encoding="utf-8")
    v = Vocabulary.from_file(plain, stop_words="english")
    assert v.words == ("hockey", "game")
    counted = tmp_path / "c.tsv"
    counted.write_text("game\t10\npuck\t3\n", encoding="utf-8")
    np.testing.assert_allclose(Vocabulary.from_file(counted).frequencies, [10, 3])
    with pytest.raises(DataError):
        Vocabulary.from_file(tmp_path / "missing.txt")


def test_count_words(vocab: Vocabulary) -> None:
    total = count_words([DOCS[:3], DOCS[3:]], vocab)
    np.testing.assert_array_equal(total, clean_counts(vocab).sum(axis=0))


# -------------------------------------------------------------------- pipeline
@pytest.mark.parametrize("group", [1, 2, 3])
@pytest.mark.parametrize("batch", [1, 2, 4, 100])
def test_pipeline_round_trips_shapes_bins_and_row_order(
    vocab: Vocabulary, group: int, batch: int, tmp_path: Path
) -> None:
    bmap = random_bin_map(vocab.size, 4, seed=7)
    priv = BowPrivatizer(BowVectorizer(vocab), TwoSidedGeometric(NOISELESS, 1.0), bmap, group=group)
    batches = [DOCS[i : i + batch] for i in range(0, len(DOCS), batch)]
    release, report = priv.release(batches, np.random.default_rng(0))
    expected = group_rows(bmap.apply(clean_counts(vocab)), group).toarray()
    assert release.shape == (-(-len(DOCS) // group), 4)
    np.testing.assert_array_equal(release.matrix.toarray(), expected)
    assert report.documents == len(DOCS) and report.rows == release.shape[0]
    assert report.signal_l1 == clean_counts(vocab).sum() and report.noise_l1 == 0
    folder = release.save(tmp_path / "rel")
    loaded = load_release(folder)
    np.testing.assert_array_equal(loaded.matrix.toarray(), expected)
    np.testing.assert_array_equal(loaded.bin_map.bins, bmap.bins)
    assert loaded.bin_map.n_bins == 4 and loaded.bin_map.strategy == "random" and loaded.bin_map.info["seed"] == 7
    assert loaded.vocabulary.words == vocab.words
    np.testing.assert_allclose(loaded.vocabulary.frequencies, vocab.frequencies)
    assert loaded.params["group"] == group and loaded.params["epsilon"] == NOISELESS
    assert loaded.params["shape"] == list(release.shape)


def test_noise_is_on_every_entry_and_report_adds_up(vocab: Vocabulary) -> None:
    priv = BowPrivatizer(BowVectorizer(vocab), TwoSidedGeometric(0.5, 1.0), None)
    clean = clean_counts(vocab)
    noisy, report = priv.privatize_counts(clean, np.random.default_rng(1))
    assert noisy.shape == clean.shape
    residual = noisy.toarray() - clean
    assert report.noise_l1 == np.abs(residual).sum() and report.noise_sum == residual.sum()
    assert report.signal_l1 == clean.sum() and report.entries == clean.size
    assert (residual[clean == 0] != 0).any()  # zero counts get noise too
    assert "signal/noise" in report.summary() and report.as_dict()["snr"] == report.snr


def test_clamped_release_is_non_negative(vocab: Vocabulary) -> None:
    priv = BowPrivatizer(BowVectorizer(vocab), TwoSidedGeometric(0.3, 1.0, clamp=True))
    noisy, report = priv.privatize_batches([DOCS], np.random.default_rng(2))
    assert noisy.toarray().min() >= 0 and report.clamped > 0


def test_memory_limit_refuses_a_dense_uncompressed_release(vocab: Vocabulary) -> None:
    assert estimate_release_bytes(10, 100, 3) == 4 * 100 * 8
    small = BowPrivatizer(BowVectorizer(vocab), TwoSidedGeometric(1.0), None, max_memory=4000)
    with pytest.raises(ResourceLimitError, match="dense"):
        small.privatize_batches([DOCS] * 20, np.random.default_rng(0), batch_size_hint=1)
    with pytest.raises(ResourceLimitError):
        small.privatize_counts(np.zeros((1000, vocab.size), dtype=np.int64))


def test_pipeline_validation(vocab: Vocabulary) -> None:
    with pytest.raises(InvalidParameterError, match="bin_map"):
        BowPrivatizer(BowVectorizer(vocab), TwoSidedGeometric(1.0), BinMap(np.zeros(3, dtype=np.int64), 1))
    with pytest.raises(InvalidParameterError, match="group"):
        BowPrivatizer(BowVectorizer(vocab), TwoSidedGeometric(1.0), group=0)


def test_release_folder_is_atomic_and_not_overwritten(vocab: Vocabulary, tmp_path: Path) -> None:
    priv = BowPrivatizer(BowVectorizer(vocab), TwoSidedGeometric(1.0), random_bin_map(vocab.size, 3, 0))
    release, _ = priv.release([DOCS], np.random.default_rng(0), seeded=True)
    out = release.save(tmp_path / "r")
    params = json.loads((out / "params.json").read_text())
    assert "NOT private" in params["noise_generator"]
    assert "signal_l1" not in json.dumps(params)  # the private noise report is not in the release
    with pytest.raises(InvalidParameterError, match="output"):
        release.save(out)
    release.save(out, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # no temporary folder left
    (out / "params.json").unlink()
    with pytest.raises(DataError, match=r"params\.json"):
        load_release(out)
    with pytest.raises(DataError):
        BowRelease(sp.csr_matrix((2, 5)), release.bin_map, vocab)


def test_peak_memory_stays_within_max_memory() -> None:
    """The noisy matrix is dense and held until saved: one copy of it, never two, must fit ``max_memory``."""
    import tracemalloc

    k = 1000  # bins, every entry noisy (eps/N = 0.1: 95% of the entries are non-zero)
    wide = BowVectorizer(Vocabulary(tuple(f"w{i}" for i in range(k))))

    def peak_of(run):  # type: ignore[no-untyped-def]
        tracemalloc.start()
        try:
            matrix, report = run()
            return matrix, report, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    # the tightest limit check_memory accepts: the release + the int64 buffers of one batch of rows
    limit = estimate_release_bytes(4000, k) + 4 * 8 * k * 100
    priv = BowPrivatizer(wide, TwoSidedGeometric(0.1, 1.0), None, max_memory=limit)
    batches = [[""] * 100 for _ in range(40)]
    rng = np.random.default_rng(0)
    matrix, report, peak = peak_of(lambda: priv.privatize_batches(batches, rng, batch_size_hint=100))
    assert matrix.shape == (4000, k) and report.rows == 4000 and report.released_nonzero == matrix.nnz
    released = matrix.data.nbytes + matrix.indices.nbytes + matrix.indptr.nbytes
    assert released > 25e6
    # (1% slack: the row pointers and the Python objects of a batch are not counted)
    assert peak < 1.3 * released and peak <= 1.01 * limit  # the chunks and their stacked copy took >= 2x
    counts = sp.random(3000, k, density=0.01, format="csr", random_state=0, dtype=np.float64).astype(np.int64)
    counts.data[:] = 1
    limit = estimate_release_bytes(3000, k) + 4 * 8 * k * 3000
    priv = BowPrivatizer(wide, TwoSidedGeometric(0.1, 1.0), None, max_memory=limit)
    matrix, report, peak = peak_of(lambda: priv.privatize_counts(counts, np.random.default_rng(1)))
    assert matrix.shape == (3000, k) and report.signal_l1 == counts.sum()
    assert peak <= 1.01 * limit
    with pytest.raises(ResourceLimitError):
        BowPrivatizer(wide, TwoSidedGeometric(0.1, 1.0), None, max_memory=limit - 1).privatize_counts(counts)


def test_guarantee_names_the_group_as_unit(vocab: Vocabulary) -> None:
    one = BowPrivatizer(BowVectorizer(vocab), TwoSidedGeometric(2.0, 3.0)).release_params()["guarantee"]
    assert "per document" in one and "group" not in one
    grouped = BowPrivatizer(BowVectorizer(vocab), TwoSidedGeometric(2.0, 3.0), group=4).release_params()["guarantee"]
    assert "per document" in grouped and "group=4" in grouped and "documents of one group totalling l1 <= N" in grouped
