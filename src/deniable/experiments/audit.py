"""Check a mechanism's claimed guarantee on a sample of word pairs (``deniable audit``).

Every mechanism claims, for all words w, w' and outputs y,

    log Pr[M(w)=y] - log Pr[M(w')=y] <= epsilon * d(w, w')        (metric DP)

:func:`audit_mechanism` tests the claim on a sample of pairs: half are close neighbours
(the nearest other word in the embedding) and half random pairs, each in both directions.

- **Exact** (mechanisms with ``has_distribution``, e.g. TEM): the two exact output
  distributions are compared on *every* output y; the worst log-ratio is reported against
  ``epsilon * d``. A violation is a log-ratio above the bound (beyond float rounding).
- **Black-box** (any mechanism, e.g. madlib, brr): ``draws`` outputs are drawn for w and for
  w'. A separate, smaller *selection* sample of w's outputs picks the ``outputs`` most
  frequent outputs y to test (chosen before the counts that test them, so the family of
  hypotheses is fixed). For each, a one-sided Clopper-Pearson lower bound on Pr[M(w)=y] and
  upper bound on Pr[M(w')=y] give a certified lower bound on the log-ratio; a Bonferroni
  union bound over every (pair, direction, output, bound) keeps the chance of flagging a
  correct mechanism below ``alpha``. A violation is a certified lower bound above
  ``epsilon * d``: the claim is then false with confidence ``1 - alpha``.

A black-box audit that passes proves nothing by itself: its power depends on how close the
mechanism comes to its bound on the sampled pairs (see docs/audit.md for measurements).
The words audited are vocabulary words (public); no user text is involved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._random import RandomState, check_random_state, seeded_generator
from .._validation import check_choice, check_epsilon, check_int, check_probability
from ..calibrate import clopper_pearson as interval
from ..embedding import Embedding

if TYPE_CHECKING:
    from ..mechanisms.base import Mechanism

__all__ = ["AuditResult", "audit_mechanism", "clopper_pearson", "sample_pairs"]

#: float rounding allowed before an exact log-ratio counts as a violation (relative, absolute)
RTOL, ATOL = 1e-9, 1e-9
METHODS = ("auto", "exact", "black-box")

Pair = tuple[int, int, str]  # (w, w2, kind)


def clopper_pearson(k: npt.ArrayLike, n: int, alpha: float, side: str) -> npt.NDArray[np.float64]:
    """One-sided Clopper-Pearson bound at confidence ``1 - alpha`` for ``k`` successes in ``n`` trials.

    ``side="lower"``: ``P(p < bound) <= alpha``; ``side="upper"``: ``P(p > bound) <= alpha``.
    Each end of the two-sided interval at confidence ``1 - 2 alpha``
    (:func:`deniable.calibrate.clopper_pearson`, the one implementation).
    """
    if side not in ("lower", "upper"):
        raise InvalidParameterError("side", side, "'lower' or 'upper'")
    lo, hi = interval(k, n, 1.0 - 2.0 * alpha)
    return lo if side == "lower" else hi


def sample_pairs(mech: Mechanism, pairs: int, rng: np.random.Generator, *, frequent: int | None = None) -> list[Pair]:
    """``pairs`` word pairs: about half (w, nearest other word of w in the embedding), half (w, random word).

    ``w`` is drawn uniformly from the ``frequent`` first words (the whole vocabulary by default).
    Neighbours are found by Euclidean distance between embedding vectors (exact, numpy).
    """
    emb = mech.embedding
    v = emb.size
    if v < 2:
        raise InvalidParameterError("embedding", f"{v} word(s)", "at least two words to audit a pair")
    top = v if frequent is None else min(check_int("frequent", frequent, minimum=2), v)
    n_near = (pairs + 1) // 2
    firsts = rng.choice(top, size=pairs, replace=pairs > top)
    out: list[Pair] = []
    emb = Embedding.check(emb)  # a code-only vocabulary: give the pairs explicitly
    vectors = emb.vectors
    for i, w in enumerate(firsts.tolist()):
        if i < n_near:
            d = np.einsum("ij,ij->i", vectors - vectors[w], vectors - vectors[w], dtype=np.float64)
            d[w] = np.inf
            out.append((w, int(np.argmin(d)), "neighbour"))
        else:
            w2 = int(rng.integers(v - 1))
            out.append((w, w2 + (w2 >= w), "random"))
    return out


@dataclass
class AuditResult:
    """What :func:`audit_mechanism` found: one row per (pair, direction), the worst ratio, the verdict."""

    mechanism: dict[str, object]
    method: str
    rows: list[dict[str, Any]]
    alpha: float | None = None
    draws: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def violations(self) -> int:
        return sum(bool(r["violation"]) for r in self.rows)

    @property
    def passed(self) -> bool:
        return self.violations == 0

    @property
    def worst(self) -> dict[str, Any]:
        """The row with the largest (certified) log-ratio relative to its bound."""
        return max(self.rows, key=lambda r: _excess(r))

    @property
    def worst_ratio(self) -> float:
        """max over rows of log-ratio / (epsilon d): above 1 breaks the claim (inf: a zero-distance pair differs)."""
        return float(max(_ratio(r) for r in self.rows))

    def render(self) -> str:
        """A markdown report (vocabulary words only, no user text)."""
        m = self.mechanism
        what = (
            "exact distributions, every output"
            if self.method == "exact"
            else f"black-box, {self.draws:,} draws per word, Clopper-Pearson + Bonferroni, alpha = {self.alpha:g}"
        )
        verdict = (
            "PASS: no violation found"
            if self.passed
            else f"FAIL: {self.violations} violation(s) of the claimed guarantee"
        )
        stat = "worst log-ratio" if self.method == "exact" else "certified log-ratio (lower bound)"
        lines = [
            f"# Audit of {m.get('mechanism')} at epsilon = {m.get('epsilon')}",
            "",
            f"Method: {what}. Pairs: {len(self.rows) // 2} (both directions).",
            "",
            f"**{verdict}**; worst ratio ({stat}) / (epsilon d) = {self.worst_ratio:.4g}.",
            "",
            f"| w | w' | kind | d(w,w') | eps*d | {stat} | ratio | violation |",
            "|---|---|---|---:|---:|---:|---:|---|",
        ]
        for r in sorted(self.rows, key=lambda r: -_excess(r)):
            lines.append(
                f"| {r['word']} | {r['other']} | {r['kind']} | {r['distance']:.4g} | {r['bound']:.4g} | "
                f"{r['log_ratio']:.4g} | {_ratio(r):.4g} | {'yes' if r['violation'] else ''} |"
            )
        return "\n".join(lines) + "\n"

    def write(self, folder: str | Path) -> dict[str, Path]:
        """audit.csv (one row per pair and direction), audit.md and settings.json, with the shared writer."""
        from .results import write_files

        columns = [
            "word",
            "other",
            "kind",
            "distance",
            "bound",
            "log_ratio",
            "ratio",
            "estimate",
            "violation",
        ]
        rows = [{**r, "ratio": _ratio(r)} for r in self.rows]
        settings = {**self.settings, "mechanism": self.mechanism, "method": self.method, "passed": self.passed}
        return write_files(
            folder,
            tables={"audit.csv": (rows, columns)},
            texts={"audit.md": self.render()},
            json_files={"settings.json": settings},
        )


def _ratio(r: dict[str, Any]) -> float:
    b, lr = float(r["bound"]), float(r["log_ratio"])
    if b > 0:
        return lr / b
    return math.inf if lr > ATOL else (0.0 if lr > -math.inf else -math.inf)


def _excess(r: dict[str, Any]) -> float:
    return float(r["log_ratio"]) - float(r["bound"])


def audit_mechanism(
    mech: Mechanism,
    *,
    pairs: int | Sequence[tuple[int | str, int | str]] = 20,
    draws: int = 20_000,
    alpha: float = 1e-3,
    outputs: int = 10,
    method: str = "auto",
    frequent: int | None = None,
    claimed_epsilon: float | None = None,
    random_state: RandomState = None,
) -> AuditResult:
    """Test ``mech``'s claimed ``epsilon * d(w, w')`` bound on sampled word pairs (see the module docstring).

    Parameters
    ----------
    mech
        Any registered mechanism (or any :class:`~deniable.mechanisms.base.Mechanism`).
    pairs
        How many pairs to sample (half nearest neighbours, half random), or explicit
        ``(w, w')`` pairs (ids or vocabulary words). Each is tested in both directions.
    draws
        Black-box: outputs drawn per word for the test counts (plus ``draws // 4`` to
        select the outputs to test).
    alpha
        Black-box: the chance of flagging a correct mechanism (family-wise, Bonferroni).
    outputs
        Black-box: outputs y tested per pair and direction.
    method
        ``"auto"`` (exact where ``mech.has_distribution``), ``"exact"`` or ``"black-box"``.
    frequent
        Sample the first word of each pair among the first ``frequent`` words.
    claimed_epsilon
        Test the bound ``claimed_epsilon * d`` instead of ``mech.epsilon * d`` (e.g. to measure
        the audit's power: a mechanism built with ``f * eps`` audited against ``eps``).
    random_state
        The audit's randomness (pairs, draws). An audit releases nothing: a seed is fine.
    """
    check_choice("method", method, METHODS)
    if method == "auto":
        method = "exact" if getattr(mech, "has_distribution", False) else "black-box"
    if method == "exact" and not getattr(mech, "has_distribution", False):
        raise InvalidParameterError(
            "method", "exact", "'black-box' or 'auto': this mechanism has no exact distribution"
        )
    draws = check_int("draws", draws, minimum=10)
    outputs = check_int("outputs", outputs, minimum=1)
    alpha = check_probability("alpha", alpha)
    if isinstance(random_state, int | np.integer) and not isinstance(random_state, bool):
        rng = seeded_generator(int(random_state), warn=False)  # an audit releases nothing
    else:
        rng = check_random_state(random_state, stacklevel=2)
    if isinstance(pairs, int | np.integer) and not isinstance(pairs, bool):
        chosen = sample_pairs(mech, check_int("pairs", int(pairs)), rng, frequent=frequent)
    elif isinstance(pairs, Sequence) and not isinstance(pairs, str) and len(pairs) > 0:
        chosen = []
        for i, p in enumerate(pairs):
            if not isinstance(p, Sequence) or len(p) != 2:
                raise InvalidParameterError(f"pairs[{i}]", "<not shown>", "a (w, w') pair of ids or words")
            chosen.append((mech._id(p[0]), mech._id(p[1]), "given"))
    else:
        raise InvalidParameterError("pairs", "<not shown>", "a number of pairs >= 1 or a list of (w, w') pairs")
    eps = float(mech.epsilon) if claimed_epsilon is None else check_epsilon(claimed_epsilon, "claimed_epsilon")
    directed = [(w, w2, k) for w, w2, k in chosen] + [(w2, w, k) for w, w2, k in chosen]
    settings: dict[str, Any] = {"pairs": len(chosen), "method": method}
    if method == "exact":
        rows = _exact(mech, directed, eps)
        return AuditResult(_described(mech, eps), "exact", rows, settings=settings)
    rows = _black_box(mech, directed, draws, alpha, outputs, rng, eps)
    settings.update(draws=draws, alpha=alpha, outputs=outputs)
    return AuditResult(_described(mech, eps), "black-box", rows, alpha=alpha, draws=draws, settings=settings)


def _described(mech: Mechanism, eps: float) -> dict[str, object]:
    d = mech.describe()
    if eps != float(mech.epsilon):
        d["sampling_epsilon"] = d["epsilon"]
        d["epsilon"] = eps
    return d


def _row(mech: Mechanism, w: int, w2: int, kind: str, eps: float) -> dict[str, Any]:
    d = float(mech.distance(w, w2))
    word, other = mech.embedding.words([w, w2])
    return {
        "word": word,
        "other": other,
        "w": w,
        "w2": w2,
        "kind": kind,
        "distance": d,
        "bound": eps * d,
    }


def _exact(mech: Mechanism, directed: list[Pair], eps: float) -> list[dict[str, Any]]:
    cache: dict[int, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}

    # capability: log_distribution(w) -> (distinct ids, log-probabilities), for laws whose
    # probabilities underflow float64 far from w (diffractor on a large vocabulary)
    log_law = getattr(mech, "log_distribution", None)

    def dist(w: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Distinct output ids and their log-probabilities (-inf: impossible)."""
        if w not in cache:
            if callable(log_law):
                ids, logp = log_law(w)
                order = np.argsort(np.asarray(ids, dtype=np.int64), kind="stable")
                cache[w] = np.asarray(ids, dtype=np.int64)[order], np.asarray(logp, dtype=np.float64)[order]
                return cache[w]
            ids, probs = mech.distribution(w)
            ids = np.asarray(ids, dtype=np.int64)
            uniq, inv = np.unique(ids, return_inverse=True)
            mass = np.bincount(inv.ravel(), weights=np.asarray(probs, dtype=np.float64), minlength=uniq.size)
            with np.errstate(divide="ignore"):
                cache[w] = uniq.astype(np.int64), np.log(mass.astype(np.float64))
        return cache[w]

    rows = []
    for w, w2, kind in directed:
        row = _row(mech, w, w2, kind, eps)
        ids1, p1 = dist(w)
        ids2, p2 = dist(w2)
        q = np.full(ids1.size, -np.inf)
        pos = np.searchsorted(ids2, ids1)
        pos_ok = pos < ids2.size
        hit = np.zeros(ids1.size, dtype=bool)
        hit[pos_ok] = ids2[pos[pos_ok]] == ids1[pos_ok]
        q[hit] = p2[pos[hit]]
        live = p1 > -np.inf
        lr = np.where(q[live] > -np.inf, p1[live] - q[live], np.inf)
        worst = float(lr.max()) if lr.size else -math.inf
        row["log_ratio"] = worst
        row["estimate"] = worst
        row["violation"] = bool(worst > row["bound"] * (1 + RTOL) + ATOL)
        rows.append(row)
    return rows


def _black_box(
    mech: Mechanism,
    directed: list[Pair],
    draws: int,
    alpha: float,
    outputs: int,
    rng: np.random.Generator,
    eps: float,
) -> list[dict[str, Any]]:
    words = np.unique([w for w, _, _ in directed] + [w2 for _, w2, _ in directed])
    select = max(draws // 4, outputs)
    # one batched call: the selection sample, then the test sample of every word
    sel = mech.privatize(np.repeat(words, select), rng).reshape(words.size, select)
    test = mech.privatize(np.repeat(words, draws), rng).reshape(words.size, draws)
    row_of = {int(w): i for i, w in enumerate(words.tolist())}
    # Bonferroni over every (direction, output, bound): each one-sided bound at alpha / (2 m)
    tests = len(directed) * outputs
    a = alpha / (2 * tests)
    rows = []
    for w, w2, kind in directed:
        row = _row(mech, w, w2, kind, eps)
        vals, counts = np.unique(sel[row_of[w]], return_counts=True)
        ys = vals[np.argsort(-counts, kind="stable")[:outputs]]
        k1 = (test[row_of[w]][:, None] == ys[None, :]).sum(axis=0)
        k2 = (test[row_of[w2]][:, None] == ys[None, :]).sum(axis=0)
        lo = clopper_pearson(k1, draws, a, "lower")
        hi = clopper_pearson(k2, draws, a, "upper")
        with np.errstate(divide="ignore"):
            cert = np.log(lo) - np.log(hi)
            est = np.log((k1 + 0.5) / (draws + 1)) - np.log((k2 + 0.5) / (draws + 1))
        row["log_ratio"] = float(cert.max())
        row["estimate"] = float(est.max())
        row["violation"] = bool(row["log_ratio"] > row["bound"])
        rows.append(row)
    return rows
