"""Word vectors: :class:`Embedding` (vocabulary + float vectors, fingerprint, save/load) and
its loaders (the default GloVe 6B 50-d package, GloVe/fastText text, word2vec binary, saved
folders)."""

from __future__ import annotations

from ._embedding import FINITE_CHECK_ROWS, VECTORS_FILE, WORDS_FILE, Embedding, first_nonfinite_row
from ._loaders import (
    DEFAULT_EMBEDDING,
    VOCABULARIES,
    load_default,
    load_embedding,
    load_text_vectors,
    load_word2vec_binary,
)

__all__ = [
    "DEFAULT_EMBEDDING",
    "FINITE_CHECK_ROWS",
    "VECTORS_FILE",
    "VOCABULARIES",
    "WORDS_FILE",
    "Embedding",
    "first_nonfinite_row",
    "load_default",
    "load_embedding",
    "load_text_vectors",
    "load_word2vec_binary",
]
