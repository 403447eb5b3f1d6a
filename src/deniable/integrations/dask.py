"""Dask: privatize columns of a ``dask.dataframe.DataFrame`` (``pip install 'deniable[dask]'``).

A thin layer over :class:`~deniable.integrations.BatchPrivatizer`: ``map_partitions``
with the picklable batch function; each worker process loads the embedding once. With
a ``seed`` (NOT private) each partition's stream is derived from its partition number.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._batch import BatchPrivatizer

__all__ = ["privatize", "privatize_partition"]


def privatize_partition(df: Any, batch: BatchPrivatizer, partition_info: dict[str, Any] | None = None) -> Any:
    """One pandas partition with ``batch.columns`` privatized (Dask passes ``partition_info``)."""
    key = int(partition_info["number"]) if partition_info and batch.seed is not None else None
    return batch.privatize_pandas(df, key)


def privatize(
    ddf: Any,
    columns: Sequence[str] | str,
    mechanism: str = "madlib",
    epsilon: float = 10.0,
    **params: Any,
) -> Any:
    """``ddf.map_partitions`` that privatizes ``columns`` and keeps every other column and row.

    ``params``: :meth:`BatchPrivatizer.for_columns` (``embedding``, ``vocabulary``, ``oov``,
    ``case``, ``seed``, ... and the mechanism's declared options).
    """
    batch = BatchPrivatizer.for_columns(columns, mechanism, epsilon, **params)
    return ddf.map_partitions(privatize_partition, batch, meta=ddf._meta)
