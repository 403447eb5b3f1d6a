"""Epsilon in human terms: a calibration table per embedding and mechanism, targets, strength.

Users do not think in epsilons; they think "how much of my text survives". Seed 000
measures it word by word (``N_w = Pr[M(w) = w]``); for a whole text what matters is the
*expected share of tokens released unchanged*, i.e. ``N_w`` averaged over the words as
they occur in text. This module measures that share, as a curve against epsilon, on
**public data only**:

- the *reference text*: ``tokens`` word ids drawn (with a fixed public seed) from a Zipf
  law over the embedding's rank order, ``Pr[rank r] ∝ 1/r`` -- GloVe, word2vec and
  fastText list their words by corpus frequency, so this is a frequency-weighted
  "typical text" made from the embedding alone, never from the input;
- each point of the curve privatizes those tokens once with the mechanism at one epsilon
  (the same tokens and the same random stream at every epsilon: common random numbers)
  and records the share unchanged with its Clopper-Pearson interval, and the mean cosine
  similarity of output to input vectors (all tokens, and the changed ones only: a
  replacement near the word keeps the meaning, a random word does not), beside the
  similarity of two independent reference tokens (what "random" looks like here).

The table is prepared once per embedding, mechanism and options
(``deniable prepare --calibration``, the artefact kind ``calibration``) and read by every
front end: ``make_mechanism(name, emb, "auto", target="unchanged<=0.5")`` picks the
**largest** evaluated epsilon (the least utility loss) whose *upper* confidence bound
meets the target, with every smaller evaluated epsilon meeting it too (the choice never
jumps over a failure; that is how the monotonicity assumption is made safe), and
:func:`strength` states how strong any epsilon is, in words.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError, NotPrivateWarning
from .._progress import progress
from ..artefacts import register_kind
from ..mechanisms._options import EPSILON_HUGE
from ._common import NEAR_K, cosines, nearest_other_words
from .terms import MOST, Strength, Target, parse_target

if TYPE_CHECKING:
    from ..embedding import Vocabulary
    from ..mechanisms.base import Mechanism

__all__ = [
    "CALIBRATION_KIND",
    "CalibrationPoint",
    "CalibrationTable",
    "EpsilonResolution",
    "Strength",
    "Target",
    "build_table",
    "calibration_params",
    "obtain_table",
    "open_table",
    "parse_target",
    "reference_ids",
    "resolve_epsilon",
    "strength",
    "table_key_options",
    "warn_if_weak",
]

log = logging.getLogger("deniable.calibrate")

#: The artefact kind of a calibration table (see :mod:`deniable.artefacts`).
CALIBRATION_KIND = "calibration"
#: Version of the table's format and method (part of the artefact's parameters).
#: 2: attacker recovery per point; 3: the grid bisected where any target's measure moves;
#: 4: madlib's auto decode changed (HNSW only at efSearch 64, exact below 250k words)
TABLE_VERSION = 4
#: Reference tokens per epsilon (95% Clopper-Pearson half-width <= 1.6 points).
DEFAULT_TOKENS = 4096
#: Reference tokens of a one-epsilon estimate when no table is prepared.
POINT_TOKENS = 1024
#: The public seed of the reference text and of the mechanism's draws.
PUBLIC_SEED = 20261124
#: Confidence of the intervals; the target is checked against the upper bound.
CONFIDENCE = 0.95
#: Coarse grid: 2^(k/2) for k = -2..12 (0.5 to 64), refined to 2^(k/8) where the curve moves.
COARSE = tuple(2.0 ** (k / 2) for k in range(-2, 13))
REFINE_STEPS = 4  # 2^(1/2) split into 4: steps of 2^(1/8) (9%)
REFINE_WHEN = 0.03  # refine a coarse interval whose unchanged share moves by more than 3 points
#: Then neighbours whose unchanged, recovered or recovered_content share moves by more than 1.5 points are
#: bisected (in log epsilon), pass after pass, down to steps of FINE_RATIO, at most MAX_POINTS points in all:
#: the largest epsilon meeting a target then lies within the target's confidence half-width (1.5 points at
#: most for all tokens, 4,096 of them) plus one step (1.5 points) of it, where the curve is continuous.
FINE_WHEN = 0.015
FINE_RATIO = 2.0 ** (1 / 64)  # 1.1%: no bisection below it (a jump the curve makes there is a jump)
MAX_POINTS = 112  # exact TEM on 2,000 GloVe words needs about 100 (its recovery climbs 2 points per 2^(1/32))
SATURATED = 0.98  # past this share the curve is flat (targets live below): larger coarse epsilons are skipped

#: Declared options that change speed or memory, never the output distribution: left out of
#: the table's key so the CLI, the service and the engines share one table.
RUNTIME_OPTIONS = frozenset(
    {"batch_size", "cache", "table_max", "memory_bytes", "disk_bytes", "block_bytes", "show_progress",
     "history_free"}
)  # fmt: skip


# -- the reference text and one point of the curve ------------------------------------------


def reference_ids(size: int, tokens: int, seed: int = PUBLIC_SEED) -> npt.NDArray[np.int64]:
    """``tokens`` ids drawn from Zipf's law over ranks ``1..size`` (id = rank - 1), seeded: public."""
    from ._common import statistics_generator

    weights = 1.0 / np.arange(1, size + 1, dtype=np.float64)
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    u = statistics_generator(seed).random(tokens)
    return np.minimum(np.searchsorted(cdf, u, side="right"), size - 1).astype(np.int64)


@dataclass(frozen=True)
class CalibrationPoint:
    """The mechanism at one epsilon on the reference text."""

    epsilon: float
    tokens: int
    unchanged: float  # share of tokens released unchanged (estimate)
    unchanged_low: float  # Clopper-Pearson interval at CONFIDENCE
    unchanged_high: float
    similarity: float | None  # mean cosine(input, output) over all tokens (None: no vectors)
    changed_similarity: float | None  # the same over the changed tokens only
    near: float | None = None  # share of tokens replaced by one of the input's NEAR_K nearest other words
    # attacker recovery (deniable.calibrate.recovery): share of the reference tokens a Bayes attacker with the
    # public Zipf prior recovers, all and content words (outside the 200 most frequent), 95% intervals
    recovered: float | None = None
    recovered_low: float | None = None
    recovered_high: float | None = None
    recovered_content: float | None = None
    recovered_content_low: float | None = None
    recovered_content_high: float | None = None
    recovery_method: str | None = None  # "exact" or "held-out"

    @property
    def readable(self) -> float | None:
        """Share of tokens that keep their meaning: unchanged, or replaced by a near neighbour."""
        return None if self.near is None else self.unchanged + self.near


def evaluate_point(
    mech: Mechanism,
    ids: npt.NDArray[np.int64],
    seed: int = PUBLIC_SEED,
    neighbours: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None = None,
    outputs: npt.NDArray[np.int64] | None = None,
) -> CalibrationPoint:
    """Privatize the reference ``ids`` once with ``mech`` (seeded: statistics, not a release).

    ``neighbours`` (:func:`nearest_other_words`): also count the replacements that are near.
    ``outputs``: what that privatization releases, found otherwise (:mod:`._rays`).
    """
    from ._common import statistics_generator
    from ._intervals import clopper_pearson
    from .recovery import reference_recovery

    found = mech.privatize(ids, statistics_generator(seed + 1)) if outputs is None else outputs
    out = np.asarray(found, dtype=np.int64)
    same = out == ids
    k, n = int(same.sum()), int(ids.size)
    lo, hi = clopper_pearson(np.array([k]), np.array([n]), CONFIDENCE)
    sim = csim = None
    if hasattr(mech.embedding, "vectors"):
        cos = cosines(mech.embedding, ids, out)
        cos[same] = 1.0
        sim = float(cos.mean())
        csim = float(cos[~same].mean()) if k < n else None
    near = None
    if neighbours is not None:
        words, nn = neighbours
        rows = np.searchsorted(words, ids)
        near = float(((nn[rows] == out[:, None]).any(axis=1) & ~same).sum()) / n
    r = reference_recovery(mech, ids, out)
    return CalibrationPoint(
        float(mech.epsilon), n, k / n, float(lo[0]), float(hi[0]), sim, csim, near,
        r.recovered, r.low, r.high, r.content, r.content_low, r.content_high, r.method,
    )  # fmt: skip


# -- the table ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class EpsilonResolution:
    """The epsilon ``epsilon="auto"`` chose for a target, and why."""

    target: Target
    epsilon: float
    point: CalibrationPoint  # the curve at the chosen epsilon
    next_point: CalibrationPoint | None  # the next evaluated epsilon, which fails the target (None: none larger)
    monotone: bool  # the evaluated shares never decrease with epsilon (beyond the intervals)

    def describe(self) -> dict[str, Any]:
        return {
            "target": str(self.target),
            "epsilon": self.epsilon,
            "expected_unchanged": self.point.unchanged,
            "expected_unchanged_upper": self.point.unchanged_high,
            "expected_recovered": self.point.recovered,
            "expected_recovered_upper": self.point.recovered_high,
            "expected_recovered_content": self.point.recovered_content,
            "expected_recovered_content_upper": self.point.recovered_content_high,
            "next_epsilon": self.next_point.epsilon if self.next_point else None,
            "monotone": self.monotone,
        }


@dataclass(frozen=True)
class CalibrationTable:
    """The curve of one mechanism (with ``options``) on one embedding, from public data only."""

    mechanism: str
    options: dict[str, Any]
    fingerprint: str
    tokens: int
    seed: int
    points: tuple[CalibrationPoint, ...]
    random_similarity: float | None  # mean cosine of two independent reference tokens
    version: int = TABLE_VERSION
    reference: str = "Zipf over the embedding's frequency ranks"
    notes: tuple[str, ...] = field(default=())

    @property
    def epsilons(self) -> list[float]:
        return [p.epsilon for p in self.points]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CalibrationTable:
        d = json.loads(text)
        d["points"] = tuple(CalibrationPoint(**p) for p in d["points"])
        d["notes"] = tuple(d.get("notes", ()))
        return cls(**d)

    def monotone(self) -> bool:
        """Whether no evaluated share falls (beyond both intervals) as epsilon grows."""
        return all(b.unchanged_high >= a.unchanged_low for a, b in itertools.pairwise(self.points))

    def resolve(self, target: Target | str) -> EpsilonResolution:
        """The largest evaluated epsilon meeting ``target`` (upper bound), every smaller one meeting it too."""
        tgt = parse_target(target)
        chosen = None
        nxt = None
        for p in self.points:
            if tgt.met_by(p):
                chosen = p
            else:
                nxt = p
                break
        if chosen is None:
            first = self.points[0]
            hi = tgt.upper(first)
            what = {
                "unchanged": "of a typical text's tokens unchanged",
                "recovered": "of a typical text's tokens to an attacker who knows the mechanism",
                "recovered_content": "of a typical text's less common words to an attacker who knows the mechanism",
            }[tgt.metric]
            verb = "leaves up to" if tgt.metric == "unchanged" else "gives up to"
            raise InvalidParameterError(
                "target",
                str(tgt),
                "a target some epsilon meets: "
                + (
                    f"this calibration table records no {tgt.metric} share"
                    if hi is None
                    else f"with {self.mechanism} on this embedding even epsilon={first.epsilon:g} {verb} "
                    f"{hi:.1%} {what}"
                ),
            )
        return EpsilonResolution(tgt, chosen.epsilon, chosen, nxt, self.monotone())

    def at(self, epsilon: float, metric: str = "unchanged") -> tuple[float, float, str]:
        """``(estimate, upper bound, how)`` of the unchanged share (or ``metric``: ``"recovered"``,
        ``"recovered_content"``) at ``epsilon`` (interpolated in log eps; NaN where the table lacks it)."""

        def val(p: CalibrationPoint) -> tuple[float, float]:
            v, h = getattr(p, metric), getattr(p, f"{metric}_high")
            return (math.nan, math.nan) if v is None or h is None else (float(v), float(h))

        pts = self.points
        if epsilon <= pts[0].epsilon:
            p = pts[0]
            if epsilon == p.epsilon:
                return (*val(p), "measured")
            return (*val(p), f"at most (epsilon {p.epsilon:g} is the table's smallest)")
        if epsilon >= pts[-1].epsilon:
            p = pts[-1]
            how = "measured" if epsilon == p.epsilon else f"at least (epsilon {p.epsilon:g} is the table's largest)"
            return (*val(p), how)
        for a, b in itertools.pairwise(pts):
            if a.epsilon <= epsilon <= b.epsilon:
                if epsilon == a.epsilon:
                    return (*val(a), "measured")
                t = math.log(epsilon / a.epsilon) / math.log(b.epsilon / a.epsilon)
                (va, ha), (vb, hb) = val(a), val(b)
                return va + t * (vb - va), max(ha, hb), "interpolated"
        raise AssertionError("unreachable")  # pragma: no cover

    def verdict(self) -> str:
        """In plain words: can this mechanism give both strong deniability and readable text here?

        Strong deniability: at most half of a typical text's tokens survive (upper bound).
        Readable: most replaced tokens keep their meaning (one of the word's ``NEAR_K`` nearest
        neighbours). Also says how steep the curve is (from 10% to 90% unchanged).
        """
        pts = self.points
        strong = [p for p in pts if p.unchanged_high <= MOST]
        steep = ""
        e10 = next((p for p in pts if p.unchanged >= 0.1), None)
        e90 = next((p for p in pts if p.unchanged >= 0.9), None)
        if e10 is not None and e90 is not None:
            steep = (
                f" The unchanged share climbs from {e10.unchanged:.0%} at epsilon {e10.epsilon:.3g} to "
                f"{e90.unchanged:.0%} at {e90.epsilon:.3g}."
            )
        if not strong:
            return (
                f"{self.mechanism} leaves most tokens of a typical text unchanged at every epsilon of the table "
                f"(from {pts[0].epsilon:.3g}): it cannot hide most words on this embedding.{steep}"
            )
        best = strong[-1]
        head = (
            f"{self.mechanism} on this embedding: at epsilon {best.epsilon:.3g} (the largest with at most half of a "
            f"typical text's tokens unchanged; upper bound {best.unchanged_high:.0%})"
        )
        if best.near is None or best.unchanged >= 1.0:
            return head + f" -- no vectors to judge the replacements.{steep}"
        near = best.near / (1.0 - best.unchanged)
        rel = None  # the replaced tokens' mean cosine, from random words' (0) to the word itself (1)
        if best.changed_similarity is not None and self.random_similarity is not None:
            rel = (best.changed_similarity - self.random_similarity) / (1.0 - self.random_similarity)
        cos = (
            ""
            if rel is None
            else f" (mean cosine {best.changed_similarity:.2f}; random words {self.random_similarity:.2f})"
        )
        if near < 0.25 and (rel is None or rel < 1 / 3):
            return (
                f"No epsilon gives both readable text and strong deniability with {self.mechanism} on this "
                f"embedding: where at most half of the tokens survive (epsilon <= {best.epsilon:.3g}) only "
                f"{near:.0%} of the replaced tokens become one of the word's {NEAR_K} nearest neighbours and the "
                f"rest are nearly unrelated words{cos} (word salad); above it most words come out "
                f"unchanged.{steep}"
            )
        return (
            head + f", the replaced tokens stay related to the word{cos}; {near:.0%} of them are one of its "
            f"{NEAR_K} nearest neighbours. Half of the words are hidden and the text keeps part of its "
            f"meaning.{steep}"
        )

    def rows(self) -> list[dict[str, Any]]:
        """One dict per epsilon (the report's CSV and table)."""
        return [asdict(p) for p in self.points]


def table_key_options(
    name: str, options: Mapping[str, Any] | None = None, mech: Mechanism | None = None
) -> dict[str, Any]:
    """The options a table is keyed by: declared, set away from their default, not runtime-only.

    From ``options`` (validated by the registry) or, without them, read off ``mech``.
    An option holding an object (a shared index) is keyed by nothing it could name: such a
    mechanism is keyed as ``None`` (the caller then estimates instead of reading a table).
    """
    from ..mechanisms.registry import options_of

    out: dict[str, Any] = {}
    for opt in options_of(name):
        if opt.name in RUNTIME_OPTIONS:
            continue
        if options is not None:
            if opt.name not in options or options[opt.name] is None:
                continue
            value = options[opt.name]
        else:
            value = getattr(mech, opt.name, opt.default)
        if value is None or (value == opt.default and isinstance(value, str | int | float | bool)):
            continue
        if isinstance(value, Mapping) and not value:
            continue  # an empty options mapping (e.g. index_options={}) sets nothing
        if isinstance(value, np.generic):
            value = value.item()
        if not isinstance(value, str | int | float | bool):
            raise _Unkeyable(opt.name)
        out[opt.name] = value
    return dict(sorted(out.items()))


class _Unkeyable(Exception):
    """An option value (an object) the table cannot be keyed by."""


def calibration_params(name: str, options: Mapping[str, Any], tokens: int = DEFAULT_TOKENS) -> dict[str, Any]:
    """The artefact parameters of a table (what it is a function of, besides the embedding)."""
    return {
        "mechanism": name,
        "options": dict(options),
        "tokens": int(tokens),
        "seed": PUBLIC_SEED,
        "version": TABLE_VERSION,
    }


def _grid_refined(points: dict[float, CalibrationPoint]) -> list[float]:
    """New epsilons between evaluated coarse neighbours whose share moves by more than REFINE_WHEN."""
    eps = sorted(points)
    new = []
    for a, b in itertools.pairwise(eps):
        if abs(points[b].unchanged - points[a].unchanged) > REFINE_WHEN:
            ratio = (b / a) ** (1.0 / REFINE_STEPS)
            new += [a * ratio**i for i in range(1, REFINE_STEPS)]
    return new


def _moves(a: CalibrationPoint, b: CalibrationPoint) -> float:
    """The largest change between ``a`` and ``b`` of a measure a target may bound (those both points record)."""
    pairs = [(a.unchanged, b.unchanged), (a.recovered, b.recovered), (a.recovered_content, b.recovered_content)]
    moves = [abs(y - x) for x, y in pairs if x is not None and y is not None]
    return max((m for m in moves if not math.isnan(m)), default=0.0)


def _grid_bisected(points: dict[float, CalibrationPoint], room: int) -> list[float]:
    """Geometric midpoints of evaluated neighbours whose measures move by more than FINE_WHEN (and at
    least FINE_RATIO apart), the ``room`` largest moves first, in ascending order."""
    eps = sorted(points)
    found = [
        (_moves(points[a], points[b]), math.sqrt(a * b))
        for a, b in itertools.pairwise(eps)
        if b / a > FINE_RATIO * (1 + 1e-9) and _moves(points[a], points[b]) > FINE_WHEN
    ]
    found.sort(key=lambda m: -m[0])  # stable: equal moves keep the lower epsilon first
    return sorted(e for _, e in found[: max(room, 0)])


def build_table(
    embedding: Vocabulary,
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    tokens: int = DEFAULT_TOKENS,
    epsilons: Sequence[float] | None = None,
    show_progress: bool | None = None,
    ray_shortcut: bool = True,
) -> CalibrationTable:
    """Measure the curve of mechanism ``name`` on ``embedding`` (public data only; seeded, deterministic).

    ``epsilons``: evaluate exactly these; default: the coarse grid 0.5..64 (stopping once
    the share saturates), refined to steps of 9% where the share moves, then bisected where the
    unchanged or recovered shares still move by more than 1.5 points (steps down to 1.1%,
    :data:`MAX_POINTS` at most).
    ``ray_shortcut``: decode only the tokens madlib's exact decode can change (:mod:`._rays`; same table).
    """
    import warnings

    from .._validation import check_int

    # the registry, not deniable.mechanisms: make_mechanism resolves epsilon="auto" through this module
    from ..mechanisms.registry import mechanism_class, validate_options
    from ._rays import RayDecodes, evaluate_group

    check_int("tokens", tokens, minimum=16)
    opts = validate_options(name, dict(options or {}))
    ids = reference_ids(embedding.size, tokens)
    neighbours = nearest_other_words(embedding, ids) if hasattr(embedding, "vectors") else None
    points: dict[float, CalibrationPoint] = {}
    rays = RayDecodes(ids) if ray_shortcut else None

    first: list[Mechanism] = []  # TEM's points share what is epsilon-free about the reference words (tested)

    def make(eps: float) -> Mechanism:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotPrivateWarning)
            mech = mechanism_class(name)(embedding, epsilon=eps, **opts)  # type: ignore[call-arg]
        if first and hasattr(mech, "share_knn_tables"):  # (public words: k-NN tables, ball summaries, geometry)
            mech.share_knn_tables(first[0])
        first[:1] = first[:1] or [mech]
        return mech

    def evaluate(mech: Mechanism, outputs: npt.NDArray[np.int64] | None) -> CalibrationPoint:
        return evaluate_point(mech, ids, neighbours=neighbours, outputs=outputs)

    def run(group: Sequence[float], advance: Any) -> CalibrationPoint:
        found = evaluate_group(group, make, evaluate, rays, PUBLIC_SEED + 1)
        points.update((p.epsilon, p) for p in found)
        advance(len(found))
        for p in found:
            log.info("calibration %s: epsilon %g -> %.1f%% unchanged", name, p.epsilon, 100 * p.unchanged)
        return found[-1]

    # progress in epsilon points (coarse grid first, then the refined ones: the total grows);
    # a function of public work only (the embedding, the mechanism, the reference tokens)
    what = f"calibration of {name}: epsilon points on {ids.size:,} public reference tokens"
    grid = sorted({float(e) for e in epsilons}) if epsilons is not None else list(COARSE)
    with progress(len(grid), what, enabled=show_progress) as advance:
        if epsilons is not None:
            for e in grid:
                run([e], advance)
        else:
            for e in COARSE:
                if run([e], advance).unchanged >= SATURATED:
                    break
            refined = _grid_refined(points)
            advance.set_total(len(points) + len(refined))
            if refined:
                run(refined, advance)
            while bisect := _grid_bisected(points, MAX_POINTS - len(points)):
                advance.set_total(len(points) + len(bisect))
                run(bisect, advance)
    random_sim = None
    if hasattr(embedding, "vectors"):
        other = reference_ids(embedding.size, tokens, PUBLIC_SEED + 2)
        random_sim = float(cosines(embedding, ids, other).mean())
    return CalibrationTable(
        mechanism=name,
        options=table_key_options(name, opts),
        fingerprint=embedding.fingerprint,
        tokens=int(tokens),
        seed=PUBLIC_SEED,
        points=tuple(points[e] for e in sorted(points)),
        random_similarity=random_sim,
    )


TABLE_FILE = "table.json"


def build_calibration_artefact(
    embedding: Vocabulary, params: dict[str, Any], folder: Path, show_progress: bool | None
) -> None:
    """The artefact builder of kind ``calibration``: ``table.json``."""
    table = build_table(
        embedding, str(params["mechanism"]), dict(params["options"]), tokens=int(params["tokens"]),
        epsilons=params.get("epsilons"), show_progress=show_progress,
    )  # fmt: skip
    (folder / TABLE_FILE).write_text(table.to_json(), encoding="utf-8")


def open_table(
    embedding: Vocabulary, name: str, options: Mapping[str, Any] | None = None, tokens: int = DEFAULT_TOKENS
) -> CalibrationTable | None:
    """The prepared table, or None when it was never prepared (a damaged one raises ArtefactError)."""
    from ..artefacts import open_artefact

    params = calibration_params(name, table_key_options(name, options or {}), tokens)
    info = open_artefact(embedding, CALIBRATION_KIND, params)
    if info is None:
        return None
    return CalibrationTable.from_json(info.file(TABLE_FILE).read_text(encoding="utf-8"))


def obtain_table(
    embedding: Vocabulary, name: str, options: Mapping[str, Any] | None = None, tokens: int = DEFAULT_TOKENS
) -> CalibrationTable:
    """The prepared table, built now (once, stored like ``deniable prepare --calibration``) when missing."""
    from ..artefacts import obtain_artefact

    key = table_key_options(name, options or {})
    params = calibration_params(name, key, tokens)
    flags = "".join(f" --{k.replace('_', '-')} {v}" for k, v in key.items())
    notice = (
        f"deniable: no calibration table for {name} on this embedding yet; measuring it now on public "
        f"data (once, stored; `deniable prepare --calibration -m {name}{flags}` does it ahead)"
    )
    info = obtain_artefact(embedding, CALIBRATION_KIND, params, notice=notice)
    return CalibrationTable.from_json(info.file(TABLE_FILE).read_text(encoding="utf-8"))


def resolve_epsilon(
    embedding: Vocabulary, name: str, target: Target | str, options: Mapping[str, Any] | None = None
) -> EpsilonResolution:
    """``epsilon="auto"``: the table's (prepared, or measured now) choice for ``target``."""
    tgt = parse_target(target)
    return obtain_table(embedding, name, options).resolve(tgt)


# -- how strong a mechanism is, in words ---------------------------------------------------------


def attach_resolution(mech: Mechanism, resolution: EpsilonResolution) -> None:
    """Record on ``mech`` the target its epsilon was chosen for (read by :func:`strength`)."""
    object.__setattr__(mech, "_epsilon_resolution", resolution)
    mech.__dict__.pop("_calibration_strength", None)  # a strength memoized before (a Privatizer's check) lacks it


def resolution_of(mech: Mechanism) -> EpsilonResolution | None:
    """The target ``mech``'s epsilon was chosen for (``epsilon="auto"``), or None."""
    found = mech.__dict__.get("_epsilon_resolution")
    return found if isinstance(found, EpsilonResolution) else None


def strength(mech: Mechanism, *, options: Mapping[str, Any] | None = None) -> Strength:
    """How strong ``mech`` is on its embedding: the prepared table's value at its epsilon, else an
    estimate now from :data:`POINT_TOKENS` public reference tokens (memoized on ``mech``).

    ``options``: the registry options ``mech`` was built with (default: those
    :func:`~deniable.mechanisms.make_mechanism` recorded, else read off ``mech``).
    """
    return mech._artefact("_calibration_strength", lambda: _contextual_caveat(mech, _strength(mech, options)))


def _contextual_caveat(mech: Mechanism, st: Strength) -> Strength:
    """A contextual decode (madlib's ``prior="ngram:PATH"``) measured on independent reference words says
    so: on real text its n-gram model has context to use, and keeps (and gives away) more."""
    import dataclasses

    if not getattr(mech, "joint_decode", False):
        return st
    note = (
        "; measured on independent words: on real text a contextual decode keeps more words and an attacker "
        "recovers more (4-17 points more than with the nearest-word decode at epsilon 5-10 on IMDb, SST-2 and "
        "20 Newsgroups, docs/madlib.md)"
    )
    return dataclasses.replace(st, source=st.source + note)


def warn_if_weak(mech: Mechanism, *, options: Mapping[str, Any] | None = None, stacklevel: int = 1) -> Strength | None:
    """:func:`strength` of ``mech``; a :class:`~deniable.WeakPrivacyWarning` with the command line's WEAK
    sentence where :attr:`Strength.weak` holds (the one rule for the library and the CLI).

    ``stacklevel`` counts from the caller of this function (1: the line that called it). A
    mechanism that is not registered (a plug-in's own class) has no calibration: None.
    """
    import warnings

    from .._errors import WeakPrivacyWarning
    from ..mechanisms.registry import mechanism_names

    if getattr(mech, "name", None) not in mechanism_names():
        return None
    st = strength(mech, options=options)
    message = st.warning()
    if message:
        warnings.warn(message, WeakPrivacyWarning, stacklevel=stacklevel + 1)
    return st


def _strength(mech: Mechanism, options: Mapping[str, Any] | None) -> Strength:
    from ..artefacts import ArtefactError
    from ..mechanisms._options import options_given

    if options is None:  # the options as given to make_mechanism (not the values it derived)
        options = options_given(mech)

    name = mech.name
    eps = float(mech.epsilon)
    res = resolution_of(mech)
    try:
        key: dict[str, Any] | None = table_key_options(name, options, None if options is not None else mech)
    except _Unkeyable:
        key = None
    table = None
    if key is not None:
        try:
            table = open_table(mech.embedding, name, key)
        except ArtefactError:
            table = None
    if res is not None:
        p = res.point
        return Strength(
            name, eps, p.unchanged, p.unchanged_high, f"calibration table, {p.tokens:,} public reference tokens",
            str(res.target), p.similarity, *_recovery_of(p),
        )  # fmt: skip
    if table is not None:
        est, hi, how = table.at(eps)
        rec, rec_hi, _ = table.at(eps, "recovered")
        con, con_hi, _ = table.at(eps, "recovered_content")
        src = f"calibration table, {table.tokens:,} public reference tokens, {how}"
        sim = next((p.similarity for p in table.points if p.epsilon == eps), None)
        methods = {p.recovery_method for p in table.points}
        method = "held-out" if "held-out" in methods else next(iter(methods), None)
        return Strength(name, eps, est, hi, src, None, sim, *_nan_none(rec, rec_hi, con, con_hi), method)
    if eps >= EPSILON_HUGE and res is None and table is None:
        # not private (construction warned): the noise is below float precision and every word comes out as
        # itself (issue 42: a clearly non-private epsilon builds nothing, this point included)
        return Strength(
            name, eps, 1.0, 1.0,
            f"not measured: epsilon >= {EPSILON_HUGE:g} is not private, every word is released as itself",
            None, 1.0, 1.0, 1.0, 1.0, 1.0, None,
        )  # fmt: skip
    p, stored = _point(mech, key)
    return Strength(
        name, eps, p.unchanged, p.unchanged_high,
        f"estimated from {POINT_TOKENS:,} public reference tokens{', stored' if stored else ''}; "
        f"`deniable prepare --calibration -m {name}` stores the whole curve", None, p.similarity, *_recovery_of(p),
    )  # fmt: skip


def _nan_none(a: float, b: float, c: float, d: float) -> tuple[float | None, float | None, float | None, float | None]:
    def f(v: float) -> float | None:
        return None if math.isnan(v) else v

    return f(a), f(b), f(c), f(d)


def _recovery_of(p: CalibrationPoint) -> tuple[float | None, float | None, float | None, float | None, str | None]:
    return p.recovered, p.recovered_high, p.recovered_content, p.recovered_content_high, p.recovery_method


def _fresh(mech: Mechanism, key: dict[str, Any] | None) -> Mechanism:
    """A new instance of ``mech``'s mechanism that never saw any input: built from the embedding, the
    epsilon and the table ``key`` (the options that change the output law; the runtime options at
    their defaults), else (an unkeyable option, or the defaults refused) from ``mech``'s fields.

    A statistic measured on ``mech`` itself would depend on what it privatized before (issue 40:
    TEM's lazily built per-word tables changed which sampler drew the reference tokens, 0.998891
    against 0.998572 after "the"); on a fresh instance it is a function of public data only.
    """
    import dataclasses
    import warnings

    from .._errors import DeniableError
    from ..mechanisms.registry import mechanism_class

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        if key is not None:
            try:
                return mechanism_class(mech.name)(mech.embedding, epsilon=mech.epsilon, **key)  # type: ignore[call-arg]
            except DeniableError:
                pass  # e.g. a vocabulary only larger runtime limits admit: keep mech's
        if dataclasses.is_dataclass(mech):
            return dataclasses.replace(mech)
    return mech  # (not a dataclass: a test double)


def _point(mech: Mechanism, key: dict[str, Any] | None) -> tuple[CalibrationPoint, bool]:
    """``mech`` on :data:`POINT_TOKENS` public reference tokens, and whether it is stored (under its
    table ``key``, :func:`table_key_options`).

    The point is a function of public data only (the embedding, the mechanism's settings, the
    fixed reference tokens and seed), so it is measured once and kept as a one-point
    calibration artefact: a later process (the next CLI run) reads it instead of paying a
    vocabulary-wide decode of 1,024 tokens. A mechanism holding an object option (a shared
    index) has no key: it is estimated each time and not stored.
    """
    from ..artefacts import obtain_artefact

    ids = reference_ids(mech.embedding.size, POINT_TOKENS)
    if key is None:
        return evaluate_point(_fresh(mech, key), ids), False
    params = {**calibration_params(mech.name, key, POINT_TOKENS), "epsilons": [float(mech.epsilon)]}

    def write(folder: Path, show_progress: bool | None) -> None:
        log.info(
            "deniable: estimating %s's strength at epsilon %g from public reference tokens", mech.name, mech.epsilon
        )
        table = CalibrationTable(
            mechanism=mech.name, options=key, fingerprint=mech.embedding.fingerprint, tokens=POINT_TOKENS,
            seed=PUBLIC_SEED, points=(evaluate_point(_fresh(mech, key), ids),), random_similarity=None,
        )  # fmt: skip
        (folder / TABLE_FILE).write_text(table.to_json(), encoding="utf-8")

    info = obtain_artefact(mech.embedding, CALIBRATION_KIND, params, builder=write)
    return CalibrationTable.from_json(info.file(TABLE_FILE).read_text(encoding="utf-8")).points[0], True


register_kind(
    CALIBRATION_KIND,
    build_calibration_artefact,
    about="a calibration curve (tokens left unchanged, and recovered by an attacker, against epsilon, on public "
    "reference text)",
)  # the store's kind, declared where its builder is
