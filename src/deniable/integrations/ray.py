"""Ray Data: privatize columns of a ``ray.data.Dataset`` (``pip install 'deniable[ray]'``).

A thin layer over :class:`~deniable.integrations.BatchPrivatizer`: ``map_batches`` with
the picklable batch function (pandas batches); each Ray worker process loads the
embedding once (memory-mapped from a path every node can read).

Ray's batches have no stable identity: which rows form a batch depends on how blocks
are bundled, and a batch does not know its rows' positions. So by default each batch
draws fresh OS randomness, and executing the dataset again (``take_all`` twice, a
retried task) releases the records again with new noise -- materialize the result
once (``ds.materialize()``, or write it) and reuse that; :func:`privatize` warns
(:class:`~deniable.NotPrivateWarning`) when it is called so. With ``id_column=`` (a column of
unique int or str record ids) each record draws from its own stream keyed by the run
key and its id, so every execution of the same run releases the same text (one
mechanism call per record: slower). A ``seed`` is refused without ``id_column``.
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
    ``case``, ``id_column``, ``run_key`` ... and the mechanism's declared options); a
    ``seed`` only with ``id_column``.
    """
    if params.get("seed") is not None and params.get("id_column") is None:
        from .._errors import InvalidParameterError

        raise InvalidParameterError(
            "seed", params["seed"], "None: Ray batches have no stable identity to key a stream (give id_column=)"
        )
    batch = BatchPrivatizer.for_columns(columns, mechanism, epsilon, **params)
    if params.get("id_column") is None:
        import warnings

        from .._errors import NotPrivateWarning

        warnings.warn(
            "Ray batches have no stable identity: every execution of the returned dataset (a second "
            "take_all, a retried task) releases the records again with new noise, and privacy loss adds up. "
            "Materialize or write it once, or pass id_column= (a unique id per record) to make every "
            "execution release the same text.",
            NotPrivateWarning,
            stacklevel=2,
        )
    return ds.map_batches(batch, batch_format="pandas", batch_size=batch_size)
