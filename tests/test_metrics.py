from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from deniable import InvalidParameterError
from deniable.metrics import METRICS, angular_from_cos, distances_to, paired_distances, pairwise_distances, unit_rows

FLOAT_METRICS = [m for m in METRICS if m != "hamming"]
vectors = arrays(np.float64, (3, 4), elements=st.floats(-10, 10, allow_nan=False, width=32))


@pytest.mark.parametrize("metric", FLOAT_METRICS)
@settings(max_examples=40, deadline=None)
@given(x=vectors)
def test_metric_axioms(metric: str, x: np.ndarray) -> None:
    d = pairwise_distances(x, x, metric)
    assert np.all(d >= -1e-12)
    np.testing.assert_allclose(d, d.T, atol=1e-9)
    # triangle inequality d(a, c) <= d(a, b) + d(b, c)
    assert d[0, 2] <= d[0, 1] + d[1, 2] + 1e-6
    np.testing.assert_allclose(distances_to(x[0], x, metric), d[0], atol=1e-6)
    np.testing.assert_allclose(paired_distances(x, x[::-1], metric), np.diag(d[:, ::-1]), atol=1e-6)


def test_known_values() -> None:
    a, b = np.array([[0.0, 0.0]]), np.array([[3.0, 4.0]])
    assert pairwise_distances(a, b, "euclidean")[0, 0] == 5
    assert pairwise_distances(a, b, "manhattan")[0, 0] == 7
    assert pairwise_distances(a, b, "chebyshev")[0, 0] == 4
    assert pairwise_distances([[1.0, 0]], [[0.0, 1]], "angular")[0, 0] == pytest.approx(0.5)
    codes = np.packbits(np.array([[1, 0, 1, 1, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0, 0, 1]], dtype=np.uint8), axis=1)
    assert pairwise_distances(codes[:1], codes[1:], "hamming")[0, 0] == 3


@pytest.mark.parametrize("bad", ["cosine", "sqeuclidean"])
def test_non_metrics_are_rejected_with_a_reason(bad: str) -> None:
    with pytest.raises(InvalidParameterError, match="triangle inequality"):
        pairwise_distances([[1.0]], [[2.0]], bad)


def test_unknown_metric() -> None:
    with pytest.raises(InvalidParameterError, match="one of euclidean"):
        pairwise_distances([[1.0]], [[2.0]], "minkowski")


def test_unit_rows_and_the_angular_formula() -> None:
    x = np.array([[3.0, 4.0], [0.0, 0.0], [-2.0, 0.0]])
    u = unit_rows(x)
    np.testing.assert_allclose(u, [[0.6, 0.8], [0.0, 0.0], [-1.0, 0.0]])
    assert unit_rows(x, np.float32).dtype == np.float32
    cos = np.array([1.0 + 1e-12, 0.0, -1.0 - 1e-12], dtype=np.float32)
    out = angular_from_cos(cos, out=cos)  # in place, in float32, clipped
    assert out is cos and out.dtype == np.float32
    np.testing.assert_allclose(out, [0.0, 0.5, 1.0], atol=1e-7)
    # a one-row side broadcasts in paired_distances (distances_to is that)
    np.testing.assert_allclose(paired_distances(x[:1], x, "angular"), distances_to(x[0], x, "angular"))


@pytest.mark.parametrize("metric", ["euclidean", "manhattan", "chebyshev"])
def test_paired_distances_are_those_of_float64_differences_whatever_the_dtypes(metric: str) -> None:
    # the conversions paired_distances makes to skip numpy's casting loop give the values of
    # np.subtract(x, y, dtype=float64): each side converted, then subtracted, bit for bit
    from deniable.metrics import from_differences

    rng = np.random.default_rng(21)
    big = rng.normal(size=(6, 9, 7))
    small = rng.normal(size=(6, 1, 7))
    dtypes = [(np.float32, np.float32), (np.float64, np.float32), (np.float32, np.float64), (np.float16, np.int64)]
    for dx, dy in dtypes:
        pairs = [
            (small.astype(dx), big.astype(dy)),
            (big.astype(dx), small.astype(dy)),
            (big.astype(dx), big.astype(dy)),
        ]
        for x, y in pairs:
            expect = from_differences(np.subtract(x, y, dtype=np.float64), metric)
            assert np.array_equal(paired_distances(x, y, metric), expect)
