"""Text in, text out: tokenizer + case/OOV policy + a mechanism, in batches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ._errors import InvalidParameterError
from ._random import RandomState, check_random_state
from ._validation import check_choice
from .mechanisms.base import Mechanism
from .text import WORD_PATTERN, apply_case

__all__ = ["OOV_POLICIES", "PrivatizeStats", "Privatizer"]

OOV_POLICIES = ("keep", "drop", "random")


@dataclass
class PrivatizeStats:
    """Counts for a report. Kept out-of-vocabulary tokens are NOT protected."""

    texts: int = 0
    tokens: int = 0
    oov: int = 0
    changed: int = 0

    def __iadd__(self, other: PrivatizeStats) -> PrivatizeStats:
        self.texts += other.texts
        self.tokens += other.tokens
        self.oov += other.oov
        self.changed += other.changed
        return self

    @property
    def oov_rate(self) -> float:
        return self.oov / self.tokens if self.tokens else 0.0


@dataclass(frozen=True)
class Privatizer:
    """Privatize text with a word mechanism.

    Parameters
    ----------
    mechanism
        Any :class:`~deniable.mechanisms.Mechanism`.
    oov
        What to do with a word token that is not in the embedding: ``"keep"`` it as is
        (default; NOT protected, and counted), ``"drop"`` it (separators around it stay),
        or replace it with a uniformly ``"random"`` vocabulary word (private).
    random_state
        ``None`` (default): a fresh cryptographically secure generator per call.
        An int: reproducible, NOT private (warns). A Generator: used as is.

    Lookups ignore case when the embedding is all lower case; an output word takes the
    input token's case pattern (``Hockey`` -> ``Soccer``, ``NASA`` -> ``ESA``), and when
    the mechanism returns the input word the original token is emitted unchanged.
    Everything that is not a word token comes back byte for byte.
    """

    mechanism: Mechanism
    oov: str = "keep"
    random_state: RandomState = None

    OOV_POLICIES: ClassVar[tuple[str, ...]] = OOV_POLICIES

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, Mechanism):
            raise InvalidParameterError("mechanism", type(self.mechanism).__name__, "a deniable mechanism object")
        check_choice("oov", self.oov, OOV_POLICIES)
        if self.random_state is not None:
            # the "NOT private" warning points at the line that built this Privatizer
            # (frames above __post_init__: the dataclass __init__, then its caller)
            object.__setattr__(self, "_rng", check_random_state(self.random_state, stacklevel=3))

    def _generator(self, rng: np.random.Generator | None) -> np.random.Generator:
        if rng is not None:
            return rng
        fixed = self.__dict__.get("_rng")
        return fixed if fixed is not None else check_random_state(None)

    def privatize(self, text: str, rng: np.random.Generator | None = None) -> str:
        """Privatize one text."""
        return self.privatize_batch([text], rng)[0]

    def privatize_batch(self, texts: Sequence[str], rng: np.random.Generator | None = None) -> list[str]:
        """Privatize many texts with one vectorized mechanism call."""
        return self.privatize_batch_with_stats(texts, rng)[0]

    def privatize_batch_with_stats(
        self, texts: Sequence[str], rng: np.random.Generator | None = None
    ) -> tuple[list[str], PrivatizeStats]:
        """Like :meth:`privatize_batch`, also returning token / OOV / changed counts."""
        gen = self._generator(rng)
        emb = self.mechanism.embedding
        lower = emb.is_lowercase
        splits: list[list[str]] = []
        tokens: list[str] = []
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise InvalidParameterError(
                    f"texts[{i}]", type(t).__name__, "a str (None/NaN cells must be handled by the caller)"
                )
            parts = WORD_PATTERN.split(t)
            splits.append(parts)
            tokens.extend(parts[1::2])
        keys = [w.lower() for w in tokens] if lower else tokens
        get = emb.index_of.get
        ids = np.fromiter((get(w, -1) for w in keys), dtype=np.int64, count=len(keys))
        known = ids >= 0
        out = ids.copy()
        if known.any():
            out[known] = self.mechanism.privatize(ids[known], gen)
        n_oov = int((~known).sum())
        if n_oov and self.oov == "random":
            out[~known] = gen.integers(0, emb.size, size=n_oov)
        changed = out != ids
        # Rewrite only the tokens that change (or are dropped); everything else is kept as is.
        counts = np.fromiter((len(parts) // 2 for parts in splits), dtype=np.int64, count=len(splits))
        offsets = np.concatenate([[0], np.cumsum(counts)])
        words_of = emb._words  # hot path: avoid the copy made by .vocabulary
        touch = np.nonzero(changed | ((ids < 0) & (self.oov == "drop")))[0]
        text_of = np.searchsorted(offsets, touch, side="right") - 1
        for k, t in zip(touch.tolist(), text_of.tolist(), strict=True):
            parts = splits[t]
            slot = 2 * (k - int(offsets[t])) + 1
            if ids[k] < 0 and self.oov == "drop":
                parts[slot] = ""
            elif lower:
                parts[slot] = apply_case(parts[slot], words_of[out[k]])
            else:
                parts[slot] = words_of[out[k]]
        result = ["".join(parts) for parts in splits]
        stats = PrivatizeStats(texts=len(texts), tokens=len(tokens), oov=n_oov, changed=int(changed[known].sum()))
        return result, stats
