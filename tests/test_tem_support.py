"""Shared helpers for the TEM tests: a G-test against ``distribution()``, and deliberately wrong samplers."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.stats import chi2

from deniable.mechanisms.tem import _envelope, _lazy, _tables

ALPHA = 1e-6  # false-alarm rate of every goodness-of-fit test


def g_test_pvalue(samples: npt.NDArray[np.int64], probs: npt.NDArray[np.float64], min_expected: float = 5.0) -> float:
    """p-value of the G-test of ``samples`` (ids) against ``probs`` over the vocabulary.

    Outputs with expected count below ``min_expected`` are pooled into one bin, so the
    chi-square approximation holds; an output with probability 0 that occurs gives p = 0.
    """
    n = samples.size
    counts = np.bincount(samples, minlength=probs.size).astype(np.float64)
    if np.any(counts[probs <= 0] > 0):
        return 0.0
    expected = probs * n
    big = expected >= min_expected
    obs = list(counts[big])
    exp = list(expected[big])
    if (~big).any():
        obs.append(counts[~big].sum())
        exp.append(expected[~big].sum())
    o = np.asarray(obs)
    e = np.asarray(exp)
    keep = e > 0
    o, e = o[keep], e[keep]
    nz = o > 0
    g = 2.0 * float(np.sum(o[nz] * np.log(o[nz] / e[nz])))
    df = max(int(keep.sum()) - 1, 1)
    return float(chi2.sf(g, df))


def break_the_bottom(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A broken TEM from now on: the bottom element scores ``-gamma`` and forgets ``+ (2/eps) ln |W \\ L_w|``."""
    right = _lazy.table_rest

    def wrong(mech, w, table):  # type: ignore[no-untyped-def]
        others, cum, bottom = right(mech, w, table)
        n_out = mech.embedding.size - np.asarray(table[0]).size
        return others, cum, (bottom / n_out if n_out else 0.0)  # wrong: mass exp(-a gamma), not n_out times it

    monkeypatch.setattr(_lazy, "table_rest", wrong)


def force_path(monkeypatch, path: str, knn_k: int = 8) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Force a sampler: "uniform", "table", "knn" or "shells" (constructor options returned).

    "knn" also shrinks the k-NN tables to ``knn_k`` neighbours, so that the small test
    vocabularies exercise the rejection part of the envelope (not only its explicit part).
    """
    if path == "uniform":
        monkeypatch.setattr(_lazy, "_UNIFORM_MIN_RATE", 0.0)
        return {}
    monkeypatch.setattr(_lazy, "_UNIFORM_MIN_RATE", 2.0)  # never
    if path in ("shells", "table"):
        monkeypatch.setattr(_envelope, "KNN_MAX_RATIO", 0.0)  # k-NN envelope never usable
        monkeypatch.setattr(_envelope, "KNN_MAX_EST", 0.0)
        monkeypatch.setattr(_lazy, "_KNN_PREFER_RATIO", 0.0)
    if path == "shells":
        return {"table_max": 1}
    if path == "knn":
        monkeypatch.setattr(_tables, "_KNN_K", knn_k)
        monkeypatch.setattr(_envelope, "KNN_MAX_RATIO", float("inf"))
        return {"table_max": 1}
    return {}
