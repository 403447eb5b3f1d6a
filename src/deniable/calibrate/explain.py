"""What a mechanism does to one word: likely outputs, N_w, S_w and the guarantee against alternatives."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._errors import InvalidParameterError
from .._random import RandomState
from .._validation import check_int, check_probability
from ..mechanisms.base import Mechanism
from ._common import DEFAULT_ETA, statistics_generator
from ._exact import distribution_statistics_of, is_exact
from ._intervals import clopper_pearson
from ._sampled import statistics_from_draws

__all__ = ["Explanation", "Guarantee", "Output", "example_outputs", "explain"]


@dataclass(frozen=True)
class Output:
    """One likely output and its probability (with an interval when estimated)."""

    word: str
    id: int
    probability: float
    low: float
    high: float
    distance: float


@dataclass(frozen=True)
class Guarantee:
    """The metric-DP bound between the word and an alternative input ``other``.

    For every output y: ``Pr[M(word) = y] <= exp(bound) * Pr[M(other) = y]``.
    """

    other: str
    distance: float
    bound: float  # eps * d(word, other)
    ratio: float  # exp(bound)


@dataclass(frozen=True)
class Explanation:
    """Everything :func:`explain` found about one word at one epsilon."""

    word: str
    id: int
    mechanism: str
    epsilon: float
    metric: str
    exact: bool
    samples: int
    eta: float
    confidence: float
    outputs: list[Output]
    n_w: float
    n_w_low: float
    n_w_high: float
    s_w: float
    s_w_low: float
    s_w_high: float
    support: int
    shannon: float
    min_entropy: float
    guarantees: list[Guarantee]
    other_mass: float  # probability of every output not listed
    other_outputs: int  # how many outputs that is (exact), or distinct unlisted ones seen (sampled)
    ball_size: int | None = None
    draws: int = 0

    def render(self) -> str:
        """A plain-text report."""
        kind = "exact" if self.exact else f"estimated from {self.draws:,} draws, {self.confidence:.0%} intervals"
        lines = [
            f"{self.word!s}  --  {self.mechanism}, epsilon={self.epsilon:g}, metric={self.metric} ({kind})",
            "",
            f"  N_w = Pr[M(w) = w]        {_pi(self.n_w, self.n_w_low, self.n_w_high, self.exact)}",
        ]
        s_label = "expected distinct outputs" if self.exact else "distinct outputs"
        lines.append(f"  S_w = {s_label} in {self.samples:,} draws")
        lines.append(f"                            {_num(self.s_w, self.s_w_low, self.s_w_high, self.exact)}")
        approx = "" if self.exact else " (plug-in)"
        lines.append(f"  eta-support (eta={self.eta:g}){approx}     {self.support:,} words")
        lines.append(f"  Shannon entropy{approx}          {self.shannon:.3f} bits")
        lines.append(f"  min-entropy{approx}              {self.min_entropy:.3f} bits")
        if self.ball_size is not None:
            lines.append(f"  |L_w| (words within gamma)  {self.ball_size:,}")
        lines += ["", f"  {'output':<24} {'probability':>24} {'distance':>10}"]
        for o in self.outputs:
            lines.append(f"  {o.word:<24} {_pi(o.probability, o.low, o.high, self.exact):>24} {o.distance:>10.4g}")
        if self.other_mass > 0:
            n = f"{self.other_outputs:,} other outputs" if self.exact else "all other outputs"
            lines.append(f"  {'(' + n + ')':<24} {self.other_mass:>24.4g}")
        if self.guarantees:
            lines += [
                "",
                "  guarantee: Pr[M(w)=y] <= exp(eps*d(w,w')) * Pr[M(w')=y] for every output y",
                "  "
                + "alternative w'".ljust(24)
                + " "
                + "d(w,w')".rjust(10)
                + " "
                + "eps*d".rjust(10)
                + " "
                + "exp(eps*d)".rjust(12),
            ]
            for g in self.guarantees:
                lines.append(f"  {g.other:<24} {g.distance:>10.4g} {g.bound:>10.4g} {_exp(g.ratio):>12}")
        return "\n".join(lines)


def _exp(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:.4g}"


def _pi(p: float, lo: float, hi: float, exact: bool) -> str:
    if exact:
        return f"{p:.4g}"
    return f"{p:.4g} [{lo:.3g}, {hi:.3g}]"


def _num(v: float, lo: float, hi: float, exact: bool) -> str:
    if exact:
        return f"{v:.1f}"
    return f"{v:.0f} [{lo:.0f}, {hi:.0f}]"


def explain(
    mechanism: Mechanism,
    word: str | int,
    *,
    top: int = 10,
    against: Sequence[str | int] | None = None,
    samples: int = 1000,
    draws: int = 10000,
    eta: float = DEFAULT_ETA,
    confidence: float = 0.95,
    random_state: RandomState = None,
    rng: RandomState = None,
) -> Explanation:
    """Likely outputs of ``mechanism`` on ``word``, its statistics, and guarantees against alternatives.

    Exact for mechanisms with ``compact_distribution``/``distribution`` (TEM); otherwise
    estimated from ``draws`` draws (one ``privatize`` call): output probabilities with
    Clopper-Pearson intervals, ``N_w`` likewise, and ``S_w`` as the distinct outputs among
    the first ``samples`` draws (the papers' estimator). ``against`` are alternative
    inputs ``w'`` for the bound ``eps * d(w, w')`` (default: the most likely other outputs,
    i.e. the words ``w`` is easiest to confuse with). ``random_state``: None (OS
    randomness), an int (reproducible, no NotPrivateWarning: an explanation is not a
    release of user text) or a Generator; ``rng`` is its old name.
    """
    top = check_int("top", top, minimum=1)
    samples = check_int("samples", samples, minimum=1)
    draws = check_int("draws", draws, minimum=1)
    eta = check_probability("eta", eta)
    emb = mechanism.embedding
    wid = mechanism._id(word)
    name = emb.words([wid])[0]
    metric = str(getattr(mechanism, "metric", ""))
    ball = None
    if is_exact(mechanism):
        (ids, probs, n_out, _), (n_w, s_w, support, shannon, hmin) = distribution_statistics_of(
            mechanism, wid, samples=samples, eta=eta
        )
        if getattr(type(mechanism), "has_compact_distribution", False):
            ball = int(ids.size)
        order = np.argsort(-probs, kind="stable")[:top]
        top_ids, top_p = ids[order], probs[order]
        lows = highs = top_p
        listed = float(top_p.sum())
        other_mass = max(0.0, 1.0 - listed)
        other_n = int(ids.size - top_ids.size + n_out)
        n_lo = n_hi = n_w
        s_lo = s_hi = s_w
        exact = True
    else:
        gen = statistics_generator(random_state, rng)
        n = max(draws, samples)
        out = mechanism.privatize(np.full(n, wid, dtype=np.int64), gen)
        st = statistics_from_draws([wid], out[None, :samples], eta=eta, confidence=confidence, vocab_size=emb.size)
        counts = np.bincount(out, minlength=emb.size)
        seen = np.flatnonzero(counts)
        order = seen[np.argsort(-counts[seen], kind="stable")][:top]
        top_ids = order.astype(np.int64)
        lows, highs = clopper_pearson(counts[top_ids], n, confidence)
        top_p = counts[top_ids] / n
        full = statistics_from_draws([wid], out[None, :], eta=eta, confidence=confidence, vocab_size=emb.size)
        n_w, n_lo, n_hi = float(full["n_w"][0]), float(full["n_w_low"][0]), float(full["n_w_high"][0])
        s_w, s_lo, s_hi = float(st["s_w"][0]), float(st["s_w_low"][0]), float(st["s_w_high"][0])
        support = int(full["support"][0])
        shannon, hmin = float(full["shannon"][0]), float(full["min_entropy"][0])
        other_mass = max(0.0, 1.0 - float(top_p.sum()))
        other_n = int(seen.size - top_ids.size)
        exact = False
    words_top = emb.words(top_ids)
    outputs = [
        Output(wd, int(i), float(p), float(lo), float(hi), float(mechanism.distance(wid, int(i))))
        for wd, i, p, lo, hi in zip(words_top, top_ids.tolist(), top_p, lows, highs, strict=True)
    ]
    if against is None:
        alt_ids = [o.id for o in outputs if o.id != wid][:3]
    else:
        alt_ids = [mechanism._id(a) for a in against]
    guarantees = []
    for a in alt_ids:
        d = float(mechanism.distance(wid, a))
        bound = float(mechanism.guarantee(wid, a))  # eps * d, or what the mechanism actually bounds
        guarantees.append(Guarantee(emb.words([a])[0], d, bound, math.exp(bound) if bound < 700 else math.inf))
    if not outputs:
        raise InvalidParameterError("word", "<not shown>", "a word with at least one output")
    return Explanation(
        word=name,
        id=wid,
        mechanism=str(getattr(mechanism, "name", type(mechanism).__name__)),
        epsilon=float(mechanism.epsilon),
        metric=metric,
        exact=exact,
        samples=samples,
        eta=eta,
        confidence=confidence,
        outputs=outputs,
        n_w=float(n_w),
        n_w_low=float(n_lo),
        n_w_high=float(n_hi),
        s_w=float(s_w),
        s_w_low=float(s_lo),
        s_w_high=float(s_hi),
        support=int(support),
        shannon=float(shannon),
        min_entropy=float(hmin),
        guarantees=guarantees,
        other_mass=other_mass,
        other_outputs=other_n,
        ball_size=ball,
        draws=0 if exact else max(draws, samples),
    )


def example_outputs(
    mechanisms: Sequence[Mechanism],
    words: Sequence[str | int],
    *,
    draws: int = 3,
    random_state: RandomState = None,
    rng: RandomState = None,
) -> dict[str, dict[float, list[str]]]:
    """``draws`` sample outputs of each word under each mechanism (Table 1 of seed 003).

    Returns ``word -> {epsilon -> [outputs]}``; one ``privatize`` call per mechanism.
    ``random_state`` as in :func:`explain` (``rng``: its old name).
    """
    draws = check_int("draws", draws, minimum=1)
    gen = statistics_generator(random_state, rng)
    if not mechanisms or not words:
        return {}
    emb = mechanisms[0].embedding
    ids = np.array([mechanisms[0]._id(w) for w in words], dtype=np.int64)
    names = emb.words(ids)
    table: dict[str, dict[float, list[str]]] = {n: {} for n in names}
    for mech in sorted(mechanisms, key=lambda m: float(m.epsilon)):
        out = mech.privatize(np.repeat(ids, draws), gen).reshape(ids.size, draws)
        for n, row in zip(names, out, strict=True):
            table[n][float(mech.epsilon)] = emb.words(row)
    return table
