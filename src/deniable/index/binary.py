"""Nearest-neighbour search over packed binary codes in Hamming distance.

The same contract as the float indexes (faiss's own: ``IndexBinaryFlat`` and
``IndexBinaryHNSW`` sit beside ``IndexFlatL2`` and ``IndexHNSWFlat``):
``search(queries, k) -> (D, I)`` with ``D`` the int32 Hamming distances (bits) and ``I``
the int64 row ids, both ``(len(queries), k)``, nearest first; ``d`` is the code length
in bits. Queries and codes are ``np.packbits`` rows: ``(m, bits // 8)`` uint8.

- ``"exact"``: numpy popcount brute force (:func:`deniable.metrics.hamming`), for tiny
  code sets (no faiss call).
- ``"flat"``: faiss ``IndexBinaryFlat`` (exact).
- ``"hnsw"``: faiss ``IndexBinaryHNSW`` (approximate, fast). Given the vocabulary the
  codes belong to (``owner``), it is the prepared artefact :data:`BINARY_HNSW_KIND`
  (:mod:`deniable.artefacts`: manifest, sha256 verified when opened, built once under a
  lock, ``deniable prepare -m brr --index hnsw`` builds it ahead), like the float HNSW;
  without one it is built in memory.

The exact kinds also offer ``range_search(queries, radius) -> (lims, D, I)`` (faiss's
layout: the results of query ``i`` are ``D[lims[i]:lims[i+1]]``, distances ``< radius``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from .._cache import cache_dir
from .._errors import EmbeddingError, InvalidParameterError
from ..artefacts import register_kind
from ..metrics import hamming
from ._base import NeighbourIndex
from .faiss_index import _FaissWrapper, add_in_chunks, read_flags

if TYPE_CHECKING:
    from ..embedding import Vocabulary

__all__ = [
    "BINARY_HNSW_KIND",
    "CODE_INDEXES",
    "BinaryExactIndex",
    "BinaryFlatIndex",
    "BinaryHNSWIndex",
    "CodeIndex",
    "binary_hnsw_params",
    "build_binary_hnsw_artefact",
    "check_code_queries",
    "codes_digest",
    "distinct_codes",
    "make_code_index",
]

#: Kinds of binary index :func:`make_code_index` builds.
CODE_INDEXES = ("exact", "flat", "hnsw")

_I = TypeVar("_I", bound="CodeIndex")
SearchResult = tuple[npt.NDArray[np.int32], npt.NDArray[np.int64]]
RangeResult = tuple[npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.int64]]


@runtime_checkable
class CodeIndex(NeighbourIndex[np.int32], Protocol):
    """The interface every binary backend offers: int32 Hamming distances (bits)."""


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


def distinct_codes(codes: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(unique, first, inverse)``: the distinct rows of packed ``codes`` (sorted bytewise), the
    row where each first occurs, and each row's distinct-code id (the rows a code index holds)."""
    arr = _packed(codes)
    rows = arr.view(np.dtype((np.void, arr.shape[1]))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    return np.ascontiguousarray(arr[first]), first, inverse.ravel()


def codes_digest(codes: npt.ArrayLike) -> str:
    """The sha256 of packed ``codes`` (shape and bytes): the key of a code index over codes given in memory."""
    arr = _packed(codes)
    h = hashlib.sha256(f"codes{arr.shape}".encode())
    h.update(arr.data)
    return h.hexdigest()


def _legacy_index_path(codes: np.ndarray, m: int, ef_construction: int) -> Path:
    """Where versions before the prepared-artefact store kept the HNSW index of ``codes`` (no checksum)."""
    name = f"binary-hnsw-m{m}-efc{ef_construction}.faissbin"
    return cache_dir().joinpath("artefacts", codes_digest(codes)[:20], name)


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
        show_progress: bool | None = None,
    ) -> BinaryHNSWIndex:
        import faiss

        arr = _packed(codes)
        index = faiss.IndexBinaryHNSW(arr.shape[1] * 8, m)
        index.hnsw.efConstruction = ef_construction
        add_in_chunks(index, arr, chunk, "building binary HNSW index", show_progress)
        return cls(index, ef_search)

    @classmethod
    def cached(
        cls,
        codes: npt.ArrayLike,
        *,
        owner: Vocabulary | None = None,
        codes_key: dict[str, Any] | None = None,
        m: int = 32,
        ef_construction: int = 100,
        ef_search: int = 128,
        notice: bool = True,
    ) -> BinaryHNSWIndex:
        """The HNSW index of ``codes`` from the prepared-artefact store, built once if needed.

        ``owner`` is the vocabulary the codes belong to (the store is keyed by its
        fingerprint); ``codes_key`` names the codes in the artefact's parameters: the
        ``{"kind": "binary-codes", "params": ...}`` of trained codes (so that ``deniable
        prepare`` can build it), else their sha256 (:func:`codes_digest`). Without an
        ``owner`` the index is built in memory and not kept. A damaged copy is rebuilt;
        a build says so on stderr (one line, unless ``notice=False``) and shows a
        progress bar on a terminal. The index is a function of the public codes only.
        """
        import faiss

        from ..artefacts import obtain_artefact

        arr = _packed(codes)
        if owner is None:
            return cls.build(arr, m=m, ef_construction=ef_construction, ef_search=ef_search)
        key = {"sha256": codes_digest(arr)} if codes_key is None else codes_key
        params = binary_hnsw_params(key, m, ef_construction)

        def write(folder: Path, show_progress: bool | None) -> None:
            _write_binary_hnsw(arr, folder, m, ef_construction, show_progress)

        message = (
            f"deniable: building the binary HNSW index of {arr.shape[0]:,} distinct {arr.shape[1] * 8}-bit "
            "codes (once, then kept as a prepared artefact)"
        )
        info = obtain_artefact(owner, BINARY_HNSW_KIND, params, notice=message if notice else None, builder=write)
        index = faiss.read_index_binary(str(info.file(BINARY_HNSW_FILE)), read_flags())
        return _check_code_index(cls(index, ef_search), arr)


#: The prepared-artefact kind of BRR's binary HNSW index (``index="hnsw"``).
BINARY_HNSW_KIND = "binary-hnsw"
BINARY_HNSW_FILE = "index.faissbin"


def binary_hnsw_params(codes_key: dict[str, Any], m: int = 32, ef_construction: int = 100) -> dict[str, Any]:
    """The store parameters of the binary HNSW graph over the distinct codes named by ``codes_key``."""
    return {"codes": dict(codes_key), "m": int(m), "ef_construction": int(ef_construction)}


def _write_binary_hnsw(codes: np.ndarray, folder: Path, m: int, efc: int, show_progress: bool | None) -> None:
    """Write the HNSW index of the (distinct) ``codes`` into ``folder``; a copy of the cache of versions
    before the store is taken over when faiss reads it and it holds these codes."""
    import faiss

    index: Any = None
    legacy = _legacy_index_path(codes, m, efc)
    if legacy.is_file():
        try:
            index = _check_code_index(BinaryHNSWIndex(faiss.read_index_binary(str(legacy))), codes).faiss_index
        except Exception:  # unreadable or of other codes: build instead
            index = None
    if index is None:
        index = BinaryHNSWIndex.build(codes, m=m, ef_construction=efc, show_progress=show_progress).faiss_index
    faiss.write_index_binary(index, str(folder / BINARY_HNSW_FILE))


def build_binary_hnsw_artefact(
    embedding: Vocabulary, params: dict[str, Any], folder: Path, show_progress: bool | None
) -> None:
    """The registered builder of :data:`BINARY_HNSW_KIND` (``deniable prepare -m brr --index hnsw``).

    It reads the trained codes named in ``params["codes"]`` (a ``binary-codes`` artefact,
    prepared first if needed) and indexes their distinct rows. An index over codes given
    in memory is built by the mechanism holding them, never here.
    """
    from ..binarize import CODES_KIND, binarize
    from ..embedding import Embedding

    key = params["codes"]
    if key.get("kind") != CODES_KIND or not isinstance(embedding, Embedding):
        raise InvalidParameterError(
            "codes", "given in memory", "trained codes (the index of given codes is built by the mechanism using them)"
        )
    cp = key["params"]
    codes = binarize(
        embedding,
        int(cp["bits"]),
        str(cp["method"]),
        seed=int(cp["seed"]),
        show_progress=show_progress,
        **cp["options"],
    )
    unique, _, _ = distinct_codes(codes)
    _write_binary_hnsw(unique, folder, int(params["m"]), int(params["ef_construction"]), show_progress)


def _check_code_index(index: _I, codes: np.ndarray) -> _I:
    if index.ntotal != codes.shape[0] or index.d != codes.shape[1] * 8:
        raise EmbeddingError(
            f"the code index holds {index.ntotal} codes of {index.d} bits, but there are {codes.shape[0]} "
            f"codes of {codes.shape[1] * 8} bits: they do not match (rebuild the index)"
        )
    return index


def make_code_index(codes: npt.ArrayLike, kind: str | CodeIndex = "flat", **options: Any) -> CodeIndex:
    """Build (or load from the prepared-artefact store) the binary index called ``kind`` over packed ``codes``.

    The sibling of :func:`deniable.index.make_index`; ``kind`` may also be a ready
    :class:`CodeIndex`, which is checked against the codes. ``options`` go to the index
    (``"hnsw"``: those of :meth:`BinaryHNSWIndex.cached`, ``owner`` included).
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


# the store's kind, declared where its builder is
register_kind(
    BINARY_HNSW_KIND,
    build_binary_hnsw_artefact,
    about="the binary HNSW index BRR decodes with",
)
