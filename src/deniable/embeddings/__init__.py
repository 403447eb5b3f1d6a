"""Loaders: the default GloVe 6B 50-d package, GloVe/fastText text, word2vec binary, saved folders."""

from __future__ import annotations

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
    "VOCABULARIES",
    "load_default",
    "load_embedding",
    "load_text_vectors",
    "load_word2vec_binary",
]
