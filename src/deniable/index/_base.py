from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from .._errors import EmbeddingError, InvalidParameterError


@runtime_checkable
class Index(Protocol):
    """The nearest-neighbour interface every backend offers."""

    @property
    def ntotal(self) -> int: ...

    @property
    def d(self) -> int: ...

    def search(self, queries: npt.ArrayLike, k: int) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]: ...


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
