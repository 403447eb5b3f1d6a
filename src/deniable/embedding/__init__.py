"""Vocabularies and word vectors: :class:`Vocabulary` (words, ids, fingerprint, subsets: what
the tokenizer, the Privatizer and every mechanism need), :class:`Embedding` (a vocabulary with
float vectors, save/load) and the loaders (the default GloVe 6B 50-d package, GloVe/fastText
text, word2vec binary, saved folders, BRR device artefacts), and :func:`quantize` (8 bits per
coordinate: :class:`QuantizedEmbedding`, the on-device madlib's embedding). The other kind of vocabulary,
packed binary codes without float vectors (a BRR device artefact), is
:class:`~deniable.embedding._codes.CodeVocabulary`, re-exported by :mod:`deniable.binarize.device`."""

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
from ._quantized import QuantizedEmbedding, quantize
from ._vocabulary import BLOCK_ROWS, Vocabulary, unique_index

__all__ = [
    "BLOCK_ROWS",
    "DEFAULT_EMBEDDING",
    "FINITE_CHECK_ROWS",
    "VECTORS_FILE",
    "VOCABULARIES",
    "WORDS_FILE",
    "Embedding",
    "QuantizedEmbedding",
    "Vocabulary",
    "first_nonfinite_row",
    "load_default",
    "load_embedding",
    "load_text_vectors",
    "load_word2vec_binary",
    "quantize",
    "unique_index",
]
