"""Calibrating epsilon: plausible-deniability statistics, embedding geometry, choosing epsilon.

The meaning of epsilon in metric DP depends on the embedding and the metric (seeds 000,
003), so it cannot be picked by a rule of thumb. These tools measure what a mechanism
does at a given epsilon:

- :func:`plausible_deniability` -- per word: ``N_w = Pr[M(w) = w]``, ``S_w`` (distinct
  outputs in ``samples`` draws), the eta-support, Shannon and min-entropy. Exact for TEM
  (the whole vocabulary, from its formula), sampled with confidence intervals otherwise.
- :func:`neighbour_distances` -- the distance from each word to its k-th neighbour.
- :func:`choose_epsilon` -- the largest epsilon whose worst-case statistics meet the
  user's constraints, with a check of the monotonicity the search assumes.
- :func:`explain` -- one word: likely outputs, N_w, S_w, guarantees against alternatives.
- :func:`privacy_ratio` (and friends, from :mod:`deniable.calibrate.compare`) -- comparing
  mechanisms over different metrics (seed 001).

Plots and the HTML report are in :mod:`deniable.report` (the ``report`` extra).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .choose import Constraints, EpsilonChoice, Evaluation, check_constraints, choose_epsilon
from .explain import Explanation, example_outputs, explain
from .geometry import DEFAULT_KS, NeighbourDistances, neighbour_distances
from .stats import (
    DEFAULT_ETA,
    DeniabilityStats,
    clopper_pearson,
    distinct_count_interval,
    plausible_deniability,
    tem_statistics,
)

if TYPE_CHECKING:
    from .compare import privacy_ratio

__all__ = [
    "DEFAULT_ETA",
    "DEFAULT_KS",
    "Constraints",
    "DeniabilityStats",
    "EpsilonChoice",
    "Evaluation",
    "Explanation",
    "NeighbourDistances",
    "check_constraints",
    "choose_epsilon",
    "clopper_pearson",
    "distinct_count_interval",
    "example_outputs",
    "explain",
    "neighbour_distances",
    "plausible_deniability",
    "privacy_ratio",
    "tem_statistics",
]

# Names re-exported lazily from modules written separately (so this package imports even
# before they exist): name -> module.
_LAZY = {"privacy_ratio": "deniable.calibrate.compare"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'deniable.calibrate' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(globals()))
