"""Nearest-neighbour search over packed binary codes in Hamming distance.

The same contract as the float indexes (faiss's own: ``IndexBinaryFlat`` and
``IndexBinaryHNSW`` sit beside ``IndexFlatL2`` and ``IndexHNSWFlat``):
``search(queries, k) -> (D, I)`` with ``D`` the int32 Hamming distances (bits) and ``I``
the int64 row ids, both ``(len(queries), k)``, nearest first; ``d`` is the code length
in bits. Queries and codes are ``np.packbits`` rows: ``(m, bits // 8)`` uint8.

- ``"exact"``: numpy popcount brute force (:func:`deniable.metrics.hamming`), for tiny
  code sets (no faiss call).
- ``"flat"``: faiss ``IndexBinaryFlat`` (exact).
- ``"hnsw"``: faiss ``IndexBinaryHNSW`` (approximate, fast), built once per code set and
  cached on disk under the codes' fingerprint, written atomically, like the float HNSW.

The exact kinds also offer ``range_search(queries, radius) -> (lims, D, I)`` (faiss's
layout: the results of query ``i`` are ``D[lims[i]:lims[i+1]]``, distances ``< radius``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from .._cache import atomic_path, cache_dir
from .._errors import EmbeddingError, InvalidParameterError
from ..metrics import hamming
from .faiss_index import _FaissWrapper, add_in_chunks

__all__ = [
    "CODE_INDEXES",
    "BinaryExactIndex",
    "BinaryFlatIndex",
    "BinaryHNSWIndex",
    "CodeIndex",
    "check_code_queries",
    "codes_cache_path",
    "make_code_index",
]

#: Kinds of binary index :func:`make_code_index` builds.
CODE_INDEXES = ("exact", "flat", "hnsw")

_I = TypeVar("_I", bound="CodeIndex")
SearchResult = tuple[npt.NDArray[np.int32], npt.NDArray[np.int64]]
RangeResult = tuple[npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.int64]]


@runtime_checkable
class CodeIndex(Protocol):
    """The nearest-neighbour interface every binary backend offers."""

    @property
    def ntotal(self) -> int: ...

    @property
    def d(self) -> int: ...

    def search(self, queries: npt.ArrayLike, k: int) -> SearchResult: ...


def _packed(codes: npt.ArrayLike, name: str = "codes") -> npt.NDArray[np.uint8]:
    arr = np.asarray(codes)
    if arr.dtype != np.uint8 or arr.ndim != 2 or arr.shape[1] == 0:
        raise InvalidParameterError(
            name, f"array of dtype {arr.dtype} and shape {arr.shape}", "a (V, bits // 8) uint8 array of packed bits"
        )
    return np.ascontiguousarray(arr)


def check_code_queries(queries: npt.ArrayLike, bits: int, k: int | None, ntotal: int) -> npt.NDArray[np.uint8]:
    """Packed queries of ``bits`` bits (and ``k`` in [1, ntotal] when given)."""
    q = _packed(np.atleast_2d(np.asarray(queries)), "queries")
    if q.shape[1] * 8 != bits:
        raise InvalidParameterError("queries", f"{q.shape[1] * 8}-bit codes", f"{bits}-bit codes")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= ntotal):
        raise InvalidParameterError("k", k, f"an integer in [1, {ntotal}]")
    return q


def codes_cache_path(codes: npt.ArrayLike, name: str) -> Path:
    """``<cache>/artefacts/<fingerprint of the codes>/<name>``: the cache rule of code indexes."""
    arr = _packed(codes)
    h = hashlib.sha256(f"codes{arr.shape}".encode())
    h.update(arr.tobytes())
    path = cache_dir().joinpath("artefacts", h.hexdigest()[:20], name)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


class BinaryExactIndex:
    """Exact Hamming search in numpy (popcount brute force, bounded memory per block)."""

    def __init__(self, codes: npt.ArrayLike, *, block_bytes: int = 2**21) -> None:
        self.codes = _packed(codes)
        self._step = max(1, int(block_bytes) // max(1, self.codes.nbytes))

    @property
    def ntotal(self) -> int:
        return int(self.codes.shape[0])

    @property
    def d(self) -> int:
        return int(self.codes.shape[1] * 8)

    def _blocks(self, q: np.ndarray) -> Any:
        for s in range(0, q.shape[0], self._step):
            yield s, hamming(q[s : s + self._step, None, :], self.codes[None, :, :]).astype(np.int32)

    def search(self, queries: npt.ArrayLike, k: int) -> SearchResult:
        q = check_code_queries(queries, self.d, k, self.ntotal)
        out_d = np.empty((q.shape[0], k), dtype=np.int32)
        out_i = np.empty((q.shape[0], k), dtype=np.int64)
        for s, dist in self._blocks(q):
            part = (
                np.argpartition(dist, k - 1, axis=1)[:, :k]
                if k < dist.shape[1]
                else np.tile(np.arange(dist.shape[1]), (dist.shape[0], 1))
            )
            pd = np.take_along_axis(dist, part, axis=1)
            order = np.argsort(pd, axis=1, kind="stable")
            out_d[s : s + len(dist)] = np.take_along_axis(pd, order, axis=1)
            out_i[s : s + len(dist)] = np.take_along_axis(part, order, axis=1)
        return out_d, out_i

    def range_search(self, queries: npt.ArrayLike, radius: int) -> RangeResult:
        q = check_code_queries(queries, self.d, None, self.ntotal)
        lims, dists, ids = [np.zeros(1, dtype=np.int64)], [], []
        for _, dist in self._blocks(q):
            rows, cols = np.nonzero(dist < radius)
            lims.append(np.cumsum(np.bincount(rows, minlength=len(dist))) + lims[-1][-1])
            dists.append(dist[rows, cols])
            ids.append(cols.astype(np.int64))
        return (
            np.concatenate(lims),
            np.concatenate(dists) if dists else np.empty(0, np.int32),
            np.concatenate(ids) if ids else np.empty(0, np.int64),
        )


class _FaissBinaryWrapper(_FaissWrapper):
    """The float wrapper's ``faiss_index``, ``ntotal``, ``d`` (bits); a search over packed codes."""

    def search(self, queries: npt.ArrayLike, k: int) -> SearchResult:  # type: ignore[override]
        q = check_code_queries(queries, self.d, k, self.ntotal)
        dist, ids = self.faiss_index.search(q, k)
        return dist, ids.astype(np.int64, copy=False)


class BinaryFlatIndex(_FaissBinaryWrapper):
    """faiss ``IndexBinaryFlat``: exact Hamming search."""

    def __init__(self, codes: npt.ArrayLike) -> None:
        import faiss

        arr = _packed(codes)
        index = faiss.IndexBinaryFlat(arr.shape[1] * 8)
        index.add(arr)
        super().__init__(index)

    def range_search(self, queries: npt.ArrayLike, radius: int) -> RangeResult:
        """All codes at distance ``< radius`` of each query (faiss's ``lims`` layout)."""
        q = check_code_queries(queries, self.d, None, self.ntotal)
        lims, dist, ids = self.faiss_index.range_search(q, int(radius))
        return lims.astype(np.int64), dist, ids.astype(np.int64, copy=False)


class BinaryHNSWIndex(_FaissBinaryWrapper):
    """faiss ``IndexBinaryHNSW``: approximate, fast. ``ef_search`` trades speed for recall.

    It may return id -1 (no result) for a query the greedy graph search strands.
    """

    def __init__(self, index: Any, ef_search: int = 128) -> None:
        super().__init__(index)
        self.ef_search = int(ef_search)
        index.hnsw.efSearch = self.ef_search

    @classmethod
    def build(
        cls,
        codes: npt.ArrayLike,
        *,
        m: int = 32,
        ef_construction: int = 100,
        ef_search: int = 128,
        chunk: int = 20000,
    ) -> BinaryHNSWIndex:
        import faiss

        arr = _packed(codes)
        index = faiss.IndexBinaryHNSW(arr.shape[1] * 8, m)
        index.hnsw.efConstruction = ef_construction
        add_in_chunks(index, arr, chunk, "building binary HNSW index")
        return cls(index, ef_search)

    @classmethod
    def cached(
        cls, codes: npt.ArrayLike, *, m: int = 32, ef_construction: int = 100, ef_search: int = 128
    ) -> BinaryHNSWIndex:
        """Load the HNSW index of ``codes`` from the cache, building it once if needed."""
        import faiss

        arr = _packed(codes)
        path = codes_cache_path(arr, f"binary-hnsw-m{m}-efc{ef_construction}.faissbin")
        if path.is_file():
            idx = cls(faiss.read_index_binary(str(path)), ef_search)
            return _check_code_index(idx, arr)
        idx = cls.build(arr, m=m, ef_construction=ef_construction, ef_search=ef_search)
        atomic_path(path, lambda p: faiss.write_index_binary(idx.faiss_index, str(p)))
        return idx


def _check_code_index(index: _I, codes: np.ndarray) -> _I:
    if index.ntotal != codes.shape[0] or index.d != codes.shape[1] * 8:
        raise EmbeddingError(
            f"the code index holds {index.ntotal} codes of {index.d} bits, but there are {codes.shape[0]} "
            f"codes of {codes.shape[1] * 8} bits: they do not match (rebuild the index)"
        )
    return index


def make_code_index(codes: npt.ArrayLike, kind: str | CodeIndex = "flat", **options: Any) -> CodeIndex:
    """Build (or load from the cache) the binary index called ``kind`` over packed ``codes``.

    The sibling of :func:`deniable.index.make_index`; ``kind`` may also be a ready
    :class:`CodeIndex`, which is checked against the codes.
    """
    arr = _packed(codes)
    if not isinstance(kind, str):
        if not isinstance(kind, CodeIndex):
            raise InvalidParameterError("index", type(kind).__name__, "'exact', 'flat', 'hnsw' or a CodeIndex")
        return _check_code_index(kind, arr)
    if kind == "exact":
        return BinaryExactIndex(arr, **options)
    if kind == "flat":
        return BinaryFlatIndex(arr)
    if kind == "hnsw":
        return BinaryHNSWIndex.cached(arr, **options)
    raise InvalidParameterError("index", kind, "one of " + ", ".join(map(repr, CODE_INDEXES)))
