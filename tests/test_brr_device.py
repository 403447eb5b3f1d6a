"""The BRR device artefact: codes + words only; round trip; privatize from it alone (API and CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import make_toy_embedding
from deniable import (
    BinaryRandomizedResponse,
    Embedding,
    EmbeddingError,
    InvalidParameterError,
    MultivariateLaplace,
    Privatizer,
    TruncatedExponential,
)
from deniable.binarize.device import (
    CodeVocabulary,
    artefact_size,
    is_device_artefact,
    load_device_artefact,
    save_device_artefact,
)
from deniable.cli import run_app
from deniable.embedding import Vocabulary, load_embedding


@pytest.fixture(scope="module")
def toy_brr() -> BinaryRandomizedResponse:
    return BinaryRandomizedResponse(make_toy_embedding(), 1.0, bits=128, binarizer="simhash")


def test_export_and_load_round_trip(toy_brr: BinaryRandomizedResponse, tmp_path: Path) -> None:
    sizes = toy_brr.export_device(tmp_path / "dev")
    assert sorted(p.name for p in (tmp_path / "dev").iterdir()) == ["brr.json", "codes.npy", "words.txt"]
    assert sizes == artefact_size(tmp_path / "dev") and sizes["total"] == sum(
        v for k, v in sizes.items() if k != "total"
    )
    assert is_device_artefact(tmp_path / "dev") and not is_device_artefact(tmp_path)
    emb = load_device_artefact(tmp_path / "dev")
    assert isinstance(emb, CodeVocabulary) and isinstance(emb.codes, np.memmap)
    assert np.array_equal(emb.codes, toy_brr.codes) and emb.vocabulary == toy_brr.embedding.vocabulary
    assert emb.bits == 128 and emb.dim == 128 and emb.params["binarizer"] == "simhash"
    meta = json.loads((tmp_path / "dev" / "brr.json").read_text())
    assert meta["format"] == "deniable-brr-device" and meta["bits"] == 128 and meta["vocab_size"] == 18
    # the artefact alone is enough: same codes, same outputs for the same random stream
    mech = BinaryRandomizedResponse.from_device(tmp_path / "dev", 1.0)
    ids = np.arange(18).repeat(20)
    assert np.array_equal(
        mech.privatize(ids, np.random.default_rng(1)), toy_brr.privatize(ids, np.random.default_rng(1))
    )
    assert mech.distance(0, 5) == toy_brr.distance(0, 5) and mech.binarizer == "simhash"
    # re-export from the artefact gives the same files' content
    mech.export_device(tmp_path / "dev2")
    assert np.array_equal(np.load(tmp_path / "dev2" / "codes.npy"), toy_brr.codes)


def test_code_embedding_has_no_vectors(toy_brr: BinaryRandomizedResponse, tmp_path: Path) -> None:
    toy_brr.export_device(tmp_path / "dev")
    emb = load_embedding(tmp_path / "dev")  # recognised by brr.json
    assert isinstance(emb, CodeVocabulary) and isinstance(emb, Vocabulary) and not isinstance(emb, Embedding)
    assert not hasattr(emb, "vectors")  # a sibling of Embedding: no stand-in float matrix at all
    with pytest.raises(EmbeddingError, match="binary codes only"):
        MultivariateLaplace(emb, 1.0)
    with pytest.raises(EmbeddingError, match="binary codes only"):
        TruncatedExponential(emb, 1.0)
    sub = load_embedding(tmp_path / "dev", vocab_size=5)
    assert isinstance(sub, CodeVocabulary) and sub.size == 5 and np.array_equal(sub.codes, toy_brr.codes[:5])
    text = "The hockey game was great!"
    assert Privatizer(BinaryRandomizedResponse(emb, 1e4)).privatize(text, np.random.default_rng(0)) == text


def test_artefact_options_must_match(toy_brr: BinaryRandomizedResponse, tmp_path: Path) -> None:
    toy_brr.export_device(tmp_path / "dev")
    emb = load_device_artefact(tmp_path / "dev")
    BinaryRandomizedResponse(emb, 1.0, bits=128, binarizer="random")  # alias of the artefact's simhash
    with pytest.raises(InvalidParameterError, match="bits"):
        BinaryRandomizedResponse(emb, 1.0, bits=256)
    with pytest.raises(InvalidParameterError, match="binarizer"):
        BinaryRandomizedResponse(emb, 1.0, binarizer="itq")
    with pytest.raises(InvalidParameterError, match="binarizer_options"):
        BinaryRandomizedResponse(emb, 1.0, binarizer_options={"epochs": 3})


def test_broken_artefacts_are_rejected(tmp_path: Path) -> None:
    words = ["a", "b"]
    codes = np.zeros((2, 8), dtype=np.uint8)
    save_device_artefact(tmp_path / "ok", words, codes, {"binarizer": "simhash"})
    assert load_device_artefact(tmp_path / "ok").size == 2
    (tmp_path / "ok" / "codes.npy").unlink()
    with pytest.raises(EmbeddingError, match=r"codes\.npy"):
        load_device_artefact(tmp_path / "ok")
    save_device_artefact(tmp_path / "bad", words, codes)
    (tmp_path / "bad" / "brr.json").write_text('{"format": "other"}')
    with pytest.raises(EmbeddingError, match="not a"):
        load_device_artefact(tmp_path / "bad")
    save_device_artefact(tmp_path / "rows", words, codes)
    (tmp_path / "rows" / "words.txt").write_text("a\nb\nc\n")
    with pytest.raises(EmbeddingError, match="3 words"):
        load_device_artefact(tmp_path / "rows")
    with pytest.raises(EmbeddingError, match="multiple of 32"):
        CodeVocabulary(words, np.zeros((2, 3), dtype=np.uint8))


def test_cli_export_device_then_privatize_from_the_artefact_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a cache of its own: another test may have prepared the toy embedding's HNSW index already
    monkeypatch.setenv("DENIABLE_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "toy"
    make_toy_embedding().save(src)
    dev = tmp_path / "device"
    export = ["export-device", "--bits", "128", "--binarizer", "simhash", "--embedding", str(src), "-o", str(dev)]
    code = run_app(export)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "device artefact" in err and "smaller" in err and "18 words" in err
    assert "float hnsw index: not built" in err
    assert run_app(["prepare", "-q", "-m", "madlib", "--index", "hnsw", "--embedding", str(src)]) == 0, (
        capsys.readouterr().err
    )
    assert run_app(export) == 0
    err = capsys.readouterr().err
    assert "float embedding + hnsw index" in err and "not built" not in err  # the prepared index is found
    # remove the float embedding: the artefact must be enough
    for p in src.iterdir():
        p.unlink()
    src.rmdir()
    inp, out = tmp_path / "in.txt", tmp_path / "out.txt"
    inp.write_text("The hockey game was great!\nnasa rocket launch\n", encoding="utf-8")
    args = [
        "privatize",
        str(inp),
        "-o",
        str(out),
        "--mechanism",
        "brr",
        "--embedding",
        str(dev),
        "--seed",
        "1",
        "-q",
        "--case",
        "keep",
    ]
    assert run_app([*args, "--epsilon", "1e6"]) == 0
    assert out.read_text(encoding="utf-8") == inp.read_text(encoding="utf-8")
    assert run_app([*args, "--epsilon", "0.01"]) == 0
    noisy = out.read_text(encoding="utf-8")
    assert noisy.count("\n") == 2 and noisy != inp.read_text(encoding="utf-8")
    # the float mechanisms refuse the artefact with a clear message (exit code 3, data error)
    capsys.readouterr()
    bad = ["privatize", str(inp), "-o", str(out), "--embedding", str(dev), "--epsilon", "1", "-q"]
    assert run_app(bad) == 3
    assert "binary codes only" in capsys.readouterr().err
    assert run_app([*args, "--epsilon", "1", "--bits", "256"]) == 2


def test_cli_export_device_bad_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_app(["export-device", "--bits", "100", "-o", str(tmp_path / "x")]) == 2
    assert "--bits" in capsys.readouterr().err
    assert run_app(["export-device", "--binarizer", "pca", "-o", str(tmp_path / "x")]) == 2
    assert "--binarizer" in capsys.readouterr().err


def test_code_vocabulary_lookups_subsets_and_save_keep_codes_and_params(tmp_path: Path) -> None:
    codes = np.arange(16, dtype=np.uint8).reshape(4, 4)
    vocab = CodeVocabulary(["the", "Puck", "x-ray", "goal"], codes, name="dev", params={"binarizer": "itq"})
    assert (vocab.size, vocab.bits, vocab.dim) == (4, 32, 32) and not vocab.is_lowercase
    assert not vocab.codes.flags.writeable and codes.flags.writeable  # a read-only view, not the caller's
    assert vocab.index_of == {"the": 0, "Puck": 1, "x-ray": 2, "goal": 3}
    sub = vocab.subset(2)
    assert isinstance(sub, CodeVocabulary) and sub.vocabulary == ["the", "Puck"] and sub.params == vocab.params
    assert sub.params is not vocab.params and vocab.subset(10) is vocab
    words_only = vocab.restrict_to_words()
    assert words_only.vocabulary == ["the", "Puck", "goal"]
    np.testing.assert_array_equal(words_only.codes, codes[[0, 1, 3]])
    assert len({vocab.fingerprint, sub.fingerprint, words_only.fingerprint}) == 3
    vocab.save(tmp_path / "dev")
    back = CodeVocabulary.load(tmp_path / "dev")
    assert back.fingerprint == vocab.fingerprint and back.params["binarizer"] == "itq"
    with pytest.raises(EmbeddingError, match="duplicate word at rows 1 and 2"):
        CodeVocabulary(["a", "a"], np.zeros((2, 4), dtype=np.uint8))
    with pytest.raises(EmbeddingError, match="3 words but 2 code rows"):
        CodeVocabulary(["a", "b", "c"], np.zeros((2, 4), dtype=np.uint8))


def test_code_embedding_is_a_deprecated_name_of_the_same_class() -> None:
    import deniable.binarize.device as device

    with pytest.warns(DeprecationWarning, match="CodeVocabulary"):
        alias = device.CodeEmbedding  # type: ignore[attr-defined]
    assert alias is CodeVocabulary
    with pytest.raises(AttributeError):
        _ = device.NoSuchName  # type: ignore[attr-defined]


def test_float_only_paths_refuse_a_code_vocabulary(toy_brr: BinaryRandomizedResponse, tmp_path: Path) -> None:
    from deniable.calibrate.geometry import neighbour_distances

    toy_brr.export_device(tmp_path / "dev")
    dev = load_embedding(tmp_path / "dev")
    with pytest.raises(EmbeddingError, match="binary codes only"):
        neighbour_distances(dev, None, ks=(1,), metric="euclidean")
    assert neighbour_distances(dev, None, ks=(1,), metric="hamming").metric == "hamming"
    # BRR over the artefact: the codes are the artefact's, nothing is trained
    assert np.array_equal(BinaryRandomizedResponse(dev, 1.0).codes, toy_brr.codes)
