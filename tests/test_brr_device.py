"""The BRR device artefact: codes + words only; round trip; privatize from it alone (API and CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import make_toy_embedding
from deniable import BinaryRandomizedResponse, EmbeddingError, InvalidParameterError, MultivariateLaplace, Privatizer
from deniable.binarize.device import (
    CodeEmbedding,
    artefact_size,
    is_device_artefact,
    load_device_artefact,
    save_device_artefact,
)
from deniable.cli import run_app
from deniable.embedding import load_embedding


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
    assert isinstance(emb, CodeEmbedding) and isinstance(emb.codes, np.memmap)
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
    assert isinstance(emb, CodeEmbedding)
    with pytest.raises(EmbeddingError, match="binary codes only"):
        _ = emb.vectors
    with pytest.raises(EmbeddingError, match="binary codes only"):
        MultivariateLaplace(emb, 1.0)
    sub = load_embedding(tmp_path / "dev", vocab_size=5)
    assert isinstance(sub, CodeEmbedding) and sub.size == 5 and np.array_equal(sub.codes, toy_brr.codes[:5])
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
        CodeEmbedding(words, np.zeros((2, 3), dtype=np.uint8))


def test_cli_export_device_then_privatize_from_the_artefact_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "toy"
    make_toy_embedding().save(src)
    dev = tmp_path / "device"
    export = ["export-device", "--bits", "128", "--binarizer", "simhash", "--embedding", str(src), "-o", str(dev)]
    code = run_app(export)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "device artefact" in err and "smaller" in err and "18 words" in err
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
