"""Scores and confidence intervals: accuracy, AUC (Hanley-McNeil interval), a proportion's Clopper-Pearson
interval, MAP / MRR, t-intervals."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError

__all__ = ["accuracy", "auc", "auc_interval", "proportion_interval", "ranking_scores", "t_interval"]


def accuracy(probabilities: npt.ArrayLike, labels: npt.ArrayLike) -> float:
    """Share of rows whose most probable class is the label."""
    p = np.asarray(probabilities)
    y = np.asarray(labels)
    if p.ndim != 2 or len(p) != len(y) or len(y) == 0:
        raise InvalidParameterError("probabilities", p.shape, f"an (n, classes) array with n = {len(y)} > 0")
    return float(np.mean(p.argmax(axis=1) == y))


def auc(scores: npt.ArrayLike, members: npt.ArrayLike) -> float:
    """Area under the ROC curve of ``scores`` for the positive class ``members`` (ties count 1/2)."""
    from scipy.stats import rankdata

    s = np.asarray(scores, dtype=np.float64)
    m = np.asarray(members, dtype=bool)
    n1 = int(m.sum())
    n0 = len(m) - n1
    if n1 == 0 or n0 == 0 or len(s) != len(m):
        raise InvalidParameterError("members", f"{n1} in / {n0} out", "both members and non-members, one per score")
    r = rankdata(s)
    return float((r[m].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def auc_interval(value: float, n_in: int, n_out: int, level: float = 0.95) -> tuple[float, float]:
    """Hanley & McNeil (1982) normal-approximation interval for one AUC estimate, clipped to [0, 1]."""
    from scipy.stats import norm

    a = float(value)
    q1 = a / (2 - a)
    q2 = 2 * a * a / (1 + a)
    var = (a * (1 - a) + (n_in - 1) * (q1 - a * a) + (n_out - 1) * (q2 - a * a)) / (n_in * n_out)
    half = float(norm.ppf(0.5 + level / 2)) * math.sqrt(max(var, 0.0))
    return max(0.0, a - half), min(1.0, a + half)


def proportion_interval(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson interval of ``successes / trials`` (:func:`deniable.calibrate.clopper_pearson`, the one
    implementation) as floats; NaN bounds without trials."""
    from ..calibrate import clopper_pearson

    if trials == 0:
        return math.nan, math.nan
    lo, hi = clopper_pearson(int(successes), int(trials), level)
    return float(lo), float(hi)


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and Student-t interval over independent repeats; NaN bounds for fewer than 2 values."""
    from scipy.stats import t

    v = np.asarray([x for x in values if not math.isnan(x)], dtype=np.float64)
    if len(v) == 0:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if len(v) < 2:
        return mean, math.nan, math.nan
    half = float(t.ppf(0.5 + level / 2, len(v) - 1)) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return mean, mean - half, mean + half


def ranking_scores(scores: npt.ArrayLike, relevant: npt.ArrayLike, groups: npt.ArrayLike) -> tuple[float, float]:
    """Mean average precision and mean reciprocal rank over the groups (one group = one question).

    Candidates are sorted by descending score; ties are broken pessimistically (a
    relevant candidate ranks below irrelevant ones with the same score), so a
    constant scorer does not look good. Groups without a relevant candidate are skipped.
    """
    s = np.asarray(scores, dtype=np.float64)
    rel = np.asarray(relevant, dtype=bool)
    g = np.asarray(groups)
    if not (len(s) == len(rel) == len(g)) or len(s) == 0:
        raise InvalidParameterError("scores", len(s), "as many scores, relevance flags and groups, at least one")
    order = np.lexsort((rel, -s, g))  # by group, then score desc, then irrelevant first
    g_o, rel_o = g[order], rel[order]
    starts = np.flatnonzero(np.r_[True, g_o[1:] != g_o[:-1]])
    pos = np.arange(len(g_o)) - np.repeat(starts, np.diff(np.r_[starts, len(g_o)])) + 1
    group_id = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(g_o)]))
    hits = np.cumsum(rel_o) - np.repeat(np.r_[0, np.cumsum(rel_o)[starts[1:] - 1]], np.diff(np.r_[starts, len(g_o)]))
    n_rel = np.bincount(group_id, weights=rel_o.astype(float))
    prec_at_hit = np.where(rel_o, hits / pos, 0.0)
    ap_sum = np.bincount(group_id, weights=prec_at_hit)
    first = np.full(len(starts), np.inf)
    np.minimum.at(first, group_id[rel_o], pos[rel_o].astype(float))
    keep = n_rel > 0
    if not keep.any():
        raise InvalidParameterError("relevant", 0, "at least one relevant candidate")
    ap = ap_sum[keep] / n_rel[keep]
    rr = 1.0 / first[keep]
    return float(ap.mean()), float(rr.mean())
