"""Bytes to records: one UTF-8 / BOM / NUL / record-size rule, one CSV dialect, one JSON object rule."""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Iterator
from typing import IO, Any

from .._errors import DataError

BOM = "\ufeff"
# Python's csv module refuses fields over 128 KiB by default; a text cell can be larger
# (records are bounded by max_record_chars instead). sys.maxsize does not fit a C long on
# every platform (Windows), so clip it.
_CSV_FIELD_LIMIT = min(sys.maxsize, 2**31 - 1)


def _encoding_hint(data: bytes) -> str:
    if b"\x00" in data:
        return "; it looks like UTF-16: convert it to UTF-8"
    try:
        data.decode("cp1252")
    except UnicodeDecodeError:
        return ""
    return "; it looks like Latin-1 / Windows-1252: convert it to UTF-8"


def decode(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text; an invalid byte is a DataError naming ``where``, the byte and a likely encoding."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{where} is not valid UTF-8 (byte {exc.start}{_encoding_hint(data)})") from None


def strip_bom(line: str, lineno: int, dst: IO[bytes] | None) -> str:
    """Drop a UTF-8 byte order mark that starts the input; write it back to ``dst``.

    Called on every line before anything is written, so the mark lands first.
    """
    if lineno == 1 and line.startswith(BOM):
        if dst is not None:
            dst.write(BOM.encode("utf-8"))
        return line[1:]
    return line


def too_long(where: str, max_chars: int) -> DataError:
    return DataError(f"{where} is longer than max_record_chars={max_chars:,} characters")


def decoded_lines(src: IO[bytes], dst: IO[bytes] | None = None, *, max_chars: int | None = None) -> Iterator[str]:
    """Decode line by line (line endings kept) so a bad line is reported with its number.

    A leading byte order mark is dropped (and written back to ``dst``); a NUL byte is an
    error (binary data, or UTF-16 text without a byte order mark); a line longer than
    ``max_chars`` is an error raised before more than ``4 * max_chars`` bytes are read.
    """
    cap = -1 if max_chars is None else 4 * max_chars + 3
    lineno = 0
    while True:
        raw = src.readline(cap)
        if not raw:
            return
        lineno += 1
        if max_chars is not None and len(raw) >= cap and not raw.endswith(b"\n"):
            raise too_long(f"line {lineno}", max_chars)
        line = strip_bom(decode(raw, f"line {lineno}"), lineno, dst)
        if "\x00" in line:
            raise DataError(f"line {lineno} holds a NUL byte (binary data, or UTF-16 text?)")
        if max_chars is not None and len(line) > max_chars and len(line.rstrip("\r\n")) > max_chars:
            raise too_long(f"line {lineno}", max_chars)
        yield line


def csv_reader(lines: Iterator[str], delimiter: str) -> tuple[Any, dict[str, Any]]:
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


def csv_header(reader: Any) -> list[str]:
    """The header row of a csv reader (an empty input is a DataError)."""
    try:
        return next(reader)
    except StopIteration:
        raise DataError("the CSV input is empty (no header row)") from None


def csv_records(reader: Any) -> Iterator[tuple[int, list[str]]]:
    """The rows after the header as ``(row number, cells)``, the header being row 1.

    Malformed CSV is a DataError naming the row and the line.
    """
    row_number = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise DataError(f"row {row_number + 1} (line {reader.line_num}): malformed CSV ({exc})") from None
        row_number += 1
        yield row_number, row


def ragged(row_number: int, line: int, fields: int, header: int) -> DataError:
    return DataError(f"row {row_number} (line {line}) has {fields} fields but the header has {header}")


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


def too_deep(lineno: int) -> DataError:
    return DataError(f"line {lineno}: arrays or objects nested too deeply for the JSON parser")


def json_object(body: str, lineno: int) -> dict[str, Any]:
    """Parse one JSONL record: strict JSON (no NaN / Infinity / overflowing numbers), valid Unicode, an object."""
    try:
        obj = json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise DataError(f"line {lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    except _NotFinite as exc:
        raise DataError(f"line {lineno}: {exc}") from None
    except ValueError:  # e.g. an integer with more digits than Python converts
        raise DataError(f"line {lineno}: a number is out of range") from None
    except RecursionError:
        raise too_deep(lineno) from None
    if "\\u" in body and _has_lone_surrogate(obj):
        raise DataError(f"line {lineno}: a \\u escape is a lone surrogate, which is not valid Unicode text")
    if not isinstance(obj, dict):
        raise DataError(f"line {lineno}: expected a JSON object, got {type(obj).__name__}")
    return obj
