"""Strength in human terms: the targets ``epsilon="auto"`` meets and :class:`Strength`, the sentence every
front end states (the unchanged share, and what an attacker who knows the mechanism recovers).

The measures come from the calibration table (:mod:`deniable.calibrate.table`), computed on public
reference text only; this module only words them and parses what the user asks for.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import InvalidParameterError

if TYPE_CHECKING:
    from .table import CalibrationPoint

__all__ = ["MOST", "TARGET_HELP", "TARGET_METRICS", "Strength", "Target", "parse_target"]

#: "Most tokens survive" above this share (the summary then warns).
MOST = 0.5


# -- targets -------------------------------------------------------------------------------

_TARGET = re.compile(
    r"^\s*(unchanged|recovered|recovered_content)\s*<=?\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(%?)\s*$"
)
#: The measures a target may bound (:class:`Target`)
TARGET_METRICS = ("unchanged", "recovered", "recovered_content")
TARGET_HELP = (
    'a target like "unchanged<=0.5", "recovered<=0.2" or "recovered_content<=10%": at most that share of a '
    "typical text's tokens left unchanged (unchanged), recovered by an attacker who knows the mechanism "
    "(recovered), or recovered among its less common words, outside the 200 most frequent (recovered_content)"
)


@dataclass(frozen=True)
class Target:
    """What the user asks for: at most ``max_unchanged`` of a typical text's tokens unchanged, or (``metric``)
    recovered by the calibration's attacker (all tokens, or content words only)."""

    max_unchanged: float  # the bound, whatever the metric (the name predates the other metrics)
    metric: str = "unchanged"

    @property
    def bound(self) -> float:
        return self.max_unchanged

    def __str__(self) -> str:
        return f"{self.metric}<={self.max_unchanged:g}"

    def upper(self, point: CalibrationPoint) -> float | None:
        """The point's upper confidence bound of the target's measure (None: the point lacks it)."""
        if self.metric == "unchanged":
            return point.unchanged_high
        if self.metric == "recovered":
            return point.recovered_high
        return point.recovered_content_high

    def met_by(self, point: CalibrationPoint) -> bool:
        """Conservatively: the upper confidence bound of the share meets the target."""
        hi = self.upper(point)
        return hi is not None and hi <= self.max_unchanged


def parse_target(value: object, name: str = "target") -> Target:
    """``"unchanged<=0.5"``, ``"recovered<=20%"``, ``"recovered_content<=0.1"`` or a :class:`Target` -> a Target.

    Anything else is an :class:`InvalidParameterError` naming ``name``.
    """
    if isinstance(value, Target):
        return value
    m = _TARGET.match(value) if isinstance(value, str) and len(value) <= 80 else None
    shown = value if isinstance(value, str) and len(value) <= 40 else f"<{type(value).__name__}>"
    if m is None:
        raise InvalidParameterError(name, shown, TARGET_HELP)
    share = float(m.group(2)) / (100.0 if m.group(3) else 1.0)
    if not 0.0 < share < 1.0:
        raise InvalidParameterError(name, shown, "a share strictly between 0 and 1 (0% and 100%)")
    return Target(share, m.group(1))


@dataclass(frozen=True)
class Strength:
    """How much a mechanism hides of a typical text on its embedding (from public data only)."""

    mechanism: str
    epsilon: float
    expected_unchanged: float  # share of a typical text's tokens released unchanged
    upper: float  # its upper bound (confidence bound, or the next table point)
    source: str  # "calibration table (...)" or "estimated from N public reference tokens, stored"
    target: str | None = None  # the target epsilon="auto" met
    similarity: float | None = None
    recovered: float | None = None  # share of a typical text's tokens an attacker who knows the mechanism recovers
    recovered_upper: float | None = None
    recovered_content: float | None = None  # the same over its less common words (outside the 200 most frequent)
    recovered_content_upper: float | None = None
    recovery_method: str | None = None  # "exact" or "held-out" (deniable.calibrate.recovery)

    def attacker_sentence(self) -> str | None:
        """ "an attacker who knows the mechanism recovers about X% of the words (Y% of the less common ones)";
        "at least about" where the figure is held out (a fitted attacker's success: a lower bound)."""
        if self.recovered is None or math.isnan(self.recovered):
            return None
        at_least = "at least " if self.recovery_method == "held-out" else ""
        text = f"an attacker who knows the mechanism recovers {at_least}about {self.recovered:.0%} of the words"
        if self.recovered_content is not None and not math.isnan(self.recovered_content):
            text += f" ({self.recovered_content:.0%} of the less common ones)"
        return text

    @property
    def weak(self) -> bool:
        """Most tokens of a typical text would survive."""
        return self.expected_unchanged > MOST

    def sentence(self) -> str:
        share = self.expected_unchanged
        text = (
            f"about {share:.0%} of the word tokens of a typical text are released unchanged by "
            f"{self.mechanism} at epsilon={self.epsilon:g} on this embedding ({self.source})"
        )
        attacker = self.attacker_sentence()
        if attacker:
            text += f"; {attacker}"
        if self.target:
            text += f"; epsilon chosen for the target {self.target} (upper bound {self.target_upper():.0%})"
        return text

    def target_upper(self) -> float:
        """The upper bound of the measure the target bounds (the unchanged share's without a target)."""
        metric = (self.target or "unchanged").split("<", 1)[0]
        hi = {"recovered": self.recovered_upper, "recovered_content": self.recovered_content_upper}.get(metric)
        return self.upper if hi is None else hi

    def warning(self) -> str | None:
        if not self.weak:
            return None
        return (
            f"WEAK: most words of a typical text ({self.expected_unchanged:.0%}) come out unchanged at "
            f"epsilon={self.epsilon:g}; names and rare words survive even more often. For plausible "
            f'deniability use a smaller epsilon, or `--epsilon auto --target "unchanged<=0.5"`'
        )

    def describe(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "epsilon": self.epsilon,
            "target": self.target,
            "expected_unchanged": round(self.expected_unchanged, 4),
            "expected_unchanged_upper": round(self.upper, 4),
            "source": self.source,
            "statement": self.sentence(),
        }
        if self.similarity is not None:
            d["mean_similarity"] = round(self.similarity, 4)
        for key in ("recovered", "recovered_upper", "recovered_content", "recovered_content_upper"):
            value = getattr(self, key)
            if value is not None and not math.isnan(value):
                d[key] = round(value, 4)
        if self.recovery_method is not None:
            d["recovery_method"] = self.recovery_method
        w = self.warning()
        if w:
            d["warning"] = w
        return d
