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
    assert (glove.size, glove.dim) == (336_158, 50)  # the entries that are one word
    assert glove.is_lowercase
    assert glove.words([0]) == ["the"]
    assert glove.ids(["hockey"])[0] > 0
    assert glove.ids([",", "n't", "2.87", "e-mail"]).tolist() == [-1] * 4
    full = load_embedding(vocabulary="all")
    assert full.size == 400_000 and full.ids([","])[0] >= 0
    assert glove.restrict_to_words() is glove and full.restrict_to_words().fingerprint == glove.fingerprint
    assert glove.fingerprint != full.fingerprint
    assert load_embedding(vocab_size=1000).vocabulary == glove.vocabulary[:1000]


@pytest.mark.parametrize("mmap", [True, False])
def test_saved_folder_with_a_nan_row_is_rejected(tmp_path: Path, mmap: bool) -> None:
    from deniable.embedding import VECTORS_FILE

    mat = np.ones((70_000, 3), dtype=np.float32)  # more than one 65,536-row check chunk
    mat[66_000, 1] = np.nan
    Embedding([f"w{i}" for i in range(len(mat))], mat, check_finite=False).save(tmp_path / "emb")
    with pytest.raises(EmbeddingError, match="row 66001 has a NaN or infinite value") as info:
        Embedding.load(tmp_path / "emb", mmap=mmap)
    assert VECTORS_FILE in str(info.value)
    with pytest.raises(EmbeddingError, match="row 66001"):
        load_embedding(tmp_path / "emb")


def test_saved_folder_with_an_inf_row_is_rejected(tmp_path: Path) -> None:
    mat = np.ones((4, 3), dtype=np.float32)
    mat[0, 0] = np.inf
    Embedding(["a", "b", "c", "d"], mat, check_finite=False).save(tmp_path / "emb")
    with pytest.raises(EmbeddingError, match="row 1 has"):
        Embedding.load(tmp_path / "emb")


def test_constructor_rejects_duplicates_and_non_finite_values() -> None:
    with pytest.raises(EmbeddingError, match="duplicate word at rows 1 and 2"):
        Embedding(["a", "a"], np.zeros((2, 2)))
    for bad in (np.nan, np.inf, -np.inf):
        mat = np.zeros((3, 2))
        mat[2, 1] = bad
        with pytest.raises(EmbeddingError, match="row 3 has a NaN or infinite value"):
            Embedding(["a", "b", "c"], mat)


def test_restrict_to_words_keeps_single_tokens_and_changes_the_fingerprint(tmp_path: Path) -> None:
    from deniable.text import words

    vocab = ["the", ",", "hockey", "n't", "2.87", "e-mail", "Über", "—", "42", "u.s.", "_", "a_b", "ǰ", "x y"]
    emb = Embedding(vocab, np.arange(len(vocab) * 2, dtype=np.float32).reshape(-1, 2))
    sub = emb.restrict_to_words()
    assert sub.vocabulary == ["the", "hockey", "Über", "42", "ǰ"]
    assert all(words(w) == [w] for w in sub.vocabulary)
    np.testing.assert_array_equal(sub.vectors, emb.vectors[[0, 2, 6, 8, 12]])
    assert sub.ids(["hockey", ","]).tolist() == [1, -1]
    assert sub.fingerprint != emb.fingerprint
    assert sub.restrict_to_words() is sub
    # a saved folder is restricted on load by default, kept whole with vocabulary="all"
    emb.save(tmp_path / "e")
    loaded = load_embedding(tmp_path / "e")
    assert loaded.vocabulary == sub.vocabulary and loaded.fingerprint == sub.fingerprint
    assert load_embedding(tmp_path / "e", vocabulary="all").fingerprint == emb.fingerprint
    assert load_embedding(tmp_path / "e", vocab_size=2).vocabulary == ["the", "hockey"]
    with pytest.raises(InvalidParameterError, match="vocabulary"):
        load_embedding(tmp_path / "e", vocabulary="some")
    with pytest.raises(EmbeddingError, match="no vocabulary entry is a word"):
        Embedding([",", "."], np.zeros((2, 2))).restrict_to_words()


def test_restricted_device_artefact_keeps_its_codes(tmp_path: Path) -> None:
    from deniable.binarize.device import CodeVocabulary

    codes = np.arange(12, dtype=np.uint8).reshape(3, 4)
    emb = CodeVocabulary(["a", ",", "b"], codes)
    sub = emb.restrict_to_words()
    assert isinstance(sub, CodeVocabulary) and sub.vocabulary == ["a", "b"]
    np.testing.assert_array_equal(sub.codes, codes[[0, 2]])


def test_embedding_fingerprint_is_the_cache_key_it_was(tiny_embedding: Embedding) -> None:
    """The Vocabulary base hashes a float embedding exactly as before: on-disk caches stay valid."""
    import hashlib

    e = tiny_embedding
    h = hashlib.sha256()
    h.update(str(e.vectors.shape).encode())
    h.update("\n".join(e.vocabulary).encode("utf-8"))
    h.update(np.ascontiguousarray(e.vectors, dtype=np.float32).tobytes())
    assert e.fingerprint == h.hexdigest()
    assert e.cache_path("x").parent.name == e.fingerprint[:20]


def test_vocabulary_is_the_shared_base_of_embeddings_and_code_vocabularies() -> None:
    from deniable.binarize.device import CodeVocabulary
    from deniable.embedding import Vocabulary

    with pytest.raises(TypeError):
        Vocabulary()  # type: ignore[abstract]
    words = ["a", "b"]
    codes = np.arange(8, dtype=np.uint8).reshape(2, 4)
    floats = Embedding(words, codes.view(np.float32))  # the very same bytes as float32
    packed = CodeVocabulary(words, codes)
    assert isinstance(floats, Vocabulary) and isinstance(packed, Vocabulary)
    assert not isinstance(packed, Embedding) and not isinstance(floats, CodeVocabulary)
    assert floats.fingerprint != packed.fingerprint  # the kind is part of the key
    for vocab in (floats, packed):
        assert vocab.ids(["b", "zz"]).tolist() == [1, -1] and vocab.words([1, 0]) == ["b", "a"]
        assert vocab.tokenizer.lookup(["B", "a"]).tolist() == [1, 0]
        with pytest.raises(InvalidParameterError, match="word ids"):
            vocab.check_ids([2])


def test_type_error_says_what_a_float_embedding_is_missing() -> None:
    from deniable.binarize.device import CodeVocabulary

    err = Embedding.type_error(CodeVocabulary(["a"], np.zeros((1, 4), dtype=np.uint8), name="dev"))
    assert isinstance(err, EmbeddingError) and "dev is a BRR device artefact" in str(err)
    assert "binary codes only" in str(err)
    other = Embedding.type_error([1, 2], "emb")
    assert isinstance(other, InvalidParameterError) and other.name == "emb"


def test_check_passes_a_float_embedding_and_raises_type_error_for_anything_else(tiny_embedding: Embedding) -> None:
    from deniable.binarize.device import CodeVocabulary

    emb = tiny_embedding
    assert Embedding.check(emb) is emb
    with pytest.raises(EmbeddingError, match="binary codes only"):
        Embedding.check(CodeVocabulary(["a"], np.zeros((1, 4), dtype=np.uint8), name="dev"))
    with pytest.raises(InvalidParameterError, match="emb") as info:
        Embedding.check([1, 2], "emb")
    assert info.value.name == "emb"


def _mapped(a: np.ndarray) -> bool:
    b: object = a
    while b is not None:
        if isinstance(b, np.memmap):
            return True
        b = getattr(b, "base", None)
    return False


def test_word_only_vocabulary_is_cached_once_and_memory_mapped(tmp_path: Path) -> None:
    words = ["the", ",", "game", "2.87", "e-mail", "hockey"]
    vec = np.arange(len(words) * 3, dtype=np.float32).reshape(len(words), 3)
    Embedding(words, vec, name="src").save(tmp_path / "src")
    first = load_embedding(tmp_path / "src")
    second = load_embedding(tmp_path / "src")
    assert first.vocabulary == second.vocabulary == ["the", "game", "hockey"]
    assert _mapped(second.vectors)  # every process maps the one cached copy
    in_memory = load_embedding(tmp_path / "src", cache=False)
    assert in_memory.fingerprint == second.fingerprint  # same artefact keys either way


def test_default_embedding_is_memory_mapped() -> None:
    emb = load_embedding()
    assert _mapped(emb.vectors) and emb.size == 336_158 and emb.vectors.flags.c_contiguous
