"""The :class:`Embedding`: a :class:`~deniable.embedding.Vocabulary` with a read-only ``(V, n)`` float32 matrix."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .._cache import atomic_path
from .._errors import DeniableError, EmbeddingError, InvalidParameterError
from ._vocabulary import BLOCK_ROWS, Vocabulary, unique_index

__all__ = ["Embedding"]

WORDS_FILE = "words.txt"
VECTORS_FILE = "vectors.npy"
#: Rows checked at a time for NaN/inf, so a memory-mapped matrix is never read whole into memory.
FINITE_CHECK_ROWS = BLOCK_ROWS


def first_nonfinite_row(mat: np.ndarray, chunk: int = FINITE_CHECK_ROWS) -> int | None:
    """Index of the first row holding a NaN or an infinity, or None; reads ``chunk`` rows at a time."""
    for start in range(0, mat.shape[0], chunk):
        ok = np.isfinite(mat[start : start + chunk]).all(axis=1)
        if not ok.all():
            return start + int(np.argmin(ok))
    return None


class Embedding(Vocabulary):
    """Words and their vectors. Row ``i`` of :attr:`vectors` is the vector of ``words[i]``.

    The matrix is float32, C-contiguous and read-only (it may be a memory map). Words
    are unique and every value is finite: both are checked on construction (the values
    ``FINITE_CHECK_ROWS`` rows at a time; ``check_finite=False`` skips that for a
    caller that has checked them already). Ids are row numbers (int64); the order is
    kept, and loaders keep the file's order, which for GloVe and word2vec is corpus
    frequency, most frequent first (so :meth:`subset` keeps the most frequent words).
    The vocabulary part (ids, lookups, :attr:`fingerprint`, :meth:`subset`,
    :meth:`restrict_to_words`, :attr:`tokenizer`) is :class:`~deniable.embedding.Vocabulary`'s.
    """

    def __init__(
        self,
        words: Sequence[str],
        vectors: npt.ArrayLike,
        *,
        name: str = "embedding",
        check_finite: bool = True,
    ):
        mat = vectors if isinstance(vectors, np.ndarray) else np.asarray(vectors)
        if mat.ndim != 2:
            raise EmbeddingError(f"{name}: vectors must be a 2-d (V, n) matrix, got shape {mat.shape}")
        if mat.dtype != np.float32 or not mat.flags.c_contiguous:
            mat = np.ascontiguousarray(mat, dtype=np.float32)
        if len(words) != mat.shape[0]:
            raise EmbeddingError(f"{name}: {len(words)} words but {mat.shape[0]} vector rows; they must match")
        if mat.shape[0] == 0 or mat.shape[1] == 0:
            raise EmbeddingError(f"{name}: the embedding is empty (shape {mat.shape})")
        if check_finite:
            bad = first_nonfinite_row(mat)
            if bad is not None:
                raise EmbeddingError(f"{name}: row {bad + 1} has a NaN or infinite value")
        word_list = list(words)
        self._set_parts(word_list, mat, name, unique_index(word_list, name))

    def _derive(self, words: list[str], payload: np.ndarray, name: str) -> Embedding:
        emb = Embedding.__new__(Embedding)
        emb._set_parts(words, payload, name, None)
        return emb

    def _fingerprint_header(self) -> str:
        return str(self._payload.shape)  # as before the Vocabulary base: existing cache keys stay valid

    @staticmethod
    def check(value: object, name: str = "embedding") -> Embedding:
        """``value`` where a float :class:`Embedding` is needed; anything else raises :meth:`type_error`."""
        if not isinstance(value, Embedding):
            raise Embedding.type_error(value, name)
        return value

    @staticmethod
    def type_error(value: object, name: str = "embedding") -> DeniableError:
        """The error to raise when ``value`` is given where a float :class:`Embedding` is needed.

        A :class:`~deniable.embedding.Vocabulary` without float vectors (a BRR device
        artefact) gives its own :class:`~deniable.EmbeddingError` ("holds binary codes
        only"); anything else an :class:`~deniable.InvalidParameterError` naming ``name``.
        """
        if isinstance(value, Vocabulary) and not isinstance(value, Embedding):
            return value.float_vectors_error()
        return InvalidParameterError(name, type(value).__name__, "a deniable.Embedding")

    # -- basic properties -------------------------------------------------
    @property
    def vectors(self) -> npt.NDArray[np.float32]:
        """The read-only ``(V, n)`` float32 matrix."""
        return self._payload

    @property
    def dim(self) -> int:
        """Dimension of the vectors, n."""
        return int(self._payload.shape[1])

    def __repr__(self) -> str:
        return f"Embedding(name={self.name!r}, size={self.size}, dim={self.dim})"

    # -- persistence ------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        """Write ``folder/vectors.npy`` and ``folder/words.txt`` (atomically each)."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        atomic_path(out / VECTORS_FILE, lambda p: _save_npy(p, self._payload))
        atomic_path(
            out / WORDS_FILE,
            lambda p: _write_words(p, self._words),
        )
        return out

    @classmethod
    def load(cls, folder: str | Path, *, mmap: bool = True) -> Embedding:
        """Read a folder written by :meth:`save`; the matrix is memory-mapped by default.

        Every value is checked to be finite (in chunks of rows, so a memory map is not
        read into memory at once); a NaN or infinite row is an error naming the file and row.
        """
        path = Path(folder)
        vec_path, words_path = path / VECTORS_FILE, path / WORDS_FILE
        for p in (vec_path, words_path):
            if not p.is_file():
                raise EmbeddingError(f"{path}: missing {p.name} (expected {VECTORS_FILE} + {WORDS_FILE})")
        vectors = np.load(vec_path, mmap_mode="r" if mmap else None, allow_pickle=False)
        if vectors.ndim == 2:
            bad = first_nonfinite_row(vectors)
            if bad is not None:
                raise EmbeddingError(f"{vec_path}: row {bad + 1} has a NaN or infinite value")
        words = words_path.read_text(encoding="utf-8").split("\n")
        if words and words[-1] == "":
            words.pop()
        return cls.from_arrays(words, vectors, name=str(path), check_finite=False)

    @classmethod
    def from_arrays(cls, words: Sequence[str], vectors: npt.ArrayLike, **options: Any) -> Embedding:
        """The constructor (``options``: ``name``, ``check_finite``): unique words, finite values, matching rows."""
        return cls(words, vectors, **options)


def _save_npy(path: Path, mat: np.ndarray) -> None:
    with open(path, "wb") as fh:
        np.save(fh, np.ascontiguousarray(mat, dtype=np.float32), allow_pickle=False)


def _write_words(path: Path, words: list[str]) -> None:
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
