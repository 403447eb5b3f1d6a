"""The :class:`Embedding`: a vocabulary and a read-only ``(V, n)`` float32 matrix."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path

import numpy as np
import numpy.typing as npt

from .._cache import atomic_path, cache_dir
from .._errors import EmbeddingError, InvalidParameterError
from .._validation import check_int
from ..text import Tokenizer, word_mask

__all__ = ["Embedding"]

WORDS_FILE = "words.txt"
VECTORS_FILE = "vectors.npy"
#: Rows checked at a time for NaN/inf, so a memory-mapped matrix is never read whole into memory.
FINITE_CHECK_ROWS = 65536


def first_nonfinite_row(mat: np.ndarray, chunk: int = FINITE_CHECK_ROWS) -> int | None:
    """Index of the first row holding a NaN or an infinity, or None; reads ``chunk`` rows at a time."""
    for start in range(0, mat.shape[0], chunk):
        ok = np.isfinite(mat[start : start + chunk]).all(axis=1)
        if not ok.all():
            return start + int(np.argmin(ok))
    return None


class Embedding:
    """Words and their vectors. Row ``i`` of :attr:`vectors` is the vector of ``words[i]``.

    The matrix is float32, C-contiguous and read-only (it may be a memory map). Words
    are unique and every value is finite: both are checked on construction (the values
    ``FINITE_CHECK_ROWS`` rows at a time; ``check_finite=False`` skips that for a
    caller that has checked them already). Ids are row numbers (int64); the order is
    kept, and loaders keep the file's order, which for GloVe and word2vec is corpus
    frequency, most frequent first (so :meth:`subset` keeps the most frequent words).
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
        index: dict[str, int] = {}
        for i, w in enumerate(word_list):
            j = index.setdefault(w, i)
            if j != i:
                raise EmbeddingError(f"{name}: duplicate word at rows {j + 1} and {i + 1} (words must be unique)")
        self._init_checked(word_list, mat, name, index)

    def _init_checked(self, words: list[str], mat: np.ndarray, name: str, index: dict[str, int] | None) -> None:
        """Set the fields from already validated parts (unique words, finite float32 C-contiguous rows)."""
        if not isinstance(mat, np.memmap) and mat.flags.writeable:
            mat = mat.view()
            mat.flags.writeable = False
        self._words = words
        self._vectors = mat
        self.name = name
        if index is not None:
            self.__dict__["index_of"] = index

    @staticmethod
    def _checked(words: list[str], mat: np.ndarray, name: str) -> Embedding:
        """An :class:`Embedding` from parts of a validated one (no second validation pass)."""
        emb = Embedding.__new__(Embedding)
        emb._init_checked(words, mat, name, None)
        return emb

    # -- basic properties -------------------------------------------------
    @property
    def vectors(self) -> npt.NDArray[np.float32]:
        """The read-only ``(V, n)`` float32 matrix."""
        return self._vectors

    @property
    def vocabulary(self) -> list[str]:
        """The words, in id order (a copy)."""
        return list(self._words)

    @property
    def size(self) -> int:
        """Number of words, V."""
        return len(self._words)

    @property
    def dim(self) -> int:
        """Dimension of the vectors, n."""
        return int(self._vectors.shape[1])

    def __len__(self) -> int:
        return len(self._words)

    def __repr__(self) -> str:
        return f"Embedding(name={self.name!r}, size={self.size}, dim={self.dim})"

    @cached_property
    def index_of(self) -> dict[str, int]:
        """word -> id."""
        return {w: i for i, w in enumerate(self._words)}

    @cached_property
    def is_lowercase(self) -> bool:
        """True when no word has an upper-case letter (lookups then ignore case)."""
        return all(w == w.lower() for w in self._words)

    @cached_property
    def tokenizer(self) -> Tokenizer:
        """The :class:`~deniable.text.Tokenizer` over this vocabulary (built once)."""
        return Tokenizer(self)

    @cached_property
    def fingerprint(self) -> str:
        """A sha256 of the words and the vectors: the key of cached artefacts.

        It covers exactly what this object holds, so a restricted or subset embedding
        (:meth:`restrict_to_words`, :meth:`subset`) has its own fingerprint, and saving
        and loading keeps it.
        """
        h = hashlib.sha256()
        h.update(str(self._vectors.shape).encode())
        h.update("\n".join(self._words).encode("utf-8", "surrogatepass"))
        mat = self._vectors  # C-contiguous: hashed in place, a block of rows at a time (no copy)
        for start in range(0, mat.shape[0], FINITE_CHECK_ROWS):
            h.update(mat[start : start + FINITE_CHECK_ROWS].data)
        return h.hexdigest()

    def cache_path(self, *parts: str) -> Path:
        """A path for an artefact derived from this embedding (folder created)."""
        path = cache_dir().joinpath("artefacts", self.fingerprint[:20], *parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    # -- lookups ----------------------------------------------------------
    def ids(self, words: Iterable[str], *, missing: int = -1) -> npt.NDArray[np.int64]:
        """Ids of ``words``; ``missing`` (default -1) for a word not in the vocabulary."""
        get = self.index_of.get
        return np.fromiter((get(w, missing) for w in words), dtype=np.int64)

    def words(self, ids: npt.ArrayLike) -> list[str]:
        """Words of ``ids``."""
        arr = np.asarray(ids, dtype=np.int64).ravel()
        if arr.size and (arr.min() < 0 or arr.max() >= self.size):
            bad = arr[(arr < 0) | (arr >= self.size)][0]
            raise InvalidParameterError("ids", int(bad), f"ids in [0, {self.size - 1}]")
        w = self._words
        return [w[i] for i in arr.tolist()]

    def check_ids(self, ids: npt.ArrayLike, name: str = "ids") -> npt.NDArray[np.int64]:
        """Validate an array of ids against this vocabulary and return it as int64."""
        arr = np.asarray(ids)
        if arr.dtype.kind not in "iu":
            raise InvalidParameterError(name, arr.dtype, "an integer array of word ids")
        arr = arr.astype(np.int64, copy=False)
        if arr.size and (arr.min() < 0 or arr.max() >= self.size):
            bad = arr[(arr < 0) | (arr >= self.size)][0]
            raise InvalidParameterError(name, int(bad), f"word ids in [0, {self.size - 1}]")
        return arr

    # -- derived embeddings -------------------------------------------------
    def subset(self, vocab_size: int) -> Embedding:
        """The first ``vocab_size`` words (the most frequent ones, for frequency-ordered files)."""
        n = check_int("vocab_size", vocab_size, minimum=1)
        if n >= self.size:
            return self
        return Embedding._checked(self._words[:n], self._vectors[:n], f"{self.name}[:{n}]")

    def restrict_to_words(self) -> Embedding:
        """Only the entries the tokenizer reads back as exactly one word (ids renumbered, order kept).

        A vocabulary entry such as ``,``, ``n't``, ``e-mail`` or ``2.87`` can never be
        an input token, and as an output it would change the text's word count and
        separators. The guarantee of a mechanism over the restricted embedding is a
        guarantee over the restricted vocabulary. Returns ``self`` when every entry is a
        word; otherwise a copy of the kept rows (GloVe 6B: 336,158 of 400,000, 67 MB)
        with its own :attr:`fingerprint`.
        """
        mask = word_mask(self._words)
        if mask.all():
            return self
        if not mask.any():
            raise EmbeddingError(f"{self.name}: no vocabulary entry is a word (letters and digits only)")
        return self._take(np.flatnonzero(mask), name=f"{self.name}[words]")

    def _take(self, rows: npt.NDArray[np.int64], name: str) -> Embedding:
        """The embedding of the given rows (validated ids, increasing), as a copy."""
        w = self._words
        return Embedding._checked([w[i] for i in rows.tolist()], np.ascontiguousarray(self._vectors[rows]), name)

    # -- persistence ------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        """Write ``folder/vectors.npy`` and ``folder/words.txt`` (atomically each)."""
        out = Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        atomic_path(out / VECTORS_FILE, lambda p: _save_npy(p, self._vectors))
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
    def from_arrays(
        cls,
        words: Sequence[str],
        vectors: npt.ArrayLike,
        *,
        name: str = "embedding",
        check_finite: bool = True,
    ) -> Embedding:
        """Build and validate: unique words, finite values, matching row count (same as the constructor)."""
        return cls(words, vectors, name=name, check_finite=check_finite)


def _save_npy(path: Path, mat: np.ndarray) -> None:
    with open(path, "wb") as fh:
        np.save(fh, np.ascontiguousarray(mat, dtype=np.float32), allow_pickle=False)


def _write_words(path: Path, words: list[str]) -> None:
    path.write_text("\n".join(words) + "\n", encoding="utf-8")
