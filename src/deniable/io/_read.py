"""Read records as columns of strings: ``read_table`` and ``iter_batches`` over every format."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .._errors import DataError, InvalidParameterError
from .._progress import progress
from ._columns import check_unique_columns
from ._decode import csv_header, csv_reader, csv_records, decoded_lines, json_object, ragged, too_long
from ._files import open_input_with_progress
from ._formats import detect_format, is_std

MISSING = ("error", "empty", "skip")
Table = dict[str, list[str | None]]
Row = list[str | None]
#: the single column of a plain-text file
TXT_COLUMN = "text"


def open_parquet(path: str | Path) -> Any:
    """A ``pyarrow.parquet.ParquetFile`` with at least one row, or a DataError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if is_std(path):
        raise InvalidParameterError("input", "-", "a Parquet file path (Parquet cannot stream from stdin)")
    if not Path(path).is_file():
        raise DataError(f"input file {path} does not exist or is not a file")
    try:
        pf = pq.ParquetFile(str(path))
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path} is not a readable Parquet file ({type(exc).__name__})") from None
    if pf.metadata.num_rows == 0:
        raise DataError(f"{path} has no rows")
    return pf


def parquet_strings(column: Any, name: str, first_row: int, max_chars: int | None = None) -> list[str | None]:
    """A string column chunk as Python strings; invalid UTF-8 or an over-long cell names its row."""
    try:
        values: list[str | None] = column.to_pylist()
    except UnicodeDecodeError:
        for i, value in enumerate(column):
            try:
                value.as_py()
            except UnicodeDecodeError:
                raise DataError(f"row {first_row + i + 1}, column {name!r}: not valid UTF-8") from None
        raise  # pragma: no cover - the loop finds the row
    if max_chars is not None:
        for i, v in enumerate(values):
            if v is not None and len(v) > max_chars:
                raise too_long(f"row {first_row + i + 1}, column {name!r}", max_chars)
    return values


def _check_missing(missing: str) -> str:
    if missing not in MISSING:
        raise InvalidParameterError("missing", missing, "one of " + ", ".join(repr(m) for m in MISSING))
    return missing


def _missing_error(where: str, column: str) -> DataError:
    return DataError(
        f"{where}: no value for column {column!r} (null or absent); pass missing='empty' or 'skip' to allow it"
    )


# ------------------------------------------------------------------ per format
# Each reader yields (where, row) with row aligned to the resolved column names; a cell is
# None when null or absent. The first item yielded is the list of column names.


def _txt_rows(stream: Any, columns: list[str] | None) -> Iterator[Any]:
    if columns not in (None, [TXT_COLUMN]):
        raise InvalidParameterError("columns", columns, f"None or [{TXT_COLUMN!r}] for plain text input")
    yield [TXT_COLUMN]
    for lineno, line in enumerate(decoded_lines(stream), start=1):
        yield f"line {lineno}", [line.rstrip("\r\n")]


def _csv_rows(stream: Any, columns: list[str] | None, delimiter: str) -> Iterator[Any]:
    reader, _ = csv_reader(decoded_lines(stream), delimiter)
    header = csv_header(reader)
    names = header if columns is None else columns
    for c in names:
        if c not in header:
            raise InvalidParameterError(
                "column", c, "a column of the input's header row: " + ", ".join(repr(h) for h in header)
            )
    check_unique_columns(header, columns, "the header row")
    positions = [header.index(c) for c in names]
    yield names
    for row_number, row in csv_records(reader):
        if not row:  # a blank line is not a record
            continue
        if len(row) > len(header):
            raise ragged(row_number, reader.line_num, len(row), len(header))
        # a short row lacks its last cells: absent values, which follow the missing policy
        yield f"row {row_number} (line {reader.line_num})", [row[p] if p < len(row) else None for p in positions]


def _json_cell(value: Any, column: str, lineno: int, numbers: bool) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if numbers and isinstance(value, (int, float)):  # bool is an int
        return json.dumps(value)
    raise DataError(f"line {lineno}: column {column!r} holds a {type(value).__name__}, not text")


def _jsonl_rows(stream: Any, columns: list[str] | None, numbers: bool) -> Iterator[Any]:
    names = columns
    seen: set[str] = set()
    records = 0
    for lineno, line in enumerate(decoded_lines(stream), start=1):
        body = line.rstrip("\r\n")
        if not body.strip():  # a blank line is not a record
            continue
        obj = json_object(body, lineno)
        if names is None:
            names = list(obj)
            yield names
        elif records == 0:
            yield names
        records += 1
        seen.update(c for c in names if c in obj)
        yield f"line {lineno}", [_json_cell(obj.get(c), c, lineno, numbers) for c in names]
    if records == 0:
        yield names or []
        return
    absent = [c for c in (names or []) if c not in seen]
    if absent:  # a key that no record has is most likely a wrong column name
        raise InvalidParameterError("column", absent[0], "a key present in the records (no record has it)")


def _parquet_batches(
    path: str | Path, columns: list[str] | None, batch_size: int, numbers: bool, advance: Callable[[float], None]
) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.compute as pc

    pf = open_parquet(path)
    schema = pf.schema_arrow
    names = list(schema.names) if columns is None else columns
    check_unique_columns(schema.names, columns, "the Parquet schema")
    for c in names:
        if c not in schema.names:
            raise InvalidParameterError(
                "column", c, "a column of the input: " + ", ".join(repr(n) for n in schema.names)
            )
        t = schema.field(c).type
        text = pa.types.is_string(t) or pa.types.is_large_string(t)
        plain = pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)
        if not text and not (numbers and plain):
            raise DataError(f"column {c!r} has type {t}, not text (string)")
    yield names
    first = 0
    for rb in pf.iter_batches(batch_size=batch_size, columns=names):
        cols = []
        for c in names:
            col = rb.column(rb.schema.get_field_index(c))
            if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
                col = pc.cast(col, pa.string())
            cols.append(parquet_strings(col, c, first))
        for i, row in enumerate(zip(*cols, strict=True)):
            yield f"row {first + i + 1}", list(row)
        advance(rb.num_rows)
        first += rb.num_rows


# ---------------------------------------------------------------------- public
def _batches(
    path: str | Path,
    *,
    format: str | None,
    columns: Sequence[str] | None,
    missing: str,
    batch_size: int,
    limit: int | None = None,
    numbers: bool = True,
    show_progress: bool | None = False,
    always: bool = False,
) -> Iterator[Table]:
    fmt = detect_format(path, format)
    _check_missing(missing)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidParameterError("batch_size", batch_size, "an integer >= 1")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise InvalidParameterError("limit", limit, "None or an integer >= 0")
    cols = None if columns is None else list(dict.fromkeys([columns] if isinstance(columns, str) else columns))
    if cols is not None and not cols:
        raise InvalidParameterError("columns", columns, "None (every column) or at least one column name")

    def batched(rows: Iterator[Any], advance: Callable[[], None]) -> Iterator[Table]:
        names: list[str] = next(rows)
        table: Table = {c: [] for c in names}
        count = 0
        done = 0
        for where, row in rows:
            if limit is not None and done >= limit:
                break
            if any(v is None for v in row):
                if missing == "skip":
                    continue
                if missing == "error":
                    raise _missing_error(where, names[row.index(None)])
            for c, v in zip(names, row, strict=True):
                table[c].append(v)
            count += 1
            done += 1
            if count >= batch_size:
                yield table
                advance()
                table = {c: [] for c in names}
                count = 0
        if count or (always and done == 0):
            yield table
            advance()

    if fmt == "parquet":
        total = open_parquet(path).metadata.num_rows
        with progress(total, "reading rows", enabled=show_progress) as adv:
            yield from batched(_parquet_batches(path, cols, batch_size, numbers, adv), lambda: None)
        return
    with open_input_with_progress(path, "reading bytes", show_progress) as (stream, tick):
        if fmt == "txt":
            rows = _txt_rows(stream, cols)
        elif fmt == "jsonl":
            rows = _jsonl_rows(stream, cols, numbers)
        else:
            rows = _csv_rows(stream, cols, "\t" if fmt == "tsv" else ",")
        yield from batched(rows, tick)


def iter_batches(
    path: str | Path,
    *,
    format: str | None = None,
    columns: Sequence[str] | None = None,
    missing: str = "error",
    batch_size: int = 1000,
) -> Iterator[dict[str, list[str | None]]]:
    """Yield the records of ``path`` in batches of up to ``batch_size``, as ``{column: values}``.

    See :mod:`deniable.io` for what a record and a missing value are in each format.
    """
    return _batches(path, format=format, columns=columns, missing=missing, batch_size=batch_size)


def read_table(
    path: str | Path,
    *,
    format: str | None = None,
    columns: Sequence[str] | None = None,
    missing: str = "error",
    limit: int | None = None,
) -> dict[str, list[str | None]]:
    """All records of ``path`` (or the first ``limit``) as ``{column: values}``, columns in order."""
    table: Table | None = None
    batches = _batches(
        path, format=format, columns=columns, missing=missing, batch_size=10_000, limit=limit, always=True
    )
    for batch in batches:  # at least one, empty when there is no record
        if table is None:
            table = batch
        else:
            for c, values in batch.items():
                table[c].extend(values)
    assert table is not None
    return table
