from __future__ import annotations

from typing import Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from .._errors import EmbeddingError, InvalidParameterError

_Distance = TypeVar("_Distance", bound=np.generic, covariant=True)


@runtime_checkable
class NeighbourIndex(Protocol[_Distance]):
    """The nearest-neighbour interface every backend offers (faiss's): ``search`` gives ``(D, I)``.

    ``D`` the distances (their dtype is the parameter), ``I`` the int64 row ids, both
    ``(len(queries), k)``, nearest first; ``ntotal`` rows of dimension ``d``.
    """

    @property
    def ntotal(self) -> int: ...

    @property
    def d(self) -> int: ...

    def search(self, queries: npt.ArrayLike, k: int) -> tuple[npt.NDArray[_Distance], npt.NDArray[np.int64]]: ...


@runtime_checkable
class Index(NeighbourIndex[np.float32], Protocol):
    """The interface every float backend offers: float32 distances."""


def check_queries(queries: npt.ArrayLike, d: int, k: int, ntotal: int) -> np.ndarray:
    q = np.ascontiguousarray(np.atleast_2d(np.asarray(queries, dtype=np.float32)))
    if q.ndim != 2 or q.shape[1] != d:
        raise InvalidParameterError("queries", f"shape {q.shape}", f"a (m, {d}) array")
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or not 1 <= k <= ntotal:
        raise InvalidParameterError("k", k, f"an integer in [1, {ntotal}]")
    return q


def check_index(index: Index, vocab_size: int, dim: int) -> Index:
    """Reject an index that was built for another embedding."""
    if index.ntotal != vocab_size or index.d != dim:
        raise EmbeddingError(
            f"the index holds {index.ntotal} vectors of dimension {index.d}, but the embedding "
            f"has {vocab_size} of dimension {dim}: they do not match (rebuild the index)"
        )
    return index
