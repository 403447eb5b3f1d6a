"""Dask: privatize columns of a ``dask.dataframe.DataFrame`` (``pip install 'deniable[dask]'``).

A thin layer over :class:`~deniable.integrations.BatchPrivatizer`: ``map_partitions``
with the picklable batch function; each worker process loads the embedding once. Each
row's noise is keyed by the run key and its position in the whole DataFrame (its
partition's offset, counted once by :func:`privatize` with one ``len`` per partition,
plus its row in the partition), its column and its text, so computing the result again
(``compute`` twice, a lost ``persist``-ed partition, another scheduler) or privatizing
the same rows in other partitions (``repartition``) reproduces the same release; every
:func:`privatize` call is a new run.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ._batch import BatchPrivatizer

__all__ = ["privatize", "privatize_partition"]


def privatize_partition(
    df: Any,
    batch: BatchPrivatizer,
    offsets: tuple[int, ...] | None = None,
    partition_info: dict[str, Any] | None = None,
) -> Any:
    """One pandas partition with ``batch.columns`` privatized (Dask passes ``partition_info``).

    ``offsets[i]``: the position of partition ``i``'s first row in the DataFrame. Without
    them (or ``partition_info``) the rows draw fresh noise, or are keyed by ``id_column``.
    """
    if offsets is None or not partition_info:
        return batch.privatize_pandas(df, None)
    return batch.privatize_pandas(df, offsets[int(partition_info["number"])])


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
    offsets: tuple[int, ...] | None = None
    if batch.id_column is None:  # rows keyed by position: each partition's offset in the whole
        import itertools

        lengths = ddf.map_partitions(len).compute()
        offsets = tuple(itertools.accumulate((int(n) for n in lengths), initial=0))[:-1]
    return ddf.map_partitions(functools.partial(privatize_partition, batch=batch, offsets=offsets), meta=ddf._meta)
