"""Read the documents of a bag-of-words release: one document per record, none skipped.

Row ``j`` of a release must be record ``j`` of the input, so a record without text is
kept as ``None`` (an empty document, which :class:`~deniable.bow.BowVectorizer` turns
into an all-zero row and the pipeline into a pure-noise row): this is
:func:`deniable.io.iter_batches` with ``missing="empty"``, whose record rules apply
(txt: every line, line endings kept; csv/tsv: every non-blank row; jsonl: every
non-blank line; parquet: every row). The text column must hold text (a number is an
error).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from .._errors import InvalidParameterError
from ..io import detect_format, iter_texts
from ..io._read import _batches

__all__ = ["iter_documents"]


def iter_documents(
    src: str | Path,
    *,
    column: str | None = None,
    format: str | None = None,
    batch_size: int = 1000,
    show_progress: bool | None = None,
) -> Iterator[Sequence[str | None]]:
    """Yield batches of documents, exactly one per input record (``None``: no text)."""
    fmt = detect_format(src, format)
    if batch_size < 1:
        raise InvalidParameterError("batch_size", batch_size, "an integer >= 1")
    if fmt == "txt":
        if column is not None:
            raise InvalidParameterError("column", column, "no column for plain text input")
        # every line is a record, its line ending kept
        yield from iter_texts(src, format="txt", batch_size=batch_size, show_progress=show_progress)
        return
    if column is None:
        raise InvalidParameterError("column", None, f"the text column of the {fmt} input")
    for batch in _batches(
        src,
        format=fmt,
        columns=[column],
        missing="empty",
        batch_size=batch_size,
        numbers=False,
        show_progress=show_progress,
    ):
        yield batch[column]
