"""Nearest-neighbour search with a faiss-style API: ``search(queries, k) -> (D, I)``.

``D`` holds squared Euclidean distances (faiss's convention for L2 indexes), ``I``
the row ids, both ``(len(queries), k)``, nearest first.

- ``"exact"``: blocked matrix products in numpy (never a full V x batch matrix).
- ``"flat"``: faiss ``IndexFlatL2`` (exact, BLAS, multithreaded).
- ``"hnsw"``: faiss ``IndexHNSWFlat`` (approximate, fast), built once per embedding and
  cached on disk.

:func:`~deniable.index.tuned.tuned_index` picks the cheapest of these that agrees with
exact search on at least a target share of public queries (the multivariate Laplace
mechanism's default decode, ``index="auto"``).

Binary codes (packed bits, Hamming distance) have the same three kinds behind the same
contract, built by :func:`make_code_index` (see :mod:`deniable.index.binary`).

An approximate index keeps the privacy guarantee of the mechanisms that decode
through it: the decode is a deterministic function of the noisy vector and the
public index, i.e. post-processing. It only costs fidelity (see "Why an approximate
index keeps the guarantee" in docs/madlib.md).
"""

from __future__ import annotations

from ._base import Index, check_index
from .binary import (
    CODE_INDEXES,
    BinaryExactIndex,
    BinaryFlatIndex,
    BinaryHNSWIndex,
    CodeIndex,
    make_code_index,
)
from .exact import ExactIndex
from .faiss_index import FlatIndex, HNSWIndex, make_index
from .tuned import TunedChoice, tuned_index

__all__ = [
    "CODE_INDEXES",
    "INDEXES",
    "BinaryExactIndex",
    "BinaryFlatIndex",
    "BinaryHNSWIndex",
    "CodeIndex",
    "ExactIndex",
    "FlatIndex",
    "HNSWIndex",
    "Index",
    "TunedChoice",
    "check_index",
    "make_code_index",
    "make_index",
    "tuned_index",
]

INDEXES = ("exact", "flat", "hnsw")
