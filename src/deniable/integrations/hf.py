"""Hugging Face ``datasets``: privatize columns with ``Dataset.map`` (``pip install 'deniable[hf]'``).

``ds.map(batch, batched=True, with_indices=True, num_proc=N)`` with a
:class:`~deniable.integrations.BatchPrivatizer` returns only the privatized columns,
so ``datasets`` replaces them and keeps every other column; nothing is added. Each
process loads the embedding once (memory-mapped; the vectors are never pickled).

Randomness and the ``datasets`` cache: each row's noise is keyed by the run key, its row
index, its column and its text, so the output does not depend on ``num_proc`` nor
``batch_size``, and recomputing the same run gives the same release. :func:`privatize` is
one run: it sets the result's fingerprint (``new_fingerprint``) from the run key's public
id and the input's fingerprint, so a recomputation of the same run may be served from the
cache (it is the same release), and every new call -- a new run key -- is computed
afresh. ``ds.map(batch, ...)`` by hand behaves the same way: ``datasets`` fingerprints the
pickled batch function, which holds its run key, so mapping the same
:class:`BatchPrivatizer` again returns the cached (same) release and a new
:class:`BatchPrivatizer` is a new run.

A ``DatasetDict`` (what ``load_dataset`` returns) is one run over all its splits: each split
is privatized with its own unit namespace (a row's position is (its split, its index), so
row 0 of ``train`` and row 0 of ``test`` never share a stream) and its own fingerprint. A
streaming ``IterableDataset`` (``load_dataset(..., streaming=True)``, ``to_iterable_dataset()``)
is privatized lazily as it is read, in one process (no ``num_proc``), each row keyed by its
running index in the stream: the same run gives the same text as the map-style dataset, whatever
``batch_size``; an ``IterableDatasetDict`` splits as a ``DatasetDict`` does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from .._errors import InvalidParameterError
from ._batch import BatchPrivatizer, _isnull, _tolist

__all__ = ["privatize"]

#: a row of a split: (_SPLIT_UNIT, the split's name hashed, its index); never equals an int position
_SPLIT_UNIT = 2**64 - 3


def privatize(
    ds: Any,
    columns: Sequence[str] | str,
    mechanism: str = "madlib",
    epsilon: float = 10.0,
    *,
    num_proc: int | None = None,
    batch_size: int = 1000,
    **params: Any,
) -> Any:
    """``ds`` with ``columns`` privatized: one run (a fresh run key unless ``run_key=`` is given).

    ``ds``: a ``Dataset``, a ``DatasetDict`` (each split in its own namespace), an
    ``IterableDataset`` or an ``IterableDatasetDict`` (lazy: rows are privatized as they are
    read; ``num_proc`` is refused). The result's fingerprint is
    :meth:`BatchPrivatizer.fingerprint` of the input's: a new call is a new run and is never
    served from the ``datasets`` cache; passing the same ``run_key`` over the same dataset
    reproduces the same release (any ``batch_size`` or ``num_proc``), from the cache when it is
    there. ``params``: :meth:`BatchPrivatizer.for_columns` (``embedding``, ``vocabulary``,
    ``oov``, ``case``, ``seed``, ``run_key``, ... and the mechanism's declared options).
    """
    import datasets

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidParameterError("batch_size", batch_size, "an integer >= 1")
    streaming = isinstance(ds, datasets.IterableDataset | datasets.IterableDatasetDict)
    if streaming and num_proc is not None:
        raise InvalidParameterError(
            "num_proc", num_proc, "None for a streaming (iterable) dataset: it is privatized as it is read"
        )
    batch = BatchPrivatizer.for_columns(columns, mechanism, epsilon, **params)
    if isinstance(ds, datasets.DatasetDict | datasets.IterableDatasetDict):
        _check_splits(ds)
        out = {
            name: _one(split, _SplitRows(batch, name), batch, batch_size, num_proc, name) for name, split in ds.items()
        }
        return type(ds)(out)
    if isinstance(ds, datasets.Dataset | datasets.IterableDataset):
        return _one(ds, batch, batch, batch_size, num_proc, None)
    raise InvalidParameterError(
        "ds", type(ds).__name__, "a datasets Dataset, DatasetDict, IterableDataset or IterableDatasetDict"
    )


def _check_splits(ds: Any) -> None:
    for name in ds:
        if not isinstance(name, str):
            raise InvalidParameterError("ds", "a split name that is not a str", "str split names")


def _one(ds: Any, fn: Any, batch: BatchPrivatizer, batch_size: int, num_proc: int | None, split: str | None) -> Any:
    import datasets

    if isinstance(ds, datasets.IterableDataset):
        return ds.map(fn, batched=True, with_indices=True, batch_size=batch_size)
    label = f"{getattr(ds, '_fingerprint', '')}/batch_size={batch_size}"
    if split is not None:
        label += f"/split={split}"
    return ds.map(
        fn,
        batched=True,
        with_indices=True,
        batch_size=batch_size,
        num_proc=num_proc,
        new_fingerprint=batch.fingerprint(label),
        desc="privatizing" if split is None else f"privatizing {split}",
    )


class _SplitRows:
    """The batch function of one split of a ``DatasetDict``: each row keyed by (its split, its index)."""

    def __init__(self, batch: BatchPrivatizer, split: str) -> None:
        self.batch = batch
        digest = hashlib.blake2b(split.encode("utf-8", "surrogatepass"), digest_size=8, person=b"deniable-split")
        self.namespace = int.from_bytes(digest.digest(), "little")

    def __call__(self, rows: Any, indices: Sequence[int]) -> dict[str, list[str | None]]:
        columns = self.batch.columns
        missing = [c for c in columns if c not in rows]
        if missing:
            raise InvalidParameterError("columns", missing[0], "a column of the data")
        values = {c: [None if _isnull(v) else v for v in _tolist(rows[c])] for c in columns}
        positions = [(_SPLIT_UNIT, self.namespace, int(i)) for i in indices]
        new, _ = self.batch.privatize_columns(values, positions=positions)
        return new
