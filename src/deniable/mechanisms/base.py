"""What every word mechanism is: a frozen, validated object with one hot method.

``privatize(ids, rng) -> ids`` maps an int64 array of word ids to an array of the
same shape, each element drawn independently from the mechanism's output
distribution for that input. It never keeps state between calls: the generator is
an argument, so one mechanism object is safe to share across threads and requests.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ..embedding import Embedding

__all__ = ["Mechanism"]


class Mechanism(abc.ABC):
    """Base class of word-level metric-DP mechanisms.

    Subclasses are frozen dataclasses with at least ``embedding`` and ``epsilon``
    fields, validate every parameter in ``__post_init__``, and implement
    :meth:`privatize` and :meth:`distance`.
    """

    #: The short name used on the command line (``--mechanism``).
    name: ClassVar[str] = ""
    #: The metric the guarantee is stated in ("euclidean", "hamming", ...).
    metric: str

    embedding: Embedding
    epsilon: float

    @abc.abstractmethod
    def privatize(self, ids: npt.ArrayLike, rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """Replace each word id independently with a random output id."""

    @abc.abstractmethod
    def distance(self, w: int, w2: int) -> float:
        """``d(w, w2)`` in the metric the guarantee is stated in."""

    def guarantee(self, w: int | str, w2: int | str) -> float:
        """The bound on the log-likelihood ratio: ``eps * d(w, w2)``.

        For every output y: ``log Pr[M(w)=y] - log Pr[M(w2)=y] <= guarantee(w, w2)``.
        Words may be given as ids or strings.
        """
        return float(self.epsilon) * float(self.distance(self._id(w), self._id(w2)))

    def _id(self, w: int | str) -> int:
        from .._errors import InvalidParameterError

        if isinstance(w, str):
            i = self.embedding.index_of.get(w)
            if i is None:
                raise InvalidParameterError("word", "<not shown>", "a word in the embedding's vocabulary")
            return i
        i = int(w)
        if not 0 <= i < self.embedding.size:
            raise InvalidParameterError("word id", i, f"an id in [0, {self.embedding.size - 1}]")
        return i

    def describe(self) -> dict[str, object]:
        """Parameters for reports and output metadata (never any user text)."""
        return {"mechanism": self.name, "epsilon": float(self.epsilon), "metric": self.metric}
