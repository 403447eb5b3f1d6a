"""The :class:`Vocabulary`: words with ids and one public per-word payload.

What the tokenizer, the :class:`~deniable.Privatizer`, the mechanisms' id checks and
the artefact cache need from "an embedding" is only this: the words in id order,
``word -> id``, validation of ids, a fingerprint and a cache folder. Two kinds exist:

- :class:`~deniable.embedding.Embedding`: float vectors, one row per word (the
  float mechanisms: madlib, tem, ...);
- :class:`~deniable.binarize.device.CodeVocabulary`: packed binary codes, one row per
  word (BRR's on-device artefact; no float vectors at all).

A subclass stores its payload as a ``(V, ...)`` C-contiguous read-only array
(:attr:`_payload`) and says how to rebuild itself from validated parts
(:meth:`_derive`); subsets, the word-only restriction and the fingerprint are then
shared. A float mechanism given a vocabulary without vectors raises
:meth:`Vocabulary.float_vectors_error` (an :class:`~deniable.EmbeddingError`).
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Self

import numpy as np
import numpy.typing as npt

from .._cache import cache_dir
from .._errors import EmbeddingError, InvalidParameterError
from .._validation import check_int
from ..text import Tokenizer, word_mask

__all__ = ["BLOCK_ROWS", "Vocabulary", "unique_index"]

#: Rows of a payload read at a time when it is scanned (fingerprint, finiteness check), so
#: a memory-mapped matrix is never read whole into memory.
BLOCK_ROWS = 65536


def unique_index(words: Sequence[str], name: str) -> dict[str, int]:
    """``word -> id`` of ``words``; a duplicate is an :class:`~deniable.EmbeddingError` naming both rows."""
    index: dict[str, int] = {}
    for i, w in enumerate(words):
        j = index.setdefault(w, i)
        if j != i:
            raise EmbeddingError(f"{name}: duplicate word at rows {j + 1} and {i + 1} (words must be unique)")
    return index


class Vocabulary(abc.ABC):
    """Unique words, ids ``0 .. V - 1`` in their order, and a per-word payload array.

    Not constructed directly: use :class:`~deniable.embedding.Embedding` or
    :class:`~deniable.binarize.device.CodeVocabulary`.
    """

    name: str
    _words: list[str]
    _payload: np.ndarray

    def _set_parts(self, words: list[str], payload: np.ndarray, name: str, index: dict[str, int] | None) -> None:
        """Set the fields from validated parts (unique words, a C-contiguous ``(V, ...)`` payload)."""
        if not isinstance(payload, np.memmap) and payload.flags.writeable:
            payload = payload.view()
            payload.flags.writeable = False
        self._words = words
        self._payload = payload
        self.name = name
        if index is not None:
            self.__dict__["index_of"] = index

    @abc.abstractmethod
    def _derive(self, words: list[str], payload: np.ndarray, name: str) -> Self:
        """The same kind of vocabulary from validated parts of this one (no second validation)."""

    @abc.abstractmethod
    def _fingerprint_header(self) -> str:
        """What the fingerprint hashes before the words (the kind and shape of the payload)."""

    @property
    @abc.abstractmethod
    def dim(self) -> int:
        """Dimension of the per-word payload: n for float vectors, the code length m for binary codes."""

    @abc.abstractmethod
    def save(self, folder: str | Path) -> Path:
        """Write this vocabulary to ``folder`` (its own format); return the folder."""

    def float_vectors_error(self) -> EmbeddingError:
        """The error a float mechanism raises when given this vocabulary (it has no float vectors)."""
        return EmbeddingError(f"{self.name}: has no float vectors; a float mechanism cannot use it")

    # -- basic properties -------------------------------------------------
    @property
    def vocabulary(self) -> list[str]:
        """The words, in id order (a copy)."""
        return list(self._words)

    @property
    def size(self) -> int:
        """Number of words, V."""
        return len(self._words)

    def __len__(self) -> int:
        return len(self._words)

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
        """A sha256 of the payload's kind and shape, the words and the payload: the key of cached artefacts.

        It covers exactly what this object holds, so a restricted or subset vocabulary
        (:meth:`restrict_to_words`, :meth:`subset`) has its own fingerprint, and saving
        and loading keeps it.
        """
        h = hashlib.sha256()
        h.update(self._fingerprint_header().encode())
        h.update("\n".join(self._words).encode("utf-8", "surrogatepass"))
        mat = self._payload  # C-contiguous: hashed in place, a block of rows at a time (no copy)
        for start in range(0, mat.shape[0], BLOCK_ROWS):
            h.update(mat[start : start + BLOCK_ROWS].data)
        return h.hexdigest()

    def cache_path(self, *parts: str) -> Path:
        """A path for an artefact derived from this vocabulary (not created: a lookup leaves nothing
        behind; the writer, :func:`deniable._cache.atomic_path`, creates its folder)."""
        return cache_dir().joinpath("artefacts", self.fingerprint[:20], *parts)

    # -- lookups ----------------------------------------------------------
    def ids(self, words: Iterable[str], *, missing: int = -1) -> npt.NDArray[np.int64]:
        """Ids of ``words``; ``missing`` (default -1) for a word not in the vocabulary."""
        get = self.index_of.get
        return np.fromiter((get(w, missing) for w in words), dtype=np.int64)

    def words(self, ids: npt.ArrayLike) -> list[str]:
        """Words of ``ids``."""
        arr = self.check_ids(np.asarray(ids, dtype=np.int64).ravel())
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

    # -- derived vocabularies ---------------------------------------------
    def subset(self, vocab_size: int) -> Self:
        """The first ``vocab_size`` words (the most frequent ones, for frequency-ordered files)."""
        n = check_int("vocab_size", vocab_size, minimum=1)
        if n >= self.size:
            return self
        return self._derive(self._words[:n], self._payload[:n], f"{self.name}[:{n}]")

    def restrict_to_words(self) -> Self:
        """Only the entries the tokenizer reads back as exactly one word (ids renumbered, order kept).

        A vocabulary entry such as ``,``, ``n't``, ``e-mail`` or ``2.87`` can never be
        an input token, and as an output it would change the text's word count and
        separators. The guarantee of a mechanism over the restricted vocabulary is a
        guarantee over that vocabulary. Returns ``self`` when every entry is a word;
        otherwise a copy of the kept rows (GloVe 6B: 336,158 of 400,000, 67 MB) with its
        own :attr:`fingerprint`.
        """
        mask = word_mask(self._words)
        if mask.all():
            return self
        if not mask.any():
            raise EmbeddingError(f"{self.name}: no vocabulary entry is a word (letters and digits only)")
        return self._take(np.flatnonzero(mask), name=f"{self.name}[words]")

    def _take(self, rows: npt.NDArray[np.int64], name: str) -> Self:
        """The vocabulary of the given rows (validated ids, increasing), as a copy."""
        w = self._words
        return self._derive([w[i] for i in rows.tolist()], np.ascontiguousarray(self._payload[rows]), name)
