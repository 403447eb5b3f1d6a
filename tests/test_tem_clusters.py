"""TEM's k-means of the public vectors (``tem/_shared.py:cluster_labels``): the search order and
seeds of the k-NN build and the clusters of the far bounds.

Any labels give correct artefacts (the bounds hold for any clustering); these check that the
labels are a function of the vectors alone and that they are k-means labels: a fixed point of
Lloyd's iterations, no cluster left empty where the points allow it.
"""

from __future__ import annotations

import numpy as np
import pytest

from deniable.mechanisms.tem._shared import cluster_labels


def _blobs(angular: bool, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((6, 12)) * 10.0
    if angular:  # blobs of directions, the points at different lengths
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    truth = np.repeat(np.arange(6), 150)
    x = centres[truth] + rng.standard_normal((truth.size, 12)) * (0.05 if angular else 0.5)
    if angular:
        x *= rng.uniform(0.5, 3.0, size=(truth.size, 1))
    return x.astype(np.float32), truth


@pytest.mark.parametrize("angular", [False, True])
def test_the_labels_are_a_fixed_point_of_lloyds_iterations(angular: bool) -> None:
    """Every point's label is its nearest cluster mean (largest inner product with the unit mean,
    angular): k-means converged (every point is in the sample here: 900 <= 64 x 15)."""
    x, truth = _blobs(angular)
    labels = cluster_labels(x, 15, angular)
    assert labels.dtype == np.int64 and labels.shape == truth.shape
    assert np.unique(labels).size == 15
    means = np.stack([x[labels == c].astype(np.float64).mean(axis=0) for c in range(15)])
    x64 = x.astype(np.float64)
    if angular:  # the largest inner product with the unit means
        score = -(x64 @ (means / np.linalg.norm(means, axis=1, keepdims=True)).T)
    else:
        score = ((x64[:, None, :] - means[None]) ** 2).sum(axis=2)
    own = score[np.arange(x.shape[0]), labels]
    # up to the float32 rounding of the assignment's |c|^2 - 2 x.c (ties within it may go either way)
    tol = 1e-5 * (1.0 + (x64 * x64).sum(axis=1) + (means * means).sum(axis=1).max())
    assert (own <= score.min(axis=1) + tol).all()


@pytest.mark.parametrize("angular", [False, True])
def test_labels_are_a_function_of_the_vectors(angular: bool) -> None:
    x, _ = _blobs(angular, seed=3)
    a = cluster_labels(x, 40, angular)
    b = cluster_labels(x.copy(), 40, angular)
    assert np.array_equal(a, b)
    assert a.min() >= 0 and a.max() < 40


@pytest.mark.parametrize("angular", [False, True])
def test_the_labels_do_not_depend_on_the_build_workers(monkeypatch: pytest.MonkeyPatch, angular: bool) -> None:
    """The assignments' rows are split across the build's workers (each row's search its own):
    the same labels on 1 and 2 workers."""
    from deniable.index import exact
    from deniable.mechanisms.tem import _shared

    x, _ = _blobs(angular, seed=5)
    x = np.concatenate([x, x[::-1] * np.float32(1.01)])  # 1,800 rows: a block of >= 256 rows a worker
    asked: list[int] = []
    real = exact.row_block

    def row_block(m: int, query_block: int, workers: int) -> int:
        asked.append(workers)
        return real(m, query_block, workers)

    monkeypatch.setattr(exact, "row_block", row_block)
    labels = {}
    try:
        for n in (1, 2):
            _shared.set_build_workers(n)
            labels[n] = cluster_labels(x, 30, angular)
    finally:
        _shared.set_build_workers(None)
    assert set(asked) == {1, 2}  # the split was asked of one, then of two workers
    assert np.array_equal(labels[1], labels[2])


def test_a_sample_is_drawn_where_there_are_many_points_a_cluster() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5_000, 8)).astype(np.float32)  # more than 64 points a cluster
    labels = cluster_labels(x, 10, False)
    counts = np.bincount(labels, minlength=10)
    assert counts.size == 10 and (counts > 0).all()


def test_empty_clusters_are_split_off_the_largest() -> None:
    # 3 far-apart groups of identical points, 5 clusters: the draw of the first centroids may put
    # two on one group; a cluster that ends empty takes half of the largest one
    x = np.repeat(np.array([[0.0, 0.0], [100.0, 0.0], [0.0, 100.0]], dtype=np.float32), [50, 30, 20], axis=0)
    x = x + np.random.default_rng(2).standard_normal(x.shape).astype(np.float32) * 0.01
    labels = cluster_labels(x, 5, False)
    assert labels.min() >= 0 and labels.max() < 5
    # the groups are never mixed: each label lies in one group
    group = np.repeat(np.arange(3), [50, 30, 20])
    for lab in np.unique(labels):
        assert np.unique(group[labels == lab]).size == 1


def test_one_cluster_or_more_clusters_than_points() -> None:
    x = np.random.default_rng(4).standard_normal((7, 3)).astype(np.float32)
    assert (cluster_labels(x, 1, False) == 0).all()
    labels = cluster_labels(x, 20, False)  # at most one a point
    assert labels.min() >= 0 and np.unique(labels).size == 7
