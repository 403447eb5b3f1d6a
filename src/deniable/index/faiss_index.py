from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._progress import progress
from ..artefacts import register_kind
from ._base import Index, check_index, check_queries
from .exact import ExactIndex

if TYPE_CHECKING:
    from ..embedding import Embedding, Vocabulary


def add_in_chunks(
    index: Any, rows: np.ndarray, chunk: int, description: str, show_progress: bool | None = None
) -> None:
    """``index.add`` ``chunk`` rows at a time, with a progress bar (float and binary HNSW builds;
    ``show_progress``: default when stderr is a terminal)."""
    with progress(rows.shape[0], description, enabled=show_progress) as advance:
        for s in range(0, rows.shape[0], chunk):
            index.add(rows[s : s + chunk])
            advance(min(chunk, rows.shape[0] - s))


#: faiss's ``distance_compute_blas_threshold`` (compared with queries x dimensions since faiss 1.15,
#: default 128,000): exact searches of at least this many query floats use BLAS, as faiss < 1.15
#: did from 20 queries (20 x 50 dimensions). Measured on one thread, 400,000 x 50-d vectors
#: (faiss 1.15.1): 1 query 4 ms without BLAS vs 48 ms with it, 4 queries 28 vs 37 ms, 20 queries
#: 174 vs 63 ms, 300 queries 2.1-2.3 s vs 0.39 s (bench/bench_faiss_blas.py for the mechanisms).
BLAS_THRESHOLD = 1000


def load_faiss() -> Any:
    """``faiss``, with BLAS for exact searches from :data:`BLAS_THRESHOLD` query floats on
    (process-wide, set once; faiss >= 1.15 would wait for 128,000: 5x slower 300-token batches)."""
    import faiss

    global _blas_set
    if not _blas_set:
        cvar: Any = getattr(faiss, "cvar", None)
        # faiss < 1.15 counts queries (default 20, already small): only the newer, larger default is lowered
        if getattr(cvar, "distance_compute_blas_threshold", 0) > BLAS_THRESHOLD:
            cvar.distance_compute_blas_threshold = BLAS_THRESHOLD
        _blas_set = True
    return faiss


_blas_set = False


def read_flags() -> int:
    """faiss IO flags for reading a prepared index: its stored vectors or codes memory-mapped
    (``IO_FLAG_MMAP_IFC``, shared by every process; the HNSW graph itself is read), where faiss offers it."""
    import faiss

    return int(getattr(faiss, "IO_FLAG_MMAP_IFC", 0))


class _FaissWrapper:
    def __init__(self, index: Any) -> None:
        self.faiss_index = index

    @property
    def ntotal(self) -> int:
        return int(self.faiss_index.ntotal)

    @property
    def d(self) -> int:
        return int(self.faiss_index.d)

    def search(self, queries: npt.ArrayLike, k: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        q = check_queries(queries, self.d, k, self.ntotal)
        dist, ids = self.faiss_index.search(q, k)
        return dist, ids.astype(np.int64, copy=False)


class FlatIndex(_FaissWrapper):
    """faiss ``IndexFlatL2``: exact search (BLAS)."""

    def __init__(self, vectors: npt.ArrayLike) -> None:
        faiss = load_faiss()
        x = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
        index = faiss.IndexFlatL2(x.shape[1])
        index.add(x)
        super().__init__(index)


class HNSWIndex(_FaissWrapper):
    """faiss ``IndexHNSWFlat``: approximate, fast. ``ef_search`` trades speed for recall."""

    def __init__(self, index: Any, ef_search: int = 128) -> None:
        super().__init__(index)
        self.set_ef_search(ef_search)

    def set_ef_search(self, ef_search: int) -> None:
        """Set ``efSearch`` (the search breadth: higher is slower and agrees more with exact search)."""
        self.ef_search = int(ef_search)
        self.faiss_index.hnsw.efSearch = self.ef_search

    @classmethod
    def build(
        cls,
        vectors: npt.ArrayLike,
        *,
        m: int = 32,
        ef_construction: int = 100,
        ef_search: int = 128,
        chunk: int = 20000,
        show_progress: bool | None = None,
    ) -> HNSWIndex:
        import faiss

        x = np.ascontiguousarray(np.asarray(vectors, dtype=np.float32))
        index = faiss.IndexHNSWFlat(x.shape[1], m)
        index.hnsw.efConstruction = ef_construction
        add_in_chunks(index, x, chunk, "building HNSW index", show_progress)
        return cls(index, ef_search)

    @classmethod
    def cached(
        cls,
        embedding: Embedding,
        *,
        m: int = 32,
        ef_construction: int = 100,
        ef_search: int = 128,
        notice: bool = True,
    ) -> HNSWIndex:
        """Load the HNSW index for ``embedding`` from the prepared-artefact store, building it once if needed.

        It is the artefact :data:`HNSW_KIND` (:mod:`deniable.artefacts`: manifest, sha256
        verified when opened, built once under a lock; ``deniable prepare -m madlib``
        builds it ahead). A damaged copy is rebuilt. A build says so on stderr (one line,
        unless ``notice=False``) and shows a progress bar on a terminal. The index is a
        function of the public embedding only.
        """
        import faiss

        from ..artefacts import obtain_artefact

        info = obtain_artefact(
            embedding,
            HNSW_KIND,
            hnsw_artefact_params(m, ef_construction),
            notice=f"deniable: building the HNSW index of this embedding ({embedding.size:,} words; once, "
            "then kept as a prepared artefact)"
            if notice
            else None,
        )
        idx = cls(faiss.read_index(str(info.file(HNSW_FILE)), read_flags()), ef_search)
        check_index(idx, embedding.size, embedding.dim)
        return idx


#: The prepared-artefact kind of the float HNSW index (madlib's ``index="hnsw"`` and ``"auto"`` decode).
HNSW_KIND = "hnsw"
HNSW_FILE = "index.faiss"


def hnsw_artefact_params(m: int = 32, ef_construction: int = 100) -> dict[str, Any]:
    """The store parameters of the HNSW graph ``m`` / ``ef_construction`` (efSearch is set at load)."""
    return {"m": int(m), "ef_construction": int(ef_construction)}


def build_hnsw_artefact(
    embedding: Vocabulary, params: dict[str, Any], folder: Path, show_progress: bool | None
) -> None:
    """Write ``index.faiss``: the HNSW index of ``embedding``'s vectors (a registered artefact builder).

    A copy in the cache of versions before the store (``hnsw-m*-efc*.faiss``, no
    checksum) is taken over when faiss reads it and it fits the embedding, else built.
    """
    import faiss

    from ..embedding import Embedding

    embedding = Embedding.check(embedding)
    m, efc = int(params["m"]), int(params["ef_construction"])
    legacy = embedding.cache_path(f"hnsw-m{m}-efc{efc}.faiss")
    index: Any = None
    if legacy.is_file():
        try:
            index = faiss.read_index(str(legacy))
            check_index(_FaissWrapper(index), embedding.size, embedding.dim)
        except Exception:  # unreadable or of another embedding: build instead
            index = None
    if index is None:
        index = HNSWIndex.build(embedding.vectors, m=m, ef_construction=efc, show_progress=show_progress).faiss_index
    faiss.write_index(index, str(folder / HNSW_FILE))


def make_index(embedding: Embedding, kind: str | Index = "exact", **options: Any) -> Index:
    """Build (or load from the cache) the index called ``kind`` for ``embedding``.

    ``kind`` may also be a ready :class:`Index`, which is checked against the embedding.
    """
    if not isinstance(kind, str):
        if not isinstance(kind, Index):
            raise InvalidParameterError("index", type(kind).__name__, "'exact', 'flat', 'hnsw' or an Index")
        return check_index(kind, embedding.size, embedding.dim)
    if kind == "exact":
        return ExactIndex(embedding.vectors, **options)
    if kind == "flat":
        return FlatIndex(embedding.vectors)
    if kind == "hnsw":
        return HNSWIndex.cached(embedding, **options)
    raise InvalidParameterError("index", kind, "one of 'exact', 'flat', 'hnsw'")


# the store's kind, declared where its builder is
register_kind(
    HNSW_KIND,
    build_hnsw_artefact,
    about="the HNSW index madlib decodes with",
)
