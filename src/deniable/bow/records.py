"""Read the documents of a bag-of-words release: one document per record, none skipped.

Row ``j`` of a release must be record ``j`` of the input. :func:`deniable.io.iter_texts`
serves the word-level privatizers and yields only the text values that exist, so a
record without text would shift every later row. :func:`iter_documents` yields exactly
one entry per record instead: the text, or ``None`` where it is missing (an empty
document, which :class:`~deniable.bow.BowVectorizer` turns into an all-zero row and
the pipeline into a pure-noise row).

What a record is:

- ``txt``: every line, blank lines included;
- ``csv`` / ``tsv``: every row after the header; a row too short to reach the text
  column gives ``None``; blank lines are not rows;
- ``jsonl``: every non-blank line; JSON ``null`` or a missing key gives ``None``
  (a key missing from *every* record is an error: most likely a wrong ``column``);
- ``parquet``: every row; a null gives ``None``.

``.gz`` (txt, csv, tsv, jsonl) and ``-`` (standard input, txt/csv/tsv/jsonl) are
supported. Error messages name lines and columns, never their contents.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from .._errors import DataError, InvalidParameterError
from .._progress import progress
from ..io import _csv_reader, _decoded_lines, _open_input, detect_format, iter_texts

__all__ = ["iter_documents"]

Batch = list[str | None]


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
        # every line is a record: iter_texts skips nothing here
        yield from iter_texts(src, format="txt", batch_size=batch_size, show_progress=show_progress)
        return
    if column is None:
        raise InvalidParameterError("column", None, f"the text column of the {fmt} input")
    if fmt == "parquet":
        yield from _parquet(src, column, batch_size, show_progress)
        return
    with _open_input(src) as (stream, position, total):
        with progress(total, "reading bytes", enabled=show_progress and total is not None) as advance:
            if fmt == "jsonl":
                reader = _jsonl(stream, column)
            else:
                reader = _csv(stream, column, "\t" if fmt == "tsv" else ",")
            batch: Batch = []
            done = 0
            for doc in reader:
                batch.append(doc)
                if len(batch) >= batch_size:
                    yield batch
                    batch = []
                    now = position()
                    advance(now - done)
                    done = now
            if batch:
                yield batch
                advance(position() - done)


def _csv(stream: IO[bytes], column: str, delimiter: str) -> Iterator[str | None]:
    reader, _ = _csv_reader(_decoded_lines(stream), delimiter)  # as deniable.io reads it (TSV plain)
    try:
        header = next(reader)
    except StopIteration:
        raise DataError("the CSV input is empty (no header row)") from None
    if column not in header:
        raise InvalidParameterError("column", column, "a column of the input's header row")
    pos = header.index(column)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataError(f"line {reader.line_num}: malformed CSV ({exc})") from None
        if not row:  # a blank line is not a record
            continue
        yield row[pos] if pos < len(row) else None


def _jsonl(stream: IO[bytes], column: str) -> Iterator[str | None]:
    records = 0
    seen = False
    for lineno, line in enumerate(_decoded_lines(stream), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"line {lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise DataError(f"line {lineno}: expected a JSON object, got {type(obj).__name__}")
        records += 1
        value: Any = obj.get(column)
        seen = seen or column in obj
        if value is not None and not isinstance(value, str):
            raise DataError(f"line {lineno}: the text column holds a {type(value).__name__}, not text")
        yield value
    if records and not seen:
        raise InvalidParameterError("column", column, "a key present in the records (no record has it)")


def _parquet(src: str | Path, column: str, batch_size: int, show_progress: bool | None) -> Iterator[Batch]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if str(src) == "-":
        raise InvalidParameterError("input", "-", "a Parquet file path (Parquet cannot stream from stdin)")
    if not Path(src).is_file():
        raise DataError(f"input file {src} does not exist or is not a file")
    try:
        pf = pq.ParquetFile(str(src))
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{src} is not a readable Parquet file ({type(exc).__name__})") from None
    schema = pf.schema_arrow
    if column not in schema.names:
        raise InvalidParameterError("column", column, "a column of the input")
    ftype = schema.field(column).type
    if not (pa.types.is_string(ftype) or pa.types.is_large_string(ftype)):
        raise DataError(f"the text column has type {ftype}, not text (string)")
    if pf.metadata.num_rows == 0:
        raise DataError(f"{src} has no rows")
    first = 0
    with progress(pf.metadata.num_rows, "reading rows", enabled=show_progress) as advance:
        for rb in pf.iter_batches(batch_size=batch_size, columns=[column]):
            try:
                docs = rb.column(0).to_pylist()
            except UnicodeDecodeError:
                raise DataError(f"rows {first + 1}..{first + rb.num_rows}: a text value is not valid UTF-8") from None
            yield docs
            advance(rb.num_rows)
            first += rb.num_rows
