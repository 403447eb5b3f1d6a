from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from deniable import Embedding, EmbeddingError, InvalidParameterError, load_embedding


def _write_text(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_embedding_basics(tiny_embedding: Embedding) -> None:
    e = tiny_embedding
    assert (e.size, e.dim) == (8, 3)
    assert e.vectors.dtype == np.float32 and not e.vectors.flags.writeable
    np.testing.assert_array_equal(e.ids(["w3", "nope", "w0"]), [3, -1, 0])
    assert e.words([1, 2]) == ["w1", "w2"]
    with pytest.raises(InvalidParameterError, match="ids"):
        e.words([8])
    sub = e.subset(3)
    assert sub.size == 3 and sub.words([2]) == ["w2"]
    assert e.subset(100) is e


def test_save_load_roundtrip_is_memory_mapped(tiny_embedding: Embedding, tmp_path: Path) -> None:
    tiny_embedding.save(tmp_path / "emb")
    back = Embedding.load(tmp_path / "emb")
    assert isinstance(back.vectors, np.memmap)
    np.testing.assert_array_equal(back.vectors, tiny_embedding.vectors)
    assert back.vocabulary == tiny_embedding.vocabulary
    assert back.fingerprint == tiny_embedding.fingerprint
    again = load_embedding(tmp_path / "emb", vocab_size=4)
    assert again.size == 4


@pytest.mark.parametrize("header", [True, False])
def test_text_format_with_and_without_header(tmp_path: Path, header: bool) -> None:
    lines = ["hello 0.1 0.2 0.3", "world -1 2 3.5e-1"]
    if header:
        lines = ["2 3", *lines]
    emb = load_embedding(_write_text(tmp_path / "v.txt", lines), cache=False)
    assert emb.size == 2 and emb.dim == 3
    np.testing.assert_allclose(emb.vectors[1], [-1, 2, 0.35], rtol=1e-6)


def test_text_format_gz_and_cache(tmp_path: Path) -> None:
    p = tmp_path / "v.txt.gz"
    with gzip.open(p, "wt", encoding="utf-8") as fh:
        fh.write("a 1 2\nb 3 4\n")
    first = load_embedding(p)
    second = load_embedding(p)  # from the .npy cache, memory-mapped
    assert isinstance(second.vectors, np.memmap)
    np.testing.assert_array_equal(first.vectors, second.vectors)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["a 1 2 3", "b 1 2"], "line 2: 2 values, expected 3"),
        (["a 1 2", "b nan 2"], "line 2: NaN or infinite"),
        (["a 1 2", "b inf 2"], "line 2: NaN or infinite"),
        (["a 1 2", "a 3 4"], "line 2: duplicate word"),
        (["2 3", "a 1 2", "b 3 4"], "line 2: 2 values, expected 3"),
        (["a 1 x"], "line 1: a value is not a number"),
        (["3 2", "a 1 2", "b 3 4"], "header says 3 words"),
    ],
)
def test_malformed_text_files_name_file_and_line(tmp_path: Path, lines: list[str], message: str) -> None:
    p = _write_text(tmp_path / "bad.txt", lines)
    with pytest.raises(EmbeddingError, match=message) as info:
        load_embedding(p, cache=False)
    assert "bad.txt" in str(info.value)


def _w2v_bytes(words: list[str], mat: np.ndarray) -> bytes:
    out = f"{len(words)} {mat.shape[1]}\n".encode()
    for w, v in zip(words, mat, strict=True):
        out += w.encode() + b" " + struct.pack(f"<{len(v)}f", *v) + b"\n"
    return out


@pytest.mark.parametrize("gz", [False, True])
def test_word2vec_binary(tmp_path: Path, gz: bool) -> None:
    mat = np.arange(6, dtype=np.float32).reshape(2, 3)
    data = _w2v_bytes(["Über", "b"], mat)
    p = tmp_path / ("v.bin.gz" if gz else "v.bin")
    p.write_bytes(gzip.compress(data) if gz else data)
    emb = load_embedding(p, cache=False)
    assert emb.vocabulary == ["Über", "b"]
    np.testing.assert_array_equal(emb.vectors, mat)
    assert not emb.is_lowercase


def test_word2vec_truncated(tmp_path: Path) -> None:
    data = _w2v_bytes(["a", "b"], np.ones((2, 3), dtype=np.float32))
    p = tmp_path / "v.bin"
    p.write_bytes(data[:-8])
    with pytest.raises(EmbeddingError, match="entry 2 is truncated"):
        load_embedding(p, cache=False)


def test_embedding_validation() -> None:
    with pytest.raises(EmbeddingError, match="3 words but 2"):
        Embedding(["a", "b", "c"], np.zeros((2, 2)))
    with pytest.raises(EmbeddingError, match="duplicate word at rows 1 and 2"):
        Embedding.from_arrays(["a", "a"], np.zeros((2, 2)))
    with pytest.raises(EmbeddingError, match="row 2 has a NaN"):
        Embedding.from_arrays(["a", "b"], np.array([[0, 0], [np.nan, 1]]))
    with pytest.raises(EmbeddingError, match="does not exist"):
        load_embedding("/nonexistent/vectors.txt")


def test_default_embedding(glove: Embedding) -> None:
    assert (glove.size, glove.dim) == (400_000, 50)
    assert glove.is_lowercase
    assert glove.words([0]) == ["the"]
    assert glove.ids(["hockey"])[0] > 0


@pytest.mark.parametrize("mmap", [True, False])
def test_saved_folder_with_a_nan_row_is_rejected(tmp_path: Path, mmap: bool) -> None:
    from deniable.embedding import VECTORS_FILE

    mat = np.ones((70_000, 3), dtype=np.float32)  # more than one 65,536-row check chunk
    mat[66_000, 1] = np.nan
    Embedding([f"w{i}" for i in range(len(mat))], mat).save(tmp_path / "emb")
    with pytest.raises(EmbeddingError, match="row 66001 has a NaN or infinite value") as info:
        Embedding.load(tmp_path / "emb", mmap=mmap)
    assert VECTORS_FILE in str(info.value)
    with pytest.raises(EmbeddingError, match="row 66001"):
        load_embedding(tmp_path / "emb")


def test_saved_folder_with_an_inf_row_is_rejected(tmp_path: Path) -> None:
    mat = np.ones((4, 3), dtype=np.float32)
    mat[0, 0] = np.inf
    Embedding(["a", "b", "c", "d"], mat).save(tmp_path / "emb")
    with pytest.raises(EmbeddingError, match="row 1 has"):
        Embedding.load(tmp_path / "emb")
