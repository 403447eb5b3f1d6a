"""The one batch function every engine calls: :class:`BatchPrivatizer`.

A :class:`BatchPrivatizer` is a small, picklable description of a privatization run
(mechanism name, epsilon, options, embedding path, policies, columns, an optional
experiment seed). It holds no vectors: the first call in a worker process loads the
embedding (memory-mapped when it is the built-in default or a folder written by
:meth:`~deniable.Embedding.save`), builds the mechanism and the
:class:`~deniable.Privatizer` once, and keeps them in a module-level cache keyed by the
parameters, so every later batch in that process reuses them. Spark, Ray, Dask,
Hugging Face ``datasets`` and the scikit-learn transformer are thin layers over it.

Randomness: without a seed every call draws a fresh cryptographically secure generator
from the operating system (never a seed derived from a partition number). With an
explicit ``seed`` (experiments only: the output is NOT private) a stream is derived per
partition with ``np.random.SeedSequence(seed).spawn`` semantics (``spawn_key=(key,)``).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import InvalidParameterError, NotPrivateWarning
from .._validation import check_choice, check_epsilon
from ..privatizer import CASE_POLICIES, OOV_POLICIES, PrivatizeStats

if TYPE_CHECKING:
    from ..privatizer import Privatizer

__all__ = ["LOAD_LOG_ENV", "BatchPrivatizer", "clear_cache", "load_count"]

#: If set to a folder, each artefact load writes one empty file ``<pid>-<n>`` there (operations
#: and tests count loads per worker; the file names hold no data).
LOAD_LOG_ENV = "DENIABLE_LOAD_LOG"

_cache: dict[tuple[Any, ...], Privatizer] = {}
_lock = threading.Lock()
_loads = 0


def load_count() -> int:
    """How many times this process loaded an embedding and built a mechanism for a batch function."""
    return _loads


def clear_cache() -> None:
    """Forget the cached privatizers of this process (the next batch loads again)."""
    with _lock:
        _cache.clear()


def _freeze(options: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((str(k), v) for k, v in options.items()))


@dataclass(frozen=True)
class BatchPrivatizer:
    """A picklable batch function: strings in, privatized strings (and counts) out.

    Parameters
    ----------
    mechanism, epsilon, options
        A registered mechanism name (``deniable.mechanisms.mechanism_names()``), its
        epsilon and its declared options (validated here, on the driver).
    embedding
        ``None`` for the built-in GloVe 6B 50-d, or a path every worker can read: a folder
        written by :meth:`~deniable.Embedding.save` (memory-mapped) or an embedding file.
        ``"sparkfiles:NAME"`` names a file or folder shipped to every Spark executor with
        ``SparkContext.addFile(path, recursive=True)`` / ``spark-submit --files``: each
        worker resolves it with ``pyspark.SparkFiles.get(NAME)``.
        Never an :class:`~deniable.Embedding` object: vectors are not pickled to workers.
    vocab_size, vocabulary, oov, case
        As for :func:`deniable.load_embedding` and :class:`deniable.Privatizer`.
    columns
        The text columns a table batch has privatized (every other column is untouched).
    seed
        ``None`` (default): fresh OS randomness per call. An int: reproducible streams per
        partition key, NOT private (warns :class:`~deniable.NotPrivateWarning`).
    """

    mechanism: str = "madlib"
    epsilon: float = 10.0
    options: Mapping[str, Any] = field(default_factory=dict)
    embedding: str | None = None
    vocab_size: int | None = None
    vocabulary: str = "words"
    oov: str = "random"
    case: str = "sentence"
    columns: tuple[str, ...] = ()
    seed: int | None = None

    @classmethod
    def for_columns(
        cls, columns: Sequence[str] | str, mechanism: str = "madlib", epsilon: float = 10.0, **params: Any
    ) -> BatchPrivatizer:
        """The engines' one front: ``params`` are this class's other fields (``embedding``,
        ``vocab_size``, ``vocabulary``, ``oov``, ``case``, ``seed``) and, beyond them, the
        mechanism's declared options (e.g. ``gamma=`` for TEM)."""
        own = {f.name for f in fields(cls)} - {"mechanism", "epsilon", "options", "columns"}
        options = {k: v for k, v in params.items() if k not in own}
        kept = {k: v for k, v in params.items() if k in own}
        cols = (columns,) if isinstance(columns, str) else tuple(columns)
        return cls(mechanism=mechanism, epsilon=epsilon, options=options, columns=cols, **kept)

    def __post_init__(self) -> None:
        from ..mechanisms import validate_options

        check_epsilon(self.epsilon, "epsilon")
        object.__setattr__(self, "options", dict(validate_options(self.mechanism, dict(self.options or {}))))
        if self.embedding is not None:
            if not isinstance(self.embedding, str | os.PathLike):
                raise InvalidParameterError(
                    "embedding",
                    type(self.embedding).__name__,
                    "None (the built-in GloVe) or a path every worker can read",
                )
            object.__setattr__(self, "embedding", str(self.embedding))
        if self.vocab_size is not None and (isinstance(self.vocab_size, bool) or int(self.vocab_size) < 1):
            raise InvalidParameterError("vocab_size", self.vocab_size, "an integer >= 1")
        check_choice("vocabulary", self.vocabulary, ("words", "all"))
        check_choice("oov", self.oov, OOV_POLICIES)
        check_choice("case", self.case, CASE_POLICIES)
        cols = (self.columns,) if isinstance(self.columns, str) else tuple(self.columns or ())
        object.__setattr__(self, "columns", tuple(dict.fromkeys(cols)))
        if self.seed is not None:
            if isinstance(self.seed, bool) or not isinstance(self.seed, int | np.integer) or self.seed < 0:
                raise InvalidParameterError("seed", self.seed, "a non-negative integer")
            warnings.warn(
                f"seed={int(self.seed)} makes the output reproducible: anyone who knows the seed can "
                "recompute the noise, so seeded output is NOT private. Use it for experiments only.",
                NotPrivateWarning,
                stacklevel=3,
            )

    # -- the cached privatizer ----------------------------------------------------------------
    @property
    def key(self) -> tuple[Any, ...]:
        """What identifies the loaded artefacts (columns and seed are not part of it)."""
        return (
            self.mechanism,
            float(self.epsilon),
            _freeze(self.options),
            self.embedding,
            self.vocab_size,
            self.vocabulary,
            self.oov,
            self.case,
        )

    def privatizer(self) -> Privatizer:
        """The :class:`~deniable.Privatizer` of this process, loaded once (thread-safe)."""
        key = self.key
        found = _cache.get(key)
        if found is not None:
            return found
        with _lock:
            found = _cache.get(key)
            if found is None:
                found = _cache[key] = self._load()
        return found

    def _load(self) -> Privatizer:
        global _loads
        from ..embedding import load_embedding
        from ..mechanisms import make_mechanism
        from ..privatizer import Privatizer

        emb = load_embedding(_local_path(self.embedding), vocab_size=self.vocab_size, vocabulary=self.vocabulary)
        mech = make_mechanism(self.mechanism, emb, self.epsilon, **self.options)
        with warnings.catch_warnings():  # the driver warned already; workers stay quiet
            warnings.simplefilter("ignore", NotPrivateWarning)
            priv = Privatizer(mech, oov=self.oov, case=self.case)
        _loads += 1
        log = os.environ.get(LOAD_LOG_ENV)
        if log:
            Path(log, f"{os.getpid()}-{_loads}").touch()
        return priv

    # -- randomness -----------------------------------------------------------------------------
    def generator(self, key: int | None = None) -> np.random.Generator:
        """Fresh OS randomness, or (with a seed) the stream of partition ``key``."""
        from .._random import secure_generator

        if self.seed is None:
            return secure_generator()
        if key is None:
            raise InvalidParameterError("seed", self.seed, "None here: this engine gives batches no stable key")
        from randomgen import ChaCha

        child = np.random.SeedSequence(int(self.seed), spawn_key=(int(key),))
        words = child.generate_state(8, dtype=np.uint32)
        return np.random.Generator(ChaCha(key=int.from_bytes(words.tobytes(), "little"), counter=0, rounds=20))

    # -- batches ------------------------------------------------------------------------------
    def privatize_texts(
        self, texts: Sequence[str | None], rng: np.random.Generator | None = None
    ) -> tuple[list[str | None], PrivatizeStats]:
        """Privatize a batch of strings (``None`` stays ``None``) with one mechanism call."""
        values = list(texts)
        present = [i for i, t in enumerate(values) if t is not None]
        if not present:
            return values, PrivatizeStats()
        gen = self.generator() if rng is None else rng
        for i in present:
            if not isinstance(values[i], str):
                raise InvalidParameterError("texts", type(values[i]).__name__, f"str values (item {i})")
        out, stats = self.privatizer().privatize_batch_with_stats([values[i] for i in present], gen)  # type: ignore[misc]
        result: list[str | None] = list(values)
        for i, text in zip(present, out, strict=True):
            result[i] = text
        return result, stats

    def privatize_columns(
        self, columns: Mapping[str, Sequence[str | None]], rng: np.random.Generator | None = None
    ) -> tuple[dict[str, list[str | None]], PrivatizeStats]:
        """Privatize the named :attr:`columns` of a batch, all in one mechanism call."""
        if not self.columns:
            raise InvalidParameterError("columns", None, "at least one text column")
        missing = [c for c in self.columns if c not in columns]
        if missing:
            raise InvalidParameterError("columns", missing[0], "a column of the data")
        flat: list[str | None] = []
        sizes = []
        for c in self.columns:
            values = list(columns[c])
            flat.extend(values)
            sizes.append(len(values))
        out, stats = self.privatize_texts(flat, rng)
        result = {}
        start = 0
        for c, n in zip(self.columns, sizes, strict=True):
            result[c] = out[start : start + n]
            start += n
        return result, stats

    def privatize_pandas(self, df: Any, key: int | None = None) -> Any:
        """A pandas DataFrame with :attr:`columns` privatized (a copy; every other column kept)."""
        cols = {c: [None if _isnull(v) else v for v in df[c].tolist()] for c in self.columns if c in df.columns}
        if len(cols) < len(self.columns):
            missing = next(c for c in self.columns if c not in df.columns)
            raise InvalidParameterError("columns", missing, "a column of the data")
        new, _ = self.privatize_columns(cols, self.generator(key))
        out = df.copy()
        for c, values in new.items():
            out[c] = _like(df[c], values)
        return out

    def __call__(self, batch: Any, indices: Sequence[int] | None = None) -> Any:
        """Privatize a table batch: a pandas DataFrame, or a ``{column: values}`` mapping.

        A mapping comes back with only the privatized columns (Hugging Face ``datasets``
        updates those and keeps the rest). ``indices`` (``datasets`` ``with_indices=True``)
        key a seeded stream by the batch's first row.
        """
        key = int(indices[0]) if indices is not None and len(indices) else None
        if not isinstance(batch, Mapping):
            return self.privatize_pandas(batch, key)
        missing = [c for c in self.columns if c not in batch]
        if missing:
            raise InvalidParameterError("columns", missing[0], "a column of the data")
        values = {c: [None if _isnull(v) else v for v in _tolist(batch[c])] for c in self.columns}
        new, _ = self.privatize_columns(values, self.generator(key) if self.seed is not None else None)
        return new

    def describe(self) -> dict[str, Any]:
        """The run's parameters (no text): for a manifest."""
        return {
            "mechanism": self.mechanism,
            "epsilon": float(self.epsilon),
            "options": dict(self.options),
            "embedding": self.embedding or "glove-6b-50d",
            "vocab_size": self.vocab_size,
            "vocabulary": self.vocabulary,
            "oov": self.oov,
            "case": self.case,
            "columns": list(self.columns),
            "seeded": self.seed is not None,
        }


SPARK_FILES = "sparkfiles:"


def _local_path(embedding: str | None) -> str | None:
    """The worker-local path of ``embedding`` (``sparkfiles:NAME``: where Spark put the shipped copy)."""
    if embedding is None or not embedding.startswith(SPARK_FILES):
        return embedding
    from pyspark import SparkFiles

    return SparkFiles.get(embedding[len(SPARK_FILES) :])


def _isnull(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float):
        return value != value  # NaN
    return type(value).__name__ in ("NAType", "NaTType")  # pandas missing values


def _tolist(values: Any) -> list[Any]:
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _like(series: Any, values: list[str | None]) -> Any:
    import pandas as pd

    return pd.Series(values, index=series.index, dtype=series.dtype if series.dtype != "float64" else object)
