"""Dask: privatize columns of a ``dask.dataframe.DataFrame`` (``pip install 'deniable[dask]'``).

A thin layer over :class:`~deniable.integrations.BatchPrivatizer`: ``map_partitions``
with the picklable batch function; each worker process loads the embedding once. Each
partition's noise is keyed by the run key and its partition number, so computing the
result again (``compute`` twice, a lost ``persist``-ed partition) reproduces the same
release; every :func:`privatize` call is a new run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._batch import BatchPrivatizer

__all__ = ["privatize", "privatize_partition"]


def privatize_partition(df: Any, batch: BatchPrivatizer, partition_info: dict[str, Any] | None = None) -> Any:
    """One pandas partition with ``batch.columns`` privatized (Dask passes ``partition_info``)."""
    partition = int(partition_info["number"]) if partition_info else None
    return batch.privatize_pandas(df, partition, 0)


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
