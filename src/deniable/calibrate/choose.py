"""Choosing epsilon from worst-case plausible-deniability statistics (seed 000 sec. 5-6, seed 003 sec. 4).

Utility grows with epsilon, plausible deniability shrinks: ``N_w`` (the chance a word
survives unchanged) rises and ``S_w`` (its number of plausible outputs) falls. So the
user states what every word (or all but a few percent of words) must keep, e.g.
"no word returned unchanged more than half the time, and at least 10 distinct outputs
in 1000 draws", and we look for the **largest** epsilon that still meets it.

Search and its assumption
-------------------------
The search assumes *monotonicity*: the worst-case ``N_w`` never decreases and the
worst-case ``S_w`` never increases as epsilon grows, so the feasible epsilons form an
interval ``(0, eps*]``. It is true in the limit (eps -> 0: uniform output; eps -> inf:
the identity) and for TEM word by word (a larger eps puts relatively more weight on
nearer words), but not a theorem for every mechanism and sample. So we do not trust it:

1. evaluate the statistics on a grid (the given ``epsilons``, or ``grid`` points spaced
   geometrically over ``[low, high]``);
2. take the largest grid epsilon such that it and every smaller grid epsilon are
   feasible, and the next grid epsilon up (the first infeasible one);
3. without an explicit list, bisect (geometrically) between those two until they are
   within a factor ``1 + rtol``;
4. check monotonicity on *every* evaluated epsilon and report each violation.

The same words are used at every epsilon and, for sampled mechanisms, the same random
stream (common random numbers): for the multivariate Laplace mechanism the noise at
``eps`` is then ``z0 / eps`` for one fixed ``z0`` per draw, so the noisy vectors move
along fixed rays towards each word and its "unchanged" count can only grow with eps
(the word's Voronoi cell is convex) -- monotone draw by draw, not just on average.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .._errors import InvalidParameterError
from .._random import RandomState
from .._validation import check_choice, check_epsilon, check_int, check_positive
from ..mechanisms.base import Mechanism
from ._common import DEFAULT_ETA, WordsArg, resolve_words, statistics_generator
from .stats import DeniabilityStats, plausible_deniability

__all__ = ["Constraints", "EpsilonChoice", "Evaluation", "check_constraints", "choose_epsilon"]


@dataclass(frozen=True)
class Constraints:
    """What the statistics must satisfy.

    ``percentile = 100`` is the worst case over the words: ``max N_w <= max_unchanged``
    and ``min S_w >= min_support``. With ``percentile = 95``: the 95th percentile of
    ``N_w`` and the 5th percentile of ``S_w`` (5% of words may do worse). ``support`` is
    ``"distinct"`` (``S_w``, distinct outputs in ``samples`` draws, as in the papers) or
    ``"eta"`` (the eta-support). ``conservative`` uses the confidence bounds of sampled
    estimates (upper for ``N_w``, lower for ``S_w``) instead of the estimates.
    """

    max_unchanged: float | None = 0.5
    min_support: float | None = 10.0
    percentile: float = 100.0
    support: str = "distinct"
    conservative: bool = False

    def __post_init__(self) -> None:
        if self.max_unchanged is None and self.min_support is None:
            raise InvalidParameterError("constraints", "none", "max_unchanged and/or min_support")
        if self.max_unchanged is not None:
            v = float(self.max_unchanged)
            if not 0.0 <= v <= 1.0:
                raise InvalidParameterError("max_unchanged", self.max_unchanged, "a probability in [0, 1]")
        if self.min_support is not None:
            check_positive("min_support", self.min_support)
        p = float(self.percentile)
        if not (math.isfinite(p) and 0.0 < p <= 100.0):
            raise InvalidParameterError("percentile", self.percentile, "a number in (0, 100]")
        check_choice("support", self.support, ("distinct", "eta"))

    def describe(self) -> str:
        parts = []
        scope = "every word" if self.percentile >= 100 else f"{self.percentile:g}% of words"
        if self.max_unchanged is not None:
            parts.append(f"N_w <= {self.max_unchanged:g}")
        if self.min_support is not None:
            name = "S_w" if self.support == "distinct" else "eta-support"
            parts.append(f"{name} >= {self.min_support:g}")
        bounds = " (confidence bounds)" if self.conservative else ""
        return " and ".join(parts) + f" for {scope}{bounds}"


@dataclass(frozen=True)
class Evaluation:
    """The constrained statistics at one epsilon."""

    epsilon: float
    unchanged: float  # the percentile of N_w that is constrained (max for percentile 100)
    support: float  # the percentile of S_w (or eta-support) that is constrained (min for 100)
    feasible: bool
    stats: DeniabilityStats = field(repr=False)


@dataclass(frozen=True)
class EpsilonChoice:
    """The result of :func:`choose_epsilon`.

    Attributes
    ----------
    epsilon
        The largest evaluated epsilon that meets the constraints with every smaller
        evaluated epsilon meeting them too; None when even the smallest fails.
    next_epsilon
        The smallest evaluated epsilon above :attr:`epsilon` (it fails the constraints);
        None when every evaluated epsilon passed (widen the range).
    evaluations
        Every evaluation, sorted by epsilon.
    monotone
        Whether the constrained statistics were monotone over the evaluations.
    violations
        Human-readable descriptions of each monotonicity violation.
    """

    epsilon: float | None
    next_epsilon: float | None
    constraints: Constraints
    evaluations: list[Evaluation]
    monotone: bool
    violations: list[str]
    search: str

    @property
    def stats(self) -> dict[float, DeniabilityStats]:
        """epsilon -> its statistics."""
        return {e.epsilon: e.stats for e in self.evaluations}

    def summary(self) -> str:
        """A few lines for a terminal or a report."""
        lines = [f"constraints: {self.constraints.describe()}", f"search: {self.search}"]
        if self.epsilon is None:
            lines.append("no evaluated epsilon meets the constraints: try smaller values")
        else:
            lines.append(f"largest epsilon meeting them: {self.epsilon:g}")
        if self.next_epsilon is not None:
            lines.append(f"next evaluated epsilon (fails): {self.next_epsilon:g}")
        elif self.epsilon is not None:
            lines.append("every evaluated epsilon passed: the answer may be larger, widen the range")
        lines.append("monotone in epsilon: " + ("yes" if self.monotone else "NO -- " + "; ".join(self.violations)))
        return "\n".join(lines)


def check_constraints(stats: DeniabilityStats, constraints: Constraints) -> Evaluation:
    """Evaluate ``constraints`` on one epsilon's statistics."""
    c = constraints
    unchanged = stats.worst_unchanged(c.percentile, conservative=c.conservative)
    support = stats.worst_support(c.percentile, kind=c.support, conservative=c.conservative)
    ok = True
    if c.max_unchanged is not None:
        ok &= unchanged <= c.max_unchanged
    if c.min_support is not None:
        ok &= support >= c.min_support
    return Evaluation(stats.epsilon, unchanged, support, bool(ok), stats)


def _monotonicity(evals: list[Evaluation], constraints: Constraints, rtol: float = 1e-5) -> list[str]:
    """Violations of the assumed monotonicity, ignoring relative differences below ``rtol`` (rounding).

    ``rtol`` is the accuracy of the default float32 statistics (``plausible_deniability``
    with ``dtype=np.float32``; tested to 1e-5 on E[S_w]): where a statistic has reached its
    plateau (e.g. N_w = 1 - beta at large eps) smaller wiggles are rounding, not a trend.
    """
    out = []
    for a, b in itertools.pairwise(evals):
        span = f"from eps={a.epsilon:g} to eps={b.epsilon:g}"
        if constraints.max_unchanged is not None and b.unchanged < a.unchanged * (1 - rtol):
            out.append(f"the N_w statistic fell {span} ({a.unchanged:.4g} -> {b.unchanged:.4g})")
        if constraints.min_support is not None and b.support > a.support * (1 + rtol):
            out.append(f"the support statistic rose {span} ({a.support:.4g} -> {b.support:.4g})")
        if b.feasible and not a.feasible:
            out.append(f"eps={b.epsilon:g} passes although the smaller eps={a.epsilon:g} fails")
    return out


def choose_epsilon(
    mech_factory: Callable[[float], Mechanism],
    epsilons: Sequence[float] | None = None,
    *,
    low: float | None = None,
    high: float | None = None,
    max_unchanged: float | None = 0.5,
    min_support: float | None = 10.0,
    percentile: float = 100.0,
    support: str = "distinct",
    conservative: bool = False,
    words: WordsArg = None,
    samples: int = 1000,
    eta: float = DEFAULT_ETA,
    grid: int = 8,
    rtol: float = 0.02,
    max_evaluations: int = 40,
    random_state: RandomState = None,
    show_progress: bool | None = None,
    rng: RandomState = None,
    **stats_options: object,
) -> EpsilonChoice:
    """The largest epsilon whose statistics meet the constraints (see the module docstring).

    Parameters
    ----------
    mech_factory
        ``epsilon -> mechanism`` (e.g. ``lambda e: TruncatedExponential(emb, e)``).
    epsilons
        Evaluate exactly these epsilons (no bisection). Otherwise give ``low`` and ``high``.
    low, high
        The range to search: ``grid`` geometric points, then bisection to ``rtol``.
    max_unchanged, min_support, percentile, support, conservative
        The constraints, see :class:`Constraints`.
    words
        The words the constraints must hold for: ``None`` = the whole vocabulary, an int n
        = a random sample of n words (the same sample at every epsilon), or words / ids.
    samples, eta
        As in :func:`~deniable.calibrate.plausible_deniability`.
    random_state
        Draws the word sample and the seed of the common random stream used at every
        epsilon: None (default) = fresh OS randomness, an int = reproducible (no
        NotPrivateWarning: nothing private is released), a Generator. ``rng``: its old name.
    stats_options
        Passed on to :func:`~deniable.calibrate.plausible_deniability` (``method``,
        ``confidence``, ``dtype``, ...).
    """
    constraints = Constraints(max_unchanged, min_support, float(percentile), support, bool(conservative))
    gen = statistics_generator(random_state, rng)
    grid = check_int("grid", grid, minimum=2)
    max_evaluations = check_int("max_evaluations", max_evaluations, minimum=2)
    rtol = check_positive("rtol", rtol)
    if epsilons is not None:
        eps_list = sorted({check_epsilon(e) for e in epsilons})
        if not eps_list:
            raise InvalidParameterError("epsilons", list(epsilons), "at least one epsilon")
        bisect = False
        search = f"evaluated the given grid of {len(eps_list)} epsilons"
    else:
        if low is None or high is None:
            raise InvalidParameterError("epsilons", None, "a list of epsilons, or both low and high")
        lo, hi = check_epsilon(low, "low"), check_epsilon(high, "high")
        if hi <= lo:
            raise InvalidParameterError("high", high, f"a number > low={lo:g}")
        eps_list = list(np.geomspace(lo, hi, grid))
        bisect = True
        search = (
            f"{grid} geometric grid points in [{lo:g}, {hi:g}], then geometric bisection "
            f"to a relative width of {rtol:g}"
        )

    # one word sample and one random stream for every epsilon
    probe = mech_factory(float(eps_list[0]))
    word_ids = resolve_words(probe.embedding, words, gen)
    stream_seed = int(gen.integers(0, 2**63 - 1))
    cache: dict[float, Evaluation] = {}

    def evaluate(eps: float) -> Evaluation:
        if eps not in cache:
            mech = probe if eps == eps_list[0] else mech_factory(float(eps))
            st = plausible_deniability(
                mech,
                word_ids,
                samples=samples,
                eta=eta,
                random_state=stream_seed,
                show_progress=show_progress,
                **stats_options,  # type: ignore[arg-type]
            )
            cache[eps] = check_constraints(st, constraints)
        return cache[eps]

    evals = [evaluate(float(e)) for e in eps_list]
    best, nxt = _prefix(evals)
    if bisect and best is not None and nxt is not None:
        a, b = best.epsilon, nxt.epsilon
        while b / a > 1.0 + rtol and len(cache) < max_evaluations:
            mid = math.sqrt(a * b)
            if evaluate(mid).feasible:
                a = mid
            else:
                b = mid
    ordered = [cache[e] for e in sorted(cache)]
    best, nxt = _prefix(ordered)
    violations = _monotonicity(ordered, constraints)
    return EpsilonChoice(
        epsilon=None if best is None else best.epsilon,
        next_epsilon=None if nxt is None else nxt.epsilon,
        constraints=constraints,
        evaluations=ordered,
        monotone=not violations,
        violations=violations,
        search=search,
    )


def _prefix(evals: list[Evaluation]) -> tuple[Evaluation | None, Evaluation | None]:
    """The last feasible evaluation of the all-feasible prefix, and the one after it."""
    best = None
    for i, e in enumerate(evals):
        if not e.feasible:
            return best, e
        best = evals[i]
    return best, None
