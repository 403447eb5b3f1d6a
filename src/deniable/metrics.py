"""Distances between embedding vectors, vectorized.

Every name here is a true metric (identity, symmetry, triangle inequality), which
metric differential privacy needs. Cosine *distance* ``1 - cos`` is not a metric
(it breaks the triangle inequality); use ``"angular"`` = ``arccos(cos) / pi`` instead.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ._errors import InvalidParameterError

__all__ = ["METRICS", "check_metric", "distances_to", "hamming", "paired_distances", "pairwise_distances"]

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


def _angular_from_cos(cos: np.ndarray) -> np.ndarray:
    return np.arccos(np.clip(cos, -1.0, 1.0)) / np.pi


def _unit(x: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norm == 0, 1.0, norm)


def pairwise_distances(a: npt.ArrayLike, b: npt.ArrayLike, metric: str = "euclidean") -> npt.NDArray[np.float64]:
    """The ``(len(a), len(b))`` matrix of distances, in float64.

    For ``hamming`` uint8 rows are packed codes (``np.packbits``); rows of any other
    dtype (bool, int) are bit vectors, one element a bit.
    """
    metric = check_metric(metric)
    x = np.atleast_2d(np.asarray(a))
    y = np.atleast_2d(np.asarray(b))
    if metric == "hamming":
        if x.dtype == np.uint8 and y.dtype == np.uint8:
            xor = np.bitwise_xor(x[:, None, :], y[None, :, :])
            return np.unpackbits(xor, axis=-1).sum(axis=-1).astype(np.float64)
        return (x[:, None, :] != y[None, :, :]).sum(axis=-1).astype(np.float64)
    x = x.astype(np.float64)
    y = y.astype(np.float64)
    if metric == "euclidean":
        diff = x[:, None, :] - y[None, :, :]
        return np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
    if metric == "manhattan":
        return np.abs(x[:, None, :] - y[None, :, :]).sum(axis=-1)
    if metric == "chebyshev":
        return np.abs(x[:, None, :] - y[None, :, :]).max(axis=-1)
    return _angular_from_cos(_unit(x) @ _unit(y).T)


def distances_to(x: npt.ArrayLike, matrix: npt.ArrayLike, metric: str = "euclidean") -> npt.NDArray[np.float64]:
    """Distances from one vector ``x`` to every row of ``matrix`` (float64, length V).

    Computed as differences (not the ``|x|^2 - 2xy + |y|^2`` expansion), so a row equal
    to ``x`` is at distance exactly 0.
    """
    metric = check_metric(metric)
    v = np.asarray(x)
    m = np.asarray(matrix)
    if metric == "hamming":
        if m.dtype == np.uint8 and v.dtype == np.uint8:
            return np.unpackbits(np.bitwise_xor(m, v[None, :]), axis=1).sum(axis=1).astype(np.float64)
        return (m != v[None, :]).sum(axis=1).astype(np.float64)
    diff = m.astype(np.float64) - v.astype(np.float64)[None, :]
    if metric == "euclidean":
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))
    if metric == "manhattan":
        return np.abs(diff).sum(axis=1)
    if metric == "chebyshev":
        return np.abs(diff).max(axis=1)
    return _angular_from_cos(_unit(m.astype(np.float64)) @ _unit(v.astype(np.float64)))


def paired_distances(a: npt.ArrayLike, b: npt.ArrayLike, metric: str = "euclidean") -> npt.NDArray[np.float64]:
    """Row-wise distances ``d(a[i], b[i])`` (float64, length len(a))."""
    metric = check_metric(metric)
    x = np.atleast_2d(np.asarray(a))
    y = np.atleast_2d(np.asarray(b))
    if metric == "hamming":
        if x.dtype == np.uint8 and y.dtype == np.uint8:
            return np.unpackbits(np.bitwise_xor(x, y), axis=1).sum(axis=1).astype(np.float64)
        return (x != y).sum(axis=1).astype(np.float64)
    diff = x.astype(np.float64) - y.astype(np.float64)
    if metric == "euclidean":
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))
    if metric == "manhattan":
        return np.abs(diff).sum(axis=1)
    if metric == "chebyshev":
        return np.abs(diff).max(axis=1)
    cos = (_unit(x.astype(np.float64)) * _unit(y.astype(np.float64))).sum(axis=1)
    return _angular_from_cos(cos)


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
