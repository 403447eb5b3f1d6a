"""SanText and SanText+ (Yue et al., Findings of ACL 2021), docs/mechanisms/santext.md.

SanText is the exponential mechanism with Euclidean distance over the vocabulary,
``Pr[M(x)=y] ∝ exp(-epsilon ||phi(x) - phi(y)|| / 2)``: exactly :class:`ExponentialMechanism`
with ``metric="euclidean"`` (one implementation; this class only gives it the paper's name).

SanText+ splits the vocabulary into sensitive words V_S (the rarest ``sensitive_fraction`` of
it) and the rest V_N. Outputs are always drawn from V_S:

- x in V_S: ``Pr[M(x)=y] ∝ exp(-epsilon d(x, y) / 2)`` over y in V_S;
- x in V_N: kept with probability ``1 - p``; with probability ``p`` drawn as above over V_S.

The original code ranks words by their counts in the *private* data set; that choice is a
function of the private data and is not counted in epsilon. Here the default frequency
source is public: the embedding's row order (GloVe and fastText files are frequency-ordered,
most frequent first). Private counts are accepted from library callers with a
:class:`~deniable.NotPrivateWarning`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError, NotPrivateWarning
from .._validation import check_probability
from ._options import Option
from .exponential import ExponentialMechanism

__all__ = ["SanText", "SanTextPlus", "sensitive_ids"]


def sensitive_ids(vocab_size: int, fraction: float, counts: npt.ArrayLike | None = None) -> npt.NDArray[np.int64]:
    """The rarest ``ceil(fraction * V)`` word ids (sorted): by ``counts`` if given, else by row order.

    Row order means row 0 is the most frequent word (GloVe, fastText, word2vec files).
    Ties in ``counts`` are broken by row order.
    """
    k = min(vocab_size, max(1, math.ceil(fraction * vocab_size)))
    if counts is None:
        return np.arange(vocab_size - k, vocab_size, dtype=np.int64)
    c = np.asarray(counts, dtype=np.float64).ravel()
    # most frequent first; stable on row order for ties
    order = np.lexsort((np.arange(vocab_size), -c))
    return np.sort(order[vocab_size - k :]).astype(np.int64)


@dataclass(frozen=True, eq=False)
class SanText(ExponentialMechanism):
    """SanText: the exponential mechanism with Euclidean distance over the vocabulary.

    ``Pr[M(x)=y] ∝ exp(-epsilon ||phi(x) - phi(y)||_2 / 2)``: ``epsilon * d_euclidean``-private.
    Identical to ``exponential`` with ``metric="euclidean"``.
    """

    name: ClassVar[str] = "santext"
    options: ClassVar[tuple[Option, ...]] = ExponentialMechanism.options[1:]

    def __post_init__(self) -> None:
        if self.metric != "euclidean":
            raise InvalidParameterError("metric", self.metric, "euclidean (SanText's metric)")
        super().__post_init__()


@dataclass(frozen=True, eq=False)
class SanTextPlus(ExponentialMechanism):
    """SanText+: only the rarest words are private; outputs are always sensitive words.

    Parameters
    ----------
    sensitive_fraction
        The share w of the vocabulary treated as sensitive (its rarest words), in (0, 1].
    p
        Probability that a non-sensitive word is replaced too (else it is kept), in [0, 1].
    frequency
        ``"embedding"``: rank words by the embedding's row order (public, the default).
        Library callers may pass an array of per-word counts instead; when those come from
        the private data the choice of V_S is NOT covered by epsilon (a NotPrivateWarning says so).

    Guarantee (exact, see docs/mechanisms/santext.md): for every output y in V_S,
    ``log Pr[M(x)=y] - log Pr[M(x')=y] <= epsilon d(x, x') + ln(1/p) [x in V_S, x' in V_N]``;
    a kept non-sensitive word identifies its input (it is not protected).
    """

    name: ClassVar[str] = "santext_plus"
    guarantee_form: ClassVar[str] = "only sensitive words are protected; others are kept with probability 1 - p"

    sensitive_fraction: float = 0.9
    p: float = 0.3
    frequency: Any = "embedding"

    options: ClassVar[tuple[Option, ...]] = (
        Option(
            "sensitive_fraction",
            float,
            0.9,
            low=0.0,
            high=1.0,
            low_open=True,
            client=True,
            help="share of the vocabulary (its rarest words) treated as sensitive",
        ),
        Option(
            "p",
            float,
            0.3,
            low=0.0,
            high=1.0,
            client=True,
            flag="--replace-p",
            help="probability of replacing a non-sensitive word",
        ),
        Option(
            "frequency",
            str,
            "embedding",
            choices=("embedding",),
            objects=True,
            cli=False,
            help="frequency source for choosing sensitive words: the embedding's row order (public)",
            note="library callers may pass per-word counts (not private if they come from the data)",
        ),
        *ExponentialMechanism.options[1:],
    )

    def __post_init__(self) -> None:
        if self.metric != "euclidean":
            raise InvalidParameterError("metric", self.metric, "euclidean (SanText's metric)")
        super().__post_init__()
        frac = check_probability("sensitive_fraction", self.sensitive_fraction, open_interval=False)
        if frac <= 0:
            raise InvalidParameterError("sensitive_fraction", frac, "a number in (0, 1]")
        object.__setattr__(self, "sensitive_fraction", frac)
        object.__setattr__(self, "p", check_probability("p", self.p, open_interval=False))
        v = self.embedding.size
        if isinstance(self.frequency, str):
            if self.frequency != "embedding":
                raise InvalidParameterError("frequency", self.frequency, "'embedding' or an array of per-word counts")
            counts = None
        else:
            counts = np.asarray(self.frequency)
            if counts.shape != (v,) or counts.dtype.kind not in "iuf" or not np.all(np.isfinite(counts)):
                raise InvalidParameterError("frequency", "<array>", f"'embedding' or {v} finite per-word counts")
            warnings.warn(
                "santext_plus: sensitive words chosen from caller-supplied counts; if they were counted on "
                "the private data, that choice is NOT covered by epsilon (the default, the embedding's "
                "frequency order, is public)",
                NotPrivateWarning,
                stacklevel=4,
            )
        sens = sensitive_ids(v, frac, counts)
        mask = np.zeros(v, dtype=bool)
        mask[sens] = True
        object.__setattr__(self, "_sensitive", sens)
        object.__setattr__(self, "_is_sensitive", mask)
        object.__setattr__(self, "_frequency_source", "embedding order" if counts is None else "caller counts")

    def output_ids(self) -> npt.NDArray[np.int64] | None:
        return self._sensitive  # type: ignore[attr-defined]

    def is_sensitive(self, w: int | str) -> bool:
        return bool(self._is_sensitive[self._id(w)])  # type: ignore[attr-defined]

    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        # every token pays one exponential-mechanism draw, so time does not depend on which are sensitive
        drawn = self._sample_em(ids, rng)
        keep = ~self._is_sensitive[ids] & (rng.random(ids.size) >= self.p)  # type: ignore[attr-defined]
        return np.where(keep, ids, drawn)

    def distribution(self, w: int | str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """V_S with the exponential mechanism's probabilities (times p for a non-sensitive w), plus w itself."""
        wid = self._id(w)
        ids, probs = self._em_distribution(wid)
        if self._is_sensitive[wid]:  # type: ignore[attr-defined]
            return ids, probs
        return np.append(ids, wid), np.append(self.p * probs, 1.0 - self.p)

    def guarantee(self, w: int | str, w2: int | str) -> float:
        """``epsilon d(w, w2)`` between sensitive words; infinite otherwise (a kept word reveals itself)."""
        a, b = self._id(w), self._id(w2)
        if a == b:
            return 0.0
        if self._is_sensitive[a] and self._is_sensitive[b]:  # type: ignore[attr-defined]
            return super().guarantee(a, b)
        return math.inf

    def describe(self) -> dict[str, object]:
        d = super().describe()
        d.update(
            output_set="sensitive words",
            sensitive_fraction=float(self.sensitive_fraction),
            p=float(self.p),
            frequency=self._frequency_source,  # type: ignore[attr-defined]
            not_protected="non-sensitive words kept with probability 1 - p are released as they are",
        )
        return d
