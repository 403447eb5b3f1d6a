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
    """``ds`` with ``columns`` privatized: one run (a fresh run key unless ``run_key=`` is given).

    The result's fingerprint is :meth:`BatchPrivatizer.fingerprint` of the input's: a new
    call is a new run and is never served from the ``datasets`` cache; passing the same
    ``run_key`` over the same dataset reproduces the same release (any ``batch_size``),
    from the cache when it is there. ``params``: :meth:`BatchPrivatizer.for_columns`
    (``embedding``, ``vocabulary``, ``oov``, ``case``, ``seed``, ``run_key``, ... and the
    mechanism's declared options).
    """
    batch = BatchPrivatizer.for_columns(columns, mechanism, epsilon, **params)
    fingerprint = batch.fingerprint(f"{getattr(ds, '_fingerprint', '')}/batch_size={batch_size}")
    return ds.map(
        batch,
        batched=True,
        with_indices=True,
        batch_size=batch_size,
        num_proc=num_proc,
        new_fingerprint=fingerprint,
        desc="privatizing",
    )
