"""Text in, text out: a mechanism applied to every word, with the out-of-vocabulary and case policies.

The :class:`~deniable.text.Tokenizer` (``embedding.tokenizer``) does the text work
(splitting, lookup, joining, casing, dropping); the :class:`Privatizer` decides the
policies, calls the mechanism once per batch and counts.

A keyed run gives each text its own generator (``generators=``, one per text: see
:meth:`deniable._random.RunKey.record_generator`): a text's output then depends only on
its own stream, never on which other texts share its batch.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ._errors import InvalidParameterError, NotPrivateWarning
from ._padding import Timing
from ._random import RandomState, check_random_state
from ._validation import check_choice
from .mechanisms._options import Option
from .mechanisms.base import Mechanism
from .text import CASE_POLICIES

__all__ = ["CASE_POLICIES", "OOV_POLICIES", "POLICY_OPTIONS", "PrivatizeStats", "Privatizer"]

OOV_POLICIES = ("random", "drop", "keep")
#: The policies declared as options (the registry's :class:`Option`, one place for the rule): a client
#: of the service may set them; their ``unprotected`` values copy input outside the guarantee (warned
#: here, operator-only in the service: :meth:`Option.offered_to_clients`).
POLICY_OPTIONS = {
    "oov": Option(
        "oov",
        str,
        "random",
        choices=OOV_POLICIES,
        client=True,
        unprotected=("keep",),
        help="out-of-vocabulary words: random (protected), drop, or keep (NOT protected)",
    ),
    "case": Option(
        "case",
        str,
        "sentence",
        choices=CASE_POLICIES,
        client=True,
        unprotected=("keep",),
        help="case of output words: sentence, lower, or keep (copies the input's case pattern: NOT protected)",
    ),
}
#: public words in the one long text of the padding's calibration (``pad_time=True``)
CALIBRATION_TOKENS = 256
_PADDING_LOCK = threading.Lock()


@dataclass
class PrivatizeStats:
    """Counts for a report. Kept out-of-vocabulary tokens (``oov="keep"``) are NOT protected."""

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
        What to do with a word token that is not in the embedding: replace it with a
        uniformly ``"random"`` vocabulary word (default; private), ``"drop"`` it together
        with one whitespace run and the punctuation it would leave facing an empty slot
        (``"a, zzz, b"`` -> ``"a, b"``, ``"(zzz)"`` -> ``""``; the rule is
        :func:`deniable.text.close_gap`; the number of tokens then shows how many were
        dropped), or ``"keep"`` it verbatim (NOT protected: out-of-vocabulary tokens are
        often the most identifying ones; warns
        :class:`~deniable.NotPrivateWarning`).
    random_state
        ``None`` (default): a fresh cryptographically secure generator per call.
        An int: reproducible, NOT private (warns). A Generator: used as is.
    case
        How output words are cased (:data:`CASE_POLICIES`). ``"sentence"`` (default):
        lower case, except the first word of a text and the first word after ``.``,
        ``!`` or ``?`` plus whitespace -- a function of the separators, which are
        released anyway. ``"lower"``: all lower case. ``"keep"``: each output word takes
        the input token's case pattern (``NASA`` -> ``ESA``) and a word the mechanism
        leaves unchanged is emitted exactly as typed -- this copies information from
        the input outside the guarantee (warns :class:`~deniable.NotPrivateWarning`).
    pad_time
        ``False`` (default): each call returns as soon as it is done, and its duration may
        depend on the words (which were kept, how many are distinct, frequent or rare),
        which matters where someone else observes the latency. ``True``: each call is held
        until a release time that depends only on its number of word tokens
        (:mod:`deniable._padding`: a schedule calibrated on public vocabulary words at
        the first call, doubled on a miss), as the service holds its responses; the cost
        is about twice the unpadded time of a call (docs/threat-model.md, "Time").

    check_strength
        ``True`` (default): a setting under which most words of a typical text come out
        unchanged warns :class:`~deniable.WeakPrivacyWarning` when the Privatizer is built
        (the command line's ``WEAK``; :func:`deniable.calibrate.table.warn_if_weak`, from
        public reference text: the first time for an epsilon it measures, then reads the
        stored point). ``False`` skips that check: for callers that state the strength
        themselves (the command line, :func:`deniable.privatize`, the service) and for
        engine workers, whose driver checked once.

    Lookups ignore case when the embedding is all lower case. For a case-sensitive
    embedding (any upper-case entry) lookup is exact, case is part of the word the
    mechanism protects, and the output is the vocabulary word as is under every
    ``case`` policy. Everything that is not a word token (the separators) comes back
    byte for byte; :meth:`describe` lists what is outside the guarantee.
    """

    mechanism: Mechanism
    oov: str = "random"
    random_state: RandomState = None
    case: str = "sentence"
    pad_time: bool = False
    check_strength: bool = True

    OOV_POLICIES: ClassVar[tuple[str, ...]] = OOV_POLICIES
    CASE_POLICIES: ClassVar[tuple[str, ...]] = CASE_POLICIES

    def __post_init__(self) -> None:
        if not isinstance(self.mechanism, Mechanism):
            raise InvalidParameterError("mechanism", type(self.mechanism).__name__, "a deniable mechanism object")
        check_choice("oov", self.oov, OOV_POLICIES)
        check_choice("case", self.case, CASE_POLICIES)
        # warnings point at the line that built this Privatizer
        # (frames above __post_init__: the dataclass __init__, then its caller)
        leaks = self._opt_in_leaks()
        if leaks:
            warnings.warn(
                f"{' and '.join(k for k, _ in leaks)} releases {' and '.join(v for _, v in leaks)} "
                "outside the privacy guarantee",
                NotPrivateWarning,
                stacklevel=3,
            )
        if self.random_state is not None:
            object.__setattr__(self, "_rng", check_random_state(self.random_state, stacklevel=3))
        if self.check_strength:
            from .calibrate.table import warn_if_weak

            warn_if_weak(self.mechanism, stacklevel=3)  # WEAK as the command line says it (public data only)

    def _opt_in_leaks(self) -> list[tuple[str, str]]:
        """(option, what it releases) for each explicit opt-in that copies input outside the guarantee."""
        leaks = []
        if self.oov == "keep":
            leaks.append(("oov=keep", "out-of-vocabulary tokens verbatim"))
        if self.case == "keep" and self.mechanism.embedding.is_lowercase:
            leaks.append(("case=keep", "the case pattern of every word"))
        return leaks

    def describe(self) -> dict[str, Any]:
        """The policies and ``not_protected``: each surface property of a text released outside the guarantee."""
        emb = self.mechanism.embedding
        case_sensitive = not emb.is_lowercase
        not_protected = ["separators (spaces, punctuation, line breaks, emoji) and the number of word tokens"]
        if self.oov == "keep":
            not_protected.append("out-of-vocabulary tokens, released verbatim (oov=keep)")
        elif self.oov == "drop":
            not_protected.append("the number of out-of-vocabulary tokens, which are dropped (oov=drop)")
        if self.case == "keep" and not case_sensitive:
            not_protected.append("case pattern of each word (case=keep)")
        extra = self.mechanism.describe().get("not_protected")  # e.g. santext_plus, custext_plus
        if isinstance(extra, str):
            not_protected.append(extra)
        return {
            "oov": self.oov,
            "case": self.case,
            "case_sensitive_vocabulary": case_sensitive,
            "vocabulary_size": emb.size,
            "not_protected": not_protected,
        }

    def _generator(self, random_state: RandomState) -> np.random.Generator:
        if random_state is not None:
            # a seed's warning points at the user's line: frames _generator, _work, _run, the public method
            return check_random_state(random_state, stacklevel=5)
        fixed = self.__dict__.get("_rng")
        return fixed if fixed is not None else check_random_state(None)

    def privatize(self, text: str, random_state: RandomState = None) -> str:
        """Privatize one text.

        ``random_state`` (this call only): ``None`` uses the Privatizer's own (fresh secure
        randomness unless it was built with one); an int or a Generator as everywhere.
        """
        if not isinstance(text, str):
            raise InvalidParameterError("text", type(text).__name__, "a str")
        return self._run([text], random_state)[0][0]

    def privatize_batch(self, texts: Sequence[str], random_state: RandomState = None) -> list[str]:
        """Privatize many texts (a list of str, not one str) with one vectorized mechanism call."""
        return self._run(texts, random_state)[0]

    def privatize_batch_with_stats(
        self,
        texts: Sequence[str],
        random_state: RandomState = None,
        *,
        generators: Sequence[np.random.Generator] | None = None,
    ) -> tuple[list[str], PrivatizeStats]:
        """Like :meth:`privatize_batch`, also returning token / OOV / changed counts.

        ``generators`` (instead of ``random_state``): one generator per text; each text's
        words (and out-of-vocabulary replacements) draw from its own generator only
        (:meth:`~deniable.mechanisms.Mechanism.privatize_records`).
        """
        if generators is not None:
            if random_state is not None:
                raise InvalidParameterError("random_state", "a value", "None when generators are given")
            if len(generators) != len(texts):
                raise InvalidParameterError("generators", len(generators), f"one per text ({len(texts)})")
        return self._run(texts, random_state, generators)

    def _run(
        self,
        texts: Sequence[str],
        random_state: RandomState,
        generators: Sequence[np.random.Generator] | None = None,
    ) -> tuple[list[str], PrivatizeStats]:
        if not self.pad_time:
            return self._work(texts, random_state, generators)
        timing = self._timing()
        start = timing.clock()
        result = self._work(texts, random_state, generators)
        timing.wait("privatize", result[1].tokens, start)  # the token count is public: the output has it
        return result

    def _timing(self) -> Timing:
        """The padding schedule, calibrated on public vocabulary words at the first call."""
        timing = self.__dict__.get("_padding")
        if timing is None:
            with _PADDING_LOCK:
                timing = self.__dict__.get("_padding")
                if timing is None:
                    timing = Timing(timeout_s=math.inf)
                    timing.calibrate("privatize", self._measure, units=CALIBRATION_TOKENS)
                    object.__setattr__(self, "_padding", timing)
        return timing

    def _measure(self, n: int, probe: int) -> float:
        """Seconds for one text of ``n`` public words: the most frequent, middle or rarest (``probe``) for one."""
        emb = self.mechanism.embedding
        last = emb.size - 1
        ids = [(0, last // 2, last)[probe % 3]] if n == 1 else np.linspace(0, last, n).astype(int)
        text = " ".join(emb.words(ids))
        gen = check_random_state(None)
        t0 = time.perf_counter()
        self._work([text], gen)
        return time.perf_counter() - t0

    def _work(
        self,
        texts: Sequence[str],
        random_state: RandomState,
        generators: Sequence[np.random.Generator] | None = None,
    ) -> tuple[list[str], PrivatizeStats]:
        tokenizer = self.mechanism.embedding.tokenizer
        doc = tokenizer.tokenize(texts)
        ids = doc.ids
        known = ids >= 0
        out = ids.copy()
        n_oov = len(ids) - int(known.sum())
        if generators is not None:
            self._per_record(doc.offsets, ids, known, out, generators)
        else:
            gen = self._generator(random_state)
            if known.any() and getattr(self.mechanism, "joint_decode", False):
                # a contextual decode (madlib's prior="ngram:PATH"): each text decoded on its own
                starts = np.r_[0, np.cumsum(known)][doc.offsets]
                out[known] = self.mechanism.privatize_texts(ids[known], starts, gen)  # type: ignore[attr-defined]
            elif known.any():
                out[known] = self.mechanism.privatize(ids[known], gen)
            if n_oov and self.oov == "random":
                out[~known] = gen.integers(0, self.mechanism.embedding.size, size=n_oov)
        verbatim = drop = None
        if n_oov and self.oov == "drop":
            drop = ~known
        elif n_oov and self.oov == "keep":
            verbatim = ~known
        if self.case == "keep":  # a word left unchanged is emitted exactly as typed
            same = known & (out == ids)
            verbatim = same if verbatim is None else verbatim | same
        result = tokenizer.render(doc, out, case=self.case, verbatim=verbatim, drop=drop)
        changed = int((out[known] != ids[known]).sum())
        stats = PrivatizeStats(texts=len(doc.parts), tokens=len(ids), oov=n_oov, changed=changed)
        return result, stats

    def _per_record(
        self,
        offsets: np.ndarray,
        ids: np.ndarray,
        known: np.ndarray,
        out: np.ndarray,
        generators: Sequence[np.random.Generator],
    ) -> None:
        """Text ``t``'s words from ``generators[t]`` (the mechanism's draws, then its OOV replacements)."""
        spans = [(int(offsets[t]), int(offsets[t + 1])) for t in range(len(generators))]
        records = [ids[a:b][known[a:b]] for a, b in spans]
        new = self.mechanism.privatize_records(records, generators)
        size = self.mechanism.embedding.size
        for (a, b), gen, rec in zip(spans, generators, new, strict=True):
            k = known[a:b]
            out[a:b][k] = rec
            missing = int(b - a - rec.size)
            if missing and self.oov == "random":
                out[a:b][~k] = gen.integers(0, size, size=missing)
