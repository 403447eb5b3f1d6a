"""Hugging Face ``datasets``: privatize columns with ``Dataset.map`` (``pip install 'deniable[hf]'``).

``ds.map(batch, batched=True, with_indices=True, num_proc=N)`` with a
:class:`~deniable.integrations.BatchPrivatizer` returns only the privatized columns,
so ``datasets`` replaces them and keeps every other column; nothing is added. Each
process loads the embedding once (memory-mapped; the vectors are never pickled). A
``seed`` (NOT private) keys each batch's stream by its first row index, so seeded output
does not depend on ``num_proc``.
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
    num_proc: int | None = None,
    batch_size: int = 1000,
    **params: Any,
) -> Any:
    """``ds`` with ``columns`` privatized.

    The result is never served from the ``datasets`` cache (``load_from_cache_file=False``):
    each call draws fresh noise. ``params``: :meth:`BatchPrivatizer.for_columns`
    (``embedding``, ``vocabulary``, ``oov``, ``case``, ``seed``, ... and the mechanism's
    declared options).
    """
    batch = BatchPrivatizer.for_columns(columns, mechanism, epsilon, **params)
    return ds.map(
        batch,
        batched=True,
        with_indices=True,
        batch_size=batch_size,
        num_proc=num_proc,
        load_from_cache_file=False,
        desc="privatizing",
    )
