"""Privatize a file in place of its text: stream records in, rewrite only the text, keep every other byte."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from .._errors import DataError, InvalidParameterError
from .._progress import progress
from ._columns import check_unique_columns
from ._decode import csv_header, csv_reader, csv_records, decoded_lines, json_object, ragged, too_deep, too_long
from ._files import atomic_output, open_input_with_progress
from ._formats import check_output_format, detect_format, is_std

TextFn = Callable[[list[str]], list[str]]
#: where each value of a batch is: (its record's index in the input, its column name; "" for text lines)
Units = list[tuple[int, str]]
#: ``fn(texts, units)``: the batch's texts and where each one is (``transform_file(keyed=True)``)
KeyedTextFn = Callable[[list[str], Units], list[str]]
T = TypeVar("T")

#: default limit on one record's text (a line, a CSV row, a JSON record, a Parquet cell)
MAX_RECORD_CHARS = 4 * 2**20


@dataclass
class IOStats:
    """What a file transform did (counts only)."""

    values: int = 0


def check_columns(columns: Sequence[str] | None, fmt: str) -> list[str]:
    cols = list(dict.fromkeys(columns or []))  # a repeated column is privatized once
    if fmt == "txt":
        if cols:
            raise InvalidParameterError("column", cols[0], "no column for plain text input")
        return cols
    if not cols:
        raise InvalidParameterError("column", None, f"at least one text column for {fmt} input")
    return cols


def _batched(
    records: Iterable[T], batch_size: int, flush: Callable[[list[T]], list[str]], tick: Callable[[], None]
) -> Iterator[list[str]]:
    """Group ``records`` in batches of ``batch_size``; yield ``flush(batch)`` (the texts read), then ``tick()``."""
    batch: list[T] = []
    for record in records:
        batch.append(record)
        if len(batch) >= batch_size:
            yield flush(batch)
            tick()
            batch = []
    if batch:
        yield flush(batch)
        tick()


# --------------------------------------------------------------------------- txt
def _txt(
    src: IO[bytes], dst: IO[bytes] | None, fn: KeyedTextFn, batch_size: int, tick: Callable[[], None], max_chars: int
) -> Iterator[list[str]]:
    """Transform (dst given) or iterate (dst None) text lines; yields batches read."""
    seen = [0]  # records (lines) before this batch

    def flush(batch: list[str]) -> list[str]:
        if dst is not None:
            units = [(seen[0] + i, "") for i in range(len(batch))]
            # the line ending is not part of the text (--oov drop would take it with a dropped last word)
            bodies = [line.rstrip("\r\n") for line in batch]
            new = fn(bodies, units)
            out = "".join(t + line[len(b) :] for t, b, line in zip(new, bodies, batch, strict=True))
            dst.write(out.encode("utf-8"))
        seen[0] += len(batch)
        return batch

    return _batched(decoded_lines(src, dst, max_chars=max_chars), batch_size, flush, tick)


# --------------------------------------------------------------------------- csv
def _line_terminator(src: IO[bytes]) -> tuple[IO[bytes], str]:
    """Peek at the first line to keep the input's line terminator ("\r\n" or "\n")."""
    buffered: Any = src if hasattr(src, "peek") else io.BufferedReader(src)
    head = buffered.peek(65536)[:65536]
    nl = head.find(b"\n")
    return buffered, "\r\n" if nl > 0 and head[nl - 1 : nl] == b"\r" else "\n"


def _counted(lines: Iterator[str], counter: list[int], max_chars: int, reader: list[Any]) -> Iterator[str]:
    """Pass lines on, counting the characters of the record being read (``counter[0]``, reset per row)."""
    for line in lines:
        counter[0] += len(line)
        if counter[0] > max_chars:
            line_num = reader[0].line_num + 1 if reader else 0
            raise too_long(f"the record that ends on line {line_num} or later", max_chars)
        yield line


def _csv(
    src: IO[bytes],
    dst: IO[bytes] | None,
    fn: KeyedTextFn,
    columns: list[str],
    delimiter: str,
    batch_size: int,
    tick: Callable[[], None],
    max_chars: int,
) -> Iterator[list[str]]:
    src, terminator = _line_terminator(src)
    tsv = delimiter == "\t"
    counter = [0]
    holder: list[Any] = []
    reader, dialect = csv_reader(_counted(decoded_lines(src, dst), counter, max_chars, holder), delimiter)
    holder.append(reader)
    out_text = None
    writer = None
    if dst is not None:
        out_text = io.TextIOWrapper(dst, encoding="utf-8", newline="", write_through=True)
        writer = csv.writer(out_text, delimiter=delimiter, lineterminator=terminator, **dialect)
    written = 1  # rows written so far, the header included

    def write_rows(rows: list[list[str]]) -> None:
        nonlocal written
        assert writer is not None
        if not tsv:
            writer.writerows(rows)
            written += len(rows)
            return
        for row in rows:
            written += 1
            if any(("\t" in v or "\n" in v or "\r" in v) for v in row):
                raise DataError(
                    f"row {written}: the output holds a tab or a line break, which a TSV field cannot represent"
                )
            if row == [""]:  # an input record never reads so (that is a blank line): its text became empty
                raise DataError(
                    f"row {written}: the output value is empty, which a one-column TSV file cannot hold (an empty "
                    "line is not a record); write CSV, or keep a word in every value (oov='random')"
                )
            writer.writerow(row)

    try:
        header = csv_header(reader)
        counter[0] = 0
        missing = [c for c in columns if c not in header]
        if missing:
            raise InvalidParameterError(
                "column", missing[0], "a column of the input: " + ", ".join(repr(h) for h in header)
            )
        check_unique_columns(header, columns, "the header row")
        positions = [header.index(c) for c in columns]
        if writer is not None:
            writer.writerow(header)  # a header cell with a tab or line break cannot come from TSV input

        seen = [0]  # records (rows, blank lines included) before this batch

        def flush(rows: list[list[str]]) -> list[str]:
            cells: list[tuple[int, int]] = []
            values: list[str] = []
            units: Units = []
            for r, row in enumerate(rows):
                if row:  # a blank line has no cells
                    for j, p in enumerate(positions):
                        cells.append((r, p))
                        values.append(row[p])
                        units.append((seen[0] + r, columns[j]))
            seen[0] += len(rows)
            if writer is not None:
                new = fn(values, units) if values else []
                for (r, p), v in zip(cells, new, strict=True):
                    rows[r][p] = v
                write_rows(rows)
            return values

        def records() -> Iterator[list[str]]:
            for row_number, row in csv_records(reader):
                counter[0] = 0
                if row and len(row) != len(header):
                    raise ragged(row_number, reader.line_num, len(row), len(header))
                yield row

        yield from _batched(records(), batch_size, flush, tick)
    finally:
        if out_text is not None:
            out_text.flush()
            out_text.detach()


# ------------------------------------------------------------------------- jsonl
_JSON_WS = re.compile(r"[ \t\n\r]*")
_JSON_SKIP = json.JSONDecoder()


def _string_spans(body: str, columns: list[str]) -> list[tuple[int, int, str, str]]:
    """``(start, end, value, key)`` of every top-level string value of ``columns`` in ``body``.

    ``body`` is a JSON object already validated by :func:`json.loads`; ``start:end`` is the
    quoted string token, so the rest of the line can be kept byte for byte. A repeated
    key yields one span per occurrence (each is privatized).
    """
    wanted = set(columns)
    spans: list[tuple[int, int, str, str]] = []
    i = _JSON_WS.match(body, 0).end() + 1  # type: ignore[union-attr]  # past "{"
    i = _JSON_WS.match(body, i).end()  # type: ignore[union-attr]
    if body[i] == "}":
        return spans
    while True:
        key, i = json.decoder.scanstring(body, i + 1)  # type: ignore[attr-defined]
        i = _JSON_WS.match(body, i).end() + 1  # type: ignore[union-attr]  # past ":"
        i = _JSON_WS.match(body, i).end()  # type: ignore[union-attr]
        if key in wanted and body[i] == '"':
            value, end = json.decoder.scanstring(body, i + 1)  # type: ignore[attr-defined]
            spans.append((i, end, value, key))
            i = end
        else:
            _, i = _JSON_SKIP.raw_decode(body, i)
        i = _JSON_WS.match(body, i).end()  # type: ignore[union-attr]
        if body[i] == "}":
            return spans
        i = _JSON_WS.match(body, i + 1).end()  # type: ignore[union-attr]  # past ","


def _occurrence(key: str, j: int, spans: list[tuple[int, int, str, str]]) -> str:
    """The column a span names in a record's units: its key, then ``key\\x00N`` for the N-th repeat
    of the key in the record (each repeated value is privatized, each from its own stream)."""
    n = sum(1 for _, _, _, k in spans[:j] if k == key)
    return key if n == 0 else f"{key}\x00{n}"


def _jsonl(
    src: IO[bytes],
    dst: IO[bytes] | None,
    fn: KeyedTextFn,
    columns: list[str],
    batch_size: int,
    tick: Callable[[], None],
    max_chars: int,
) -> Iterator[list[str]]:
    # a record: (text spans of the record, or None for a blank line; the line body; its line ending)
    Record = tuple[list[tuple[int, int, str, str]] | None, str, str]
    seen = [0]  # records (lines, blank ones included) before this batch

    def flush(batch: list[Record]) -> list[str]:
        values = [v for spans, _, _ in batch if spans for _, _, v, _ in spans]
        units: Units = [
            (seen[0] + r, _occurrence(k, j, spans))
            for r, (spans, _, _) in enumerate(batch)
            if spans
            for j, (_, _, _, k) in enumerate(spans)
        ]
        seen[0] += len(batch)
        if dst is not None:
            new = iter(fn(values, units) if values else [])
            parts = []
            for spans, body, ending in batch:
                at = 0
                for start, end, old, _ in spans or ():
                    value = next(new)
                    parts.append(body[at:start])
                    parts.append(body[start:end] if value == old else json.dumps(value, ensure_ascii=False))
                    at = end
                parts.append(body[at:] + ending)
            dst.write("".join(parts).encode("utf-8"))
        return values

    def records() -> Iterator[Record]:
        for lineno, line in enumerate(decoded_lines(src, dst, max_chars=max_chars), start=1):
            body = line.rstrip("\r\n")
            ending = line[len(body) :]
            if not body.strip():
                yield (None, body, ending)
                continue
            obj = json_object(body, lineno)
            for c in columns:
                if c not in obj:
                    raise InvalidParameterError(
                        "column", c, f"a key present in every record (missing on line {lineno})"
                    )
                if obj[c] is not None and not isinstance(obj[c], str):
                    raise DataError(f"line {lineno}: column {c!r} holds a {type(obj[c]).__name__}, not text")
            try:
                spans = _string_spans(body, columns)
            except RecursionError:  # json.loads above passed at the very limit
                raise too_deep(lineno) from None
            yield (spans, body, ending)

    return _batched(records(), batch_size, flush, tick)


# ----------------------------------------------------------------------- parquet
def _parquet(
    path: str | Path,
    dst: IO[bytes] | None,
    fn: KeyedTextFn,
    columns: list[str],
    batch_size: int,
    advance: Callable[[float], None],
    max_chars: int,
) -> Iterator[list[str]]:
    import pyarrow as pa

    from ._read import open_parquet, parquet_strings

    pf = open_parquet(path)
    schema = pf.schema_arrow
    check_unique_columns(schema.names, columns, "the Parquet schema")
    for c in columns:
        if c not in schema.names:
            raise InvalidParameterError(
                "column", c, "a column of the input: " + ", ".join(repr(n) for n in schema.names)
            )
        if not (pa.types.is_string(schema.field(c).type) or pa.types.is_large_string(schema.field(c).type)):
            raise DataError(f"column {c!r} has type {schema.field(c).type}, not text (string)")
    import pyarrow.parquet as pq

    writer = pq.ParquetWriter(dst, schema) if dst is not None else None
    first_row = 0
    try:
        for rb in pf.iter_batches(batch_size=batch_size):
            table = pa.Table.from_batches([rb], schema=schema)
            lists = {c: parquet_strings(table.column(c), c, first_row, max_chars) for c in columns}
            flat = [v for c in columns for v in lists[c] if v is not None]
            if writer is not None:
                units = [(first_row + i, c) for c in columns for i, v in enumerate(lists[c]) if v is not None]
                new = iter(fn(flat, units) if flat else [])
                for c in columns:
                    col = [None if v is None else next(new) for v in lists[c]]
                    arr = pa.array(col, type=schema.field(c).type)
                    table = table.set_column(schema.get_field_index(c), schema.field(c), arr)
                writer.write_table(table)
            yield flat
            advance(rb.num_rows)
            first_row += rb.num_rows
    finally:
        if writer is not None:
            writer.close()


# ------------------------------------------------------------------------ public
def transform_file(
    src: str | Path,
    dst: str | Path,
    fn: TextFn | KeyedTextFn,
    *,
    columns: Sequence[str] | None = None,
    format: str | None = None,
    batch_size: int = 1000,
    show_progress: bool | None = None,
    max_record_chars: int = MAX_RECORD_CHARS,
    keyed: bool = False,
) -> IOStats:
    """Stream ``src`` to ``dst``, replacing the text of ``columns`` with ``fn(texts)``.

    ``fn`` gets a list of strings per batch and must return as many. ``keyed=True``: it is
    called as ``fn(texts, units)``, ``units[i]`` saying where ``texts[i]`` is: (its record's
    index in the input -- line, row or JSON line, blank ones counted; Parquet row --, its
    column name, ``""`` for plain text), the same whatever ``batch_size``. The output has
    the input's format; it appears only when the whole input was processed. A record
    (line, CSV row, JSON line, Parquet cell) longer than ``max_record_chars`` characters
    is a :class:`DataError` naming it, raised before it is held in memory.
    """
    fmt = detect_format(src, format)
    check_output_format(dst, fmt, format)
    cols = check_columns(columns, fmt)
    max_chars = _check_max(max_record_chars)
    stats = IOStats()

    def counted(texts: list[str], units: Units) -> list[str]:
        out = fn(texts, units) if keyed else fn(texts)  # type: ignore[call-arg]
        if len(out) != len(texts):  # pragma: no cover - internal contract
            raise DataError("internal error: the transform changed the number of values")
        stats.values += len(texts)
        return out

    with atomic_output(dst, input_path=src) as out:
        for _ in _iter(src, fmt, cols, counted, out, batch_size, show_progress, max_chars):
            pass
        if stats.values == 0:
            raise DataError("the input has no records to privatize")
    return stats


def _check_max(max_record_chars: int) -> int:
    if isinstance(max_record_chars, bool) or not isinstance(max_record_chars, int) or max_record_chars < 1:
        raise InvalidParameterError("max_record_chars", max_record_chars, "an integer >= 1")
    return max_record_chars


def iter_texts(
    src: str | Path,
    *,
    columns: Sequence[str] | None = None,
    format: str | None = None,
    batch_size: int = 1000,
    show_progress: bool | None = None,
    max_record_chars: int = MAX_RECORD_CHARS,
) -> Iterator[list[str]]:
    """Yield the text values of ``columns`` (or the lines of a text file, line endings kept) in batches.

    Null values are left out; see :func:`deniable.io.iter_batches` for one entry per record.
    """
    fmt = detect_format(src, format)
    cols = check_columns(columns, fmt)
    max_chars = _check_max(max_record_chars)
    yield from _iter(src, fmt, cols, lambda t, _: t, None, batch_size, show_progress, max_chars)


def _iter(
    src: str | Path,
    fmt: str,
    cols: list[str],
    fn: KeyedTextFn,
    out: IO[bytes] | None,
    batch_size: int,
    show_progress: bool | None,
    max_chars: int,
) -> Iterator[list[str]]:
    if fmt == "parquet":
        from ._read import open_parquet

        total = open_parquet(src).metadata.num_rows
        with progress(total, "privatizing rows", enabled=show_progress) as advance:
            yield from _parquet(src, out, fn, cols, batch_size, advance, max_chars)
        return
    with open_input_with_progress(src, "privatizing bytes", show_progress) as (stream, tick):
        if fmt == "txt":
            yield from _txt(stream, out, fn, batch_size, tick, max_chars)
        elif fmt in ("csv", "tsv"):
            yield from _csv(stream, out, fn, cols, "\t" if fmt == "tsv" else ",", batch_size, tick, max_chars)
        else:
            yield from _jsonl(stream, out, fn, cols, batch_size, tick, max_chars)


__all__ = ["MAX_RECORD_CHARS", "IOStats", "is_std", "iter_texts", "transform_file"]
