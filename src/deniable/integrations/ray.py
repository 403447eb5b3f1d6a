"""Ray Data: privatize columns of a ``ray.data.Dataset`` (``pip install 'deniable[ray]'``).

A thin layer over :class:`~deniable.integrations.BatchPrivatizer`: ``map_batches`` with
the picklable batch function (pandas batches); each Ray worker process loads the
embedding once (memory-mapped from a path every node can read). Ray batches have no
stable identity, so a ``seed`` is refused here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._batch import BatchPrivatizer

__all__ = ["privatize"]


def privatize(
    ds: Any,
    columns: Sequence[str] | str,
    mechanism: str = "madlib",
    epsilon: float = 10.0,
    *,
    batch_size: int | None = 1024,
    **params: Any,
) -> Any:
    """``ds.map_batches`` that privatizes ``columns`` and keeps every other column and row.

    ``params``: :meth:`BatchPrivatizer.for_columns` (``embedding``, ``vocabulary``, ``oov``,
    ``case``, ... and the mechanism's declared options); no ``seed``.
    """
    if params.get("seed") is not None:
        from .._errors import InvalidParameterError

        raise InvalidParameterError("seed", params["seed"], "None: Ray batches have no stable identity to key a stream")
    batch = BatchPrivatizer.for_columns(columns, mechanism, epsilon, **params)
    return ds.map_batches(batch, batch_format="pandas", batch_size=batch_size)
