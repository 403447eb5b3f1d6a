"""Confidence intervals of sampled statistics: Clopper-Pearson for N_w, self-bounding concentration for S_w."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from .._validation import check_probability

__all__ = ["clopper_pearson", "distinct_count_interval"]


def clopper_pearson(
    successes: npt.ArrayLike, trials: npt.ArrayLike, confidence: float = 0.95
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Exact (Clopper-Pearson) two-sided interval for a binomial proportion, vectorized.

    Coverage is at least ``confidence`` for every true proportion (it is conservative).
    """
    from scipy.special import betaincinv

    confidence = check_probability("confidence", confidence)
    x = np.asarray(successes, dtype=np.float64)
    n = np.broadcast_to(np.asarray(trials, dtype=np.float64), x.shape)
    alpha = 1.0 - confidence
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(x > 0, betaincinv(np.maximum(x, 1e-300), n - x + 1, alpha / 2), 0.0)
        hi = np.where(x < n, betaincinv(x + 1, np.maximum(n - x, 1e-300), 1 - alpha / 2), 1.0)
    return np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)


def distinct_count_interval(
    observed: npt.ArrayLike, samples: int, confidence: float = 0.95, *, vocab_size: int | None = None
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """A confidence interval for ``E[D]`` from one observed distinct count ``D`` in ``samples`` draws.

    ``D`` (the number of distinct values among independent draws) is a *self-bounding*
    function of the draws: removing one draw lowers it by 0 or 1, and the total decrease
    over all draws is at most ``D``. Hence (Boucheron, Lugosi, Massart, *Concentration
    Inequalities*, Thm. 6.12), with ``m = E[D]``::

        Pr[D >= m + t] <= exp(-t^2 / (2m + 2t/3)),    Pr[D <= m - t] <= exp(-t^2 / (2m)).

    Inverting both tails at ``alpha/2`` (``L = ln(2/alpha)``) gives the interval
    ``[d - (sqrt(4L^2/9 + 2dL) - 2L/3), d + L + sqrt(2dL + L^2)]`` clipped to
    ``[1, min(samples, vocab_size)]``. It holds for every output distribution (no
    asymptotics, no extra draws) and is conservative: its coverage is at least
    ``confidence`` and usually much higher. (A bootstrap of a distinct count is biased
    low, since a resample repeats draws, so it is not used.)
    """
    confidence = check_probability("confidence", confidence)
    d = np.asarray(observed, dtype=np.float64)
    big_l = math.log(2.0 / (1.0 - confidence))
    lo = d - (np.sqrt(4.0 * big_l * big_l / 9.0 + 2.0 * d * big_l) - 2.0 * big_l / 3.0)
    hi = d + big_l + np.sqrt(2.0 * d * big_l + big_l * big_l)
    top = float(samples if vocab_size is None else min(samples, vocab_size))
    return np.clip(lo, 1.0, top), np.clip(hi, 1.0, top)
