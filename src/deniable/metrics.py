"""Distances between embedding vectors, vectorized.

Every name here is a true metric (identity, symmetry, triangle inequality), which
metric differential privacy needs. Cosine *distance* ``1 - cos`` is not a metric
(it breaks the triangle inequality); use ``"angular"`` = ``arccos(cos) / pi`` instead.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ._errors import InvalidParameterError

__all__ = [
    "METRICS",
    "angular_from_cos",
    "check_metric",
    "distances_to",
    "euclidean_from_squares",
    "from_differences",
    "hamming",
    "paired_distances",
    "pairwise_distances",
    "unit_rows",
]

METRICS = ("euclidean", "manhattan", "chebyshev", "angular", "hamming")

_NOT_METRICS = {
    "cosine": "1 - cosine similarity violates the triangle inequality, so the privacy proof "
    "does not hold; use 'angular' (arccos(cos)/pi), which is a true metric",
    "sqeuclidean": "squared Euclidean distance violates the triangle inequality; use 'euclidean'",
    "dot": "a similarity, not a distance",
    "inner_product": "a similarity, not a distance",
}


def check_metric(metric: object, allowed: tuple[str, ...] = METRICS) -> str:
    """Validate a metric name; non-metrics are rejected with the reason."""
    if isinstance(metric, str) and metric in _NOT_METRICS:
        raise InvalidParameterError("metric", metric, _NOT_METRICS[metric])
    if not isinstance(metric, str) or metric not in allowed:
        raise InvalidParameterError("metric", metric, "one of " + ", ".join(allowed))
    return metric


def unit_rows(x: npt.ArrayLike, dtype: npt.DTypeLike = np.float64) -> np.ndarray:
    """The rows of ``x`` scaled to unit Euclidean length, in ``dtype`` (zero rows stay zero).

    THE normalisation behind the angular metric: everything that needs unit vectors
    (distances, BLAS blocks of cosines, neighbour search) takes them from here. The
    norm is computed in float64 whatever ``dtype`` is.
    """
    v = np.asarray(x, dtype=np.float64)
    norm = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.asarray(v / np.where(norm == 0, 1.0, norm), dtype=dtype)


def angular_from_cos(cos: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """THE angular distance ``arccos(cos) / pi`` from cosines (clipped to [-1, 1]), in place with ``out``.

    Works in the dtype of ``cos`` (float32 blocks stay float32).
    """
    one = cos.dtype.type(1.0) if cos.dtype.kind == "f" else 1.0
    res = np.clip(cos, -one, one, out=out)
    np.arccos(res, out=res)
    res *= res.dtype.type(1.0 / np.pi)
    return res


def euclidean_from_squares(sq: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """THE Euclidean distance from squared distances (``sqrt(max(sq, 0))``: blocked ``|x|^2 - 2xy + |y|^2``
    products can round below 0), in place with ``out``."""
    res = np.maximum(sq, sq.dtype.type(0), out=out)
    np.sqrt(res, out=res)
    return res


def from_differences(diff: np.ndarray, metric: str) -> npt.NDArray[np.float64]:
    """THE euclidean / manhattan / chebyshev distance of difference vectors (over the last axis)."""
    if metric == "euclidean":
        return np.sqrt(np.einsum("...k,...k->...", diff, diff))
    if metric == "manhattan":
        return np.abs(diff).sum(axis=-1)
    if metric == "chebyshev":
        return np.abs(diff).max(axis=-1)
    raise InvalidParameterError("metric", metric, "euclidean, manhattan or chebyshev")


def _hamming(x: np.ndarray, y: np.ndarray) -> npt.NDArray[np.float64]:
    """Bits that differ between broadcast rows: uint8 rows are packed codes, other dtypes one bit per element."""
    if x.dtype == np.uint8 and y.dtype == np.uint8:
        return hamming(x, y).astype(np.float64)
    return (x != y).sum(axis=-1).astype(np.float64)


def pairwise_distances(a: npt.ArrayLike, b: npt.ArrayLike, metric: str = "euclidean") -> npt.NDArray[np.float64]:
    """The ``(len(a), len(b))`` matrix of distances, in float64.

    For ``hamming`` uint8 rows are packed codes (``np.packbits``); rows of any other
    dtype (bool, int) are bit vectors, one element a bit.
    """
    metric = check_metric(metric)
    x = np.atleast_2d(np.asarray(a))
    y = np.atleast_2d(np.asarray(b))
    if metric == "hamming":
        return _hamming(x[:, None, :], y[None, :, :])
    if metric == "angular":
        return angular_from_cos(unit_rows(x) @ unit_rows(y).T)
    return from_differences(x.astype(np.float64)[:, None, :] - y.astype(np.float64)[None, :, :], metric)


def distances_to(x: npt.ArrayLike, matrix: npt.ArrayLike, metric: str = "euclidean") -> npt.NDArray[np.float64]:
    """Distances from one vector ``x`` to every row of ``matrix`` (float64, length V).

    Computed as differences (not the ``|x|^2 - 2xy + |y|^2`` expansion), so a row equal
    to ``x`` is at distance exactly 0.
    """
    return paired_distances(np.asarray(x)[None, :], matrix, metric)


def paired_distances(a: npt.ArrayLike, b: npt.ArrayLike, metric: str = "euclidean") -> npt.NDArray[np.float64]:
    """Row-wise distances ``d(a[i], b[i])`` (float64) over the last axis; the other axes broadcast (a
    one-row side against the other; ``(r, 1, n)`` against ``(r, k, n)``: each row's vector read once)."""
    metric = check_metric(metric)
    x = np.atleast_2d(np.asarray(a))
    y = np.atleast_2d(np.asarray(b))
    if metric == "hamming":
        return _hamming(x, y)
    if metric == "angular":
        return angular_from_cos(np.einsum("...k,...k->...", *np.broadcast_arrays(unit_rows(x), unit_rows(y))))
    # float64 differences (the same values either way: each element is converted, then subtracted).
    # The side as large as the result, when not float64, is converted once into the result and the
    # other (converted too, if it is not float64) subtracted in place: a mixed-dtype subtract runs
    # numpy's buffered casting loop (13% of history-free TEM's CPU time at eps 1, exact_rows; 40% of
    # the prepared build's exact distances, float32 against float32); otherwise no copies.
    shape = np.broadcast_shapes(x.shape, y.shape)
    if y.dtype != np.float64 and y.shape == shape:
        diff = y.astype(np.float64)
        np.subtract(x.astype(np.float64, copy=False), diff, out=diff)
    elif x.dtype != np.float64 and x.shape == shape:
        diff = x.astype(np.float64)
        np.subtract(diff, y.astype(np.float64, copy=False), out=diff)
    else:
        diff = np.subtract(x, y, dtype=np.float64)
    return from_differences(diff, metric)


def hamming(a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Hamming distances between packed binary codes (``np.packbits`` rows), as int64.

    ``a`` and ``b`` are uint8 arrays whose last axis holds the bytes of a code; they
    broadcast like numpy arrays, e.g. ``hamming(x, y)`` row-wise for two ``(n, m // 8)``
    arrays, ``hamming(x[:, None], y[None])`` for the ``(len(x), len(y))`` matrix. The one
    Hamming distance of the library: BRR, calibration and the tests use it.
    """
    x = np.asarray(a)
    y = np.asarray(b)
    if x.dtype != np.uint8 or y.dtype != np.uint8:
        raise InvalidParameterError("codes", f"dtypes {x.dtype} and {y.dtype}", "packed uint8 codes")
    return np.bitwise_count(np.bitwise_xor(x, y)).sum(axis=-1, dtype=np.int64)
