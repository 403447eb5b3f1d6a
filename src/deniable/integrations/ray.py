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
    embedding: str | None = None,
    vocab_size: int | None = None,
    vocabulary: str = "words",
    oov: str = "random",
    case: str = "sentence",
    batch_size: int | None = 1024,
    **options: Any,
) -> Any:
    """``ds.map_batches`` that privatizes ``columns`` and keeps every other column and row."""
    batch = BatchPrivatizer(
        mechanism=mechanism,
        epsilon=epsilon,
        options=options,
        embedding=embedding,
        vocab_size=vocab_size,
        vocabulary=vocabulary,
        oov=oov,
        case=case,
        columns=tuple([columns] if isinstance(columns, str) else columns),
    )
    return ds.map_batches(batch, batch_format="pandas", batch_size=batch_size)
