"""The one batch function every engine calls: :class:`BatchPrivatizer`.

A :class:`BatchPrivatizer` is a small, picklable description of a privatization run
(mechanism name, epsilon, options, embedding path, policies, columns, an optional
experiment seed). It holds no vectors: the first call in a worker process loads the
embedding (memory-mapped when it is the built-in default or a folder written by
:meth:`~deniable.Embedding.save`), builds the mechanism and the
:class:`~deniable.Privatizer` once, and keeps them in a module-level cache keyed by the
parameters, so every later batch in that process reuses them. Spark, Ray, Dask,
Hugging Face ``datasets`` and the scikit-learn transformer are thin layers over it.

Randomness: a :class:`BatchPrivatizer` is one *run*. It holds a :class:`~deniable._random.RunKey`
(256 bits from the operating system, made when the object is built on the driver, never
derived from the data) and every record whose engine knows where it is -- its position in
the input (``datasets`` indices, Dask partition offsets), its partition and row (Spark) or
its id (``id_column``) -- draws from its own ChaCha20 stream keyed by the run key, that
position, its column and its text (:meth:`RunKey.record_generator`). Recomputing it (a task
retry, speculative execution, a second action on the same DataFrame, another batch size or
``num_proc``) therefore reproduces the same release instead of releasing the records again
with fresh noise; a new :class:`BatchPrivatizer` is a new, independent run. A batch whose
records have no known position (Ray without ``id_column``) draws fresh OS randomness. An
explicit ``seed`` (experiments only: NOT private) derives the run key from the seed.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import InvalidParameterError, NotPrivateWarning
from .._random import RunKey
from .._threads import engine_task
from .._validation import check_choice, check_epsilon
from ..io._columns import check_unique_columns
from ..privatizer import CASE_POLICIES, OOV_POLICIES, PrivatizeStats

if TYPE_CHECKING:
    from ..privatizer import Privatizer

__all__ = ["LOAD_LOG_ENV", "BatchPrivatizer", "clear_cache", "load_count"]

from ..api import LOAD_LOG_ENV, cached_privatizer, clear_cache, load_count  # the one per-process cache


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
        ``None`` (default): the run's key comes from the OS. An int: the run key is derived
        from it, so output is reproducible across runs, NOT private (warns
        :class:`~deniable.NotPrivateWarning`).
    run_key
        ``None`` (default): a fresh :class:`~deniable._random.RunKey` from the OS for this
        run. A :class:`RunKey` or its 64 hex digits (:meth:`RunKey.hex`) reproduces a
        run's noise exactly (e.g. re-running a failed job over the SAME input; never use
        one key for different data).
    id_column
        For engines whose batches have no stable identity (Ray): a column holding a unique
        id per record (int or str). Each record then draws from its own keyed stream
        (one mechanism call per record: slower), so recomputation reproduces it. Ids
        must be unique: two records with one id would share a stream.
    accountant, dataset
        The budget (:class:`~deniable.budget.BudgetAccountant`; ``None``: the default
        accountant) charged once for this run, here, on the driver, before any job runs
        or any noise is drawn: over budget raises :class:`~deniable.budget.BudgetError`.
        ``dataset`` names the data (a name or a path; ``None``: unlabelled). Neither is
        kept on the object (nothing of them travels to workers). ``accountant=False``:
        not a release (a check of the parameters only), nothing charged.
    """

    mechanism: str = "madlib"
    epsilon: float | str = 10.0
    options: Mapping[str, Any] = field(default_factory=dict)
    embedding: str | None = None
    vocab_size: int | None = None
    vocabulary: str = "words"
    oov: str = "random"
    case: str = "sentence"
    columns: tuple[str, ...] = ()
    seed: int | None = None
    run_key: RunKey | str | None = field(default=None, repr=False)
    #: with ``epsilon="auto"``: e.g. ``"unchanged<=0.5"``, resolved here, on the driver, from the
    #: calibration table (deniable.calibrate.table); every worker then gets the number
    target: str | None = None
    id_column: str | None = None
    accountant: InitVar[Any] = None
    dataset: InitVar[Any] = None

    @classmethod
    def for_columns(
        cls, columns: Sequence[str] | str, mechanism: str = "madlib", epsilon: float = 10.0, **params: Any
    ) -> BatchPrivatizer:
        """The engines' one front: ``params`` are this class's other fields (``embedding``,
        ``vocab_size``, ``vocabulary``, ``oov``, ``case``, ``seed``, ``run_key``,
        ``id_column``) and, beyond them, the mechanism's declared options (e.g. ``gamma=``
        for TEM)."""
        own = {f.name for f in fields(cls)} - {"mechanism", "epsilon", "options", "columns"} | {"accountant", "dataset"}
        options = {k: v for k, v in params.items() if k not in own}
        kept = {k: v for k, v in params.items() if k in own}
        cols = (columns,) if isinstance(columns, str) else tuple(columns)
        return cls(mechanism=mechanism, epsilon=epsilon, options=options, columns=cols, **kept)

    def __post_init__(self, accountant: Any, dataset: Any) -> None:
        from ..mechanisms import validate_options

        object.__setattr__(self, "options", dict(validate_options(self.mechanism, dict(self.options or {}))))
        self._resolve_epsilon()
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
            if self.run_key is not None:
                raise InvalidParameterError("run_key", "a key", "None when a seed is given (the seed makes the key)")
            object.__setattr__(self, "run_key", RunKey.from_seed(int(self.seed)))
        else:
            object.__setattr__(self, "run_key", RunKey.check(self.run_key))
        object.__setattr__(self, "_driver_pid", os.getpid())  # pickled: a worker knows it is one (_threads)
        self._pin_sampler()
        if accountant is not False:
            self.charge(accountant, dataset)

    def charge(self, accountant: Any = None, dataset: Any = None, *, text_keyed: bool = False) -> None:
        """Charge this run to ``accountant`` (default: the default accountant) for ``dataset``:
        :class:`~deniable.budget.BudgetError` if it would exceed the budget (nothing spent).

        Engines cannot know the input before the job runs, so an engine's run is always a new
        release of its epsilon on every column (the ledger counts manifests without a keyed
        input digest the same way); the constructor calls this once, on the driver.

        ``text_keyed``: the caller keys every record by its column and text only (no position:
        the scikit-learn transformer), so under one run key and one set of parameters a record
        has exactly one possible output, however often and in whatever subset it is released:
        a second charge of the same key, parameters and data set is a reproduction and costs
        nothing (a refit under ``cross_val_score`` with a given ``run_key``).
        """
        from ..budget import BudgetAccountant, dataset_id

        acc = BudgetAccountant.load_default(accountant)
        eps = float(self.epsilon)
        columns = list(self.columns) or ["(text)"]
        release = {
            "manifest_version": 1,
            "mechanism": {"mechanism": self.mechanism, "epsilon": eps, **dict(self.options)},
            "vocabulary": self.vocabulary,
            "oov": self.oov,
            "case": self.case,
            "release": {
                "input": dataset_id(dataset),
                "columns": columns,
                "records": None,
                "epsilon_per_word": eps,
                "mechanism": self.mechanism,
                "metric": self.options.get("metric"),
                "run_key_id": self.run.id,
                "run_key_origin": self.run.origin,
                "input_digest": {c: "text-keyed" for c in columns} if text_keyed and not self.run.seeded else None,
            },
        }
        acc.spend(release=release)

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

    def _resolve_epsilon(self) -> None:
        """``epsilon="auto"`` + ``target``: the calibration table's epsilon, once, on the driver."""
        if isinstance(self.epsilon, str) and self.epsilon == "auto":
            from ..calibrate.table import parse_target, resolve_epsilon
            from ..embedding import load_embedding

            if self.target is None:
                raise InvalidParameterError("target", None, 'a target with epsilon="auto", e.g. "unchanged<=0.5"')
            parse_target(self.target)
            path = _local_path(str(self.embedding)) if self.embedding is not None else None
            emb = load_embedding(path, vocab_size=self.vocab_size, vocabulary=self.vocabulary)
            resolution = resolve_epsilon(emb, self.mechanism, self.target, self.options)
            object.__setattr__(self, "epsilon", resolution.epsilon)
            object.__setattr__(self, "_resolution", resolution)  # pickled with the object
            return
        if self.target is not None:
            raise InvalidParameterError("target", "<str>", 'given only with epsilon="auto"')
        check_epsilon(self.epsilon, "epsilon")

    def privatizer(self) -> Privatizer:
        """The :class:`~deniable.Privatizer` of this process, loaded once (thread-safe)."""
        priv = cached_privatizer(
            self.mechanism,
            self.epsilon,
            self.options,
            self.embedding,
            vocab_size=self.vocab_size,
            vocabulary=self.vocabulary,
            oov=self.oov,
            case=self.case,
            local_path=_local_path,
        )
        resolution = self.__dict__.get("_resolution")
        if resolution is not None:  # summaries and manifests state the target the epsilon meets
            from ..calibrate.table import attach_resolution

            attach_resolution(priv.mechanism, resolution)
        self._check_sampler(priv)
        return priv

    def _check_sampler(self, priv: Privatizer) -> None:
        """One sampler per run: a mechanism whose mapping from random stream to output depends on
        prepared artefacts (TEM: ``sampler()``) must map it the same way in every process of the run,
        or a recomputed batch would be a second, uncounted release.

        The first process that loads the mechanism (the driver, in :meth:`__post_init__`, where it
        can read the embedding) pins its sampler; the pin travels with this object, and a worker
        whose own differs (its cache lacks the prepared tables the driver has, or has them where the
        driver did not) refuses instead of releasing through another mapping.
        """
        sampler = getattr(priv.mechanism, "sampler", None)
        if not callable(sampler):
            return
        mine = str(sampler())
        pinned = self.__dict__.get("_sampler")
        if pinned is None:
            object.__setattr__(self, "_sampler", mine)  # pickled with the object to every worker
        elif mine != pinned:
            raise InvalidParameterError(
                "mechanism",
                f"{self.mechanism} with sampler '{mine}' in this process",
                f"the run's sampler '{pinned}': give every worker the same prepared artefacts "
                "(`deniable prepare`, one DENIABLE_CACHE every worker reads), or none",
            )

    def _pin_sampler(self) -> None:
        """On the driver: load the mechanism once if its output mapping depends on prepared artefacts."""
        from ..mechanisms.registry import mechanism_class

        if not callable(getattr(mechanism_class(self.mechanism), "sampler", None)):
            return
        if self.embedding is not None and str(self.embedding).startswith("sparkfiles:"):
            return  # the driver cannot read it: each worker pins its own (docs/engines.md)
        self.privatizer()

    # -- randomness -----------------------------------------------------------------------------
    @property
    def run(self) -> RunKey:
        """This run's key (made from the OS, or from ``seed``)."""
        return self.run_key  # type: ignore[return-value]  # __post_init__ made it a RunKey

    def generator(self, unit: Sequence[int] | None = None) -> np.random.Generator:
        """The stream of ``unit`` (a tuple of ints) in this run (records are keyed by
        ``positions=`` instead, each from its own stream: :meth:`privatize_texts`).

        ``None``: a batch without a stable identity -- fresh OS randomness (refused with a
        seed, which promises reproducible output).
        """
        from .._random import secure_generator

        if unit is None:
            if self.seed is not None:
                raise InvalidParameterError("seed", self.seed, "None here: this engine gives batches no stable key")
            return secure_generator()
        return self.run.generator(*unit)

    # -- batches ------------------------------------------------------------------------------
    def privatize_texts(
        self,
        texts: Sequence[str | None],
        rng: np.random.Generator | None = None,
        *,
        positions: Sequence[Position] | None = None,
        column: str | Sequence[str] = "",
    ) -> tuple[list[str | None], PrivatizeStats]:
        """Privatize a batch of strings (``None`` stays ``None``) with one mechanism call.

        ``positions`` (one per text: its position in the input, an int or a tuple of ints)
        and ``column`` (its column name, or one per text): each text draws from its own
        stream of this run (:meth:`RunKey.record_generator`), so its output does not depend
        on the batch. Without them the batch draws from ``rng`` (default: fresh OS randomness).
        """
        values = list(texts)
        present = [i for i, t in enumerate(values) if t is not None]
        if not present:
            return values, PrivatizeStats()
        for i in present:
            if not isinstance(values[i], str):
                raise InvalidParameterError("texts", type(values[i]).__name__, f"str values (item {i})")
        chosen: list[str] = [values[i] for i in present]  # type: ignore[misc]
        if positions is not None:
            if rng is not None:
                raise InvalidParameterError("rng", "a generator", "None when positions are given")
            if len(positions) != len(values):
                raise InvalidParameterError("positions", len(positions), f"one per text ({len(values)})")
            names = [column] * len(values) if isinstance(column, str) else list(column)
            run = self.run
            gens = [run.record_generator(positions[i], names[i], chosen[j]) for j, i in enumerate(present)]
            with engine_task(self.__dict__.get("_driver_pid", os.getpid())):  # 1 BLAS thread per worker
                out, stats = self.privatizer().privatize_batch_with_stats(chosen, generators=gens)
        else:
            gen = self.generator() if rng is None else rng
            with engine_task(self.__dict__.get("_driver_pid", os.getpid())):
                out, stats = self.privatizer().privatize_batch_with_stats(chosen, gen)
        result: list[str | None] = list(values)
        for i, text in zip(present, out, strict=True):
            result[i] = text
        return result, stats

    def privatize_columns(
        self,
        columns: Mapping[str, Sequence[str | None]],
        rng: np.random.Generator | None = None,
        *,
        positions: Sequence[Position] | None = None,
    ) -> tuple[dict[str, list[str | None]], PrivatizeStats]:
        """Privatize the named :attr:`columns` of a batch, all in one mechanism call.

        ``positions``: each row's position in the input (keyed records, see
        :meth:`privatize_texts`); without them the batch draws from ``rng``.
        """
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
        if positions is not None:
            rows = list(positions)
            if any(n != len(rows) for n in sizes):
                raise InvalidParameterError("positions", len(rows), "one per row of every column")
            names = [c for c in self.columns for _ in rows]
            out, stats = self.privatize_texts(flat, positions=rows * len(self.columns), column=names)
        else:
            out, stats = self.privatize_texts(flat, rng)
        result = {}
        start = 0
        for c, n in zip(self.columns, sizes, strict=True):
            result[c] = out[start : start + n]
            start += n
        return result, stats

    def _privatize_by_id(
        self, cols: Mapping[str, list[str | None]], ids: list[Any] | None
    ) -> dict[str, list[str | None]]:
        """Each record (its cells in every column) from its own stream, keyed by its id."""
        if ids is None:
            raise InvalidParameterError("id_column", self.id_column, "a column of the data")
        if len(set(ids)) != len(ids):
            raise InvalidParameterError("id_column", self.id_column, "unique ids (a repeated id would share a stream)")
        new, _ = self.privatize_columns(cols, positions=[_id_unit(rid) for rid in ids])
        return new

    def privatize_pandas(self, df: Any, first: int | None = None) -> Any:
        """A pandas DataFrame with :attr:`columns` privatized (a copy; every other column kept).

        ``first``: the position of the frame's first row in the input, so each row draws
        from its own stream of this run; ``None``: the rows' ids (``id_column``), else
        fresh noise (the batch has no stable identity).
        """
        return self._pandas(df, None if first is None else range(int(first), int(first) + len(df)))

    def _pandas(self, df: Any, positions: Sequence[Position] | None) -> Any:
        """:meth:`privatize_pandas` with each row's position given (``None``: ids, else fresh noise)."""
        check_unique_columns(list(df.columns), self.columns, "the DataFrame")  # a repeat would be released unchanged
        cols = {c: [None if _isnull(v) else v for v in df[c].tolist()] for c in self.columns if c in df.columns}
        if len(cols) < len(self.columns):
            missing = next(c for c in self.columns if c not in df.columns)
            raise InvalidParameterError("columns", missing, "a column of the data")
        if positions is None and self.id_column is not None:
            new = self._privatize_by_id(cols, df[self.id_column].tolist() if self.id_column in df.columns else None)
        elif positions is None:
            new, _ = self.privatize_columns(cols, self.generator(None))
        else:
            if len(positions) != len(df):
                raise InvalidParameterError("indices", len(positions), f"one per row ({len(df)})")
            new, _ = self.privatize_columns(cols, positions=positions)
        out = df.copy()
        for c, values in new.items():
            out[c] = _like(df[c], values)
        return out

    def __call__(self, batch: Any, indices: Sequence[int] | None = None) -> Any:
        """Privatize a table batch: a pandas DataFrame, or a ``{column: values}`` mapping.

        A mapping comes back with only the privatized columns (Hugging Face ``datasets``
        updates those and keeps the rest). ``indices`` (``datasets`` ``with_indices=True``:
        the rows' positions in the dataset) key each row's own stream of this run, so the
        same run reproduces its release whatever the batch size or ``num_proc``; without
        them the batch draws fresh OS randomness (or keys rows by ``id_column``).
        """
        rows = None if indices is None else [int(i) for i in indices]
        if not isinstance(batch, Mapping):
            return self._pandas(batch, rows)
        missing = [c for c in self.columns if c not in batch]
        if missing:
            raise InvalidParameterError("columns", missing[0], "a column of the data")
        values = {c: [None if _isnull(v) else v for v in _tolist(batch[c])] for c in self.columns}
        if rows is not None:
            new, _ = self.privatize_columns(values, positions=rows)
        elif self.id_column is not None:
            new = self._privatize_by_id(values, _tolist(batch[self.id_column]) if self.id_column in batch else None)
        else:
            new, _ = self.privatize_columns(values, self.generator(None))
        return new

    def fingerprint(self, input_fingerprint: str = "") -> str:
        """A public cache fingerprint of this run over an input (``datasets``' ``new_fingerprint``).

        A one-way function of the run key's id, the parameters and ``input_fingerprint``:
        the same run over the same input has the same fingerprint (a recomputation is
        served from the cache: the same release), a new run a new one.
        """
        import hashlib

        text = repr((self.run.id, self.key, self.columns, input_fingerprint))
        return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()

    def describe(self) -> dict[str, Any]:
        """The run's parameters (no text): for a manifest."""
        return {
            "mechanism": self.mechanism,
            "epsilon": float(self.epsilon),
            "target": self.target,
            "options": dict(self.options),
            "embedding": self.embedding or "glove-6b-50d",
            "vocab_size": self.vocab_size,
            "vocabulary": self.vocabulary,
            "oov": self.oov,
            "case": self.case,
            "columns": list(self.columns),
            "seeded": self.seed is not None,
            "run_key_id": self.run.id,
            "run_key_origin": self.run.origin,
            "id_column": self.id_column,
        }


SPARK_FILES = "sparkfiles:"
_ID_UNIT = 2**64 - 1  # a record keyed by its id: (_ID_UNIT, kind, value) never equals a positional unit
#: a record's position: its index in the input, or a tuple (Spark's partition and row, an id's unit)
Position = int | tuple[int, ...]


def _id_unit(rid: Any) -> tuple[int, ...]:
    import hashlib

    if isinstance(rid, bool) or _isnull(rid):
        raise InvalidParameterError("id_column", type(rid).__name__, "int or str ids, none missing")
    if isinstance(rid, int | np.integer) and 0 <= int(rid) < 2**64:
        return (_ID_UNIT, 0, int(rid))
    if isinstance(rid, str):
        digest = hashlib.blake2b(rid.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        return (_ID_UNIT, 1, int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little"))
    raise InvalidParameterError("id_column", type(rid).__name__, "int (0 <= id < 2**64) or str ids")


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
