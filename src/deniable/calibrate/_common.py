"""Shared by the calibration modules: defaults, the word selection and the one randomness rule.

Randomness: every public calibration entry point takes ``random_state`` and turns it
into a generator with :func:`statistics_generator`. Calibration releases statistics
about the mechanism, never private text, so an int seed is a reproducible experiment
and does NOT warn (unlike a seeded privatization, which is not private).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .._errors import InvalidParameterError
from .._random import RandomState, check_random_state, seeded_generator
from .._validation import check_int

if TYPE_CHECKING:
    from ..embedding import Vocabulary

__all__ = [
    "DEFAULT_ETA",
    "NEAR_K",
    "WordsArg",
    "cosines",
    "nearest_other_words",
    "resolve_words",
    "statistics_generator",
]

#: Default eta of the eta-support: the smallest set of outputs carrying >= 95% of the mass.
DEFAULT_ETA = 0.05

# Relative slack when comparing a cumulative probability with 1 - eta (rounding of sums).
_CUM_RTOL = 1e-12

WordsArg = None | int | Sequence[str] | Sequence[int] | npt.NDArray[np.integer]


def statistics_generator(random_state: RandomState = None, rng: RandomState = None) -> np.random.Generator:
    """The generator of a calibration entry point: ``None`` = secure OS randomness, an int = a
    reproducible generator WITHOUT the NotPrivateWarning (statistics are not releases), a
    Generator = used as is.

    ``rng`` is the old name of the keyword, still accepted (the CLI's ``--seed`` passes it);
    giving both is an error.
    """
    if rng is not None:
        if random_state is not None:
            raise InvalidParameterError("rng", "given with random_state", "only one of random_state and rng")
        random_state = rng
    if isinstance(random_state, int | np.integer) and not isinstance(random_state, bool):
        return seeded_generator(int(check_int("random_state", random_state, minimum=0)), warn=False)
    return check_random_state(random_state)


def resolve_words(
    embedding: Vocabulary, words: WordsArg = None, random_state: RandomState = None
) -> npt.NDArray[np.int64]:
    """Turn ``words`` into sorted-as-given word ids.

    ``None``: the whole vocabulary. An ``int`` ``n``: a uniform random sample of ``n``
    distinct words drawn with ``random_state`` (sorted by id). Strings: looked up (an unknown
    word is an error that does not show the word). Integers: validated ids.
    """
    if words is None:
        return np.arange(embedding.size, dtype=np.int64)
    if isinstance(words, int | np.integer) and not isinstance(words, bool):
        n = check_int("words", words, minimum=1)
        if n >= embedding.size:
            return np.arange(embedding.size, dtype=np.int64)
        rng = statistics_generator(random_state)
        return np.sort(rng.choice(embedding.size, size=n, replace=False)).astype(np.int64)
    if isinstance(words, str):
        words = [words]
    seq: Any = words if isinstance(words, np.ndarray) else list(words)  # type: ignore[arg-type]
    if len(seq) == 0:
        raise InvalidParameterError("words", "[]", "at least one word")
    if isinstance(seq, np.ndarray) or not isinstance(seq[0], str):
        return embedding.check_ids(np.asarray(seq), "words")
    ids = embedding.ids([str(w) for w in seq])
    if (ids < 0).any():
        raise InvalidParameterError(
            "words", f"<{int((ids < 0).sum())} word(s) not shown>", "words in the embedding's vocabulary"
        )
    return ids


# -- the reference words' geometry (calibration tables) ------------------------------------------


def cosines(embedding: Vocabulary, a: npt.NDArray[np.int64], b: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """The cosine of each pair of rows ``(a[i], b[i])`` of the embedding (0 where a vector is zero)."""
    vecs = embedding.vectors  # type: ignore[attr-defined]
    x = np.asarray(vecs[a], dtype=np.float64)
    y = np.asarray(vecs[b], dtype=np.float64)
    num = np.einsum("ij,ij->i", x, y)
    den = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


#: A replacement among the input's this many nearest other words (Euclidean, the embedding's own
#: vectors) counts as "near": the text keeps its meaning there.
NEAR_K = 10


def nearest_other_words(
    embedding: Vocabulary, ids: npt.NDArray[np.int64], k: int = NEAR_K
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """``(words, nn)``: the distinct ``ids`` (sorted) and, per row, its ``k`` nearest other words
    (exact Euclidean search; -1 pads a vocabulary smaller than ``k + 1``)."""
    from ..index.exact import ExactIndex

    vecs = np.asarray(embedding.vectors, dtype=np.float32)  # type: ignore[attr-defined]
    words = np.unique(ids)
    kk = min(k + 1, embedding.size)
    _, found = ExactIndex(vecs).search(vecs[words], kk)
    nn = np.full((words.size, k), -1, dtype=np.int64)
    for r in range(words.size):  # drop the word itself (it is not always first when vectors coincide)
        others = found[r][found[r] != words[r]][:k]
        nn[r, : others.size] = others
    return words, nn
