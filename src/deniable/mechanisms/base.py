"""What every word mechanism is: a frozen, validated object with one hot method.

``privatize(ids, rng) -> ids`` maps an int64 array of word ids to an array of the
same shape, each element drawn independently from the mechanism's output
distribution for that input. It never keeps state between calls: the generator is
an argument, so one mechanism object is safe to share across threads and requests.

``privatize_records(records, generators) -> list of ids`` privatizes several records, each
from its own generator (keyed runs: a record's output is a function of its own stream only,
whatever batch it is in). The default privatizes record by record; a mechanism that adds
noise then decodes draws each record's noise from its stream and decodes all of them in one
batched call (:meth:`Mechanism._privatize_records`).
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar, TypeVar

import numpy as np
import numpy.typing as npt

from .._random import RandomState, check_random_state
from ._options import Option

if TYPE_CHECKING:
    from ..embedding import Vocabulary

__all__ = ["Mechanism"]

T = TypeVar("T")
_LOCK_OF_LOCKS = threading.Lock()


class Mechanism(abc.ABC):
    """Base class of word-level metric-DP mechanisms.

    Subclasses are frozen dataclasses with at least ``embedding`` and ``epsilon``
    fields, declare their other options in :attr:`options`, validate every parameter
    in ``__post_init__`` (cheaply: heavy artefacts are built on first use), and
    implement :meth:`_privatize` and :meth:`distance`.
    """

    #: The short name used on the command line (``--mechanism``).
    name: ClassVar[str] = ""
    #: The metric the guarantee is stated in ("euclidean", "hamming", ...).
    metric: str

    #: Capability: the mechanism can state its exact output distribution for a word
    #: (:meth:`distribution`). Sampling tests, calibration and ``explain`` dispatch on it.
    has_distribution: ClassVar[bool] = False

    #: Capability: the form of the guarantee. ``"metric"``: ``epsilon * d(w, w')`` for every pair of
    #: vocabulary words in :attr:`metric` (seed 001's privacy ratio applies). Anything else is one
    #: sentence saying how it differs (``deniable compare`` refuses such mechanisms and prints it).
    guarantee_form: ClassVar[str] = "metric"

    #: The options the constructor takes besides ``embedding`` and ``epsilon``, declared once:
    #: the registry validates them, the CLI makes flags of them, the service a request schema.
    options: ClassVar[tuple[Option, ...]] = ()

    embedding: Vocabulary
    epsilon: float

    def privatize(self, ids: npt.ArrayLike, rng: RandomState = None) -> npt.NDArray[np.int64]:
        """Replace each word id independently with a random output id.

        ``ids`` are validated once here (int64 ids of the embedding, any shape); ``rng``
        follows the ``random_state`` rule: ``None`` = fresh OS randomness, an int = a
        reproducible stream (warns: NOT private), a ``Generator`` = used as is.
        """
        arr = self.embedding.check_ids(ids)
        gen = check_random_state(rng, stacklevel=2)
        flat = arr.ravel()
        if flat.size == 0:
            return np.empty(arr.shape, dtype=np.int64)
        return self._privatize(flat, gen).reshape(arr.shape)

    @abc.abstractmethod
    def _privatize(self, ids: npt.NDArray[np.int64], rng: np.random.Generator) -> npt.NDArray[np.int64]:
        """The hot path: ``ids`` is a validated, non-empty 1-d int64 array."""

    def privatize_records(
        self, records: Sequence[npt.ArrayLike], generators: Sequence[np.random.Generator]
    ) -> list[npt.NDArray[np.int64]]:
        """Privatize each record (an array of word ids) with its own generator, as 1-d int64 arrays.

        Record ``i``'s output depends only on ``records[i]`` and ``generators[i]`` (never on
        the other records, nor on how records are grouped in calls): what makes a keyed run's
        output the same whatever its batch size, processes or partitioning.
        """
        from .._errors import InvalidParameterError

        if len(records) != len(generators):
            raise InvalidParameterError("generators", len(generators), f"one generator per record ({len(records)})")
        arrays = [self.embedding.check_ids(r).ravel() for r in records]
        for g in generators:
            if not isinstance(g, np.random.Generator):
                raise InvalidParameterError("generators", type(g).__name__, "numpy Generators")
        out: list[npt.NDArray[np.int64] | None] = [None] * len(arrays)
        full = [i for i, a in enumerate(arrays) if a.size]
        for i, a in enumerate(arrays):
            if not a.size:
                out[i] = np.empty(0, dtype=np.int64)
        if full:
            done = self._privatize_records([arrays[i] for i in full], [generators[i] for i in full])
            for i, res in zip(full, done, strict=True):
                out[i] = res
        return out  # type: ignore[return-value]

    def _privatize_records(
        self, records: list[npt.NDArray[np.int64]], generators: list[np.random.Generator]
    ) -> list[npt.NDArray[np.int64]]:
        """Validated, non-empty 1-d records. Default: :meth:`_privatize` per record (any mechanism)."""
        return [self._privatize(r, g) for r, g in zip(records, generators, strict=True)]

    def distribution(self, w: int | str) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The exact output distribution of word ``w``: ``(ids, probabilities)``.

        Only mechanisms with ``has_distribution = True`` implement it.
        """
        from .._errors import InvalidParameterError

        raise InvalidParameterError("mechanism", self.name, "a mechanism with an exact output distribution")

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

    def _artefact(self, name: str, build: Callable[[], T]) -> T:
        """The input-independent artefact ``name`` (an index, tables, a covariance...), built
        once by ``build()`` on first use, thread-safe.

        Constructors stay cheap: they only validate and record; whatever is expensive is built
        here, once per object, under the object's (re-entrant) lock.
        """
        found = self.__dict__.get(name)
        if found is not None:
            return found
        with _LOCK_OF_LOCKS:
            lock = self.__dict__.setdefault("_artefact_lock", threading.RLock())
        with lock:
            found = self.__dict__.get(name)
            if found is None:
                found = build()
                object.__setattr__(self, name, found)  # frozen dataclasses too
        return found
