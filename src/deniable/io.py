"""Streaming readers and writers for text records: plain text, CSV, JSONL and Parquet.

Everything streams in batches of records, so memory stays bounded whatever the
input size. Output files are written to a temporary file beside the destination
and renamed into place only on success: a failed run leaves no partial output.

- ``txt``: each line is a record; line endings and blank lines come back exactly.
- ``csv`` / ``tsv``: every column is read as a string and written back unchanged
  except the chosen text columns (quoted newlines, commas and unicode included);
  the input's line terminator is kept. CSV follows the usual quoting rules; TSV is
  plain (no quoting: quotes are ordinary characters, and a field can hold no tab or
  line break). Cells of any size are accepted.
- ``jsonl``: one JSON object per line; only the text values of the chosen keys are
  rewritten, in place: everything else on the line (other keys, their order, number
  formats, escapes, spacing, repeated keys) comes back byte for byte. NaN,
  Infinity and numbers too large for a float are rejected (they are not JSON).
- ``parquet``: the schema, other columns, row count and order are kept; nulls stay null.

A leading UTF-8 byte order mark (as Excel writes) is not part of the first record
and is written back to the output.

``.gz`` is supported for txt, csv, tsv and jsonl (read and write). ``-`` is standard
input or output (streamed, so not atomic). Error messages name rows and columns,
never their contents.
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import json
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ._errors import DataError, InvalidParameterError
from ._progress import progress

__all__ = [
    "FORMATS",
    "IOStats",
    "atomic_output",
    "detect_format",
    "iter_texts",
    "transform_file",
]

FORMATS = ("txt", "csv", "tsv", "jsonl", "parquet")
TextFn = Callable[[list[str]], list[str]]

_SUFFIXES = {
    ".txt": "txt",
    ".text": "txt",
    ".csv": "csv",
    ".tsv": "tsv",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}

_BOM = "\ufeff"
# Python's csv module refuses fields over 128 KiB by default; a text cell can be larger.
# sys.maxsize does not fit a C long on every platform (Windows), so clip it.
_CSV_FIELD_LIMIT = min(sys.maxsize, 2**31 - 1)


@dataclass
class IOStats:
    """What a file transform did (counts only)."""

    values: int = 0


def _is_std(path: str | Path) -> bool:
    return str(path) == "-"


def detect_format(path: str | Path, format: str | None = None) -> str:
    """The format named by ``format`` or guessed from the file name (``-`` means txt)."""
    if format is not None:
        if format not in FORMATS:
            raise InvalidParameterError("format", format, "one of " + ", ".join(FORMATS))
        return format
    if _is_std(path):
        return "txt"
    name = Path(path).name.lower().removesuffix(".gz")
    suffix = Path(name).suffix
    if suffix in _SUFFIXES:
        return _SUFFIXES[suffix]
    raise InvalidParameterError(
        "format", None, f"could not guess it from the name {Path(path).name!r}; pass one of " + ", ".join(FORMATS)
    )


def _gz(path: str | Path) -> bool:
    return str(path).lower().endswith(".gz")


@contextlib.contextmanager
def _open_input(path: str | Path) -> Iterator[tuple[IO[bytes], Callable[[], int], int | None]]:
    """Yield (binary stream, position-in-bytes function, total bytes or None)."""
    if _is_std(path):
        yield sys.stdin.buffer, lambda: 0, None
        return
    p = Path(path)
    if not p.is_file():
        raise DataError(f"input file {p} does not exist or is not a file")
    try:
        raw = open(p, "rb")
    except OSError as exc:
        raise DataError(f"cannot read input file {p}: {exc.strerror}") from None
    with raw:
        total = p.stat().st_size
        if total == 0:
            raise DataError(f"input file {p} is empty")
        stream: Any = gzip.GzipFile(fileobj=raw, mode="rb") if _gz(p) else raw
        yield stream, raw.tell, total


@contextlib.contextmanager
def atomic_output(path: str | Path, *, input_path: str | Path | None = None) -> Iterator[IO[bytes]]:
    """A binary stream that becomes ``path`` only if the block finishes without error.

    ``-`` is standard output (streamed). ``.gz`` output is compressed.
    """
    if _is_std(path):
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    dst = Path(path)
    if input_path is not None and not _is_std(input_path):
        with contextlib.suppress(OSError):
            if dst.exists() and dst.resolve() == Path(input_path).resolve():
                raise InvalidParameterError(
                    "output", str(dst), "a different file than the input (it would be overwritten)"
                )
    if dst.parent and not dst.parent.exists():
        raise DataError(f"output folder {dst.parent} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".partial", dir=dst.parent or ".")
    try:
        with os.fdopen(fd, "wb") as raw:
            if _gz(dst):
                with gzip.GzipFile(fileobj=raw, mode="wb", filename="", mtime=0) as gz:
                    yield gz  # type: ignore[misc]
            else:
                yield raw
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _decode(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{where} is not valid UTF-8 (byte {exc.start})") from None


def _strip_bom(line: str, lineno: int, dst: IO[bytes] | None) -> str:
    """Drop a UTF-8 byte order mark that starts the input; write it back to ``dst``.

    Called on every line before anything is written, so the mark lands first.
    """
    if lineno == 1 and line.startswith(_BOM):
        if dst is not None:
            dst.write(_BOM.encode("utf-8"))
        return line[1:]
    return line


def _check_columns(columns: Sequence[str] | None, fmt: str) -> list[str]:
    cols = list(dict.fromkeys(columns or []))  # a repeated --column is privatized once
    if fmt == "txt":
        if cols:
            raise InvalidParameterError("--column", cols[0], "no column for plain text input")
        return cols
    if not cols:
        raise InvalidParameterError("--column", None, f"at least one text column for {fmt} input")
    return cols


# --------------------------------------------------------------------------- txt
def _txt(
    src: IO[bytes], dst: IO[bytes] | None, fn: TextFn, batch_size: int, tick: Callable[[], None]
) -> Iterator[list[str]]:
    """Transform (dst given) or iterate (dst None) text lines; yields batches read."""
    batch: list[str] = []
    lineno = 0
    for raw_line in src:
        lineno += 1
        batch.append(_strip_bom(_decode(raw_line, f"line {lineno}"), lineno, dst))
        if len(batch) >= batch_size:
            yield batch
            if dst is not None:
                dst.write("".join(fn(batch)).encode("utf-8"))
            tick()
            batch = []
    if batch:
        yield batch
        if dst is not None:
            dst.write("".join(fn(batch)).encode("utf-8"))
        tick()


# --------------------------------------------------------------------------- csv
def _line_terminator(src: IO[bytes]) -> tuple[IO[bytes], str]:
    """Peek at the first line to keep the input's line terminator ("\r\n" or "\n")."""
    buffered: Any = src if hasattr(src, "peek") else io.BufferedReader(src)
    head = buffered.peek(65536)[:65536]
    nl = head.find(b"\n")
    return buffered, "\r\n" if nl > 0 and head[nl - 1 : nl] == b"\r" else "\n"


def _csv(
    src: IO[bytes],
    dst: IO[bytes] | None,
    fn: TextFn,
    columns: list[str],
    delimiter: str,
    batch_size: int,
    tick: Callable[[], None],
) -> Iterator[list[str]]:
    src, terminator = _line_terminator(src)
    tsv = delimiter == "\t"
    reader, dialect = _csv_reader(_decoded_lines(src, dst), delimiter)
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
            if row == [""]:  # csv refuses an unquoted lone empty field; in plain TSV it is an empty line
                assert out_text is not None
                out_text.write(terminator)
            else:
                writer.writerow(row)

    try:
        try:
            header = next(reader)
        except StopIteration:
            raise DataError("the CSV input is empty (no header row)") from None
        missing = [c for c in columns if c not in header]
        if missing:
            raise InvalidParameterError(
                "--column", missing[0], "a column of the input: " + ", ".join(repr(h) for h in header)
            )
        positions = [header.index(c) for c in columns]
        if writer is not None:
            writer.writerow(header)  # a header cell with a tab or line break cannot come from TSV input
        rows: list[list[str]] = []

        def flush() -> list[str]:
            cells: list[tuple[int, int]] = []
            values: list[str] = []
            for r, row in enumerate(rows):
                for p in positions:
                    if p < len(row):
                        cells.append((r, p))
                        values.append(row[p])
            if writer is not None:
                new = fn(values) if values else []
                for (r, p), v in zip(cells, new, strict=True):
                    rows[r][p] = v
                write_rows(rows)
            return values

        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                raise DataError(f"row {reader.line_num}: malformed CSV ({exc})") from None
            rows.append(row)
            if len(rows) >= batch_size:
                yield flush()
                tick()
                rows = []
        if rows:
            yield flush()
            tick()
    finally:
        if out_text is not None:
            out_text.flush()
            out_text.detach()


def _csv_reader(lines: Iterator[str], delimiter: str) -> tuple[Any, dict[str, Any]]:
    """A csv reader over decoded ``lines`` and its dialect (for a writer of the same format).

    Cells of any size are accepted; TSV is plain: no quoting on read or write (a quote is
    an ordinary character).
    """
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)
    dialect: dict[str, Any] = (
        {"quoting": csv.QUOTE_NONE, "quotechar": None, "escapechar": None} if delimiter == "\t" else {}
    )
    return csv.reader(lines, delimiter=delimiter, strict=False, **dialect), dialect


def _decoded_lines(src: IO[bytes], dst: IO[bytes] | None = None) -> Iterator[str]:
    """Decode line by line so an invalid byte is reported with its line number.

    A leading byte order mark is dropped (and written back to ``dst``).
    """
    for lineno, raw in enumerate(src, start=1):
        yield _strip_bom(_decode(raw, f"line {lineno}"), lineno, dst)


# ------------------------------------------------------------------------- jsonl
class _NotFinite(Exception):
    """A JSON number that is NaN, infinite or too large for a float (raised by the hooks)."""


def _reject_constant(name: str) -> Any:
    raise _NotFinite(f"{name} is not valid JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotFinite("a number is too large for a float (it would become infinity)")
    return value


def _has_lone_surrogate(obj: Any) -> bool:
    """True when a string (key or value) holds a lone surrogate, i.e. cannot be UTF-8."""
    stack = [obj]
    while stack:
        o = stack.pop()
        if isinstance(o, str):
            try:
                o.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, list):
            stack.extend(o)
    return False


_JSON_WS = re.compile(r"[ \t\n\r]*")
_JSON_SKIP = json.JSONDecoder()


def _string_spans(body: str, columns: list[str]) -> list[tuple[int, int, str]]:
    """``(start, end, value)`` of every top-level string value of ``columns`` in ``body``.

    ``body`` is a JSON object already validated by :func:`json.loads`; ``start:end`` is the
    quoted string token, so the rest of the line can be kept byte for byte. A repeated
    key yields one span per occurrence (each is privatized).
    """
    wanted = set(columns)
    spans: list[tuple[int, int, str]] = []
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
            spans.append((i, end, value))
            i = end
        else:
            _, i = _JSON_SKIP.raw_decode(body, i)
        i = _JSON_WS.match(body, i).end()  # type: ignore[union-attr]
        if body[i] == "}":
            return spans
        i = _JSON_WS.match(body, i + 1).end()  # type: ignore[union-attr]  # past ","


def _jsonl(
    src: IO[bytes],
    dst: IO[bytes] | None,
    fn: TextFn,
    columns: list[str],
    batch_size: int,
    tick: Callable[[], None],
) -> Iterator[list[str]]:
    lineno = 0
    # (text spans of the record, or None for a blank line; the line body; its line ending)
    batch: list[tuple[list[tuple[int, int, str]] | None, str, str]] = []

    def flush() -> list[str]:
        values = [v for spans, _, _ in batch if spans for _, _, v in spans]
        if dst is not None:
            new = iter(fn(values) if values else [])
            parts = []
            for spans, body, ending in batch:
                at = 0
                for start, end, old in spans or ():
                    value = next(new)
                    parts.append(body[at:start])
                    parts.append(body[start:end] if value == old else json.dumps(value, ensure_ascii=False))
                    at = end
                parts.append(body[at:] + ending)
            dst.write("".join(parts).encode("utf-8"))
        return values

    for raw_line in src:
        lineno += 1
        line = _strip_bom(_decode(raw_line, f"line {lineno}"), lineno, dst)
        body = line.rstrip("\r\n")
        ending = line[len(body) :]
        if not body.strip():
            batch.append((None, body, ending))
        else:
            try:
                obj = json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)
            except json.JSONDecodeError as exc:
                raise DataError(f"line {lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            except _NotFinite as exc:
                raise DataError(f"line {lineno}: {exc}") from None
            except ValueError:  # e.g. an integer with more digits than Python converts
                raise DataError(f"line {lineno}: a number is out of range") from None
            if "\\u" in body and _has_lone_surrogate(obj):
                raise DataError(f"line {lineno}: a \\u escape is a lone surrogate, which is not valid Unicode text")
            if not isinstance(obj, dict):
                raise DataError(f"line {lineno}: expected a JSON object, got {type(obj).__name__}")
            for c in columns:
                if c not in obj:
                    raise InvalidParameterError(
                        "--column", c, f"a key present in every record (missing on line {lineno})"
                    )
                if obj[c] is not None and not isinstance(obj[c], str):
                    raise DataError(f"line {lineno}: column {c!r} holds a {type(obj[c]).__name__}, not text")
            batch.append((_string_spans(body, columns), body, ending))
        if len(batch) >= batch_size:
            yield flush()
            tick()
            batch = []
    if batch:
        yield flush()
        tick()


# ----------------------------------------------------------------------- parquet
def _parquet(
    path: str | Path,
    dst: IO[bytes] | None,
    fn: TextFn,
    columns: list[str],
    batch_size: int,
    advance: Callable[[float], None],
) -> Iterator[list[str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(str(path))
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path} is not a readable Parquet file ({type(exc).__name__})") from None
    schema = pf.schema_arrow
    for c in columns:
        if c not in schema.names:
            raise InvalidParameterError(
                "--column", c, "a column of the input: " + ", ".join(repr(n) for n in schema.names)
            )
        if not (pa.types.is_string(schema.field(c).type) or pa.types.is_large_string(schema.field(c).type)):
            raise DataError(f"column {c!r} has type {schema.field(c).type}, not text (string)")
    if pf.metadata.num_rows == 0:
        raise DataError(f"{path} has no rows")
    writer = pq.ParquetWriter(dst, schema) if dst is not None else None
    first_row = 0

    def strings(table: Any, c: str) -> list[str | None]:
        column = table.column(c)
        try:
            return column.to_pylist()
        except UnicodeDecodeError:
            for i, chunk_value in enumerate(column):
                try:
                    chunk_value.as_py()
                except UnicodeDecodeError:
                    raise DataError(f"row {first_row + i + 1}, column {c!r}: not valid UTF-8") from None
            raise  # pragma: no cover - the loop finds the row

    try:
        for rb in pf.iter_batches(batch_size=batch_size):
            table = pa.Table.from_batches([rb], schema=schema)
            values_all: list[str] = []
            new_cols: dict[str, Any] = {}
            if writer is not None:
                lists = {c: strings(table, c) for c in columns}
                flat = [v for c in columns for v in lists[c] if v is not None]
                new = iter(fn(flat) if flat else [])
                for c in columns:
                    col = [None if v is None else next(new) for v in lists[c]]
                    new_cols[c] = pa.array(col, type=schema.field(c).type)
                for c, arr in new_cols.items():
                    table = table.set_column(schema.get_field_index(c), schema.field(c), arr)
                writer.write_table(table)
                values_all = flat
            else:
                values_all = [v for c in columns for v in strings(table, c) if v is not None]
            yield values_all
            advance(rb.num_rows)
            first_row += rb.num_rows
    finally:
        if writer is not None:
            writer.close()


# ------------------------------------------------------------------------ public
def transform_file(
    src: str | Path,
    dst: str | Path,
    fn: TextFn,
    *,
    columns: Sequence[str] | None = None,
    format: str | None = None,
    batch_size: int = 1000,
    show_progress: bool | None = None,
) -> IOStats:
    """Stream ``src`` to ``dst``, replacing the text of ``columns`` with ``fn(texts)``.

    ``fn`` gets a list of strings per batch and must return as many. The output has
    the input's format; it appears only when the whole input was processed.
    """
    fmt = detect_format(src, format)
    if not _is_std(dst) and format is None:
        try:
            out_fmt = detect_format(dst)
        except InvalidParameterError:
            out_fmt = fmt
        if out_fmt != fmt:
            raise InvalidParameterError("output", str(dst), f"a {fmt} file like the input")
    cols = _check_columns(columns, fmt)
    stats = IOStats()

    def counted(texts: list[str]) -> list[str]:
        out = fn(texts)
        if len(out) != len(texts):  # pragma: no cover - internal contract
            raise DataError("internal error: the transform changed the number of values")
        stats.values += len(texts)
        return out

    with atomic_output(dst, input_path=src) as out:
        for _ in _iter(src, fmt, cols, counted, out, batch_size, show_progress):
            pass
        if stats.values == 0:
            raise DataError("the input has no records to privatize")
    return stats


def iter_texts(
    src: str | Path,
    *,
    columns: Sequence[str] | None = None,
    format: str | None = None,
    batch_size: int = 1000,
    show_progress: bool | None = None,
) -> Iterator[list[str]]:
    """Yield the text values of ``columns`` (or the lines of a text file) in batches."""
    fmt = detect_format(src, format)
    cols = _check_columns(columns, fmt)
    yield from _iter(src, fmt, cols, lambda t: t, None, batch_size, show_progress)


def _iter(
    src: str | Path,
    fmt: str,
    cols: list[str],
    fn: TextFn,
    out: IO[bytes] | None,
    batch_size: int,
    show_progress: bool | None,
) -> Iterator[list[str]]:
    if fmt == "parquet":
        if _is_std(src):
            raise InvalidParameterError("input", "-", "a Parquet file path (Parquet cannot stream from stdin)")
        import pyarrow.parquet as pq

        if not Path(src).is_file():
            raise DataError(f"input file {src} does not exist or is not a file")
        try:
            total = pq.ParquetFile(str(src)).metadata.num_rows
        except Exception:
            total = None
        with progress(total, "privatizing rows", enabled=show_progress) as advance:
            yield from _parquet(src, out, fn, cols, batch_size, advance)
        return
    with _open_input(src) as (stream, pos, total):
        with progress(total, "privatizing bytes", enabled=show_progress and total is not None) as advance:
            last = [0]

            def tick() -> None:
                p = pos()
                advance(p - last[0])
                last[0] = p

            if fmt == "txt":
                yield from _txt(stream, out, fn, batch_size, tick)
            elif fmt in ("csv", "tsv"):
                yield from _csv(stream, out, fn, cols, "\t" if fmt == "tsv" else ",", batch_size, tick)
            else:
                yield from _jsonl(stream, out, fn, cols, batch_size, tick)
